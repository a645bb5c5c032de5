// memo/plan/planned_replay.hpp
//
// The runtime executor's half of MEMO section 4.3.4: "the transient
// activation tensors are allocated and discarded according to the memory
// plan". The program that was recorded (recording_resource.hpp) runs again,
// unchanged, over a `planned_replay_resource`: each request it makes is the
// next request of the trace, and is answered with the planned address of that
// buffer in a `planned_arena`. Nothing is allocated from the backend during
// a replayed step; a step's device footprint is the arena, i.e. the plan's
// peak.
//
// Every request is checked against the trace, in order: a malloc must be the
// next request and ask for the recorded size, a free must return the buffer
// the trace frees next, and section markers must sit where they were
// recorded. A malloc that does not match throws a `memo::error` naming the
// request index, what the trace expected and what it got (a misplaced
// section marker throws the same way but leaves the replay usable). A free
// that does not match cannot throw (frees run in destructors); it makes the replay
// *failed*: the error is raised by the next malloc and by `end_step()`.
//
// Steps: the trace is one step. `end_step()` checks that every request of
// the step was made and rewinds to the first request for the next step;
// `reset()` forgets a failed step once every allocation is returned.
//
// Poisoning (see planned_arena.hpp): each buffer's bytes are filled with the
// poison byte when the buffer is handed out and when it is freed.
//
// Frees are immediate, as in the plan: work still using a buffer (queued on
// a stream) must have finished before it is freed, because the next request
// may hand the same bytes to another buffer.
//
// Thread safety: the members may be called from any thread (one mutex), but
// the requests must arrive in the recorded order, so a program whose
// requests come from several threads needs a deterministic order.
//
// Lifetime: at most one replay resource per arena at a time. It keeps the
// arena's memory alive while its allocations are live (see
// planned_arena.hpp); destroying it with live allocations is reported
// through the arena's `on_lifetime_error`.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "memo/backend/concepts.hpp"
#include "memo/backend/memory_resource.hpp"
#include "memo/core/bytes.hpp"
#include "memo/core/error.hpp"
#include "memo/plan/planned_arena.hpp"
#include "memo/plan/recording_resource.hpp"

namespace memo {

class planned_replay_resource : public detail::accounted_resource {
 public:
  /// Replays `arena`'s trace over it. The trace must be a request sequence
  /// that frees every buffer it allocates.
  explicit planned_replay_resource(planned_arena& arena)
      : accounted_resource("planned replay"), core_(arena.core_) {
    expects(core_ != nullptr, "planned_replay_resource: the arena was moved from");
    expects(core_->not_replayable.empty(),
            [&] { return "planned_replay_resource: " + core_->not_replayable; });
    std::lock_guard lock(core_->mutex);
    expects(!core_->replay_attached,
            "planned_replay_resource: the arena already has a replay resource (one at a time: "
            "two would hand out the same addresses)");
    core_->replay_attached = true;
    live_.assign(core_->buffers.size(), 0);
  }
  planned_replay_resource(const planned_replay_resource&) = delete;
  planned_replay_resource& operator=(const planned_replay_resource&) = delete;
  /// Allocations still live are reported, then taken back: buffers that
  /// outlive the replay resource return nothing, and an arena destroyed
  /// before it releases its memory now.
  ~planned_replay_resource() {
    bool release = false;
    {
      std::lock_guard lock(core_->mutex);
      core_->replay_attached = false;
      if (live_count_ > 0) {
        core_->report(error("planned_replay_resource destroyed with " + std::to_string(live_count_) +
                            " allocation(s) live"));
        core_->live_replayed -= std::min(core_->live_replayed, live_count_);
        release = !core_->arena_alive && core_->live_replayed == 0;
      }
    }
    if (release) core_->release_memory();
  }

  /// False once the memory of its arena is gone with the resource it came from.
  [[nodiscard]] bool memory_alive() const noexcept { return !core_->memory_gone(); }

