// memo/schedule/schedule_simulate.hpp
//
// A schedule projected onto a machine it is not running on: each op starts
// when the previous op on its stream and all its dependencies have ended,
// and lasts as long as the cost model says (MEMO section 4.3.4's three
// streams, FPDT/SPPO collectives):
//
//   compute          max(flops / (peak_flops * efficiency),
//                        bytes_touched / device_memory_bytes_per_second)
//                    or the op's measured `duration_seconds` when given
//   device_to_host   bytes / device_to_host_bytes_per_second
//   host_to_device   bytes / host_to_device_bytes_per_second
//   collective       collective_latency_seconds + collective_seconds(...)
//   marker           0
//
// Streams are independent resources: two copy streams in the same direction
// are not serialised against each other (a GPU has one copy engine per
// direction; keep same-direction copies on one stream to model it).
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "memo/core/error.hpp"
#include "memo/core/device_profile.hpp"
#include "memo/schedule/schedule_graph.hpp"
#include "memo/schedule/timeline.hpp"

namespace memo {

/// Knobs of the simulator's cost model beyond the device profile.
struct simulation_options {
  /// Device-memory bandwidth for the roofline bound of compute ops that give
  /// `bytes_touched`; 0 = compute ops are FLOP-bound only.
  double device_memory_bytes_per_second = 0.0;
  /// Fixed cost added to every collective (launch + synchronisation).
  double collective_latency_seconds = 0.0;
};

namespace detail {

/// The timeline entry of op `i` of `graph` (shared by simulation and execution).
inline timeline_op describe_op(const schedule_graph& graph, std::size_t i, double start, double end,
                               double stall) {
  const auto& op = graph.ops()[i];
  timeline_op out;
  out.name = op.name;
  out.stream = op.stream;
  out.kind = op.kind();
  out.start_seconds = start;
  out.end_seconds = end;
  out.stall_seconds = stall;
  out.flops = op.flops();
  out.bytes = op.bytes();
  return out;
}

}  // namespace detail

/// The cost model's duration of one op (see the header comment).
inline double modelled_seconds(const schedule_op& op, const device_profile& profile,
                               const simulation_options& options = {}) {
  struct visitor {
    const schedule_op& op;
    const device_profile& profile;
    const simulation_options& options;
    double operator()(const compute_op& compute) const {
      if (compute.duration_seconds) return *compute.duration_seconds;
      double seconds = compute.flops > 0.0 ? profile.compute_seconds(compute.flops) : 0.0;
      if (options.device_memory_bytes_per_second > 0.0) {
        seconds = std::max(seconds, compute.bytes_touched / options.device_memory_bytes_per_second);
      }
      return seconds;
    }
    double operator()(const copy_op& copy) const {
      const double rate = copy.direction == copy_kind::device_to_host ? profile.device_to_host_bytes_per_second
                                                                      : profile.host_to_device_bytes_per_second;
      return static_cast<double>(copy.bytes) / rate;
    }
    double operator()(const collective_op& collective) const {
      if (collective.ranks == 1 || collective.bytes == 0) return 0.0;
      expects(profile.interconnect_bytes_per_second > 0.0, [&] {
        return "simulating collective '" + op.name + "': device profile '" + profile.name +
               "' has no interconnect_bytes_per_second";
      });
      return options.collective_latency_seconds +
             collective_seconds(collective.kind, collective.bytes, collective.ranks,
                                profile.interconnect_bytes_per_second);
    }
    double operator()(const marker_op&) const { return 0.0; }
  };
  return std::visit(visitor{op, profile, options}, op.spec);
}

/// Start and end of every op of `graph` under the cost model.
inline timeline simulate(const schedule_graph& graph, const device_profile& profile,
                         const simulation_options& options = {}) {
  profile.check();
  const auto order = graph.topological_order();
  const auto& ops = graph.ops();
  std::vector<double> stream_free(graph.streams().size(), 0.0);
  std::vector<timeline_op> result(ops.size());
  for (const std::size_t i : order) {
    const auto& op = ops[i];
    const double fifo_ready = stream_free[op.stream];
    double start = fifo_ready;
    for (const std::size_t d : op.dependencies) start = std::max(start, result[d].end_seconds);
    const double end = start + modelled_seconds(op, profile, options);
    result[i] = detail::describe_op(graph, i, start, end, start - fifo_ready);
    stream_free[op.stream] = end;
  }
  return timeline("simulated on " + profile.name, graph.streams(), std::move(result));
}

}  // namespace memo
