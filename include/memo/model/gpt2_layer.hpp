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
// Attention is `chunked_causal_attention` (attention.hpp, FPDT section 4),
// called through `detail::gpt2_attention_forward/backward` over strided
// [T, NH, hs] views of the fused QKV buffer: no [T, T] score matrix exists.
//
// Every buffer is a view into memory the caller owns (the model carves it
// from one device allocation); nothing here allocates.
#pragma once

#include <cmath>
#include <cstdint>

#include "memo/backend/concepts.hpp"
#include "memo/core/memory_region.hpp"
#include "memo/core/tensor_view.hpp"
#include "memo/model/attention.hpp"
#include "memo/model/gpt2_config.hpp"
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

/// What one block keeps from its forward for its backward (batch 1, T tokens).
struct gpt2_layer_activations {
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
  gpt2_matrix res3;      // [T, C]: the block's output

  static gpt2_layer_activations carve(region_carver& carver, std::int64_t T, std::int64_t C,
                                      std::int64_t NH) {
    using detail::carve_matrix, detail::carve_vector;
    return {carve_matrix(carver, T, C, "ln1"),        carve_vector(carver, T, "ln1_mean"),
            carve_vector(carver, T, "ln1_rstd"),      carve_matrix(carver, T, 3 * C, "qkv"),
            carve_matrix(carver, T, C, "atty"),       carve_matrix(carver, NH, T, "att_lse"),
            carve_matrix(carver, T, C, "res2"),       carve_matrix(carver, T, C, "ln2"),
            carve_vector(carver, T, "ln2_mean"),      carve_vector(carver, T, "ln2_rstd"),
            carve_matrix(carver, T, 4 * C, "fch"),    carve_matrix(carver, T, 4 * C, "fch_gelu"),
            carve_matrix(carver, T, C, "res3")};
  }
};

/// Buffers every block's backward reuses, one set per model.
struct gpt2_layer_scratch {
  gpt2_matrix dln;        // [T, C]: gradient at a layernorm's output
  gpt2_matrix datty;      // [T, C]
  gpt2_matrix dqkv;       // [T, 3C]
  gpt2_matrix dfch_gelu;  // [T, 4C]
  gpt2_matrix dfch;       // [T, 4C]

  static gpt2_layer_scratch carve(region_carver& carver, std::int64_t T, std::int64_t C) {
    using detail::carve_matrix, detail::carve_vector;
    return {carve_matrix(carver, T, C, "dln"),          carve_matrix(carver, T, C, "datty"),
            carve_matrix(carver, T, 3 * C, "dqkv"),     carve_matrix(carver, T, 4 * C, "dfch_gelu"),
            carve_matrix(carver, T, 4 * C, "dfch")};
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

/// The forward of one block: reads x [T, C], fills `a` (a.res3 is the output).
template <Backend B>
void gpt2_layer_forward(B& backend, typename B::stream& on, const gpt2_layer_views<float>& p,
                        std::int64_t heads, tensor_view<const float, 2> x,
                        gpt2_layer_activations& a, chunked_causal_attention<B>& attention) {
  using detail::launch, detail::linear_forward;
  launch(backend, on, ops::layernorm_forward<float>{a.ln1, a.ln1_mean, a.ln1_rstd, x, p.ln1w, p.ln1b});
  linear_forward(backend, on, a.qkv, a.ln1, p.qkvw, p.qkvb);
  detail::gpt2_attention_forward(attention, on, a.atty, a.att_lse, a.qkv, heads);
  linear_forward(backend, on, a.res2, a.atty, p.attprojw, p.attprojb);  // res2 = attproj for now
  launch(backend, on, ops::residual_forward<float>{a.res2, a.res2, x});
  launch(backend, on, ops::layernorm_forward<float>{a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, p.ln2w, p.ln2b});
  linear_forward(backend, on, a.fch, a.ln2, p.fcw, p.fcb);
  launch(backend, on, ops::gelu_forward<float>{a.fch_gelu, a.fch});
  linear_forward(backend, on, a.res3, a.fch_gelu, p.fcprojw, p.fcprojb);
  launch(backend, on, ops::residual_forward<float>{a.res3, a.res3, a.res2});
}

/// The backward of one block. `dresidual` [T, C] holds d(res3) on entry and
/// dx on return; parameter gradients are added into `g`.
template <Backend B>
void gpt2_layer_backward(B& backend, typename B::stream& on, const gpt2_layer_views<float>& p,
                         const gpt2_layer_views<float>& g, std::int64_t heads,
                         tensor_view<const float, 2> x, const gpt2_layer_activations& a,
                         gpt2_matrix dresidual, gpt2_layer_scratch& s,
                         chunked_causal_attention<B>& attention) {
  using detail::launch, detail::linear_backward;
  // MLP half: the projection's output gradient is d(res3) itself.
  linear_backward(backend, on, s.dfch_gelu, g.fcprojw, g.fcprojb, dresidual, a.fch_gelu, p.fcprojw);
  backend.memset_async(s.dfch.data(), 0, s.dfch.size_bytes(), on);
  launch(backend, on, ops::gelu_backward<float>{s.dfch, a.fch, s.dfch_gelu});
  linear_backward(backend, on, s.dln, g.fcw, g.fcb, s.dfch, a.ln2, p.fcw);
  launch(backend, on, ops::layernorm_backward_input<float>{dresidual, s.dln, a.res2, p.ln2w, a.ln2_mean, a.ln2_rstd});
  launch(backend, on, ops::layernorm_backward_params<float>{g.ln2w, g.ln2b, s.dln, a.res2, a.ln2_mean, a.ln2_rstd});
  // Attention half: dresidual now holds d(res2).
  linear_backward(backend, on, s.datty, g.attprojw, g.attprojb, dresidual, a.atty, p.attprojw);
  backend.memset_async(s.dqkv.data(), 0, s.dqkv.size_bytes(), on);
  detail::gpt2_attention_backward(attention, on, s.dqkv, s.datty, a.atty, a.att_lse, a.qkv, heads);
  linear_backward(backend, on, s.dln, g.qkvw, g.qkvb, s.dqkv, a.ln1, p.qkvw);
  launch(backend, on, ops::layernorm_backward_input<float>{dresidual, s.dln, x, p.ln1w, a.ln1_mean, a.ln1_rstd});
  launch(backend, on, ops::layernorm_backward_params<float>{g.ln1w, g.ln1b, s.dln, x, a.ln1_mean, a.ln1_rstd});
}

}  // namespace memo
