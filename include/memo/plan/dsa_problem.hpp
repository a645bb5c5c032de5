// memo/plan/dsa_problem.hpp
//
// The offline Dynamic Storage Allocation (DSA) problem that MEMO's memory
// planner solves (MEMO section 4.2): every buffer has a size and a live
// interval [lower, upper) on a discrete timeline; a plan gives every buffer
// an offset so that buffers live at the same instant never share an address,
// and its peak is the highest byte any buffer reaches. The lower bound is
// the largest total size live at one instant; a plan that reaches it has no
// fragmentation at all.
//
// This header holds the values every solver shares: the problem, the plan,
// the solver result, the `DsaSolver` concept, the lower bound and
// `validate`, which every solver's output passes through before anyone uses
// it.
//
// Limits, decided here once for every solver: a problem is accepted
// (`check_problem`, through `require_representable`) only when
//   * the plan that stacks every buffer on top of the others (in decreasing
//     alignment, so no padding is wasted) ends at or below 2^64 - 1 bytes:
//     then some valid plan has every offset and end in 64 bits, and every
//     live sum, the lower bound and the sum of all sizes fit in a
//     std::uint64_t (they are all at most that stacked peak);
//   * the whole timeline (latest upper minus earliest lower) spans at most
//     INT64_MAX ticks, so every lifetime and every time difference fits in
//     a std::int64_t.
// A problem past either limit is an error naming the numbers. Live sums and
// the stacked peak are computed in unsigned __int128, so they are exact
// whatever the input; `validate` computes every end in 128 bits too, so a
// plan whose offset + size passes 2^64 is invalid rather than wrapped. A
// solver still computes its own offsets with checked arithmetic: a
// heuristic whose plan would pass 2^64 (alignment padding can take it above
// the stacked peak) raises an error instead of wrapping.
#pragma once

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <limits>
#include <iterator>
#include <optional>
#include <set>
#include <source_location>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "memo/core/bytes.hpp"
#include "memo/core/error.hpp"

namespace memo {

/// One buffer: `size_bytes` bytes live on the half-open interval [lower, upper).
struct dsa_buffer {
  std::uint64_t id = 0;          ///< the caller's name for it (trace id, CSV id)
  std::uint64_t size_bytes = 0;  ///< > 0
  std::int64_t lower = 0;        ///< first instant it is live
  std::int64_t upper = 0;        ///< first instant it is dead again; > lower
  std::uint64_t alignment = 1;   ///< its offset must be a multiple of this

