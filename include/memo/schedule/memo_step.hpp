// memo/schedule/memo_step.hpp
//
// The stream schedule of one MEMO training step (section 4.1, section 4.3.4,
// Figure 11), built from plain numbers so it can be simulated on a device
// profile before any GPU is touched, or bound to real work and executed.
//
// The step is not written here: `build_memo_step` turns the action list of
// schedule/memo_protocol.hpp — the same list `token_fraction_swapper` walks
// during a real step — into a `stream_schedule`, attaching costs:
//
//   forward i    compute, layer_forward_flops (or seconds), then the layer's
//                forward collectives on the compute stream
//   offload i    device_to_host, input + attention output + alpha x other bytes
//   prefetch i   host_to_device, the same bytes
//   recompute i  compute, (1 - alpha) x recompute_flops (or seconds)
//   backward i   compute, backward FLOPs (or seconds), then the collectives
//
// An attention that keeps Q, K and V in its own host store
// (`transformer_layer::attention_keeps_qkv`) adds its copies to the layer's
// passes: during forward i it stores them ("attention store i", device to
// host, queued on the offload stream) and fetches earlier K/V chunks
// ("attention fetch i", host to device, on the prefetch stream); during
// backward i it fetches K/V and queries ("attention fetch back i", on the
// prefetch stream, issued when the backward starts). The attention joins its
// copies into the compute stream before it returns, so each pass ends with a
// marker ("forward i joined", "backward i joined") that waits for them: the
// compute stream stalls when the swapper's transfers and the attention's
// share a direction of the link for longer than the pass (MEMO eq. 2 with
// S_qkv in the forward, the alpha LP's row (4) in the backward). Two
// approximations: the attention's copies queue on the swapper's in-order
// streams (really its own copy stream shares the link with them), and a
// layer's whole pass is the time they have (really the attention's part of
// it): a model of the link's throughput, not of the order inside a layer.
// A measured step's timeline (the swapper's) lists none of these ops.
//
// with the protocol's waits as dependencies (an action's waits attach to its
// first op; waiting on an action means waiting on its last op). Swapped layers
// recompute when 0 < alpha < 1; at alpha = 0 the other skeletal tensors live
// in one shared region, so every layer but the last recomputes them (the
// layer after it overwrote them), resident layers included.
//
// The last `resident_last_layers` layers (2 in the paper) are not swapped:
// their backward starts right after the forward, so their skeletal tensors
// stay in their buffers; resident_last_layers <= K because those buffers must
// stay distinct.
//
// Consequences the tests check: when a layer's transfer time is at most its
// forward time the compute stream never stalls; when it is longer (alpha =
// 1 at a short sequence) each forward from layer K on stalls by the
// difference, which is exactly what MEMO's LP (eq. 2) is there to avoid.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "memo/core/error.hpp"
#include "memo/core/device_profile.hpp"
#include "memo/schedule/layer_cost.hpp"
#include "memo/schedule/memo_protocol.hpp"
#include "memo/schedule/stream_schedule.hpp"

namespace memo {

/// The inputs of one step, per GPU and per layer.
struct memo_step_config {
  int layers = 0;                 ///< n
  double alpha = 0.0;             ///< fraction of the "other" skeletal tokens offloaded, [0, 1]
  int rounding_buffers = 2;       ///< K
  int resident_last_layers = 2;   ///< the last layers, never swapped, keep their skeletal tensors

  double layer_forward_flops = 0.0;
  /// Backward FLOPs of a layer; unset = backward_to_forward_ratio x forward.
  std::optional<double> layer_backward_flops{};
  double backward_to_forward_ratio = 2.0;
  /// FLOPs to recompute every "other" skeletal tensor of all tokens (the
  /// alpha = 0 cost); the step recomputes (1 - alpha) of it.
  double recompute_flops = 0.0;

  std::uint64_t input_bytes = 0;             ///< S_input, offloaded whole
  std::uint64_t attention_output_bytes = 0;  ///< S_attn, offloaded whole
  std::uint64_t other_bytes = 0;             ///< S_others, alpha of it offloaded

  /// The attention's own host traffic per layer (0: none): Q, K and V
  /// stored in the forward, and what it fetches back in the forward and in
  /// the backward (gpt_layer_cost's attention_* bytes).
  std::uint64_t attention_store_bytes = 0;
  std::uint64_t attention_forward_fetch_bytes = 0;
  std::uint64_t attention_backward_fetch_bytes = 0;

  /// Measured durations (e.g. from the host backend); each overrides the
  /// corresponding FLOP count in simulation when set.
  std::optional<double> layer_forward_seconds{};
  std::optional<double> layer_backward_seconds{};
  std::optional<double> recompute_seconds{};  ///< for the whole (alpha = 0) recompute

