// Tests for memo/plan/exact_solver.hpp against an independent brute force.
#include "memo/plan/exact_solver.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <initializer_list>
#include <limits>
#include <chrono>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "dsa_reference.hpp"

namespace {

using namespace dsa_reference;

using memo::dsa_buffer;
using memo::dsa_problem;

// The bench CSV form id,lower,upper,size.
std::vector<dsa_buffer> from_rows(std::initializer_list<std::array<std::uint64_t, 4>> rows) {
  std::vector<dsa_buffer> buffers;
  for (const auto& r : rows) {
    buffers.push_back({r[0], r[3], static_cast<std::int64_t>(r[1]), static_cast<std::int64_t>(r[2]), 1});
  }
  return buffers;
}

}  // namespace

TEST_CASE("exact: equals brute force on random instances") {
  std::mt19937_64 rng(7);
  memo::exact_solver solver;
  for (int trial = 0; trial < 400; ++trial) {
    const std::size_t n = 1 + static_cast<std::size_t>(trial % 8);
    const std::int64_t horizon = 2 + trial % 7;
    dsa_problem problem{random_buffers(rng, n, horizon, trial % 3 == 0 ? 4 : 20, false), {}};
    const auto result = solver.solve(problem, {});
    INFO("trial " << trial);
    CHECK(memo::validate(problem, result.plan).ok);
    CHECK(result.proven_optimal);
    CHECK(result.plan.peak_bytes == brute_force_peak(problem.buffers));
    CHECK(result.lower_bound_bytes == memo::lower_bound_bytes(problem));
    CHECK(result.solver == "exact");
  }
}

TEST_CASE("exact: equals brute force on nine-buffer instances") {
  std::mt19937_64 rng(9);
  memo::exact_solver solver;
  for (int trial = 0; trial < 6; ++trial) {
    dsa_problem problem{random_buffers(rng, 9, 5, 30, trial % 2 == 1), {}};
    const auto result = solver.solve(problem, {});
    CHECK(result.proven_optimal);
    CHECK(result.plan.peak_bytes == brute_force_peak(problem.buffers));
  }
}

TEST_CASE("exact: respects alignment and still matches brute force") {
  std::mt19937_64 rng(11);
  memo::exact_solver solver;
  for (int trial = 0; trial < 200; ++trial) {
    const std::size_t n = 1 + static_cast<std::size_t>(trial % 7);
    dsa_problem problem{random_buffers(rng, n, 5, 13, true), {}};
    const auto result = solver.solve(problem, {});
    INFO("trial " << trial);
    for (std::size_t i = 0; i < n; ++i) {
      CHECK(result.plan.offsets[i] % problem.buffers[i].alignment == 0);
    }
    CHECK(memo::validate(problem, result.plan).ok);
    CHECK(result.proven_optimal);
    CHECK(result.plan.peak_bytes == brute_force_peak(problem.buffers));
  }
}

// Every way a search may rank buffers and pick the one it branches on: the
// complete searches' canonical order, and the dives' tight-section
// branching with each fit order, leftmost or most constrained, with light
// or full bounds.
std::vector<memo::detail::search_strategy> every_strategy() {
  using fit = memo::detail::search_strategy::fit_order;
  std::vector<memo::detail::search_strategy> all = {{}};
  for (const fit order : {fit::rank, fit::flush, fit::contact, fit::contact_flush}) {
    for (const bool leftmost : {false, true}) {
      for (const bool light : {false, true}) all.push_back({true, leftmost, order, light});
    }
  }
  return all;
}

TEST_CASE("exact: every ranking and strategy decides exactly (found at the optimum, exhausted below it)") {
  // The portfolio may take its proof from any search, restarts included, so
  // each one on its own must be complete.
  using search = memo::detail::dsa_search;
  std::mt19937_64 rng(31);
  const auto far = search::clock::now() + std::chrono::hours(1);
  const auto strategies = every_strategy();
  for (int trial = 0; trial < 120; ++trial) {
    const std::size_t n = 2 + static_cast<std::size_t>(trial % 7);
    const auto buffers = random_buffers(rng, n, 5, 12, trial % 2 == 0);
    const std::uint64_t optimum = brute_force_peak(buffers);
    INFO("trial " << trial << " optimum " << optimum);
    // A small membership budget on odd trials: some buffers are summarised.
    const memo::detail::section_table table(buffers, trial % 2 == 1 ? 3 : 1000);
    memo::detail::search_workspace work;
    for (int variant = 0; variant < 11; ++variant) {
      const auto ranking = variant < 9 ? static_cast<search::ranking>(variant) : search::ranking::shuffled;
      const auto& strategy = strategies[static_cast<std::size_t>(trial + variant) % strategies.size()];
      INFO("variant " << variant << " tight " << strategy.tight_first << " leftmost " << strategy.leftmost);
      search at(buffers, table, ranking, static_cast<std::uint64_t>(variant), {}, strategy);
      REQUIRE(at.search(work, optimum, optimum, far) == search::outcome::found);
      CHECK(at.best_peak() == optimum);
      memo::dsa_plan plan;
      plan.offsets.resize(n);
      for (std::uint32_t r = 0; r < n; ++r) plan.offsets[at.original_index(r)] = at.best_offsets()[r];
      plan.peak_bytes = at.best_peak();
      CHECK(independent_peak(buffers, plan.offsets) == optimum);
      search below(buffers, table, ranking, static_cast<std::uint64_t>(variant), {}, strategy);
      CHECK(below.search(work, optimum - 1, optimum - 1, far) == search::outcome::exhausted);
    }
  }
}

// Mixed alignments (1 to 32 bytes) and sizes of any byte count, so that
// alignment slots and padding leave gaps no live sum sees.
std::vector<dsa_buffer> mixed_alignment_buffers(std::mt19937_64& rng, std::size_t n, std::int64_t horizon) {
  std::vector<dsa_buffer> buffers;
  for (std::size_t i = 0; i < n; ++i) {
    dsa_buffer b;
    b.id = 200 + i;
    b.lower = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(horizon));
    b.upper = b.lower + 1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(horizon));
    b.size_bytes = 1 + rng() % (rng() % 2 == 0 ? 9 : 40);
    b.alignment = std::uint64_t{1} << (rng() % 6);
    buffers.push_back(b);
  }
  return buffers;
}

