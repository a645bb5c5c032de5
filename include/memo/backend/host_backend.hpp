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
//   link's rate without paying a thread wake-up each.
// - An exception thrown by a task is kept, not lost: later work on that
//   stream is skipped (it would compute on garbage), events recorded after
//   it carry the error to every stream and host thread that waits on them,
//   and the next `synchronize` of the stream (or of such an event) rethrows
//   it (by value; see stream_failure.hpp). This mirrors CUDA's sticky
//   errors, but per stream.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "memo/backend/concepts.hpp"
#include "memo/backend/memory_resource.hpp"
#include "memo/backend/stream_failure.hpp"
#include "memo/core/error.hpp"

namespace memo {

namespace detail {

using host_clock = std::chrono::steady_clock;

// One `record`: fired once by the recording stream when it reaches it.
class host_signal {
 public:
  /// Marks the signal reached at `when` (the stream's time at this point of
  /// its queue, see host_worker::ready_at_).
  void fire(stream_failure_ptr failure, host_clock::time_point when = host_clock::now()) {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
      failure_ = std::move(failure);
      when_ = when;
    }
    ready_.notify_all();
  }
  void wait() {
    std::unique_lock lock(mutex_);
    ready_.wait(lock, [&] { return done_; });
  }
  [[nodiscard]] bool done() const {
    std::lock_guard lock(mutex_);
    return done_;
  }
  [[nodiscard]] stream_failure_ptr failure() const {
    std::lock_guard lock(mutex_);
    return failure_;
  }
  [[nodiscard]] host_clock::time_point when() const {
    std::lock_guard lock(mutex_);
    return when_;
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  bool done_ = false;
  stream_failure_ptr failure_;
  host_clock::time_point when_{};
};

// One direction of a throttled host link, shared by every stream of a
// backend: like a GPU's copy engine, it moves one copy at a time, so two
// streams copying in the same direction share its bandwidth.
class host_copy_engine {
 public:
  explicit host_copy_engine(double bytes_per_second) : bytes_per_second_(bytes_per_second) {}
  [[nodiscard]] bool throttled() const noexcept { return bytes_per_second_ > 0.0; }

  /// Books `bytes` on the link no earlier than `ready`; returns when the
  /// transfer may be considered finished.
  host_clock::time_point reserve(host_clock::time_point ready, std::size_t bytes) {
    const auto duration = std::chrono::duration_cast<host_clock::duration>(
        std::chrono::duration<double>(static_cast<double>(bytes) / bytes_per_second_));
    std::lock_guard lock(mutex_);
    const auto begin = std::max(ready, free_at_);
    free_at_ = begin + duration;
    return free_at_;
  }

 private:
  double bytes_per_second_;
  std::mutex mutex_;
  host_clock::time_point free_at_{};
};

class host_worker {
 public:
  enum class task_kind { work, copy, fire, wait };
  struct copy_request {
    void* destination = nullptr;
    const void* source = nullptr;
    std::size_t bytes = 0;
    host_copy_engine* engine = nullptr;  // null: unthrottled
  };
  struct task {
    task_kind kind;
    std::function<void()> work;            // task_kind::work
    std::shared_ptr<host_signal> signal;   // task_kind::fire / wait
    copy_request copy{};                   // task_kind::copy
    host_clock::time_point enqueued{};
  };

  host_worker(std::string name, std::size_t index)
      : name_(std::move(name)), index_(index), thread_([this] { run(); }) {}
  host_worker(const host_worker&) = delete;
  host_worker& operator=(const host_worker&) = delete;
  ~host_worker() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();  // drains the queue first: every recorded signal fires
  }

  void push(task item) {
    item.enqueued = host_clock::now();
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(std::move(item));
    }
    wake_.notify_all();
  }

