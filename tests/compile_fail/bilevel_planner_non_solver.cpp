// expect: DsaSolver<
// The bi-level planner's inner solvers must satisfy memo::DsaSolver; a type
// without `solve(problem, options)` is rejected and the diagnostic names the
// concept.
#include "memo/plan/bilevel_planner.hpp"

struct not_a_solver {
  int solve(int) { return 0; }
};

int main() {
  memo::bilevel_planner<not_a_solver> planner;
  (void)planner;
}