  void* allocate(std::size_t bytes, std::size_t alignment = default_alignment_bytes) {
    expects(is_power_of_two(alignment), [&] {
      return "planned replay: alignment must be a power of two, got " + std::to_string(alignment);
    });
    std::lock_guard lock(mutex_);
    raise_if_failed();
    {
      std::lock_guard core_lock(core_->mutex);
      expects(core_->arena_alive, "planned replay: its planned_arena was destroyed");
      expects(!core_->memory_gone(),
              "planned replay: the memory resource its arena was allocated from was destroyed");
    }
    if (bytes == 0) {
      // Not in the trace (nothing to plan): an address never dereferenced.
      expects(alignment <= alignof(zero_byte_block), [&] {
        return "planned replay: a zero-byte request with alignment " + std::to_string(alignment) +
               " (at most " + std::to_string(alignof(zero_byte_block)) + " is supported)";
      });
      return accounting_.charge(0, [&] { return static_cast<void*>(&zero_bytes_); });
    }
    const auto& requests = core_->requests;
    const std::size_t t = cursor_;
    auto got = [&] { return "malloc of " + std::to_string(bytes) + " bytes"; };
    if (t >= requests.size()) {
      fail(t, "no request (the step has " + std::to_string(requests.size()) +
                  "; call end_step() between steps)", got());
    }
    const auto& request = requests[t];
    const std::size_t k = request.buffer;
    if (!request.is_malloc || core_->buffers[k].size_bytes != bytes) fail(t, expected(t), got());
    const memory_region planned = core_->buffer_region(k);
    if (!is_aligned(planned.data, alignment)) {
      fail(t, expected(t) + " at offset " + std::to_string(core_->offsets[k]),
           got() + " aligned to " + std::to_string(alignment) + " (the planned address is not)");
    }
    core_->poison_buffer(k);  // before it is handed out: a read before the first write sees it
    void* pointer = accounting_.charge(bytes, [&] { return static_cast<void*>(planned.data); });
    live_[k] = 1;
    ++live_count_;
    ++cursor_;
    std::lock_guard core_lock(core_->mutex);
    ++core_->live_replayed;
    return pointer;
  }

  /// Takes a buffer back. Never throws: a free that does not match the trace
  /// fails the replay (raised by the next malloc and by `end_step()`).
  void deallocate(void* pointer, std::size_t bytes,
                  std::size_t /*alignment*/ = default_alignment_bytes) noexcept {
    if (pointer == nullptr) return;
    if (pointer == static_cast<void*>(&zero_bytes_) && bytes == 0) {
      accounting_.remove(0);
      return;
    }
    bool release = false;
    {
      std::lock_guard lock(mutex_);
      const auto& requests = core_->requests;
      const std::size_t t = cursor_;
      std::optional<std::size_t> k;
      if (!failure_ && t < requests.size() && !requests[t].is_malloc) {
        const std::size_t expected_buffer = requests[t].buffer;
        if (core_->buffer_region(expected_buffer).data == pointer &&
            core_->buffers[expected_buffer].size_bytes == bytes) {
          k = expected_buffer;
          ++cursor_;
        }
      }
      if (!k) {
        k = live_buffer_at(pointer);
        record_failure(t, [&] {
          std::string got = "free of " + std::to_string(bytes) + " bytes ";
          const auto* p = static_cast<const std::byte*>(pointer);
          const memory_region all = core_->memory;
          if (k) {
            got += "of buffer " + std::to_string(core_->buffers[*k].id);
          } else if (all.data != nullptr && p >= all.data && p < all.data + all.bytes) {
            got += "at offset " + std::to_string(p - all.data) + ", not a live buffer";
          } else {
            got += "at a pointer outside the arena";
          }
          return std::pair(t < requests.size() ? expected(t) : std::string("no more requests"),
                           got);
        });
      }
      // Out of order or with a wrong size, the program has still given the
      // buffer up: it is dead from here on.
      if (!k) return;
      live_[*k] = 0;
      --live_count_;
      core_->poison_buffer(*k);
      accounting_.remove(core_->buffers[*k].size_bytes);
      std::lock_guard core_lock(core_->mutex);
      --core_->live_replayed;
      release = !core_->arena_alive && core_->live_replayed == 0;
    }
    if (release) core_->release_memory();
  }

  /// Checks the section marker against the trace: section `name` must begin
  /// at the next request.
  void begin_section(std::string_view name) { check_section(name, true); }
  /// Section `name` must end here.
  void end_section(std::string_view name) { check_section(name, false); }

