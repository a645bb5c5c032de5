// memo/model/ops/online_softmax.hpp
//
// The per-row pieces of chunked causal attention (FPDT sections 4.1-4.2:
// a query chunk meets the key/value chunks one at a time, "processing each
// chunk only gives intermediate results, which will be rescaled in the next
// chunk computation"). Scores are assumed already scaled (1/sqrt(head_dim)
// is the GEMM's alpha).
//
// Forward, per query row, over tiles of keys: a running maximum m, a running
// sum l = sum_j exp(s_j - m) and an unnormalised output acc = sum_j
// exp(s_j - m) v_j. A new tile with maximum m_t moves the reference to
// m' = max(m, m_t); everything accumulated so far is multiplied by
// exp(m - m'), the tile's entries enter as exp(s_j - m'). Every exponent is
// <= 0, so nothing overflows whatever the scores; at the end
// out = acc / l and the log-sum-exp lse = m + log(l) is saved for the
// backward. Two forms:
//
// - `online_softmax_update`: one row, one tile, including the product with
//   the tile's values (the reference, and what a simple kernel runs);
// - `attention_tile_start`, then per key tile `attention_tile_softmax` +
//   GEMM, then `attention_tile_finish`: the same
//   math split at the GEMM. The row operator turns a [queries, keys] score
//   tile into P = exp(s - m') in place and rescales acc rows by
//   exp(m - m'); the caller's GEMM then adds P V into acc (beta = 1).
//
// Backward, per query row, with the saved lse and D = rowsum(dO * O):
// P is recomputed as exp(s - lse) (no [queries, keys] tensor is kept), and
// the score gradient is dS = P * (dP - D), where dP = dO V^T comes from a
// GEMM. dS then feeds the GEMMs for dQ and dK, P the one for dV.
//
// Every exp here is detail::ops_fast_exp (fast_exp.hpp): in fp32 a
// polynomial the compiler vectorises (within 2 ulp of exp), the device's
// expf on a GPU, the C library's exp in fp64. Over the contiguous rows of
// the attention's score tiles the row loops have no calls and no branches,
// so one pass of the forward (and of the backward) runs in vector
// registers; reductions keep fixed partial sums, so a row's result does
// not depend on how the rows are spread over threads.
//
// Causal masking is by count, not by -infinity: within a tile whose keys
// start at position key_first, the query at position q sees the first
// clamp(q - key_first + 1, 0, keys) keys. Masked entries of P and dS are
// written as 0, so the GEMMs need no mask.
#pragma once

#include <cstdint>

#include "memo/model/ops/common.hpp"
#include "memo/model/ops/fast_exp.hpp"

namespace memo::detail {

// Row loops of the tile operators over `n` entries `step` apart. The score
// tiles the attention's GEMMs write are contiguous (step 1); there the
// loops have no calls and no branches, and the reductions run in
// `row_lanes` independent partial results combined in a fixed order at
// the end, so the compiler vectorises them (float addition is not
// associative, so a single running sum would keep them scalar) while the
// order of the additions stays fixed by the source.
inline constexpr int row_lanes = 8;

/// max(p[0], ..., p[n - 1]), -inf for n = 0.
template <class T>
MEMO_HOST_DEVICE T row_max(const T* p, std::int64_t step, std::int64_t n) {
  T lane[row_lanes];
  for (int l = 0; l < row_lanes; ++l) lane[l] = -ops_infinity<T>();
  std::int64_t j = 0;
  if (step == 1) {
    for (; j + row_lanes <= n; j += row_lanes)
      for (int l = 0; l < row_lanes; ++l) lane[l] = ops_max(lane[l], p[j + l]);
  }
  for (; j < n; ++j) lane[0] = ops_max(lane[0], p[j * step]);
  T m = lane[0];
  for (int l = 1; l < row_lanes; ++l) m = ops_max(m, lane[l]);
  return m;
}

/// p[j] = exp(p[j] - shift) for j < n; returns the sum of the new p[j].
template <class T>
MEMO_HOST_DEVICE T row_exp_sum(T* p, std::int64_t step, std::int64_t n, T shift) {
  T lane[row_lanes];
  for (int l = 0; l < row_lanes; ++l) lane[l] = T(0);
  std::int64_t j = 0;
  if (step == 1) {
    for (; j + row_lanes <= n; j += row_lanes)
      for (int l = 0; l < row_lanes; ++l) {
        const T e = ops_fast_exp(p[j + l] - shift);
        p[j + l] = e;
        lane[l] += e;
      }
  }
  for (; j < n; ++j) {
    const T e = ops_fast_exp(p[j * step] - shift);
    p[j * step] = e;
    lane[0] += e;
  }
  // Pairwise: ((0 + 1) + (2 + 3)) + ((4 + 5) + (6 + 7)).
  for (int width = 1; width < row_lanes; width *= 2)
    for (int l = 0; l + width < row_lanes; l += 2 * width) lane[l] += lane[l + width];
  return lane[0];
}

/// p[j] = 0 for j in [from, to).
template <class T>
MEMO_HOST_DEVICE void row_fill_zero(T* p, std::int64_t step, std::int64_t from, std::int64_t to) {
  for (std::int64_t j = from; j < to; ++j) p[j * step] = T(0);
}

}  // namespace memo::detail

