// backend_bench: what a GEMM costs through host_backend, as a ratio to a
// bare Eigen GEMM of the same shape measured in the same run.
//
// For each n, interleaved, every round measures
//   - backend: `gemm` on a stream (row-major, n x n x n, fp32), waited for
//     with `synchronize`; the backend splits C into panels over its pool;
//   - eigen:   one `C.noalias() = A * B` on Eigen maps of the same buffers,
//     the best a user gets from Eigen on this machine: multi-threaded
//     through OpenMP when the bench is built with it (it is, unless
//     sanitized), single-threaded otherwise (the JSON says which);
// and, for reference, the same Eigen call on one thread (what a user without
// OpenMP gets); and the backend and OpenMP Eigen again while throttled
// copies keep two other streams of the backend busy (a swapping step's offload and prefetch). The ratio is
// eigen_seconds / backend_seconds (1.0 = as fast as bare Eigen; the target
// is >= 0.9 for n >= 512). Median and min-max over the rounds.
//
// Usage: backend_bench [--quick] [--json]
#include <memo/backend/host_backend.hpp>
#include <memo/core/command_line.hpp>
#include <memo/core/json.hpp>
#include <memo/core/spread.hpp>

#include <Eigen/Core>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}


struct problem {
  int n = 0;
  int repeats = 1;
  std::vector<float> a, b, c;
  std::vector<double> ratio_quiet, ratio_busy, backend_quiet, eigen_quiet, backend_busy, eigen_busy;
  std::vector<double> ratio_single, eigen_single;  // against one-thread Eigen, quiet
};

// Seconds per GEMM through the backend.
double time_backend(memo::host_backend& backend, memo::host_backend::stream& stream, problem& p) {
  const memo::gemm_shape shape{p.n, p.n, p.n};
  const auto start = clock_type::now();
  for (int r = 0; r < p.repeats; ++r) {
    backend.gemm(stream, shape, 1.0f, p.a.data(), p.b.data(), 0.0f, p.c.data());
  }
  backend.synchronize(stream);
  return seconds_since(start) / p.repeats;
}

// Seconds per GEMM with one bare Eigen call on `threads` threads (0: Eigen's
// default, all cores under OpenMP).
double time_eigen(problem& p, int threads = 0) {
  Eigen::setNbThreads(threads);
  using matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Eigen::Map<const matrix> a(p.a.data(), p.n, p.n);
  Eigen::Map<const matrix> b(p.b.data(), p.n, p.n);
  Eigen::Map<matrix> c(p.c.data(), p.n, p.n);
  const auto start = clock_type::now();
  for (int r = 0; r < p.repeats; ++r) c.noalias() = a * b;
  return seconds_since(start) / p.repeats;
}

// Keeps `stream` copying in `kind` for about `seconds`.
void keep_copying(memo::host_backend& backend, memo::host_backend::stream& stream,
                  std::vector<char>& from, std::vector<char>& to, memo::copy_kind kind,
                  double seconds, double bytes_per_second) {
  const auto copies = static_cast<int>(seconds * bytes_per_second / static_cast<double>(from.size())) + 2;
  for (int i = 0; i < copies; ++i) backend.copy_async(to.data(), from.data(), from.size(), kind, stream);
}

}  // namespace

