// memo/project/ulysses.hpp
//
// One step under DeepSpeed-Ulysses sequence parallelism over ZeRO-3 (SP
// ranks, SP <= heads, data parallel over the rest), in two forms:
//
//  ulysses-zero3  full activation recomputation, every layer's input kept
//                 on the GPU (MEMO's DeepSpeed runs, Table 5: "AR On"),
//                 the loss over the whole local sequence, caching allocator.
//  fpdt           FPDT 4: the sequence cut into chunks of `chunk` global
//                 tokens (64K, FPDT 5.3), checkpoints offloaded to the host
//                 ("activation checkpoint with CPU offloading", FPDT 5.1),
//                 q, k, v of every chunk of the layer being computed in host
//                 memory and fetched back chunk by chunk, double-buffered;
//                 the MLP in twice as many chunks without offload and the
//                 loss in 2V/h chunks (FPDT 5.4).
//
// Per GPU with T = s / SP local tokens:
//  states     ZeRO-3 shards parameters, gradients and Adam over all GPUs
//             (2 + 2 + 12 B per parameter, ZeRO's accounting), plus two
//             gathered layers (the one computing and the prefetched one).
//  ulysses    skeletal: n layer inputs [T, h] and the recomputed layer's
//             skeletal tensors; working: the larger of the MLP backward
//             (dy, the two [T, f] gradients, d_ln2) and the attention
//             backward (FPDT Table 2: 8 [T, h] buffers with the
//             all-to-all's receive buffers), or the loss (6 B x V x T).
//  fpdt       device: the tensors of the layer in its backward that span
//             the whole local sequence (input, attention block output,
//             residual, and the gradients of the three: 6 [T, h]) and the
//             chunk working set (q, k, v, o, lse of the current chunk, the
//             fetched chunk's k, v double-buffered, and their gradients: 16
//             [c, h/SP] buffers for a chunk of c global tokens); host: every
//             layer's input and q, k, v, o of the current layer.
//
// Time per layer: GEMMs and attention over T tokens at their efficiencies;
// four all-to-alls of q, k, v and the output forward and four backward,
// exposed (the attention waits for them); ZeRO-3's gathers hidden behind
// compute; the recomputation repeats the forward. FPDT adds, for every pair
// of chunks (i, j < i), the host-to-device fetch of chunk j's k, v
// (forward and recompute) and of chunk i's q, o and output gradient
// (backward, FPDT 4.2's inner loop) where it outlasts the pair's attention.
//
// Fill and drain (FPDT 5.3: "less chunks means a shorter pipeline, which
// makes latencies of the first data preparation and the last computation
// more salient, as they cannot overlap with other operations"). Double
// buffering hides chunk k+1's transfer behind chunk k's compute, so in each
// layer's pass the first chunk's fetch and the last chunk's write-back have
// nothing to hide behind. Per layer, with u = T / (c / SP) = s / c chunks of
// c / SP local tokens (after the all-to-all a chunk's q is [c, h/SP], its k
// and v [c, kv/SP]), in elements:
//  forward    fill: none from the host (chunk 0's q, k, v come from its own
//             projection and all-to-all, which are counted as exposed
//             above); drain: the last chunk's q, k, v to the host,
//             c (h + 2 kv) / SP elements.
//  recompute  fill: the first chunk of the offloaded layer input, c h / SP;
//             drain: the last chunk's q, k, v again.
//  backward   fill: chunk 0's q, k, v, o and output gradient, c (3h + 2 kv)
//             / SP; drain: none (the gradients stay on the device and leave
//             by the all-to-all, counted above).
// At the host link's rate. The term is fixed per layer for a given chunk
// while the step grows with u^2 (the pairs), so it weighs at FPDT Table 4's
// 4 chunks (256K) and hardly at Table 1's 32 (2M).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "memo/project/projection.hpp"

