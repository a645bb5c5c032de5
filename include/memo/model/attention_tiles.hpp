// memo/model/attention_tiles.hpp
//
// The shape of a chunked causal attention and the per-(head, row) kernels
// it runs between its GEMMs (FPDT sections 4.1-4.2). Each kernel is a thin
// `MEMO_HOST_DEVICE` functor over `extent_2d{heads, rows}` that builds one
// head's views and calls the row operator of ops/online_softmax.hpp for one
// row, so the math that runs here is the math the ops tests check; the
// rest are copies between the caller's strided tensors and the contiguous
// per-head tiles the GEMMs write. chunked_causal_attention (attention.hpp)
// is the only intended user.
//
// Scratch tiles are per head and contiguous, with room for a full chunk:
//   scores, dprobs  [heads, chunk, chunk]  (a tile of r x k uses the first r*k)
//   max, sum        [heads, chunk]
//   acc             [heads, chunk, head_dim]
// so every GEMM writes disjoint, non-interleaved matrices (what
// gemm_strided_batched requires of C).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "memo/core/bytes.hpp"
#include "memo/core/config.hpp"
#include "memo/core/error.hpp"
#include "memo/core/tensor_view.hpp"
#include "memo/model/ops/online_softmax.hpp"

namespace memo {

/// What a chunked causal attention computes over: one sequence of `tokens`
/// tokens, `heads` query heads sharing `kv_heads` key/value heads (grouped
/// query attention: query head h reads kv head h / (heads / kv_heads)),
/// `head_dim` channels per head, in chunks of `chunk` tokens (queries and
/// keys alike; the last chunk may be shorter). The mask is always causal.
/// With `offload`, the Q/K/V chunks live in pinned host memory between
/// their production and their uses, and come back through two device slots
/// per kind (FPDT section 4.2); the backward then reads none of the
/// caller's Q, K or V. With `keep_queries` as well, only K/V go to the host
/// and the backward reads Q from the caller, for a caller that keeps Q on
/// the device anyway (the reference model's skeletal QKV): no second copy
/// of Q, no query fetches. Without `offload`, `keep_queries` changes nothing.
struct attention_shape {
  std::int64_t tokens = 0;
  std::int64_t heads = 0;
  std::int64_t kv_heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t chunk = 0;
  bool offload = false;
  bool keep_queries = false;
  /// With offload: the dK/dV that a backward run's queries give the keys
  /// of earlier runs wait in pinned host memory until those runs' own
  /// backward, and k, v, dk, dv cover only a run's own rows, so nothing of
  /// other runs stays on the device (see attention.hpp).
  bool host_carry = false;

  friend bool operator==(const attention_shape&, const attention_shape&) = default;

  /// "T tokens, H heads, K kv heads, chunk c"; with `all`, then "(head_dim
  /// D; offload O, keep_queries Q, host_carry H)".
  [[nodiscard]] std::string text(bool all = true) const {
    std::string out = std::to_string(tokens) + " tokens, " + std::to_string(heads) + " heads, " +
                      std::to_string(kv_heads) + " kv heads, chunk " + std::to_string(chunk);
    if (all) {
      auto flag = [](bool b) { return b ? "on" : "off"; };
      out += " (head_dim " + std::to_string(head_dim) + "; offload " + flag(offload) + ", keep_queries " +
             flag(keep_queries) + ", host_carry " + flag(host_carry) + ")";
    }
    return out;
  }

  /// Whether the query chunks go to the host store (offload without keep_queries).
  [[nodiscard]] bool queries_on_host() const { return offload && !keep_queries; }

  /// Rows of the scratch tiles: the chunk, or the whole sequence if shorter.
  [[nodiscard]] std::int64_t tile() const { return std::min(chunk, tokens); }
  [[nodiscard]] std::int64_t chunks() const { return (tokens + chunk - 1) / chunk; }
  /// Query heads per kv head.
  [[nodiscard]] std::int64_t group() const { return heads / kv_heads; }

  /// Throws memo::error naming the first field out of range.
  void validate() const {
    constexpr std::int64_t limit = std::int64_t{1} << 31;
    auto field = [&](const char* name, std::int64_t value) {
      expects(value > 0 && value < limit, [&] {
        return std::string("attention_shape: ") + name + " = " + std::to_string(value) +
               " is outside [1, 2^31 - 1]";
      });
    };
    field("tokens", tokens);
    field("heads", heads);
    field("kv_heads", kv_heads);
    field("head_dim", head_dim);
    field("chunk", chunk);
    expects(!host_carry || offload, "attention_shape: host_carry keeps gradients beside the host-resident K/V, so it "
                                    "needs offload");
    expects(heads % kv_heads == 0, [&] {
      return "attention_shape: kv_heads = " + std::to_string(kv_heads) +
             " does not divide heads = " + std::to_string(heads);
    });
    // Every per-tensor element count must fit 63 bits (checked_mul throws).
    (void)checked_mul(checked_mul(static_cast<std::uint64_t>(tokens), static_cast<std::uint64_t>(heads)),
                      checked_mul(static_cast<std::uint64_t>(head_dim), sizeof(float)));
    (void)checked_mul(checked_mul(static_cast<std::uint64_t>(tile()), static_cast<std::uint64_t>(tile())),
                      checked_mul(static_cast<std::uint64_t>(heads), 2 * sizeof(float)));
  }
};

/// The largest chunk (a power of two in [64, 1024]) whose per-head working
/// set on the host -- the score and score-gradient tiles (2 c^2 floats) and
/// the Q, K, V, dO and accumulator tiles (5 c d floats) -- fits in
/// `cache_bytes` (a core's share of L2 is the useful bound: a head's GEMM
/// writes its tile and the row math reads it back while it is still hot).
inline std::int64_t host_attention_chunk(std::int64_t head_dim, std::size_t cache_bytes) {
  std::int64_t chunk = 1024;
  while (chunk > 64) {
    const auto floats = static_cast<std::uint64_t>(2 * chunk * chunk + 5 * chunk * head_dim);
    if (floats * sizeof(float) <= cache_bytes) break;
    chunk /= 2;
  }
  return chunk;
}

}  // namespace memo

