// memo/plan/recording_resource.hpp
//
// The job profiler of MEMO section 4.3.2: run one training iteration through
// a memory resource that logs every request it serves as `malloc <id>
// <bytes>` / `free <id> <bytes>`, with section markers around each part of
// the model, and hand the log to the planner.
//
// `recording_resource<Upstream>` wraps any `MemoryResource`: every request is
// forwarded to the upstream resource unchanged (the recorded run computes
// with real memory) and appended to a `memory_trace` through `trace_builder`,
// so a recording gets exactly the checks a parsed trace gets. Ids are given
// in allocation order from 0. `begin_section(name)` / `end_section(name)`
// mark a layer's forward or backward pass (`"layer 3 forward"`), which is
// what the bi-level planner decomposes on. `trace()` returns the recording so
// far; `text()` writes it in the form `memo-plan` reads.
//
// Alignment: the trace's buffers carry the alignment each request asked for
// (`dsa_buffer::alignment`), so the solvers place them at aligned offsets.
// The text form has no alignment column: a plan made from the text alone is
// checked against the recorded alignments when an arena is built on it.
//
// Zero-byte requests are forwarded but not recorded: a buffer of no bytes has
// nothing to plan (a planned replay serves them without the plan).
//
// The free functions `mark_section_begin` / `mark_section_end` let a program
// templated on its memory resource mark sections whatever resource it runs
// on: they call the resource's own markers when it has them (recording and
// planned replay) and do nothing otherwise (a backend's plain resource).
//
// Thread safety: every member may be called from any thread; calls are
// serialised by one mutex and recorded in the order they took it. A trace is
// only worth replaying when the program's request order is deterministic,
// so record multi-threaded programs with their requests on one thread.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "memo/backend/concepts.hpp"
#include "memo/backend/memory_resource.hpp"
#include "memo/core/bytes.hpp"
#include "memo/core/error.hpp"
#include "memo/core/liveness.hpp"
#include "memo/plan/trace.hpp"

namespace memo {

/// A resource whose requests can be grouped into named sections.
template <class R>
concept SectionMarking = requires(R& resource, std::string_view name) {
  resource.begin_section(name);
  resource.end_section(name);
};

/// Marks the beginning of section `name` on `resource` when it keeps
/// sections (recording or replaying); does nothing on any other resource.
template <MemoryResource R>
void mark_section_begin(R& resource, std::string_view name) {
  if constexpr (SectionMarking<R>) resource.begin_section(name);
}

/// Marks the end of section `name`; see `mark_section_begin`.
template <MemoryResource R>
void mark_section_end(R& resource, std::string_view name) {
  if constexpr (SectionMarking<R>) resource.end_section(name);
}

template <MemoryResource Upstream>
class recording_resource : public detail::accounted_resource {
 public:
  /// Records the requests served by `upstream`, which must outlive it.
  /// `source` names the trace in error messages.
  explicit recording_resource(Upstream& upstream, std::string source = "recorded trace")
      : accounted_resource(source), upstream_(&upstream), upstream_watch_(watch_if_kept(upstream)),
        builder_(source) {}
  recording_resource(const recording_resource&) = delete;
  recording_resource& operator=(const recording_resource&) = delete;
  /// Returns what is still allocated through it to the upstream (if that is
  /// still there): buffers that outlive the recorder then return nothing.
  ~recording_resource() {
    if (owner_gone(upstream_watch_)) return;
    try {
      for (const auto& [pointer, request] : live_) upstream_->deallocate(pointer, request.bytes, alignments_[request.id]);
      for (const auto& [pointer, alignment] : zero_byte_) upstream_->deallocate(pointer, 0, alignment);
    } catch (...) {
      // The upstream refused its own allocation back: nothing better to do here.
    }
  }

  /// False once the upstream, whose memory it hands out, is gone.
  [[nodiscard]] bool memory_alive() const noexcept {
    return !owner_gone(upstream_watch_) && resource_memory_alive(*upstream_);
  }

