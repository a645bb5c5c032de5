// memo/plan/planned_arena.hpp
//
// The memory a plan owns (MEMO sections 4.3.3 and 4.3.4: the runtime
// executor "reads the memory plan" and allocates activations at the planned
// addresses).
//
// A `planned_arena` is ONE allocation of a plan's peak bytes, taken from a
// backend's device resource (or built over a `memory_region` someone else
// owns, sized with `take_region` in a counting `region_carver`). Every buffer
// of the plan lives at `arena base + planned offset`:
//
//   - `view<T>(id, {rows, cols})` is a `tensor_view` of buffer `id`, checked
//     to fit the buffer's planned bytes and the element type's alignment;
//   - `region(id)` is the buffer's bytes as a `memory_region`, so any owner
//     built over a region (rounding buffers, workspaces) can live in a plan.
//
// `planned_replay_resource` (planned_replay.hpp) replays the recorded
// program's requests over the arena, so code written against a
// `MemoryResource` runs on the plan unchanged.
//
// Construction checks the plan against the trace (`require_valid`) and the
// arena's base against the largest alignment a buffer asks for, so every
// planned address honours the alignment its request asked for.
//
// Lifetime rules:
//   - the device resource outlives the arena and any replay resource over it;
//   - views and regions are plain pointers: they must not be used after the
//     arena is destroyed (not checkable, by design: they go into kernels);
//   - destroying an arena while a replay resource still has allocations live
//     is reported through `arena_options::on_lifetime_error` (stderr by
//     default), never a crash: the memory is kept until the last of those
//     allocations is returned, and later requests to the replay resource are
//     errors.
//
// Poisoning: with poisoning on, a planned replay fills a buffer's bytes with
// `poison_byte` (0xFF: a NaN in every float format) when it hands the buffer
// out and again when it is freed, so reading a buffer outside its live
// interval reads garbage that changes results, instead of silently reading
// the value that happened to be left there. It is on by default in debug
// builds (NDEBUG not defined, or MEMO_POISON_PLANNED_MEMORY defined) when the
// memory is host-accessible or `arena_options::fill` says how to fill it.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "memo/backend/concepts.hpp"
#include "memo/backend/memory_resource.hpp"
#include "memo/core/bytes.hpp"
#include "memo/core/error.hpp"
#include "memo/core/liveness.hpp"
#include "memo/core/memory_region.hpp"
#include "memo/core/tensor_view.hpp"
#include "memo/plan/dsa_problem.hpp"
#include "memo/plan/trace.hpp"

namespace memo {

struct arena_options {
  /// Poison dead buffers during a planned replay. Unset: on in debug builds
  /// (`planned_arena::poison_by_default`) when the memory can be filled;
  /// true when it cannot be filled is an error.
  std::optional<bool> poison;
  std::byte poison_byte{0xFF};
  /// Fills device bytes (e.g. with a device memset) for poisoning. Unset:
  /// `std::memset` when the memory is host-accessible.
  std::function<void(memory_region, std::byte)> fill;
  /// For an arena over a `memory_region`: whether the host may write it.
  bool host_accessible_region = false;
  /// Receives lifetime errors found in destructors, which cannot throw.
  /// Unset: the message is written to stderr.
  std::function<void(const error&)> on_lifetime_error;
};

class planned_replay_resource;

namespace detail {

/// One request of the trace: the instant's malloc or free of a buffer.
struct planned_request {
  bool is_malloc = true;
  std::size_t buffer = 0;
};

/// What a planned arena and the replay resources over it share: the plan,
/// the memory, and who still uses it. The memory is returned when the arena
/// is gone and no replayed allocation is live.
struct arena_core {
  memory_region memory;
  std::vector<dsa_buffer> buffers;
  std::vector<std::uint64_t> offsets;
  std::unordered_map<std::uint64_t, std::size_t> index;  // id -> buffer
  std::vector<trace_section> sections;
  std::vector<planned_request> requests;  // by instant
  std::string not_replayable;             // why requests is unusable; empty if usable
  bool poison = false;
  std::byte poison_byte{0xFF};
  std::function<void(memory_region, std::byte)> fill;
  std::function<void(const error&)> on_lifetime_error;
  // The owned allocation, if any: released through this type-erased call,
  // unless the resource (watched when it keeps a liveness token) is gone.
  void* resource = nullptr;
  std::optional<liveness_watch> resource_watch;
  // Whether the memory behind the resource still exists (a recorder's
  // upstream, say); asked only while the resource itself is alive.
  bool (*resource_memory)(const void* resource) = nullptr;
  void (*release)(void* resource, void* data, std::size_t bytes, std::size_t alignment) = nullptr;
  std::size_t allocation_bytes = 0;
  std::size_t allocation_alignment = 0;

