#include "memo/model/gpt2_model.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "gpt2_reference.hpp"
#include "io_test_support.hpp"
#include "../support/recording_backend.hpp"
#include "memo/backend/host_backend.hpp"
#include "memo/model/checkpoint.hpp"
#include "memo/schedule/memo_step.hpp"

namespace {

using model = memo::gpt2_model<memo::host_backend>;
using memo_test::random_parameters, memo_test::random_tokens, memo_test::reference_loss, memo_test::vec;

// maxT=8, V=11, Vp=16, L=2, NH=2, C=8: small enough for an fp64 finite
// difference of every parameter, and under ThreadSanitizer.
memo::gpt2_config tiny() { return {8, 11, 16, 2, 2, 8}; }
constexpr std::int64_t context = 7;

memo::host_backend::options two_threads() {
  memo::host_backend::options o;
  o.compute_threads = 2;
  return o;
}

struct fixture {
  memo::host_backend backend{two_threads()};
  memo::gpt2_config config = tiny();
  std::vector<std::int32_t> inputs = random_tokens(context, 11, 1);
  std::vector<std::int32_t> targets = random_tokens(context, 11, 2);
  std::vector<float> params = random_parameters(config, 3);
};

}  // namespace

TEST_CASE("gpt2_model: loss and every gradient match an fp64 GPT-2 and its finite differences") {
  fixture f;
  model m(f.backend, f.config, {.context = context, .loss_chunk = 3, .attention_chunk = 3});
  m.set_parameters(f.params);
  const float loss = m.forward_backward(f.inputs, f.targets);
  std::vector<float> grads(m.parameter_count());
  m.get_gradients(grads);

  vec p64(f.params.begin(), f.params.end());
  vec ref_losses;
  const double ref = reference_loss(f.config, p64, f.inputs, f.targets, &ref_losses);
  CHECK(loss == doctest::Approx(ref).epsilon(1e-5));
  for (std::int64_t t = 0; t < context; ++t) {
    CHECK(m.token_losses()[t] == doctest::Approx(ref_losses[t]).epsilon(1e-5));
  }
  CHECK(m.mean_loss({2, 5}) ==
        doctest::Approx((ref_losses[2] + ref_losses[3] + ref_losses[4]) / 3).epsilon(1e-5));
  CHECK(m.mean_loss({1, 7, 3}) == doctest::Approx((ref_losses[1] + ref_losses[4]) / 2).epsilon(1e-5));

  // Every parameter: central differences of the fp64 model (h = 1e-5: error
  // ~1e-10, far below the fp32 gradients' rounding).
  double largest = 0, worst = 0;
  std::size_t worst_index = 0;
  for (std::size_t i = 0; i < p64.size(); ++i) {
    const double keep = p64[i];
    p64[i] = keep + 1e-5;
    const double up = reference_loss(f.config, p64, f.inputs, f.targets);
    p64[i] = keep - 1e-5;
    const double down = reference_loss(f.config, p64, f.inputs, f.targets);
    p64[i] = keep;
    const double expected = (up - down) / 2e-5;
    largest = std::max(largest, std::abs(expected));
    if (std::abs(grads[i] - expected) > worst) {
      worst = std::abs(grads[i] - expected);
      worst_index = i;
    }
  }
  INFO("largest gradient " << largest << ", worst error " << worst << " at parameter " << worst_index);
  CHECK(largest > 1e-2);  // the comparison is not between zeros
  CHECK(worst < 2e-5 * std::max(1.0, largest));
}

TEST_CASE("gpt2_model: fp32 central differences agree with the gradients") {
  fixture f;
  model m(f.backend, f.config, {.context = context});
  m.set_parameters(f.params);
  m.forward_backward(f.inputs, f.targets);
  std::vector<float> grads(m.parameter_count());
  m.get_gradients(grads);
  const auto table = memo::gpt2_parameter_layout(f.config);
  using g = memo::gpt2_tensor;
  // One parameter from several tensors (first element of each, then one deep inside).
  for (auto t : {g::wte, g::wpe, g::qkvw, g::attprojb, g::fcw, g::fcprojw, g::ln2w, g::lnfb}) {
    const std::size_t i = table[t].offset + table[t].count / 3;
    std::vector<float> p = f.params;
    const float h = 1e-2f;
    p[i] = f.params[i] + h;
    m.set_parameters(p);
    const float up = m.forward_backward(f.inputs, f.targets);
    p[i] = f.params[i] - h;
    m.set_parameters(p);
    const float down = m.forward_backward(f.inputs, f.targets);
    INFO("tensor " << table[t].name << " element " << i);
    CHECK(grads[i] == doctest::Approx((up - down) / (2 * h)).epsilon(2e-2).scale(1e-3));
  }
}

