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

#include <algorithm>
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
/// none applies: SPPO at a length too short for N >= PP subsequences of
/// 2K on every pipeline it may run; `no_setting_reason` says which). With
/// `simulate` false, pipelines are timed by section 3.3's closed form
/// instead of the schedule simulator: the memory (whether it fits) is the
/// same, the step time an estimate; the search uses it to probe lengths.
///
/// Megatron's and Ulysses' settings may leave GPUs idle (a TP, PP or SP
/// that does not divide the GPU count runs on as many GPUs as it divides;
/// `settings::gpus()` says how many), so more GPUs never fit less; MFU and
/// tokens per GPU count every GPU of the cluster. SPPO keeps section 6.1's
/// rule that SP x PP is every GPU where the cluster has such a shape, and
/// otherwise runs copies of smaller pipelines (sppo.hpp's `sppo_settings`).
///
/// With a `pin`, only the settings with its values (projection.hpp's
/// `settings_pin`): its alpha and chunk replace the ones the strategy would
/// choose, its N is the only subsequence count SPPO tries, and the rest
/// select among the settings; every field given must be one of
/// `pin_fields(kind)`.
///
/// A setting whose byte counts do not fit in 64 bits needs more than any
/// memory holds and is left out; when every setting is such, it throws
/// `uncountable_projection` (a memo::error) naming the first. Throws a
/// memo::error naming the strategy, the length and the model when the
/// model, the cluster or the length is invalid (`s` a whole number in
/// [1, 2^40]), and
/// one naming the field when the pin is out of range or has a field the
/// strategy has no setting for.
inline std::vector<projection> project_settings(strategy kind, const model_shape& m, const cluster& c, double s,
                                                bool simulate = true, const settings_pin& pin = {}) {
  m.check();
  c.check();
  pin.check();
  expects(s >= 1 && s <= 1099511627776.0 && s == std::floor(s), [&] {
    char text[48];
    std::snprintf(text, sizeof text, s == std::floor(s) || !std::isfinite(s) ? "%.0f" : "%.3f", s);
    return "sequence length must be a whole number between 1 and 2^40 tokens, got " + std::string(text);
  });
  const auto valid = all_strategies();
  expects(std::find(valid.begin(), valid.end(), kind) != valid.end(), [&] {
    return "project: unknown strategy " + std::to_string(static_cast<int>(kind)) + " (" + strategy_names() + ")";
  });
  const auto foreign = inapplicable_pins(kind, pin);
  expects(foreign.empty(), [&] {
    std::string have;
    for (const auto f : pin_fields(kind)) have += (have.empty() ? "" : ", ") + std::string(f);
    return "settings pin: " + std::string(strategy_name(kind)) + " has no setting '" + std::string(foreign.front()) +
           "' (its settings: " + have + ")";
  });
  try {
    std::vector<projection> all;
    switch (kind) {
      case strategy::memo:
      case strategy::recompute:
      case strategy::recompute_planned:
      case strategy::swap_planned: all = detail::megatron_settings(kind, m, c, s, true, pin.alpha); break;
      case strategy::ulysses_zero3:
      case strategy::fpdt:
        all = detail::ulysses_settings(kind, m, c, s, true, pin.chunk_tokens.value_or(fpdt_default_chunk));
        break;
      case strategy::sppo:
      case strategy::sppo_recompute:
        all = detail::sppo_settings(kind, m, c, s, simulate, nullptr, pin);
        break;
    }
    std::erase_if(all, [&](const projection& r) { return !pin.matches(r.chosen); });
    // A setting that cannot be counted needs more than any memory: dropped,
    // unless it is all there is.
    if (!all.empty() && std::ranges::all_of(all, [](const projection& r) { return !r.uncountable.empty(); })) {
      throw uncountable_projection(all.front().uncountable, all.front().chosen);
    }
    std::erase_if(all, [](const projection& r) { return !r.uncountable.empty(); });
    return all;
  } catch (const error& e) {
    char text[48];
    std::snprintf(text, sizeof text, "%.0f", s);
    const std::string message = std::string(strategy_name(kind)) + " at " + text + " tokens on model '" +
                                memo::detail::quote(m.name) + "': " + e.message();
    if (const auto* u = dynamic_cast<const uncountable_projection*>(&e)) {
      throw uncountable_projection(message, u->setting());
    }
    throw error(message);
  }
  return {};
}

