// memo/model/ops/encoder.hpp
//
// GPT-2's input encoding (llm.c's encoder): each token's row is its learned
// token embedding plus the learned embedding of its position,
//
//   out[r, :] = wte[tokens[r], :] + wpe[position(r), :],
//   position(r) = (position_offset + r) mod sequence_length,
//
// so a batch of B sequences of length T laid out as rows b*T + t has
// position_offset 0, and a chunk of one sequence (FPDT section 4.1: the
// layer runs on sequence chunks) starting at position p has offset p.
//
// The backward pass adds dout's rows into the embedding tables. Written as
// a scatter (every row adds into "its" table row) it races as soon as rows
// run in parallel, because many rows share a position or a token. Here
// every table element is owned by exactly one index instead:
//
// - positions: index (p, c) sums dout[r, c] over the rows r whose position
//   is p (r = r0, r0 + T, r0 + 2T, ...), in ascending r;
// - tokens: the rows are first grouped by token on the host
//   (`build_token_buckets`, a sort by (token, row)); index (k, c) then sums
//   dout[r, c] over the rows of the k-th distinct token, in ascending r.
//
// Each element is accumulated in ascending row order, the order of llm.c's
// sequential loop, so the result is deterministic and equal to that loop's
// bit for bit, whatever order the indices run in. The token ids live on the
// host (they come from the data loader), so the grouping is host work; its
// three arrays are then copied wherever the operator runs.
//
// Like every backward in llm.c, the backward operators accumulate (+=) into
// the gradients: the caller zeroes them once per step.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "memo/model/ops/common.hpp"

namespace memo::ops {

/// out = wte[tokens] + wpe[positions], one index per (row, channel).
/// A token outside [0, vocab_size) makes its row NaN (never an
/// out-of-bounds read).
template <ops_scalar T>
struct encoder_forward {
  tensor_view<T, 2> out;                      // [tokens, channels]
  tensor_view<const std::int32_t, 1> tokens;  // [tokens]
  tensor_view<const T, 2> wte;                // [vocab_padded, channels]
  tensor_view<const T, 2> wpe;                // [max_positions, channels]
  std::int64_t vocab_size = 0;                // real tokens: ids in [0, vocab_size)
  std::int64_t sequence_length = 0;           // T: positions wrap every T rows
  std::int64_t position_offset = 0;           // position of row 0, in [0, T)

  MEMO_HOST_DEVICE std::int64_t rows() const { return out.extent(0); }
  MEMO_HOST_DEVICE std::int64_t cols() const { return out.extent(1); }

  MEMO_HOST_DEVICE void operator()(std::int64_t r, std::int64_t c) const {
    const std::int64_t token = tokens(r);
    const std::int64_t position = (position_offset + r) % sequence_length;
    out(r, c) = (token >= 0 && token < vocab_size) ? wte(token, c) + wpe(position, c)
                                                  : detail::ops_nan<T>();
  }

  void validate() const {
    const char* op = "encoder_forward";
    const std::int64_t n = out.extent(0);
    const std::int64_t channels = out.extent(1);
    detail::expect_view(tokens, {n}, op, "tokens");
    detail::expect_in_range(vocab_size, 1, wte.extent(0), op, "vocab_size");
    detail::expect_view(wte, {wte.extent(0), channels}, op, "wte");
    detail::expect_in_range(sequence_length, 1, wpe.extent(0), op, "sequence_length");
    detail::expect_view(wpe, {wpe.extent(0), channels}, op, "wpe");
    detail::expect_in_range(position_offset, 0, sequence_length - 1, op, "position_offset");
    detail::expect_view(out, {n, channels}, op, "out");
  }
};

/// dwpe[p, c] += sum of dout[r, c] over the rows r at position p; one index
/// per (position, channel) for the positions [0, sequence_length).
template <ops_scalar T>
struct encoder_backward_positions {
  tensor_view<T, 2> dwpe;        // [max_positions, channels], accumulated
  tensor_view<const T, 2> dout;  // [tokens, channels]
  std::int64_t sequence_length = 0;
  std::int64_t position_offset = 0;

  MEMO_HOST_DEVICE std::int64_t rows() const { return sequence_length; }
  MEMO_HOST_DEVICE std::int64_t cols() const { return dout.extent(1); }

  MEMO_HOST_DEVICE void operator()(std::int64_t p, std::int64_t c) const {
    // The first row at position p, then every T rows.
    const std::int64_t first = (p - position_offset + sequence_length) % sequence_length;
    T acc = dwpe(p, c);
    for (std::int64_t r = first; r < dout.extent(0); r += sequence_length) acc += dout(r, c);
    dwpe(p, c) = acc;
  }

