// memo/project/papers.hpp
//
// The three papers' published measurements beside this model's projection
// of the same settings, row by row: what `bench/projection_bench` prints
// (and `bench/distributed_bench` for the FPDT and SPPO settings of the
// distributed layer), and what docs/projections.md discusses. Every paper
// figure below is quoted from the paper's text or tables (section given in
// `source`); figures that are only drawn in a plot are not used. The model
// side is always the public API (strategy.hpp and the strategy headers) on
// the profile of the hardware the paper ran on (cluster_profile.hpp: a800
// for MEMO, a100 for SPPO, a100x4 for FPDT), never a value fitted per row;
// as the papers ran them, the settings use every GPU of the cluster.
//
// Each row says how it is judged (`check`): a ratio or an MFU within 10%
// of the paper's; a longest sequence within one step of the grid the paper
// measured on (`grid`, `grid_points`: MEMO's 64K, 128K, then 128K apart;
// FPDT's doubling lengths), the model's 64K-grid answer snapped down to
// that grid first, as a run on the paper's lengths would report it; a
// ratio of two longest sequences within 10% (the model's unsnapped); a
// paper figure that is only a lower bound (the
// longest length the paper tried, which ran); or information only.
// `verdict` states the outcome; `note` says in one line what the paper
// states that explains a difference, or where the paper contradicts
// itself (docs/projections.md has the numbers).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "memo/core/json.hpp"
#include "memo/project/strategy.hpp"