  void* allocate(std::size_t bytes, std::size_t alignment = default_alignment_bytes) {
    std::lock_guard lock(mutex_);
    expects(!owner_gone(upstream_watch_), [&] {
      return builder_source() + ": allocating after its upstream memory resource was destroyed";
    });
    void* pointer = accounting_.charge(bytes, [&] { return upstream_->allocate(bytes, alignment); });
    if (bytes == 0) {  // not recorded (nothing to plan), but returned upstream with the rest
      try {
        zero_byte_.emplace_back(pointer, alignment);
      } catch (...) {
        upstream_->deallocate(pointer, 0, alignment);
        accounting_.remove(0);
        throw;
      }
      return pointer;
    }
    try {
      const std::uint64_t id = next_id_;
      builder_.malloc(id, bytes);
      live_.emplace(pointer, allocation{id, bytes});
      alignments_.push_back(alignment);
      ++next_id_;
    } catch (...) {
      upstream_->deallocate(pointer, bytes, alignment);
      accounting_.remove(bytes);
      throw;
    }
    return pointer;
  }

  /// Forwards the deallocation and records it. A pointer this resource did
  /// not hand out (or a size that differs from its allocation) is an error
  /// before anything reaches the upstream resource.
  void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment_bytes) {
    if (pointer == nullptr) return;
    std::lock_guard lock(mutex_);
    if (bytes != 0) {
      const auto it = live_.find(pointer);
      expects(it != live_.end(), [&] {
        return builder_source() + ": deallocating " + std::to_string(bytes) +
               " bytes at a pointer it did not allocate (or twice)";
      });
      builder_.free(it->second.id, bytes);  // checks the size against the malloc
      live_.erase(it);
    } else {
      const auto it = std::find_if(zero_byte_.begin(), zero_byte_.end(),
                                   [&](const auto& entry) { return entry.first == pointer; });
      if (it != zero_byte_.end()) zero_byte_.erase(it);
    }
    // An upstream that is gone freed the memory when it went.
    if (!owner_gone(upstream_watch_)) upstream_->deallocate(pointer, bytes, alignment);
    accounting_.remove(bytes);
  }

  /// Opens section `name` (e.g. "layer 3 forward"); sections do not nest.
  void begin_section(std::string_view name) {
    std::lock_guard lock(mutex_);
    builder_.begin_section(std::string(name));
  }
  /// Closes the open section, which must be called `name`.
  void end_section(std::string_view name) {
    std::lock_guard lock(mutex_);
    builder_.end_section(name);
  }

  /// The recording so far: buffers still allocated are live to its end
  /// (listed in `never_freed`); an open section is an error.
  [[nodiscard]] memory_trace trace() const {
    std::lock_guard lock(mutex_);
    memory_trace result = trace_builder(builder_).finish();
    for (std::size_t i = 0; i < result.problem.buffers.size(); ++i) {
      result.problem.buffers[i].alignment = alignments_[i];
    }
    return result;
  }
  /// `trace()` in the request form `memo-plan` reads (without alignments).
  [[nodiscard]] std::string text() const { return write_trace(trace()); }

  /// Requests recorded so far (mallocs and frees).
  [[nodiscard]] std::int64_t request_count() const {
    std::lock_guard lock(mutex_);
    return builder_.now();
  }

  [[nodiscard]] Upstream& upstream() const noexcept { return *upstream_; }

 private:
  [[nodiscard]] const std::string& builder_source() const noexcept { return accounting_.name(); }

  Upstream* upstream_;
  std::optional<liveness_watch> upstream_watch_;
  mutable std::mutex mutex_;
  trace_builder builder_;
  struct allocation {
    std::uint64_t id;
    std::size_t bytes;
  };
  std::unordered_map<void*, allocation> live_;  // pointer -> its request
  // Zero-byte allocations (pointer, alignment); an upstream may hand out one
  // address for all of them, so a list.
  std::vector<std::pair<void*, std::size_t>> zero_byte_;
  std::vector<std::size_t> alignments_;            // by id
  std::uint64_t next_id_ = 0;
};

static_assert(MemoryResource<recording_resource<host_memory_resource>>);
static_assert(SectionMarking<recording_resource<host_memory_resource>>);

}  // namespace memo
