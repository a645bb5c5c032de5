// memo/schedule/schedule_graph.hpp
//
// The data of a stream schedule: named streams and a DAG of typed ops
// (MEMO section 4.3.4, Figure 11: compute, offload and prefetch streams tied
// together by events).
//
//   - streams are named FIFO queues; ops on one stream run in insertion
//     order (CUDA's semantics);
//   - an op is one of four typed specs held in a `std::variant`: a compute
//     kernel (FLOPs, optionally the bytes it touches or a measured duration,
//     optionally a callable that launches the real work on the backend's
//     native stream), a host<->device copy (bytes and, for execution,
//     optional pointers), a collective (kind, bytes, ranks, optional
//     callable) or a marker (a zero-cost point other streams can wait for);
//   - a dependency "b after a" between ops on different streams becomes an
//     event recorded after a and waited on before b.
//
// Guarantees: `validate()` (run before every simulation and instantiation)
// rejects, with a `memo::error` naming the ops, an op that depends on itself
// or on a later op of its own stream (a FIFO stream would never finish), and
// a cycle through stream order and dependencies. `topological_order()` is
// deterministic (lowest index first among ready ops), so execution enqueues
// every event record before any stream waits on it.
//
// What runs a graph lives beside it: schedule/timeline.hpp (the result),
// schedule/schedule_simulate.hpp (cost model), schedule/schedule_execute.hpp
// (instantiate once, launch per step); schedule/stream_schedule.hpp joins
// them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <typeinfo>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "memo/backend/concepts.hpp"
#include "memo/core/error.hpp"

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

enum class collective_kind { all_reduce, all_to_all, all_gather, reduce_scatter, broadcast };

inline constexpr const char* to_string(collective_kind kind) {
  switch (kind) {
    case collective_kind::all_reduce: return "all_reduce";
    case collective_kind::all_to_all: return "all_to_all";
    case collective_kind::all_gather: return "all_gather";
    case collective_kind::reduce_scatter: return "reduce_scatter";
    case collective_kind::broadcast: return "broadcast";
  }
  return "unknown";
}

/// Seconds a collective over `ranks` ranks moving `bytes` takes on links of
/// `link_bytes_per_second` per GPU (ring algorithms): all_reduce
/// 2 (p-1)/p bytes / link; all_gather (bytes = gathered output),
/// reduce_scatter (bytes = full input) and all_to_all (bytes = one rank's
/// buffer) (p-1)/p bytes / link; broadcast (bytes = the buffer, pipelined
/// along a chain or ring: every rank but the root receives all of it)
/// bytes / link. One rank costs nothing.
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
  const double share = kind == collective_kind::broadcast ? static_cast<double>(bytes)
                                                          : (p - 1.0) / p * static_cast<double>(bytes);
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
  double flops = 0.0;                         ///< FLOPs on one GPU
  double bytes_touched = 0.0;                 ///< device-memory traffic, for a roofline bound
  std::optional<double> duration_seconds{};   ///< measured duration; overrides the model
  stream_work work{};                         ///< run during execution; may be empty
};

struct copy_op {
  std::uint64_t bytes = 0;
  void* destination = nullptr;     ///< for execution; null = instance-owned scratch
  const void* source = nullptr;    ///< for execution; null = instance-owned scratch
  copy_kind direction = copy_kind::device_to_host;  ///< set by add_copy
};

struct collective_op {
  collective_kind kind = collective_kind::all_reduce;
  std::uint64_t bytes = 0;
  int ranks = 1;
  stream_work work{};  ///< e.g. the NCCL call; may be empty (then it only costs time in simulation)
  /// The communicator `work` runs on (its describe()), when bound through
  /// schedule_collective.hpp; empty otherwise.
  std::string communicator{};
};

struct marker_op {};

/// What an op does: exactly one of the four specs.
using op_spec = std::variant<compute_op, copy_op, collective_op, marker_op>;

/// One op as stored in the schedule.
struct schedule_op {
  std::string name{};
  std::size_t stream = 0;
  op_spec spec{marker_op{}};
  std::vector<std::size_t> dependencies{};  ///< ops that must end before this one starts

