// memo/schedule/timeline.hpp
//
// What executing or simulating a stream schedule produced (MEMO section
// 4.3.4: the overlap of compute with offload and prefetch is what the
// schedule is for, so it is what a timeline measures).
//
// A `timeline` holds the start, end and stall of every op and answers:
// makespan, busy time per stream, overlap (time during which two or more
// streams are busy), stall (time a stream with queued work spends waiting
// for a dependency on another stream), the op order observed on every stream
// and its first difference from another timeline, a summary table, and
// Chrome trace JSON (written through memo::json_writer) that Perfetto and
// chrome://tracing open.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "memo/core/atomic_file.hpp"
#include "memo/core/error.hpp"
#include "memo/core/json.hpp"
#include "memo/schedule/schedule_graph.hpp"

namespace memo {

/// Where and when one op ran (or would run).
struct timeline_op {
  std::string name{};
  std::size_t stream = 0;
  op_kind kind = op_kind::compute;
  double start_seconds = 0.0;
  double end_seconds = 0.0;
  /// Time the op's stream sat idle before it, waiting on a dependency,
  /// while the op was already queued.
  double stall_seconds = 0.0;
  double flops = 0.0;
  std::uint64_t bytes = 0;
  [[nodiscard]] double duration_seconds() const { return end_seconds - start_seconds; }
};

namespace detail {

/// The stalls of measured ops (start and end set, `waits[i]`: op i's
/// stream was made to wait on another stream before it): on each of the
/// `streams` streams, in index order (the order they ran: a stream is
/// FIFO), the gap before an op that waited; other gaps are the host's
/// overhead, not a stall.
inline void assign_measured_stalls(std::vector<timeline_op>& ops, const std::vector<bool>& waits,
                                   std::size_t streams) {
  expects(waits.size() == ops.size(), "assign_measured_stalls: one waits flag per op");
  std::vector<double> ready(streams, 0.0);
  for (std::size_t i = 0; i < ops.size(); ++i) {
    expects(ops[i].stream < streams, "assign_measured_stalls: an op names a stream outside the timeline");
    double& free_at = ready[ops[i].stream];
    ops[i].stall_seconds = waits[i] ? std::max(0.0, ops[i].start_seconds - free_at) : 0.0;
    free_at = ops[i].end_seconds;
  }
}

}  // namespace detail

/// The result of executing or simulating a schedule.
class timeline {
 public:
  timeline() = default;
  timeline(std::string origin, std::vector<std::string> streams, std::vector<timeline_op> ops)
      : origin_(std::move(origin)), streams_(std::move(streams)), ops_(std::move(ops)) {
    for (const auto& op : ops_) {
      expects(op.stream < streams_.size(), [&] {
        return "timeline: op '" + op.name + "' names stream " + std::to_string(op.stream) +
               " of " + std::to_string(streams_.size());
      });
    }
  }

  /// "simulated on A800-80GB", "executed on host", ...
  [[nodiscard]] const std::string& origin() const noexcept { return origin_; }
  [[nodiscard]] const std::vector<std::string>& streams() const noexcept { return streams_; }
  /// In the schedule's insertion order (op_id::index).
  [[nodiscard]] const std::vector<timeline_op>& ops() const noexcept { return ops_; }
  [[nodiscard]] const timeline_op& op(op_id id) const { return ops_.at(id.index); }

  [[nodiscard]] std::size_t stream_index(std::string_view stream) const {
    for (std::size_t s = 0; s < streams_.size(); ++s) {
      if (streams_[s] == stream) return s;
    }
    throw error("timeline: no stream named '" + std::string(stream) + "' (" +
                std::to_string(streams_.size()) + " streams)");
  }

