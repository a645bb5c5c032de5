// projection_bench: the projection model of include/memo/project/ beside the
// papers' figures (docs/projections.md). Nothing is timed: every figure is
// the model's, printed next to the paper's, with their ratio.
//  - MEMO Table 4 (7B, 8 x A800): MFU of full recomputation with and
//    without memory planning, full swapping with planning, and MEMO, at
//    64K..896K, and the averages the paper's text quotes (1.51x planning,
//    1.22x MEMO over recompute+plan, 1.13x MEMO over swap+plan).
//  - MEMO 5.4 / Figure 12(a): longest sequence of 7B on 8/16/32/64 GPUs.
//  - FPDT Table 1: 8B (Llama-3 shape) on 4 x A100-80GB: 2M.
// --quick skips the 32/64-GPU searches; --json prints one JSON object.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "memo/core/json.hpp"
#include "memo/project/strategy.hpp"

namespace mp = memo::project;

int main(int argc, char** argv) {
  bool quick = false, json = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    else if (std::strcmp(argv[i], "--json") == 0) json = true;
    else {
      std::cerr << "projection_bench: unknown argument '" << argv[i] << "' (--quick, --json)\n";
      return 2;
    }
  }
  try {
    const auto m7 = mp::parse_model_shape("7b");
    const mp::cluster a800{mp::load_cluster_profile("a800"), 8, 8};
    // MEMO Table 4; 0 marks an OOM / OOHM cell.
    const int lengths_k[] = {64, 128, 256, 384, 512, 640, 768, 896};
    struct table_row {
      mp::strategy kind;
      const char* label;
      double paper[8];
    };
    const table_row rows[] = {
        {mp::strategy::recompute, "full recompute", {41.19, 23.00, 29.07, 25.67, 0, 0, 0, 0}},
        {mp::strategy::recompute_planned, "recompute + plan", {42.91, 43.17, 42.05, 42.49, 41.90, 42.15, 0, 0}},
        {mp::strategy::swap_planned, "swap + plan", {37.40, 46.33, 53.62, 0, 0, 0, 0, 0}},
        {mp::strategy::memo, "MEMO", {47.99, 50.96, 53.62, 53.04, 51.84, 52.59, 51.89, 52.71}},
    };
    double model_mfu[4][8];
    memo::json_writer j;
    j.begin_object().field("quick", quick).key("table4").begin_array();
    if (!json) std::printf("MEMO Table 4, 7B on 8 x A800: MFU %% model / paper (x = does not fit)\n%-18s", "");
    if (!json) for (int k : lengths_k) std::printf(" %13dK", k);
    if (!json) std::printf("\n");
    for (int r = 0; r < 4; ++r) {
      if (!json) std::printf("%-18s", rows[r].label);
      j.begin_object().field("strategy", std::string(mp::strategy_name(rows[r].kind))).key("cells").begin_array();
      for (int i = 0; i < 8; ++i) {
        const auto p = mp::project(rows[r].kind, m7, a800, lengths_k[i] * 1024.0);
        model_mfu[r][i] = p && p->fits() ? 100 * p->mfu : 0;
        char model_text[16], paper_text[16];
        std::snprintf(model_text, sizeof model_text, model_mfu[r][i] > 0 ? "%.1f" : "x", model_mfu[r][i]);
        std::snprintf(paper_text, sizeof paper_text, rows[r].paper[i] > 0 ? "%.1f" : "x", rows[r].paper[i]);
        if (!json) std::printf(" %6s/%-6s", model_text, paper_text);
        j.begin_object().field("k", lengths_k[i]).field("model_mfu", model_mfu[r][i])
            .field("paper_mfu", rows[r].paper[i]).end_object();
      }
      j.end_array().end_object();
      if (!json) std::printf("\n");
    }
    j.end_array();
    // The averages the paper's text quotes, over the cells where both rows ran in the paper.
    struct ratio {
      const char* label;
      int num, den;
      double paper;
    };
    const ratio ratios[] = {{"recompute+plan / recompute", 1, 0, 1.51},
                            {"MEMO / recompute+plan", 3, 1, 1.22},
                            {"MEMO / swap+plan", 3, 2, 1.13}};
    j.key("ratios").begin_array();
    for (const auto& q : ratios) {
      double sum_model = 0, sum_paper = 0;
      int n = 0, n_model = 0;
      for (int i = 0; i < 8; ++i) {
        if (rows[q.num].paper[i] > 0 && rows[q.den].paper[i] > 0) {
          sum_paper += rows[q.num].paper[i] / rows[q.den].paper[i];
          ++n;
          if (model_mfu[q.num][i] > 0 && model_mfu[q.den][i] > 0) {
            sum_model += model_mfu[q.num][i] / model_mfu[q.den][i];
            ++n_model;
          }
        }
      }
      const double model = n_model ? sum_model / n_model : 0, recomputed = sum_paper / n;
      if (!json) {
        std::printf("%-28s model %.3f (%d cells)  paper text %.2f  paper table %.3f (%d cells)  model/paper %.3f\n",
                    q.label, model, n_model, q.paper, recomputed, n, model / q.paper);
      }
      j.begin_object().field("ratio", q.label).field("model", model).field("model_cells", n_model)
          .field("paper_text", q.paper).field("paper_table", recomputed).end_object();
    }
    j.end_array();
    // Longest sequences.
    struct search {
      const char* label;
      const char* model;
      const char* profile;
      int gpus, per_node;
      mp::strategy kind;
      double paper;  // tokens
    };
    std::vector<search> searches = {
        {"MEMO 7B, 8 x A800", "7b", "a800", 8, 8, mp::strategy::memo, 1048576},
        {"recompute 7B, 8 x A800", "7b", "a800", 8, 8, mp::strategy::recompute, 384 * 1024},
        {"recompute+plan 7B, 8 x A800", "7b", "a800", 8, 8, mp::strategy::recompute_planned, 640 * 1024},
        {"MEMO 7B, 16 x A800", "7b", "a800", 16, 8, mp::strategy::memo, 2 * 1048576},
        {"FPDT 8B, 4 x A100-80GB", "32,4096,32,128256", "a100", 4, 4, mp::strategy::fpdt, 2 * 1048576},
    };
    if (!quick) {
      searches.push_back({"MEMO 7B, 32 x A800", "7b", "a800", 32, 8, mp::strategy::memo, 4 * 1048576});
      searches.push_back({"MEMO 7B, 64 x A800", "7b", "a800", 64, 8, mp::strategy::memo, 8 * 1048576});
      searches.push_back({"ulysses 7B, 32 x A800", "7b", "a800", 32, 8, mp::strategy::ulysses_zero3, 1536 * 1024});
      searches.push_back({"ulysses 7B, 64 x A800", "7b", "a800", 64, 8, mp::strategy::ulysses_zero3, 1536 * 1024});
    }
    if (!json) std::printf("\nlongest sequence (64K grid): model / paper\n");
    j.key("longest").begin_array();
    for (const auto& s : searches) {
      const mp::cluster c{mp::load_cluster_profile(s.profile), s.gpus, s.per_node};
      const auto r = mp::longest(s.kind, mp::parse_model_shape(s.model), c);
      const double k = r ? r->sequence / 1024 : 0;
      if (!json) {
        std::printf("%-30s %7.0fK / %7.0fK  (%.3f)  MFU %.1f%%\n", s.label, k, s.paper / 1024,
                    k * 1024 / s.paper, r ? 100 * r->mfu : 0.0);
      }
      j.begin_object().field("case", s.label).field("model_k", k).field("paper_k", s.paper / 1024)
          .field("mfu", r ? r->mfu : 0.0).end_object();
    }
    j.end_array().end_object();
    if (json) std::cout << j.str() << "\n";
    std::cout.flush();
    if (!std::cout) {
      std::cerr << "projection_bench: writing to standard output failed\n";
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "projection_bench: error: " << e.what() << "\n";
    return 1;
  }
}
