// plan_bench: how close each DSA solver gets to the lower bound, how often
// the exact search proves optimality, what the bi-level planner costs, and
// how much a caching allocator reserves on the same requests (MEMO section
// 4.2). Every figure is a ratio to the instance's lower bound, measured in
// this run.
//
//   plan_bench [--quick] [--json] [--time-limit S] [--seed N]
//
// Instance families:
//   random-<density>  buffers with random start times and lifetimes of a
//                     given mean length (sparse, medium, dense) and sizes of
//                     1 to 1000 KiB;
//   nested            lifetimes that nest like a call stack (each buffer is
//                     born after and dies before the one around it);
//   gpt-<tokens>      a 7B GPT training iteration (hidden 4096, 32 heads,
//                     32 layers, forward and backward) from the shape model
//                     of memo/plan/gpt_trace.hpp;
//   gpt2-recorded     the request trace of a real step of the reference
//                     GPT-2 (model/gpt2_model.hpp): the model is built on
//                     the host backend, records one block backward through a
//                     recording resource and lays the step out around it;
//                     this is the trace its arena replays every step.
// Small random instances also run the lp_solve MIP when it is available.
//
// Scaling: the three heuristics on random-medium instances of 10^4, 10^5
// and 10^6 buffers (--quick: 10^3 and 10^4), rounds interleaved (every size
// and solver once per round, 5 rounds), seconds as median [min, max], and
// peak / lower bound (the same every round: the heuristics are
// deterministic).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "memo/backend/host_backend.hpp"
#include "memo/core/command_line.hpp"
#include "memo/core/spread.hpp"
#include "memo/model/gpt2_model.hpp"
#include "memo/plan/bilevel_planner.hpp"
#include "memo/plan/caching_allocator.hpp"
#include "memo/plan/exact_solver.hpp"
#include "memo/plan/gpt_trace.hpp"
#include "memo/plan/greedy.hpp"
#include "memo/plan/plan_io.hpp"
#include "memo/plan/trace.hpp"
#if MEMO_HAS_LPSOLVE
#include "memo/plan/mip_solver.hpp"
#endif

namespace {

struct instance {
  std::string family;
  std::string name;
  memo::memory_trace trace;
};

memo::dsa_problem random_intervals(std::mt19937_64& rng, std::size_t n, double mean_life) {
  memo::dsa_problem p;
  const std::int64_t horizon = static_cast<std::int64_t>(n) * 2;
  std::exponential_distribution<double> life(1.0 / mean_life);
  for (std::size_t i = 0; i < n; ++i) {
    memo::dsa_buffer b;
    b.id = i;
    b.lower = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(horizon));
    b.upper = b.lower + 1 + static_cast<std::int64_t>(life(rng));
    b.size_bytes = (1 + rng() % 1000) * 1024;
    p.buffers.push_back(b);
  }
  return p;
}

// Nested lifetimes: a random call tree; each call allocates one buffer for
// its whole duration, so lifetimes nest or are disjoint.
memo::dsa_problem nested(std::mt19937_64& rng, std::size_t n) {
  memo::dsa_problem p;
  std::int64_t now = 0;
  std::vector<std::size_t> open;
  while (p.buffers.size() < n || !open.empty()) {
    const bool can_open = p.buffers.size() < n;
    if (can_open && (open.empty() || rng() % 100 < 55)) {
      memo::dsa_buffer b;
      b.id = p.buffers.size();
      b.lower = now;
      b.size_bytes = (1 + rng() % 1000) * 1024;
      open.push_back(p.buffers.size());
      p.buffers.push_back(b);
    } else {
      p.buffers[open.back()].upper = now;
      open.pop_back();
    }
    ++now;
  }
  return p;
}

struct measured {
  std::string family, name;
  std::size_t buffers = 0;
  std::uint64_t lower_bound_bytes = 0;
  std::vector<memo::dsa_result> results;  // greedy-size, first-fit, best-fit-heap, [mip], exact
  std::optional<memo::bilevel_result> bilevel;
  memo::caching_allocator_report caching;
};

double ratio(std::uint64_t a, std::uint64_t b) {
  return b == 0 ? 1.0 : static_cast<double>(a) / static_cast<double>(b);
}

struct scaling_row {
  std::size_t buffers = 0;
  std::string solver;
  std::vector<double> seconds;  // one per round
  double peak_over_lower_bound = 0.0;
};


