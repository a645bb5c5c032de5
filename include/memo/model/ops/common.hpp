// memo/model/ops/common.hpp
//
// What every GPT-2 operator in memo/model/ops/ shares: the scalar types the
// row math is written for, a math shim that works in host and device code,
// the two shapes of operator (one index per row or column; two indices per
// element), and the host driver that runs one over its index space.
//
// The reference GPT-2 (the llm.c model, fp32) is built from these operators;
// the backends run them unchanged (DESIGN "Backends: one algorithm, two
// machines"): `parallel_for(stream, extent_1d{op.size()}, op)` for a row
// operator, `parallel_for(stream, extent_2d{op.rows(), op.cols()}, op)` for
// an element operator, after the caller has run `op.validate()` on the host.
// The same structs are instantiated for double, which is how the tests check
// the fp32 math against fp64 references and central finite differences.
//
// Every operator is an aggregate of `tensor_view`s and scalars, so a call
// site names its buffers: `ops::gelu_forward<float>{.out = y, .inp = x}`.
// An index owns the elements it writes, and no two indices write the same
// element, so any execution order gives the same bits (see each operator
// for how its reductions are decomposed to keep that true).
#pragma once

#include <math.h>

#include <concepts>
#include <cstdint>
#include <string>

#include "memo/core/config.hpp"
#include "memo/core/error.hpp"
#include "memo/core/tensor_view.hpp"

namespace memo::ops {

/// The scalar types the operators are written for: fp32 (the model) and
/// fp64 (the references the tests compare against).
template <class T>
concept ops_scalar = std::same_as<T, float> || std::same_as<T, double>;

/// An operator with one index per row (or column): `op.size()` indices,
/// called as `op(i)`; `op.validate()` checks its views on the host.
template <class F>
concept row_operator = requires(const F& f, std::int64_t i) {
  { f.size() } -> std::convertible_to<std::int64_t>;
  f(i);
  f.validate();
};

/// An operator with one index per element: `op.rows()` x `op.cols()`
/// indices, called as `op(row, col)`.
template <class F>
concept element_operator = requires(const F& f, std::int64_t i) {
  { f.rows() } -> std::convertible_to<std::int64_t>;
  { f.cols() } -> std::convertible_to<std::int64_t>;
  f(i, i);
  f.validate();
};

/// Validates `op` and runs every index in order on the calling thread (the
/// reference driver of the tests; a backend's parallel_for runs the same
/// indices in any order and on any number of threads).
template <row_operator F>
void run_on_host(const F& op) {
  op.validate();
  const std::int64_t n = op.size();
  for (std::int64_t i = 0; i < n; ++i) op(i);
}

template <element_operator F>
void run_on_host(const F& op) {
  op.validate();
  const std::int64_t rows = op.rows();
  const std::int64_t cols = op.cols();
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) op(r, c);
}

}  // namespace memo::ops

namespace memo::detail {

// Math that nvcc accepts in device code and g++ on the host: the C library's
// float and double functions, chosen by overload (std:: calls are host-only
// under nvcc).
MEMO_HOST_DEVICE float ops_sqrt(float x) { return ::sqrtf(x); }
MEMO_HOST_DEVICE double ops_sqrt(double x) { return ::sqrt(x); }
MEMO_HOST_DEVICE float ops_exp(float x) { return ::expf(x); }
MEMO_HOST_DEVICE double ops_exp(double x) { return ::exp(x); }
MEMO_HOST_DEVICE float ops_log(float x) { return ::logf(x); }
MEMO_HOST_DEVICE double ops_log(double x) { return ::log(x); }
MEMO_HOST_DEVICE float ops_tanh(float x) { return ::tanhf(x); }
MEMO_HOST_DEVICE double ops_tanh(double x) { return ::tanh(x); }
MEMO_HOST_DEVICE float ops_cosh(float x) { return ::coshf(x); }
MEMO_HOST_DEVICE double ops_cosh(double x) { return ::cosh(x); }
template <class T>
MEMO_HOST_DEVICE T ops_max(T a, T b) {
  return a < b ? b : a;
}
/// +infinity (the running maximum of an empty row is -infinity).
template <class T>
MEMO_HOST_DEVICE T ops_infinity() {
  return static_cast<T>(HUGE_VALF);
}
/// A quiet NaN: what an operator writes where its input is out of range
/// (a token id outside the vocabulary), so bad data shows in the loss
/// instead of reading out of bounds.
template <class T>
MEMO_HOST_DEVICE T ops_nan() {
  return static_cast<T>(NAN);
}

/// Row r of a 2-D view as a 1-D view.
template <class T>
MEMO_HOST_DEVICE tensor_view<T, 1> row_of(const tensor_view<T, 2>& view, std::int64_t r) {
  return tensor_view<T, 1>(view.data() + r * view.stride(0), {view.extent(1)}, {view.stride(1)});
}

/// Throws unless `view` has the given extents, naming the operator and the view.
template <class T, std::size_t Rank>
void expect_view(const tensor_view<T, Rank>& view,
                 const typename tensor_view<T, Rank>::extents_type& extents, const char* op,
                 const char* name) {
  view.expect_shape(extents, (std::string(op) + ": " + name).c_str());
  expects(view.size() == 0 || view.data() != nullptr,
          [&] { return std::string(op) + ": " + name + " is a null view"; });
}

/// Throws unless `value` lies in [low, high], naming it.
inline void expect_in_range(std::int64_t value, std::int64_t low, std::int64_t high,
                            const char* op, const char* name) {
  expects(value >= low && value <= high, [&] {
    return std::string(op) + ": " + name + " = " + std::to_string(value) + " is outside [" +
           std::to_string(low) + ", " + std::to_string(high) + "]";
  });
}

}  // namespace memo::detail
