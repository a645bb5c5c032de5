// memo/plan/exact_search.hpp
//
// The branch-and-bound of memo's exact DSA solver (MEMO section 4.2 states
// the problem; memo/plan/exact_solver.hpp drives this search and
// docs/dsa-solvers.md gives the argument). One `dsa_search` explores the
// canonical plans of one independent component under one ranking of its
// buffers; a `search_portfolio` runs several rankings and restarts to
// decide "is there a plan with peak <= T?".
//
// Guarantees: `found` comes with a plan whose every end was compared with
// the target without forming a sum that could wrap; `exhausted` is a proof
// (every pruning rule removes only branches that another branch matches or
// beats, and every bound is a true lower bound on the final peak, computed
// in 128 bits where it adds two 64-bit quantities). The deadline is read
// every few thousand units of work, never only per node.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <utility>
#include <vector>

#include "memo/plan/dsa_problem.hpp"
#include "memo/plan/exact_sections.hpp"
#include "memo/plan/exact_state.hpp"

namespace memo::detail {

/// The branch-and-bound over canonical plans of one component. Buffers are
/// renumbered by rank (the tie-break among equal floors).
class dsa_search {
 public:
  using clock = std::chrono::steady_clock;

  using ranking = search_ranking;
  enum class outcome { found, exhausted, timed_out, out_of_nodes };

  dsa_search(const std::vector<dsa_buffer>& buffers, const section_table& table, ranking rank_by,
             std::uint64_t seed = 0, const exact_options& options = {}, search_strategy strategy = {})
      : table_(&table), options_(options), strategy_(strategy), seed_(seed) {
    n_ = table.n;
    const std::vector<std::uint32_t> order = rank_buffers(buffers, table, rank_by, seed);
    original_ = order;
    rank_of_.resize(n_);
    size_.resize(n_);
    shift_.resize(n_);
    first_.resize(n_);
    last_.resize(n_);
    flags_.assign(n_, 0);
    std::uint64_t smallest = exact_u64_max;
    for (const auto& b : buffers) smallest = std::min(smallest, b.alignment);
    granule_mask_ = buffers.empty() ? 0 : smallest - 1;
    for (std::uint32_t r = 0; r < n_; ++r) {
      const std::uint32_t i = order[r];
      const auto& b = buffers[i];
      rank_of_[i] = r;
      size_[r] = b.size_bytes;
      shift_[r] = static_cast<std::uint8_t>(std::countr_zero(b.alignment));
      first_[r] = table.first[i];
      last_[r] = table.last[i];
      if (table.in_long[i]) flags_[r] |= long_flag;
      if (table.in_long[i]) long_.push_back(r);
      if (r > 0 && options_.symmetry) {
        const auto& p = buffers[order[r - 1]];
        if (p.size_bytes == b.size_bytes && p.lower == b.lower && p.upper == b.upper &&
            p.alignment == b.alignment) {
          flags_[r] |= twin_flag;
        }
      }
    }
  }

  [[nodiscard]] std::uint32_t original_index(std::uint32_t rank) const { return original_[rank]; }
  /// The buffers in rank order (rank -> index).
  [[nodiscard]] const std::vector<std::uint32_t>& order() const noexcept { return original_; }

  /// Looks for plans with peak <= `target`; each one found becomes the
  /// incumbent and the target drops to one byte below it, until a plan at or
  /// under `good_enough` is found, the tree is exhausted, the deadline
  /// passes or `node_limit` nodes were visited. `found` means good_enough
  /// was reached; `exhausted` proves no plan under the final target exists.
  outcome search(search_workspace& work, std::uint64_t target, std::uint64_t good_enough,
                 clock::time_point deadline,
                 std::uint64_t node_limit = std::numeric_limits<std::uint64_t>::max()) {
    w_ = &work;
    reset();
    target_ = target;
    // A remembered state has no plan within the target it was exhausted
    // under, so none within a lower one either.
    if (target > seen_.target) seen_.clear();
    seen_.target = target;
    good_enough_ = good_enough;
    clock_.emplace(deadline, 1u << 16, cancel_);
    node_budget_end_ = saturating_add(nodes_, node_limit);
    stop_ = timed_out_ = out_of_nodes_ = reached_ = false;
    if (clock_->expired_now()) {
      clock_.reset();
      return outcome::timed_out;
    }
    if (n_ == 0) {
      record();
      clock_.reset();
      return outcome::found;
    }
    descend();
    w_ = nullptr;
    clock_.reset();  // it may point at a cancel flag that dies after this call
    // The stacks are as deep as the component; give the memory back, since
    // a portfolio keeps several searches.
    std::vector<undo_record>().swap(undo_);
    std::vector<frame>().swap(frames_);
    if (reached_) return outcome::found;
    if (timed_out_) return outcome::timed_out;
    return out_of_nodes_ ? outcome::out_of_nodes : outcome::exhausted;
  }

  /// A flag another thread sets to stop this search as if its deadline had
  /// passed (read with the clock, every 2^16 units of work); null: none.
  void set_cancel(const std::atomic<bool>* cancel) noexcept { cancel_ = cancel; }

  /// Drops the plan this search found (another search's is kept instead).
  void forget_plan() {
    std::vector<std::uint64_t>().swap(best_);
    has_plan_ = false;
  }

