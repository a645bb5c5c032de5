// memo/schedule/stream_schedule.hpp
//
// A training step as a value: a DAG of operations placed on named streams.
//
// MEMO (section 4.3.4, Figure 11) runs a step on three CUDA streams —
// compute, offload, prefetch — tied together by events; FPDT and SPPO add
// collectives and chunk pipelines to the same picture. A `stream_schedule`
// writes such a step down once, as data:
//
//   - streams are named queues; operations on one stream run in insertion
//     order (CUDA's FIFO semantics);
//   - an operation is a compute kernel (a FLOP count, optionally the bytes it
//     touches, optionally a callable that launches the real work on the
//     backend's native stream), a host<->device copy (a byte count and, for
//     execution, optional pointers), a collective (kind, bytes, ranks) or a
//     marker (a zero-cost point other streams can wait for);
//   - a dependency "b after a" between ops on different streams becomes an
//     event recorded after a and waited on before b.
//
// The same object is then either
//
//   - executed on any `Backend` (`execute`): streams and events are created,
//     every record/wait is issued for real, callables and copies run, and the
//     start and end of every op are measured with events; or
//   - simulated (`simulate`) with a cost model from a `device_profile`: each
//     op starts when the previous op on its stream and all its dependencies
//     have ended, and lasts as long as the model says.
//
// Both return a `timeline`: per-op start/end, makespan, busy time per
// stream, overlap (time during which two or more streams are busy), stalls
// (time a stream with queued work spends waiting for a dependency), the op
// order observed on every stream, and Chrome trace JSON that Perfetto and
// chrome://tracing open.
//
// Guarantees: a schedule that is executed or simulated has been validated —
// every stream named by an op exists, no op depends on itself or on a later
// op of its own stream (that would deadlock a FIFO stream), and the graph of
// stream order + dependencies has no cycle; each violation is a
// `memo::error` naming the ops involved. Execution enqueues ops in a
// topological order of that graph, so every event is recorded before any
// stream waits on it (a wait on a not-yet-recorded event would silently not
// wait).
//
// Cost model (simulate):
//   compute          max(flops / (peak_flops * efficiency),
//                        bytes_touched / device_memory_bytes_per_second)
//                    or the op's measured `duration_seconds` when given
//   device_to_host   bytes / device_to_host_bytes_per_second
//   host_to_device   bytes / host_to_device_bytes_per_second
//   all_reduce       2 (p - 1) / p * bytes / interconnect_bytes_per_second (ring)
//   all_gather       (p - 1) / p * bytes / interconnect  (bytes = gathered output)
//   reduce_scatter   (p - 1) / p * bytes / interconnect  (bytes = full input)
//   all_to_all       (p - 1) / p * bytes / interconnect  (bytes = one rank's buffer)
//   marker           0
// Streams are independent resources: two copy streams in the same direction
// are not serialised against each other (a GPU has one copy engine per
// direction; keep same-direction copies on one stream to model it).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>
#include <unordered_map>
#include <utility>
#include <vector>

#include "memo/backend/buffer.hpp"
#include "memo/backend/concepts.hpp"
#include "memo/core/bytes.hpp"
#include "memo/core/error.hpp"
#include "memo/core/device_profile.hpp"

