#include "memo/model/ops/common.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <utility>
#include <vector>

#include "test_support.hpp"

namespace ops = memo::ops;

namespace {

struct record_rows {
  std::vector<std::int64_t>* seen;
  std::int64_t count;
  std::int64_t size() const { return count; }
  void operator()(std::int64_t i) const { seen->push_back(i); }
  void validate() const { memo::expects(count >= 0, "record_rows: negative count"); }
};

struct record_elements {
  std::vector<std::pair<std::int64_t, std::int64_t>>* seen;
  std::int64_t rows_, cols_;
  std::int64_t rows() const { return rows_; }
  std::int64_t cols() const { return cols_; }
  void operator()(std::int64_t r, std::int64_t c) const { seen->emplace_back(r, c); }
  void validate() const {}
};

}  // namespace

TEST_CASE("ops common: the host driver validates, then visits every index once in order") {
  std::vector<std::int64_t> seen;
  ops::run_on_host(record_rows{&seen, 4});
  CHECK(seen == std::vector<std::int64_t>{0, 1, 2, 3});
  CHECK_THROWS_AS(ops::run_on_host(record_rows{&seen, -1}), memo::error);
  CHECK(seen.size() == 4);

  std::vector<std::pair<std::int64_t, std::int64_t>> cells;
  ops::run_on_host(record_elements{&cells, 2, 3});
  REQUIRE(cells.size() == 6);
  CHECK(cells.front() == std::pair<std::int64_t, std::int64_t>{0, 0});
  CHECK(cells[4] == std::pair<std::int64_t, std::int64_t>{1, 1});
  static_assert(ops::row_operator<record_rows> && !ops::element_operator<record_rows>);
  static_assert(ops::element_operator<record_elements> && !ops::row_operator<record_elements>);
}

TEST_CASE("ops common: the math shim agrees with the C++ library in both precisions") {
  for (double x : {-3.5, -0.25, 0.0, 0.5, 2.0, 7.0}) {
    CHECK(memo::detail::ops_exp(x) == std::exp(x));
    CHECK(memo::detail::ops_tanh(x) == std::tanh(x));
    CHECK(memo::detail::ops_cosh(x) == std::cosh(x));
    CHECK(memo::detail::ops_exp(static_cast<float>(x)) == std::exp(static_cast<float>(x)));
    CHECK(memo::detail::ops_tanh(static_cast<float>(x)) == std::tanh(static_cast<float>(x)));
  }
  CHECK(memo::detail::ops_sqrt(2.0) == std::sqrt(2.0));
  CHECK(memo::detail::ops_log(3.0f) == std::log(3.0f));
  CHECK(std::isinf(memo::detail::ops_infinity<float>()));
  CHECK(memo::detail::ops_infinity<double>() > 0);
  CHECK(std::isnan(memo::detail::ops_nan<double>()));
  CHECK(memo::detail::ops_max(2.0f, -1.0f) == 2.0f);
}

TEST_CASE("ops common: row_of views one row of a strided matrix") {
  std::vector<float> data(12);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i);
  // [3, 2] view with row stride 4 (padded rows) and column stride 2.
  memo::tensor_view<float, 2> m(data.data(), {3, 2}, {4, 2});
  auto row = memo::detail::row_of(m, 2);
  CHECK(row.extent(0) == 2);
  CHECK(row(0) == 8.0f);
  CHECK(row(1) == 10.0f);
}

TEST_CASE("ops common: view checks name the operator, the view and both shapes") {
  std::vector<float> data(6);
  auto v = memo::tensor_view<float, 2>::contiguous(data.data(), {2, 3});
  CHECK_NOTHROW(memo::detail::expect_view(v, {2, 3}, "op", "x"));
  CHECK_THROWS_WITH_AS(memo::detail::expect_view(v, {3, 2}, "op", "x"),
                       doctest::Contains("op: x has shape [2, 3], expected [3, 2]"), memo::error);
  auto null_view = memo::tensor_view<float, 2>::contiguous(nullptr, {2, 3});
  CHECK_THROWS_WITH_AS(memo::detail::expect_view(null_view, {2, 3}, "op", "x"),
                       doctest::Contains("op: x is a null view"), memo::error);
  CHECK_THROWS_WITH_AS(memo::detail::expect_in_range(9, 1, 8, "op", "n"),
                       doctest::Contains("op: n = 9 is outside [1, 8]"), memo::error);
}