  /// The best plan found by any search so far (by rank), if any.
  [[nodiscard]] bool has_plan() const noexcept { return has_plan_; }
  [[nodiscard]] std::uint64_t best_peak() const noexcept { return best_peak_; }
  [[nodiscard]] const std::vector<std::uint64_t>& best_offsets() const noexcept { return best_; }
  [[nodiscard]] std::uint64_t nodes() const noexcept { return nodes_; }

  /// Evaluates the section bounds the plain way: every section scanned in
  /// full and its members sorted, without the per-height sums or the reuse
  /// of the section before. The bounds, and so the tree, are the same
  /// (the tests compare the two).
  void use_reference_bounds(bool on) noexcept { reference_bounds_ = on; }

 private:
  static constexpr std::uint32_t none = std::numeric_limits<std::uint32_t>::max();
  // Ranks are below 2^29 (section_table refuses more buffers), so the
  // top bit of a rank is free to carry a flag in the exclusion trail.
  static constexpr std::uint32_t excluded_bit = std::uint32_t{1} << 31;
  using wide = wide_uint;

  void reset() {
    auto& w = *w_;
    const auto& t = *table_;
    w.placed.assign(n_, 0);
    w.offset.assign(n_, 0);
    w.floor.assign(n_, 0);
    w.unplaced_neighbours.resize(n_);
    w.unplaced.resize(n_);
    w.position.resize(n_);
    for (std::uint32_t r = 0; r < n_; ++r) {
      w.unplaced_neighbours[r] = t.neighbours[original_[r]];
      w.unplaced[r] = r;
      w.position[r] = r;
    }
    unplaced_count_ = n_;
    w.trail.clear();
    w.section_trail.clear();
    w.remaining.assign(t.load);
    w.placed_ends.reset(t.sections);
    w.long_ends.reset(t.sections);
    w.long_part.assign(n_, 0);
    w.long_part_version.assign(n_, 0);
    w.long_version = 1;
    w.node_floor.assign(n_, 0);
    w.excluded_at.assign(n_, 0);
    w.excluded.assign(n_, 0);
    w.exclusion_trail.clear();
    if (options_.section_bounds) {
      w.rem = t.load;
      w.lowest.assign(t.sections, 0);
      for (std::uint32_t s = 0; s < t.sections; ++s) {
        if (t.member_begin[s] == t.member_begin[s + 1]) w.lowest[s] = exact_u64_max;
      }
      w.stamp.assign(t.sections, 0);
      w.boundary_unplaced.assign(t.sections + 1, 0);
      for (std::uint32_t r = 0; r < n_; ++r) {
        if (is_long(r)) continue;
        ++w.boundary_unplaced[first_[r]];
        ++w.boundary_unplaced[last_[r]];
      }
      scanned_.stamp = 0;
    }
    undo_.clear();
    stamp_ = 0;
    top_ = 0;
    peak_ = 0;
    long_min_ = long_.empty() ? exact_u64_max : 0;
  }

  // A floor is the highest end of the placed time neighbours. Long buffers
  // ask the tree of all placed ends. Short ones keep the part due to short
  // neighbours in `floor` (raised and trailed as they are placed) and take
  // the part due to long neighbours from the tree of long ends, cached
  // until a long buffer is placed or removed: so placing a long buffer
  // trails nothing per short buffer under it.
  [[nodiscard]] std::uint64_t floor_of(std::uint32_t r) const noexcept {
    auto& w = *w_;
    if (is_long(r)) return w.placed_ends.max(first_[r], last_[r]);
    if (long_.empty()) return w.floor[r];
    if (w.long_part_version[r] != w.long_version) {
      w.long_part[r] = w.long_ends.max(first_[r], last_[r]);
      w.long_part_version[r] = w.long_version;
    }
    return std::max(w.floor[r], w.long_part[r]);
  }
  [[nodiscard]] std::uint64_t aligned_floor(std::uint32_t r) const noexcept {
    return saturating_align_up(floor_of(r), mask(r));
  }
  [[nodiscard]] bool is_long(std::uint32_t r) const noexcept { return (flags_[r] & long_flag) != 0; }
  [[nodiscard]] std::uint32_t twin_before(std::uint32_t r) const noexcept {
    return (flags_[r] & twin_flag) != 0 ? r - 1 : none;
  }
  [[nodiscard]] std::uint32_t twin_after(std::uint32_t r) const noexcept {
    return r + 1 < n_ && (flags_[r + 1] & twin_flag) != 0 ? r + 1 : none;
  }
  [[nodiscard]] std::uint64_t mask(std::uint32_t r) const noexcept { return (std::uint64_t{1} << shift_[r]) - 1; }
  // Every offset is a multiple of the smallest alignment, so a buffer with
  // another one above it in some section keeps the bytes up to the next
  // multiple free there: its padding.
  [[nodiscard]] std::uint64_t pad(std::uint32_t r) const noexcept {
    return (granule_mask_ + 1 - (size_[r] & granule_mask_)) & granule_mask_;
  }
  [[nodiscard]] bool overlaps(std::uint32_t a, std::uint32_t b) const noexcept {
    return first_[a] < last_[b] && first_[b] < last_[a];
  }

