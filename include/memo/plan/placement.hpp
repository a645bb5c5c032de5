// memo/plan/placement.hpp
//
// The placement step every DSA heuristic shares (MEMO section 4.2): take
// the buffers one at a time in a given order and put each at an offset
// where it clears every already-placed buffer it shares an instant with.
// Three rules:
//
// * `fit_rule::lowest`: the lowest aligned offset that is free for the
//   buffer's whole lifetime (first fit);
// * `fit_rule::best`: the free gap between the placed time neighbours that
//   holds the buffer and is the smallest (ties: the lowest), or on top of
//   them when no gap holds it (best fit, the "greedy by size" of mobile
//   inference runtimes);
// * `fit_rule::above`: on top of every placed time neighbour (what a MIP's
//   buffer order becomes when each buffer is dropped as low as it goes).
//
// Written once here: the greedy solvers and the MIP's warm start and plan
// rebuild use it, and `lowest_fit_bound` is the quick upper bound a search
// starts from.
//
// Cost. The placed buffers are kept in a centred interval tree over the
// compressed timeline (the distinct lower and upper times): each node owns
// a centre section and stores, once, every placed buffer that is live in
// that section and in no smaller node's range, sorted by first and by last
// section. Which node stores a buffer depends only on its lifetime, so all
// lists are laid out once, flat, before the first placement (O(n log n));
// placing a buffer marks its two slots and counts it on its node's path,
// with no insertion or allocation (the lists of the first version were
// vectors grown per placement, which cost the decreasing-size order, whose
// placements jump around the timeline, twice the time of first fit). A
// query also steps over the not yet placed buffers of the lists it reads,
// at most the buffers it overlaps in time. The placed buffers that share an instant with a new one are
// found in O(log n) node visits plus one step per buffer found (and a
// subtree holding nothing placed is skipped), then sorted by offset and
// scanned. A placement therefore costs O(log n + k log k), k the placed
// time neighbours, instead of a scan of every placed buffer: near-linear
// overall when a bounded number of buffers is live at once. Best fit has
// to see every gap among the neighbours, so on traces with very many
// buffers live together the cost grows with them (200,000 buffers with
// about 1,000 live: 12 s for greedy-by-size).
//
// First fit in order of start time needs no neighbour list:
// `place_lowest_in_start_order` sweeps the timeline, keeping the gaps
// between the buffers live at the current start in a `gap_tree` (a treap
// by address whose nodes know their subtree's longest gap), O(log n) a
// placement whatever the number live (the same 200,000 buffers: 0.45 s,
// against 14.7 s through the neighbour lists).
//
// Offsets are computed in 128 bits: a placement whose end would pass
// 2^64 - 1 raises `memo::error` rather than wrapping.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <queue>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "memo/core/error.hpp"
#include "memo/plan/dsa_problem.hpp"