  std::mutex mutex;  // guards what follows
  bool arena_alive = true;
  bool replay_attached = false;
  std::size_t live_replayed = 0;

  arena_core() = default;
  arena_core(const arena_core&) = delete;
  arena_core& operator=(const arena_core&) = delete;
  ~arena_core() { release_memory(); }

  [[nodiscard]] memory_region buffer_region(std::size_t i) const {
    return memory.subregion(offsets[i], buffers[i].size_bytes);
  }
  /// True once the resource the memory came from is gone (so is the memory).
  [[nodiscard]] bool memory_gone() const noexcept {
    if (owner_gone(resource_watch)) return true;
    return resource_watch && resource_memory != nullptr && !resource_memory(resource);
  }
  void poison_buffer(std::size_t i) const {
    if (poison && !memory_gone()) fill(buffer_region(i), poison_byte);
  }
  void report(const error& problem) const noexcept {
    try {
      if (on_lifetime_error) {
        on_lifetime_error(problem);
        return;
      }
    } catch (...) {
    }
    std::fprintf(stderr, "memo: %s\n", problem.what());
  }
  /// Returns the owned allocation (once); never throws.
  void release_memory() noexcept {
    if (release == nullptr) return;
    auto fn = std::exchange(release, nullptr);
    if (memory_gone()) return;  // the resource freed it when it went
    try {
      fn(resource, memory.data, allocation_bytes, allocation_alignment);
    } catch (const error& e) {
      report(e);
    } catch (...) {
      report(error("planned_arena: returning its memory to the device resource failed"));
    }
    memory = {};
  }
};

}  // namespace detail

class planned_arena {
 public:
  static constexpr bool poison_by_default =
#if !defined(NDEBUG) || defined(MEMO_POISON_PLANNED_MEMORY)
      true;
#else
      false;
#endif

  /// One allocation of `plan.peak_bytes` from `device` (which must outlive
  /// the arena), laid out by `plan` for the buffers of `trace`.
  template <MemoryResource Resource>
  planned_arena(Resource& device, const memory_trace& trace, const dsa_plan& plan,
                arena_options options = {})
      : core_(make_core(trace, plan)) {
    constexpr bool host = requires { requires Resource::host_accessible; };
    configure(std::move(options), host);
    const std::size_t alignment = required_alignment(trace);
    const std::size_t bytes = plan.peak_bytes;
    if (bytes > 0) {
      void* data = device.allocate(bytes, alignment);
      core_->memory = {static_cast<std::byte*>(data), bytes};
      core_->resource = &device;
      core_->resource_watch = watch_if_kept(device);
      core_->resource_memory = [](const void* r) {
        return resource_memory_alive(*static_cast<const Resource*>(r));
      };
      core_->allocation_bytes = bytes;
      core_->allocation_alignment = alignment;
      core_->release = [](void* resource, void* pointer, std::size_t n, std::size_t a) {
        static_cast<Resource*>(resource)->deallocate(pointer, n, a);
      };
    }
  }

  /// One allocation from `backend.device_memory()`.
  template <Backend B>
  planned_arena(B& backend, const memory_trace& trace, const dsa_plan& plan,
                arena_options options = {})
      : planned_arena(backend.device_memory(), trace, plan, std::move(options)) {}

  /// Over `region`, which it does not own: at least `plan.peak_bytes` bytes,
  /// aligned to `required_alignment(trace)` (see `take_region`).
  planned_arena(memory_region region, const memory_trace& trace, const dsa_plan& plan,
                arena_options options = {})
      : core_(make_core(trace, plan)) {
    const bool host = options.host_accessible_region;
    configure(std::move(options), host);
    expects(region.bytes >= plan.peak_bytes && (region.data != nullptr || region.bytes == 0), [&] {
      return "planned_arena: the plan needs " + std::to_string(plan.peak_bytes) +
             " bytes but the region holds " + std::to_string(region.bytes) +
             (region.data == nullptr ? " (null data: a counting region?)" : "");
    });
    const std::size_t alignment = required_alignment(trace);
    expects(is_aligned(region.data, alignment), [&] {
      return "planned_arena: the region's start is not aligned to " + std::to_string(alignment) +
             " bytes, the largest alignment a buffer of the trace asks for";
    });
    core_->memory = region.subregion(0, plan.peak_bytes);
  }

