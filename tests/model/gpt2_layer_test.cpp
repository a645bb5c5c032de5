#include "memo/model/gpt2_layer.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "memo/backend/host_backend.hpp"
#include "memo/model/gpt2_memory.hpp"
#include "memo/plan/recording_resource.hpp"
#include "memo/swap/rounding_buffers.hpp"

namespace {

using memo::host_backend;
using floats = memo::buffer<float, memo::host_memory_resource>;

// One block: T = 10 tokens, C = 8, NH = 2 (llm.c shapes, tiny).
struct block_fixture {
  memo::gpt2_config config{16, 11, 16, 1, 2, 8};
  std::int64_t T = 10, C = 8, NH = 2;
  host_backend backend{};
  host_backend::stream stream = backend.make_stream("block");
  floats params, grads, memory, dresidual, scratch;
  memo::gpt2_layer_views<float> p{}, g{};
  std::vector<memo::skeletal_slice> slices;
  memo::gpt2_layer_activations a{};
  memo::attention_shape shape{.tokens = T, .heads = NH, .kv_heads = NH, .head_dim = C / NH, .chunk = 4};
  std::optional<memo::chunked_causal_attention<host_backend>> attention;

  block_fixture() {
    const auto table = memo::gpt2_parameter_layout(config);
    params = floats(backend.device_memory(), table.total);
    grads = floats(backend.device_memory(), table.total);
    std::mt19937 rng(5);
    std::normal_distribution<float> n(0.0f, 0.3f);
    for (auto& v : params.span()) v = n(rng);
    for (auto& v : grads.span()) v = 0.0f;
    p = memo::view_gpt2_parameters(config, params.span()).layer(0);
    g = memo::view_gpt2_parameters(config, grads.span()).layer(0);
    const memo::skeletal_layout layout = memo::gpt2_skeletal_layout(config, T);
    memory = floats(backend.device_memory(), layout.layer_bytes() / sizeof(float));
    std::byte* at = reinterpret_cast<std::byte*>(memory.data());
    for (const auto& t : layout.tensors()) {
      slices.push_back({at, t.tokens, t.bytes_per_token, false});
      at += t.bytes();
    }
    a = memo::gpt2_layer_activations::from_skeletal(slices, T, C, NH);
    for (std::int64_t i = 0; i < T * C; ++i) a.input.data()[i] = n(rng);
    dresidual = floats(backend.device_memory(), static_cast<std::size_t>(T * C));
    for (auto& v : dresidual.span()) v = n(rng);
    scratch = floats(backend.device_memory(),
                     memo::chunked_causal_attention<host_backend>::required_device_bytes(shape) / sizeof(float) + 1);
    attention.emplace(backend, shape, memo::memory_region{reinterpret_cast<std::byte*>(scratch.data()), scratch.size_bytes()},
                      memo::memory_region{});
  }
};

}  // namespace

TEST_CASE("gpt2_layer: token-wise recompute rebuilds the forward's rows from the input and attention output") {
  block_fixture f;
  floats out(f.backend.device_memory(), static_cast<std::size_t>(f.T * f.C));
  memo::gpt2_layer_forward(f.backend, f.stream, f.p, f.NH, f.a,
                           memo::gpt2_matrix::contiguous(out.data(), {f.T, f.C}), *f.attention);
  f.backend.synchronize(f.stream);
  const std::vector<float> forward(f.memory.span().begin(), f.memory.span().end());
  for (const std::int64_t r0 : {std::int64_t{0}, std::int64_t{3}, std::int64_t{9}}) {
    INFO("rows [" << r0 << ", 10)");
    // Poison rows [r0, T) of every rebuilt tensor (all but input, atty, lse).
    for (std::size_t t : {1u, 2u, 3u, 4u, 7u, 8u, 9u, 10u, 11u, 12u}) {
      const auto& s = f.slices[t];
      for (std::size_t b = static_cast<std::size_t>(r0) * s.bytes_per_token; b < s.bytes(); b += sizeof(float)) {
        *reinterpret_cast<float*>(s.data + b) = std::numeric_limits<float>::quiet_NaN();
      }
    }
    memo::gpt2_layer_recompute(f.backend, f.stream, f.p, f.a, r0, f.T - r0);
    f.backend.synchronize(f.stream);
    double worst = 0;
    for (std::size_t i = 0; i < forward.size(); ++i) {
      const float got = f.memory.data()[i];
      REQUIRE(std::isfinite(got));
      worst = std::max(worst, static_cast<double>(std::abs(got - forward[i])) / (1.0 + std::abs(forward[i])));
    }
    CHECK(worst < 1e-6);
  }
}

TEST_CASE("gpt2_layer: the backward takes five gradient buffers from its resource and returns them all") {
  block_fixture f;
  floats out(f.backend.device_memory(), static_cast<std::size_t>(f.T * f.C));
  memo::gpt2_layer_forward(f.backend, f.stream, f.p, f.NH, f.a,
                           memo::gpt2_matrix::contiguous(out.data(), {f.T, f.C}), *f.attention);
  f.backend.synchronize(f.stream);
  // Frees are immediate while work that reads the buffer may be queued:
  // the real upstream is returned memory only once the stream caught up.
  memo::detail::stream_synchronizing_resource<host_backend, memo::host_memory_resource> upstream(
      f.backend, f.stream, f.backend.device_memory());
  memo::recording_resource recorder(upstream, "block");
  memo::gpt2_layer_backward(f.backend, f.stream, f.p, f.g, f.NH, f.a,
                            memo::gpt2_matrix::contiguous(f.dresidual.data(), {f.T, f.C}), recorder,
                            *f.attention);
  f.backend.synchronize(f.stream);
  const memo::memory_trace trace = recorder.trace();
  REQUIRE(trace.problem.buffers.size() == 5);
  CHECK(trace.never_freed.empty());
  // By hand, in floats: d(gelu out) and d(fc out) [T, 4C] each are live
  // together; later d(ln) [T, C], d(atty) [T, C] and d(qkv) [T, 3C] are.
  const std::uint64_t TC = static_cast<std::uint64_t>(f.T * f.C) * sizeof(float);
  const std::uint64_t sizes[] = {4 * TC, 4 * TC, TC, TC, 3 * TC};
  for (std::size_t i = 0; i < 5; ++i) CHECK(trace.problem.buffers[i].size_bytes == sizes[i]);
  CHECK(memo::lower_bound_bytes(trace.problem) == 8 * TC);
}
