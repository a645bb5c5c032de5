// Tests for memo/plan/mip_solver.hpp: the MIP against the exact search (whose
// own tests compare it with brute force) and against hand-worked instances.
#include "memo/plan/mip_solver.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "memo/plan/exact_solver.hpp"

namespace {

using memo::dsa_buffer;
using memo::dsa_problem;

std::vector<dsa_buffer> random_buffers(std::mt19937_64& rng, std::size_t n, std::int64_t horizon,
                                       std::uint64_t max_size, bool aligned) {
  std::vector<dsa_buffer> buffers;
  for (std::size_t i = 0; i < n; ++i) {
    dsa_buffer b;
    b.id = 7 * i + 1;
    b.lower = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(horizon));
    b.upper = b.lower + 1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(horizon / 2 + 1));
    b.size_bytes = (1 + rng() % max_size) * (aligned ? 1 : 256);
    b.alignment = aligned ? (std::uint64_t{1} << (rng() % 4)) : 256;
    buffers.push_back(b);
  }
  return buffers;
}

memo::dsa_solve_options generous() {
  memo::dsa_solve_options options;
  options.time_limit_seconds = 60.0;
  return options;
}

}  // namespace

TEST_CASE("mip: equals the exact search on random instances up to 14 buffers") {
  std::mt19937_64 rng(17);
  memo::mip_solver mip;
  memo::exact_solver exact;
  int above_bound = 0;
  for (int trial = 0; trial < 48; ++trial) {
    const std::size_t n = 2 + static_cast<std::size_t>(trial % 13);
    dsa_problem problem{random_buffers(rng, n, 8, 12, trial % 3 == 0 && n <= 10), {}};
    INFO("trial " << trial << ", " << n << " buffers");
    const auto want = exact.solve(problem, generous());
    const auto got = mip.solve(problem, generous());
    REQUIRE(want.proven_optimal);
    CHECK(memo::validate(problem, got.plan).ok);
    CHECK(got.proven_optimal);
    CHECK(got.plan.peak_bytes == want.plan.peak_bytes);
    CHECK(got.lower_bound_bytes == want.lower_bound_bytes);
    CHECK(got.solver == "mip");
    if (want.plan.peak_bytes > want.lower_bound_bytes) ++above_bound;
  }
  CHECK(above_bound > 3);  // the comparison covers instances with fragmentation
}

TEST_CASE("mip: interchangeable buffers keep the optimum") {
  // Four copies of one buffer plus three others; the copies are ordered by the
  // symmetry rule. Compared with the exact search on random variants.
  std::mt19937_64 rng(41);
  memo::mip_solver mip;
  memo::exact_solver exact;
  int solved_by_mip = 0;  // the greedy start was not already at the bound
  for (int trial = 0; trial < 40; ++trial) {
    auto buffers = random_buffers(rng, 4, 6, 9, trial % 2 == 0);
    for (std::uint64_t copy = 0; copy < 3; ++copy) {
      auto b = buffers.front();
      b.id = 1000 + copy;
      buffers.push_back(b);
    }
    dsa_problem problem{buffers, {}};
    std::vector<std::uint64_t> greedy;
    if (memo::detail::lowest_fit_bound(problem.buffers, greedy) != memo::lower_bound_bytes(problem)) {
      ++solved_by_mip;
    }
    const auto got = mip.solve(problem, generous());
    CHECK(memo::validate(problem, got.plan).ok);
    CHECK(got.proven_optimal);
    CHECK(got.plan.peak_bytes == exact.solve(problem, generous()).plan.peak_bytes);
  }
  CHECK(solved_by_mip > 3);
}

TEST_CASE("mip: hand-worked instance") {
  // x [0,2) 2 B, y [1,3) 2 B, z [2,4) 2 B, w [0,4) 1 B: bound 5 at t = 1, 2,
  // reached by w at 0, x and z at 1, y at 3.
  dsa_problem problem{{{1, 2, 0, 2, 1}, {2, 2, 1, 3, 1}, {3, 2, 2, 4, 1}, {4, 1, 0, 4, 1}}, {}};
  memo::mip_solver mip;
  const auto result = mip.solve(problem, generous());
  CHECK(result.plan.peak_bytes == 5);
  CHECK(result.proven_optimal);
  // Alignment: a [0,2) 3 B, b [0,2) 4 B aligned to 4: only b at 0, a at 4
  // reaches 7.
  dsa_problem aligned{{{1, 3, 0, 2, 1}, {2, 4, 0, 2, 4}}, {}};
  const auto al = mip.solve(aligned, generous());
  CHECK(al.plan.peak_bytes == 7);
  CHECK(al.plan.offsets == std::vector<std::uint64_t>{4, 0});
}

TEST_CASE("mip: capacity modes") {
  std::mt19937_64 rng(23);
  memo::mip_solver mip;
  memo::exact_solver exact;
  int infeasible_cases = 0;
  for (int trial = 0; trial < 40 && infeasible_cases < 4; ++trial) {
    dsa_problem problem{random_buffers(rng, 8, 6, 10, true), {}};
    const auto optimum = exact.solve(problem, generous()).plan.peak_bytes;
    INFO("trial " << trial << " optimum " << optimum);
    problem.capacity_bytes = optimum;
    const auto fit = mip.solve(problem, generous());
    CHECK(fit.plan.peak_bytes == optimum);
    CHECK(memo::validate(problem, fit.plan).ok);
    if (optimum > memo::lower_bound_bytes(problem)) {
      ++infeasible_cases;
      problem.capacity_bytes = optimum - 1;
      const std::string expected = "capacity " + std::to_string(optimum - 1) + " bytes is infeasible";
      CHECK_THROWS_WITH_AS(mip.solve(problem, generous()), doctest::Contains(expected.c_str()),
                           memo::error);
    }
  }
  CHECK(infeasible_cases > 0);
}

