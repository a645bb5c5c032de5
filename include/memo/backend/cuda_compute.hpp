// memo/backend/cuda_compute.hpp
//
// `parallel_for` on a CUDA stream: one generic grid-stride kernel per
// functor type, so the same `MEMO_HOST_DEVICE` functor the host backend
// calls in a loop runs on the GPU unchanged. The grid is capped (a few
// blocks per SM) and each thread strides over the extent, so any size works
// with one launch; the launch is checked with cudaGetLastError.
//
// Kernels exist only when nvcc compiles the translation unit: launching
// from a file compiled by the host compiler is a static_assert that says so
// (cuda_backend.hpp itself still compiles everywhere).
#pragma once

#include <algorithm>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "memo/backend/compute.hpp"
#include "memo/backend/cuda_check.hpp"

namespace memo::detail {

template <class>
inline constexpr bool cuda_needs_nvcc = false;

#if defined(__CUDACC__)
template <class F>
__global__ void parallel_for_1d_kernel(std::int64_t size, F functor) {
  const std::int64_t step = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < size;
       i += step) {
    functor(i);
  }
}

template <class F>
__global__ void parallel_for_2d_kernel(std::int64_t rows, std::int64_t cols, F functor) {
  const std::int64_t row_step = static_cast<std::int64_t>(blockDim.y) * gridDim.y;
  const std::int64_t col_step = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t row = static_cast<std::int64_t>(blockIdx.y) * blockDim.y + threadIdx.y;
       row < rows; row += row_step) {
    for (std::int64_t col = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
         col < cols; col += col_step) {
      functor(row, col);
    }
  }
}
#endif

/// Blocks a grid-stride launch needs for `count` items of `per_block`,
/// capped at `cap`.
inline unsigned cuda_grid_size(std::int64_t count, std::int64_t per_block, std::int64_t cap) {
  return static_cast<unsigned>(std::max<std::int64_t>(1, std::min((count + per_block - 1) / per_block, cap)));
}

/// Launches functor(i) for every i of a non-empty extent on `stream`.
/// `max_blocks` caps the grid (a few blocks per SM).
template <class F>
void cuda_parallel_for(cudaStream_t stream, std::int64_t max_blocks, extent_1d extent,
                       const F& functor) {
#if defined(__CUDACC__)
  constexpr int threads = 256;
  const unsigned blocks = cuda_grid_size(extent.size, threads, max_blocks);
  parallel_for_1d_kernel<<<blocks, threads, 0, stream>>>(extent.size, functor);
  check_cuda(cudaGetLastError(), "parallel_for (1-D) kernel launch");
#else
  (void)stream, (void)max_blocks, (void)extent, (void)functor;
  static_assert(cuda_needs_nvcc<F>,
                "cuda_backend::parallel_for launches a kernel: call it from a file compiled by "
                "nvcc (a .cu translation unit)");
#endif
}

template <class F>
void cuda_parallel_for(cudaStream_t stream, std::int64_t max_blocks, extent_2d extent,
                       const F& functor) {
#if defined(__CUDACC__)
  constexpr int block_cols = 32;
  constexpr int block_rows = 8;
  // gridDim.y is limited to 65535; the stride loop covers the rest.
  const unsigned grid_cols = cuda_grid_size(extent.cols, block_cols, max_blocks);
  const unsigned grid_rows =
      cuda_grid_size(extent.rows, block_rows, std::min<std::int64_t>(65535, std::max<std::int64_t>(1, max_blocks / grid_cols)));
  parallel_for_2d_kernel<<<dim3(grid_cols, grid_rows), dim3(block_cols, block_rows), 0, stream>>>(
      extent.rows, extent.cols, functor);
  check_cuda(cudaGetLastError(), "parallel_for (2-D) kernel launch");
#else
  (void)stream, (void)max_blocks, (void)extent, (void)functor;
  static_assert(cuda_needs_nvcc<F>,
                "cuda_backend::parallel_for launches a kernel: call it from a file compiled by "
                "nvcc (a .cu translation unit)");
#endif
}

}  // namespace memo::detail