/// Why `project_settings` has no setting for `kind` (an empty string when
/// it has one): SPPO's one pipeline needs whole nodes, SP dividing a node
/// and the heads, PP = GPUs / SP dividing the layers (copies: SP x PP up to
/// a node, or whole nodes with SP dividing a node), and a subsequence count N
/// with s/N in [2K, 16K] (or the pinned N) and N >= PP; with a `pin`, that
/// no setting has its values, and, for each value pinned, which values the
/// settings with the other pinned values have ("the settings here have TP
/// 1, 2, 4 with CP 2; CP 1 with TP 8"). Without a pin only SPPO can have
/// no setting, and the other strategies answer without projecting.
inline std::string no_setting_reason(strategy kind, const model_shape& m, const cluster& c, double s,
                                     const settings_pin& pin = {}) {
  const bool sppo_kind = kind == strategy::sppo || kind == strategy::sppo_recompute;
  if (pin.empty() && !sppo_kind) return {};
  if (!project_settings(kind, m, c, s, false, pin).empty()) return {};
  // SPPO's rules, for the SP x PP the pin allows (empty when one passed them).
  std::string rules;
  if (sppo_kind) {
    m.check();
    c.check();
    detail::sppo_settings(kind, m, c, s, false, &rules, pin);
    if (detail::sppo_settings(kind, m, c, s, false, nullptr, pin.only("subsequences")).empty()) return rules;
  }
  // Settings exist, but none has the pinned values: for each whole number
  // pinned, the values of the settings that have the other pinned ones.
  settings_pin inputs;  // what makes the settings, without what selects among them
  inputs.alpha = pin.alpha;
  inputs.chunk_tokens = pin.chunk_tokens;
  inputs.subsequences = pin.subsequences;
  const auto unpinned = project_settings(kind, m, c, s, false, inputs);
  std::string why = "no setting has " + pin.text() + "; the settings here have";
  bool first = true;
  for (const auto& f : settings_pin::fields) {
    if (!f.whole || !f.given(pin) || f.name == "subsequences") continue;
    const settings_pin others = pin.without(f.name);
    std::vector<int> seen;
    for (const auto& r : unpinned) {
      const int v = r.chosen.*(f.chosen);
      if (others.matches(r.chosen) && std::find(seen.begin(), seen.end(), v) == seen.end()) seen.push_back(v);
    }
    std::sort(seen.begin(), seen.end());
    why += first ? " " : "; ";
    first = false;
    if (seen.empty()) why += "no " + std::string(f.label);
    else why += std::string(f.label);
    for (std::size_t k = 0; k < seen.size(); ++k) why += (k ? ", " : " ") + std::to_string(seen[k]);
    const settings_pin selecting = others.without("alpha").without("chunk").without("subsequences");
    if (!selecting.empty()) why += " with " + selecting.text();
  }
  if (!rules.empty()) why += "; " + rules;
  return why;
}

/// The better of two projections: one that fits over one that does not;
/// among fitting ones the higher MFU; among the others the one closer to fitting.
inline bool better(const projection& a, const projection& b) {
  if (a.fits() != b.fits()) return a.fits();
  return a.fits() ? a.mfu > b.mfu : a.pressure() < b.pressure();
}

/// The best setting for `s` tokens; nullopt when no setting applies.
inline std::optional<projection> project(strategy kind, const model_shape& m, const cluster& c, double s,
                                         bool simulate = true, const settings_pin& pin = {}) {
  std::optional<projection> best;
  for (auto& r : project_settings(kind, m, c, s, simulate, pin)) {
    if (!best || better(r, *best)) best = std::move(r);
  }
  return best;
}

/// Orders the memories `r` (a projection of `r.kind` that does not fit)
/// exceeds by the length at which each runs out: for each, the shortest
/// multiple of `grid` below `r.sequence` at which the best setting with
/// `pin`'s values (the pin `r` was projected with; probed as the search
/// probes) exceeds it, found by bisection, else `r.sequence`
/// itself. The bisection takes each memory need to grow with the length;
/// the best setting can change from one length to the next, so where a
/// need does not grow with it the length found is one at which the memory
/// runs out, not necessarily the shortest. The first of them
/// becomes `r.limit`; the host link, which slows a step rather than stops
/// it, stays listed after them. At most log2(r.sequence / grid) probes per
/// memory exceeded.
inline void order_shortfalls(projection& r, const model_shape& m, const cluster& c, double grid = 65536,
                             const settings_pin& pin = {}) {
  expects(grid >= 1 && std::isfinite(grid),
          [&] { return "order_shortfalls: grid must be a finite number >= 1, got " + std::to_string(grid); });
  for (auto& f : r.shortfalls) {
    if (!f.is_memory()) continue;
    auto exceeded = [&](double steps) {
      const std::optional<projection> p = project(r.kind, m, c, steps * grid, false, pin);
      if (!p) return false;
      return std::any_of(p->shortfalls.begin(), p->shortfalls.end(),
                         [&](const shortfall& g) { return g.resource == f.resource; });
    };
    double fine = 0, over = std::ceil(r.sequence / grid);  // grid steps; `over` stands for r.sequence
    while (over - fine > 1) {
      const double mid = std::floor((fine + over) / 2);
      (exceeded(mid) ? over : fine) = mid;
    }
    f.runs_out_at = std::min(over * grid, r.sequence);
  }
  std::stable_sort(r.shortfalls.begin(), r.shortfalls.end(), [](const shortfall& a, const shortfall& b) {
    if (a.is_memory() != b.is_memory()) return a.is_memory();
    return a.is_memory() && a.runs_out_at < b.runs_out_at;
  });
  if (!r.shortfalls.empty() && r.shortfalls.front().is_memory()) r.limit = r.shortfalls.front().resource;
}

