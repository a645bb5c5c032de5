#include "memo/backend/compute.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <limits>

using memo::gemm_batch;
using memo::gemm_shape;
using memo::matrix_layout;
using memo::matrix_op;

TEST_CASE("compute: tight leading dimensions follow the stored matrix and the layout") {
  float x = 0.0f;
  // Row-major: the row length of each stored matrix.
  auto row = memo::detail::checked_gemm_shape({5, 7, 3, matrix_op::transpose, matrix_op::none,
                                               matrix_layout::row_major},
                                              &x, &x, &x, "gemm");
  CHECK(row.lda == 5);  // A stored k x m = 3 x 5
  CHECK(row.ldb == 7);  // B stored k x n = 3 x 7
  CHECK(row.ldc == 7);
  // Column-major: the column length.
  auto col = memo::detail::checked_gemm_shape({5, 7, 3, matrix_op::none, matrix_op::transpose,
                                               matrix_layout::column_major},
                                              &x, &x, &x, "gemm");
  CHECK(col.lda == 5);  // A stored m x k
  CHECK(col.ldb == 7);  // B stored n x k
  CHECK(col.ldc == 5);
  // Explicit leading dimensions are kept.
  auto padded = memo::detail::checked_gemm_shape({2, 2, 2, matrix_op::none, matrix_op::none,
                                                  matrix_layout::row_major, 10, 11, 12},
                                                 &x, &x, &x, "gemm");
  CHECK(padded.lda == 10);
  CHECK(padded.ldb == 11);
  CHECK(padded.ldc == 12);
}

TEST_CASE("compute: bad shapes name the argument, its value and the bound") {
  float x = 0.0f;
  CHECK_THROWS_WITH_AS(memo::detail::checked_gemm_shape({4, 4, 4, matrix_op::none, matrix_op::none,
                                                         matrix_layout::row_major, 3},
                                                        &x, &x, &x, "gemm"),
                       doctest::Contains("leading dimension of A is 3 but its 4 x 4 row_major storage "
                                         "needs at least 4"),
                       memo::error);
  CHECK_THROWS_WITH_AS(
      memo::detail::checked_gemm_shape({-2, 4, 4}, &x, &x, &x, "gemm"),
      doctest::Contains("m is negative"), memo::error);
  CHECK_THROWS_WITH_AS(memo::detail::checked_gemm_shape({std::int64_t{1} << 31, 1, 1}, &x, &x, &x,
                                                        "gemm"),
                       doctest::Contains("exceeds 2^31 - 1"), memo::error);
  CHECK_THROWS_WITH_AS(memo::detail::checked_gemm_shape({1, 1, 1}, nullptr, &x, &x, "gemm"),
                       doctest::Contains("null pointer for A"), memo::error);
  // An empty product needs no A or B, and an empty C no C.
  CHECK_NOTHROW(memo::detail::checked_gemm_shape({3, 3, 0}, nullptr, nullptr, &x, "gemm"));
  CHECK_NOTHROW(memo::detail::checked_gemm_shape({0, 3, 5}, nullptr, nullptr, nullptr, "gemm"));
}

TEST_CASE("compute: batches may share operands but not outputs") {
  float x = 0.0f;
  const auto shape = memo::detail::checked_gemm_shape({4, 3, 2}, &x, &x, &x, "gemm");  // C spans 12
  CHECK_NOTHROW(memo::detail::check_gemm_batch(shape, gemm_batch{5, 0, 0, 12}, "batched"));
  CHECK_THROWS_WITH_AS(memo::detail::check_gemm_batch(shape, gemm_batch{5, 8, 6, 11}, "batched"),
                       doctest::Contains("stride_c 11 is smaller than one C matrix (12 elements)"),
                       memo::error);
  CHECK_THROWS_AS(memo::detail::check_gemm_batch(shape, gemm_batch{-1, 0, 0, 12}, "batched"),
                  memo::error);
  CHECK_THROWS_WITH_AS(memo::detail::check_gemm_batch(
                           shape, gemm_batch{3, std::numeric_limits<std::int64_t>::max() / 2, 0, 12},
                           "batched"),
                       doctest::Contains("overflows 63 bits"), memo::error);
}

TEST_CASE("compute: a row-major GEMM is the column-major GEMM of the transposed problem") {
  const gemm_shape row{5, 7, 3, matrix_op::transpose, matrix_op::none, matrix_layout::row_major, 6, 8, 9};
  const auto col = memo::detail::to_column_major(row);
  CHECK(col.swapped);
  CHECK(col.m == 7);
  CHECK(col.n == 5);
  CHECK(col.k == 3);
  CHECK(col.op_a == matrix_op::none);       // the caller's op_b
  CHECK(col.op_b == matrix_op::transpose);  // the caller's op_a
  CHECK(col.lda == 8);
  CHECK(col.ldb == 6);
  CHECK(col.ldc == 9);
  const auto same = memo::detail::to_column_major(
      {5, 7, 3, matrix_op::none, matrix_op::none, matrix_layout::column_major, 5, 3, 5});
  CHECK_FALSE(same.swapped);
  CHECK(same.m == 5);
}

TEST_CASE("compute: extents count their indices and reject negative or overflowing sizes") {
  CHECK(memo::detail::checked_extent_size(memo::extent_1d{0}) == 0);
  CHECK(memo::detail::checked_extent_size(memo::extent_2d{3, 5}) == 15);
  CHECK_THROWS_AS(memo::detail::checked_extent_size(memo::extent_1d{-1}), memo::error);
  CHECK_THROWS_AS(memo::detail::checked_extent_size(memo::extent_2d{-1, 2}), memo::error);
  CHECK_THROWS_WITH_AS(
      memo::detail::checked_extent_size(memo::extent_2d{std::int64_t{1} << 40, std::int64_t{1} << 40}),
      doctest::Contains("more than 2^63 - 1 indices"), memo::error);
}
