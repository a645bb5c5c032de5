// memo/backend/cuda_memory_resource.hpp
//
// CUDA's two memory resources with memo's accounting: device memory from
// `cudaMalloc` (or stream-ordered `cudaMallocAsync`) and page-locked host
// memory from `cudaMallocHost`. The accounting matches the host backend's
// exactly (requested bytes, current and peak, optional capacity), so a plan
// validated on the host backend is measured the same way on a GPU. Like the
// host backend's, each keeps a table of live allocations: a deallocation it
// did not hand out is an error, and what is live when it is destroyed is
// freed then (buffers that outlive it watch its liveness and return nothing).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <utility>

#include <cuda_runtime_api.h>

#include "memo/backend/cuda_check.hpp"
#include "memo/backend/memory_resource.hpp"
#include "memo/core/error.hpp"

namespace memo {

/// Number of usable CUDA devices; 0 when the driver or runtime reports any
/// error (no driver, no device, insufficient driver).
inline int cuda_device_count() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

/// Device memory from cudaMalloc with memo's accounting.
class cuda_device_memory_resource : public detail::accounted_resource {
 public:
  explicit cuda_device_memory_resource(std::optional<std::size_t> capacity_bytes = {})
      : accounted_resource("cuda device memory", capacity_bytes) {}
  cuda_device_memory_resource(const cuda_device_memory_resource&) = delete;
  cuda_device_memory_resource& operator=(const cuda_device_memory_resource&) = delete;
  ~cuda_device_memory_resource() {
    // Stream-ordered allocations too: cudaFree waits for the device, which
    // is what a resource that goes away with allocations left needs.
    live_.free_all([](void* pointer, const detail::allocation_table::block&) { (void)cudaFree(pointer); });
  }

  void* allocate(std::size_t bytes, std::size_t alignment = default_alignment_bytes) {
    expects(alignment <= default_alignment_bytes, [&] {
      return "cudaMalloc aligns to " + std::to_string(default_alignment_bytes) +
             " bytes; alignment " + std::to_string(alignment) + " is not supported";
    });
    return accounting_.charge(bytes, [&] {
      void* pointer = nullptr;
      check_cuda(cudaMalloc(&pointer, bytes == 0 ? 1 : bytes), "cudaMalloc");
      live_.insert(accounting_.name(), pointer, {bytes, alignment}, [](void* p) { (void)cudaFree(p); });
      return pointer;
    });
  }
  void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment_bytes) {
    if (pointer == nullptr) return;
    live_.remove(accounting_.name(), pointer, bytes, alignment,
                 [](void* p, const detail::allocation_table::block&) { check_cuda(cudaFree(p), "cudaFree"); });
    accounting_.remove(bytes);
  }
  /// Stream-ordered allocation: usable by work enqueued on `stream` after this call.
  void* allocate_async(std::size_t bytes, cudaStream_t stream) {
    return accounting_.charge(bytes, [&] {
      void* pointer = nullptr;
      check_cuda(cudaMallocAsync(&pointer, bytes == 0 ? 1 : bytes, stream), "cudaMallocAsync");
      live_.insert(accounting_.name(), pointer, {bytes, default_alignment_bytes},
                   [stream](void* p) { (void)cudaFreeAsync(p, stream); });
      return pointer;
    });
  }
  /// Stream-ordered free: the memory is reused only after the stream's prior work.
  void deallocate_async(void* pointer, std::size_t bytes, cudaStream_t stream) {
    if (pointer == nullptr) return;
    live_.remove(accounting_.name(), pointer, bytes, std::nullopt,  // either allocate's alignment
                 [stream](void* p, const detail::allocation_table::block&) {
                   check_cuda(cudaFreeAsync(p, stream), "cudaFreeAsync");
                 });
    accounting_.remove(bytes);
  }

 private:
  detail::allocation_table live_;
};

/// Page-locked host memory from cudaMallocHost, so copies can be asynchronous.
class cuda_pinned_memory_resource : public detail::accounted_resource {
 public:
  explicit cuda_pinned_memory_resource(std::optional<std::size_t> capacity_bytes = {})
      : accounted_resource("cuda pinned host memory", capacity_bytes) {}
  cuda_pinned_memory_resource(const cuda_pinned_memory_resource&) = delete;
  cuda_pinned_memory_resource& operator=(const cuda_pinned_memory_resource&) = delete;
  ~cuda_pinned_memory_resource() {
    live_.free_all([](void* pointer, const detail::allocation_table::block&) { (void)cudaFreeHost(pointer); });
  }

  void* allocate(std::size_t bytes, std::size_t alignment = default_alignment_bytes) {
    expects(alignment <= 4096, [&] {
      return "cudaMallocHost aligns to pages; alignment " + std::to_string(alignment) +
             " is not supported";
    });
    return accounting_.charge(bytes, [&] {
      void* pointer = nullptr;
      check_cuda(cudaMallocHost(&pointer, bytes == 0 ? 1 : bytes), "cudaMallocHost");
      live_.insert(accounting_.name(), pointer, {bytes, alignment}, [](void* p) { (void)cudaFreeHost(p); });
      return pointer;
    });
  }
  void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment_bytes) {
    if (pointer == nullptr) return;
    live_.remove(accounting_.name(), pointer, bytes, alignment,
                 [](void* p, const detail::allocation_table::block&) { check_cuda(cudaFreeHost(p), "cudaFreeHost"); });
    accounting_.remove(bytes);
  }

 private:
  detail::allocation_table live_;
};

}  // namespace memo