namespace memo::ops {

/// The running state of one query row. Starts at {-inf, 0}.
template <ops_scalar T>
struct online_softmax_state {
  T max = -detail::ops_infinity<T>();  // m: largest score seen
  T sum = 0;                           // l: sum of exp(s - m) over the scores seen
};

/// Where a tile lies in the sequence, for the causal mask.
struct tile_position {
  std::int64_t query_first = 0;  // position of the tile's first query row
  std::int64_t key_first = 0;    // position of the tile's first key
  bool causal = true;
};

/// The keys of a `keys`-wide tile that query row `row` may see.
MEMO_HOST_DEVICE std::int64_t visible_keys(const tile_position& tile, std::int64_t row,
                                           std::int64_t keys) {
  if (!tile.causal) return keys;
  const std::int64_t seen = tile.query_first + row - tile.key_first + 1;
  return seen < 0 ? 0 : (seen > keys ? keys : seen);
}

/// Folds the first `visible` entries of a score row into `state` and turns
/// them into exp(s - m') in place (the rest of the row becomes 0). Returns
/// exp(m - m'), the factor the row's accumulator must be multiplied by.
template <ops_scalar T>
MEMO_HOST_DEVICE T online_softmax_tile_row(online_softmax_state<T>& state,
                                           tensor_view<T, 1> scores,  // [keys]: scores in, P out
                                           std::int64_t visible) {
  T* const row = scores.data();
  const std::int64_t step = scores.stride(0);
  const T new_max = detail::ops_max(state.max, detail::row_max(row, step, visible));
  detail::row_fill_zero(row, step, visible, scores.extent(0));
  if (new_max == -detail::ops_infinity<T>()) {
    // Nothing finite seen yet: keep the state, the tile contributes nothing.
    detail::row_fill_zero(row, step, 0, visible);
    return T(1);
  }
  const T correction = detail::ops_fast_exp(state.max - new_max);  // exp(-inf) = 0 on the first tile
  state.sum = state.sum * correction + detail::row_exp_sum(row, step, visible, new_max);
  state.max = new_max;
  return correction;
}

/// One query row, one tile: updates `state` and `acc` with the first
/// `visible` scores and value rows of the tile (scores are not modified).
template <ops_scalar T>
MEMO_HOST_DEVICE void online_softmax_update(online_softmax_state<T>& state,
                                            tensor_view<T, 1> acc,            // [head_dim]
                                            tensor_view<const T, 1> scores,   // [keys]
                                            tensor_view<const T, 2> values,   // [keys, head_dim]
                                            std::int64_t visible) {
  T tile_max = -detail::ops_infinity<T>();
  for (std::int64_t j = 0; j < visible; ++j) tile_max = detail::ops_max(tile_max, scores(j));
  const T new_max = detail::ops_max(state.max, tile_max);
  if (new_max == -detail::ops_infinity<T>()) return;
  const T correction = detail::ops_fast_exp(state.max - new_max);
  const std::int64_t dim = acc.extent(0);
  for (std::int64_t d = 0; d < dim; ++d) acc(d) = acc(d) * correction;
  T tile_sum = 0;
  for (std::int64_t j = 0; j < visible; ++j) {
    const T p = detail::ops_fast_exp(scores(j) - new_max);
    tile_sum += p;
    for (std::int64_t d = 0; d < dim; ++d) acc(d) += p * values(j, d);
  }
  state.sum = state.sum * correction + tile_sum;
  state.max = new_max;
}

/// Normalises the accumulator into the output row (acc / l) and returns the
/// row's log-sum-exp m + log(l). A row that saw no key keeps a zero output
/// and gets lse = -inf.
template <ops_scalar T>
MEMO_HOST_DEVICE T online_softmax_finish(const online_softmax_state<T>& state,
                                         tensor_view<T, 1> acc) {  // [head_dim]: acc in, out
  if (!(state.sum > T(0))) return -detail::ops_infinity<T>();
  const T inv = T(1) / state.sum;
  for (std::int64_t d = 0; d < acc.extent(0); ++d) acc(d) = acc(d) * inv;
  return state.max + detail::ops_log(state.sum);
}

/// Resets the running state of a query tile before its first key tile:
/// max = -inf, sum = 0, acc = 0. One index per query row.
template <ops_scalar T>
struct attention_tile_start {
  tensor_view<T, 1> max;  // [queries]
  tensor_view<T, 1> sum;  // [queries]
  tensor_view<T, 2> acc;  // [queries, head_dim]

