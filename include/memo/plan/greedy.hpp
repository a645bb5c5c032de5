// memo/plan/greedy.hpp
//
// Greedy heuristics for offline DSA (MEMO section 4.2). They give fast upper
// bounds: the answer for instances where a few percent above the lower
// bound is good enough, the warm start and big-M of the MIP, and the first
// incumbent of the exact search.
//
// * `greedy_by_size_solver`: buffers in decreasing size, each placed in the
//   smallest gap between the time-overlapping buffers already placed that
//   holds it (best fit), or on top of them. The "greedy by size" family used
//   by mobile inference runtimes; usually the best of the three.
// * `first_fit_solver`: buffers in order of their start time, each at the
//   lowest offset that is free for its whole lifetime.
// * `best_fit_heap_solver`: replays the requests online, the way a
//   non-caching heap with block splitting and coalescing would serve them:
//   the smallest free block that holds a request, split, and merged with its
//   free neighbours when freed. What an online allocator with no knowledge of
//   the future achieves.
//
// The first two place through memo/plan/placement.hpp: greedy-by-size
// looks only at a buffer's time neighbours (O(n log n) plus the neighbours
// scanned, which grows with the buffers live at once); first fit sweeps the
// timeline keeping the live buffers' gaps in a tree, O(n log n); the heap
// keeps its free blocks by address and by size, O(n log n). Each
// honours `options.time_limit_seconds`: past it, it raises `memo::error`
// saying how far it got.
//
// Every solver honours alignment, returns a plan that passes `validate`, and
// reports `proven_optimal` only when its peak equals the lower bound. With a
// capacity set, a heuristic plan above the capacity is an error naming both
// numbers: the heuristics do not search, the exact solver does.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iterator>
#include <map>
#include <set>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "memo/core/bytes.hpp"
#include "memo/core/error.hpp"
#include "memo/plan/dsa_problem.hpp"
#include "memo/plan/placement.hpp"

namespace memo {

namespace detail {

/// A placement of `problem` in `order` as a plan; errors name the solver.
inline dsa_plan heuristic_plan(const dsa_problem& problem, const std::vector<std::uint32_t>& order,
                               fit_rule rule, std::chrono::steady_clock::time_point deadline,
                               std::string_view name) {
  dsa_plan plan;
  try {
    plan.peak_bytes = place_in_order(problem.buffers, order, rule, plan.offsets, deadline);
  } catch (const error& e) {
    throw error(std::string(name) + ": " + e.message());
  }
  return plan;
}

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// Fills in the result of a heuristic: lower bound, proof when it reaches
/// it, validation, and the capacity check.
inline dsa_result finish_heuristic(const dsa_problem& problem, dsa_plan plan,
                                   std::string_view name,
                                   std::chrono::steady_clock::time_point start) {
  dsa_result result;
  result.lower_bound_bytes = lower_bound_bytes(problem);
  result.proven_optimal = plan.peak_bytes == result.lower_bound_bytes;
  result.solver = std::string(name);
  if (problem.capacity_bytes && plan.peak_bytes > *problem.capacity_bytes) {
    throw error(std::string(name) + ": the heuristic plan needs " +
                std::to_string(plan.peak_bytes) + " bytes, above the capacity " +
                std::to_string(*problem.capacity_bytes) + " bytes (lower bound " +
                std::to_string(result.lower_bound_bytes) +
                " bytes); the exact solver searches for a plan that fits");
  }
  require_valid(problem, plan, name);
  result.plan = std::move(plan);
  result.seconds = seconds_since(start);
  return result;
}

}  // namespace detail

/// Best fit in decreasing size (ties: longer lifetime first, then earlier).
class greedy_by_size_solver {
 public:
  [[nodiscard]] std::string_view name() const noexcept { return "greedy-size"; }

  [[nodiscard]] dsa_result solve(const dsa_problem& problem,
                                 const dsa_solve_options& options = {}) const {
    const auto start = std::chrono::steady_clock::now();
    check_problem(problem);
    const auto deadline = detail::solve_deadline(options, start);
    const auto& buffers = problem.buffers;
    auto order = detail::index_order(buffers.size());
    // Lifetimes fit in int64 once check_problem passed.
    std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
      const auto& x = buffers[a];
      const auto& y = buffers[b];
      if (x.size_bytes != y.size_bytes) return x.size_bytes > y.size_bytes;
      if (x.upper - x.lower != y.upper - y.lower) return x.upper - x.lower > y.upper - y.lower;
      return x.lower < y.lower;
    });
    return detail::finish_heuristic(problem, detail::heuristic_plan(problem, order, detail::fit_rule::best, deadline, name()),
                                    name(), start);
  }
};

/// Lowest free offset, buffers in order of start time (ties: larger first).
class first_fit_solver {
 public:
  [[nodiscard]] std::string_view name() const noexcept { return "first-fit"; }

  [[nodiscard]] dsa_result solve(const dsa_problem& problem,
                                 const dsa_solve_options& options = {}) const {
    const auto start = std::chrono::steady_clock::now();
    check_problem(problem);
    const auto deadline = detail::solve_deadline(options, start);
    const auto& buffers = problem.buffers;
    auto order = detail::index_order(buffers.size());
    std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
      const auto& x = buffers[a];
      const auto& y = buffers[b];
      if (x.lower != y.lower) return x.lower < y.lower;
      return x.size_bytes > y.size_bytes;
    });
    // In start order the lowest fit is a sweep over the live buffers' gaps
    // (placement.hpp): O(log n) a placement, however many are live at once.
    dsa_plan plan;
    try {
      plan.peak_bytes = detail::place_lowest_in_start_order(buffers, order, plan.offsets, deadline);
    } catch (const error& e) {
      throw error(std::string(name()) + ": " + e.message());
    }
    return detail::finish_heuristic(problem, std::move(plan), name(), start);
  }
};

