#include "memo/core/lp_solve.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <random>

TEST_CASE("lp_solve: a 2-variable LP matches its vertex enumeration") {
  // maximise c0 x + c1 y  s.t.  x + y <= b,  0 <= x <= u,  y >= 0.
  // The optimum is at a vertex of the polygon; enumerate them as reference.
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> value(0.5, 10.0);
  for (int trial = 0; trial < 50; ++trial) {
    const double c0 = value(rng), c1 = value(rng), b = value(rng), u = value(rng);
    memo::lp_model lp(2);
    const std::array<int, 2> cols{0, 1};
    const std::array<double, 2> ones{1.0, 1.0};
    lp.add_row(cols, ones, memo::lp_sense::less_equal, b);
    lp.set_bounds(0, 0.0, u);
    const std::array<double, 2> objective{c0, c1};
    lp.set_objective(cols, objective, true);
    REQUIRE(lp.solve() == memo::lp_outcome::optimal);
    const double xu = std::min(u, b);
    const double best = std::max({0.0, c1 * b, c0 * xu + c1 * (b - xu)});
    CHECK(lp.objective() == doctest::Approx(best).epsilon(1e-9));
  }
}

TEST_CASE("lp_solve: infeasible and unbounded problems are reported, not thrown") {
  {
    memo::lp_model lp(1);
    const std::array<int, 1> col{0};
    const std::array<double, 1> one{1.0};
    lp.add_row(col, one, memo::lp_sense::greater_equal, 5.0);
    lp.set_bounds(0, 0.0, 3.0);
    lp.set_objective(col, one, true);
    CHECK(lp.solve() == memo::lp_outcome::infeasible);
  }
  {
    memo::lp_model lp(1);
    const std::array<int, 1> col{0};
    const std::array<double, 1> one{1.0};
    lp.add_row(col, one, memo::lp_sense::greater_equal, 1.0);
    lp.set_bounds(0, 0.0, memo::lp_model::infinity());
    lp.set_objective(col, one, true);
    CHECK(lp.solve() == memo::lp_outcome::unbounded);
  }
}

TEST_CASE("lp_solve: integer columns give the integer optimum") {
  // maximise x + y  s.t.  2x + 2y <= 5 with x, y integer: optimum 2, not 2.5.
  memo::lp_model lp(2);
  const std::array<int, 2> cols{0, 1};
  const std::array<double, 2> twos{2.0, 2.0};
  const std::array<double, 2> ones{1.0, 1.0};
  lp.add_row(cols, twos, memo::lp_sense::less_equal, 5.0);
  lp.set_integer(0);
  lp.set_integer(1);
  lp.set_objective(cols, ones, true);
  REQUIRE(lp.solve() == memo::lp_outcome::optimal);
  CHECK(lp.objective() == doctest::Approx(2.0));
  const auto x = lp.solution();
  CHECK(std::fabs(x[0] - std::round(x[0])) < 1e-9);
}

TEST_CASE("lp_solve: bad columns are memo errors naming the range") {
  memo::lp_model lp(2);
  CHECK_THROWS_WITH_AS(lp.set_bounds(2, 0, 1), doctest::Contains("outside [0, 2)"), memo::error);
  CHECK_THROWS_AS(memo::lp_model(0), memo::error);
}
