// memo/plan/exact_solver.hpp
//
// An exact branch-and-bound for offline Dynamic Storage Allocation (MEMO
// section 4.2 poses the problem as a MIP; this solver answers the same
// problem by combinatorial search, which proves optimality on instances far
// past what a MIP solver handles).
//
// Guarantees: the returned plan is valid, checked twice (an exact check of
// this solver's own that forms no wrapping sum, then `require_valid`), and
// `proven_optimal` is true only when the search has shown that no plan with
// a smaller peak exists. With `problem.capacity_bytes` set, the solver
// returns a plan within the capacity, or throws `memo::error` when it has
// proven that none exists (or when the time limit ran out first). A problem
// whose live bytes at some instant do not fit in 64 bits is rejected with
// `memo::error` naming the instant and the sum. A warm start is used only
// after the same exact check passes; an invalid one is ignored.
//
// Time: the limit bounds the whole solve: the greedy plans, the tables and
// the search all stop at the deadline. What is always done is the problem
// check, the tables (O(n log n)) and, when no greedy finished, the stacked
// plan (every buffer above the previous one), so that a plan exists.
//
// Memory: linear in the buffers (no neighbour lists; section membership
// within a budget per buffer; one search workspace shared by all rankings),
// per thread: each helper thread (exact_options::threads) has its own.
//
// The pieces: memo/plan/exact_sections.hpp (arithmetic, time sections,
// loads, segment trees), memo/plan/exact_greedy.hpp (the exact plan check,
// the greedy), memo/plan/exact_state.hpp (switches, workspace, rankings),
// memo/plan/exact_search.hpp (the branch-and-bound), and here the
// portfolio of rankings and the driver (decomposition, decisions,
// minimisation). docs/dsa-solvers.md has the full argument.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include "memo/core/error.hpp"
#include "memo/plan/dsa_problem.hpp"
#include "memo/plan/exact_greedy.hpp"
#include "memo/plan/exact_search.hpp"
#include "memo/plan/exact_sections.hpp"

namespace memo {

namespace detail {

/// Searches over the same component that differ only in how they rank
/// buffers and pick the buffer to branch on. Fixed rankings (four keys; one
/// that orders the buffers as an earlier one does is replaced by a spare:
/// bottom-right, then by size) run round robin
/// with node limits that double every round (so one of them eventually
/// finishes its tree, which proves infeasibility); between rounds,
/// `restart_share` times as many nodes go to short searches (restarts),
/// because a depth-first search whose early choices were wrong thrashes
/// below them, and a fresh start is the cheapest way out (`perfect_packing_share`
/// times as many in a decision that leaves no byte free). With
/// `tight_branching`, a restart ranks the buffers in a shuffled order,
/// branches on the most constrained tight section with one of five fit
/// orders in turn (equal fits in a pseudo-random order), uses the light
/// bounds, and gets a node budget of n times the next term of the Luby
/// sequence (1, 1, 2, 1, 1, 2, 4, ...), at most `perfect_packing_dive_units`
/// times n where no byte may stay free; without it, restarts rank by
/// perturbed keys, branch canonically and get 3n nodes each.
class search_portfolio {
 public:
  using clock = dsa_search::clock;
  enum class verdict { feasible, infeasible, unknown };

  search_portfolio(const std::vector<dsa_buffer>& buffers, const section_table& table,
                   const exact_options& options)
      : buffers_(&buffers), table_(&table), options_(options) {
    // Where two keys order the buffers alike (every buffer of a perfect
    // packing has the same heaviest load, so the first two keys agree there)
    // the second search would repeat the first node for node; a spare
    // ranking takes its place.
    using ranking = dsa_search::ranking;
    std::vector<ranking> spares = {ranking::end_size, ranking::size_width};
    auto repeats = [&](const dsa_search& candidate) {
      return std::any_of(searches_.begin(), searches_.end(),
                         [&](const dsa_search& s) { return s.order() == candidate.order(); });
    };
    for (const auto wanted : {ranking::total_width_area, ranking::width_area_total, ranking::total_area_width,
                              ranking::start_size}) {
      auto rank_by = wanted;
      dsa_search candidate(buffers, table, rank_by, 0, options);
      while (repeats(candidate) && !spares.empty()) {
        rank_by = spares.front();
        spares.erase(spares.begin());
        candidate = dsa_search(buffers, table, rank_by, 0, options);
      }
      if (repeats(candidate)) continue;
      rankings_.push_back(rank_by);
      searches_.push_back(std::move(candidate));
    }
    fixed_ = searches_.size();
    first_limit_ = std::max<std::uint64_t>(1024, 3 * buffers.size());
    if (!table.load.empty()) {
      const auto [low, high] = std::minmax_element(table.load.begin(), table.load.end());
      flat_load_ = *low == *high ? std::optional<std::uint64_t>(*low) : std::nullopt;
    }
  }