TEST_CASE("gpt2_model: the loss and attention chunk sizes change neither the loss nor the gradients") {
  fixture f;
  std::vector<float> first_grads;
  float first_loss = 0;
  // {loss chunk, attention chunk}; 3, 4 and 5 do not divide T = 7.
  const std::pair<std::int64_t, std::int64_t> chunks[] = {{7, 7}, {1, 7}, {3, 7}, {4, 7},
                                                          {7, 1}, {7, 3}, {7, 5}, {2, 4}};
  for (auto [chunk, attention_chunk] : chunks) {
    model m(f.backend, f.config,
            {.context = context, .loss_chunk = chunk, .attention_chunk = attention_chunk});
    m.set_parameters(f.params);
    const float loss = m.forward_backward(f.inputs, f.targets);
    std::vector<float> grads(m.parameter_count());
    m.get_gradients(grads);
    if (first_grads.empty()) {
      first_grads = grads;
      first_loss = loss;
      continue;
    }
    INFO("loss chunk " << chunk << ", attention chunk " << attention_chunk);
    CHECK(loss == doctest::Approx(first_loss).epsilon(1e-6));
    double worst = 0;
    for (std::size_t i = 0; i < grads.size(); ++i) {
      worst = std::max(worst, static_cast<double>(std::abs(grads[i] - first_grads[i])));
    }
    CHECK(worst < 2e-6);
  }
}

TEST_CASE("gpt2_model: a seed gives one loss curve, and a checkpoint resumes it exactly") {
  fixture f;
  memo::copy_task task{context, 11, 5};
  const auto tokens = memo::copy_task_tokens(task, 1);
  memo::ops::adamw_config adamw{.learning_rate = 1e-2, .weight_decay = 0.01};
  // One window, trained on repeatedly: the loss must fall.
  const std::vector<std::int32_t> in(tokens.begin(), tokens.begin() + context);
  const std::vector<std::int32_t> tg(tokens.begin() + 1, tokens.begin() + context + 1);
  auto run = [&](model& m, int steps) {
    std::vector<float> losses;
    for (int s = 0; s < steps; ++s) losses.push_back(m.train_step(in, tg, adamw));
    return losses;
  };
  model a(f.backend, f.config, {.context = context});
  model b(f.backend, f.config, {.context = context});
  a.initialize(42);
  b.initialize(42);
  const auto curve_a = run(a, 4);
  const auto curve_b = run(b, 4);
  CHECK(curve_a == curve_b);
  CHECK(curve_a.back() < curve_a.front());
  CHECK(a.steps() == 4);

  memo_test::scratch_directory dir;
  std::vector<float> saved(a.parameter_count());
  a.get_parameters(saved);
  memo::write_gpt2_checkpoint(dir / "model.bin", f.config, saved);
  const auto loaded = memo::read_gpt2_checkpoint(dir / "model.bin");
  CHECK(loaded.config == f.config);
  CHECK(loaded.parameters == saved);
  model c(f.backend, loaded.config, {.context = context});
  c.set_parameters(loaded.parameters);
  std::vector<float> back(c.parameter_count());
  c.get_parameters(back);
  CHECK(back == saved);
  CHECK(a.forward_backward(f.inputs, f.targets) == c.forward_backward(f.inputs, f.targets));
}

TEST_CASE("gpt2_model: a training step allocates nothing through the backend's resources") {
  fixture f;
  model m(f.backend, f.config, {.context = context, .loss_chunk = 2});
  m.initialize(1);
  const auto device = f.backend.device_memory().allocation_count();
  const auto pinned = f.backend.pinned_memory().allocation_count();
  const auto device_bytes = f.backend.device_memory().current_bytes();
  for (int s = 0; s < 3; ++s) m.train_step(f.inputs, f.targets, {});
  CHECK(f.backend.device_memory().allocation_count() == device);
  CHECK(f.backend.pinned_memory().allocation_count() == pinned);
  CHECK(f.backend.device_memory().current_bytes() == device_bytes);
  CHECK(device_bytes == m.parameter_state_bytes() + m.activation_bytes());
}

TEST_CASE("gpt2_model: device memory that runs out while the model is built is an error, and nothing leaks") {
  // Room for the parameter state but not for the step's activations: the
  // constructor fails after the state's zeroing is queued on the stream, so
  // it must drain that work before the state's buffers are freed (under
  // AddressSanitizer, a use after free otherwise).
  fixture probe;
  const std::size_t state_bytes = model(probe.backend, probe.config, {.context = context}).parameter_state_bytes();
  memo::host_backend::options o = two_threads();
  o.device_capacity_bytes = state_bytes + probe.backend.stream_workspace_bytes();
  memo::host_backend small(o);
  CHECK_THROWS_WITH(model(small, probe.config, {.context = context}), doctest::Contains("exhausted"));
  CHECK(small.device_memory().current_bytes() == 0);
  CHECK(small.pinned_memory().current_bytes() == 0);
}

