// Tests of the exact DSA search with helper threads (exact_options::threads):
// the answers of a multi-threaded solve against the independent references
// of dsa_reference.hpp (brute force, load bound, plan validator). Runs under
// ThreadSanitizer in CI.
#include "memo/plan/exact_solver.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "dsa_reference.hpp"

using namespace dsa_reference;
using memo::dsa_problem;
using memo::dsa_solve_options;

TEST_CASE("exact threads: small instances equal the brute force, proven, with 2 and 3 threads") {
  std::mt19937_64 rng(17);
  for (int trial = 0; trial < 60; ++trial) {
    const std::size_t n = 1 + static_cast<std::size_t>(trial % 8);
    const auto buffers = random_buffers(rng, n, 2 + trial % 6, trial % 3 == 0 ? 4 : 20, trial % 4 == 1);
    const std::uint64_t optimum = brute_force_peak(buffers);
    for (const unsigned threads : {2u, 3u}) {
      INFO("trial " << trial << ", " << threads << " threads");
      memo::exact_options options;
      options.threads = threads;
      const auto result = memo::exact_solver(options).solve(dsa_problem{buffers, {}}, {});
      CHECK(independent_peak(buffers, result.plan.offsets) == result.plan.peak_bytes);
      CHECK(result.plan.peak_bytes == optimum);
      CHECK(result.proven_optimal);
    }
  }
}

TEST_CASE("exact threads: cut rectangles are packed at the lower bound, and one byte less is refused") {
  // Every instant carries exactly the rectangle's bytes: the plan at the
  // load bound leaves no byte free, the decisions where the helper threads'
  // restarts find the plans.
  std::mt19937_64 rng(23);
  for (int trial = 0; trial < 12; ++trial) {
    const std::size_t pieces = 20 + static_cast<std::size_t>(trial) * 10;
    const auto buffers = cut_rectangle(rng, pieces, 4 * static_cast<std::int64_t>(pieces), 4096);
    const auto bound = static_cast<std::uint64_t>(load_bound128(buffers));
    REQUIRE(bound == 4096);
    memo::exact_options options;
    options.threads = 2;
    INFO("trial " << trial << ", " << buffers.size() << " buffers");
    const auto fitted = memo::exact_solver(options).solve(dsa_problem{buffers, bound}, {});
    CHECK(independent_peak(buffers, fitted.plan.offsets) == bound);
    const auto best = memo::exact_solver(options).solve(dsa_problem{buffers, {}}, {});
    CHECK(independent_peak(buffers, best.plan.offsets) == bound);
    CHECK(best.plan.peak_bytes == bound);
    CHECK(best.proven_optimal);
    if (buffers.size() <= 40) {
      CHECK_THROWS_AS(memo::exact_solver(options).solve(dsa_problem{buffers, bound - 1}, {}), memo::error);
    }
  }
}

TEST_CASE("exact threads: without restarts the extra threads do nothing, and the answer is the same") {
  std::mt19937_64 rng(29);
  const auto buffers = cut_rectangle(rng, 30, 60, 512);
  memo::exact_options options;
  options.threads = 4;
  options.restarts = false;
  const auto result = memo::exact_solver(options).solve(dsa_problem{buffers, {}}, {});
  CHECK(independent_peak(buffers, result.plan.offsets) == 512);
  CHECK(result.proven_optimal);
}

TEST_CASE("exact threads: a helper's restart decides, and its plan is the answer") {
  // With both restart shares 0 the calling thread runs complete searches
  // only; on cut rectangles of 150 to 250 buffers they take 100 to 1,700
  // nodes, and a helper's restart often gets there first (the helper path:
  // its search moved into the portfolio, its plan returned). Which thread
  // wins is the scheduler's choice, so instances are drawn until a helper
  // has decided at least once (idle, about every other instance; 200
  // instances leave a loaded machine no realistic way to miss), and every
  // answer is checked.
  std::mt19937_64 rng(31);
  std::uint64_t by_helpers = 0;
  for (int trial = 0; trial < 200 && by_helpers == 0; ++trial) {
    const std::size_t pieces = 150 + static_cast<std::size_t>(trial % 5) * 25;
    const auto buffers = cut_rectangle(rng, pieces, 4 * static_cast<std::int64_t>(pieces), 4096);
    memo::exact_options options;
    options.threads = 2;
    options.restart_share = 0;
    options.perfect_packing_share = 0;
    memo::exact_solver solver(options);
    dsa_solve_options limit;
    limit.time_limit_seconds = 30.0;
    const auto fitted = solver.solve(dsa_problem{buffers, 4096}, limit);
    INFO("trial " << trial << ", " << buffers.size() << " buffers");
    CHECK(independent_peak(buffers, fitted.plan.offsets) == 4096);
    by_helpers += solver.last_helper_decisions();
  }
  CHECK(by_helpers >= 1);
}
