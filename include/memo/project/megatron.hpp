// memo/project/megatron.hpp
//
// One step of a model under Megatron-LM's tensor x context parallelism
// (TP with Megatron sequence parallelism, CP as ring attention), with one
// of four ways to keep the skeletal activations:
//
//  memo               MEMO 4: every layer's input and FlashAttention output
//                     offloaded whole, alpha of the other skeletal tokens
//                     offloaded and 1 - alpha recomputed (alpha by MEMO eq.
//                     (1)-(3), swap/alpha_solver.hpp's closed form), the
//                     last two layers never swapped; two rounding buffers,
//                     except that at alpha = 0 the "other" tensors share one
//                     (MEMO 4.1's special case), so alpha = 0 is also tried
//                     as a setting of its own; a static plan (MEMO 4.2).
//  swap-planned       the same with alpha = 1 (MEMO Table 4 row 3).
//  recompute-planned  every layer's input kept, the layer recomputed whole
//                     in its backward, a static plan (Table 4 row 2).
//  recompute          the same on a caching allocator (Table 4 row 1, and
//                     Megatron-LM as the papers run it).
//
// Per GPU with T = s / CP local tokens and TP-way splits (byte counts of
// the skeletal tensors from core/transformer_layer.hpp):
//  states     bf16 parameters 2P/TP, fp32 main gradients 4P/TP, Adam 12P
//             over TP x CP (the distributed optimizer shards over the
//             data- and context-parallel ranks; MEMO Table 7 runs ZeRO-1).
//  working    the backward of the MLP, the largest phase of a layer: dy
//             [T/TP, h], the gradients of the activation and of fc1
//             [T, f/TP] each (gate and up both under SwiGLU), the
//             sequence-parallel input gathered again for the weight
//             gradient [T, h] (TP > 1) and its gradient [T, h].
//  loss       logits [T, V/TP] at 6 B (projection.hpp), the gathered final
//             norm output and its gradient [T, h]: Megatron-LM computes the
//             loss over the whole local sequence at once.
//  The transient peak is the larger of working and loss (they are never
//  live together); the skeletal part is what the policy keeps.
//
// Time per layer: GEMMs and attention at their efficiencies; the four
// sequence-parallel collectives of [T, h] (two all-gathers, two
// reduce-scatters) forward and four backward, exposed; CP's ring passes the
// K/V shards CP - 1 times forward (K/V and their gradients backward),
// exposed only beyond the attention it overlaps; MEMO's offload of layer i
// overlaps layer i+1's forward and its prefetch layer i+1's backward, and
// only what outlasts them stalls. MEMO recomputes, for 1 - alpha of the
// tokens, the QKV, projection and fc1 GEMMs with three of the four
// collectives (schedule/layer_cost.hpp's recompute set). The classifier
// runs 3 x 2 s h V / (TP CP) FLOPs at the GEMM rate. Optimizer step and
// gradient reduction are left out (under 1% at these lengths).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "memo/core/transformer_layer.hpp"
#include "memo/project/projection.hpp"
#include "memo/swap/alpha_solver.hpp"

