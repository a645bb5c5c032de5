// memo/project/strategy.hpp
//
// What one training step of a model needs and takes on a cluster under one
// parallel/memory strategy, in closed form:
//
//  memo           MEMO 4: Megatron TP x CP; every layer's input and
//                 FlashAttention output offloaded whole, alpha of the other
//                 skeletal tokens offloaded and 1 - alpha recomputed (alpha
//                 from the LP of section 4.1, swap/alpha_solver.hpp), two
//                 rounding buffers of skeletal activations on the GPU, and
//                 transient activations in a statically planned arena
//                 (section 4.2: no fragmentation).
//  recompute      Megatron-LM TP x CP with full recomputation and PyTorch's
//                 caching allocator (MEMO Table 4 row 1).
//  ulysses-zero3  DeepSpeed-Ulysses (SP <= heads) over ZeRO-3, full
//                 recomputation, caching allocator.
//  fpdt           FPDT 4: Ulysses with the sequence cut in chunks (64K by
//                 default, FPDT 5.3), layer inputs and K/V of idle chunks
//                 in host memory, double-buffered chunk working set.
//  recompute-planned, swap-planned: MEMO Table 4's ablations (full
//                 recomputation / full swapping, both with the planned
//                 arena); used by the fidelity bench.
//
// Memory constants (bytes per token per GPU shard, bf16): skeletal
// activations 16 elements x h per layer (MEMO 3, Figure 5): input 2h,
// attention output 2h, others 28h; the backward working set of a layer
// (gradients mirroring the skeletal tensors) 32h; logits 2 V bytes per
// token; mixed-precision Adam 2 (bf16 params) + 4 (fp32 main grads) + 12
// (fp32 master, m, v) bytes per parameter; 3 GiB per GPU of CUDA context,
// NCCL buffers and workspaces. The caching allocator's reserve is the
// planned size times `caching_fragmentation` (1.7): MEMO Table 4 (rows 1-2,
// 384K without vs 640K with memory planning) is the only figure behind it,
// so it is a calibration, not a prediction; docs/projections.md says so.
//
// Time: GEMM and attention FLOPs at their own efficiencies; TP collectives
// (Megatron SP: 4 per layer forward, 2 x in backward) exposed; the CP ring
// K/V exchange and Ulysses all-to-alls exposed only beyond the attention
// they overlap (CP) or fully (Ulysses); offload exposed only beyond the
// forward it overlaps; ZeRO-3 gathers overlapped with compute. Optimizer
// step and gradient reduction are left out (below 1% at these lengths).
// MFU counts model FLOPs (3 x forward), never recomputation.
//
// Extension point: a new strategy (SPPO, pipeline/sppo_*.hpp) adds an enum
// value, a name in `strategy_names`, and a function returning
// `std::vector<projection>` (one per setting it considers) called from
// `project_settings`; the search, the CLI and the bench need nothing else.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "memo/core/bytes.hpp"
#include "memo/core/error.hpp"
#include "memo/project/cluster_profile.hpp"
#include "memo/project/model_shape.hpp"
#include "memo/swap/alpha_solver.hpp"

namespace memo::project {

enum class strategy { memo, recompute, ulysses_zero3, fpdt, recompute_planned, swap_planned };

inline constexpr std::string_view strategy_name(strategy s) {
  switch (s) {
    case strategy::memo: return "memo";
    case strategy::recompute: return "recompute";
    case strategy::ulysses_zero3: return "ulysses-zero3";
    case strategy::fpdt: return "fpdt";
    case strategy::recompute_planned: return "recompute-planned";
    case strategy::swap_planned: return "swap-planned";
  }
  return "?";
}

/// The strategies the CLI offers with `--strategy all`.
inline std::vector<strategy> public_strategies() {
  return {strategy::memo, strategy::recompute, strategy::ulysses_zero3, strategy::fpdt};
}

inline std::optional<strategy> parse_strategy(std::string_view name) {
  for (auto s : {strategy::memo, strategy::recompute, strategy::ulysses_zero3, strategy::fpdt,
                 strategy::recompute_planned, strategy::swap_planned}) {
    if (strategy_name(s) == name) return s;
  }
  return std::nullopt;
}

struct cluster {
  cluster_profile profile;
  int gpus = 1;
  int gpus_per_node = 8;  ///< overrides the profile's when given on the command line

