#include "memo/plan/caching_allocator.hpp"

#include <doctest/doctest.h>

#include <random>

namespace {
constexpr std::uint64_t mib = std::uint64_t{1} << 20;
}

TEST_CASE("caching allocator: hand-worked trace shows segments, splits, merges and fragmentation") {
  memo::caching_allocator_simulator sim;
  using at = std::pair<std::uint64_t, std::uint64_t>;  // (segment, offset)
  // 100 bytes -> 512, small pool: a new 2 MiB segment 0, split.
  CHECK(sim.malloc(1, 100) == at{0, 0});
  CHECK(sim.reserved_bytes() == 2 * mib);
  // 3 MiB: large, under 10 MiB -> a 20 MiB segment 1, split (17 MiB left).
  CHECK(sim.malloc(2, 3 * mib) == at{1, 0});
  // 12 MiB: best fit is the 17 MiB remainder, split (5 MiB left).
  CHECK(sim.malloc(3, 12 * mib) == at{1, 3 * mib});
  CHECK(sim.reserved_bytes() == 22 * mib);
  // Free 2: a cached 3 MiB hole; its neighbour 3 is in use, so no merge.
  sim.free(2);
  // 6 MiB: holes of 3 and 5 MiB are both too small -> new 20 MiB segment 2.
  CHECK(sim.malloc(4, 6 * mib) == at{2, 0});
  CHECK(sim.reserved_bytes() == 42 * mib);
  // 12 MiB: best fit is segment 2's 14 MiB remainder, split (2 MiB left).
  CHECK(sim.malloc(5, 12 * mib) == at{2, 6 * mib});
  // Free 3: merges with the 3 MiB hole before and the 5 MiB hole after:
  // segment 1 is one 20 MiB free block again.
  sim.free(3);
  // 20 MiB: exactly that block, no new segment.
  CHECK(sim.malloc(6, 20 * mib) == at{1, 0});
  // 1.5 MiB: best fit is the 2 MiB block of segment 2; 0.5 MiB left is not
  // more than 1 MiB, so it is not split and the request gets all 2 MiB.
  CHECK(sim.malloc(7, 3 * mib / 2) == at{2, 18 * mib});
  // 600 bytes -> 1024, small pool, from segment 0's remainder.
  CHECK(sim.malloc(8, 600) == at{0, 512});
  CHECK(sim.reserved_bytes() == 42 * mib);
  const auto& r = sim.report();
  CHECK(r.segments == 3);
  CHECK(r.reserved_peak_bytes == 42 * mib);
  // In use now: 512 + 6 + 12 + 20 + 2 MiB (unsplit) + 1024.
  CHECK(r.allocated_peak_bytes == 40 * mib + 1536);
  CHECK(r.requested_peak_bytes == 100 + 6 * mib + 12 * mib + 20 * mib + 3 * mib / 2 + 600);
}

TEST_CASE("caching allocator: replaying a problem matches feeding the simulator by hand") {
  memo::dsa_problem p;
  // id, size, [lower, upper)
  p.buffers = {{1, 3 * mib, 0, 2, 1}, {2, 12 * mib, 1, 5, 1}, {3, 6 * mib, 3, 6, 1}};
  // Time 0: 1 -> segment 0 (20 MiB); 1: 2 from its remainder; 2: free 1 (3 MiB
  // hole); 3: 6 MiB does not fit the 3 or the 5 MiB hole -> segment 1.
  const auto r = memo::simulate_caching_allocator(p);
  CHECK(r.segments == 2);
  CHECK(r.reserved_peak_bytes == 40 * mib);
  CHECK(r.requested_peak_bytes == memo::lower_bound_bytes(p));
}

TEST_CASE("caching allocator: reserved is never below requested on random traces") {
  std::mt19937_64 rng(3);
  for (int round = 0; round < 50; ++round) {
    memo::dsa_problem p;
    for (std::uint64_t i = 0; i < 200; ++i) {
      const auto lower = static_cast<std::int64_t>(rng() % 100);
      const auto size = rng() % 2 ? 1 + rng() % (2 * mib) : 1 + rng() % (64 * mib);
      p.buffers.push_back({i, size, lower, lower + 1 + static_cast<std::int64_t>(rng() % 30), 1});
    }
    const auto r = memo::simulate_caching_allocator(p);
    CHECK(r.requested_peak_bytes == memo::lower_bound_bytes(p));
    CHECK(r.allocated_peak_bytes >= r.requested_peak_bytes);
    CHECK(r.reserved_peak_bytes >= r.allocated_peak_bytes);
  }
}

TEST_CASE("caching allocator: misuse is an error") {
  memo::caching_allocator_simulator sim;
  CHECK_THROWS_AS(sim.free(4), memo::error);
  sim.malloc(4, 10);
  CHECK_THROWS_AS(sim.malloc(4, 10), memo::error);
  CHECK_THROWS_AS(sim.malloc(5, 0), memo::error);
}
