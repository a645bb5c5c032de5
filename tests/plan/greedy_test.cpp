#include "memo/plan/greedy.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <random>

namespace {

memo::dsa_problem random_problem(std::mt19937_64& rng, std::size_t n, std::int64_t horizon,
                                 std::uint64_t max_size, bool aligned) {
  memo::dsa_problem p;
  for (std::size_t i = 0; i < n; ++i) {
    memo::dsa_buffer b;
    b.id = i;
    b.lower = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(horizon));
    b.upper = b.lower + 1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(horizon / 2 + 1));
    b.size_bytes = 1 + rng() % max_size;
    if (aligned) b.alignment = std::uint64_t{1} << (rng() % 4);
    p.buffers.push_back(b);
  }
  return p;
}

// Exhaustive reference: tries every offset in [0, sum of sizes) for every
// buffer (feasible only for a handful of tiny buffers) and keeps the least peak.
std::uint64_t brute_force_peak(const memo::dsa_problem& p) {
  std::uint64_t total = 0;
  for (const auto& b : p.buffers) total += b.size_bytes;
  std::vector<std::uint64_t> offsets(p.buffers.size(), 0);
  std::uint64_t best = total;
  auto recurse = [&](auto&& self, std::size_t i, std::uint64_t peak) -> void {
    if (peak >= best) return;
    if (i == p.buffers.size()) {
      best = peak;
      return;
    }
    const auto& b = p.buffers[i];
    for (std::uint64_t off = 0; off + b.size_bytes <= total; ++off) {
      bool ok = true;
      for (std::size_t j = 0; j < i && ok; ++j) {
        const auto& c = p.buffers[j];
        if (b.overlaps_in_time(c) && off < offsets[j] + c.size_bytes && offsets[j] < off + b.size_bytes) {
          ok = false;
        }
      }
      if (!ok) continue;
      offsets[i] = off;
      self(self, i + 1, std::max(peak, off + b.size_bytes));
    }
  };
  recurse(recurse, 0, 0);
  return best;
}

memo::dsa_problem make(std::initializer_list<std::tuple<std::uint64_t, std::int64_t, std::int64_t>> list) {
  memo::dsa_problem p;
  std::uint64_t id = 0;
  for (const auto& [size, lower, upper] : list) p.buffers.push_back({id++, size, lower, upper, 1});
  return p;
}

}  // namespace

TEST_CASE("greedy: every heuristic plan is valid and at least the lower bound on random instances") {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 200; ++round) {
    const bool aligned = round % 3 == 0;
    const auto p = random_problem(rng, 1 + rng() % 60, 40, 1000, aligned);
    const auto lb = memo::lower_bound_bytes(p);
    for (const auto& r : {memo::greedy_by_size_solver{}.solve(p), memo::first_fit_solver{}.solve(p),
                          memo::best_fit_heap_solver{}.solve(p), memo::best_greedy_solver{}.solve(p)}) {
      INFO("round " << round << " solver " << r.solver);
      CHECK(memo::validate(p, r.plan).ok);
      CHECK(r.plan.peak_bytes >= lb);
      CHECK(r.lower_bound_bytes == lb);
      CHECK(r.proven_optimal == (r.plan.peak_bytes == lb));
    }
  }
}

TEST_CASE("greedy: heuristics never beat the exhaustive optimum of tiny instances") {
  std::mt19937_64 rng(11);
  int reached = 0;
  for (int round = 0; round < 40; ++round) {
    const auto p = random_problem(rng, 4, 6, 3, false);
    const auto best = brute_force_peak(p);
    CHECK(best >= memo::lower_bound_bytes(p));
    const auto greedy = memo::best_greedy_solver{}.solve(p);
    CHECK(greedy.plan.peak_bytes >= best);
    reached += greedy.plan.peak_bytes == best;
  }
  // The best of the three reaches the optimum on most tiny instances.
  CHECK(reached >= 30);
}

TEST_CASE("greedy: hand-worked instance where the online heap fragments") {
  // A: 2 bytes [0,2), B: 2 bytes [0,4), C: 4 bytes [2,4). Lower bound 6 (B + C).
  const auto p = make({{2, 0, 2}, {2, 0, 4}, {4, 2, 4}});
  CHECK(memo::lower_bound_bytes(p) == 6);
  // Heap: A at 0, B at 2; A's 2-byte hole cannot take C, so C goes on top at 4.
  const auto heap = memo::best_fit_heap_solver{}.solve(p);
  CHECK(heap.plan.offsets == std::vector<std::uint64_t>{0, 2, 4});
  CHECK(heap.plan.peak_bytes == 8);
  CHECK_FALSE(heap.proven_optimal);
  // By size: C at 0, B (longer of the 2-byte ones) above C at 4, A under B at 0.
  const auto size = memo::greedy_by_size_solver{}.solve(p);
  CHECK(size.plan.offsets == std::vector<std::uint64_t>{0, 4, 0});
  CHECK(size.plan.peak_bytes == 6);
  CHECK(size.proven_optimal);
  // First fit by start: A 0, B 2, C must clear B ([2,4)), the hole [0,2) is too small: 4.
  const auto first = memo::first_fit_solver{}.solve(p);
  CHECK(first.plan.offsets == std::vector<std::uint64_t>{0, 2, 4});
  const auto best = memo::best_greedy_solver{}.solve(p);
  CHECK(best.plan.peak_bytes == 6);
  CHECK(best.solver == "greedy-size");
}

