// memo/model/ops/elementwise.hpp
//
// GPT-2's element-wise operators (llm.c): the bias a GEMM's output gets,
// the residual sum, and GELU in its tanh form,
//
//   gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),
//   gelu'(x) = 0.5 (1 + tanh(u)) + 0.5 x sech^2(u) sqrt(2/pi) (1 + 3 * 0.044715 x^2),
//   u = sqrt(2/pi) (x + 0.044715 x^3).
//
// Element operators take one index per (row, channel): on a GPU a warp
// reads consecutive channels of a row. The bias gradient is a sum over the
// rows, so, like layernorm's parameter gradients, it is a column operator
// that owns one channel and adds the rows in ascending order (race-free,
// deterministic, llm.c's order). Backward operators accumulate (+=).
#pragma once

#include <cstdint>

#include "memo/model/ops/common.hpp"

namespace memo::ops {

/// sqrt(2 / pi), the scale inside GELU's tanh.
inline constexpr double gelu_scaling = 0.79788456080286535588;
/// The cubic coefficient of GELU's tanh approximation.
inline constexpr double gelu_cubic = 0.044715;

/// out[r, c] += bias[c] (in place on a GEMM's output).
template <ops_scalar T>
struct bias_add {
  tensor_view<T, 2> out;         // [tokens, channels]
  tensor_view<const T, 1> bias;  // [channels]

  MEMO_HOST_DEVICE std::int64_t rows() const { return out.extent(0); }
  MEMO_HOST_DEVICE std::int64_t cols() const { return out.extent(1); }
  MEMO_HOST_DEVICE void operator()(std::int64_t r, std::int64_t c) const { out(r, c) += bias(c); }

  void validate() const {
    detail::expect_view(out, {out.extent(0), out.extent(1)}, "bias_add", "out");
    detail::expect_view(bias, {out.extent(1)}, "bias_add", "bias");
  }
};

/// dbias[c] += sum_r dout[r, c]; one index per channel.
template <ops_scalar T>
struct bias_backward {
  tensor_view<T, 1> dbias;       // [channels], accumulated
  tensor_view<const T, 2> dout;  // [tokens, channels]

  MEMO_HOST_DEVICE std::int64_t size() const { return dout.extent(1); }
  MEMO_HOST_DEVICE void operator()(std::int64_t c) const {
    T acc = dbias(c);
    for (std::int64_t r = 0; r < dout.extent(0); ++r) acc += dout(r, c);
    dbias(c) = acc;
  }

  void validate() const {
    detail::expect_view(dout, {dout.extent(0), dout.extent(1)}, "bias_backward", "dout");
    detail::expect_view(dbias, {dout.extent(1)}, "bias_backward", "dbias");
  }
};

/// out = a + b (the residual stream).
template <ops_scalar T>
struct residual_forward {
  tensor_view<T, 2> out;      // [tokens, channels]
  tensor_view<const T, 2> a;  // [tokens, channels]
  tensor_view<const T, 2> b;  // [tokens, channels]

  MEMO_HOST_DEVICE std::int64_t rows() const { return out.extent(0); }
  MEMO_HOST_DEVICE std::int64_t cols() const { return out.extent(1); }
  MEMO_HOST_DEVICE void operator()(std::int64_t r, std::int64_t c) const {
    out(r, c) = a(r, c) + b(r, c);
  }

  void validate() const {
    const auto shape = out.extents();
    detail::expect_view(a, shape, "residual_forward", "a");
    detail::expect_view(b, shape, "residual_forward", "b");
    detail::expect_view(out, shape, "residual_forward", "out");
  }
};

/// da += dout, db += dout. `da` and `db` must not alias.
template <ops_scalar T>
struct residual_backward {
  tensor_view<T, 2> da;          // [tokens, channels], accumulated
  tensor_view<T, 2> db;          // [tokens, channels], accumulated
  tensor_view<const T, 2> dout;  // [tokens, channels]

  MEMO_HOST_DEVICE std::int64_t rows() const { return dout.extent(0); }
  MEMO_HOST_DEVICE std::int64_t cols() const { return dout.extent(1); }
  MEMO_HOST_DEVICE void operator()(std::int64_t r, std::int64_t c) const {
    const T d = dout(r, c);
    da(r, c) += d;
    db(r, c) += d;
  }

  void validate() const {
    const auto shape = dout.extents();
    detail::expect_view(da, shape, "residual_backward", "da");
    detail::expect_view(db, shape, "residual_backward", "db");
    detail::expect_view(dout, shape, "residual_backward", "dout");
    expects(da.size() == 0 || da.data() != db.data(),
            "residual_backward: da and db are the same buffer (each must get dout once)");
  }
};

/// GELU of one value.
template <ops_scalar T>
MEMO_HOST_DEVICE T gelu(T x) {
  const T u = static_cast<T>(gelu_scaling) * (x + static_cast<T>(gelu_cubic) * x * x * x);
  return T(0.5) * x * (T(1) + detail::ops_tanh(u));
}

/// d gelu(x) / dx.
template <ops_scalar T>
MEMO_HOST_DEVICE T gelu_derivative(T x) {
  const T u = static_cast<T>(gelu_scaling) * (x + static_cast<T>(gelu_cubic) * x * x * x);
  const T t = detail::ops_tanh(u);
  const T ch = detail::ops_cosh(u);  // overflows to inf for large |u|: sech^2 is then 0
  const T sech2 = T(1) / (ch * ch);
  return T(0.5) * (T(1) + t) + x * T(0.5) * sech2 * static_cast<T>(gelu_scaling) *
                                   (T(1) + T(3) * static_cast<T>(gelu_cubic) * x * x);
}

/// out = gelu(inp).
template <ops_scalar T>
struct gelu_forward {
  tensor_view<T, 2> out;        // [tokens, channels]
  tensor_view<const T, 2> inp;  // [tokens, channels]

  MEMO_HOST_DEVICE std::int64_t rows() const { return out.extent(0); }
  MEMO_HOST_DEVICE std::int64_t cols() const { return out.extent(1); }
  MEMO_HOST_DEVICE void operator()(std::int64_t r, std::int64_t c) const {
    out(r, c) = gelu(inp(r, c));
  }

  void validate() const {
    detail::expect_view(inp, out.extents(), "gelu_forward", "inp");
    detail::expect_view(out, out.extents(), "gelu_forward", "out");
  }
};

/// dinp += gelu'(inp) * dout.
template <ops_scalar T>
struct gelu_backward {
  tensor_view<T, 2> dinp;        // [tokens, channels], accumulated
  tensor_view<const T, 2> inp;   // [tokens, channels]
  tensor_view<const T, 2> dout;  // [tokens, channels]

  MEMO_HOST_DEVICE std::int64_t rows() const { return dinp.extent(0); }
  MEMO_HOST_DEVICE std::int64_t cols() const { return dinp.extent(1); }
  MEMO_HOST_DEVICE void operator()(std::int64_t r, std::int64_t c) const {
    dinp(r, c) += gelu_derivative(inp(r, c)) * dout(r, c);
  }

  void validate() const {
    detail::expect_view(inp, dinp.extents(), "gelu_backward", "inp");
    detail::expect_view(dout, dinp.extents(), "gelu_backward", "dout");
    detail::expect_view(dinp, dinp.extents(), "gelu_backward", "dinp");
  }
};

}  // namespace memo::ops
