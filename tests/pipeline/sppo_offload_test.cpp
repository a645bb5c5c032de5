#include "memo/pipeline/sppo_offload.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "memo/core/error.hpp"
#include "pipeline_test_support.hpp"

TEST_CASE("sppo_offload: alpha_i A_i equals the threshold and M_i follows the recurrence (hand-worked)") {
  // Activations shrinking 100, 80, 60, 40 bytes (a FLOPs-balanced partition
  // makes later subsequences shorter); 10 B/s for 3 s of compute: 30 bytes
  // can be offloaded behind each subsequence.
  const std::vector<memo::sppo_activation> a{{100, 0}, {80, 0}, {60, 0}, {40, 0}};
  const auto plan = memo::sppo_offload_ratios(a, 10.0, 3.0);
  CHECK(plan.threshold_bytes == doctest::Approx(30.0));
  const std::vector<double> alpha{0.3, 0.375, 0.5, 0.75};
  // M_0 = 100; M_1 = 100 + 80 - 30 = 150; M_2 = 150 + 60 - 30 = 180; M_3 = 180 + 40 - 30 = 190.
  const std::vector<double> memory{100, 150, 180, 190};
  REQUIRE(plan.alpha.size() == 4);
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(plan.alpha[i] == doctest::Approx(alpha[i]));
    CHECK(plan.memory_bytes[i] == doctest::Approx(memory[i]));
  }
  CHECK(plan.peak_bytes == doctest::Approx(190.0));
}

TEST_CASE("sppo_offload: resident K/V never leave and small subsequences are offloaded whole") {
  // Threshold 50: the 20-byte subsequence goes whole (alpha 1), K/V (5 bytes each) stay.
  const std::vector<memo::sppo_activation> a{{100, 5}, {20, 5}, {100, 5}};
  const auto plan = memo::sppo_offload_ratios(a, 25.0, 2.0);
  CHECK(plan.alpha[0] == doctest::Approx(0.5));
  CHECK(plan.alpha[1] == doctest::Approx(1.0));
  CHECK(plan.alpha[2] == doctest::Approx(0.5));
  // M_0 = 105; M_1 = 105 + 25 - 50 = 80; M_2 = 80 + 105 - 20 = 165.
  CHECK(plan.memory_bytes[0] == doctest::Approx(105));
  CHECK(plan.memory_bytes[1] == doctest::Approx(80));
  CHECK(plan.memory_bytes[2] == doctest::Approx(165));
}

TEST_CASE("sppo_offload: bad input is an error") {
  CHECK(memo_test::error_of([] { (void)memo::sppo_offload_ratios({}, 1, 1); }).find("no subsequences") !=
        std::string::npos);
  CHECK(memo_test::error_of([] {
          (void)memo::sppo_offload_ratios({{1, 0}}, 0, 1);
        }).find("bandwidth") != std::string::npos);
  CHECK(memo_test::error_of([] {
          (void)memo::sppo_offload_ratios({{1, 0}, {-1, 0}}, 1, 1);
        }).find("subsequence 1") != std::string::npos);
}