TEST_CASE("greedy: best fit picks the smallest gap that holds the buffer") {
  // Two long buffers leave gaps of 5 (bottom) and 3 (middle); a 3-byte buffer
  // overlapping them goes in the middle gap, best fit, not the lowest.
  memo::dsa_problem p;
  p.buffers = {{1, 10, 0, 10, 1}, {2, 5, 0, 10, 1}, {3, 8, 0, 4, 1}, {4, 3, 0, 4, 1},
               {5, 3, 5, 10, 1}};
  // By size: 1 (10) at 0; 3 (8, [0,4)) at 10; 2 (5) : busy [0,10),[10,18) -> 18;
  // 4 (3, [0,4)): busy [0,10) [10,18) [18,23) -> 23; 5 (3,[5,10)): busy [0,10) [18,23):
  // gap [10,18) of 8 -> 10.
  const auto r = memo::greedy_by_size_solver{}.solve(p);
  CHECK(r.plan.offsets == std::vector<std::uint64_t>{0, 18, 10, 23, 10});
  CHECK(r.plan.peak_bytes == 26);
}

TEST_CASE("greedy: alignment is honoured by all heuristics") {
  memo::dsa_problem p;
  p.buffers = {{1, 3, 0, 4, 1}, {2, 8, 1, 3, 16}, {3, 5, 2, 6, 8}, {4, 1, 3, 5, 64}};
  for (const auto& r : {memo::greedy_by_size_solver{}.solve(p), memo::first_fit_solver{}.solve(p),
                        memo::best_fit_heap_solver{}.solve(p)}) {
    CHECK(r.plan.offsets[1] % 16 == 0);
    CHECK(r.plan.offsets[2] % 8 == 0);
    CHECK(r.plan.offsets[3] % 64 == 0);
    CHECK(memo::validate(p, r.plan).ok);
  }
}

TEST_CASE("greedy: a capacity the heuristic cannot meet is an error naming both numbers") {
  auto p = make({{2, 0, 2}, {2, 0, 4}, {4, 2, 4}});
  p.capacity_bytes = 6;  // the lower bound: only greedy-by-size meets it
  CHECK(memo::greedy_by_size_solver{}.solve(p).plan.peak_bytes == 6);
  CHECK(memo::best_greedy_solver{}.solve(p).plan.peak_bytes == 6);
  try {
    (void)memo::best_fit_heap_solver{}.solve(p);
    FAIL("expected an error");
  } catch (const memo::error& e) {
    CHECK(e.message() ==
          "best-fit-heap: the heuristic plan needs 8 bytes, above the capacity 6 bytes (lower bound "
          "6 bytes); the exact solver searches for a plan that fits");
  }
  p.capacity_bytes = 5;
  CHECK_THROWS_WITH_AS((void)memo::greedy_by_size_solver{}.solve(p),
                       doctest::Contains("capacity 5 bytes is below the lower bound 6 bytes"),
                       memo::error);
}

TEST_CASE("greedy: empty problem has peak 0") {
  const memo::dsa_problem p;
  CHECK(memo::greedy_by_size_solver{}.solve(p).plan.peak_bytes == 0);
  CHECK(memo::best_fit_heap_solver{}.solve(p).proven_optimal);
}

// ---------------------------------------------------------------------------
// Independent references: the placements written the plain way (every
// placed buffer scanned, quadratic), and a validator that checks every pair
// in 128-bit arithmetic. Neither shares code with plan/placement.hpp or
// validate().