  /// Is there a plan with peak <= target? `feasible` leaves it as the best
  /// plan. With `threads` > 1, helper threads run restarts meanwhile; the
  /// first thread to decide stops the others.
  verdict decide(std::uint64_t target, clock::time_point deadline) {
    if (options_.threads <= 1 || !options_.restarts) return decide_here(target, deadline, nullptr);
    struct helper {
      std::optional<dsa_search> found;  // the restart that found a plan
      bool exhausted = false;           // a restart that exhausted its tree: no plan
      std::uint64_t nodes = 0;
      std::exception_ptr failure;
    };
    std::vector<helper> helpers(options_.threads - 1);
    if (helper_index_.size() < helpers.size()) helper_index_.resize(helpers.size(), 0);
    std::atomic<bool> stop{false};
    verdict here = verdict::unknown;
    {
      std::vector<std::jthread> threads;
      // Destroyed first, however the block is left: the helpers stop, then
      // join, and the searches forget `stop`.
      struct stop_on_exit {
        std::atomic<bool>& flag;
        std::vector<dsa_search>& searches;
        ~stop_on_exit() {
          flag.store(true);
          for (auto& search : searches) search.set_cancel(nullptr);
        }
      } guard{stop, searches_};
      threads.reserve(helpers.size());
      for (std::size_t h = 0; h < helpers.size(); ++h) {
        try {
          threads.emplace_back([&, h] {
            try {
              restart_alone(h + 1, helper_index_[h], target, deadline, stop, helpers[h].found,
                            helpers[h].exhausted, helpers[h].nodes);
            } catch (...) {
              helpers[h].failure = std::current_exception();
            }
            stop.store(true);
          });
        } catch (const std::system_error&) {
          break;  // no more threads to be had: the ones started (or none) help
        }
      }
      here = decide_here(target, deadline, &stop);
    }
    for (auto& h : helpers) restart_nodes_ += h.nodes;
    // A helper's failure matters only when the calling thread did not decide.
    if (here != verdict::unknown) return here;
    for (auto& h : helpers) {
      if (h.failure) std::rethrow_exception(h.failure);
    }
    for (auto& h : helpers) {
      if (h.found || h.exhausted) ++helper_decisions_;
      if (h.found) {
        if (searches_.size() == fixed_) {
          searches_.push_back(std::move(*h.found));
        } else {
          searches_[fixed_] = std::move(*h.found);
        }
        searches_[fixed_].set_cancel(nullptr);
        keep_only(fixed_);
        return verdict::feasible;
      }
      if (h.exhausted) return verdict::infeasible;
    }
    return verdict::unknown;
  }

  /// The rankings of the complete searches, each ordering the buffers
  /// differently from the others.
  [[nodiscard]] const std::vector<dsa_search::ranking>& rankings() const noexcept { return rankings_; }

  [[nodiscard]] std::uint64_t best_peak() const { return searches_[best_].best_peak(); }
  /// The best plan's offsets, parallel to the component's buffers.
  void best_offsets(std::vector<std::uint64_t>& offsets) const {
    const auto& search = searches_[best_];
    for (std::uint32_t r = 0; r < search.best_offsets().size(); ++r) {
      offsets[search.original_index(r)] = search.best_offsets()[r];
    }
  }
  /// Decisions a helper thread's restart made (found a plan or exhausted).
  [[nodiscard]] std::uint64_t helper_decisions() const noexcept { return helper_decisions_; }
  [[nodiscard]] std::uint64_t nodes() const {
    std::uint64_t total = restart_nodes_;
    for (std::size_t k = 0; k < fixed_; ++k) total += searches_[k].nodes();
    return total;
  }