  [[nodiscard]] int gpus_in_a_node() const { return std::min(gpus, gpus_per_node); }
  [[nodiscard]] bool spans_nodes(int group) const { return group > gpus_per_node; }
  void check() const {
    profile.check();
    expects(gpus >= 1 && gpus_per_node >= 1, [&] {
      return "cluster: gpus and gpus_per_node must be positive, got " + std::to_string(gpus) +
             " and " + std::to_string(gpus_per_node);
    });
    // The setting enumeration walks the divisors of the GPU count.
    expects(gpus <= (1 << 20), [&] {
      return "cluster: at most 1048576 GPUs, got " + std::to_string(gpus);
    });
  }
};

/// Per-GPU device memory, bytes.
struct memory_breakdown {
  double params = 0, grads = 0, optimizer = 0;
  double skeletal = 0;   ///< activations kept for backward (checkpoints, rounding buffers)
  double transient = 0;  ///< the working set of the layer being computed, logits
  double framework = 0;  ///< CUDA context, NCCL, workspaces
  double planned_arena = 0;    ///< skeletal + transient as a static plan places them
  double caching_reserve = 0;  ///< what a caching allocator reserves for the same requests
  bool planned = true;         ///< which of the two the strategy pays
  [[nodiscard]] double activations() const { return planned ? planned_arena : caching_reserve; }
  [[nodiscard]] double total() const { return params + grads + optimizer + framework + activations(); }
};

struct settings {
  int tp = 1, cp = 1, sp = 1, dp = 1;
  double alpha = 0.0;          ///< memo: fraction of the other skeletal tokens offloaded
  double chunk_tokens = 0.0;   ///< fpdt: global tokens per chunk
};

struct projection {
  strategy kind = strategy::memo;
  double sequence = 0;
  settings chosen;
  memory_breakdown device;
  double device_capacity = 0;
  double host_per_node = 0;
  double host_capacity = 0;
  double step_seconds = 0;
  double tokens_per_gpu_per_second = 0;
  double mfu = 0;
  std::string limit;  ///< empty when it fits, else the first resource that runs out
  [[nodiscard]] bool fits() const { return limit.empty(); }
  /// How far past capacity the worst resource is (<= 1 when it fits).
  [[nodiscard]] double pressure() const {
    return std::max(device.total() / device_capacity, host_per_node / host_capacity);
  }
};

inline constexpr double caching_fragmentation = 1.7;
/// Bytes per token per unit of hidden size in the backward working set of one layer.
inline constexpr double working_bytes_per_token_hidden = 32.0;
inline constexpr double framework_bytes = 3.0 * static_cast<double>(gib);
inline constexpr double fpdt_default_chunk = 65536.0;

namespace detail {

inline double compute_seconds(const cluster_profile& p, double gemm, double attention) {
  return gemm / (p.peak_flops * p.gemm_efficiency) + attention / (p.peak_flops * p.attention_efficiency);
}

inline void finish(projection& r, const model_shape& m, const cluster& c) {
  r.device_capacity = c.profile.device_memory_bytes;
  r.host_capacity = c.profile.host_memory_bytes;
  r.tokens_per_gpu_per_second = r.sequence * r.chosen.dp / (r.step_seconds * c.gpus);
  r.mfu = m.model_flops(r.sequence) * r.chosen.dp / (r.step_seconds * c.gpus * c.profile.peak_flops);
  if (r.device.total() > r.device_capacity) {
    r.limit = "device memory";
  } else if (r.host_per_node > r.host_capacity) {
    r.limit = "host memory";
  }
}

/// Megatron TP x CP, one strategy of memo / recompute / recompute-planned / swap-planned.
inline projection megatron(strategy kind, const model_shape& m, const cluster& c, double s, int tp) {
  const int cp = c.gpus / tp;
  const double h = m.hidden, L = m.layers, P = m.parameters();
  const double t = s / (tp * cp);  // token shards per GPU
  projection r;
  r.kind = kind;
  r.sequence = s;
  r.chosen.tp = tp;
  r.chosen.cp = cp;
  auto& d = r.device;
  d.params = 2 * P / tp;
  d.grads = 4 * P / tp;
  d.optimizer = 12 * P / (tp * cp);  // distributed optimizer over the CP ranks
  d.framework = framework_bytes;
  const double layer_skeletal = 32 * h * t, working = working_bytes_per_token_hidden * h * t, logits = 2.0 * m.vocab * t;
  const double input = 2 * h * t, attention_out = 2 * h * t, others = 28 * h * t;

  // Per layer, per GPU compute.
  const double gemm = m.layer_gemm_flops(s) / (tp * cp);
  const double attention = m.layer_attention_flops(s) / (tp * cp);
  const auto& p = c.profile;
  const double tp_link = p.intra_node_bytes_per_second;
  const double tp_comm = tp > 1 ? 4 * 2 * h * s / cp * (tp - 1.0) / tp / tp_link : 0.0;
  const double cp_link = c.spans_nodes(tp * cp) ? p.inter_node_bytes_per_second : p.intra_node_bytes_per_second;
  const double ring = cp > 1 ? 2 * 2 * (s / cp) * (h / tp) * (cp - 1.0) / cp_link : 0.0;
  const double t_gemm = compute_seconds(p, gemm, 0), t_attn = compute_seconds(p, 0, attention);
  const double fwd = t_gemm + t_attn + tp_comm + std::max(0.0, ring - t_attn);
  const double bwd = 2 * (t_gemm + t_attn + tp_comm) + std::max(0.0, 2 * ring - 2 * t_attn);
  const double classifier = compute_seconds(p, 3 * m.classifier_flops(s) / (tp * cp), 0);
  const int gpus_node = c.gpus_in_a_node();
  const double swapped = std::max(0.0, L - 2);

  double recompute = 0, stall = 0;
  if (kind == strategy::memo || kind == strategy::swap_planned) {
    alpha_problem lp;
    lp.input_bytes = static_cast<std::uint64_t>(input);
    lp.attention_output_bytes = static_cast<std::uint64_t>(attention_out);
    lp.other_bytes = static_cast<std::uint64_t>(others);
    lp.bandwidth_bytes_per_second = p.host_link_bytes_per_second;
    lp.layer_forward_seconds = fwd;
    lp.layers = m.layers;
    lp.resident_last_layers = 2;
    lp.host_budget_bytes = static_cast<std::uint64_t>(p.host_memory_bytes / gpus_node);
    double alpha = 1.0;
    if (kind == strategy::memo) {
      // The LP's constraints (2)-(3) in closed form; when even alpha = 0
      // outlasts the layer, the offload stalls (MEMO 5.3.2, short sequences)
      // and alpha stays 0; when it overflows the host, the host limit is hit.
      const double whole = lp.offload_bytes(0.0);
      const double by_bandwidth = (lp.bandwidth_bytes_per_second * fwd - whole) / others;
      const double by_host = swapped > 0 ? (static_cast<double>(lp.host_budget_bytes) / swapped - whole) / others : 1.0;
      alpha = std::clamp(std::min({1.0, by_bandwidth, by_host}), 0.0, 1.0);
    }
    r.chosen.alpha = alpha;
    stall = std::max(0.0, lp.transfer_seconds(alpha) - fwd);
    recompute = (1 - alpha) * (t_gemm + tp_comm);
    r.host_per_node = swapped * lp.offload_bytes(alpha) * gpus_node;
    d.skeletal = 2 * layer_skeletal;  // two rounding buffers
    d.transient = working + logits;
  } else {
    recompute = fwd;  // the whole layer again in backward
    d.skeletal = L * input + layer_skeletal;  // checkpoints + the layer being recomputed
    d.transient = working + logits;
    r.host_per_node = 0;
  }
  d.planned_arena = d.skeletal + d.transient;
  d.caching_reserve = caching_fragmentation * d.planned_arena;
  d.planned = kind != strategy::recompute;
  r.step_seconds = L * (fwd + bwd + recompute + 2 * stall) + classifier;
  finish(r, m, c);
  return r;
}

/// Ulysses (optionally FPDT-chunked) over ZeRO-3 with full recomputation.
inline projection ulysses(strategy kind, const model_shape& m, const cluster& c, double s, int sp,
                          double chunk) {
  const int dp = c.gpus / sp;
  const double h = m.hidden, L = m.layers, P = m.parameters();
  const double t = s / sp;
  projection r;
  r.kind = kind;
  r.sequence = s;
  r.chosen.sp = sp;
  r.chosen.dp = dp;
  auto& d = r.device;
  d.params = 2 * P / c.gpus;
  d.grads = 4 * P / c.gpus;
  d.optimizer = 12 * P / c.gpus;
  d.framework = framework_bytes + 2 * 2 * 12 * h * h;  // two gathered layers (prefetch)
  const auto& p = c.profile;
  const double link = c.spans_nodes(sp) ? p.inter_node_bytes_per_second : p.intra_node_bytes_per_second;
  const double a2a = sp > 1 ? 4 * 2 * h * t * (sp - 1.0) / sp / link : 0.0;
  const double t_gemm = compute_seconds(p, m.layer_gemm_flops(s) / sp, 0);
  const double t_attn = compute_seconds(p, 0, m.layer_attention_flops(s) / sp);
  const double fwd = t_gemm + t_attn + a2a;
  const double bwd = 2 * (t_gemm + t_attn + a2a);
  const double classifier = compute_seconds(p, 3 * m.classifier_flops(s) / sp, 0);
  const int gpus_node = c.gpus_in_a_node();
  if (kind == strategy::fpdt) {
    const double local_chunk = std::min(chunk, s) / sp;
    r.chosen.chunk_tokens = std::min(chunk, s);
    // On the GPU: the current layer's input and output for the local
    // sequence, and two chunks' working set (double buffer).
    d.skeletal = 2 * 2 * h * t;
    d.transient = 2 * (32 * h + working_bytes_per_token_hidden * h) * local_chunk + 2.0 * m.vocab * local_chunk;
    // On the host: every layer's input, and the K/V of the current layer.
    r.host_per_node = (L * 2 * h * t + 2 * 2 * h * t) * gpus_node;
    // Fetches of earlier chunks' K/V overlap the chunk's attention.
    const double fetch = 2 * 2 * h * t / p.host_link_bytes_per_second;
    const double stall = std::max(0.0, fetch - t_attn);
    r.step_seconds = L * (fwd + bwd + fwd + 3 * stall) + classifier;
  } else {
    d.skeletal = L * 2 * h * t + 32 * h * t;
    d.transient = working_bytes_per_token_hidden * h * t + 2.0 * m.vocab * t;
    r.step_seconds = L * (fwd + bwd + fwd) + classifier;
  }
  d.planned_arena = d.skeletal + d.transient;
  d.caching_reserve = caching_fragmentation * d.planned_arena;
  d.planned = false;
  finish(r, m, c);
  return r;
}

}  // namespace detail

/// Every setting `kind` considers for a sequence of `s` tokens.
inline std::vector<projection> project_settings(strategy kind, const model_shape& m, const cluster& c,
                                                double s) {
  m.check();
  c.check();
  expects(s >= 1, [&] { return "sequence length must be positive, got " + std::to_string(s); });
  std::vector<projection> out;
  switch (kind) {
    case strategy::memo:
    case strategy::recompute:
    case strategy::recompute_planned:
    case strategy::swap_planned:
      // TP within a node, dividing the heads and the GPUs; CP takes the rest.
      for (int tp = 1; tp <= std::min(c.gpus_per_node, m.heads); tp *= 2) {
        if (c.gpus % tp == 0 && m.heads % tp == 0) out.push_back(detail::megatron(kind, m, c, s, tp));
      }
      break;
    case strategy::ulysses_zero3:
    case strategy::fpdt:
      // SP divides the heads and the GPUs; the rest is data parallel.
      for (int sp = 1; sp <= std::min(c.gpus, m.heads); ++sp) {
        if (c.gpus % sp == 0 && m.heads % sp == 0) {
          out.push_back(detail::ulysses(kind, m, c, s, sp, fpdt_default_chunk));
        }
      }
      break;
  }
  return out;
}

/// The best setting: the fitting one of highest MFU, else the one closest to fitting.
inline std::optional<projection> project(strategy kind, const model_shape& m, const cluster& c, double s) {
  auto all = project_settings(kind, m, c, s);
  std::optional<projection> best;
  for (auto& r : all) {
    if (!best) {
      best = r;
    } else if (r.fits() != best->fits()) {
      if (r.fits()) best = r;
    } else if (r.fits() ? r.mfu > best->mfu : r.pressure() < best->pressure()) {
      best = r;
    }
  }
  return best;  // nullopt: no setting divides the GPUs
}

/// The longest sequence, a multiple of `grid` up to `limit`, that fits;
/// nullopt when not even one grid step does. Fitting is monotone in the
/// length for every setting (every memory term grows with it), so a binary
/// search over the grid is exact.
inline std::optional<projection> longest(strategy kind, const model_shape& m, const cluster& c,
                                         double grid = 65536, double limit = 1024.0 * 1048576) {
  auto fits = [&](double steps) {
    auto r = project(kind, m, c, steps * grid);
    return r && r->fits() ? r : std::nullopt;
  };
  auto lo = fits(1);
  if (!lo) return std::nullopt;
  double good = 1, bad = std::floor(limit / grid) + 1;
  while (bad - good > 1) {
    const double mid = std::floor((good + bad) / 2);
    if (auto r = fits(mid)) {
      good = mid;
      lo = r;
    } else {
      bad = mid;
    }
  }
  return lo;
}

}  // namespace memo::project
