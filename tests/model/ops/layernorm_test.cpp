#include "memo/model/ops/layernorm.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "test_support.hpp"

namespace ops = memo::ops;
using namespace memo_test;

namespace {

constexpr std::int64_t rows = 5;
constexpr std::int64_t channels = 7;

struct reference_forward {
  std::vector<double> out, mean, rstd;
};

// Textbook layernorm in fp64, variance as E[x^2] - E[x]^2 (a different
// formula from the operator's two-pass one).
reference_forward naive_forward(const std::vector<double>& x, const std::vector<double>& w,
                                const std::vector<double>& b) {
  reference_forward r{std::vector<double>(x.size()), std::vector<double>(rows),
                      std::vector<double>(rows)};
  for (std::int64_t t = 0; t < rows; ++t) {
    double s = 0, s2 = 0;
    for (std::int64_t c = 0; c < channels; ++c) {
      s += x[t * channels + c];
      s2 += x[t * channels + c] * x[t * channels + c];
    }
    const double mean = s / channels;
    const double var = s2 / channels - mean * mean;
    const double rstd = 1.0 / std::sqrt(var + 1e-5);
    for (std::int64_t c = 0; c < channels; ++c)
      r.out[t * channels + c] = (x[t * channels + c] - mean) * rstd * w[c] + b[c];
    r.mean[t] = mean;
    r.rstd[t] = rstd;
  }
  return r;
}

template <class T>
struct run_result {
  std::vector<T> out, mean, rstd, dinp, dweight, dbias;
};

template <class T>
run_result<T> run_operators(const std::vector<T>& x, const std::vector<T>& w,
                            const std::vector<T>& b, const std::vector<T>& dout) {
  run_result<T> r{std::vector<T>(x.size()), std::vector<T>(rows), std::vector<T>(rows),
                  std::vector<T>(x.size()), std::vector<T>(channels), std::vector<T>(channels)};
  ops::run_on_host(ops::layernorm_forward<T>{.out = view2<T>(r.out, rows, channels),
                                             .mean = view1(r.mean),
                                             .rstd = view1(r.rstd),
                                             .inp = cview2(x, rows, channels),
                                             .weight = cview1(w),
                                             .bias = cview1(b)});
  ops::run_on_host(ops::layernorm_backward_input<T>{.dinp = view2<T>(r.dinp, rows, channels),
                                                    .dout = cview2(dout, rows, channels),
                                                    .inp = cview2(x, rows, channels),
                                                    .weight = cview1(w),
                                                    .mean = cview1(r.mean),
                                                    .rstd = cview1(r.rstd)});
  ops::run_on_host(ops::layernorm_backward_params<T>{.dweight = view1(r.dweight),
                                                     .dbias = view1(r.dbias),
                                                     .dout = cview2(dout, rows, channels),
                                                     .inp = cview2(x, rows, channels),
                                                     .mean = cview1(r.mean),
                                                     .rstd = cview1(r.rstd)});
  return r;
}

struct inputs {
  std::vector<double> x = random_vector<double>(rows * channels, 1, -2.0, 3.0);
  std::vector<double> w = random_vector<double>(channels, 2, 0.5, 1.5);
  std::vector<double> b = random_vector<double>(channels, 3);
  std::vector<double> dout = random_vector<double>(rows * channels, 4);
};

}  // namespace

TEST_CASE("layernorm: fp32 forward matches an fp64 reference and saves mean and rstd") {
  const inputs in;
  const auto ref = naive_forward(in.x, in.w, in.b);
  const auto got = run_operators<float>(convert<float>(in.x), convert<float>(in.w),
                                        convert<float>(in.b), convert<float>(in.dout));
  MEMO_CHECK_CLOSE(got.out, ref.out, 1e-5, 1e-5);
  MEMO_CHECK_CLOSE(got.mean, ref.mean, 1e-6, 1e-6);
  MEMO_CHECK_CLOSE(got.rstd, ref.rstd, 1e-6, 1e-5);
}

