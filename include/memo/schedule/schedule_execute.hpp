// memo/schedule/schedule_execute.hpp
//
// Running a schedule on a backend, the CUDA-graph way: instantiate once,
// launch every step (MEMO section 4.3.4: the runtime executor issues the
// same stream/event pattern every iteration, so nothing about it needs to be
// decided or allocated again).
//
// `schedule_instance<B>` takes a copy of a validated graph and, once, in its
// constructor:
//   - computes a topological order (so every event is recorded before any
//     stream waits on it: a wait on a not-yet-recorded event would silently
//     not wait);
//   - creates one backend stream per schedule stream and every event it will
//     ever use (an origin, a start and an end per op, a tail per stream);
//   - lays out the scratch of copies given without pointers: per stream and
//     direction one device and one pinned part of that stream's largest such
//     copy, so no two streams touch the same scratch bytes. The scratch is
//     either owned (two allocations) or carved from two `memory_region`s the
//     caller owns, sized first with `required_scratch` (region_carver's
//     counting mode).
// `launch()` then enqueues one step: a join on the previous launch's tail of
// every stream, the origin mark, and for every op its waits, start event,
// work and end event. It creates no stream, event, thread or scratch and
// allocates no backend memory. `synchronize()` waits for the step and
// rethrows the first failure of any stream after all of them have drained;
// `last_timeline()` measures every op of the last launch with its events.
//
// Lifetime: the instance owns its copy of the graph (changes to the schedule
// afterwards are not seen: instantiate again), must not outlive the backend,
// and drains its streams before it frees anything.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "memo/backend/buffer.hpp"
#include "memo/backend/concepts.hpp"
#include "memo/core/error.hpp"
#include "memo/core/memory_region.hpp"
#include "memo/schedule/schedule_graph.hpp"
#include "memo/schedule/schedule_simulate.hpp"
#include "memo/schedule/step_recorder.hpp"
#include "memo/schedule/timeline.hpp"

namespace memo {

/// Knobs of execution.
struct execute_options {
  /// Copies given without pointers run between instance-owned scratch
  /// buffers, so a schedule written only with byte counts still moves real
  /// bytes. When false such a copy is an error.
  bool scratch_for_unbound_copies = true;
};

/// Scratch bytes of an instance: device and pinned host.
struct schedule_scratch_bytes {
  std::size_t device = 0;
  std::size_t pinned = 0;
};

template <Backend B>
class schedule_instance {
 public:
  using stream_type = typename B::stream;
  using event_type = typename B::event;

  /// How large the two scratch regions of `graph` must be.
  [[nodiscard]] static schedule_scratch_bytes required_scratch(const schedule_graph& graph,
                                                               const execute_options& options = {}) {
    region_carver device;
    region_carver pinned;
    carve_scratch(graph, options, device, pinned, nullptr);
    return {device.required_bytes(), pinned.required_bytes()};
  }

  /// Owns its scratch (one device and one pinned allocation).
  schedule_instance(B& backend, const schedule_graph& graph, const execute_options& options = {})
      : backend_(&backend), graph_(graph), order_(graph_.topological_order()) {
    const auto bytes = required_scratch(graph_, options);
    if (bytes.device > 0) owned_device_ = device_buffer(backend.device_memory(), bytes.device);
    if (bytes.pinned > 0) owned_pinned_ = pinned_buffer(backend.pinned_memory(), bytes.pinned);
    setup(options, {owned_device_.data(), owned_device_.size()}, {owned_pinned_.data(), owned_pinned_.size()});
  }

  /// Carves its scratch from regions it does not own (sized with
  /// `required_scratch`); they must outlive the instance.
  schedule_instance(B& backend, const schedule_graph& graph, memory_region device_scratch,
                    memory_region pinned_scratch, const execute_options& options = {})
      : backend_(&backend), graph_(graph), order_(graph_.topological_order()) {
    setup(options, device_scratch, pinned_scratch);
  }

  schedule_instance(const schedule_instance&) = delete;
  schedule_instance& operator=(const schedule_instance&) = delete;
  ~schedule_instance() { drain(); }

  [[nodiscard]] const schedule_graph& graph() const noexcept { return graph_; }
  /// Launches so far.
  [[nodiscard]] std::size_t launches() const noexcept { return launches_; }

  /// Enqueues one step (see the header comment). A backend error while
  /// enqueueing drains every stream before it is rethrown.
  void launch() {
    const auto& ops = graph_.ops();
    try {
      if (!streams_.empty()) {
        // Serialise launches as a CUDA graph does: this step starts after
        // every stream finished the previous one.
        if (launches_ > 0) {
          for (std::size_t s = 1; s < streams_.size(); ++s) backend_->wait(streams_.front(), tails_[s]);
        }
        backend_->record(*origin_, streams_.front());
        for (std::size_t s = 1; s < streams_.size(); ++s) backend_->wait(streams_[s], *origin_);
      }
      ++launches_;
      for (const std::size_t i : order_) {
        const auto& op = ops[i];
        auto& stream = streams_[op.stream];
        for (const std::size_t d : op.dependencies) {
          if (ops[d].stream != op.stream) backend_->wait(stream, ends_[d]);
        }
        backend_->record(starts_[i], stream);
        if (const auto* copy = std::get_if<copy_op>(&op.spec)) {
          if (copy->bytes > 0) {
            backend_->copy_async(copy_pointers_[i].first, copy_pointers_[i].second,
                                 static_cast<std::size_t>(copy->bytes), copy->direction, stream);
          }
        } else if (const auto* work = op.work()) {
          backend_->enqueue(stream, [work](native_stream_t<B> native) { (*work)(native_stream_ref(native, B::name())); });
        }
        backend_->record(ends_[i], stream);
      }
      for (std::size_t s = 0; s < streams_.size(); ++s) backend_->record(tails_[s], streams_[s]);
    } catch (...) {
      drain();  // no enqueued work may outlive what it points to
      throw;
    }
  }

