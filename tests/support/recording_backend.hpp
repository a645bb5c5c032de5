// tests/support/recording_backend.hpp
//
// A test Backend that forwards every call to a real backend and writes down,
// per stream, each record, wait, copy and enqueue it issued, and counts the
// streams, events and allocations it made. Tests read the log to check what
// an algorithm really asked the machine to do (its waits, its op order)
// against an independent description (the simulated schedule), and the
// counters to check that a steady-state step creates nothing.
//
// Compute on a stream (parallel_for, gemm, gemm_strided_batched, memset_async)
// is forwarded generically: whatever arguments the inner backend takes, with
// this backend's streams unwrapped, logged as an enqueue on that stream. A
// member the Backend concept adds under another name is one more line of
// MEMO_TESTING_FORWARD_STREAM_CALL below.
#pragma once

#include <atomic>
#include <cstddef>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "memo/backend/concepts.hpp"
#include "memo/core/bytes.hpp"
#include "memo/schedule/schedule_graph.hpp"

namespace memo::testing {

/// A MemoryResource that forwards to another and counts allocations.
template <MemoryResource R>
class counting_resource {
 public:
  explicit counting_resource(R& inner) : inner_(&inner) {}
  void* allocate(std::size_t bytes, std::size_t alignment = default_alignment_bytes) {
    ++allocations_;
    return inner_->allocate(bytes, alignment);
  }
  void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment_bytes) {
    inner_->deallocate(pointer, bytes, alignment);
  }
  [[nodiscard]] std::size_t current_bytes() const { return inner_->current_bytes(); }
  [[nodiscard]] std::size_t peak_bytes() const { return inner_->peak_bytes(); }
  void reset_peak() { inner_->reset_peak(); }
  [[nodiscard]] std::size_t allocations() const noexcept { return allocations_; }

 private:
  R* inner_;
  std::atomic<std::size_t> allocations_{0};
};

enum class call_kind { record, wait, copy, enqueue };

/// One call as issued by the host (in issue order).
struct recorded_call {
  std::size_t stream = 0;  ///< index in make_stream order
  call_kind kind = call_kind::enqueue;
  std::size_t event = 0;   ///< record / wait: the event's index in make_event order
  copy_kind direction = copy_kind::host_to_device;  ///< copy
  std::size_t bytes = 0;                            ///< copy
  void* destination = nullptr;                      ///< copy
  const void* source = nullptr;                     ///< copy
  std::string label{};  ///< the backend's label when the call was made
  /// enqueue: the backend member that queued the work ("enqueue" for work
  /// given as a callable, e.g. a collective; "gemm", "parallel_for", ...).
  std::string_view member{};
};

template <Backend Inner>
class recording_backend {
 public:
  using native_stream = typename Inner::native_stream;
  using device_resource = std::remove_reference_t<decltype(std::declval<Inner&>().device_memory())>;
  using pinned_resource = std::remove_reference_t<decltype(std::declval<Inner&>().pinned_memory())>;

  class stream {
   public:
    stream(stream&&) noexcept = default;
    stream& operator=(stream&&) noexcept = default;
    [[nodiscard]] std::size_t id() const noexcept { return id_; }
    typename Inner::stream inner;

   private:
    friend class recording_backend;
    stream(typename Inner::stream s, std::size_t id) : inner(std::move(s)), id_(id) {}
    std::size_t id_;
  };
  class event {
   public:
    event(event&&) noexcept = default;
    event& operator=(event&&) noexcept = default;
    [[nodiscard]] std::size_t id() const noexcept { return id_; }
    typename Inner::event inner;

   private:
    friend class recording_backend;
    event(typename Inner::event e, std::size_t id) : inner(std::move(e)), id_(id) {}
    std::size_t id_;
  };

  explicit recording_backend(Inner& inner)
      : inner_(&inner), device_(inner.device_memory()), pinned_(inner.pinned_memory()) {}

  static constexpr std::string_view name() noexcept { return Inner::name(); }
  counting_resource<device_resource>& device_memory() noexcept { return device_; }
  counting_resource<pinned_resource>& pinned_memory() noexcept { return pinned_; }

