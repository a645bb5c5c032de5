#include <doctest/doctest.h>

#include <limits>
#include <vector>

#include "memo/pipeline/sppo_offload.hpp"

namespace {

memo::sppo_offload_problem hand_problem() {
  memo::sppo_offload_problem p;
  p.tokens = {4, 2, 1};
  p.kv_bytes_per_token = 10;
  p.other_bytes_per_token = 100;
  p.layers = 1;
  p.compute_seconds = 1.0;
  p.bandwidth_bytes_per_second = 150.0;  // M_threshold = 150 bytes
  p.host_budget_bytes = 1u << 30;
  return p;
}

}  // namespace

TEST_CASE("sppo_offload: alpha_i A_i equals M_threshold (hand-worked)") {
  // A = {400, 200, 100}; alpha = 150/400, 150/200, min(1, 150/100).
  const auto plan = memo::plan_sppo_offload(hand_problem());
  CHECK(plan.threshold_bytes == doctest::Approx(150.0));
  REQUIRE(plan.alpha.size() == 3);
  CHECK(plan.alpha[0] == doctest::Approx(0.375));
  CHECK(plan.alpha[1] == doctest::Approx(0.75));
  CHECK(plan.alpha[2] == doctest::Approx(1.0));
  CHECK(plan.offloaded_bytes[0] == doctest::Approx(150.0));
  CHECK(plan.offloaded_bytes[1] == doctest::Approx(150.0));
  CHECK(plan.offloaded_bytes[2] == doctest::Approx(100.0));
}

TEST_CASE("sppo_offload: device memory follows M_i = M_{i-1} + A_i - alpha_{i-1} A_{i-1} plus resident K/V") {
  // M = {400, 400+200-150 = 450, 450+100-150 = 400}; K/V {40, 60, 70}.
  const auto plan = memo::plan_sppo_offload(hand_problem());
  CHECK(plan.device_bytes[0] == doctest::Approx(440.0));
  CHECK(plan.device_bytes[1] == doctest::Approx(510.0));
  CHECK(plan.device_bytes[2] == doctest::Approx(470.0));
  CHECK(plan.peak_device_bytes == doctest::Approx(510.0));
  CHECK(plan.host_bytes == doctest::Approx(400.0));
}

TEST_CASE("sppo_offload: the host budget caps every subsequence's share") {
  auto p = hand_problem();
  p.host_budget_bytes = 300;  // 100 bytes per subsequence
  const auto plan = memo::plan_sppo_offload(p);
  CHECK(plan.alpha[0] == doctest::Approx(0.25));
  CHECK(plan.alpha[1] == doctest::Approx(0.5));
  CHECK(plan.alpha[2] == doctest::Approx(1.0));
}

TEST_CASE("sppo_offload: bad input is an error") {
  auto p = hand_problem();
  p.tokens = {};
  CHECK_THROWS_AS(memo::plan_sppo_offload(p), memo::error);
  p = hand_problem();
  p.tokens = {3, 0};
  CHECK_THROWS_AS(memo::plan_sppo_offload(p), memo::error);
  p = hand_problem();
  p.compute_seconds = 0.0;
  CHECK_THROWS_AS(memo::plan_sppo_offload(p), memo::error);
  // With nothing to offload the alpha LP is never asked: the problem's own
  // check still refuses bad numbers.
  p = hand_problem();
  p.other_bytes_per_token = 0;
  p.compute_seconds = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_WITH_AS(memo::plan_sppo_offload(p), doctest::Contains("compute_seconds must be a finite number > 0"),
                       memo::error);
  p = hand_problem();
  p.other_bytes_per_token = 0;
  p.bandwidth_bytes_per_second = -1.0;
  CHECK_THROWS_WITH_AS(memo::plan_sppo_offload(p),
                       doctest::Contains("bandwidth_bytes_per_second must be a finite number > 0, got -1"), memo::error);
}
