// attention_bench: chunked causal attention's FLOP rate as a fraction of
// the same machine's GEMM FLOP rate, both through host_backend in one run,
// and its device memory against a naive attention's score matrix.
//
// For each (tokens, head_dim), interleaved, every round measures
//   - attention: chunked_causal_attention forward + backward (offload on:
//     Q/K/V chunks go to pinned host memory and come back double-buffered),
//     waited for with `synchronize`;
//   - gemm: backend.gemm of a square n x n x n fp32 product (the machine's
//     GEMM rate through the same backend and the same thread pool), right
//     before and right after the attention; the ratio divides by the mean
//     of the two, so a load change during a long attention run (minutes at
//     64K) moves both ends of the window the ratio is taken over.
// Useful FLOPs of causal attention: 7 GEMM-equivalents (forward S and PV;
// backward S, dP, dV, dK, dQ) of 2 * head_dim FLOPs per (head, query, key)
// pair with key <= query: 7 * head_dim * heads * T * (T + 1). The masked
// half of the diagonal chunks is computed but not counted.
// ratio = attention FLOP rate / GEMM FLOP rate; median and min-max over the
// rounds. Memory: required_device_bytes(shape) against T^2 * heads * 4
// (a naive attention's fp32 score matrix), printed for every length.
//
// The chunk follows host_attention_chunk(head_dim, 1 MiB): the tiles of one
// head stay inside a core's share of L2 while its row math runs.
//
// Usage: attention_bench [--quick] [--json] [--min-tokens N] [--max-tokens N]
//                        [--head-dim 64|128]
#include <memo/backend/host_backend.hpp>
#include <memo/core/command_line.hpp>
#include <memo/core/json.hpp>
#include <memo/core/spread.hpp>
#include <memo/core/text.hpp>
#include <memo/model/attention.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gemm_reference.hpp"

namespace {

using clock_type = std::chrono::steady_clock;
using attention = memo::chunked_causal_attention<memo::host_backend>;

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}


std::vector<float> pattern(std::size_t n, int salt) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>((i * 7 + salt) % 17) * 0.06f - 0.5f;
  return v;
}

// One attention configuration with its buffers and regions.
struct problem {
  memo::attention_shape shape;
  std::vector<float> q, k, v, o, lse, dout, dq, dk, dv;  // dense [T, heads, D] / [heads, T]
  void* device = nullptr;
  void* pinned = nullptr;
  std::size_t device_bytes = 0;
  std::size_t pinned_bytes = 0;
  std::vector<double> seconds, ratio;

  [[nodiscard]] double flops() const {
    const auto t = static_cast<double>(shape.tokens);
    return 7.0 * static_cast<double>(shape.head_dim * shape.heads) * t * (t + 1.0);
  }
};

double time_attention(memo::host_backend& backend, memo::host_backend::stream& stream,
                      attention& attn, problem& p) {
  const auto& s = p.shape;
  const std::int64_t T = s.tokens, H = s.heads, Hkv = s.kv_heads, D = s.head_dim;
  using cview3 = memo::tensor_view<const float, 3>;
  using view3 = memo::tensor_view<float, 3>;
  const auto start = clock_type::now();
  attn.forward(stream, cview3::contiguous(p.q.data(), {T, H, D}), cview3::contiguous(p.k.data(), {T, Hkv, D}),
               cview3::contiguous(p.v.data(), {T, Hkv, D}), view3::contiguous(p.o.data(), {T, H, D}),
               memo::tensor_view<float, 2>::contiguous(p.lse.data(), {H, T}));
  attn.backward(stream, cview3::contiguous(p.q.data(), {T, H, D}), {}, {},
                cview3::contiguous(p.o.data(), {T, H, D}), cview3::contiguous(p.dout.data(), {T, H, D}),
                memo::tensor_view<const float, 2>::contiguous(p.lse.data(), {H, T}),
                view3::contiguous(p.dq.data(), {T, H, D}), view3::contiguous(p.dk.data(), {T, Hkv, D}),
                view3::contiguous(p.dv.data(), {T, Hkv, D}));
  backend.synchronize(stream);
  return seconds_since(start);
}

}  // namespace

