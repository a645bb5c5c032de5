// memo/plan/exact_sections.hpp
//
// The tables under memo's exact DSA search (memo/plan/exact_solver.hpp;
// MEMO section 4.2 poses the problem): time sections and their loads, which
// buffers are live in which section, independent components, an exact plan
// check, and the lowest-offset greedy that gives the search its first
// incumbent.
//
// Guarantees: no arithmetic here can wrap. Loads are summed in 128 bits and
// a section whose live bytes do not fit in 64 bits raises `memo::error`
// naming the time and the sum (no plan of such a problem has a 64-bit peak).
// Ends and aligned offsets saturate at UINT64_MAX and every "fits under the
// target" test is written so that a saturated value never fits. Lifetimes
// are measured as unsigned differences, so [INT64_MIN, INT64_MAX) is fine.
// Working memory is linear in the number of buffers: no neighbour lists are
// stored, and section membership is kept only for the shorter buffers up to
// a budget (the longer ones are summarised by one value, which keeps every
// bound sound and only makes it weaker).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "memo/core/error.hpp"
#include "memo/plan/dsa_problem.hpp"

namespace memo::detail {

inline constexpr std::uint64_t exact_u64_max = std::numeric_limits<std::uint64_t>::max();
/// 128-bit unsigned (a GCC/Clang extension, which nvcc's host side shares):
/// sums of two 64-bit quantities and section loads are formed in it.
__extension__ typedef unsigned __int128 wide_uint;

/// a + b, or UINT64_MAX when the sum does not fit.
[[nodiscard]] inline std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) noexcept {
  return a > exact_u64_max - b ? exact_u64_max : a + b;
}
/// `value` rounded up to a multiple of mask + 1 (a power of two), or UINT64_MAX.
[[nodiscard]] inline std::uint64_t saturating_align_up(std::uint64_t value, std::uint64_t mask) noexcept {
  return value > exact_u64_max - mask ? exact_u64_max : (value + mask) & ~mask;
}
/// at + size <= target, without forming the sum (a saturated `at` never fits).
[[nodiscard]] inline bool ends_within(std::uint64_t at, std::uint64_t size, std::uint64_t target) noexcept {
  return size <= target && at <= target - size && at != exact_u64_max;
}
/// upper - lower of a buffer, exact for any upper > lower.
[[nodiscard]] inline std::uint64_t lifetime_ticks(const dsa_buffer& b) noexcept {
  return static_cast<std::uint64_t>(b.upper) - static_cast<std::uint64_t>(b.lower);
}

/// Checks a deadline every `period` calls, so loops stay cheap.
class deadline_clock {
 public:
  using clock = std::chrono::steady_clock;
  explicit deadline_clock(clock::time_point deadline, std::uint32_t period = 4096)
      : deadline_(deadline), period_(period) {}
  /// True once the deadline has passed (sticky).
  bool expired(std::uint64_t work = 1) {
    if (expired_) return true;
    work_ += work;
    if (work_ >= period_) {
      work_ = 0;
      expired_ = clock::now() >= deadline_;
    }
    return expired_;
  }
  /// Reads the clock now, whatever the work since the last read.
  bool expired_now() {
    work_ = 0;
    expired_ = expired_ || clock::now() >= deadline_;
    return expired_;
  }
  [[nodiscard]] clock::time_point deadline() const noexcept { return deadline_; }

 private:
  clock::time_point deadline_;
  std::uint64_t period_;
  std::uint64_t work_ = 0;
  bool expired_ = false;
};

/// Buffers that share no instant of life with anything outside their group:
/// the timeline cut wherever the live set is empty. Returns index lists.
inline std::vector<std::vector<std::uint32_t>> independent_components(
    const std::vector<dsa_buffer>& buffers) {
  std::vector<std::uint32_t> order(buffers.size());
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    return buffers[a].lower != buffers[b].lower ? buffers[a].lower < buffers[b].lower : a < b;
  });
  std::vector<std::vector<std::uint32_t>> components;
  std::int64_t reach = std::numeric_limits<std::int64_t>::min();
  for (const std::uint32_t i : order) {
    if (components.empty() || buffers[i].lower >= reach) components.emplace_back();
    components.back().push_back(i);
    reach = std::max(reach, buffers[i].upper);
  }
  return components;
}

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

