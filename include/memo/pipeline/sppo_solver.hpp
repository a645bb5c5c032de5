// memo/pipeline/sppo_solver.hpp
//
// SPPO's heuristic solver (section 6.1): for a model, a sequence length and
// a cluster, the (SP, PP, N) that minimises the step time, with the
// section's restrictions on the search:
//
//   - SP inside a node (SP divides the GPUs of a node): Megatron-style
//     sequence parallelism communicates every layer;
//   - PP = GPUs / SP stages, a divisor of the layer count (pipelining
//     crosses nodes when it must: Table 4 runs PP 4 over four 8-GPU nodes);
//   - N such that one subsequence gives every device between 2K and 16K
//     tokens per layer (Figure 7: below, kernels run under-occupied; above,
//     the bubble grows with no throughput gained), and N a multiple of PP
//     (as in every row of Table 4; it also keeps the search small, each
//     candidate being simulated).
//
// Cost model (each candidate is simulated, not read off a formula):
//   - the sequence is split by flops_balanced_partition; every subsequence
//     is charged the largest part's cost (the pipeline runs at that pace);
//   - a stage's forward of one subsequence: layers / PP x (causal FLOPs of
//     the part / SP at the profile's achieved rate + Megatron-SP's two
//     all-gathers and two reduce-scatters of the part's [tokens, h]
//     activation over SP ranks on the intra-node link + a fixed per-layer
//     launch overhead); backward 2x the compute and the same communication;
//   - the step: build_sppo_schedule (multiplexed) simulated.
// Memory per device (a candidate that does not fit is reported, not
// chosen): parameters, gradients and Adam states at 16 bytes per parameter
// of the stage, split over SP; K and V of every subsequence kept on the
// device (two-level management); the skeletal activations of two
// subsequences per layer (the one computing, the one being offloaded); and
// on the host the skeletal activations of all subsequences.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "memo/core/device_profile.hpp"
#include "memo/core/error.hpp"
#include "memo/core/transformer_layer.hpp"
#include "memo/pipeline/sppo_partition.hpp"
#include "memo/pipeline/sppo_schedule.hpp"
#include "memo/schedule/schedule_graph.hpp"