int bench_main(int argc, char** argv) {
  bool quick = false;
  bool json = false;
  std::int64_t min_tokens = 0;
  std::int64_t only_head_dim = 0;  // 0: both
  std::int64_t max_tokens = 65536;
  memo::command_arguments args(argc, argv);
  while (!args.done()) {
    const std::string_view arg = args.next();
    if (arg == "--quick") {
      quick = true;
    } else if (arg == "--json") {
      json = true;
    } else if (arg == "--head-dim") {
      only_head_dim = args.integer<std::int64_t>(64, 128);
      if (only_head_dim != 64 && only_head_dim != 128) {
        throw memo::usage_error("--head-dim " + std::to_string(only_head_dim) + " is not 64 or 128");
      }
    } else if (arg == "--max-tokens" || arg == "--min-tokens") {
      (arg == "--max-tokens" ? max_tokens : min_tokens) = args.integer<std::int64_t>(1);
    } else {
      args.unknown();
    }
  }
  if (min_tokens > max_tokens) {
    throw memo::usage_error("--min-tokens " + std::to_string(min_tokens) + " is above --max-tokens " +
                            std::to_string(max_tokens) + ": no length to time");
  }
  memo::host_backend backend;
  auto stream = backend.make_stream("compute");
  const int rounds = 5;
  const std::size_t cache_bytes = memo::mib;  // a core's share of this machine class's L2
  const std::vector<std::int64_t> lengths =
      quick ? std::vector<std::int64_t>{1024, 2048} : std::vector<std::int64_t>{4096, 8192, 16384, 32768, 65536};
  const std::vector<std::int64_t> head_dims{64, 128};
  constexpr std::int64_t heads = 2;
  constexpr std::int64_t kv_heads = 1;

  std::vector<problem> problems;
  for (const std::int64_t d : head_dims) {
    if (only_head_dim != 0 && d != only_head_dim) continue;
    for (const std::int64_t t : lengths) {
      if (t < min_tokens || t > max_tokens) continue;
      problem p;
      p.shape = {t, heads, kv_heads, d, memo::host_attention_chunk(d, cache_bytes), true};
      const auto qn = static_cast<std::size_t>(t * heads * d);
      const auto kn = static_cast<std::size_t>(t * kv_heads * d);
      p.q = pattern(qn, 1);
      p.k = pattern(kn, 2);
      p.v = pattern(kn, 3);
      p.dout = pattern(qn, 4);
      p.o.assign(qn, 0.0f);
      p.dq.assign(qn, 0.0f);
      p.dk.assign(kn, 0.0f);
      p.dv.assign(kn, 0.0f);
      p.lse.assign(static_cast<std::size_t>(heads * t), 0.0f);
      p.device_bytes = attention::required_device_bytes(p.shape);
      p.pinned_bytes = attention::required_pinned_bytes(p.shape);
      problems.push_back(std::move(p));
    }
  }
  if (problems.empty()) {
    std::string timed;
    for (const std::int64_t t : lengths) timed += (timed.empty() ? "" : ", ") + std::to_string(t);
    std::fprintf(stderr, "attention_bench: none of the lengths timed (%s) lies in [%lld, %lld]\n", timed.c_str(),
                 static_cast<long long>(min_tokens), static_cast<long long>(max_tokens));
    return 2;
  }

  memo_bench::gemm_reference gemm(backend, stream, quick ? 512 : 1024, quick ? 0.02 : 0.1);

  std::vector<double> gemm_rates;
  for (int round = 0; round < rounds; ++round) {
    for (auto& p : problems) {  // interleaved: each configuration next to its GEMM reference
      auto& device = backend.device_memory();
      auto& pinned = backend.pinned_memory();
      p.device = device.allocate(p.device_bytes);
      p.pinned = pinned.allocate(p.pinned_bytes);
      {
        attention attn(backend, p.shape, {static_cast<std::byte*>(p.device), p.device_bytes},
                       {static_cast<std::byte*>(p.pinned), p.pinned_bytes});
        const double before = gemm.flops_per_second();
        const double seconds = time_attention(backend, stream, attn, p);
        const double after = gemm.flops_per_second();
        const double gemm_rate = 0.5 * (before + after);
        gemm_rates.push_back(before);
        gemm_rates.push_back(after);
        p.seconds.push_back(seconds);
        p.ratio.push_back(p.flops() / seconds / gemm_rate);
      }
      device.deallocate(p.device, p.device_bytes);
      pinned.deallocate(p.pinned, p.pinned_bytes);
    }
  }
  const memo::spread gemm_summary = memo::spread_of(gemm_rates);

  if (json) {
    memo::json_writer out;
    out.begin_object()
        .field("bench", "attention_bench")
        .field("quick", quick)
        .field("rounds", rounds)
        .field("compute_threads", backend.compute_threads())
        .field("heads", heads)
        .field("kv_heads", kv_heads)
        .field("offload", true)
        .field("gemm_n", gemm.n())
        .field("gemm_gflops_median", gemm_summary.median * 1e-9)
        .field("gemm_gflops_min", gemm_summary.min * 1e-9)
        .field("gemm_gflops_max", gemm_summary.max * 1e-9)
        .field("ratio", "attention forward+backward FLOP rate / GEMM FLOP rate");
    out.key("results").begin_array();
    for (const auto& p : problems) {
      const auto ratio = memo::spread_of(p.ratio);
      const auto seconds = memo::spread_of(p.seconds);
      const double naive_bytes = static_cast<double>(p.shape.tokens) * static_cast<double>(p.shape.tokens) *
                                 static_cast<double>(heads) * sizeof(float);
      out.begin_object()
          .field("tokens", p.shape.tokens)
          .field("head_dim", p.shape.head_dim)
          .field("chunk", p.shape.chunk)
          .field("ratio_median", ratio.median)
          .field("ratio_min", ratio.min)
          .field("ratio_max", ratio.max)
          .field("seconds_median", seconds.median)
          .field("attention_gflops_median", p.flops() / seconds.median * 1e-9)
          .field("device_bytes", p.device_bytes)
          .field("pinned_bytes", p.pinned_bytes)
          .field("naive_score_bytes", naive_bytes)
          .end_object();
    }
    out.end_array().end_object();
    std::printf("%s\n", out.str().c_str());
  } else {
    std::printf("chunked causal attention (heads %lld, kv heads %lld, offload on), forward + backward,\n"
                "vs backend.gemm %d^3: %.1f GF/s median [%.1f, %.1f] over %zu runs, %zu threads\n",
                static_cast<long long>(heads), static_cast<long long>(kv_heads), gemm.n(),
                gemm_summary.median * 1e-9, gemm_summary.min * 1e-9, gemm_summary.max * 1e-9,
                gemm_rates.size(), backend.compute_threads());
    std::printf("ratio = attention GF/s / mean GEMM GF/s just before and after it, median [min, max] of %d rounds\n",
                rounds);
    std::printf("%7s %4s %5s  %-20s %9s %9s  %12s %12s\n", "tokens", "d", "chunk", "ratio", "GF/s", "seconds",
                "device MiB", "naive S MiB");
    for (const auto& p : problems) {
      const auto ratio = memo::spread_of(p.ratio);
      const auto seconds = memo::spread_of(p.seconds);
      const double naive_bytes = static_cast<double>(p.shape.tokens) * static_cast<double>(p.shape.tokens) *
                                 static_cast<double>(heads) * sizeof(float);
      std::printf("%7lld %4lld %5lld  %5.2f [%4.2f, %4.2f]   %9.1f %9.3f  %12.2f %12.1f\n",
                  static_cast<long long>(p.shape.tokens), static_cast<long long>(p.shape.head_dim),
                  static_cast<long long>(p.shape.chunk), ratio.median, ratio.min, ratio.max,
                  p.flops() / seconds.median * 1e-9, seconds.median,
                  static_cast<double>(p.device_bytes) / memo::mib, naive_bytes / memo::mib);
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  return memo::run_command("attention_bench",
                           "usage: attention_bench [--quick] [--json] [--min-tokens N] [--max-tokens N] "
                           "[--head-dim 64|128]\n",
                           [&] { return bench_main(argc, argv); });
}