TEST_CASE("gpt2_model: bad shapes and token ids are errors naming the value") {
  fixture f;
  CHECK_THROWS_WITH(model(f.backend, f.config, {.context = 9}),
                    doctest::Contains("context 9 must lie in [1, maxT 8]"));
  CHECK_THROWS_WITH(model(f.backend, f.config, {.context = 4, .loss_chunk = 5}),
                    doctest::Contains("loss_chunk 5"));
  CHECK_THROWS_WITH(model(f.backend, f.config, {.context = 4, .attention_chunk = 6}),
                    doctest::Contains("attention_chunk 6"));
  model m(f.backend, f.config, {.context = context});
  auto bad = f.targets;
  bad[3] = 11;
  CHECK_THROWS_WITH(m.forward_backward(f.inputs, bad), doctest::Contains("target 11 at row 3"));
  CHECK_THROWS_WITH(m.forward_backward(std::span(f.inputs).first(3), f.targets),
                    doctest::Contains("3 inputs and 7 targets"));
  std::vector<float> short_params(10);
  CHECK_THROWS_WITH(m.set_parameters(short_params), doctest::Contains("10 values given"));
  CHECK_THROWS_WITH(static_cast<void>(m.mean_loss({5, 5})), doctest::Contains("[5, 5)"));
  CHECK_THROWS_WITH(static_cast<void>(m.mean_loss({0, 5, 0})), doctest::Contains("with stride 0"));
  CHECK_THROWS_WITH(m.initialize(1, 0.0), doctest::Contains("weight_std 0.000000 must be a positive number"));
}

TEST_CASE("gpt2_model: a step's gradients do not depend on the step before it") {
  fixture f;
  model m(f.backend, f.config, {.context = context, .loss_chunk = 3, .attention_chunk = 2});
  m.set_parameters(f.params);
  std::vector<float> first(m.parameter_count()), again(m.parameter_count());
  m.forward_backward(f.inputs, f.targets);
  m.get_gradients(first);
  // Another sequence in between leaves its values in every scratch buffer.
  m.forward_backward(random_tokens(context, 11, 7), random_tokens(context, 11, 8));
  m.forward_backward(f.inputs, f.targets);
  m.get_gradients(again);
  CHECK(first == again);
}

TEST_CASE("gpt2_model: update is AdamW with the model's step count, against fp64") {
  fixture f;
  model m(f.backend, f.config, {.context = context});
  m.set_parameters(f.params);
  const memo::ops::adamw_config adamw{.learning_rate = 1e-2, .weight_decay = 0.1};
  const std::size_t P = m.parameter_count();
  std::vector<double> p(f.params.begin(), f.params.end()), mom(P, 0.0), vel(P, 0.0);
  std::vector<float> grads(P), got(P);
  for (int step = 1; step <= 2; ++step) {
    m.forward_backward(f.inputs, f.targets);
    m.get_gradients(grads);
    m.update(adamw);
    for (std::size_t i = 0; i < P; ++i) {
      const double g = grads[i];
      mom[i] = 0.9 * mom[i] + 0.1 * g;
      vel[i] = 0.999 * vel[i] + 0.001 * g * g;
      const double mhat = mom[i] / (1 - std::pow(0.9, step));
      const double vhat = vel[i] / (1 - std::pow(0.999, step));
      p[i] -= 1e-2 * (mhat / (std::sqrt(vhat) + 1e-8) + 0.1 * p[i]);
    }
    m.get_parameters(got);
    double worst = 0;
    for (std::size_t i = 0; i < P; ++i) worst = std::max(worst, std::abs(got[i] - p[i]));
    INFO("step " << step);
    CHECK(m.steps() == step);
    CHECK(worst < 1e-5);
  }
}

// ---- Skeletal offload and the planned step (MEMO sections 4.1-4.3). ----

namespace {

// maxT=8, V=11, Vp=16, L=4, NH=2, C=8: four layers, so with two resident
// last layers two are swapped; T = 8 makes alpha = 1/8 offload one token.
memo::gpt2_config four_layers() { return {8, 11, 16, 4, 2, 8}; }

struct run_result {
  float loss = 0;
  std::vector<float> grads;
  std::vector<float> token_losses;
};

run_result run_once(memo::host_backend& backend, const memo::gpt2_config& config,
                    const memo::gpt2_model_options& options, const std::vector<float>& params,
                    const std::vector<std::int32_t>& in, const std::vector<std::int32_t>& tg) {
  model m(backend, config, options);
  m.set_parameters(params);
  run_result r;
  r.loss = m.forward_backward(in, tg);
  r.grads.resize(m.parameter_count());
  m.get_gradients(r.grads);
  r.token_losses.assign(m.token_losses().begin(), m.token_losses().end());
  return r;
}

double largest_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, static_cast<double>(std::abs(a[i] - b[i])));
  return worst;
}

}  // namespace