namespace memo::detail {

/// The host parallel_for grain (indices per piece) of the score-row
/// kernels: an index is a row of a score tile (a chunk of keys, an exp
/// each), so a tile of a few hundred (head, row) indices must still spread
/// over every core (host_compute.hpp's default grain of 256 is for
/// one-element indices, and kept for the kernels that copy head_dim floats
/// per index, where splitting costs more than it saves).
inline constexpr std::int64_t attention_score_row_grain = 8;

/// Views of the per-head scratch tiles (see the layout above).
struct attention_scratch {
  float* scores = nullptr;  // [heads, tile, tile]
  float* dprobs = nullptr;  // [heads, tile, tile]
  float* max = nullptr;     // [heads, tile]
  float* sum = nullptr;     // [heads, tile]
  float* acc = nullptr;     // [heads, tile, head_dim]
  std::int64_t tile = 0;
  std::int64_t head_dim = 0;

  MEMO_HOST_DEVICE tensor_view<float, 2> scores_of(std::int64_t h, std::int64_t rows,
                                                   std::int64_t cols) const {
    return tensor_view<float, 2>(scores + h * tile * tile, {rows, cols}, {cols, 1});
  }
  MEMO_HOST_DEVICE tensor_view<float, 2> dprobs_of(std::int64_t h, std::int64_t rows,
                                                   std::int64_t cols) const {
    return tensor_view<float, 2>(dprobs + h * tile * tile, {rows, cols}, {cols, 1});
  }
  MEMO_HOST_DEVICE tensor_view<float, 1> max_of(std::int64_t h, std::int64_t rows) const {
    return tensor_view<float, 1>(max + h * tile, {rows}, {1});
  }
  MEMO_HOST_DEVICE tensor_view<float, 1> sum_of(std::int64_t h, std::int64_t rows) const {
    return tensor_view<float, 1>(sum + h * tile, {rows}, {1});
  }
  MEMO_HOST_DEVICE tensor_view<float, 2> acc_of(std::int64_t h, std::int64_t rows) const {
    return tensor_view<float, 2>(acc + h * tile * head_dim, {rows, head_dim}, {head_dim, 1});
  }
};

/// One head of a [tokens, heads, head_dim] tensor as a [rows, head_dim]
/// view starting at token `first`.
template <class T>
MEMO_HOST_DEVICE tensor_view<T, 2> head_rows(const tensor_view<T, 3>& t, std::int64_t h,
                                             std::int64_t first, std::int64_t rows) {
  return tensor_view<T, 2>(t.data() + first * t.stride(0) + h * t.stride(1), {rows, t.extent(2)},
                           {t.stride(0), t.stride(2)});
}

/// Row h of an [heads, tokens] tensor from token `first` on.
template <class T>
MEMO_HOST_DEVICE tensor_view<T, 1> head_span(const tensor_view<T, 2>& t, std::int64_t h,
                                             std::int64_t first, std::int64_t rows) {
  return tensor_view<T, 1>(t.data() + h * t.stride(0) + first * t.stride(1), {rows}, {t.stride(1)});
}

/// max = -inf, sum = 0, acc = 0 for (head, row).
struct attention_start_kernel {
  attention_scratch s;
  std::int64_t rows;
  [[nodiscard]] ops::attention_tile_start<float> op(std::int64_t h) const {
    return {s.max_of(h, rows), s.sum_of(h, rows), s.acc_of(h, rows)};
  }
  MEMO_HOST_DEVICE void operator()(std::int64_t h, std::int64_t r) const {
    ops::attention_tile_start<float>{s.max_of(h, rows), s.sum_of(h, rows), s.acc_of(h, rows)}(r);
  }
};

/// Scores -> P in place, running (max, sum) and acc rows updated.
struct attention_softmax_kernel {
  static constexpr std::int64_t parallel_grain = attention_score_row_grain;
  attention_scratch s;
  std::int64_t rows;
  std::int64_t cols;
  ops::tile_position tile;
  [[nodiscard]] ops::attention_tile_softmax<float> op(std::int64_t h) const {
    return {s.scores_of(h, rows, cols), s.max_of(h, rows), s.sum_of(h, rows), s.acc_of(h, rows),
            tile};
  }
  MEMO_HOST_DEVICE void operator()(std::int64_t h, std::int64_t r) const {
    ops::attention_tile_softmax<float>{s.scores_of(h, rows, cols), s.max_of(h, rows),
                                       s.sum_of(h, rows), s.acc_of(h, rows), tile}(r);
  }
};

/// acc -> out (normalised, copied into the caller's O) and lse saved.
struct attention_finish_kernel {
  attention_scratch s;
  std::int64_t rows;
  std::int64_t first;           // token of row 0
  tensor_view<float, 3> out;    // [tokens, heads, head_dim]
  tensor_view<float, 2> lse;    // [heads, tokens]
  [[nodiscard]] ops::attention_tile_finish<float> op(std::int64_t h) const {
    return {s.acc_of(h, rows), head_span(lse, h, first, rows), s.max_of(h, rows), s.sum_of(h, rows)};
  }
  MEMO_HOST_DEVICE void operator()(std::int64_t h, std::int64_t r) const {
    const tensor_view<float, 2> acc = s.acc_of(h, rows);
    ops::attention_tile_finish<float>{acc, head_span(lse, h, first, rows), s.max_of(h, rows),
                                      s.sum_of(h, rows)}(r);
    for (std::int64_t d = 0; d < s.head_dim; ++d) out(first + r, h, d) = acc(r, d);
  }
};

/// delta[h, t] = rowsum(dO * O) for every token.
struct attention_delta_kernel {
  tensor_view<float, 2> delta;       // [heads, tokens]
  tensor_view<const float, 3> dout;  // [tokens, heads, head_dim]
  tensor_view<const float, 3> out;   // [tokens, heads, head_dim]
  [[nodiscard]] ops::attention_backward_delta<float> op(std::int64_t h) const {
    const std::int64_t t = out.extent(0);
    return {head_span(delta, h, 0, t), head_rows(dout, h, 0, t), head_rows(out, h, 0, t)};
  }
  MEMO_HOST_DEVICE void operator()(std::int64_t h, std::int64_t r) const {
    const std::int64_t t = out.extent(0);
    ops::attention_backward_delta<float>{head_span(delta, h, 0, t), head_rows(dout, h, 0, t),
                                         head_rows(out, h, 0, t)}(r);
  }
};

/// Scores -> P = exp(s - lse), dP -> dS = P (dP - delta).
struct attention_backward_kernel {
  static constexpr std::int64_t parallel_grain = attention_score_row_grain;
  attention_scratch s;
  std::int64_t rows;
  std::int64_t cols;
  std::int64_t first;                // token of row 0
  tensor_view<const float, 2> lse;   // [heads, tokens]
  tensor_view<const float, 2> delta; // [heads, tokens]
  ops::tile_position tile;
  [[nodiscard]] ops::attention_tile_backward<float> op(std::int64_t h) const {
    return {s.scores_of(h, rows, cols), s.dprobs_of(h, rows, cols), head_span(lse, h, first, rows),
            head_span(delta, h, first, rows), tile};
  }
  MEMO_HOST_DEVICE void operator()(std::int64_t h, std::int64_t r) const {
    ops::attention_tile_backward<float>{s.scores_of(h, rows, cols), s.dprobs_of(h, rows, cols),
                                        head_span(lse, h, first, rows),
                                        head_span(delta, h, first, rows), tile}(r);
  }
};

/// dst[first + r, h, :] += src[h, r, :]: a contiguous per-head tile added
/// into the caller's strided gradient. Indices are (head, row).
struct attention_add_rows_kernel {
  tensor_view<float, 3> dst;  // [tokens, heads, head_dim]
  const float* src;           // [heads, tile, head_dim]
  std::int64_t tile;
  std::int64_t first;
  MEMO_HOST_DEVICE void operator()(std::int64_t h, std::int64_t r) const {
    const std::int64_t dim = dst.extent(2);
    const float* row = src + (h * tile + r) * dim;
    for (std::int64_t d = 0; d < dim; ++d) dst(first + r, h, d) += row[d];
  }
};

/// dst[r, h, :] = src[first + r, h, :]: a chunk of the caller's strided K
/// or V packed into a contiguous [rows, heads, head_dim] staging buffer, so
/// that one copy moves it. Indices are (row, head).
struct attention_pack_rows_kernel {
  float* dst;                       // [rows, heads, head_dim]
  tensor_view<const float, 3> src;  // [tokens, heads, head_dim]
  std::int64_t first;
  MEMO_HOST_DEVICE void operator()(std::int64_t r, std::int64_t h) const {
    const std::int64_t heads = src.extent(1);
    const std::int64_t dim = src.extent(2);
    float* row = dst + (r * heads + h) * dim;
    for (std::int64_t d = 0; d < dim; ++d) row[d] = src(first + r, h, d);
  }
};

}  // namespace memo::detail
