// memo/backend/cuda_check.hpp
//
// CUDA runtime and cuBLAS status codes become `memo::error`s where they are
// returned, carrying the call, the library's own message and the source
// location of the call site. Include only from CUDA-enabled code (the
// `memo::cuda` component); CPU-only users never see cuda_runtime.h.
#pragma once

#include <source_location>
#include <string>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "memo/core/error.hpp"

namespace memo {

/// Throws unless `status == cudaSuccess`. Clears the runtime's last error so
/// a later unrelated check does not report this one again.
inline void check_cuda(cudaError_t status, const char* call,
                       std::source_location where = std::source_location::current()) {
  if (status == cudaSuccess) return;
  (void)cudaGetLastError();
  throw error(std::string(call) + " failed: " + cudaGetErrorName(status) + " (" +
                  cudaGetErrorString(status) + ")",
              "cuda", static_cast<long>(status), where);
}

inline const char* cublas_status_name(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "unknown cuBLAS status";
  }
}

/// Throws unless `status == CUBLAS_STATUS_SUCCESS`.
inline void check_cublas(cublasStatus_t status, const char* call,
                         std::source_location where = std::source_location::current()) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw error(std::string(call) + " failed: " + cublas_status_name(status), "cublas",
              static_cast<long>(status), where);
}

}  // namespace memo