  /// Blocks until everything enqueued so far has run, then rethrows (and
  /// clears) the stream's error, if any.
  void synchronize() {
    auto signal = std::make_shared<host_signal>();
    push({task_kind::fire, {}, signal});
    signal->wait();
    stream_failure_ptr failure;
    {
      std::lock_guard lock(mutex_);
      std::swap(failure, failure_);
    }
    if (failure) failure->raise();
  }

  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] std::size_t index() const noexcept { return index_; }

 private:
  void run() {
    for (;;) {
      task item;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping and drained
        item = std::move(queue_.front());
        queue_.pop_front();
      }
      execute(item);
    }
  }

  void execute(task& item) {
    switch (item.kind) {
      case task_kind::work: {
        if (!current_failure()) {  // poisoned: skip dependent work
          try {
            item.work();
          } catch (...) {
            set_failure(stream_failure::capture_current());
          }
        }
        ready_at_ = host_clock::now();
        return;
      }
      case task_kind::copy: execute_copy(item); return;
      case task_kind::fire: {
        // An event is stamped with the stream's time at its place in the
        // queue, so the time between two events around a throttled copy is
        // the copy's booked duration, never less.
        ready_at_ = std::max(item.enqueued, ready_at_);
        item.signal->fire(current_failure(), ready_at_);
        return;
      }
      case task_kind::wait: {
        item.signal->wait();
        if (auto failure = item.signal->failure(); failure && !current_failure()) {
          set_failure(failure);
        }
        ready_at_ = host_clock::now();
        return;
      }
    }
  }

  // A throttled copy starts when the stream became ready for it: when it was
  // enqueued or when the previous task finished, whichever is later, where a
  // previous throttled copy counts as finished at its booked end rather than
  // when this thread woke up from sleeping until then. Back-to-back copies
  // therefore run at the link's bandwidth instead of losing a thread wake-up
  // each, and the link is shared with the backend's other streams.
  void execute_copy(task& item) {
    if (current_failure()) {
      ready_at_ = host_clock::now();
      return;
    }
    const auto& copy = item.copy;
    const auto ready = std::max(item.enqueued, ready_at_);
    std::memcpy(copy.destination, copy.source, copy.bytes);
    const auto copied = host_clock::now();
    if (copy.engine == nullptr) {
      ready_at_ = copied;
      return;
    }
    const auto end = copy.engine->reserve(ready, copy.bytes);
    std::this_thread::sleep_until(end);
    ready_at_ = std::max(end, copied);  // a memcpy slower than the link sets the pace
  }

  stream_failure_ptr current_failure() {
    std::lock_guard lock(mutex_);
    return failure_;
  }
  void set_failure(stream_failure_ptr failure) {
    std::lock_guard lock(mutex_);
    if (!failure_) failure_ = std::move(failure);
  }

  std::string name_;
  std::size_t index_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<task> queue_;
  bool stopping_ = false;
  stream_failure_ptr failure_;
  host_clock::time_point ready_at_{};  // touched only by the worker thread
  std::thread thread_;  // last: starts after every other member exists
};

}  // namespace detail

class host_backend {
 public:
  struct options {
    /// Copy bandwidth per direction in bytes per second; 0 = unthrottled.
    double host_to_device_bytes_per_second = 0.0;
    double device_to_host_bytes_per_second = 0.0;
    /// Capacities of the two memory resources; unset = unlimited.
    std::optional<std::size_t> device_capacity_bytes;
    std::optional<std::size_t> pinned_capacity_bytes;
  };

  /// What work enqueued on a host stream receives.
  struct native_stream {
    std::string_view name;
    std::size_t index;
  };

  /// A stream: owns its worker thread. Destroying it waits for its work.
  class stream {
   public:
    stream(stream&&) noexcept = default;
    stream& operator=(stream&&) noexcept = default;
    stream(const stream&) = delete;
    stream& operator=(const stream&) = delete;
    [[nodiscard]] const std::string& name() const { return worker_->name(); }
    [[nodiscard]] native_stream native() const { return {worker_->name(), worker_->index()}; }

   private:
    friend class host_backend;
    explicit stream(std::shared_ptr<detail::host_worker> worker) : worker_(std::move(worker)) {}
    std::shared_ptr<detail::host_worker> worker_;
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
      : config_(config),
        to_device_(config.host_to_device_bytes_per_second),
        to_host_(config.device_to_host_bytes_per_second),
        device_memory_("host_backend device memory", config.device_capacity_bytes),
        pinned_memory_("host_backend pinned host memory", config.pinned_capacity_bytes) {
    expects(config.host_to_device_bytes_per_second >= 0.0 &&
                config.device_to_host_bytes_per_second >= 0.0,
            "copy bandwidths must be non-negative (0 means unthrottled)");
  }
  host_backend(const host_backend&) = delete;
  host_backend& operator=(const host_backend&) = delete;

