// memo/backend/cuda_host_tasks.hpp
//
// Host work on a CUDA stream and the failures it can raise. A callable
// enqueued on a `cuda_backend` stream runs as a host function
// (cudaLaunchHostFunc) and owns what it captured (a move-only
// `unique_task`). An exception it throws is kept in the stream's
// `cuda_stream_failures` until a synchronisation rethrows it; later host work
// on the stream is skipped. Events carry such a failure to the streams that
// wait on them: a host function placed just before the event stamps it with
// the recording stream's failure, another placed just after the wait
// poisons the waiter. A host function must not synchronise: CUDA forbids
// CUDA calls there, and memo turns the attempt into a memo::error.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include <cuda_runtime_api.h>

#include "memo/backend/cuda_check.hpp"
#include "memo/backend/stream_failure.hpp"
#include "memo/backend/unique_task.hpp"
#include "memo/core/error.hpp"

namespace memo {

namespace detail {

// Errors thrown by host functions running on a CUDA stream, kept until the
// stream is synchronised.
struct cuda_stream_failures {
  std::mutex mutex;
  stream_failure_ptr first;
  // Whether a failure can ever reach this stream (it ran host work, or
  // waited on an event that can carry one); until then events need no
  // host-side stamp and cost nothing extra.
  bool may_fail = false;

  stream_failure_ptr take() {
    std::lock_guard lock(mutex);
    return std::exchange(first, nullptr);
  }
};

struct cuda_host_task {
  unique_task work;
  std::shared_ptr<cuda_stream_failures> failures;
};

// True on the thread while it runs a host function of a CUDA stream.
inline thread_local bool in_cuda_host_task = false;

inline void run_cuda_host_task(void* user_data) noexcept {
  std::unique_ptr<cuda_host_task> task(static_cast<cuda_host_task*>(user_data));
  {
    std::lock_guard lock(task->failures->mutex);
    if (task->failures->first) return;  // poisoned: skip dependent work
  }
  in_cuda_host_task = true;
  try {
    task->work();
  } catch (...) {
    std::lock_guard lock(task->failures->mutex);
    if (!task->failures->first) task->failures->first = stream_failure::capture_current();
  }
  in_cuda_host_task = false;
}

// What one `record` of an event carries: the failure of the recording
// stream at that point of its queue, stamped by a host function placed just
// before the event.
struct cuda_event_failure {
  std::mutex mutex;
  stream_failure_ptr failure;
};

struct cuda_failure_link {
  std::shared_ptr<cuda_stream_failures> stream;
  std::shared_ptr<cuda_event_failure> event;
};

// Host function: recording stream -> event.
inline void cuda_stamp_event(void* user_data) noexcept {
  std::unique_ptr<cuda_failure_link> link(static_cast<cuda_failure_link*>(user_data));
  stream_failure_ptr failure;
  {
    std::lock_guard lock(link->stream->mutex);
    failure = link->stream->first;
  }
  std::lock_guard lock(link->event->mutex);
  link->event->failure = std::move(failure);
}

// Host function: event -> waiting stream (poisons it like its own failure).
inline void cuda_poison_from_event(void* user_data) noexcept {
  std::unique_ptr<cuda_failure_link> link(static_cast<cuda_failure_link*>(user_data));
  stream_failure_ptr failure;
  {
    std::lock_guard lock(link->event->mutex);
    failure = link->event->failure;
  }
  if (!failure) return;
  std::lock_guard lock(link->stream->mutex);
  if (!link->stream->first) link->stream->first = std::move(failure);
}

// Launches `function` on `stream`, handing it ownership of `data`.
template <class T>
void launch_owning_host_function(cudaStream_t stream, void (*function)(void*) noexcept,
                                 std::unique_ptr<T> data) {
  check_cuda(cudaLaunchHostFunc(stream, function, data.get()), "cudaLaunchHostFunc");
  (void)data.release();  // owned by the host function from here on
}

inline void expect_not_in_cuda_host_task(const char* call) {
  expects(!in_cuda_host_task, [&] {
    return std::string(call) +
           " was called from a host function running on a CUDA stream: CUDA forbids CUDA calls "
           "there and it would wait for itself forever";
  });
}

}  // namespace detail

}  // namespace memo