int bench_main(int argc, char** argv) {
  bool quick = false;
  bool json = false;
  memo::command_arguments args(argc, argv);
  while (!args.done()) {
    const std::string_view arg = args.next();
    if (arg == "--quick") {
      quick = true;
    } else if (arg == "--json") {
      json = true;
    } else {
      args.unknown();
    }
  }

  constexpr double link_bytes_per_second = 1.0e9;  // a slow PCIe-like link, both directions
  memo::host_backend::options options;
  options.host_to_device_bytes_per_second = link_bytes_per_second;
  options.device_to_host_bytes_per_second = link_bytes_per_second;
  memo::host_backend backend(options);
  auto compute = backend.make_stream("compute");
  auto offload = backend.make_stream("offload");
  auto prefetch = backend.make_stream("prefetch");
  std::vector<char> device_side(1 << 20, 1), host_side(1 << 20, 2);
  std::vector<char> device_back(1 << 20, 3), host_back(1 << 20, 4);

  const std::vector<int> sizes = quick ? std::vector<int>{128, 256} : std::vector<int>{256, 512, 1024};
  const int rounds = 5;
  const double target_seconds = quick ? 0.02 : 0.15;  // per measurement
  std::vector<problem> problems;
  for (const int n : sizes) {
    problem p;
    p.n = n;
    const auto count = static_cast<std::size_t>(n) * static_cast<std::size_t>(n);
    p.a.resize(count);
    p.b.resize(count);
    p.c.assign(count, 0.0f);
    for (std::size_t i = 0; i < count; ++i) {
      p.a[i] = static_cast<float>(i % 13) * 0.1f - 0.6f;
      p.b[i] = static_cast<float>(i % 7) * 0.2f - 0.5f;
    }
    // Warm both up and size the repeats so one measurement takes ~target.
    time_eigen(p);
    time_backend(backend, compute, p);
    const double once = std::max(time_eigen(p), 1e-6);
    p.repeats = std::max(1, static_cast<int>(target_seconds / once));
    problems.push_back(std::move(p));
  }

  for (int round = 0; round < rounds; ++round) {
    for (auto& p : problems) {  // interleaved: every n, both references, each round
      const double backend_seconds = time_backend(backend, compute, p);
      const double eigen_seconds = time_eigen(p);
      p.backend_quiet.push_back(backend_seconds);
      p.eigen_quiet.push_back(eigen_seconds);
      p.ratio_quiet.push_back(eigen_seconds / backend_seconds);
      const double single_seconds = time_eigen(p, 1);
      p.eigen_single.push_back(single_seconds);
      p.ratio_single.push_back(single_seconds / backend_seconds);

      const double busy_for = 3.0 * (backend_seconds + eigen_seconds) * p.repeats;
      keep_copying(backend, offload, device_side, host_side, memo::copy_kind::device_to_host, busy_for,
                   link_bytes_per_second);
      keep_copying(backend, prefetch, host_back, device_back, memo::copy_kind::host_to_device, busy_for,
                   link_bytes_per_second);
      const double busy_backend = time_backend(backend, compute, p);
      const double busy_eigen = time_eigen(p);
      backend.synchronize(offload);
      backend.synchronize(prefetch);
      p.backend_busy.push_back(busy_backend);
      p.eigen_busy.push_back(busy_eigen);
      p.ratio_busy.push_back(busy_eigen / busy_backend);
    }
  }

#if defined(_OPENMP)
  const std::string reference = "Eigen " + std::to_string(EIGEN_WORLD_VERSION) + "." +
                                std::to_string(EIGEN_MAJOR_VERSION) + " GEMM, one call, OpenMP";
#else
  const std::string reference = "Eigen " + std::to_string(EIGEN_WORLD_VERSION) + "." +
                                std::to_string(EIGEN_MAJOR_VERSION) +
                                " GEMM, one call, single-threaded (built without OpenMP)";
#endif

  if (json) {
    memo::json_writer out;
    out.begin_object()
        .field("bench", "backend_bench")
        .field("quick", quick)
        .field("rounds", rounds)
        .field("compute_threads", backend.compute_threads())
        .field("eigen_reference", reference)
        .field("eigen_threads", (Eigen::setNbThreads(0), Eigen::nbThreads()))
        .field("ratio", "eigen_seconds / backend_seconds");
    out.key("results").begin_array();
    for (const auto& p : problems) {
      for (const bool busy : {false, true}) {
        const auto ratio = memo::spread_of(busy ? p.ratio_busy : p.ratio_quiet);
        const auto backend_seconds = memo::spread_of(busy ? p.backend_busy : p.backend_quiet);
        const auto eigen_seconds = memo::spread_of(busy ? p.eigen_busy : p.eigen_quiet);
        const double flops = 2.0 * p.n * p.n * p.n;
        out.begin_object()
            .field("n", p.n)
            .field("copies_on_two_streams", busy)
            .field("ratio_median", ratio.median)
            .field("ratio_min", ratio.min)
            .field("ratio_max", ratio.max)
            .field("backend_seconds_median", backend_seconds.median)
            .field("eigen_seconds_median", eigen_seconds.median)
            .field("backend_gflops_median", flops / backend_seconds.median * 1e-9)
            .field("eigen_gflops_median", flops / eigen_seconds.median * 1e-9);
        if (!busy) {
          const auto single = memo::spread_of(p.ratio_single);
          out.field("ratio_to_one_thread_eigen_median", single.median)
              .field("ratio_to_one_thread_eigen_min", single.min)
              .field("ratio_to_one_thread_eigen_max", single.max)
              .field("one_thread_eigen_gflops_median", flops / memo::spread_of(p.eigen_single).median * 1e-9);
        }
        out.end_object();
      }
    }
    out.end_array().end_object();
    std::printf("%s\n", out.str().c_str());
  } else {
    Eigen::setNbThreads(0);
    std::printf("GEMM through host_backend vs %s (%d Eigen threads, %zu backend threads)\n",
                reference.c_str(), Eigen::nbThreads(), backend.compute_threads());
    std::printf("ratio = eigen_seconds / backend_seconds, median [min, max] of %d rounds\n", rounds);
    std::printf("%6s  %-24s  %-24s  %-24s  %10s  %10s\n", "n", "quiet", "2 streams copying",
                "vs 1-thread Eigen", "backend", "eigen");
    for (const auto& p : problems) {
      const auto quiet = memo::spread_of(p.ratio_quiet);
      const auto busy = memo::spread_of(p.ratio_busy);
      const auto single = memo::spread_of(p.ratio_single);
      const double flops = 2.0 * p.n * p.n * p.n;
      std::printf("%6d  %5.2f [%4.2f, %4.2f]        %5.2f [%4.2f, %4.2f]        %5.2f [%4.2f, %4.2f]        "
                  "%6.1f GF/s  %6.1f GF/s\n",
                  p.n, quiet.median, quiet.min, quiet.max, busy.median, busy.min, busy.max,
                  single.median, single.min, single.max,
                  flops / memo::spread_of(p.backend_quiet).median * 1e-9,
                  flops / memo::spread_of(p.eigen_quiet).median * 1e-9);
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  return memo::run_command("backend_bench", "usage: backend_bench [--quick] [--json]\n",
                           [&] { return bench_main(argc, argv); });
}
