// memo/backend/cuda_backend.hpp
//
// The `Backend` concept over the CUDA runtime: streams are non-blocking
// `cudaStream_t`s, events are `cudaEvent_t`s, device memory comes from
// `cudaMalloc` (or stream-ordered `cudaMallocAsync`), pinned host memory
// from `cudaMallocHost`, and every call is checked. The accounting matches
// the host backend's exactly (requested bytes, current and peak), so a plan
// validated on the host backend is measured the same way on a GPU.
//
// Work enqueued with a callable that takes a `cudaStream_t` runs on the
// calling thread at once and is expected to launch its kernels on that
// stream; a callable that takes nothing runs on the stream as a host
// function (cudaLaunchHostFunc), and an exception it throws is kept and
// rethrown by the next synchronisation of that stream, as on the host
// backend.
//
// Creating a `cuda_backend` on a machine without a usable device throws a
// `memo::error` saying so; nothing else in memo needs a device.
#pragma once

#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <cuda_runtime_api.h>

#include "memo/backend/concepts.hpp"
#include "memo/backend/cuda_check.hpp"
#include "memo/backend/memory_resource.hpp"
#include "memo/backend/stream_failure.hpp"
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

namespace detail {

// The accounting half of a CUDA memory resource.
class cuda_accounted_resource {
 public:
  [[nodiscard]] std::size_t current_bytes() const { return accounting_.current_bytes(); }
  [[nodiscard]] std::size_t peak_bytes() const { return accounting_.peak_bytes(); }
  void reset_peak() { accounting_.reset_peak(); }
  [[nodiscard]] std::uint64_t allocation_count() const { return accounting_.allocation_count(); }
  [[nodiscard]] std::uint64_t deallocation_count() const { return accounting_.deallocation_count(); }

 protected:
  cuda_accounted_resource(std::string name, std::optional<std::size_t> capacity_bytes)
      : accounting_(std::move(name), capacity_bytes) {}
  memory_accounting accounting_;
};

}  // namespace detail

/// Device memory from cudaMalloc with memo's accounting.
class cuda_device_memory_resource : public detail::cuda_accounted_resource {
 public:
  explicit cuda_device_memory_resource(std::optional<std::size_t> capacity_bytes = {})
      : cuda_accounted_resource("cuda device memory", capacity_bytes) {}

  void* allocate(std::size_t bytes, std::size_t alignment = default_alignment_bytes) {
    expects(alignment <= default_alignment_bytes, [&] {
      return "cudaMalloc aligns to " + std::to_string(default_alignment_bytes) +
             " bytes; alignment " + std::to_string(alignment) + " is not supported";
    });
    return accounting_.charge(bytes, [&] {
      void* pointer = nullptr;
      check_cuda(cudaMalloc(&pointer, bytes == 0 ? 1 : bytes), "cudaMalloc");
      return pointer;
    });
  }
  void deallocate(void* pointer, std::size_t bytes, std::size_t = default_alignment_bytes) {
    if (pointer == nullptr) return;
    check_cuda(cudaFree(pointer), "cudaFree");
    accounting_.remove(bytes);
  }
  /// Stream-ordered allocation: usable by work enqueued on `stream` after this call.
  void* allocate_async(std::size_t bytes, cudaStream_t stream) {
    return accounting_.charge(bytes, [&] {
      void* pointer = nullptr;
      check_cuda(cudaMallocAsync(&pointer, bytes == 0 ? 1 : bytes, stream), "cudaMallocAsync");
      return pointer;
    });
  }
  /// Stream-ordered free: the memory is reused only after the stream's prior work.
  void deallocate_async(void* pointer, std::size_t bytes, cudaStream_t stream) {
    if (pointer == nullptr) return;
    check_cuda(cudaFreeAsync(pointer, stream), "cudaFreeAsync");
    accounting_.remove(bytes);
  }
};

/// Page-locked host memory from cudaMallocHost, so copies can be asynchronous.
class cuda_pinned_memory_resource : public detail::cuda_accounted_resource {
 public:
  explicit cuda_pinned_memory_resource(std::optional<std::size_t> capacity_bytes = {})
      : cuda_accounted_resource("cuda pinned host memory", capacity_bytes) {}