  /// Ends a step: every request of the trace must have been made (and
  /// matched). Rewinds to the first request for the next step.
  void end_step() {
    std::lock_guard lock(mutex_);
    raise_if_failed();
    if (cursor_ != core_->requests.size()) {
      fail(cursor_, expected(cursor_), "end_step() after " + std::to_string(cursor_) + " of " +
                                           std::to_string(core_->requests.size()) + " requests");
    }
    cursor_ = 0;
    ++steps_;
  }

  /// Forgets a failed (or partial) step; every allocation must be returned.
  void reset() {
    std::lock_guard lock(mutex_);
    expects(live_count_ == 0, [&] {
      return "planned replay: reset() with " + std::to_string(live_count_) +
             " allocation(s) still live; free them first";
    });
    failure_.reset();
    cursor_ = 0;
  }

  /// Index of the next request of the step.
  [[nodiscard]] std::size_t position() const {
    std::lock_guard lock(mutex_);
    return cursor_;
  }
  [[nodiscard]] std::uint64_t steps_completed() const {
    std::lock_guard lock(mutex_);
    return steps_;
  }
  /// The failure of the current step, if a request did not match.
  [[nodiscard]] std::optional<std::string> failure() const {
    std::lock_guard lock(mutex_);
    return failure_;
  }

 private:
  struct alignas(default_alignment_bytes) zero_byte_block {
    std::byte unused;
  };

  [[nodiscard]] std::string expected(std::size_t t) const {
    if (t >= core_->requests.size()) return "no more requests";
    const auto& request = core_->requests[t];
    const auto& b = core_->buffers[request.buffer];
    return std::string(request.is_malloc ? "malloc" : "free") + " of " +
           std::to_string(b.size_bytes) + " bytes (buffer " + std::to_string(b.id) + ")";
  }

  [[nodiscard]] std::optional<std::size_t> live_buffer_at(const void* pointer) const {
    for (std::size_t i = 0; i < live_.size(); ++i) {
      if (live_[i] != 0 && core_->buffer_region(i).data == pointer) return i;
    }
    return std::nullopt;
  }

  static std::string describe(std::size_t t, const std::string& expected, const std::string& got) {
    return "planned replay: request " + std::to_string(t) + " does not match the trace: expected " +
           expected + ", got " + got;
  }

  [[noreturn]] void fail(std::size_t t, const std::string& expected, const std::string& got) {
    if (!failure_) failure_ = describe(t, expected, got);
    throw error(describe(t, expected, got));
  }

  template <class Describe>
  void record_failure(std::size_t t, Describe&& what) noexcept {
    if (failure_) return;
    try {
      const auto [expected_text, got] = what();
      failure_ = describe(t, expected_text, got);
    } catch (...) {
      failure_ = std::string();  // out of memory while describing it: still failed
    }
  }

  void raise_if_failed() const {
    if (failure_) {
      throw error(failure_->empty() ? "planned replay: a request did not match the trace"
                                    : *failure_ + " (the replay has failed; reset() after "
                                                  "freeing everything)");
    }
  }

  void check_section(std::string_view name, bool begin) {
    std::lock_guard lock(mutex_);
    raise_if_failed();
    const auto here = static_cast<std::int64_t>(cursor_);
    for (const auto& s : core_->sections) {
      if (s.name == name && (begin ? s.begin : s.end) == here) return;
    }
    std::string recorded = "no section named '" + std::string(name) + "'";
    for (const auto& s : core_->sections) {
      if (s.name == name) {
        recorded = "section '" + s.name + "' " + (begin ? "beginning" : "ending") +
                   " at request " + std::to_string(begin ? s.begin : s.end);
        break;
      }
    }
    // A misplaced marker moves no memory: an error for the caller, not a
    // failed replay.
    throw error(describe(cursor_, recorded,
                         std::string("section ") + (begin ? "begin" : "end") + " '" +
                             std::string(name) + "'"));
  }

  std::shared_ptr<detail::arena_core> core_;
  mutable std::mutex mutex_;  // guards what follows; taken before core_->mutex
  std::vector<std::uint8_t> live_;
  std::size_t live_count_ = 0;
  std::size_t cursor_ = 0;
  std::uint64_t steps_ = 0;
  std::optional<std::string> failure_;
  zero_byte_block zero_bytes_{};
};

static_assert(MemoryResource<planned_replay_resource>);
static_assert(SectionMarking<planned_replay_resource>);

}  // namespace memo