namespace memo {

enum class op_kind { compute, device_to_host, host_to_device, collective, marker };

inline constexpr const char* to_string(op_kind kind) {
  switch (kind) {
    case op_kind::compute: return "compute";
    case op_kind::device_to_host: return "device_to_host";
    case op_kind::host_to_device: return "host_to_device";
    case op_kind::collective: return "collective";
    case op_kind::marker: return "marker";
  }
  return "unknown";
}

enum class collective_kind { all_reduce, all_to_all, all_gather, reduce_scatter };

inline constexpr const char* to_string(collective_kind kind) {
  switch (kind) {
    case collective_kind::all_reduce: return "all_reduce";
    case collective_kind::all_to_all: return "all_to_all";
    case collective_kind::all_gather: return "all_gather";
    case collective_kind::reduce_scatter: return "reduce_scatter";
  }
  return "unknown";
}

/// Seconds a collective over `ranks` ranks moving `bytes` takes on links of
/// `link_bytes_per_second` per GPU (ring algorithms; see the header comment
/// for what `bytes` means per kind). One rank costs nothing.
inline double collective_seconds(collective_kind kind, std::uint64_t bytes, int ranks,
                                 double link_bytes_per_second) {
  expects(ranks >= 1, [&] {
    return std::string("collective ") + to_string(kind) + ": ranks must be >= 1, got " +
           std::to_string(ranks);
  });
  if (ranks == 1 || bytes == 0) return 0.0;
  expects(link_bytes_per_second > 0.0, [&] {
    return std::string("collective ") + to_string(kind) +
           " needs a positive interconnect bandwidth, got " + std::to_string(link_bytes_per_second);
  });
  const double p = ranks;
  const double share = (p - 1.0) / p * static_cast<double>(bytes);
  const double factor = kind == collective_kind::all_reduce ? 2.0 : 1.0;
  return factor * share / link_bytes_per_second;
}

/// The backend's native stream as seen by a type-erased callable:
/// `ref.get<memo::host_backend>()` or `ref.get<memo::cuda_backend>()`
/// returns it, and asking for the wrong backend's type is a `memo::error`.
class native_stream_ref {
 public:
  template <class NativeStream>
  native_stream_ref(const NativeStream& native, std::string_view backend_name) noexcept
      : native_(&native), type_(&typeid(NativeStream)), backend_name_(backend_name) {}

  template <Backend B>
  [[nodiscard]] native_stream_t<B> get() const {
    expects(*type_ == typeid(native_stream_t<B>), [&] {
      return "native_stream_ref: the schedule runs on backend '" + std::string(backend_name_) +
             "', but the callable asked for the native stream of backend '" +
             std::string(B::name()) + "'";
    });
    return *static_cast<const native_stream_t<B>*>(native_);
  }
  [[nodiscard]] std::string_view backend_name() const noexcept { return backend_name_; }

 private:
  const void* native_;
  const std::type_info* type_;
  std::string_view backend_name_;
};

/// Work run on a stream during execution; launches kernels (CUDA) or does
/// the work itself (host backend).
using stream_work = std::function<void(native_stream_ref)>;

/// A handle to an op of one schedule (its insertion index).
struct op_id {
  std::size_t index = 0;
  friend constexpr bool operator==(op_id, op_id) = default;
  friend constexpr auto operator<=>(op_id, op_id) = default;
};

struct compute_op {
  double flops = 0.0;                       ///< FLOPs on one GPU
  double bytes_touched = 0.0;               ///< device-memory traffic, for a roofline bound
  std::optional<double> duration_seconds{};   ///< measured duration; overrides the model
  stream_work work{};                       ///< run during execution; may be empty
};

struct copy_op {
  std::uint64_t bytes = 0;
  void* destination = nullptr;     ///< for execution; null = executor-owned scratch
  const void* source = nullptr;    ///< for execution; null = executor-owned scratch
};

struct collective_op {
  collective_kind kind = collective_kind::all_reduce;
  std::uint64_t bytes = 0;
  int ranks = 1;
  stream_work work{};  ///< e.g. the NCCL call; may be empty (then it only costs time in simulation)
};

/// One op as stored in the schedule.
struct schedule_op {
  std::string name{};
  std::size_t stream = 0;
  op_kind kind = op_kind::compute;
  double flops = 0.0;
  double bytes_touched = 0.0;
  std::optional<double> duration_seconds{};
  std::uint64_t bytes = 0;  ///< copy / collective payload
  collective_kind collective = collective_kind::all_reduce;
  int ranks = 1;
  void* destination = nullptr;
  const void* source = nullptr;
  stream_work work;
  std::vector<std::size_t> dependencies{};  ///< ops that must end before this one starts
};

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

inline std::string json_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char code[8];
          std::snprintf(code, sizeof code, "\\u%04x", static_cast<unsigned>(c));
          out += code;
        } else {
          out += c;
        }
    }
  }
  return out;
}