 private:
  // Makes search k's plan the best one; the others' plans are dropped (a
  // plan is n offsets, and every new plan is better than the old ones).
  void keep_only(std::size_t k) {
    best_ = k;
    for (std::size_t j = 0; j < searches_.size(); ++j) {
      if (j != k) searches_[j].forget_plan();
    }
  }

  // The calling thread's decision: complete searches round robin with
  // restarts between rounds, all stopped by `stop` when given.
  verdict decide_here(std::uint64_t target, clock::time_point deadline, const std::atomic<bool>* stop) {
    for (auto& search : searches_) search.set_cancel(stop);
    const auto stopped = [&] { return stop != nullptr && stop->load(std::memory_order_relaxed); };
    for (std::uint64_t limit = first_limit_;; limit = saturating_add(limit, limit)) {
      for (std::size_t k = 0; k < fixed_; ++k) {
        const auto result = searches_[k].search(work_, target, target, deadline, limit);
        if (auto v = conclude(result, k)) return *v;
      }
      if (!options_.restarts) continue;
      // A plan with no byte free: the restarts get the larger share.
      const bool perfect = flat_load_ == target;
      const std::uint64_t share =
          std::uint64_t{perfect ? options_.perfect_packing_share : options_.restart_share} * fixed_;
      const std::uint64_t quota = share != 0 && limit > exact_u64_max / share ? exact_u64_max : share * limit;
      for (std::uint64_t spent = 0; spent < quota;) {
        if (clock::now() >= deadline || stopped()) return verdict::unknown;
        ++seed_;
        std::uint64_t budget = first_limit_;
        dsa_search restart = make_dive(seed_, seed_, budget, perfect);
        restart.set_cancel(stop);
        spent = saturating_add(spent, budget);
        const auto result = restart.search(work_, target, target, deadline, budget);
        restart_nodes_ += restart.nodes();
        if (result == dsa_search::outcome::found) {
          if (searches_.size() == fixed_) {
            searches_.push_back(std::move(restart));
          } else {
            searches_[fixed_] = std::move(restart);
          }
          keep_only(fixed_);
          return verdict::feasible;
        }
        if (auto v = conclude(result, fixed_)) return *v;
      }
    }
  }

  // A helper thread's decision: restarts only, the i-th with the Luby term
  // and fit order of index i and a seed of its own (thread `h` > 0 in the
  // top bits, so no two threads shuffle alike), until one decides, the
  // deadline passes or `stop` is set. Reads the portfolio's constant
  // members only; writes `index` (its own) and its outputs.
  void restart_alone(std::uint64_t h, std::uint64_t& index, std::uint64_t target, clock::time_point deadline,
                     const std::atomic<bool>& stop, std::optional<dsa_search>& found, bool& exhausted,
                     std::uint64_t& nodes) const {
    search_workspace work;
    const bool perfect = flat_load_ == target;
    while (!stop.load(std::memory_order_relaxed) && clock::now() < deadline) {
      const std::uint64_t i = ++index;  // carried from decision to decision, like the calling thread's seed
      std::uint64_t budget = first_limit_;
      dsa_search restart = make_dive(i, (h << 48) + i, budget, perfect);
      restart.set_cancel(&stop);
      const auto result = restart.search(work, target, target, deadline, budget);
      nodes += restart.nodes();
      if (result == dsa_search::outcome::found) {
        found.emplace(std::move(restart));
        return;
      }
      if (result == dsa_search::outcome::exhausted) {
        exhausted = true;
        return;
      }
    }
  }