  bool out_of_time(std::uint64_t work) {
    ++nodes_;
    if (clock_->expired(work)) {
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
    best_ = w_->offset;
    if (peak_ <= good_enough_) {
      reached_ = true;
      stop_ = true;
    } else {
      target_ = peak_ - 1;
      seen_.target = target_;
    }
  }

  // The depth-first search, with an explicit stack (one frame per placed
  // buffer, so tens of thousands deep is fine). A frame's `level` is the
  // offset below which nothing more is placed in its subtree; a buffer
  // skipped at the level is excluded from it (trailed, undone when the
  // frame is popped). `pick` is the buffer its current child placed.
  struct frame {
    std::uint64_t level;
    std::uint32_t pick;
    std::uint64_t pick_offset;
    std::uint64_t min_size;       // smallest unplaced buffer when `pick` was chosen
    std::size_t exclusion_mark;   // exclusion trail size when the frame was pushed
    std::uint64_t entry_level;    // `level` when the frame was pushed
    bool branched;                // a child was pushed (the state was looked up)
  };

  [[nodiscard]] bool excluded(std::uint32_t r, std::uint64_t level) const noexcept {
    return w_->excluded[r] != 0 && w_->excluded_at[r] == level;
  }
  // Excludes r from `level` (it will sit higher). With symmetry, its later
  // identical twins too: the one of two identical buffers placed first is
  // the one placed lower, so none of them can sit at the level either.
  void exclude(std::uint32_t r, std::uint64_t level) {
    auto& w = *w_;
    for (std::uint32_t q = r; q != none; q = twin_after(q)) {
      w.exclusion_trail.emplace_back(q | (w.excluded[q] != 0 ? excluded_bit : 0u), w.excluded_at[q]);
      w.excluded_at[q] = level;
      w.excluded[q] = 1;
    }
  }
  void pop_frame() {
    auto& w = *w_;
    const std::size_t mark = frames_.back().exclusion_mark;
    while (w.exclusion_trail.size() > mark) {
      const std::uint32_t code = w.exclusion_trail.back().index();
      const std::uint32_t q = code & ~excluded_bit;
      w.excluded_at[q] = w.exclusion_trail.back().value();
      w.excluded[q] = static_cast<std::uint8_t>((code & excluded_bit) != 0);
      w.exclusion_trail.pop_back();
    }
    frames_.pop_back();
  }

  // Transpositions apply to the complete searches (a restart is short and
  // starts afresh, so what it would remember is rarely met again) of
  // components within transposition_max_buffers.
  [[nodiscard]] bool remembering() const noexcept {
    return options_.transpositions && !strategy_.tight_first && !strategy_.light_bounds &&
           n_ <= options_.transposition_max_buffers;
  }

  // Pops a frame whose subtree holds no plan within the target (every
  // branch was cut by a rule that keeps a matching or better plan
  // elsewhere, or by a bound). Its state as it was pushed is remembered
  // when the frame branched at least once: the subtree below a state
  // depends only on what state_key records, so the same state reached by
  // another path has no plan within the target either.
  void pop_exhausted() {
    const bool learnt = frames_.back().branched && remembering() && !stop_;
    const std::uint64_t level = frames_.back().entry_level;
    pop_frame();  // restores the exclusions the frame made
    if (learnt) seen_.insert(state_key(level), options_.transposition_words);
  }

  // What the subtree below a node depends on, with `level` the frame's:
  // which buffers are placed, and for each unplaced one its aligned floor
  // and whether it is blocked (floor below the level, or at it and
  // excluded). A candidate is an unblocked buffer, every placement from
  // here on is at or above the level, and an exclusion matters only while
  // the floor is at the level; so the level and the exclusions enter only
  // through these bits. The placed buffers' offsets enter only through the
  // floors. The bounds of the path (top_) are lower bounds of every
  // completion, so they cut the same plans whatever the path.
  // Built from the unplaced list in O(n / 64 + unplaced): a bitset of the
  // unplaced buffers, one of the blocked ones, then the floors in rank
  // order.
  const std::vector<std::uint64_t>& state_key(std::uint64_t level) {
    auto& key = seen_.key;
    const std::size_t words = (std::size_t{n_} + 63) / 64;
    key.assign(2 * words, 0);
    for (std::uint32_t k = 0; k < unplaced_count_; ++k) {
      const std::uint32_t r = w_->unplaced[k];
      key[r / 64] |= std::uint64_t{1} << (r % 64);
    }
    for (std::size_t word = 0; word < words; ++word) {
      for (std::uint64_t bits = key[word]; bits != 0; bits &= bits - 1) {
        const auto r = static_cast<std::uint32_t>(64 * word + static_cast<std::size_t>(std::countr_zero(bits)));
        const std::uint64_t at = aligned_floor(r);
        if (at < level || (at == level && excluded(r, level))) key[words + word] |= std::uint64_t{1} << (r % 64);
        key.push_back(at);
      }
    }
    clock_->expired(words + unplaced_count_);
    return key;
  }

  void descend() {
    auto& w = *w_;
    auto& stack = frames_;
    stack.clear();
    stack.push_back({0, none, 0, 0, w.exclusion_trail.size(), 0, false});
    bool returning = false;
    while (!stack.empty()) {
      frame& f = stack.back();
      if (returning) {
        // Stopping leaves the state as it is: the next search resets the
        // workspace, and unwinding tens of thousands of frames one by one
        // (each O(unplaced)) would take seconds past the deadline.
        if (stop_) break;
        unplace(f.pick);
        f.level = f.pick_offset;
        exclude(f.pick, f.level);  // skip `pick` at this offset
        const std::uint32_t skipped = f.pick;
        f.pick = none;
        returning = false;
        if (options_.section_bounds && !skip_fits(skipped, f.level, f.min_size)) {
          returning = true;
          pop_exhausted();
          continue;
        }
      }
      if (unplaced_count_ == 0) {
        record();
        pop_frame();
        returning = true;
        continue;
      }
      returning = true;  // unless a child is pushed below
      if (out_of_time(unplaced_count_)) {
        pop_frame();
        continue;
      }
      // Scan the unplaced buffers: find the smallest (floor, rank) not below
      // the level nor excluded from it, and fail early on buffers that can
      // no longer fit.
      std::uint32_t pick = none;
      std::uint64_t pick_offset = exact_u64_max;
      std::uint64_t lowest_end = exact_u64_max;
      std::uint64_t min_size = exact_u64_max;
      bool dead = false;
      for (std::uint32_t k = 0; k < unplaced_count_ && !dead; ++k) {
        const std::uint32_t r = w.unplaced[k];
        const std::uint64_t at = aligned_floor(r);
        w.node_floor[r] = at;
        if (!ends_within(at, size_[r], target_)) {
          dead = true;
          break;
        }
        lowest_end = std::min(lowest_end, at + size_[r]);
        min_size = std::min(min_size, size_[r]);
        if (at < f.level || (at == f.level && excluded(r, at))) {
          dead = w.unplaced_neighbours[r] == 0;  // blocked for good
          continue;
        }
        if (twin_before(r) != none && !w.placed[twin_before(r)]) continue;
        if (at < pick_offset || (at == pick_offset && r < pick)) {
          pick = r;
          pick_offset = at;
        }
      }
      // Dominance: a buffer that could sit entirely below pick_offset at its
      // floor would clash with nothing placed now or later, so a plan that
      // leaves that hole is matched by one that fills it (lower offsets sum).
      // Bound: every unplaced buffer ends at or above pick_offset.
      const wide needed = pick == none ? 0 : wide{pick_offset} + w.remaining.max_all();
      if (dead || pick == none || (options_.dominance && pick_offset >= lowest_end) || top_ > target_ ||
          needed > target_ || (options_.section_bounds && needed == target_ && !level_coverable(pick_offset))) {
        pop_exhausted();
        continue;
      }
      if (!f.branched) {
        f.branched = true;
        if (remembering() && seen_.contains(state_key(f.level))) {
          f.branched = false;  // nothing new learnt: not remembered again
          pop_frame();
          continue;
        }
      }
      if (strategy_.tight_first && options_.section_bounds && needed == target_) {
        pick = tight_pick(pick_offset, pick);
      }
      place(pick, pick_offset);
      f.pick = pick;
      f.pick_offset = pick_offset;
      f.min_size = min_size;
      returning = false;
      stack.push_back({pick_offset, none, 0, 0, w.exclusion_trail.size(), pick_offset, false});
    }
  }

  // The level is tight somewhere: some section's unplaced bytes fill it
  // exactly from the level up, so a buffer must sit at the level there.
  // Picks the tight section with the fewest candidates covering it (or the
  // first one), then among those the best fit; `fallback` (the canonical
  // pick) if no tight section is found.
  std::uint32_t tight_pick(std::uint64_t level, std::uint32_t fallback) {
    auto& w = *w_;
    const auto& t = *table_;
    auto& cover = w.cover;
    auto& candidates = w.candidates;
    cover.assign(t.sections + 1, 0);
    candidates.clear();
    for (std::uint32_t k = 0; k < unplaced_count_; ++k) {
      const std::uint32_t r = w.unplaced[k];
      if (w.node_floor[r] != level || excluded(r, level)) continue;
      if (twin_before(r) != none && !w.placed[twin_before(r)]) continue;
      candidates.push_back(r);
      ++cover[first_[r]];
      --cover[last_[r]];
    }
    std::uint32_t chosen = none;
    std::int64_t fewest = std::numeric_limits<std::int64_t>::max();
    std::int64_t running = 0;
    for (std::uint32_t sec = 0; sec < t.sections; ++sec) {
      running += cover[sec];
      const bool tight = w.rem[sec] != 0 && wide{level} + w.rem[sec] == target_;
      if (!tight || running >= fewest) continue;
      chosen = sec;
      fewest = running;
      if (strategy_.leftmost) break;
    }
    clock_->expired(t.sections + unplaced_count_);
    if (chosen == none) return fallback;
    // Equal fits are taken in a pseudo-random order drawn from the seed, so
    // that dives over the same ranking still differ.
    auto shuffle_key = [&](std::uint32_t r) {
      std::uint64_t h = (seed_ ^ original_[r]) * 0x9e3779b97f4a7c15ull;
      h ^= h >> 29;
      return h * 0xbf58476d1ce4e5b9ull;
    };
    std::uint32_t pick = none;
    std::uint64_t best = 0;
    std::uint64_t best_key = 0;
    for (const std::uint32_t r : candidates) {
      if (first_[r] > chosen || chosen >= last_[r]) continue;
      const std::uint64_t score = fit_score(r, level);
      const std::uint64_t key = shuffle_key(r);
      if (pick == none || score > best || (score == best && key < best_key)) {
        pick = r;
        best = score;
        best_key = key;
      }
    }
    return pick == none ? fallback : pick;
  }

  // How well r at `level` fits the skyline beside it (higher is better).
  // A side is flush when the skyline there is level with r's top; its
  // contact is how much of r's side the skyline there covers (all of it at
  // either end of the timeline).
  [[nodiscard]] std::uint64_t fit_score(std::uint32_t r, std::uint64_t level) const {
    using fit = search_strategy::fit_order;
    if (strategy_.fit == fit::rank) return 0;
    const auto& t = *table_;
    const std::uint64_t top = level + size_[r];  // fits: ends_within held
    std::uint64_t flush = 0;
    std::uint64_t walls = 0;
    wide contact = 0;  // in units of size / 2^10
    auto side = [&](bool at_end, std::uint32_t sec) {
      if (at_end) {
        ++walls;
        contact += wide{1} << 10;
        return;
      }
      const std::uint64_t sky = w_->placed_ends.max(sec, sec + 1);
      if (sky == top) ++flush;
      const std::uint64_t covered = sky > level ? std::min(sky - level, size_[r]) : 0;
      contact += (wide{covered} << 10) / size_[r];
    };
    side(first_[r] == 0, first_[r] - 1);
    side(last_[r] == t.sections, last_[r]);
    const auto touching = static_cast<std::uint64_t>(contact);  // at most 2^11
    switch (strategy_.fit) {
      case fit::flush: return 2 * flush + walls;
      case fit::contact: return touching;
      case fit::contact_flush: return (flush << 12) + touching;
      case fit::rank: break;
    }
    return 0;
  }

  struct undo_record {
    std::size_t trail_size;
    std::size_t section_trail_size;
    wide top;
    std::uint64_t peak;
    std::uint64_t long_min;
  };

  void place(std::uint32_t r, std::uint64_t at) {
    auto& w = *w_;
    undo_.push_back({w.trail.size(), w.section_trail.size(), top_, peak_, long_min_});
    const std::uint64_t end = at + size_[r];  // ends_within(at, size, target) held
    if (options_.section_bounds) {
      // h[s] + rem[s] becomes at + rem_before[s] on r's sections.
      top_ = std::max(top_, wide{at} + w.remaining.max(first_[r], last_[r]));
    }
    w.remaining.add(first_[r], last_[r], ~size_[r] + 1);  // minus size, mod 2^64
    w.placed_ends.insert(first_[r], last_[r], end);  // the skyline; the floors of long buffers
    if (is_long(r)) {
      w.long_ends.insert(first_[r], last_[r], end);
      ++w.long_version;
    }
    peak_ = std::max(peak_, end);
    w.placed[r] = 1;
    w.offset[r] = at;
    // Remove r from the unplaced list (swap with the last).
    const std::uint32_t k = w.position[r];
    const std::uint32_t moved = w.unplaced[unplaced_count_ - 1];
    w.unplaced[k] = moved;
    w.position[moved] = k;
    w.unplaced[unplaced_count_ - 1] = r;
    w.position[r] = unplaced_count_ - 1;
    --unplaced_count_;
    const std::size_t trail_before = w.trail.size();
    for (std::uint32_t q_at = 0; q_at < unplaced_count_; ++q_at) {
      const std::uint32_t q = w.unplaced[q_at];
      if (!overlaps(q, r)) continue;
      --w.unplaced_neighbours[q];
      if (!is_long(q) && !is_long(r) && w.floor[q] < end) {
        w.trail.emplace_back(q, w.floor[q]);
        w.floor[q] = end;
      }
    }
    if (!options_.section_bounds) return;
    // Section floors: in a section, nothing still unplaced can start below
    // the lowest floor of the unplaced buffers live there, so that plus the
    // section's remaining load must fit. The lowest floor can only rise
    // where the buffer that set it was r itself or a neighbour whose floor
    // just rose. r's own sections (where the unplaced bytes changed) are
    // rescanned with the stacking bound, and so are the sections of every
    // neighbour whose floor rose; with light bounds, those only where the
    // lowest floor may have risen, without stacking.
    if (++stamp_ == 0) {  // wrapped: no section may look rescanned already
      std::fill(w.stamp.begin(), w.stamp.end(), 0u);
      scanned_.stamp = 0;
      stamp_ = 1;
    }
    const bool r_long = is_long(r);
    if (!r_long) {
      --w.boundary_unplaced[first_[r]];
      --w.boundary_unplaced[last_[r]];
    }
    for (std::uint32_t sec = first_[r]; sec < last_[r]; ++sec) {
      w.rem[sec] -= size_[r];
      if (!r_long) rescan(sec, true);
    }
    clock_->expired(last_[r] - first_[r]);
    for (std::size_t e = trail_before; e < w.trail.size(); ++e) {
      const std::uint32_t q = w.trail[e].index();
      const std::uint64_t now = aligned_floor(q);  // refreshes the long part of q
      const std::uint64_t long_part = long_.empty() ? 0 : w.long_part[q];
      const std::uint64_t was = saturating_align_up(std::max(w.trail[e].value(), long_part), mask(q));
      if (was == now) continue;
      for (std::uint32_t sec = first_[q]; sec < last_[q]; ++sec) {
        if (!strategy_.light_bounds || w.lowest[sec] == was) rescan(sec, !strategy_.light_bounds);
      }
    }
    if (!long_.empty()) {
      long_min_ = exact_u64_max;
      for (const std::uint32_t q : long_) {
        if (!w.placed[q]) long_min_ = std::min(long_min_, aligned_floor(q));
      }
      clock_->expired(long_.size() * 8);
    }
  }

  // Orders `lows` by lowest start for stacked_top. Those at the smallest
  // start go first in any order, and only the rest are sorted: stacked_top
  // reads a group of equal starts only through its sums and maxima, and
  // the group at the smallest start is often most of a section.
  static void sort_lows(std::vector<std::pair<std::uint64_t, std::uint64_t>>& lows) {
    if (lows.size() < 2) return;
    std::uint64_t lowest = exact_u64_max;
    for (const auto& x : lows) lowest = std::min(lowest, x.first);
    const auto high = std::partition(lows.begin(), lows.end(), [&](const auto& x) { return x.first == lowest; });
    std::sort(high, lows.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  }

  // Stacking over `lows` ((lowest start, rank), by lowest start; the order
  // within equal starts does not change the result): for every k, the
  // buffers from k up cannot start below lows[k].first, so they all fit
  // above it, each but the topmost with its padding. With alignment
  // bounds, those of them aligned to 2^slot_shift (the most aligned level
  // here, when above the smallest alignment) start at distinct multiples
  // of it, so each but the topmost of them takes its size rounded up to a
  // whole slot. Returns the highest of these lower bounds on the peak.
  [[nodiscard]] wide stacked_top(const std::vector<std::pair<std::uint64_t, std::uint64_t>>& lows,
                                 std::uint8_t slot_shift) const {
    const bool slots = options_.alignment_bounds && (std::uint64_t{1} << slot_shift) > granule_mask_ + 1;
    const wide slot_mask = (wide{1} << slot_shift) - 1;
    wide best = 0;
    wide above = 0;
    std::uint64_t most = 0;
    wide slotted = 0;            // the slot-aligned buffers from k up, each a whole slot
    std::uint64_t most_tail = 0;  // the largest slot minus size among them
    bool any_slotted = false;
    for (std::size_t k = lows.size(); k-- > 0;) {
      const auto q = static_cast<std::uint32_t>(lows[k].second);
      above += wide{size_[q]} + pad(q);
      most = std::max(most, pad(q));
      best = std::max(best, wide{lows[k].first} + above - most);
      if (!slots) continue;
      if (shift_[q] >= slot_shift) {
        const wide slot = (wide{size_[q]} + slot_mask) & ~slot_mask;
        slotted += slot;
        most_tail = std::max(most_tail, static_cast<std::uint64_t>(slot - size_[q]));
        any_slotted = true;
      }
      // The lowest of them starts at a multiple of the slot at or above lows[k].first.
      if (any_slotted) best = std::max(best, ((wide{lows[k].first} + slot_mask) & ~slot_mask) + slotted - most_tail);
    }
    return best;
  }

  // The stacking bound of stacked_top over `lows` in any order. A
  // section's members usually sit on a few skyline heights, and the bound
  // reads the members at one lowest start only through their sums and
  // maxima (within a group, the bound grows with every member added, so
  // its value after the whole group is the group's): so the members are
  // summed per distinct start and only those sums are sorted. Past
  // `max_groups` distinct starts, the members are sorted instead.
  [[nodiscard]] wide stacking_bound(std::vector<std::pair<std::uint64_t, std::uint64_t>>& lows,
                                    std::uint8_t slot_shift) const {
    static constexpr std::size_t max_groups = 16;
    if (reference_bounds_) {
      sort_lows(lows);
      return stacked_top(lows, slot_shift);
    }
    const bool slots = options_.alignment_bounds && (std::uint64_t{1} << slot_shift) > granule_mask_ + 1;
    const wide slot_mask = (wide{1} << slot_shift) - 1;
    auto& groups = w_->floor_groups;
    groups.clear();
    std::size_t g = 0;
    for (const auto& [floor, rank] : lows) {
      if (groups.empty() || groups[g].floor != floor) {
        g = 0;
        while (g < groups.size() && groups[g].floor != floor) ++g;
        if (g == groups.size()) {
          if (groups.size() == max_groups) {
            sort_lows(lows);
            return stacked_top(lows, slot_shift);
          }
          groups.push_back({floor, 0, 0, 0, 0, false});
        }
      }
      auto& group = groups[g];
      const auto q = static_cast<std::uint32_t>(rank);
      group.bytes += wide{size_[q]} + pad(q);
      group.most_pad = std::max(group.most_pad, pad(q));
      if (slots && shift_[q] >= slot_shift) {
        const wide slot = (wide{size_[q]} + slot_mask) & ~slot_mask;
        group.slotted += slot;
        group.most_tail = std::max(group.most_tail, static_cast<std::uint64_t>(slot - size_[q]));
        group.any_slotted = true;
      }
    }
    std::sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) { return a.floor > b.floor; });
    // As in stacked_top, from the highest start down.
    wide best = 0;
    wide above = 0;
    std::uint64_t most = 0;
    wide slotted = 0;
    std::uint64_t most_tail = 0;
    bool any_slotted = false;
    for (const auto& group : groups) {
      above += group.bytes;
      most = std::max(most, group.most_pad);
      best = std::max(best, wide{group.floor} + above - most);
      if (!slots) continue;
      slotted += group.slotted;
      most_tail = std::max(most_tail, group.most_tail);
      any_slotted = any_slotted || group.any_slotted;
      if (any_slotted) best = std::max(best, ((wide{group.floor} + slot_mask) & ~slot_mask) + slotted - most_tail);
    }
    return best;
  }

