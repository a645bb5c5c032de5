// libFuzzer target: the exact DSA search on small problems built from the
// input bytes, sizes and times anywhere in their 64-bit ranges. Every plan it
// returns is checked by a validator written here (128-bit sums, every pair
// of buffers), never by memo::validate; a problem it rejects must raise
// memo::error. On up to six buffers a proven result must equal the
// brute-force optimum (every order, lowest aligned offset first). One input
// byte turns switches of memo::exact_options off (dominance, section
// bounds, symmetry, decomposition, restarts, tight branching) and sets the
// restarts' share: the answers must stay exact with any of them.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <vector>

#include "memo/plan/exact_solver.hpp"

namespace {

__extension__ typedef unsigned __int128 u128;

struct reader {
  const std::uint8_t* data;
  std::size_t size;
  std::uint64_t take(std::size_t bytes) {
    std::uint64_t v = 0;
    for (std::size_t k = 0; k < bytes && size > 0; ++k, ++data, --size) v = (v << 8) | *data;
    return v;
  }
};

u128 brute_force(const std::vector<memo::dsa_buffer>& buffers) {
  std::vector<std::size_t> perm(buffers.size());
  std::iota(perm.begin(), perm.end(), std::size_t{0});
  u128 best = ~u128{0};
  std::vector<u128> offset(buffers.size());
  do {
    u128 peak = 0;
    for (std::size_t k = 0; k < perm.size(); ++k) {
      const auto& b = buffers[perm[k]];
      u128 at = 0;
      for (std::size_t q = 0; q < k; ++q) {
        const auto& o = buffers[perm[q]];
        if (b.overlaps_in_time(o)) at = std::max(at, offset[perm[q]] + o.size_bytes);
      }
      at = (at + b.alignment - 1) / b.alignment * b.alignment;
      offset[perm[k]] = at;
      peak = std::max(peak, at + b.size_bytes);
    }
    best = std::min(best, peak);
  } while (std::next_permutation(perm.begin(), perm.end()));
  return best;
}

void check_plan(const memo::dsa_problem& problem, const memo::dsa_result& result) {
  const auto& buffers = problem.buffers;
  if (result.plan.offsets.size() != buffers.size()) std::abort();
  u128 peak = 0;
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    const auto& a = buffers[i];
    const std::uint64_t at = result.plan.offsets[i];
    if (at % a.alignment != 0) std::abort();
    peak = std::max(peak, u128{at} + a.size_bytes);
    for (std::size_t j = 0; j < i; ++j) {
      const auto& b = buffers[j];
      if (!a.overlaps_in_time(b)) continue;
      const std::uint64_t bt = result.plan.offsets[j];
      if (!(u128{at} + a.size_bytes <= bt || u128{bt} + b.size_bytes <= at)) std::abort();
    }
  }
  if (peak != result.plan.peak_bytes) std::abort();
  if (problem.capacity_bytes && peak > *problem.capacity_bytes) std::abort();
  if (result.plan.peak_bytes < result.lower_bound_bytes) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  reader in{data, size};
  const std::uint64_t head = in.take(1);
  const std::size_t n = 1 + head % 8;
  const bool wide_sizes = (head & 0x10u) != 0;
  const bool with_capacity = (head & 0x20u) != 0;
  memo::dsa_problem problem;
  for (std::size_t i = 0; i < n && in.size > 0; ++i) {
    memo::dsa_buffer b;
    b.id = i;
    const std::uint64_t shape = in.take(1);
    // Times: small around a base that may sit at either end of int64.
    const std::int64_t base = (shape & 0x80u) != 0 ? INT64_MAX - 16 : ((shape & 0x40u) != 0 ? INT64_MIN : 0);
    const std::uint64_t t = in.take(1);
    b.lower = base + static_cast<std::int64_t>(t % 8);
    b.upper = b.lower + 1 + static_cast<std::int64_t>((t >> 3) % 8);
    if (b.upper <= b.lower) continue;  // past INT64_MAX: not a buffer
    b.size_bytes = wide_sizes ? in.take(8) : in.take(1);
    if (b.size_bytes == 0) b.size_bytes = 1;
    b.alignment = std::uint64_t{1} << ((shape & 0x3fu) % (wide_sizes ? 64 : 6));
    problem.buffers.push_back(b);
  }
  if (with_capacity) problem.capacity_bytes = in.take(8);
  memo::dsa_solve_options options;
  options.time_limit_seconds = 2.0;
  memo::exact_options switches;
  if (head % 3 == 0) {  // a tiny membership budget: most buffers summarised
    switches.membership_per_buffer = 0;
    switches.membership_floor = head % 5;
  }
  // Every switch off now and then, from one more input byte: each must keep
  // the answers exact.
  const std::uint64_t off = in.take(1);
  switches.dominance = (off & 0x01u) == 0;
  switches.section_bounds = (off & 0x02u) == 0;
  switches.symmetry = (off & 0x04u) == 0;
  switches.decomposition = (off & 0x08u) == 0;
  switches.restarts = (off & 0x10u) == 0;
  switches.tight_branching = (off & 0x20u) == 0;
  switches.restart_share = static_cast<std::uint32_t>(off >> 6);  // 0 to 3
  switches.alignment_bounds = (head & 0x40u) == 0;
  memo::exact_solver solver(switches);
  try {
    const auto result = solver.solve(problem, options);
    check_plan(problem, result);
    if (problem.buffers.size() <= 6 && !problem.capacity_bytes && result.proven_optimal &&
        u128{result.plan.peak_bytes} != brute_force(problem.buffers)) {
      std::abort();
    }
  } catch (const memo::error& e) {
    // Rejected: sizes that do not fit 64 bits, a capacity below the bound
    // or proven infeasible, or no plan in time. Never a wrong plan: a
    // capacity called infeasible must be below the brute-force optimum.
    if (problem.capacity_bytes && problem.buffers.size() <= 6 &&
        std::strstr(e.message().c_str(), "is infeasible") != nullptr &&
        brute_force(problem.buffers) <= *problem.capacity_bytes) {
      std::abort();
    }
  }
  return 0;
}
