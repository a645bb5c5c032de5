// memo/backend/host_backend.hpp
//
// The backend CI runs: a GPU's execution model reproduced with threads.
//
// - Device memory and pinned host memory are both host memory, each behind
//   its own accounting resource (current and peak bytes, optional capacity),
//   so a test can assert that a swapped run's device peak equals its plan.
// - A stream is a worker thread draining a FIFO of tasks; an event is a
//   one-shot signal per `record`, so waiting on it is a real cross-thread
//   synchronisation and a missing one is a real data race that
//   ThreadSanitizer reports.
// - Asynchronous copies are memcpy on the thread of the stream they were
//   issued to, optionally throttled to a bandwidth per direction, so a host
//   run can reproduce a GPU's ratio of compute time to PCIe time. Like a
//   GPU's copy engines, each throttled direction moves one copy at a time,
//   shared by all streams, and back-to-back copies on a stream run at the
//   link's rate. A throttled copy's bytes land at the end of its booked
//   time, as they would be complete only then on a GPU.
// - Compute (`parallel_for`, `gemm`, `gemm_strided_batched`) runs on the
//   stream's worker, in order with its other work, across all cores through
//   one thread pool owned by the backend (host_compute.hpp). GEMMs are fp32.
// - An exception thrown by a task is kept, not lost: later work on that
//   stream is skipped (it would compute on garbage), events recorded after
//   it carry the error to every stream and host thread that waits on them,
//   and the next `synchronize` of the stream (or of such an event, or the
//   backend's) rethrows it (by value; see stream_failure.hpp). A stream
//   destroyed with an unreported error hands it to the backend's next
//   `synchronize()`. This mirrors CUDA's sticky errors, but per stream.
// - Lifetimes are enforced: destroying the backend drains its streams and
//   detaches them (enqueueing on such a stream afterwards is a memo::error);
//   a stream of another backend is rejected; synchronising a stream (or an
//   event it has yet to reach, or the whole backend) from a task running on
//   that stream would wait forever and is a memo::error instead; destroying
//   the backend from such a task stops the process with a message.
#pragma once

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "memo/backend/compute.hpp"
#include "memo/backend/concepts.hpp"
#include "memo/backend/host_compute.hpp"
#include "memo/backend/host_thread_pool.hpp"
#include "memo/backend/host_worker.hpp"
#include "memo/backend/memory_resource.hpp"
#include "memo/backend/stream_failure.hpp"
#include "memo/core/error.hpp"
#include "memo/core/memory_region.hpp"

namespace memo {

class host_backend {
 public:
  struct options {
    /// Copy bandwidth per direction in bytes per second; 0 = unthrottled.
    double host_to_device_bytes_per_second = 0.0;
    double device_to_host_bytes_per_second = 0.0;
    /// Capacities of the two memory resources; unset = unlimited.
    std::optional<std::size_t> device_capacity_bytes;
    std::optional<std::size_t> pinned_capacity_bytes;
    /// Threads that run one parallel_for or GEMM; 0 = one per hardware thread.
    std::size_t compute_threads = 0;
  };

  /// What work enqueued on a host stream receives.
  struct native_stream {
    std::string_view name;
    std::size_t index;
  };

  /// A stream: owns its worker thread. Destroying it waits for its work,
  /// except in a task of the stream itself (a task that owns the stream's
  /// last handle): the thread then drains the queue on its own, and the
  /// backend's destructor or synchronize() still waits for it.
  class stream {
   public:
    stream(stream&&) noexcept = default;
    stream& operator=(stream&&) noexcept = default;
    stream(const stream&) = delete;
    stream& operator=(const stream&) = delete;
    [[nodiscard]] const std::string& name() const { return worker().name(); }
    [[nodiscard]] native_stream native() const { return {worker().name(), worker().index()}; }

   private:
    friend class host_backend;
    explicit stream(std::shared_ptr<detail::host_worker_thread> worker) : worker_(std::move(worker)) {}
    [[nodiscard]] detail::host_worker& worker() const {
      expects(worker_ != nullptr, "use of a moved-from host_backend::stream");
      return worker_->worker();
    }
    std::shared_ptr<detail::host_worker_thread> worker_;
  };

