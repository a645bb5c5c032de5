// memo/core/config.hpp
//
// Compile-time configuration shared by every memo header.
//
// Kernel math in memo is written once as functions that run on the host and,
// when compiled by nvcc, on the device. `MEMO_HOST_DEVICE` marks them: under
// nvcc it expands to `__host__ __device__ __forceinline__`, elsewhere to
// `inline`, so a CPU-only build never sees a CUDA keyword.
//
// `MEMO_HAS_CUDA` is 1 when the CUDA runtime headers can be used (the
// `memo::cuda` CMake component defines it, nvcc defines it implicitly) and 0
// otherwise. It is the single feature macro that guards CUDA-only code.
#pragma once

#define MEMO_VERSION_MAJOR 0
#define MEMO_VERSION_MINOR 1
#define MEMO_VERSION_PATCH 0
#define MEMO_VERSION_STRING "0.1.0"

#if defined(__CUDACC__)
#define MEMO_HOST_DEVICE __host__ __device__ __forceinline__
#define MEMO_DEVICE __device__ __forceinline__
#else
#define MEMO_HOST_DEVICE inline
#define MEMO_DEVICE inline
#endif

#if !defined(MEMO_HAS_CUDA)
#if defined(__CUDACC__)
#define MEMO_HAS_CUDA 1
#else
#define MEMO_HAS_CUDA 0
#endif
#endif

#if !defined(MEMO_HAS_MPI)
#define MEMO_HAS_MPI 0
#endif

#if !defined(MEMO_HAS_NCCL)
#define MEMO_HAS_NCCL 0
#endif

#if !defined(MEMO_HAS_LPSOLVE)
#define MEMO_HAS_LPSOLVE 0
#endif

namespace memo {

/// The library version as numbers, for run-time checks by consumers.
struct version_info {
  int major;
  int minor;
  int patch;
};

inline constexpr version_info version{MEMO_VERSION_MAJOR, MEMO_VERSION_MINOR,
                                      MEMO_VERSION_PATCH};

}  // namespace memo
