// memo/plan/exact_solver.hpp
//
// An exact branch-and-bound for offline Dynamic Storage Allocation (MEMO
// section 4.2 poses the problem as a MIP; this header solves the same
// problem by combinatorial search, which proves optimality on instances far
// past what a MIP solver handles).
//
// Guarantees: the returned plan is valid (checked by `require_valid`), and
// `proven_optimal` is true only when the search has shown that no plan with
// a smaller peak exists. With `problem.capacity_bytes` set, the solver
// returns a plan within the capacity, or throws `memo::error` when it has
// proven that none exists (or when the time limit ran out first).
//
// The search, in brief (docs/dsa-solvers.md has the full argument):
//
// * Canonical plans. Any plan can be pushed down ("gravity") until every
//   buffer sits at the lowest aligned offset above the time-overlapping
//   buffers beneath it. Listing such a plan by increasing (offset, rank)
//   gives a sequence in which each buffer's offset is
//   align_up(max end of earlier time-overlapping buffers). The search builds
//   exactly these sequences: every buffer has a current "floor" offset; the
//   candidate with the smallest key (floor, rank) above the last key is
//   either placed there or skipped for good (binary branching), so each
//   canonical plan is reached once.
// * A skipped buffer, or one whose key fell below the last key, is blocked:
//   it can only move up when a time-overlapping buffer is placed under it.
//   One with no unplaced time neighbour left can never be placed: prune.
// * Dominance: if the next candidate's floor is at or above the end some
//   unplaced buffer would have at its own floor, that buffer could drop
//   into the hole without touching anything placed now or later, so the
//   branch only holds plans that another branch improves on: prune.
// * Bounds: every buffer still to be placed ends up at or above the current
//   floor f, and in each time section s at or above the lowest floor of the
//   unplaced buffers live in s (which is itself above everything placed
//   there). So f + rem[s] and lowest[s] + rem[s] (rem = unplaced bytes live
//   in s) must fit under the target. Both are kept incrementally: a max
//   segment tree of rem, and lowest[s] recomputed only in sections where
//   the buffer that defined it was just placed or pushed up; a bound found
//   at a node stays valid for its whole subtree, so a running maximum along
//   the path suffices.
// * Symmetry: interchangeable buffers (same size, lifetime and alignment)
//   are placed in a fixed order.
// * Decomposition: the timeline is cut wherever no buffer is live; the
//   pieces are solved independently, largest lower bound first, and a later
//   piece only has to reach the peak already forced by earlier ones.
// * Portfolio and restarts: each decision "is there a plan with peak <= T?"
//   runs three rankings round robin with doubling node limits (one of them
//   eventually completes its tree: a proof) and, in between, as many nodes
//   of short searches under pseudo-randomly perturbed rankings.
// * Minimising the peak: an internal greedy (lowest offset, decreasing
//   size or lifetime) gives the first incumbent; half of the time goes to
//   deciding whether the lower bound itself is reachable, then the target
//   drops below each new incumbent until a decision proves infeasibility
//   (the incumbent is optimal) or time runs out (not proven).
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "memo/core/error.hpp"
#include "memo/plan/dsa_problem.hpp"

namespace memo {

namespace detail {

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

/// Lowest-offset greedy in a given order: each buffer goes to the lowest
/// aligned offset where it clears every time-overlapping buffer placed so
/// far. Offsets are parallel to `buffers`; returns the peak.
inline std::uint64_t lowest_fit_greedy(const std::vector<dsa_buffer>& buffers,
                                       const std::vector<std::uint32_t>& order,
                                       std::vector<std::uint64_t>& offsets) {
  offsets.assign(buffers.size(), 0);
  std::vector<std::uint32_t> placed;
  placed.reserve(buffers.size());
  std::vector<std::pair<std::uint64_t, std::uint64_t>> busy;  // [offset, end) of neighbours
  std::uint64_t peak = 0;
  for (const std::uint32_t i : order) {
    const auto& b = buffers[i];
    busy.clear();
    for (const std::uint32_t j : placed) {
      if (b.overlaps_in_time(buffers[j])) busy.emplace_back(offsets[j], offsets[j] + buffers[j].size_bytes);
    }
    std::sort(busy.begin(), busy.end());
    std::uint64_t candidate = 0;
    for (const auto& [start, end] : busy) {
      if (align_up(candidate, b.alignment) + b.size_bytes <= start) break;
      candidate = std::max(candidate, end);
    }
    offsets[i] = align_up(candidate, b.alignment);
    peak = std::max(peak, offsets[i] + b.size_bytes);
    placed.push_back(i);
  }
  return peak;
}

/// The better of two simple greedy orders (decreasing size; decreasing
/// lifetime), as the first incumbent of the exact search and the big-M of
/// the MIP.
inline std::uint64_t greedy_upper_bound(const std::vector<dsa_buffer>& buffers,
                                        std::vector<std::uint64_t>& offsets) {
  std::vector<std::uint32_t> order(buffers.size());
  std::iota(order.begin(), order.end(), 0u);
  auto length = [&](std::uint32_t i) { return buffers[i].upper - buffers[i].lower; };
  std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    if (buffers[a].size_bytes != buffers[b].size_bytes) return buffers[a].size_bytes > buffers[b].size_bytes;
    if (length(a) != length(b)) return length(a) > length(b);
    return a < b;
  });
  std::uint64_t best = lowest_fit_greedy(buffers, order, offsets);
  std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    if (length(a) != length(b)) return length(a) > length(b);
    if (buffers[a].size_bytes != buffers[b].size_bytes) return buffers[a].size_bytes > buffers[b].size_bytes;
    return a < b;
  });
  std::vector<std::uint64_t> other;
  const std::uint64_t second = lowest_fit_greedy(buffers, order, other);
  if (second < best) {
    best = second;
    offsets.swap(other);
  }
  return best;
}