namespace {

__extension__ typedef unsigned __int128 wide;

bool pairwise_valid(const memo::dsa_problem& p, const memo::dsa_plan& plan) {
  if (plan.offsets.size() != p.buffers.size()) return false;
  wide peak = 0;
  for (std::size_t i = 0; i < p.buffers.size(); ++i) {
    const auto& a = p.buffers[i];
    const wide a_end = wide{plan.offsets[i]} + a.size_bytes;
    if (a_end > ~std::uint64_t{0} || plan.offsets[i] % a.alignment != 0) return false;
    peak = std::max(peak, a_end);
    for (std::size_t j = 0; j < i; ++j) {
      const auto& b = p.buffers[j];
      const wide b_end = wide{plan.offsets[j]} + b.size_bytes;
      const bool in_time = a.lower < b.upper && b.lower < a.upper;
      if (in_time && plan.offsets[i] < b_end && plan.offsets[j] < a_end) return false;
    }
  }
  return peak == plan.peak_bytes;
}

// Best fit (smallest gap, ties lowest) or lowest fit among the time
// neighbours, by scanning all placed buffers.
std::vector<std::uint64_t> naive_placement(const memo::dsa_problem& p, const std::vector<std::size_t>& order,
                                           bool best_fit) {
  std::vector<std::uint64_t> offsets(p.buffers.size(), 0);
  std::vector<std::size_t> placed;
  for (const auto i : order) {
    const auto& b = p.buffers[i];
    std::vector<std::pair<std::uint64_t, std::uint64_t>> busy;
    for (const auto j : placed) {
      const auto& c = p.buffers[j];
      if (b.lower < c.upper && c.lower < b.upper) busy.emplace_back(offsets[j], offsets[j] + c.size_bytes);
    }
    std::sort(busy.begin(), busy.end());
    std::uint64_t floor = 0;
    bool found = false;
    std::uint64_t chosen = 0, chosen_gap = 0;
    for (const auto& [start, end] : busy) {
      if (start > floor) {
        const std::uint64_t at = (floor + b.alignment - 1) / b.alignment * b.alignment;
        if (at + b.size_bytes <= start && (!found || (best_fit && start - floor < chosen_gap))) {
          if (!found || best_fit) {
            chosen = at;
            chosen_gap = start - floor;
          }
          found = true;
        }
      }
      floor = std::max(floor, end);
    }
    offsets[i] = found ? chosen : (floor + b.alignment - 1) / b.alignment * b.alignment;
    placed.push_back(i);
  }
  return offsets;
}

}  // namespace

TEST_CASE("greedy: placements equal a quadratic scan of every placed buffer") {
  std::mt19937_64 rng(23);
  for (int round = 0; round < 300; ++round) {
    const std::size_t n = 1 + rng() % (round < 250 ? 40 : 400);
    const auto p = random_problem(rng, n, 1 + static_cast<std::int64_t>(rng() % 60), 1 + rng() % 500, round % 2 == 0);
    const auto& bs = p.buffers;
    std::vector<std::size_t> by_size(n), by_start(n);
    std::iota(by_size.begin(), by_size.end(), std::size_t{0});
    std::iota(by_start.begin(), by_start.end(), std::size_t{0});
    std::stable_sort(by_size.begin(), by_size.end(), [&](std::size_t a, std::size_t b) {
      if (bs[a].size_bytes != bs[b].size_bytes) return bs[a].size_bytes > bs[b].size_bytes;
      if (bs[a].upper - bs[a].lower != bs[b].upper - bs[b].lower)
        return bs[a].upper - bs[a].lower > bs[b].upper - bs[b].lower;
      return bs[a].lower < bs[b].lower;
    });
    std::stable_sort(by_start.begin(), by_start.end(), [&](std::size_t a, std::size_t b) {
      return bs[a].lower != bs[b].lower ? bs[a].lower < bs[b].lower : bs[a].size_bytes > bs[b].size_bytes;
    });
    INFO("round " << round);
    const auto size = memo::greedy_by_size_solver{}.solve(p);
    CHECK(size.plan.offsets == naive_placement(p, by_size, true));
    CHECK(pairwise_valid(p, size.plan));
    const auto first = memo::first_fit_solver{}.solve(p);
    CHECK(first.plan.offsets == naive_placement(p, by_start, false));
    CHECK(pairwise_valid(p, first.plan));
    CHECK(pairwise_valid(p, memo::best_fit_heap_solver{}.solve(p).plan));
  }
}

TEST_CASE("greedy: the three placement rules match the quadratic scan in any order") {
  // The rule `above` (every neighbour below) against its own plain form.
  std::mt19937_64 rng(31);
  for (int round = 0; round < 100; ++round) {
    const auto p = random_problem(rng, 1 + rng() % 60, 30, 300, true);
    auto order = memo::detail::index_order(p.buffers.size());
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<std::size_t> order_wide(order.begin(), order.end());
    std::vector<std::uint64_t> offsets;
    memo::detail::place_in_order(p.buffers, order, memo::detail::fit_rule::best, offsets);
    CHECK(offsets == naive_placement(p, order_wide, true));
    memo::detail::place_in_order(p.buffers, order, memo::detail::fit_rule::lowest, offsets);
    CHECK(offsets == naive_placement(p, order_wide, false));
    memo::detail::place_in_order(p.buffers, order, memo::detail::fit_rule::above, offsets);
    std::vector<std::uint64_t> expected(p.buffers.size(), 0);
    for (std::size_t k = 0; k < order.size(); ++k) {
      const auto& b = p.buffers[order[k]];
      std::uint64_t floor = 0;
      for (std::size_t m = 0; m < k; ++m) {
        const auto& c = p.buffers[order[m]];
        if (b.lower < c.upper && c.lower < b.upper) floor = std::max(floor, expected[order[m]] + c.size_bytes);
      }
      expected[order[k]] = (floor + b.alignment - 1) / b.alignment * b.alignment;
    }
    CHECK(offsets == expected);
  }
}