namespace memo::detail {

enum class fit_rule { lowest, best, above };

/// Placed buffers indexed by time (see the top of this file). Buffers are
/// named by their index into the vector given to the constructor, which
/// must outlive the index.
class placement_index {
 public:
  explicit placement_index(const std::vector<dsa_buffer>& buffers) : buffers_(&buffers) {
    expects(buffers.size() < std::numeric_limits<std::uint32_t>::max(), [&] {
      return std::to_string(buffers.size()) + " buffers are more than the placement indexes (2^32 - 2)";
    });
    // Compress the timeline: every distinct endpoint gets its rank, found
    // by one sort of (time, endpoint) pairs.
    std::vector<std::pair<std::int64_t, std::uint32_t>> ends;
    ends.reserve(2 * buffers.size());
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      // The tree walk needs a non-empty lifetime (check_problem's rule).
      expects(buffers[i].upper > buffers[i].lower, [&] {
        return "placement: buffer " + std::to_string(buffers[i].id) + " has upper (" +
               std::to_string(buffers[i].upper) + ") not above lower (" +
               std::to_string(buffers[i].lower) + ")";
      });
      ends.emplace_back(buffers[i].lower, static_cast<std::uint32_t>(2 * i));
      ends.emplace_back(buffers[i].upper, static_cast<std::uint32_t>(2 * i + 1));
    }
    std::sort(ends.begin(), ends.end());
    first_.resize(buffers.size());
    last_.resize(buffers.size());
    std::uint32_t rank = 0;
    for (std::size_t k = 0; k < ends.size(); ++k) {
      if (k > 0 && ends[k].first != ends[k - 1].first) ++rank;
      const std::uint32_t slot = ends[k].second;
      (slot % 2 == 0 ? first_ : last_)[slot / 2] = rank;
    }
    sections_ = rank == 0 ? 1 : rank;  // rank + 1 distinct times, rank sections
    // Heap numbering; a node of depth k covers at most sections / 2^k
    // sections, so every index is below twice the sections.
    std::size_t nodes = 2;
    while (nodes < 2 * sections_) nodes <<= 1;
    nodes_.assign(nodes, tree_node{});
    // The node a buffer is stored at depends only on its lifetime, so the
    // lists are laid out once, flat, in their final order (by first section
    // ascending, by last descending); placing a buffer only marks its two
    // slots. Nothing is inserted or allocated per placement, and a node's
    // entries are contiguous.
    node_of_.resize(buffers.size());
    std::vector<std::uint32_t> start(nodes + 1, 0);
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      std::size_t node = 1;
      std::size_t lo = 0;
      std::size_t hi = sections_;
      while (true) {
        const std::size_t c = lo + (hi - lo) / 2;
        if (first_[i] <= c && c < last_[i]) break;
        if (last_[i] <= c) {
          hi = c;
          node = 2 * node;
        } else {
          lo = c + 1;
          node = 2 * node + 1;
        }
      }
      node_of_[i] = static_cast<std::uint32_t>(node);
      ++start[node + 1];
    }
    for (std::size_t k = 0; k < nodes; ++k) start[k + 1] += start[k];
    for (std::size_t k = 0; k < nodes; ++k) nodes_[k].begin = start[k];
    std::vector<std::uint32_t> members(buffers.size());
    {
      std::vector<std::uint32_t> fill(start.begin(), start.end() - 1);
      for (std::size_t i = 0; i < buffers.size(); ++i) members[fill[node_of_[i]]++] = static_cast<std::uint32_t>(i);
    }
    by_first_.resize(buffers.size());
    by_last_.resize(buffers.size());
    slot_first_.resize(buffers.size());
    slot_last_.resize(buffers.size());
    for (std::size_t k = 0; k < nodes; ++k) {
      const auto b = members.begin() + start[k];
      const auto e = members.begin() + start[k + 1];
      if (b == e) continue;
      std::sort(b, e, [&](std::uint32_t x, std::uint32_t y) {
        return first_[x] != first_[y] ? first_[x] < first_[y] : x < y;
      });
      for (auto it = b; it != e; ++it) {
        const auto at = static_cast<std::uint32_t>(it - members.begin());
        by_first_[at] = entry{first_[*it], last_[*it], 0, 0, false};
        slot_first_[*it] = at;
      }
      std::sort(b, e, [&](std::uint32_t x, std::uint32_t y) {
        return last_[x] != last_[y] ? last_[x] > last_[y] : x < y;
      });
      for (auto it = b; it != e; ++it) {
        const auto at = static_cast<std::uint32_t>(it - members.begin());
        by_last_[at] = entry{first_[*it], last_[*it], 0, 0, false};
        slot_last_[*it] = at;
      }
    }
  }

  /// Where `rule` puts buffer `i`, given the buffers placed so far.
  [[nodiscard]] std::uint64_t choose(std::size_t i, fit_rule rule) const {
    const auto& b = (*buffers_)[i];
    busy_.clear();
    collect(1, 0, sections_, first_[i], last_[i]);
    std::sort(busy_.begin(), busy_.end());
    std::uint64_t floor = 0;  // everything below is busy or a gap already considered
    bool found = false;
    std::uint64_t chosen = 0;
    std::uint64_t chosen_gap = 0;
    for (const auto& [start, end] : busy_) {
      if (rule != fit_rule::above && start > floor) {
        const wide_bytes candidate = round_up(floor, b.alignment);
        if (candidate + b.size_bytes <= start) {
          const std::uint64_t gap = start - floor;
          if (!found || (rule == fit_rule::best && gap < chosen_gap)) {
            found = true;
            chosen = static_cast<std::uint64_t>(candidate);
            chosen_gap = gap;
          }
          if (rule == fit_rule::lowest) break;
        }
      }
      floor = std::max(floor, end);
    }
    if (found) return chosen;
    const wide_bytes top = round_up(floor, b.alignment);
    expects(top + b.size_bytes <= max_bytes, [&] {
      return "buffer " + std::to_string(b.id) + " (" + std::to_string(b.size_bytes) +
             " bytes, alignment " + std::to_string(b.alignment) + ") placed above " +
             std::to_string(floor) + " bytes would end past 2^64 - 1 = " + std::to_string(max_bytes);
    });
    return static_cast<std::uint64_t>(top);
  }

  /// Records buffer `i` at `offset` (which must clear its placed neighbours).
  void place(std::size_t i, std::uint64_t offset) {
    const std::uint64_t end = offset + (*buffers_)[i].size_bytes;
    for (auto* e : {&by_first_[slot_first_[i]], &by_last_[slot_last_[i]]}) {
      e->offset = offset;
      e->end = end;
      e->placed = true;
    }
    // Count the placement on the path from the root to the buffer's node.
    for (std::size_t node = node_of_[i]; node >= 1; node /= 2) ++nodes_[node].count;
  }

 private:
  using interval = std::pair<std::uint64_t, std::uint64_t>;  // [offset, end)

  // A buffer of a node's list: live in sections [first, last), at
  // [offset, end) once placed.
  struct entry {
    std::uint32_t first;
    std::uint32_t last;
    std::uint64_t offset;
    std::uint64_t end;
    bool placed;
  };
  struct tree_node {
    std::uint32_t count = 0;  // placed buffers in the subtree
    std::uint32_t begin = 0;  // its list: [begin, next node's begin) of by_first_ and by_last_
  };

  static wide_bytes round_up(std::uint64_t x, std::uint64_t alignment) {
    return (wide_bytes{x} + alignment - 1) / alignment * alignment;
  }

  // Adds to busy_ every placed buffer of the subtree at `node` (sections
  // [lo, hi)) that lives in a section of [a, b); a < b, both inside.
  void collect(std::size_t node, std::size_t lo, std::size_t hi, std::size_t a, std::size_t b) const {
    if (lo >= hi || nodes_[node].count == 0) return;
    const std::size_t c = lo + (hi - lo) / 2;
    const std::size_t from = nodes_[node].begin;
    const std::size_t to = node + 1 < nodes_.size() ? nodes_[node + 1].begin : by_first_.size();
    if (a <= c && c < b) {
      for (std::size_t k = from; k < to; ++k) {
        if (by_first_[k].placed) busy_.emplace_back(by_first_[k].offset, by_first_[k].end);
      }
      if (a < c) collect(2 * node, lo, c, a, std::min(b, c));
      if (b > c + 1) collect(2 * node + 1, c + 1, hi, std::max(a, c + 1), b);
    } else if (b <= c) {
      for (std::size_t k = from; k < to && by_first_[k].first < b; ++k) {
        if (by_first_[k].placed) busy_.emplace_back(by_first_[k].offset, by_first_[k].end);
      }
      collect(2 * node, lo, c, a, b);
    } else {
      for (std::size_t k = from; k < to && by_last_[k].last > a; ++k) {
        if (by_last_[k].placed) busy_.emplace_back(by_last_[k].offset, by_last_[k].end);
      }
      collect(2 * node + 1, c + 1, hi, a, b);
    }
  }

  const std::vector<dsa_buffer>* buffers_;
  std::vector<std::uint32_t> first_;  // per buffer: its sections are [first_, last_)
  std::vector<std::uint32_t> last_;
  std::size_t sections_ = 1;
  std::vector<tree_node> nodes_;  // heap numbering: children of k are 2k, 2k + 1
  std::vector<std::uint32_t> node_of_;     // per buffer: the node that stores it
  std::vector<entry> by_first_;            // every node's list, by first section
  std::vector<entry> by_last_;             // every node's list, by last section (descending)
  std::vector<std::uint32_t> slot_first_;  // per buffer: its index in by_first_
  std::vector<std::uint32_t> slot_last_;   // per buffer: its index in by_last_
  mutable std::vector<interval> busy_;  // scratch of choose()
};