TEST_CASE("gpt2_model: offload fractions, attention chunks and host K/V leave loss and gradients unchanged") {
  memo::host_backend backend{two_threads()};
  // The 2-layer model swaps nothing with its two resident last layers, so
  // it also runs with none resident (both layers swapped); the 4-layer one
  // swaps two with the default.
  struct setting {
    memo::gpt2_config config;
    std::int64_t resident;
  };
  for (const auto& [config, resident] : {setting{tiny(), 2}, setting{tiny(), 0}, setting{four_layers(), 2}}) {
    const std::int64_t T = 8;
    const auto in = random_tokens(T, 11, 4);
    const auto tg = random_tokens(T, 11, 5);
    const auto params = random_parameters(config, 6);
    // The unswapped, unchunked computation, and the fp64 model's loss.
    const run_result base = run_once(backend, config, {.context = T, .loss_chunk = T, .attention_chunk = T},
                                     params, in, tg);
    vec p64(params.begin(), params.end());
    vec ref_losses;
    const double ref = reference_loss(config, p64, in, tg, &ref_losses);
    CHECK(base.loss == doctest::Approx(ref).epsilon(1e-5));
    for (const double alpha : {0.0, 0.125, 0.5, 1.0}) {
      for (const std::int64_t attention_chunk : {std::int64_t{8}, std::int64_t{3}, std::int64_t{1}}) {
        for (const bool kv : {false, true}) {
          INFO("layers " << config.num_layers << ", resident " << resident << ", alpha " << alpha
                         << ", attention chunk " << attention_chunk << ", host K/V " << kv);
          const run_result r = run_once(backend, config,
                                        {.context = T, .loss_chunk = 3, .attention_chunk = attention_chunk,
                                         .offload_alpha = alpha, .resident_last_layers = resident,
                                         .kv_offload = kv},
                                        params, in, tg);
          CHECK(r.loss == doctest::Approx(ref).epsilon(1e-5));
          for (std::int64_t t = 0; t < T; ++t) {
            CHECK(r.token_losses[t] == doctest::Approx(ref_losses[t]).epsilon(1e-5));
          }
          CHECK(largest_difference(r.grads, base.grads) < 5e-6);
        }
      }
    }
  }
}

TEST_CASE("gpt2_model: host K/V with and without the prefetch across layers: the same bits and bytes") {
  // The layers' attentions share one scratch whose slot events let a
  // layer's first host fetch run during the layer before it; turning that
  // off makes every call's copies wait for everything before the call.
  // Only when the copies run moves: losses and gradients are the same bits,
  // the plan the same bytes, and both match the fp64 model.
  memo::host_backend backend{two_threads()};
  const auto config = four_layers();
  const std::int64_t T = 8;
  const auto in = random_tokens(T, 11, 24);
  const auto tg = random_tokens(T, 11, 25);
  const auto params = random_parameters(config, 26);
  vec p64(params.begin(), params.end());
  const double ref = reference_loss(config, p64, in, tg);
  for (const std::int64_t attention_chunk : {std::int64_t{8}, std::int64_t{4}, std::int64_t{3}, std::int64_t{1}}) {
    for (const std::optional<double> alpha : {std::optional<double>{}, std::optional<double>{0.5}}) {
      INFO("attention chunk " << attention_chunk << ", alpha " << alpha.value_or(-1));
      memo::gpt2_model_options options{.context = T, .loss_chunk = 3, .attention_chunk = attention_chunk,
                                       .offload_alpha = alpha, .kv_offload = true};
      const run_result with = run_once(backend, config, options, params, in, tg);
      options.kv_prefetch_across_layers = false;
      const run_result without = run_once(backend, config, options, params, in, tg);
      CHECK(with.loss == without.loss);
      CHECK(with.token_losses == without.token_losses);
      CHECK(with.grads == without.grads);
      CHECK(with.loss == doctest::Approx(ref).epsilon(1e-5));
      model on(backend, config, {.context = T, .attention_chunk = attention_chunk, .kv_offload = true});
      model off(backend, config,
                {.context = T, .attention_chunk = attention_chunk, .kv_offload = true, .kv_prefetch_across_layers = false});
      CHECK(on.activation_bytes() == off.activation_bytes());
      CHECK(on.host_offload_bytes() == off.host_offload_bytes());
    }
  }
}

namespace {

/// A host backend (through the recording wrapper) whose GEMM number
/// `fail_at`, counted from the last reset, fails where it runs: a task on
/// the stream that throws, as a faulting kernel would. Streams that wait
/// for that stream afterwards carry the failure too.
class faulting_backend : public memo::testing::recording_backend<memo::host_backend> {
 public:
  using recording_backend::recording_backend;
  template <class Stream, class... Args>
  void gemm(Stream& on, Args&&... args) {
    if (++gemms == fail_at) {
      enqueue(on, [n = gemms] { throw memo::error("injected fault in GEMM " + std::to_string(n)); });
      return;
    }
    recording_backend::gemm(on, std::forward<Args>(args)...);
  }
  std::size_t gemms = 0, fail_at = 0;
};

}  // namespace

