// memo/plan/exact_state.hpp
//
// What memo's exact DSA search (memo/plan/exact_search.hpp; MEMO section
// 4.2 poses the problem) is configured with and works in: its switches
// (`exact_options`), the workspace that every ranking of a component
// shares, and the rankings themselves (the fixed order that breaks ties
// among buffers at the same floor).
//
// Guarantees: a ranking is a permutation in which interchangeable buffers
// (same size, lifetime and alignment) are adjacent, which the symmetry rule
// relies on; its keys saturate instead of overflowing.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <numeric>
#include <utility>
#include <vector>

#include "memo/plan/dsa_problem.hpp"
#include "memo/plan/exact_sections.hpp"

namespace memo {

/// Switches of the exact search, all on by default; turning one off keeps
/// the answers exact and shows what that part buys (bench/exact_bench.cpp).
struct exact_options {
  bool dominance = true;       ///< prune branches that leave a hole a buffer could drop into
  bool section_bounds = true;  ///< per-section "lowest floor + unplaced bytes" bounds
  /// Alignment slots: in a section, the buffers of alignment >= a start at
  /// distinct multiples of a, so each but the topmost takes its size
  /// rounded up to a. Raises the component's lower bound (every alignment
  /// level, every section) and, in the search, stacks the section's most
  /// aligned buffers in whole slots.
  bool alignment_bounds = true;
  bool symmetry = true;        ///< interchangeable buffers placed in a fixed order
  bool decomposition = true;   ///< solve time-disjoint components separately
  bool restarts = true;        ///< short searches under perturbed rankings between rounds
  /// Threads of a decision: beside the complete searches and restarts of
  /// the calling thread, threads - 1 more run restarts of their own seeds
  /// (with `restarts`; 1: none, and the search is deterministic). The
  /// first to find a plan or exhaust its tree stops the others.
  unsigned threads = 1;
  /// In the restarts: at a level where some section must be filled from
  /// that level up without a gap, branch on the buffers that can cover the
  /// most constrained such section, best skyline fit first, over shuffled
  /// rankings (off: the restarts branch in rank order over perturbed
  /// rankings, as the complete searches do).
  bool tight_branching = true;
  /// In the complete searches: remember the states whose subtrees were
  /// exhausted (the unplaced buffers, their aligned floors, and which of
  /// them are blocked or excluded), and cut a node that reaches one of
  /// them again by another path. Orders of placement that end on the same
  /// floors (placing a and then b, or b and then a, where both sit under
  /// the same later buffers) are then searched once.
  bool transpositions = true;
  /// 64-bit words the remembered states of one search may take (16 MiB):
  /// when they are used up, no more states are remembered.
  std::size_t transposition_words = std::size_t{1} << 21;
  /// Only components of at most this many buffers remember states: a
  /// state takes a word per unplaced buffer, so on larger ones the budget
  /// holds few, and it would add its 16 MiB per search to a working
  /// memory that is otherwise a few hundred bytes per buffer.
  std::size_t transposition_max_buffers = 4096;
  /// Nodes given to restarts per node of the complete searches, each round.
  std::uint32_t restart_share = 4;
  /// The same, in a decision that leaves no byte free (every section's
  /// live bytes equal the target, as in a perfect packing): there every
  /// level is tight, the tight branching applies throughout, and the
  /// restarts are what finds the plans.
  std::uint32_t perfect_packing_share = 12;
  /// In such a decision, a restart gets at most this many times n nodes
  /// (the Luby terms above it are cut to it; 0: no cap). The restarts
  /// that found plans there went down with little backtracking (in 1 to
  /// 2.7 times n nodes on six cut rectangles of 500 buffers, with budgets
  /// of up to 32n), and the longer ones spent the rest of their budget
  /// below an early wrong choice.
  std::uint32_t perfect_packing_dive_units = 2;
  /// (buffer, section) pairs kept for the section bounds: this many per
  /// buffer, or `membership_floor` in all if that is more (16 MiB of
  /// 4-byte entries; small instances keep every pair). Buffers beyond the
  /// budget are summarised by one value (sound, weaker).
  std::size_t membership_per_buffer = 48;
  std::size_t membership_floor = std::size_t{1} << 22;
};

namespace detail {

/// The states whose subtrees one search has exhausted (no plan within
/// `target` below them), each kept whole (a length, then its words) in one
/// array and found through an open-addressing table of hashes, so a lookup
/// never mistakes one state for another. Stops growing once the array would
/// pass its budget of words.
struct transposition_table {
  std::uint64_t target = 0;
  std::vector<std::uint64_t> key;  // the state being looked up or inserted