/// Places `buffers` one at a time in `order` (indices into `buffers`, each
/// once) by `rule`; writes `offsets` (parallel to `buffers`) and returns the
/// peak. Raises `memo::error` past `deadline` (checked every 1024
/// placements) or when an offset would pass 2^64 - 1.
inline std::uint64_t place_in_order(
    const std::vector<dsa_buffer>& buffers, std::span<const std::uint32_t> order, fit_rule rule,
    std::vector<std::uint64_t>& offsets,
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max()) {
  offsets.assign(buffers.size(), 0);
  placement_index index(buffers);
  std::uint64_t peak = 0;
  std::size_t done = 0;
  for (const std::uint32_t i : order) {
    if (++done % 1024 == 0 && std::chrono::steady_clock::now() >= deadline) {
      throw error("time limit reached after placing " + std::to_string(done - 1) + " of " +
                  std::to_string(order.size()) + " buffers");
    }
    const std::uint64_t at = index.choose(i, rule);
    offsets[i] = at;
    index.place(i, at);
    peak = std::max(peak, at + buffers[i].size_bytes);
  }
  return peak;
}

/// The free gaps of an address space in which disjoint intervals are busy,
/// kept by start in a treap whose every node knows the longest gap of its
/// subtree: the lowest gap that holds a buffer is found by descending only
/// into subtrees long enough, O(log n) expected. The space is [0, 2^64 - 1]
/// and starts as one gap.
class gap_tree {
 public:
  gap_tree() { root_ = make(0, max_bytes); }