/// Max segment tree over time sections with range add, without pushing
/// lazy values down (each node keeps the add applied to its whole range).
class max_add_tree {
 public:
  void assign(const std::vector<std::uint64_t>& values) {
    size_ = 1;
    while (size_ < values.size()) size_ <<= 1;
    max_.assign(2 * size_, 0);
    add_.assign(2 * size_, 0);
    for (std::size_t i = 0; i < values.size(); ++i) max_[size_ + i] = static_cast<std::int64_t>(values[i]);
    for (std::size_t i = size_ - 1; i >= 1; --i) max_[i] = std::max(max_[2 * i], max_[2 * i + 1]);
  }
  /// Adds `delta` on sections [first, last).
  void add(std::size_t first, std::size_t last, std::int64_t delta) { add(1, 0, size_, first, last, delta); }
  /// Maximum over sections [first, last).
  [[nodiscard]] std::int64_t max(std::size_t first, std::size_t last) const {
    return max(1, 0, size_, first, last);
  }
  [[nodiscard]] std::int64_t max_all() const { return max_[1]; }

 private:
  void add(std::size_t node, std::size_t lo, std::size_t hi, std::size_t first, std::size_t last,
           std::int64_t delta) {
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
  [[nodiscard]] std::int64_t max(std::size_t node, std::size_t lo, std::size_t hi, std::size_t first,
                                 std::size_t last) const {
    if (last <= lo || hi <= first) return std::numeric_limits<std::int64_t>::min() / 2;
    if (first <= lo && hi <= last) return max_[node];
    const std::size_t mid = (lo + hi) / 2;
    return std::max(max(2 * node, lo, mid, first, last), max(2 * node + 1, mid, hi, first, last)) +
           add_[node];
  }

  std::size_t size_ = 1;
  std::vector<std::int64_t> max_;
  std::vector<std::int64_t> add_;
};

/// The branch-and-bound over canonical plans of one independent component.
/// Buffers are renumbered by rank (the tie-break among equal floors).
class dsa_search {
 public:
  using clock = std::chrono::steady_clock;

  /// How buffers are ranked (the tie-break among equal floors, and so the
  /// order of the first dive): by the heaviest load they take part in
  /// ("total"), by lifetime ("width") and by size * lifetime ("area").
  /// `perturbed` is total_width_area with the load term scaled by a
  /// pseudo-random factor in [0.75, 1.25) drawn from `seed` (equal for
  /// identical buffers), for restarts that need a different first dive.
  enum class ranking { total_width_area, width_area_total, total_area_width, perturbed };

