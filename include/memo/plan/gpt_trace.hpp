// memo/plan/gpt_trace.hpp
//
// Request traces of a GPT training iteration, generated from a shape model
// of the layer (MEMO sections 3 and 4.2, Figures 4, 5 and 9). They stand in
// for a profiled trace when planning for a configuration one cannot run,
// and they are the GPT instance family of the planning benchmark.
//
// The model: s = tokens * micro_batch tokens, hidden h, heads a, FFN width
// f (4h by default), elements of `bytes_per_element` bytes, activations
// split across `tensor_parallel` ranks (sequence-parallel style: every
// [s, *] activation divided by it; the sizes must divide evenly).
//
// A layer's forward pass keeps, for its backward pass, the skeletal
// activations of MEMO Figure 5: its input x, the input layernorm output, q,
// k, v, the attention output, the residual after attention, the post
// layernorm output, fc1 and its GELU: 1+1+3+1+1+1+4+4 = 16 [s, h]-sized
// elements per token (the "16bsh" of MEMO section 3.2), plus the layernorm
// statistics and the attention log-sum-exp (fp32, [s] and [a, s]). Its
// transients: the fused QKV projection [s, 3h], the rotary cos/sin tables
// [s, h/a] fp32, the attention workspace [a, s] fp32, the attention output
// projection [s, h] and the fc2 output [s, h]. Its output [s, h] is the next
// layer's input x.
//
// A layer's backward pass receives dy [s, h] from the layer above, makes
// the gradients d_gelu, d_fc1 [s, f], d_ln2, d_resid [s, h], d_attn,
// dq, dk, dv [s, h], the attention workspace, d_qkv [s, 3h], d_ln1 [s, h],
// frees each skeletal tensor once its last user has run, and hands dx [s, h]
// to the layer below.
//
// The iteration: `embedding forward` (token ids, x_0), `layer l forward` for
// l = 0..L-1, `classifier` (final layernorm, logits and their gradient in
// chunks of `loss_chunk_tokens` tokens, dy of the last layer), `layer l
// backward` for l = L-1..0, `embedding backward`. Each part is a section of
// the trace, so the bi-level planner sees every layer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memo/core/bytes.hpp"
#include "memo/core/error.hpp"
#include "memo/plan/trace.hpp"

