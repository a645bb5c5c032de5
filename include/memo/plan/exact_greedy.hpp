// memo/plan/exact_greedy.hpp
//
// The plans memo's exact DSA search starts from and the check it applies to
// plans it did not build (MEMO section 4.2 poses the problem;
// memo/plan/exact_solver.hpp is the solver): `exact_plan_peak`, an exact
// validity check that forms no sum that could wrap; `lowest_fit_greedy`,
// the planner's one lowest-offset placement (placement.hpp) seen through
// the search's deadline; the greedy orders; and the stacked plan of last
// resort.
//
// Guarantees: every plan returned has ends that fit in 64 bits (nullopt
// otherwise), and the greedy honours the deadline it is given.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "memo/core/error.hpp"
#include "memo/plan/dsa_problem.hpp"
#include "memo/plan/exact_sections.hpp"
#include "memo/plan/placement.hpp"

namespace memo::detail {

/// The exact check the search applies to any plan it did not build itself
/// (a warm start) and to its own result: aligned offsets, ends that fit in
/// 64 bits, no two time-overlapping buffers sharing a byte, and the capacity.
/// Returns the peak, or nullopt with `reason` set.
inline std::optional<std::uint64_t> exact_plan_peak(const std::vector<dsa_buffer>& buffers,
                                                    const std::vector<std::uint64_t>& offsets,
                                                    std::optional<std::uint64_t> capacity,
                                                    std::string& reason) {
  if (offsets.size() != buffers.size()) {
    reason = std::to_string(offsets.size()) + " offsets for " + std::to_string(buffers.size()) + " buffers";
    return std::nullopt;
  }
  std::uint64_t peak = 0;
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    const auto& b = buffers[i];
    if (offsets[i] % b.alignment != 0) {
      reason = "buffer " + std::to_string(b.id) + " at offset " + std::to_string(offsets[i]) +
               " breaks its alignment " + std::to_string(b.alignment);
      return std::nullopt;
    }
    if (offsets[i] > exact_u64_max - b.size_bytes) {
      reason = "buffer " + std::to_string(b.id) + " at offset " + std::to_string(offsets[i]) + " with " +
               std::to_string(b.size_bytes) + " bytes ends past 2^64 - 1";
      return std::nullopt;
    }
    peak = std::max(peak, offsets[i] + b.size_bytes);
  }
  if (capacity && peak > *capacity) {
    reason = "peak " + std::to_string(peak) + " bytes exceeds the capacity " + std::to_string(*capacity);
    return std::nullopt;
  }
  // Sweep in time (frees before mallocs at one instant: intervals
  // [lower, upper) that touch do not meet); live buffers ordered by offset.
  std::vector<std::pair<std::uint64_t, std::uint32_t>> live;  // (offset, index), sorted
  for (const auto& event : timeline_events(buffers)) {
    const std::int64_t time = event.time;
    const auto i = static_cast<std::uint32_t>(event.index);
    const std::pair<std::uint64_t, std::uint32_t> key{offsets[i], i};
    const auto pos = std::lower_bound(live.begin(), live.end(), key);
    if (!event.is_malloc) {
      live.erase(pos);
      continue;
    }
    auto clash = [&](std::uint32_t j) {
      reason = "buffers " + std::to_string(buffers[i].id) + " and " + std::to_string(buffers[j].id) +
               " share addresses while both are live at time " + std::to_string(time);
    };
    if (pos != live.end() && pos->first - offsets[i] < buffers[i].size_bytes) {
      clash(pos->second);
      return std::nullopt;
    }
    if (pos != live.begin()) {
      const auto& below = *std::prev(pos);
      if (offsets[i] - below.first < buffers[below.second].size_bytes) {
        clash(below.second);
        return std::nullopt;
      }
    }
    live.insert(pos, key);
  }
  return peak;
}

/// Lowest-offset greedy in `order`: the planner's one placement
/// (placement.hpp, fit_rule::lowest). Fills `offsets` (parallel to
/// `buffers`) and returns the peak, or nullopt when an end would pass
/// 2^64 - 1 or the deadline passed first.
inline std::optional<std::uint64_t> lowest_fit_greedy(const std::vector<dsa_buffer>& buffers,
                                                      const std::vector<std::uint32_t>& order,
                                                      std::vector<std::uint64_t>& offsets,
                                                      deadline_clock* until = nullptr) {
  const auto deadline = until != nullptr ? until->deadline() : deadline_clock::clock::time_point::max();
  try {
    return place_in_order(buffers, order, fit_rule::lowest, offsets, deadline);
  } catch (const error&) {
    if (until != nullptr) (void)until->expired_now();
    return std::nullopt;  // past the deadline, or an end past 2^64 - 1
  }
}

/// Every buffer above the previous one (aligned): valid for any lifetimes,
/// O(n), and the plan of last resort when the time limit leaves no time for
/// a greedy. Nullopt when its peak does not fit in 64 bits.
inline std::optional<std::uint64_t> stacked_plan(const std::vector<dsa_buffer>& buffers,
                                                 std::vector<std::uint64_t>& offsets) {
  offsets.assign(buffers.size(), 0);
  std::uint64_t top = 0;
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    const std::uint64_t at = saturating_align_up(top, buffers[i].alignment - 1);
    if (!ends_within(at, buffers[i].size_bytes, exact_u64_max)) return std::nullopt;
    offsets[i] = at;
    top = at + buffers[i].size_bytes;
  }
  return top;
}

/// The better of two greedy orders (decreasing size; decreasing lifetime),
/// each stopped by `until`; when neither finished, the stacked plan.
/// Returns nullopt only when no plan it made has a 64-bit peak.
inline std::optional<std::uint64_t> greedy_upper_bound(const std::vector<dsa_buffer>& buffers,
                                                       std::vector<std::uint64_t>& offsets,
                                                       deadline_clock& until) {
  std::vector<std::uint32_t> order(buffers.size());
  std::iota(order.begin(), order.end(), 0u);
  auto length = [&](std::uint32_t i) { return lifetime_ticks(buffers[i]); };
  std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    if (buffers[a].size_bytes != buffers[b].size_bytes) return buffers[a].size_bytes > buffers[b].size_bytes;
    if (length(a) != length(b)) return length(a) > length(b);
    return a < b;
  });
  std::optional<std::uint64_t> best = lowest_fit_greedy(buffers, order, offsets, &until);
  if (!until.expired_now()) {
    std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
      if (length(a) != length(b)) return length(a) > length(b);
      if (buffers[a].size_bytes != buffers[b].size_bytes) return buffers[a].size_bytes > buffers[b].size_bytes;
      return a < b;
    });
    std::vector<std::uint64_t> other;
    const auto second = lowest_fit_greedy(buffers, order, other, &until);
    if (second && (!best || *second < *best)) {
      best = second;
      offsets.swap(other);
    }
  }
  if (!best && until.expired()) best = stacked_plan(buffers, offsets);
  return best;
}

/// `greedy_upper_bound` without a deadline; throws `memo::error` when no
/// greedy plan has a peak that fits in 64 bits.
inline std::uint64_t greedy_upper_bound(const std::vector<dsa_buffer>& buffers,
                                        std::vector<std::uint64_t>& offsets) {
  deadline_clock never(std::chrono::steady_clock::time_point::max());
  const auto peak = greedy_upper_bound(buffers, offsets, never);
  expects(peak.has_value(), [&] {
    return "no greedy plan for these " + std::to_string(buffers.size()) +
           " buffers has a peak that fits in 64 bits";
  });
  return *peak;
}

}  // namespace memo::detail