TEST_CASE("exact: the alignment-slot bound is a lower bound, and mixed alignments are solved to the optimum") {
  using search = memo::detail::dsa_search;
  std::mt19937_64 rng(97);
  const auto far = search::clock::now() + std::chrono::hours(1);
  const auto strategies = every_strategy();
  int raised = 0;  // instances where the bound is above the largest live sum
  int met = 0;     // ... and meets the optimum
  for (int trial = 0; trial < 300; ++trial) {
    const std::size_t n = 1 + static_cast<std::size_t>(trial % 7);
    const auto buffers = mixed_alignment_buffers(rng, n, 2 + trial % 4);
    const std::uint64_t optimum = brute_force_peak(buffers);
    INFO("trial " << trial << " optimum " << optimum);
    const memo::detail::section_table table(buffers, trial % 3 == 2 ? 2 : 1000);
    const std::uint64_t bound = memo::detail::alignment_slot_bound(buffers, table);
    CHECK(bound <= optimum);
    CHECK(bound >= table.lower_bound);
    if (bound > table.lower_bound) ++raised;
    if (bound > table.lower_bound && bound == optimum) ++met;
    // The solver, with the bounds on and off: the optimum, proven.
    for (const bool on : {true, false}) {
      memo::exact_options options;
      options.alignment_bounds = on;
      const dsa_problem problem{buffers, {}};
      const auto result = memo::exact_solver(options).solve(problem, {});
      CHECK(independent_peak(buffers, result.plan.offsets) == result.plan.peak_bytes);
      CHECK(result.plan.peak_bytes == optimum);
      CHECK(result.proven_optimal);
      CHECK(result.lower_bound_bytes == memo::lower_bound_bytes(problem));
      // A capacity one byte under the optimum (and not under the live sum,
      // which the problem check rejects first) is proven infeasible.
      if (optimum > result.lower_bound_bytes) {
        const dsa_problem tight{buffers, optimum - 1};
        CHECK_THROWS_WITH_AS(memo::exact_solver(options).solve(tight, {}), doctest::Contains("is infeasible"),
                             memo::error);
      }
    }
    // Every search on its own: found at the optimum, exhausted one byte below.
    memo::detail::search_workspace work;
    for (int variant = 0; variant <= static_cast<int>(search::ranking::shuffled); ++variant) {
      const auto ranking = static_cast<search::ranking>(variant);
      const auto& strategy = strategies[static_cast<std::size_t>(trial + variant) % strategies.size()];
      search at(buffers, table, ranking, static_cast<std::uint64_t>(variant), {}, strategy);
      CHECK(at.search(work, optimum, optimum, far) == search::outcome::found);
      if (optimum == 0) continue;
      search below(buffers, table, ranking, static_cast<std::uint64_t>(variant), {}, strategy);
      CHECK(below.search(work, optimum - 1, optimum - 1, far) == search::outcome::exhausted);
    }
  }
  // The bound must bite: well above the live sum on many of these, and on
  // some it is the optimum itself.
  CHECK(raised > 50);
  CHECK(met > 10);
  MESSAGE("alignment-slot bound above the live sum on " << raised << " of 300, equal to the optimum on " << met);
}

TEST_CASE("exact: alignment-slot bound, hand-worked") {
  // Three 1-byte buffers aligned to 16, live together: two whole slots and
  // one byte, 33, where the live sum is 3. A fourth, 4-byte and 1-aligned,
  // fits in a slot's gap (optimum stays 33) and raises the smallest-level
  // bound to 3 + 4 = 7 only.
  std::vector<dsa_buffer> buffers = {{0, 1, 0, 2, 16}, {1, 1, 0, 2, 16}, {2, 1, 0, 2, 16}};
  const memo::detail::section_table three(buffers, 100);
  CHECK(memo::detail::alignment_slot_bound(buffers, three) == 33);
  buffers.push_back({3, 4, 0, 2, 1});
  const memo::detail::section_table four(buffers, 100);
  CHECK(memo::detail::alignment_slot_bound(buffers, four) == 33);
  const auto result = memo::exact_solver().solve(dsa_problem{buffers, {}}, {});
  CHECK(result.plan.peak_bytes == 33);
  CHECK(result.proven_optimal);
  CHECK(result.lower_bound_bytes == 7);
  // Sizes 3, 5, 6 aligned to 4 at one instant: slots 4 + 8 + 8, less the
  // largest tail (5's, 3 bytes), which the topmost need not keep: 17.
  const std::vector<dsa_buffer> pads = {{0, 3, 0, 1, 4}, {1, 5, 0, 1, 4}, {2, 6, 0, 1, 4}};
  const memo::detail::section_table padded(pads, 100);
  CHECK(memo::detail::alignment_slot_bound(pads, padded) == 4 + 8 + 8 - 3);
  CHECK(brute_force_peak(pads) == 17);
}

// Every value a buffer can end at (offset a multiple of its alignment), up
// to `limit`, by enumeration.
std::vector<std::uint64_t> possible_ends(const std::vector<dsa_buffer>& buffers, std::uint64_t limit) {
  std::vector<std::uint64_t> ends;
  for (const auto& b : buffers) {
    for (std::uint64_t at = 0; at + b.size_bytes <= limit; at += b.alignment) ends.push_back(at + b.size_bytes);
  }
  std::sort(ends.begin(), ends.end());
  return ends;
}

TEST_CASE("exact: a peak is the end of a buffer at an aligned offset") {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    const auto buffers = mixed_alignment_buffers(rng, 1 + static_cast<std::size_t>(trial % 5), 3);
    const auto ends = possible_ends(buffers, 400);
    for (std::uint64_t v = 0; v < 300; ++v) {
      INFO("trial " << trial << " value " << v);
      const auto below = memo::detail::peak_at_or_below(buffers, v);
      const auto at_or_below = std::upper_bound(ends.begin(), ends.end(), v);
      if (at_or_below == ends.begin()) {
        CHECK(!below.has_value());
      } else {
        REQUIRE(below.has_value());
        CHECK(*below == *(at_or_below - 1));
      }
      CHECK(memo::detail::peak_at_or_above(buffers, v) == *std::lower_bound(ends.begin(), ends.end(), v));
    }
    // The solver's peak is always one of them.
    const auto result = memo::exact_solver().solve(dsa_problem{buffers, {}}, {});
    CHECK(std::binary_search(ends.begin(), ends.end(), result.plan.peak_bytes));
  }
  // At the top of 64 bits: no end past 2^64 - 1 is formed.
  const std::uint64_t top = std::numeric_limits<std::uint64_t>::max();
  const std::vector<dsa_buffer> huge = {{0, top - 5, 0, 1, 4}, {1, 3, 0, 1, std::uint64_t{1} << 63}};
  CHECK(memo::detail::peak_at_or_below(huge, top) == top - 5 + 4);
  CHECK(memo::detail::peak_at_or_below(huge, 2) == std::nullopt);
  CHECK(memo::detail::peak_at_or_above(huge, top - 2) == top - 1);
  CHECK(memo::detail::peak_at_or_above(huge, top) == top);  // none fits: saturated
  CHECK(memo::detail::peak_at_or_above(huge, 4) == (std::uint64_t{1} << 63) + 3);
}

