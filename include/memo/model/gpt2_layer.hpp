// memo/model/gpt2_layer.hpp
//
// One block of the reference GPT-2 (llm.c's model, fp32), forward and
// backward, on any `Backend`: the memo/model/ops operators run through
// `parallel_for`, the projections through `backend.gemm`. A block is
//
//   ln1 = layernorm(x)                 qkv = ln1 Wqkv^T + bqkv      [T, 3C]
//   atty = causal_attention(qkv)       res2 = x + atty Wo^T + bo
//   ln2 = layernorm(res2)              fch = ln2 Wfc^T + bfc        [T, 4C]
//   fchg = gelu(fch)                   res3 = res2 + fchg Wp^T + bp
//
// with every weight stored [out, in] as in llm.c, so a projection is the
// row-major GEMM y = x W^T + b. The backward keeps llm.c's single residual
// gradient buffer: it holds d(res3) when a block's backward starts, the
// MLP's layernorm backward adds into it (giving d(res2)), the attention
// half's layernorm backward adds into it again (giving dx). Parameter
// gradients accumulate (+=); the model zeroes them once per step.
//
// Attention is a parameter (`gpt2_block_attention`): on one device
// `chunked_causal_attention` (attention.hpp, FPDT section 4) over strided
// [T, NH, hs] views of the fused QKV buffer, so no [T, T] score matrix
// exists; across ranks the distributed attention of the parallel model
// (gpt2_parallel_model.hpp). Forward and backward run on a run of rows
// [r0, r0 + n) of the block's tokens (the whole sequence, or one SPPO
// subsequence of it), everything but attention being token-wise; the MLP
// backward runs in chunks of rows (FPDT section 5.4).
//
// Memory (MEMO sections 4.1-4.2). What the forward keeps for the backward
// is `gpt2_layer_activations`: the block's skeletal tensors, token-major,
// viewed from the caller's memory (the model's rounding buffers). The
// token-wise part of the forward is split out by rows, so
// `gpt2_layer_recompute` rebuilds any token range of every skeletal tensor
// but the input, the attention output and its log-sum-exp from those three.
// The backward's five gradient buffers are transient: it takes them from a
// memory resource and returns each after its last use, always in the same
// order, so one recorded backward is the trace of every later one. Nothing
// else here allocates.
#pragma once

#include <cmath>
#include <cstdint>

#include "memo/backend/buffer.hpp"
#include "memo/backend/concepts.hpp"
#include "memo/backend/memory_resource.hpp"
#include "memo/core/memory_region.hpp"
#include "memo/core/tensor_view.hpp"
#include "memo/model/attention.hpp"
#include "memo/model/gpt2_config.hpp"
#include "memo/model/gpt2_memory.hpp"
#include "memo/model/ops/elementwise.hpp"
#include "memo/model/ops/layernorm.hpp"

