// memo/model/ops/adamw.hpp
//
// The optimizer step of llm.c's GPT-2 trainer (and PyTorch's AdamW): Adam
// with bias-corrected moments and weight decay decoupled from the gradient.
// At step t >= 1, for every parameter p with gradient g,
//
//   m = b1 m + (1 - b1) g,          v = b2 v + (1 - b2) g^2,
//   mhat = m / (1 - b1^t),          vhat = v / (1 - b2^t),
//   p -= lr (mhat / (sqrt(vhat) + eps) + wd p).
//
// One index per parameter, each touching only its own p, m and v, so the
// whole parameter block updates in one parallel_for. The bias corrections
// 1 - b^t are computed once on the host (`make_adamw_update`), in double,
// so the kernel needs no pow.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "memo/model/ops/common.hpp"

namespace memo::ops {

/// AdamW's hyperparameters (llm.c's defaults for GPT-2 fine-tuning).
struct adamw_config {
  double learning_rate = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double weight_decay = 0.0;
};

/// One AdamW step over a block of parameters; one index per parameter.
/// Build it with `make_adamw_update`, which checks the step and the
/// hyperparameters and computes the bias corrections.
template <ops_scalar T>
struct adamw_update {
  tensor_view<T, 1> params;       // [parameters]
  tensor_view<T, 1> m;            // [parameters], first moment
  tensor_view<T, 1> v;            // [parameters], second moment
  tensor_view<const T, 1> grads;  // [parameters]
  T learning_rate = 0;
  T beta1 = 0;
  T beta2 = 0;
  T epsilon = 0;
  T weight_decay = 0;
  T beta1_correction = 1;  // 1 - beta1^t
  T beta2_correction = 1;  // 1 - beta2^t

  MEMO_HOST_DEVICE std::int64_t size() const { return params.extent(0); }

  MEMO_HOST_DEVICE void operator()(std::int64_t i) const {
    const T g = grads(i);
    const T mi = beta1 * m(i) + (T(1) - beta1) * g;
    const T vi = beta2 * v(i) + (T(1) - beta2) * g * g;
    const T mhat = mi / beta1_correction;
    const T vhat = vi / beta2_correction;
    m(i) = mi;
    v(i) = vi;
    params(i) -= learning_rate * (mhat / (detail::ops_sqrt(vhat) + epsilon) + weight_decay * params(i));
  }

  void validate() const {
    const char* op = "adamw_update";
    const std::int64_t n = params.extent(0);
    detail::expect_view(params, {n}, op, "params");
    detail::expect_view(m, {n}, op, "m");
    detail::expect_view(v, {n}, op, "v");
    detail::expect_view(grads, {n}, op, "grads");
    expects(beta1_correction > T(0) && beta2_correction > T(0),
            "adamw_update: bias corrections must be positive (build it with make_adamw_update)");
  }
};

/// The update for step `step` (1 for the first step) with `config`.
template <ops_scalar T>
adamw_update<T> make_adamw_update(tensor_view<T, 1> params, tensor_view<T, 1> m,
                                  tensor_view<T, 1> v, tensor_view<const T, 1> grads,
                                  const adamw_config& config, std::int64_t step) {
  expects(step >= 1, [&] {
    return "make_adamw_update: step " + std::to_string(step) + " is below 1 (steps count from 1)";
  });
  auto in_unit = [](double b) { return b >= 0.0 && b < 1.0; };
  expects(in_unit(config.beta1) && in_unit(config.beta2), [&] {
    return "make_adamw_update: betas (" + std::to_string(config.beta1) + ", " +
           std::to_string(config.beta2) + ") must lie in [0, 1)";
  });
  expects(config.epsilon > 0.0 && config.learning_rate >= 0.0 && config.weight_decay >= 0.0,
          [&] {
            return "make_adamw_update: epsilon " + std::to_string(config.epsilon) +
                   " must be > 0, learning rate " + std::to_string(config.learning_rate) +
                   " and weight decay " + std::to_string(config.weight_decay) + " >= 0";
          });
  const double t = static_cast<double>(step);
  adamw_update<T> update{params,
                         m,
                         v,
                         grads,
                         static_cast<T>(config.learning_rate),
                         static_cast<T>(config.beta1),
                         static_cast<T>(config.beta2),
                         static_cast<T>(config.epsilon),
                         static_cast<T>(config.weight_decay),
                         static_cast<T>(1.0 - std::pow(config.beta1, t)),
                         static_cast<T>(1.0 - std::pow(config.beta2, t))};
  update.validate();
  return update;
}

}  // namespace memo::ops