TEST_CASE("greedy: the start-order sweep of first fit equals the quadratic scan, many buffers live") {
  // Long lifetimes on a short timeline: hundreds of buffers live at once,
  // so gaps open, merge and are reused at every step; with and without
  // alignment, ties in start time included.
  std::mt19937_64 rng(41);
  for (int round = 0; round < 60; ++round) {
    const std::size_t n = 1 + rng() % (round < 40 ? 50 : 700);
    const auto p = random_problem(rng, n, 1 + static_cast<std::int64_t>(rng() % 40), 1 + rng() % 1000, round % 2 == 0);
    const auto& bs = p.buffers;
    auto order = memo::detail::index_order(n);
    std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
      return bs[a].lower != bs[b].lower ? bs[a].lower < bs[b].lower : bs[a].size_bytes > bs[b].size_bytes;
    });
    INFO("round " << round);
    std::vector<std::uint64_t> offsets;
    const auto peak = memo::detail::place_lowest_in_start_order(bs, order, offsets);
    CHECK(offsets == naive_placement(p, std::vector<std::size_t>(order.begin(), order.end()), false));
    CHECK(pairwise_valid(p, memo::dsa_plan{offsets, peak}));
  }
  // An order not by start time is refused, not planned wrongly.
  const auto p = make({{8, 5, 9}, {8, 0, 9}});
  std::vector<std::uint64_t> offsets;
  const std::vector<std::uint32_t> backwards{0, 1};
  CHECK_THROWS_WITH_AS((void)memo::detail::place_lowest_in_start_order(p.buffers, backwards, offsets),
                       doctest::Contains("the order must be by start time"), memo::error);
}

TEST_CASE("greedy: sizes and alignments near 2^64 are planned exactly or refused, never wrapped") {
  constexpr std::uint64_t half = std::uint64_t{1} << 63;
  // Two 5-byte buffers aligned to 2^63 that overlap: 0 and 2^63.
  memo::dsa_problem two;
  two.buffers = {{1, 5, 0, 2, half}, {2, 5, 1, 3, half}};
  for (const auto& r : {memo::greedy_by_size_solver{}.solve(two), memo::first_fit_solver{}.solve(two),
                        memo::best_fit_heap_solver{}.solve(two)}) {
    CHECK(r.plan.peak_bytes == half + 5);
    CHECK(pairwise_valid(two, r.plan));
  }
  // Stacked largest-alignment first it fits (2^64 - 2 bytes, then 1 byte);
  // first fit by start time puts the 1-byte buffer at 0 and the big one at
  // 2^63, past 2^64: that heuristic refuses, the best of the three plans.
  memo::dsa_problem tight;
  tight.buffers = {{1, 1, 0, 4, 1}, {2, ~std::uint64_t{0} - 1, 1, 3, half}};
  CHECK_NOTHROW(memo::check_problem(tight));
  CHECK_THROWS_WITH_AS((void)memo::first_fit_solver{}.solve(tight), doctest::Contains("past 2^64 - 1"),
                       memo::error);
  const auto best = memo::best_greedy_solver{}.solve(tight);
  CHECK(pairwise_valid(tight, best.plan));
  CHECK(best.plan.peak_bytes == ~std::uint64_t{0});
}

TEST_CASE("greedy: a time limit stops a heuristic with an error saying how far it got") {
  std::mt19937_64 rng(3);
  const auto p = random_problem(rng, 5000, 4000, 100, false);
  memo::dsa_solve_options none;
  none.time_limit_seconds = 0.0;
  CHECK_THROWS_WITH_AS((void)memo::greedy_by_size_solver{}.solve(p, none),
                       doctest::Contains("greedy-size: time limit reached after placing 1023 of 5000"),
                       memo::error);
  CHECK_THROWS_WITH_AS((void)memo::best_fit_heap_solver{}.solve(p, none),
                       doctest::Contains("time limit reached after 4095 of 10000 requests"), memo::error);
  CHECK_THROWS_WITH_AS((void)memo::best_greedy_solver{}.solve(p, none),
                       doctest::Contains("every heuristic failed"), memo::error);
  // A small problem finishes before the first check.
  const auto small = random_problem(rng, 100, 50, 100, false);
  CHECK(pairwise_valid(small, memo::best_greedy_solver{}.solve(small, none).plan));
}
