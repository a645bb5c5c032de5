// Plans the activation memory of a 4-layer model whose layers issue the
// requests of MEMO Figure 4, three ways: greedy, exact, and bi-level.
#include <iostream>

#include "memo/core/command_line.hpp"
#include "memo/plan/bilevel_planner.hpp"
#include "memo/plan/caching_allocator.hpp"
#include "memo/plan/exact_solver.hpp"
#include "memo/plan/greedy.hpp"
#include "memo/plan/trace.hpp"

int example_main() {
  // One layer: forward and backward, in the paper's request form.
  const memo::memory_trace layer = memo::parse_trace(R"(
section begin layer 0 forward
malloc 13 128MiB
malloc 14 128MiB
free 14 128MiB
malloc 15 256MiB
free 13 128MiB
malloc 16 512MiB
malloc 17 128MiB
malloc 18 128MiB
malloc 19 256MiB
free 17 128MiB
free 19 256MiB
free 18 128MiB
section end layer 0 forward
section begin layer 0 backward
malloc 20 512MiB
free 20 512MiB
malloc 21 1024MiB
malloc 22 256MiB
free 15 256MiB
malloc 23 128MiB
malloc 24 512MiB
free 21 1024MiB
free 22 256MiB
free 23 128MiB
free 24 512MiB
free 16 512MiB
section end layer 0 backward
)", "figure 4");

  // The model: forward of layers 0..3, then backward of layers 3..0.
  const memo::memory_trace model = memo::stack_layer_trace(layer, 4);
  const memo::dsa_problem& problem = model.problem;
  std::cout << problem.buffers.size() << " buffers, lower bound "
            << memo::format_bytes(memo::lower_bound_bytes(problem)) << "\n";

  memo::dsa_solve_options options;
  options.time_limit_seconds = 5.0;

  const memo::dsa_result greedy = memo::greedy_by_size_solver{}.solve(problem, options);
  memo::exact_solver exact;
  const memo::dsa_result best = exact.solve(problem, options);
  memo::bilevel_planner<> bilevel;  // exact search at both levels
  const memo::bilevel_result two_level = bilevel.plan(model, options);

  for (const auto* r : {&greedy, &best}) {
    memo::require_valid(problem, r->plan, r->solver);
    std::cout << r->solver << ": " << memo::format_bytes(r->plan.peak_bytes)
              << (r->proven_optimal ? " (optimal)" : "") << "\n";
  }
  memo::require_valid(problem, two_level.plan, "bilevel");
  std::cout << "bilevel: " << memo::format_bytes(two_level.plan.peak_bytes) << " from "
            << two_level.level1_solves << " level-1 solves\n";

  const auto caching = memo::simulate_caching_allocator(problem);
  std::cout << "caching allocator reserves " << memo::format_bytes(caching.reserved_peak_bytes)
            << "\n";

  // The plan as CSV (id,offset,size,lower,upper), ready to save.
  std::cout << memo::write_plan_csv(problem, best.plan).substr(0, 60) << "...\n";
  return 0;
}

int main(int argc, char** argv) {
  return memo::run_command("plan_example", "usage: plan_example (no arguments)\n", [&] {
    memo::command_arguments(argc, argv).none();
    return example_main();
  });
}
