// memo/model/ops/fast_exp.hpp
//
// An fp32 exp that a compiler can vectorise, for the row operators of
// chunked causal attention (online_softmax.hpp), which take one exp per
// score in the forward and one in the backward. The C library's expf is a
// call per element, so a row of scores runs one element at a time; this
// one is straight-line arithmetic (no calls, no branches, no tables), so
// GCC and Clang turn a loop over a row into vector code on any x86-64 level
// (SSE2 and up) and on AArch64.
//
// Method: exp(x) = 2^n exp(r) with n = round(x / ln 2) and r = x - n ln 2
// in [-ln 2 / 2, ln 2 / 2] (Cody and Waite: ln 2 split in a high part with
// few bits, so n * high is exact, and a low part); exp(r) by a degree-7
// polynomial (the coefficients of Cephes' expf, a minimax fit on that
// interval); 2^n built in the exponent field in two halves, so that n from
// -150 to 128 needs no special case: results below 2^-126 come out as
// subnormals and those below half the smallest subnormal as 0, results
// above FLT_MAX as +inf.
//
// Guarantees (tests/model/ops/fast_exp_test.cpp checks them against
// std::exp in fp64): relative error at most 2^-23 (under 2 ulp; 0.69 * 2^-23
// measured) wherever the
// result is a normal float (x in [-87.33, 88.72]); absolute error at most
// 2^-149 (one subnormal step) below; exp(0) = 1 and exp(-inf) = 0 exactly,
// exp(+inf) = +inf, NaN in gives NaN out. Scores in the attention are
// shifted by their row maximum first, so every argument there is <= 0.
//
// On a CUDA device the function is the device's own expf (a few
// instructions there already).
#pragma once

#include <math.h>

#include <bit>
#include <cstdint>

#include "memo/core/config.hpp"

namespace memo::detail {

/// exp(x) in fp32 by range reduction and a polynomial; see the guarantees above.
MEMO_HOST_DEVICE float ops_fast_exp(float x) {
#if defined(__CUDA_ARCH__)
  return ::expf(x);
#else
  // Below lo the result rounds to 0, above hi it overflows to +inf: both are
  // selected at the end rather than clamped here, so that no path through
  // the function has a constant argument (the compiler would split it off
  // and fold it, and a loop with such a branch does not vectorise). Up to
  // |x| < 2^22 the arithmetic below is exact enough; beyond, its result is
  // replaced. NaN fails both comparisons and stays NaN throughout.
  constexpr float lo = -104.0f;
  constexpr float hi = 88.7228394f;  // ln(FLT_MAX)
  // Adding 1.5 * 2^23 rounds to an integer (to nearest) in the low mantissa
  // bits; subtracting it again gives n as a float, the bit difference as an int.
  constexpr float round_magic = 12582912.0f;
  const float shifted = x * 1.44269504088896341f + round_magic;
  const float n = shifted - round_magic;
  const std::int32_t n_int = std::bit_cast<std::int32_t>(shifted) - std::bit_cast<std::int32_t>(round_magic);
  // r = x - n ln 2, in two steps (0.693359375 has 9 significant bits).
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  // 2^n = 2^(n/2) 2^(n - n/2): both halves are normal floats for every n here.
  const std::int32_t half = n_int >> 1;
  const std::int32_t rest = n_int - half;
  const float scale_half = std::bit_cast<float>(static_cast<std::uint32_t>(half + 127) << 23);
  const float scale_rest = std::bit_cast<float>(static_cast<std::uint32_t>(rest + 127) << 23);
  // The two replacements as bit masks: written as selects, the compiler
  // moves the arithmetic into the branch that uses it, and a loop around
  // that does not vectorise either.
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(p * scale_half * scale_rest);
  const std::uint32_t keep = 0u - static_cast<std::uint32_t>(!(x < lo));  // NaN kept
  const std::uint32_t infinite = 0u - static_cast<std::uint32_t>(x > hi);
  constexpr std::uint32_t infinity_bits = 0x7f800000u;
  return std::bit_cast<float>(((bits & keep) & ~infinite) | (infinity_bits & infinite));
#endif
}

/// fp64 keeps the C library's exp: the fp64 instantiations are the references.
MEMO_HOST_DEVICE double ops_fast_exp(double x) { return ::exp(x); }

}  // namespace memo::detail
