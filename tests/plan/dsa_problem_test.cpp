#include "memo/plan/dsa_problem.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace {

memo::dsa_problem random_problem(std::mt19937& rng, int buffers, int horizon) {
  memo::dsa_problem problem;
  for (int i = 0; i < buffers; ++i) {
    const auto lower = static_cast<std::int64_t>(rng() % static_cast<unsigned>(horizon));
    const auto length = 1 + static_cast<std::int64_t>(rng() % 6);
    problem.buffers.push_back({static_cast<std::uint64_t>(i), 1 + rng() % 100, lower, lower + length,
                               std::uint64_t{1} << (rng() % 3)});
  }
  return problem;
}

// Reference: the live bytes at every integer instant, summed directly.
std::uint64_t brute_force_lower_bound(const memo::dsa_problem& problem) {
  std::uint64_t best = 0;
  for (std::int64_t t = -1; t < 100; ++t) {
    std::uint64_t live = 0;
    for (const auto& b : problem.buffers) {
      if (b.lower <= t && t < b.upper) live += b.size_bytes;
    }
    best = std::max(best, live);
  }
  return best;
}

// Reference: every pair of buffers checked against every other.
bool brute_force_valid(const memo::dsa_problem& problem, const memo::dsa_plan& plan) {
  std::uint64_t peak = 0;
  for (std::size_t i = 0; i < problem.buffers.size(); ++i) {
    const auto& a = problem.buffers[i];
    if (plan.offsets[i] % a.alignment != 0) return false;
    peak = std::max(peak, plan.offsets[i] + a.size_bytes);
    for (std::size_t j = i + 1; j < problem.buffers.size(); ++j) {
      const auto& b = problem.buffers[j];
      const bool in_time = a.lower < b.upper && b.lower < a.upper;
      const bool in_space = plan.offsets[i] < plan.offsets[j] + b.size_bytes &&
                            plan.offsets[j] < plan.offsets[i] + a.size_bytes;
      if (in_time && in_space) return false;
    }
  }
  return peak == plan.peak_bytes;
}

}  // namespace

TEST_CASE("dsa_problem: the lower bound is the most bytes live at one instant") {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    const auto problem = random_problem(rng, 1 + trial % 20, 30);
    CHECK(memo::lower_bound_bytes(problem) == brute_force_lower_bound(problem));
    // The profile's steps agree with the sum at their own start time.
    for (const auto& step : memo::load_profile(problem)) {
      std::uint64_t live = 0;
      for (const auto& b : problem.buffers) {
        if (b.lower <= step.time && step.time < b.upper) live += b.size_bytes;
      }
      CHECK(step.live_bytes == live);
    }
  }
}

TEST_CASE("dsa_problem: touching intervals do not overlap") {
  memo::dsa_problem problem;
  problem.buffers = {{1, 100, 0, 5}, {2, 100, 5, 9}};
  CHECK(memo::lower_bound_bytes(problem) == 100);
  CHECK(memo::validate(problem, {{0, 0}, 100}));
}

TEST_CASE("dsa_problem: validate agrees with a pairwise check on random plans") {
  std::mt19937 rng(9);
  int valid = 0, invalid = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    const auto problem = random_problem(rng, 2 + trial % 8, 12);
    memo::dsa_plan plan;
    for (const auto& b : problem.buffers) {
      const auto offset = rng() % 200;
      plan.offsets.push_back(rng() % 2 == 0 ? memo::align_up(offset, b.alignment) : offset);
      plan.peak_bytes = std::max(plan.peak_bytes, plan.offsets.back() + b.size_bytes);
    }
    const bool expected = brute_force_valid(problem, plan);
    const auto report = memo::validate(problem, plan);
    CHECK(report.ok == expected);
    CHECK(report.reason.empty() == expected);
    (expected ? valid : invalid) += 1;
  }
  CHECK(valid > 50);  // both outcomes were exercised
  CHECK(invalid > 50);
}

TEST_CASE("dsa_problem: validate names what is wrong") {
  memo::dsa_problem problem;
  problem.buffers = {{7, 64, 0, 4, 64}, {8, 32, 2, 6}};
  CHECK_FALSE(memo::validate(problem, {{0}, 64}));  // wrong length
  auto misaligned = memo::validate(problem, {{32, 0}, 96});
  CHECK(misaligned.reason.find("alignment 64") != std::string::npos);
  auto wrong_peak = memo::validate(problem, {{0, 64}, 100});
  CHECK(wrong_peak.reason.find("claims peak 100") != std::string::npos);
  auto overlap = memo::validate(problem, {{0, 32}, 64});
  CHECK(overlap.reason.find("overlap") != std::string::npos);
  problem.capacity_bytes = 90;
  auto over = memo::validate(problem, {{0, 64}, 96});
  CHECK(over.reason.find("exceeds the capacity 90") != std::string::npos);
  CHECK_THROWS_WITH_AS(memo::require_valid(problem, {{0, 64}, 96}, "greedy"),
                       doctest::Contains("greedy produced an invalid plan"), memo::error);
}

