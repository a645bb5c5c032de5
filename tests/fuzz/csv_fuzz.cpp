// libFuzzer target: the DSA benchmark CSV parser and the heuristics. Any
// input either parses into a problem that passes check_problem, whose lower
// bound equals a 128-bit recount, whose heuristic plans pass an independent
// pairwise validator (fuzz/independent_check.hpp) and round-trip through the
// plan CSV, and whose picture is a complete SVG; or raises memo::error.
// Anything else (a crash, a sanitizer report, another exception, a failed
// check) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "independent_check.hpp"
#include "memo/plan/greedy.hpp"
#include "memo/plan/plan_io.hpp"
#include "memo/plan/trace.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  memo::dsa_problem problem;
  try {
    problem = memo::parse_dsa_csv(text, "fuzz");
  } catch (const memo::error&) {
    return 0;
  }
  // A parsed CSV is within the limits every solver relies on.
  memo::check_problem(problem);
  if (problem.buffers.size() > 200) return 0;
  if (fuzz::lower_bound(problem) != memo::lower_bound_bytes(problem)) std::abort();
  for (int which = 0; which < 4; ++which) {
    memo::dsa_result r;
    try {
      switch (which) {
        case 0: r = memo::greedy_by_size_solver{}.solve(problem); break;
        case 1: r = memo::first_fit_solver{}.solve(problem); break;
        case 2: r = memo::best_fit_heap_solver{}.solve(problem); break;
        default: r = memo::best_greedy_solver{}.solve(problem); break;
      }
    } catch (const memo::error&) {
      continue;  // e.g. alignment padding past 2^64: refused, never wrapped
    }
    fuzz::require_independently_valid(problem, r.plan);
    if (r.plan.peak_bytes < r.lower_bound_bytes) std::abort();
    const auto plan = memo::parse_plan_csv(memo::write_plan_csv(problem, r.plan), problem);
    if (!(plan == r.plan)) std::abort();
    fuzz::require_sound_svg(problem, r.plan, memo::plan_svg(problem, r.plan, text.substr(0, 40)));
  }
  return 0;
}