  dsa_search(const std::vector<dsa_buffer>& buffers, ranking rank_by, std::uint64_t seed = 0) {
    n_ = static_cast<std::uint32_t>(buffers.size());
    // The heaviest load over each buffer's lifetime, from a sweep.
    std::vector<std::uint64_t> heaviest(n_, 0);
    {
      dsa_problem whole{buffers, std::nullopt};
      const auto steps = load_profile(whole);
      for (std::uint32_t i = 0; i < n_; ++i) {
        auto it = std::upper_bound(steps.begin(), steps.end(), buffers[i].lower,
                                   [](std::int64_t t, const load_step& st) { return t < st.time; });
        if (it != steps.begin()) --it;
        // Parenthesised: nvcc's front end reads `it->time <` as a template-id.
        for (; it != steps.end() && (it->time) < buffers[i].upper; ++it) {
          heaviest[i] = std::max(heaviest[i], it->live_bytes);
        }
      }
    }
    std::vector<std::uint32_t> order(n_);
    std::iota(order.begin(), order.end(), 0u);
    auto width = [&](std::uint32_t i) { return static_cast<std::uint64_t>(buffers[i].upper - buffers[i].lower); };
    auto area = [&](std::uint32_t i) {
      // saturating, only used for ordering
      const auto w = width(i);
      const auto sz = buffers[i].size_bytes;
      return w != 0 && sz > std::numeric_limits<std::uint64_t>::max() / w ? std::numeric_limits<std::uint64_t>::max()
                                                                           : sz * w;
    };
    auto key = [&](std::uint32_t i) -> std::array<std::uint64_t, 3> {
      switch (rank_by) {
        case ranking::total_width_area: return {heaviest[i], width(i), area(i)};
        case ranking::width_area_total: return {width(i), area(i), heaviest[i]};
        case ranking::total_area_width: return {heaviest[i], area(i), width(i)};
        case ranking::perturbed: {
          const auto& b = buffers[i];
          std::uint64_t h = seed * 0x9e3779b97f4a7c15ull;
          for (const std::uint64_t v : {b.size_bytes, static_cast<std::uint64_t>(b.lower),
                                        static_cast<std::uint64_t>(b.upper), b.alignment}) {
            h = (h ^ v) * 0xff51afd7ed558ccdull;
            h ^= h >> 33;
          }
          const double factor = 0.75 + 0.5 * static_cast<double>(h >> 11) * 0x1.0p-53;
          return {static_cast<std::uint64_t>(static_cast<double>(heaviest[i]) * factor), width(i), area(i)};
        }
      }
      return {0, 0, 0};
    };
    // Identical buffers must end up adjacent (the symmetry rule relies on
    // it): ties fall back to size, start, alignment, then input order.
    std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
      const auto ka = key(a);
      const auto kb = key(b);
      if (ka != kb) return ka > kb;
      const auto& x = buffers[a];
      const auto& y = buffers[b];
      if (x.size_bytes != y.size_bytes) return x.size_bytes > y.size_bytes;
      if (x.lower != y.lower) return x.lower < y.lower;
      if (x.upper != y.upper) return x.upper < y.upper;
      if (x.alignment != y.alignment) return x.alignment > y.alignment;
      return a < b;
    });
    original_.resize(n_);
    size_.resize(n_);
    align_mask_.resize(n_);
    first_section_.resize(n_);
    last_section_.resize(n_);
    twin_before_.assign(n_, none);
    std::vector<std::int64_t> times;
    times.reserve(2 * n_);
    for (const auto& b : buffers) {
      times.push_back(b.lower);
      times.push_back(b.upper);
    }
    std::sort(times.begin(), times.end());
    times.erase(std::unique(times.begin(), times.end()), times.end());
    sections_ = times.empty() ? 0 : times.size() - 1;
    auto section_of = [&](std::int64_t t) {
      return static_cast<std::uint32_t>(std::lower_bound(times.begin(), times.end(), t) - times.begin());
    };
    for (std::uint32_t r = 0; r < n_; ++r) {
      const auto& b = buffers[order[r]];
      original_[r] = order[r];
      size_[r] = b.size_bytes;
      align_mask_[r] = b.alignment - 1;
      first_section_[r] = section_of(b.lower);
      last_section_[r] = section_of(b.upper);
      if (r > 0) {
        const auto& p = buffers[order[r - 1]];
        if (p.size_bytes == b.size_bytes && p.lower == b.lower && p.upper == b.upper &&
            p.alignment == b.alignment) {
          twin_before_[r] = r - 1;
        }
      }
    }
    // Time neighbours, as compressed rows.
    std::vector<std::uint32_t> by_lower(n_);
    std::iota(by_lower.begin(), by_lower.end(), 0u);
    std::sort(by_lower.begin(), by_lower.end(), [&](std::uint32_t a, std::uint32_t b) {
      return first_section_[a] < first_section_[b];
    });
    std::vector<std::vector<std::uint32_t>> adjacency(n_);
    for (std::size_t i = 0; i < n_; ++i) {
      const std::uint32_t a = by_lower[i];
      for (std::size_t j = i + 1; j < n_; ++j) {
        const std::uint32_t b = by_lower[j];
        if (first_section_[b] >= last_section_[a]) break;
        adjacency[a].push_back(b);
        adjacency[b].push_back(a);
      }
    }
    neighbour_begin_.assign(n_ + 1, 0);
    for (std::uint32_t a = 0; a < n_; ++a) {
      neighbour_begin_[a + 1] = neighbour_begin_[a] + static_cast<std::uint32_t>(adjacency[a].size());
    }
    neighbours_.reserve(neighbour_begin_[n_]);
    for (auto& row : adjacency) neighbours_.insert(neighbours_.end(), row.begin(), row.end());

