// exact_bench: how far the exact DSA search (memo/plan/exact_solver.hpp)
// gets on generated instance families, what each of its switches buys, and
// how much memory it needs on traces of tens of thousands of buffers.
//
//   exact_bench [--quick] [--json] [--time-limit S] [--seeds K] [--seed-base B]
//               [--family NAME] [--buffers N] [--trace-limit S] [--no-ablation]
//               [--no-traces] [--each] [--save DIR] [--threads N]
//
// --threads N: the exact search's threads (memo::exact_options::threads;
// default 1, deterministic); the ablation rows use the same number.
//
// Families (five seeds each, seeds B .. B+K-1 with B = 0 unless given; a
// seed fixes an instance; --each prints every instance; --save writes every
// instance run as DIR/<family>-<buffers>-seed<seed>.csv, the DSA CSV that
// `memo-plan` reads):
//   random-sparse / random-medium / random-dense: uniform start times,
//       lifetimes drawn so that on average ~8 / ~32 / ~96 buffers are live;
//       sizes are multiples of 256 bytes, from 256 B to 1 MiB, 256-aligned.
//   nested: lifetimes nest like a call stack (LIFO frees), random sizes.
//   mixed-align: medium density, sizes of any byte count (100 B .. 1 MiB,
//       log-uniform) with alignments of 256 B or 4 KiB; also at 10, 20 and
//       50 buffers, to show where proofs start.
//   gpt: training-step traces of a GPT-like stack (transients around
//       skeletal tensors kept from a layer's forward to its backward).
//   cut: a full capacity x time rectangle cut into buffers by random
//       guillotine cuts, so a plan at the lower bound exists by
//       construction; run at capacity = lower bound ("fit") and minimising.
//   trace (tens of thousands of buffers; see compiled_trace): what a
//       compiler's memory planner emits for one training step.
// Each instance: lower bound, greedy peak / bound, exact peak / bound,
// proven, time. Groups print median [min, max] of the time over the seeds.
// Traces run in a child process each, so that its peak resident memory
// (getrusage) is the solve's own; working memory is that peak minus the
// resident size before the solve, per buffer. The ablation runs a fixed set
// of instances with each switch of memo::exact_options turned off in turn,
// interleaved (every configuration on one instance before the next).
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <optional>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "memo/core/command_line.hpp"
#include "memo/core/json.hpp"
#include "memo/core/spread.hpp"
#include "memo/plan/exact_solver.hpp"