TEST_CASE("gpt2_model: a step that faults anywhere is abandoned, and the next step is clean") {
  // A fault on the compute stream reaches every stream that waits for it
  // after it: the attention's shared copy stream with host K/V, the
  // swapper's. The model drains them all, so whichever GEMM faults, the
  // next step has the clean step's loss and gradients.
  memo::host_backend host{two_threads()};
  faulting_backend backend(host);
  const auto config = four_layers();
  const std::int64_t T = 8;
  const auto in = random_tokens(T, 11, 41), tg = random_tokens(T, 11, 42);
  const auto params = random_parameters(config, 43);
  for (const std::optional<double> alpha : {std::optional<double>{}, std::optional<double>{0.5}}) {
    CAPTURE(alpha.value_or(-1));
    memo::gpt2_model<faulting_backend> m(
        backend, config, {.context = T, .loss_chunk = 3, .attention_chunk = 3, .offload_alpha = alpha, .kv_offload = true});
    m.set_parameters(params);
    backend.gemms = 0;
    const float clean = m.forward_backward(in, tg);
    std::vector<float> want(m.parameter_count()), got(m.parameter_count());
    m.get_gradients(want);
    const std::size_t per_step = backend.gemms;
    REQUIRE(per_step > 8);
    for (std::size_t at = 1; at <= per_step; ++at) {
      CAPTURE(at);
      backend.gemms = 0, backend.fail_at = at;
      CHECK_THROWS_WITH_AS((void)m.forward_backward(in, tg), doctest::Contains("injected fault in GEMM"), memo::error);
      backend.fail_at = 0;
      CHECK(m.forward_backward(in, tg) == clean);
      m.get_gradients(got);
      CHECK(got == want);
    }
  }
}

TEST_CASE("gpt2_model: swapped layers' gradients match fp64 finite differences") {
  memo::host_backend backend{two_threads()};
  const auto config = four_layers();
  const std::int64_t T = 8;
  const auto in = random_tokens(T, 11, 14);
  const auto tg = random_tokens(T, 11, 15);
  const auto params = random_parameters(config, 16);
  model m(backend, config, {.context = T, .attention_chunk = 3, .offload_alpha = 0.5, .kv_offload = true});
  REQUIRE(m.swapped_layers() == 2);
  m.set_parameters(params);
  m.forward_backward(in, tg);
  std::vector<float> grads(m.parameter_count());
  m.get_gradients(grads);
  // Half the tokens of every fraction tensor went to the host and half were
  // rebuilt: both paths ran.
  CHECK(m.swapper().offloaded_bytes() > 0);
  CHECK(m.swapper().recomputed_bytes() > 0);
  vec p64(params.begin(), params.end());
  double largest = 0, worst = 0;
  for (std::size_t i = 0; i < p64.size(); ++i) {
    const double keep = p64[i];
    p64[i] = keep + 1e-5;
    const double up = reference_loss(config, p64, in, tg);
    p64[i] = keep - 1e-5;
    const double down = reference_loss(config, p64, in, tg);
    p64[i] = keep;
    const double expected = (up - down) / 2e-5;
    largest = std::max(largest, std::abs(expected));
    worst = std::max(worst, std::abs(grads[i] - expected));
  }
  INFO("largest gradient " << largest << ", worst error " << worst);
  CHECK(largest > 1e-2);
  CHECK(worst < 2e-5 * std::max(1.0, largest));
}

TEST_CASE("gpt2_model: an offloading step allocates nothing and stays within the plan's peak") {
  memo::host_backend backend{two_threads()};
  const auto config = four_layers();
  const std::int64_t T = 8;
  for (const double alpha : {0.0, 0.5, 1.0}) {
    INFO("alpha " << alpha);
    model m(backend, config, {.context = T, .attention_chunk = 4, .offload_alpha = alpha, .kv_offload = true});
    m.initialize(2);
    const auto device = backend.device_memory().allocation_count();
    const auto pinned = backend.pinned_memory().allocation_count();
    const auto device_bytes = backend.device_memory().current_bytes();
    backend.device_memory().reset_peak();
    for (int s = 0; s < 3; ++s) m.train_step(random_tokens(T, 11, s), random_tokens(T, 11, s + 9), {});
    CHECK(backend.device_memory().allocation_count() == device);
    CHECK(backend.pinned_memory().allocation_count() == pinned);
    CHECK(backend.device_memory().peak_bytes() == device_bytes);
    // The arena is one allocation of the plan's peak; nothing else a step uses.
    CHECK(m.activation_bytes() == m.memory_plan().plan.peak_bytes);
    CHECK(device_bytes == m.parameter_state_bytes() + m.activation_bytes());
    // The plan places every buffer of the step's trace without overlap, at
    // or above the trace's lower bound.
    CHECK(memo::validate(m.step_trace().problem, m.memory_plan().plan).ok);
    CHECK(m.memory_plan().plan.peak_bytes >= m.memory_plan().flat_lower_bound_bytes);
    // The rounding buffers hold two layers' offloaded tensors, not four.
    CHECK(m.rounding_buffer_count() == 2);
    CHECK(m.swapped_layers() == 2);
  }
}

