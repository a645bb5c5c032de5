// An independent fp64 GPT-2 (plain loops, naive causal attention) and the
// random parameters and tokens the model tests feed it and the model.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "memo/model/gpt2_config.hpp"

namespace memo_test {

/// Parameters far from the initialisation's scale, so attention is not
/// uniform and every layernorm weight and bias matters.
inline std::vector<float> random_parameters(const memo::gpt2_config& c, std::uint32_t seed) {
  const auto table = memo::gpt2_parameter_layout(c);
  std::vector<float> p(table.total);
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 0.3f);
  for (const auto& t : table.tensors) {
    const bool norm_weight = t.name == "ln1w" || t.name == "ln2w" || t.name == "lnfw";
    for (std::uint64_t i = t.offset; i < t.offset + t.count; ++i) {
      p[i] = norm_weight ? 1.0f + n(rng) / 3 : n(rng);
    }
  }
  return p;
}

inline std::vector<std::int32_t> random_tokens(std::int64_t n, std::int32_t vocab, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int32_t> d(0, vocab - 1);
  std::vector<std::int32_t> t(static_cast<std::size_t>(n));
  for (auto& v : t) v = d(rng);
  return t;
}

using vec = std::vector<double>;

inline vec layernorm(const vec& x, std::int64_t T, std::int64_t C, const double* w, const double* b) {
  vec out(x.size());
  for (std::int64_t t = 0; t < T; ++t) {
    double mean = 0, var = 0;
    for (std::int64_t c = 0; c < C; ++c) mean += x[t * C + c];
    mean /= static_cast<double>(C);
    for (std::int64_t c = 0; c < C; ++c) var += (x[t * C + c] - mean) * (x[t * C + c] - mean);
    var /= static_cast<double>(C);
    const double rstd = 1.0 / std::sqrt(var + 1e-5);
    for (std::int64_t c = 0; c < C; ++c) out[t * C + c] = (x[t * C + c] - mean) * rstd * w[c] + b[c];
  }
  return out;
}

// y [T, out] = x [T, in] W^T + b, W stored [out, in].
inline vec linear(const vec& x, std::int64_t T, std::int64_t in, std::int64_t out, const double* w,
           const double* b) {
  vec y(static_cast<std::size_t>(T * out));
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t o = 0; o < out; ++o) {
      double acc = b[o];
      for (std::int64_t i = 0; i < in; ++i) acc += x[t * in + i] * w[o * in + i];
      y[t * out + o] = acc;
    }
  return y;
}

/// Mean cross-entropy of the fp64 model; per-token losses into `losses`.
inline double reference_loss(const memo::gpt2_config& cfg, const vec& params,
                      const std::vector<std::int32_t>& in, const std::vector<std::int32_t>& tg,
                      vec* losses = nullptr) {
  const auto table = memo::gpt2_parameter_layout(cfg);
  auto at = [&](memo::gpt2_tensor t, std::int64_t l = 0) {
    const auto& info = table[t];
    const std::uint64_t per_layer = info.rank >= 2 && info.shape[0] == cfg.num_layers &&
                                            t != memo::gpt2_tensor::wte && t != memo::gpt2_tensor::wpe
                                        ? info.count / cfg.num_layers
                                        : 0;
    return params.data() + info.offset + per_layer * l;
  };
  using g = memo::gpt2_tensor;
  const std::int64_t T = static_cast<std::int64_t>(in.size()), C = cfg.channels;
  const std::int64_t NH = cfg.num_heads, hs = C / NH;
  vec x(static_cast<std::size_t>(T * C));
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t c = 0; c < C; ++c) x[t * C + c] = at(g::wte)[in[t] * C + c] + at(g::wpe)[t * C + c];
  for (std::int64_t l = 0; l < cfg.num_layers; ++l) {
    const vec ln1 = layernorm(x, T, C, at(g::ln1w, l), at(g::ln1b, l));
    const vec qkv = linear(ln1, T, C, 3 * C, at(g::qkvw, l), at(g::qkvb, l));
    vec att(static_cast<std::size_t>(T * C), 0.0);
    for (std::int64_t h = 0; h < NH; ++h)
      for (std::int64_t t = 0; t < T; ++t) {
        vec s(static_cast<std::size_t>(t + 1));
        double mx = -1e300;
        for (std::int64_t u = 0; u <= t; ++u) {
          double d = 0;
          for (std::int64_t i = 0; i < hs; ++i)
            d += qkv[t * 3 * C + h * hs + i] * qkv[u * 3 * C + C + h * hs + i];
          s[u] = d / std::sqrt(static_cast<double>(hs));
          mx = std::max(mx, s[u]);
        }
        double sum = 0;
        for (auto& v : s) sum += (v = std::exp(v - mx));
        for (std::int64_t u = 0; u <= t; ++u)
          for (std::int64_t i = 0; i < hs; ++i)
            att[t * C + h * hs + i] += s[u] / sum * qkv[u * 3 * C + 2 * C + h * hs + i];
      }
    const vec proj = linear(att, T, C, C, at(g::attprojw, l), at(g::attprojb, l));
    vec res2(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) res2[i] = x[i] + proj[i];
    const vec ln2 = layernorm(res2, T, C, at(g::ln2w, l), at(g::ln2b, l));
    vec fc = linear(ln2, T, C, 4 * C, at(g::fcw, l), at(g::fcb, l));
    for (auto& v : fc) v = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    const vec mlp = linear(fc, T, 4 * C, C, at(g::fcprojw, l), at(g::fcprojb, l));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = res2[i] + mlp[i];
  }
  const vec lnf = layernorm(x, T, C, at(g::lnfw), at(g::lnfb));
  double total = 0;
  if (losses) losses->assign(static_cast<std::size_t>(T), 0.0);
  for (std::int64_t t = 0; t < T; ++t) {
    vec logit(static_cast<std::size_t>(cfg.vocab_size));
    double mx = -1e300;
    for (std::int64_t v = 0; v < cfg.vocab_size; ++v) {
      double d = 0;
      for (std::int64_t c = 0; c < C; ++c) d += lnf[t * C + c] * at(g::wte)[v * C + c];
      mx = std::max(mx, logit[v] = d);
    }
    double sum = 0;
    for (double v : logit) sum += std::exp(v - mx);
    const double loss = mx + std::log(sum) - logit[tg[t]];
    if (losses) (*losses)[t] = loss;
    total += loss;
  }
  return total / static_cast<double>(T);
}

}  // namespace memo_test