namespace {

using memo::dsa_buffer;
using memo::dsa_problem;

dsa_problem random_intervals(std::mt19937_64& rng, std::size_t n, double live) {
  const std::int64_t horizon = static_cast<std::int64_t>(2 * n);
  // mean lifetime = live * horizon / n
  const double mean = live * static_cast<double>(horizon) / static_cast<double>(n);
  std::uniform_int_distribution<std::int64_t> start(0, horizon - 1);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  dsa_problem p;
  for (std::size_t i = 0; i < n; ++i) {
    dsa_buffer b;
    b.id = i;
    b.lower = start(rng);
    b.upper = b.lower + 1 + static_cast<std::int64_t>(2.0 * mean * unit(rng));
    // log-uniform over 256 B .. 1 MiB, in 256-byte units
    b.size_bytes = 256 * static_cast<std::uint64_t>(std::exp(unit(rng) * std::log(4096.0)));
    b.alignment = 256;
    p.buffers.push_back(b);
  }
  return p;
}

dsa_problem mixed_alignment(std::mt19937_64& rng, std::size_t n) {
  auto p = random_intervals(rng, n, 32);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (auto& b : p.buffers) {
    b.size_bytes = static_cast<std::uint64_t>(100.0 * std::exp(unit(rng) * std::log(10486.0)));
    b.alignment = unit(rng) < 0.5 ? 256 : 4096;
  }
  return p;
}

dsa_problem nested(std::mt19937_64& rng, std::size_t n) {
  dsa_problem p;
  std::vector<std::size_t> stack;
  std::int64_t t = 0;
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  while (p.buffers.size() < n || !stack.empty()) {
    const bool push = p.buffers.size() < n && (stack.empty() || unit(rng) < 0.55);
    if (push) {
      dsa_buffer b;
      b.id = p.buffers.size();
      b.lower = t;
      b.size_bytes = 256 * (1 + static_cast<std::uint64_t>(unit(rng) * 2048));
      b.alignment = 256;
      stack.push_back(p.buffers.size());
      p.buffers.push_back(b);
    } else {
      p.buffers[stack.back()].upper = t;
      stack.pop_back();
    }
    ++t;
  }
  return p;
}

dsa_problem gpt_trace(std::mt19937_64& rng, std::size_t n) {
  // Per layer: 12 forward transients + 4 skeletal + 12 backward transients.
  const std::size_t layers = std::max<std::size_t>(1, n / 28);
  const std::uint64_t tokens = 4096 * (1 + rng() % 4);
  const std::uint64_t hidden = 1024;
  const std::uint64_t th = tokens * hidden * 2;  // bytes of one [tokens, hidden] bf16 tensor
  const std::uint64_t factors[12] = {1, 3, 1, 1, 4, 4, 1, 1, 2, 1, 4, 1};
  dsa_problem p;
  std::int64_t t = 0;
  std::uint64_t id = 0;
  std::vector<std::size_t> skeletal;
  auto transient_block = [&](bool backward) {
    // A short chain: each transient lives for one to three steps.
    for (std::size_t k = 0; k < 12; ++k) {
      dsa_buffer b;
      b.id = id++;
      b.lower = t;
      b.upper = t + 1 + static_cast<std::int64_t>(rng() % 5);
      b.size_bytes = th * factors[(k + (backward ? 5 : 0)) % 12] / (backward ? 2 : 1);
      b.alignment = 256;
      if (k % 4 == 3) {  // a kernel workspace: small, odd-sized, 512-aligned
        b.size_bytes = 1000 + rng() % (th / 64);
        b.alignment = 512;
      }
      p.buffers.push_back(b);
      ++t;
    }
    t += 2;
  };
  for (std::size_t l = 0; l < layers; ++l) {
    for (int k = 0; k < 4; ++k) {
      dsa_buffer b;
      b.id = id++;
      b.lower = t;
      b.upper = -1;  // set in backward
      b.size_bytes = th * (k == 3 ? 4 : 1);
      b.alignment = 256;
      skeletal.push_back(p.buffers.size());
      p.buffers.push_back(b);
    }
    transient_block(false);
  }
  for (std::size_t l = layers; l-- > 0;) {
    transient_block(true);
    for (int k = 0; k < 4; ++k) {
      p.buffers[skeletal.back()].upper = t++;
      skeletal.pop_back();
    }
  }
  return p;
}

// A full capacity x time rectangle cut into `n` buffers by guillotine cuts:
// the piece to cut is drawn with probability proportional to its area, the
// direction at random (a piece one tick wide or one unit high can only be
// cut the other way). Every instant carries exactly the capacity, so the
// lower bound is reachable and a plan at it leaves no byte free.
dsa_problem cut_rectangle(std::mt19937_64& rng, std::size_t n) {
  struct piece {
    std::int64_t t0, t1;
    std::uint64_t a0, a1;  // in 256-byte units
  };
  const std::int64_t ticks = static_cast<std::int64_t>(4 * n);
  const std::uint64_t units = 4096;
  std::vector<piece> pieces = {{0, ticks, 0, units}};
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  while (pieces.size() < n) {
    double total = 0.0;
    for (const auto& p : pieces) total += static_cast<double>(p.t1 - p.t0) * static_cast<double>(p.a1 - p.a0);
    double pick = unit(rng) * total;
    std::size_t k = 0;
    for (; k + 1 < pieces.size(); ++k) {
      pick -= static_cast<double>(pieces[k].t1 - pieces[k].t0) * static_cast<double>(pieces[k].a1 - pieces[k].a0);
      if (pick <= 0.0) break;
    }
    const piece p = pieces[k];
    const bool can_time = p.t1 - p.t0 >= 2;
    const bool can_space = p.a1 - p.a0 >= 2;
    if (!can_time && !can_space) continue;
    const bool in_time = can_time && (!can_space || unit(rng) < 0.5);
    if (in_time) {
      const std::int64_t at = p.t0 + 1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(p.t1 - p.t0 - 1));
      pieces[k] = {p.t0, at, p.a0, p.a1};
      pieces.push_back({at, p.t1, p.a0, p.a1});
    } else {
      const std::uint64_t at = p.a0 + 1 + rng() % (p.a1 - p.a0 - 1);
      pieces[k] = {p.t0, p.t1, p.a0, at};
      pieces.push_back({p.t0, p.t1, at, p.a1});
    }
  }
  std::shuffle(pieces.begin(), pieces.end(), rng);
  dsa_problem problem;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    problem.buffers.push_back({i, 256 * (pieces[i].a1 - pieces[i].a0), pieces[i].t0, pieces[i].t1, 256});
  }
  return problem;
}