  /// The lowest offset where `size_bytes` at `alignment` fits in a gap
  /// (the top gap ends at 2^64 - 1), as (offset, start of its gap); nullopt
  /// when none does.
  [[nodiscard]] std::optional<std::pair<std::uint64_t, std::uint64_t>> lowest_fit(
      std::uint64_t size_bytes, std::uint64_t alignment) const {
    return lowest(root_, size_bytes, alignment);
  }

  /// Where the busy intervals end: the start of the gap that reaches 2^64 - 1.
  [[nodiscard]] std::uint64_t top() const {
    const std::uint32_t last = last_before(max_bytes);
    return last != nil && nodes_[last].end == max_bytes ? nodes_[last].start : max_bytes;
  }

  /// Marks [offset, offset + size) busy; it lies inside the gap starting at `gap_start`.
  void occupy(std::uint64_t gap_start, std::uint64_t offset, std::uint64_t size_bytes) {
    const std::uint64_t gap_end = nodes_[find(gap_start)].end;
    erase(gap_start);
    if (offset > gap_start) insert(gap_start, offset);
    if (gap_end > offset + size_bytes) insert(offset + size_bytes, gap_end);
  }

  /// Marks [offset, end) free again, merged with the gaps that touch it.
  void release(std::uint64_t offset, std::uint64_t end) {
    std::uint64_t start = offset;
    if (const std::uint32_t before = last_before(offset); before != nil && nodes_[before].end == offset) {
      start = nodes_[before].start;
      erase(start);
    }
    if (const std::uint32_t after = find(end); after != nil) {
      end = nodes_[after].end;
      erase(nodes_[after].start);
    }
    insert(start, end);
  }

 private:
  static constexpr std::uint32_t nil = std::numeric_limits<std::uint32_t>::max();
  struct node {
    std::uint64_t start, end, longest;  // the gap [start, end); the longest in the subtree
    std::uint32_t priority, left, right;
  };

