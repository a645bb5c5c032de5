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
#include <numeric>
#include <string>
#include <string_view>
#include <vector>

#include "memo/core/bytes.hpp"
#include "memo/core/error.hpp"
#include "memo/plan/dsa_problem.hpp"

namespace memo {

namespace detail {

/// Places buffers one at a time in `order`; each goes into a gap among the
/// already-placed buffers that overlap it in time: the smallest gap that
/// holds it (`best_fit`) or the lowest (`!best_fit`).
inline dsa_plan place_in_order(const dsa_problem& problem, const std::vector<std::size_t>& order,
                               bool best_fit) {
  const auto& buffers = problem.buffers;
  constexpr std::uint64_t unplaced = ~std::uint64_t{0};
  dsa_plan plan;
  plan.offsets.assign(buffers.size(), unplaced);
  std::vector<std::size_t> placed;  // indices of placed buffers
  placed.reserve(buffers.size());
  std::vector<std::pair<std::uint64_t, std::uint64_t>> busy;  // [offset, end) of overlapping ones
  for (const std::size_t i : order) {
    const auto& b = buffers[i];
    busy.clear();
    for (const std::size_t j : placed) {
      if (b.overlaps_in_time(buffers[j])) {
        busy.emplace_back(plan.offsets[j], plan.offsets[j] + buffers[j].size_bytes);
      }
    }
    std::sort(busy.begin(), busy.end());
    std::uint64_t floor = 0;  // everything below is either busy or a gap already considered
    std::uint64_t chosen = unplaced;
    std::uint64_t chosen_gap = unplaced;
    for (const auto& [start, end] : busy) {
      if (start > floor) {
        const std::uint64_t candidate = checked_align_up(floor, b.alignment);
        if (candidate <= start && start - candidate >= b.size_bytes) {
          const std::uint64_t gap = start - floor;
          if (chosen == unplaced || (best_fit && gap < chosen_gap)) {
            chosen = candidate;
            chosen_gap = gap;
          }
          if (!best_fit) break;
        }
      }
      floor = std::max(floor, end);
    }
    if (chosen == unplaced) chosen = checked_align_up(floor, b.alignment);
    plan.offsets[i] = chosen;
    plan.peak_bytes = std::max(plan.peak_bytes, checked_add(chosen, b.size_bytes));
    placed.push_back(i);
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

inline std::vector<std::size_t> identity_order(std::size_t n) {
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  return order;
}

}  // namespace detail

/// Best fit in decreasing size (ties: longer lifetime first, then earlier).
class greedy_by_size_solver {
 public:
  [[nodiscard]] std::string_view name() const noexcept { return "greedy-size"; }

  [[nodiscard]] dsa_result solve(const dsa_problem& problem,
                                 const dsa_solve_options& /*options*/ = {}) const {
    const auto start = std::chrono::steady_clock::now();
    check_problem(problem);
    const auto& buffers = problem.buffers;
    auto order = detail::identity_order(buffers.size());
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      const auto& x = buffers[a];
      const auto& y = buffers[b];
      if (x.size_bytes != y.size_bytes) return x.size_bytes > y.size_bytes;
      if (x.upper - x.lower != y.upper - y.lower) return x.upper - x.lower > y.upper - y.lower;
      return x.lower < y.lower;
    });
    return detail::finish_heuristic(problem, detail::place_in_order(problem, order, true), name(),
                                    start);
  }
};

/// Lowest free offset, buffers in order of start time (ties: larger first).
class first_fit_solver {
 public:
  [[nodiscard]] std::string_view name() const noexcept { return "first-fit"; }

  [[nodiscard]] dsa_result solve(const dsa_problem& problem,
                                 const dsa_solve_options& /*options*/ = {}) const {
    const auto start = std::chrono::steady_clock::now();
    check_problem(problem);
    const auto& buffers = problem.buffers;
    auto order = detail::identity_order(buffers.size());
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      const auto& x = buffers[a];
      const auto& y = buffers[b];
      if (x.lower != y.lower) return x.lower < y.lower;
      return x.size_bytes > y.size_bytes;
    });
    return detail::finish_heuristic(problem, detail::place_in_order(problem, order, false), name(),
                                    start);
  }
};