// One training step as a compiler's memory planner sees it (the plans XLA,
// TVM or a PyTorch graph compiler make for a whole step): `ops` forward
// operators, then the backward in reverse. Every operator writes one to
// three outputs (log-uniform 4 KiB .. 2 MiB, 256-aligned) read by the next
// one to six operators; one output in twenty is an activation saved for the
// backward, freed when the mirrored backward operator has run; one operator
// in three has a scratch workspace (odd sizes, 64-aligned) live only while
// it runs. A few large long-lived buffers (parameters, gradient buckets and
// optimizer state chunks of 16 to 128 MiB) span most of the step. So: many
// small short-lived buffers around a few large long-lived ones.
dsa_problem compiled_trace(std::mt19937_64& rng, std::size_t n) {
  const std::size_t ops = std::max<std::size_t>(4, n / 5);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  auto log_uniform = [&](double lo, double hi) { return std::exp(std::log(lo) + unit(rng) * (std::log(hi) - std::log(lo))); };
  dsa_problem p;
  std::uint64_t id = 0;
  auto add = [&](std::uint64_t size, std::int64_t lower, std::int64_t upper, std::uint64_t align) {
    p.buffers.push_back({id++, size, lower, std::max(upper, lower + 1), align});
  };
  const auto end = static_cast<std::int64_t>(2 * ops + 2);
  const std::size_t long_lived = 4 + n / 2000;
  for (std::size_t k = 0; k < long_lived; ++k) {
    const auto from = static_cast<std::int64_t>(rng() % (ops / 4 + 1));
    const auto to = end - static_cast<std::int64_t>(rng() % (ops / 4 + 1));
    add(256 * static_cast<std::uint64_t>(log_uniform(65536, 524288)), from, to, 4096);
  }
  for (std::size_t op = 0; op < 2 * ops && p.buffers.size() < n; ++op) {
    const auto t = static_cast<std::int64_t>(op);
    const bool forward = op < ops;
    const std::size_t outputs = 1 + rng() % 3;
    for (std::size_t k = 0; k < outputs; ++k) {
      const auto size = 256 * static_cast<std::uint64_t>(log_uniform(16, 8192));
      std::int64_t upper = t + 1 + static_cast<std::int64_t>(std::min(6.0, std::floor(-std::log(unit(rng) + 1e-12) * 1.5)));
      if (forward && unit(rng) < 0.05) upper = static_cast<std::int64_t>(2 * ops - op) + 1;
      add(size, t, upper, 256);
    }
    if (unit(rng) < 1.0 / 3.0) add(64 * static_cast<std::uint64_t>(log_uniform(8, 16384)) + 40, t, t + 1, 64);
  }
  return p;
}

