#include "memo/core/spread.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

TEST_CASE("spread: odd and even counts against a hand-worked median") {
  const auto odd = memo::spread_of({5.0, 1.0, 3.0});
  CHECK(odd.median == 3.0);
  CHECK(odd.min == 1.0);
  CHECK(odd.max == 5.0);
  CHECK(odd.samples == 3);
  const auto even = memo::spread_of({4.0, 1.0, 2.0, 10.0});
  CHECK(even.median == 3.0);  // (2 + 4) / 2
  CHECK(even.min == 1.0);
  CHECK(even.max == 10.0);
}

TEST_CASE("spread: no samples is NaN, never a zero that reads as a measurement") {
  const auto none = memo::spread_of({});
  CHECK(none.samples == 0);
  CHECK(std::isnan(none.median));
  CHECK(std::isnan(none.min));
  CHECK(std::isnan(none.max));
}

TEST_CASE("spread: the median splits random samples in half") {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> value(-1e6, 1e6);
  for (int n = 1; n < 40; n += 2) {
    std::vector<double> samples(static_cast<std::size_t>(n));
    for (auto& s : samples) s = value(rng);
    const auto s = memo::spread_of(samples);
    const auto below = std::count_if(samples.begin(), samples.end(), [&](double x) { return x < s.median; });
    const auto above = std::count_if(samples.begin(), samples.end(), [&](double x) { return x > s.median; });
    CHECK(below == n / 2);
    CHECK(above == n / 2);
    CHECK(s.min == *std::min_element(samples.begin(), samples.end()));
    CHECK(s.max == *std::max_element(samples.begin(), samples.end()));
  }
}
