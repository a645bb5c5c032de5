// memo/backend/concepts.hpp
//
// What a machine must offer for memo's algorithms to run on it.
//
// Every primitive in memo (rounding buffers, swappers, chunked attention,
// stream schedules) is a template over a `Backend`. A backend provides two
// memory resources (device memory and pinned host memory), streams (ordered
// queues of work), events (a point in a stream that other streams and the
// host can wait for), asynchronous copies, and a way to run work on a stream.
// The semantics are CUDA's, so an algorithm written against the concept
// behaves the same on `host_backend` (where CI runs it, under
// ThreadSanitizer) and on `cuda_backend`:
//
//   - work enqueued on one stream runs in FIFO order;
//   - `record(event, stream)` marks the work enqueued on `stream` so far;
//     re-recording an event moves the mark (events are reusable);
//   - `wait(stream, event)` makes later work on `stream` wait for the mark
//     the event held when `wait` was called (never for a later record);
//     waiting on a never-recorded event does nothing;
//   - `query(event)` / `synchronize(event)` / `synchronize(stream)` observe
//     completion from the host; failures inside a stream surface as a
//     `memo::error` (or the task's own exception) from synchronisation.
//
// The concept checks the surface only; `tests/backend/*` check the semantics.
#pragma once

#include <concepts>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "memo/core/error.hpp"

namespace memo {

/// The direction of a copy; the host backend throttles each direction with
/// its own bandwidth, as a PCIe link would.
enum class copy_kind { host_to_device, device_to_host, device_to_device, host_to_host };

inline constexpr const char* to_string(copy_kind kind) {
  switch (kind) {
    case copy_kind::host_to_device: return "host_to_device";
    case copy_kind::device_to_host: return "device_to_host";
    case copy_kind::device_to_device: return "device_to_device";
    case copy_kind::host_to_host: return "host_to_host";
  }
  return "unknown";
}

namespace detail {

/// What every backend checks when a copy is issued, before it is queued:
/// a null pointer or overlapping ranges would corrupt memory later, on
/// another thread, far from the call that caused it.
inline void check_copy_arguments(const void* destination, const void* source, std::size_t bytes,
                                 copy_kind kind) {
  auto what = [&](const char* problem) {
    return std::string("copy_async(") + to_string(kind) + ", " + std::to_string(bytes) +
           " bytes): " + problem;
  };
  expects(destination != nullptr && source != nullptr, [&] { return what("null pointer"); });
  // std::less gives a total order on unrelated pointers.
  const auto* d = static_cast<const unsigned char*>(destination);
  const auto* s = static_cast<const unsigned char*>(source);
  const std::less<const unsigned char*> before;
  expects(!before(d, s + bytes) || !before(s, d + bytes),
          [&] { return what("source and destination overlap"); });
}

}  // namespace detail

/// A memory resource that accounts what it hands out: the current and the
/// peak number of bytes allocated through it.
template <class R>
concept MemoryResource = requires(R& resource, void* pointer, std::size_t bytes,
                                  std::size_t alignment) {
  { resource.allocate(bytes, alignment) } -> std::same_as<void*>;
  resource.deallocate(pointer, bytes, alignment);
  { resource.current_bytes() } -> std::convertible_to<std::size_t>;
  { resource.peak_bytes() } -> std::convertible_to<std::size_t>;
  resource.reset_peak();
};

/// A native stream handle passed to work enqueued on a stream: a
/// `cudaStream_t` for the CUDA backend, a small descriptor for the host one.
template <class B>
using native_stream_t = typename B::native_stream;

template <class B>
concept Backend =
    std::movable<typename B::stream> && std::movable<typename B::event> &&
    requires(B& backend, typename B::stream& stream, typename B::event& event,
             const typename B::event& const_event, void* destination, const void* source,
             std::size_t bytes, copy_kind kind, void (*work)(typename B::native_stream)) {
      { B::name() } -> std::convertible_to<std::string_view>;
      { backend.device_memory() } -> MemoryResource;
      { backend.pinned_memory() } -> MemoryResource;
      { backend.make_stream(std::string_view{}) } -> std::same_as<typename B::stream>;
      { backend.make_event() } -> std::same_as<typename B::event>;
      backend.record(event, stream);
      backend.wait(stream, const_event);
      { backend.query(const_event) } -> std::same_as<bool>;
      backend.synchronize(const_event);
      backend.synchronize(stream);
      backend.synchronize();
      backend.copy_async(destination, source, bytes, kind, stream);
      backend.enqueue(stream, work);
      { backend.elapsed_seconds(const_event, const_event) } -> std::convertible_to<double>;
    };

/// Turns "T is not a backend" into one readable line at the point of use:
/// `static_assert(memo::is_backend<MyBackend>, ...)` inside templates that
/// cannot use a constrained parameter.
template <class B>
inline constexpr bool is_backend = Backend<B>;

}  // namespace memo
