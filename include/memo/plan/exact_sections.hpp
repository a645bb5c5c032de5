// memo/plan/exact_sections.hpp
//
// The tables under memo's exact DSA search (memo/plan/exact_solver.hpp;
// MEMO section 4.2 poses the problem): overflow-safe arithmetic, the
// deadline clock, independent components, time sections and their loads,
// which buffers are live in which section, and the two segment trees the
// search keeps over sections.
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
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
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

/// An (index, 64-bit value) pair in 12 bytes instead of std::pair's 16:
/// the search's trails keep one for every value changed along its path.
class trail_entry {
 public:
  trail_entry(std::uint32_t index, std::uint64_t value) noexcept
      : index_(index), low_(static_cast<std::uint32_t>(value)), high_(static_cast<std::uint32_t>(value >> 32)) {}
  [[nodiscard]] std::uint32_t index() const noexcept { return index_; }
  [[nodiscard]] std::uint64_t value() const noexcept { return std::uint64_t{high_} << 32 | low_; }

 private:
  std::uint32_t index_, low_, high_;
};

/// Checks a deadline every `period` calls, so loops stay cheap.
class deadline_clock {
 public:
  using clock = std::chrono::steady_clock;
  /// `cancel`, when given, is read with the clock: once another thread sets
  /// it, the clock has expired too.
  explicit deadline_clock(clock::time_point deadline, std::uint32_t period = 4096,
                          const std::atomic<bool>* cancel = nullptr)
      : deadline_(deadline), period_(period), cancel_(cancel) {}
  /// True once the deadline has passed or the cancel flag was set (sticky).
  bool expired(std::uint64_t work = 1) {
    if (expired_) return true;
    work_ += work;
    if (work_ >= period_) {
      work_ = 0;
      expired_ = read();
    }
    return expired_;
  }
  /// Reads the clock now, whatever the work since the last read.
  bool expired_now() {
    work_ = 0;
    expired_ = expired_ || read();
    return expired_;
  }
  [[nodiscard]] clock::time_point deadline() const noexcept { return deadline_; }

 private:
  bool read() const {
    return (cancel_ != nullptr && cancel_->load(std::memory_order_relaxed)) || clock::now() >= deadline_;
  }