  [[nodiscard]] bool contains(const std::vector<std::uint64_t>& state) const {
    return count_ != 0 && where_[slot_of(state, hash(state))] != 0;
  }

  void insert(const std::vector<std::uint64_t>& state, std::size_t budget_words) {
    if (words_.size() + state.size() + 1 > budget_words) return;
    if (2 * (count_ + 1) > hashes_.size()) grow();
    const std::uint64_t h = hash(state);
    const std::size_t slot = slot_of(state, h);
    if (where_[slot] != 0) return;
    hashes_[slot] = h;
    where_[slot] = words_.size() + 1;
    words_.push_back(state.size());
    words_.insert(words_.end(), state.begin(), state.end());
    ++count_;
  }

  void clear() {
    std::vector<std::uint64_t>().swap(hashes_);
    std::vector<std::size_t>().swap(where_);
    std::vector<std::uint64_t>().swap(words_);
    count_ = 0;
  }

 private:
  static std::uint64_t hash(const std::vector<std::uint64_t>& state) {
    std::uint64_t h = state.size();
    for (const std::uint64_t word : state) {
      h = (h ^ word) * 0x9e3779b97f4a7c15ull;
      h ^= h >> 31;
    }
    return h;
  }
  // The slot holding `state`, or the empty slot where it would go.
  [[nodiscard]] std::size_t slot_of(const std::vector<std::uint64_t>& state, std::uint64_t h) const {
    const std::size_t mask = hashes_.size() - 1;
    for (std::size_t slot = h & mask;; slot = (slot + 1) & mask) {
      if (where_[slot] == 0) return slot;
      if (hashes_[slot] != h) continue;
      const std::size_t at = where_[slot] - 1;
      if (words_[at] == state.size() && std::equal(state.begin(), state.end(), words_.begin() + at + 1)) {
        return slot;
      }
    }
  }
  void grow() {
    const std::size_t slots = hashes_.empty() ? 1024 : 2 * hashes_.size();
    std::vector<std::uint64_t> hashes(slots, 0);
    std::vector<std::size_t> where(slots, 0);
    for (std::size_t s = 0; s < hashes_.size(); ++s) {
      if (where_[s] == 0) continue;
      std::size_t slot = hashes_[s] & (slots - 1);
      while (where[slot] != 0) slot = (slot + 1) & (slots - 1);
      hashes[slot] = hashes_[s];
      where[slot] = where_[s];
    }
    hashes_.swap(hashes);
    where_.swap(where);
  }