TEST_CASE("mip: a zero time limit returns the warm start, marked not proven") {
  std::mt19937_64 rng(29);
  memo::mip_solver mip;
  bool saw_unproven = false;
  for (int trial = 0; trial < 20; ++trial) {
    dsa_problem problem{random_buffers(rng, 30, 10, 50, false), {}};
    memo::dsa_solve_options options;
    options.time_limit_seconds = 0.0;
    const auto result = mip.solve(problem, options);
    CHECK(memo::validate(problem, result.plan).ok);
    CHECK(result.plan.peak_bytes >= result.lower_bound_bytes);
    if (!result.proven_optimal) {
      saw_unproven = true;
      // The greedy start: never better than the exact optimum.
      memo::exact_solver exact;
      CHECK(result.plan.peak_bytes >= exact.solve(problem, generous()).plan.peak_bytes);
    }
  }
  CHECK(saw_unproven);
}

TEST_CASE("mip: a caller's warm start bounds the result") {
  dsa_problem problem{{{1, 5, 0, 3, 1}, {2, 6, 1, 4, 1}, {3, 2, 2, 5, 1}, {4, 3, 0, 2, 1}}, {}};
  memo::dsa_plan stacked{{0, 5, 11, 13}, 16};
  REQUIRE(memo::validate(problem, stacked).ok);
  memo::dsa_solve_options options = generous();
  options.warm_start = stacked;
  memo::mip_solver mip;
  memo::exact_solver exact;
  const auto result = mip.solve(problem, options);
  CHECK(result.plan.peak_bytes == exact.solve(problem, generous()).plan.peak_bytes);
  CHECK(result.proven_optimal);
}

TEST_CASE("mip: empty problem and malformed problems") {
  memo::mip_solver mip;
  const auto empty = mip.solve(dsa_problem{}, {});
  CHECK(empty.plan.offsets.empty());
  CHECK(empty.proven_optimal);
  CHECK_THROWS_AS(mip.solve(dsa_problem{{{1, 0, 0, 1, 1}}, {}}, {}), memo::error);
  CHECK_THROWS_WITH_AS(mip.solve(dsa_problem{{{1, 4, 0, 2, 1}, {2, 4, 1, 3, 1}}, 7}, {}),
                       doctest::Contains("below the lower bound 8"), memo::error);
}

TEST_CASE("mip: a warm start better than its own greedy is used, an invalid one ignored") {
  // The first random instance (fixed seed) whose optimum is below the
  // MIP's own greedy start.
  std::mt19937_64 rng(41);
  memo::exact_solver exact;
  dsa_problem problem;
  std::uint64_t greedy_peak = 0;
  memo::dsa_result optimum;
  for (int trial = 0; trial < 500; ++trial) {
    problem = dsa_problem{random_buffers(rng, 9, 6, 9, false), {}};
    std::vector<std::uint64_t> greedy_offsets;
    greedy_peak = memo::detail::lowest_fit_bound(problem.buffers, greedy_offsets);
    optimum = exact.solve(problem, generous());
    if (optimum.plan.peak_bytes < greedy_peak) break;
  }
  REQUIRE(optimum.plan.peak_bytes < greedy_peak);
  memo::mip_solver mip;
  // With no time to search, the result is the better warm start itself.
  memo::dsa_solve_options none;
  none.time_limit_seconds = 0.0;
  none.warm_start = optimum.plan;
  const auto warm = mip.solve(problem, none);
  CHECK(warm.plan == optimum.plan);
  CHECK(memo::validate(problem, warm.plan).ok);
  // Invalid warm starts are ignored: overlapping, misnumbered, and one whose
  // offset + size wraps past 2^64 to a small claimed peak.
  std::vector<std::uint64_t> wrapping = optimum.plan.offsets;
  wrapping[0] = ~std::uint64_t{0} - 255;  // aligned to 256; ends at or past 2^64
  std::uint64_t wrapped_peak = 1;  // what a 64-bit sum would claim for it
  for (std::size_t i = 1; i < wrapping.size(); ++i) {
    wrapped_peak = std::max(wrapped_peak, wrapping[i] + problem.buffers[i].size_bytes);
  }
  const std::vector<std::uint64_t> zeros(problem.buffers.size(), 0);
  for (const memo::dsa_plan& bad : {memo::dsa_plan{zeros, optimum.plan.peak_bytes}, memo::dsa_plan{{0}, 5},
                                   memo::dsa_plan{wrapping, wrapped_peak}}) {
    none.warm_start = bad;
    const auto r = mip.solve(problem, none);
    CHECK(memo::validate(problem, r.plan).ok);
    CHECK(r.plan.peak_bytes == greedy_peak);
  }
  // With time, the optimum either way.
  memo::dsa_solve_options time = generous();
  time.warm_start = memo::dsa_plan{zeros, optimum.plan.peak_bytes};
  CHECK(mip.solve(problem, time).plan.peak_bytes == optimum.plan.peak_bytes);
}
