#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "memo/pipeline/sppo_solver.hpp"

namespace {

memo::sppo_solver_input small_setting() {
  memo::sppo_solver_input in;
  in.sequence_length = 4096;
  in.hidden = 64;
  in.layers = 8;
  in.nodes = 2;
  in.profile = memo::device_profile{"small", 1e12, 0.5, 1e9, 1e9, 4e9, 1ull << 40, 1ull << 40, 4};
  in.min_tokens = 64;
  in.max_tokens = 512;
  in.layer_overhead_seconds = 2e-6;
  in.inter_node_bytes_per_second = 1e9;
  return in;
}

// Independent reference: every (SP, PP, N) with SP x PP = GPUs, the section
// 6.1 restrictions restated here, and the step time from the flow-shop
// recurrence with point-to-point links, per-subsequence times recomputed
// from FLOPs (24 h^2 per token + 4 h per causal pair).
double reference_step(const memo::sppo_solver_input& in, int sp, int pp, int n) {
  const auto part = memo::flops_balanced_partition(in.sequence_length, n, memo::causal_cost_weights::for_hidden(in.hidden));
  const double h = static_cast<double>(in.hidden), lps = static_cast<double>(in.layers) / pp;
  std::vector<double> f(n), b(n);
  double widest = 0;
  for (int j = 0; j < n; ++j) {
    double flops = 0;
    for (std::uint64_t t = part.begin(j); t < part.end(j); ++t) flops += 24.0 * h * h + 4.0 * h * static_cast<double>(t + 1);
    flops *= lps / sp;
    const double tok = static_cast<double>(part.tokens(j)) / sp;
    widest = std::max(widest, tok);
    double comm = 0;
    if (sp > 1) comm = 4.0 * lps * (sp - 1.0) / sp * std::floor(tok * h * 2.0) / in.profile.interconnect_bytes_per_second;
    const double c = flops / (in.profile.peak_flops * in.profile.efficiency);
    f[j] = c + in.layer_overhead_seconds * lps + comm;
    b[j] = 2 * c + in.layer_overhead_seconds * lps + comm;
  }
  const bool cross = pp > 1 && sp * pp > in.profile.gpus_per_node;
  const double link = pp > 1 ? widest * h * 2.0 / (cross ? in.inter_node_bytes_per_second : in.profile.interconnect_bytes_per_second) : 0.0;
  std::vector<std::vector<double>> fe(pp, std::vector<double>(n)), be(pp, std::vector<double>(n));
  for (int i = 0; i < pp; ++i)
    for (int j = 0; j < n; ++j) fe[i][j] = std::max(i ? fe[i - 1][j] + link : 0.0, j ? fe[i][j - 1] : 0.0) + f[j];
  for (int i = pp - 1; i >= 0; --i)
    for (int j = n - 1; j >= 0; --j) {
      double s = std::max(fe[i][n - 1], fe[pp - 1][n - 1]);
      if (i < pp - 1) s = std::max(s, be[i + 1][j] + link);
      if (j < n - 1) s = std::max(s, be[i][j + 1]);
      be[i][j] = s + b[j];
    }
  return be[0][0];
}

}  // namespace

TEST_CASE("sppo_solver: choice equals brute force over (SP, PP, N) on small settings") {
  for (double overhead : {0.0, 2e-6, 2e-5}) {
    for (int layers : {8, 4}) {
      auto in = small_setting();
      in.layer_overhead_seconds = overhead;
      in.layers = layers;
      const int gpus = in.nodes * in.profile.gpus_per_node;
      double best = 1e300;
      int count = 0;
      for (int sp = 1; sp <= gpus; ++sp)
        for (int pp = 1; pp <= gpus; ++pp)
          for (int n = 1; n <= static_cast<int>(in.sequence_length); ++n) {
            if (sp * pp != gpus || in.profile.gpus_per_node % sp != 0 || layers % pp != 0 || n < pp) continue;
            const std::uint64_t per = in.sequence_length / (static_cast<std::uint64_t>(n) * sp);
            if (per < in.min_tokens || per > in.max_tokens) continue;
            best = std::min(best, reference_step(in, sp, pp, n));
            ++count;
          }
      const auto solution = memo::solve_sppo(in);
      CAPTURE(overhead);
      CAPTURE(layers);
      CHECK(static_cast<int>(solution.evaluated.size()) == count);
      CHECK(solution.best.step_seconds == doctest::Approx(best).epsilon(1e-9));
      CHECK(reference_step(in, solution.best.sp, solution.best.pp, solution.best.n) ==
            doctest::Approx(best).epsilon(1e-9));
    }
  }
}