TEST_CASE("exact: a lower bound rounded up to a possible peak is tight, and proves at once") {
  // A 1-byte buffer aligned to 16 and a 4-byte one aligned to 4, live
  // together: the padded live sum is 4 + 4 - 3 = 5 (the 1-byte one on top,
  // keeping no padding), the 16-byte slots give 1. No plan peaks at 5, 6
  // or 7: a peak is 16k + 1 or 4k + 4. The bound rounds up to 8, which is
  // the optimum (the 4-byte one at 4 above the 1-byte one at 0).
  const std::vector<dsa_buffer> buffers = {{0, 1, 0, 2, 16}, {1, 4, 0, 2, 4}};
  const memo::detail::section_table table(buffers, 100);
  CHECK(memo::detail::alignment_slot_bound(buffers, table) == 5);
  CHECK(memo::detail::peak_at_or_above(buffers, 5) == 8);
  CHECK(brute_force_peak(buffers) == 8);
  memo::exact_solver solver;
  const auto result = solver.solve(dsa_problem{buffers, {}}, {});
  CHECK(independent_peak(buffers, result.plan.offsets) == 8);
  CHECK(result.proven_optimal);
  CHECK(result.lower_bound_bytes == 5);
  // A capacity of 7 is above the live sum and infeasible by the bound alone.
  CHECK_THROWS_WITH_AS(solver.solve(dsa_problem{buffers, 7}, {}), doctest::Contains("lower bound is 8 bytes"),
                       memo::error);
  CHECK(solver.solve(dsa_problem{buffers, 8}, {}).plan.peak_bytes == 8);
}

// Ten buffers of the bench's mixed-align family (seed 0 of 10 buffers):
// sizes of any byte count, alignments of 256 B or 4 KiB; the optimum is
// 1.3 % above the live sum.
std::vector<dsa_buffer> mixed_align_ten() {
  return {{0, 3408, 16, 62, 4096},   {1, 304, 14, 131, 4096},   {2, 297909, 1, 10, 256},
          {3, 418510, 10, 107, 256}, {4, 180, 8, 68, 4096},     {5, 244, 16, 138, 4096},
          {6, 7348, 4, 99, 4096},    {7, 3409, 7, 80, 4096},    {8, 278822, 10, 92, 256},
          {9, 286778, 17, 100, 4096}};
}

TEST_CASE("exact: remembered states cut repeated subtrees and keep every search exact") {
  using search = memo::detail::dsa_search;
  const auto far = search::clock::now() + std::chrono::hours(1);
  memo::exact_options without;
  without.transpositions = false;
  // Against the brute force on random mixed alignments: with and without
  // the table, every complete ranking finds the optimum and exhausts one
  // byte below it; and one search object asked again, with the table it
  // kept, gives the same answers (below the optimum, in rounds of doubling
  // node limits, as the portfolio runs it, with the table carried over; at
  // the optimum, after a lower target, whose states are not valid there).
  std::mt19937_64 rng(61);
  for (int trial = 0; trial < 150; ++trial) {
    const std::size_t n = 2 + static_cast<std::size_t>(trial % 7);
    const auto buffers = mixed_alignment_buffers(rng, n, 2 + trial % 4);
    const std::uint64_t optimum = brute_force_peak(buffers);
    if (optimum == 0) continue;
    INFO("trial " << trial << " optimum " << optimum);
    const memo::detail::section_table table(buffers, trial % 3 == 2 ? 2 : 1000);
    memo::detail::search_workspace work;
    for (int variant = 0; variant < static_cast<int>(search::ranking::shuffled); ++variant) {
      const auto ranking = static_cast<search::ranking>(variant);
      INFO("ranking " << variant);
      for (const auto& options : {memo::exact_options{}, without}) {
        search below(buffers, table, ranking, 0, options);
        auto outcome = search::outcome::out_of_nodes;
        for (std::uint64_t limit = 3; outcome == search::outcome::out_of_nodes; limit *= 2) {
          outcome = below.search(work, optimum - 1, optimum - 1, far, limit);
        }
        CHECK(outcome == search::outcome::exhausted);
        CHECK(below.search(work, optimum, optimum, far) == search::outcome::found);
        CHECK(below.best_peak() == optimum);
      }
    }
  }
  // On the ten 256 B / 4 KiB buffers: the same optimum as the brute force,
  // proven by both; with the table the complete search exhausts one byte
  // below the optimum in a fraction of the nodes, so within a budget where
  // the search without it is still running.
  const auto buffers = mixed_align_ten();
  const std::uint64_t optimum = brute_force_peak(buffers);
  const memo::detail::section_table table(buffers, 1000);
  memo::detail::search_workspace work;
  search plain(buffers, table, search::ranking::total_width_area, 0, without);
  REQUIRE(plain.search(work, optimum - 1, optimum - 1, far) == search::outcome::exhausted);
  search remembering(buffers, table, search::ranking::total_width_area, 0, {});
  REQUIRE(remembering.search(work, optimum - 1, optimum - 1, far) == search::outcome::exhausted);
  MESSAGE("one byte below the optimum: exhausted in " << plain.nodes() << " nodes without the table, "
                                                      << remembering.nodes() << " with it");
  CHECK(3 * remembering.nodes() < plain.nodes());
  search plain_budget(buffers, table, search::ranking::total_width_area, 0, without);
  CHECK(plain_budget.search(work, optimum - 1, optimum - 1, far, remembering.nodes()) ==
        search::outcome::out_of_nodes);
  // The whole solve with the table proves the brute force's optimum. No
  // time limit to speak of, so the proof does not depend on the machine's
  // speed (the search is deterministic; without the table it needs about
  // seven times the nodes, which the sanitizer builds take tens of seconds
  // over, so it is not run here).
  memo::exact_solver solver;
  memo::dsa_solve_options unlimited;
  unlimited.time_limit_seconds = 1e6;
  const auto result = solver.solve(dsa_problem{buffers, {}}, unlimited);
  CHECK(independent_peak(buffers, result.plan.offsets) == optimum);
  CHECK(result.proven_optimal);
  CHECK(result.lower_bound_bytes < optimum);
}

TEST_CASE("exact: perfect packings of a cut rectangle are found by every strategy") {
  // Every section is tight from the start, so the dives branch on tight
  // sections throughout. Each strategy must find the plan at the lower
  // bound, and prove that one byte less is infeasible.
  using search = memo::detail::dsa_search;
  std::mt19937_64 rng(43);
  const auto far = search::clock::now() + std::chrono::hours(1);
  const auto strategies = every_strategy();
  for (int trial = 0; trial < 12; ++trial) {
    const auto buffers = cut_rectangle(rng, 6 + static_cast<std::size_t>(trial) * 3, 12, 64);
    const std::uint64_t bound = static_cast<std::uint64_t>(load_bound128(buffers));
    REQUIRE(bound == 64);
    INFO("trial " << trial << ", " << buffers.size() << " buffers");
    const memo::detail::section_table table(buffers, 1000);
    memo::detail::search_workspace work;
    for (const auto& strategy : strategies) {
      INFO("tight " << strategy.tight_first << " leftmost " << strategy.leftmost << " light "
                    << strategy.light_bounds);
      search at(buffers, table, search::ranking::shuffled, static_cast<std::uint64_t>(trial), {}, strategy);
      REQUIRE(at.search(work, bound, bound, far) == search::outcome::found);
      std::vector<std::uint64_t> offsets(buffers.size());
      for (std::uint32_t r = 0; r < buffers.size(); ++r) offsets[at.original_index(r)] = at.best_offsets()[r];
      CHECK(independent_peak(buffers, offsets) == bound);
      if (buffers.size() <= 12) {
        search below(buffers, table, search::ranking::shuffled, static_cast<std::uint64_t>(trial), {}, strategy);
        CHECK(below.search(work, bound - 1, bound - 1, far) == search::outcome::exhausted);
      }
    }
    // The solver, at capacity = lower bound and minimising: the plan at the
    // bound, proven.
    memo::exact_solver solver;
    dsa_problem fit{buffers, bound};
    const auto fitted = solver.solve(fit, {});
    CHECK(independent_peak(buffers, fitted.plan.offsets) == bound);
    CHECK(fitted.proven_optimal);
    const auto best = solver.solve(dsa_problem{buffers, {}}, {});
    CHECK(best.plan.peak_bytes == bound);
    CHECK(best.proven_optimal);
  }
}