TEST_CASE("gpt2_model: bad offload options are errors naming the value") {
  fixture f;
  CHECK_THROWS_WITH(model(f.backend, f.config, {.context = 4, .offload_alpha = 1.5}),
                    doctest::Contains("offload_alpha 1.5"));
  CHECK_THROWS_WITH(model(f.backend, f.config, {.context = 4, .offload_alpha = -0.25}),
                    doctest::Contains("offload_alpha -0.25"));
  CHECK_THROWS_WITH(model(f.backend, f.config, {.context = 4, .offload_alpha = 0.5, .offload_granularity = 5}),
                    doctest::Contains("offload_granularity 5"));
  CHECK_THROWS_WITH(model(f.backend, f.config, {.context = 4, .offload_alpha = 0.5, .resident_last_layers = 3}),
                    doctest::Contains("resident_last_layers 3 must lie in [0, min(2"));
  CHECK_THROWS_WITH(model(f.backend, f.config, {.context = 4, .offload_alpha = 0.5, .resident_last_layers = -1}),
                    doctest::Contains("resident_last_layers -1"));
}

TEST_CASE("gpt2_model: resident_last_layers sets how many layers are swapped") {
  memo::host_backend backend{two_threads()};
  for (const std::int64_t resident : {0, 1, 2}) {
    CAPTURE(resident);
    const model m(backend, tiny(), {.context = 8, .offload_alpha = 0.5, .resident_last_layers = resident});
    CHECK(m.swapped_layers() == static_cast<std::size_t>(2 - resident));
    CHECK((m.host_offload_bytes() > 0) == (resident < 2));
  }
  // Unset: min(2, layers) resident, so a 1-layer model swaps nothing; with
  // 0 its one layer is swapped, and a step still equals the unswapped one.
  memo::gpt2_config one = tiny();
  one.num_layers = 1;
  CHECK(model(backend, one, {.context = 8, .offload_alpha = 0.5}).swapped_layers() == 0);
  CHECK_THROWS_WITH(model(backend, one, {.context = 8, .offload_alpha = 0.5, .resident_last_layers = 2}),
                    doctest::Contains("resident_last_layers 2 must lie in [0, min(2 rounding buffers, 1 layers)]"));
  const auto in = random_tokens(8, 11, 21);
  const auto tg = random_tokens(8, 11, 22);
  const auto params = random_parameters(one, 23);
  const run_result base = run_once(backend, one, {.context = 8}, params, in, tg);
  for (const double alpha : {0.0, 0.5, 1.0}) {
    CAPTURE(alpha);
    const run_result r =
        run_once(backend, one, {.context = 8, .offload_alpha = alpha, .resident_last_layers = 0}, params, in, tg);
    CHECK(r.loss == doctest::Approx(base.loss).epsilon(1e-6));
    CHECK(largest_difference(r.grads, base.grads) < 5e-6);
  }
}

