#include "memo/model/ops/fast_exp.hpp"

#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace {

using memo::detail::ops_fast_exp;

// |fast(x) - e^x| / e^x with e^x from std::exp in fp64 (exact to well under
// an fp32 ulp, so this is the fp32 function's own error).
double relative_error(float x) {
  const double exact = std::exp(static_cast<double>(x));
  return std::abs(static_cast<double>(ops_fast_exp(x)) - exact) / exact;
}

// Every float from `from` to `to`, stepping `stride` bit patterns (the
// floats of one sign are ordered like their bit patterns).
template <class F>
void for_floats(float from, float to, std::uint32_t stride, F&& f) {
  const auto key = [](float v) {
    const auto b = std::bit_cast<std::uint32_t>(v);
    return (b & 0x80000000u) ? static_cast<std::int64_t>(-static_cast<std::int64_t>(b & 0x7fffffffu))
                             : static_cast<std::int64_t>(b);
  };
  const auto value = [](std::int64_t k) {
    return k < 0 ? std::bit_cast<float>(static_cast<std::uint32_t>(-k) | 0x80000000u)
                 : std::bit_cast<float>(static_cast<std::uint32_t>(k));
  };
  for (std::int64_t k = key(from); k <= key(to); k += stride) f(value(k));
  f(to);
}

}  // namespace

TEST_CASE("fast exp: relative error at most 2^-23 wherever e^x is a normal float") {
  // [ln(2^-126), ln(FLT_MAX)]: about 2.1e9 floats, 3 million of them here,
  // plus every float of [-1, 1] near the reduction's break points.
  const float low = -87.3365f;
  const float high = 88.7228f;
  double worst = 0;
  float worst_x = 0;
  std::int64_t checked = 0;
  auto check = [&](float x) {
    const double e = relative_error(x);
    if (e > worst) {
      worst = e;
      worst_x = x;
    }
    ++checked;
  };
  for_floats(low, high, 701, check);
  for (int k = -127; k <= 128; ++k) {  // around x = k ln 2 / 2, where r changes sign or n steps
    const float centre = static_cast<float>(k * 0.34657359027997264);
    float x = centre;
    for (int i = 0; i < 2000; ++i) x = std::nextafter(x, -HUGE_VALF);
    for (int i = 0; i < 4000; ++i, x = std::nextafter(x, HUGE_VALF))
      if (x >= low && x <= high) check(x);
  }
  CAPTURE(worst_x);
  CAPTURE(checked);
  MESSAGE("fast exp: worst relative error " << worst << " = " << worst / std::ldexp(1.0, -23)
                                            << " * 2^-23 at x = " << worst_x);
  CHECK(worst <= std::ldexp(1.0, -23));
}

TEST_CASE("fast exp: exact values and the ends of the range") {
  CHECK(ops_fast_exp(0.0f) == 1.0f);
  CHECK(ops_fast_exp(-0.0f) == 1.0f);
  CHECK(ops_fast_exp(-HUGE_VALF) == 0.0f);
  CHECK(ops_fast_exp(HUGE_VALF) == HUGE_VALF);
  CHECK(std::isnan(ops_fast_exp(std::numeric_limits<float>::quiet_NaN())));
  CHECK(std::isnan(ops_fast_exp(-std::numeric_limits<float>::quiet_NaN())));
  // Large negative arguments (a masked or far-below-max score) give 0.
  for (float x : {-104.0f, -105.0f, -200.0f, -1e4f, -1e20f, -std::numeric_limits<float>::max()})
    CHECK(ops_fast_exp(x) == 0.0f);
  // Above ln(FLT_MAX) the result overflows to +inf, like std::exp.
  for (float x : {88.7229f, 89.0f, 100.0f, 1e4f, 1e20f, std::numeric_limits<float>::max()})
    CHECK(ops_fast_exp(x) == HUGE_VALF);
  // Monotone across the whole finite range (a softmax relies on order only
  // weakly, but a step backwards would be a bug in the reduction).
  float previous = 0.0f;
  for_floats(-110.0f, 88.72f, 4099, [&](float x) {
    const float e = ops_fast_exp(x);
    CHECK_MESSAGE(e >= previous, "x = " << x);
    previous = e;
  });
}

TEST_CASE("fast exp: subnormal results are within one subnormal step") {
  // e^x below 2^-126 (x in [-103.97, -87.34]): the result is e^x rounded to
  // a subnormal, up to one step of 2^-149 off; below half a step it is 0.
  const double step = std::ldexp(1.0, -149);
  double worst = 0;
  for_floats(-104.0f, -87.34f, 37, [&](float x) {
    const double exact = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::abs(static_cast<double>(ops_fast_exp(x)) - exact));
  });
  MESSAGE("fast exp: worst subnormal error " << worst / step << " * 2^-149");
  CHECK(worst <= step);
}

TEST_CASE("fast exp: fp64 is the C library's exp") {
  for (double x : {-700.0, -1.5, 0.0, 0.25, 700.0}) CHECK(ops_fast_exp(x) == std::exp(x));
}