TEST_CASE("dsa_problem: check_problem rejects malformed problems with the numbers") {
  memo::dsa_problem zero;
  zero.buffers = {{1, 0, 0, 1}};
  CHECK_THROWS_WITH_AS(memo::check_problem(zero), doctest::Contains("size must be positive"),
                       memo::error);
  memo::dsa_problem backwards;
  backwards.buffers = {{1, 8, 5, 5}};
  CHECK_THROWS_WITH_AS(memo::check_problem(backwards),
                       doctest::Contains("upper (5) must exceed lower (5)"), memo::error);
  memo::dsa_problem duplicate;
  duplicate.buffers = {{3, 8, 0, 1}, {3, 8, 1, 2}};
  CHECK_THROWS_WITH_AS(memo::check_problem(duplicate), doctest::Contains("duplicate buffer id 3"),
                       memo::error);
  memo::dsa_problem odd_alignment;
  odd_alignment.buffers = {{1, 8, 0, 1, 24}};
  CHECK_THROWS_WITH_AS(memo::check_problem(odd_alignment), doctest::Contains("power of two"),
                       memo::error);
  memo::dsa_problem tight;
  tight.buffers = {{1, 100, 0, 2}, {2, 50, 1, 3}};
  tight.capacity_bytes = 149;
  CHECK_THROWS_WITH_AS(memo::check_problem(tight),
                       doctest::Contains("capacity 149 bytes is below the lower bound 150 bytes"),
                       memo::error);
  tight.capacity_bytes = 150;
  CHECK_NOTHROW(memo::check_problem(tight));
}

namespace {

__extension__ typedef unsigned __int128 wide;

// Reference: the most bytes live at an instant, summed in 128 bits at every
// buffer's start (the load only rises there).
wide wide_lower_bound(const memo::dsa_problem& problem) {
  wide best = 0;
  for (const auto& at : problem.buffers) {
    wide live = 0;
    for (const auto& b : problem.buffers) {
      if (b.lower <= at.lower && at.lower < b.upper) live += b.size_bytes;
    }
    best = std::max(best, live);
  }
  return best;
}

}  // namespace

TEST_CASE("dsa_problem: live sums between 2^63 and 2^64 are exact") {
  memo::dsa_problem p;
  p.buffers = {{0, 3909907711275394215, 1, 4}, {1, 1303302570425131405, 1, 4},
               {2, 3909907711275394215, 0, 4}, {3, 4170568225360420496, 0, 1},
               {4, 781981542255078843, 2, 4},  {5, 2085284112680210248, 0, 3}};
  CHECK_NOTHROW(memo::check_problem(p));
  CHECK(wide{memo::lower_bound_bytes(p)} == wide_lower_bound(p));
  CHECK(memo::lower_bound_bytes(p) == 11990383647911208926u);
  const auto r = memo::require_representable(p);
  CHECK(r.total_bytes == 16160951873271629422u);
  CHECK(r.stacked_peak_bytes == r.total_bytes);  // alignment 1: no padding
}

TEST_CASE("dsa_problem: a problem past 64 bits is refused with the numbers") {
  constexpr std::uint64_t half = std::uint64_t{1} << 63;
  memo::dsa_problem three;
  three.buffers = {{1, half, 0, 2}, {2, half, 0, 2}, {3, half, 5, 6}};
  // Live sum 2^64 at time 0; stacked 3 * 2^63.
  CHECK_THROWS_WITH_AS(memo::check_problem(three),
                       doctest::Contains("stacked end at 27670116110564327424 bytes (sizes total "
                                         "27670116110564327424), more than 2^64 - 1"),
                       memo::error);
  CHECK_THROWS_WITH_AS(memo::lower_bound_bytes(three),
                       doctest::Contains("live at time 0 total 18446744073709551616 bytes"), memo::error);
  // Two 5-byte buffers aligned to 2^63 stack to 2^63 + 5: accepted.
  memo::dsa_problem aligned;
  aligned.buffers = {{1, 5, 0, 2, half}, {2, 5, 1, 3, half}};
  CHECK(memo::require_representable(aligned).stacked_peak_bytes == half + 5);
  // A timeline longer than INT64_MAX ticks.
  memo::dsa_problem long_time;
  long_time.buffers = {{1, 8, std::numeric_limits<std::int64_t>::min(), 0}, {2, 8, 0, 1}};
  CHECK_THROWS_WITH_AS(memo::check_problem(long_time),
                       doctest::Contains("spans from -9223372036854775808 to 1, 9223372036854775809 "
                                         "ticks, more than INT64_MAX"),
                       memo::error);
}

TEST_CASE("dsa_problem: validate computes ends in 128 bits") {
  // Lower bound 200; an offset of 2^64 - 100 wraps to a claimed peak of 100.
  memo::dsa_problem p;
  p.buffers = {{1, 200, 0, 2}};
  const memo::dsa_plan wrapped{{~std::uint64_t{0} - 99}, 100};
  const auto report = memo::validate(p, wrapped);
  CHECK_FALSE(report.ok);
  CHECK(report.reason == "buffer 1 at offset 18446744073709551516 with 200 bytes ends at "
                         "18446744073709551716, past 2^64 - 1 = 18446744073709551615");
  // An end of exactly 2^64 - 1 is fine.
  CHECK(memo::validate(p, {{~std::uint64_t{0} - 200}, ~std::uint64_t{0}}).ok);
}