    load_.assign(sections_, 0);
    for (std::uint32_t r = 0; r < n_; ++r) {
      for (std::uint32_t s = first_section_[r]; s < last_section_[r]; ++s) load_[s] += size_[r];
    }
    lower_bound_bytes_ = load_.empty() ? 0 : *std::max_element(load_.begin(), load_.end());
    // Members of each section, as compressed rows.
    section_begin_.assign(sections_ + 1, 0);
    for (std::uint32_t r = 0; r < n_; ++r) {
      for (std::uint32_t sec = first_section_[r]; sec < last_section_[r]; ++sec) ++section_begin_[sec + 1];
    }
    for (std::size_t sec = 0; sec < sections_; ++sec) section_begin_[sec + 1] += section_begin_[sec];
    section_members_.resize(section_begin_[sections_]);
    {
      std::vector<std::uint32_t> fill(section_begin_.begin(), section_begin_.end() - 1);
      for (std::uint32_t r = 0; r < n_; ++r) {
        for (std::uint32_t sec = first_section_[r]; sec < last_section_[r]; ++sec) {
          section_members_[fill[sec]++] = r;
        }
      }
    }
  }

  [[nodiscard]] std::uint64_t lower_bound() const noexcept { return lower_bound_bytes_; }
  [[nodiscard]] std::uint32_t original_index(std::uint32_t rank) const { return original_[rank]; }

  enum class outcome { found, exhausted, timed_out, out_of_nodes };

  /// Looks for plans with peak <= `target`; each one found becomes the
  /// incumbent and the target drops to one byte below it, until a plan at or
  /// under `good_enough` is found, the tree is exhausted, the deadline
  /// passes or `node_limit` nodes were visited. `found` means good_enough
  /// was reached; `exhausted` proves no plan under the final target exists.
  outcome search(std::uint64_t target, std::uint64_t good_enough, clock::time_point deadline,
                 std::uint64_t node_limit = std::numeric_limits<std::uint64_t>::max()) {
    reset();
    target_ = target;
    good_enough_ = good_enough;
    deadline_ = deadline;
    node_budget_end_ = node_limit > std::numeric_limits<std::uint64_t>::max() - nodes_
                           ? std::numeric_limits<std::uint64_t>::max()
                           : nodes_ + node_limit;
    stop_ = false;
    timed_out_ = false;
    out_of_nodes_ = false;
    reached_ = false;
    if (n_ == 0) return outcome::found;
    descend(0, -1);
    if (reached_) return outcome::found;
    if (timed_out_) return outcome::timed_out;
    return out_of_nodes_ ? outcome::out_of_nodes : outcome::exhausted;
  }

  /// The best plan found by any search so far (by rank), if any.
  [[nodiscard]] bool has_plan() const noexcept { return has_plan_; }
  [[nodiscard]] std::uint64_t best_peak() const noexcept { return best_peak_; }
  [[nodiscard]] const std::vector<std::uint64_t>& best_offsets() const noexcept { return best_; }
  [[nodiscard]] std::uint64_t nodes() const noexcept { return nodes_; }

 private:
  static constexpr std::uint32_t none = std::numeric_limits<std::uint32_t>::max();
  static constexpr std::uint64_t unreachable = std::numeric_limits<std::uint64_t>::max();

  void reset() {
    placed_.assign(n_, 0);
    offset_.assign(n_, 0);
    floor_.assign(n_, 0);
    unplaced_neighbours_.resize(n_);
    for (std::uint32_t r = 0; r < n_; ++r) {
      unplaced_neighbours_[r] = neighbour_begin_[r + 1] - neighbour_begin_[r];
    }
    unplaced_.resize(n_);
    position_.resize(n_);
    for (std::uint32_t r = 0; r < n_; ++r) {
      unplaced_[r] = r;
      position_[r] = r;
    }
    unplaced_count_ = n_;
    trail_.clear();
    trail_.reserve(neighbours_.size() + 1);
    remaining_.assign(load_);
    rem_ = load_;
    lowest_.assign(sections_, 0);
    for (std::size_t sec = 0; sec < sections_; ++sec) {
      if (section_begin_[sec] == section_begin_[sec + 1]) lowest_[sec] = unreachable;
    }
    section_trail_.clear();
    section_stamp_.assign(sections_, 0);
    stamp_ = 0;
    top_ = 0;
    peak_ = 0;
  }

  [[nodiscard]] std::uint64_t aligned_floor(std::uint32_t r) const noexcept {
    return (floor_[r] + align_mask_[r]) & ~align_mask_[r];
  }

  bool out_of_time() {
    if ((++nodes_ & 1023u) == 0 && clock::now() >= deadline_) {
      timed_out_ = true;
      stop_ = true;
    }
    if (nodes_ >= node_budget_end_) {
      out_of_nodes_ = true;
      stop_ = true;
    }
    return stop_;
  }

  void record() {
    has_plan_ = true;
    best_peak_ = peak_;
    best_ = offset_;
    if (peak_ <= good_enough_) {
      reached_ = true;
      stop_ = true;
    } else {
      target_ = peak_ - 1;
    }
  }

  // `last_offset`/`last_rank`: the key (offset, rank) that every buffer
  // placed below this node must exceed.
  void descend(std::uint64_t last_offset, std::int64_t last_rank) {
    if (unplaced_count_ == 0) {
      record();
      return;
    }
    while (!out_of_time()) {
      // Scan the unplaced buffers: find the smallest key above the last one,
      // and fail early on buffers that can no longer fit.
      std::uint32_t pick = none;
      std::uint64_t pick_offset = std::numeric_limits<std::uint64_t>::max();
      std::uint64_t lowest_end = std::numeric_limits<std::uint64_t>::max();
      for (std::uint32_t k = 0; k < unplaced_count_; ++k) {
        const std::uint32_t r = unplaced_[k];
        const std::uint64_t at = aligned_floor(r);
        if (at + size_[r] > target_) return;
        lowest_end = std::min(lowest_end, at + size_[r]);
        const bool above = at > last_offset ||
                           (at == last_offset && static_cast<std::int64_t>(r) > last_rank);
        if (!above) {
          if (unplaced_neighbours_[r] == 0) return;  // blocked for good
          continue;
        }
        if (twin_before_[r] != none && !placed_[twin_before_[r]]) continue;
        if (at < pick_offset || (at == pick_offset && r < pick)) {
          pick = r;
          pick_offset = at;
        }
      }
      if (pick == none) return;
      // Dominance: a buffer that could sit entirely below pick_offset at its
      // floor would clash with nothing placed now or later, so a plan that
      // leaves that hole is matched by one that fills it (lower offsets sum).
      if (pick_offset >= lowest_end) return;
      // Every unplaced buffer ends at or above pick_offset.
      if (std::max<std::uint64_t>(top_, pick_offset + static_cast<std::uint64_t>(remaining_.max_all())) >
          target_) {
        return;
      }
      place(pick, pick_offset);
      descend(pick_offset, pick);
      unplace(pick);
      if (stop_) return;
      last_offset = pick_offset;  // skip `pick` at this offset
      last_rank = pick;
    }
  }

  struct undo_record {
    std::size_t trail_size;
    std::size_t section_trail_size;
    std::uint64_t top;
    std::uint64_t peak;
  };

  void place(std::uint32_t r, std::uint64_t at) {
    undo_stack_.push_back({trail_.size(), section_trail_.size(), top_, peak_});
    const std::uint64_t end = at + size_[r];
    // h[s] + rem[s] becomes at + rem_before[s] on r's sections.
    top_ = std::max<std::uint64_t>(
        top_, at + static_cast<std::uint64_t>(remaining_.max(first_section_[r], last_section_[r])));
    remaining_.add(first_section_[r], last_section_[r], -static_cast<std::int64_t>(size_[r]));
    peak_ = std::max(peak_, end);
    placed_[r] = 1;
    offset_[r] = at;
    // Remove r from the unplaced list (swap with the last).
    const std::uint32_t k = position_[r];
    const std::uint32_t last = unplaced_[unplaced_count_ - 1];
    unplaced_[k] = last;
    position_[last] = k;
    unplaced_[unplaced_count_ - 1] = r;
    position_[r] = unplaced_count_ - 1;
    --unplaced_count_;
    const std::size_t trail_before = trail_.size();
    for (std::uint32_t e = neighbour_begin_[r]; e < neighbour_begin_[r + 1]; ++e) {
      const std::uint32_t q = neighbours_[e];
      --unplaced_neighbours_[q];
      if (!placed_[q] && floor_[q] < end) {
        trail_.push_back({q, floor_[q]});
        floor_[q] = end;
      }
    }
    // Section floors: in a section, nothing still unplaced can start below
    // the lowest floor of the unplaced buffers live there (lowest_[s]), so
    // that plus the section's remaining load must fit. lowest_[s] can only
    // rise where the buffer that set it was r itself or a neighbour whose
    // floor just rose; only those sections are rescanned.
    ++stamp_;
    for (std::uint32_t sec = first_section_[r]; sec < last_section_[r]; ++sec) {
      rem_[sec] -= size_[r];
      if (lowest_[sec] == at) rescan(sec);
    }
    for (std::size_t t = trail_before; t < trail_.size(); ++t) {
      const std::uint32_t q = trail_[t].first;
      const std::uint64_t was = (trail_[t].second + align_mask_[q]) & ~align_mask_[q];
      if (was == aligned_floor(q)) continue;
      for (std::uint32_t sec = first_section_[q]; sec < last_section_[q]; ++sec) {
        if (lowest_[sec] == was) rescan(sec);
      }
    }
  }

  void rescan(std::uint32_t sec) {
    if (section_stamp_[sec] == stamp_) return;
    section_stamp_[sec] = stamp_;
    std::uint64_t lowest = unreachable;
    for (std::uint32_t m = section_begin_[sec]; m < section_begin_[sec + 1]; ++m) {
      const std::uint32_t q = section_members_[m];
      if (!placed_[q]) lowest = std::min(lowest, aligned_floor(q));
    }
    if (lowest == lowest_[sec]) return;
    section_trail_.push_back({sec, lowest_[sec]});
    lowest_[sec] = lowest;
    if (lowest != unreachable) top_ = std::max(top_, lowest + rem_[sec]);
  }

  void unplace(std::uint32_t r) {
    const undo_record u = undo_stack_.back();
    undo_stack_.pop_back();
    while (section_trail_.size() > u.section_trail_size) {
      lowest_[section_trail_.back().first] = section_trail_.back().second;
      section_trail_.pop_back();
    }
    while (trail_.size() > u.trail_size) {
      floor_[trail_.back().first] = trail_.back().second;
      trail_.pop_back();
    }
    for (std::uint32_t e = neighbour_begin_[r]; e < neighbour_begin_[r + 1]; ++e) {
      ++unplaced_neighbours_[neighbours_[e]];
    }
    // r sits at position unplaced_count_ (LIFO), so growing the list restores it.
    ++unplaced_count_;
    placed_[r] = 0;
    for (std::uint32_t sec = first_section_[r]; sec < last_section_[r]; ++sec) rem_[sec] += size_[r];
    remaining_.add(first_section_[r], last_section_[r], static_cast<std::int64_t>(size_[r]));
    top_ = u.top;
    peak_ = u.peak;
  }

  // Problem (by rank).
  std::uint32_t n_ = 0;
  std::size_t sections_ = 0;
  std::vector<std::uint32_t> original_;
  std::vector<std::uint64_t> size_;
  std::vector<std::uint64_t> align_mask_;
  std::vector<std::uint32_t> first_section_;
  std::vector<std::uint32_t> last_section_;  // one past
  std::vector<std::uint32_t> twin_before_;
  std::vector<std::uint32_t> neighbour_begin_;
  std::vector<std::uint32_t> neighbours_;
  std::vector<std::uint64_t> load_;
  std::uint64_t lower_bound_bytes_ = 0;
  std::vector<std::uint32_t> section_begin_;
  std::vector<std::uint32_t> section_members_;

  // Search state.
  std::vector<std::uint8_t> placed_;
  std::vector<std::uint64_t> offset_;
  std::vector<std::uint64_t> floor_;  // max end of placed time neighbours
  std::vector<std::uint32_t> unplaced_neighbours_;
  std::vector<std::uint32_t> unplaced_;
  std::vector<std::uint32_t> position_;
  std::uint32_t unplaced_count_ = 0;
  std::vector<std::pair<std::uint32_t, std::uint64_t>> trail_;
  std::vector<undo_record> undo_stack_;
  max_add_tree remaining_;
  std::vector<std::uint64_t> rem_;  // unplaced bytes live in each section
  std::vector<std::uint64_t> lowest_;  // lowest aligned floor of the unplaced buffers live there
  std::vector<std::pair<std::uint32_t, std::uint64_t>> section_trail_;
  std::vector<std::uint64_t> section_stamp_;  // rescanned during the placement numbered stamp_
  std::uint64_t stamp_ = 0;
  std::uint64_t top_ = 0;   // max over sections of h[s] + rem[s] (monotone on a path)
  std::uint64_t peak_ = 0;  // highest end placed
  std::uint64_t target_ = 0;
  std::uint64_t good_enough_ = 0;
  clock::time_point deadline_{};
  bool stop_ = false;
  bool timed_out_ = false;
  bool out_of_nodes_ = false;
  bool reached_ = false;
  std::uint64_t node_budget_end_ = 0;
  std::uint64_t nodes_ = 0;

  // Incumbent.
  bool has_plan_ = false;
  std::uint64_t best_peak_ = 0;
  std::vector<std::uint64_t> best_;
};

