// memo/plan/mip_solver.hpp
//
// The MIP of MEMO section 4.2 for offline DSA, solved by lp_solve (needs
// the `memo::lpsolve` CMake component):
//
//     minimise M
//     x_i + s_i <= M                                  for every buffer i
//     x_i + s_i <= x_j + B (1 - z_ij)                 for every pair (i, j)
//     x_j + s_j <= x_i + B z_ij                       whose lifetimes overlap
//     z_ij in {0, 1},  x_i >= 0
//
// z_ij = 1 puts i below j. B is the peak of a greedy plan, which also bounds
// M and every x_i (x_i <= B - s_i), so the big-M rows are exactly as tight
// as the greedy plan allows. For interchangeable buffers (same size,
// lifetime and alignment) z_ij is fixed to 1: any plan can swap them.
//
// Units and alignment: every byte count is divided by g, the greatest common
// divisor of all sizes and alignments (a gravity-compressed plan only uses
// offsets that are multiples of g, so nothing is lost), which keeps the
// numbers small for lp_solve's tolerances. A buffer with alignment a > g gets
// its offset as x_i = (a / g) k_i with k_i integer. M is integer too, so a
// node's bound rounds up.
//
// Warm start. lp_solve 5.5 has no MIP-start call; instead:
//   * M <= greedy peak (and x_i <= greedy peak - s_i, big-M = greedy peak),
//     so the greedy plan acts as the incumbent: the search never looks at
//     worse plans and its LP relaxations are as tight as that bound allows;
//   * set_break_at_value(lower bound): a plan at the lower bound ends the
//     search, and it is optimal by the bound;
//   * if the solver stops without any plan (time limit), the greedy plan is
//     returned, marked not proven.
// Branching hints that steer every z_ij first towards the greedy plan's
// order (set_var_branch) were tried and left out: the dive then searches the
// greedy plan's neighbourhood, which the bound on M already excludes, and
// was up to 100x slower on 13-buffer instances.
//
// The plan returned is rebuilt from the MIP's solution: buffers are taken in
// order of their MIP offsets and each is dropped to the lowest aligned
// offset above its earlier time neighbours. That plan is never worse than
// the MIP's and is exact in integers whatever lp_solve's tolerances did.
// The time limit is enforced through lp_solve's abort callback, so it is
// honoured to the millisecond rather than lp_solve's whole seconds.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "memo/core/error.hpp"
#include "memo/core/lp_solve.hpp"
#include "memo/plan/dsa_problem.hpp"
#include "memo/plan/placement.hpp"

namespace memo {

namespace detail {

inline int mip_abort_when_due(lprec* /*lp*/, void* handle) {
  const auto* deadline = static_cast<const std::chrono::steady_clock::time_point*>(handle);
  return std::chrono::steady_clock::now() >= *deadline ? 1 : 0;
}

}  // namespace detail

/// MEMO's MIP for offline DSA on lp_solve.
class mip_solver {
 public:
  [[nodiscard]] std::string_view name() const noexcept { return "mip"; }

