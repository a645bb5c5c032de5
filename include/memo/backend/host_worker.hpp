// memo/backend/host_worker.hpp
//
// The pieces of a host stream: a worker thread draining a FIFO of tasks, the
// signals events are made of, and the copy engines throttled copies book.
// host_backend.hpp assembles them; nothing here is public API.
//
// Guarantees the backend builds on:
// - tasks run in FIFO order on the worker's thread; an exception thrown by
//   one poisons the stream: later work and copies are skipped, signals fired
//   after it carry the failure;
// - a throttled copy delivers its bytes at the END of the time it booked on
//   the link (after sleeping), never at its start, so a reader that skips
//   the wait for the copy's event sees stale bytes rather than correct ones
//   by luck;
// - a failure nobody synchronised is not lost when the stream is destroyed:
//   it goes to the backend's failure sink, which the backend's next
//   `synchronize()` reports;
// - once its backend is gone, a stream rejects new work with a `memo::error`
//   (the backend drained it first, so queued copies never touch a dead
//   copy engine);
// - a stream that would wait forever because of a cycle of waits for events
//   and stream synchronisations (its task synchronises a stream that waits
//   for an event this stream records later, over any number of streams and
//   backends) fails with a `memo::error` naming the cycle instead (see
//   `wait_graph`). Other blocking calls (joining a stream whose last handle
//   a task drops, destroying a backend, a communicator's collective) are not
//   in that graph.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "memo/backend/host_thread_pool.hpp"
#include "memo/backend/stream_failure.hpp"
#include "memo/backend/unique_task.hpp"
#include "memo/core/error.hpp"

namespace memo::detail {

using host_clock = std::chrono::steady_clock;

// One `record`: fired once by the recording stream when it reaches it.
class host_signal {
 public:
  explicit host_signal(const void* recorder = nullptr) : recorder_(recorder) {}

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
  void wait() const {
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
  /// The worker that fires it (a task on it waiting for it would wait forever).
  [[nodiscard]] const void* recorder() const noexcept { return recorder_; }

 private:
  const void* recorder_;
  mutable std::mutex mutex_;
  mutable std::condition_variable ready_;
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

  struct booking {
    host_clock::time_point begin;
    host_clock::time_point end;
  };
  /// Books `bytes` on the link no earlier than `ready`.
  /// A booking longer than about 31 years (1e9 s) is cut there, and so is
  /// the wait for the link ahead of it: the clock's 64-bit nanoseconds hold
  /// 292 years, and a copy that long is never waited for in earnest.
  booking reserve(host_clock::time_point ready, std::size_t bytes) {
    constexpr double longest_seconds = 1e9;
    const auto longest = std::chrono::duration_cast<host_clock::duration>(std::chrono::duration<double>(longest_seconds));
    const auto duration = std::chrono::duration_cast<host_clock::duration>(
        std::chrono::duration<double>(std::min(static_cast<double>(bytes) / bytes_per_second_, longest_seconds)));
    std::lock_guard lock(mutex_);
    // The queue ahead is cut the same way, so bookings never add up past the clock.
    const auto begin = std::min(std::max(ready, free_at_), ready + longest);
    free_at_ = begin + duration;
    return {begin, free_at_};
  }

 private:
  double bytes_per_second_;
  std::mutex mutex_;
  host_clock::time_point free_at_{};
};

class host_worker;

/// Waits for `signal` on behalf of stream `waiter` (null: a thread that is
/// no stream's, which no stream can wait for, so it closes no cycle).
inline void wait_for(const host_signal& signal, const host_worker* waiter);

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
    task_kind kind = task_kind::work;
    unique_task work;                      // task_kind::work
    std::shared_ptr<host_signal> signal;   // task_kind::fire / wait
    copy_request copy{};                   // task_kind::copy
    host_clock::time_point enqueued{};
  };

  host_worker(std::string name, std::size_t index, const void* owner,
              std::shared_ptr<stream_failure_sink> sink)
      : name_(std::move(name)), index_(index), owner_(owner), sink_(std::move(sink)) {}
  host_worker(const host_worker&) = delete;
  host_worker& operator=(const host_worker&) = delete;

