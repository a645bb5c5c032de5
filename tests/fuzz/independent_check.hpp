// Included by the plan fuzz targets: a plan
// checker written for the fuzzers alone, sharing no code with
// memo::validate or the placement: every pair of buffers compared in
// 128-bit arithmetic. Any plan a solver returns must pass it; a failure is
// a finding (abort).
#pragma once

#include <cstdint>
#include <cstdlib>

#include "memo/plan/dsa_problem.hpp"

namespace fuzz {

__extension__ typedef unsigned __int128 wide;

inline void require_independently_valid(const memo::dsa_problem& p, const memo::dsa_plan& plan) {
  if (plan.offsets.size() != p.buffers.size()) std::abort();
  wide peak = 0;
  for (std::size_t i = 0; i < p.buffers.size(); ++i) {
    const auto& a = p.buffers[i];
    const wide a_end = wide{plan.offsets[i]} + a.size_bytes;
    if (a_end > ~std::uint64_t{0}) std::abort();             // an end past 2^64 - 1
    if (plan.offsets[i] % a.alignment != 0) std::abort();    // misaligned
    if (a_end > peak) peak = a_end;
    for (std::size_t j = 0; j < i; ++j) {
      const auto& b = p.buffers[j];
      const wide b_end = wide{plan.offsets[j]} + b.size_bytes;
      const bool in_time = a.lower < b.upper && b.lower < a.upper;
      const bool in_space = plan.offsets[i] < b_end && plan.offsets[j] < a_end;
      if (in_time && in_space) std::abort();
    }
  }
  if (peak != plan.peak_bytes) std::abort();
  if (p.capacity_bytes && peak > *p.capacity_bytes) std::abort();
}

// The lower bound recomputed at every buffer's start, in 128 bits.
inline wide lower_bound(const memo::dsa_problem& p) {
  wide best = 0;
  for (const auto& at : p.buffers) {
    wide live = 0;
    for (const auto& b : p.buffers) {
      if (b.lower <= at.lower && at.lower < b.upper) live += b.size_bytes;
    }
    if (live > best) best = live;
  }
  return best;
}

}  // namespace fuzz