  // Restart number `index` (its Luby term and fit order) shuffled by `seed`,
  // and its node budget (`perfect`: in a decision that leaves no byte free).
  dsa_search make_dive(std::uint64_t index, std::uint64_t seed, std::uint64_t& budget, bool perfect) const {
    if (!options_.tight_branching) {
      // Alternately around the heaviest-load ranking and the bottom-left one.
      const auto rank_by = index % 2 == 1 ? dsa_search::ranking::perturbed : dsa_search::ranking::perturbed_start;
      budget = first_limit_;
      return dsa_search(*buffers_, *table_, rank_by, seed, options_);
    }
    using fit = search_strategy::fit_order;
    static constexpr fit fits[] = {fit::contact_flush, fit::contact_flush, fit::flush, fit::flush, fit::contact};
    const std::size_t turn = index % std::size(fits);
    const search_strategy strategy{true, turn == 1 || turn == 3, fits[turn], true};
    // Where no byte may stay free, a restart either goes down with little
    // backtracking or not at all: its budget stops growing at
    // `perfect_packing_dive_units` terms.
    std::uint64_t units = luby(index);
    if (perfect && options_.perfect_packing_dive_units != 0) {
      units = std::min<std::uint64_t>(units, options_.perfect_packing_dive_units);
    }
    budget = units * std::max<std::uint64_t>(64, buffers_->size());
    return dsa_search(*buffers_, *table_, dsa_search::ranking::shuffled, seed, options_, strategy);
  }

  // The Luby sequence 1, 1, 2, 1, 1, 2, 4, 1, 1, 2, ... (term i >= 1): a
  // restart schedule within a log factor of the best fixed budget.
  static std::uint64_t luby(std::uint64_t i) {
    for (;;) {
      std::uint64_t k = 1;
      while ((std::uint64_t{1} << k) - 1 < i) ++k;
      if (i == (std::uint64_t{1} << k) - 1) return std::uint64_t{1} << (k - 1);
      i -= (std::uint64_t{1} << (k - 1)) - 1;
    }
  }

  std::optional<verdict> conclude(dsa_search::outcome result, std::size_t k) {
    switch (result) {
      case dsa_search::outcome::found: keep_only(k); return verdict::feasible;
      case dsa_search::outcome::exhausted: return verdict::infeasible;
      case dsa_search::outcome::timed_out: return verdict::unknown;
      case dsa_search::outcome::out_of_nodes: return std::nullopt;
    }
    return std::nullopt;
  }

  const std::vector<dsa_buffer>* buffers_;
  const section_table* table_;
  exact_options options_;
  search_workspace work_;
  std::vector<dsa_search> searches_;  // the fixed rankings, then the last successful restart
  std::vector<dsa_search::ranking> rankings_;  // of the fixed ones
  std::size_t fixed_ = 0;
  std::size_t best_ = 0;
  std::uint64_t first_limit_ = 1024;
  std::uint64_t seed_ = 0;
  std::uint64_t restart_nodes_ = 0;
  std::uint64_t helper_decisions_ = 0;
  std::vector<std::uint64_t> helper_index_;  // [helper] its last restart's index, across decisions
  std::optional<std::uint64_t> flat_load_;  // every section's live bytes, when they are all equal
};

}  // namespace detail

/// Exact offline DSA by branch-and-bound over canonical plans.
class exact_solver {
 public:
  exact_solver() = default;
  explicit exact_solver(const exact_options& options) : options_(options) {}

  [[nodiscard]] std::string_view name() const noexcept { return "exact"; }
  [[nodiscard]] const exact_options& options() const noexcept { return options_; }

  /// Nodes visited by the last solve (for benchmarks).
  [[nodiscard]] std::uint64_t last_nodes() const noexcept { return nodes_; }
  /// Decisions of the last solve that a helper thread's restart made.
  [[nodiscard]] std::uint64_t last_helper_decisions() const noexcept { return helper_decisions_; }