TEST_CASE("sppo_solver: a narrow token range with SP > 1 still searches every allowed N") {
  // 1500 tokens, 8 to 12 per GPU: with SP 4, N = 29 gives floor(1500 / 116)
  // = 12 tokens, allowed; a lower bound of s / (max SP + 1) = 30 skipped it.
  auto in = small_setting();
  in.sequence_length = 1500;
  in.min_tokens = 8;
  in.max_tokens = 12;
  in.layer_overhead_seconds = 1e-3;
  const int gpus = in.nodes * in.profile.gpus_per_node;
  double best = 1e300;
  int count = 0;
  for (int sp = 1; sp <= gpus; ++sp)
    for (int n = 1; n <= 1500; ++n) {
      const int pp = gpus / sp;
      if (sp * pp != gpus || in.profile.gpus_per_node % sp != 0 || in.layers % pp != 0 || n < pp) continue;
      const std::uint64_t per = in.sequence_length / (static_cast<std::uint64_t>(n) * sp);
      if (per < in.min_tokens || per > in.max_tokens) continue;
      best = std::min(best, reference_step(in, sp, pp, n));
      ++count;
    }
  const auto solution = memo::solve_sppo(in);
  CHECK(static_cast<int>(solution.evaluated.size()) == count);
  CHECK(solution.best.step_seconds == doctest::Approx(best).epsilon(1e-9));
  CHECK(std::any_of(solution.evaluated.begin(), solution.evaluated.end(),
                    [](const memo::sppo_candidate& c) { return c.sp == 4 && c.n == 29; }));
}