// The largest resident set of this process so far, and now, in bytes.
std::uint64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::uint64_t>(usage.ru_maxrss) * 1024;
}
std::uint64_t current_rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::uint64_t pages = 0;
  std::uint64_t resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
}

struct run {
  std::string family;
  std::string mode;  // "min" or "fit"
  std::string config = "all";
  std::size_t buffers = 0;
  int seed = 0;
  std::uint64_t bound = 0;
  std::uint64_t greedy = 0;
  std::uint64_t peak = 0;  // 0 when fit mode found no plan
  bool proven = false;
  double seconds = 0.0;
  std::uint64_t nodes = 0;
  double working_bytes_per_buffer = -1.0;  // measured only in a child process
};

struct measured {  // what a child process sends back
  std::uint64_t bound, greedy, peak, nodes;
  double seconds, working_bytes_per_buffer;
  bool proven;
};

measured solve(const dsa_problem& base, bool fit, const memo::exact_options& switches, double limit) {
  std::vector<std::uint64_t> offsets;
  measured m{};
  m.greedy = memo::detail::greedy_upper_bound(base.buffers, offsets);
  dsa_problem problem = base;
  memo::exact_solver solver(switches);
  memo::dsa_solve_options options;
  options.time_limit_seconds = limit;
  const auto start = std::chrono::steady_clock::now();
  if (fit) problem.capacity_bytes = solver.solve(dsa_problem{base.buffers, {}}, memo::dsa_solve_options{0.0, {}}).lower_bound_bytes;
  try {
    const auto result = solver.solve(problem, options);
    m.bound = result.lower_bound_bytes;
    m.peak = result.plan.peak_bytes;
    m.proven = result.proven_optimal;
  } catch (const memo::error&) {
    m.bound = problem.capacity_bytes.value_or(0);
  }
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  m.nodes = solver.last_nodes();
  return m;
}

// The same solve in a child process, with its working memory.
measured solve_in_child(const dsa_problem& problem, bool fit, const memo::exact_options& switches, double limit) {
  int fds[2];
  if (pipe(fds) != 0) return solve(problem, fit, switches, limit);
  const pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    const std::uint64_t before = current_rss_bytes();
    measured m = solve(problem, fit, switches, limit);
    const std::uint64_t peak = peak_rss_bytes();
    m.working_bytes_per_buffer =
        static_cast<double>(peak > before ? peak - before : 0) / static_cast<double>(std::max<std::size_t>(1, problem.buffers.size()));
    const ssize_t written = write(fds[1], &m, sizeof m);
    _exit(written == static_cast<ssize_t>(sizeof m) ? 0 : 1);
  }
  close(fds[1]);
  measured m{};
  const ssize_t got = read(fds[0], &m, sizeof m);
  close(fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  if (got != static_cast<ssize_t>(sizeof m)) m.working_bytes_per_buffer = -1.0;
  return m;
}

run make_run(const std::string& family, const std::string& mode, const std::string& config, const dsa_problem& p,
             int seed, const measured& m) {
  run r;
  r.family = family;
  r.mode = mode;
  r.config = config;
  r.buffers = p.buffers.size();
  r.seed = seed;
  r.bound = m.bound;
  r.greedy = m.greedy;
  r.peak = m.peak;
  r.proven = m.proven;
  r.seconds = m.seconds;
  r.nodes = m.nodes;
  r.working_bytes_per_buffer = m.working_bytes_per_buffer;
  return r;
}

dsa_problem make_instance(const std::string& f, std::size_t n, int seed) {
  std::mt19937_64 rng(1000003u * n + 7919u * static_cast<unsigned>(seed) + f.size());
  if (f == "random-sparse") return random_intervals(rng, n, 8);
  if (f == "random-medium") return random_intervals(rng, n, 32);
  if (f == "random-dense") return random_intervals(rng, n, 96);
  if (f == "mixed-align") return mixed_alignment(rng, n);
  if (f == "nested") return nested(rng, n);
  if (f == "gpt") return gpt_trace(rng, n);
  if (f == "cut") return cut_rectangle(rng, n);
  return compiled_trace(rng, n);
}