  stream make_stream(std::string_view stream_name = {}) {
    std::lock_guard lock(mutex_);
    stream_names_.emplace_back(stream_name);
    return stream(inner_->make_stream(stream_name), stream_names_.size() - 1);
  }
  /// A stream whose BLAS workspace lives in `workspace` (see Backend).
  stream make_stream(std::string_view stream_name, memory_region workspace) {
    std::lock_guard lock(mutex_);
    stream_names_.emplace_back(stream_name);
    return stream(inner_->make_stream(stream_name, workspace), stream_names_.size() - 1);
  }
  [[nodiscard]] std::size_t stream_workspace_bytes() const { return inner_->stream_workspace_bytes(); }
  event make_event() {
    std::lock_guard lock(mutex_);
    return event(inner_->make_event(), events_made_++);
  }
  void record(event& marker, stream& on) {
    log({on.id(), call_kind::record, marker.id()});
    inner_->record(marker.inner, on.inner);
  }
  void wait(stream& waiter, const event& marker) {
    log({waiter.id(), call_kind::wait, marker.id()});
    inner_->wait(waiter.inner, marker.inner);
  }
  [[nodiscard]] bool query(const event& marker) const { return inner_->query(marker.inner); }
  void synchronize(const event& marker) { inner_->synchronize(marker.inner); }
  void synchronize(stream& on) { inner_->synchronize(on.inner); }
  void synchronize() { inner_->synchronize(); }
  [[nodiscard]] double elapsed_seconds(const event& start, const event& end) const {
    return inner_->elapsed_seconds(start.inner, end.inner);
  }
  void copy_async(void* destination, const void* source, std::size_t bytes, copy_kind kind, stream& on) {
    recorded_call call{on.id(), call_kind::copy};
    call.direction = kind;
    call.bytes = bytes;
    call.destination = destination;
    call.source = source;
    log(std::move(call));
    inner_->copy_async(destination, source, bytes, kind, on.inner);
  }
  template <class Work>
  void enqueue(stream& on, Work&& work) {
    recorded_call call{on.id(), call_kind::enqueue};
    call.member = "enqueue";
    log(std::move(call));
    inner_->enqueue(on.inner, std::forward<Work>(work));
  }

  // --- compute on a stream, forwarded whatever its signature ------------------