  /// Calls f(rank) for every unplaced member of section `sec` (the scan
  /// both section bounds start from), and charges the scan to the clock.
  template <class F>
  void for_unplaced_members(std::uint32_t sec, F&& f) {
    const auto& t = *table_;
    for (std::uint32_t m = t.member_begin[sec]; m < t.member_begin[sec + 1]; ++m) {
      const std::uint32_t q = rank_of_[t.members[m]];
      if (!w_->placed[q]) f(q);
    }
    clock_->expired(t.member_begin[sec + 1] - t.member_begin[sec]);
  }

  void rescan(std::uint32_t sec, bool stacking) {
    auto& w = *w_;
    const auto& t = *table_;
    if (w.stamp[sec] == stamp_) return;
    w.stamp[sec] = stamp_;
    // The section before holds the same unplaced members (no unplaced short
    // buffer starts or ends between them) and was scanned in this round,
    // with the floors as they are now: its lowest floor, padding and
    // stacking bound are this section's too (the stacking bound is already
    // in top_).
    const bool same = !reference_bounds_ && sec > 0 && scanned_.stamp == stamp_ && scanned_.section + 1 == sec &&
                      (scanned_.stacking || !stacking) && w.boundary_unplaced[sec] == 0;
    if (!same) {
      std::uint64_t lowest = exact_u64_max;
      wide padding = 0;          // of the unplaced members here
      std::uint64_t top_pad = 0;  // the largest: the topmost one keeps none
      auto& lows = w.scratch;
      lows.clear();
      std::uint8_t slot_shift = 0;
      for_unplaced_members(sec, [&](std::uint32_t q) {
        const std::uint64_t floor = aligned_floor(q);
        lowest = std::min(lowest, floor);
        padding += pad(q);
        top_pad = std::max(top_pad, pad(q));
        slot_shift = std::max(slot_shift, shift_[q]);
        if (stacking) lows.emplace_back(floor, q);
      });
      if (stacking && lows.size() > 1) {
        top_ = std::max(top_, stacking_bound(lows, slot_shift));
      }
      scanned_ = {stamp_, sec, stacking, lowest, padding, top_pad};
    } else {
      scanned_.section = sec;
    }
    const std::uint64_t lowest = scanned_.lowest;
    if (lowest == w.lowest[sec]) return;
    w.section_trail.emplace_back(sec, w.lowest[sec]);
    w.lowest[sec] = lowest;
    const std::uint64_t from = t.long_covered[sec] ? std::min(lowest, long_min_) : lowest;
    if (from != exact_u64_max) top_ = std::max(top_, wide{from} + w.rem[sec] + scanned_.padding - scanned_.top_pad);
  }