  planned_arena(planned_arena&&) noexcept = default;
  planned_arena& operator=(planned_arena&& other) noexcept {
    if (this != &other) {
      retire();
      core_ = std::move(other.core_);
    }
    return *this;
  }
  planned_arena(const planned_arena&) = delete;
  planned_arena& operator=(const planned_arena&) = delete;
  ~planned_arena() { retire(); }

  /// The alignment the arena's start needs: the largest a buffer asks for,
  /// and at least `default_alignment_bytes`.
  [[nodiscard]] static std::size_t required_alignment(const memory_trace& trace) {
    std::uint64_t alignment = default_alignment_bytes;
    for (const auto& b : trace.problem.buffers) alignment = std::max(alignment, b.alignment);
    return static_cast<std::size_t>(alignment);
  }

  /// Two-phase sizing: in a counting carver, adds the bytes (and alignment)
  /// an arena for `plan` needs; in a carving one, returns its region.
  static memory_region take_region(region_carver& carver, const memory_trace& trace,
                                   const dsa_plan& plan) {
    return carver.take(plan.peak_bytes, "planned arena", required_alignment(trace));
  }

  /// Buffer `id`'s planned bytes.
  [[nodiscard]] memory_region region(std::uint64_t id) const {
    return core().buffer_region(index_of(id));
  }

  /// Buffer `id` as a row-major tensor of `extents`; the tensor must fit the
  /// buffer's planned bytes and its address must suit `T`'s alignment.
  template <class T, std::size_t Rank>
  [[nodiscard]] tensor_view<T, Rank> view(std::uint64_t id,
                                          const std::array<std::int64_t, Rank>& extents) const {
    static_assert(std::is_trivially_copyable_v<T>,
                  "planned_arena::view: T must be trivially copyable (the arena holds raw bytes)");
    const memory_region bytes = region(id);
    std::uint64_t elements = 1;
    for (const auto e : extents) {
      expects(e >= 0, [&] {
        return "planned_arena: view of buffer " + std::to_string(id) + " with negative extent " +
               tensor_view<T, Rank>::shape_string(extents);
      });
      elements = checked_mul(elements, static_cast<std::uint64_t>(e));
    }
    const std::uint64_t needed = checked_mul(elements, sizeof(T));
    expects(needed <= bytes.bytes, [&] {
      return "planned_arena: a view of buffer " + std::to_string(id) + " as " +
             tensor_view<T, Rank>::shape_string(extents) + " of " + std::to_string(sizeof(T)) +
             "-byte elements needs " + std::to_string(needed) + " bytes but the plan gives it " +
             std::to_string(bytes.bytes);
    });
    expects(is_aligned(bytes.data, alignof(T)), [&] {
      return "planned_arena: buffer " + std::to_string(id) + " at offset " +
             std::to_string(offset(id)) + " is not aligned to " + std::to_string(alignof(T)) +
             " bytes, as its element type needs";
    });
    return tensor_view<T, Rank>::contiguous(reinterpret_cast<T*>(bytes.data), extents);
  }
  template <class T, std::size_t Rank>
  [[nodiscard]] tensor_view<T, Rank> view(std::uint64_t id,
                                          const std::int64_t (&extents)[Rank]) const {
    std::array<std::int64_t, Rank> e{};
    std::copy(extents, extents + Rank, e.begin());
    return view<T, Rank>(id, e);
  }

  [[nodiscard]] std::uint64_t offset(std::uint64_t id) const { return core().offsets[index_of(id)]; }
  [[nodiscard]] std::uint64_t size_bytes(std::uint64_t id) const {
    return core().buffers[index_of(id)].size_bytes;
  }
  [[nodiscard]] bool contains(std::uint64_t id) const { return core().index.contains(id); }
  /// The whole arena: the plan's peak bytes.
  [[nodiscard]] memory_region memory() const { return core().memory; }
  [[nodiscard]] std::size_t peak_bytes() const noexcept { return core_ ? core_->memory.bytes : 0; }
  [[nodiscard]] std::size_t buffer_count() const { return core().buffers.size(); }
  [[nodiscard]] bool poisoning() const { return core().poison; }
  /// Allocations a replay resource has handed out and not yet taken back.
  [[nodiscard]] std::size_t live_replayed_allocations() const {
    std::lock_guard lock(core().mutex);
    return core().live_replayed;
  }

 private:
  friend class planned_replay_resource;

  [[nodiscard]] detail::arena_core& core() const {
    expects(core_ != nullptr, "planned_arena: use of a moved-from arena");
    expects(!core_->memory_gone(),
            "planned_arena: used after the memory resource it was allocated from was destroyed (the "
            "resource must outlive the arena)");
    return *core_;
  }
  [[nodiscard]] std::size_t index_of(std::uint64_t id) const {
    const auto& c = core();
    const auto it = c.index.find(id);
    expects(it != c.index.end(), [&] {
      return "planned_arena: no buffer with id " + std::to_string(id) + " in the plan (" +
             std::to_string(c.buffers.size()) + " buffers)";
    });
    return it->second;
  }

