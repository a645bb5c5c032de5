// memo/backend/cuda_blas.hpp
//
// GEMMs on a CUDA stream through cuBLAS. Each stream owns one cuBLAS handle,
// created with the stream and destroyed with it, bound to the stream
// (cublasSetStream) and to a workspace the caller provides
// (cublasSetWorkspace over a memo::memory_region; with an empty region,
// cuBLAS runs without a workspace), so cuBLAS allocates nothing a memory plan
// does not know about. `cuda_blas_workspace_bytes` is the size asked for
// (cuBLAS's recommendation: 32 MiB on Hopper, 4 MiB before).
//
// Operands are fp32, fp16 (`__half`) or bf16 (`__nv_bfloat16`), always
// accumulated in fp32 (cublasGemmEx / cublasGemmStridedBatchedEx with
// CUBLAS_COMPUTE_32F); alpha and beta are fp32. Row-major GEMMs become
// column-major ones by swapping the operands (compute.hpp), which is what
// cuBLAS computes. Every status becomes a memo::error (cuda_check.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "memo/backend/compute.hpp"
#include "memo/backend/cuda_check.hpp"
#include "memo/core/bytes.hpp"
#include "memo/core/memory_region.hpp"

namespace memo {

/// Element types cuda_backend's GEMMs take.
template <class T>
concept cuda_gemm_scalar =
    std::same_as<T, float> || std::same_as<T, __half> || std::same_as<T, __nv_bfloat16>;

namespace detail {

template <class T>
constexpr cudaDataType_t cuda_data_type() {
  if constexpr (std::is_same_v<T, float>) return CUDA_R_32F;
  else if constexpr (std::is_same_v<T, __half>) return CUDA_R_16F;
  else return CUDA_R_16BF;
}

inline cublasOperation_t to_cublas(matrix_op op) {
  return op == matrix_op::none ? CUBLAS_OP_N : CUBLAS_OP_T;
}

/// The workspace cuBLAS asks for on a device of compute capability `major`.
inline std::size_t cuda_blas_workspace_bytes(int major) {
  return major >= 9 ? 32 * mib : 4 * mib;
}

/// One cuBLAS handle bound to one stream and one workspace.
class cublas_handle {
 public:
  cublas_handle() = default;
  cublas_handle(cudaStream_t stream, memory_region workspace) {
    check_cublas(cublasCreate(&handle_), "cublasCreate");
    try {
      check_cublas(cublasSetStream(handle_, stream), "cublasSetStream");
      // An empty region: no workspace at all, rather than one cuBLAS allocates.
      check_cublas(cublasSetWorkspace(handle_, workspace.data, workspace.bytes),
                   "cublasSetWorkspace");
    } catch (...) {
      (void)cublasDestroy(handle_);
      throw;
    }
  }
  cublas_handle(cublas_handle&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  cublas_handle& operator=(cublas_handle&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  cublas_handle(const cublas_handle&) = delete;
  cublas_handle& operator=(const cublas_handle&) = delete;
  ~cublas_handle() { reset(); }

  [[nodiscard]] cublasHandle_t get() const noexcept { return handle_; }
  void reset() noexcept {
    if (handle_ != nullptr) (void)cublasDestroy(handle_);
    handle_ = nullptr;
  }

 private:
  cublasHandle_t handle_ = nullptr;
};

/// Queues `batch.count` GEMMs on the handle's stream. `shape` and `batch`
/// must have been checked (checked_gemm_shape, check_gemm_batch); every
/// size then fits cuBLAS's int.
template <cuda_gemm_scalar T>
void cublas_gemm(cublasHandle_t handle, const gemm_shape& shape, const gemm_batch& batch,
                 float alpha, const T* a, const T* b, float beta, T* c) {
  const column_major_gemm g = to_column_major(shape);
  const T* lhs = g.swapped ? b : a;
  const T* rhs = g.swapped ? a : b;
  const long long lhs_stride = g.swapped ? batch.stride_b : batch.stride_a;
  const long long rhs_stride = g.swapped ? batch.stride_a : batch.stride_b;
  constexpr cudaDataType_t type = cuda_data_type<T>();
  const auto m = static_cast<int>(g.m);
  const auto n = static_cast<int>(g.n);
  const auto k = static_cast<int>(g.k);
  if (batch.count == 1) {
    check_cublas(cublasGemmEx(handle, to_cublas(g.op_a), to_cublas(g.op_b), m, n, k, &alpha, lhs,
                              type, static_cast<int>(g.lda), rhs, type, static_cast<int>(g.ldb),
                              &beta, c, type, static_cast<int>(g.ldc), CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx");
    return;
  }
  check_cublas(cublasGemmStridedBatchedEx(
                   handle, to_cublas(g.op_a), to_cublas(g.op_b), m, n, k, &alpha, lhs, type,
                   static_cast<int>(g.lda), lhs_stride, rhs, type, static_cast<int>(g.ldb),
                   rhs_stride, &beta, c, type, static_cast<int>(g.ldc),
                   static_cast<long long>(batch.stride_c), static_cast<int>(batch.count),
                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmStridedBatchedEx");
}

}  // namespace detail
}  // namespace memo
