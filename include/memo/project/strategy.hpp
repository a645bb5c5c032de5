// memo/project/strategy.hpp
//
// The projection's entry points: every setting a strategy considers for a
// sequence (`project_settings`), the best of them (`project`), and the
// longest sequence that fits (`longest`). The strategies themselves:
//
//  memo, recompute, recompute-planned, swap-planned   megatron.hpp
//  ulysses-zero3, fpdt                                 ulysses.hpp
//  sppo, sppo-recompute                                sppo.hpp
//
// and what they share (the accounting, the one calibrated constant) in
// projection.hpp. The whole model is closed form except SPPO's pipeline,
// which the stream-schedule simulator times. Requires the memo::lpsolve
// component (MEMO's and SPPO's alpha LPs, swap/alpha_solver.hpp).
//
// Extension point: a new strategy adds an enum value and its name in
// projection.hpp and a `*_settings` function returning one `projection` per
// setting it considers, called from `project_settings`; the search, the CLI
// and the benches need nothing else.
#pragma once

#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "memo/core/error.hpp"
#include "memo/project/megatron.hpp"
#include "memo/project/projection.hpp"
#include "memo/project/sppo.hpp"
#include "memo/project/ulysses.hpp"

namespace memo::project {

/// Every setting `kind` considers for a sequence of `s` tokens (empty when
/// none applies, e.g. SPPO on a GPU count that is not whole nodes). With
/// `simulate` false, pipelines are timed by section 3.3's closed form
/// instead of the schedule simulator: the memory (whether it fits) is the
/// same, the step time an estimate; the search uses it to probe lengths.
inline std::vector<projection> project_settings(strategy kind, const model_shape& m, const cluster& c, double s,
                                                bool simulate = true) {
  m.check();
  c.check();
  expects(s >= 1 && s <= 1099511627776.0, [&] {
    char text[48];
    std::snprintf(text, sizeof text, "%.0f", s);
    return "sequence length must be between 1 and 2^40 tokens, got " + std::string(text);
  });
  switch (kind) {
    case strategy::memo:
    case strategy::recompute:
    case strategy::recompute_planned:
    case strategy::swap_planned: return detail::megatron_settings(kind, m, c, s);
    case strategy::ulysses_zero3:
    case strategy::fpdt: return detail::ulysses_settings(kind, m, c, s);
    case strategy::sppo:
    case strategy::sppo_recompute: return detail::sppo_settings(kind, m, c, s, simulate);
  }
  return {};
}

/// The better of two projections: one that fits over one that does not;
/// among fitting ones the higher MFU; among the others the one closer to fitting.
inline bool better(const projection& a, const projection& b) {
  if (a.fits() != b.fits()) return a.fits();
  return a.fits() ? a.mfu > b.mfu : a.pressure() < b.pressure();
}

/// The best setting for `s` tokens; nullopt when no setting applies.
inline std::optional<projection> project(strategy kind, const model_shape& m, const cluster& c, double s,
                                         bool simulate = true) {
  std::optional<projection> best;
  for (auto& r : project_settings(kind, m, c, s, simulate)) {
    if (!best || better(r, *best)) best = std::move(r);
  }
  return best;
}

/// The longest sequence, a multiple of `grid` up to `limit`, for which
/// `projector(tokens)` (returning std::optional<projection>) fits; the
/// projection at that length, or nullopt when not even one grid step fits.
/// `probe(tokens)` answers the same question during the bisection and may be
/// cheaper (it must agree on fitting). Every memory term of every setting
/// grows with the length, so fitting is monotone in it and a binary search
/// over the grid is exact.
template <class Projector, class Probe>
std::optional<projection> longest_fitting(const Projector& projector, const Probe& probe, double grid, double limit) {
  expects(grid >= 1 && limit >= grid, [&] {
    return "longest: need 1 <= grid <= limit, got grid " + std::to_string(grid) + ", limit " + std::to_string(limit);
  });
  auto fits = [&](double steps) {
    const std::optional<projection> r = probe(steps * grid);
    return r && r->fits();
  };
  if (!fits(1)) return std::nullopt;
  double good = 1, bad = std::floor(limit / grid) + 1;
  while (bad - good > 1) {
    const double mid = std::floor((good + bad) / 2);
    (fits(mid) ? good : bad) = mid;
  }
  return projector(good * grid);
}

/// The longest sequence `kind` fits, a multiple of `grid` up to `limit`
/// (pipelines are probed with their closed-form step, then the answer is
/// simulated).
inline std::optional<projection> longest(strategy kind, const model_shape& m, const cluster& c,
                                         double grid = 65536, double limit = 1024.0 * 1048576) {
  return longest_fitting([&](double s) { return project(kind, m, c, s); },
                         [&](double s) { return project(kind, m, c, s, false); }, grid, limit);
}

}  // namespace memo::project