  /// An event: holds the signal of its latest `record`.
  class event {
   public:
    event() = default;
    event(event&&) noexcept = default;
    event& operator=(event&&) noexcept = default;
    event(const event&) = delete;
    event& operator=(const event&) = delete;

   private:
    friend class host_backend;
    std::shared_ptr<detail::host_signal> signal_;
  };

  host_backend() : host_backend(options{}) {}
  explicit host_backend(options config)
      : config_(validated(config)),
        to_device_(config.host_to_device_bytes_per_second),
        to_host_(config.device_to_host_bytes_per_second),
        device_memory_("host_backend device memory", config.device_capacity_bytes),
        pinned_memory_("host_backend pinned host memory", config.pinned_capacity_bytes),
        pool_(config.compute_threads) {}
  host_backend(const host_backend&) = delete;
  host_backend& operator=(const host_backend&) = delete;

  /// Drains every live stream and detaches it: its queued copies and
  /// compute finish while the copy engines and the pool still exist, and
  /// enqueueing on it afterwards is a memo::error. Errors nobody
  /// synchronised are dropped with the backend.
  /// Destroying it from a task (or a parallel_for piece) of one of its own
  /// streams would wait for that task forever, and letting the stream run
  /// on would use the destroyed pool: the process is stopped with a message
  /// instead (a destructor cannot report an error otherwise).
  ~host_backend() {
    auto live = live_streams();
    for (auto& worker : live) {
      if (detail::running_stream_tag == worker.get()) {
        std::fprintf(stderr,
                     "memo: host_backend destroyed by a task running on its own stream '%s': "
                     "it would wait for that task forever\n",
                     worker->name().c_str());
        std::abort();
      }
    }
    for (auto& worker : live) worker->detach();
  }

  static constexpr std::string_view name() noexcept { return "host"; }
  [[nodiscard]] const options& config() const noexcept { return config_; }
  /// Threads one parallel_for or GEMM runs on.
  [[nodiscard]] std::size_t compute_threads() const noexcept { return pool_.concurrency(); }

  host_memory_resource& device_memory() noexcept { return device_memory_; }
  host_memory_resource& pinned_memory() noexcept { return pinned_memory_; }

  /// Device memory a stream needs for its compute (a BLAS workspace); the
  /// host backend needs none. See make_stream(name, workspace).
  [[nodiscard]] static constexpr std::size_t stream_workspace_bytes() noexcept { return 0; }

  stream make_stream(std::string_view stream_name = {}) {
    std::lock_guard lock(registry_mutex_);
    const std::size_t index = next_stream_index_++;
    std::string label = stream_name.empty() ? "stream " + std::to_string(index)
                                            : std::string(stream_name);
    auto worker = std::make_shared<detail::host_worker>(std::move(label), index, this, orphans_);
    streams_.push_back(worker);
    return stream(std::make_shared<detail::host_worker_thread>(std::move(worker)));
  }
  /// The same stream over a workspace of stream_workspace_bytes() (the host
  /// backend uses none; the overload exists so code is backend-agnostic).
  stream make_stream(std::string_view stream_name, memory_region workspace) {
    expects(workspace.data != nullptr || workspace.bytes == 0,
            "make_stream: a workspace region with a null pointer");
    return make_stream(stream_name);
  }

  event make_event() { return event{}; }

  /// Marks the work enqueued on `on` so far.
  void record(event& marker, stream& on) {
    auto& worker = owned(on);
    auto signal = std::make_shared<detail::host_signal>(&worker);
    worker.push({detail::host_worker::task_kind::fire, {}, signal});
    marker.signal_ = std::move(signal);
  }

  /// Later work on `waiter` waits for the mark `marker` holds now.
  void wait(stream& waiter, const event& marker) {
    auto& worker = owned(waiter);
    if (!marker.signal_) return;  // never recorded: nothing to wait for
    worker.push({detail::host_worker::task_kind::wait, {}, marker.signal_});
  }

