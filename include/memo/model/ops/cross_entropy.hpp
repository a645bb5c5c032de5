// memo/model/ops/cross_entropy.hpp
//
// GPT-2's classifier loss (llm.c's softmax + cross-entropy, fused as in its
// CUDA trainer), for one chunk of tokens at a time.
//
// The vocabulary is padded: wte and the logits have Vp columns (a multiple
// of 128 in llm.c) of which only the first V are real tokens. For a token
// row with logits x and target t, over the real columns only,
//
//   m = max_i x_i,  lse = m + log(sum_i exp(x_i - m)),  loss = lse - x_t,
//   dx_i = (exp(x_i - lse) - [i == t]) * dloss      for i < V,
//   dx_i = 0                                        for V <= i < Vp,
//
// where dloss = 1 / total_tokens is the weight of this token in the mean
// loss. Shifting by the row maximum means no exp overflows however large
// the logits are, and the loss is lse - x_t rather than -log(p_t), so it is
// finite even when p_t underflows.
//
// FPDT section 5.4: the logits of a long sequence never exist at once. The
// model computes them for a chunk of tokens (a GEMM into a [chunk, Vp]
// buffer), runs this operator, which replaces the logits by their gradient
// in place and writes each token's loss, and feeds the gradient to the
// classifier's backward GEMMs before the next chunk reuses the buffer. Each
// row only reads and writes its own row, so the chunk size changes nothing
// in the result (the tests check this for chunk sizes that do not divide
// the sequence).
//
// A target outside [0, V) cannot be thrown from a kernel: its loss and its
// gradient row become NaN, so the bad token shows in the mean loss.
// `check_targets` is the host-side check for targets in host memory.
#pragma once

#include <cstdint>
#include <string>

#include "memo/model/ops/common.hpp"

namespace memo::ops {

/// Per-token loss, and the logits replaced by dloss * dloss/dlogits; one
/// index per token row of the chunk.
template <ops_scalar T>
struct cross_entropy_chunk {
  tensor_view<T, 2> logits;                    // [tokens, vocab_padded]: logits in, gradient out
  tensor_view<T, 1> losses;                    // [tokens]
  tensor_view<const std::int32_t, 1> targets;  // [tokens]
  std::int64_t vocab_size = 0;                 // V: columns [V, Vp) are padding
  T dloss = 0;                                 // 1 / total_tokens of the mean loss

  MEMO_HOST_DEVICE std::int64_t size() const { return logits.extent(0); }

  MEMO_HOST_DEVICE void operator()(std::int64_t r) const {
    const std::int64_t padded = logits.extent(1);
    const std::int64_t target = targets(r);
    for (std::int64_t i = vocab_size; i < padded; ++i) logits(r, i) = T(0);
    if (target < 0 || target >= vocab_size) {
      for (std::int64_t i = 0; i < vocab_size; ++i) logits(r, i) = detail::ops_nan<T>();
      losses(r) = detail::ops_nan<T>();
      return;
    }
    T m = -detail::ops_infinity<T>();
    for (std::int64_t i = 0; i < vocab_size; ++i) m = detail::ops_max(m, logits(r, i));
    T sum = 0;
    for (std::int64_t i = 0; i < vocab_size; ++i) sum += detail::ops_exp(logits(r, i) - m);
    const T lse = m + detail::ops_log(sum);
    losses(r) = lse - logits(r, target);
    for (std::int64_t i = 0; i < vocab_size; ++i) {
      const T p = detail::ops_exp(logits(r, i) - lse);
      logits(r, i) = (p - (i == target ? T(1) : T(0))) * dloss;
    }
  }

  void validate() const {
    const char* op = "cross_entropy_chunk";
    const std::int64_t n = logits.extent(0);
    detail::expect_in_range(vocab_size, 1, logits.extent(1), op, "vocab_size");
    detail::expect_view(logits, {n, logits.extent(1)}, op, "logits");
    detail::expect_view(losses, {n}, op, "losses");
    detail::expect_view(targets, {n}, op, "targets");
  }
};

/// Throws unless every target (in host memory) lies in [0, vocab_size),
/// naming the first that does not.
inline void check_targets(tensor_view<const std::int32_t, 1> targets, std::int64_t vocab_size) {
  for (std::int64_t r = 0; r < targets.extent(0); ++r) {
    expects(targets(r) >= 0 && targets(r) < vocab_size, [&] {
      return "cross entropy: target " + std::to_string(targets(r)) + " at row " +
             std::to_string(r) + " is outside the vocabulary [0, " + std::to_string(vocab_size) +
             ")";
    });
  }
}

}  // namespace memo::ops