namespace memo::project {

inline constexpr double fpdt_default_chunk = 65536.0;

namespace detail {

/// `kind` (ulysses-zero3 or fpdt) at SP x DP with chunks of `chunk` tokens
/// (fpdt). `offload_checkpoints` moves ulysses-zero3's layer inputs to the
/// host (DeepSpeed's activation checkpointing with CPU offloading, FPDT
/// Table 3's "OC."); fpdt always does. `dp` 0 means every GPU (GPUs / SP);
/// fewer leaves the rest idle, ZeRO-3 sharding over the SP x DP used.
inline projection ulysses(strategy kind, const model_shape& m, const cluster& c, double s, int sp, double chunk,
                          bool offload_checkpoints = false, int data_parallel = 0) {
  const int dp = data_parallel > 0 ? data_parallel : c.gpus / sp;
  const int used = sp * dp;
  const double h = m.hidden, f = m.ffn_width(), kv = m.kv_width(), L = m.layers, P = m.parameters();
  const double tokens = static_cast<double>(padded_tokens(s, sp));
  const double T = tokens / sp;
  const auto& p = c.profile;
  projection r;
  r.kind = kind;
  r.sequence = s;
  r.chosen.sp = sp;
  r.chosen.dp = dp;
  auto& d = r.device;
  d.params = 2 * P / used;
  d.grads = 2 * P / used;
  d.optimizer = 12 * P / used;
  d.framework = framework_bytes + 2 * bytes_per_element * m.layer_parameters();
  d.planned = false;

  const double gemm = gemm_seconds(p, m.layer_gemm_flops(tokens) / sp);
  const double attention = attention_seconds(p, m.layer_attention_flops(tokens) / sp);
  const double a2a = collective(collective_kind::all_to_all, T * (2 * h + 2 * kv) * bytes_per_element, sp,
                                c.link_for(sp));
  const double forward = gemm + attention + a2a;
  const double classifier = gemm_seconds(p, 3 * m.classifier_flops(tokens) / sp);
  r.time.compute = L * (3 * gemm + (1 + attention_backward_factor) * attention) + classifier;
  r.time.communication = L * 2 * a2a;
  r.time.recompute = L * forward;

  const transformer_layer layer = m.layer(static_cast<std::int64_t>(tokens), 1, sp);
  const double mlp_width = m.gated_mlp ? 2 * f : f;
  if (kind == strategy::fpdt) {
    const double chunk_tokens = std::min(chunk, tokens);
    r.chosen.chunk_tokens = chunk_tokens;
    const double u = std::ceil(tokens / chunk_tokens);  // chunks
    d.skeletal = 6 * T * h * bytes_per_element;
    const double chunk_buffers = 16 * chunk_tokens * h / sp * bytes_per_element;
    const double mlp_chunk = T / (2 * u) * (2 * mlp_width + 2 * h) * bytes_per_element;
    const double loss_chunk = T * h / (2.0 * m.vocab) * loss_bytes_per_logit * m.vocab;
    d.transient = std::max(chunk_buffers + mlp_chunk, loss_chunk);
    r.host_per_node = (L * T * h + T * (2 * h + 2 * kv)) * bytes_per_element * c.gpus_in_a_node(used);
    // Pairs of chunks (i, j < i): one chunk's attention against another.
    const double pairs = u * (u - 1) / 2;
    const double pair_attention = attention_seconds(p, 4 * chunk_tokens * chunk_tokens * h / sp);
    const double link = p.host_link_bytes_per_second;
    const double kv_fetch = 2 * chunk_tokens * kv / sp * bytes_per_element / link;
    const double q_fetch = 3 * chunk_tokens * h / sp * bytes_per_element / link;
    r.time.offload_stall = L * pairs * (2 * std::max(0.0, kv_fetch - pair_attention) +
                                        std::max(0.0, q_fetch - attention_backward_factor * pair_attention));
    // Fill and drain per layer (header comment): forward and recompute
    // write back the last chunk's q, k, v; the recompute fetches the first
    // chunk of the layer input and the backward chunk 0's q, k, v, o, dout.
    const double qkv_write_back = chunk_tokens * (h + 2 * kv) / sp * bytes_per_element / link;
    const double input_fetch = chunk_tokens * h / sp * bytes_per_element / link;
    const double backward_fetch = chunk_tokens * (3 * h + 2 * kv) / sp * bytes_per_element / link;
    r.time.pipeline_fill = L * (2 * qkv_write_back + input_fetch + backward_fetch);
    if (pairs > 0) {
      r.link_needed_bytes_per_second =
          link * std::max(kv_fetch / pair_attention, q_fetch / (attention_backward_factor * pair_attention));
    }
  } else {
    const double checkpoints = L * static_cast<double>(layer.input_bytes());
    d.skeletal = (offload_checkpoints ? 0.0 : checkpoints) + static_cast<double>(layer.skeletal_bytes());
    r.host_per_node = offload_checkpoints ? checkpoints * c.gpus_in_a_node(used) : 0.0;
    const double mlp = T * (2 * h + 2 * mlp_width + 2 * h) * bytes_per_element;
    const double attn = T * (8 * h + 2 * h) * bytes_per_element;
    d.transient = std::max({mlp, attn, T * (loss_bytes_per_logit * m.vocab + 2 * h * bytes_per_element)});
  }
  finish(r, m, c, m.model_flops(s) + L * (m.layer_gemm_flops(s) + m.layer_attention_flops(s)));
  return r;
}

/// Every SP dividing the GPUs and the heads (the rest data parallel), FPDT's
/// chunks of `chunk` global tokens. With
/// `leave_idle`, also an SP dividing the heads but not the GPUs (as many
/// data-parallel replicas as fit, the remaining GPUs idle) and, for fpdt,
/// fewer replicas than fit while they share a node: each replica offloads
/// to its node's host memory, so fewer of them may fit where all do not.
/// Of the settings with that SP these need the least device memory (ZeRO-3
/// shards over every GPU used) or the least host memory per node, so a
/// cluster with more GPUs always has a setting that fits whenever a smaller
/// one does. Every such replica count up to 1024 is tried, and above that
/// counts 1/32 apart (a node of a million GPUs would otherwise cost a
/// million projections per SP); there the guarantee holds only up to the
/// counts skipped.
inline std::vector<projection> ulysses_settings(strategy kind, const model_shape& m, const cluster& c, double s,
                                                bool leave_idle = false, double chunk = fpdt_default_chunk) {
  std::vector<projection> out;
  for (int sp = 1; sp <= std::min(c.gpus, m.heads); ++sp) {
    if (m.heads % sp != 0) continue;
    const int replicas = c.gpus / sp;
    if (sp * replicas == c.gpus || leave_idle) {
      add_setting(out, kind, s, {.sp = sp, .dp = replicas},
                  [&] { return ulysses(kind, m, c, s, sp, chunk, false, replicas); });
    }
    if (!leave_idle || kind != strategy::fpdt) continue;
    for (int dp = 1; dp < replicas && sp * dp < c.gpus_per_node; dp += dp < 1024 ? 1 : dp / 32) {
      add_setting(out, kind, s, {.sp = sp, .dp = dp}, [&] { return ulysses(kind, m, c, s, sp, chunk, false, dp); });
    }
  }
  return out;
}

}  // namespace detail

}  // namespace memo::project