  [[nodiscard]] bool query(const event& marker) const {
    return !marker.signal_ || marker.signal_->done();
  }

  /// Blocks until the mark is reached; rethrows an error of the work it covers.
  void synchronize(const event& marker) {
    if (!marker.signal_) return;
    expects(marker.signal_->done() || detail::running_stream_tag != marker.signal_->recorder(),
            "synchronize(event) was called from a task running on the stream that records it, "
            "before the record: it would wait for itself forever");
    const auto signal = marker.signal_;  // alive while waited for, whatever happens to `marker`
    detail::wait_for(*signal, static_cast<const detail::host_worker*>(detail::running_stream_tag));
    if (auto failure = signal->failure()) failure->raise();
  }

  /// Blocks until the stream's work is done; rethrows (and clears) its error.
  void synchronize(stream& on) { owned(on).synchronize(); }

  /// Synchronises every live stream, then rethrows the first error found:
  /// a live stream's, or else one of a stream destroyed unsynchronised.
  void synchronize() {
    auto live = live_streams();
    for (auto& worker : live) {
      expects(detail::running_stream_tag != worker.get(), [&] {
        return "host_backend::synchronize() was called from a task running on stream '" +
               worker->name() + "': it would wait for itself forever";
      });
    }
    detail::stream_failure_ptr first;
    for (auto& worker : live) {
      try {
        worker->synchronize();
      } catch (...) {
        if (!first) first = detail::stream_failure::capture_current();
      }
    }
    live.clear();  // a stream destroyed meanwhile reports to orphans_ now
    if (auto orphan = orphans_->take_first(); orphan && !first) first = std::move(orphan);
    if (first) first->raise();
  }

  /// Seconds between two completed events (like cudaEventElapsedTime).
  [[nodiscard]] double elapsed_seconds(const event& start, const event& end) const {
    expects(start.signal_ && end.signal_, "elapsed_seconds: both events must have been recorded");
    expects(start.signal_->done() && end.signal_->done(),
            "elapsed_seconds: both events must have completed (synchronize first)");
    return std::chrono::duration<double>(end.signal_->when() - start.signal_->when()).count();
  }

  /// Copies `bytes` bytes on `on`, after the work enqueued there before it.
  void copy_async(void* destination, const void* source, std::size_t bytes, copy_kind kind,
                  stream& on) {
    auto& worker = owned(on);
    if (bytes == 0) return;
    detail::check_copy_arguments(destination, source, bytes, kind);
    detail::host_copy_engine* engine = kind == copy_kind::host_to_device ? &to_device_
                                       : kind == copy_kind::device_to_host ? &to_host_
                                                                           : nullptr;
    if (engine != nullptr && !engine->throttled()) engine = nullptr;
    detail::host_worker::task item;
    item.kind = detail::host_worker::task_kind::copy;
    item.copy = {destination, source, bytes, engine};
    worker.push(std::move(item));
  }

  /// Sets `bytes` bytes at `destination` to `value` on `on`, in order.
  void memset_async(void* destination, int value, std::size_t bytes, stream& on) {
    auto& worker = owned(on);
    if (bytes == 0) return;
    detail::check_memset_arguments(destination, value, bytes);
    push_work(worker, [destination, value, bytes] { std::memset(destination, value, bytes); });
  }

  /// Runs `functor(i)` (extent_1d) or `functor(row, col)` (extent_2d) for
  /// every index, on all cores, after the work enqueued on `on` before it.
  template <class Extent, class F>
    requires parallel_functor<std::decay_t<F>, Extent>
  void parallel_for(stream& on, Extent extent, F&& functor) {
    auto& worker = owned(on);
    if (detail::checked_extent_size(extent) == 0) return;
    push_work(worker, [pool = &pool_, extent, fn = std::decay_t<F>(std::forward<F>(functor))] {
      detail::host_parallel_for(*pool, extent, fn);
    });
  }