/// Searches over the same component that differ only in how they rank
/// buffers. Three fixed rankings run round robin with node limits that
/// double every round (so one of them eventually finishes its tree, which
/// proves infeasibility); between rounds, as many nodes again go to short
/// searches with pseudo-randomly perturbed rankings (restarts), because a
/// depth-first search whose early choices were wrong thrashes near the
/// leaves, and a fresh ranking is the cheapest way out.
class search_portfolio {
 public:
  using clock = dsa_search::clock;
  enum class verdict { feasible, infeasible, unknown };

  explicit search_portfolio(const std::vector<dsa_buffer>& buffers) : buffers_(&buffers) {
    searches_.emplace_back(buffers, dsa_search::ranking::total_width_area);
    searches_.emplace_back(buffers, dsa_search::ranking::width_area_total);
    searches_.emplace_back(buffers, dsa_search::ranking::total_area_width);
    first_limit_ = std::max<std::uint64_t>(1024, 3 * buffers.size());
  }

  /// Is there a plan with peak <= target? `feasible` leaves it as the best plan.
  verdict decide(std::uint64_t target, clock::time_point deadline) {
    for (std::uint64_t limit = first_limit_;; limit *= 2) {
      for (std::size_t k = 0; k < 3; ++k) {
        const auto result = searches_[k].search(target, target, deadline, limit);
        if (result == dsa_search::outcome::found) {
          best_ = k;
          return verdict::feasible;
        }
        if (result == dsa_search::outcome::exhausted) return verdict::infeasible;
        if (result == dsa_search::outcome::timed_out) return verdict::unknown;
      }
      // Restarts: 3 * limit nodes in searches of first_limit_ nodes each.
      for (std::uint64_t spent = 0; spent < 3 * limit; spent += first_limit_) {
        dsa_search restart(*buffers_, dsa_search::ranking::perturbed, ++seed_);
        const auto result = restart.search(target, target, deadline, first_limit_);
        restart_nodes_ += restart.nodes();
        if (result == dsa_search::outcome::found) {
          if (searches_.size() < 4) {
            searches_.push_back(std::move(restart));
          } else {
            searches_[3] = std::move(restart);
          }
          best_ = 3;
          return verdict::feasible;
        }
        if (result == dsa_search::outcome::exhausted) return verdict::infeasible;
        if (result == dsa_search::outcome::timed_out) return verdict::unknown;
      }
    }
  }

