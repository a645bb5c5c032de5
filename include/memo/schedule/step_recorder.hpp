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
// stall, as in an executed schedule; other gaps are host overhead. An op
// whose extent is known only later moves its marks with `move_end` and
// `move_begin` (events are reusable: recording again moves the mark).
//
// A step is `start`, then ops begun and ended, then `finish`; anything out
// of that order (an op begun outside a step, ended twice or never, more
// ops than `capacity`) is a memo::error at the call. Every event is made
// when the recorder is built, so recording a step creates none and
// allocates no backend memory.
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
#include <tuple>
#include <utility>
#include <vector>

#include "memo/backend/concepts.hpp"
#include "memo/core/error.hpp"
#include "memo/schedule/timeline.hpp"

namespace memo {

namespace detail {

/// Seconds from `origin` to the two marks of a measured op, clamped so the
/// op neither starts before the origin nor ends before it starts (a mark on
/// a stream with no queued work completes when recorded, which may precede
/// an origin recorded on a busy stream).
template <Backend B>
std::pair<double, double> measured_span(B& backend, const typename B::event& origin, const typename B::event& start,
                                        const typename B::event& end) {
  const double from = std::max(0.0, backend.elapsed_seconds(origin, start));
  return {from, std::max(from, backend.elapsed_seconds(origin, end))};
}

}  // namespace detail

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
    ended_.reserve(capacity);
  }
  step_recorder(const step_recorder&) = delete;
  step_recorder& operator=(const step_recorder&) = delete;

  [[nodiscard]] std::size_t capacity() const noexcept { return starts_.size(); }
  [[nodiscard]] const std::vector<std::string>& streams() const noexcept { return streams_; }

  /// Starts a step (forgetting the last one): the time origin is what `on`
  /// has been given so far.
  void start(stream_type& on) {
    discard();
    backend_->record(*origin_, on);
    started_ = true;
  }

  /// Starts op `name` on stream `stream` (an index into `streams()`), whose
  /// work the caller enqueues on `on` next; `waits` says whether `on` was
  /// just made to wait on another stream. Returns the op's index.
  std::size_t begin(std::string name, std::size_t stream, op_kind kind, stream_type& on, bool waits,
                    std::uint64_t bytes = 0) {
    expects(started_ && !complete_, [&] {
      return "step_recorder: op '" + name + "' begun " + (complete_ ? "after the step finished" : "before start");
    });
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
    ended_.push_back(false);
    return index;
  }

  /// Ends op `index` after the work enqueued on `on` so far.
  void end(std::size_t index, stream_type& on) {
    check_op(index, "end");
    expects(!ended_[index], [&] { return "step_recorder: op '" + ops_[index].name + "' ended twice"; });
    backend_->record(ends_[index], on);
    ended_[index] = true;
  }
  /// Moves the end of the ended op `index` to after the work enqueued on
  /// `on` so far (work that belongs to it was issued after it ended).
  void move_end(std::size_t index, stream_type& on) {
    check_op(index, "move the end of");
    expects(ended_[index], [&] { return "step_recorder: op '" + ops_[index].name + "' has not ended"; });
    backend_->record(ends_[index], on);
  }
  /// Moves the start of op `index`, still open, to after the work enqueued
  /// on `on` so far (its start can never pass its end).
  void move_begin(std::size_t index, stream_type& on) {
    check_op(index, "move the start of");
    expects(!ended_[index], [&] {
      return "step_recorder: cannot move the start of op '" + ops_[index].name + "': it has ended";
    });
    backend_->record(starts_[index], on);
  }

  /// Marks the step recorded; every op begun must have ended.
  void finish() {
    expects(started_ && !complete_, "step_recorder: finish without a step in progress");
    for (std::size_t i = 0; i < ops_.size(); ++i) {
      expects(ended_[i], [&] { return "step_recorder: op '" + ops_[i].name + "' was begun but not ended"; });
    }
    complete_ = true;
  }
  /// Forgets the step in progress or the last one.
  void discard() noexcept {
    ops_.clear();
    waits_.clear();
    ended_.clear();
    started_ = complete_ = false;
  }

  /// The ops of the last finished step with their measured start, end and
  /// stall (seconds from `start`), once every stream it used is
  /// synchronized. `origin` names the timeline.
  [[nodiscard]] timeline last_timeline(std::string origin) const {
    expects(complete_, "step_recorder::last_timeline: no step was recorded to its end");
    std::vector<timeline_op> ops = ops_;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      std::tie(ops[i].start_seconds, ops[i].end_seconds) =
          detail::measured_span(*backend_, *origin_, starts_[i], ends_[i]);
    }
    detail::assign_measured_stalls(ops, waits_, streams_.size());
    return timeline(std::move(origin), streams_, std::move(ops));
  }

 private:
  using event_type = typename B::event;

  void check_op(std::size_t index, const char* what) const {
    expects(started_ && index < ops_.size(), [&] {
      return std::string("step_recorder: cannot ") + what + " op " + std::to_string(index) + ": " +
             std::to_string(ops_.size()) + " begun in this step";
    });
    // A finished step is measured as it stands: its marks no longer move.
    expects(!complete_, [&] {
      return std::string("step_recorder: cannot ") + what + " op '" + ops_[index].name + "': the step has finished";
    });
  }

  B* backend_;
  std::vector<std::string> streams_;
  std::optional<event_type> origin_;
  std::vector<event_type> starts_, ends_;
  std::vector<timeline_op> ops_;
  std::vector<bool> waits_, ended_;
  bool started_ = false, complete_ = false;
};

}  // namespace memo
