// memo/plan/exact_greedy.hpp
//
// The plans memo's exact DSA search starts from and the check it applies to
// plans it did not build (MEMO section 4.2 poses the problem;
// memo/plan/exact_solver.hpp is the solver): `exact_plan_peak`, an exact
// validity check that forms no sum that could wrap; `lowest_fit_greedy`,
// the solver's one placement routine (kept in one function so that it can
// be exchanged for the planner's shared one); the greedy orders; and the
// stacked plan of last resort.
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
  // Sweep in time; live buffers ordered by offset. Frees before mallocs at
  // one instant ([lower, upper) intervals that touch do not meet).
  std::vector<std::pair<std::int64_t, std::uint32_t>> events;  // (time, 2 * index + is_malloc)
  events.reserve(2 * buffers.size());
  for (std::uint32_t i = 0; i < buffers.size(); ++i) {
    events.emplace_back(buffers[i].lower, 2 * i + 1);
    events.emplace_back(buffers[i].upper, 2 * i);
  }
  std::sort(events.begin(), events.end(), [](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first < b.first;
    return (a.second & 1u) < (b.second & 1u);
  });
  std::vector<std::pair<std::uint64_t, std::uint32_t>> live;  // (offset, index), sorted
  for (const auto& event : events) {
    const std::int64_t time = event.first;
    const std::uint32_t code = event.second;
    const std::uint32_t i = code / 2;
    const std::pair<std::uint64_t, std::uint32_t> key{offsets[i], i};
    const auto pos = std::lower_bound(live.begin(), live.end(), key);
    if ((code & 1u) == 0) {
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

/// Lowest-offset placement in a given order: each buffer goes to the lowest
/// aligned offset where it clears every time-overlapping buffer placed so
/// far. This is the one placement routine of the exact search; it fills
/// `offsets` (parallel to `buffers`) and returns the peak, or nullopt when an
/// end would pass 2^64 - 1 or the deadline passed first. Placed buffers are
/// indexed by time buckets (long ones kept apart), so a buffer is compared
/// with its time neighbours and the long buffers, not with every buffer.
inline std::optional<std::uint64_t> lowest_fit_greedy(const std::vector<dsa_buffer>& buffers,
                                                      const std::vector<std::uint32_t>& order,
                                                      std::vector<std::uint64_t>& offsets,
                                                      deadline_clock* until = nullptr) {
  const std::size_t n = buffers.size();
  offsets.assign(n, 0);
  std::vector<std::int64_t> times;
  times.reserve(n);
  for (const auto& b : buffers) times.push_back(b.lower);
  std::sort(times.begin(), times.end());
  times.erase(std::unique(times.begin(), times.end()), times.end());
  // Bucket k holds the buffers live at some start time of ranks [k w, (k+1) w).
  const std::size_t width = std::max<std::size_t>(1, times.size() / std::max<std::size_t>(1, n / 4));
  const std::size_t bucket_count = (times.size() + width - 1) / width;
  auto span_of = [&](const dsa_buffer& b) {
    const auto lo = static_cast<std::size_t>(std::lower_bound(times.begin(), times.end(), b.lower) - times.begin());
    const auto hi = static_cast<std::size_t>(std::lower_bound(times.begin(), times.end(), b.upper) - times.begin());
    return std::pair<std::size_t, std::size_t>{lo / width, (hi + width - 1) / width};
  };
  std::vector<std::vector<std::uint32_t>> buckets(bucket_count);
  std::vector<std::uint32_t> long_placed;  // spanning more than 16 buckets
  std::vector<std::uint32_t> seen(n, 0);
  std::uint32_t stamp = 0;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> busy;  // [offset, end) of neighbours
  std::uint64_t peak = 0;
  for (const std::uint32_t i : order) {
    const auto& b = buffers[i];
    const auto [lo, hi] = span_of(b);
    ++stamp;
    busy.clear();
    auto consider = [&](std::uint32_t j) {
      if (seen[j] == stamp) return;
      seen[j] = stamp;
      if (b.overlaps_in_time(buffers[j])) busy.emplace_back(offsets[j], offsets[j] + buffers[j].size_bytes);
    };
    for (std::size_t k = lo; k < hi; ++k) {
      for (const std::uint32_t j : buckets[k]) consider(j);
    }
    for (const std::uint32_t j : long_placed) consider(j);
    if (until != nullptr && until->expired(busy.size() + 1)) return std::nullopt;
    std::sort(busy.begin(), busy.end());
    const std::uint64_t mask = b.alignment - 1;
    std::uint64_t candidate = 0;
    for (const auto& [start, end] : busy) {
      const std::uint64_t at = saturating_align_up(candidate, mask);
      if (ends_within(at, b.size_bytes, start)) break;
      candidate = std::max(candidate, end);
    }
    const std::uint64_t at = saturating_align_up(candidate, mask);
    if (!ends_within(at, b.size_bytes, exact_u64_max)) return std::nullopt;
    offsets[i] = at;
    peak = std::max(peak, at + b.size_bytes);
    if (hi - lo > 16) {
      long_placed.push_back(i);
    } else {
      for (std::size_t k = lo; k < hi; ++k) buckets[k].push_back(i);
    }
  }
  return peak;
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