namespace memo::project {

namespace detail {

/// One layer of Megatron TP x CP on one GPU: times (seconds) and sizes (bytes).
struct megatron_layer {
  double gemm = 0, attention = 0, tp_comm = 0, ring_forward = 0, ring_backward = 0;
  double forward = 0, backward = 0, recompute_gemm_share = 0;
  double input = 0, attention_output = 0, other = 0;  // skeletal bytes, MEMO eq. (2)'s S_*
  double working = 0, loss = 0;
};

inline megatron_layer megatron_layer_of(const model_shape& m, const cluster& c, double s, int tp, int cp) {
  const auto& p = c.profile;
  const double h = m.hidden, f = m.ffn_width();
  const std::int64_t tokens = padded_tokens(s, static_cast<std::int64_t>(tp) * cp);
  const transformer_layer layer = m.layer(tokens, tp, cp);
  const double T = static_cast<double>(tokens) / cp;
  megatron_layer l;
  l.input = static_cast<double>(layer.input_bytes());
  l.attention_output = static_cast<double>(layer.attention_output_bytes());
  l.other = static_cast<double>(layer.other_bytes());
  l.gemm = gemm_seconds(p, m.layer_gemm_flops(static_cast<double>(tokens)) / (tp * cp));
  l.attention = attention_seconds(p, m.layer_attention_flops(static_cast<double>(tokens)) / (tp * cp));
  // Four collectives of [T, h] over the TP group (inside a node).
  l.tp_comm = 4 * collective(collective_kind::all_gather, T * h * bytes_per_element, tp, c.link_for(tp));
  if (cp > 1) {
    const double kv_shard = 2 * T * m.kv_width() / tp * bytes_per_element;
    const double link = c.link_for(tp * cp);
    l.ring_forward = (cp - 1) * kv_shard / link;
    l.ring_backward = 2 * l.ring_forward;
  }
  l.forward = l.gemm + l.attention + l.tp_comm + std::max(0.0, l.ring_forward - l.attention);
  l.backward = 2 * l.gemm + attention_backward_factor * l.attention + l.tp_comm +
               std::max(0.0, l.ring_backward - attention_backward_factor * l.attention);
  // QKV, projection and fc1 are recomputed; fc2 (h x f) is not.
  l.recompute_gemm_share = (m.layer_parameters() - h * f) / m.layer_parameters();
  const double mlp_width = m.gated_mlp ? 2 * f : f;
  l.working = T * (2 * h / tp + 2 * 2 * mlp_width / tp + (tp > 1 ? 2 * h : 0.0) + 2 * h);
  l.loss = T * (loss_bytes_per_logit * m.vocab / tp + (tp > 1 ? 2 * h : 0.0) + 2 * h);
  return l;
}

/// MEMO eq. (1)-(3) and the backward's row (4) (swap/alpha_solver.hpp) for
/// one layer: the LP's alpha, or 0 when even the whole-offloaded tensors
/// outlast the forward (the LP has no answer; MEMO then stalls, 5.3.2) or
/// overflow the host (the host runs out). Row (4) carries one prefetch (two
/// rounding buffers, the last two layers resident) and no attention fetches
/// (FlashAttention keeps nothing on the host) over the same link, within the
/// layer's backward; it binds only where a layer's backward is shorter than
/// its forward, which a Megatron layer's never is, so it changes no answer
/// here but keeps the strategy on the library's LP.
inline double memo_alpha(const model_shape& m, const cluster& c, const megatron_layer& l, int used_gpus) {
  alpha_problem lp;
  lp.input_bytes = byte_count(l.input, "a layer's input");
  lp.attention_output_bytes = byte_count(l.attention_output, "a layer's attention output");
  lp.other_bytes = byte_count(l.other, "a layer's other skeletal tensors");
  lp.bandwidth_bytes_per_second = c.profile.host_link_bytes_per_second;
  lp.layer_forward_seconds = l.forward;
  lp.layer_backward_seconds = l.backward;
  lp.host_to_device_bytes_per_second = c.profile.host_link_bytes_per_second;
  lp.layers = m.layers;
  lp.resident_last_layers = 2;
  lp.rounding_buffers = 2;
  lp.host_budget_bytes = static_cast<std::uint64_t>(c.profile.host_memory_bytes / c.gpus_in_a_node(used_gpus));
  if (lp.transfer_seconds(0.0) > lp.layer_forward_seconds) return 0.0;
  if (lp.host_bytes(0.0) > static_cast<double>(lp.host_budget_bytes)) return 0.0;
  return alpha_closed_form(lp).alpha;
}

/// `kind` (memo, swap-planned, recompute, recompute-planned) at TP x CP x DP.
/// With `pp` > 1 (full recomputation only) the layers are split into pp
/// stages of one sequence, so a stage holds 1/pp of the parameters and of
/// the checkpoints, and one stage computes at a time (one micro-batch: the
/// step is that of the unsplit model, the other stages' GPUs idle, which
/// MFU shows); the fullest stage is the last one, which also computes the
/// loss.
inline projection megatron(strategy kind, const model_shape& m, const cluster& c, double s, int tp, int cp, int dp,
                           std::optional<double> fixed_alpha = std::nullopt, int pp = 1) {
  const bool full_recompute = kind == strategy::recompute || kind == strategy::recompute_planned;
  expects(pp == 1 || full_recompute, "megatron projection: pipeline stages are modelled with full recomputation only");
  const megatron_layer l = megatron_layer_of(m, c, s, tp, cp);
  const double L = m.layers, P = m.parameters();
  projection r;
  r.kind = kind;
  r.sequence = s;
  r.chosen.tp = tp;
  r.chosen.cp = cp;
  r.chosen.dp = dp;
  r.chosen.pp = pp;
  auto& d = r.device;
  d.params = 2 * P / (static_cast<double>(tp) * pp);
  d.grads = 4 * P / (static_cast<double>(tp) * pp);
  d.optimizer = 12 * P / (static_cast<double>(tp) * cp * dp * pp);
  d.framework = framework_bytes;
  d.transient = std::max(l.working, l.loss);
  d.planned = kind != strategy::recompute;

  const double classifier = gemm_seconds(c.profile, 3 * m.classifier_flops(s) / (tp * cp));
  r.time.compute = L * (l.gemm + l.attention + 2 * l.gemm + attention_backward_factor * l.attention) + classifier;
  r.time.communication = L * (2 * l.tp_comm + std::max(0.0, l.ring_forward - l.attention) +
                               std::max(0.0, l.ring_backward - attention_backward_factor * l.attention));
  double recomputed_flops = 0;  // forward FLOPs done again, whole group
  if (kind == strategy::memo || kind == strategy::swap_planned) {
    const double alpha =
        kind == strategy::swap_planned ? 1.0 : fixed_alpha.value_or(memo_alpha(m, c, l, r.chosen.gpus()));
    r.chosen.alpha = alpha;
    const double offload = l.input + l.attention_output + alpha * l.other;
    const double link = c.profile.host_link_bytes_per_second;
    const double swapped = std::max(0.0, L - 2);
    r.time.offload_stall = swapped * (std::max(0.0, offload / link - l.forward) +
                                      std::max(0.0, offload / link - l.backward));
    if (swapped > 0) r.link_needed_bytes_per_second = offload / std::min(l.forward, l.backward);
    r.time.recompute = L * (1 - alpha) * (l.recompute_gemm_share * l.gemm + 0.75 * l.tp_comm);
    recomputed_flops = L * (1 - alpha) * l.recompute_gemm_share * m.layer_gemm_flops(s);
    r.host_per_node = swapped * offload * c.gpus_in_a_node(r.chosen.gpus());
    const int other_buffers = (kind == strategy::memo && alpha == 0.0) ? 1 : 2;
    d.skeletal = 2 * (l.input + l.attention_output) + other_buffers * l.other;
  } else {
    r.time.recompute = L * l.forward;
    recomputed_flops = L * (m.layer_gemm_flops(s) + m.layer_attention_flops(s));
    d.skeletal = std::ceil(L / pp) * l.input + l.input + l.attention_output + l.other;
  }
  finish(r, m, c, m.model_flops(s) + recomputed_flops);
  return r;
}

/// Every TP x CP x DP setting (and, with full recomputation, x PP), MEMO's
/// at `fixed_alpha` when given (else at the LP's alpha and at 0): TP a
/// power of two inside a node dividing heads and key/value heads, PP
/// dividing the layers, CP x DP the rest. With `leave_idle`, a TP x PP that
/// does not divide the GPUs also gets a setting: CP over as many of the
/// rest as it divides, the remaining GPUs idle. Of the settings with that TP
/// and PP it needs the least memory (every activation is split CP ways and
/// Adam CP x DP ways, both largest at DP 1), so a cluster with more GPUs
/// always has a setting that fits whenever a smaller one does.
inline std::vector<projection> megatron_settings(strategy kind, const model_shape& m, const cluster& c, double s,
                                                 bool leave_idle = false,
                                                 std::optional<double> fixed_alpha = std::nullopt) {
  const bool full_recompute = kind == strategy::recompute || kind == strategy::recompute_planned;
  std::vector<projection> out;
  auto add = [&](int tp, int cp, int dp, int pp) {
    const settings setting{.tp = tp, .cp = cp, .pp = pp, .dp = dp};
    add_setting(out, kind, s, setting, [&] { return megatron(kind, m, c, s, tp, cp, dp, fixed_alpha, pp); });
    if (kind == strategy::memo && !fixed_alpha && out.back().chosen.alpha > 0) {
      // One shared buffer (MEMO 4.1).
      add_setting(out, kind, s, setting, [&] { return megatron(kind, m, c, s, tp, cp, dp, 0.0); });
    }
  };
  for (int tp = 1; tp <= std::min({c.gpus_per_node, m.kv_head_count(), c.gpus}); tp *= 2) {
    if (!m.splits_over(tp)) continue;
    for (int pp = 1; pp <= (full_recompute ? c.gpus / tp : 1); ++pp) {
      if (m.layers % pp != 0) continue;
      const int rest = c.gpus / tp / pp;
      if (rest * tp * pp != c.gpus) {
        if (leave_idle) add(tp, rest, 1, pp);
        continue;
      }
      for (int dp = 1; dp <= rest; ++dp) {
        if (rest % dp == 0) add(tp, rest / dp, dp, pp);
      }
    }
  }
  return out;
}

}  // namespace detail

}  // namespace memo::project