  MEMO_HOST_DEVICE std::int64_t size() const { return acc.extent(0); }
  MEMO_HOST_DEVICE void operator()(std::int64_t r) const {
    max(r) = -detail::ops_infinity<T>();
    sum(r) = T(0);
    for (std::int64_t d = 0; d < acc.extent(1); ++d) acc(r, d) = T(0);
  }

  void validate() const {
    const char* op = "attention_tile_start";
    const std::int64_t q = acc.extent(0);
    detail::expect_view(acc, {q, acc.extent(1)}, op, "acc");
    detail::expect_view(max, {q}, op, "max");
    detail::expect_view(sum, {q}, op, "sum");
  }
};

/// The GEMM-composed forward step for a tile: per query row, scores -> P in
/// place, (max, sum) updated, acc row rescaled. Then the caller adds P V
/// into acc. One index per query row; the state starts from
/// `attention_tile_start`.
template <ops_scalar T>
struct attention_tile_softmax {
  tensor_view<T, 2> scores;  // [queries, keys]: scaled scores in, P out
  tensor_view<T, 1> max;     // [queries], running m
  tensor_view<T, 1> sum;     // [queries], running l
  tensor_view<T, 2> acc;     // [queries, head_dim], rescaled in place
  tile_position tile;

  MEMO_HOST_DEVICE std::int64_t size() const { return scores.extent(0); }

  MEMO_HOST_DEVICE void operator()(std::int64_t r) const {
    online_softmax_state<T> state{max(r), sum(r)};
    const T correction = online_softmax_tile_row(state, detail::row_of(scores, r),
                                                 visible_keys(tile, r, scores.extent(1)));
    for (std::int64_t d = 0; d < acc.extent(1); ++d) acc(r, d) = acc(r, d) * correction;
    max(r) = state.max;
    sum(r) = state.sum;
  }

  void validate() const {
    const char* op = "attention_tile_softmax";
    const std::int64_t q = scores.extent(0);
    detail::expect_view(scores, {q, scores.extent(1)}, op, "scores");
    detail::expect_view(max, {q}, op, "max");
    detail::expect_view(sum, {q}, op, "sum");
    detail::expect_view(acc, {q, acc.extent(1)}, op, "acc");
  }
};

/// out = acc / l and lse = m + log(l), per query row, after the last tile.
template <ops_scalar T>
struct attention_tile_finish {
  tensor_view<T, 2> acc;        // [queries, head_dim]: acc in, attention output out
  tensor_view<T, 1> lse;        // [queries]
  tensor_view<const T, 1> max;  // [queries]
  tensor_view<const T, 1> sum;  // [queries]