namespace memo {

using gpt2_matrix = tensor_view<float, 2>;
using gpt2_vector = tensor_view<float, 1>;

namespace detail {

/// A [rows, cols] fp32 view carved from `carver` (null in counting mode).
inline gpt2_matrix carve_matrix(region_carver& carver, std::int64_t rows, std::int64_t cols,
                                std::string_view part) {
  const auto bytes = checked_mul(checked_mul(static_cast<std::uint64_t>(rows),
                                             static_cast<std::uint64_t>(cols)),
                                 sizeof(float));
  return gpt2_matrix::contiguous(carver.take(bytes, part).as<float>(), {rows, cols});
}
inline gpt2_vector carve_vector(region_carver& carver, std::int64_t n, std::string_view part) {
  const auto bytes = checked_mul(static_cast<std::uint64_t>(n), sizeof(float));
  return gpt2_vector::contiguous(carver.take(bytes, part).as<float>(), {n});
}

/// Validates an operator and runs it over its index space on `on`.
template <Backend B, class Op>
void launch(B& backend, typename B::stream& on, const Op& op) {
  op.validate();
  if constexpr (ops::row_operator<Op>) {
    backend.parallel_for(on, extent_1d{op.size()}, op);
  } else {
    backend.parallel_for(on, extent_2d{op.rows(), op.cols()}, op);
  }
}

/// out = inp W^T (+ bias), W stored [out, in]; views may be strided by rows.
template <Backend B>
void linear_forward(B& backend, typename B::stream& on, gpt2_matrix out,
                    tensor_view<const float, 2> inp, tensor_view<const float, 2> weight,
                    tensor_view<const float, 1> bias) {
  backend.gemm(on,
               gemm_shape{.m = inp.extent(0), .n = weight.extent(0), .k = inp.extent(1),
                          .op_b = matrix_op::transpose, .lda = inp.stride(0),
                          .ldb = weight.stride(0), .ldc = out.stride(0)},
               1.0f, inp.data(), weight.data(), 0.0f, out.data());
  launch(backend, on, ops::bias_add<float>{.out = out, .bias = bias});
}

/// dinp = dout W (overwritten), dweight += dout^T inp, dbias += colsum(dout).
template <Backend B>
void linear_backward(B& backend, typename B::stream& on, gpt2_matrix dinp, gpt2_matrix dweight,
                     gpt2_vector dbias, tensor_view<const float, 2> dout,
                     tensor_view<const float, 2> inp, tensor_view<const float, 2> weight) {
  backend.gemm(on,
               gemm_shape{.m = dout.extent(0), .n = weight.extent(1), .k = dout.extent(1),
                          .lda = dout.stride(0), .ldb = weight.stride(0), .ldc = dinp.stride(0)},
               1.0f, dout.data(), weight.data(), 0.0f, dinp.data());
  backend.gemm(on,
               gemm_shape{.m = dout.extent(1), .n = inp.extent(1), .k = dout.extent(0),
                          .op_a = matrix_op::transpose, .lda = dout.stride(0),
                          .ldb = inp.stride(0), .ldc = dweight.stride(0)},
               1.0f, dout.data(), inp.data(), 1.0f, dweight.data());
  launch(backend, on, ops::bias_backward<float>{.dbias = dbias, .dout = dout});
}

}  // namespace detail

/// What one block keeps from its forward for its backward (batch 1, T
/// tokens): its skeletal tensors (MEMO section 3), every one token-major so
/// any token range is a contiguous byte range. They live in the rounding
/// buffers (`gpt2_skeletal_layout` in gpt2_memory.hpp lists them in this
/// order; `from_skeletal` views one layer's slices).
struct gpt2_layer_activations {
  gpt2_matrix input;     // [T, C]: the block's input x
  gpt2_matrix ln1;       // [T, C]
  gpt2_vector ln1_mean;  // [T]
  gpt2_vector ln1_rstd;  // [T]
  gpt2_matrix qkv;       // [T, 3C]: q | k | v, heads side by side in each
  gpt2_matrix atty;      // [T, C]: attention output, before the projection
  gpt2_matrix att_lse;   // [NH, T]: log-sum-exp of each query's scores
  gpt2_matrix res2;      // [T, C]
  gpt2_matrix ln2;       // [T, C]
  gpt2_vector ln2_mean;  // [T]
  gpt2_vector ln2_rstd;  // [T]
  gpt2_matrix fch;       // [T, 4C]
  gpt2_matrix fch_gelu;  // [T, 4C]

  /// Views of one layer's skeletal slices (tensor i of the layout is the
  /// i-th member above).
  template <class Slices>
  static gpt2_layer_activations from_skeletal(const Slices& s, std::int64_t T, std::int64_t C,
                                              std::int64_t NH) {
    return from_skeletal(s, T, C, NH, T);
  }
  /// The same with the log-sum-exp viewed as [lse_rows, lse_cols] (the
  /// attention's layout of the NH x T values: [NH / P, P T] for a block
  /// whose attention is spread over P ranks).
  template <class Slices>
  static gpt2_layer_activations from_skeletal(const Slices& s, std::int64_t T, std::int64_t C,
                                              std::int64_t lse_rows, std::int64_t lse_cols) {
    return views(s, T, C, lse_rows, lse_cols, nullptr);
  }
  /// The same for a layout without qkv (`gpt2_qkv_skeletal::dropped`): the
  /// twelve other slices, and qkv a [T, 3C] buffer the caller keeps only
  /// from the QKV projection to the attention's forward.
  template <class Slices>
  static gpt2_layer_activations from_skeletal(const Slices& s, std::int64_t T, std::int64_t C,
                                              std::int64_t lse_rows, std::int64_t lse_cols, gpt2_matrix qkv) {
    qkv.expect_shape({T, 3 * C}, "gpt2_layer_activations: qkv");
    return views(s, T, C, lse_rows, lse_cols, &qkv);
  }

