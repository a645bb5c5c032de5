// memo/backend/concepts.hpp
//
// What a machine must offer for memo's algorithms to run on it.
//
// Every primitive in memo (rounding buffers, swappers, chunked attention,
// stream schedules) is a template over a `Backend`. A backend provides two
// memory resources (device memory and pinned host memory), streams (ordered
// queues of work), events (a point in a stream that other streams and the
// host can wait for), asynchronous copies and memsets, compute on a stream
// (`parallel_for` over a 1-D/2-D extent with a `MEMO_HOST_DEVICE` functor,
// `gemm` and `gemm_strided_batched`, see compute.hpp), and a way to run
// arbitrary work on a stream. Model code written against the concept never
// branches on the backend.
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
//     `memo::error` (or the task's own exception) from synchronisation,
//     and the backend-wide `synchronize()` reports the failure of any of
//     its streams, including one destroyed before anyone synchronised it;
//   - compute, copies and memsets are checked when issued (null pointers,
//     ranges that wrap the address space, GEMM leading dimensions), so a bad
//     argument is a `memo::error` at the call, not a crash on another thread;
//   - a stream may need device memory for its compute (a BLAS workspace):
//     `stream_workspace_bytes()` says how much, `make_stream(name, region)`
//     uses a region the caller owns, and the backend allocates none itself.
//
// The concept checks the surface only; `tests/backend/*` check the semantics.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "memo/backend/compute.hpp"
#include "memo/core/error.hpp"
#include "memo/core/memory_region.hpp"

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

/// Checks that [pointer, pointer + bytes) is a range of the address space:
/// done on integers, because `pointer + bytes` past the end of the address
/// space is undefined and in practice wraps to a small address that passes
/// every comparison.
inline void check_byte_range(const void* pointer, std::size_t bytes, const std::string& what,
                             const char* role) {
  const auto first = reinterpret_cast<std::uintptr_t>(pointer);
  expects(bytes <= UINTPTR_MAX - first, [&] {
    return what + ": the " + role + " range of " + std::to_string(bytes) + " bytes at address " +
           std::to_string(first) + " runs past the end of the address space";
  });
}

/// What every backend checks when a copy is issued, before it is queued:
/// a null pointer, a range past the end of the address space or
/// overlapping ranges would corrupt memory later, on another thread, far
/// from the call that caused it.
inline void check_copy_arguments(const void* destination, const void* source, std::size_t bytes,
                                 copy_kind kind) {
  const std::string what =
      std::string("copy_async(") + to_string(kind) + ", " + std::to_string(bytes) + " bytes)";
  expects(destination != nullptr && source != nullptr, [&] { return what + ": null pointer"; });
  check_byte_range(destination, bytes, what, "destination");
  check_byte_range(source, bytes, what, "source");
  const auto d = reinterpret_cast<std::uintptr_t>(destination);
  const auto s = reinterpret_cast<std::uintptr_t>(source);
  expects(d >= s + bytes || s >= d + bytes,
          [&] { return what + ": source and destination overlap"; });
}

/// What every backend checks when a memset is issued.
inline void check_memset_arguments(const void* destination, int value, std::size_t bytes) {
  const std::string what = "memset_async(value " + std::to_string(value) + ", " +
                           std::to_string(bytes) + " bytes)";
  expects(destination != nullptr, [&] { return what + ": null pointer"; });
  expects(value >= -128 && value <= 255, [&] { return what + ": value is not a byte"; });
  check_byte_range(destination, bytes, what, "destination");
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
             std::size_t bytes, copy_kind kind, void (*work)(typename B::native_stream),
             const gemm_shape& shape, const gemm_batch& batch, const float* a, const float* b,
             float* c) {
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
      backend.memset_async(destination, 0, bytes, stream);
      backend.enqueue(stream, work);
      backend.parallel_for(stream, extent_1d{}, detail::concept_functor_1d{});
      backend.parallel_for(stream, extent_2d{}, detail::concept_functor_2d{});
      backend.gemm(stream, shape, 1.0f, a, b, 0.0f, c);
      backend.gemm_strided_batched(stream, shape, batch, 1.0f, a, b, 0.0f, c);
      { backend.stream_workspace_bytes() } -> std::convertible_to<std::size_t>;
      { backend.make_stream(std::string_view{}, memory_region{}) } -> std::same_as<typename B::stream>;
      { backend.elapsed_seconds(const_event, const_event) } -> std::convertible_to<double>;
    };

/// Turns "T is not a backend" into one readable line at the point of use:
/// `static_assert(memo::is_backend<MyBackend>, ...)` inside templates that
/// cannot use a constrained parameter.
template <class B>
inline constexpr bool is_backend = Backend<B>;

/// Waits for the work queued on `stream` and drops its error: for
/// destructors and unwinding, which must not free a buffer that queued work
/// still uses, and whose error is reported where the work is synchronised.
template <Backend B>
void drain(B& backend, typename B::stream& stream) noexcept {
  try {
    backend.synchronize(stream);
  } catch (...) {  // reported by the owner's own synchronize, or already on its way
  }
}

}  // namespace memo
