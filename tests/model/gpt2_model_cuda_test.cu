// The reference GPT-2 training step (gpt2_model.hpp) on the CUDA backend,
// compared with the same step on the host backend: every block's forward
// and backward (gpt2_layer.hpp), the chunked attention, the skeletal
// offload at alpha 0, 1/2 and 1 with token-wise recompute, and host K/V,
// each against the host's unswapped, device-resident run. The host run is
// itself checked against an fp64 model in gpt2_model_test.cpp, so this
// test only has to show the device computes the same function.
//
// Needs a device: without one it prints "skipped: no CUDA device" and exits
// 77, which ctest counts as skipped.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <random>
#include <vector>

#include "memo/backend/cuda_backend.hpp"
#include "memo/backend/host_backend.hpp"
#include "memo/model/gpt2_model.hpp"

namespace {

// maxT=16, V=11, Vp=16, L=4, NH=2, C=16: four layers so that the first two
// are swapped, two heads of eight.
memo::gpt2_config small() { return {16, 11, 16, 4, 2, 16}; }
constexpr std::int64_t context = 16;

std::vector<float> random_parameters(const memo::gpt2_config& c, std::uint32_t seed) {
  const auto table = memo::gpt2_parameter_layout(c);
  std::vector<float> p(table.total);
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 0.3f);
  for (const auto& t : table.tensors) {
    const bool norm_weight = t.name == "ln1w" || t.name == "ln2w" || t.name == "lnfw";
    for (std::uint64_t i = t.offset; i < t.offset + t.count; ++i) p[i] = norm_weight ? 1.0f + n(rng) / 3 : n(rng);
  }
  return p;
}

std::vector<std::int32_t> random_tokens(std::int64_t n, std::int32_t vocab, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int32_t> d(0, vocab - 1);
  std::vector<std::int32_t> t(static_cast<std::size_t>(n));
  for (auto& v : t) v = d(rng);
  return t;
}

struct step_result {
  float loss = 0;
  std::vector<float> grads;
};

template <class Backend>
step_result run_step(Backend& backend, const memo::gpt2_model_options& options, const std::vector<float>& params,
                     const std::vector<std::int32_t>& in, const std::vector<std::int32_t>& tg) {
  memo::gpt2_model<Backend> m(backend, small(), options);
  m.set_parameters(params);
  step_result r;
  r.loss = m.forward_backward(in, tg);
  r.grads.resize(m.parameter_count());
  m.get_gradients(r.grads);
  return r;
}

/// Largest |a - b| relative to the largest |b| (gradients span several
/// orders of magnitude; fp32 GEMMs summed in another order differ by a few
/// ulps of the largest terms).
double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return worst / std::max(scale, 1e-30);
}

}  // namespace

TEST_CASE("gpt2_model (CUDA): a step on the device matches the host's, with and without offload and host K/V") {
  const auto in = random_tokens(context, 11, 4);
  const auto tg = random_tokens(context, 11, 5);
  const auto params = random_parameters(small(), 6);

  memo::host_backend host{};
  const step_result reference = run_step(host, {.context = context, .loss_chunk = context, .attention_chunk = context},
                                         params, in, tg);
  REQUIRE(std::isfinite(reference.loss));

  memo::cuda_backend device;
  const std::optional<double> alphas[] = {std::nullopt, 0.0, 0.5, 1.0};
  for (const auto& alpha : alphas) {
    for (const bool kv_offload : {false, true}) {
      CAPTURE(alpha.value_or(-1.0));
      CAPTURE(kv_offload);
      // Chunks of 4 tokens: four attention chunks and four loss chunks, so
      // the tiles, the online softmax and the host K/V ring all take part.
      const memo::gpt2_model_options options{.context = context, .loss_chunk = 4, .attention_chunk = 4,
                                             .offload_alpha = alpha, .kv_offload = kv_offload};
      const step_result got = run_step(device, options, params, in, tg);
      CHECK(std::abs(double(got.loss) - double(reference.loss)) < 1e-4 * std::max(1.0, std::abs(double(reference.loss))));
      CHECK(relative_difference(got.grads, reference.grads) < 1e-4);
    }
  }
}

TEST_CASE("gpt2_model (CUDA): two steps with the same inputs give the same gradients (the plan replays)") {
  const auto in = random_tokens(context, 11, 7);
  const auto tg = random_tokens(context, 11, 8);
  const auto params = random_parameters(small(), 9);
  memo::cuda_backend device;
  memo::gpt2_model<memo::cuda_backend> m(device, small(),
                                         {.context = context, .loss_chunk = 4, .attention_chunk = 4,
                                          .offload_alpha = 0.5, .kv_offload = true});
  m.set_parameters(params);
  const float first = m.forward_backward(in, tg);
  std::vector<float> g1(m.parameter_count()), g2(m.parameter_count());
  m.get_gradients(g1);
  const float second = m.forward_backward(in, tg);
  m.get_gradients(g2);
  CHECK(first == second);
  CHECK(g1 == g2);
}

int main(int argc, char** argv) {
  if (memo::cuda_device_count() == 0) {
    std::puts("skipped: no CUDA device");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
