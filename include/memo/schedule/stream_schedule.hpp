// memo/schedule/stream_schedule.hpp
//
// A training step as a value: a DAG of operations placed on named streams
// (MEMO section 4.3.4, Figure 11; FPDT and SPPO add collectives and chunk
// pipelines to the same picture), written down once and then either
//
//   - simulated with a cost model from a `device_profile` (`simulate`), or
//   - instantiated on any `Backend` once and launched every step
//     (`instantiate`, the CUDA-graph idiom), or executed once (`execute` =
//     instantiate + launch + synchronize).
//
// Both give a `timeline` (per-op start/end/stall, makespan, busy, overlap,
// op order per stream, Chrome trace JSON).
//
// This header joins the pieces, split along their seams:
//   schedule/schedule_graph.hpp     streams, typed ops, validation
//   schedule/timeline.hpp           the result and its metrics, Chrome trace
//   schedule/schedule_simulate.hpp  the cost model
//   schedule/schedule_execute.hpp   schedule_instance: instantiate, launch
// `stream_schedule` is the graph with those verbs as members.
#pragma once

#include "memo/backend/concepts.hpp"
#include "memo/core/memory_region.hpp"
#include "memo/core/device_profile.hpp"
#include "memo/schedule/schedule_collective.hpp"
#include "memo/schedule/schedule_execute.hpp"
#include "memo/schedule/schedule_graph.hpp"
#include "memo/schedule/schedule_simulate.hpp"
#include "memo/schedule/timeline.hpp"

namespace memo {

class stream_schedule : public schedule_graph {
 public:
  stream_schedule() = default;

  /// The cost model's duration of one op (see schedule_simulate.hpp).
  [[nodiscard]] double modelled_seconds(op_id id, const device_profile& profile,
                                        const simulation_options& options = {}) const {
    check_id(id, "modelled_seconds");
    return memo::modelled_seconds(ops()[id.index], profile, options);
  }

  /// Start and end of every op under the cost model: each op starts when the
  /// previous op on its stream and all its dependencies have ended.
  [[nodiscard]] timeline simulate(const device_profile& profile, const simulation_options& options = {}) const {
    return memo::simulate(*this, profile, options);
  }

  /// Streams, events and scratch created once; `launch()` per step.
  template <Backend B>
  [[nodiscard]] schedule_instance<B> instantiate(B& backend, const execute_options& options = {}) const {
    return schedule_instance<B>(backend, *this, options);
  }
  /// The same over scratch regions the caller owns (sized with
  /// `schedule_instance<B>::required_scratch(schedule)`).
  template <Backend B>
  [[nodiscard]] schedule_instance<B> instantiate(B& backend, memory_region device_scratch,
                                                 memory_region pinned_scratch,
                                                 const execute_options& options = {}) const {
    return schedule_instance<B>(backend, *this, device_scratch, pinned_scratch, options);
  }

  /// Runs the schedule once on `backend`: instantiate, launch, synchronize.
  /// Blocks until all of it has finished; an exception from a callable or a
  /// copy is rethrown here (after every stream has drained).
  template <Backend B>
  timeline execute(B& backend, const execute_options& options = {}) const {
    schedule_instance<B> instance(backend, *this, options);
    return instance.run();
  }
};

}  // namespace memo
