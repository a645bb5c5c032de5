// Helpers shared by the operator tests: seeded random buffers, views over
// std::vector, fp32 <-> fp64 copies, central finite differences and a
// closeness check that reports the worst element.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "memo/core/tensor_view.hpp"

namespace memo_test {

template <class T>
std::vector<T> random_vector(std::size_t n, unsigned seed, double low = -1.0, double high = 1.0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(low, high);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(dist(rng));
  return v;
}

template <class T>
memo::tensor_view<T, 2> view2(std::vector<std::remove_const_t<T>>& v, std::int64_t rows,
                              std::int64_t cols) {
  REQUIRE(static_cast<std::int64_t>(v.size()) == rows * cols);
  return memo::tensor_view<T, 2>::contiguous(v.data(), {rows, cols});
}
template <class T>
memo::tensor_view<const T, 2> cview2(const std::vector<T>& v, std::int64_t rows,
                                     std::int64_t cols) {
  REQUIRE(static_cast<std::int64_t>(v.size()) == rows * cols);
  return memo::tensor_view<const T, 2>::contiguous(v.data(), {rows, cols});
}
template <class T>
memo::tensor_view<T, 1> view1(std::vector<T>& v) {
  return memo::tensor_view<T, 1>::contiguous(v.data(), {static_cast<std::int64_t>(v.size())});
}
template <class T>
memo::tensor_view<const T, 1> cview1(const std::vector<T>& v) {
  return memo::tensor_view<const T, 1>::contiguous(v.data(),
                                                   {static_cast<std::int64_t>(v.size())});
}

template <class To, class From>
std::vector<To> convert(const std::vector<From>& v) {
  return std::vector<To>(v.begin(), v.end());
}

/// Largest |a - b| / (abs_tol + rel_tol * |b|) over the elements: <= 1 means close.
template <class A, class B>
double worst_ratio(const std::vector<A>& a, const std::vector<B>& b, double abs_tol,
                   double rel_tol) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double da = static_cast<double>(a[i]);
    const double db = static_cast<double>(b[i]);
    const double r = std::abs(da - db) / (abs_tol + rel_tol * std::abs(db));
    if (!(r <= worst)) worst = r;  // NaN counts as the worst
  }
  return worst;
}

#define MEMO_CHECK_CLOSE(a, b, abs_tol, rel_tol) \
  CHECK(memo_test::worst_ratio((a), (b), (abs_tol), (rel_tol)) <= 1.0)

/// Central finite differences of a scalar function of `x` (fp64), step h.
inline std::vector<double> finite_difference(const std::function<double(const std::vector<double>&)>& f,
                                             std::vector<double> x, double h = 1e-6) {
  std::vector<double> grad(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = f(x);
    x[i] = saved - h;
    const double down = f(x);
    x[i] = saved;
    grad[i] = (up - down) / (2 * h);
  }
  return grad;
}

/// sum_i a[i] * b[i] in fp64: the scalar "loss" whose gradient wrt an
/// operator's output is the chosen dout.
template <class A>
double dot(const std::vector<A>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

}  // namespace memo_test