namespace memo {

struct sppo_problem {
  transformer_layer layer;  ///< tokens = the whole sequence; tensor/context parallel unused
  int layers = 32;
  int gpus = 8;
  device_profile profile;                 ///< gpus_per_node, rates, device and host memory
  double layer_overhead_seconds = 50e-6;  ///< launches of one layer on one subsequence
  std::int64_t min_device_tokens = 2048;  ///< per subsequence, per device
  std::int64_t max_device_tokens = 16384;
};

struct sppo_candidate {
  int sp = 1, pp = 1, n = 1;
  double step_seconds = 0.0;
  double bubble_ratio = 0.0;  ///< (PP - 1) / N
  double device_bytes = 0.0;  ///< per GPU
  double host_bytes_per_gpu = 0.0;
  bool fits = false;
  std::string limit;  ///< what ran out when it does not fit
};

struct sppo_solution {
  std::vector<sppo_candidate> candidates;  ///< every (SP, PP, N) evaluated
  std::optional<sppo_candidate> best;      ///< the fastest that fits
};

namespace detail {

inline double layer_parameters(const transformer_layer& l) {
  const double h = static_cast<double>(l.hidden), f = static_cast<double>(l.ffn_width());
  const double kv = static_cast<double>(l.kv_width());
  return h * (h + 2.0 * kv) + h * h + 2.0 * h * f + 9.0 * h + 2.0 * kv + f;
}

}  // namespace detail

/// Evaluates every candidate of `problem` and returns them with the best.
inline sppo_solution solve_sppo(const sppo_problem& problem) {
  const transformer_layer& l = problem.layer;
  l.check();
  problem.profile.check();
  expects(problem.layers >= 1 && problem.gpus >= 1, [&] {
    return "sppo solver: layers " + std::to_string(problem.layers) + " and gpus " + std::to_string(problem.gpus) +
           " must be positive";
  });
  expects(problem.min_device_tokens >= 1 && problem.min_device_tokens <= problem.max_device_tokens, [&] {
    return "sppo solver: device token range [" + std::to_string(problem.min_device_tokens) + ", " +
           std::to_string(problem.max_device_tokens) + "] is empty";
  });
  const device_profile& gpu = problem.profile;
  const int node = gpu.gpus_per_node;
  const std::int64_t S = l.tokens;
  const double h = static_cast<double>(l.hidden), f = static_cast<double>(l.ffn_width());
  const double kv = static_cast<double>(l.kv_width()), e = static_cast<double>(l.bytes_per_element);
  // Causal FLOPs of one layer's forward: projections and MLP per token, and
  // 4 h per (query, key) pair (scores and values).
  const causal_cost_model flops{2.0 * (h * (h + 2.0 * kv) + h * h + 2.0 * h * f), 4.0 * h};
  // Skeletal bytes per token of one layer (MEMO's table), and K/V.
  transformer_layer one_token = l;
  one_token.tokens = 1, one_token.tensor_parallel = 1, one_token.context_parallel = 1;
  const double skeletal_per_token = static_cast<double>(one_token.skeletal_bytes());
  const double kv_per_token = 2.0 * kv * e;

  sppo_solution solution;
  for (int sp = 1; sp <= std::min(node, problem.gpus); ++sp) {
    if (node % sp != 0 || problem.gpus % sp != 0) continue;
    const int pp = problem.gpus / sp;
    if (problem.layers % pp != 0) continue;
    const double stage_layers = static_cast<double>(problem.layers / pp);
    for (std::int64_t n = pp; n <= S; n += pp) {
      const std::int64_t device_tokens = S / (n * sp);
      if (device_tokens > problem.max_device_tokens) continue;
      if (device_tokens < problem.min_device_tokens) break;
      const auto partition = flops_balanced_partition(S, n, flops);
      std::int64_t longest = 0;
      for (std::size_t i = 0; i < partition.count(); ++i) longest = std::max(longest, partition.length(i));
      const double compute = gpu.compute_seconds(partition.max_cost(flops) / sp);
      const auto activation = static_cast<std::uint64_t>(static_cast<double>(longest) * h * e);
      const double comm = sp == 1 ? 0.0
                                  : 2.0 * collective_seconds(collective_kind::all_gather, activation, sp,
                                                             gpu.interconnect_bytes_per_second) +
                                        2.0 * collective_seconds(collective_kind::reduce_scatter, activation, sp,
                                                                 gpu.interconnect_bytes_per_second);
      const double forward = stage_layers * (compute + comm + problem.layer_overhead_seconds);
      const double backward = stage_layers * (2.0 * compute + comm + problem.layer_overhead_seconds);
      const std::vector<sppo_op_cost> costs(static_cast<std::size_t>(n), {forward, backward});
      const auto schedule =
          build_sppo_schedule({.stages = pp, .subsequences = static_cast<int>(n), .costs = costs, .multiplexed = true});

      sppo_candidate c;
      c.sp = sp, c.pp = pp, c.n = static_cast<int>(n);
      c.step_seconds = schedule.schedule.simulate(gpu).makespan_seconds();
      c.bubble_ratio = static_cast<double>(pp - 1) / static_cast<double>(n);
      const double weights = 16.0 * stage_layers * detail::layer_parameters(l) / sp;
      const double kv_resident = stage_layers * static_cast<double>(S) * kv_per_token / sp;
      const double skeletal_two = stage_layers * 2.0 * static_cast<double>(longest) * skeletal_per_token / sp;
      c.device_bytes = weights + kv_resident + skeletal_two;
      c.host_bytes_per_gpu = stage_layers * static_cast<double>(S) * skeletal_per_token / sp;
      if (c.device_bytes > static_cast<double>(gpu.device_memory_bytes)) {
        c.limit = "device memory";
      } else if (c.host_bytes_per_gpu > static_cast<double>(gpu.host_memory_bytes_per_gpu())) {
        c.limit = "host memory";
      } else {
        c.fits = true;
      }
      if (c.fits && (!solution.best || c.step_seconds < solution.best->step_seconds)) solution.best = c;
      solution.candidates.push_back(std::move(c));
    }
  }
  return solution;
}

}  // namespace memo