/// An online heap: requests served in time order (frees before mallocs at
/// the same instant), best-fit free block, split, coalesced on free.
class best_fit_heap_solver {
 public:
  [[nodiscard]] std::string_view name() const noexcept { return "best-fit-heap"; }

  [[nodiscard]] dsa_result solve(const dsa_problem& problem,
                                 const dsa_solve_options& /*options*/ = {}) const {
    const auto start = std::chrono::steady_clock::now();
    check_problem(problem);
    const auto& buffers = problem.buffers;
    struct event {
      std::int64_t time;
      bool is_malloc;
      std::size_t index;
    };
    std::vector<event> events;
    events.reserve(buffers.size() * 2);
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      events.push_back({buffers[i].lower, true, i});
      events.push_back({buffers[i].upper, false, i});
    }
    std::stable_sort(events.begin(), events.end(), [](const event& a, const event& b) {
      return a.time != b.time ? a.time < b.time : (!a.is_malloc && b.is_malloc);
    });
    std::map<std::uint64_t, std::uint64_t> free_blocks;  // offset -> size, below `top`
    std::uint64_t top = 0;                                // end of the heap so far
    dsa_plan plan;
    plan.offsets.assign(buffers.size(), 0);
    auto release = [&](std::uint64_t offset, std::uint64_t size) {
      if (size == 0) return;
      auto next = free_blocks.lower_bound(offset);
      if (next != free_blocks.end() && offset + size == next->first) {
        size += next->second;
        next = free_blocks.erase(next);
      }
      if (next != free_blocks.begin()) {
        const auto prev = std::prev(next);
        if (prev->first + prev->second == offset) {
          prev->second += size;
          return;
        }
      }
      free_blocks.emplace(offset, size);
    };
    for (const auto& e : events) {
      const auto& b = buffers[e.index];
      if (!e.is_malloc) {
        release(plan.offsets[e.index], b.size_bytes);
        continue;
      }
      auto best = free_blocks.end();
      for (auto it = free_blocks.begin(); it != free_blocks.end(); ++it) {
        const std::uint64_t aligned = align_up(it->first, b.alignment);
        if (aligned + b.size_bytes <= it->first + it->second &&
            (best == free_blocks.end() || it->second < best->second)) {
          best = it;
        }
      }
      std::uint64_t offset = 0;
      if (best != free_blocks.end()) {
        const auto [block, size] = *best;
        free_blocks.erase(best);
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
            free_blocks.erase(last);
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
class best_greedy_solver {
 public:
  [[nodiscard]] std::string_view name() const noexcept { return "greedy"; }

  [[nodiscard]] dsa_result solve(const dsa_problem& problem,
                                 const dsa_solve_options& options = {}) const {
    const auto start = std::chrono::steady_clock::now();
    check_problem(problem);
    dsa_problem unbounded = problem;  // so every heuristic returns a plan to compare
    unbounded.capacity_bytes.reset();
    dsa_result best = greedy_by_size_solver{}.solve(unbounded, options);
    for (auto candidate : {first_fit_solver{}.solve(unbounded, options),
                           best_fit_heap_solver{}.solve(unbounded, options)}) {
      if (candidate.plan.peak_bytes < best.plan.peak_bytes) best = std::move(candidate);
    }
    auto result = detail::finish_heuristic(problem, std::move(best.plan), best.solver, start);
    return result;
  }
};

static_assert(DsaSolver<greedy_by_size_solver>);
static_assert(DsaSolver<first_fit_solver>);
static_assert(DsaSolver<best_fit_heap_solver>);
static_assert(DsaSolver<best_greedy_solver>);

}  // namespace memo