  MEMO_HOST_DEVICE std::int64_t size() const { return acc.extent(0); }
  MEMO_HOST_DEVICE void operator()(std::int64_t r) const {
    lse(r) = online_softmax_finish(online_softmax_state<T>{max(r), sum(r)}, detail::row_of(acc, r));
  }

  void validate() const {
    const char* op = "attention_tile_finish";
    const std::int64_t q = acc.extent(0);
    detail::expect_view(acc, {q, acc.extent(1)}, op, "acc");
    detail::expect_view(lse, {q}, op, "lse");
    detail::expect_view(max, {q}, op, "max");
    detail::expect_view(sum, {q}, op, "sum");
  }
};

/// D = rowsum(dO * O), per query row (the backward's correction term).
template <ops_scalar T>
struct attention_backward_delta {
  tensor_view<T, 1> delta;        // [queries]
  tensor_view<const T, 2> dout;   // [queries, head_dim]
  tensor_view<const T, 2> out;    // [queries, head_dim]

  MEMO_HOST_DEVICE std::int64_t size() const { return out.extent(0); }
  MEMO_HOST_DEVICE void operator()(std::int64_t r) const {
    T acc = 0;
    for (std::int64_t d = 0; d < out.extent(1); ++d) acc += dout(r, d) * out(r, d);
    delta(r) = acc;
  }

  void validate() const {
    const char* op = "attention_backward_delta";
    const std::int64_t q = out.extent(0);
    detail::expect_view(out, {q, out.extent(1)}, op, "out");
    detail::expect_view(dout, {q, out.extent(1)}, op, "dout");
    detail::expect_view(delta, {q}, op, "delta");
  }
};

/// The score gradient of one tile, per query row: P = exp(s - lse) written
/// over the scores, dS = P * (dP - D) written over dP (both 0 where masked).
template <ops_scalar T>
struct attention_tile_backward {
  tensor_view<T, 2> scores;       // [queries, keys]: scaled scores in, P out
  tensor_view<T, 2> dprobs;       // [queries, keys]: dP in, dS out
  tensor_view<const T, 1> lse;    // [queries]
  tensor_view<const T, 1> delta;  // [queries]
  tile_position tile;

  MEMO_HOST_DEVICE std::int64_t size() const { return scores.extent(0); }
  MEMO_HOST_DEVICE void operator()(std::int64_t r) const {
    const std::int64_t keys = scores.extent(1);
    const std::int64_t visible = visible_keys(tile, r, keys);
    const T l = lse(r);
    const T d = delta(r);
    T* const p = &scores(r, 0);
    T* const dp = &dprobs(r, 0);
    const std::int64_t step = scores.stride(1);
    const std::int64_t dstep = dprobs.stride(1);
    if (step == 1 && dstep == 1) {
      // The GEMM tiles: contiguous rows, so the loop vectorises.
      for (std::int64_t j = 0; j < visible; ++j) {
        const T e = detail::ops_fast_exp(p[j] - l);
        p[j] = e;
        dp[j] = e * (dp[j] - d);
      }
    } else {
      for (std::int64_t j = 0; j < visible; ++j) {
        const T e = detail::ops_fast_exp(p[j * step] - l);
        p[j * step] = e;
        dp[j * dstep] = e * (dp[j * dstep] - d);
      }
    }
    detail::row_fill_zero(p, step, visible, keys);
    detail::row_fill_zero(dp, dstep, visible, keys);
  }

  void validate() const {
    const char* op = "attention_tile_backward";
    const std::int64_t q = scores.extent(0);
    detail::expect_view(scores, {q, scores.extent(1)}, op, "scores");
    detail::expect_view(dprobs, {q, scores.extent(1)}, op, "dprobs");
    detail::expect_view(lse, {q}, op, "lse");
    detail::expect_view(delta, {q}, op, "delta");
  }
};

}  // namespace memo::ops
