// The naive attention the chunked and distributed attentions are checked
// against: causal softmax attention in fp64, O(T^2), straight from the
// definition, forward and backward.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "memo/model/attention_tiles.hpp"
#include "ops/test_support.hpp"

namespace memo_test {

// Inputs of one attention, dense: q, dout [T, H, D]; k, v [T, Hkv, D].
struct inputs {
  std::vector<float> q, k, v, dout;
};

inline inputs random_inputs(const memo::attention_shape& s, unsigned seed, double scale = 1.0) {
  const auto qn = static_cast<std::size_t>(s.tokens * s.heads * s.head_dim);
  const auto kn = static_cast<std::size_t>(s.tokens * s.kv_heads * s.head_dim);
  return {random_vector<float>(qn, seed, -scale, scale), random_vector<float>(kn, seed + 1, -scale, scale),
          random_vector<float>(kn, seed + 2), random_vector<float>(qn, seed + 3)};
}

struct outputs {
  std::vector<double> o, lse, dq, dk, dv;  // o, dq [T,H,D]; lse [H,T]; dk, dv [T,Hkv,D]
};

// Causal softmax attention in fp64, O(T^2), straight from the definition.
inline outputs naive_attention(const memo::attention_shape& s, const inputs& in) {
  const std::int64_t T = s.tokens, H = s.heads, Hkv = s.kv_heads, D = s.head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  auto qi = [&](std::int64_t t, std::int64_t h, std::int64_t d) { return (t * H + h) * D + d; };
  auto ki = [&](std::int64_t t, std::int64_t h, std::int64_t d) { return (t * Hkv + h) * D + d; };
  outputs r;
  r.o.assign(T * H * D, 0.0);
  r.dq.assign(T * H * D, 0.0);
  r.lse.assign(H * T, 0.0);
  r.dk.assign(T * Hkv * D, 0.0);
  r.dv.assign(T * Hkv * D, 0.0);
  for (std::int64_t h = 0; h < H; ++h) {
    const std::int64_t g = h / (H / Hkv);
    for (std::int64_t t = 0; t < T; ++t) {
      std::vector<double> p(t + 1);
      double m = -std::numeric_limits<double>::infinity();
      for (std::int64_t j = 0; j <= t; ++j) {
        double dot = 0;
        for (std::int64_t d = 0; d < D; ++d) dot += double(in.q[qi(t, h, d)]) * double(in.k[ki(j, g, d)]);
        p[j] = dot * scale;
        m = std::max(m, p[j]);
      }
      double z = 0;
      for (auto& x : p) z += std::exp(x - m);
      r.lse[h * T + t] = m + std::log(z);
      for (auto& x : p) x = std::exp(x - m) / z;
      // Forward.
      for (std::int64_t j = 0; j <= t; ++j)
        for (std::int64_t d = 0; d < D; ++d) r.o[qi(t, h, d)] += p[j] * double(in.v[ki(j, g, d)]);
      // Backward: dP = dO V^T, dS = P (dP - sum_j P dP), dQ = dS K s, dK = dS^T Q s, dV = P^T dO.
      std::vector<double> dp(t + 1);
      double delta = 0;
      for (std::int64_t j = 0; j <= t; ++j) {
        double dot = 0;
        for (std::int64_t d = 0; d < D; ++d) dot += double(in.dout[qi(t, h, d)]) * double(in.v[ki(j, g, d)]);
        dp[j] = dot;
        delta += p[j] * dot;
      }
      for (std::int64_t j = 0; j <= t; ++j) {
        const double ds = p[j] * (dp[j] - delta);
        for (std::int64_t d = 0; d < D; ++d) {
          r.dq[qi(t, h, d)] += ds * double(in.k[ki(j, g, d)]) * scale;
          r.dk[ki(j, g, d)] += ds * double(in.q[qi(t, h, d)]) * scale;
          r.dv[ki(j, g, d)] += p[j] * double(in.dout[qi(t, h, d)]);
        }
      }
    }
  }
  return r;
}


}  // namespace memo_test