 private:
  template <class Slices>
  static gpt2_layer_activations views(const Slices& s, std::int64_t T, std::int64_t C, std::int64_t lse_rows,
                                      std::int64_t lse_cols, const gpt2_matrix* qkv) {
    expects(s.size() == (qkv ? 12u : 13u), "gpt2_layer_activations: wrong number of skeletal slices");
    // Slice index of member i (qkv, member 4, may come from elsewhere).
    auto at = [&](std::size_t i) { return qkv && i > 4 ? i - 1 : i; };
    auto m = [&](std::size_t i, std::int64_t rows, std::int64_t cols) {
      return gpt2_matrix::contiguous(s[at(i)].template as<float>(), {rows, cols});
    };
    auto v = [&](std::size_t i) { return gpt2_vector::contiguous(s[at(i)].template as<float>(), {T}); };
    return {m(0, T, C), m(1, T, C),      v(2),          v(3),      qkv ? *qkv : m(4, T, 3 * C),
            m(5, T, C), m(6, lse_rows, lse_cols), m(7, T, C), m(8, T, C), v(9),
            v(10),      m(11, T, 4 * C), m(12, T, 4 * C)};
  }
};

namespace detail {

/// [T, heads, C / heads] view of the C columns starting at `first` of a
/// row-major [T, width] buffer: q, k, v of the fused [T, 3C] QKV buffer
/// (first = 0, C, 2C) or a whole [T, C] buffer (first = 0).
inline tensor_view<float, 3> split_heads(gpt2_matrix m, std::int64_t first, std::int64_t C,
                                         std::int64_t heads) {
  const std::int64_t hs = C / heads;
  return tensor_view<float, 3>(m.data() + first, {m.extent(0), heads, hs}, {m.stride(0), hs, 1});
}

/// atty = causal softmax(q k^T / sqrt(hs)) v per head; lse [NH, T] saved.
template <Backend B>
void gpt2_attention_forward(chunked_causal_attention<B>& attention, typename B::stream& on,
                            gpt2_matrix atty, gpt2_matrix lse, gpt2_matrix qkv,
                            std::int64_t heads) {
  const std::int64_t C = atty.extent(1);
  attention.forward(on, split_heads(qkv, 0, C, heads), split_heads(qkv, C, C, heads),
                    split_heads(qkv, 2 * C, C, heads), split_heads(atty, 0, C, heads), lse);
}

/// dqkv += the gradient of the attention above, from datty.
template <Backend B>
void gpt2_attention_backward(chunked_causal_attention<B>& attention, typename B::stream& on,
                             gpt2_matrix dqkv, gpt2_matrix datty, gpt2_matrix atty,
                             gpt2_matrix lse, gpt2_matrix qkv, std::int64_t heads) {
  const std::int64_t C = atty.extent(1);
  attention.backward(on, split_heads(qkv, 0, C, heads), split_heads(qkv, C, C, heads),
                     split_heads(qkv, 2 * C, C, heads), split_heads(atty, 0, C, heads),
                     split_heads(datty, 0, C, heads), lse, split_heads(dqkv, 0, C, heads),
                     split_heads(dqkv, C, C, heads), split_heads(dqkv, 2 * C, C, heads));
}

}  // namespace detail

/// What a block's attention is, as the block calls it: causal attention of
/// the queries in rows [r0, r0 + n) of the block's tokens, reading the
/// fused QKV buffer [T, 3C], writing those rows of the attention output
/// [T, C] and the log-sum-exp (in the attention's own layout, a skeletal
/// tensor of the block); its backward takes datty [n, C] of those rows and
/// adds the gradient of their q, k and v into dqkv [n, 3C]. Blocks call
/// the forward of runs in row order and the backward in reverse; an
/// implementation may accept only the run of all rows.
template <class A, class B>
concept gpt2_block_attention =
    Backend<B> && requires(A& a, typename B::stream& on, gpt2_matrix m, std::int64_t row) {
      a.forward(on, m, m, m, row, row);
      a.backward(on, m, m, m, m, m, row, row);
    };

/// The single-device attention of a block: chunked_causal_attention over
/// the whole sequence (one run of all rows).
template <Backend B>
struct gpt2_chunked_attention {
  chunked_causal_attention<B>* attention = nullptr;
  std::int64_t heads = 0;

  void forward(typename B::stream& on, gpt2_matrix qkv, gpt2_matrix atty, gpt2_matrix lse, std::int64_t r0,
               std::int64_t n) const {
    expect_whole(qkv, r0, n);
    detail::gpt2_attention_forward(*attention, on, atty, lse, qkv, heads);
  }
  void backward(typename B::stream& on, gpt2_matrix qkv, gpt2_matrix atty, gpt2_matrix datty, gpt2_matrix lse,
                gpt2_matrix dqkv, std::int64_t r0, std::int64_t n) const {
    expect_whole(qkv, r0, n);
    detail::gpt2_attention_backward(*attention, on, dqkv, datty, atty, lse, qkv, heads);
  }

