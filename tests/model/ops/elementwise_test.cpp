#include "memo/model/ops/elementwise.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <numbers>
#include <vector>

#include "test_support.hpp"

namespace ops = memo::ops;
using namespace memo_test;

namespace {

constexpr std::int64_t rows = 4;
constexpr std::int64_t channels = 6;

double naive_gelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}
// The derivative written with sech^2 = 1 - tanh^2 (the operator uses 1/cosh^2).
double naive_gelu_derivative(double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  const double u = k * (x + 0.044715 * x * x * x);
  const double t = std::tanh(u);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
}

template <class T>
std::vector<T> gelu_of(const std::vector<T>& x) {
  std::vector<T> out(x.size());
  ops::run_on_host(ops::gelu_forward<T>{.out = view2<T>(out, rows, channels),
                                        .inp = cview2(x, rows, channels)});
  return out;
}

template <class T>
std::vector<T> gelu_grad(const std::vector<T>& x, const std::vector<T>& dout) {
  std::vector<T> dinp(x.size(), T(0));
  ops::run_on_host(ops::gelu_backward<T>{.dinp = view2<T>(dinp, rows, channels),
                                         .inp = cview2(x, rows, channels),
                                         .dout = cview2(dout, rows, channels)});
  return dinp;
}

}  // namespace

TEST_CASE("gelu: the constant is sqrt(2/pi)") {
  CHECK(ops::gelu_scaling == doctest::Approx(std::sqrt(2.0 / std::numbers::pi)).epsilon(1e-15));
}

TEST_CASE("gelu: fp32 forward and backward match fp64 references, including large inputs") {
  auto x = random_vector<double>(rows * channels, 11, -4.0, 4.0);
  x[0] = 12.0;
  x[1] = -12.0;
  x[2] = 60.0;  // cosh overflows in fp32: the derivative must still be 1, not NaN
  x[3] = -60.0;
  const auto dout = random_vector<double>(rows * channels, 12);
  std::vector<double> ref_out(x.size()), ref_dinp(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    ref_out[i] = naive_gelu(x[i]);
    ref_dinp[i] = naive_gelu_derivative(x[i]) * dout[i];
  }
  MEMO_CHECK_CLOSE(gelu_of(convert<float>(x)), ref_out, 1e-6, 1e-5);
  const auto f32_dinp = gelu_grad(convert<float>(x), convert<float>(dout));
  MEMO_CHECK_CLOSE(f32_dinp, ref_dinp, 1e-6, 1e-5);
  CHECK(f32_dinp[2] == doctest::Approx(static_cast<float>(dout[2])));
  CHECK(f32_dinp[3] == 0.0f);
}

TEST_CASE("gelu: fp64 backward equals the analytic derivative and finite differences, and accumulates") {
  const auto x = random_vector<double>(rows * channels, 13, -4.0, 4.0);
  const auto dout = random_vector<double>(rows * channels, 14);
  const auto dinp = gelu_grad(x, dout);
  std::vector<double> ref(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) ref[i] = naive_gelu_derivative(x[i]) * dout[i];
  MEMO_CHECK_CLOSE(dinp, ref, 1e-13, 1e-11);
  const auto fd = finite_difference([&](const auto& v) { return dot(gelu_of(v), dout); }, x);
  MEMO_CHECK_CLOSE(dinp, fd, 1e-8, 1e-7);

  std::vector<double> acc(x.size(), 2.0);
  ops::run_on_host(ops::gelu_backward<double>{.dinp = view2<double>(acc, rows, channels),
                                              .inp = cview2(x, rows, channels),
                                              .dout = cview2(dout, rows, channels)});
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(acc[i] == 2.0 + dinp[i]);
}

TEST_CASE("bias: add in place and the column-sum gradient match naive loops and finite differences") {
  const auto base = random_vector<double>(rows * channels, 21);
  const auto bias = random_vector<double>(channels, 22);
  const auto dout = random_vector<double>(rows * channels, 23);
  auto add = [&](const std::vector<double>& b) {
    auto out = base;
    ops::run_on_host(ops::bias_add<double>{.out = view2<double>(out, rows, channels), .bias = cview1(b)});
    return out;
  };
  const auto out = add(bias);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < channels; ++c)
      CHECK(out[r * channels + c] == base[r * channels + c] + bias[c]);

  std::vector<double> dbias(channels, 0.5), ref(channels, 0.5);
  ops::run_on_host(ops::bias_backward<double>{.dbias = view1(dbias), .dout = cview2(dout, rows, channels)});
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < channels; ++c) ref[c] += dout[r * channels + c];
  MEMO_CHECK_CLOSE(dbias, ref, 1e-15, 1e-14);
  auto fd = finite_difference([&](const auto& b) { return dot(add(b), dout); }, bias);
  for (auto& g : fd) g += 0.5;  // dbias started at 0.5
  MEMO_CHECK_CLOSE(dbias, fd, 1e-8, 1e-7);

  std::vector<double> short_bias(channels - 1);
  auto bad = base;
  CHECK_THROWS_WITH_AS(ops::run_on_host(ops::bias_add<double>{.out = view2<double>(bad, rows, channels),
                                                              .bias = cview1(short_bias)}),
                       doctest::Contains("bias_add: bias has shape [5], expected [6]"), memo::error);
}

TEST_CASE("residual: forward sums, backward adds dout into both inputs") {
  const auto a = random_vector<float>(rows * channels, 31);
  const auto b = random_vector<float>(rows * channels, 32);
  std::vector<float> out(a.size());
  ops::run_on_host(ops::residual_forward<float>{.out = view2<float>(out, rows, channels),
                                                .a = cview2(a, rows, channels),
                                                .b = cview2(b, rows, channels)});
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(out[i] == a[i] + b[i]);

  std::vector<float> da(a.size(), 1.0f), db(a.size(), -1.0f);
  ops::run_on_host(ops::residual_backward<float>{.da = view2<float>(da, rows, channels),
                                                 .db = view2<float>(db, rows, channels),
                                                 .dout = cview2(out, rows, channels)});
  for (std::size_t i = 0; i < a.size(); ++i) {
    CHECK(da[i] == 1.0f + out[i]);
    CHECK(db[i] == -1.0f + out[i]);
  }
  CHECK_THROWS_WITH_AS(ops::run_on_host(ops::residual_backward<float>{.da = view2<float>(da, rows, channels),
                                                                      .db = view2<float>(da, rows, channels),
                                                                      .dout = cview2(out, rows, channels)}),
                       doctest::Contains("same buffer"), memo::error);
}