/// Max segment tree over time sections with range add. Values are the
/// unplaced bytes of a section (so in [0, 2^64)); adds are kept modulo 2^64,
/// which is exact because every stored maximum is itself such a value.
class max_add_tree {
 public:
  void assign(const std::vector<std::uint64_t>& values) {
    size_ = 1;
    while (size_ < values.size()) size_ <<= 1;
    max_.assign(2 * size_, 0);
    add_.assign(2 * size_, 0);
    for (std::size_t i = 0; i < values.size(); ++i) max_[size_ + i] = values[i];
    for (std::size_t i = size_ - 1; i >= 1; --i) max_[i] = std::max(max_[2 * i], max_[2 * i + 1]);
  }
  /// Adds `delta` (mod 2^64; a subtraction is the two's complement) on [first, last).
  void add(std::size_t first, std::size_t last, std::uint64_t delta) { add(1, 0, size_, first, last, delta); }
  /// Maximum over sections [first, last) (first < last).
  [[nodiscard]] std::uint64_t max(std::size_t first, std::size_t last) const {
    return max(1, 0, size_, first, last).value_or(0);
  }
  [[nodiscard]] std::uint64_t max_all() const { return max_.empty() ? 0 : max_[1]; }

 private:
  void add(std::size_t node, std::size_t lo, std::size_t hi, std::size_t first, std::size_t last,
           std::uint64_t delta) {
    if (last <= lo || hi <= first) return;
    if (first <= lo && hi <= last) {
      max_[node] += delta;
      add_[node] += delta;
      return;
    }
    const std::size_t mid = (lo + hi) / 2;
    add(2 * node, lo, mid, first, last, delta);
    add(2 * node + 1, mid, hi, first, last, delta);
    max_[node] = std::max(max_[2 * node], max_[2 * node + 1]) + add_[node];
  }
  [[nodiscard]] std::optional<std::uint64_t> max(std::size_t node, std::size_t lo, std::size_t hi,
                                                 std::size_t first, std::size_t last) const {
    if (last <= lo || hi <= first) return std::nullopt;
    if (first <= lo && hi <= last) return max_[node];
    const std::size_t mid = (lo + hi) / 2;
    const auto a = max(2 * node, lo, mid, first, last);
    const auto b = max(2 * node + 1, mid, hi, first, last);
    if (!a) return *b + add_[node];
    if (!b) return *a + add_[node];
    return std::max(*a, *b) + add_[node];
  }

  std::size_t size_ = 1;
  std::vector<std::uint64_t> max_;
  std::vector<std::uint64_t> add_;
};

/// The highest end among placed buffers that share a section with a range,
/// for buffers too long to have their floor kept up to date (raising the
/// floor of every long buffer above each placement would trail memory in
/// proportion to buffers times long neighbours). Placements and removals
/// come in LIFO order, so every node keeps its maxima as values restored
/// from one trail: `cover` (buffers whose span holds the node's range) and
/// `below` (buffers stored at the node or under it).
class placed_max_tree {
 public:
  void reset(std::size_t sections) {
    size_ = 1;
    while (size_ < sections) size_ <<= 1;
    cover_.assign(2 * size_, 0);
    below_.assign(2 * size_, 0);
    trail_.clear();
    counts_.clear();
  }
  void insert(std::size_t first, std::size_t last, std::uint64_t end) {
    const std::size_t before = trail_.size();
    insert(1, 0, size_, first, last, end);
    counts_.push_back(static_cast<std::uint32_t>(trail_.size() - before));
  }
  /// Undoes the last insert.
  void erase() {
    for (std::uint32_t k = counts_.back(); k > 0; --k) {
      const auto [code, old] = trail_.back();
      (code & 1u ? cover_ : below_)[code >> 1] = old;
      trail_.pop_back();
    }
    counts_.pop_back();
  }
  /// Highest end of the placed buffers live in some section of [first, last).
  [[nodiscard]] std::uint64_t max(std::size_t first, std::size_t last) const {
    return max(1, 0, size_, first, last);
  }