 private:
  static void expect_whole(gpt2_matrix qkv, std::int64_t r0, std::int64_t n) {
    expects(r0 == 0 && n == qkv.extent(0), [&] {
      return "gpt2_chunked_attention: rows [" + std::to_string(r0) + ", " + std::to_string(r0 + n) +
             ") are not the whole sequence of " + std::to_string(qkv.extent(0)) +
             " tokens (runs need an attention that carries dK/dV between them)";
    });
  }
};

namespace detail {

/// An attention that does nothing: what a block's transient memory is
/// recorded with (the attention takes nothing from the block's resource).
template <Backend B>
struct gpt2_no_attention {
  void forward(typename B::stream&, gpt2_matrix, gpt2_matrix, gpt2_matrix, std::int64_t, std::int64_t) const {}
  void backward(typename B::stream&, gpt2_matrix, gpt2_matrix, gpt2_matrix, gpt2_matrix, gpt2_matrix, std::int64_t,
                std::int64_t) const {}
};

/// The token-wise part of a block before attention, on rows [r0, r0 + n):
/// ln1 and its statistics from the input, then qkv (unless dropped: a
/// rebuild for a backward whose attention keeps its own Q, K and V).
template <Backend B>
void gpt2_layer_rows_before_attention(B& backend, typename B::stream& on,
                                      const gpt2_layer_views<float>& p,
                                      const gpt2_layer_activations& a, std::int64_t r0,
                                      std::int64_t n, gpt2_qkv_skeletal qkv = gpt2_qkv_skeletal::kept) {
  launch(backend, on, ops::layernorm_forward<float>{a.ln1.slice(r0, n), a.ln1_mean.slice(r0, n),
                                                    a.ln1_rstd.slice(r0, n), a.input.slice(r0, n),
                                                    p.ln1w, p.ln1b});
  if (qkv == gpt2_qkv_skeletal::kept) {
    linear_forward(backend, on, a.qkv.slice(r0, n), a.ln1.slice(r0, n), p.qkvw, p.qkvb);
  }
}

/// The token-wise part after attention, on rows [r0, r0 + n): res2 = x +
/// atty Wo^T + bo, ln2 and its statistics, fch, gelu(fch).
template <Backend B>
void gpt2_layer_rows_after_attention(B& backend, typename B::stream& on,
                                     const gpt2_layer_views<float>& p,
                                     const gpt2_layer_activations& a, std::int64_t r0,
                                     std::int64_t n) {
  const gpt2_matrix res2 = a.res2.slice(r0, n);
  linear_forward(backend, on, res2, a.atty.slice(r0, n), p.attprojw, p.attprojb);
  launch(backend, on, ops::residual_forward<float>{res2, res2, a.input.slice(r0, n)});
  launch(backend, on, ops::layernorm_forward<float>{a.ln2.slice(r0, n), a.ln2_mean.slice(r0, n),
                                                    a.ln2_rstd.slice(r0, n), res2, p.ln2w, p.ln2b});
  linear_forward(backend, on, a.fch.slice(r0, n), a.ln2.slice(r0, n), p.fcw, p.fcb);
  launch(backend, on, ops::gelu_forward<float>{a.fch_gelu.slice(r0, n), a.fch.slice(r0, n)});
}

}  // namespace detail

/// The forward of one block on the run of rows [r0, r0 + n): reads those
/// rows of a.input, fills them in the other skeletal tensors of `a` and
/// writes the block's output rows to `out` [n, C] (which may be the rows
/// a.input was copied from). Runs go in row order (causal attention).
template <Backend B, class A>
  requires gpt2_block_attention<A, B>
void gpt2_layer_forward(B& backend, typename B::stream& on, const gpt2_layer_views<float>& p,
                        const gpt2_layer_activations& a, gpt2_matrix out, A& attention, std::int64_t r0,
                        std::int64_t n) {
  detail::gpt2_layer_rows_before_attention(backend, on, p, a, r0, n);
  attention.forward(on, a.qkv, a.atty, a.att_lse, r0, n);
  detail::gpt2_layer_rows_after_attention(backend, on, p, a, r0, n);
  detail::linear_forward(backend, on, out, a.fch_gelu.slice(r0, n), p.fcprojw, p.fcprojb);
  detail::launch(backend, on, ops::residual_forward<float>{out, out, a.res2.slice(r0, n)});
}

/// The forward of one block: reads a.input [T, C], fills the other
/// skeletal tensors of `a` and writes the block's output to `out` [T, C]
/// (which may be the buffer a.input was copied from).
template <Backend B>
void gpt2_layer_forward(B& backend, typename B::stream& on, const gpt2_layer_views<float>& p,
                        std::int64_t heads, const gpt2_layer_activations& a, gpt2_matrix out,
                        chunked_causal_attention<B>& attention) {
  gpt2_chunked_attention<B> whole{&attention, heads};
  gpt2_layer_forward(backend, on, p, a, out, whole, 0, a.input.extent(0));
}

/// Token-wise recomputation (MEMO section 4.1): rebuilds every skeletal
/// tensor but the input, the attention output and its log-sum-exp on rows
/// [r0, r0 + n) from those three, which are always present. Rows outside
/// the range are not touched; the values equal the forward's up to the
/// rounding of a GEMM over fewer rows. With qkv dropped from the skeletal
/// tensors (the attention keeps Q, K and V on the host) qkv is not rebuilt.
template <Backend B>
void gpt2_layer_recompute(B& backend, typename B::stream& on, const gpt2_layer_views<float>& p,
                          const gpt2_layer_activations& a, std::int64_t r0, std::int64_t n,
                          gpt2_qkv_skeletal qkv = gpt2_qkv_skeletal::kept) {
  if (n <= 0) return;
  detail::gpt2_layer_rows_before_attention(backend, on, p, a, r0, n, qkv);
  detail::gpt2_layer_rows_after_attention(backend, on, p, a, r0, n);
}

namespace detail {

/// A resource that waits for `stream` before returning memory upstream:
/// recording a block hands its buffers back while work that reads them is
/// still queued, which a real upstream must not see.
template <Backend B, MemoryResource Upstream>
class stream_synchronizing_resource {
 public:
  stream_synchronizing_resource(B& backend, typename B::stream& stream, Upstream& upstream)
      : backend_(&backend), stream_(&stream), upstream_(&upstream) {}
  void* allocate(std::size_t bytes, std::size_t alignment = default_alignment_bytes) {
    return upstream_->allocate(bytes, alignment);
  }
  void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment_bytes) {
    drain(*backend_, *stream_);
    upstream_->deallocate(pointer, bytes, alignment);
  }
  [[nodiscard]] std::size_t current_bytes() const { return upstream_->current_bytes(); }
  [[nodiscard]] std::size_t peak_bytes() const { return upstream_->peak_bytes(); }
  void reset_peak() { upstream_->reset_peak(); }
  /// The upstream's liveness: its buffers are the upstream's memory.
  [[nodiscard]] liveness_watch watch() const
    requires requires(const Upstream& u) { u.watch(); }
  {
    return upstream_->watch();
  }
  [[nodiscard]] bool memory_alive() const noexcept { return resource_memory_alive(*upstream_); }