  std::vector<std::uint64_t> hashes_;  // per slot: the state's hash
  std::vector<std::size_t> where_;      // per slot: 1 + where the state starts in words_, 0 = empty
  std::vector<std::uint64_t> words_;   // the states, each its length and then its words
  std::size_t count_ = 0;
};

/// The search state one decision needs. Every search of a portfolio resets
/// and reuses the same workspace, so its size is paid once per component.
struct search_workspace {
  std::vector<std::uint8_t> placed;
  std::vector<std::uint64_t> offset;
  std::vector<std::uint64_t> floor;  // max end of placed time neighbours
  std::vector<std::uint32_t> unplaced_neighbours;
  std::vector<std::uint32_t> unplaced;
  std::vector<std::uint32_t> position;
  std::deque<trail_entry> trail;           // (rank, old floor); grows by blocks, without a doubling copy
  std::vector<trail_entry> section_trail;  // (section, old lowest)
  std::vector<std::uint64_t> rem;     // unplaced bytes live in each section
  std::vector<std::uint64_t> lowest;  // lowest aligned floor of the short unplaced buffers there
  std::vector<std::uint32_t> stamp;
  // Per section boundary s: the unplaced short buffers that start or end
  // at s. At zero, sections s - 1 and s hold the same unplaced members.
  std::vector<std::uint32_t> boundary_unplaced;
  max_add_tree remaining;
  placed_max_tree placed_ends;  // ends of all placed buffers: the floors of the long ones
  placed_max_tree long_ends;    // ends of the placed long buffers
  std::vector<std::uint64_t> long_part;          // per short buffer: long_ends over its span,
  std::vector<std::uint64_t> long_part_version;  // valid while long_version is unchanged
  std::uint64_t long_version = 0;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> scratch;  // (lowest start, rank)
  // The members of one section at one lowest start, summed for the
  // stacking bound: their bytes with padding, the largest padding, and
  // those aligned to the section's slot: their slots and the largest slot
  // minus size.
  struct floor_group {
    std::uint64_t floor;
    wide_uint bytes;
    std::uint64_t most_pad;
    wide_uint slotted;
    std::uint64_t most_tail;
    bool any_slotted;
  };
  std::vector<floor_group> floor_groups;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> level_starts;  // candidate spans
  std::vector<std::uint8_t> level_reach;
  // Branching: every unplaced buffer's aligned floor at the current node,
  // and the exclusions from a level (a skip), with their trail.
  std::vector<std::uint64_t> node_floor;
  std::vector<std::uint64_t> excluded_at;
  std::vector<std::uint8_t> excluded;
  std::vector<trail_entry> exclusion_trail;  // (rank + 2^31 if it was excluded, the level it was excluded from)
  std::vector<std::int32_t> cover;        // per section: candidates starting there minus those ending
  std::vector<std::uint32_t> candidates;  // ranks
};

/// How buffers are ranked: by the heaviest load they take part in
/// ("total"), by lifetime ("width"), by size * lifetime ("area"), by
/// start time (bottom-left filling), by end time (bottom-right), or by
/// size, then lifetime. `perturbed` is total_width_area with
/// the load term scaled by a pseudo-random factor in [0.75, 1.25) drawn
/// from `seed` (equal for identical buffers), `perturbed_start` is
/// bottom-left with the area term scaled by one in [0.5, 1.5), and
/// `shuffled` a pseudo-random order drawn from `seed`; all three for
/// restarts.
enum class search_ranking {
  total_width_area,
  width_area_total,
  total_area_width,
  start_size,
  end_size,
  size_width,
  perturbed,
  perturbed_start,
  shuffled
};

/// How a search picks the buffer it branches on. Canonical: the unplaced
/// buffer of smallest (floor, rank) that is not excluded from its floor.
/// With `tight_first`, at a level where some section is tight (its
/// unplaced bytes fill it exactly from the level up, so some buffer must
/// sit there at the level), the search branches on the buffers that can
/// cover the tight section with the fewest of them (`leftmost`: the first
/// tight section), best `fit` first; elsewhere it is canonical. Every
/// strategy is complete: a branch places the buffer at the level or
/// excludes it from the level, so only the shape of the tree changes.
struct search_strategy {
  /// Order among the buffers that can cover the chosen tight section:
  /// `rank`; `flush` (tops level with the skyline beside them, then sides
  /// against the ends of the timeline); `contact` (most side contact with
  /// the skyline beside them); `contact_flush` (flush tops, then contact).
  enum class fit_order : std::uint8_t { rank, flush, contact, contact_flush };
  bool tight_first = false;
  bool leftmost = false;
  fit_order fit = fit_order::rank;
  /// The stacking bound only in the sections of the buffer just placed
  /// (not in those of the neighbours it raised): cheaper nodes, weaker
  /// pruning; for short dives that look for a plan rather than a proof.
  bool light_bounds = false;
};

/// The buffers of a component in rank order (rank -> index).
inline std::vector<std::uint32_t> rank_buffers(const std::vector<dsa_buffer>& buffers, const section_table& table,
                                             search_ranking rank_by, std::uint64_t seed) {
  const std::uint32_t n = table.n;
  std::vector<std::uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  auto width = [&](std::uint32_t i) { return lifetime_ticks(buffers[i]); };
  auto area = [&](std::uint32_t i) {  // saturating, only for ordering
    const auto w = width(i);
    const auto sz = buffers[i].size_bytes;
    return sz > exact_u64_max / w ? exact_u64_max : sz * w;
  };
  auto key = [&](std::uint32_t i) -> std::array<std::uint64_t, 3> {
    const auto heavy = table.heaviest[i];
    switch (rank_by) {
      case search_ranking::total_width_area: return {heavy, width(i), area(i)};
      case search_ranking::width_area_total: return {width(i), area(i), heavy};
      case search_ranking::total_area_width: return {heavy, area(i), width(i)};
      case search_ranking::start_size: return {exact_u64_max - table.first[i], buffers[i].size_bytes, width(i)};
      case search_ranking::end_size: return {table.last[i], buffers[i].size_bytes, width(i)};
      case search_ranking::size_width: return {buffers[i].size_bytes, width(i), heavy};
      case search_ranking::perturbed_start: {
        // Bottom-left, with the size term scaled by a pseudo-random factor.
        std::uint64_t h = (seed + 1) * 0xd1b54a32d192ed03ull;
        for (const std::uint64_t v : {buffers[i].size_bytes, static_cast<std::uint64_t>(buffers[i].lower),
                                      static_cast<std::uint64_t>(buffers[i].upper)}) {
          h = (h ^ v) * 0xff51afd7ed558ccdull;
          h ^= h >> 33;
        }
        const double factor = 0.5 + static_cast<double>(h >> 11) * 0x1.0p-53;
        const double scaled = static_cast<double>(area(i)) * factor;
        return {exact_u64_max - table.first[i], scaled >= 0x1.0p64 ? exact_u64_max : static_cast<std::uint64_t>(scaled),
                width(i)};
      }
      case search_ranking::shuffled: {
        // Equal for identical buffers, so that they stay adjacent.
        std::uint64_t h = (seed + 7) * 0x9e3779b97f4a7c15ull;
        for (const std::uint64_t v : {buffers[i].size_bytes, static_cast<std::uint64_t>(buffers[i].lower),
                                      static_cast<std::uint64_t>(buffers[i].upper), buffers[i].alignment}) {
          h = (h ^ v) * 0xff51afd7ed558ccdull;
          h ^= h >> 33;
        }
        return {h, 0, 0};
      }
      case search_ranking::perturbed: {
        const auto& b = buffers[i];
        std::uint64_t h = seed * 0x9e3779b97f4a7c15ull;
        for (const std::uint64_t v : {b.size_bytes, static_cast<std::uint64_t>(b.lower),
                                      static_cast<std::uint64_t>(b.upper), b.alignment}) {
          h = (h ^ v) * 0xff51afd7ed558ccdull;
          h ^= h >> 33;
        }
        const double factor = 0.75 + 0.5 * static_cast<double>(h >> 11) * 0x1.0p-53;
        const double scaled = static_cast<double>(heavy) * factor;
        return {scaled >= 0x1.0p64 ? exact_u64_max : static_cast<std::uint64_t>(scaled), width(i), area(i)};
      }
    }
    return {0, 0, 0};
  };
  // Identical buffers must end up adjacent (the symmetry rule relies on
  // it): ties fall back to size, start, end, alignment, then input order.
  std::vector<std::array<std::uint64_t, 3>> keys(n);
  for (std::uint32_t i = 0; i < n; ++i) keys[i] = key(i);
  std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    if (keys[a] != keys[b]) return keys[a] > keys[b];
    const auto& x = buffers[a];
    const auto& y = buffers[b];
    if (x.size_bytes != y.size_bytes) return x.size_bytes > y.size_bytes;
    if (x.lower != y.lower) return x.lower < y.lower;
    if (x.upper != y.upper) return x.upper < y.upper;
    if (x.alignment != y.alignment) return x.alignment > y.alignment;
    return a < b;
  });
  return order;
}

}  // namespace detail
}  // namespace memo
