#include "memo/model/ops/adamw.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "test_support.hpp"

namespace ops = memo::ops;
using namespace memo_test;

namespace {

constexpr std::size_t parameters = 37;

struct naive_adamw {
  std::vector<double> p, m, v;
  void step(const std::vector<double>& g, const ops::adamw_config& c, int t) {
    for (std::size_t i = 0; i < p.size(); ++i) {
      m[i] = c.beta1 * m[i] + (1 - c.beta1) * g[i];
      v[i] = c.beta2 * v[i] + (1 - c.beta2) * g[i] * g[i];
      const double mhat = m[i] / (1 - std::pow(c.beta1, t));
      const double vhat = v[i] / (1 - std::pow(c.beta2, t));
      p[i] -= c.learning_rate * (mhat / (std::sqrt(vhat) + c.epsilon) + c.weight_decay * p[i]);
    }
  }
};

template <class T>
struct state {
  std::vector<T> p, m, v;
};

template <class T>
void step(state<T>& s, const std::vector<T>& g, const ops::adamw_config& c, std::int64_t t) {
  ops::run_on_host(ops::make_adamw_update<T>(view1(s.p), view1(s.m), view1(s.v), cview1(g), c, t));
}

}  // namespace

TEST_CASE("adamw: several steps match the bias-corrected, decoupled-decay formula in fp64") {
  const ops::adamw_config config{.learning_rate = 1e-2, .beta1 = 0.9, .beta2 = 0.95,
                                 .epsilon = 1e-8, .weight_decay = 0.1};
  const auto p0 = random_vector<double>(parameters, 1);
  naive_adamw ref{p0, std::vector<double>(parameters, 0.0), std::vector<double>(parameters, 0.0)};
  state<double> f64{p0, std::vector<double>(parameters, 0.0), std::vector<double>(parameters, 0.0)};
  state<float> f32{convert<float>(p0), std::vector<float>(parameters, 0.0f),
                   std::vector<float>(parameters, 0.0f)};
  for (int t = 1; t <= 6; ++t) {
    CAPTURE(t);
    // Gradients of varying scale and sign, a few exactly zero.
    auto g = random_vector<double>(parameters, 100 + t, -std::pow(10.0, t - 3), std::pow(10.0, t - 3));
    g[static_cast<std::size_t>(t)] = 0.0;
    ref.step(g, config, t);
    step(f64, g, config, t);
    step(f32, convert<float>(g), config, t);
    MEMO_CHECK_CLOSE(f64.p, ref.p, 1e-14, 1e-12);
    MEMO_CHECK_CLOSE(f64.m, ref.m, 1e-14, 1e-12);
    MEMO_CHECK_CLOSE(f64.v, ref.v, 1e-14, 1e-12);
    MEMO_CHECK_CLOSE(f32.p, ref.p, 1e-6, 1e-5);
    MEMO_CHECK_CLOSE(f32.m, ref.m, 1e-7, 1e-5);
    MEMO_CHECK_CLOSE(f32.v, ref.v, 1e-9, 1e-5);
  }
}

TEST_CASE("adamw: the first step moves every parameter by about lr against its gradient's sign") {
  // With m and v at zero, mhat = g and vhat = g^2 after one step: the move
  // is lr * g / (|g| + eps), i.e. lr * sign(g) (a hand-worked property).
  std::vector<float> p = {1.0f, -2.0f, 0.5f}, m(3, 0.0f), v(3, 0.0f);
  const std::vector<float> g = {0.3f, -4.0f, 1e-3f};
  const ops::adamw_config config{.learning_rate = 0.01, .weight_decay = 0.0};
  ops::run_on_host(ops::make_adamw_update<float>(view1(p), view1(m), view1(v), cview1(g), config, 1));
  CHECK(p[0] == doctest::Approx(0.99f).epsilon(1e-5));
  CHECK(p[1] == doctest::Approx(-1.99f).epsilon(1e-5));
  CHECK(p[2] == doctest::Approx(0.49f).epsilon(1e-4));
}

TEST_CASE("adamw: bad steps, betas and shapes are errors") {
  std::vector<float> p(3), m(3), v(3), g(3), short_v(2);
  const ops::adamw_config config{};
  CHECK_THROWS_WITH_AS(ops::make_adamw_update<float>(view1(p), view1(m), view1(v), cview1(g), config, 0),
                       doctest::Contains("step 0 is below 1"), memo::error);
  ops::adamw_config one = config;
  one.beta2 = 1.0;
  CHECK_THROWS_WITH_AS(ops::make_adamw_update<float>(view1(p), view1(m), view1(v), cview1(g), one, 1),
                       doctest::Contains("must lie in [0, 1)"), memo::error);
  CHECK_THROWS_WITH_AS(ops::make_adamw_update<float>(view1(p), view1(m), view1(short_v), cview1(g), config, 1),
                       doctest::Contains("adamw_update: v has shape [2], expected [3]"), memo::error);
}