TEST_CASE("layernorm: backward equals the fp64 Jacobian and finite differences") {
  const inputs in;
  const auto got = run_operators<double>(in.x, in.w, in.b, in.dout);
  const auto ref = naive_forward(in.x, in.w, in.b);

  // Analytic reference through the explicit Jacobian of n = rstd (x - mean):
  // dn_i/dx_j = rstd (delta_ij - 1/C - n_i n_j / C).
  std::vector<double> dinp(in.x.size()), dw(channels, 0.0), db(channels, 0.0);
  for (std::int64_t t = 0; t < rows; ++t) {
    std::vector<double> n(channels);
    for (std::int64_t c = 0; c < channels; ++c)
      n[c] = (in.x[t * channels + c] - ref.mean[t]) * ref.rstd[t];
    for (std::int64_t j = 0; j < channels; ++j) {
      double s = 0;
      for (std::int64_t i = 0; i < channels; ++i) {
        const double jac = ref.rstd[t] * ((i == j ? 1.0 : 0.0) - 1.0 / channels - n[i] * n[j] / channels);
        s += in.dout[t * channels + i] * in.w[i] * jac;
      }
      dinp[t * channels + j] = s;
      dw[j] += n[j] * in.dout[t * channels + j];
      db[j] += in.dout[t * channels + j];
    }
  }
  MEMO_CHECK_CLOSE(got.dinp, dinp, 1e-12, 1e-9);
  MEMO_CHECK_CLOSE(got.dweight, dw, 1e-12, 1e-9);
  MEMO_CHECK_CLOSE(got.dbias, db, 1e-12, 1e-9);

  // Central differences of the loss sum(out * dout), out from the operator in fp64.
  auto loss_of = [&](const std::vector<double>& x, const std::vector<double>& w,
                     const std::vector<double>& b) {
    return dot(run_operators<double>(x, w, b, in.dout).out, in.dout);
  };
  MEMO_CHECK_CLOSE(got.dinp, finite_difference([&](const auto& x) { return loss_of(x, in.w, in.b); }, in.x),
                   1e-7, 1e-6);
  MEMO_CHECK_CLOSE(got.dweight, finite_difference([&](const auto& w) { return loss_of(in.x, w, in.b); }, in.w),
                   1e-7, 1e-6);
  MEMO_CHECK_CLOSE(got.dbias, finite_difference([&](const auto& b) { return loss_of(in.x, in.w, b); }, in.b),
                   1e-7, 1e-6);

  // And the fp32 backward agrees with the fp64 one.
  const auto f32 = run_operators<float>(convert<float>(in.x), convert<float>(in.w),
                                        convert<float>(in.b), convert<float>(in.dout));
  MEMO_CHECK_CLOSE(f32.dinp, got.dinp, 1e-5, 1e-4);
  MEMO_CHECK_CLOSE(f32.dweight, got.dweight, 1e-5, 1e-4);
  MEMO_CHECK_CLOSE(f32.dbias, got.dbias, 1e-5, 1e-4);
}

TEST_CASE("layernorm: backward accumulates, and the parameter sums over row chunks equal one pass bit for bit") {
  const inputs in;
  const auto x = convert<float>(in.x);
  const auto w = convert<float>(in.w);
  const auto b = convert<float>(in.b);
  const auto dout = convert<float>(in.dout);
  const auto once = run_operators<float>(x, w, b, dout);

  // dinp += : starting from ones gives ones + the gradient.
  std::vector<float> dinp(x.size(), 1.0f);
  ops::run_on_host(ops::layernorm_backward_input<float>{.dinp = view2<float>(dinp, rows, channels),
                                                        .dout = cview2(dout, rows, channels),
                                                        .inp = cview2(x, rows, channels),
                                                        .weight = cview1(w),
                                                        .mean = cview1(once.mean),
                                                        .rstd = cview1(once.rstd)});
  for (std::size_t i = 0; i < dinp.size(); ++i) CHECK(dinp[i] == 1.0f + once.dinp[i]);

  // Column operator over rows [0, 2) then [2, 5): same bits as over [0, 5).
  std::vector<float> dw(channels, 0.0f), db(channels, 0.0f);
  for (auto [first, count] : {std::pair<std::int64_t, std::int64_t>{0, 2}, {2, 3}}) {
    ops::run_on_host(ops::layernorm_backward_params<float>{
        .dweight = view1(dw),
        .dbias = view1(db),
        .dout = cview2(dout, rows, channels).slice(first, count),
        .inp = cview2(x, rows, channels).slice(first, count),
        .mean = cview1(once.mean).slice(first, count),
        .rstd = cview1(once.rstd).slice(first, count)});
  }
  CHECK(dw == once.dweight);
  CHECK(db == once.dbias);
}

TEST_CASE("layernorm: mismatched views are errors naming the view") {
  std::vector<float> x(rows * channels, 1.0f), out(rows * channels), mean(rows), rstd(rows);
  std::vector<float> w(channels + 1, 1.0f), b(channels, 0.0f);
  ops::layernorm_forward<float> op{.out = view2<float>(out, rows, channels),
                                   .mean = view1(mean),
                                   .rstd = view1(rstd),
                                   .inp = cview2(x, rows, channels),
                                   .weight = cview1(w),
                                   .bias = cview1(b)};
  CHECK_THROWS_WITH_AS(ops::run_on_host(op), doctest::Contains("layernorm_forward: weight has shape [8]"),
                       memo::error);
  op.inp = memo::tensor_view<const float, 2>::contiguous(nullptr, {rows, 0});
  CHECK_THROWS_WITH_AS(ops::run_on_host(op), doctest::Contains("channels = 0"), memo::error);
}