TEST_CASE("exact: the section bounds' shortcuts give the tree of the plain evaluation") {
  // The search sums a section's members per lowest start instead of
  // sorting them, and takes a section's bounds from the section before when
  // no unplaced buffer starts or ends between them. Both must leave every
  // bound as it was: the same search with the plain evaluation
  // (`use_reference_bounds`) must visit the same number of nodes and end
  // the same way, with the same plan. Instances: cut rectangles (every
  // section tight), dense random ones of up to 60 buffers (sections with
  // many distinct lowest starts), mixed alignments (alignment slots), and
  // staircases (more than 16 distinct lowest starts in a section, where the
  // sums give way to a sort), under every strategy, with full and with tiny
  // section membership.
  using search = memo::detail::dsa_search;
  std::mt19937_64 rng(59);
  const auto far = search::clock::now() + std::chrono::hours(1);
  const auto strategies = every_strategy();
  // A staircase: k one-tick buffers of sizes k down to 1, and above them
  // buffers from each tick to the end, one byte each. Once the steps are
  // placed, the last tick holds k buffers at k distinct lowest starts.
  auto staircase = [](std::int64_t k) {
    std::vector<dsa_buffer> buffers;
    for (std::int64_t i = 0; i < k; ++i) {
      buffers.push_back({buffers.size(), static_cast<std::uint64_t>(k - i), i, i + 1, 1});
      buffers.push_back({buffers.size(), 1, i, k, 1});
    }
    return buffers;
  };
  std::size_t compared = 0;
  const int trials = 51;
  for (int trial = 0; trial < trials; ++trial) {
    std::vector<dsa_buffer> buffers;
    switch (trial < 48 ? trial % 3 : 3) {
      case 0: buffers = cut_rectangle(rng, 10 + static_cast<std::size_t>(trial), 16, 96); break;
      case 1: buffers = random_buffers(rng, 20 + static_cast<std::size_t>(trial), 8, 50, trial % 2 == 0); break;
      case 2: buffers = mixed_alignment_buffers(rng, 12 + static_cast<std::size_t>(trial) / 2, 10); break;
      default: buffers = staircase(17 + (trial - 48) * 4); break;
    }
    const auto bound = static_cast<std::uint64_t>(load_bound128(buffers));
    INFO("trial " << trial << ", " << buffers.size() << " buffers, load bound " << bound);
    const memo::detail::section_table table(buffers, trial % 4 == 3 ? 5 : 100000);
    memo::detail::search_workspace work;
    for (std::size_t k = 0; k < strategies.size(); ++k) {
      const auto& strategy = strategies[k];
      const auto ranking = k % 2 == 0 ? search::ranking::shuffled : search::ranking::total_width_area;
      INFO("strategy " << k);
      // At the load bound (found on cut rectangles, often exhausted on the
      // others) and a little above it.
      for (const std::uint64_t target : {bound, bound + bound / 50}) {
        search fast(buffers, table, ranking, k, {}, strategy);
        search plain(buffers, table, ranking, k, {}, strategy);
        plain.use_reference_bounds(true);
        const auto a = fast.search(work, target, target, far, 4000);
        const auto b = plain.search(work, target, target, far, 4000);
        REQUIRE(a == b);
        CHECK(fast.nodes() == plain.nodes());
        ++compared;
        if (a != search::outcome::found) continue;
        CHECK(fast.best_offsets() == plain.best_offsets());
        std::vector<std::uint64_t> offsets(buffers.size());
        for (std::uint32_t r = 0; r < buffers.size(); ++r) offsets[fast.original_index(r)] = fast.best_offsets()[r];
        CHECK(independent_peak(buffers, offsets) <= target);
      }
    }
  }
  CHECK(compared == trials * strategies.size() * 2);
}

TEST_CASE("exact: decisions that leave no byte free are exact under any restart share and budget") {
  // A decision whose target equals every section's live bytes gives the
  // restarts `perfect_packing_share` times the complete searches' nodes,
  // each restart at most `perfect_packing_dive_units` times n.
  // Random instances filled up to a flat load with one-tick buffers (the
  // first decision, at the load, is such a decision; the optimum is the
  // brute force's), and cut rectangles: under every share the plan at the
  // optimum, proven. (No filled instance tried, of up to eight buffers,
  // needed more than its flat load, so the share's decisions here all end
  // with a plan.)
  std::mt19937_64 rng(61);
  for (int trial = 0; trial < 90; ++trial) {
    std::vector<dsa_buffer> buffers;
    if (trial % 3 == 2) {
      buffers = cut_rectangle(rng, 6 + static_cast<std::size_t>(trial) / 3, 10, 40);
    } else {
      const std::int64_t horizon = 4;
      buffers = random_buffers(rng, 5 + static_cast<std::size_t>(trial % 2), horizon, 12, false);
      for (auto& b : buffers) b.upper = std::min(b.upper, horizon);
      std::vector<std::uint64_t> load(static_cast<std::size_t>(horizon), 0);
      std::uint64_t most = 0;
      for (std::int64_t t = 0; t < horizon; ++t) {
        for (const auto& b : buffers) {
          if (b.lower <= t && t < b.upper) load[static_cast<std::size_t>(t)] += b.size_bytes;
        }
        most = std::max(most, load[static_cast<std::size_t>(t)]);
      }
      for (std::int64_t t = 0; t < horizon; ++t) {
        const auto gap = most - load[static_cast<std::size_t>(t)];
        if (gap > 0) buffers.push_back({500 + static_cast<std::uint64_t>(t), gap, t, t + 1, 1});
      }
    }
    const std::uint64_t optimum = buffers.size() <= 9 ? brute_force_peak(buffers) : static_cast<std::uint64_t>(load_bound128(buffers));
    INFO("trial " << trial << ", " << buffers.size() << " buffers, optimum " << optimum);
    for (const std::uint32_t share : {0u, 1u, 12u, 40u}) {
      for (const std::uint32_t units : {0u, 1u, 2u, 8u}) {
        memo::exact_options options;
        options.perfect_packing_share = share;
        options.perfect_packing_dive_units = units;
        const auto result = memo::exact_solver(options).solve(dsa_problem{buffers, {}}, {});
        INFO("share " << share << ", restart budget units " << units);
        CHECK(independent_peak(buffers, result.plan.offsets) == result.plan.peak_bytes);
        CHECK(result.plan.peak_bytes == optimum);
        CHECK(result.proven_optimal);
      }
    }
  }
}

