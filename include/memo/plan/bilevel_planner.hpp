// memo/plan/bilevel_planner.hpp
//
// MEMO's bi-level memory planner (section 4.2, Figure 8).
//
// A whole training iteration has thousands of requests, too many for one
// DSA solve, but every transformer layer issues the same requests. So:
//
// * Level 1. Each section of the trace (a layer's forward or backward pass,
//   see trace.hpp) is solved on its own, over its *transient* buffers only:
//   those born and dead inside it. Sections whose transients are identical
//   (same sizes, alignments and lifetimes relative to the section start,
//   the case of every layer of a model) share one solve. Buffers that
//   outlive the section they were born in (*skeletal* tensors: made in the
//   forward pass, needed by the backward pass) and buffers born outside any
//   section (embedding, classifier, ...) are set aside for level 2.
// * Level 2. Every section is replaced by one block ("pseudo request pair")
//   of its level-1 peak, live for the whole section, and the model is solved
//   over these blocks plus the set-aside buffers.
// * Composition. A transient's absolute offset is its block's offset plus
//   its level-1 offset. The composed plan is validated against the flat
//   trace before it is returned.
//
// The result reports the flat lower bound beside the bi-level peak, so what
// the decomposition costs (a block reserves its section's peak for the
// whole section) is visible; a flat solve with a time limit, for
// comparison, is up to the caller (the `memo-plan` tool does it).
//
// The inner solvers are template parameters (anything satisfying
// `DsaSolver`); `any_dsa_solver` makes the choice a runtime one. The
// default is the exact search for both levels.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "memo/core/error.hpp"
#include "memo/plan/dsa_problem.hpp"
#include "memo/plan/exact_solver.hpp"
#include "memo/plan/greedy.hpp"
#include "memo/plan/trace.hpp"

namespace memo {

/// A DSA solver chosen at run time: wraps any `DsaSolver` by value.
class any_dsa_solver {
 public:
  template <DsaSolver S>
    requires(!std::same_as<std::remove_cvref_t<S>, any_dsa_solver>)
  any_dsa_solver(S solver)  // NOLINT: implicit by design, like std::function
      : name_(std::string(solver.name())),
        solve_([s = std::make_shared<S>(std::move(solver))](const dsa_problem& p,
                                                             const dsa_solve_options& o) {
          return s->solve(p, o);
        }) {}

  [[nodiscard]] std::string_view name() const noexcept { return name_; }
  dsa_result solve(const dsa_problem& problem, const dsa_solve_options& options = {}) {
    return solve_(problem, options);
  }

 private:
  std::string name_;
  std::function<dsa_result(const dsa_problem&, const dsa_solve_options&)> solve_;
};
static_assert(DsaSolver<any_dsa_solver>);

/// Level 1 of one section.
struct bilevel_section {
  std::string name;
  std::int64_t begin = 0;
  std::int64_t end = 0;
  std::vector<std::size_t> transients;  ///< indices into the flat problem's buffers
  std::uint64_t peak_bytes = 0;         ///< its level-1 peak: the block size
  std::uint64_t lower_bound_bytes = 0;  ///< of its transients alone
  bool proven_optimal = false;          ///< of the level-1 solve it uses
  std::size_t solved_by = 0;            ///< index of the section whose solve it reuses (itself if solved)
  std::uint64_t block_offset = 0;       ///< where level 2 put its block
};

struct bilevel_result {
  dsa_plan plan;                               ///< for every buffer of the flat trace
  std::uint64_t flat_lower_bound_bytes = 0;    ///< of the flat trace
  std::uint64_t level2_lower_bound_bytes = 0;  ///< of the level-2 problem
  std::vector<bilevel_section> sections;       ///< sections with transients, in trace order
  std::vector<std::uint64_t> skeletal_ids;     ///< born in a section, outliving it
  std::vector<std::uint64_t> outside_ids;      ///< born outside every section
  std::size_t level1_solves = 0;               ///< distinct level-1 problems solved
  dsa_problem level2_problem;                  ///< blocks first (in section order), then the rest
  dsa_result level2;
  bool level2_proven_optimal = false;
  double level1_seconds = 0.0;
  double level2_seconds = 0.0;
  double seconds = 0.0;  ///< whole plan, including composition and validation
};

template <DsaSolver Level1 = exact_solver, DsaSolver Level2 = Level1>
class bilevel_planner {
 public:
  explicit bilevel_planner(Level1 level1 = {}, Level2 level2 = {})
      : level1_(std::move(level1)), level2_(std::move(level2)) {}