  [[nodiscard]] bool overlaps_in_time(const dsa_buffer& other) const noexcept {
    return lower < other.upper && other.lower < upper;
  }
  friend bool operator==(const dsa_buffer&, const dsa_buffer&) = default;
};

struct dsa_problem {
  std::vector<dsa_buffer> buffers;
  /// "Fit into this capacity" when set; "minimise the peak" otherwise.
  std::optional<std::uint64_t> capacity_bytes;
};

/// Raised by a solver that proved no plan fits `problem.capacity_bytes`
/// (an answer, unlike running out of time: a longer limit will not help).
class capacity_infeasible : public error {
 public:
  explicit capacity_infeasible(std::string message, std::source_location where = std::source_location::current())
      : error(std::move(message), where) {}
};

/// Offsets parallel to `problem.buffers`, and the peak they reach.
struct dsa_plan {
  std::vector<std::uint64_t> offsets;
  std::uint64_t peak_bytes = 0;
  friend bool operator==(const dsa_plan&, const dsa_plan&) = default;
};

/// What every solver returns.
struct dsa_result {
  dsa_plan plan;
  std::uint64_t lower_bound_bytes = 0;
  bool proven_optimal = false;  ///< no plan with a smaller peak exists
  double seconds = 0.0;         ///< wall time of the solve
  std::string solver;           ///< "greedy-size", "mip", "exact", ...
};

struct dsa_solve_options {
  double time_limit_seconds = 10.0;
  /// A valid plan to start from (an upper bound); solvers may ignore it.
  std::optional<dsa_plan> warm_start;
};

/// A DSA solver: `solve(problem, options)` returns a valid plan or throws.
template <class S>
concept DsaSolver = requires(S& solver, const dsa_problem& problem,
                             const dsa_solve_options& options) {
  { solver.solve(problem, options) } -> std::same_as<dsa_result>;
  { solver.name() } -> std::convertible_to<std::string_view>;
};

/// Checks the problem itself: positive sizes, upper > lower, power-of-two
/// alignments, unique ids, `require_representable`, and a capacity no
/// smaller than the lower bound. Throws `memo::error` naming the buffer and
/// the bound it broke.
void check_problem(const dsa_problem& problem);

/// What `require_representable` measured (all of it fits in 64 bits once it
/// returned).
struct representable_problem {
  std::uint64_t total_bytes = 0;         ///< sum of all sizes
  std::uint64_t stacked_peak_bytes = 0;  ///< every buffer stacked, decreasing alignment
  std::int64_t first_time = 0;           ///< earliest lower (0 when empty)
  std::int64_t last_time = 0;            ///< latest upper (0 when empty)
};

/// The limits every solver relies on (see the top of this file): the
/// stacked plan ends within 64 bits and the timeline spans at most
/// INT64_MAX ticks. Throws `memo::error` naming the numbers otherwise. Needs
/// upper > lower and power-of-two alignments (check_problem checks those
/// first).
representable_problem require_representable(const dsa_problem& problem);

/// The largest total size live at one instant. Exact for any problem;
/// throws `memo::error` when that sum passes 2^64 - 1 (a problem that passed
/// `check_problem` never does).
std::uint64_t lower_bound_bytes(const dsa_problem& problem);

/// The load (total live bytes) on each maximal interval where it is
/// constant: [time, next time) carries `live_bytes`. For plotting.
struct load_step {
  std::int64_t time = 0;
  std::uint64_t live_bytes = 0;
};
std::vector<load_step> load_profile(const dsa_problem& problem);

struct validation {
  bool ok = true;
  std::string reason;  ///< empty when ok; otherwise the first violation found
  explicit operator bool() const noexcept { return ok; }
};

/// No two time-overlapping buffers overlap in address space, every offset
/// respects its alignment, the peak is the true maximum end address, and the
/// peak fits the capacity when one is set.
validation validate(const dsa_problem& problem, const dsa_plan& plan);

/// `validate`, throwing `memo::error` with the reason.
inline void require_valid(const dsa_problem& problem, const dsa_plan& plan,
                          std::string_view solver_name = {}) {
  const auto report = validate(problem, plan);
  if (!report) {
    throw error(solver_name.empty() ? "invalid plan: " + report.reason
                                    : std::string(solver_name) + " produced an invalid plan: " +
                                          report.reason);
  }
}

// ---------------------------------------------------------------------------

namespace detail {

/// When a solve that started at `start` must stop: the options' time limit,
/// checked for sign and capped so the arithmetic cannot overflow.
inline std::chrono::steady_clock::time_point solve_deadline(
    const dsa_solve_options& options, std::chrono::steady_clock::time_point start) {
  expects(options.time_limit_seconds >= 0.0, [&] {
    return "time limit must be non-negative, got " + std::to_string(options.time_limit_seconds);
  });
  return start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                     std::chrono::duration<double>(std::min(options.time_limit_seconds, 1e7)));
}

/// Bytes in 128 bits: wide enough for any sum of 64-bit sizes.
__extension__ typedef unsigned __int128 wide_bytes;
inline constexpr std::uint64_t max_bytes = std::numeric_limits<std::uint64_t>::max();

inline std::string wide_to_string(wide_bytes v) {
  if (v == 0) return "0";
  std::string digits;
  while (v != 0) {
    digits.insert(digits.begin(), static_cast<char>('0' + static_cast<int>(v % 10)));
    v /= 10;
  }
  return digits;
}

/// One request of the timeline: buffer `index` is allocated (`is_malloc`)
/// or freed at `time`.
struct timeline_event {
  std::int64_t time;
  bool is_malloc;
  std::size_t index;
};

/// The order in which requests happen: by time, frees before mallocs at the
/// same instant (intervals [lower, upper) that touch do not overlap), then
/// by buffer index. Every replay of a problem (the load sweep, the online
/// heap, the caching-allocator simulator, the layer stacker) uses it.
inline bool happens_before(const timeline_event& a, const timeline_event& b) noexcept {
  if (a.time != b.time) return a.time < b.time;
  if (a.is_malloc != b.is_malloc) return !a.is_malloc;
  return a.index < b.index;
}

/// Every buffer's malloc and free, in `happens_before` order.
inline std::vector<timeline_event> timeline_events(const std::vector<dsa_buffer>& buffers) {
  std::vector<timeline_event> events;
  events.reserve(buffers.size() * 2);
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    events.push_back({buffers[i].lower, true, i});
    events.push_back({buffers[i].upper, false, i});
  }
  // Through a lambda, so the comparison is inlined rather than called by pointer.
  std::sort(events.begin(), events.end(),
            [](const timeline_event& x, const timeline_event& y) { return happens_before(x, y); });
  return events;
}

}  // namespace detail

