// memo/plan/gpt_trace.hpp
//
// Request traces of a GPT training iteration, generated from a shape model
// of the layer (MEMO sections 3 and 4.2, Figures 4, 5 and 9). They stand in
// for a profiled trace when planning for a configuration one cannot run,
// and they are the GPT instance family of the planning benchmark.
//
// The model: `layers` copies of one `transformer_layer` (core/
// transformer_layer.hpp: tokens s, hidden h, heads a, key/value width h_kv,
// FFN width f, element bytes e, tensor- and context-parallel degrees t and
// c), a vocabulary, and the classifier's chunk length. Every size below is
// what one GPU holds, `transformer_layer::activation_bytes` of the tensor's
// bytes per token (s / (c t) tokens' worth), so the trace of a split model
// is the trace one rank records.
//
// A layer's forward pass keeps, for its backward pass, exactly the skeletal
// tensors `transformer_layer::skeletal_tensors()` lists (MEMO Figure 5's
// 16 [s, h] elements per token when h_kv = h and f = 4h, plus the two
// layernorms' statistics and the attention log-sum-exp): the alpha LP and
// the skeletal layout read the same list, so the planner plans the bytes
// the LP offloads. The layer input x is the previous layer's output. Its
// transients: the fused QKV projection [s, h + 2 h_kv], the rotary cos/sin
// tables [s, h/a] fp32, the attention workspace [a, s] fp32, the attention
// output projection [s, h] and the fc2 output [s, h]. Its output [s, h] is
// the next layer's input x.
//
// A layer's backward pass receives dy [s, h] from the layer above, makes
// the gradients d_gelu, d_fc1 [s, f], d_ln2, d_resid [s, h], d_attn,
// dq [s, h], dk, dv [s, h_kv], the attention workspace, d_qkv
// [s, h + 2 h_kv], d_ln1 [s, h], frees each skeletal tensor once its last
// user has run, and hands dx [s, h] to the layer below.
//
// The iteration: `embedding forward` (token ids, x_0), `layer l forward` for
// l = 0..L-1, `classifier` (final layernorm, logits and their gradient in
// chunks of `loss_chunk_tokens` tokens, dy of the last layer), `layer l
// backward` for l = L-1..0, `embedding backward`. Each part is a section of
// the trace, so the bi-level planner sees every layer.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "memo/core/bytes.hpp"
#include "memo/core/error.hpp"
#include "memo/core/transformer_layer.hpp"
#include "memo/plan/trace.hpp"

namespace memo {

/// A GPT model for the trace: `layers` copies of one transformer layer
/// between an embedding and a classifier.
struct gpt_shape : transformer_layer {
  std::uint64_t layers = 32;
  std::uint64_t vocab = 32000;
  std::uint64_t loss_chunk_tokens = 65536;  ///< the classifier's logits are made this many tokens at a time