/// The shortest multiple of `grid` up to `limit` at which `probe(tokens)`
/// (returning std::optional<projection>) has a setting at all, fitting or
/// not; nullopt when none has. Settings exist from some length on (SPPO's
/// N >= PP subsequences of at least 2K tokens need PP x 2K tokens, more than
/// 64K from PP 33 on), so the probe doubles the length until one has a
/// setting and bisects back: at most 2 log2(limit / grid) probes.
template <class Probe>
std::optional<double> shortest_with_setting(const Probe& probe, double grid, double limit) {
  expects(grid >= 1 && limit >= grid && std::isfinite(limit), [&] {
    return "shortest_with_setting: need 1 <= grid <= limit, got grid " + std::to_string(grid) + ", limit " +
           std::to_string(limit);
  });
  const double last = std::floor(limit / grid);
  auto applies = [&](double steps) {
    try {
      return probe(steps * grid).has_value();
    } catch (const uncountable_projection&) {  // it has settings, too large to count
      return true;
    }
  };
  if (applies(1)) return grid;
  double none = 1, some = 0;  // in grid steps
  for (double steps = 2; some == 0; steps *= 2) {
    const double at = std::min(steps, last);
    if (applies(at)) some = at;
    else if (at == last) return std::nullopt;
    else none = at;
  }
  while (some - none > 1) {
    const double mid = std::floor((none + some) / 2);
    (applies(mid) ? some : none) = mid;
  }
  return some * grid;
}

/// The longest sequence, a multiple of `grid` from `first` up to `limit`,
/// for which `projector(tokens)` (returning std::optional<projection>)
/// fits; the projection at that length, or nullopt when `first` does not
/// fit. `first` is where the strategy's rules first admit a setting (what
/// `shortest_with_setting` returns). An answer within one grid step of
/// `limit` means the search stopped there: longer sequences may fit too.
/// `probe(tokens)` answers the same question during the bisection and may be
/// cheaper (it must agree on fitting). Every memory term of every setting
/// grows with the length, so fitting is monotone in it from `first` on and
/// a binary search over the grid is exact.
template <class Projector, class Probe>
std::optional<projection> longest_fitting_from(const Projector& projector, const Probe& probe, double grid,
                                               double limit, double first) {
  expects(grid >= 1 && limit >= grid && std::isfinite(limit), [&] {
    return "longest_fitting: need 1 <= grid <= limit, got grid " + std::to_string(grid) + ", limit " +
           std::to_string(limit);
  });
  expects(first >= grid && first <= limit, [&] {
    char text[128];
    std::snprintf(text, sizeof text, "longest_fitting: the first length %g is outside [grid %g, limit %g]", first,
                  grid, limit);
    return std::string(text);
  });
  expects(std::fmod(first, grid) == 0, [&] {
    char text[128];
    std::snprintf(text, sizeof text, "longest_fitting: the first length %g is not a multiple of the grid %g", first,
                  grid);
    return std::string(text);
  });
  auto fits = [&](double steps) {
    try {
      const std::optional<projection> r = probe(steps * grid);
      return r && r->fits();
    } catch (const uncountable_projection&) {  // needs more than any memory holds
      return false;
    }
  };
  double good = first / grid, bad = std::floor(limit / grid) + 1;
  if (!fits(good)) return std::nullopt;
  while (bad - good > 1) {
    const double mid = std::floor((good + bad) / 2);
    (fits(mid) ? good : bad) = mid;
  }
  return projector(good * grid);
}

/// `longest_fitting_from` the shortest length with a setting
/// (`shortest_with_setting`), so a strategy whose rules admit no setting at
/// one grid step is still searched; nullopt when no grid step fits (or no
/// setting applies at any: `shortest_with_setting` and `project` there tell
/// the two apart).
template <class Projector, class Probe>
std::optional<projection> longest_fitting(const Projector& projector, const Probe& probe, double grid, double limit) {
  const std::optional<double> first = shortest_with_setting(probe, grid, limit);
  if (!first) return std::nullopt;
  return longest_fitting_from(projector, probe, grid, limit, *first);
}

/// The longest sequence `kind` fits, a multiple of `grid` up to `limit`
/// (pipelines are probed with their closed-form step, then the answer is
/// simulated), among the settings with `pin`'s values.
inline std::optional<projection> longest(strategy kind, const model_shape& m, const cluster& c,
                                         double grid = 65536, double limit = 1024.0 * 1048576,
                                         const settings_pin& pin = {}) {
  return longest_fitting([&](double s) { return project(kind, m, c, s, true, pin); },
                         [&](double s) { return project(kind, m, c, s, false, pin); }, grid, limit);
}

}  // namespace memo::project