TEST_CASE("gpt2_model: a measured step has the simulated step's ops, each after what it waits for") {
  memo::host_backend::options o = two_threads();
  o.device_to_host_bytes_per_second = 2e6;  // slow copies: offloads that overlap the layers after them
  o.host_to_device_bytes_per_second = 2e6;
  memo::host_backend backend{o};
  const auto config = four_layers();
  const std::int64_t T = 8;
  const auto params = random_parameters(config, 31);
  for (const auto& [alpha, kv] : {std::pair{std::optional<double>{}, false}, std::pair{std::optional<double>{0.5}, false},
                                   std::pair{std::optional<double>{1.0}, false}, std::pair{std::optional<double>{0.5}, true},
                                   std::pair{std::optional<double>{1.0}, true}}) {
    CAPTURE(alpha.value_or(-1));
    CAPTURE(kv);
    const memo::gpt2_model_options options{
        .context = T, .attention_chunk = 4, .offload_alpha = alpha, .kv_offload = kv};
    model m(backend, config, options);
    // With host K/V the swapper moves no qkv (12 C bytes per token), and
    // the simulated step knows it.
    const std::uint64_t qkv_bytes = kv ? 12 * static_cast<std::uint64_t>(config.channels) * T : 0;
    CHECK(m.step_config().other_bytes == memo::gpt2_transformer_layer(config, T).other_bytes() - qkv_bytes);
    // ... and what its attention moves itself: Q, K and V stored, then read
    // back in chunks of 4 of the 8 tokens (4 B x C per token each): K/V of
    // chunk 0 once in the forward; K/V twice and queries 2 + 1 times back.
    const std::uint64_t row = 4 * static_cast<std::uint64_t>(config.channels);
    CHECK(m.step_config().attention_store_bytes == qkv_bytes);
    CHECK(m.step_config().attention_forward_fetch_bytes == (kv ? 2 * row * 4 : 0));
    CHECK(m.step_config().attention_backward_fetch_bytes == (kv ? 2 * row * T + row * 4 * 3 : 0));
    m.set_parameters(params);
    CHECK_THROWS_WITH((void)m.last_step_timeline(), doctest::Contains("record_timeline(true) was not called"));
    m.record_timeline(true);
    CHECK_THROWS_WITH((void)m.last_step_timeline(), doctest::Contains("no step was recorded"));
    const auto in = random_tokens(T, 11, 7), tg = random_tokens(T, 11, 8);
    const float loss = m.forward_backward(in, tg);
    std::vector<float> grads(m.parameter_count());
    m.get_gradients(grads);
    // Recording changes nothing the step computes.
    const run_result plain = run_once(backend, config, options, params, in, tg);
    CHECK(loss == plain.loss);
    CHECK(grads == plain.grads);

    const memo::timeline measured = m.last_step_timeline();
    // The simulated step of the same protocol (built by the schedule code,
    // not the swapper) puts the same ops on the same streams in the same
    // order. (Without the attention's own copies, which run on its copy
    // stream inside the layer's compute and which the timeline does not list.)
    memo::memo_step_config protocol_only = m.step_config();
    protocol_only.attention_store_bytes = 0;
    protocol_only.attention_forward_fetch_bytes = 0;
    protocol_only.attention_backward_fetch_bytes = 0;
    const memo::timeline simulated = memo::simulate_memo_step(protocol_only, memo::device_profile::a100_80gb()).trace;
    CHECK(measured.op_order_difference(simulated) == "");
    const auto order = measured.op_order_per_stream();
    const std::size_t L = 4, K = m.rounding_buffer_count(), swapped = m.swapped_layers();
    CHECK(swapped == (alpha ? 2u : 0u));
    REQUIRE(order.size() == 3);
    CHECK(order[1].size() == swapped);
    CHECK(order[2].size() == swapped);
    // Causality across streams, from the events: an offload starts after its
    // layer's forward, its prefetch after the offload, a swapped layer's
    // recompute and backward after its prefetch, a layer's forward after the
    // offload of the layer whose rounding buffer it reuses.
    auto find = [&](const std::string& name) -> const memo::timeline_op& {
      const auto& ops = measured.ops();
      const auto it = std::find_if(ops.begin(), ops.end(), [&](const memo::timeline_op& op) { return op.name == name; });
      REQUIRE(it != ops.end());
      return *it;
    };
    const bool recomputes = alpha && *alpha < 1.0;
    for (std::size_t l = 0; l < swapped; ++l) {
      const std::string layer = std::to_string(l);
      CHECK(find("offload " + layer).start_seconds >= find("forward " + layer).end_seconds);
      // The prefetch reads what the offload wrote to the host.
      CHECK(find("prefetch " + layer).start_seconds >= find("offload " + layer).end_seconds);
      const auto& first_after_prefetch = find((recomputes ? "recompute " : "backward ") + layer);
      CHECK(first_after_prefetch.start_seconds >= find("prefetch " + layer).end_seconds);
      if (l + K < L) CHECK(find("forward " + std::to_string(l + K)).start_seconds >= find("offload " + layer).end_seconds);
    }
    // The backward of a recomputing layer starts after its recompute (that
    // the recompute holds the rebuild is checked with slow GEMMs below).
    if (recomputes) {
      for (std::size_t l = 0; l < swapped; ++l) {
        const auto& recompute = find("recompute " + std::to_string(l));
        CHECK(find("backward " + std::to_string(l)).start_seconds >= recompute.end_seconds);
      }
    }
    // A forward whose buffer no swapped layer released waits on nothing.
    for (std::size_t l = 0; l < std::min(K, L); ++l) CHECK(find("forward " + std::to_string(l)).stall_seconds == 0.0);
    m.record_timeline(false);
    CHECK_THROWS_WITH((void)m.last_step_timeline(), doctest::Contains("record_timeline(true) was not called"));
  }
}