  dsa_result solve(const dsa_problem& problem, const dsa_solve_options& options = {}) {
    using clock = std::chrono::steady_clock;
    using verdict = detail::search_portfolio::verdict;
    const auto start = clock::now();
    check_problem(problem);
    const auto deadline = detail::solve_deadline(options, start);
    detail::deadline_clock until(deadline);
    nodes_ = 0;
    helper_decisions_ = 0;

    const auto& buffers = problem.buffers;
    dsa_result result;
    result.solver = std::string(name());
    result.plan.offsets.assign(buffers.size(), 0);

    // A warm start counts only once this solver has checked it exactly.
    bool warm = false;
    if (options.warm_start) {
      std::string reason;
      warm = detail::exact_plan_peak(buffers, options.warm_start->offsets, std::nullopt, reason).has_value();
    }

    std::vector<std::vector<std::uint32_t>> components;
    if (options_.decomposition) {
      components = detail::independent_components(buffers);
    } else if (!buffers.empty()) {
      components.emplace_back(buffers.size());
      std::iota(components.back().begin(), components.back().end(), 0u);
    }
    std::vector<std::vector<dsa_buffer>> parts(components.size());
    std::vector<std::optional<detail::section_table>> tables(components.size());
    // Per component: the largest live sum, or with alignment bounds the
    // alignment-slot bound (never less). The result reports the live sum,
    // the bound every solver shares; the search aims at the stronger one.
    std::vector<std::uint64_t> bounds(components.size(), 0);
    std::uint64_t lower_bound = 0;
    for (std::size_t c = 0; c < components.size(); ++c) {
      parts[c].reserve(components[c].size());
      for (const auto i : components[c]) parts[c].push_back(buffers[i]);
      const std::size_t budget =
          std::max(options_.membership_per_buffer * parts[c].size(), options_.membership_floor);
      tables[c].emplace(parts[c], budget);
      lower_bound = std::max(lower_bound, tables[c]->lower_bound);
      // With alignment bounds, also rounded up to a value a peak can take.
      bounds[c] = options_.alignment_bounds
                      ? detail::peak_at_or_above(parts[c], detail::alignment_slot_bound(parts[c], *tables[c]))
                      : tables[c]->lower_bound;
    }
    result.lower_bound_bytes = lower_bound;
    std::vector<std::size_t> order(components.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return bounds[a] > bounds[b];
    });

