// tests/plan/dsa_reference.hpp
//
// Independent references for the DSA solvers' tests, written without the
// solvers' code: a brute force over placement orders, the load bound, a plan
// validator (not memo::validate), and two instance generators (random
// buffers, and a rectangle cut into buffers so that a plan at the lower
// bound exists and leaves no byte free). Include after doctest.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "memo/plan/dsa_problem.hpp"

namespace dsa_reference {

using memo::dsa_buffer;

__extension__ typedef unsigned __int128 u128;

// Reference: every gravity-compressed plan lists, by increasing offset, as a
// sequence in which each buffer sits at the lowest aligned offset above the
// earlier buffers it shares time with. Trying every permutation therefore
// reaches an optimal plan. In 128 bits, so that it is exact for any sizes.
inline u128 brute_force_peak128(const std::vector<dsa_buffer>& buffers) {
  std::vector<std::size_t> perm(buffers.size());
  std::iota(perm.begin(), perm.end(), std::size_t{0});
  u128 best = ~u128{0};
  std::vector<u128> offset(buffers.size());
  do {
    u128 peak = 0;
    for (std::size_t k = 0; k < perm.size() && peak < best; ++k) {
      const auto& b = buffers[perm[k]];
      u128 at = 0;
      for (std::size_t q = 0; q < k; ++q) {
        const auto& o = buffers[perm[q]];
        if (b.lower < o.upper && o.lower < b.upper) at = std::max(at, offset[perm[q]] + o.size_bytes);
      }
      at = (at + b.alignment - 1) / b.alignment * b.alignment;
      offset[perm[k]] = at;
      peak = std::max(peak, at + b.size_bytes);
    }
    best = std::min(best, peak);
  } while (std::next_permutation(perm.begin(), perm.end()));
  return buffers.empty() ? 0 : best;
}

inline std::uint64_t brute_force_peak(const std::vector<dsa_buffer>& buffers) {
  const u128 best = brute_force_peak128(buffers);
  REQUIRE(best <= UINT64_MAX);
  return static_cast<std::uint64_t>(best);
}

// The most bytes live at one instant, from every start time, in 128 bits.
inline u128 load_bound128(const std::vector<dsa_buffer>& buffers) {
  u128 best = 0;
  for (const auto& at : buffers) {
    u128 live = 0;
    for (const auto& b : buffers) {
      if (b.lower <= at.lower && at.lower < b.upper) live += b.size_bytes;
    }
    best = std::max(best, live);
  }
  return best;
}

// Independent validator (not memo::validate): offsets aligned, every pair of
// time-overlapping buffers disjoint in address, all in 128 bits; returns the
// peak, which must fit in 64 bits.
inline std::uint64_t independent_peak(const std::vector<dsa_buffer>& buffers, const std::vector<std::uint64_t>& offsets) {
  REQUIRE(offsets.size() == buffers.size());
  u128 peak = 0;
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    INFO("buffer " << buffers[i].id << " at " << offsets[i]);
    REQUIRE(offsets[i] % buffers[i].alignment == 0);
    peak = std::max(peak, u128{offsets[i]} + buffers[i].size_bytes);
    for (std::size_t j = 0; j < i; ++j) {
      const auto& a = buffers[i];
      const auto& b = buffers[j];
      if (!(a.lower < b.upper && b.lower < a.upper)) continue;
      INFO("and buffer " << b.id << " at " << offsets[j]);
      REQUIRE((u128{offsets[i]} + a.size_bytes <= offsets[j] || u128{offsets[j]} + b.size_bytes <= offsets[i]));
    }
  }
  REQUIRE(peak <= UINT64_MAX);
  return static_cast<std::uint64_t>(peak);
}

inline std::vector<dsa_buffer> random_buffers(std::mt19937_64& rng, std::size_t n, std::int64_t horizon,
                                       std::uint64_t max_size, bool aligned) {
  std::vector<dsa_buffer> buffers;
  for (std::size_t i = 0; i < n; ++i) {
    dsa_buffer b;
    b.id = 100 + i;
    if (i > 0 && rng() % 5 == 0) {  // an interchangeable copy of the previous buffer
      b = buffers.back();
      b.id = 100 + i;
      buffers.push_back(b);
      continue;
    }
    b.lower = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(horizon));
    b.upper = b.lower + 1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(horizon));
    b.size_bytes = 1 + rng() % max_size;
    b.alignment = aligned ? (std::uint64_t{1} << (rng() % 4)) : 1;
    buffers.push_back(b);
  }
  return buffers;
}

// A w x h rectangle (h ticks of time, w bytes) cut at random into `pieces`
// buffers: every instant carries exactly w bytes, so a plan at the lower
// bound exists and leaves no byte free. Written here, independent of
// bench/exact_bench.cpp and of the solvers.
inline std::vector<dsa_buffer> cut_rectangle(std::mt19937_64& rng, std::size_t pieces, std::int64_t ticks,
                                             std::uint64_t bytes) {
  struct rect {
    std::int64_t t0, t1;
    std::uint64_t b0, b1;
  };
  std::vector<rect> rects = {{0, ticks, 0, bytes}};
  for (int guard = 0; rects.size() < pieces && guard < 100000; ++guard) {
    const std::size_t k = rng() % rects.size();
    const rect r = rects[k];
    if (rng() % 2 == 0 && r.t1 - r.t0 >= 2) {
      const std::int64_t at = r.t0 + 1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(r.t1 - r.t0 - 1));
      rects[k] = {r.t0, at, r.b0, r.b1};
      rects.push_back({at, r.t1, r.b0, r.b1});
    } else if (r.b1 - r.b0 >= 2) {
      const std::uint64_t at = r.b0 + 1 + rng() % (r.b1 - r.b0 - 1);
      rects[k] = {r.t0, r.t1, r.b0, at};
      rects.push_back({r.t0, r.t1, at, r.b1});
    }
  }
  std::vector<dsa_buffer> buffers;
  for (const auto& r : rects) buffers.push_back({buffers.size(), r.b1 - r.b0, r.t0, r.t1, 1});
  std::shuffle(buffers.begin(), buffers.end(), rng);
  return buffers;
}

}  // namespace dsa_reference