// The heuristics' wall time against the number of buffers.
std::vector<scaling_row> heuristic_scaling(std::mt19937_64& rng, const std::vector<std::size_t>& sizes,
                                           int rounds) {
  std::vector<memo::dsa_problem> problems;
  for (const auto n : sizes) problems.push_back(random_intervals(rng, n, 16.0));
  const char* names[] = {"greedy-size", "first-fit", "best-fit-heap"};
  std::vector<scaling_row> rows;
  for (const auto& p : problems) {
    for (const char* name : names) rows.push_back({p.buffers.size(), name, {}, 0.0});
  }
  memo::dsa_solve_options options;
  options.time_limit_seconds = 3600.0;
  for (int round = 0; round < rounds; ++round) {
    std::size_t k = 0;
    for (const auto& p : problems) {
      for (int which = 0; which < 3; ++which, ++k) {
        const auto r = which == 0   ? memo::greedy_by_size_solver{}.solve(p, options)
                       : which == 1 ? memo::first_fit_solver{}.solve(p, options)
                                    : memo::best_fit_heap_solver{}.solve(p, options);
        rows[k].seconds.push_back(r.seconds);
        rows[k].peak_over_lower_bound = ratio(r.plan.peak_bytes, r.lower_bound_bytes);
      }
    }
  }
  return rows;
}

}  // namespace