  /// The end of the last op.
  [[nodiscard]] double makespan_seconds() const {
    double end = 0.0;
    for (const auto& op : ops_) end = std::max(end, op.end_seconds);
    return end;
  }
  /// Sum of the durations of a stream's ops.
  [[nodiscard]] double busy_seconds(std::string_view stream) const {
    const std::size_t s = stream_index(stream);
    double busy = 0.0;
    for (const auto& op : ops_) {
      if (op.stream == s) busy += op.duration_seconds();
    }
    return busy;
  }
  /// Time a stream spent waiting on dependencies while it had work queued.
  [[nodiscard]] double stall_seconds(std::string_view stream) const {
    const std::size_t s = stream_index(stream);
    double stall = 0.0;
    for (const auto& op : ops_) {
      if (op.stream == s) stall += op.stall_seconds;
    }
    return stall;
  }
  /// Total time during which at least two streams are busy.
  [[nodiscard]] double overlap_seconds() const {
    // Sweep over start (+1) and end (-1) points; ops of one stream never
    // overlap each other, so the count of open ops is the count of busy
    // streams.
    std::vector<std::pair<double, int>> points;
    points.reserve(2 * ops_.size());
    for (const auto& op : ops_) {
      if (op.end_seconds <= op.start_seconds) continue;
      points.emplace_back(op.start_seconds, +1);
      points.emplace_back(op.end_seconds, -1);
    }
    std::sort(points.begin(), points.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first < b.first : a.second < b.second;  // ends first
    });
    double overlap = 0.0;
    int open = 0;
    double last = 0.0;
    for (const auto& [when, delta] : points) {
      if (open >= 2) overlap += when - last;
      open += delta;
      last = when;
    }
    return overlap;
  }

  /// The op names of every stream, in the order they started (ties: the
  /// shorter first, then insertion order).
  [[nodiscard]] std::vector<std::vector<std::string>> op_order_per_stream() const {
    std::vector<std::vector<std::size_t>> indices(streams_.size());
    for (std::size_t i = 0; i < ops_.size(); ++i) indices[ops_[i].stream].push_back(i);
    std::vector<std::vector<std::string>> names(streams_.size());
    for (std::size_t s = 0; s < streams_.size(); ++s) {
      std::stable_sort(indices[s].begin(), indices[s].end(), [&](std::size_t a, std::size_t b) {
        if (ops_[a].start_seconds != ops_[b].start_seconds) {
          return ops_[a].start_seconds < ops_[b].start_seconds;
        }
        return ops_[a].end_seconds < ops_[b].end_seconds;
      });
      for (const std::size_t i : indices[s]) names[s].push_back(ops_[i].name);
    }
    return names;
  }

  /// Empty when both timelines have the same streams and the same op order
  /// on every stream; otherwise the first difference, in words.
  [[nodiscard]] std::string op_order_difference(const timeline& other) const {
    if (streams_ != other.streams_) return "the timelines have different streams";
    const auto mine = op_order_per_stream();
    const auto theirs = other.op_order_per_stream();
    for (std::size_t s = 0; s < streams_.size(); ++s) {
      const auto& a = mine[s];
      const auto& b = theirs[s];
      for (std::size_t k = 0; k < std::max(a.size(), b.size()); ++k) {
        const std::string left = k < a.size() ? a[k] : "(nothing)";
        const std::string right = k < b.size() ? b[k] : "(nothing)";
        if (left != right) {
          return "stream '" + streams_[s] + "', position " + std::to_string(k) + ": '" + left +
                 "' (" + origin_ + ") vs '" + right + "' (" + other.origin_ + ")";
        }
      }
    }
    return {};
  }
  [[nodiscard]] bool same_op_order(const timeline& other) const {
    return op_order_difference(other).empty();
  }

  /// Chrome trace JSON ("traceEvents", complete events ph "X", one tid per
  /// stream, times in microseconds). Open it in https://ui.perfetto.dev or
  /// chrome://tracing.
  [[nodiscard]] std::string chrome_trace_json() const;

  /// Writes `chrome_trace_json()` to `path`, complete or not at all (an
  /// existing file is kept when the write fails; core/atomic_file.hpp).
  void write_chrome_trace(const std::string& path) const;