  /// The worker thread's loop (see host_worker_thread): runs tasks until
  /// `stop()` was called and the queue is drained, then hands an error
  /// nobody synchronised to the backend's sink.
  void run() {
    for (;;) {
      task item;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) {  // stopping and drained
          // An error nobody synchronised goes to the backend, which reports
          // it; handed over before finished_ is seen, so a backend that
          // finds this worker finished finds the error in its sink.
          if (sink_) sink_->add(std::move(failure_));
          sink_.reset();
          finished_ = true;
          return;
        }
        item = std::move(queue_.front());
        queue_.pop_front();
      }
      execute(item);
    }
  }

  /// Lets `run()` return once the queue is drained: the last handle is gone.
  void stop() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
  }

  void push(task item) { push_unless_finished(std::move(item)); }

  /// Enqueues `item`, unless the worker's thread has already returned (its
  /// last handle is gone; only the backend still reaches it): then false.
  bool push_unless_finished(task item) {
    item.enqueued = host_clock::now();
    {
      std::lock_guard lock(mutex_);
      expects(owner_ != nullptr, [&] {
        return "stream '" + name_ + "' outlived its host_backend: no work can be enqueued on it";
      });
      if (finished_) return false;
      queue_.push_back(std::move(item));
    }
    wake_.notify_all();
    return true;
  }

  /// Blocks until everything enqueued so far has run, then rethrows (and
  /// clears) the stream's error, if any.
  void synchronize() {
    expects(running_stream_tag != this, [&] {
      return "synchronize(stream '" + name_ +
             "') was called from a task running on that stream: it would wait for itself forever";
    });
    auto signal = std::make_shared<host_signal>(this);
    if (!push_unless_finished({task_kind::fire, {}, signal})) return;  // its error went to the sink
    wait_for(*signal, static_cast<const host_worker*>(running_stream_tag));
    stream_failure_ptr failure;
    {
      std::lock_guard lock(mutex_);
      std::swap(failure, failure_);
    }
    if (failure) failure->raise();
  }

  /// Drains the queue and stops accepting work: the backend is going away.
  /// The stream's unreported failure stays with it.
  void detach() {
    auto signal = std::make_shared<host_signal>(this);
    {
      std::lock_guard lock(mutex_);
      owner_ = nullptr;
      sink_.reset();
      if (finished_) return;  // the last handle is gone and the queue drained
      queue_.push_back({task_kind::fire, {}, signal, {}, host_clock::now()});
    }
    wake_.notify_all();
    signal->wait();
  }

  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] std::size_t index() const noexcept { return index_; }
  /// The backend the stream belongs to; null once it is gone.
  [[nodiscard]] const void* owner() const {
    std::lock_guard lock(mutex_);
    return owner_;
  }

 private:
  void execute(task& item) {
    switch (item.kind) {
      case task_kind::work: {
        if (!current_failure()) {  // poisoned: skip dependent work
          running_stream_tag = this;
          try {
            item.work();
          } catch (...) {
            set_failure(stream_failure::capture_current());
          }
          running_stream_tag = nullptr;
        }
        item.work = {};  // what the task owned dies in stream order
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
        try {
          wait_for(*item.signal, this);
        } catch (...) {  // a cycle of waits: this stream fails instead of hanging
          set_failure(stream_failure::capture_current());
          ready_at_ = host_clock::now();
          return;
        }
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
  // when this thread woke up. Back-to-back copies therefore run at the link's
  // bandwidth, and the link is shared with the backend's other streams.
  //
  // The bytes land at the end of the booking. The worker waits for that
  // moment on its own queue lock, so work enqueued on this stream while the
  // transfer is in flight happens-before the bytes land: an observer that
  // reads the destination and then enqueues on the stream, all within the
  // booked time, reads the old bytes without a data race.
  void execute_copy(task& item) {
    if (current_failure()) {
      ready_at_ = host_clock::now();
      return;
    }
    const auto& copy = item.copy;
    if (copy.engine == nullptr) {
      std::memcpy(copy.destination, copy.source, copy.bytes);
      ready_at_ = host_clock::now();
      return;
    }
    const auto ready = std::max(item.enqueued, ready_at_);
    const auto booked = copy.engine->reserve(ready, copy.bytes);
    {
      std::unique_lock lock(mutex_);
      while (host_clock::now() < booked.end) link_time_.wait_until(lock, booked.end);
    }
    const auto landing = host_clock::now();
    std::memcpy(copy.destination, copy.source, copy.bytes);
    // A memcpy slower than the link sets the pace.
    ready_at_ = std::max(booked.end, booked.begin + (host_clock::now() - landing));
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
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable link_time_;  // never notified: a timed wait on mutex_
  std::deque<task> queue_;
  bool stopping_ = false;
  bool finished_ = false;  // run() returned
  const void* owner_;
  std::shared_ptr<stream_failure_sink> sink_;
  stream_failure_ptr failure_;
  host_clock::time_point ready_at_{};  // touched only by the worker thread
};

// Who waits for whom. A stream is blocked while its worker executes a wait
// for an event, or while a task of it (or a parallel_for piece of such a
// task) synchronises an event or a stream; it then waits for the stream that
// fires the signal, which fires it only after what is ahead of it in its
// queue, so a blocked recorder cannot fire it before it is unblocked. A
// cycle of such waits therefore never ends. Each blocked wait is entered
// here; the one that would close a cycle is refused with a memo::error
// naming the streams, so that stream fails instead, and the signals it then
// fires carry the failure to the others. A wait whose signal has already
// fired costs nothing; any other pays for a search of the waits blocked at
// that moment (few: at most one per stream thread and pool thread).
// Process-wide, since streams of different backends may wait for each
// other's events.
class wait_graph {
 public:
  static wait_graph& instance() {
    static wait_graph* graph = new wait_graph;  // never destroyed: streams may wait during exit
    return *graph;
  }

  /// `waiter` blocked on `signal`, entered in the graph for its lifetime.
  class blocked {
   public:
    blocked(wait_graph& graph, const host_worker& waiter, const host_signal& signal)
        : graph_(&graph), key_(graph.enter(waiter, signal)) {}
    blocked(const blocked&) = delete;
    blocked& operator=(const blocked&) = delete;
    ~blocked() { graph_->leave(key_); }

   private:
    wait_graph* graph_;
    std::uint64_t key_;
  };

 private:
  static constexpr std::uint64_t not_entered = 0;

  // Enters `waiter` as blocked on `signal`; throws if that closes a cycle
  // (and then enters nothing). A signal that fired meanwhile is not a wait:
  // checked under the lock, since its recorder may have fired it and then
  // blocked on `waiter` (a recorder found blocked here has fired every
  // signal queued ahead of the wait it is blocked in).
  std::uint64_t enter(const host_worker& waiter, const host_signal& signal);
  void leave(std::uint64_t key) noexcept {
    if (key == not_entered) return;
    std::lock_guard lock(mutex_);
    blocked_.erase(key);
  }

  struct blocked_wait {
    const host_worker* waiter;
    const host_signal* signal;
  };

  // Whether stream `node`, by the waits it is blocked in, waits (directly or
  // through other blocked streams) for `target`; appends the streams on the
  // way to `path`. The caller holds mutex_.
  bool reaches(const void* node, const host_worker* target, std::vector<const host_worker*>& path,
               std::vector<const void*>& seen) const {
    if (node == nullptr) return false;
    if (node == target) return true;
    if (std::find(seen.begin(), seen.end(), node) != seen.end()) return false;
    seen.push_back(node);
    for (const auto& [key, wait] : blocked_) {
      if (wait.waiter != node || wait.signal->done()) continue;
      path.push_back(wait.waiter);
      if (reaches(wait.signal->recorder(), target, path, seen)) return true;
      path.pop_back();
    }
    return false;
  }

  std::mutex mutex_;
  std::uint64_t next_key_ = not_entered + 1;
  std::unordered_map<std::uint64_t, blocked_wait> blocked_;
};

inline std::uint64_t wait_graph::enter(const host_worker& waiter, const host_signal& signal) {
  std::lock_guard lock(mutex_);
  if (signal.done()) return not_entered;
  std::vector<const host_worker*> path;
  std::vector<const void*> seen;
  if (reaches(signal.recorder(), &waiter, path, seen)) {
    // Every stream on the path is blocked, so alive: their names can be read.
    std::string cycle = "stream '" + waiter.name() + "' waits for ";
    for (const host_worker* w : path) cycle += "stream '" + w->name() + "', which waits for ";
    throw error("host_backend: " + cycle + (path.empty() ? "itself" : "stream '" + waiter.name() + "'") +
                ": a cycle of waits (each for an event or a synchronisation that the stream waited "
                "for reaches only later) would never end");
  }
  const std::uint64_t key = next_key_++;
  blocked_.emplace(key, blocked_wait{&waiter, &signal});
  return key;
}

inline void wait_for(const host_signal& signal, const host_worker* waiter) {
  if (waiter == nullptr || signal.done()) {
    signal.wait();
    return;
  }
  wait_graph::blocked entry(wait_graph::instance(), *waiter, signal);
  signal.wait();
}

// A stream's handle on its worker: starts the worker's thread and, when the
// last handle goes, stops it once the queue is drained. The thread shares
// ownership of the worker, so the handle may die anywhere, even in a task of
// its own stream (a task that owns the last handle of its stream): that
// thread cannot join itself, so it is detached, drains what is still queued
// and lets the worker go when it returns. The backend still sees the worker
// until then and drains it before it goes away.
class host_worker_thread {
 public:
  explicit host_worker_thread(std::shared_ptr<host_worker> worker)
      : worker_(std::move(worker)), thread_([worker = worker_] { worker->run(); }) {}
  host_worker_thread(const host_worker_thread&) = delete;
  host_worker_thread& operator=(const host_worker_thread&) = delete;
  ~host_worker_thread() {
    worker_->stop();
    if (thread_.get_id() == std::this_thread::get_id()) {
      thread_.detach();
    } else {
      thread_.join();  // drains the queue first: every recorded signal fires
    }
  }

  [[nodiscard]] host_worker& worker() const noexcept { return *worker_; }

 private:
  std::shared_ptr<host_worker> worker_;
  std::thread thread_;  // last: starts after the worker it runs exists
};

}  // namespace memo::detail
