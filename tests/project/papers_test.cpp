#include "memo/project/papers.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

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

TEST_CASE("papers: a longest length is judged on the paper's own grid, the model's snapped down to it") {
  // MEMO Table 4: 64K, 128K, 256K, 384K, ... (128K apart from 128K on).
  mp::paper_row row;
  row.check = mp::paper_check::within_grid_step;
  row.grid = 128;
  row.grid_points = {64, 128, 256};
  row.paper_value = 256;  // full swapping: 256K ran, 384K did not
  row.model_value = 448;  // a 64K search: 448K fits, 512K not
  row.model_text = "448K";
  mp::detail::judge(row);
  CHECK(row.model_on_grid == 384);  // on Table 4's lengths: 384K runs, 512K not
  CHECK(row.verdict == "within one step");
  CHECK(row.model_text == "448K = 384K on the paper's grid");
  row.paper_value = 640;
  row.model_value = 384;
  mp::detail::judge(row);
  CHECK(row.verdict == "-2.0 grid steps");
  row.paper_value = 128;  // 64K and 128K are one step apart, 128K and 256K too
  row.model_value = 300;
  mp::detail::judge(row);
  CHECK(row.model_on_grid == 256);
  CHECK(row.verdict == "within one step");
  row.model_value = 64;
  mp::detail::judge(row);
  CHECK(row.verdict == "within one step");
  // Beyond the table the grid goes on 128K apart: 1280K against 1920K is 5 steps.
  row.paper_value = 1280;
  row.model_value = 1920;
  mp::detail::judge(row);
  CHECK(row.verdict == "+5.0 grid steps");
  // A doubling grid (FPDT): 5760K is 4M on it, 384K is 256K.
  mp::paper_row twice;
  twice.check = mp::paper_check::within_grid_step;
  twice.grid_points = {64};
  twice.grid_doubles = true;
  twice.paper_value = 4096;
  twice.model_value = 5760;
  mp::detail::judge(twice);
  CHECK(twice.model_on_grid == 4096);
  CHECK(twice.verdict == "within one step");
  twice.paper_value = 512;
  twice.model_value = 2368;
  mp::detail::judge(twice);
  CHECK(twice.model_on_grid == 2048);
  CHECK(twice.verdict == "+2.0 grid steps");
}

TEST_CASE("papers: Table 4's ratios to full recomputation with a plan, length by length") {
  // Paper side by hand from Table 4: swap + plan at 64K-256K, MEMO at 64K-640K.
  const auto rows = mp::memo_rows(true);
  std::vector<mp::paper_row> ratios;
  for (const auto& row : rows) {
    if (row.source == "Table 4 (ratio)") ratios.push_back(row);
  }
  REQUIRE(ratios.size() == 3 + 6);
  CHECK(ratios[0].quantity == "MFU ratio swap + plan / recompute + plan at 64K");
  CHECK(ratios[0].paper_value == doctest::Approx(37.40 / 42.91));
  CHECK(ratios[2].paper_value == doctest::Approx(53.62 / 42.05));
  CHECK(ratios[3].quantity == "MFU ratio MEMO / recompute + plan at 64K");
  CHECK(ratios[8].quantity == "MFU ratio MEMO / recompute + plan at 640K");
  CHECK(ratios[8].paper_value == doctest::Approx(52.59 / 42.15));
  for (const auto& row : ratios) {
    CHECK(row.check == mp::paper_check::within_10_percent);
    CHECK(row.verdict != "-");
  }
}

TEST_CASE("papers: FPDT's 8x longer than Ulysses is a row of its own") {
  const auto rows = mp::fpdt_rows(true);
  int found = 0;
  for (const auto& row : rows) {
    if (row.quantity != "ratio of longest sequences") continue;
    ++found;
    CHECK(row.source == "5.2");
    CHECK(row.paper_value == 8.0);
    CHECK(row.check == mp::paper_check::within_10_percent);
  }
  CHECK(found == 1);  // Table 3's is in the full run only
}

TEST_CASE("papers: SPPO's multiplexing gain on 13B, and its speedups on one pipeline") {
  const auto rows = mp::sppo_rows(true);
  int found = 0;
  for (const auto& row : rows) {
    if (row.source != "7.2, Figure 11(a)") continue;
    ++found;
    CHECK(row.paper_value == doctest::Approx(1.44 / 1.23));
    CHECK(row.check == mp::paper_check::within_10_percent);
    // Multiplexing fills bubbles and adds an exchange: it cannot shorten
    // the step beyond filling every bubble, (PP - 1 + N) / N with PP 8
    // and N 32; and its exchange and hand-over (about 10 s of a 44 s
    // step) cannot make it a third longer.
    REQUIRE(std::isfinite(row.model_value));
    CHECK(row.model_value > 0.75);
    CHECK(row.model_value <= (8 - 1 + 32) / 32.0 + 1e-12);
  }
  CHECK(found == 1);
  {
    // The same setting on a network that costs nothing: the exchange and
    // the hand-over are free, so multiplexing only fills bubbles, and the
    // step shortens, by at most that bound.
    mp::cluster free{mp::load_cluster_profile("a100"), 64, 8};
    free.profile.intra_node_bytes_per_second = free.profile.inter_node_bytes_per_second = 1e18;
    const auto m13 = mp::parse_model_shape("13b");
    const double inf = std::numeric_limits<double>::infinity();
    const auto plain = mp::detail::sppo(mp::strategy::sppo, m13, free, 512 * 1024, 8, 8, 32, inf,
                                        mp::detail::sppo_pipeline::plain);
    const auto split = mp::detail::sppo(mp::strategy::sppo, m13, free, 512 * 1024, 8, 8, 32, inf,
                                        mp::detail::sppo_pipeline::multiplexed);
    REQUIRE(plain.fits());
    REQUIRE(split.fits());
    CHECK(plain.step_seconds / split.step_seconds > 1.05);
    CHECK(plain.step_seconds / split.step_seconds <= (8 - 1 + 32) / 32.0 + 1e-12);
  }
  // 7.1's speedups over Megatron-LM on SPPO's own (SP, PP, N): Megatron-LM
  // recomputes the forward, so more than 1, and about 4 / 3 at most (the
  // backward twice the forward; less with attention's heavier backward,
  // a little more where multiplexing fills SPPO's bubbles).
  for (const auto& row : rows) {
    if (row.source != "7.1" || row.quantity.find("speedup") == std::string::npos) continue;
    REQUIRE(std::isfinite(row.model_value));
    CHECK(row.model_value > 1.0);
    CHECK(row.model_value < 4.0 / 3.0 + 0.05);
  }
}