  /// A human table: per stream busy, stall, op count; then makespan and overlap.
  [[nodiscard]] std::string summary() const {
    std::string text = "timeline (" + origin_ + ")\n";
    char line[256];
    std::snprintf(line, sizeof line, "  %-16s %6s %14s %14s\n", "stream", "ops", "busy ms",
                  "stall ms");
    text += line;
    for (std::size_t s = 0; s < streams_.size(); ++s) {
      std::size_t count = 0;
      for (const auto& op : ops_) count += op.stream == s ? 1 : 0;
      std::snprintf(line, sizeof line, "  %-16s %6zu %14.3f %14.3f\n", streams_[s].c_str(), count,
                    busy_seconds(streams_[s]) * 1e3, stall_seconds(streams_[s]) * 1e3);
      text += line;
    }
    std::snprintf(line, sizeof line, "  makespan %.3f ms, overlap %.3f ms\n",
                  makespan_seconds() * 1e3, overlap_seconds() * 1e3);
    text += line;
    return text;
  }

 private:
  std::string origin_;
  std::vector<std::string> streams_{};
  std::vector<timeline_op> ops_{};
};

/// Chrome trace JSON of several timelines side by side (a measured step and
/// its simulation, say): timeline k is process k + 1, named by its origin,
/// with one thread per stream; times in microseconds from each one's own
/// origin.
inline std::string chrome_trace_json(std::span<const timeline* const> timelines) {
  expects(!timelines.empty(), "chrome_trace_json: no timeline");
  // Times are whole microseconds (the format's unit); stalls keep their
  // fraction.
  auto microseconds = [](double seconds) { return static_cast<std::int64_t>(std::llround(seconds * 1e6)); };
  std::string origins;
  for (const timeline* t : timelines) origins += (origins.empty() ? "" : "; ") + t->origin();
  json_writer json;
  json.begin_object();
  json.field("displayTimeUnit", "ms");
  json.key("otherData").begin_object().field("origin", origins).end_object();
  json.key("traceEvents").begin_array();
  for (std::size_t k = 0; k < timelines.size(); ++k) {
    const timeline& t = *timelines[k];
    const std::size_t pid = k + 1;
    json.begin_object().field("name", "process_name").field("ph", "M").field("pid", pid).field("tid", 0);
    json.key("args").begin_object().field("name", t.origin()).end_object().end_object();
    for (std::size_t s = 0; s < t.streams().size(); ++s) {
      json.begin_object().field("name", "thread_name").field("ph", "M").field("pid", pid).field("tid", s);
      json.key("args").begin_object().field("name", t.streams()[s]).end_object().end_object();
      json.begin_object().field("name", "thread_sort_index").field("ph", "M").field("pid", pid).field("tid", s);
      json.key("args").begin_object().field("sort_index", s).end_object().end_object();
    }
    for (const auto& op : t.ops()) {
      json.begin_object().field("name", op.name).field("cat", to_string(op.kind)).field("ph", "X");
      json.field("pid", pid).field("tid", op.stream);
      // The end is rounded like the start, so ops back to back on a stream
      // stay back to back (rounding the duration alone could overlap them).
      const std::int64_t start = microseconds(op.start_seconds);
      json.field("ts", start).field("dur", microseconds(op.start_seconds + op.duration_seconds()) - start);
      json.key("args").begin_object().field("stream", t.streams()[op.stream]);
      json.field("stall_us", op.stall_seconds * 1e6);
      if (op.flops > 0.0) json.field("flops", op.flops);
      if (op.bytes > 0) json.field("bytes", op.bytes);
      json.end_object().end_object();
    }
  }
  json.end_array().end_object();
  return json.str() + "\n";
}

/// Writes `chrome_trace_json(timelines)` to `path`, complete or not at all.
inline void write_chrome_trace(const std::string& path, std::span<const timeline* const> timelines) {
  const std::string json = chrome_trace_json(timelines);
  atomic_file_writer file(path);
  file.write(std::as_bytes(std::span(json)));
  file.commit();
}

inline std::string timeline::chrome_trace_json() const {
  const timeline* one[] = {this};
  return memo::chrome_trace_json(one);
}

inline void timeline::write_chrome_trace(const std::string& path) const {
  const timeline* one[] = {this};
  memo::write_chrome_trace(path, one);
}

}  // namespace memo