TEST_CASE("exact: the complete searches rank the buffers in distinct orders") {
  // In a perfect packing every buffer's heaviest load is the capacity, so
  // the first two keys (load, lifetime, area / lifetime, area, load) order
  // the buffers alike; a spare ranking (bottom-right) takes the second
  // place. The portfolio then decides exactly: found at the brute-force
  // optimum, infeasible one byte below.
  using portfolio = memo::detail::search_portfolio;
  using ranking = memo::detail::search_ranking;
  std::mt19937_64 rng(59);
  const auto far = portfolio::clock::now() + std::chrono::hours(1);
  int with_spare = 0;
  for (int trial = 0; trial < 10; ++trial) {
    const auto buffers = cut_rectangle(rng, 5 + static_cast<std::size_t>(trial % 4), 9, 24);
    INFO("trial " << trial << ", " << buffers.size() << " buffers");
    const std::uint64_t optimum = brute_force_peak(buffers);
    REQUIRE(optimum == 24);
    const memo::detail::section_table table(buffers, 1000);
    portfolio searches(buffers, table, {});
    const auto& ranks = searches.rankings();
    // Every ranking there is (the four keys and the two spares) is either
    // taken or orders the buffers as a taken one does.
    std::vector<std::vector<std::uint32_t>> distinct;
    for (const auto r : {ranking::total_width_area, ranking::width_area_total, ranking::total_area_width,
                         ranking::start_size, ranking::end_size, ranking::size_width}) {
      auto order = memo::detail::rank_buffers(buffers, table, r, 0);
      if (std::find(distinct.begin(), distinct.end(), order) == distinct.end()) distinct.push_back(std::move(order));
    }
    CHECK(ranks.size() == std::min<std::size_t>(4, distinct.size()));
    CHECK(std::count(ranks.begin(), ranks.end(), ranking::width_area_total) == 0);
    with_spare += std::count(ranks.begin(), ranks.end(), ranking::end_size) != 0 ? 1 : 0;
    std::vector<std::vector<std::uint32_t>> orders;
    for (const auto r : ranks) orders.push_back(memo::detail::rank_buffers(buffers, table, r, 0));
    for (std::size_t a = 0; a < orders.size(); ++a) {
      for (std::size_t b = a + 1; b < orders.size(); ++b) CHECK(orders[a] != orders[b]);
    }
    REQUIRE(searches.decide(optimum, far) == portfolio::verdict::feasible);
    std::vector<std::uint64_t> offsets(buffers.size());
    searches.best_offsets(offsets);
    CHECK(independent_peak(buffers, offsets) == optimum);
    portfolio below(buffers, table, {});
    CHECK(below.decide(optimum - 1, far) == portfolio::verdict::infeasible);
  }
  CHECK(with_spare >= 5);
  // Where every key orders the buffers alike (identical buffers), one
  // complete search is enough: no search repeats another.
  const std::vector<dsa_buffer> same(5, dsa_buffer{0, 8, 0, 4, 1});
  const memo::detail::section_table table(same, 1000);
  const portfolio one(same, table, {});
  CHECK(one.rankings().size() == 1);
}

TEST_CASE("exact: hand-worked instances") {
  memo::exact_solver solver;
  // x [0,2) 2 B, y [1,3) 2 B, z [2,4) 2 B, w [0,4) 1 B. Loads are 3 (t=0),
  // 5 (t=1), 5 (t=2), 3 (t=3): bound 5. w at 0, x and z at 1 (they never
  // meet), y at 3 above both: peak 5, so 5 is optimal.
  dsa_problem cycle{{{1, 2, 0, 2, 1}, {2, 2, 1, 3, 1}, {3, 2, 2, 4, 1}, {4, 1, 0, 4, 1}}, {}};
  const auto r = solver.solve(cycle, {});
  CHECK(r.plan.peak_bytes == 5);
  CHECK(r.proven_optimal);

  // p [0,2) 2 B and q [1,3) 2 B overlap; r [0,1) 1 B meets only p and
  // s [2,3) 1 B meets only q. Loads 3, 4, 3: bound 4. p at 0, q at 2,
  // r at 2 (beside q in time), s at 0 (beside p in time): peak 4.
  dsa_problem pair{{{1, 2, 0, 2, 1}, {2, 2, 1, 3, 1}, {3, 1, 0, 1, 1}, {4, 1, 2, 3, 1}}, {}};
  CHECK(solver.solve(pair, {}).plan.peak_bytes == 4);

  // Alignment: a [0,2) 3 B, b [0,2) 4 B aligned to 4. a at 0 pushes b to
  // 4 (peak 8); b at 0 and a at 4 gives 7, the bound 3 + 4.
  dsa_problem aligned{{{1, 3, 0, 2, 1}, {2, 4, 0, 2, 4}}, {}};
  const auto al = solver.solve(aligned, {});
  CHECK(al.plan.peak_bytes == 7);
  CHECK(al.plan.offsets == std::vector<std::uint64_t>{4, 0});
  // Both aligned to 4: 3 B then 4 B needs 4 + 4 = 8 bytes whichever goes first.
  dsa_problem both{{{1, 3, 0, 2, 4}, {2, 4, 0, 2, 4}}, {}};
  const auto bo = solver.solve(both, {});
  CHECK(bo.plan.peak_bytes == 7);  // 4 B at 0, 3 B at 4
  CHECK(bo.proven_optimal);
}

TEST_CASE("exact: capacity at the optimum fits, one byte less is proven infeasible") {
  std::mt19937_64 rng(21);
  memo::exact_solver solver;
  int infeasible_cases = 0;
  for (int trial = 0; trial < 150; ++trial) {
    const std::size_t n = 2 + static_cast<std::size_t>(trial % 7);
    dsa_problem problem{random_buffers(rng, n, 4, 10, trial % 4 == 0), {}};
    const std::uint64_t optimum = brute_force_peak(problem.buffers);
    const std::uint64_t bound = memo::lower_bound_bytes(problem);
    INFO("trial " << trial << " optimum " << optimum << " bound " << bound);

    problem.capacity_bytes = optimum;
    const auto fit = solver.solve(problem, {});
    CHECK(fit.plan.peak_bytes <= optimum);
    CHECK(memo::validate(problem, fit.plan).ok);

    problem.capacity_bytes = optimum + 5;
    const auto loose = solver.solve(problem, {});
    CHECK(loose.plan.peak_bytes <= optimum + 5);
    CHECK(memo::validate(problem, loose.plan).ok);

    if (optimum > bound) {
      ++infeasible_cases;
      problem.capacity_bytes = optimum - 1;
      try {
        (void)solver.solve(problem, {});
        FAIL("capacity below the optimum was accepted");
      } catch (const memo::error& e) {
        const std::string message = e.message();
        CHECK(message.find("capacity " + std::to_string(optimum - 1) + " bytes is infeasible") !=
              std::string::npos);
        CHECK(message.find("lower bound is") != std::string::npos);
      }
    }
  }
  CHECK(infeasible_cases > 5);  // the generator does produce gaps
}