namespace memo::project {

enum class paper_check { within_10_percent, within_grid_step, at_least, information };

inline constexpr const char* to_string(paper_check check) {
  switch (check) {
    case paper_check::within_10_percent: return "within 10%";
    case paper_check::within_grid_step: return "within one grid step";
    case paper_check::at_least: return "paper figure is a lower bound";
    case paper_check::information: return "information";
  }
  return "?";
}

struct paper_row {
  std::string paper;       ///< MEMO, FPDT or SPPO
  std::string source;      ///< where in the paper
  std::string setting;     ///< model, GPUs, parallel configuration
  std::string quantity;    ///< what is compared, with its unit
  std::string profile;     ///< the cluster profile the model used
  std::string paper_text;  ///< the paper's figure as it states it
  std::string model_text;  ///< the model's figure with the settings it chose
  double paper_value = std::numeric_limits<double>::quiet_NaN();
  double model_value = std::numeric_limits<double>::quiet_NaN();
  paper_check check = paper_check::information;
  double grid = 0;         ///< within_grid_step: one step of the paper's grid, in the value's unit
  /// within_grid_step: the lengths the paper measured on (the value's
  /// unit), ascending; beyond the last they go on `grid` apart, or double
  /// when `grid_doubles`. Empty: the multiples of `grid`.
  std::vector<double> grid_points;
  bool grid_doubles = false;
  /// within_grid_step: the model's value snapped down to the paper's grid
  /// (what a run on the paper's lengths would report), which is judged.
  double model_on_grid = std::numeric_limits<double>::quiet_NaN();
  std::string verdict;
  std::string note;
};

namespace detail {

inline constexpr double K = 1024;
inline constexpr double M = 1048576;
inline constexpr double nan = std::numeric_limits<double>::quiet_NaN();

inline std::string format(const char* pattern, double value) {
  char text[64];
  std::snprintf(text, sizeof text, pattern, value);
  return text;
}

inline std::string settings_text(const projection& r) {
  std::string t;
  auto add = [&](const char* name, int v) {
    if (v > 1) t += std::string(t.empty() ? "" : " ") + name + std::to_string(v);
  };
  add("TP", r.chosen.tp);
  add("CP", r.chosen.cp);
  add("SP", r.chosen.sp);
  add("PP", r.chosen.pp);
  add("DP", r.chosen.dp);
  add("N", r.chosen.subsequences);
  if (r.kind == strategy::memo) t += format(" alpha %.2f", r.chosen.alpha);
  if (r.chosen.chunk_tokens > 0) t += format(" chunk %.0fK", r.chosen.chunk_tokens / K);
  return t.empty() ? "1 GPU" : t;
}

/// The points of `row`'s grid up to at least `upto`.
inline std::vector<double> grid_points_upto(const paper_row& row, double upto) {
  std::vector<double> points = row.grid_points;
  if (points.empty()) points.push_back(row.grid);
  expects(points.front() > 0 && (row.grid_doubles || row.grid > 0), "paper_row: a grid needs a positive step");
  while (points.back() < upto) points.push_back(row.grid_doubles ? 2 * points.back() : points.back() + row.grid);
  return points;
}

/// Where `v` lies on `points`, counted in grid steps: k at the k-th point,
/// fractional between two, -1 at 0 (below the first point).
inline double grid_position(const std::vector<double>& points, double v) {
  if (v <= points.front()) return v / points.front() - 1;
  for (std::size_t k = 0; k + 1 < points.size(); ++k) {
    if (v <= points[k + 1]) return static_cast<double>(k) + (v - points[k]) / (points[k + 1] - points[k]);
  }
  return static_cast<double>(points.size() - 1);
}

/// The largest point of `points` at most `v` (0 below the first).
inline double snap_down(const std::vector<double>& points, double v) {
  double snapped = 0;
  for (double point : points) {
    if (point <= v) snapped = point;
  }
  return snapped;
}

/// Fills `verdict` from the check, the two values and the grid. A longest
/// length is judged on the paper's own grid: the model's answer (a 64K
/// search) is snapped down to the paper's lengths first, as a run on those
/// lengths would report it, and the steps between the two counted there.
inline void judge(paper_row& row) {
  const double p = row.paper_value, m = row.model_value;
  if (row.check == paper_check::information) {
    row.verdict = "-";
  } else if (std::isnan(m)) {
    row.verdict = "no model figure";
  } else if (row.check == paper_check::within_10_percent) {
    row.verdict = std::abs(m / p - 1) <= 0.10 ? "within 10%" : format("off by %+.0f%%", 100 * (m / p - 1));
  } else if (row.check == paper_check::within_grid_step) {
    const std::vector<double> points = grid_points_upto(row, std::max(p, m));
    row.model_on_grid = snap_down(points, m);
    const double steps = grid_position(points, row.model_on_grid) - grid_position(points, p);
    row.verdict = std::abs(steps) <= 1.0 + 1e-9 ? "within one step" : format("%+.1f grid steps", steps);
    if (row.model_on_grid != m && !row.model_text.empty()) {
      row.model_text += format(" = %.0fK on the paper's grid", row.model_on_grid);
    }
  } else {
    row.verdict = m >= p ? "consistent" : "below the paper";
  }
}

inline paper_row make_row(std::string paper, std::string source, std::string setting, std::string quantity,
                          std::string profile) {
  paper_row row;
  row.paper = std::move(paper);
  row.source = std::move(source);
  row.setting = std::move(setting);
  row.quantity = std::move(quantity);
  row.profile = std::move(profile);
  return row;
}

inline cluster on(const std::string& profile, int gpus) {
  const cluster_profile p = load_cluster_profile(profile);
  return {p, gpus, p.gpus_per_node};
}

/// How a paper counts FLOPs per second: model FLOPs (MFU), or with the
/// recomputation included (what Megatron-LM's and DeepSpeed's throughput
/// formulas report when activation checkpointing is on).
enum class flops_counted { model, with_recomputation };

/// A row about one projection's MFU (percent). A projection that does not
/// fit still has a step time; the row gives it and says so.
inline paper_row mfu_row(std::string paper, std::string source, std::string setting, std::string profile,
                         double s, double paper_mfu, const std::optional<projection>& r, std::string note = {},
                         flops_counted counted = flops_counted::model) {
  const bool hardware = counted == flops_counted::with_recomputation;
  paper_row row = make_row(std::move(paper), std::move(source), std::move(setting),
                std::string(hardware ? "MFU % counting recomputation" : "MFU %") + " at " + format("%.0fK", s / K),
                std::move(profile));
  row.paper_text = std::isnan(paper_mfu) ? "does not fit" : format("%.2f", paper_mfu);
  row.paper_value = paper_mfu;
  if (r) {
    row.model_value = 100 * (hardware ? r->hfu : r->mfu);
    row.model_text = format("%.1f", row.model_value) + " (" + settings_text(*r) + ")";
    if (!r->fits()) row.model_text += " but does not fit: " + std::string(to_string(*r->limit));
  } else {
    row.model_text = "no setting";
  }
  row.check = std::isnan(paper_mfu) ? paper_check::information : paper_check::within_10_percent;
  row.note = std::move(note);
  return row;
}

/// A row about a longest sequence (in K tokens); `paper_tokens` NaN when
/// the paper gives none.
inline paper_row length_row(std::string paper, std::string source, std::string setting, std::string profile,
                            std::string paper_text, double paper_tokens, paper_check check, double grid_tokens,
                            const std::optional<projection>& r, std::string note = {}) {
  paper_row row = make_row(std::move(paper), std::move(source), std::move(setting), "longest sequence, K tokens",
                std::move(profile));
  row.paper_text = std::move(paper_text);
  row.paper_value = paper_tokens / K;
  row.grid = grid_tokens / K;
  row.check = check;
  if (r) {
    row.model_value = r->sequence / K;
    row.model_text = format("%.0fK", row.model_value) + " (" + settings_text(*r) + format(", MFU %.1f%%)", 100 * r->mfu);
  } else {
    row.model_value = 0;
    row.model_text = "not even 64K";
  }
  row.note = std::move(note);
  return row;
}

/// MEMO Tables 3 and 4's lengths, in K tokens: 64K, 128K, then 128K apart
/// (256K, 384K, ... 1408K), which this grid continues beyond the tables.
inline paper_row on_memo_table_grid(paper_row row) {
  row.grid_points = {64, 128, 256};
  row.grid = 128;
  return row;
}

/// A grid of doubling lengths (FPDT Tables 1 and 3, Figure 11), in K tokens.
inline paper_row on_doubling_grid(paper_row row) {
  row.grid_points = {64};
  row.grid_doubles = true;
  return row;
}

/// A row about the ratio of two longest sequences (the model's from its 64K
/// searches, not snapped to any grid), judged within 10%.
inline paper_row length_ratio_row(std::string paper, std::string source, std::string setting,
                                  std::string profile, std::string paper_text, double paper_ratio, const std::optional<projection>& num,
                                  const std::optional<projection>& den, std::string note = {}) {
  paper_row row = make_row(std::move(paper), std::move(source), std::move(setting), "ratio of longest sequences",
                           std::move(profile));
  row.paper_text = std::move(paper_text);
  row.paper_value = paper_ratio;
  row.check = paper_check::within_10_percent;
  if (num && den) {
    row.model_value = num->sequence / den->sequence;
    row.model_text = format("%.2fx", row.model_value) + format(" (%.0fK", num->sequence / K) +
                     format(" / %.0fK)", den->sequence / K);
  } else {
    row.model_text = "no model figure";
  }
  row.note = std::move(note);
  return row;
}

/// The better of the projections `candidates` makes (strategy.hpp's order).
inline std::optional<projection> best_of(const std::vector<projection>& candidates) {
  std::optional<projection> best;
  for (const auto& r : candidates) {
    if (!best || better(r, *best)) best = r;
  }
  return best;
}

/// MEMO's Table 4 configuration: 7B on 8 A800s, TP 4 x CP 2 (5.3).
inline std::optional<projection> memo_table4(strategy kind, double s) {
  const model_shape m = parse_model_shape("7b");
  const cluster c = on("a800", 8);
  std::vector<projection> options{megatron(kind, m, c, s, 4, 2, 1)};
  if (kind == strategy::memo) options.push_back(megatron(kind, m, c, s, 4, 2, 1, 0.0));
  return best_of(options);
}

/// FPDT as its paper runs it: sequence parallel over every GPU (up to the
/// heads), chunks of 64K tokens (FPDT 5.1-5.3).
inline std::optional<projection> fpdt_over_all(const model_shape& m, const cluster& c, double s) {
  return ulysses(strategy::fpdt, m, c, s, std::min(c.gpus, m.heads), fpdt_default_chunk);
}

/// Longest sequence of a fixed setting `make(tokens)`, on a 64K grid.
template <class Make>
std::optional<projection> longest_of(const Make& make) {
  return longest_fitting(make, make, 65536, 1024.0 * M);
}

/// The best setting of `kind` that uses every GPU, as the papers ran them
/// (`project` also considers settings that leave GPUs idle).
inline std::optional<projection> on_every_gpu(strategy kind, const model_shape& m, const cluster& c, double s) {
  std::vector<projection> used;
  for (auto& r : project_settings(kind, m, c, s)) {
    if (r.chosen.gpus() == c.gpus) used.push_back(std::move(r));
  }
  return best_of(used);
}

/// The longest sequence `kind` fits using every GPU, on a 64K grid.
inline std::optional<projection> longest_on_every_gpu(strategy kind, const model_shape& m, const cluster& c) {
  return longest_of([&](double s) { return on_every_gpu(kind, m, c, s); });
}

}  // namespace detail

/// MEMO (memo-zhao2024): Table 4's ablation on 7B / 8 A800s, the averages
/// 5.3 quotes, Table 3's longest sequences and MFU trend, 5.4's scaling.
inline std::vector<paper_row> memo_rows(bool quick = false) {
  using namespace detail;
  std::vector<paper_row> rows;
  const double lengths[] = {64 * K, 128 * K, 256 * K, 384 * K, 512 * K, 640 * K, 768 * K, 896 * K};
  struct variant {
    strategy kind;
    const char* name;
    double mfu[8];  // NaN: OOM or OOHM in the paper
    double longest;
    const char* longest_text;
  };
  const variant variants[] = {
      {strategy::recompute, "full recompute", {41.19, 23.00, 29.07, 25.67, nan, nan, nan, nan}, 384 * K,
       "384K (OOM at 512K)"},
      {strategy::recompute_planned, "recompute + plan", {42.91, 43.17, 42.05, 42.49, 41.90, 42.15, nan, nan},
       640 * K, "640K (OOM at 768K)"},
      {strategy::swap_planned, "swap + plan", {37.40, 46.33, 53.62, nan, nan, nan, nan, nan}, 256 * K,
       "256K (OOHM at 384K)"},
      {strategy::memo, "MEMO", {47.99, 50.96, 53.62, 53.04, 51.84, 52.59, 51.89, 52.71}, 896 * K,
       "896K (table ends)"},
  };
  double model[4][8];
  for (int v = 0; v < 4; ++v) {
    for (int i = 0; i < 8; ++i) {
      const auto r = memo_table4(variants[v].kind, lengths[i]);
      model[v][i] = r && r->fits() ? 100 * r->mfu : nan;
      std::string note;
      if (variants[v].kind == strategy::recompute && !std::isnan(variants[v].mfu[i])) {
        note = "caching-allocator reorganisation stalls (5.2: 6 per step at 128K, 16 at 256K) not modelled";
      }
      rows.push_back(mfu_row("MEMO", "Table 4", std::string("7B, 8 GPUs, TP4 CP2, ") + variants[v].name, "a800",
                             lengths[i], variants[v].mfu[i], r, note));
    }
  }
  // 5.3's averages over the lengths where both methods ran in the paper.
  struct ratio {
    const char* label;
    int num, den;
    double paper;
    const char* note;
  };
  const ratio ratios[] = {
      {"recompute + plan / full recompute", 1, 0, 1.51,
       "the 1.51x is reorganisation stalls (5.3.1), which the model does not simulate"},
      {"MEMO / recompute + plan", 3, 1, 1.22, ""},
      {"MEMO / swap + plan", 3, 2, 1.13, ""},
  };
  for (const auto& q : ratios) {
    double sum = 0;
    int cells = 0;
    for (int i = 0; i < 8; ++i) {
      if (std::isnan(variants[q.num].mfu[i]) || std::isnan(variants[q.den].mfu[i])) continue;
      if (std::isnan(model[q.num][i]) || std::isnan(model[q.den][i])) continue;
      sum += model[q.num][i] / model[q.den][i];
      ++cells;
    }
    paper_row row = make_row("MEMO", "5.3 (Table 4)", "7B, 8 GPUs, TP4 CP2", std::string("mean MFU ratio ") + q.label, "a800");
    row.paper_text = format("%.2f", q.paper);
    row.paper_value = q.paper;
    row.model_value = cells ? sum / cells : nan;
    row.model_text = format("%.3f", row.model_value) + " over " + std::to_string(cells) + " lengths";
    row.check = paper_check::within_10_percent;
    row.note = q.note;
    rows.push_back(row);
  }
  // The same ratios length by length, wherever Table 4 has both cells: full
  // swapping and MEMO against full recomputation with a plan.
  for (const int num : {2, 3}) {
    for (int i = 0; i < 8; ++i) {
      if (std::isnan(variants[num].mfu[i]) || std::isnan(variants[1].mfu[i])) continue;
      paper_row row = make_row("MEMO", "Table 4 (ratio)", std::string("7B, 8 GPUs, TP4 CP2"),
                               std::string("MFU ratio ") + variants[num].name + " / recompute + plan at " +
                                   format("%.0fK", lengths[i] / K),
                               "a800");
      row.paper_value = variants[num].mfu[i] / variants[1].mfu[i];
      row.paper_text = format("%.3f", row.paper_value) + format(" (%.2f", variants[num].mfu[i]) +
                       format(" / %.2f)", variants[1].mfu[i]);
      row.model_value = model[num][i] / model[1][i];
      row.model_text = std::isnan(row.model_value)
                           ? "no model figure (does not fit)"
                           : format("%.3f", row.model_value) + format(" (%.1f", model[num][i]) +
                                 format(" / %.1f)", model[1][i]);
      row.check = paper_check::within_10_percent;
      rows.push_back(row);
    }
  }
  for (const auto& v : variants) {
    const auto r = longest_of([&](double s) { return memo_table4(v.kind, s); });
    rows.push_back(on_memo_table_grid(length_row("MEMO", "Table 4", std::string("7B, 8 GPUs, TP4 CP2, ") + v.name, "a800",
                              v.longest_text, v.longest,
                              v.kind == strategy::memo ? paper_check::at_least : paper_check::within_grid_step,
                              128 * K, r,
                              v.kind == strategy::swap_planned
                                  ? "paper: host memory at 384K; 2 TB per node holds the 1.41 TiB full swapping needs"
                                  : "")));
  }
  // Table 3: the longest length per model (the paper's tuned settings, Tables 5-7).
  struct model_case {
    const char* model;
    int gpus;
    double memo, deepspeed, megatron;  // longest that ran
    const char* memo_text;
    bool memo_is_bound;                // the table ends before MEMO fails
    const char* note;                  // on the MEMO row (30B) or the Megatron row (7B)
  };
  const model_case cases[] = {
      {"7b", 8, 1024 * K, 256 * K, 640 * K, "1024K (OOM at 1152K)", false,
       "Megatron: Table 3 runs 512K and 640K that Table 6 lists as OOM"},
      {"13b", 16, 1408 * K, 256 * K, 640 * K, "1408K (table ends)", true, ""},
      {"30b", 32, 1280 * K, 128 * K, 384 * K, "1280K (OOHM at 1408K)", false,
       "paper: host memory at 1408K with alpha = 0, where eq. (3) needs 0.48 TB of a 2 TB node"},
      {"65b", 64, 1408 * K, 1280 * K, 512 * K, "1408K (table ends)", true, ""},
  };
  for (const auto& mc : cases) {
    if (quick && mc.gpus > 16) continue;
    const model_shape m = parse_model_shape(mc.model);
    const cluster c = on("a800", mc.gpus);
    const int k = static_cast<int>(&mc - cases);
    const std::string setting = std::string(mc.model) + ", " + std::to_string(mc.gpus) + " GPUs";
    const auto memo = longest_on_every_gpu(strategy::memo, m, c);
    rows.push_back(on_memo_table_grid(length_row("MEMO", "Table 3", setting + ", MEMO", "a800", mc.memo_text, mc.memo,
                              mc.memo_is_bound ? paper_check::at_least : paper_check::within_grid_step, 128 * K,
                              memo, k == 2 ? mc.note : "")));
    rows.push_back(on_memo_table_grid(length_row("MEMO", "Table 3", setting + ", DeepSpeed-Ulysses + ZeRO-3", "a800",
                              format("%.0fK", mc.deepspeed / K), mc.deepspeed, paper_check::within_grid_step, 128 * K,
                              longest_on_every_gpu(strategy::ulysses_zero3, m, c))));
    rows.push_back(on_memo_table_grid(length_row("MEMO", "Table 3", setting + ", Megatron-LM", "a800", format("%.0fK", mc.megatron / K),
                              mc.megatron, paper_check::within_grid_step, 128 * K,
                              longest_on_every_gpu(strategy::recompute, m, c), k == 0 ? mc.note : "")));
    // MFU trend: at 64K and at the longest length MEMO ran.
    const double table3_mfu[4][2] = {{52.34, 52.30}, {52.65, 52.10}, {52.12, 51.59}, {47.80, 51.45}};
    const double last = mc.memo;
    rows.push_back(mfu_row("MEMO", "Table 3", setting + ", MEMO", "a800", 64 * K, table3_mfu[k][0],
                           on_every_gpu(strategy::memo, m, c, 64 * K)));
    rows.push_back(mfu_row("MEMO", "Table 3", setting + ", MEMO", "a800", last, table3_mfu[k][1],
                           on_every_gpu(strategy::memo, m, c, last)));
  }
  // 5.4 / Figure 12(a): 7B on 8..64 GPUs, "1, 2, 4, 8 million".
  for (int gpus : {16, 32, 64}) {
    if (quick && gpus > 16) continue;
    const model_shape m = parse_model_shape("7b");
    const cluster c = on("a800", gpus);
    const double paper = gpus / 8 * M;
    rows.push_back(length_row("MEMO", "5.4", "7b, " + std::to_string(gpus) + " GPUs, MEMO", "a800",
                              format("%.0fM", paper / M), paper, paper_check::within_grid_step,
                              128 * K * gpus / 8, longest_on_every_gpu(strategy::memo, m, c),
                              "grid: Table 3's 128K per 8 GPUs, scaled with the GPUs"));
    if (gpus >= 32) {
      rows.push_back(length_row("MEMO", "5.4", "7b, " + std::to_string(gpus) + " GPUs, DeepSpeed-Ulysses", "a800",
                                "1536K", 1536 * K, paper_check::within_grid_step, 128 * K * gpus / 8,
                                longest_on_every_gpu(strategy::ulysses_zero3, m, c),
                                "SP is capped by 32 heads: the same length on 32 and 64 GPUs"));
    }
  }
  for (auto& row : rows) judge(row);
  return rows;
}

/// FPDT (fpdt-yao2024): Table 1's 8B lengths, Table 3's 8-GPU comparison,
/// Table 4's 256K MFU, the abstract's 2M at over 55% MFU, 5.2's 6.7B.
inline std::vector<paper_row> fpdt_rows(bool quick = false) {
  using namespace detail;
  std::vector<paper_row> rows;
  const model_shape llama = parse_model_shape("8b");
  // Table 1: 8B on A100-80GB (FPDT's 4-GPU nodes); lengths on a power-of-two grid.
  struct length_case {
    int gpus;
    double tokens;
    const char* text;
    bool bound;
  };
  std::optional<projection> fpdt_on_eight;  // Table 3's FPDT row is Table 1's 8-GPU column
  for (const auto& lc : {length_case{4, 2 * M, "2M", false}, length_case{8, 4 * M, "4M", false},
                         length_case{16, 8 * M, "8M+", true}}) {
    if (quick && lc.gpus > 4) continue;
    const cluster c = on("a100x4", lc.gpus);
    const auto fpdt_longest = longest_of([&](double s) { return fpdt_over_all(llama, c, s); });
    if (lc.gpus == 8) fpdt_on_eight = fpdt_longest;
    rows.push_back(on_doubling_grid(length_row("FPDT", "Table 1", "8B, " + std::to_string(lc.gpus) + " GPUs, FPDT chunk 64K", "a100x4",
                              lc.text, lc.tokens, lc.bound ? paper_check::at_least : paper_check::within_grid_step,
                              lc.tokens, fpdt_longest,
                              lc.bound ? "" : "grid: powers of two (the next column is twice as long)")));
  }
  const cluster four = on("a100x4", 4);
  const char* counted_note = "FPDT trains with checkpointing on (5.1); its MFU includes the recomputation";
  rows.push_back(mfu_row("FPDT", "Table 4 (sparsity 0)", "8B, 4 GPUs, FPDT SP4 chunk 64K", "a100x4", 256 * K, 47.6,
                         fpdt_over_all(llama, four, 256 * K),
                         "counts the recomputation (5.1) and 5.3's fill and drain of 4 chunks; the rest is not explained",
                         flops_counted::with_recomputation));
  rows.push_back(mfu_row("FPDT", "abstract", "8B, 4 GPUs, FPDT SP4 chunk 64K", "a100x4", 2 * M, 55.0,
                         fpdt_over_all(llama, four, 2 * M), counted_note, flops_counted::with_recomputation));
  if (!quick) {
    // Table 3: 8B on 8 GPUs.
    const cluster eight = on("a100x4", 8);
    auto ulysses_oc = [&](double s) {
      std::vector<projection> options;
      for (int sp : {1, 2, 4, 8}) options.push_back(ulysses(strategy::ulysses_zero3, llama, eight, s, sp, 0, true));
      return best_of(options);
    };
    const auto ulysses_longest = longest_of(ulysses_oc);
    rows.push_back(on_doubling_grid(length_row("FPDT", "Table 3", "8B, 8 GPUs, Ulysses + AC + OC + ZeRO-3", "a100x4", "512K",
                              512 * K, paper_check::within_grid_step, 512 * K, ulysses_longest,
                              "grid: Table 3's lengths double")));
    rows.push_back(length_ratio_row("FPDT", "Table 3, 5.5", "8B, 8 GPUs, FPDT / Ulysses + AC + OC + ZeRO-3", "a100x4",
                                    "8x (4M / 512K)", 8.0, fpdt_on_eight, ulysses_longest,
                                    "Table 3's lengths are powers of two; if each is the last of a doubling sweep "
                                    "(the paper does not say), its 8x stands for a ratio between 4x and 16x"));
    rows.push_back(mfu_row("FPDT", "Table 3", "8B, 8 GPUs, Ulysses + AC + OC + ZeRO-3", "a100x4", 512 * K, 47.2,
                           ulysses_oc(512 * K), counted_note, flops_counted::with_recomputation));
    const auto fpdt4m = fpdt_over_all(llama, eight, 4 * M);
    rows.push_back(mfu_row("FPDT", "Table 3", "8B, 8 GPUs, FPDT SP8", "a100x4", 4 * M, 55.7, fpdt4m, counted_note,
                           flops_counted::with_recomputation));
    paper_row hbm = make_row("FPDT", "Table 3", "8B, 8 GPUs, FPDT SP8", "device memory at 4M, GiB", "a100x4");
    hbm.paper_text = "68.0";
    hbm.paper_value = 68.0;
    if (fpdt4m) {
      hbm.model_value = fpdt4m->device.total() / static_cast<double>(gib);
      hbm.model_text = format("%.1f", hbm.model_value) + " (" + settings_text(*fpdt4m) + ")";
    }
    hbm.check = paper_check::within_10_percent;
    hbm.note = "paper's G read as GiB (PyTorch's unit); the same per-GPU length on 4 GPUs (Table 1's 2M) adds "
               "15 GiB of ZeRO-3 states: 83 GiB";
    rows.push_back(hbm);
  }
  // 5.2 / Figure 11's text: 6.7B GPT in one node.
  const model_shape gpt = parse_model_shape("7b");
  const auto gpt_ulysses = longest_on_every_gpu(strategy::ulysses_zero3, gpt, four);
  const auto gpt_fpdt = longest_of([&](double s) { return fpdt_over_all(gpt, four, s); });
  rows.push_back(on_doubling_grid(length_row("FPDT", "5.2", "6.7B GPT, 4 GPUs, Ulysses", "a100x4", "256K", 256 * K,
                            paper_check::within_grid_step, 256 * K, gpt_ulysses,
                            "grid: Figure 11's lengths double")));
  rows.push_back(on_doubling_grid(length_row("FPDT", "5.2", "6.7B GPT, 4 GPUs, FPDT (offloading)", "a100x4", "2M", 2 * M,
                            paper_check::within_grid_step, 2 * M, gpt_fpdt,
                            "grid: Figure 11's lengths double")));
  rows.push_back(length_ratio_row("FPDT", "5.2", "6.7B GPT, 4 GPUs, FPDT (offloading) / Ulysses", "a100x4",
                                  "8x (2M / 256K)", 8.0, gpt_fpdt, gpt_ulysses,
                                  "Figure 11's lengths double; if each is the last of the sweep, 8x stands for "
                                  "a ratio between 4x and 16x"));
  for (auto& row : rows) judge(row);
  return rows;
}

/// SPPO (sppo-chen2025): GPT-7B on 32/64/128 A100s (section 7): longest
/// sequences against the baselines (7.1, 7.3) and SPPO's speedup over
/// Megatron-LM on the same (SP, PP, N) (7.1).
inline std::vector<paper_row> sppo_rows(bool quick = false) {
  using namespace detail;
  std::vector<paper_row> rows;
  const model_shape m = parse_model_shape("7b");
  // Megatron-LM as SPPO Table 4 tunes it for 7B on 32 GPUs: SP (Megatron's
  // TP with sequence parallelism) 32, PP 1; on 64 and 128 GPUs SP stays at
  // the 32 heads and PP takes the rest (the paper lists no setting there).
  auto megatron_tuned = [&](int gpus) {
    const cluster c = on("a100", gpus);
    return longest_of([&, c](double s) {
      return std::optional<projection>(megatron(strategy::recompute, m, c, s, 32, 1, 1, std::nullopt, gpus / 32));
    });
  };
  const auto tuned32 = megatron_tuned(32);
  const double baseline = tuned32 ? tuned32->sequence : nan;
  for (int gpus : {32, 64, 128}) {
    if (quick && gpus > 32) continue;
    const cluster c = on("a100", gpus);
    const std::string setting = "7B, " + std::to_string(gpus) + " GPUs";
    const double trained = gpus / 32 * M;
    const auto sppo_longest = longest(strategy::sppo, m, c);
    rows.push_back(length_row("SPPO", "abstract, 1", setting + ", SPPO", "a100", format("%.0fM", trained / M),
                              trained, paper_check::at_least, 0, sppo_longest,
                              gpus == 32 ? "Table 4's 7B runs end at 1024K: the paper's lengths ran, no OOM reported"
                                         : ""));
    const auto tuned = gpus == 32 ? tuned32 : megatron_tuned(gpus);
    const double paper_scaling[] = {1.0, 1.375, 2.13}, paper_sppo[] = {1.3, 2.0, 4.0};
    const int k = gpus == 32 ? 0 : gpus == 64 ? 1 : 2;
    paper_row scaling = make_row("SPPO", "7.3", setting + ", Megatron-Tuned (SP32 PP" + std::to_string(gpus / 32) + ")",
                      "longest sequence / Megatron-Tuned's on 32 GPUs", "a100");
    scaling.paper_text = format("%.3gx", paper_scaling[k]);
    scaling.paper_value = paper_scaling[k];
    scaling.model_value = tuned ? tuned->sequence / baseline : nan;
    scaling.model_text = format("%.2fx", scaling.model_value) + (tuned ? format(" (%.0fK)", tuned->sequence / K) : "");
    scaling.check = paper_check::within_10_percent;
    rows.push_back(scaling);
    paper_row versus = make_row("SPPO", "7.3", setting + ", SPPO", "longest sequence / Megatron-Tuned's on 32 GPUs", "a100");
    versus.paper_text = format("%.2gx", paper_sppo[k]);
    versus.paper_value = paper_sppo[k];
    versus.model_value = sppo_longest ? sppo_longest->sequence / baseline : nan;
    versus.model_text = format("%.2fx", versus.model_value);
    versus.check = paper_check::within_10_percent;
    versus.note = gpus == 32 ? "7.3 sweeps 1K-10K tokens per GPU, at most 320K on 32 GPUs, yet reports these ratios"
                             : "";
    rows.push_back(versus);
  }
  const cluster c32 = on("a100", 32);
  rows.push_back(length_row("SPPO", "7.1", "7B, 32 GPUs, Megatron-LM on SPPO's SP8 PP4 N", "a100",
                            "896K (OOM beyond)", 896 * K, paper_check::within_grid_step, 128 * K,
                            longest(strategy::sppo_recompute, m, c32),
                            "the same (SP, PP, N) with full recomputation; the paper does not say how"));
  for (int gpus : {32, 64}) {
    if (quick && gpus > 32) continue;
    rows.push_back(length_row("SPPO", "7.3", "7B, " + std::to_string(gpus) + " GPUs, DeepSpeed-Ulysses", "a100",
                              gpus == 32 ? "\"1K\" per GPU" : "0", nan, paper_check::information, 0,
                              longest_on_every_gpu(strategy::ulysses_zero3, m, on("a100", gpus)),
                              gpus == 64 ? "MEMO 5.4 runs DeepSpeed at 1536K on both 32 and 64 GPUs" : ""));
  }
  // 7.1: "SPPO achieves a 1.13x to 1.29x speedup" over Megatron-LM under the same strategy.
  double low = std::numeric_limits<double>::infinity(), high = 0;
  std::string detail_text;
  for (double s : {512 * K, 640 * K, 768 * K, 896 * K}) {
    // Megatron-LM on SPPO's own (SP, PP, N): the same pipeline.
    const auto fast = project(strategy::sppo, m, c32, s);
    if (!fast || !fast->fits()) continue;
    const settings& same = fast->chosen;
    const projection slow = sppo(strategy::sppo_recompute, m, c32, s, same.sp, same.pp, same.subsequences);
    if (!slow.fits()) continue;
    const double ratio = slow.step_seconds / fast->step_seconds;
    low = std::min(low, ratio);
    high = std::max(high, ratio);
    detail_text += format(" %.0fK:", s / K) + format("%.2f", ratio);
  }
  for (int end = 0; end < 2; ++end) {
    paper_row row = make_row("SPPO", "7.1", "7B, 32 GPUs, 512K-896K",
                  std::string(end ? "highest" : "lowest") + " speedup over Megatron-LM on the same pipeline", "a100");
    row.paper_text = end ? "1.29x" : "1.13x";
    row.paper_value = end ? 1.29 : 1.13;
    row.model_value = end ? high : low;
    row.model_text = format("%.2fx", row.model_value) + " (" + detail_text.substr(detail_text.empty() ? 0 : 1) + ")";
    row.check = paper_check::within_10_percent;
    row.note = end ? "" : "7.1 also calls SPPO's gain at 768K \"only marginal\"";
    rows.push_back(row);
  }
  // 7.2, Figure 11(a): GPT-13B at 512K on 64 GPUs with Table 4's SP 8, PP 8,
  // N 32. The bars are speedups over Megatron-LM, each technique added to
  // the ones before: adaptive offloading 1.23x, with multiplexing 1.44x, so
  // multiplexing alone gives 1.44 / 1.23. Read as multiplexing's own
  // speedup, 1.44x could not happen: filling every bubble shortens the
  // step by at most (PP - 1 + N) / N = 1.22x.
  {
    const model_shape m13 = parse_model_shape("13b");
    const cluster c64 = on("a100", 64);
    const double s = 512 * K, inf = std::numeric_limits<double>::infinity();
    const projection plain = sppo(strategy::sppo, m13, c64, s, 8, 8, 32, inf, sppo_pipeline::plain);
    const projection msp = sppo(strategy::sppo, m13, c64, s, 8, 8, 32, inf, sppo_pipeline::multiplexed);
    paper_row row = make_row("SPPO", "7.2, Figure 11(a)", "13B, 64 GPUs, 512K, SP8 PP8 N32 (Table 4)",
                             "step of the plain pipeline / the multiplexed one", "a100");
    row.paper_text = "1.17x (1.44 / 1.23)";
    row.paper_value = 1.44 / 1.23;
    const bool timed = plain.fits() && msp.fits();
    row.model_value = timed ? plain.step_seconds / msp.step_seconds : nan;
    row.model_text = timed ? format("%.2fx", row.model_value) + format(" (%.1f s", plain.step_seconds) +
                                 format(" / %.1f s)", msp.step_seconds)
                           : "does not fit";
    row.check = paper_check::within_10_percent;
    row.note = "filling every bubble gives at most (PP - 1 + N) / N = 1.22x";
    rows.push_back(row);
  }
  for (auto& row : rows) judge(row);
  return rows;
}

/// The settings the distributed layer's bench reports: FPDT's 8B on 4 GPUs
/// at 256K-2M tokens (chunk 64K) and SPPO's GPT-7B on 32/64/128 GPUs at
/// 1M-4M, each beside what the paper reports for it.
inline std::vector<paper_row> distributed_rows(bool quick = false) {
  using namespace detail;
  std::vector<paper_row> rows;
  const model_shape llama = parse_model_shape("8b");
  const cluster four = on("a100x4", 4);
  for (double s : {256 * K, 512 * K, 1 * M, 2 * M}) {
    const auto r = fpdt_over_all(llama, four, s);
    const double paper = s == 256 * K ? 47.6 : s == 2 * M ? 55.0 : nan;
    paper_row row = mfu_row("FPDT", s == 256 * K ? "Table 4" : s == 2 * M ? "abstract, Table 1" : "Table 1",
                            "8B, 4 GPUs, FPDT SP4 chunk 64K", "a100x4", s, paper, r, {},
                            flops_counted::with_recomputation);
    if (s == 2 * M) row.paper_text = "fits, > 55";
    if (s == 512 * K || s == 1 * M) row.paper_text = "fits";
    if (r) {
      row.model_text += format(", MFU %.1f%%", 100 * r->mfu) +
                        format(", %.1f GiB device", r->device.total() / static_cast<double>(gib)) +
                        format(", %.0f GiB host per node", r->host_per_node / static_cast<double>(gib));
    }
    rows.push_back(row);
  }
  for (int gpus : {32, 64, 128}) {
    if (quick && gpus > 32) continue;
    const cluster c = on("a100", gpus);
    for (double s : {1 * M, 2 * M, 4 * M}) {
      const auto r = project(strategy::sppo, parse_model_shape("7b"), c, s);
      paper_row row = mfu_row("SPPO", "abstract, 7", "7B, " + std::to_string(gpus) + " GPUs, SPPO", "a100", s, nan, r);
      row.paper_text = s / M == gpus / 32 ? "trained" : "-";
      if (r && r->fits()) row.model_text += format(", %.0f tokens/GPU/s", r->tokens_per_gpu_per_second);
      rows.push_back(row);
    }
  }
  for (auto& row : rows) judge(row);
  return rows;
}

/// One row as one line of text.
inline std::string row_text(const paper_row& row) {
  std::string line = row.paper + " " + row.source + " | " + row.setting + " | " + row.quantity + " | paper " +
                     row.paper_text + " | model " + row.model_text + " | " + row.verdict;
  if (!row.note.empty()) line += " | " + row.note;
  return line;
}

/// One row as a JSON object.
inline void write_json(json_writer& j, const paper_row& row) {
  j.begin_object().field("paper", row.paper).field("source", row.source).field("setting", row.setting)
      .field("quantity", row.quantity).field("profile", row.profile).field("paper_text", row.paper_text)
      .field("paper_value", row.paper_value).field("model_text", row.model_text)
      .field("model_value", row.model_value).field("check", to_string(row.check)).field("grid", row.grid)
      .field("verdict", row.verdict).field("note", row.note).end_object();
}

}  // namespace memo::project