  /// Waits for every stream; rethrows the first failure after all drained.
  void synchronize() {
    std::exception_ptr failure;
    for (auto& stream : streams_) {
      try {
        backend_->synchronize(stream);
      } catch (...) {
        if (!failure) failure = std::current_exception();
      }
    }
    if (failure) std::rethrow_exception(failure);
  }

  /// Start, end and stall of every op of the last launch (after synchronize).
  [[nodiscard]] timeline last_timeline() const {
    expects(launches_ > 0, "schedule_instance::last_timeline: nothing was launched");
    const auto& ops = graph_.ops();
    std::vector<timeline_op> result(ops.size());
    std::vector<bool> waits(ops.size(), false);
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const auto [start, end] = detail::measured_span(*backend_, *origin_, starts_[i], ends_[i]);
      result[i] = detail::describe_op(graph_, i, start, end, 0.0);
      for (const std::size_t d : ops[i].dependencies) waits[i] = waits[i] || ops[d].stream != ops[i].stream;
    }
    // A stream runs its ops in graph order, which is index order.
    detail::assign_measured_stalls(result, waits, graph_.streams().size());
    return timeline("executed on " + std::string(B::name()), graph_.streams(), std::move(result));
  }

  /// launch(), synchronize(), last_timeline().
  timeline run() {
    launch();
    synchronize();
    return last_timeline();
  }

 private:
  using device_resource = std::remove_reference_t<decltype(std::declval<B&>().device_memory())>;
  using pinned_resource = std::remove_reference_t<decltype(std::declval<B&>().pinned_memory())>;
  using device_buffer = buffer<std::byte, device_resource>;
  using pinned_buffer = buffer<std::byte, pinned_resource>;
  using scratch_key = std::pair<std::size_t, copy_kind>;  // (stream, direction)

  // Takes one device and one pinned part per (stream, direction) in a fixed
  // order; `parts`, when given, receives where each landed.
  static void carve_scratch(const schedule_graph& graph, const execute_options& options,
                            region_carver& device, region_carver& pinned,
                            std::map<scratch_key, std::pair<std::byte*, std::byte*>>* parts) {
    std::map<scratch_key, std::uint64_t> largest;
    for (const auto& op : graph.ops()) {
      const auto* copy = std::get_if<copy_op>(&op.spec);
      if (copy == nullptr || copy->source != nullptr || copy->bytes == 0) continue;
      expects(options.scratch_for_unbound_copies, [&] {
        return "stream_schedule: copy op '" + op.name +
               "' has no source/destination pointers and scratch copies are disabled";
      });
      auto& bytes = largest[{op.stream, copy->direction}];
      bytes = std::max(bytes, copy->bytes);
    }
    for (const auto& [key, bytes] : largest) {
      const std::string part = "scratch of stream '" + graph.streams()[key.first] + "' (" + to_string(key.second) + ")";
      const auto on_device = device.take(static_cast<std::size_t>(bytes), part);
      const auto on_host = pinned.take(static_cast<std::size_t>(bytes), part);
      if (parts != nullptr) parts->emplace(key, std::pair{on_device.data, on_host.data});
    }
  }

  void setup(const execute_options& options, memory_region device_scratch, memory_region pinned_scratch) {
    region_carver device(device_scratch, "schedule_instance device scratch");
    region_carver pinned(pinned_scratch, "schedule_instance pinned scratch");
    std::map<scratch_key, std::pair<std::byte*, std::byte*>> parts;
    carve_scratch(graph_, options, device, pinned, &parts);
    const auto& ops = graph_.ops();
    copy_pointers_.assign(ops.size(), {nullptr, nullptr});
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const auto* copy = std::get_if<copy_op>(&ops[i].spec);
      if (copy == nullptr || copy->bytes == 0) continue;
      if (copy->source != nullptr) {
        copy_pointers_[i] = {copy->destination, copy->source};
        continue;
      }
      const auto [on_device, on_host] = parts.at({ops[i].stream, copy->direction});
      copy_pointers_[i] = copy->direction == copy_kind::device_to_host ? std::pair<void*, const void*>{on_host, on_device}
                                                                       : std::pair<void*, const void*>{on_device, on_host};
    }
    streams_.reserve(graph_.streams().size());
    for (const auto& name : graph_.streams()) streams_.push_back(backend_->make_stream(name));
    origin_.emplace(backend_->make_event());
    starts_.reserve(ops.size());
    ends_.reserve(ops.size());
    for (std::size_t i = 0; i < ops.size(); ++i) {
      starts_.push_back(backend_->make_event());
      ends_.push_back(backend_->make_event());
    }
    tails_.reserve(streams_.size());
    for (std::size_t s = 0; s < streams_.size(); ++s) tails_.push_back(backend_->make_event());
  }

  void drain() noexcept {
    for (auto& stream : streams_) memo::drain(*backend_, stream);  // errors: reported by synchronize()
  }

  B* backend_;
  schedule_graph graph_;
  std::vector<std::size_t> order_;
  device_buffer owned_device_;  // [required_scratch().device] bytes, or empty
  pinned_buffer owned_pinned_;  // [required_scratch().pinned] bytes, or empty
  std::vector<std::pair<void*, const void*>> copy_pointers_;  // [op] (destination, source)
  std::vector<stream_type> streams_;                          // [schedule stream]
  std::optional<event_type> origin_;  // set in setup()
  std::vector<event_type> starts_;  // [op]
  std::vector<event_type> ends_;    // [op]
  std::vector<event_type> tails_;   // [schedule stream]
  std::size_t launches_ = 0;
};

}  // namespace memo