 private:
  void raise(std::vector<std::uint64_t>& values, std::size_t node, bool is_cover, std::uint64_t end) {
    if (values[node] >= end) return;
    trail_.emplace_back(static_cast<std::uint32_t>(2 * node + (is_cover ? 1 : 0)), values[node]);
    values[node] = end;
  }
  void insert(std::size_t node, std::size_t lo, std::size_t hi, std::size_t first, std::size_t last,
              std::uint64_t end) {
    if (last <= lo || hi <= first) return;
    raise(below_, node, false, end);
    if (first <= lo && hi <= last) {
      raise(cover_, node, true, end);
      return;
    }
    const std::size_t mid = (lo + hi) / 2;
    insert(2 * node, lo, mid, first, last, end);
    insert(2 * node + 1, mid, hi, first, last, end);
  }
  [[nodiscard]] std::uint64_t max(std::size_t node, std::size_t lo, std::size_t hi, std::size_t first,
                                  std::size_t last) const {
    if (last <= lo || hi <= first) return 0;
    if (first <= lo && hi <= last) return below_[node];
    const std::size_t mid = (lo + hi) / 2;
    return std::max({cover_[node], max(2 * node, lo, mid, first, last), max(2 * node + 1, mid, hi, first, last)});
  }

  std::size_t size_ = 1;
  std::vector<std::uint64_t> cover_;
  std::vector<std::uint64_t> below_;
  std::vector<std::pair<std::uint32_t, std::uint64_t>> trail_;  // (2 node + is_cover, old value)
  std::vector<std::uint32_t> counts_;                           // trail entries per insert
};

/// What one component looks like in time, independent of any ranking:
/// shared (read-only) by every search over the component.
struct section_table {
  std::uint32_t n = 0;
  std::uint32_t sections = 0;
  std::vector<std::uint32_t> first;      // per buffer: first section
  std::vector<std::uint32_t> last;       // per buffer: one past its last section
  std::vector<std::uint64_t> load;       // per section: live bytes (fits 64 bits, checked)
  std::vector<std::uint64_t> heaviest;   // per buffer: the heaviest load over its lifetime
  std::vector<std::uint32_t> neighbours; // per buffer: how many buffers share time with it
  std::uint64_t lower_bound = 0;         // max load
  // Membership of the shorter buffers (the longer ones are `in_long`).
  std::vector<std::uint32_t> member_begin;  // sections + 1
  std::vector<std::uint32_t> members;       // buffer indices
  std::vector<std::uint8_t> in_long;        // per buffer
  std::vector<std::uint8_t> long_covered;   // per section: some long buffer is live there