  [[nodiscard]] std::uint64_t best_peak() const { return searches_[best_].best_peak(); }
  /// The best plan's offsets, parallel to the component's buffers.
  void best_offsets(std::vector<std::uint64_t>& offsets) const {
    const auto& search = searches_[best_];
    for (std::uint32_t r = 0; r < search.best_offsets().size(); ++r) {
      offsets[search.original_index(r)] = search.best_offsets()[r];
    }
  }
  [[nodiscard]] std::uint64_t nodes() const {
    std::uint64_t total = restart_nodes_;
    for (std::size_t k = 0; k < std::min<std::size_t>(3, searches_.size()); ++k) total += searches_[k].nodes();
    return total;
  }

 private:
  const std::vector<dsa_buffer>* buffers_;
  std::vector<dsa_search> searches_;  // three fixed rankings, then the last successful restart
  std::size_t best_ = 0;
  std::uint64_t first_limit_ = 1024;
  std::uint64_t seed_ = 0;
  std::uint64_t restart_nodes_ = 0;
};

}  // namespace detail

/// Exact offline DSA by branch-and-bound over canonical plans.
class exact_solver {
 public:
  [[nodiscard]] std::string_view name() const noexcept { return "exact"; }

  /// Nodes visited by the last solve (for benchmarks).
  [[nodiscard]] std::uint64_t last_nodes() const noexcept { return nodes_; }