  std::uint32_t make(std::uint64_t start, std::uint64_t end) {
    // xorshift: priorities only need to look random to keep the tree shallow.
    seed_ ^= seed_ << 13;
    seed_ ^= seed_ >> 17;
    seed_ ^= seed_ << 5;
    const node n{start, end, end - start, seed_, nil, nil};
    if (!unused_.empty()) {
      const std::uint32_t k = unused_.back();
      unused_.pop_back();
      nodes_[k] = n;
      return k;
    }
    nodes_.push_back(n);
    return static_cast<std::uint32_t>(nodes_.size() - 1);
  }
  void update(std::uint32_t t) {
    auto& n = nodes_[t];
    n.longest = n.end - n.start;
    if (n.left != nil) n.longest = std::max(n.longest, nodes_[n.left].longest);
    if (n.right != nil) n.longest = std::max(n.longest, nodes_[n.right].longest);
  }
  // Splits t into the gaps starting below `key` and the rest.
  std::pair<std::uint32_t, std::uint32_t> split(std::uint32_t t, std::uint64_t key) {
    if (t == nil) return {nil, nil};
    if (nodes_[t].start < key) {
      const auto [l, r] = split(nodes_[t].right, key);
      nodes_[t].right = l;
      update(t);
      return {t, r};
    }
    const auto [l, r] = split(nodes_[t].left, key);
    nodes_[t].left = r;
    update(t);
    return {l, t};
  }
  std::uint32_t merge(std::uint32_t a, std::uint32_t b) {
    if (a == nil) return b;
    if (b == nil) return a;
    if (nodes_[a].priority > nodes_[b].priority) {
      nodes_[a].right = merge(nodes_[a].right, b);
      update(a);
      return a;
    }
    nodes_[b].left = merge(a, nodes_[b].left);
    update(b);
    return b;
  }
  void insert(std::uint64_t start, std::uint64_t end) {
    const auto [l, r] = split(root_, start);
    root_ = merge(merge(l, make(start, end)), r);
  }
  void erase(std::uint64_t start) {
    const auto [l, rest] = split(root_, start);
    const auto [m, r] = split(rest, start + 1);
    if (m != nil) unused_.push_back(m);  // a single node: starts are unique
    root_ = merge(l, r);
  }
  std::uint32_t find(std::uint64_t start) const {
    std::uint32_t t = root_;
    while (t != nil && nodes_[t].start != start) t = start < nodes_[t].start ? nodes_[t].left : nodes_[t].right;
    return t;
  }
  std::uint32_t last_before(std::uint64_t key) const {
    std::uint32_t t = root_, best = nil;
    while (t != nil) {
      if (nodes_[t].start < key) {
        best = t;
        t = nodes_[t].right;
      } else {
        t = nodes_[t].left;
      }
    }
    return best;
  }
  std::optional<std::pair<std::uint64_t, std::uint64_t>> lowest(std::uint32_t t, std::uint64_t size_bytes,
                                                               std::uint64_t alignment) const {
    if (t == nil || nodes_[t].longest < size_bytes) return std::nullopt;
    if (auto found = lowest(nodes_[t].left, size_bytes, alignment)) return found;
    const auto& n = nodes_[t];
    const wide_bytes at = (wide_bytes{n.start} + alignment - 1) / alignment * alignment;
    if (at + size_bytes <= n.end) return std::pair{static_cast<std::uint64_t>(at), n.start};
    return lowest(n.right, size_bytes, alignment);
  }

  std::vector<node> nodes_;
  std::vector<std::uint32_t> unused_;
  std::uint32_t root_ = nil;
  std::uint32_t seed_ = 2463534242u;
};

