#include "memo/pipeline/sppo_partition.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "memo/core/error.hpp"
#include "pipeline_test_support.hpp"

namespace {

// Brute force: every way to place N - 1 cuts in (0, S), the smallest
// largest cost, with the cost summed token by token (token t pays linear +
// pair (t + 1)) rather than through the closed form.
double brute_force_best(std::int64_t S, std::int64_t N, double linear, double pair) {
  auto cost = [&](std::int64_t a, std::int64_t b) {
    double c = 0;
    for (std::int64_t t = a; t < b; ++t) c += linear + pair * static_cast<double>(t + 1);
    return c;
  };
  double best = std::numeric_limits<double>::infinity();
  std::vector<std::int64_t> cuts(static_cast<std::size_t>(N - 1));
  // Enumerate combinations of N - 1 cut positions from 1..S-1.
  auto recurse = [&](auto&& self, std::size_t k, std::int64_t from) -> void {
    if (k == cuts.size()) {
      double worst = 0;
      std::int64_t a = 0;
      for (const std::int64_t b : cuts) worst = std::max(worst, cost(a, b)), a = b;
      worst = std::max(worst, cost(a, S));
      best = std::min(best, worst);
      return;
    }
    for (std::int64_t x = from; x <= S - static_cast<std::int64_t>(cuts.size() - k); ++x) {
      cuts[k] = x;
      self(self, k + 1, x + 1);
    }
  };
  recurse(recurse, 0, 1);
  return best;
}

void check_is_partition(const memo::sequence_partition& p, std::int64_t S, std::int64_t N) {
  REQUIRE(p.count() == static_cast<std::size_t>(N));
  CHECK(p.bounds.front() == 0);
  CHECK(p.bounds.back() == S);
  for (std::size_t i = 0; i < p.count(); ++i) CHECK(p.length(i) >= 1);
}

}  // namespace

TEST_CASE("sppo_partition: equal partition lengths differ by at most one and cover the sequence") {
  for (std::int64_t S : {1, 7, 8, 100, 131072}) {
    for (std::int64_t N : {1, 2, 3, 7}) {
      if (N > S) continue;
      const auto p = memo::equal_partition(S, N);
      check_is_partition(p, S, N);
      std::int64_t lo = S, hi = 0;
      for (std::size_t i = 0; i < p.count(); ++i) lo = std::min(lo, p.length(i)), hi = std::max(hi, p.length(i));
      CHECK(hi - lo <= 1);
    }
  }
}

TEST_CASE("sppo_partition: the FLOPs-balanced partition's largest cost equals the brute-force optimum") {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> weight(0.0, 4.0);
  for (int trial = 0; trial < 60; ++trial) {
    const std::int64_t S = 1 + static_cast<std::int64_t>(rng() % 13);
    const std::int64_t N =
        1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(std::min<std::int64_t>(S, 4)));
    const double linear = trial % 5 == 0 ? 0.0 : weight(rng), pair = trial % 5 == 3 ? 0.0 : weight(rng) + 0.1;
    CAPTURE(S);
    CAPTURE(N);
    CAPTURE(linear);
    CAPTURE(pair);
    const memo::causal_cost_model model{linear, pair};
    const auto p = memo::flops_balanced_partition(S, N, model);
    check_is_partition(p, S, N);
    CHECK(p.max_cost(model) == doctest::Approx(brute_force_best(S, N, linear, pair)).epsilon(1e-9));
  }
}

TEST_CASE("sppo_partition: with attention-dominated cost later subsequences are shorter, near S sqrt(k/N)") {
  // Pure pair cost: [a, b) costs ~ (b^2 - a^2)/2, so the balanced bounds are
  // b_k = S sqrt(k / N) up to rounding.
  const std::int64_t S = 1 << 20, N = 8;
  const auto p = memo::flops_balanced_partition(S, N, {0.0, 1.0});
  check_is_partition(p, S, N);
  for (std::int64_t k = 1; k < N; ++k) {
    const double want = static_cast<double>(S) * std::sqrt(static_cast<double>(k) / N);
    CHECK(std::abs(static_cast<double>(p.bounds[static_cast<std::size_t>(k)]) - want) <= 2.0);
  }
  for (std::size_t i = 1; i < p.count(); ++i) CHECK(p.length(i) < p.length(i - 1));
  // And the largest cost beats the equal split's by the expected margin:
  // equal split's last part costs (1 - (7/8)^2) / (1/8) = 1.875 x the balanced one.
  const double ratio = memo::equal_partition(S, N).max_cost({0.0, 1.0}) / p.max_cost({0.0, 1.0});
  CHECK(ratio == doctest::Approx(1.875).epsilon(1e-3));
}

TEST_CASE("sppo_partition: impossible requests are errors naming the numbers") {
  CHECK(memo_test::error_of([] { (void)memo::equal_partition(3, 4); }).find("3 tokens cannot be split into 4") !=
        std::string::npos);
  CHECK(memo_test::error_of([] { (void)memo::equal_partition(3, 0); }).find("into 0") != std::string::npos);
  CHECK(memo_test::error_of([] {
          (void)memo::flops_balanced_partition(8, 2, {0.0, 0.0});
        }).find("not both zero") != std::string::npos);
}