  static constexpr std::string_view name() noexcept { return "host"; }
  [[nodiscard]] const options& config() const noexcept { return config_; }

  host_memory_resource& device_memory() noexcept { return device_memory_; }
  host_memory_resource& pinned_memory() noexcept { return pinned_memory_; }

  stream make_stream(std::string_view stream_name = {}) {
    std::lock_guard lock(registry_mutex_);
    const std::size_t index = streams_.size();
    std::string label = stream_name.empty() ? "stream " + std::to_string(index)
                                            : std::string(stream_name);
    auto worker = std::make_shared<detail::host_worker>(std::move(label), index);
    streams_.push_back(worker);
    return stream(std::move(worker));
  }

  event make_event() { return event{}; }

  /// Marks the work enqueued on `on` so far.
  void record(event& marker, stream& on) {
    marker.signal_ = std::make_shared<detail::host_signal>();
    on.worker_->push({detail::host_worker::task_kind::fire, {}, marker.signal_});
  }

  /// Later work on `waiter` waits for the mark `marker` holds now.
  void wait(stream& waiter, const event& marker) {
    if (!marker.signal_) return;  // never recorded: nothing to wait for
    waiter.worker_->push({detail::host_worker::task_kind::wait, {}, marker.signal_});
  }

  [[nodiscard]] bool query(const event& marker) const {
    return !marker.signal_ || marker.signal_->done();
  }

  /// Blocks until the mark is reached; rethrows an error of the work it covers.
  void synchronize(const event& marker) {
    if (!marker.signal_) return;
    marker.signal_->wait();
    if (auto failure = marker.signal_->failure()) failure->raise();
  }

  /// Blocks until the stream's work is done; rethrows (and clears) its error.
  void synchronize(stream& on) { on.worker_->synchronize(); }

  /// Synchronises every live stream, rethrowing the first error found after
  /// all of them have drained.
  void synchronize() {
    std::vector<std::shared_ptr<detail::host_worker>> live;
    {
      std::lock_guard lock(registry_mutex_);
      for (auto& weak : streams_) {
        if (auto worker = weak.lock()) live.push_back(std::move(worker));
      }
    }
    detail::stream_failure_ptr first;
    for (auto& worker : live) {
      try {
        worker->synchronize();
      } catch (...) {
        if (!first) first = detail::stream_failure::capture_current();
      }
    }
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
    if (bytes == 0) return;
    detail::check_copy_arguments(destination, source, bytes, kind);
    detail::host_copy_engine* engine = kind == copy_kind::host_to_device ? &to_device_
                                       : kind == copy_kind::device_to_host ? &to_host_
                                                                           : nullptr;
    if (engine != nullptr && !engine->throttled()) engine = nullptr;
    detail::host_worker::task item{detail::host_worker::task_kind::copy, {}, {}, {}, {}};
    item.copy = {destination, source, bytes, engine};
    on.worker_->push(std::move(item));
  }

  /// Runs `work(native_stream)` (or `work()`) on the stream's thread, in order.
  template <class Work>
    requires std::is_invocable_v<Work&, native_stream> || std::is_invocable_v<Work&>
  void enqueue(stream& on, Work&& work) {
    if constexpr (std::is_invocable_v<Work&, native_stream>) {
      enqueue_work(on, [native = on.native(), fn = std::forward<Work>(work)]() mutable { fn(native); });
    } else {
      enqueue_work(on, std::forward<Work>(work));
    }
  }

 private:
  template <class Fn>
  static void enqueue_work(stream& on, Fn&& fn) {
    on.worker_->push({detail::host_worker::task_kind::work, std::function<void()>(std::forward<Fn>(fn)), {}});
  }

  options config_;
  detail::host_copy_engine to_device_;
  detail::host_copy_engine to_host_;
  host_memory_resource device_memory_;
  host_memory_resource pinned_memory_;
  std::mutex registry_mutex_;
  std::vector<std::weak_ptr<detail::host_worker>> streams_;
};

static_assert(Backend<host_backend>, "host_backend must satisfy memo::Backend");

}  // namespace memo
