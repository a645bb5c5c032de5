// memo/model/ops/layernorm.hpp
//
// GPT-2's layer normalisation (llm.c's layernorm, eps = 1e-5), per token row
// of C channels:
//
//   mean = sum(x) / C,  var = sum((x - mean)^2) / C,  rstd = 1 / sqrt(var + eps)
//   n = rstd * (x - mean),  out = n * weight + bias
//
// The forward saves mean and rstd per row: the backward (and MEMO's
// token-wise recomputation) needs them, and they are two scalars a row.
//
// The backward has two parts with different owners:
//
// - dinp (one index per row): with g = weight * dout,
//     dinp += rstd * (g - mean(g) - n * mean(g * n));
// - dweight, dbias (one index per channel): sums over the rows,
//     dweight[c] += sum_r n[r, c] * dout[r, c],  dbias[c] += sum_r dout[r, c].
//
// Writing the parameter gradients from the row operator would be a race
// (every row adds into every channel). Instead the column operator owns a
// channel and walks the rows in ascending order, recomputing n from the
// saved mean and rstd, so it needs no scratch buffer, is deterministic, and
// adds in the order of llm.c's sequential loop. On a GPU consecutive
// channels are consecutive threads, so each row is read coalesced. A model
// that processes a layer in token chunks runs the column operator once per
// chunk; accumulation keeps the ascending row order across chunks.
//
// Backward operators accumulate (+=), as in llm.c.
#pragma once

#include <cstdint>

#include "memo/model/ops/common.hpp"

namespace memo::ops {

/// GPT-2's layernorm epsilon.
inline constexpr double layernorm_epsilon = 1e-5;

/// out, mean, rstd from inp, weight, bias; one index per row.
template <ops_scalar T>
struct layernorm_forward {
  tensor_view<T, 2> out;           // [tokens, channels]
  tensor_view<T, 1> mean;          // [tokens]
  tensor_view<T, 1> rstd;          // [tokens]
  tensor_view<const T, 2> inp;     // [tokens, channels]
  tensor_view<const T, 1> weight;  // [channels]
  tensor_view<const T, 1> bias;    // [channels]

  MEMO_HOST_DEVICE std::int64_t size() const { return inp.extent(0); }

  MEMO_HOST_DEVICE void operator()(std::int64_t r) const {
    const std::int64_t channels = inp.extent(1);
    T m = 0;
    for (std::int64_t c = 0; c < channels; ++c) m += inp(r, c);
    m = m / static_cast<T>(channels);
    T v = 0;
    for (std::int64_t c = 0; c < channels; ++c) {
      const T d = inp(r, c) - m;
      v += d * d;
    }
    v = v / static_cast<T>(channels);
    const T s = T(1) / detail::ops_sqrt(v + static_cast<T>(layernorm_epsilon));
    for (std::int64_t c = 0; c < channels; ++c) {
      const T n = s * (inp(r, c) - m);
      out(r, c) = n * weight(c) + bias(c);
    }
    mean(r) = m;
    rstd(r) = s;
  }

  void validate() const {
    const char* op = "layernorm_forward";
    const std::int64_t n = inp.extent(0);
    const std::int64_t channels = inp.extent(1);
    detail::expect_in_range(channels, 1, INT64_MAX, op, "channels");
    detail::expect_view(inp, {n, channels}, op, "inp");
    detail::expect_view(out, {n, channels}, op, "out");
    detail::expect_view(mean, {n}, op, "mean");
    detail::expect_view(rstd, {n}, op, "rstd");
    detail::expect_view(weight, {channels}, op, "weight");
    detail::expect_view(bias, {channels}, op, "bias");
  }
};

/// dinp += d(loss)/d(inp) from dout and the saved mean and rstd; one index
/// per row.
template <ops_scalar T>
struct layernorm_backward_input {
  tensor_view<T, 2> dinp;          // [tokens, channels], accumulated
  tensor_view<const T, 2> dout;    // [tokens, channels]
  tensor_view<const T, 2> inp;     // [tokens, channels]
  tensor_view<const T, 1> weight;  // [channels]
  tensor_view<const T, 1> mean;    // [tokens]
  tensor_view<const T, 1> rstd;    // [tokens]

  MEMO_HOST_DEVICE std::int64_t size() const { return inp.extent(0); }

  MEMO_HOST_DEVICE void operator()(std::int64_t r) const {
    const std::int64_t channels = inp.extent(1);
    const T m = mean(r);
    const T s = rstd(r);
    T g_mean = 0;
    T gn_mean = 0;
    for (std::int64_t c = 0; c < channels; ++c) {
      const T n = (inp(r, c) - m) * s;
      const T g = weight(c) * dout(r, c);
      g_mean += g;
      gn_mean += g * n;
    }
    g_mean = g_mean / static_cast<T>(channels);
    gn_mean = gn_mean / static_cast<T>(channels);
    for (std::int64_t c = 0; c < channels; ++c) {
      const T n = (inp(r, c) - m) * s;
      const T g = weight(c) * dout(r, c);
      dinp(r, c) += (g - g_mean - n * gn_mean) * s;
    }
  }

  void validate() const {
    const char* op = "layernorm_backward_input";
    const std::int64_t n = inp.extent(0);
    const std::int64_t channels = inp.extent(1);
    detail::expect_in_range(channels, 1, INT64_MAX, op, "channels");
    detail::expect_view(inp, {n, channels}, op, "inp");
    detail::expect_view(dout, {n, channels}, op, "dout");
    detail::expect_view(dinp, {n, channels}, op, "dinp");
    detail::expect_view(weight, {channels}, op, "weight");
    detail::expect_view(mean, {n}, op, "mean");
    detail::expect_view(rstd, {n}, op, "rstd");
  }
};

/// dweight, dbias += sums over the rows; one index per channel.
template <ops_scalar T>
struct layernorm_backward_params {
  tensor_view<T, 1> dweight;     // [channels], accumulated
  tensor_view<T, 1> dbias;       // [channels], accumulated
  tensor_view<const T, 2> dout;  // [tokens, channels]
  tensor_view<const T, 2> inp;   // [tokens, channels]
  tensor_view<const T, 1> mean;  // [tokens]
  tensor_view<const T, 1> rstd;  // [tokens]

  MEMO_HOST_DEVICE std::int64_t size() const { return inp.extent(1); }

  MEMO_HOST_DEVICE void operator()(std::int64_t c) const {
    T dw = dweight(c);
    T db = dbias(c);
    for (std::int64_t r = 0; r < inp.extent(0); ++r) {
      const T n = (inp(r, c) - mean(r)) * rstd(r);
      db += dout(r, c);
      dw += n * dout(r, c);
    }
    dweight(c) = dw;
    dbias(c) = db;
  }

  void validate() const {
    const char* op = "layernorm_backward_params";
    const std::int64_t n = inp.extent(0);
    const std::int64_t channels = inp.extent(1);
    detail::expect_view(inp, {n, channels}, op, "inp");
    detail::expect_view(dout, {n, channels}, op, "dout");
    detail::expect_view(dweight, {channels}, op, "dweight");
    detail::expect_view(dbias, {channels}, op, "dbias");
    detail::expect_view(mean, {n}, op, "mean");
    detail::expect_view(rstd, {n}, op, "rstd");
  }
};

}  // namespace memo::ops