int bench_main(int argc, char** argv) {
  bool quick = false, json = false;
  std::optional<double> time_limit_given;
  std::uint64_t seed = 1;
  memo::command_arguments args(argc, argv);
  while (!args.done()) {
    const std::string_view a = args.next();
    if (a == "--quick") {
      quick = true;
    } else if (a == "--json") {
      json = true;
    } else if (a == "--time-limit") {
      time_limit_given = args.number(0.0, 86400.0);
    } else if (a == "--seed") {
      seed = args.integer<std::uint64_t>(0);
    } else {
      args.unknown();
    }
  }
  const double time_limit = time_limit_given.value_or(quick ? 1.0 : 10.0);

  try {
    std::mt19937_64 rng(seed);
    std::vector<instance> instances;
    const std::vector<std::size_t> sizes =
        quick ? std::vector<std::size_t>{20, 100} : std::vector<std::size_t>{20, 100, 250, 500, 1000};
    const int seeds = quick ? 1 : 3;
    const std::pair<const char*, double> densities[] = {{"sparse", 4.0}, {"medium", 16.0}, {"dense", 48.0}};
    for (const auto& [label, life] : densities) {
      for (const auto n : sizes) {
        for (int s = 0; s < seeds; ++s) {
          instance inst{std::string("random-") + label, "n" + std::to_string(n) + "-s" + std::to_string(s), {}};
          inst.trace.problem = random_intervals(rng, n, life);
          instances.push_back(std::move(inst));
        }
      }
    }
    for (const auto n : sizes) {
      for (int s = 0; s < seeds; ++s) {
        instance inst{"nested", "n" + std::to_string(n) + "-s" + std::to_string(s), {}};
        inst.trace.problem = nested(rng, n);
        instances.push_back(std::move(inst));
      }
    }
    const std::vector<std::uint64_t> token_counts =
        quick ? std::vector<std::uint64_t>{65536} : std::vector<std::uint64_t>{65536, 262144, 1048576};
    for (const auto tokens : token_counts) {
      memo::gpt_shape g;  // 7B: hidden 4096, 32 heads, 32 layers
      g.tokens = tokens;
      g.layers = quick ? 8 : 32;
      instance inst{"gpt-7b", std::to_string(tokens / 1024) + "K-tokens-" + std::to_string(g.layers) + "L", {}};
      inst.trace = memo::make_gpt_trace(g);
      instances.push_back(std::move(inst));
    }

    {
      // Recorded steps of the reference GPT-2 (12 layers, 128 channels, 4
      // heads; quick: 4 layers, 64 channels), without and with skeletal
      // offload (two rounding buffers, alpha 0.25).
      memo::host_backend backend;
      const std::int32_t L = quick ? 4 : 12, C = quick ? 64 : 128, NH = quick ? 1 : 4;
      for (const std::int64_t T : quick ? std::vector<std::int64_t>{512} : std::vector<std::int64_t>{2048, 8192}) {
        for (const bool offload : {false, true}) {
          const memo::gpt2_config config{static_cast<std::int32_t>(T), 64, 64, L, NH, C};
          memo::gpt2_model_options mo{.context = T};
          if (offload) mo.offload_alpha = 0.25;
          const memo::gpt2_model<memo::host_backend> model(backend, config, mo);
          instance inst{"gpt2-recorded",
                        "L" + std::to_string(L) + "-T" + std::to_string(T) + (offload ? "-a0.25" : ""), {}};
          inst.trace = model.step_trace();
          instances.push_back(std::move(inst));
        }
      }
    }

    std::vector<measured> rows;
    memo::dsa_solve_options options;
    options.time_limit_seconds = time_limit;
    for (const auto& inst : instances) {
      const auto& p = inst.trace.problem;
      measured m;
      m.family = inst.family;
      m.name = inst.name;
      m.buffers = p.buffers.size();
      m.lower_bound_bytes = memo::lower_bound_bytes(p);
      m.results.push_back(memo::greedy_by_size_solver{}.solve(p, options));
      m.results.push_back(memo::first_fit_solver{}.solve(p, options));
      m.results.push_back(memo::best_fit_heap_solver{}.solve(p, options));
      memo::dsa_solve_options seeded = options;
      seeded.warm_start = m.results[0].plan;
#if MEMO_HAS_LPSOLVE
      if (p.buffers.size() <= 20) m.results.push_back(memo::mip_solver{}.solve(p, seeded));
#endif
      m.results.push_back(memo::exact_solver{}.solve(p, seeded));
      if (!inst.trace.sections.empty()) {
        memo::bilevel_planner<> planner;
        m.bilevel = planner.plan(inst.trace, options);
      }
      m.caching = memo::simulate_caching_allocator(p);
      rows.push_back(std::move(m));
    }

    const auto scaling = heuristic_scaling(
        rng, quick ? std::vector<std::size_t>{1000, 10000} : std::vector<std::size_t>{10000, 100000, 1000000}, 5);

    // Summary figures.
    std::size_t small = 0, small_proven = 0;
    double worst_greedy = 1.0, sum_caching = 0.0;
    for (const auto& m : rows) {
      const auto& exact = m.results.back();
      if (m.buffers <= 1000) {
        ++small;
        small_proven += exact.proven_optimal && exact.seconds <= 10.0;
      }
      worst_greedy = std::max(worst_greedy, ratio(m.results[0].plan.peak_bytes, m.lower_bound_bytes));
      sum_caching += ratio(m.caching.reserved_peak_bytes, m.lower_bound_bytes);
    }
    const double proven_fraction = small == 0 ? 1.0 : static_cast<double>(small_proven) / static_cast<double>(small);

    if (json) {
      memo::json_writer j;
      j.begin_object().field("time_limit_seconds", time_limit).field("quick", quick);
      j.key("instances").begin_array();
      for (const auto& m : rows) {
        j.begin_object()
            .field("family", m.family)
            .field("name", m.name)
            .field("buffers", m.buffers)
            .field("lower_bound_bytes", m.lower_bound_bytes);
        j.key("solvers").begin_array();
        for (const auto& r : m.results) memo::write_json(j, r);
        j.end_array();
        j.field("caching_reserved_over_lower_bound", ratio(m.caching.reserved_peak_bytes, m.lower_bound_bytes));
        if (m.bilevel) {
          j.key("bilevel")
              .begin_object()
              .field("peak_over_flat_lower_bound", ratio(m.bilevel->plan.peak_bytes, m.lower_bound_bytes))
              .field("seconds", m.bilevel->seconds)
              .field("level1_solves", m.bilevel->level1_solves)
              .field("sections", m.bilevel->sections.size())
              .end_object();
        }
        j.end_object();
      }
      j.end_array();
      j.key("scaling").begin_array();
      for (const auto& r : scaling) {
        j.begin_object()
            .field("buffers", r.buffers)
            .field("solver", r.solver)
            .field("seconds_median", memo::spread_of(r.seconds).median)
            .field("seconds_min", *std::min_element(r.seconds.begin(), r.seconds.end()))
            .field("seconds_max", *std::max_element(r.seconds.begin(), r.seconds.end()))
            .field("rounds", r.seconds.size())
            .field("peak_over_lower_bound", r.peak_over_lower_bound)
            .end_object();
      }
      j.end_array();
      j.key("summary")
          .begin_object()
          .field("instances_up_to_1000_buffers", small)
          .field("exact_proven_within_10s_fraction", proven_fraction)
          .field("worst_greedy_size_over_lower_bound", worst_greedy)
          .field("mean_caching_reserved_over_lower_bound", sum_caching / static_cast<double>(rows.size()))
          .end_object();
      j.end_object();
      std::cout << j.str() << "\n";
      return 0;
    }

    std::printf("plan_bench: peak / lower bound per solver (exact: time limit %.1f s)\n\n", time_limit);
    std::printf("%-15s %-20s %6s %10s %8s %8s %8s %8s %6s %8s %9s %8s\n", "family", "instance", "bufs",
                "LB", "g-size", "1st-fit", "heap", "exact", "proven", "exact s", "bilevel", "caching");
    for (const auto& m : rows) {
      const auto& exact = m.results.back();
      char bilevel[32] = "-";
      if (m.bilevel) {
        std::snprintf(bilevel, sizeof bilevel, "%.4f", ratio(m.bilevel->plan.peak_bytes, m.lower_bound_bytes));
      }
      std::printf("%-15s %-20s %6zu %10s %8.4f %8.4f %8.4f %8.4f %6s %8.3f %9s %8.3f\n", m.family.c_str(),
                  m.name.c_str(), m.buffers, memo::format_bytes(m.lower_bound_bytes).c_str(),
                  ratio(m.results[0].plan.peak_bytes, m.lower_bound_bytes),
                  ratio(m.results[1].plan.peak_bytes, m.lower_bound_bytes),
                  ratio(m.results[2].plan.peak_bytes, m.lower_bound_bytes),
                  ratio(exact.plan.peak_bytes, m.lower_bound_bytes), exact.proven_optimal ? "yes" : "no",
                  exact.seconds, bilevel, ratio(m.caching.reserved_peak_bytes, m.lower_bound_bytes));
    }
#if MEMO_HAS_LPSOLVE
    std::printf("\nMIP (lp_solve) on instances of <= 20 buffers:\n");
    for (const auto& m : rows) {
      if (m.results.size() < 5) continue;
      const auto& mip = m.results[3];
      std::printf("  %-15s %-14s mip %.4f (%s, %.3f s)  exact %.4f (%.3f s)\n", m.family.c_str(), m.name.c_str(),
                  ratio(mip.plan.peak_bytes, m.lower_bound_bytes), mip.proven_optimal ? "proven" : "not proven",
                  mip.seconds, ratio(m.results.back().plan.peak_bytes, m.lower_bound_bytes),
                  m.results.back().seconds);
    }
#endif
    std::printf("\nbi-level planner on GPT traces (the 7B shape model and recorded GPT-2 steps):\n");
    for (const auto& m : rows) {
      if (!m.bilevel || (m.family != "gpt-7b" && m.family != "gpt2-recorded")) continue;
      std::printf("  %-22s %zu sections, %zu level-1 solves: %.3f s, peak %.4f x flat LB; flat exact %.4f x in %.3f s (%s)\n",
                  m.name.c_str(), m.bilevel->sections.size(), m.bilevel->level1_solves, m.bilevel->seconds,
                  ratio(m.bilevel->plan.peak_bytes, m.lower_bound_bytes),
                  ratio(m.results.back().plan.peak_bytes, m.lower_bound_bytes), m.results.back().seconds,
                  m.results.back().proven_optimal ? "proven" : "not proven");
    }
    std::printf("\nheuristics against size (random-medium, %zu rounds interleaved): seconds median [min, max]\n",
                scaling.empty() ? std::size_t{0} : scaling.front().seconds.size());
    for (const auto& r : scaling) {
      std::printf("  %8zu buffers  %-14s %8.3f s [%.3f, %.3f]  peak %.4f x LB\n", r.buffers, r.solver.c_str(),
                  memo::spread_of(r.seconds).median, *std::min_element(r.seconds.begin(), r.seconds.end()),
                  *std::max_element(r.seconds.begin(), r.seconds.end()), r.peak_over_lower_bound);
    }
    std::printf("\nsummary: exact proves optimality within %.1f s on %zu of %zu instances with <= 1000 buffers "
                "(%.1f%%);\n"
                "         worst greedy-by-size %.4f x LB; caching allocator reserves %.3f x LB on average\n",
                time_limit, small_proven, small, 100.0 * proven_fraction, worst_greedy,
                sum_caching / static_cast<double>(rows.size()));
    return 0;
  } catch (const memo::error& e) {
    std::cerr << "plan_bench: error: " << e.message() << "\n";
    return 1;
  }
}

int main(int argc, char** argv) {
  return memo::run_command("plan_bench", "usage: plan_bench [--quick] [--json] [--time-limit S] [--seed N]\n",
                           [&] { return bench_main(argc, argv); });
}