  /// Plans `trace`. `options.time_limit_seconds` bounds the whole plan:
  /// level 1 gets up to half of it (each solve what is left of that half),
  /// level 2 what is left. The trace's capacity, if any, applies to level 2.
  bilevel_result plan(const memory_trace& trace, const dsa_solve_options& options = {}) {
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = detail::solve_deadline(options, start);
    const auto level1_deadline = start + (deadline - start) / 2;
    auto until = [&](std::chrono::steady_clock::time_point when) {
      dsa_solve_options o = options;
      o.time_limit_seconds = std::max(
          0.0, std::chrono::duration<double>(when - std::chrono::steady_clock::now()).count());
      return o;
    };
    const dsa_problem& flat = trace.problem;
    check_problem(flat);
    const auto& buffers = flat.buffers;
    bilevel_result result;
    result.flat_lower_bound_bytes = lower_bound_bytes(flat);

    // Which section, if any, each buffer is born in and whether it dies there.
    std::vector<std::size_t> home(buffers.size(), npos);
    std::vector<const trace_section*> sections;
    for (const auto& s : trace.sections) sections.push_back(&s);
    std::sort(sections.begin(), sections.end(),
              [](const trace_section* a, const trace_section* b) { return a->begin < b->begin; });
    for (std::size_t k = 1; k < sections.size(); ++k) {
      expects(sections[k]->begin >= sections[k - 1]->end, [&] {
        return "bilevel planner: sections '" + sections[k - 1]->name + "' and '" +
               sections[k]->name + "' overlap";
      });
    }
    std::vector<std::vector<std::size_t>> members(sections.size());
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      const auto& b = buffers[i];
      // The last section beginning at or before b.lower.
      auto it = std::upper_bound(sections.begin(), sections.end(), b.lower,
                                 [](std::int64_t t, const trace_section* s) { return t < s->begin; });
      if (it == sections.begin() || b.lower >= (*std::prev(it))->end) {
        result.outside_ids.push_back(b.id);
        continue;
      }
      const auto k = static_cast<std::size_t>(std::prev(it) - sections.begin());
      if (b.upper <= sections[k]->end) {
        home[i] = k;
        members[k].push_back(i);
      } else {
        result.skeletal_ids.push_back(b.id);
      }
    }

    // Level 1: one solve per distinct section shape.
    using shape_key =
        std::vector<std::tuple<std::int64_t, std::int64_t, std::uint64_t, std::uint64_t>>;
    std::map<std::pair<std::int64_t, shape_key>, std::size_t> solved;  // shape -> result slot
    std::vector<dsa_result> level1_results;
    std::vector<std::size_t> section_slot(sections.size(), npos);
    std::vector<std::size_t> section_index(sections.size(), npos);  // into result.sections
    const auto level1_start = std::chrono::steady_clock::now();
    for (std::size_t k = 0; k < sections.size(); ++k) {
      auto& list = members[k];
      if (list.empty()) continue;
      const std::int64_t base = sections[k]->begin;
      std::stable_sort(list.begin(), list.end(), [&](std::size_t a, std::size_t b) {
        return std::tuple(buffers[a].lower, buffers[a].upper, buffers[a].size_bytes,
                          buffers[a].alignment) < std::tuple(buffers[b].lower, buffers[b].upper,
                                                             buffers[b].size_bytes,
                                                             buffers[b].alignment);
      });
      shape_key key;
      key.reserve(list.size());
      for (const auto i : list) {
        key.emplace_back(buffers[i].lower - base, buffers[i].upper - base, buffers[i].size_bytes,
                         buffers[i].alignment);
      }
      bilevel_section entry;
      entry.name = sections[k]->name;
      entry.begin = sections[k]->begin;
      entry.end = sections[k]->end;
      entry.transients = list;
      auto [it, fresh] =
          solved.try_emplace({sections[k]->end - base, std::move(key)}, level1_results.size());
      if (fresh) {
        dsa_problem local;
        local.buffers.reserve(list.size());
        for (const auto i : list) {
          auto b = buffers[i];
          b.lower -= base;
          b.upper -= base;
          local.buffers.push_back(b);
        }
        level1_results.push_back(level1_.solve(local, until(level1_deadline)));
        first_section_.push_back(result.sections.size());
      }
      section_slot[k] = it->second;
      const auto& r = level1_results[it->second];
      entry.peak_bytes = r.plan.peak_bytes;
      entry.lower_bound_bytes = r.lower_bound_bytes;
      entry.proven_optimal = r.proven_optimal;
      entry.solved_by = first_section_[it->second];
      section_index[k] = result.sections.size();
      result.sections.push_back(std::move(entry));
    }
    first_section_.clear();
    result.level1_solves = level1_results.size();
    result.level1_seconds = detail::seconds_since(level1_start);