  [[nodiscard]] op_kind kind() const noexcept {
    switch (spec.index()) {
      case 0: return op_kind::compute;
      case 1:
        return std::get<copy_op>(spec).direction == copy_kind::device_to_host ? op_kind::device_to_host
                                                                              : op_kind::host_to_device;
      case 2: return op_kind::collective;
      default: return op_kind::marker;
    }
  }
  [[nodiscard]] double flops() const noexcept {
    const auto* compute = std::get_if<compute_op>(&spec);
    return compute != nullptr ? compute->flops : 0.0;
  }
  /// Copy or collective payload; 0 for compute and markers.
  [[nodiscard]] std::uint64_t bytes() const noexcept {
    if (const auto* copy = std::get_if<copy_op>(&spec)) return copy->bytes;
    if (const auto* collective = std::get_if<collective_op>(&spec)) return collective->bytes;
    return 0;
  }
  /// The callable of a compute or collective op (null otherwise or when empty).
  [[nodiscard]] const stream_work* work() const noexcept {
    if (const auto* compute = std::get_if<compute_op>(&spec)) return compute->work ? &compute->work : nullptr;
    if (const auto* collective = std::get_if<collective_op>(&spec)) {
      return collective->work ? &collective->work : nullptr;
    }
    return nullptr;
  }
};

/// Streams and ops; everything a schedule is, without the verbs that run it.
class schedule_graph {
 public:
  /// Declares a stream; names must be unique and non-empty.
  void add_stream(std::string name) {
    expects(!name.empty(), "stream_schedule: a stream name must not be empty");
    expects(!has_stream(name), [&] { return "stream_schedule: stream '" + name + "' is declared twice"; });
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
    return add(std::move(name), stream, std::move(spec), after);
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
    spec.direction = kind;
    return add(std::move(name), stream, spec, after);
  }

  op_id add_collective(std::string name, std::string_view stream, collective_op spec,
                       const std::vector<op_id>& after = {}) {
    expects(spec.ranks >= 1, [&] {
      return "stream_schedule: collective op '" + name + "' needs ranks >= 1, got " +
             std::to_string(spec.ranks);
    });
    return add(std::move(name), stream, std::move(spec), after);
  }

  /// A zero-cost point on a stream (an event record other streams can wait on).
  op_id add_marker(std::string name, std::string_view stream, const std::vector<op_id>& after = {}) {
    return add(std::move(name), stream, marker_op{}, after);
  }