  dsa_result solve(const dsa_problem& problem, const dsa_solve_options& options = {}) {
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    check_problem(problem);
    const auto deadline = detail::solve_deadline(options, start);
    const auto& buffers = problem.buffers;
    const std::size_t n = buffers.size();

    dsa_result result;
    result.solver = std::string(name());
    result.lower_bound_bytes = lower_bound_bytes(problem);
    auto finish = [&](std::vector<std::uint64_t> offsets, bool proven) {
      result.plan.offsets = std::move(offsets);
      result.plan.peak_bytes = 0;
      for (std::size_t i = 0; i < n; ++i) {
        result.plan.peak_bytes = std::max(result.plan.peak_bytes, result.plan.offsets[i] + buffers[i].size_bytes);
      }
      result.proven_optimal = proven || result.plan.peak_bytes == result.lower_bound_bytes;
      require_valid(problem, result.plan, name());
      result.seconds = std::chrono::duration<double>(clock::now() - start).count();
      return result;
    };
    if (n == 0) return finish({}, true);

    // Warm start: the greedy plan, or the caller's plan when it is better.
    std::vector<std::uint64_t> warm;
    std::uint64_t warm_peak = detail::lowest_fit_bound(buffers, warm, deadline);
    if (options.warm_start && validate(problem, *options.warm_start).ok &&
        options.warm_start->peak_bytes < warm_peak) {
      warm = options.warm_start->offsets;
      warm_peak = options.warm_start->peak_bytes;
    }
    const bool has_capacity = problem.capacity_bytes.has_value();
    const std::uint64_t capacity = has_capacity ? *problem.capacity_bytes : warm_peak;
    if (warm_peak == result.lower_bound_bytes) return finish(warm, true);

    // Units of g bytes.
    std::uint64_t g = 0;
    for (const auto& b : buffers) g = std::gcd(std::gcd(g, b.size_bytes), b.alignment);
    const std::uint64_t ceiling_bytes = std::min(warm_peak, capacity);  // M <= this
    const double ceiling = static_cast<double>(ceiling_bytes / g);
    const double lower = static_cast<double>((result.lower_bound_bytes + g - 1) / g);
    auto units = [&](std::uint64_t bytes) { return static_cast<double>(bytes / g); };

    std::vector<std::pair<std::uint32_t, std::uint32_t>> pairs;
    for (std::uint32_t i = 0; i < n; ++i) {
      for (std::uint32_t j = i + 1; j < n; ++j) {
        if (buffers[i].overlaps_in_time(buffers[j])) pairs.emplace_back(i, j);
      }
    }
    const std::size_t columns = n + 1 + pairs.size();
    expects(columns < static_cast<std::size_t>(std::numeric_limits<int>::max()), [&] {
      return "the MIP would need " + std::to_string(columns) + " columns, more than lp_solve takes";
    });
    const int m_col = static_cast<int>(n);
    auto z_col = [&](std::size_t p) { return static_cast<int>(n + 1 + p); };
    lp_model model(static_cast<int>(columns));
    std::vector<double> step(n);  // offset unit of buffer i, in g
    for (std::size_t i = 0; i < n; ++i) {
      step[i] = units(std::max(buffers[i].alignment, g));
      const auto col = static_cast<int>(i);
      // x_i = step_i * k_i <= ceiling - s_i
      const double top = std::floor((ceiling - units(buffers[i].size_bytes)) / step[i]);
      model.set_bounds(col, 0.0, std::max(top, 0.0));
      if (step[i] > 1.0) model.set_integer(col);
    }
    model.set_bounds(m_col, lower, ceiling);
    model.set_integer(m_col);
    for (std::size_t p = 0; p < pairs.size(); ++p) {
      model.set_binary(z_col(p));
      // Symmetry: of two interchangeable buffers (same size, lifetime and
      // alignment) the first goes below the second, which drops the mirror
      // images of every plan without losing any peak.
      const auto& a = buffers[pairs[p].first];
      const auto& b = buffers[pairs[p].second];
      if (a.size_bytes == b.size_bytes && a.lower == b.lower && a.upper == b.upper &&
          a.alignment == b.alignment) {
        model.set_bounds(z_col(p), 1.0, 1.0);
      }
    }
    {
      const int cols[] = {m_col};
      const double vals[] = {1.0};
      model.set_objective(cols, vals, false);
    }
    for (std::size_t i = 0; i < n; ++i) {
      const int cols[] = {static_cast<int>(i), m_col};
      const double vals[] = {step[i], -1.0};
      model.add_row(cols, vals, lp_sense::less_equal, -units(buffers[i].size_bytes));
    }
    const double big = ceiling;
    for (std::size_t p = 0; p < pairs.size(); ++p) {
      const auto [i, j] = pairs[p];
      // step_i k_i - step_j k_j + B z <= B - s_i
      const int cols[] = {static_cast<int>(i), static_cast<int>(j), z_col(p)};
      const double below[] = {step[i], -step[j], big};
      model.add_row(cols, below, lp_sense::less_equal, big - units(buffers[i].size_bytes));
      // step_j k_j - step_i k_i - B z <= -s_j
      const double above[] = {-step[i], step[j], -big};
      model.add_row(cols, above, lp_sense::less_equal, -units(buffers[j].size_bytes));
    }
    // lp_solve stops at a plan strictly better than this, i.e. at M = lower.
    model.set_break_at(lower + 0.5);
    auto due = deadline;
    put_abortfunc(model.native(), &detail::mip_abort_when_due, &due);

    lp_outcome outcome = lp_outcome::timed_out;
    if (clock::now() < deadline) outcome = model.solve();
    switch (outcome) {
      case lp_outcome::optimal:
      case lp_outcome::feasible: {
        const auto values = model.solution();
        std::vector<std::uint32_t> order(n);
        std::iota(order.begin(), order.end(), 0u);
        std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
          const double xa = values[a] * step[a];
          const double xb = values[b] * step[b];
          return xa != xb ? xa < xb : a < b;
        });
        std::vector<std::uint64_t> offsets;
        const std::uint64_t peak =
            detail::place_in_order(buffers, order, detail::fit_rule::above, offsets);
        // get_objective is the incumbent's value (the wrapper's objective()
        // reads lp_solve's working objective, a bound during branch-and-bound).
        const double objective_bytes =
            std::round(get_objective(model.native())) * static_cast<double>(g);
        const bool at_objective = static_cast<double>(peak) <= objective_bytes;
        if (peak > ceiling_bytes) {  // lp_solve's tolerances went astray
          if (warm_peak <= capacity) return finish(warm, false);
          throw error("the MIP's plan reaches " + std::to_string(peak) +
                      " bytes, above its own bound of " + std::to_string(ceiling_bytes) +
                      " bytes (numerical trouble in lp_solve)");
        }
        return finish(std::move(offsets), outcome == lp_outcome::optimal && at_objective);
      }
      case lp_outcome::infeasible:
        if (has_capacity && capacity < warm_peak) {
          throw capacity_infeasible("capacity " + std::to_string(capacity) +
                                    " bytes is infeasible: the MIP proved that no plan fits (lower bound " +
                                    std::to_string(result.lower_bound_bytes) + " bytes, best greedy plan " +
                                    std::to_string(warm_peak) + " bytes)");
        }
        throw error("lp_solve reported the DSA MIP infeasible although the greedy plan of " +
                    std::to_string(warm_peak) + " bytes satisfies it (numerical trouble)");
      case lp_outcome::unbounded:
        throw error("lp_solve reported the DSA MIP unbounded although M is bounded by " +
                    std::to_string(ceiling_bytes) + " bytes");
      case lp_outcome::timed_out:
        if (warm_peak <= capacity) return finish(warm, false);
        throw error("no plan within capacity " + std::to_string(capacity) +
                    " bytes found before the time limit (lower bound " +
                    std::to_string(result.lower_bound_bytes) + " bytes, greedy plan " +
                    std::to_string(warm_peak) + " bytes)");
    }
    throw error("unhandled lp_solve outcome");
  }
};

static_assert(DsaSolver<mip_solver>);

}  // namespace memo