TEST_CASE("exact: a capacity below the lower bound is rejected naming both numbers") {
  dsa_problem problem{{{1, 4, 0, 2, 1}, {2, 4, 1, 3, 1}}, 7};
  memo::exact_solver solver;
  CHECK_THROWS_WITH_AS(solver.solve(problem, {}),
                       doctest::Contains("capacity 7 bytes is below the lower bound 8"),
                       memo::error);
}

TEST_CASE("exact: disjoint components are solved independently") {
  // 40 copies of a 6-buffer block whose optimum exceeds its bound, each copy
  // on its own stretch of time; plus one bigger block. The joint optimum is
  // the largest block optimum.
  std::mt19937_64 rng(5);
  std::vector<dsa_buffer> block;
  std::uint64_t block_opt = 0;
  for (int attempt = 0; attempt < 2000; ++attempt) {
    block = random_buffers(rng, 6, 3, 9, true);
    block_opt = brute_force_peak(block);
    if (block_opt > memo::lower_bound_bytes(dsa_problem{block, {}})) break;
  }
  REQUIRE(block_opt > memo::lower_bound_bytes(dsa_problem{block, {}}));
  dsa_problem problem;
  std::uint64_t id = 0;
  for (int copy = 0; copy < 40; ++copy) {
    for (auto b : block) {
      b.id = id++;
      b.lower += copy * 100;
      b.upper += copy * 100;
      problem.buffers.push_back(b);
    }
  }
  memo::exact_solver solver;
  auto result = solver.solve(problem, {});
  CHECK(result.proven_optimal);
  CHECK(result.plan.peak_bytes == block_opt);
  CHECK(memo::validate(problem, result.plan).ok);

  // The block with sizes and alignments times 4 (optimum times 4) dominates:
  // the other blocks only need to fit under it.
  for (auto b : block) {
    b.id = id++;
    b.lower += 50000;
    b.upper += 50000;
    b.size_bytes *= 4;
    b.alignment *= 4;
    problem.buffers.push_back(b);
  }
  result = solver.solve(problem, {});
  CHECK(result.proven_optimal);
  CHECK(result.plan.peak_bytes == 4 * block_opt);
  CHECK(memo::validate(problem, result.plan).ok);

  const auto parts = memo::detail::independent_components(problem.buffers);
  CHECK(parts.size() == 41);
}

TEST_CASE("exact: a zero time limit still returns a valid plan, marked not proven") {
  std::mt19937_64 rng(3);
  memo::exact_solver solver;
  bool saw_unproven = false;
  for (int trial = 0; trial < 20; ++trial) {
    dsa_problem problem{random_buffers(rng, 400, 60, 1000, trial % 2 == 0), {}};
    memo::dsa_solve_options options;
    options.time_limit_seconds = 0.0;
    const auto result = solver.solve(problem, options);
    CHECK(memo::validate(problem, result.plan).ok);
    CHECK(result.plan.peak_bytes >= result.lower_bound_bytes);
    if (!result.proven_optimal) {
      saw_unproven = true;
      CHECK(result.plan.peak_bytes > result.lower_bound_bytes);
    }
  }
  CHECK(saw_unproven);
}

TEST_CASE("exact: a warm start is never made worse") {
  std::mt19937_64 rng(13);
  memo::exact_solver solver;
  for (int trial = 0; trial < 30; ++trial) {
    dsa_problem problem{random_buffers(rng, 6, 4, 9, false), {}};
    // A poor but valid plan: every buffer stacked on the previous one.
    memo::dsa_plan stacked;
    std::uint64_t top = 0;
    for (const auto& b : problem.buffers) {
      stacked.offsets.push_back(top);
      top += b.size_bytes;
    }
    stacked.peak_bytes = top;
    memo::dsa_solve_options options;
    options.warm_start = stacked;
    const auto result = solver.solve(problem, options);
    CHECK(result.plan.peak_bytes <= stacked.peak_bytes);
    CHECK(result.plan.peak_bytes == brute_force_peak(problem.buffers));
  }
}

TEST_CASE("exact: empty and single-buffer problems") {
  memo::exact_solver solver;
  const auto empty = solver.solve(dsa_problem{}, {});
  CHECK(empty.plan.offsets.empty());
  CHECK(empty.plan.peak_bytes == 0);
  CHECK(empty.proven_optimal);

  dsa_problem one{{{9, 100, 3, 4, 64}}, {}};
  const auto single = solver.solve(one, {});
  CHECK(single.plan.offsets == std::vector<std::uint64_t>{0});
  CHECK(single.plan.peak_bytes == 100);
}

TEST_CASE("exact: rejects malformed problems") {
  memo::exact_solver solver;
  CHECK_THROWS_AS(solver.solve(dsa_problem{{{1, 0, 0, 1, 1}}, {}}, {}), memo::error);
  CHECK_THROWS_AS(solver.solve(dsa_problem{{{1, 4, 2, 2, 1}}, {}}, {}), memo::error);
  CHECK_THROWS_AS(solver.solve(dsa_problem{{{1, 4, 0, 2, 3}}, {}}, {}), memo::error);
  memo::dsa_solve_options negative;
  negative.time_limit_seconds = -1.0;
  CHECK_THROWS_AS(solver.solve(dsa_problem{{{1, 4, 0, 2, 1}}, {}}, negative), memo::error);
}

TEST_CASE("exact: many interchangeable buffers are solved at once") {
  // 30 identical buffers live together plus staggered small ones: symmetry
  // breaking keeps the 30! orderings of the copies from being enumerated.
  dsa_problem problem;
  for (std::uint64_t i = 0; i < 30; ++i) problem.buffers.push_back({i, 8, 0, 10, 1});
  for (std::uint64_t i = 0; i < 10; ++i) {
    problem.buffers.push_back({100 + i, 4 + i, static_cast<std::int64_t>(i), static_cast<std::int64_t>(i + 2), 1});
  }
  memo::exact_solver solver;
  memo::dsa_solve_options options;
  options.time_limit_seconds = 60.0;
  const auto result = solver.solve(problem, options);
  CHECK(memo::validate(problem, result.plan).ok);
  CHECK(result.proven_optimal);
  CHECK(result.plan.peak_bytes == result.lower_bound_bytes);
}

TEST_CASE("exact: documentation example") {
  // The example of docs/dsa-solvers.md, verbatim.
  memo::dsa_problem problem;
  problem.buffers = {
      // id, size_bytes, lower, upper, alignment
      {1, 4096, 0, 3, 256},
      {2, 8192, 1, 4, 256},
      {3, 4096, 3, 5, 256},
  };
  memo::exact_solver solver;
  memo::dsa_solve_options options;
  options.time_limit_seconds = 5.0;
  const memo::dsa_result result = solver.solve(problem, options);
  // Loads: 4096 (t=0), 12288 (t=1..3), 4096 (t=4); buffers 1 and 3 never
  // meet, so both can sit on top of buffer 2 at 8192: peak 12288.
  CHECK(result.plan.peak_bytes == 12288);
  CHECK(result.lower_bound_bytes == 12288);
  CHECK(result.proven_optimal);
  CHECK(memo::validate(problem, result.plan).ok);
}

