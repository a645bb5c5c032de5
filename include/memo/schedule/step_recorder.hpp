// memo/schedule/step_recorder.hpp
//
// The measured timeline of work issued by hand (not from a stream
// schedule): the caller brackets each op with `begin` and `end` on the
// stream it runs on, and after the step has finished `last_timeline()`
// turns the events into a `timeline` (timeline.hpp) that compares with a
// simulated one (`op_order_difference`, the same stream names and op
// names) and writes Chrome trace JSON.
//
// The events follow schedule_execute.hpp's pattern: `begin` records an
// event after the waits the op's work is queued behind, so it completes
// when the op can start; `end` records one after its work. A gap on a
// stream before an op marked `waits` (it waited on another stream) is a
// stall, as in an executed schedule; other gaps are host overhead.
//
// Every event is made when the recorder is built (`capacity` ops), so
// recording a step creates none and allocates no backend memory; a step
// with more ops than that is a memo::error at the `begin` that overflows.
//
// Lifetime: the recorder must not outlive its backend; the streams passed
// to `start`, `begin` and `end` need only live until the step is
// synchronized. Not copyable.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "memo/backend/concepts.hpp"
#include "memo/core/error.hpp"
#include "memo/schedule/timeline.hpp"

namespace memo {

template <Backend B>
class step_recorder {
 public:
  using stream_type = typename B::stream;

  /// A recorder of at most `capacity` ops per step on the named streams.
  step_recorder(B& backend, std::vector<std::string> streams, std::size_t capacity)
      : backend_(&backend), streams_(std::move(streams)) {
    expects(!streams_.empty(), "step_recorder: no streams");
    origin_.emplace(backend.make_event());
    starts_.reserve(capacity);
    ends_.reserve(capacity);
    for (std::size_t i = 0; i < capacity; ++i) {
      starts_.push_back(backend.make_event());
      ends_.push_back(backend.make_event());
    }
    ops_.reserve(capacity);
    waits_.reserve(capacity);
  }
  step_recorder(const step_recorder&) = delete;
  step_recorder& operator=(const step_recorder&) = delete;

  [[nodiscard]] std::size_t capacity() const noexcept { return starts_.size(); }
  [[nodiscard]] const std::vector<std::string>& streams() const noexcept { return streams_; }

  /// Starts a step: the time origin is what `on` has been given so far.
  void start(stream_type& on) {
    backend_->record(*origin_, on);
    ops_.clear();
    waits_.clear();
    open_ = 0;
    complete_ = false;
  }

  /// Starts op `name` on stream `stream` (an index into `streams()`), whose
  /// work the caller enqueues on `on` next; `waits` says whether `on` was
  /// just made to wait on another stream. Returns the op's index.
  std::size_t begin(std::string name, std::size_t stream, op_kind kind, stream_type& on, bool waits,
                    std::uint64_t bytes = 0) {
    expects(stream < streams_.size(), [&] {
      return "step_recorder: op '" + name + "' names stream " + std::to_string(stream) + " of " +
             std::to_string(streams_.size());
    });
    expects(ops_.size() < capacity(), [&] {
      return "step_recorder: op '" + name + "' is op " + std::to_string(ops_.size() + 1) +
             " of a step recorded with room for " + std::to_string(capacity());
    });
    const std::size_t index = ops_.size();
    backend_->record(starts_[index], on);
    timeline_op op;
    op.name = std::move(name);
    op.stream = stream;
    op.kind = kind;
    op.bytes = bytes;
    ops_.push_back(std::move(op));
    waits_.push_back(waits);
    ++open_;
    return index;
  }

  /// Ends op `index` after the work enqueued on `on` so far.
  void end(std::size_t index, stream_type& on) {
    expects(index < ops_.size(), [&] {
      return "step_recorder: end of op " + std::to_string(index) + ", but " + std::to_string(ops_.size()) +
             " were begun";
    });
    backend_->record(ends_[index], on);
    --open_;
  }

  /// Marks the step recorded: every op begun has ended. `last_timeline`
  /// answers for it once its streams are synchronized.
  void finish() {
    expects(open_ == 0, [&] { return "step_recorder: " + std::to_string(open_) + " ops begun but not ended"; });
    complete_ = true;
  }
  /// Forgets a step abandoned part-way.
  void discard() noexcept {
    ops_.clear();
    waits_.clear();
    open_ = 0;
    complete_ = false;
  }
  [[nodiscard]] bool has_step() const noexcept { return complete_; }

  /// The ops of the last finished step with their measured start, end and
  /// stall (seconds from `start`), once every stream it used is
  /// synchronized. `origin` names the timeline.
  [[nodiscard]] timeline last_timeline(std::string origin) const {
    expects(complete_, "step_recorder::last_timeline: no step was recorded to its end");
    std::vector<timeline_op> ops = ops_;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      ops[i].start_seconds = std::max(0.0, backend_->elapsed_seconds(*origin_, starts_[i]));
      ops[i].end_seconds = std::max(ops[i].start_seconds, backend_->elapsed_seconds(*origin_, ends_[i]));
    }
    // Per stream in issue order (which is run order: a stream is FIFO).
    std::vector<double> ready(streams_.size(), 0.0);
    for (std::size_t i = 0; i < ops.size(); ++i) {
      double& free_at = ready[ops[i].stream];
      ops[i].stall_seconds = waits_[i] ? std::max(0.0, ops[i].start_seconds - free_at) : 0.0;
      free_at = ops[i].end_seconds;
    }
    return timeline(std::move(origin), streams_, std::move(ops));
  }

 private:
  using event_type = typename B::event;

  B* backend_;
  std::vector<std::string> streams_;
  std::optional<event_type> origin_;
  std::vector<event_type> starts_, ends_;
  std::vector<timeline_op> ops_;
  std::vector<bool> waits_;
  std::size_t open_ = 0;
  bool complete_ = false;
};

}  // namespace memo