  /// Placed on the compute stream after each layer's forward and, mirrored,
  /// after each backward (tensor/context parallelism; not overlapped).
  std::vector<collective_call> forward_collectives{};

  std::string compute_stream = to_string(memo_stream::compute);
  std::string offload_stream = to_string(memo_stream::offload);
  std::string prefetch_stream = to_string(memo_stream::prefetch);

  /// Which layers recompute, when taken from a real swapper
  /// (`token_fraction_swapper::protocol_options()`, whose plan may round a
  /// small alpha to zero tokens) instead of from alpha; its layers, K and
  /// resident_last_layers must equal the fields above.
  std::optional<memo_protocol_options> protocol{};

  /// Throws `memo::error` naming the first field out of range.
  void check() const {
    expects(layers >= 1, [&] { return "memo step: layers must be >= 1, got " + std::to_string(layers); });
    expects(alpha >= 0.0 && alpha <= 1.0, [&] {
      return "memo step: alpha must be in [0, 1], got " + std::to_string(alpha);
    });
    expects(rounding_buffers >= 1, [&] {
      return "memo step: rounding_buffers (K) must be >= 1, got " + std::to_string(rounding_buffers);
    });
    expects(resident_last_layers >= 0 && resident_last_layers <= rounding_buffers &&
                resident_last_layers <= layers,
            [&] {
              return "memo step: resident_last_layers must be in [0, min(K = " +
                     std::to_string(rounding_buffers) + ", layers = " + std::to_string(layers) +
                     ")], got " + std::to_string(resident_last_layers) +
                     " (resident layers keep their rounding buffer until their backward)";
            });
    expects(layer_forward_flops >= 0.0 && recompute_flops >= 0.0 && backward_to_forward_ratio >= 0.0 &&
                (!layer_backward_flops || *layer_backward_flops >= 0.0),
            "memo step: FLOP counts must be non-negative");
    for (const auto* seconds : {&layer_forward_seconds, &layer_backward_seconds, &recompute_seconds}) {
      expects(!*seconds || **seconds >= 0.0, "memo step: measured durations must be non-negative");
    }
    expects(!compute_stream.empty() && !offload_stream.empty() && !prefetch_stream.empty() &&
                compute_stream != offload_stream && compute_stream != prefetch_stream &&
                offload_stream != prefetch_stream,
            "memo step: the three stream names must be distinct and non-empty");
  }

  [[nodiscard]] double backward_flops() const {
    return layer_backward_flops ? *layer_backward_flops : backward_to_forward_ratio * layer_forward_flops;
  }
  /// Bytes one swapped layer offloads (and prefetches): MEMO eq. 2's numerator.
  [[nodiscard]] double offload_bytes_per_layer() const {
    return static_cast<double>(input_bytes) + static_cast<double>(attention_output_bytes) +
           alpha * static_cast<double>(other_bytes);
  }
  [[nodiscard]] int swapped_layers() const { return layers - resident_last_layers; }
  /// True when recomputation costs anything at all.
  [[nodiscard]] bool recompute_costs() const {
    return recompute_seconds ? *recompute_seconds > 0.0 : recompute_flops > 0.0;
  }
  /// The step's shape for memo_step_protocol: swapped layers recompute
  /// their tail at 0 < alpha < 1; at alpha = 0 the other tensors are shared.
  [[nodiscard]] memo_protocol_options protocol_options() const {
    if (protocol) {
      expects(protocol->layers == static_cast<std::size_t>(layers) &&
                  protocol->rounding_buffers == static_cast<std::size_t>(rounding_buffers) &&
                  protocol->resident_last_layers == static_cast<std::size_t>(resident_last_layers),
              [&] {
                return "memo step: the given protocol is for " + std::to_string(protocol->layers) + " layers, K = " +
                       std::to_string(protocol->rounding_buffers) + ", " +
                       std::to_string(protocol->resident_last_layers) + " resident, but the config says " +
                       std::to_string(layers) + ", " + std::to_string(rounding_buffers) + ", " +
                       std::to_string(resident_last_layers);
              });
      return *protocol;
    }
    memo_protocol_options options;
    options.layers = static_cast<std::size_t>(layers);
    options.rounding_buffers = static_cast<std::size_t>(rounding_buffers);
    options.resident_last_layers = static_cast<std::size_t>(resident_last_layers);
    options.recompute_swapped = alpha > 0.0 && alpha < 1.0 && recompute_costs();
    options.recompute_shared = alpha == 0.0 && recompute_costs();
    return options;
  }
  /// Host memory the step holds at its peak (every swapped layer offloaded):
  /// MEMO eq. 3's left-hand side, per GPU.
  [[nodiscard]] double host_bytes() const { return swapped_layers() * offload_bytes_per_layer(); }