using memo::spread;
using memo::spread_of;

// The instance as DSA CSV (id,lower,upper,size,alignment), for memo-plan.
void save_problem(const std::string& path, const dsa_problem& p) {
  std::ofstream out(path);
  out << "id,lower,upper,size,alignment\n";
  for (const auto& b : p.buffers) {
    out << b.id << ',' << b.lower << ',' << b.upper << ',' << b.size_bytes << ',' << b.alignment << '\n';
  }
  out.close();
  if (!out) throw memo::error("exact_bench: could not write '" + memo::detail::shown_path(path) + "'");
}

double ratio(std::uint64_t a, std::uint64_t b) { return b == 0 ? 0.0 : static_cast<double>(a) / static_cast<double>(b); }


// Runs sharing (family, mode, buffers, config), summarised.
struct group {
  std::string family, mode, config;
  std::size_t buffers = 0;
  std::vector<run> runs;
  [[nodiscard]] std::size_t proven() const {
    return static_cast<std::size_t>(std::count_if(runs.begin(), runs.end(), [](const run& r) { return r.proven; }));
  }
  [[nodiscard]] std::size_t found() const {
    return static_cast<std::size_t>(std::count_if(runs.begin(), runs.end(), [](const run& r) { return r.peak != 0; }));
  }
  [[nodiscard]] double mean_greedy() const {
    double sum = 0;
    for (const auto& r : runs) sum += ratio(r.greedy, r.bound);
    return runs.empty() ? 0.0 : sum / static_cast<double>(runs.size());
  }
  [[nodiscard]] spread exact() const {
    std::vector<double> v;
    for (const auto& r : runs) {
      if (r.peak != 0) v.push_back(ratio(r.peak, r.bound));
    }
    return spread_of(v);
  }
  [[nodiscard]] spread seconds() const {
    std::vector<double> v;
    for (const auto& r : runs) v.push_back(r.seconds);
    return spread_of(v);
  }
  [[nodiscard]] spread nodes() const {
    std::vector<double> v;
    for (const auto& r : runs) v.push_back(static_cast<double>(r.nodes));
    return spread_of(v);
  }
};

std::vector<group> group_runs(const std::vector<run>& runs) {
  std::vector<group> groups;
  for (const auto& r : runs) {
    auto it = std::find_if(groups.begin(), groups.end(), [&](const group& g) {
      return g.family == r.family && g.mode == r.mode && g.buffers == r.buffers && g.config == r.config;
    });
    if (it == groups.end()) {
      groups.push_back({r.family, r.mode, r.config, r.buffers, {}});
      it = std::prev(groups.end());
    }
    it->runs.push_back(r);
  }
  return groups;
}

void write_group(memo::json_writer& j, const group& g) {
  j.begin_object();
  j.field("family", g.family).field("mode", g.mode).field("config", g.config).field("buffers", g.buffers);
  j.field("instances", g.runs.size()).field("proven", g.proven()).field("found", g.found());
  j.field("greedy_over_bound_mean", g.mean_greedy());
  const auto e = g.exact();
  j.field("exact_over_bound_median", e.median).field("exact_over_bound_max", e.max);
  const auto t = g.seconds();
  j.field("seconds_median", t.median).field("seconds_min", t.min).field("seconds_max", t.max);
  j.field("nodes_median", g.nodes().median);
  j.end_object();
}

void print_group(const group& g) {
  const auto e = g.exact();
  const auto t = g.seconds();
  std::printf("%-14s %-4s %-19s %7zu %6zu/%zu %6zu/%zu %9.4f %9.4f %9.4f %8.3f [%.3f, %.3f] %10.0f\n", g.family.c_str(),
              g.mode.c_str(), g.config.c_str(), g.buffers, g.proven(), g.runs.size(), g.found(), g.runs.size(),
              g.mean_greedy(), e.median, e.max, t.median, t.min, t.max, g.nodes().median);
  std::fflush(stdout);
}

