// The swap layer on the CUDA backend: a forward that writes skeletal tensors
// with kernels, offload and prefetch through real streams and events, and a
// backward that checks every value on the device, with the discarded token
// ranges rebuilt by a recompute kernel. Compiled by nvcc in CI; it needs a
// device to run, and reports "skipped: no CUDA device" (exit 77) without one.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "memo/backend/cuda_backend.hpp"
#include "memo/swap/host_store.hpp"
#include "memo/swap/rounding_buffers.hpp"
#include "memo/swap/token_fraction_swapper.hpp"

namespace {

constexpr unsigned tokens = 512;
constexpr unsigned hidden = 64;
constexpr std::size_t layers = 6;

__host__ __device__ float input_value(unsigned i, unsigned layer) {
  return static_cast<float>((i + layer * 31u) % 97u) - 48.0f;
}

// The "other" skeletal tensor: a token-wise function of the layer input.
__global__ void mlp_rows(const float* input, float* mlp, unsigned first, unsigned last) {
  const unsigned token = first + blockIdx.x;
  if (token >= last) return;
  for (unsigned j = threadIdx.x; j < 4 * hidden; j += blockDim.x) {
    const float x = input[token * hidden + j % hidden];
    mlp[token * 4 * hidden + j] = x > 0.0f ? x : 0.01f * x;
  }
}

__global__ void forward_layer(float* input, unsigned layer) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < tokens * hidden) input[i] = input_value(i, layer);
}

__global__ void count_wrong(const float* input, const float* mlp, unsigned layer,
                            unsigned long long* wrong) {
  const unsigned token = blockIdx.x;
  for (unsigned j = threadIdx.x; j < 4 * hidden; j += blockDim.x) {
    const float x = input_value(token * hidden + j % hidden, layer);
    if (mlp[token * 4 * hidden + j] != (x > 0.0f ? x : 0.01f * x)) atomicAdd(wrong, 1ull);
    if (j < hidden && input[token * hidden + j] != input_value(token * hidden + j, layer)) {
      atomicAdd(wrong, 1ull);
    }
  }
}

}  // namespace

TEST_CASE("cuda swap: every value a backward reads is what its forward wrote") {
  for (const double alpha : {0.0, 0.25, 1.0}) {
    CAPTURE(alpha);
    memo::cuda_backend backend;
    auto compute = backend.make_stream("compute");
    memo::skeletal_layout layout({
        {"input", tokens, hidden * sizeof(float), memo::skeletal_policy::offload_whole},
        {"mlp", tokens, 4 * hidden * sizeof(float), memo::skeletal_policy::offload_fraction},
    });
    memo::offload_plan plan(layout, alpha, 32);
    memo::rounding_buffers<memo::cuda_backend> buffers(backend, plan);
    memo::host_store<memo::cuda_backend> store(backend, 64 * memo::mib);
    memo::token_fraction_swapper<memo::cuda_backend> swapper(backend, compute, buffers, store,
                                                             {.layers = layers});
    auto* wrong = static_cast<unsigned long long*>(
        backend.device_memory().allocate(sizeof(unsigned long long)));
    memo::check_cuda(cudaMemsetAsync(wrong, 0, sizeof(unsigned long long), compute.native()),
                     "cudaMemsetAsync");

    for (std::size_t layer = 0; layer < layers; ++layer) {
      const auto views = swapper.begin_forward(layer);
      float* input = views["input"].as<float>();
      float* mlp = views["mlp"].as<float>();
      backend.enqueue(compute, [=](cudaStream_t s) {
        forward_layer<<<(tokens * hidden + 255) / 256, 256, 0, s>>>(input, static_cast<unsigned>(layer));
        mlp_rows<<<tokens, 128, 0, s>>>(input, mlp, 0, tokens);
      });
      swapper.end_forward(layer);
    }
    auto recompute = [](cudaStream_t s, const memo::recompute_request& request) {
      const float* input = request.views["input"].as<float>();
      float* mlp = request.views["mlp"].as<float>();
      for (const auto& item : request.items) {
        const auto first = static_cast<unsigned>(item.tokens.begin);
        const auto last = static_cast<unsigned>(item.tokens.end);
        if (last > first) mlp_rows<<<last - first, 128, 0, s>>>(input, mlp, first, last);
      }
    };
    for (std::size_t layer = layers; layer-- > 0;) {
      const auto views = swapper.begin_backward(layer, recompute);
      const float* input = views["input"].as<float>();
      const float* mlp = views["mlp"].as<float>();
      backend.enqueue(compute, [=](cudaStream_t s) {
        count_wrong<<<tokens, 128, 0, s>>>(input, mlp, static_cast<unsigned>(layer), wrong);
      });
      swapper.end_backward(layer);
    }
    swapper.synchronize();
    unsigned long long wrong_values = 0;
    memo::check_cuda(cudaMemcpy(&wrong_values, wrong, sizeof wrong_values, cudaMemcpyDeviceToHost),
                     "cudaMemcpy");
    CHECK(wrong_values == 0);
    backend.device_memory().deallocate(wrong, sizeof(unsigned long long));
  }
}

int main(int argc, char** argv) {
  if (memo::cuda_device_count() == 0) {
    std::puts("skipped: no CUDA device");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
