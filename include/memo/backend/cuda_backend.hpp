// memo/backend/cuda_backend.hpp
//
// The `Backend` concept over the CUDA runtime: streams are non-blocking
// `cudaStream_t`s, events are `cudaEvent_t`s, device and pinned memory come
// from cuda_memory_resource.hpp, and every call is checked.
//
// - Compute: `parallel_for` launches a grid-stride kernel of the functor
//   (cuda_compute.hpp; call it from a .cu file), `gemm` /
//   `gemm_strided_batched` go to cuBLAS with one handle per stream, created
//   and destroyed with the stream, over a workspace the caller provides
//   (cuda_blas.hpp): `stream_workspace_bytes()` says how many bytes, and
//   `make_stream(name, region)` uses them. `make_stream(name)` runs cuBLAS
//   without a workspace. fp32, fp16 and bf16 operands, fp32 accumulation.
// - Work enqueued with a callable that takes a `cudaStream_t` runs on the
//   calling thread at once and is expected to launch its kernels on that
//   stream; a callable that takes nothing (it only needs to be movable)
//   runs on the stream as a host function (cudaLaunchHostFunc), and an
//   exception it throws is kept and rethrown by the next synchronisation of
//   that stream, or by the backend's `synchronize()`, as on the host
//   backend, also when the stream was destroyed before anyone synchronised
//   it. Events carry such a failure to the streams that wait on them (a
//   host function stamps the event when it is recorded, another poisons the
//   waiter), but only for streams a failure can reach: a stream that never
//   ran host work records plain CUDA events. A host function must not synchronise (CUDA forbids CUDA calls from
//   it); doing so is a memo::error rather than a deadlock.
//
// Creating a `cuda_backend` on a machine without a usable device throws a
// `memo::error` saying so; nothing else in memo needs a device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include "memo/backend/compute.hpp"
#include "memo/backend/concepts.hpp"
#include "memo/backend/cuda_blas.hpp"
#include "memo/backend/cuda_check.hpp"
#include "memo/backend/cuda_compute.hpp"
#include "memo/backend/cuda_host_tasks.hpp"
#include "memo/backend/cuda_memory_resource.hpp"
#include "memo/backend/stream_failure.hpp"
#include "memo/backend/unique_task.hpp"
#include "memo/core/error.hpp"
#include "memo/core/memory_region.hpp"

namespace memo {

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
          failures_(std::move(other.failures_)),
          orphans_(std::move(other.orphans_)),
          blas_(std::move(other.blas_)) {}
    stream& operator=(stream&& other) noexcept {
      if (this != &other) {
        destroy();
        handle_ = std::exchange(other.handle_, nullptr);
        name_ = std::move(other.name_);
        failures_ = std::move(other.failures_);
        orphans_ = std::move(other.orphans_);
        blas_ = std::move(other.blas_);
      }
      return *this;
    }
    stream(const stream&) = delete;
    stream& operator=(const stream&) = delete;
    ~stream() { destroy(); }

    [[nodiscard]] const std::string& name() const noexcept { return name_; }
    [[nodiscard]] cudaStream_t native() const noexcept { return handle_; }
    /// The stream's cuBLAS handle (bound to it and to its workspace).
    [[nodiscard]] cublasHandle_t blas() const noexcept { return blas_.get(); }

