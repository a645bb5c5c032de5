// memo/model/gpt2_head.hpp
//
// The two ends of the reference GPT-2 around its blocks (gpt2_layer.hpp),
// written once for the single-device model (gpt2_model.hpp) and the
// parallel one (gpt2_parallel_model.hpp), on any run of token rows:
//
//   - the embedding: row r of a run whose first token sits at position p
//     is wte[token] + wpe[p + r]; its position backward adds the rows into
//     wpe[p ..]. (A rank of a sequence-parallel group holds its tokens in
//     runs of consecutive positions: FPDT's chunks.)
//   - the language-model head and the loss (FPDT section 5.4's chunked
//     loss): lnf = layernorm(x); then `loss_chunk` rows at a time the head's
//     GEMM writes logits [loss_chunk, Vp] into one buffer, the cross-entropy
//     turns them into their gradient in place (scaled by `dloss`, 1 / the
//     tokens of the mean), and the head's two backward GEMMs consume them
//     (dlnf rows, dwte +=) before the next chunk reuses the buffer. The
//     logits of the whole run never exist, and rows are independent, so
//     the chunk changes neither the loss nor any gradient.
//   - the head's backward: dx = d layernorm(x) from dlnf, dlnfw, dlnfb.
//
// Gradients are added (+=) like every backward in memo; the caller zeroes
// them once per step. Everything runs in order on the caller's stream.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "memo/backend/concepts.hpp"
#include "memo/core/tensor_view.hpp"
#include "memo/model/gpt2_config.hpp"
#include "memo/model/gpt2_layer.hpp"
#include "memo/model/ops/cross_entropy.hpp"
#include "memo/model/ops/encoder.hpp"
#include "memo/model/ops/layernorm.hpp"

namespace memo {

namespace detail {

inline void expect_positions(const gpt2_parameter_views<float>& p, std::int64_t first, std::int64_t n,
                             const char* call) {
  expects(first >= 0 && n >= 1 && first <= p.wpe.extent(0) - n, [&] {
    return std::string(call) + ": positions [" + std::to_string(first) + ", " + std::to_string(first + n) +
           ") are empty or beyond the " + std::to_string(p.wpe.extent(0)) + " rows of wpe (maxT)";
  });
}

}  // namespace detail

/// out [n, C] = wte[tokens] + wpe[first_position ..]: the embedding of n
/// tokens at consecutive positions from `first_position`.
template <Backend B>
void gpt2_embedding_forward(B& backend, typename B::stream& on, gpt2_matrix out,
                            tensor_view<const std::int32_t, 1> tokens, const gpt2_parameter_views<float>& p,
                            std::int64_t vocab_size, std::int64_t first_position) {
  const std::int64_t n = out.extent(0);
  detail::expect_positions(p, first_position, n, "gpt2_embedding_forward");
  detail::launch(backend, on,
                 ops::encoder_forward<float>{out, tokens, p.wte, p.wpe.slice(first_position, n), vocab_size, n, 0});
}

/// dwpe[first_position + r] += dout[r] for the n rows of `dout`.
template <Backend B>
void gpt2_position_embedding_backward(B& backend, typename B::stream& on, const gpt2_parameter_views<float>& g,
                                      tensor_view<const float, 2> dout, std::int64_t first_position) {
  const std::int64_t n = dout.extent(0);
  detail::expect_positions(g, first_position, n, "gpt2_position_embedding_backward");
  detail::launch(backend, on, ops::encoder_backward_positions<float>{g.wpe.slice(first_position, n), dout, n, 0});
}

/// The head of a run of n rows and what it reads and writes.
struct gpt2_head_views {
  gpt2_matrix x;                            // [n, C]: the last block's output
  gpt2_matrix lnf, dlnf;                    // [n, C]
  gpt2_vector lnf_mean, lnf_rstd;           // [n]
  gpt2_matrix logits;                       // [loss_chunk, Vp]: one chunk at a time
  gpt2_vector losses;                       // [n]: per-token loss out
  tensor_view<const std::int32_t, 1> targets;  // [n]
};

/// lnf = layernorm(x), then chunk by chunk the loss and the head's
/// backward: losses, dlnf (overwritten) and dwte (+=). `dloss` is the
/// gradient of the mean loss per token (1 / its token count).
template <Backend B>
void gpt2_head_loss(B& backend, typename B::stream& on, const gpt2_parameter_views<float>& p,
                    const gpt2_parameter_views<float>& g, const gpt2_head_views& v, std::int64_t vocab_size,
                    float dloss) {
  const std::int64_t n = v.x.extent(0), C = v.x.extent(1), Vp = v.logits.extent(1);
  const std::int64_t chunk = v.logits.extent(0);
  detail::launch(backend, on, ops::layernorm_forward<float>{v.lnf, v.lnf_mean, v.lnf_rstd, v.x, p.lnfw, p.lnfb});
  for (std::int64_t r0 = 0; r0 < n; r0 += chunk) {
    const std::int64_t k = std::min(chunk, n - r0);
    const gpt2_matrix logits = v.logits.slice(0, k);  // [k, Vp]
    const gpt2_matrix x = v.lnf.slice(r0, k);
    backend.gemm(on, gemm_shape{.m = k, .n = Vp, .k = C, .op_b = matrix_op::transpose}, 1.0f, x.data(),
                 p.wte.data(), 0.0f, logits.data());
    detail::launch(backend, on,
                   ops::cross_entropy_chunk<float>{logits, v.losses.slice(r0, k), v.targets.slice(r0, k), vocab_size,
                                                   dloss});
    backend.gemm(on, gemm_shape{.m = k, .n = C, .k = Vp}, 1.0f, logits.data(), p.wte.data(), 0.0f,
                 v.dlnf.slice(r0, k).data());
    backend.gemm(on, gemm_shape{.m = Vp, .n = C, .k = k, .op_a = matrix_op::transpose}, 1.0f, logits.data(),
                 x.data(), 1.0f, g.wte.data());
  }
}

/// dx [n, C] = the gradient at the head's input from dlnf (overwritten);
/// dlnfw, dlnfb +=.
template <Backend B>
void gpt2_head_backward(B& backend, typename B::stream& on, const gpt2_parameter_views<float>& p,
                        const gpt2_parameter_views<float>& g, const gpt2_head_views& v, gpt2_matrix dx) {
  backend.memset_async(dx.data(), 0, static_cast<std::size_t>(dx.extent(0) * dx.extent(1)) * sizeof(float), on);
  detail::launch(backend, on,
                 ops::layernorm_backward_input<float>{dx, v.dlnf, v.x, p.lnfw, v.lnf_mean, v.lnf_rstd});
  detail::launch(backend, on,
                 ops::layernorm_backward_params<float>{g.lnfw, g.lnfb, v.dlnf, v.x, v.lnf_mean, v.lnf_rstd});
}

}  // namespace memo
