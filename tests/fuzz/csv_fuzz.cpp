// libFuzzer target: the DSA benchmark CSV parser. Any input either parses
// into a problem that passes check_problem and gets a valid greedy plan, or
// raises memo::error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "memo/plan/greedy.hpp"
#include "memo/plan/trace.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  memo::dsa_problem problem;
  try {
    problem = memo::parse_dsa_csv(text, "fuzz");
  } catch (const memo::error&) {
    return 0;
  }
  try {
    memo::check_problem(problem);
  } catch (const memo::error&) {
    return 0;  // e.g. aligned sizes whose sum overflows 64 bits
  }
  if (problem.buffers.size() <= 200) {
    try {
      const auto r = memo::first_fit_solver{}.solve(problem);
      if (!memo::validate(problem, r.plan)) std::abort();
      const auto plan = memo::parse_plan_csv(memo::write_plan_csv(problem, r.plan), problem);
      if (!(plan == r.plan)) std::abort();
    } catch (const memo::error&) {
    }
  }
  return 0;
}