  void* allocate(std::size_t bytes, std::size_t alignment = default_alignment_bytes) {
    expects(alignment <= 4096, [&] {
      return "cudaMallocHost aligns to pages; alignment " + std::to_string(alignment) +
             " is not supported";
    });
    return accounting_.charge(bytes, [&] {
      void* pointer = nullptr;
      check_cuda(cudaMallocHost(&pointer, bytes == 0 ? 1 : bytes), "cudaMallocHost");
      return pointer;
    });
  }
  void deallocate(void* pointer, std::size_t bytes, std::size_t = default_alignment_bytes) {
    if (pointer == nullptr) return;
    check_cuda(cudaFreeHost(pointer), "cudaFreeHost");
    accounting_.remove(bytes);
  }
};

namespace detail {

// Errors thrown by host functions running on a CUDA stream, kept until the
// stream is synchronised.
struct cuda_stream_failures {
  std::mutex mutex;
  stream_failure_ptr first;
};

struct cuda_host_task {
  std::function<void()> work;
  std::shared_ptr<cuda_stream_failures> failures;
};

inline void run_cuda_host_task(void* user_data) noexcept {
  std::unique_ptr<cuda_host_task> task(static_cast<cuda_host_task*>(user_data));
  {
    std::lock_guard lock(task->failures->mutex);
    if (task->failures->first) return;  // poisoned: skip dependent work
  }
  try {
    task->work();
  } catch (...) {
    std::lock_guard lock(task->failures->mutex);
    if (!task->failures->first) task->failures->first = stream_failure::capture_current();
  }
}

}  // namespace detail

class cuda_backend {
 public:
  struct options {
    int device = 0;
    std::optional<std::size_t> device_capacity_bytes;
    std::optional<std::size_t> pinned_capacity_bytes;
  };

  using native_stream = cudaStream_t;

  class stream {
   public:
    stream(stream&& other) noexcept
        : handle_(std::exchange(other.handle_, nullptr)),
          name_(std::move(other.name_)),
          failures_(std::move(other.failures_)) {}
    stream& operator=(stream&& other) noexcept {
      if (this != &other) {
        destroy();
        handle_ = std::exchange(other.handle_, nullptr);
        name_ = std::move(other.name_);
        failures_ = std::move(other.failures_);
      }
      return *this;
    }
    stream(const stream&) = delete;
    stream& operator=(const stream&) = delete;
    ~stream() { destroy(); }

    [[nodiscard]] const std::string& name() const noexcept { return name_; }
    [[nodiscard]] cudaStream_t native() const noexcept { return handle_; }

   private:
    friend class cuda_backend;
    explicit stream(std::string stream_name) : name_(std::move(stream_name)) {
      check_cuda(cudaStreamCreateWithFlags(&handle_, cudaStreamNonBlocking),
                 "cudaStreamCreateWithFlags");
      failures_ = std::make_shared<detail::cuda_stream_failures>();
    }
    void destroy() noexcept {
      if (handle_ != nullptr) {
        (void)cudaStreamSynchronize(handle_);
        (void)cudaStreamDestroy(handle_);
        handle_ = nullptr;
      }
    }
    cudaStream_t handle_ = nullptr;
    std::string name_;
    std::shared_ptr<detail::cuda_stream_failures> failures_;
  };

  class event {
   public:
    event(event&& other) noexcept
        : handle_(std::exchange(other.handle_, nullptr)),
          recorded_(std::exchange(other.recorded_, false)) {}
    event& operator=(event&& other) noexcept {
      if (this != &other) {
        destroy();
        handle_ = std::exchange(other.handle_, nullptr);
        recorded_ = std::exchange(other.recorded_, false);
      }
      return *this;
    }
    event(const event&) = delete;
    event& operator=(const event&) = delete;
    ~event() { destroy(); }
    [[nodiscard]] cudaEvent_t native() const noexcept { return handle_; }

   private:
    friend class cuda_backend;
    event() { check_cuda(cudaEventCreate(&handle_), "cudaEventCreate"); }
    void destroy() noexcept {
      if (handle_ != nullptr) (void)cudaEventDestroy(handle_);
      handle_ = nullptr;
    }
    cudaEvent_t handle_ = nullptr;
    bool recorded_ = false;
  };

  cuda_backend() : cuda_backend(options{}) {}
  explicit cuda_backend(options config)
      : config_(config),
        device_memory_((select_device(config.device), config.device_capacity_bytes)),
        pinned_memory_(config.pinned_capacity_bytes) {}
  cuda_backend(const cuda_backend&) = delete;
  cuda_backend& operator=(const cuda_backend&) = delete;