/// An online heap: requests served in time order (frees before mallocs at
/// the same instant), best-fit free block, split, coalesced on free.
class best_fit_heap_solver {
 public:
  [[nodiscard]] std::string_view name() const noexcept { return "best-fit-heap"; }

  [[nodiscard]] dsa_result solve(const dsa_problem& problem,
                                 const dsa_solve_options& options = {}) const {
    const auto start = std::chrono::steady_clock::now();
    check_problem(problem);
    const auto deadline = detail::solve_deadline(options, start);
    const auto& buffers = problem.buffers;
    const auto events = detail::timeline_events(buffers);
    // Free blocks below `top`, by address and by (size, address): the best
    // fit is the first block in size order that holds the request aligned.
    std::map<std::uint64_t, std::uint64_t> free_blocks;  // offset -> size
    std::set<std::pair<std::uint64_t, std::uint64_t>> by_size;  // (size, offset)
    std::uint64_t top = 0;                                // end of the heap so far
    dsa_plan plan;
    plan.offsets.assign(buffers.size(), 0);
    auto forget = [&](std::map<std::uint64_t, std::uint64_t>::iterator it) {
      by_size.erase({it->second, it->first});
      return free_blocks.erase(it);
    };
    auto release = [&](std::uint64_t offset, std::uint64_t size) {
      if (size == 0) return;
      auto next = free_blocks.lower_bound(offset);
      if (next != free_blocks.end() && offset + size == next->first) {
        size += next->second;
        next = forget(next);
      }
      if (next != free_blocks.begin()) {
        const auto prev = std::prev(next);
        if (prev->first + prev->second == offset) {
          by_size.erase({prev->second, prev->first});
          prev->second += size;
          by_size.emplace(prev->second, prev->first);
          return;
        }
      }
      free_blocks.emplace(offset, size);
      by_size.emplace(size, offset);
    };
    std::size_t served = 0;
    for (const auto& e : events) {
      if (++served % 4096 == 0 && std::chrono::steady_clock::now() >= deadline) {
        throw error(std::string(name()) + ": time limit reached after " + std::to_string(served - 1) +
                    " of " + std::to_string(events.size()) + " requests");
      }
      const auto& b = buffers[e.index];
      if (!e.is_malloc) {
        release(plan.offsets[e.index], b.size_bytes);
        continue;
      }
      auto best = by_size.end();
      for (auto it = by_size.lower_bound({b.size_bytes, 0}); it != by_size.end(); ++it) {
        const auto [size, block] = *it;
        const detail::wide_bytes at =
            (detail::wide_bytes{block} + b.alignment - 1) / b.alignment * b.alignment;
        if (at + b.size_bytes <= detail::wide_bytes{block} + size) {
          best = it;
          break;
        }
      }
      std::uint64_t offset = 0;
      if (best != by_size.end()) {
        const auto [size, block] = *best;
        forget(free_blocks.find(block));
        offset = align_up(block, b.alignment);
        release(block, offset - block);
        release(offset + b.size_bytes, block + size - offset - b.size_bytes);
      } else {
        // Grow the heap; a free block touching the top is grown into.
        std::uint64_t base = top;
        if (!free_blocks.empty()) {
          const auto last = std::prev(free_blocks.end());
          if (last->first + last->second == top) {
            base = last->first;
            forget(last);
          }
        }
        offset = checked_align_up(base, b.alignment);
        release(base, offset - base);
        top = checked_add(offset, b.size_bytes);
      }
      plan.offsets[e.index] = offset;
      plan.peak_bytes = std::max(plan.peak_bytes, offset + b.size_bytes);
    }
    return detail::finish_heuristic(problem, std::move(plan), name(), start);
  }
};

/// The best plan of the three heuristics (ties: the first in the order
/// greedy-size, first-fit, best-fit-heap); its `solver` names the winner.
/// The three share one time limit; one failing leaves the others.
class best_greedy_solver {
 public:
  [[nodiscard]] std::string_view name() const noexcept { return "greedy"; }

  [[nodiscard]] dsa_result solve(const dsa_problem& problem,
                                 const dsa_solve_options& options = {}) const {
    const auto start = std::chrono::steady_clock::now();
    check_problem(problem);
    const auto deadline = detail::solve_deadline(options, start);
    dsa_problem unbounded = problem;  // so every heuristic returns a plan to compare
    unbounded.capacity_bytes.reset();
    // One time limit for the three: each gets what is left of it.
    auto left = [&] {
      dsa_solve_options o = options;
      o.time_limit_seconds = std::max(
          0.0, std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count());
      return o;
    };
    // A heuristic that fails (its time share ran out, or alignment padding
    // took its plan past 2^64) leaves the others; all failing is an error
    // carrying each reason.
    std::optional<dsa_result> best;
    std::string failures;
    auto consider = [&](auto solver) {
      try {
        auto candidate = solver.solve(unbounded, left());
        if (!best || candidate.plan.peak_bytes < best->plan.peak_bytes) best = std::move(candidate);
      } catch (const error& e) {
        failures += (failures.empty() ? "" : "; ") + e.message();
      }
    };
    consider(greedy_by_size_solver{});
    consider(first_fit_solver{});
    consider(best_fit_heap_solver{});
    if (!best) throw error("greedy: every heuristic failed: " + failures);
    return detail::finish_heuristic(problem, std::move(best->plan), best->solver, start);
  }
};

static_assert(DsaSolver<greedy_by_size_solver>);
static_assert(DsaSolver<first_fit_solver>);
static_assert(DsaSolver<best_fit_heap_solver>);
static_assert(DsaSolver<best_greedy_solver>);

}  // namespace memo
