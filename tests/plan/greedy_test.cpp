#include "memo/plan/greedy.hpp"

#include <doctest/doctest.h>

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