  // A section where level + unplaced bytes == target is tight: its
  // unplaced buffers must fill [level, target) without a gap, so one of
  // them sits exactly at the level. Those at the level share no instant,
  // and only the candidates (floor at the level, not excluded from it) can
  // be there. So some time-disjoint set of candidates must cover every
  // tight section: an interval DP over the sections.
  bool level_coverable(std::uint64_t level) {
    auto& w = *w_;
    const auto& t = *table_;
    auto& starts = w.level_starts;
    starts.clear();
    for (std::uint32_t k = 0; k < unplaced_count_; ++k) {
      const std::uint32_t r = w.unplaced[k];
      if (w.node_floor[r] != level || excluded(r, level)) continue;
      starts.emplace_back(first_[r], last_[r]);
    }
    std::sort(starts.begin(), starts.end());
    auto& reach = w.level_reach;
    reach.assign(t.sections + 1, 0);
    reach[0] = 1;
    std::size_t next = 0;
    for (std::uint32_t sec = 0; sec < t.sections; ++sec) {
      if (!reach[sec]) {
        while (next < starts.size() && starts[next].first == sec) ++next;
        continue;
      }
      for (; next < starts.size() && starts[next].first == sec; ++next) reach[starts[next].second] = 1;
      const bool tight = w.rem[sec] != 0 && wide{level} + w.rem[sec] == target_;
      if (!tight) reach[sec + 1] = 1;
    }
    clock_->expired(t.sections + unplaced_count_);
    return reach[t.sections] != 0;
  }

