// memo/backend/host_thread_pool.hpp
//
// The host backend's compute engine: one pool of threads per backend,
// created once, shared by every stream. A stream's worker that runs a
// `parallel_for` or a GEMM hands the pool a job of `count` independent
// pieces and works on the job itself until no piece is left, then waits for
// the pieces the helpers took. Because the submitting thread always takes
// part, a job finishes even when every helper is busy with another stream's
// job (two streams computing at once share the cores) and a piece may
// itself submit a job without deadlocking.
//
// An exception thrown by a piece is kept (the first one, by value; see
// stream_failure.hpp) and rethrown on the submitting thread once every piece
// has finished, so it fails the stream's task like any other exception.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "memo/backend/stream_failure.hpp"
#include "memo/core/error.hpp"

namespace memo::detail {

/// The stream (its worker, as an opaque tag) whose task the current thread
/// is running, or null. Set by a stream's worker around each task and by the
/// pool around each piece of a job, so a task can be recognised wherever it
/// runs (synchronising its own stream from inside would wait forever).
inline thread_local const void* running_stream_tag = nullptr;

class host_thread_pool {
 public:
  /// `threads` threads compute a job: the submitting thread and
  /// `threads - 1` helpers. 0 means one per hardware thread.
  explicit host_thread_pool(std::size_t threads = 0) {
    if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
    threads_ = threads;
    helpers_.reserve(threads - 1);
    for (std::size_t i = 0; i + 1 < threads; ++i) helpers_.emplace_back([this] { help(); });
  }
  host_thread_pool(const host_thread_pool&) = delete;
  host_thread_pool& operator=(const host_thread_pool&) = delete;
  ~host_thread_pool() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto& helper : helpers_) helper.join();
  }

  /// Threads that work on one job (the caller included).
  [[nodiscard]] std::size_t concurrency() const noexcept { return threads_; }

  /// Runs `piece(i)` for every i in [0, count) and returns when all are
  /// done; rethrows the first exception a piece threw.
  template <class Piece>
    requires std::is_invocable_v<Piece&, std::int64_t>
  void run(std::int64_t count, Piece&& piece) {
    if (count <= 0) return;
    if (count == 1 || helpers_.empty()) {
      for (std::int64_t i = 0; i < count; ++i) piece(i);
      return;
    }
    auto work = std::make_shared<job>();
    work->count = count;
    work->context = &piece;
    work->invoke = [](void* context, std::int64_t i) {
      (*static_cast<std::remove_reference_t<Piece>*>(context))(i);
    };
    work->stream_tag = running_stream_tag;
    {
      std::lock_guard lock(mutex_);
      jobs_.push_back(work);
    }
    wake_.notify_all();
    for (std::int64_t i; (i = work->next.fetch_add(1)) < count;) execute(*work, i);
    {
      std::unique_lock lock(work->mutex);
      work->done.wait(lock, [&] { return work->finished == count; });
    }
    {
      std::lock_guard lock(mutex_);
      std::erase(jobs_, work);
    }
    if (work->failure) work->failure->raise();
  }

 private:
  struct job {
    void (*invoke)(void*, std::int64_t) = nullptr;
    void* context = nullptr;
    std::int64_t count = 0;
    std::atomic<std::int64_t> next{0};
    const void* stream_tag = nullptr;
    std::mutex mutex;
    std::condition_variable done;
    std::int64_t finished = 0;     // under mutex
    stream_failure_ptr failure;    // under mutex
  };

  static void execute(job& work, std::int64_t i) {
    stream_failure_ptr failure;
    const void* saved = std::exchange(running_stream_tag, work.stream_tag);
    try {
      work.invoke(work.context, i);
    } catch (...) {
      failure = stream_failure::capture_current();
    }
    running_stream_tag = saved;
    std::lock_guard lock(work.mutex);
    if (failure && !work.failure) work.failure = std::move(failure);
    if (++work.finished == work.count) work.done.notify_all();
  }

  void help() {
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping
      std::shared_ptr<job> work = jobs_.front();
      const std::int64_t i = work->next.fetch_add(1);
      if (i >= work->count) {  // nothing left to take: the job is only finishing
        jobs_.pop_front();
        continue;
      }
      lock.unlock();
      execute(*work, i);
      lock.lock();
    }
  }

  std::size_t threads_ = 1;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<job>> jobs_;  // jobs that may have pieces left
  bool stopping_ = false;
  std::vector<std::thread> helpers_;  // last: start after every other member exists
};

}  // namespace memo::detail