  dsa_result solve(const dsa_problem& problem, const dsa_solve_options& options = {}) {
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    check_problem(problem);
    const auto deadline = detail::solve_deadline(options, start);
    nodes_ = 0;

    const auto& buffers = problem.buffers;
    dsa_result result;
    result.solver = std::string(name());
    result.lower_bound_bytes = lower_bound_bytes(problem);
    result.plan.offsets.assign(buffers.size(), 0);

    const bool warm = options.warm_start && validate(problem, *options.warm_start).ok;
    bool proven = true;
    std::uint64_t forced_peak = 0;  // max over solved components

    auto components = detail::independent_components(buffers);
    std::vector<std::vector<dsa_buffer>> parts(components.size());
    std::vector<std::uint64_t> part_bound(components.size());
    for (std::size_t c = 0; c < components.size(); ++c) {
      for (const auto i : components[c]) parts[c].push_back(buffers[i]);
      dsa_problem piece{parts[c], std::nullopt};
      part_bound[c] = lower_bound_bytes(piece);
    }
    std::vector<std::size_t> order(components.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return part_bound[a] > part_bound[b]; });

    for (const std::size_t c : order) {
      const auto& part = parts[c];
      const auto& members = components[c];
      std::vector<std::uint64_t> offsets;
      std::uint64_t best = detail::greedy_upper_bound(part, offsets);
      if (warm) {
        std::uint64_t warm_peak = 0;
        for (const auto i : members) {
          warm_peak = std::max(warm_peak, options.warm_start->offsets[i] + buffers[i].size_bytes);
        }
        if (warm_peak < best) {
          best = warm_peak;
          for (std::size_t k = 0; k < members.size(); ++k) offsets[k] = options.warm_start->offsets[members[k]];
        }
      }
      const std::uint64_t bound = part_bound[c];
      // Built only when the greedy plan is not already good enough.
      std::optional<detail::search_portfolio> searches;
      auto decide = [&](std::uint64_t target, detail::search_portfolio::clock::time_point until) {
        if (!searches) searches.emplace(part);
        return searches->decide(target, until);
      };
      auto take = [&] {
        best = searches->best_peak();
        searches->best_offsets(offsets);
      };
      using verdict = detail::search_portfolio::verdict;

      if (problem.capacity_bytes) {
        const std::uint64_t capacity = *problem.capacity_bytes;
        if (best > capacity) {
          const auto found = decide(capacity, deadline);
          if (found == verdict::feasible) {
            take();
          } else {
            nodes_ += searches->nodes();
            throw error(capacity_message(capacity, part, bound, found == verdict::infeasible, best));
          }
        }
        proven = proven && best <= std::max(forced_peak, bound);
      } else {
        const std::uint64_t enough = std::max(forced_peak, bound);
        std::uint64_t proven_below = enough;  // no plan of this component peaks under it
        if (best > enough) {
          // Probe the lower bound first with part of the remaining time,
          // then tighten the target below each new incumbent.
          const auto now = clock::now();
          auto outcome = decide(enough, now + (deadline - now) / 2);
          if (outcome == verdict::feasible) take();
          if (outcome == verdict::infeasible) proven_below = enough + 1;
          while (best > proven_below) {
            outcome = decide(best - 1, deadline);
            if (outcome == verdict::feasible) {
              take();
            } else {
              if (outcome == verdict::infeasible) proven_below = best;
              break;
            }
          }
        }
        proven = proven && best <= proven_below;
      }
      if (searches) nodes_ += searches->nodes();
      forced_peak = std::max(forced_peak, best);
      for (std::size_t k = 0; k < members.size(); ++k) result.plan.offsets[members[k]] = offsets[k];
    }
    std::uint64_t peak = 0;
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      peak = std::max(peak, result.plan.offsets[i] + buffers[i].size_bytes);
    }
    result.plan.peak_bytes = peak;
    result.proven_optimal = proven || peak == result.lower_bound_bytes;
    require_valid(problem, result.plan, name());
    result.seconds = std::chrono::duration<double>(clock::now() - start).count();
    return result;
  }

 private:
  static std::string capacity_message(std::uint64_t capacity, const std::vector<dsa_buffer>& part,
                                      std::uint64_t bound, bool proven, std::uint64_t greedy_peak) {
    std::int64_t from = std::numeric_limits<std::int64_t>::max();
    std::int64_t to = std::numeric_limits<std::int64_t>::min();
    for (const auto& b : part) {
      from = std::min(from, b.lower);
      to = std::max(to, b.upper);
    }
    const std::string where = std::to_string(part.size()) + " buffers live in [" +
                              std::to_string(from) + ", " + std::to_string(to) + ")";
    if (proven) {
      return "capacity " + std::to_string(capacity) +
             " bytes is infeasible: the exact search proved that the " + where +
             " need more than " + std::to_string(capacity) + " bytes (their lower bound is " +
             std::to_string(bound) + " bytes)";
    }
    return "no plan within capacity " + std::to_string(capacity) + " bytes found before the time limit for the " +
           where + " (lower bound " + std::to_string(bound) + " bytes, best plan found " +
           std::to_string(greedy_peak) + " bytes); neither a plan nor infeasibility was proven";
  }

  std::uint64_t nodes_ = 0;
};

static_assert(DsaSolver<exact_solver>);

}  // namespace memo