TEST_CASE("sppo_solver: bounds at the limits and bad numbers are errors or exact, never a crash") {
  auto in = small_setting();
  in.max_tokens = std::numeric_limits<std::uint64_t>::max();  // no bound: used to divide by zero
  auto wide = small_setting();
  wide.max_tokens = wide.sequence_length;
  CHECK(memo::solve_sppo(in).best == memo::solve_sppo(wide).best);
  struct bad {
    std::function<void(memo::sppo_solver_input&)> set;
    std::string message;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const bad cases[] = {
      {[](auto& i) { i.inter_node_bytes_per_second = 0; }, "inter_node_bytes_per_second must be a finite number > 0"},
      {[&](auto& i) { i.inter_node_bytes_per_second = nan; }, "inter_node_bytes_per_second must be a finite number > 0"},
      {[&](auto& i) { i.layer_overhead_seconds = nan; }, "layer_overhead_seconds must be a finite number >= 0"},
      {[&](auto& i) { i.model_state_bytes_per_parameter = nan; }, "model_state_bytes_per_parameter must be a finite"},
      {[](auto& i) { i.model_state_bytes_per_parameter = -1e30; }, "model_state_bytes_per_parameter must be a finite"},
      {[](auto& i) { i.bytes_per_element = 0; }, "bytes_per_element must be >= 1, got 0"},
      {[](auto& i) { i.profile.interconnect_bytes_per_second = 0; }, "needs a finite interconnect_bytes_per_second > 0"},
      // 4096 tokens, 1 to 512 per GPU: N from floor(4096 / SP / 513) + 1 to
      // 4096 / SP over SP 1, 2, 4: 4089 + 2045 + 1023 counts.
      {[](auto& i) { i.min_tokens = 1; i.max_candidates = 1000; },
       "solve_sppo: more than max_candidates 1000 subsequence counts to simulate for 4096 tokens with 1 to 512 "
       "tokens per GPU (raise min_tokens)"},
      // The counts of N for SP 1 and 2 sum past 2^64 (s + s / 2 = 2^64): no wrap past the bound.
      {[](auto& i) {
         i.sequence_length = 12297829382473034411ull;
         i.min_tokens = 1;
         i.max_tokens = i.sequence_length;
         i.profile.gpus_per_node = 2;
         i.nodes = 1;
       },
       "solve_sppo: more than max_candidates 100000 subsequence counts"},
      // Subsequence counts beyond int, within max_candidates: refused before any simulation.
      {[](auto& i) {
         i.sequence_length = 1ull << 40;
         i.min_tokens = (1ull << 40) / ((1ull << 31) + 5);
         i.max_tokens = i.sequence_length;
         i.max_candidates = std::numeric_limits<std::uint64_t>::max();
       },
       "exceed 2147483647 (raise min_tokens)"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.message);
    auto i = small_setting();
    c.set(i);
    CHECK_THROWS_WITH_AS(memo::solve_sppo(i), doctest::Contains(c.message.c_str()), memo::error);
  }
  // A sequence of 2^64 - 1 tokens with no upper bound: the bound's + 1 used to wrap to a division by zero.
  auto whole = small_setting();
  whole.sequence_length = whole.max_tokens = std::numeric_limits<std::uint64_t>::max();
  whole.min_tokens = whole.sequence_length / 4;
  CHECK_THROWS_WITH_AS(memo::solve_sppo(whole), doctest::Contains("no (SP, PP, N) satisfies"), memo::error);
  // One node: the inter-node link is never used, so it needs no value.
  auto one_node = small_setting();
  one_node.nodes = 1;
  one_node.inter_node_bytes_per_second = 0;
  CHECK_NOTHROW(memo::solve_sppo(one_node));
}

TEST_CASE("sppo_solver: GPT-7B, 512K tokens, 32 A800 GPUs stays inside section 6.1's space") {
  memo::sppo_solver_input in;
  in.sequence_length = 512 * 1024;
  in.hidden = 4096;
  in.layers = 32;
  in.nodes = 4;
  in.profile = memo::device_profile::a800_80gb();
  in.layer_overhead_seconds = 50e-6;
  const auto solution = memo::solve_sppo(in);
  const auto& c = solution.best;
  MESSAGE("chosen SP=", c.sp, " PP=", c.pp, " N=", c.n, " step=", c.step_seconds, " s bubble=", c.bubble_ratio);
  CHECK(8 % c.sp == 0);
  CHECK(c.sp * c.pp == 32);
  const std::uint64_t per = in.sequence_length / (static_cast<std::uint64_t>(c.n) * c.sp);
  CHECK(per >= 2048);
  CHECK(per <= 16384);
  // The paper's choice is in the searched space; the solver is at least as fast.
  CHECK(memo::sppo_candidate_allowed(in, 8, 4, 32));
  const auto paper = memo::simulate_sppo(memo::sppo_candidate_schedule(in, 8, 4, 32), in.profile);
  MESSAGE("paper's SP=8 PP=4 N=32 step=", paper.step_seconds, " s bubble=", paper.bubble_ratio);
  CHECK(c.step_seconds <= paper.step_seconds);
}

TEST_CASE("sppo_solver: an empty search space is an error naming the restriction") {
  auto in = small_setting();
  in.min_tokens = 100000;
  in.max_tokens = 200000;
  CHECK_THROWS_WITH_AS(memo::solve_sppo(in), doctest::Contains("restrictions"), memo::error);
  in = small_setting();
  in.layers = 0;
  CHECK_THROWS_AS(memo::solve_sppo(in), memo::error);
}
