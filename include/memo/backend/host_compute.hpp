// memo/backend/host_compute.hpp
//
// Compute on a host stream: `parallel_for` and GEMM spread over all cores
// through the backend's one thread pool (host_thread_pool.hpp). The stream's
// worker submits the job and works on it too, so a stream's compute runs
// in its FIFO order and uses every core the other streams leave free.
//
// - parallel_for splits the extent into contiguous pieces (a few per
//   thread, so uneven cores even out) and calls the functor for every index
//   of a piece in order. A piece has at least 256 indices, or
//   `F::parallel_grain` if the functor declares it (a functor whose index
//   is a whole row of work).
// - GEMM maps the operands with `Eigen::Map` (any layout, leading dimension
//   and transpose, no copies) and splits C into panels of columns (or of
//   rows, when C is taller than wide), each one Eigen GEMM on one thread.
//   Eigen built without OpenMP is single-threaded, so the panels are what
//   makes it use all cores; built with OpenMP, each panel's GEMM is kept to
//   one thread so the two kinds of threads do not multiply. Host GEMMs are
//   fp32 only.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>

#include <Eigen/Core>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "memo/backend/compute.hpp"
#include "memo/backend/host_thread_pool.hpp"

namespace memo::detail {

/// Pieces for `total` indices: at most four per thread, at least `grain`
/// indices each.
inline std::int64_t host_piece_count(std::int64_t total, std::size_t threads,
                                     std::int64_t grain) {
  if (total <= 0) return 0;
  const std::int64_t by_grain = (total + grain - 1) / grain;
  return std::max<std::int64_t>(1, std::min<std::int64_t>(by_grain, static_cast<std::int64_t>(threads) * 4));
}

/// [begin, end) of piece `p` of `pieces` over `total`.
inline std::pair<std::int64_t, std::int64_t> host_piece_range(std::int64_t total,
                                                              std::int64_t pieces,
                                                              std::int64_t p) {
  // total < 2^63 and pieces is small, so total / pieces * p + remainder share fits.
  const std::int64_t base = total / pieces;
  const std::int64_t extra = total % pieces;
  const std::int64_t begin = p * base + std::min(p, extra);
  return {begin, begin + base + (p < extra ? 1 : 0)};
}

inline constexpr std::int64_t host_parallel_for_grain = 256;

/// Indices per piece for functor F: `F::parallel_grain` when it declares
/// one (a functor whose index is a whole row of work, where a few hundred
/// indices would keep a short extent on one thread), host_parallel_for_grain
/// otherwise.
template <class F>
constexpr std::int64_t host_grain_of() {
  if constexpr (requires { F::parallel_grain; }) {
    static_assert(F::parallel_grain >= 1, "parallel_grain must be at least 1 index per piece");
    return F::parallel_grain;
  } else {
    return host_parallel_for_grain;
  }
}

template <class F>
void host_parallel_for(host_thread_pool& pool, extent_1d extent, const F& functor) {
  const std::int64_t total = extent.size;
  const std::int64_t pieces = host_piece_count(total, pool.concurrency(), host_grain_of<F>());
  pool.run(pieces, [&](std::int64_t p) {
    const auto [begin, end] = host_piece_range(total, pieces, p);
    for (std::int64_t i = begin; i < end; ++i) functor(i);
  });
}

template <class F>
void host_parallel_for(host_thread_pool& pool, extent_2d extent, const F& functor) {
  const std::int64_t total = extent.rows * extent.cols;  // checked by checked_extent_size
  const std::int64_t pieces = host_piece_count(total, pool.concurrency(), host_grain_of<F>());
  pool.run(pieces, [&](std::int64_t p) {
    const auto [begin, end] = host_piece_range(total, pieces, p);
    std::int64_t row = begin / extent.cols;
    std::int64_t col = begin % extent.cols;
    for (std::int64_t i = begin; i < end; ++i) {
      functor(row, col);
      if (++col == extent.cols) {
        col = 0;
        ++row;
      }
    }
  });
}

#if defined(_OPENMP)
// Keeps Eigen's GEMM on the calling thread while it computes one panel.
class single_threaded_openmp {
 public:
  single_threaded_openmp() : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~single_threaded_openmp() { omp_set_num_threads(saved_); }
  single_threaded_openmp(const single_threaded_openmp&) = delete;
  single_threaded_openmp& operator=(const single_threaded_openmp&) = delete;