inline std::vector<load_step> load_profile(const dsa_problem& problem) {
  std::vector<load_step> steps;
  detail::wide_bytes live = 0;  // exact: 128 bits hold any sum of 64-bit sizes
  const auto& buffers = problem.buffers;
  const auto events = detail::timeline_events(buffers);
  for (std::size_t i = 0; i < events.size();) {
    const std::int64_t time = events[i].time;
    for (; i < events.size() && events[i].time == time; ++i) {
      // Frees come first within an instant, so this never goes below zero.
      const auto size = buffers[events[i].index].size_bytes;
      live = events[i].is_malloc ? live + size : live - size;
    }
    expects(live <= detail::max_bytes, [&] {
      return "the buffers live at time " + std::to_string(time) + " total " +
             detail::wide_to_string(live) + " bytes, more than 2^64 - 1 = " +
             std::to_string(detail::max_bytes) + ": the problem does not fit in 64 bits";
    });
    if (!steps.empty() && steps.back().live_bytes == live) continue;
    steps.push_back({time, static_cast<std::uint64_t>(live)});
  }
  return steps;
}

inline std::uint64_t lower_bound_bytes(const dsa_problem& problem) {
  std::uint64_t best = 0;
  for (const auto& step : load_profile(problem)) best = std::max(best, step.live_bytes);
  return best;
}

inline representable_problem require_representable(const dsa_problem& problem) {
  representable_problem r;
  const auto& buffers = problem.buffers;
  if (buffers.empty()) return r;
  // Stacked in decreasing alignment, each buffer starts at a multiple of
  // its alignment with no padding: every earlier end is a multiple of an
  // alignment at least as large (all are powers of two).
  std::vector<std::size_t> order(buffers.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return buffers[a].alignment > buffers[b].alignment;
  });
  detail::wide_bytes top = 0;
  detail::wide_bytes total = 0;
  std::int64_t first = buffers.front().lower;
  std::int64_t last = buffers.front().upper;
  for (const std::size_t i : order) {
    const auto& b = buffers[i];
    const detail::wide_bytes a = b.alignment;
    top = (top + a - 1) / a * a + b.size_bytes;
    total += b.size_bytes;
    first = std::min(first, b.lower);
    last = std::max(last, b.upper);
  }
  expects(top <= detail::max_bytes, [&] {
    return "the " + std::to_string(buffers.size()) + " buffers stacked end at " +
           detail::wide_to_string(top) + " bytes (sizes total " + detail::wide_to_string(total) +
           "), more than 2^64 - 1 = " + std::to_string(detail::max_bytes) +
           ": the problem does not fit in 64 bits";
  });
  // The span as unsigned: last - first cannot wrap there.
  const std::uint64_t span = static_cast<std::uint64_t>(last) - static_cast<std::uint64_t>(first);
  expects(span <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()), [&] {
    return "the timeline spans from " + std::to_string(first) + " to " + std::to_string(last) +
           ", " + std::to_string(span) + " ticks, more than INT64_MAX = " +
           std::to_string(std::numeric_limits<std::int64_t>::max());
  });
  r.total_bytes = static_cast<std::uint64_t>(total);
  r.stacked_peak_bytes = static_cast<std::uint64_t>(top);
  r.first_time = first;
  r.last_time = last;
  return r;
}

inline void check_problem(const dsa_problem& problem) {
  std::vector<std::uint64_t> ids;
  ids.reserve(problem.buffers.size());
  for (std::size_t i = 0; i < problem.buffers.size(); ++i) {
    const auto& b = problem.buffers[i];
    const auto where = [&] { return "buffer " + std::to_string(b.id) + " (index " + std::to_string(i) + ")"; };
    expects(b.size_bytes > 0, [&] { return where() + ": size must be positive, got 0"; });
    expects(b.upper > b.lower, [&] {
      return where() + ": upper (" + std::to_string(b.upper) + ") must exceed lower (" +
             std::to_string(b.lower) + ")";
    });
    expects(is_power_of_two(b.alignment), [&] {
      return where() + ": alignment must be a power of two, got " + std::to_string(b.alignment);
    });
    ids.push_back(b.id);
  }
  std::sort(ids.begin(), ids.end());
  const auto dup = std::adjacent_find(ids.begin(), ids.end());
  expects(dup == ids.end(), [&] { return "duplicate buffer id " + std::to_string(*dup); });
  require_representable(problem);
  if (problem.capacity_bytes) {
    const auto bound = lower_bound_bytes(problem);
    expects(*problem.capacity_bytes >= bound, [&] {
      return "capacity " + std::to_string(*problem.capacity_bytes) +
             " bytes is below the lower bound " + std::to_string(bound) +
             " bytes (the most bytes live at one instant)";
    });
  }
}