namespace memo {

struct gpt_shape {
  std::uint64_t hidden = 4096;
  std::uint64_t heads = 32;
  std::uint64_t ffn_hidden = 0;  ///< 0: 4 * hidden
  std::uint64_t vocab = 32000;
  std::uint64_t layers = 32;
  std::uint64_t tokens = 65536;  ///< sequence length
  std::uint64_t micro_batch = 1;
  std::uint64_t tensor_parallel = 1;
  std::uint64_t bytes_per_element = 2;
  std::uint64_t loss_chunk_tokens = 65536;  ///< the classifier's logits are made this many tokens at a time
};

/// Bytes of the skeletal activations one layer keeps for its backward pass
/// (16 [s, h] activations plus fp32 statistics), as the trace allocates them.
inline std::uint64_t gpt_skeletal_bytes_per_layer(const gpt_shape& shape);

/// A whole training iteration as a request trace with sections.
inline memory_trace make_gpt_trace(const gpt_shape& shape);

// ---------------------------------------------------------------------------

namespace detail {

struct gpt_sizes {
  std::uint64_t hidden_bytes;  // [s, h]
  std::uint64_t ffn_bytes;     // [s, f]
  std::uint64_t qkv_bytes;     // [s, 3h]
  std::uint64_t stats_bytes;   // [s, 2] fp32
  std::uint64_t lse_bytes;     // [a, s] fp32
  std::uint64_t rope_bytes;    // [s, h/a] fp32
  std::uint64_t ids_bytes;     // [s] int64
};

inline gpt_sizes gpt_sizes_of(const gpt_shape& g) {
  expects(g.hidden > 0 && g.heads > 0 && g.layers > 0 && g.tokens > 0 && g.micro_batch > 0 &&
              g.tensor_parallel > 0 && g.bytes_per_element > 0 && g.vocab > 0 &&
              g.loss_chunk_tokens > 0,
          "gpt_shape: every dimension must be positive");
  expects(g.hidden % g.heads == 0, [&] {
    return "gpt_shape: hidden " + std::to_string(g.hidden) + " is not a multiple of heads " +
           std::to_string(g.heads);
  });
  const std::uint64_t s = checked_mul(g.tokens, g.micro_batch);
  expects(s % g.tensor_parallel == 0, [&] {
    return "gpt_shape: " + std::to_string(s) + " tokens do not split over " +
           std::to_string(g.tensor_parallel) + " tensor-parallel ranks";
  });
  const std::uint64_t local = s / g.tensor_parallel;  // tokens held by one rank
  const std::uint64_t f = g.ffn_hidden == 0 ? 4 * g.hidden : g.ffn_hidden;
  gpt_sizes z{};
  z.hidden_bytes = checked_mul(checked_mul(local, g.hidden), g.bytes_per_element);
  z.ffn_bytes = checked_mul(checked_mul(local, f), g.bytes_per_element);
  z.qkv_bytes = checked_mul(3, z.hidden_bytes);
  z.stats_bytes = checked_mul(local, 8);
  z.lse_bytes = checked_mul(checked_mul(local, g.heads), 4);
  z.rope_bytes = checked_mul(checked_mul(local, g.hidden / g.heads), 4);
  z.ids_bytes = checked_mul(local, 8);
  return z;
}

}  // namespace detail

inline std::uint64_t gpt_skeletal_bytes_per_layer(const gpt_shape& shape) {
  const auto z = detail::gpt_sizes_of(shape);
  return 8 * z.hidden_bytes + 2 * z.ffn_bytes + 2 * z.stats_bytes + z.lse_bytes;
}

inline memory_trace make_gpt_trace(const gpt_shape& shape) {
  const auto z = detail::gpt_sizes_of(shape);
  trace_builder t("gpt trace");
  std::uint64_t next_id = 1;
  auto make = [&](std::uint64_t bytes) {
    const std::uint64_t id = next_id++;
    t.malloc(id, bytes);
    return std::pair{id, bytes};
  };
  auto drop = [&](const std::pair<std::uint64_t, std::uint64_t>& buffer) {
    t.free(buffer.first, buffer.second);
  };
  using buffer = std::pair<std::uint64_t, std::uint64_t>;
  struct saved {  // one layer's skeletal tensors
    buffer x, ln1, ln1_stats, q, k, v, attn, lse, resid, ln2, ln2_stats, fc1, gelu;
  };
  std::vector<saved> layers(shape.layers);

  t.begin_section("embedding forward");
  const buffer ids = make(z.ids_bytes);
  buffer x = make(z.hidden_bytes);  // x_0: the embedding output
  t.end_section("embedding forward");

  for (std::uint64_t l = 0; l < shape.layers; ++l) {
    const std::string name = "layer " + std::to_string(l) + " forward";
    t.begin_section(name);
    saved& s = layers[l];
    s.x = x;
    s.ln1 = make(z.hidden_bytes);
    s.ln1_stats = make(z.stats_bytes);
    const buffer qkv = make(z.qkv_bytes);
    const buffer cos = make(z.rope_bytes);
    const buffer sin = make(z.rope_bytes);
    s.q = make(z.hidden_bytes);
    s.k = make(z.hidden_bytes);
    drop(cos);
    drop(sin);
    s.v = make(z.hidden_bytes);
    drop(qkv);
    const buffer workspace = make(z.lse_bytes);
    s.attn = make(z.hidden_bytes);
    s.lse = make(z.lse_bytes);
    drop(workspace);
    const buffer proj = make(z.hidden_bytes);
    s.resid = make(z.hidden_bytes);
    drop(proj);
    s.ln2 = make(z.hidden_bytes);
    s.ln2_stats = make(z.stats_bytes);
    s.fc1 = make(z.ffn_bytes);
    s.gelu = make(z.ffn_bytes);
    const buffer fc2 = make(z.hidden_bytes);
    x = make(z.hidden_bytes);  // the layer output: next layer's input
    drop(fc2);
    t.end_section(name);
  }

  t.begin_section("classifier");
  const buffer final_ln = make(z.hidden_bytes);
  const buffer final_stats = make(z.stats_bytes);
  const buffer d_final = make(z.hidden_bytes);
  const std::uint64_t local_tokens = z.ids_bytes / 8;
  for (std::uint64_t done = 0; done < local_tokens; done += shape.loss_chunk_tokens) {
    const std::uint64_t chunk = std::min(shape.loss_chunk_tokens, local_tokens - done);
    const buffer logits = make(checked_mul(checked_mul(chunk, shape.vocab), 4));  // fp32
    const buffer d_logits = make(checked_mul(checked_mul(chunk, shape.vocab), shape.bytes_per_element));
    drop(logits);
    drop(d_logits);
  }
  drop(final_ln);
  buffer dy = make(z.hidden_bytes);  // gradient w.r.t. the last layer's output
  drop(final_stats);
  drop(d_final);
  drop(x);  // the last layer's output
  t.end_section("classifier");

  for (std::uint64_t l = shape.layers; l-- > 0;) {
    const std::string name = "layer " + std::to_string(l) + " backward";
    t.begin_section(name);
    saved& s = layers[l];
    const buffer d_gelu = make(z.ffn_bytes);
    drop(s.gelu);
    const buffer d_fc1 = make(z.ffn_bytes);
    drop(d_gelu);
    drop(s.fc1);
    const buffer d_ln2 = make(z.hidden_bytes);
    drop(d_fc1);
    drop(s.ln2);
    const buffer d_resid = make(z.hidden_bytes);
    drop(d_ln2);
    drop(s.ln2_stats);
    drop(s.resid);
    const buffer d_attn = make(z.hidden_bytes);
    const buffer dq = make(z.hidden_bytes);
    const buffer dk = make(z.hidden_bytes);
    const buffer dv = make(z.hidden_bytes);
    const buffer workspace = make(z.lse_bytes);
    drop(workspace);
    drop(d_attn);
    drop(s.attn);
    drop(s.lse);
    drop(s.q);
    drop(s.k);
    drop(s.v);
    const buffer d_qkv = make(z.qkv_bytes);
    drop(dq);
    drop(dk);
    drop(dv);
    const buffer d_ln1 = make(z.hidden_bytes);
    drop(d_qkv);
    drop(s.ln1);
    const buffer dx = make(z.hidden_bytes);
    drop(d_ln1);
    drop(s.ln1_stats);
    drop(d_resid);
    drop(dy);
    drop(s.x);
    dy = dx;
    t.end_section(name);
  }

  t.begin_section("embedding backward");
  drop(dy);
  drop(ids);
  t.end_section("embedding backward");
  return std::move(t).finish();
}

}  // namespace memo
