// projection_bench: the projection model of include/memo/project/ beside
// the three papers' published figures (the rows of project/papers.hpp;
// docs/projections.md discusses them). Nothing is timed: every model
// figure is a projection, printed next to the paper's with the verdict of
// its check (a ratio or MFU within 10%, a longest length within one step of
// the paper's grid, a lower bound the paper ran, or information only).
//  - MEMO: Table 4 (7B on 8 x A800, TP4 CP2) cell by cell, the MFU ratios
//    of full swapping and of MEMO to full recomputation with a plan at each
//    length, 5.3's average ratios, where each variant runs out; Table 3's
//    longest lengths and MFU per model; 5.4's scaling of 7B to 64 GPUs.
//  - FPDT: Table 1's 8B lengths, Tables 3 and 4, the 2M-token claim, and
//    the 8x longer than Ulysses of Table 3 / 5.5 and 5.2.
// Longest lengths are judged on the paper's own grid of lengths (the
// model's 64K-grid answer snapped down to it first).
//  - SPPO: GPT-7B on 32/64/128 A100s: longest lengths against Megatron-LM
//    and DeepSpeed-Ulysses (7.1, 7.3), the speedup over Megatron-LM on the
//    same pipeline (7.1).
// Then a summary: rows per verdict. --quick skips the 32-128 GPU searches
// (smoke test); --json prints one JSON object.
#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "memo/core/command_line.hpp"
#include "memo/core/json.hpp"
#include "memo/project/papers.hpp"

namespace mp = memo::project;

namespace {

int bench_main(int argc, char** argv) {
  bool quick = false, json = false;
  memo::command_arguments args(argc, argv);
  while (!args.done()) {
    const std::string_view arg = args.next();
    if (arg == "--quick") quick = true;
    else if (arg == "--json") json = true;
    else args.unknown();
  }
  {
    struct section {
      const char* name;
      std::vector<mp::paper_row> rows;
    };
    const std::vector<section> sections = {{"MEMO (memo-zhao2024), profile a800", mp::memo_rows(quick)},
                                           {"FPDT (fpdt-yao2024), profile a100x4", mp::fpdt_rows(quick)},
                                           {"SPPO (sppo-chen2025), profile a100", mp::sppo_rows(quick)}};
    std::map<std::string, int> verdicts;
    memo::json_writer j;
    j.begin_object().field("quick", quick).key("rows").begin_array();
    for (const auto& s : sections) {
      if (!json) std::printf("%s\n", s.name);
      for (const auto& row : s.rows) {
        const bool judged = row.check != mp::paper_check::information;
        if (judged) {
          const bool good = row.verdict.starts_with("within") || row.verdict == "consistent";
          ++verdicts[good ? "agrees" : "differs"];
        }
        if (!json) std::printf("  %s\n", mp::row_text(row).c_str());
        mp::write_json(j, row);
      }
    }
    j.end_array().key("summary").begin_object();
    for (const auto& [verdict, count] : verdicts) j.field(verdict, count);
    j.end_object().end_object();
    if (json) {
      std::cout << j.str() << "\n";
    } else {
      std::printf("rows judged: %d agree with the paper, %d differ (docs/projections.md says why)\n",
                  verdicts["agrees"], verdicts["differs"]);
    }
    return 0;
  }
}

}  // namespace

int main(int argc, char** argv) {
  return memo::run_command("projection_bench", "usage: projection_bench [--quick] [--json]\n",
                           [&] { return bench_main(argc, argv); });
}