  /// At most `membership_budget` (buffer, section) entries are stored.
  section_table(const std::vector<dsa_buffer>& buffers, std::size_t membership_budget) {
    expects(buffers.size() < std::numeric_limits<std::uint32_t>::max() / 2, [&] {
      return "the exact search handles fewer than 2^31 buffers per component, got " +
             std::to_string(buffers.size());
    });
    n = static_cast<std::uint32_t>(buffers.size());
    std::vector<std::int64_t> times;
    times.reserve(2 * n);
    for (const auto& b : buffers) {
      times.push_back(b.lower);
      times.push_back(b.upper);
    }
    std::sort(times.begin(), times.end());
    times.erase(std::unique(times.begin(), times.end()), times.end());
    sections = times.empty() ? 0 : static_cast<std::uint32_t>(times.size() - 1);
    auto section_of = [&](std::int64_t t) {
      return static_cast<std::uint32_t>(std::lower_bound(times.begin(), times.end(), t) - times.begin());
    };
    first.resize(n);
    last.resize(n);
    std::vector<wide_uint> delta(sections + 1, 0);
    std::vector<wide_uint> minus(sections + 1, 0);
    for (std::uint32_t i = 0; i < n; ++i) {
      first[i] = section_of(buffers[i].lower);
      last[i] = section_of(buffers[i].upper);
      delta[first[i]] += buffers[i].size_bytes;
      minus[last[i]] += buffers[i].size_bytes;
    }
    load.assign(sections, 0);
    wide_uint live = 0;
    for (std::uint32_t s = 0; s < sections; ++s) {
      live = live + delta[s] - minus[s];
      expects(live <= exact_u64_max, [&] {
        const auto high = static_cast<std::uint64_t>(live >> 64);
        const auto low = static_cast<std::uint64_t>(live);
        return "the buffers live at time " + std::to_string(times[s]) + " total 2^64 * " +
               std::to_string(high) + " + " + std::to_string(low) +
               " bytes, which does not fit in 64 bits: no plan has a representable peak";
      });
      load[s] = static_cast<std::uint64_t>(live);
      lower_bound = std::max(lower_bound, load[s]);
    }
    // Heaviest load over each lifetime: range maxima from a segment tree.
    {
      std::size_t size = 1;
      while (size < sections) size <<= 1;
      std::vector<std::uint64_t> tree(2 * size, 0);
      for (std::uint32_t s = 0; s < sections; ++s) tree[size + s] = load[s];
      for (std::size_t k = size - 1; k >= 1; --k) tree[k] = std::max(tree[2 * k], tree[2 * k + 1]);
      heaviest.resize(n);
      for (std::uint32_t i = 0; i < n; ++i) {
        std::uint64_t best = 0;
        for (std::size_t lo = first[i] + size, hi = last[i] + size; lo < hi; lo /= 2, hi /= 2) {
          if (lo & 1u) best = std::max(best, tree[lo++]);
          if (hi & 1u) best = std::max(best, tree[--hi]);
        }
        heaviest[i] = best;
      }
    }
    // Time neighbours counted, not listed: all others minus those that end
    // before i starts and those that start after i ends.
    {
      std::vector<std::uint32_t> starts(first);
      std::vector<std::uint32_t> ends(last);
      std::sort(starts.begin(), starts.end());
      std::sort(ends.begin(), ends.end());
      neighbours.resize(n);
      for (std::uint32_t i = 0; i < n; ++i) {
        const auto ended = std::upper_bound(ends.begin(), ends.end(), first[i]) - ends.begin();
        const auto later = starts.end() - std::lower_bound(starts.begin(), starts.end(), last[i]);
        neighbours[i] = static_cast<std::uint32_t>(n - 1 - static_cast<std::size_t>(ended) -
                                                   static_cast<std::size_t>(later));
      }
    }
    // Membership: shortest spans first, within the budget, and none longer
    // than 8 times the median span (at least 64 sections). A buffer that
    // spans most of the timeline would otherwise be rescanned, and trailed,
    // in thousands of sections each time a buffer under it is placed.
    std::vector<std::uint32_t> by_span(n);
    std::iota(by_span.begin(), by_span.end(), 0u);
    std::sort(by_span.begin(), by_span.end(), [&](std::uint32_t a, std::uint32_t b) {
      return last[a] - first[a] < last[b] - first[b];
    });
    const std::size_t longest =
        n == 0 ? 0 : std::max<std::size_t>(64, 8 * std::size_t{last[by_span[n / 2]] - first[by_span[n / 2]]});
    in_long.assign(n, 1);
    long_covered.assign(sections, 0);
    member_begin.assign(sections + 1, 0);
    std::size_t stored = 0;
    for (const std::uint32_t i : by_span) {
      const std::size_t span = last[i] - first[i];
      if (span > longest || stored + span > membership_budget) break;
      stored += span;
      in_long[i] = 0;
    }
    std::vector<std::int32_t> cover(sections + 1, 0);
    for (std::uint32_t i = 0; i < n; ++i) {
      if (in_long[i]) {
        ++cover[first[i]];
        --cover[last[i]];
        continue;
      }
      for (std::uint32_t s = first[i]; s < last[i]; ++s) ++member_begin[s + 1];
    }
    std::int32_t covering = 0;
    for (std::uint32_t s = 0; s < sections; ++s) {
      covering += cover[s];
      long_covered[s] = covering > 0 ? 1 : 0;
      member_begin[s + 1] += member_begin[s];
    }
    members.resize(member_begin[sections]);
    std::vector<std::uint32_t> fill(member_begin.begin(), member_begin.end() - 1);
    for (std::uint32_t i = 0; i < n; ++i) {
      if (in_long[i]) continue;
      for (std::uint32_t s = first[i]; s < last[i]; ++s) members[fill[s]++] = i;
    }
  }
};

}  // namespace memo::detail