 private:
  B* backend_;
  typename B::stream* stream_;
  Upstream* upstream_;
};

}  // namespace detail

/// The backward of one block on the run of rows [r0, r0 + n) (runs go in
/// reverse row order). `dresidual` [n, C] holds d(res3) of those rows on
/// entry and their dx on return; parameter gradients are added into `g`.
/// The MLP half runs in chunks of `mlp_chunk` rows (0: one chunk; FPDT
/// section 5.4 uses twice as many MLP chunks as attention chunks), which
/// bounds its two [rows, 4C] gradient buffers. The transient buffers are
/// taken from `transient` and returned as soon as their last use is
/// enqueued, in an order that depends only on n and mlp_chunk, so one
/// recorded backward is the trace of every later one of the same length
/// (plan/recording_resource.hpp, plan/planned_replay.hpp). Buffers are
/// returned while work that reads them may still be queued on `on`: the
/// resource must only hand their bytes to work ordered after it on `on`
/// (true of a planned replay driven from this stream).
template <Backend B, MemoryResource R, class A>
  requires gpt2_block_attention<A, B>
void gpt2_layer_backward(B& backend, typename B::stream& on, const gpt2_layer_views<float>& p,
                         const gpt2_layer_views<float>& g, const gpt2_layer_activations& a,
                         gpt2_matrix dresidual, R& transient, A& attention, std::int64_t r0, std::int64_t n,
                         std::int64_t mlp_chunk = 0) {
  using detail::launch, detail::linear_backward;
  using floats = buffer<float, R>;
  const std::int64_t C = a.input.extent(1);
  const std::int64_t m = mlp_chunk <= 0 ? n : std::min(mlp_chunk, n);
  auto view = [](floats& b, std::int64_t rows, std::int64_t cols) {
    return gpt2_matrix::contiguous(b.data(), {rows, cols});
  };
  auto rows = [](gpt2_matrix t, std::int64_t first, std::int64_t count) { return t.slice(first, count); };
  const auto mn = static_cast<std::size_t>(m * C), nn = static_cast<std::size_t>(n * C);
  // MLP half, chunk by chunk: the projection's output gradient is d(res3).
  floats dln;  // [n, C]: gradient at a layernorm's output
  for (std::int64_t k0 = 0; k0 < n; k0 += m) {
    const std::int64_t k = std::min(m, n - k0), t0 = r0 + k0;  // rows of the chunk; t0 in the block
    floats dfch_gelu(transient, 4 * mn);  // [m, 4C]
    linear_backward(backend, on, view(dfch_gelu, k, 4 * C), g.fcprojw, g.fcprojb, rows(dresidual, k0, k),
                    a.fch_gelu.slice(t0, k), p.fcprojw);
    floats dfch(transient, 4 * mn);  // [m, 4C]
    backend.memset_async(dfch.data(), 0, dfch.size_bytes(), on);
    launch(backend, on, ops::gelu_backward<float>{view(dfch, k, 4 * C), a.fch.slice(t0, k), view(dfch_gelu, k, 4 * C)});
    dfch_gelu = floats();
    if (k0 == 0) dln = floats(transient, nn);
    const gpt2_matrix dln_k = view(dln, n, C).slice(k0, k);
    linear_backward(backend, on, dln_k, g.fcw, g.fcb, view(dfch, k, 4 * C), a.ln2.slice(t0, k), p.fcw);
    dfch = floats();
    launch(backend, on, ops::layernorm_backward_input<float>{rows(dresidual, k0, k), dln_k, a.res2.slice(t0, k), p.ln2w,
                                                             a.ln2_mean.slice(t0, k), a.ln2_rstd.slice(t0, k)});
    launch(backend, on, ops::layernorm_backward_params<float>{g.ln2w, g.ln2b, dln_k, a.res2.slice(t0, k),
                                                              a.ln2_mean.slice(t0, k), a.ln2_rstd.slice(t0, k)});
  }
  // Attention half: dresidual now holds d(res2).
  floats datty(transient, nn);  // [n, C]
  linear_backward(backend, on, view(datty, n, C), g.attprojw, g.attprojb, dresidual, a.atty.slice(r0, n), p.attprojw);
  floats dqkv(transient, 3 * nn);  // [n, 3C]
  backend.memset_async(dqkv.data(), 0, dqkv.size_bytes(), on);
  attention.backward(on, a.qkv, a.atty, view(datty, n, C), a.att_lse, view(dqkv, n, 3 * C), r0, n);
  datty = floats();
  linear_backward(backend, on, view(dln, n, C), g.qkvw, g.qkvb, view(dqkv, n, 3 * C), a.ln1.slice(r0, n), p.qkvw);
  dqkv = floats();
  const gpt2_matrix x = a.input.slice(r0, n);
  launch(backend, on, ops::layernorm_backward_input<float>{dresidual, view(dln, n, C), x, p.ln1w, a.ln1_mean.slice(r0, n),
                                                           a.ln1_rstd.slice(r0, n)});
  launch(backend, on, ops::layernorm_backward_params<float>{g.ln1w, g.ln1b, view(dln, n, C), x, a.ln1_mean.slice(r0, n),
                                                            a.ln1_rstd.slice(r0, n)});
}

/// The backward of one block over all its T tokens. `dresidual` [T, C]
/// holds d(res3) on entry and dx on return; parameter gradients are added
/// into `g`. Its five gradient buffers are transient (see above).
template <Backend B, MemoryResource R>
void gpt2_layer_backward(B& backend, typename B::stream& on, const gpt2_layer_views<float>& p,
                         const gpt2_layer_views<float>& g, std::int64_t heads,
                         const gpt2_layer_activations& a, gpt2_matrix dresidual, R& transient,
                         chunked_causal_attention<B>& attention) {
  gpt2_chunked_attention<B> whole{&attention, heads};
  gpt2_layer_backward(backend, on, p, g, a, dresidual, transient, whole, 0, a.input.extent(0));
}

}  // namespace memo