  /// A config filled from `gpt_layer_cost_of` (forward/backward/recompute
  /// FLOPs, the three skeletal byte classes, the layer's collectives).
  static memo_step_config from_layer_cost(const gpt_layer_cost& cost, int layers, double alpha,
                                          bool with_collectives = false) {
    memo_step_config config;
    config.layers = layers;
    config.alpha = alpha;
    config.layer_forward_flops = cost.forward_flops;
    config.layer_backward_flops = cost.backward_flops;
    config.recompute_flops = cost.recompute_flops;
    config.input_bytes = cost.input_bytes;
    config.attention_output_bytes = cost.attention_output_bytes;
    config.other_bytes = cost.other_bytes;
    config.attention_store_bytes = cost.attention_host_bytes;
    config.attention_forward_fetch_bytes = cost.attention_forward_fetch_bytes;
    config.attention_backward_fetch_bytes = cost.attention_backward_fetch_bytes;
    if (with_collectives) config.forward_collectives = cost.forward_collectives;
    return config;
  }
};

/// The schedule and the ids of its ops, per layer ([layers] each; empty
/// optionals where a layer has no such op), so a caller can bind callables
/// and copy pointers to it; `protocol` is the action list it was built from.
struct memo_step {
  stream_schedule schedule;
  std::vector<memo_action> protocol{};
  std::vector<op_id> forward{};
  std::vector<op_id> backward{};
  std::vector<std::optional<op_id>> offload{};
  std::vector<std::optional<op_id>> prefetch{};
  std::vector<std::optional<op_id>> recompute{};
};

/// Builds the step's schedule from memo_step_protocol (see the header comment).
inline memo_step build_memo_step(const memo_step_config& config) {
  config.check();
  const auto count = static_cast<std::size_t>(config.layers);
  memo_step step;
  step.protocol = memo_step_protocol(config.protocol_options());
  auto& schedule = step.schedule;
  schedule.add_stream(config.compute_stream);
  schedule.add_stream(config.offload_stream);
  schedule.add_stream(config.prefetch_stream);
  step.forward.resize(count);
  step.backward.resize(count);
  step.offload.resize(count);
  step.prefetch.resize(count);
  step.recompute.resize(count);

  // Whole bytes, rounded down: at the alpha where eq. 2 binds the transfer
  // then never exceeds the layer time by a rounding error.
  const auto transfer_bytes = static_cast<std::uint64_t>(config.offload_bytes_per_layer());
  const double recompute_fraction = 1.0 - config.alpha;
  std::optional<double> recompute_seconds;
  if (config.recompute_seconds) recompute_seconds = recompute_fraction * *config.recompute_seconds;

  // Appends the layer's collectives after `last` on the compute stream and
  // returns the last op of the layer's pass.
  auto add_collectives = [&](const std::string& prefix, op_id last) {
    for (const auto& call : config.forward_collectives) {
      last = schedule.add_collective(prefix + " " + call.name, config.compute_stream,
                                     {.kind = call.kind, .bytes = call.bytes, .ranks = call.ranks});
    }
    return last;
  };

  // The attention's copies of one pass, issued when its compute starts
  // (after the protocol's waits and the compute stream's previous op), and
  // the marker that joins them back; returns `compute` when there are none.
  std::optional<op_id> last_compute;  // the compute stream's last op so far
  auto join_attention = [&](const std::string& pass, op_id compute, std::vector<op_id> start,
                            std::uint64_t stored, const std::string& store_name, std::uint64_t fetched,
                            const std::string& fetch_name) {
    if (last_compute) start.push_back(*last_compute);
    std::vector<op_id> copies;
    if (stored > 0) {
      copies.push_back(schedule.add_copy(store_name, config.offload_stream, copy_kind::device_to_host,
                                         {.bytes = stored}, start));
    }
    if (fetched > 0) {
      copies.push_back(schedule.add_copy(fetch_name, config.prefetch_stream, copy_kind::host_to_device,
                                         {.bytes = fetched}, start));
    }
    if (copies.empty()) return compute;
    copies.push_back(compute);
    return schedule.add_marker(pass + " joined", config.compute_stream, copies);
  };

  std::vector<op_id> last_op;  // [action] the op other actions wait on
  last_op.reserve(step.protocol.size());
  for (const auto& action : step.protocol) {
    std::vector<op_id> after;
    for (const std::size_t a : action.after) after.push_back(last_op[a]);
    const std::size_t layer = action.layer;
    const std::string name = action.name();
    op_id first;
    op_id last;
    switch (action.kind) {
      case memo_action_kind::forward:
        first = schedule.add_compute(
            name, config.compute_stream,
            {.flops = config.layer_forward_flops, .duration_seconds = config.layer_forward_seconds}, after);
        last = add_collectives(name, join_attention(name, first, after, config.attention_store_bytes,
                                                    "attention store " + std::to_string(layer),
                                                    config.attention_forward_fetch_bytes,
                                                    "attention fetch " + std::to_string(layer)));
        step.forward[layer] = first;
        last_compute = last;
        break;
      case memo_action_kind::backward:
        first = schedule.add_compute(
            name, config.compute_stream,
            {.flops = config.backward_flops(), .duration_seconds = config.layer_backward_seconds}, after);
        last = add_collectives(name, join_attention(name, first, after, 0, "", config.attention_backward_fetch_bytes,
                                                    "attention fetch back " + std::to_string(layer)));
        step.backward[layer] = first;
        last_compute = last;
        break;
      case memo_action_kind::recompute:
        first = last = schedule.add_compute(
            name, config.compute_stream,
            {.flops = recompute_fraction * config.recompute_flops, .duration_seconds = recompute_seconds}, after);
        step.recompute[layer] = first;
        last_compute = last;
        break;
      case memo_action_kind::offload:
        first = last = schedule.add_copy(name, config.offload_stream, copy_kind::device_to_host,
                                         {.bytes = transfer_bytes}, after);
        step.offload[layer] = first;
        break;
      case memo_action_kind::prefetch:
        first = last = schedule.add_copy(name, config.prefetch_stream, copy_kind::host_to_device,
                                         {.bytes = transfer_bytes}, after);
        step.prefetch[layer] = first;
        break;
    }
    last_op.push_back(last);
  }
  return step;
}

/// What a simulated step tells the alpha LP and the benchmark tables.
struct memo_step_projection {
  memo_step_config config;
  timeline trace;
  double step_seconds = 0.0;
  /// The same step with every skeletal tensor kept on device: forward +
  /// backward (+ collectives), nothing offloaded, nothing recomputed.
  double no_offload_seconds = 0.0;
  double layer_forward_seconds = 0.0;       ///< compute of one forward (no collectives)
  double transfer_seconds_per_layer = 0.0;  ///< one offload (= one prefetch at equal bandwidths)
  double recompute_seconds_per_layer = 0.0;
  double compute_stall_seconds = 0.0;       ///< compute stream waiting on copies
  double forward_stall_seconds = 0.0;       ///< ... of which in the forward pass
  double backward_stall_seconds = 0.0;      ///< ... of which in the backward pass
  double host_bytes = 0.0;                  ///< per GPU, at the peak
  /// step / no-offload step: 1 means offloading is free.
  [[nodiscard]] double slowdown() const {
    return no_offload_seconds > 0.0 ? step_seconds / no_offload_seconds : 1.0;
  }
};

/// Builds the step and simulates it on `profile`.
inline memo_step_projection simulate_memo_step(const memo_step_config& config,
                                               const device_profile& profile,
                                               const simulation_options& options = {}) {
  const memo_step step = build_memo_step(config);
  memo_step_projection projection;
  projection.config = config;
  projection.trace = step.schedule.simulate(profile, options);
  const auto& trace = projection.trace;
  projection.step_seconds = trace.makespan_seconds();
  projection.layer_forward_seconds = trace.op(step.forward.front()).duration_seconds();
  for (int i = 0; i < config.layers; ++i) {
    const auto layer = static_cast<std::size_t>(i);
    if (step.offload[layer]) {
      projection.transfer_seconds_per_layer = trace.op(*step.offload[layer]).duration_seconds();
    }
    if (step.recompute[layer]) {
      projection.recompute_seconds_per_layer = trace.op(*step.recompute[layer]).duration_seconds();
    }
  }
  // The no-offload step is the compute stream's work minus recomputation,
  // run back to back.
  const std::size_t compute = trace.stream_index(config.compute_stream);
  bool backward_phase = false;
  for (const auto& op : trace.ops()) {
    if (op.stream != compute) continue;
    backward_phase = backward_phase || op.name.rfind("backward", 0) == 0 ||
                     op.name.rfind("recompute", 0) == 0;
    (backward_phase ? projection.backward_stall_seconds : projection.forward_stall_seconds) +=
        op.stall_seconds;
    if (op.name.rfind("recompute", 0) != 0) projection.no_offload_seconds += op.duration_seconds();
  }
  projection.compute_stall_seconds = trace.stall_seconds(config.compute_stream);
  projection.host_bytes = config.host_bytes();
  return projection;
}

}  // namespace memo