TEST_CASE("exact: live sums past 2^63 give the true optimum, proven") {
  // A repro of a wrong "proven optimal" from signed section loads: loads of
  // about 1.2e19 bytes (past INT64_MAX, under UINT64_MAX).
  const auto buffers = from_rows({{0, 1, 4, 3909907711275394215ull},
                                  {1, 1, 4, 1303302570425131405ull},
                                  {2, 0, 4, 3909907711275394215ull},
                                  {3, 0, 1, 4170568225360420496ull},
                                  {4, 2, 4, 781981542255078843ull},
                                  {5, 0, 3, 2085284112680210248ull}});
  const dsa_problem problem{buffers, {}};
  const u128 optimum = brute_force_peak128(buffers);
  REQUIRE(optimum <= UINT64_MAX);
  REQUIRE(load_bound128(buffers) > u128{std::numeric_limits<std::int64_t>::max()});
  memo::exact_solver solver;
  const auto result = solver.solve(problem, {});
  CHECK(independent_peak(buffers, result.plan.offsets) == result.plan.peak_bytes);
  CHECK(result.plan.peak_bytes == static_cast<std::uint64_t>(optimum));
  CHECK(result.proven_optimal);
  CHECK(result.lower_bound_bytes == static_cast<std::uint64_t>(load_bound128(buffers)));
  // Capacity at the optimum fits; one byte less is proven infeasible when
  // the optimum is above the bound, and fits otherwise.
  dsa_problem fit{buffers, static_cast<std::uint64_t>(optimum)};
  const auto fitted = solver.solve(fit, {});
  CHECK(independent_peak(buffers, fitted.plan.offsets) <= fitted.plan.peak_bytes);
  CHECK(fitted.plan.peak_bytes <= static_cast<std::uint64_t>(optimum));
  if (optimum > load_bound128(buffers)) {
    dsa_problem below{buffers, static_cast<std::uint64_t>(optimum - 1)};
    CHECK_THROWS_WITH_AS(solver.solve(below, {}), doctest::Contains("is infeasible"), memo::error);
  }
}

TEST_CASE("exact: sizes near 2^64 match a 128-bit brute force or are rejected") {
  // Sizes between 2^60 and 2^63 with alignments up to 2^62: live sums and
  // canonical ends pass 2^63 and, on some instances, 2^64. The solver must
  // then either return the exact optimum (proven) or throw memo::error; a
  // plan is never wrong.
  std::mt19937_64 rng(77);
  memo::exact_solver solver;
  int solved = 0;
  int rejected = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const std::size_t n = 2 + static_cast<std::size_t>(trial % 5);
    std::vector<dsa_buffer> buffers;
    for (std::size_t i = 0; i < n; ++i) {
      dsa_buffer b;
      b.id = i;
      b.lower = static_cast<std::int64_t>(rng() % 4);
      b.upper = b.lower + 1 + static_cast<std::int64_t>(rng() % 4);
      b.size_bytes = (std::uint64_t{1} << (60 + rng() % 3)) + rng() % (std::uint64_t{1} << 61);
      b.alignment = trial % 3 == 0 ? std::uint64_t{1} << (rng() % 63) : 1;
      buffers.push_back(b);
    }
    const dsa_problem problem{buffers, {}};
    const u128 optimum = brute_force_peak128(buffers);
    INFO("trial " << trial);
    try {
      const auto result = solver.solve(problem, {});
      ++solved;
      CHECK(independent_peak(buffers, result.plan.offsets) == result.plan.peak_bytes);
      CHECK(u128{result.plan.peak_bytes} >= optimum);
      CHECK((result.proven_optimal && u128{result.plan.peak_bytes} == optimum));
    } catch (const memo::error& e) {
      ++rejected;
      INFO(e.message());
      // Only problems whose sizes or optimum do not fit in 64 bits are rejected.
      u128 total = 0;
      for (const auto& b : buffers) total += (u128{b.size_bytes} + b.alignment - 1) / b.alignment * b.alignment;
      CHECK((optimum > UINT64_MAX || total > UINT64_MAX));
    }
  }
  CHECK(solved > 50);
  CHECK(rejected > 10);
}

TEST_CASE("exact: intervals at the ends of the longest timeline a problem may span") {
  // Every solver shares one rule (dsa_problem.hpp): a timeline spans at most
  // INT64_MAX ticks. This one spans exactly that, with buffers at both ends.
  constexpr std::int64_t lo = -(std::int64_t{1} << 62);
  constexpr std::int64_t hi = lo + std::numeric_limits<std::int64_t>::max();
  const std::vector<dsa_buffer> buffers = {
      {1, 100, lo, hi, 1}, {2, 50, lo, 0, 16}, {3, 70, -1, hi, 64}, {4, 30, hi - 1, hi, 1}, {5, 20, lo, lo + 1, 8}};
  const dsa_problem problem{buffers, {}};
  memo::exact_solver solver;
  const auto result = solver.solve(problem, {});
  CHECK(independent_peak(buffers, result.plan.offsets) == result.plan.peak_bytes);
  CHECK(result.plan.peak_bytes == brute_force_peak(buffers));
  CHECK(result.proven_optimal);
  // Without decomposition the single component is the same.
  memo::exact_options off;
  off.decomposition = false;
  const auto whole = memo::exact_solver(off).solve(problem, {});
  CHECK(whole.plan.peak_bytes == result.plan.peak_bytes);

  // The whole signed range is one tick longer than that: refused, naming it.
  constexpr auto min = std::numeric_limits<std::int64_t>::min();
  constexpr auto max = std::numeric_limits<std::int64_t>::max();
  const dsa_problem too_long{{{1, 100, min, max, 1}, {2, 50, min, 0, 16}}, {}};
  CHECK_THROWS_WITH_AS(solver.solve(too_long, {}), doctest::Contains("more than INT64_MAX"), memo::error);
}

TEST_CASE("exact: a warm start better than the greedy is kept, even with no time to search") {
  std::mt19937_64 rng(17);
  memo::exact_solver solver;
  int used = 0;
  for (int trial = 0; trial < 400 && used < 20; ++trial) {
    const auto buffers = random_buffers(rng, 7, 4, 12, trial % 2 == 0);
    std::vector<std::uint64_t> greedy;
    const std::uint64_t greedy_peak = memo::detail::greedy_upper_bound(buffers, greedy);
    const std::uint64_t optimum = brute_force_peak(buffers);
    if (greedy_peak == optimum) continue;
    ++used;
    // An optimal plan from the solver with time, then given as the warm
    // start of a solve with none.
    const dsa_problem problem{buffers, {}};
    const auto best = solver.solve(problem, {});
    REQUIRE(best.plan.peak_bytes == optimum);
    memo::dsa_solve_options options;
    options.time_limit_seconds = 0.0;
    options.warm_start = best.plan;
    const auto warm = solver.solve(problem, options);
    CHECK(independent_peak(buffers, warm.plan.offsets) == optimum);
    CHECK(warm.plan.peak_bytes == optimum);
    CHECK(warm.plan.peak_bytes < greedy_peak);
  }
  CHECK(used == 20);
}