  // After `skipped` was skipped at offset `at`: every unplaced buffer whose
  // floor is below `at`, or at it and excluded from it, is blocked, and can
  // only be placed
  // above a time neighbour placed later, so at or above at + min_size. In
  // each section of the skipped buffer, for every height e, the unplaced
  // buffers that cannot start below e must all fit above it, each but the
  // topmost with its padding (members only:
  // leaving out the long buffers' bytes keeps it sound). This catches a
  // section left unfillable at a height as soon as its last candidate there
  // is skipped, instead of when the search moves past the height.
  bool skip_fits(std::uint32_t skipped, std::uint64_t at, std::uint64_t min_size) {
    auto& w = *w_;
    const auto& t = *table_;
    if (is_long(skipped)) return true;
    const std::uint64_t blocked_from = saturating_add(at, min_size);
    auto& lows = w.scratch;
    std::uint64_t lowest = exact_u64_max;
    for (std::uint32_t sec = first_[skipped]; sec < last_[skipped]; ++sec) {
      // The same unplaced members as the section before: the same stacking,
      // already checked, and the same lowest start.
      if (reference_bounds_ || sec == first_[skipped] || w.boundary_unplaced[sec] != 0) {
        lows.clear();
        std::uint8_t slot_shift = 0;
        for_unplaced_members(sec, [&](std::uint32_t q) {
          const std::uint64_t floor = aligned_floor(q);
          const bool blocked = floor < at || (floor == at && excluded(q, at));
          lows.emplace_back(blocked ? std::max(floor, blocked_from) : floor, q);
          slot_shift = std::max(slot_shift, shift_[q]);
        });
        if (stacking_bound(lows, slot_shift) > target_) return false;
        lowest = exact_u64_max;
        for (const auto& low : lows) lowest = std::min(lowest, low.first);
      }
      const std::uint64_t from = t.long_covered[sec] ? std::min(lowest, long_min_) : lowest;
      if (from != exact_u64_max && wide{from} + w.rem[sec] > target_) return false;
    }
    return true;
  }