 private:
  int saved_;
};
#endif

/// Columns (or rows) per panel below which splitting C further costs more
/// in repacking A than it gains.
inline constexpr std::int64_t host_gemm_min_panel = 64;

/// C = alpha op(A) op(B) + beta C for every matrix of the batch, on all
/// cores. `shape` and `batch` must have been checked (checked_gemm_shape,
/// check_gemm_batch).
inline void host_gemm(host_thread_pool& pool, const gemm_shape& shape, const gemm_batch& batch,
                      float alpha, const float* a, const float* b, float beta, float* c) {
  if (shape.m == 0 || shape.n == 0 || batch.count == 0) return;
  const column_major_gemm g = to_column_major(shape);
  const float* lhs = g.swapped ? b : a;
  const float* rhs = g.swapped ? a : b;
  const std::int64_t lhs_stride = g.swapped ? batch.stride_b : batch.stride_a;
  const std::int64_t rhs_stride = g.swapped ? batch.stride_a : batch.stride_b;

  using matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
  using const_map = Eigen::Map<const matrix, Eigen::Unaligned, Eigen::OuterStride<>>;
  using map = Eigen::Map<matrix, Eigen::Unaligned, Eigen::OuterStride<>>;

  // Panels: split the longer side of C so that every thread has work.
  const bool split_columns = g.n >= g.m;
  const std::int64_t side = split_columns ? g.n : g.m;
  const std::int64_t wanted = (static_cast<std::int64_t>(pool.concurrency()) * 2 + batch.count - 1) / batch.count;
  const double flops_per_matrix = static_cast<double>(g.m) * static_cast<double>(g.n) *
                                  static_cast<double>(std::max<std::int64_t>(g.k, 1));
  const std::int64_t panels =
      flops_per_matrix < 262144.0  // 64^3: too small to be worth a second thread
          ? 1
          : std::clamp<std::int64_t>(std::min(wanted, side / host_gemm_min_panel), 1, side);

  auto update = [&](auto&& destination, const auto& left, const auto& right) {
    if (g.k == 0 || alpha == 0.0f) {
      if (beta == 0.0f) destination.setZero();
      else destination *= beta;
      return;
    }
    if (beta == 0.0f) {
      destination.noalias() = alpha * left * right;
    } else {
      if (beta != 1.0f) destination *= beta;
      destination.noalias() += alpha * left * right;
    }
  };

  pool.run(batch.count * panels, [&](std::int64_t piece) {
#if defined(_OPENMP)
    single_threaded_openmp one_thread;
#endif
    const std::int64_t index = piece / panels;
    const auto [begin, end] = host_piece_range(side, panels, piece % panels);
    const std::int64_t width = end - begin;
    const float* pa = lhs + index * lhs_stride;
    const float* pb = rhs + index * rhs_stride;
    float* pc = c + index * batch.stride_c;
    map out(pc, g.m, g.n, Eigen::OuterStride<>(g.ldc));
    // op(A) is m x k, op(B) is k x n, all column-major here.
    const const_map stored_a = g.op_a == matrix_op::none
                                   ? const_map(pa, g.m, g.k, Eigen::OuterStride<>(g.lda))
                                   : const_map(pa, g.k, g.m, Eigen::OuterStride<>(g.lda));
    const const_map stored_b = g.op_b == matrix_op::none
                                   ? const_map(pb, g.k, g.n, Eigen::OuterStride<>(g.ldb))
                                   : const_map(pb, g.n, g.k, Eigen::OuterStride<>(g.ldb));
    const bool ta = g.op_a == matrix_op::transpose;
    const bool tb = g.op_b == matrix_op::transpose;
    if (split_columns) {
      auto destination = out.middleCols(begin, width);
      if (!ta && !tb) update(destination, stored_a, stored_b.middleCols(begin, width));
      if (!ta && tb) update(destination, stored_a, stored_b.middleRows(begin, width).transpose());
      if (ta && !tb) update(destination, stored_a.transpose(), stored_b.middleCols(begin, width));
      if (ta && tb) update(destination, stored_a.transpose(), stored_b.middleRows(begin, width).transpose());
    } else {
      auto destination = out.middleRows(begin, width);
      if (!ta && !tb) update(destination, stored_a.middleRows(begin, width), stored_b);
      if (!ta && tb) update(destination, stored_a.middleRows(begin, width), stored_b.transpose());
      if (ta && !tb) update(destination, stored_a.middleCols(begin, width).transpose(), stored_b);
      if (ta && tb) update(destination, stored_a.middleCols(begin, width).transpose(), stored_b.transpose());
    }
  });
}

}  // namespace memo::detail
