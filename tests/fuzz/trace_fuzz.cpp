// libFuzzer target: the request-trace parser, the heuristics, the bi-level
// planner and the SVG writer. Any input either parses into a trace that
// passes the problem checks and round-trips through write_trace, whose
// greedy plan and bi-level plans (greedy inner solvers; on small traces the
// exact search at both levels too) pass an independent
// pairwise validator (fuzz/independent_check.hpp), and whose picture is a
// complete SVG; or raises memo::error. Anything else (a crash, a sanitizer
// report, another exception, a failed check) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "independent_check.hpp"
#include "memo/plan/bilevel_planner.hpp"
#include "memo/plan/exact_solver.hpp"
#include "memo/plan/greedy.hpp"
#include "memo/plan/plan_io.hpp"
#include "memo/plan/trace.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  memo::memory_trace trace;
  try {
    trace = memo::parse_trace(text, "fuzz");
  } catch (const memo::error&) {
    return 0;
  }
  memo::check_problem(trace.problem);  // a parsed trace is always a valid problem
  const auto back = memo::parse_trace(memo::write_trace(trace), "round trip");
  if (!(back.problem.buffers == trace.problem.buffers) || !(back.sections == trace.sections)) std::abort();
  if (trace.problem.buffers.size() > 200) return 0;
  if (fuzz::lower_bound(trace.problem) != memo::lower_bound_bytes(trace.problem)) std::abort();
  try {
    const auto r = memo::best_greedy_solver{}.solve(trace.problem);
    fuzz::require_independently_valid(trace.problem, r.plan);
    fuzz::require_sound_svg(trace.problem, r.plan, memo::plan_svg(trace.problem, r.plan, text.substr(0, 40)));
  } catch (const memo::error&) {
  }
  try {
    memo::bilevel_planner<memo::any_dsa_solver> planner{memo::greedy_by_size_solver{},
                                                         memo::best_greedy_solver{}};
    const auto r = planner.plan(trace);
    fuzz::require_independently_valid(trace.problem, r.plan);
    if (r.plan.peak_bytes < r.flat_lower_bound_bytes) std::abort();
  } catch (const memo::error&) {
    // sections that overlap, or a plan past 2^64: refused, never wrapped
  }
  // The default planner (the exact search at both levels) on small traces.
  if (trace.problem.buffers.size() <= 24) {
    try {
      memo::dsa_solve_options options;
      options.time_limit_seconds = 1.0;
      memo::bilevel_planner<> planner;
      const auto r = planner.plan(trace, options);
      fuzz::require_independently_valid(trace.problem, r.plan);
      if (r.plan.peak_bytes < r.flat_lower_bound_bytes) std::abort();
    } catch (const memo::error&) {
    }
  }
  return 0;
}