   private:
    friend class cuda_backend;
    stream(std::string stream_name, memory_region workspace,
           std::shared_ptr<detail::stream_failure_sink> orphans)
        : name_(std::move(stream_name)), orphans_(std::move(orphans)) {
      check_cuda(cudaStreamCreateWithFlags(&handle_, cudaStreamNonBlocking),
                 "cudaStreamCreateWithFlags");
      try {
        failures_ = std::make_shared<detail::cuda_stream_failures>();
        blas_ = detail::cublas_handle(handle_, workspace);
      } catch (...) {
        destroy();
        throw;
      }
    }
    void destroy() noexcept {
      if (handle_ != nullptr) {
        (void)cudaStreamSynchronize(handle_);
        blas_.reset();
        (void)cudaStreamDestroy(handle_);
        handle_ = nullptr;
      }
      // A host function's error nobody synchronised: the backend reports it.
      if (failures_ && orphans_) orphans_->add(failures_->take());
      failures_.reset();
    }
    cudaStream_t handle_ = nullptr;
    std::string name_;
    std::shared_ptr<detail::cuda_stream_failures> failures_;
    std::shared_ptr<detail::stream_failure_sink> orphans_;
    detail::cublas_handle blas_;
  };

  class event {
   public:
    event(event&& other) noexcept
        : handle_(std::exchange(other.handle_, nullptr)),
          recorded_(std::exchange(other.recorded_, false)),
          failure_(std::move(other.failure_)) {}
    event& operator=(event&& other) noexcept {
      if (this != &other) {
        destroy();
        handle_ = std::exchange(other.handle_, nullptr);
        recorded_ = std::exchange(other.recorded_, false);
        failure_ = std::move(other.failure_);
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
    std::shared_ptr<detail::cuda_event_failure> failure_;  // of the latest record, if it can carry one
  };

  cuda_backend() : cuda_backend(options{}) {}
  explicit cuda_backend(options config)
      : config_(config),
        device_memory_((select_device(config.device), config.device_capacity_bytes)),
        pinned_memory_(config.pinned_capacity_bytes) {
    int sms = 0;
    int major = 0;
    check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, config.device),
               "cudaDeviceGetAttribute(multiProcessorCount)");
    check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, config.device),
               "cudaDeviceGetAttribute(computeCapabilityMajor)");
    max_blocks_ = static_cast<std::int64_t>(sms) * 8;
    workspace_bytes_ = detail::cuda_blas_workspace_bytes(major);
  }
  cuda_backend(const cuda_backend&) = delete;
  cuda_backend& operator=(const cuda_backend&) = delete;

  static constexpr std::string_view name() noexcept { return "cuda"; }
  [[nodiscard]] int device() const noexcept { return config_.device; }

  cuda_device_memory_resource& device_memory() noexcept { return device_memory_; }
  cuda_pinned_memory_resource& pinned_memory() noexcept { return pinned_memory_; }

  /// Device memory one stream's cuBLAS workspace wants.
  [[nodiscard]] std::size_t stream_workspace_bytes() const noexcept { return workspace_bytes_; }

  /// A stream whose cuBLAS runs without a workspace.
  stream make_stream(std::string_view stream_name = {}) {
    return make_stream(stream_name, memory_region{});
  }
  /// A stream whose cuBLAS handle uses `workspace` (device memory of at least
  /// stream_workspace_bytes(), 256-byte aligned, owned by the caller and
  /// outliving the stream). An empty region means no workspace.
  stream make_stream(std::string_view stream_name, memory_region workspace) {
    std::string label = stream_name.empty() ? std::string("cuda stream") : std::string(stream_name);
    if (!workspace.empty()) {
      region_carver carver(workspace, "workspace of stream '" + label + "'");
      workspace = carver.take(workspace_bytes_, "cuBLAS workspace");
    }
    stream made(std::move(label), workspace, orphans_);
    std::lock_guard lock(registry_mutex_);
    std::erase_if(streams_, [](const auto& weak) { return weak.expired(); });
    streams_.push_back(made.failures_);
    return made;
  }
  event make_event() { return event(); }

  /// Marks the work enqueued on `on` so far. When a failure can reach the
  /// stream, the mark also carries the stream's failure at that point.
  void record(event& marker, stream& on) {
    std::shared_ptr<detail::cuda_event_failure> carried;
    if (may_fail(on)) {
      carried = std::make_shared<detail::cuda_event_failure>();
      detail::launch_owning_host_function(
          on.handle_, &detail::cuda_stamp_event,
          std::make_unique<detail::cuda_failure_link>(detail::cuda_failure_link{on.failures_, carried}));
    }
    check_cuda(cudaEventRecord(marker.handle_, on.handle_), "cudaEventRecord");
    marker.recorded_ = true;
    marker.failure_ = std::move(carried);
  }
  /// Later work on `waiter` waits for the mark; a failure the mark carries
  /// poisons `waiter` as its own would.
  void wait(stream& waiter, const event& marker) {
    if (!marker.recorded_) return;
    check_cuda(cudaStreamWaitEvent(waiter.handle_, marker.handle_, 0), "cudaStreamWaitEvent");
    if (marker.failure_) {
      {
        std::lock_guard lock(waiter.failures_->mutex);
        waiter.failures_->may_fail = true;
      }
      detail::launch_owning_host_function(
          waiter.handle_, &detail::cuda_poison_from_event,
          std::make_unique<detail::cuda_failure_link>(
              detail::cuda_failure_link{waiter.failures_, marker.failure_}));
    }
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
    detail::expect_not_in_cuda_host_task("synchronize(event)");
    if (!marker.recorded_) return;
    check_cuda(cudaEventSynchronize(marker.handle_), "cudaEventSynchronize");
    if (!marker.failure_) return;
    detail::stream_failure_ptr failure;
    {
      std::lock_guard lock(marker.failure_->mutex);
      failure = marker.failure_->failure;
    }
    if (failure) failure->raise();
  }
  void synchronize(stream& on) {
    detail::expect_not_in_cuda_host_task("synchronize(stream)");
    check_cuda(cudaStreamSynchronize(on.handle_), "cudaStreamSynchronize");
    if (auto failure = on.failures_->take()) failure->raise();
  }
  /// Waits for the device, then rethrows the first failure of any stream
  /// (a live one's, else one destroyed before anyone synchronised it).
  void synchronize() {
    detail::expect_not_in_cuda_host_task("cuda_backend::synchronize()");
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    std::vector<std::shared_ptr<detail::cuda_stream_failures>> live;
    {
      std::lock_guard lock(registry_mutex_);
      for (auto& weak : streams_) {
        if (auto failures = weak.lock()) live.push_back(std::move(failures));
      }
    }
    detail::stream_failure_ptr first;
    for (auto& failures : live) {
      if (auto failure = failures->take(); failure && !first) first = std::move(failure);
    }
    if (auto orphan = orphans_->take_first(); orphan && !first) first = std::move(orphan);
    if (first) first->raise();
  }

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

  void memset_async(void* destination, int value, std::size_t bytes, stream& on) {
    if (bytes == 0) return;
    detail::check_memset_arguments(destination, value, bytes);
    check_cuda(cudaMemsetAsync(destination, value, bytes, on.handle_), "cudaMemsetAsync");
  }

  /// Launches `functor(i)` / `functor(row, col)` over the extent on `on`
  /// (from a .cu file: the functor's operator() must be MEMO_HOST_DEVICE).
  template <class Extent, class F>
    requires parallel_functor<std::decay_t<F>, Extent>
  void parallel_for(stream& on, Extent extent, F&& functor) {
    if (detail::checked_extent_size(extent) == 0) return;
    detail::cuda_parallel_for(on.handle_, max_blocks_, extent, functor);
  }

  /// C = alpha op(A) op(B) + beta C on `on` (see compute.hpp) with cuBLAS.
  template <cuda_gemm_scalar T>
  void gemm(stream& on, const gemm_shape& shape, float alpha, const T* a, const T* b, float beta,
            T* c) {
    gemm_strided_batched(on, shape, gemm_batch{}, alpha, a, b, beta, c);
  }

  template <cuda_gemm_scalar T>
  void gemm_strided_batched(stream& on, const gemm_shape& shape, const gemm_batch& batch,
                            float alpha, const T* a, const T* b, float beta, T* c) {
    const gemm_shape checked = detail::checked_gemm_shape(shape, a, b, c, "gemm");
    detail::check_gemm_batch(checked, batch, "gemm_strided_batched");
    if (checked.m == 0 || checked.n == 0 || batch.count == 0) return;
    detail::cublas_gemm(on.blas(), checked, batch, alpha, a, b, beta, c);
  }

  /// `work(cudaStream_t)` launches on the stream now; `work()` runs on it as
  /// a host function, in order with the stream's other work.
  template <class Work>
    requires std::is_invocable_v<Work&, native_stream> || std::is_invocable_v<Work&>
  void enqueue(stream& on, Work&& work) {
    if constexpr (std::is_invocable_v<Work&, native_stream>) {
      work(on.handle_);
    } else {
      {
        std::lock_guard lock(on.failures_->mutex);
        on.failures_->may_fail = true;
      }
      detail::launch_owning_host_function(
          on.handle_, &detail::run_cuda_host_task,
          std::make_unique<detail::cuda_host_task>(
              detail::cuda_host_task{detail::unique_task(std::forward<Work>(work)), on.failures_}));
    }
  }

 private:
  static bool may_fail(const stream& on) {
    std::lock_guard lock(on.failures_->mutex);
    return on.failures_->may_fail;
  }

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
  std::int64_t max_blocks_ = 1;
  std::size_t workspace_bytes_ = 0;
  std::shared_ptr<detail::stream_failure_sink> orphans_ =
      std::make_shared<detail::stream_failure_sink>();
  std::mutex registry_mutex_;
  std::vector<std::weak_ptr<detail::cuda_stream_failures>> streams_;
};

static_assert(Backend<cuda_backend>, "cuda_backend must satisfy memo::Backend");

}  // namespace memo