  /// `consumer` starts only after `producer` has ended. Across streams this
  /// is an event record/wait pair; on one stream the producer must come
  /// first (checked by `validate`).
  void add_dependency(op_id consumer, op_id producer) {
    check_id(consumer, "add_dependency");
    check_id(producer, "add_dependency");
    auto& deps = ops_[consumer.index].dependencies;
    if (std::find(deps.begin(), deps.end(), producer.index) == deps.end()) deps.push_back(producer.index);
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
  [[nodiscard]] std::size_t stream_index(std::string_view name) const {
    const auto found = std::find(streams_.begin(), streams_.end(), name);
    expects(found != streams_.end(), [&] {
      return "stream_schedule: no stream named '" + std::string(name) + "'";
    });
    return static_cast<std::size_t>(found - streams_.begin());
  }

  /// Replaces the callable of a compute or collective op (to bind real work
  /// to a schedule built from sizes alone).
  void set_work(op_id id, stream_work work) {
    check_id(id, "set_work");
    auto& op = ops_[id.index];
    if (auto* compute = std::get_if<compute_op>(&op.spec)) {
      compute->work = std::move(work);
    } else if (auto* collective = std::get_if<collective_op>(&op.spec)) {
      collective->work = std::move(work);
    } else {
      throw error("stream_schedule: op '" + op.name + "' is a " + to_string(op.kind()) +
                  "; only compute and collective ops run callables");
    }
  }
  /// Binds the pointers of a copy op.
  void set_copy_pointers(op_id id, void* destination, const void* source) {
    check_id(id, "set_copy_pointers");
    auto& op = ops_[id.index];
    auto* copy = std::get_if<copy_op>(&op.spec);
    expects(copy != nullptr, [&] {
      return "stream_schedule: op '" + op.name + "' is a " + to_string(op.kind()) + ", not a copy";
    });
    expects((destination == nullptr) == (source == nullptr), [&] {
      return "stream_schedule: copy op '" + op.name + "': give both pointers or neither";
    });
    copy->destination = destination;
    copy->source = source;
  }

  /// Throws `memo::error` naming the ops involved when an op depends on
  /// itself or on a later op of its own stream, or when stream order and
  /// dependencies form a cycle.
  void validate() const { static_cast<void>(topological_order()); }

  /// Every op once, each after its dependencies and after the ops before it
  /// on its stream; among ready ops, the lowest index first (deterministic).
  [[nodiscard]] std::vector<std::size_t> topological_order() const {
    const std::size_t n = ops_.size();
    const auto previous = previous_on_stream();
    std::vector<std::size_t> position(n);  // index within its stream
    std::vector<std::size_t> count(streams_.size(), 0);
    for (std::size_t i = 0; i < n; ++i) position[i] = count[ops_[i].stream]++;
    for (std::size_t i = 0; i < n; ++i) {
      for (const std::size_t d : ops_[i].dependencies) {
        expects(d != i, [&] { return "stream_schedule: op '" + ops_[i].name + "' depends on itself"; });
        expects(ops_[d].stream != ops_[i].stream || position[d] < position[i], [&] {
          return "stream_schedule: op '" + ops_[i].name + "' on stream '" + streams_[ops_[i].stream] +
                 "' depends on '" + ops_[d].name +
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

 protected:
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);

  void check_id(op_id id, const char* where) const {
    expects(id.index < ops_.size(), [&] {
      return std::string("stream_schedule::") + where + ": op #" + std::to_string(id.index) +
             " does not exist (" + std::to_string(ops_.size()) + " ops)";
    });
  }

 private:
  op_id add(std::string name, std::string_view stream, op_spec spec, const std::vector<op_id>& after) {
    expects(!name.empty(), "stream_schedule: an op name must not be empty");
    const auto found = std::find(streams_.begin(), streams_.end(), stream);
    expects(found != streams_.end(), [&] {
      std::string known;
      for (const auto& s : streams_) known += (known.empty() ? "" : ", ") + s;
      return "stream_schedule: op '" + name + "' is placed on unknown stream '" + std::string(stream) +
             "' (declared: " + (known.empty() ? "none" : known) + ")";
    });
    expects(index_.find(name) == index_.end(),
            [&] { return "stream_schedule: op name '" + name + "' is used twice"; });
    schedule_op op;
    for (const op_id dependency : after) {
      expects(dependency.index < ops_.size(), [&] {
        return "stream_schedule: op '" + name + "' depends on op #" + std::to_string(dependency.index) +
               ", which does not exist (" + std::to_string(ops_.size()) + " ops so far)";
      });
      if (std::find(op.dependencies.begin(), op.dependencies.end(), dependency.index) ==
          op.dependencies.end()) {
        op.dependencies.push_back(dependency.index);
      }
    }
    op.name = std::move(name);
    op.stream = static_cast<std::size_t>(found - streams_.begin());
    op.spec = std::move(spec);
    ops_.push_back(std::move(op));
    try {
      index_.emplace(ops_.back().name, ops_.size() - 1);
    } catch (...) {
      ops_.pop_back();  // keep ops_ and index_ in step
      throw;
    }
    return op_id{ops_.size() - 1};
  }

  [[nodiscard]] std::vector<std::size_t> previous_on_stream() const {
    std::vector<std::size_t> previous(ops_.size(), npos);
    std::vector<std::size_t> last(streams_.size(), npos);
    for (std::size_t i = 0; i < ops_.size(); ++i) {
      previous[i] = last[ops_[i].stream];
      last[ops_[i].stream] = i;
    }
    return previous;
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
    for (const std::size_t i : cycle) text += "'" + ops_[i].name + "' (" + streams_[ops_[i].stream] + ") -> ";
    text += "'" + ops_[cycle.front()].name + "'";
    return text;
  }

  std::vector<std::string> streams_{};
  std::vector<schedule_op> ops_{};
  std::unordered_map<std::string, std::size_t> index_{};  // op name -> index
};

}  // namespace memo