  static constexpr std::string_view name() noexcept { return "cuda"; }
  [[nodiscard]] int device() const noexcept { return config_.device; }

  cuda_device_memory_resource& device_memory() noexcept { return device_memory_; }
  cuda_pinned_memory_resource& pinned_memory() noexcept { return pinned_memory_; }

  stream make_stream(std::string_view stream_name = {}) {
    return stream(stream_name.empty() ? std::string("cuda stream") : std::string(stream_name));
  }
  event make_event() { return event(); }

  void record(event& marker, stream& on) {
    check_cuda(cudaEventRecord(marker.handle_, on.handle_), "cudaEventRecord");
    marker.recorded_ = true;
  }
  void wait(stream& waiter, const event& marker) {
    if (!marker.recorded_) return;
    check_cuda(cudaStreamWaitEvent(waiter.handle_, marker.handle_, 0), "cudaStreamWaitEvent");
  }
  [[nodiscard]] bool query(const event& marker) const {
    if (!marker.recorded_) return true;
    const cudaError_t status = cudaEventQuery(marker.handle_);
    if (status == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    check_cuda(status, "cudaEventQuery");
    return true;
  }
  void synchronize(const event& marker) {
    if (!marker.recorded_) return;
    check_cuda(cudaEventSynchronize(marker.handle_), "cudaEventSynchronize");
  }
  void synchronize(stream& on) {
    check_cuda(cudaStreamSynchronize(on.handle_), "cudaStreamSynchronize");
    detail::stream_failure_ptr failure;
    {
      std::lock_guard lock(on.failures_->mutex);
      std::swap(failure, on.failures_->first);
    }
    if (failure) failure->raise();
  }
  void synchronize() { check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

  [[nodiscard]] double elapsed_seconds(const event& start, const event& end) const {
    expects(start.recorded_ && end.recorded_,
            "elapsed_seconds: both events must have been recorded");
    float milliseconds = 0.0f;
    check_cuda(cudaEventElapsedTime(&milliseconds, start.handle_, end.handle_),
               "cudaEventElapsedTime");
    return static_cast<double>(milliseconds) / 1000.0;
  }

  void copy_async(void* destination, const void* source, std::size_t bytes, copy_kind kind,
                  stream& on) {
    if (bytes == 0) return;
    detail::check_copy_arguments(destination, source, bytes, kind);
    const cudaMemcpyKind native_kind = kind == copy_kind::host_to_device ? cudaMemcpyHostToDevice
                                       : kind == copy_kind::device_to_host ? cudaMemcpyDeviceToHost
                                       : kind == copy_kind::device_to_device
                                           ? cudaMemcpyDeviceToDevice
                                           : cudaMemcpyHostToHost;
    check_cuda(cudaMemcpyAsync(destination, source, bytes, native_kind, on.handle_),
               "cudaMemcpyAsync");
  }

  /// `work(cudaStream_t)` launches on the stream now; `work()` runs on it as
  /// a host function, in order with the stream's other work.
  template <class Work>
    requires std::is_invocable_v<Work&, native_stream> || std::is_invocable_v<Work&>
  void enqueue(stream& on, Work&& work) {
    if constexpr (std::is_invocable_v<Work&, native_stream>) {
      work(on.handle_);
    } else {
      auto task = std::make_unique<detail::cuda_host_task>(
          detail::cuda_host_task{std::function<void()>(std::forward<Work>(work)), on.failures_});
      check_cuda(cudaLaunchHostFunc(on.handle_, &detail::run_cuda_host_task, task.get()),
                 "cudaLaunchHostFunc");
      (void)task.release();  // owned by the host function from here on
    }
  }

 private:
  static void select_device(int device) {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      throw error(std::string("no usable CUDA device: cudaGetDeviceCount failed with ") +
                      cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")",
                  "cuda", static_cast<long>(status));
    }
    expects(count > 0, "no usable CUDA device: cudaGetDeviceCount reports 0 devices");
    expects(device >= 0 && device < count, [&] {
      return "CUDA device " + std::to_string(device) + " requested but only " +
             std::to_string(count) + " device(s) exist";
    });
    check_cuda(cudaSetDevice(device), "cudaSetDevice");
  }

  options config_;
  cuda_device_memory_resource device_memory_;
  cuda_pinned_memory_resource pinned_memory_;
};

static_assert(Backend<cuda_backend>, "cuda_backend must satisfy memo::Backend");

}  // namespace memo
