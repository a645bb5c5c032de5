// memo/pipeline/sppo_solver.hpp
//
// SPPO's heuristic solver for (SP, PP, N) (section 6.1): given a model, a
// sequence length and a cluster, pick the sequence-parallel degree SP, the
// pipeline depth PP and the subsequence count N that minimise the step time,
// searching only where the section's heuristics allow:
//
//   - no cross-node sequence parallelism: SP divides the GPUs of a node, so
//     every SP group (= one pipeline stage) lives in one node;
//   - no cross-node pipeline stage: with SP | gpus_per_node a stage never
//     spans two nodes, and SP x PP = all GPUs (one long sequence, no data
//     parallelism); stage hand-offs that do cross nodes pay the inter-node
//     bandwidth in the cost model;
//   - near-balanced workloads: the tokens each GPU computes per subsequence
//     per layer, s / (N x SP), lie in [min_tokens, max_tokens] (2K..16K in
//     the paper); N >= PP (the phases of Table 3 need it); PP divides the
//     layers.
//
// Every candidate is costed by the stream-schedule simulator
// (sppo_schedule.hpp) on the FLOPs-balanced partition (sppo_partition.hpp):
// per subsequence and stage, forward = layers/PP x (GEMM + causal attention
// FLOPs) / SP at the profile's achieved rate, plus a fixed per-layer launch
// overhead, plus SP's four all-to-alls per layer (Ulysses-style); backward =
// twice the compute with the same all-to-alls. K/V stay resident
// (sppo_offload.hpp), so a candidate whose K/V plus model states exceed the
// device memory is rejected.
//
// Guarantees: the result is the minimum of the simulated step time over the
// restricted space (ties: larger SP, then smaller N), every evaluated
// candidate is returned for inspection, and an empty space is a memo::error
// naming the restriction that emptied it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "memo/core/device_profile.hpp"
#include "memo/core/error.hpp"
#include "memo/pipeline/sppo_partition.hpp"
#include "memo/pipeline/sppo_schedule.hpp"

namespace memo {

struct sppo_solver_input {
  std::uint64_t sequence_length = 0;
  std::uint64_t hidden = 0;
  int layers = 0;
  int nodes = 1;
  device_profile profile{};                 ///< gpus_per_node, rates, device memory
  std::uint64_t min_tokens = 2048;          ///< per GPU, per subsequence, per layer
  std::uint64_t max_tokens = 16384;
  double layer_overhead_seconds = 0.0;      ///< fixed launch cost per layer per subsequence
  double inter_node_bytes_per_second = 25e9;  ///< P2P between stages on different nodes
  std::uint64_t bytes_per_element = 2;
  double model_state_bytes_per_parameter = 16.0;  ///< mixed-precision Adam
  /// The most candidates one search may simulate: a narrow token range
  /// (small min_tokens) on a long sequence would otherwise simulate every
  /// N up to the sequence length, each an O(PP N) schedule.
  std::uint64_t max_candidates = 100000;