inline validation validate(const dsa_problem& problem, const dsa_plan& plan) {
  const auto& buffers = problem.buffers;
  if (plan.offsets.size() != buffers.size()) {
    return {false, "plan has " + std::to_string(plan.offsets.size()) + " offsets for " +
                       std::to_string(buffers.size()) + " buffers"};
  }
  std::uint64_t peak = 0;
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    const auto& b = buffers[i];
    if (b.alignment > 1 && plan.offsets[i] % b.alignment != 0) {
      return {false, "buffer " + std::to_string(b.id) + " at offset " +
                         std::to_string(plan.offsets[i]) + " breaks its alignment " +
                         std::to_string(b.alignment)};
    }
    // In 128 bits: an end past 2^64 - 1 is an invalid plan, not a wrapped one.
    const detail::wide_bytes end = detail::wide_bytes{plan.offsets[i]} + b.size_bytes;
    if (end > detail::max_bytes) {
      return {false, "buffer " + std::to_string(b.id) + " at offset " +
                         std::to_string(plan.offsets[i]) + " with " + std::to_string(b.size_bytes) +
                         " bytes ends at " + detail::wide_to_string(end) +
                         ", past 2^64 - 1 = " + std::to_string(detail::max_bytes)};
    }
    peak = std::max(peak, static_cast<std::uint64_t>(end));
  }
  if (peak != plan.peak_bytes) {
    return {false, "plan claims peak " + std::to_string(plan.peak_bytes) +
                       " bytes but its buffers reach " + std::to_string(peak)};
  }
  if (problem.capacity_bytes && peak > *problem.capacity_bytes) {
    return {false, "peak " + std::to_string(peak) + " bytes exceeds the capacity " +
                       std::to_string(*problem.capacity_bytes)};
  }
  // Sweep over time keeping the live buffers ordered by offset; a new buffer
  // only needs checking against its neighbours in that order, provided the
  // live set itself is overlap-free (which the sweep maintains inductively).
  std::vector<std::size_t> order(buffers.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return buffers[a].lower < buffers[b].lower;
  });
  std::vector<std::size_t> by_end = order;
  std::sort(by_end.begin(), by_end.end(), [&](std::size_t a, std::size_t b) {
    return buffers[a].upper < buffers[b].upper;
  });
  struct live_entry {
    std::uint64_t offset;
    std::size_t index;
    bool operator<(const live_entry& o) const noexcept {
      return offset != o.offset ? offset < o.offset : index < o.index;
    }
  };
  std::set<live_entry> live;  // ordered by offset
  std::size_t next_end = 0;
  for (const std::size_t i : order) {
    while (next_end < by_end.size() && buffers[by_end[next_end]].upper <= buffers[i].lower) {
      const std::size_t gone = by_end[next_end++];
      live.erase(live_entry{plan.offsets[gone], gone});
    }
    const live_entry entry{plan.offsets[i], i};
    const auto pos = live.lower_bound(entry);
    auto clash = [&](std::size_t j) -> validation {
      const auto& a = buffers[i];
      const auto& b = buffers[j];
      return {false, "buffers " + std::to_string(a.id) + " [" + std::to_string(plan.offsets[i]) +
                         ", " + std::to_string(plan.offsets[i] + a.size_bytes) + ") and " +
                         std::to_string(b.id) + " [" + std::to_string(plan.offsets[j]) + ", " +
                         std::to_string(plan.offsets[j] + b.size_bytes) +
                         ") overlap in address while both are live at time " +
                         std::to_string(std::max(a.lower, b.lower))};
    };
    if (pos != live.end() && pos->offset < entry.offset + buffers[i].size_bytes) {
      return clash(pos->index);
    }
    if (pos != live.begin()) {
      const auto prev = std::prev(pos);
      if (prev->offset + buffers[prev->index].size_bytes > entry.offset) return clash(prev->index);
    }
    live.insert(pos, entry);
  }
  return {};
}

}  // namespace memo