  void unplace(std::uint32_t r) {
    auto& w = *w_;
    const undo_record u = undo_.back();
    undo_.pop_back();
    while (w.section_trail.size() > u.section_trail_size) {
      w.lowest[w.section_trail.back().index()] = w.section_trail.back().value();
      w.section_trail.pop_back();
    }
    while (w.trail.size() > u.trail_size) {
      w.floor[w.trail.back().index()] = w.trail.back().value();
      w.trail.pop_back();
    }
    for (std::uint32_t q_at = 0; q_at < unplaced_count_; ++q_at) {
      const std::uint32_t q = w.unplaced[q_at];
      if (overlaps(q, r)) ++w.unplaced_neighbours[q];
    }
    // r sits at position unplaced_count_ (LIFO), so growing the list restores it.
    ++unplaced_count_;
    w.placed[r] = 0;
    if (options_.section_bounds) {
      for (std::uint32_t sec = first_[r]; sec < last_[r]; ++sec) w.rem[sec] += size_[r];
      if (!is_long(r)) {
        ++w.boundary_unplaced[first_[r]];
        ++w.boundary_unplaced[last_[r]];
      }
    }
    w.remaining.add(first_[r], last_[r], size_[r]);
    w.placed_ends.erase();
    if (is_long(r)) {
      w.long_ends.erase();
      ++w.long_version;
    }
    top_ = u.top;
    peak_ = u.peak;
    long_min_ = u.long_min;
  }

