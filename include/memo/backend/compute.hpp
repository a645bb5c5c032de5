// memo/backend/compute.hpp
//
// The vocabulary of compute on a stream, shared by every backend: the
// extents `parallel_for` runs a functor over, and the value type that
// describes a GEMM. Nothing here touches a device; the backends
// (host_compute.hpp, cuda_compute.hpp, cuda_blas.hpp) consume these values.
//
// Kernel math in memo is written once as `MEMO_HOST_DEVICE` functors; a
// `parallel_for` calls one for every index of an extent, on the host across
// all cores, on a GPU as a grid-stride kernel. The order in which indices run
// is unspecified, so a functor must only write the elements its index owns.
//
// A GEMM computes C = alpha * op(A) * op(B) + beta * C, with op(A) m x k,
// op(B) k x n and C m x n, every matrix stored in `layout` with its leading
// dimension (the distance between consecutive rows for row-major storage,
// columns for column-major). When beta is 0, C is not read (BLAS's rule, so
// uninitialised C is fine). Every argument is checked before anything is
// queued, and a bad one is a `memo::error` naming the argument, its value and
// the bound it breaks.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "memo/core/config.hpp"
#include "memo/core/error.hpp"

namespace memo {

/// `size` indices 0 .. size - 1; the functor is called as f(i).
struct extent_1d {
  std::int64_t size = 0;
};

/// rows x cols indices; the functor is called as f(row, col).
struct extent_2d {
  std::int64_t rows = 0;
  std::int64_t cols = 0;
};

/// How a matrix's elements are laid out in memory.
enum class matrix_layout { row_major, column_major };

/// Whether a GEMM operand is used as stored or transposed.
enum class matrix_op { none, transpose };

/// The shape of C = alpha * op(A) * op(B) + beta * C. A leading dimension of
/// 0 means "tight": the stored matrix's row length (row-major) or column
/// length (column-major).
struct gemm_shape {
  std::int64_t m = 0;
  std::int64_t n = 0;
  std::int64_t k = 0;
  matrix_op op_a = matrix_op::none;
  matrix_op op_b = matrix_op::none;
  matrix_layout layout = matrix_layout::row_major;
  std::int64_t lda = 0;
  std::int64_t ldb = 0;
  std::int64_t ldc = 0;
};

/// `count` GEMMs of one shape; matrix i starts `stride_*` * i elements after
/// the first. A stride of 0 for A or B reuses one operand for every product;
/// C's matrices must not overlap.
struct gemm_batch {
  std::int64_t count = 1;
  std::int64_t stride_a = 0;
  std::int64_t stride_b = 0;
  std::int64_t stride_c = 0;
};

inline constexpr const char* to_string(matrix_layout layout) {
  return layout == matrix_layout::row_major ? "row_major" : "column_major";
}
inline constexpr const char* to_string(matrix_op op) {
  return op == matrix_op::none ? "none" : "transpose";
}

namespace detail {

/// An operand as stored: `rows` x `cols` in the GEMM's layout.
struct stored_matrix {
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  /// The smallest leading dimension that holds it.
  [[nodiscard]] std::int64_t min_leading(matrix_layout layout) const {
    const std::int64_t ld = layout == matrix_layout::row_major ? cols : rows;
    return ld > 0 ? ld : 1;
  }
  /// Elements from the first to one past the last, with leading dimension `ld`.
  [[nodiscard]] std::int64_t span(matrix_layout layout, std::int64_t ld) const {
    const std::int64_t outer = layout == matrix_layout::row_major ? rows : cols;
    const std::int64_t inner = layout == matrix_layout::row_major ? cols : rows;
    if (outer == 0 || inner == 0) return 0;
    return (outer - 1) * ld + inner;
  }
};

inline stored_matrix stored_a(const gemm_shape& s) {
  return s.op_a == matrix_op::none ? stored_matrix{s.m, s.k} : stored_matrix{s.k, s.m};
}
inline stored_matrix stored_b(const gemm_shape& s) {
  return s.op_b == matrix_op::none ? stored_matrix{s.k, s.n} : stored_matrix{s.n, s.k};
}
inline stored_matrix stored_c(const gemm_shape& s) { return {s.m, s.n}; }

inline std::string describe(const gemm_shape& s) {
  return "m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) +
         " op_a=" + to_string(s.op_a) + " op_b=" + to_string(s.op_b) + " " + to_string(s.layout) +
         " lda=" + std::to_string(s.lda) + " ldb=" + std::to_string(s.ldb) +
         " ldc=" + std::to_string(s.ldc);
}

/// Fills tight leading dimensions and checks the shape and the pointers.
/// Sizes are bounded so that every element offset fits in 63 bits.
inline gemm_shape checked_gemm_shape(gemm_shape s, const void* a, const void* b, const void* c,
                                     const char* call) {
  auto fail = [&](const std::string& problem) {
    return std::string(call) + "(" + describe(s) + "): " + problem;
  };
  constexpr std::int64_t limit = std::int64_t{1} << 31;  // per dimension; products stay < 2^62
  for (auto [name, value] : {std::pair{"m", s.m}, std::pair{"n", s.n}, std::pair{"k", s.k}}) {
    expects(value >= 0, [&] { return fail(std::string(name) + " is negative"); });
    expects(value < limit, [&] {
      return fail(std::string(name) + " = " + std::to_string(value) + " exceeds 2^31 - 1");
    });
  }
  struct operand {
    const char* name;
    stored_matrix stored;
    std::int64_t& ld;
    const void* data;
    bool used;
  };
  const bool product = s.m > 0 && s.n > 0 && s.k > 0;
  operand operands[] = {{"A", stored_a(s), s.lda, a, product},
                        {"B", stored_b(s), s.ldb, b, product},
                        {"C", stored_c(s), s.ldc, c, s.m > 0 && s.n > 0}};
  for (auto& o : operands) {
    const std::int64_t needed = o.stored.min_leading(s.layout);
    if (o.ld == 0) o.ld = needed;
    expects(o.ld >= needed, [&] {
      return fail(std::string("leading dimension of ") + o.name + " is " + std::to_string(o.ld) +
                  " but its " + std::to_string(o.stored.rows) + " x " +
                  std::to_string(o.stored.cols) + " " + to_string(s.layout) +
                  " storage needs at least " + std::to_string(needed));
    });
    expects(o.ld < limit, [&] {
      return fail(std::string("leading dimension of ") + o.name + " = " + std::to_string(o.ld) +
                  " exceeds 2^31 - 1");
    });
    expects(!o.used || o.data != nullptr,
            [&] { return fail(std::string("null pointer for ") + o.name); });
  }
  return s;
}

/// Checks a batch against a checked shape: C's matrices must not overlap
/// (they are written concurrently), strides are non-negative and every
/// offset fits in 63 bits.
inline void check_gemm_batch(const gemm_shape& s, const gemm_batch& batch, const char* call) {
  auto fail = [&](const std::string& problem) {
    return std::string(call) + "(" + describe(s) + ", count=" + std::to_string(batch.count) +
           "): " + problem;
  };
  expects(batch.count >= 0, [&] { return fail("batch count is negative"); });
  expects(batch.count < (std::int64_t{1} << 31), [&] { return fail("batch count exceeds 2^31 - 1"); });
  expects(batch.stride_a >= 0 && batch.stride_b >= 0 && batch.stride_c >= 0, [&] {
    return fail("strides must be non-negative (a=" + std::to_string(batch.stride_a) +
                " b=" + std::to_string(batch.stride_b) + " c=" + std::to_string(batch.stride_c) +
                ")");
  });
  if (batch.count <= 1) return;
  const std::int64_t c_span = stored_c(s).span(s.layout, s.ldc);
  expects(batch.stride_c >= c_span, [&] {
    return fail("stride_c " + std::to_string(batch.stride_c) +
                " is smaller than one C matrix (" + std::to_string(c_span) +
                " elements): the outputs would overlap");
  });
  constexpr std::int64_t max_offset = std::numeric_limits<std::int64_t>::max() / 2;
  for (std::int64_t stride : {batch.stride_a, batch.stride_b, batch.stride_c}) {
    expects(stride == 0 || batch.count - 1 <= max_offset / stride, [&] {
      return fail("stride " + std::to_string(stride) + " x " + std::to_string(batch.count - 1) +
                  " overflows 63 bits");
    });
  }
}

/// The same product in column-major terms: a row-major C = op(A) op(B) is
/// the column-major C^T = op(B)^T op(A)^T, so swapping A and B (and m and n)
/// turns any row-major GEMM into a column-major one with the same leading
/// dimensions and ops. Both backends compute in column-major form.
struct column_major_gemm {
  std::int64_t m, n, k;
  matrix_op op_a, op_b;
  std::int64_t lda, ldb, ldc;
  bool swapped;  // true: "A" is the caller's B and "B" is the caller's A
};

inline column_major_gemm to_column_major(const gemm_shape& s) {
  if (s.layout == matrix_layout::column_major) {
    return {s.m, s.n, s.k, s.op_a, s.op_b, s.lda, s.ldb, s.ldc, false};
  }
  return {s.n, s.m, s.k, s.op_b, s.op_a, s.ldb, s.lda, s.ldc, true};
}

/// Checks an extent and returns its number of indices.
inline std::int64_t checked_extent_size(const extent_1d& e) {
  expects(e.size >= 0, [&] { return "parallel_for: extent size " + std::to_string(e.size) + " is negative"; });
  return e.size;
}
inline std::int64_t checked_extent_size(const extent_2d& e) {
  expects(e.rows >= 0 && e.cols >= 0, [&] {
    return "parallel_for: extent " + std::to_string(e.rows) + " x " + std::to_string(e.cols) +
           " has a negative dimension";
  });
  expects(e.cols == 0 || e.rows <= std::numeric_limits<std::int64_t>::max() / e.cols, [&] {
    return "parallel_for: extent " + std::to_string(e.rows) + " x " + std::to_string(e.cols) +
           " has more than 2^63 - 1 indices";
  });
  return e.rows * e.cols;
}

// What the Backend concept calls parallel_for with.
struct concept_functor_1d {
  MEMO_HOST_DEVICE void operator()(std::int64_t) const {}
};
struct concept_functor_2d {
  MEMO_HOST_DEVICE void operator()(std::int64_t, std::int64_t) const {}
};

}  // namespace detail

/// A functor `parallel_for` can run over extent `E`: copyable (it is copied
/// to wherever it runs) and callable with one index per dimension.
template <class F, class E>
concept parallel_functor =
    std::copy_constructible<F> &&
    ((std::same_as<E, extent_1d> && std::invocable<const F&, std::int64_t>) ||
     (std::same_as<E, extent_2d> && std::invocable<const F&, std::int64_t, std::int64_t>));

}  // namespace memo