  void check() const {
    expects(sequence_length > 0 && hidden > 0 && layers > 0 && nodes > 0, [&] {
      return "sppo_solver_input: sequence_length, hidden, layers, nodes must be positive, got " +
             std::to_string(sequence_length) + ", " + std::to_string(hidden) + ", " + std::to_string(layers) +
             ", " + std::to_string(nodes);
    });
    expects(min_tokens >= 1 && min_tokens <= max_tokens, [&] {
      return "sppo_solver_input: need 1 <= min_tokens <= max_tokens, got " + std::to_string(min_tokens) + ", " +
             std::to_string(max_tokens);
    });
    auto finite_at_least = [](double value, double low, bool strict, const char* name) {
      expects(std::isfinite(value) && (strict ? value > low : value >= low), [&] {
        return std::string("sppo_solver_input: ") + name + " must be a finite number " + (strict ? "> " : ">= ") +
               std::to_string(low) + ", got " + std::to_string(value);
      });
    };
    finite_at_least(layer_overhead_seconds, 0.0, false, "layer_overhead_seconds");
    if (nodes > 1) finite_at_least(inter_node_bytes_per_second, 0.0, true, "inter_node_bytes_per_second");
    finite_at_least(model_state_bytes_per_parameter, 0.0, false, "model_state_bytes_per_parameter");
    expects(bytes_per_element >= 1, "sppo_solver_input: bytes_per_element must be >= 1, got 0");
    expects(max_candidates >= 1, "sppo_solver_input: max_candidates must be >= 1, got 0");
    profile.check();
    const double link = profile.interconnect_bytes_per_second;
    expects(nodes * profile.gpus_per_node == 1 || (std::isfinite(link) && link > 0.0), [&] {
      return "sppo_solver_input: profile '" + profile.name +
             "' needs a finite interconnect_bytes_per_second > 0 for more than one GPU, got " + std::to_string(link);
    });
  }
};

struct sppo_candidate {
  int sp = 1, pp = 1, n = 1;
  double step_seconds = 0.0;
  double bubble_ratio = 0.0;
  friend bool operator==(const sppo_candidate&, const sppo_candidate&) = default;
};

struct sppo_solution {
  sppo_candidate best;
  std::vector<sppo_candidate> evaluated;
};

/// Per-subsequence forward/backward seconds of one stage for (SP, PP, N).
inline sppo_schedule_options sppo_candidate_schedule(const sppo_solver_input& in, int sp, int pp, int n) {
  const auto partition = flops_balanced_partition(in.sequence_length, static_cast<std::size_t>(n),
                                                  causal_cost_weights::for_hidden(in.hidden));
  const double h = static_cast<double>(in.hidden);
  const double layers_per_stage = static_cast<double>(in.layers) / pp;
  sppo_schedule_options o;
  o.stages = pp;
  double widest_tokens = 0.0;
  for (std::size_t j = 0; j < partition.count(); ++j) {
    // causal_cost's unit is 4h FLOPs (6h : 1 weights, see sppo_partition.hpp).
    const double flops = static_cast<double>(causal_cost(partition.begin(j), partition.end(j),
                                                         causal_cost_weights::for_hidden(in.hidden))) *
                         4.0 * h * layers_per_stage / sp;
    const double tokens_per_gpu = static_cast<double>(partition.tokens(j)) / sp;
    widest_tokens = std::max(widest_tokens, tokens_per_gpu);
    double comm = 0.0;
    if (sp > 1) {
      const auto bytes = static_cast<std::uint64_t>(tokens_per_gpu * h * static_cast<double>(in.bytes_per_element));
      comm = 4.0 * layers_per_stage *
             collective_seconds(collective_kind::all_to_all, bytes, sp, in.profile.interconnect_bytes_per_second);
    }
    const double overhead = in.layer_overhead_seconds * layers_per_stage;
    const double compute = in.profile.compute_seconds(flops);
    o.forward_seconds.push_back(compute + overhead + comm);
    o.backward_seconds.push_back(2.0 * compute + overhead + comm);
  }
  // Stage hand-offs: a stage is one SP group; boundaries between nodes pay
  // the inter-node link (the slowest hop bounds the pipeline's latency).
  const bool crosses_nodes = pp > 1 && sp * pp > in.profile.gpus_per_node;
  const double link = crosses_nodes ? in.inter_node_bytes_per_second : in.profile.interconnect_bytes_per_second;
  if (pp > 1) o.p2p_seconds = widest_tokens * h * static_cast<double>(in.bytes_per_element) / link;
  return o;
}

/// Whether (SP, PP, N) passes section 6.1's restrictions; `why` says which failed.
inline bool sppo_candidate_allowed(const sppo_solver_input& in, int sp, int pp, int n, std::string* why = nullptr) {
  auto fail = [&](std::string reason) {
    if (why) *why = std::move(reason);
    return false;
  };
  const int gpus = in.nodes * in.profile.gpus_per_node;
  if (sp < 1 || in.profile.gpus_per_node % sp != 0) return fail("SP must divide the GPUs of one node");
  if (sp * pp != gpus) return fail("SP x PP must use every GPU");
  if (in.layers % pp != 0) return fail("PP must divide the layers");
  if (n < pp) return fail("N must be >= PP");
  const std::uint64_t per_gpu = in.sequence_length / (static_cast<std::uint64_t>(n) * sp);
  if (per_gpu < in.min_tokens || per_gpu > in.max_tokens) return fail("tokens per GPU per subsequence outside range");
  const double h = static_cast<double>(in.hidden);
  const double kv = 2.0 * static_cast<double>(in.sequence_length) / sp * h * static_cast<double>(in.bytes_per_element) *
                    in.layers / pp;
  const double states = 12.0 * h * h * in.layers / pp * in.model_state_bytes_per_parameter;
  if (kv + states > static_cast<double>(in.profile.device_memory_bytes)) {
    return fail("K/V and model states exceed device memory");
  }
  return true;
}

/// The (SP, PP, N) with the least simulated step time (see the header comment).
inline sppo_solution solve_sppo(const sppo_solver_input& in) {
  in.check();
  const int gpus = in.nodes * in.profile.gpus_per_node;
  sppo_solution out;
  bool found = false;
  std::string last_reason = "no SP divides the GPUs of a node";
  // Per SP, the N whose tokens per GPU floor(s / (N SP)) lie in
  // [min_tokens, max_tokens]: N > floor(floor(s / SP) / (max + 1)) and
  // N <= floor(floor(s / SP) / min).
  struct n_range {
    int sp;
    std::uint64_t low, high;
  };
  std::vector<n_range> ranges;
  std::uint64_t candidates = 0;  // stops growing once the next range would pass max_candidates
  bool too_many = false;
  for (int sp = in.profile.gpus_per_node; sp >= 1; --sp) {
    if (gpus % sp != 0) continue;
    const std::uint64_t per_rank = in.sequence_length / static_cast<std::uint64_t>(sp);
    // max >= floor(s / SP) admits every N (and max + 1 would wrap at 2^64 - 1).
    const std::uint64_t low = in.max_tokens >= per_rank ? 1 : per_rank / (in.max_tokens + 1) + 1;
    const std::uint64_t high = per_rank / in.min_tokens;
    if (high < low) continue;
    ranges.push_back({sp, low, high});
    const std::uint64_t count = high - low + 1;
    too_many = too_many || count > in.max_candidates - candidates;
    if (!too_many) candidates += count;
  }
  expects(!too_many, [&] {
    return "solve_sppo: more than max_candidates " + std::to_string(in.max_candidates) +
           " subsequence counts to simulate for " + std::to_string(in.sequence_length) + " tokens with " +
           std::to_string(in.min_tokens) + " to " + std::to_string(in.max_tokens) +
           " tokens per GPU (raise min_tokens)";
  });
  for (const auto& range : ranges) {
    expects(range.high <= static_cast<std::uint64_t>(std::numeric_limits<int>::max()), [&] {
      return "solve_sppo: subsequence counts up to " + std::to_string(range.high) + " (SP " +
             std::to_string(range.sp) + ") exceed " + std::to_string(std::numeric_limits<int>::max()) +
             " (raise min_tokens)";
    });
  }
  for (const auto& [sp, n_low, n_high] : ranges) {
    const int pp = gpus / sp;
    for (std::uint64_t n = n_low; n <= n_high; ++n) {
      if (!sppo_candidate_allowed(in, sp, pp, static_cast<int>(n), &last_reason)) continue;
      const auto figures = simulate_sppo(sppo_candidate_schedule(in, sp, pp, static_cast<int>(n)), in.profile);
      sppo_candidate c{sp, pp, static_cast<int>(n), figures.step_seconds, figures.bubble_ratio};
      out.evaluated.push_back(c);
      if (!found || c.step_seconds < out.best.step_seconds * (1.0 - 1e-12)) {
        out.best = c;
        found = true;
      }
    }
  }
  expects(found, [&] {
    return "solve_sppo: no (SP, PP, N) satisfies section 6.1's restrictions for " +
           std::to_string(in.sequence_length) + " tokens on " + std::to_string(gpus) + " GPUs (last reason: " +
           last_reason + ")";
  });
  return out;
}

}  // namespace memo