inline std::string format_number(double value, const char* format = "%.3f") {
  char text[64];
  std::snprintf(text, sizeof text, format, value);
  return text;
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
  [[nodiscard]] std::string chrome_trace_json() const {
    std::string json = "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"origin\":\"" +
                       detail::json_escape(origin_) + "\"},\"traceEvents\":[";
    bool first = true;
    auto separator = [&] {
      if (!first) json += ',';
      first = false;
      json += '\n';
    };
    separator();
    json += "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,\"args\":{\"name\":\"" +
            detail::json_escape(origin_) + "\"}}";
    for (std::size_t s = 0; s < streams_.size(); ++s) {
      separator();
      json += "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":" + std::to_string(s) +
              ",\"args\":{\"name\":\"" + detail::json_escape(streams_[s]) + "\"}}";
      separator();
      json += "{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":1,\"tid\":" +
              std::to_string(s) + ",\"args\":{\"sort_index\":" + std::to_string(s) + "}}";
    }
    for (const auto& op : ops_) {
      separator();
      json += "{\"name\":\"" + detail::json_escape(op.name) + "\",\"cat\":\"" +
              to_string(op.kind) + "\",\"ph\":\"X\",\"pid\":1,\"tid\":" +
              std::to_string(op.stream) +
              ",\"ts\":" + detail::format_number(op.start_seconds * 1e6) +
              ",\"dur\":" + detail::format_number(op.duration_seconds() * 1e6) +
              ",\"args\":{\"stream\":\"" + detail::json_escape(streams_[op.stream]) +
              "\",\"stall_us\":" + detail::format_number(op.stall_seconds * 1e6);
      if (op.flops > 0.0) json += ",\"flops\":" + detail::format_number(op.flops, "%.6g");
      if (op.bytes > 0) json += ",\"bytes\":" + std::to_string(op.bytes);
      json += "}}";
    }
    json += "\n]}\n";
    return json;
  }

  /// Writes `chrome_trace_json()` to `path`.
  void write_chrome_trace(const std::string& path) const {
    std::ofstream file(path, std::ios::binary);
    expects(static_cast<bool>(file), [&] { return "cannot open '" + path + "' for writing"; });
    file << chrome_trace_json();
    file.close();
    expects(!file.fail(), [&] { return "writing the Chrome trace to '" + path + "' failed"; });
  }

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

/// Knobs of the simulator's cost model beyond the device profile.
struct simulation_options {
  /// Device-memory bandwidth for the roofline bound of compute ops that give
  /// `bytes_touched`; 0 = compute ops are FLOP-bound only.
  double device_memory_bytes_per_second = 0.0;
  /// Fixed cost added to every collective (launch + synchronisation).
  double collective_latency_seconds = 0.0;
};

/// Knobs of execution.
struct execute_options {
  /// Copies given without pointers run between executor-owned scratch
  /// buffers (one pair per stream and direction, sized for its largest
  /// copy), so a schedule written only with byte counts still moves real
  /// bytes. When false such a copy is an error.
  bool scratch_for_unbound_copies = true;
};

class stream_schedule {
 public:
  stream_schedule() = default;

  /// Declares a stream; names must be unique and non-empty.
  void add_stream(std::string name) {
    expects(!name.empty(), "stream_schedule: a stream name must not be empty");
    expects(!has_stream(name), [&] {
      return "stream_schedule: stream '" + name + "' is declared twice";
    });
    streams_.push_back(std::move(name));
  }
  [[nodiscard]] bool has_stream(std::string_view name) const {
    return std::find(streams_.begin(), streams_.end(), name) != streams_.end();
  }
  [[nodiscard]] const std::vector<std::string>& streams() const noexcept { return streams_; }

  op_id add_compute(std::string name, std::string_view stream, compute_op spec,
                    const std::vector<op_id>& after = {}) {
    expects(spec.flops >= 0.0 && spec.bytes_touched >= 0.0 &&
                (!spec.duration_seconds || *spec.duration_seconds >= 0.0),
            [&] { return "stream_schedule: compute op '" + name + "' has a negative cost"; });
    schedule_op op;
    op.kind = op_kind::compute;
    op.flops = spec.flops;
    op.bytes_touched = spec.bytes_touched;
    op.duration_seconds = spec.duration_seconds;
    op.work = std::move(spec.work);
    return add(std::move(name), stream, std::move(op), after);
  }

  /// A device_to_host or host_to_device copy.
  op_id add_copy(std::string name, std::string_view stream, copy_kind kind, copy_op spec,
                 const std::vector<op_id>& after = {}) {
    expects(kind == copy_kind::device_to_host || kind == copy_kind::host_to_device, [&] {
      return "stream_schedule: copy op '" + name + "' is " + to_string(kind) +
             "; only device_to_host and host_to_device copies are scheduled";
    });
    expects((spec.destination == nullptr) == (spec.source == nullptr), [&] {
      return "stream_schedule: copy op '" + name +
             "' gives only one of source and destination (give both or neither)";
    });
    schedule_op op;
    op.kind = kind == copy_kind::device_to_host ? op_kind::device_to_host : op_kind::host_to_device;
    op.bytes = spec.bytes;
    op.destination = spec.destination;
    op.source = spec.source;
    return add(std::move(name), stream, std::move(op), after);
  }

  op_id add_collective(std::string name, std::string_view stream, collective_op spec,
                       const std::vector<op_id>& after = {}) {
    expects(spec.ranks >= 1, [&] {
      return "stream_schedule: collective op '" + name + "' needs ranks >= 1, got " +
             std::to_string(spec.ranks);
    });
    schedule_op op;
    op.kind = op_kind::collective;
    op.collective = spec.kind;
    op.bytes = spec.bytes;
    op.ranks = spec.ranks;
    op.work = std::move(spec.work);
    return add(std::move(name), stream, std::move(op), after);
  }

  /// A zero-cost point on a stream (an event record other streams can wait on).
  op_id add_marker(std::string name, std::string_view stream, const std::vector<op_id>& after = {}) {
    schedule_op op;
    op.kind = op_kind::marker;
    return add(std::move(name), stream, std::move(op), after);
  }

  /// `consumer` starts only after `producer` has ended. Across streams this
  /// is an event record/wait pair; on one stream the producer must come
  /// first (checked by `validate`).
  void add_dependency(op_id consumer, op_id producer) {
    check_id(consumer, "add_dependency");
    check_id(producer, "add_dependency");
    auto& deps = ops_[consumer.index].dependencies;
    if (std::find(deps.begin(), deps.end(), producer.index) == deps.end()) {
      deps.push_back(producer.index);
    }
  }

  [[nodiscard]] std::size_t size() const noexcept { return ops_.size(); }
  [[nodiscard]] const std::vector<schedule_op>& ops() const noexcept { return ops_; }
  [[nodiscard]] const schedule_op& op(op_id id) const {
    check_id(id, "op");
    return ops_[id.index];
  }
  [[nodiscard]] op_id find(std::string_view name) const {
    const auto found = index_.find(std::string(name));
    expects(found != index_.end(), [&] { return "stream_schedule: no op named '" + std::string(name) + "'"; });
    return op_id{found->second};
  }
  /// Replaces the callable of a compute or collective op (to bind real work
  /// to a schedule built from sizes alone).
  void set_work(op_id id, stream_work work) {
    check_id(id, "set_work");
    auto& op = ops_[id.index];
    expects(op.kind == op_kind::compute || op.kind == op_kind::collective, [&] {
      return "stream_schedule: op '" + op.name + "' is a " + to_string(op.kind) +
             "; only compute and collective ops run callables";
    });
    op.work = std::move(work);
  }
  /// Binds the pointers of a copy op.
  void set_copy_pointers(op_id id, void* destination, const void* source) {
    check_id(id, "set_copy_pointers");
    auto& op = ops_[id.index];
    expects(op.kind == op_kind::device_to_host || op.kind == op_kind::host_to_device, [&] {
      return "stream_schedule: op '" + op.name + "' is a " + to_string(op.kind) + ", not a copy";
    });
    expects((destination == nullptr) == (source == nullptr), [&] {
      return "stream_schedule: copy op '" + op.name + "': give both pointers or neither";
    });
    op.destination = destination;
    op.source = source;
  }

  /// Throws `memo::error` naming the ops involved when an op depends on
  /// itself or on a later op of its own stream, or when stream order and
  /// dependencies form a cycle.
  void validate() const { static_cast<void>(topological_order()); }

  /// Every op once, each after its dependencies and after the ops before it
  /// on its stream; among ready ops, the lowest index first (deterministic).
  [[nodiscard]] std::vector<std::size_t> topological_order() const {
    const std::size_t n = ops_.size();
    std::vector<std::size_t> position(n);            // index within its stream
    std::vector<std::size_t> previous(n, npos);      // previous op on the stream
    std::vector<std::size_t> last(streams_.size(), npos);
    std::vector<std::size_t> count(streams_.size(), 0);
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t s = ops_[i].stream;
      position[i] = count[s]++;
      previous[i] = last[s];
      last[s] = i;
    }
    for (std::size_t i = 0; i < n; ++i) {
      for (const std::size_t d : ops_[i].dependencies) {
        expects(d != i, [&] { return "stream_schedule: op '" + ops_[i].name + "' depends on itself"; });
        expects(ops_[d].stream != ops_[i].stream || position[d] < position[i], [&] {
          return "stream_schedule: op '" + ops_[i].name + "' on stream '" +
                 streams_[ops_[i].stream] + "' depends on '" + ops_[d].name +
                 "', which comes later on the same stream (a stream runs its ops in insertion "
                 "order, so this would never finish)";
        });
      }
    }
    // Kahn's algorithm over the edges previous -> i and dependency -> i.
    std::vector<std::vector<std::size_t>> successors(n);
    std::vector<std::size_t> indegree(n, 0);
    for (std::size_t i = 0; i < n; ++i) {
      if (previous[i] != npos) {
        successors[previous[i]].push_back(i);
        ++indegree[i];
      }
      for (const std::size_t d : ops_[i].dependencies) {
        successors[d].push_back(i);
        ++indegree[i];
      }
    }
    std::vector<std::size_t> ready;  // a min-heap on the index
    for (std::size_t i = 0; i < n; ++i) {
      if (indegree[i] == 0) ready.push_back(i);
    }
    std::make_heap(ready.begin(), ready.end(), std::greater<>{});
    std::vector<std::size_t> order;
    order.reserve(n);
    while (!ready.empty()) {
      std::pop_heap(ready.begin(), ready.end(), std::greater<>{});
      const std::size_t i = ready.back();
      ready.pop_back();
      order.push_back(i);
      for (const std::size_t next : successors[i]) {
        if (--indegree[next] == 0) {
          ready.push_back(next);
          std::push_heap(ready.begin(), ready.end(), std::greater<>{});
        }
      }
    }
    if (order.size() != n) throw error("stream_schedule: " + describe_cycle(indegree, previous));
    return order;
  }

  /// The cost model's duration of one op (see the header comment).
  [[nodiscard]] double modelled_seconds(op_id id, const device_profile& profile,
                                        const simulation_options& options = {}) const {
    check_id(id, "modelled_seconds");
    return modelled_seconds(ops_[id.index], profile, options);
  }

  /// Start and end of every op under the cost model: each op starts when the
  /// previous op on its stream and all its dependencies have ended.
  [[nodiscard]] timeline simulate(const device_profile& profile,
                                  const simulation_options& options = {}) const {
    profile.check();
    const auto order = topological_order();
    std::vector<double> stream_free(streams_.size(), 0.0);
    std::vector<timeline_op> result(ops_.size());
    for (const std::size_t i : order) {
      const auto& op = ops_[i];
      const double fifo_ready = stream_free[op.stream];
      double start = fifo_ready;
      for (const std::size_t d : op.dependencies) start = std::max(start, result[d].end_seconds);
      const double end = start + modelled_seconds(op, profile, options);
      result[i] = describe(i, start, end, start - fifo_ready);
      stream_free[op.stream] = end;
    }
    return timeline("simulated on " + profile.name, streams_, std::move(result));
  }

  /// Runs the schedule on `backend`: one backend stream per schedule stream,
  /// an event after every op, a wait before every op for each dependency on
  /// another stream. Blocks until all of it has finished; an exception from
  /// a callable or a copy is rethrown here (after every stream has drained).
  template <Backend B>
  timeline execute(B& backend, const execute_options& options = {}) const {
    const auto order = topological_order();
    const std::size_t n = ops_.size();

    // Scratch for copies without pointers: per stream and direction one
    // source and one destination buffer of the largest such copy, so no two
    // streams ever touch the same scratch bytes.
    using device_resource = std::remove_reference_t<decltype(backend.device_memory())>;
    using pinned_resource = std::remove_reference_t<decltype(backend.pinned_memory())>;
    struct scratch_pair {
      buffer<std::byte, device_resource> device;  // [bytes]
      buffer<std::byte, pinned_resource> pinned;  // [bytes]
    };
    std::map<std::pair<std::size_t, op_kind>, std::uint64_t> scratch_bytes;
    for (const auto& op : ops_) {
      const bool copy = op.kind == op_kind::device_to_host || op.kind == op_kind::host_to_device;
      if (!copy || op.source != nullptr || op.bytes == 0) continue;
      expects(options.scratch_for_unbound_copies, [&] {
        return "stream_schedule::execute: copy op '" + op.name +
               "' has no source/destination pointers and scratch copies are disabled";
      });
      auto& bytes = scratch_bytes[{op.stream, op.kind}];
      bytes = std::max(bytes, op.bytes);
    }
    std::map<std::pair<std::size_t, op_kind>, scratch_pair> scratch;
    for (const auto& [key, bytes] : scratch_bytes) {
      scratch.emplace(key, scratch_pair{{backend.device_memory(), static_cast<std::size_t>(bytes)},
                                        {backend.pinned_memory(), static_cast<std::size_t>(bytes)}});
    }

    // Streams after the scratch: if enqueueing fails half-way, the streams
    // are destroyed (draining their work) before the scratch is freed.
    std::vector<typename B::stream> streams;
    streams.reserve(streams_.size());
    for (const auto& name : streams_) streams.push_back(backend.make_stream(name));

    // Every stream waits for the origin mark, so no op starts before it and
    // all times are measured from one point.
    auto origin = backend.make_event();
    if (!streams.empty()) {
      backend.record(origin, streams.front());
      for (std::size_t s = 1; s < streams.size(); ++s) backend.wait(streams[s], origin);
    }
    std::vector<typename B::event> starts;
    std::vector<typename B::event> ends;
    starts.reserve(n);
    ends.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      starts.push_back(backend.make_event());
      ends.push_back(backend.make_event());
    }

    for (const std::size_t i : order) {
      const auto& op = ops_[i];
      auto& stream = streams[op.stream];
      for (const std::size_t d : op.dependencies) {
        if (ops_[d].stream != op.stream) backend.wait(stream, ends[d]);
      }
      backend.record(starts[i], stream);
      switch (op.kind) {
        case op_kind::compute:
        case op_kind::collective:
          if (op.work) {
            backend.enqueue(stream, [work = &op.work](native_stream_t<B> native) {
              (*work)(native_stream_ref(native, B::name()));
            });
          }
          break;
        case op_kind::device_to_host:
        case op_kind::host_to_device: {
          if (op.bytes == 0) break;
          const copy_kind kind = op.kind == op_kind::device_to_host ? copy_kind::device_to_host
                                                                    : copy_kind::host_to_device;
          void* destination = op.destination;
          const void* source = op.source;
          if (source == nullptr) {
            auto& pair = scratch.at({op.stream, op.kind});
            if (kind == copy_kind::device_to_host) {
              destination = pair.pinned.data();
              source = pair.device.data();
            } else {
              destination = pair.device.data();
              source = pair.pinned.data();
            }
          }
          backend.copy_async(destination, source, static_cast<std::size_t>(op.bytes), kind, stream);
          break;
        }
        case op_kind::marker: break;
      }
      backend.record(ends[i], stream);
    }

    // Drain every stream before rethrowing, so no work outlives the scratch.
    std::exception_ptr failure;
    for (auto& stream : streams) {
      try {
        backend.synchronize(stream);
      } catch (...) {
        if (!failure) failure = std::current_exception();
      }
    }
    if (failure) std::rethrow_exception(failure);

    std::vector<timeline_op> result(n);
    std::vector<double> previous_end(streams_.size(), 0.0);
    std::vector<std::vector<std::size_t>> per_stream(streams_.size());
    for (std::size_t i = 0; i < n; ++i) per_stream[ops_[i].stream].push_back(i);
    for (std::size_t s = 0; s < streams_.size(); ++s) {
      double fifo_ready = 0.0;
      for (const std::size_t i : per_stream[s]) {
        const double start = std::max(0.0, backend.elapsed_seconds(origin, starts[i]));
        const double end = std::max(start, backend.elapsed_seconds(origin, ends[i]));
        bool waits = false;
        for (const std::size_t d : ops_[i].dependencies) waits |= ops_[d].stream != s;
        // A gap before an op that waits on another stream is a stall; other
        // gaps are the backend's own overhead.
        result[i] = describe(i, start, end, waits ? std::max(0.0, start - fifo_ready) : 0.0);
        fifo_ready = end;
      }
    }
    return timeline("executed on " + std::string(B::name()), streams_, std::move(result));
  }

 private:
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);

  op_id add(std::string name, std::string_view stream, schedule_op op,
            const std::vector<op_id>& after) {
    expects(!name.empty(), "stream_schedule: an op name must not be empty");
    const auto found = std::find(streams_.begin(), streams_.end(), stream);
    expects(found != streams_.end(), [&] {
      std::string known;
      for (const auto& s : streams_) known += (known.empty() ? "" : ", ") + s;
      return "stream_schedule: op '" + name + "' is placed on unknown stream '" +
             std::string(stream) + "' (declared: " + (known.empty() ? "none" : known) + ")";
    });
    expects(index_.find(name) == index_.end(), [&] {
      return "stream_schedule: op name '" + name + "' is used twice";
    });
    for (const op_id dependency : after) {
      expects(dependency.index < ops_.size(), [&] {
        return "stream_schedule: op '" + name + "' depends on op #" +
               std::to_string(dependency.index) + ", which does not exist (" +
               std::to_string(ops_.size()) + " ops so far)";
      });
    }
    op.name = std::move(name);
    op.stream = static_cast<std::size_t>(found - streams_.begin());
    for (const op_id dependency : after) {
      if (std::find(op.dependencies.begin(), op.dependencies.end(), dependency.index) ==
          op.dependencies.end()) {
        op.dependencies.push_back(dependency.index);
      }
    }
    ops_.push_back(std::move(op));
    try {
      index_.emplace(ops_.back().name, ops_.size() - 1);
    } catch (...) {
      ops_.pop_back();  // keep ops_ and index_ in step
      throw;
    }
    return op_id{ops_.size() - 1};
  }

  void check_id(op_id id, const char* where) const {
    expects(id.index < ops_.size(), [&] {
      return std::string("stream_schedule::") + where + ": op #" + std::to_string(id.index) +
             " does not exist (" + std::to_string(ops_.size()) + " ops)";
    });
  }

  [[nodiscard]] timeline_op describe(std::size_t i, double start, double end, double stall) const {
    const auto& op = ops_[i];
    timeline_op out;
    out.name = op.name;
    out.stream = op.stream;
    out.kind = op.kind;
    out.start_seconds = start;
    out.end_seconds = end;
    out.stall_seconds = stall;
    out.flops = op.flops;
    out.bytes = op.bytes;
    return out;
  }

  static double modelled_seconds(const schedule_op& op, const device_profile& profile,
                                 const simulation_options& options) {
    switch (op.kind) {
      case op_kind::compute: {
        if (op.duration_seconds) return *op.duration_seconds;
        double seconds = op.flops > 0.0 ? profile.compute_seconds(op.flops) : 0.0;
        if (options.device_memory_bytes_per_second > 0.0) {
          seconds = std::max(seconds, op.bytes_touched / options.device_memory_bytes_per_second);
        }
        return seconds;
      }
      case op_kind::device_to_host:
        return static_cast<double>(op.bytes) / profile.device_to_host_bytes_per_second;
      case op_kind::host_to_device:
        return static_cast<double>(op.bytes) / profile.host_to_device_bytes_per_second;
      case op_kind::collective: {
        if (op.ranks == 1 || op.bytes == 0) return 0.0;
        expects(profile.interconnect_bytes_per_second > 0.0, [&] {
          return "simulating collective '" + op.name + "': device profile '" + profile.name +
                 "' has no interconnect_bytes_per_second";
        });
        return options.collective_latency_seconds +
               collective_seconds(op.collective, op.bytes, op.ranks,
                                  profile.interconnect_bytes_per_second);
      }
      case op_kind::marker: return 0.0;
    }
    return 0.0;
  }

  // Called when Kahn's algorithm stalls: every op left with a positive
  // indegree lies on or behind a cycle. Walk predecessors that are also left
  // until one repeats; that loop is a cycle.
  [[nodiscard]] std::string describe_cycle(const std::vector<std::size_t>& indegree,
                                           const std::vector<std::size_t>& previous) const {
    std::size_t start = npos;
    for (std::size_t i = 0; i < ops_.size() && start == npos; ++i) {
      if (indegree[i] > 0) start = i;
    }
    auto blocked_predecessor = [&](std::size_t i) {
      if (previous[i] != npos && indegree[previous[i]] > 0) return previous[i];
      for (const std::size_t d : ops_[i].dependencies) {
        if (indegree[d] > 0) return d;
      }
      return npos;  // unreachable: a blocked op has a blocked predecessor
    };
    std::vector<std::size_t> walk;
    std::vector<std::size_t> seen_at(ops_.size(), npos);
    std::size_t at = start;
    while (at != npos && seen_at[at] == npos) {
      seen_at[at] = walk.size();
      walk.push_back(at);
      at = blocked_predecessor(at);
    }
    std::string text = "stream order and dependencies form a cycle: ";
    if (at == npos) return text + "(could not isolate it)";
    // walk[seen_at[at]..] is the cycle in reverse (each op's predecessor
    // follows it); print it forwards as "a -> b -> ... -> a".
    std::vector<std::size_t> cycle(walk.begin() + static_cast<std::ptrdiff_t>(seen_at[at]), walk.end());
    std::reverse(cycle.begin(), cycle.end());
    for (const std::size_t i : cycle) {
      text += "'" + ops_[i].name + "' (" + streams_[ops_[i].stream] + ") -> ";
    }
    text += "'" + ops_[cycle.front()].name + "'";
    return text;
  }

  std::vector<std::string> streams_{};
  std::vector<schedule_op> ops_{};
  std::unordered_map<std::string, std::size_t> index_{};  // op name -> index
};

}  // namespace memo