/// First fit with the buffers in order of start time (`order` by `lower`,
/// nondecreasing): the placed buffers a new one meets are then exactly those
/// still live at its start, which are disjoint in address, so a sweep keeps
/// their gaps in a `gap_tree` and each placement costs O(log n) whatever
/// the number of buffers live at once. The same offsets as `place_in_order`
/// with `fit_rule::lowest` in that order; the same errors.
inline std::uint64_t place_lowest_in_start_order(
    const std::vector<dsa_buffer>& buffers, std::span<const std::uint32_t> order,
    std::vector<std::uint64_t>& offsets,
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max()) {
  offsets.assign(buffers.size(), 0);
  gap_tree gaps;
  // The placed buffers still live, by upper: freed before the next start.
  using live = std::pair<std::int64_t, std::uint32_t>;
  std::priority_queue<live, std::vector<live>, std::greater<>> ends;
  std::uint64_t peak = 0;
  std::size_t done = 0;
  std::int64_t previous_lower = std::numeric_limits<std::int64_t>::min();
  for (const std::uint32_t i : order) {
    if (++done % 1024 == 0 && std::chrono::steady_clock::now() >= deadline) {
      throw error("time limit reached after placing " + std::to_string(done - 1) + " of " +
                  std::to_string(order.size()) + " buffers");
    }
    const auto& b = buffers[i];
    expects(b.lower >= previous_lower, [&] {
      return "place_lowest_in_start_order: buffer " + std::to_string(b.id) + " starts at " +
             std::to_string(b.lower) + ", before the buffer placed ahead of it (" +
             std::to_string(previous_lower) + "): the order must be by start time";
    });
    previous_lower = b.lower;
    // Touching intervals do not overlap: a buffer ending at this start is free.
    while (!ends.empty() && ends.top().first <= b.lower) {
      const std::uint32_t gone = ends.top().second;
      ends.pop();
      gaps.release(offsets[gone], offsets[gone] + buffers[gone].size_bytes);
    }
    const auto fit = gaps.lowest_fit(b.size_bytes, b.alignment);
    if (!fit) {
      // No gap holds it, the top one (which ends at 2^64 - 1) included:
      // the same error as place_in_order's.
      const std::uint64_t floor = gaps.top();
      throw error("buffer " + std::to_string(b.id) + " (" + std::to_string(b.size_bytes) + " bytes, alignment " +
                  std::to_string(b.alignment) + ") placed above " + std::to_string(floor) +
                  " bytes would end past 2^64 - 1 = " + std::to_string(max_bytes));
    }
    offsets[i] = fit->first;
    gaps.occupy(fit->second, fit->first, b.size_bytes);
    ends.emplace(b.upper, i);
    peak = std::max(peak, fit->first + b.size_bytes);
  }
  return peak;
}

/// 0, 1, ..., n - 1, as 32-bit indices (the placement's index type).
inline std::vector<std::uint32_t> index_order(std::size_t n) {
  expects(n <= std::numeric_limits<std::uint32_t>::max(), [&] {
    return std::to_string(n) + " buffers are more than the placement indexes (2^32 - 1)";
  });
  std::vector<std::uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  return order;
}

/// The better of two lowest-fit placements, decreasing size (ties: longer
/// lifetime) and decreasing lifetime (ties: larger): a quick upper bound,
/// the first incumbent of a search and the big-M of the MIP. Offsets
/// parallel to `buffers`; returns the peak.
inline std::uint64_t lowest_fit_bound(
    const std::vector<dsa_buffer>& buffers, std::vector<std::uint64_t>& offsets,
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max()) {
  auto order = index_order(buffers.size());
  // Lifetimes fit in int64 for a checked problem; compared unsigned anyway.
  auto length = [&](std::uint32_t i) {
    return static_cast<std::uint64_t>(buffers[i].upper) - static_cast<std::uint64_t>(buffers[i].lower);
  };
  std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    if (buffers[a].size_bytes != buffers[b].size_bytes) return buffers[a].size_bytes > buffers[b].size_bytes;
    if (length(a) != length(b)) return length(a) > length(b);
    return a < b;
  });
  std::uint64_t best = place_in_order(buffers, order, fit_rule::lowest, offsets, deadline);
  std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    if (length(a) != length(b)) return length(a) > length(b);
    if (buffers[a].size_bytes != buffers[b].size_bytes) return buffers[a].size_bytes > buffers[b].size_bytes;
    return a < b;
  });
  std::vector<std::uint64_t> other;
  const std::uint64_t second = place_in_order(buffers, order, fit_rule::lowest, other, deadline);
  if (second < best) {
    best = second;
    offsets.swap(other);
  }
  return best;
}

}  // namespace memo::detail