  /// C = alpha op(A) op(B) + beta C on `on` (see compute.hpp); fp32 only.
  template <class T>
  void gemm(stream& on, const gemm_shape& shape, float alpha, const T* a, const T* b, float beta,
            T* c) {
    gemm_strided_batched(on, shape, gemm_batch{}, alpha, a, b, beta, c);
  }

  /// `batch.count` GEMMs of one shape at fixed element strides.
  template <class T>
  void gemm_strided_batched(stream& on, const gemm_shape& shape, const gemm_batch& batch,
                            float alpha, const T* a, const T* b, float beta, T* c) {
    static_assert(std::is_same_v<T, float>,
                  "host_backend GEMMs compute in fp32 only: pass float operands (convert bf16/fp16 "
                  "first) or use cuda_backend for half-precision GEMMs");
    auto& worker = owned(on);
    const gemm_shape checked = detail::checked_gemm_shape(shape, a, b, c, "gemm");
    detail::check_gemm_batch(checked, batch, "gemm_strided_batched");
    if (checked.m == 0 || checked.n == 0 || batch.count == 0) return;
    push_work(worker, [pool = &pool_, checked, batch, alpha, a, b, beta, c] {
      detail::host_gemm(*pool, checked, batch, alpha, a, b, beta, c);
    });
  }

  /// Runs `work(native_stream)` (or `work()`) on the stream's thread, in
  /// order. The callable only needs to be movable.
  template <class Work>
    requires std::is_invocable_v<Work&, native_stream> || std::is_invocable_v<Work&>
  void enqueue(stream& on, Work&& work) {
    auto& worker = owned(on);
    if constexpr (std::is_invocable_v<Work&, native_stream>) {
      push_work(worker, [native = on.native(), fn = std::forward<Work>(work)]() mutable { fn(native); });
    } else {
      push_work(worker, std::forward<Work>(work));
    }
  }

 private:
  static const options& validated(const options& config) {
    for (const auto& [rate, name] : {std::pair{config.host_to_device_bytes_per_second, "host_to_device"},
                                     std::pair{config.device_to_host_bytes_per_second, "device_to_host"}}) {
      expects(rate == 0.0 || (std::isfinite(rate) && rate >= 1.0), [&] {
        return std::string("host_backend: ") + name + "_bytes_per_second must be 0 (unthrottled) or a finite "
               "rate of at least 1 byte/s, got " + std::to_string(rate);
      });
    }
    return config;
  }

  // The worker of a stream of this backend.
  detail::host_worker& owned(stream& on) const {
    auto& worker = on.worker();
    expects(worker.owner() == this, [&] {
      return worker.owner() == nullptr
                 ? "stream '" + worker.name() + "' outlived its host_backend"
                 : "stream '" + worker.name() + "' belongs to another host_backend";
    });
    return worker;
  }

  template <class Fn>
  static void push_work(detail::host_worker& worker, Fn&& fn) {
    detail::host_worker::task item;
    item.work = detail::unique_task(std::forward<Fn>(fn));
    worker.push(std::move(item));
  }

  std::vector<std::shared_ptr<detail::host_worker>> live_streams() {
    std::vector<std::shared_ptr<detail::host_worker>> live;
    std::lock_guard lock(registry_mutex_);
    std::erase_if(streams_, [](const auto& weak) { return weak.expired(); });
    for (auto& weak : streams_) {
      if (auto worker = weak.lock()) live.push_back(std::move(worker));
    }
    return live;
  }

  options config_;
  detail::host_copy_engine to_device_;
  detail::host_copy_engine to_host_;
  host_memory_resource device_memory_;
  host_memory_resource pinned_memory_;
  detail::host_thread_pool pool_;
  std::shared_ptr<detail::stream_failure_sink> orphans_ = std::make_shared<detail::stream_failure_sink>();
  std::mutex registry_mutex_;
  std::vector<std::weak_ptr<detail::host_worker>> streams_;
  std::size_t next_stream_index_ = 0;
};

static_assert(Backend<host_backend>, "host_backend must satisfy memo::Backend");

}  // namespace memo