    // Level 2: one block per section, plus everything set aside. A block
    // takes the smallest id no set-aside buffer has (any id up to 2^64 - 1
    // may be taken, so "one more than the largest" could wrap).
    std::vector<std::uint64_t> taken;
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      if (home[i] == npos) taken.push_back(buffers[i].id);
    }
    std::sort(taken.begin(), taken.end());
    std::uint64_t next_id = 0;
    std::size_t next_taken = 0;
    auto fresh_id = [&] {
      while (next_taken < taken.size() && taken[next_taken] <= next_id) {
        if (taken[next_taken] == next_id) ++next_id;
        ++next_taken;
      }
      return next_id++;
    };
    auto& level2 = result.level2_problem;
    level2.capacity_bytes = flat.capacity_bytes;
    for (std::size_t k = 0; k < sections.size(); ++k) {
      if (section_slot[k] == npos) continue;
      dsa_buffer block;
      block.id = fresh_id();
      block.size_bytes = result.sections[section_index[k]].peak_bytes;
      block.lower = sections[k]->begin;
      block.upper = sections[k]->end;
      for (const auto i : members[k]) block.alignment = std::max(block.alignment, buffers[i].alignment);
      level2.buffers.push_back(block);
    }
    std::vector<std::size_t> set_aside;
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      if (home[i] == npos) {
        set_aside.push_back(i);
        level2.buffers.push_back(buffers[i]);
      }
    }
    if (level2.capacity_bytes) {
      const auto bound = lower_bound_bytes(level2);
      expects(*level2.capacity_bytes >= bound, [&] {
        return "bilevel planner: capacity " + std::to_string(*level2.capacity_bytes) +
               " bytes is below the level-2 lower bound " + std::to_string(bound) +
               " bytes (flat lower bound " + std::to_string(result.flat_lower_bound_bytes) +
               " bytes): each section block holds its peak for the whole section; a flat "
               "solve may still fit";
      });
    }
    const auto level2_start = std::chrono::steady_clock::now();
    result.level2 = level2_.solve(level2, until(deadline));
    result.level2_seconds = detail::seconds_since(level2_start);
    result.level2_lower_bound_bytes = result.level2.lower_bound_bytes;
    result.level2_proven_optimal = result.level2.proven_optimal;

    // Compose absolute offsets.
    result.plan.offsets.assign(buffers.size(), 0);
    std::size_t block = 0;
    for (std::size_t k = 0; k < sections.size(); ++k) {
      if (section_slot[k] == npos) continue;
      const std::uint64_t block_offset = result.level2.plan.offsets[block++];
      auto& entry = result.sections[section_index[k]];
      entry.block_offset = block_offset;
      const auto& local = level1_results[section_slot[k]].plan.offsets;
      for (std::size_t j = 0; j < members[k].size(); ++j) {
        result.plan.offsets[members[k][j]] = checked_add(block_offset, local[j]);
      }
    }
    for (std::size_t j = 0; j < set_aside.size(); ++j) {
      result.plan.offsets[set_aside[j]] = result.level2.plan.offsets[block + j];
    }
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      result.plan.peak_bytes =
          std::max(result.plan.peak_bytes, result.plan.offsets[i] + buffers[i].size_bytes);
    }
    require_valid(flat, result.plan, "bilevel planner");
    result.seconds = detail::seconds_since(start);
    return result;
  }

  [[nodiscard]] std::string_view name() const noexcept { return "bilevel"; }

  /// `plan`, summarised as a `dsa_result` against the flat trace (for tables
  /// that compare solvers). Proven optimal only when the peak reaches the
  /// flat lower bound: the decomposition itself may cost bytes.
  dsa_result solve(const memory_trace& trace, const dsa_solve_options& options = {}) {
    const auto r = plan(trace, options);
    dsa_result out;
    out.plan = r.plan;
    out.lower_bound_bytes = r.flat_lower_bound_bytes;
    out.proven_optimal = r.plan.peak_bytes == r.flat_lower_bound_bytes;
    out.seconds = r.seconds;
    out.solver = "bilevel";
    return out;
  }

 private:
  static constexpr std::size_t npos = ~std::size_t{0};
  Level1 level1_;
  Level2 level2_;
  std::vector<std::size_t> first_section_;  // slot -> first section solved (scratch)
};

}  // namespace memo