    bool proven = true;
    std::uint64_t forced_peak = 0;  // max over solved components
    for (const std::size_t c : order) {
      const auto& part = parts[c];
      const auto& members = components[c];
      const std::uint64_t bound = bounds[c];
      std::vector<std::uint64_t> offsets(part.size(), 0);
      std::optional<std::uint64_t> best = detail::greedy_upper_bound(part, offsets, until);
      if (warm) {
        std::uint64_t warm_peak = 0;
        for (const auto i : members) {
          warm_peak = std::max(warm_peak, options.warm_start->offsets[i] + buffers[i].size_bytes);
        }
        if (!best || warm_peak < *best) {
          best = warm_peak;
          for (std::size_t k = 0; k < members.size(); ++k) offsets[k] = options.warm_start->offsets[members[k]];
        }
      }
      // Built only when the first plan is not already good enough.
      std::optional<detail::search_portfolio> searches;
      auto decide = [&](std::uint64_t target, clock::time_point until_time) {
        if (clock::now() >= until_time) return verdict::unknown;  // no time to build the rankings
        if (!searches) searches.emplace(part, *tables[c], options_);
        return searches->decide(target, until_time);
      };
      // The decision "peak <= target" asked at the highest value a peak can
      // take within the target (the same decision, with sharper bounds);
      // nullopt when no buffer fits within it.
      auto peak_target = [&](std::uint64_t target) -> std::optional<std::uint64_t> {
        return options_.alignment_bounds ? detail::peak_at_or_below(part, target) : target;
      };
      auto take = [&] {
        best = searches->best_peak();
        searches->best_offsets(offsets);
      };

      if (problem.capacity_bytes) {
        const std::uint64_t capacity = *problem.capacity_bytes;
        if (!best || *best > capacity) {
          if (bound > capacity) throw capacity_infeasible(capacity_message(capacity, part, bound, true, best));
          const auto found = decide(peak_target(capacity).value_or(capacity), deadline);
          if (found == verdict::feasible) {
            take();
          } else {
            if (searches) count(*searches);
            if (found == verdict::infeasible) {
              throw capacity_infeasible(capacity_message(capacity, part, bound, true, best));
            }
            throw error(capacity_message(capacity, part, bound, false, best));
          }
        }
        proven = proven && *best <= std::max(forced_peak, bound);
      } else {
        const std::uint64_t enough = std::max(forced_peak, bound);
        std::uint64_t proven_below = enough;  // no plan of this component peaks under it
        if (!best || *best > enough) {
          // Probe the lower bound first with three quarters of the
          // remaining time (a plan there ends the solve, proven; where the
          // bound is out of reach, the plans below the greedy come early in
          // the tightening), then tighten the target below each new
          // incumbent.
          const auto now = clock::now();
          auto outcome = decide(enough, now + (deadline - now) * 3 / 4);
          if (outcome == verdict::feasible) take();
          if (outcome == verdict::infeasible) proven_below = detail::saturating_add(enough, 1);
          while (!best || *best > proven_below) {
            const auto target = peak_target(best ? *best - 1 : detail::exact_u64_max);
            if (!target) {  // no peak below the incumbent's
              proven_below = *best;
              break;
            }
            outcome = decide(*target, deadline);
            if (outcome == verdict::feasible) {
              take();
              continue;
            }
            // No peak lies between the target and the incumbent's.
            if (outcome == verdict::infeasible) proven_below = best ? *best : detail::saturating_add(*target, 1);
            break;
          }
        }
        expects(best.has_value(), [&] {
          return "exact: no plan whose peak fits in 64 bits was found for the " + std::to_string(part.size()) +
                 " buffers of one component (lower bound " + std::to_string(bound) + " bytes) before the time limit";
        });
        proven = proven && *best <= proven_below;
      }
      if (searches) count(*searches);
      forced_peak = std::max(forced_peak, *best);
      for (std::size_t k = 0; k < members.size(); ++k) result.plan.offsets[members[k]] = offsets[k];
      tables[c].reset();
    }
    std::string reason;
    const auto peak = detail::exact_plan_peak(buffers, result.plan.offsets, problem.capacity_bytes, reason);
    expects(peak.has_value(), [&] { return "exact produced an invalid plan: " + reason; });
    result.plan.peak_bytes = *peak;
    result.proven_optimal = proven || *peak == result.lower_bound_bytes;
    require_valid(problem, result.plan, name());
    result.seconds = std::chrono::duration<double>(clock::now() - start).count();
    return result;
  }

 private:
  void count(const detail::search_portfolio& searches) {
    nodes_ += searches.nodes();
    helper_decisions_ += searches.helper_decisions();
  }

  static std::string capacity_message(std::uint64_t capacity, const std::vector<dsa_buffer>& part,
                                      std::uint64_t bound, bool proven, std::optional<std::uint64_t> found) {
    std::int64_t from = std::numeric_limits<std::int64_t>::max();
    std::int64_t to = std::numeric_limits<std::int64_t>::min();
    for (const auto& b : part) {
      from = std::min(from, b.lower);
      to = std::max(to, b.upper);
    }
    const std::string where = std::to_string(part.size()) + " buffers live in [" + std::to_string(from) + ", " +
                              std::to_string(to) + ")";
    if (proven) {
      return "capacity " + std::to_string(capacity) + " bytes is infeasible: the exact search proved that the " +
             where + " need more than " + std::to_string(capacity) + " bytes (their lower bound is " +
             std::to_string(bound) + " bytes)";
    }
    return "no plan within capacity " + std::to_string(capacity) + " bytes found before the time limit for the " +
           where + " (lower bound " + std::to_string(bound) + " bytes, best plan found " +
           (found ? std::to_string(*found) + " bytes" : std::string("none with a 64-bit peak")) +
           "); neither a plan nor infeasibility was proven";
  }

  exact_options options_;
  std::uint64_t nodes_ = 0;
  std::uint64_t helper_decisions_ = 0;
};

static_assert(DsaSolver<exact_solver>);

}  // namespace memo
