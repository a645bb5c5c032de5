#include "memo/pipeline/sppo_schedule.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "memo/core/device_profile.hpp"
#include "memo/core/error.hpp"
#include "pipeline_test_support.hpp"

namespace {

using ids = std::vector<int>;

ids list(memo::id_range r) {
  ids out;
  for (int x = r.begin; x < r.end; ++x) out.push_back(x);
  return out;
}

// Every op carries its duration: the profile's rates do not enter.
memo::device_profile any_profile() { return memo::device_profile::a800_80gb(); }

// The pipeline's step time from its recurrences, independent of the
// schedule and the simulator: F(i, j) ends at max(F(i-1, j), F(i, j-1)) + f_j;
// backward runs last stage and last subsequence first.
double wavefront_step(int P, int N, const std::vector<memo::sppo_op_cost>& c) {
  std::vector<std::vector<double>> f(P, std::vector<double>(N)), b(P, std::vector<double>(N));
  for (int i = 0; i < P; ++i) {
    for (int j = 0; j < N; ++j) {
      const double ready = std::max(i > 0 ? f[i - 1][j] : 0.0, j > 0 ? f[i][j - 1] : 0.0);
      f[i][j] = ready + c[j].forward_seconds;
    }
  }
  // Each stream runs its forwards before its backwards.
  for (int i = P - 1; i >= 0; --i) {
    for (int j = N - 1; j >= 0; --j) {
      double ready = f[i][N - 1];
      if (i == P - 1) ready = std::max(ready, f[P - 1][N - 1]);
      if (i + 1 < P) ready = std::max(ready, b[i + 1][j]);
      if (j + 1 < N) ready = std::max(ready, b[i][j + 1]);
      b[i][j] = ready + c[j].backward_seconds;
    }
  }
  return b[0][0];
}

}  // namespace

TEST_CASE("sppo_schedule: the phases of PP = 4, N = 8 are Table 3 of the paper") {
  // Table 3, transcribed: Left, Steady, Right ids, Left SP and Right SP ranges per stage.
  const ids left[4] = {{0, 1, 2}, {0, 1}, {0}, {}};
  const ids steady[4] = {{3, 4, 5, 6, 7}, {2, 3, 4, 5, 6}, {1, 2, 3, 4, 5}, {0, 1, 2, 3, 4}};
  const ids right[4] = {{}, {7}, {6, 7}, {5, 6, 7}};
  const ids left_sp[4] = {{0, 1, 2, 3}, {1, 2, 3}, {2, 3}, {}};
  const ids right_sp[4] = {{}, {0, 1}, {0, 1, 2}, {0, 1, 2, 3}};
  for (int i = 0; i < 4; ++i) {
    CAPTURE(i);
    const auto p = memo::sppo_phases(4, 8, i);
    CHECK(list(p.left) == left[i]);
    CHECK(list(p.steady) == steady[i]);
    CHECK(list(p.right) == right[i]);
    CHECK(list(p.left_sp) == left_sp[i]);
    CHECK(list(p.right_sp) == right_sp[i]);
  }
}

TEST_CASE("sppo_schedule: every stage's phases split the subsequences, at every shape") {
  for (int P = 1; P <= 6; ++P) {
    for (int N = P; N <= P + 5; ++N) {
      for (int i = 0; i < P; ++i) {
        const auto p = memo::sppo_phases(P, N, i);
        CHECK(p.left.size() + p.steady.size() + p.right.size() == N);
        CHECK(p.steady.size() == N - P + 1);
        // A subsequence is in Left exactly when later stages have not started yet.
        for (int j = 0; j < N; ++j) CHECK(p.left.contains(j) == (j + i < P - 1));
      }
    }
  }
}

TEST_CASE("sppo_schedule: uniform costs simulate to the section's (PP - 1 + N) / N x F(N)") {
  for (int P : {1, 2, 4}) {
    for (int N : {4, 8, 16}) {
      if (N < P) continue;
      CAPTURE(P);
      CAPTURE(N);
      const std::vector<memo::sppo_op_cost> costs(static_cast<std::size_t>(N), {1.0, 2.0});
      const auto s = memo::build_sppo_schedule({.stages = P, .subsequences = N, .costs = costs});
      const auto t = s.schedule.simulate(any_profile());
      const auto formula = memo::sppo_bubble_formula(P, N, N * 3.0);
      CHECK(t.makespan_seconds() == doctest::Approx(formula.step_seconds));
      CHECK(formula.bubble_ratio == doctest::Approx(static_cast<double>(P - 1) / N));
      // Every stage idles exactly the bubble.
      for (int i = 0; i < P; ++i) {
        CHECK(t.makespan_seconds() - t.busy_seconds("stage " + std::to_string(i)) ==
              doctest::Approx(formula.bubble_seconds));
      }
    }
  }
}

TEST_CASE("sppo_schedule: unequal costs simulate to the wavefront recurrence") {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> d(0.1, 3.0);
  for (int trial = 0; trial < 20; ++trial) {
    const int P = 1 + static_cast<int>(rng() % 4), N = P + static_cast<int>(rng() % 5);
    std::vector<memo::sppo_op_cost> costs;
    for (int j = 0; j < N; ++j) costs.push_back({d(rng), d(rng)});
    const auto s = memo::build_sppo_schedule({.stages = P, .subsequences = N, .costs = costs});
    CHECK(s.schedule.simulate(any_profile()).makespan_seconds() == doctest::Approx(wavefront_step(P, N, costs)));
  }
}

TEST_CASE("sppo_schedule: multiplexing keeps the work and shortens the step into the bubbles") {
  for (int P : {2, 4}) {
    for (int N : {4, 8}) {
      CAPTURE(P);
      CAPTURE(N);
      const std::vector<memo::sppo_op_cost> costs(static_cast<std::size_t>(N), {1.0, 2.0});
      const auto plain =
          memo::build_sppo_schedule({.stages = P, .subsequences = N, .costs = costs}).schedule.simulate(any_profile());
      const auto mux = memo::build_sppo_schedule({.stages = P, .subsequences = N, .costs = costs, .multiplexed = true})
                           .schedule.simulate(any_profile());
      double plain_work = 0, mux_work = 0;
      for (int i = 0; i < P; ++i) {
        plain_work += plain.busy_seconds("stage " + std::to_string(i));
        mux_work += mux.busy_seconds("stage " + std::to_string(i));
      }
      CHECK(mux_work == doctest::Approx(plain_work));
      CHECK(plain_work == doctest::Approx(P * N * 3.0));
      CHECK(mux.makespan_seconds() < plain.makespan_seconds());
      // Never below perfect balance.
      CHECK(mux.makespan_seconds() >= doctest::Approx(N * 3.0));
    }
  }
}

TEST_CASE("sppo_schedule: bad shapes are errors naming the numbers") {
  CHECK(memo_test::error_of([] { (void)memo::sppo_phases(4, 3, 0); }).find("4 stages and 3 subsequences") !=
        std::string::npos);
  CHECK(memo_test::error_of([] { (void)memo::sppo_phases(4, 8, 4); }).find("stage 4 is outside [0, 4)") !=
        std::string::npos);
  CHECK(memo_test::error_of([] {
          (void)memo::build_sppo_schedule({.stages = 2, .subsequences = 2, .costs = {{1, 1}}});
        }).find("1 subsequence costs for N = 2") != std::string::npos);
}