  clock::time_point deadline_;
  std::uint64_t period_;
  const std::atomic<bool>* cancel_;
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
      const std::uint32_t code = trail_.back().index();
      (code & 1u ? cover_ : below_)[code >> 1] = trail_.back().value();
      trail_.pop_back();
    }
    counts_.pop_back();
  }
  /// Highest end of the placed buffers live in some section of [first, last)
  /// (first < last): the `below` maxima of the nodes that tile the range,
  /// and the `cover` maxima of every node that overlaps it without lying
  /// inside it, which are the ancestors of its first and last leaf.
  [[nodiscard]] std::uint64_t max(std::size_t first, std::size_t last) const {
    std::uint64_t best = 0;
    for (std::size_t node = (first + size_) >> 1; node >= 1; node >>= 1) best = std::max(best, cover_[node]);
    for (std::size_t node = (last - 1 + size_) >> 1; node >= 1; node >>= 1) best = std::max(best, cover_[node]);
    for (std::size_t lo = first + size_, hi = last + size_; lo < hi; lo >>= 1, hi >>= 1) {
      if (lo & 1u) best = std::max(best, below_[lo++]);
      if (hi & 1u) best = std::max(best, below_[--hi]);
    }
    return best;
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

  std::size_t size_ = 1;
  std::vector<std::uint64_t> cover_;
  std::vector<std::uint64_t> below_;
  std::deque<trail_entry> trail_;  // (2 node + is_cover, old value); grows by blocks
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
    // At most 2n sections, so the placed-ends tree has fewer than 2^31
    // nodes and its trail codes (2 node + 1) fit in 32 bits.
    expects(buffers.size() <= (std::size_t{1} << 29), [&] {
      return "the exact search handles at most 2^29 buffers per component, got " +
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

/// The alignment-slot bound of a component: in any section, the buffers
/// live there whose alignment is at least a (a power of two) start at
/// distinct multiples of a, so each one below the topmost of them is
/// followed by at least its size rounded up to a. Stacked, they reach
///   sum of ceil_a(size) - max of (ceil_a(size) - size)
/// over those buffers. At the smallest alignment level this is the live
/// bytes with every buffer but the topmost padded to that alignment.
/// Returns the maximum over every alignment level present and every
/// section (at least the largest live sum); saturates at UINT64_MAX.
/// Time O(L n log n) for L distinct alignments.
[[nodiscard]] inline std::uint64_t alignment_slot_bound(const std::vector<dsa_buffer>& buffers,
                                                        const section_table& table) {
  std::vector<std::uint64_t> levels;
  levels.reserve(buffers.size());
  for (const auto& b : buffers) levels.push_back(b.alignment);
  std::sort(levels.begin(), levels.end());
  levels.erase(std::unique(levels.begin(), levels.end()), levels.end());
  std::size_t size = 1;
  while (size < table.sections) size <<= 1;
  wide_uint best = table.lower_bound;
  std::vector<wide_uint> add(table.sections + 1);
  std::vector<wide_uint> drop(table.sections + 1);
  std::vector<std::uint64_t> tail(2 * size);  // per tree node: the largest tail of a buffer covering it
  for (const std::uint64_t a : levels) {
    const wide_uint mask = a - 1;
    std::fill(add.begin(), add.end(), 0);
    std::fill(drop.begin(), drop.end(), 0);
    std::fill(tail.begin(), tail.end(), 0);
    for (std::uint32_t i = 0; i < table.n; ++i) {
      if (buffers[i].alignment < a) continue;
      const wide_uint slot = (wide_uint{buffers[i].size_bytes} + mask) & ~mask;
      add[table.first[i]] += slot;
      drop[table.last[i]] += slot;
      const auto t = static_cast<std::uint64_t>(slot - buffers[i].size_bytes);  // < a
      for (std::size_t lo = table.first[i] + size, hi = table.last[i] + size; lo < hi; lo >>= 1, hi >>= 1) {
        if (lo & 1u) {
          tail[lo] = std::max(tail[lo], t);
          ++lo;
        }
        if (hi & 1u) {
          --hi;
          tail[hi] = std::max(tail[hi], t);
        }
      }
    }
    wide_uint live = 0;
    for (std::uint32_t s = 0; s < table.sections; ++s) {
      live = live + add[s] - drop[s];
      std::uint64_t most = 0;
      for (std::size_t node = s + size; node >= 1; node >>= 1) most = std::max(most, tail[node]);
      // `most` is the tail of a buffer counted in `live`, so no wrap.
      best = std::max(best, live - most);
    }
  }
  return best > exact_u64_max ? exact_u64_max : static_cast<std::uint64_t>(best);
}

/// The peak of a plan is the end of its highest buffer, offset + size with
/// the offset a multiple of that buffer's alignment; no other value can be
/// a peak. The largest such value at or below `target`, if any (a decision
/// "peak <= target" is the same decision at that value, and its bounds
/// compare with a lower target).
[[nodiscard]] inline std::optional<std::uint64_t> peak_at_or_below(const std::vector<dsa_buffer>& buffers,
                                                                   std::uint64_t target) {
  std::optional<std::uint64_t> best;
  for (const auto& b : buffers) {
    if (b.size_bytes > target) continue;
    // The highest aligned offset at or below target - size; no sum passes target.
    const std::uint64_t end = b.size_bytes + ((target - b.size_bytes) & ~(b.alignment - 1));
    best = std::max(best.value_or(0), end);
  }
  return best;
}

/// The smallest such value at or above `bound` (UINT64_MAX if none fits in
/// 64 bits): a lower bound on the peak rounds up to it.
[[nodiscard]] inline std::uint64_t peak_at_or_above(const std::vector<dsa_buffer>& buffers, std::uint64_t bound) {
  std::uint64_t best = exact_u64_max;
  for (const auto& b : buffers) {
    const std::uint64_t gap = b.size_bytes >= bound ? 0 : bound - b.size_bytes;
    best = std::min(best, saturating_add(b.size_bytes, saturating_align_up(gap, b.alignment - 1)));
  }
  return best;
}

}  // namespace memo::detail