  static std::shared_ptr<detail::arena_core> make_core(const memory_trace& trace,
                                                       const dsa_plan& plan) {
    require_valid(trace.problem, plan, "planned_arena");
    auto core = std::make_shared<detail::arena_core>();
    core->buffers = trace.problem.buffers;
    core->offsets = plan.offsets;
    core->sections = trace.sections;
    for (std::size_t i = 0; i < core->buffers.size(); ++i) {
      const auto [it, fresh] = core->index.emplace(core->buffers[i].id, i);
      expects(fresh, [&] {
        return "planned_arena: duplicate buffer id " + std::to_string(core->buffers[i].id);
      });
    }
    // The request order a replay follows: one request per instant. A
    // request sequence has at most two requests per buffer; a trace spanning
    // more instants (a CSV problem's timeline, say up to 2^62) is not one,
    // and is refused before a table of its instants is allocated.
    const std::int64_t end = trace.end_time;
    const std::uint64_t most_requests = 2 * static_cast<std::uint64_t>(core->buffers.size());
    if (end > 0 && static_cast<std::uint64_t>(end) > most_requests) {
      core->not_replayable = "the trace is not a request sequence (it spans " + std::to_string(end) +
                             " instants, but its " + std::to_string(core->buffers.size()) +
                             " buffers make at most " + std::to_string(most_requests) + " requests)";
      return core;
    }
    std::vector<std::uint8_t> taken(static_cast<std::size_t>(std::max<std::int64_t>(end, 0)), 0);
    core->requests.resize(taken.size());
    auto place = [&](std::int64_t t, bool is_malloc, std::size_t i) {
      if (!core->not_replayable.empty()) return;
      if (t < 0 || t >= end || taken[static_cast<std::size_t>(t)] != 0) {
        core->not_replayable = "the trace is not a request sequence (two requests at instant " +
                               std::to_string(t) + ", or one outside [0, " + std::to_string(end) +
                               "))";
        return;
      }
      taken[static_cast<std::size_t>(t)] = 1;
      core->requests[static_cast<std::size_t>(t)] = {is_malloc, i};
    };
    for (std::size_t i = 0; i < core->buffers.size(); ++i) {
      const auto& b = core->buffers[i];
      place(b.lower, true, i);
      if (std::find(trace.never_freed.begin(), trace.never_freed.end(), b.id) ==
          trace.never_freed.end()) {
        place(b.upper, false, i);
      } else if (core->not_replayable.empty()) {
        core->not_replayable = "buffer " + std::to_string(b.id) +
                               " is never freed, but a replayed step must free what it allocates";
      }
    }
    if (core->not_replayable.empty() &&
        std::find(taken.begin(), taken.end(), std::uint8_t{0}) != taken.end()) {
      core->not_replayable = "the trace has instants without a request (not a request sequence)";
    }
    return core;
  }

  void configure(arena_options options, bool host_accessible) {
    auto& c = *core_;
    const bool can_fill = options.fill || host_accessible;
    expects(!options.poison.value_or(false) || can_fill,
            "planned_arena: poisoning needs host-accessible memory or arena_options::fill "
            "(a function that fills device bytes)");
    c.poison = options.poison.value_or(poison_by_default && can_fill);
    c.poison_byte = options.poison_byte;
    c.fill = options.fill ? std::move(options.fill) : [](memory_region r, std::byte value) {
      if (r.bytes > 0) std::memset(r.data, static_cast<int>(value), r.bytes);
    };
    c.on_lifetime_error = std::move(options.on_lifetime_error);
  }

  // The arena is gone: give the memory back, unless replayed allocations
  // still point into it (then report, and let the last of them give it back).
  void retire() noexcept {
    if (!core_) return;
    auto& c = *core_;
    bool release_now = false;
    {
      std::lock_guard lock(c.mutex);
      c.arena_alive = false;
      release_now = c.live_replayed == 0;
      if (!release_now) {
        std::string message;
        try {
          message = "planned_arena destroyed while " + std::to_string(c.live_replayed) +
                    " replayed allocation(s) are live; its memory is kept until they are freed";
        } catch (...) {
        }
        c.report(error(std::move(message)));
      }
    }
    if (release_now) c.release_memory();
    core_.reset();
  }

  std::shared_ptr<detail::arena_core> core_;
};

}  // namespace memo