  // This backend's streams and events become the inner ones; anything else
  // passes through.
  template <class T>
  static decltype(auto) unwrap(T&& value) {
    using bare = std::remove_cvref_t<T>;
    if constexpr (std::is_same_v<bare, stream> || std::is_same_v<bare, event>) {
      return (value.inner);
    } else {
      return std::forward<T>(value);
    }
  }

#define MEMO_TESTING_FORWARD_STREAM_CALL(member)                                              \
  template <class... Args>                                                                    \
    requires requires(Inner& b, Args&&... args) { b.member(unwrap(std::forward<Args>(args))...); } \
  decltype(auto) member(Args&&... args) {                                                     \
    log_stream_call(#member, args...);                                                        \
    return inner_->member(unwrap(std::forward<Args>(args))...);                               \
  }
  MEMO_TESTING_FORWARD_STREAM_CALL(parallel_for)
  MEMO_TESTING_FORWARD_STREAM_CALL(gemm)
  MEMO_TESTING_FORWARD_STREAM_CALL(gemm_strided_batched)
  MEMO_TESTING_FORWARD_STREAM_CALL(memset_async)
#undef MEMO_TESTING_FORWARD_STREAM_CALL

  // --- what the tests read ----------------------------------------------------

  /// Every later call carries `label` (e.g. "forward 3") until changed.
  void set_label(std::string label) {
    std::lock_guard lock(mutex_);
    label_ = std::move(label);
  }
  [[nodiscard]] std::vector<recorded_call> calls() const {
    std::lock_guard lock(mutex_);
    return calls_;
  }
  void clear_calls() {
    std::lock_guard lock(mutex_);
    calls_.clear();
  }
  [[nodiscard]] const std::vector<std::string>& stream_names() const noexcept { return stream_names_; }
  [[nodiscard]] std::size_t streams_made() const {
    std::lock_guard lock(mutex_);
    return stream_names_.size();
  }
  [[nodiscard]] std::size_t events_made() const {
    std::lock_guard lock(mutex_);
    return events_made_;
  }
  /// Device plus pinned allocations made through this backend.
  [[nodiscard]] std::size_t allocations() const { return device_.allocations() + pinned_.allocations(); }
  Inner& inner() noexcept { return *inner_; }

 private:
  template <class... Args>
  void log_stream_call(std::string_view member, const Args&... args) {
    std::size_t on = static_cast<std::size_t>(-1);
    ((on = on == static_cast<std::size_t>(-1) && is_stream(args) ? stream_id(args) : on), ...);
    if (on == static_cast<std::size_t>(-1)) return;
    recorded_call call{on, call_kind::enqueue};
    call.member = member;
    log(std::move(call));
  }
  template <class T>
  static constexpr bool is_stream(const T&) noexcept {
    return std::is_same_v<T, stream>;
  }
  template <class T>
  static std::size_t stream_id(const T& value) noexcept {
    if constexpr (std::is_same_v<T, stream>) {
      return value.id();
    } else {
      return static_cast<std::size_t>(-1);
    }
  }

  void log(recorded_call call) {
    std::lock_guard lock(mutex_);
    call.label = label_;
    calls_.push_back(std::move(call));
  }

  Inner* inner_;
  counting_resource<device_resource> device_;
  counting_resource<pinned_resource> pinned_;
  mutable std::mutex mutex_;
  std::vector<std::string> stream_names_;
  std::size_t events_made_ = 0;
  std::vector<recorded_call> calls_;
  std::string label_;
};

/// Ops per stream and their cross-stream waits, as a log shows them.
struct replayed_ops {
  std::vector<std::vector<std::string>> order;                // [stream] op names in issue order
  std::map<std::string, std::set<std::string>> waits_on{};  // op -> ops of other streams it waited for
};

/// Turns a log into ops: `name_of(call)` names the op a copy or enqueue
/// belongs to (consecutive calls with the same name on one stream are one
/// op); a wait attaches to the next op of its stream and stands for the op
/// that was last on the recording stream when the event was recorded
/// (waits on never-recorded events, or on marks of the same stream, add
/// nothing).
template <class NameOf>
replayed_ops replay(const std::vector<recorded_call>& calls, std::size_t streams, NameOf&& name_of) {
  replayed_ops out;
  out.order.resize(streams);
  std::vector<std::string> last(streams);
  std::vector<std::set<std::string>> pending(streams);
  std::map<std::size_t, std::pair<std::size_t, std::string>> marks;  // event -> (stream, op)
  for (const auto& call : calls) {
    const std::size_t s = call.stream;
    switch (call.kind) {
      case call_kind::record: marks[call.event] = {s, last[s]}; break;
      case call_kind::wait: {
        const auto found = marks.find(call.event);
        if (found != marks.end() && found->second.first != s && !found->second.second.empty()) {
          pending[s].insert(found->second.second);
        }
        break;
      }
      case call_kind::copy:
      case call_kind::enqueue: {
        const std::string name = name_of(call);
        if (name != last[s]) {
          out.order[s].push_back(name);
          last[s] = name;
        }
        out.waits_on[name].insert(pending[s].begin(), pending[s].end());
        pending[s].clear();
        break;
      }
    }
  }
  return out;
}

/// A schedule in the same form: ops per stream in insertion order (a FIFO
/// stream runs them so) and each op's dependencies on other streams.
inline replayed_ops ops_of(const schedule_graph& graph) {
  replayed_ops out;
  out.order.resize(graph.streams().size());
  for (const auto& op : graph.ops()) {
    out.order[op.stream].push_back(op.name);
    auto& waited = out.waits_on[op.name];
    for (const std::size_t d : op.dependencies) {
      if (graph.ops()[d].stream != op.stream) waited.insert(graph.ops()[d].name);
    }
  }
  return out;
}

/// Every pair (a, b) with a before b through stream order and waits.
inline std::set<std::pair<std::string, std::string>> happens_before(const replayed_ops& ops) {
  std::map<std::string, std::set<std::string>> predecessors;  // direct
  for (const auto& stream : ops.order) {
    for (std::size_t i = 0; i < stream.size(); ++i) {
      if (i > 0) predecessors[stream[i]].insert(stream[i - 1]);
    }
  }
  for (const auto& [op, waited] : ops.waits_on) predecessors[op].insert(waited.begin(), waited.end());
  std::map<std::string, std::set<std::string>> before;  // transitive, memoised
  std::set<std::pair<std::string, std::string>> pairs;
  auto closure = [&](auto&& self, const std::string& op) -> const std::set<std::string>& {
    auto found = before.find(op);
    if (found != before.end()) return found->second;
    std::set<std::string> all;
    for (const auto& p : predecessors[op]) {
      all.insert(p);
      const auto& deeper = self(self, p);
      all.insert(deeper.begin(), deeper.end());
    }
    return before.emplace(op, std::move(all)).first->second;
  };
  for (const auto& stream : ops.order) {
    for (const auto& op : stream) {
      for (const auto& p : closure(closure, op)) pairs.emplace(p, op);
    }
  }
  return pairs;
}

}  // namespace memo::testing