  void validate() const {
    const char* op = "encoder_backward_positions";
    detail::expect_in_range(sequence_length, 1, dwpe.extent(0), op, "sequence_length");
    detail::expect_in_range(position_offset, 0, sequence_length - 1, op, "position_offset");
    detail::expect_view(dwpe, {dwpe.extent(0), dout.extent(1)}, op, "dwpe");
    detail::expect_view(dout, {dout.extent(0), dout.extent(1)}, op, "dout");
  }
};

/// The rows of a token sequence grouped by token id: the k-th distinct
/// token is ids[k], and its rows, ascending, are order[starts[k] ..
/// starts[k + 1]). Views over caller-provided storage (see
/// `build_token_buckets`).
struct token_buckets {
  tensor_view<const std::int64_t, 1> order;   // [tokens]
  tensor_view<const std::int64_t, 1> starts;  // [distinct + 1]
  tensor_view<const std::int32_t, 1> ids;     // [distinct]

  [[nodiscard]] std::int64_t distinct() const { return ids.extent(0); }
};

/// Groups the rows of `tokens` (host memory) by token id into the caller's
/// storage: `order` [tokens], `starts` [tokens + 1], `ids` [tokens] (the
/// worst case: every token distinct). Throws when a token lies outside
/// [0, vocab_size) or a view has the wrong size. Sorting by (token, row)
/// allocates nothing and gives one answer for one input.
inline token_buckets build_token_buckets(tensor_view<const std::int32_t, 1> tokens,
                                         std::int64_t vocab_size,
                                         tensor_view<std::int64_t, 1> order,
                                         tensor_view<std::int64_t, 1> starts,
                                         tensor_view<std::int32_t, 1> ids) {
  const char* op = "build_token_buckets";
  const std::int64_t n = tokens.extent(0);
  detail::expect_view(order, {n}, op, "order");
  detail::expect_view(starts, {n + 1}, op, "starts");
  detail::expect_view(ids, {n}, op, "ids");
  for (std::int64_t r = 0; r < n; ++r) {
    expects(tokens(r) >= 0 && tokens(r) < vocab_size, [&] {
      return std::string(op) + ": token " + std::to_string(tokens(r)) + " at row " +
             std::to_string(r) + " is outside the vocabulary [0, " + std::to_string(vocab_size) +
             ")";
    });
    order(r) = r;
  }
  // order is contiguous or strided: sort through an index loop on a view.
  auto less = [&](std::int64_t a, std::int64_t b) {
    return tokens(a) != tokens(b) ? tokens(a) < tokens(b) : a < b;
  };
  if (order.is_contiguous()) {
    std::sort(order.data(), order.data() + n, less);
  } else {
    // Insertion sort keeps a strided view correct; the model passes
    // contiguous storage.
    for (std::int64_t i = 1; i < n; ++i)
      for (std::int64_t j = i; j > 0 && less(order(j), order(j - 1)); --j) {
        const std::int64_t t = order(j);
        order(j) = order(j - 1);
        order(j - 1) = t;
      }
  }
  std::int64_t distinct = 0;
  for (std::int64_t j = 0; j < n; ++j) {
    if (j == 0 || tokens(order(j)) != tokens(order(j - 1))) {
      starts(distinct) = j;
      ids(distinct) = tokens(order(j));
      ++distinct;
    }
  }
  starts(distinct) = n;
  return {order, starts.slice(0, distinct + 1), ids.slice(0, distinct)};
}

/// dwte[ids[k], c] += sum of dout[r, c] over the rows r of token ids[k];
/// one index per (distinct token, channel).
template <ops_scalar T>
struct encoder_backward_tokens {
  tensor_view<T, 2> dwte;        // [vocab_padded, channels], accumulated
  tensor_view<const T, 2> dout;  // [tokens, channels]
  token_buckets buckets;         // of the same tokens

  MEMO_HOST_DEVICE std::int64_t rows() const { return buckets.ids.extent(0); }
  MEMO_HOST_DEVICE std::int64_t cols() const { return dout.extent(1); }

  MEMO_HOST_DEVICE void operator()(std::int64_t k, std::int64_t c) const {
    const std::int64_t token = buckets.ids(k);
    if (token < 0 || token >= dwte.extent(0)) return;  // not from build_token_buckets
    T acc = dwte(token, c);
    for (std::int64_t j = buckets.starts(k); j < buckets.starts(k + 1); ++j)
      acc += dout(buckets.order(j), c);
    dwte(token, c) = acc;
  }

  void validate() const {
    const char* op = "encoder_backward_tokens";
    const std::int64_t n = dout.extent(0);
    const std::int64_t distinct = buckets.ids.extent(0);
    detail::expect_view(dwte, {dwte.extent(0), dout.extent(1)}, op, "dwte");
    detail::expect_view(dout, {n, dout.extent(1)}, op, "dout");
    detail::expect_view(buckets.order, {n}, op, "buckets.order");
    detail::expect_view(buckets.starts, {distinct + 1}, op, "buckets.starts");
    detail::expect_in_range(distinct, n > 0 ? 1 : 0, n, op, "distinct tokens");
    // Shapes only: the bucket arrays may be device memory here. They come
    // from build_token_buckets, which checked every token id on the host.
  }
};

}  // namespace memo::ops
