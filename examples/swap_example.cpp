// examples/swap_example.cpp
//
// Token-wise swapping of skeletal activations (MEMO section 4.1) on the
// host backend: a 6-layer toy model whose layers keep three skeletal
// tensors. The layer input and attention output are offloaded whole; of the
// MLP activation a fraction alpha of the tokens is offloaded (alpha from the
// LP of equations 1-3) and the rest is recomputed token-wise before the
// layer's backward. The backward checks that it sees exactly what the
// forward wrote.
#include <cstdio>
#include <cstring>

#include "memo/backend/buffer.hpp"
#include "memo/backend/host_backend.hpp"
#include "memo/core/command_line.hpp"
#include "memo/core/memory_region.hpp"
#include "memo/swap/host_store.hpp"
#include "memo/swap/rounding_buffers.hpp"
#include "memo/swap/token_fraction_swapper.hpp"
#if MEMO_HAS_LPSOLVE
#include "memo/swap/alpha_solver.hpp"
#endif

namespace {

constexpr std::size_t layers = 6;
constexpr std::size_t tokens = 256;
constexpr std::size_t hidden = 64;

// The MLP activation of one token: a token-wise function of the layer input
// and the attention output of that token, as in a transformer layer.
void mlp_token(const memo::skeletal_views& views, std::size_t token) {
  const float* input = views["input"].as<float>() + token * hidden;
  const float* attention = views["attention_output"].as<float>() + token * hidden;
  float* mlp = views["mlp"].as<float>() + token * 4 * hidden;
  for (std::size_t j = 0; j < 4 * hidden; ++j) {
    const float x = input[j % hidden] + attention[(j * 7) % hidden];
    mlp[j] = x > 0.0f ? x : 0.01f * x;
  }
}

}  // namespace

int example_main() {
  memo::host_backend::options options;
  options.device_to_host_bytes_per_second = 200e6;  // a slow "PCIe" link
  options.host_to_device_bytes_per_second = 200e6;
  memo::host_backend backend(options);
  auto compute = backend.make_stream("compute");

  memo::skeletal_layout layout({
      {"input", tokens, hidden * sizeof(float), memo::skeletal_policy::offload_whole},
      {"attention_output", tokens, hidden * sizeof(float), memo::skeletal_policy::offload_whole},
      {"mlp", tokens, 4 * hidden * sizeof(float), memo::skeletal_policy::offload_fraction},
  });

  double alpha = 0.5;
#if MEMO_HAS_LPSOLVE
  // Equations 1-3: a layer's forward takes 1.5 ms here, so 300 kB may cross the link.
  memo::alpha_problem problem;
  problem.input_bytes = layout[0].bytes();
  problem.attention_output_bytes = layout[1].bytes();
  problem.other_bytes = layout[2].bytes();
  problem.bandwidth_bytes_per_second = options.device_to_host_bytes_per_second;
  problem.layer_forward_seconds = 1.5e-3;
  problem.layers = layers;
  problem.host_budget_bytes = 64 * memo::mib;
  const memo::alpha_solution solution = memo::solve_alpha(problem);
  alpha = solution.alpha;
  std::printf("alpha from the LP: %.4f (bound by %s)\n", alpha, memo::to_string(solution.binding));
#endif

  // Plan (pure values), then the objects that execute it.
  memo::offload_plan plan(layout, alpha, /*granularity_tokens=*/16);
  // The rounding buffers live in device memory the caller owns (in a trainer,
  // a region of the planned arena), sized first: two-phase, like CUB.
  using buffers_type = memo::rounding_buffers<memo::host_backend>;
  const std::size_t buffer_bytes = buffers_type::required_bytes(plan, /*count=*/2);
  memo::buffer<std::byte, memo::host_memory_resource> arena(backend.device_memory(), buffer_bytes);
  buffers_type buffers(backend, plan, /*count=*/2, memo::memory_region{arena.data(), arena.size()});
  memo::host_store<memo::host_backend> store(backend, /*budget_bytes=*/16 * memo::mib);
  memo::token_fraction_swapper<memo::host_backend> swapper(backend, compute, buffers, store,
                                                           {.layers = layers});

  // Forward: each layer writes its skeletal tensors on the compute stream.
  for (std::size_t layer = 0; layer < layers; ++layer) {
    const memo::skeletal_views views = swapper.begin_forward(layer);
    backend.enqueue(compute, [views, layer] {
      float* input = views["input"].as<float>();
      float* attention = views["attention_output"].as<float>();
      for (std::size_t i = 0; i < tokens * hidden; ++i) {
        input[i] = static_cast<float>((i + layer * 31) % 97) - 48.0f;
        attention[i] = static_cast<float>((i * 3 + layer) % 89) - 44.0f;
      }
      for (std::size_t token = 0; token < tokens; ++token) mlp_token(views, token);
    });
    swapper.end_forward(layer);
  }

  // Backward: discarded token ranges come back through `recompute`.
  auto recompute = [](memo::host_backend::native_stream, const memo::recompute_request& request) {
    for (const auto& item : request.items) {
      for (std::size_t token = item.tokens.begin; token < item.tokens.end; ++token) {
        mlp_token(request.views, token);
      }
    }
  };
  std::size_t wrong_values = 0;  // written on the compute stream only
  for (std::size_t layer = layers; layer-- > 0;) {
    const memo::skeletal_views views = swapper.begin_backward(layer, recompute);
    backend.enqueue(compute, [views, layer, &wrong_values] {
      const float* input = views["input"].as<float>();
      for (std::size_t i = 0; i < tokens * hidden; ++i) {
        wrong_values += input[i] != static_cast<float>((i + layer * 31) % 97) - 48.0f ? 1 : 0;
      }
      const float* mlp = views["mlp"].as<float>();
      for (std::size_t token = 0; token < tokens; ++token) {
        for (std::size_t j = 0; j < 4 * hidden; ++j) {
          const float x = input[token * hidden + j % hidden] +
                          views["attention_output"].as<float>()[token * hidden + (j * 7) % hidden];
          wrong_values += mlp[token * 4 * hidden + j] != (x > 0.0f ? x : 0.01f * x) ? 1 : 0;
        }
      }
    });
    swapper.end_backward(layer);
  }
  swapper.synchronize();

  std::printf("offloaded %s, recomputed %s, device peak %s (the buffers' region %s), wrong values %zu\n",
              memo::format_bytes(swapper.offloaded_bytes()).c_str(),
              memo::format_bytes(swapper.recomputed_bytes()).c_str(),
              memo::format_bytes(backend.device_memory().peak_bytes()).c_str(),
              memo::format_bytes(buffer_bytes).c_str(), wrong_values);
  return wrong_values == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  return memo::run_command("swap_example", "usage: swap_example (no arguments)\n", [&] {
    memo::command_arguments(argc, argv).none();
    return example_main();
  });
}