TEST_CASE("exact: invalid warm starts are never used") {
  // A (2^63 bytes) and B (2^62 bytes) live together. The "plan" B at 0,
  // A at 3 * 2^62 wraps: A's end is 2^64 + 2^62, which reads as 2^62, so a
  // naive check sees no overlap and a peak of 2^62, below the lower bound.
  // That one, one that overlaps, one misaligned and ones of the wrong
  // length must all be ignored.
  const std::uint64_t half = std::uint64_t{1} << 63;
  const std::uint64_t quarter = half / 2;
  memo::exact_solver solver;
  {
    const std::vector<dsa_buffer> buffers = {{1, half, 0, 2, 1}, {2, quarter, 0, 2, 1}};
    const dsa_problem problem{buffers, {}};
    memo::dsa_solve_options options;
    options.time_limit_seconds = 0.0;
    options.warm_start = memo::dsa_plan{{3 * quarter, 0}, quarter};
    const auto result = solver.solve(problem, options);
    CHECK(independent_peak(buffers, result.plan.offsets) == result.plan.peak_bytes);
    CHECK(result.plan.peak_bytes == half + quarter);
    CHECK(result.proven_optimal);
  }
  std::vector<dsa_buffer> small = {{1, 8, 0, 4, 8}, {2, 8, 1, 3, 8}, {3, 4, 2, 5, 4}};
  const dsa_problem problem{small, {}};
  const std::uint64_t optimum = brute_force_peak(small);
  for (const auto& bad : {memo::dsa_plan{{0, 4, 0}, 12},         // overlap
                          memo::dsa_plan{{0, 12, 8}, 20},        // 12 is not 8-aligned
                          memo::dsa_plan{{0, 8}, 16},            // too few offsets
                          memo::dsa_plan{{0, 8, 16, 0}, 20}}) {  // too many
    memo::dsa_solve_options options;
    options.warm_start = bad;
    const auto result = solver.solve(problem, options);
    CHECK(independent_peak(small, result.plan.offsets) == result.plan.peak_bytes);
    CHECK(result.plan.peak_bytes == optimum);
  }
}

TEST_CASE("exact: every switch off still gives the brute-force optimum") {
  std::mt19937_64 rng(41);
  for (int trial = 0; trial < 150; ++trial) {
    const std::size_t n = 1 + static_cast<std::size_t>(trial % 8);
    const auto buffers = random_buffers(rng, n, 2 + trial % 5, 16, trial % 3 == 0);
    const std::uint64_t optimum = brute_force_peak(buffers);
    memo::exact_options options;
    switch (trial % 7) {
      case 5: options.alignment_bounds = false; break;
      case 0: options.dominance = false; break;
      case 1: options.section_bounds = false; break;
      case 2: options.symmetry = false; break;
      case 3: options.decomposition = false; break;
      case 4: options.restarts = false; break;
      default:
        options.membership_per_buffer = 0;
        options.membership_floor = static_cast<std::size_t>(trial % 4);
        break;
    }
    INFO("trial " << trial);
    const dsa_problem problem{buffers, {}};
    const auto result = memo::exact_solver(options).solve(problem, {});
    CHECK(independent_peak(buffers, result.plan.offsets) == result.plan.peak_bytes);
    CHECK(result.plan.peak_bytes == optimum);
    CHECK(result.proven_optimal);
  }
}

TEST_CASE("exact: a load past 2^64 is rejected naming the sum") {
  // The section table is where the search reads loads; it refuses a section
  // whose live bytes do not fit in 64 bits (check_problem may or may not
  // have caught it first, depending on alignment totals).
  const std::uint64_t big = (std::uint64_t{1} << 63) + 5;
  const std::vector<dsa_buffer> buffers = {{1, big, 0, 2, 1}, {2, big, 1, 3, 1}};
  CHECK_THROWS_WITH_AS(memo::detail::section_table(buffers, 100),
                       doctest::Contains("total 2^64 * 1 + 10 bytes, which does not fit in 64 bits"), memo::error);
  CHECK_THROWS_AS(memo::exact_solver{}.solve(dsa_problem{buffers, {}}, {}), memo::error);
}

TEST_CASE("exact: the exact plan check catches wrapping ends and overlaps") {
  const std::uint64_t half = std::uint64_t{1} << 63;
  const std::vector<dsa_buffer> buffers = {{1, half, 0, 2, 1}, {2, half, 1, 3, 1}};
  std::string reason;
  CHECK(!memo::detail::exact_plan_peak(buffers, {0, half}, std::nullopt, reason).has_value());
  CHECK(reason.find("ends past 2^64 - 1") != std::string::npos);
  reason.clear();
  const std::vector<dsa_buffer> fits = {{1, half - 1, 0, 2, 1}, {2, half, 1, 3, 1}};
  CHECK(memo::detail::exact_plan_peak(fits, {0, half - 1}, std::nullopt, reason) ==
        std::optional<std::uint64_t>(std::numeric_limits<std::uint64_t>::max()));
  CHECK(!memo::detail::exact_plan_peak(fits, {0, half - 2}, std::nullopt, reason).has_value());
  CHECK(reason.find("share addresses") != std::string::npos);
  CHECK(!memo::detail::exact_plan_peak(fits, {0, half - 1}, half, reason).has_value());
}

TEST_CASE("exact: the placed-ends tree and its trail undo 64-bit ends exactly") {
  // Inserts random intervals with ends spread over the whole 64-bit range
  // (so both halves of every trailed value matter), then erases them one by
  // one; after every step each range maximum is compared with a plain list.
  std::mt19937_64 rng(7);
  const std::size_t sections = 13;
  memo::detail::placed_max_tree tree;
  tree.reset(sections);
  struct placed {
    std::size_t first, last;
    std::uint64_t end;
  };
  std::vector<placed> stack;
  const std::uint64_t edges[] = {0, 1, 0xffffffffu, std::uint64_t{1} << 32, std::numeric_limits<std::uint64_t>::max()};
  auto check_all = [&] {
    for (std::size_t first = 0; first < sections; ++first) {
      for (std::size_t last = first + 1; last <= sections; ++last) {
        std::uint64_t expected = 0;
        for (const auto& p : stack) {
          if (p.first < last && first < p.last) expected = std::max(expected, p.end);
        }
        REQUIRE(tree.max(first, last) == expected);
      }
    }
  };
  for (int step = 0; step < 40; ++step) {
    const std::size_t a = rng() % sections, b = rng() % sections;
    const placed p{std::min(a, b), std::max(a, b) + 1, step % 3 == 0 ? edges[rng() % 5] : rng()};
    tree.insert(p.first, p.last, p.end);
    stack.push_back(p);
    check_all();
  }
  while (!stack.empty()) {
    tree.erase();
    stack.pop_back();
    check_all();
  }
  const memo::detail::trail_entry entry(0x7fffffffu, 0xfedcba9876543210u);
  CHECK(entry.index() == 0x7fffffffu);
  CHECK(entry.value() == 0xfedcba9876543210u);
  static_assert(sizeof(memo::detail::trail_entry) == 12);
}