void print_header(const char* title) {
  std::printf("\n%s\n%-14s %-4s %-19s %7s %8s %8s %9s %9s %9s %8s %16s %10s\n", title, "family", "mode", "config",
              "buffers", "proven", "found", "greedy/LB", "exact/LB", "worst", "time s", "[min, max]", "nodes");
}

}  // namespace

int bench_main(int argc, char** argv) {
  bool json = false;
  bool quick = false;
  bool ablation = true;
  bool traces = true;
  double limit = 10.0;
  double trace_limit = 60.0;
  int seeds = 5;
  int seed_base = 0;
  bool each = false;
  std::string only_family;
  std::string save_dir;
  std::size_t only_buffers = 0;
  unsigned threads = 1;
  std::optional<double> limit_given, trace_limit_given;
  std::optional<int> seeds_given;
  memo::command_arguments args(argc, argv);
  auto text = [&] {
    const std::string_view value = args.value();
    if (value.empty()) throw memo::usage_error("an empty value is not a name");
    return std::string(value);
  };
  while (!args.done()) {
    const std::string_view arg = args.next();
    if (arg == "--json") {
      json = true;
    } else if (arg == "--quick") {
      quick = true;
    } else if (arg == "--no-ablation") {
      ablation = false;
    } else if (arg == "--no-traces") {
      traces = false;
    } else if (arg == "--time-limit") {
      limit_given = args.number(0.0, 86400.0);
    } else if (arg == "--trace-limit") {
      trace_limit_given = args.number(0.0, 86400.0);
    } else if (arg == "--seeds") {
      seeds_given = args.integer<int>(1, 1'000'000);
    } else if (arg == "--seed-base") {
      seed_base = args.integer<int>(0, 1'000'000'000);
    } else if (arg == "--each") {
      each = true;
    } else if (arg == "--save") {
      save_dir = text();
    } else if (arg == "--family") {
      only_family = text();
    } else if (arg == "--threads") {
      threads = args.integer<unsigned>(1, 256);
    } else if (arg == "--buffers") {
      only_buffers = args.integer<std::size_t>(1, 100'000'000);
    } else {
      args.unknown();
    }
  }
  std::vector<std::size_t> sizes = {100, 300, 1000};
  std::vector<std::size_t> cut_sizes = {100, 200, 300, 400, 500};
  // Where proofs of mixed alignments start (below the usual sizes).
  std::vector<std::size_t> mixed_small_sizes = {10, 20, 50};
  std::vector<std::size_t> trace_sizes = {20000, 60000};
  double ablation_limit = 1.5;
  if (quick) {
    sizes = {100};
    cut_sizes = {100};
    mixed_small_sizes = {10};
    trace_sizes = {4000};
    seeds = 1;
    limit = 0.3;
    trace_limit = 0.5;
    ablation_limit = 0.1;
  }
  // What the command line gives wins over --quick's values.
  limit = limit_given.value_or(limit);
  trace_limit = trace_limit_given.value_or(trace_limit);
  seeds = seeds_given.value_or(seeds);
  const char* families[] = {"random-sparse", "random-medium", "random-dense", "mixed-align", "nested", "gpt"};
  if (!only_family.empty() && only_family != "cut" && only_family != "trace" &&
      std::find(std::begin(families), std::end(families), only_family) == std::end(families)) {
    std::string known = "cut, trace";
    for (const char* f : families) known += std::string(", ") + f;
    throw memo::usage_error("--family '" + memo::detail::quote(only_family) + "' is none of " + known);
  }
  auto wanted = [&](const std::string& f, std::size_t n) {
    return (only_family.empty() || only_family == f) && (only_buffers == 0 || only_buffers == n);
  };
  memo::exact_options all;
  all.threads = threads;
  std::vector<run> runs;
  if (!json) print_header("Families (time limit per instance; fit = capacity at the lower bound)");
  auto run_group = [&](const std::string& f, const std::string& mode, std::size_t n) {
    const std::size_t first = runs.size();
    for (int seed = seed_base; seed < seed_base + seeds; ++seed) {
      const auto p = make_instance(f, n, seed);
      if (!save_dir.empty()) save_problem(save_dir + "/" + f + "-" + std::to_string(n) + "-seed" + std::to_string(seed) + ".csv", p);
      runs.push_back(make_run(f, mode, "all", p, seed, solve(p, mode == "fit", all, limit)));
      if (each && !json) {
        const auto& r = runs.back();
        std::printf("  %s %s %zu seed %d: %s peak/LB %.4f  %.3f s  %llu nodes\n", f.c_str(), mode.c_str(), n, seed,
                    mode == "fit" ? (r.peak != 0 ? "found" : "NOT FOUND") : (r.proven ? "proven" : "NOT PROVEN"),
                    ratio(r.peak, r.bound), r.seconds, static_cast<unsigned long long>(r.nodes));
        std::fflush(stdout);
      }
    }
    if (!json) print_group(group_runs({runs.begin() + static_cast<std::ptrdiff_t>(first), runs.end()}).front());
  };
  for (const char* family : families) {
    for (const std::size_t n : sizes) {
      if (std::string(family) == "mixed-align") {
        for (const std::size_t m : mixed_small_sizes) {
          if (m < n && (n == sizes.front()) && wanted(family, m)) run_group(family, "min", m);
        }
      }
      if (wanted(family, n)) run_group(family, "min", n);
    }
  }
  for (const std::size_t n : cut_sizes) {
    if (!wanted("cut", n)) continue;
    run_group("cut", "fit", n);
    run_group("cut", "min", n);
  }
  // Traces: one child process per solve.
  std::vector<run> trace_runs;
  if (traces) {
    if (!json) print_header("Compiled training-step traces (child process each; working bytes per buffer)");
    for (const std::size_t n : trace_sizes) {
      if (!wanted("trace", n)) continue;
      const auto p = make_instance("trace", n, 0);
      trace_runs.push_back(make_run("trace", "min", "all", p, 0, solve_in_child(p, false, all, trace_limit)));
      const auto& r = trace_runs.back();
      if (!json) {
        std::printf("%-14s %-4s %-19s %7zu %8s %8s %9.4f %9.5f %9s %8.3f %16s %10llu  %.0f B/buffer\n", "trace", "min",
                    "all", r.buffers, r.proven ? "yes" : "no", "", ratio(r.greedy, r.bound), ratio(r.peak, r.bound), "",
                    r.seconds, "", static_cast<unsigned long long>(r.nodes), r.working_bytes_per_buffer);
        std::fflush(stdout);
      }
    }
  }
  if (runs.empty() && trace_runs.empty()) {
    throw memo::usage_error("no instance has " +
                            (only_family.empty() ? std::string("any family") : "family " + only_family) +
                            (only_buffers == 0 ? std::string() : " and " + std::to_string(only_buffers) + " buffers") +
                            (traces ? std::string() : " (--no-traces)") + (quick ? " at --quick's sizes" : ""));
  }
  // Ablation: each switch off in turn, interleaved per instance.
  std::vector<run> ablation_runs;
  if (ablation && only_family.empty() && only_buffers == 0) {
    struct config {
      const char* name;
      memo::exact_options options;
    };
    std::vector<config> configs = {{"all", all}};
    auto off = [&](const char* name, bool memo::exact_options::*field) {
      memo::exact_options o = all;
      o.*field = false;
      configs.push_back({name, o});
    };
    off("no-dominance", &memo::exact_options::dominance);
    off("no-section-bounds", &memo::exact_options::section_bounds);
    off("no-symmetry", &memo::exact_options::symmetry);
    off("no-decomposition", &memo::exact_options::decomposition);
    off("no-restarts", &memo::exact_options::restarts);
    off("no-tight-branching", &memo::exact_options::tight_branching);
    off("no-alignment-bounds", &memo::exact_options::alignment_bounds);
    off("no-transpositions", &memo::exact_options::transpositions);
    struct item {
      const char* family;
      const char* mode;
      std::size_t n;
    };
    std::vector<item> items = {{"cut", "fit", 300},         {"cut", "fit", 500}, {"random-dense", "min", 1000},
                               {"random-dense", "min", 300}, {"mixed-align", "min", 100}, {"mixed-align", "min", 10}};
    const int ablation_seeds = quick ? 1 : 3;
    if (quick) items = {{"random-dense", "min", 100}, {"cut", "fit", 50}};
    for (const auto& it : items) {
      for (int seed = 0; seed < ablation_seeds; ++seed) {
        const auto p = make_instance(it.family, it.n, seed);
        for (const auto& c : configs) {
          ablation_runs.push_back(make_run(it.family, it.mode, c.name, p, seed, solve(p, std::string(it.mode) == "fit", c.options, ablation_limit)));
        }
      }
    }
    if (!json) {
      char title[96];
      std::snprintf(title, sizeof title, "Ablation (each switch off in turn, %.3g s per solve, interleaved)", ablation_limit);
      print_header(title);
      for (const auto& g : group_runs(ablation_runs)) print_group(g);
    }
  }
  // Headlines.
  std::size_t cut_fit = 0, cut_fit_found = 0, cut_min = 0, cut_min_proven = 0, small = 0, small_proven = 0;
  for (const auto& r : runs) {
    if (r.family == "cut" && r.mode == "fit") {
      ++cut_fit;
      if (r.peak != 0) ++cut_fit_found;
    } else if (r.family == "cut") {
      ++cut_min;
      if (r.proven) ++cut_min_proven;
    } else if (r.family != "mixed-align") {
      ++small;
      if (r.proven) ++small_proven;
    }
  }
  if (json) {
    memo::json_writer j;
    j.begin_object();
    j.field("time_limit_seconds", limit).field("trace_time_limit_seconds", trace_limit);
    j.key("groups").begin_array();
    for (const auto& g : group_runs(runs)) write_group(j, g);
    j.end_array();
    j.key("traces").begin_array();
    for (const auto& r : trace_runs) {
      j.begin_object();
      j.field("buffers", r.buffers).field("lower_bound_bytes", r.bound).field("greedy_over_bound", ratio(r.greedy, r.bound));
      j.field("exact_over_bound", ratio(r.peak, r.bound)).field("proven", r.proven).field("seconds", r.seconds);
      j.field("nodes", r.nodes).field("working_bytes_per_buffer", r.working_bytes_per_buffer);
      j.end_object();
    }
    j.end_array();
    j.key("ablation").begin_array();
    for (const auto& g : group_runs(ablation_runs)) write_group(j, g);
    j.end_array();
    j.field("cut_fit_found", cut_fit_found).field("cut_fit_instances", cut_fit);
    j.field("cut_min_proven", cut_min_proven).field("cut_min_instances", cut_min);
    j.field("proven_random_nested_gpt", small_proven).field("instances_random_nested_gpt", small);
    j.end_object();
    std::printf("%s\n", j.str().c_str());
  } else {
    std::printf("\ncut, capacity = lower bound: plan found for %zu / %zu; minimising: proven optimal %zu / %zu\n",
                cut_fit_found, cut_fit, cut_min_proven, cut_min);
    std::printf("random, nested and gpt families: proven %zu / %zu within %.3g s\n", small_proven, small, limit);
  }
  return 0;
}

int main(int argc, char** argv) {
  return memo::run_command("exact_bench",
                           "usage: exact_bench [--quick] [--json] [--time-limit S] [--seeds K] [--seed-base B] "
                           "[--family NAME] [--buffers N] [--trace-limit S] [--no-ablation] [--no-traces] [--each] "
                           "[--save DIR] [--threads N]\n",
                           [&] { return bench_main(argc, argv); });
}