namespace {

// A host backend whose every GEMM first sleeps `delay` on its stream: an
// op of the step that holds a GEMM lasts at least that long, one that holds
// none lasts microseconds.
class slow_gemm_backend : public memo::host_backend {
 public:
  static constexpr std::chrono::milliseconds delay{20};
  using host_backend::host_backend;
  template <class T>
  void gemm(stream& on, const memo::gemm_shape& shape, float alpha, const T* a, const T* b, float beta, T* c) {
    enqueue(on, [] { std::this_thread::sleep_for(delay); });
    host_backend::gemm(on, shape, alpha, a, b, beta, c);
  }
  template <class T>
  void gemm_strided_batched(stream& on, const memo::gemm_shape& shape, const memo::gemm_batch& batch, float alpha,
                            const T* a, const T* b, float beta, T* c) {
    enqueue(on, [] { std::this_thread::sleep_for(delay); });
    host_backend::gemm_strided_batched(on, shape, batch, alpha, a, b, beta, c);
  }
};

}  // namespace

TEST_CASE("gpt2_model: the measured recompute holds the GEMMs that rebuild its rows") {
  slow_gemm_backend backend{two_threads()};
  const auto config = four_layers();
  const std::int64_t T = 8;
  memo::gpt2_model<slow_gemm_backend> m(backend, config, {.context = T, .attention_chunk = 4, .offload_alpha = 0.5});
  m.set_parameters(random_parameters(config, 31));
  m.record_timeline(true);
  m.forward_backward(random_tokens(T, 11, 7), random_tokens(T, 11, 8));
  const memo::timeline measured = m.last_step_timeline();
  REQUIRE(m.swapped_layers() == 2);
  std::size_t recomputes = 0;
  for (const auto& op : measured.ops()) {
    if (!op.name.starts_with("recompute ")) continue;
    ++recomputes;
    // The rebuilt rows' QKV projection, attention projection and MLP are
    // GEMMs; a recompute closed before them would be far shorter.
    CAPTURE(op.name);
    CHECK(op.duration_seconds() >= 3 * std::chrono::duration<double>(slow_gemm_backend::delay).count());
  }
  CHECK(recomputes == 2);
}

TEST_CASE("gpt2_model: initialize draws weights with the standard deviation asked for") {
  fixture f;
  const memo::gpt2_config config{64, 50, 64, 2, 2, 32};
  model m(f.backend, config, {.context = 64});
  for (double std_dev : {0.02, 0.1}) {
    CAPTURE(std_dev);
    m.initialize(3, std_dev);
    std::vector<float> p(m.parameter_count());
    m.get_parameters(p);
    const auto table = memo::gpt2_parameter_layout(config);
    // The sample standard deviation of n normal draws is within 4 / sqrt(2n)
    // of the truth (relative) with overwhelming probability.
    auto sample_std = [&](const char* name) {
      for (const auto& info : table.tensors) {
        if (std::string_view(info.name) != name) continue;
        double sum = 0, squares = 0;
        for (std::uint64_t i = info.offset; i < info.offset + info.count; ++i) {
          sum += p[i], squares += double{p[i]} * p[i];
        }
        const double n = static_cast<double>(info.count);
        return std::pair{std::sqrt(squares / n - (sum / n) * (sum / n)), n};
      }
      FAIL("no tensor " << name);
      return std::pair{0.0, 0.0};
    };
    for (const char* name : {"wte", "wpe", "qkvw", "fcw"}) {
      CAPTURE(name);
      const auto [s, n] = sample_std(name);
      CHECK(std::abs(s / std_dev - 1) < 4 / std::sqrt(2 * n));
    }
    // The projections into the residual stream: std / sqrt(2 L), L = 2.
    for (const char* name : {"attprojw", "fcprojw"}) {
      CAPTURE(name);
      const auto [s, n] = sample_std(name);
      CHECK(std::abs(s / (std_dev / 2) - 1) < 4 / std::sqrt(2 * n));
    }
  }
}

TEST_CASE("gpt2_model: a model that outlives its backend refuses to train and is destroyed cleanly") {
  const auto config = four_layers();
  const std::int64_t T = 8;
  // Offload and host K/V too, so pinned host memory, the swapper's stores
  // and the planned arena all outlive the resources they came from.
  for (const bool offload : {false, true}) {
    INFO("offload " << offload);
    auto backend = std::make_unique<memo::host_backend>(two_threads());
    std::optional<model> m;
    m.emplace(*backend, config,
              memo::gpt2_model_options{.context = T, .attention_chunk = 4, .offload_alpha = offload ? 0.5 : 0.0,
                                       .kv_offload = offload});
    m->initialize(2);
    (void)m->train_step(random_tokens(T, 11, 1), random_tokens(T, 11, 2), {});
    backend.reset();
    CHECK_THROWS_WITH_AS((void)m->token_losses(), doctest::Contains("after the memory resource that made it"),
                         memo::error);
    CHECK_THROWS_AS((void)m->train_step(random_tokens(T, 11, 1), random_tokens(T, 11, 2), {}), memo::error);
    m.reset();  // AddressSanitizer reports any use of the backend's freed memory here
  }
}
