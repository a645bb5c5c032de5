#include "memo/project/papers.hpp"

#include <doctest/doctest.h>

#include <cmath>

namespace mp = memo::project;

TEST_CASE("papers: verdicts by hand") {
  mp::paper_row row;
  row.check = mp::paper_check::within_10_percent;
  row.paper_value = 1.22;
  row.model_value = 1.30;
  mp::detail::judge(row);
  CHECK(row.verdict == "within 10%");
  row.model_value = 1.40;
  mp::detail::judge(row);
  CHECK(row.verdict == "off by +15%");
  row.check = mp::paper_check::within_grid_step;
  row.paper_value = 1024;
  row.grid = 128;
  row.model_value = 896;
  mp::detail::judge(row);
  CHECK(row.verdict == "within one step");
  row.model_value = 1408;
  mp::detail::judge(row);
  CHECK(row.verdict == "+3.0 grid steps");
  row.check = mp::paper_check::at_least;
  mp::detail::judge(row);
  CHECK(row.verdict == "consistent");
  row.model_value = 512;
  mp::detail::judge(row);
  CHECK(row.verdict == "below the paper");
  row.model_value = std::nan("");
  mp::detail::judge(row);
  CHECK(row.verdict == "no model figure");
}

TEST_CASE("papers: MEMO's quoted averages agree with its Table 4 cells") {
  // 5.3 quotes 1.51x, 1.22x and 1.13x; the rows compare the model with the
  // quoted figures, so check the quotes against the table they summarise.
  const double recompute[] = {41.19, 23.00, 29.07, 25.67};
  const double planned[] = {42.91, 43.17, 42.05, 42.49, 41.90, 42.15};
  const double swapped[] = {37.40, 46.33, 53.62};
  const double memo[] = {47.99, 50.96, 53.62, 53.04, 51.84, 52.59};
  double a = 0, b = 0, c = 0;
  for (int i = 0; i < 4; ++i) a += planned[i] / recompute[i] / 4;
  for (int i = 0; i < 6; ++i) b += memo[i] / planned[i] / 6;
  for (int i = 0; i < 3; ++i) c += memo[i] / swapped[i] / 3;
  CHECK(a == doctest::Approx(1.51).epsilon(0.01));
  CHECK(b == doctest::Approx(1.22).epsilon(0.01));
  CHECK(c == doctest::Approx(1.13).epsilon(0.01));
}

TEST_CASE("papers: every row names its source, both figures and a verdict") {
  for (const auto& rows : {mp::memo_rows(true), mp::fpdt_rows(true)}) {
    REQUIRE_FALSE(rows.empty());
    for (const auto& row : rows) {
      CHECK_FALSE(row.source.empty());
      CHECK_FALSE(row.paper_text.empty());
      CHECK_FALSE(row.model_text.empty());
      CHECK_FALSE(row.verdict.empty());
      if (row.check == mp::paper_check::within_grid_step) CHECK(row.grid > 0);
      CHECK(mp::row_text(row).find(row.verdict) != std::string::npos);
    }
  }
  // Table 4 cell by cell: 4 variants x 8 lengths, then 3 ratios and 4 longest rows.
  const auto memo = mp::memo_rows(true);
  int table4 = 0;
  for (const auto& row : memo) table4 += row.source == "Table 4";
  CHECK(table4 == 4 * 8 + 4);
  memo::json_writer j;
  j.begin_array();
  for (const auto& row : memo) mp::write_json(j, row);
  j.end_array();
  CHECK(j.str().find("\"verdict\":") != std::string::npos);
}

TEST_CASE("papers: the distributed layer's settings are FPDT's 8B at 256K-2M and SPPO's 7B at 1M-4M") {
  const auto rows = mp::distributed_rows(true);
  REQUIRE(rows.size() == 4 + 3);
  CHECK(rows[0].paper == "FPDT");
  CHECK(rows[0].profile == "a100x4");
  CHECK(rows[0].paper_value == 47.6);  // FPDT Table 4, sparsity 0
  CHECK(rows[4].paper == "SPPO");
  CHECK(rows[4].profile == "a100");
  CHECK(rows[4].paper_text == "trained");  // 1M on 32 GPUs
}