  // Problem (by rank).
  const section_table* table_;
  exact_options options_;
  search_strategy strategy_;
  std::uint64_t seed_ = 0;
  std::uint32_t n_ = 0;
  std::vector<std::uint32_t> original_;
  std::vector<std::uint32_t> rank_of_;
  std::vector<std::uint64_t> size_;
  std::vector<std::uint8_t> shift_;  // log2 of the alignment
  std::vector<std::uint32_t> first_;
  std::vector<std::uint32_t> last_;  // one past
  // Per rank: no section membership (`long_flag`); the same size, lifetime
  // and alignment as the buffer ranked just before (`twin_flag`).
  static constexpr std::uint8_t long_flag = 1;
  static constexpr std::uint8_t twin_flag = 2;
  std::vector<std::uint8_t> flags_;
  std::uint64_t granule_mask_ = 0;  // the smallest alignment, minus one
  std::vector<std::uint32_t> long_;  // ranks of the buffers without section membership

  // Search state (the rest lives in the workspace).
  search_workspace* w_ = nullptr;
  std::uint32_t unplaced_count_ = 0;
  std::vector<undo_record> undo_;
  std::vector<frame> frames_;
  std::uint32_t stamp_ = 0;
  // The last section rescan() scanned: in which round, whether with the
  // stacking bound, and what it found.
  struct section_scan {
    std::uint32_t stamp;
    std::uint32_t section;
    bool stacking;
    std::uint64_t lowest;
    wide padding;
    std::uint64_t top_pad;
  };
  section_scan scanned_{};
  bool reference_bounds_ = false;
  wide top_ = 0;            // a proven lower bound on the peak (monotone on a path)
  std::uint64_t peak_ = 0;  // highest end placed
  std::uint64_t long_min_ = 0;
  std::uint64_t target_ = 0;
  std::uint64_t good_enough_ = 0;
  std::optional<deadline_clock> clock_;
  const std::atomic<bool>* cancel_ = nullptr;
  bool stop_ = false;
  bool timed_out_ = false;
  bool out_of_nodes_ = false;
  bool reached_ = false;
  std::uint64_t node_budget_end_ = 0;
  std::uint64_t nodes_ = 0;

  transposition_table seen_;

  // Incumbent.
  bool has_plan_ = false;
  std::uint64_t best_peak_ = 0;
  std::vector<std::uint64_t> best_;
};

}  // namespace memo::detail