  /// The layer's checks, then the model's; throws `memo::error`.
  void check() const {
    transformer_layer::check();
    expects(layers > 0 && vocab > 0 && loss_chunk_tokens > 0, [&] {
      return "gpt shape: layers, vocab and loss_chunk_tokens must be positive, got " +
             std::to_string(layers) + ", " + std::to_string(vocab) + " and " +
             std::to_string(loss_chunk_tokens);
    });
  }
};

/// A whole training iteration as a request trace with sections. The layer's
/// attention is MEMO's (FlashAttention over the skeletal q, k and v): a
/// shape with attention_keeps_qkv is an error.
inline memory_trace make_gpt_trace(const gpt_shape& shape);

// ---------------------------------------------------------------------------

namespace detail {

/// The transient sizes of one layer on one GPU.
struct gpt_transient_sizes {
  std::uint64_t hidden_bytes;  // [s, h]
  std::uint64_t ffn_bytes;     // [s, f]
  std::uint64_t qkv_bytes;     // [s, h + 2 h_kv]
  std::uint64_t kv_bytes;      // [s, h_kv]
  std::uint64_t stats_bytes;   // [s, 2] fp32
  std::uint64_t heads_bytes;   // [a, s] fp32
  std::uint64_t rope_bytes;    // [s, h/a] fp32
  std::uint64_t ids_bytes;     // [s] int64
};

inline gpt_transient_sizes gpt_transient_sizes_of(const gpt_shape& g) {
  g.check();
  const auto e = static_cast<std::uint64_t>(g.bytes_per_element);
  const auto h = static_cast<std::uint64_t>(g.hidden);
  const std::uint64_t h_kv = g.kv_width();
  gpt_transient_sizes z{};
  z.hidden_bytes = g.activation_bytes(checked_mul(e, h));
  z.ffn_bytes = g.activation_bytes(checked_mul(e, g.ffn_width()));
  z.qkv_bytes = g.activation_bytes(checked_mul(e, checked_add(h, checked_mul(2, h_kv))));
  z.kv_bytes = g.activation_bytes(checked_mul(e, h_kv));
  z.stats_bytes = g.activation_bytes(8);
  z.heads_bytes = g.activation_bytes(checked_mul(4, static_cast<std::uint64_t>(g.heads)));
  z.rope_bytes = g.activation_bytes(checked_mul(4, g.head_dim()));
  z.ids_bytes = g.activation_bytes(8);
  return z;
}

}  // namespace detail

inline memory_trace make_gpt_trace(const gpt_shape& shape) {
  expects(!shape.attention_keeps_qkv,
          "gpt trace: attention_keeps_qkv (an attention with its own host store of Q, K and V) is not "
          "modelled; the trace's attention reads the skeletal q, k and v");
  const auto z = detail::gpt_transient_sizes_of(shape);
  const std::vector<skeletal_tensor> skeletal = shape.skeletal_tensors();
  auto skeletal_bytes = [&](std::string_view name) {
    for (const auto& tensor : skeletal) {
      if (tensor.name == name) return tensor.bytes();
    }
    throw error("gpt trace: the transformer layer has no skeletal tensor '" + std::string(name) + "'");
  };
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
  // Each layer's output (and the embedding's) is the next layer's skeletal input.
  const std::uint64_t input_bytes = skeletal_bytes("input");

  t.begin_section("embedding forward");
  const buffer ids = make(z.ids_bytes);
  buffer x = make(input_bytes);  // x_0: the embedding output
  t.end_section("embedding forward");

  for (std::uint64_t l = 0; l < shape.layers; ++l) {
    const std::string name = "layer " + std::to_string(l) + " forward";
    t.begin_section(name);
    saved& s = layers[l];
    s.x = x;
    s.ln1 = make(skeletal_bytes("input_norm"));
    s.ln1_stats = make(skeletal_bytes("input_norm_stats"));
    const buffer qkv = make(z.qkv_bytes);
    const buffer cos = make(z.rope_bytes);
    const buffer sin = make(z.rope_bytes);
    s.q = make(skeletal_bytes("q"));
    s.k = make(skeletal_bytes("k"));
    drop(cos);
    drop(sin);
    s.v = make(skeletal_bytes("v"));
    drop(qkv);
    const buffer workspace = make(z.heads_bytes);
    s.attn = make(skeletal_bytes("attention_output"));
    s.lse = make(skeletal_bytes("attention_lse"));
    drop(workspace);
    const buffer proj = make(z.hidden_bytes);
    s.resid = make(skeletal_bytes("residual"));
    drop(proj);
    s.ln2 = make(skeletal_bytes("mlp_input_norm"));
    s.ln2_stats = make(skeletal_bytes("mlp_input_norm_stats"));
    s.fc1 = make(skeletal_bytes("fc1_output"));
    s.gelu = make(skeletal_bytes("activation_output"));
    const buffer fc2 = make(z.hidden_bytes);
    x = make(input_bytes);  // the layer output: next layer's input
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
    const buffer d_logits = make(checked_mul(checked_mul(chunk, shape.vocab),
                                             static_cast<std::uint64_t>(shape.bytes_per_element)));
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
    const buffer dk = make(z.kv_bytes);
    const buffer dv = make(z.kv_bytes);
    const buffer workspace = make(z.heads_bytes);
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
