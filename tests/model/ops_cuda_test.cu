// The GPT-2 operators inside CUDA kernels, compared with the same operators
// run on the host. Each scenario is written once over a "binder" that gives
// views of either host vectors or their device mirrors, and a "runner" that
// either loops on the host or launches a grid-stride kernel. Needs a device:
// without one the program prints "skipped: no CUDA device" and exits 77,
// which ctest reports as a skipped test.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <type_traits>
#include <vector>

#include "memo/backend/cuda_backend.hpp"
#include "memo/backend/cuda_check.hpp"
#include "memo/model/ops/adamw.hpp"
#include "memo/model/ops/cross_entropy.hpp"
#include "memo/model/ops/elementwise.hpp"
#include "memo/model/ops/encoder.hpp"
#include "memo/model/ops/layernorm.hpp"
#include "memo/model/ops/online_softmax.hpp"

namespace ops = memo::ops;

namespace {

template <class F>
__global__ void rows_kernel(F op, std::int64_t n) {
  const std::int64_t step = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) op(i);
}

template <class F>
__global__ void elements_kernel(F op, std::int64_t rows, std::int64_t cols) {
  const std::int64_t n = rows * cols;
  const std::int64_t step = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    op(i / cols, i % cols);
}

struct host_runner {
  template <class F>
  void operator()(const F& op) const {
    ops::run_on_host(op);
  }
};

struct device_runner {
  template <ops::row_operator F>
  void operator()(const F& op) const {
    op.validate();
    if (op.size() == 0) return;
    rows_kernel<<<4, 64>>>(op, op.size());
    memo::check_cuda(cudaGetLastError(), "rows_kernel launch");
    memo::check_cuda(cudaDeviceSynchronize(), "rows_kernel");
  }
  template <ops::element_operator F>
  void operator()(const F& op) const {
    op.validate();
    if (op.rows() * op.cols() == 0) return;
    elements_kernel<<<4, 64>>>(op, op.rows(), op.cols());
    memo::check_cuda(cudaGetLastError(), "elements_kernel launch");
    memo::check_cuda(cudaDeviceSynchronize(), "elements_kernel");
  }
};

/// Views of host vectors themselves.
struct host_binder {
  template <class T>
  T* ptr(std::vector<T>& v) {
    return v.data();
  }
};

/// Views of device mirrors of host vectors: uploaded on first use,
/// downloaded back into the vectors by `download`.
struct device_binder {
  struct mirror {
    void* device;
    void* host;
    std::size_t bytes;
  };
  std::map<const void*, mirror> mirrors;

  template <class T>
  T* ptr(std::vector<T>& v) {
    auto it = mirrors.find(v.data());
    if (it == mirrors.end()) {
      mirror m{nullptr, v.data(), v.size() * sizeof(T)};
      memo::check_cuda(cudaMalloc(&m.device, m.bytes == 0 ? 1 : m.bytes), "cudaMalloc");
      memo::check_cuda(cudaMemcpy(m.device, m.host, m.bytes, cudaMemcpyHostToDevice), "upload");
      it = mirrors.emplace(v.data(), m).first;
    }
    return static_cast<T*>(it->second.device);
  }
  void download() {
    for (auto& [key, m] : mirrors)
      memo::check_cuda(cudaMemcpy(m.host, m.device, m.bytes, cudaMemcpyDeviceToHost), "download");
  }
  ~device_binder() {
    for (auto& [key, m] : mirrors) cudaFree(m.device);
  }
};

template <class T, class Binder>
memo::tensor_view<T, 2> v2(Binder& b, std::vector<std::remove_const_t<T>>& v, std::int64_t rows, std::int64_t cols) {
  return memo::tensor_view<T, 2>::contiguous(b.ptr(v), {rows, cols});
}
template <class T, class Binder>
memo::tensor_view<T, 1> v1(Binder& b, std::vector<std::remove_const_t<T>>& v) {
  return memo::tensor_view<T, 1>::contiguous(b.ptr(v), {static_cast<std::int64_t>(v.size())});
}

std::vector<float> random_floats(std::size_t n, unsigned seed, float scale = 1.0f) {
  std::vector<float> v(n);
  unsigned x = seed * 2654435761u + 1u;
  for (auto& e : v) {
    x = x * 1664525u + 1013904223u;
    e = scale * (static_cast<float>(x >> 8) / 16777216.0f * 2.0f - 1.0f);
  }
  return v;
}

void check_close(const std::vector<float>& device, const std::vector<float>& host, const char* what) {
  CAPTURE(what);
  REQUIRE(device.size() == host.size());
  for (std::size_t i = 0; i < host.size(); ++i) {
    CAPTURE(i);
    // Device exp/tanh differ from the host's by a few ulps, and nvcc may
    // contract a*b+c into an FMA: close, not bit-identical.
    CHECK(std::abs(device[i] - host[i]) <= 1e-5f + 1e-5f * std::abs(host[i]));
  }
}

// Every operator of a small GPT-2 row pipeline, on data held in `w`.
struct world {
  static constexpr std::int64_t n = 12, c = 16, seq = 6, vocab = 20, vocab_padded = 24, dim = 4;
  std::vector<std::int32_t> tokens = {1, 5, 5, 0, 19, 3, 5, 1, 2, 2, 7, 19};
  std::vector<std::int32_t> targets = {5, 5, 0, 19, 3, 5, 1, 2, 2, 7, 19, 4};
  std::vector<float> wte = random_floats(vocab_padded * c, 1), wpe = random_floats(seq * c, 2);
  std::vector<float> enc = std::vector<float>(n * c), dwte = std::vector<float>(vocab_padded * c, 0.0f),
                     dwpe = std::vector<float>(seq * c, 0.0f);
  std::vector<std::int64_t> order = std::vector<std::int64_t>(n), starts = std::vector<std::int64_t>(n + 1);
  std::vector<std::int32_t> ids = std::vector<std::int32_t>(n);
  std::vector<float> lnw = random_floats(c, 3), lnb = random_floats(c, 4), ln = std::vector<float>(n * c),
                     mean = std::vector<float>(n), rstd = std::vector<float>(n);
  std::vector<float> bias = random_floats(c, 5), act = std::vector<float>(n * c), res = std::vector<float>(n * c);
  std::vector<float> dout = random_floats(n * c, 6), dinp = std::vector<float>(n * c, 0.0f),
                     dres = std::vector<float>(n * c, 0.0f), dlnw = std::vector<float>(c, 0.0f),
                     dlnb = std::vector<float>(c, 0.0f), dbias = std::vector<float>(c, 0.0f);
  std::vector<float> logits = random_floats(n * vocab_padded, 7, 8.0f), losses = std::vector<float>(n);
  std::vector<float> params = random_floats(n * c, 8), m = std::vector<float>(n * c, 0.0f),
                     v = std::vector<float>(n * c, 0.0f);
  std::vector<float> scores = random_floats(n * 2 * seq, 9, 3.0f), values = random_floats(2 * seq * dim, 10),
                     rmax = std::vector<float>(n, 1.0f), rsum = std::vector<float>(n, 2.0f),
                     acc = std::vector<float>(n * dim, 3.0f), lse = std::vector<float>(n),
                     delta = std::vector<float>(n), dscores = random_floats(n * 2 * seq, 11);

  world() {
    // The buckets are host work in every configuration.
    ops::build_token_buckets(memo::tensor_view<const std::int32_t, 1>::contiguous(tokens.data(), {n}), vocab,
                             memo::tensor_view<std::int64_t, 1>::contiguous(order.data(), {n}),
                             memo::tensor_view<std::int64_t, 1>::contiguous(starts.data(), {n + 1}),
                             memo::tensor_view<std::int32_t, 1>::contiguous(ids.data(), {n}));
  }

  template <class Binder, class Runner>
  void run(Binder& b, const Runner& exec) {
    const std::int64_t distinct = [&] {
      std::int64_t k = 0;
      while (starts[k] != n) ++k;
      return k;
    }();
    exec(ops::encoder_forward<float>{.out = v2<float>(b, enc, n, c), .tokens = v1<const std::int32_t>(b, tokens),
                                    .wte = v2<const float>(b, wte, vocab_padded, c),
                                    .wpe = v2<const float>(b, wpe, seq, c), .vocab_size = vocab,
                                    .sequence_length = seq});
    exec(ops::layernorm_forward<float>{.out = v2<float>(b, ln, n, c), .mean = v1<float>(b, mean),
                                      .rstd = v1<float>(b, rstd), .inp = v2<const float>(b, enc, n, c),
                                      .weight = v1<const float>(b, lnw), .bias = v1<const float>(b, lnb)});
    exec(ops::bias_add<float>{.out = v2<float>(b, ln, n, c), .bias = v1<const float>(b, bias)});
    exec(ops::gelu_forward<float>{.out = v2<float>(b, act, n, c), .inp = v2<const float>(b, ln, n, c)});
    exec(ops::residual_forward<float>{.out = v2<float>(b, res, n, c), .a = v2<const float>(b, act, n, c),
                                     .b = v2<const float>(b, enc, n, c)});
    exec(ops::cross_entropy_chunk<float>{.logits = v2<float>(b, logits, n, vocab_padded),
                                        .losses = v1<float>(b, losses),
                                        .targets = v1<const std::int32_t>(b, targets), .vocab_size = vocab,
                                        .dloss = 1.0f / n});
    exec(ops::residual_backward<float>{.da = v2<float>(b, dinp, n, c), .db = v2<float>(b, dres, n, c),
                                      .dout = v2<const float>(b, dout, n, c)});
    exec(ops::gelu_backward<float>{.dinp = v2<float>(b, dres, n, c), .inp = v2<const float>(b, ln, n, c),
                                  .dout = v2<const float>(b, dout, n, c)});
    exec(ops::bias_backward<float>{.dbias = v1<float>(b, dbias), .dout = v2<const float>(b, dres, n, c)});
    exec(ops::layernorm_backward_input<float>{.dinp = v2<float>(b, dinp, n, c),
                                             .dout = v2<const float>(b, dres, n, c),
                                             .inp = v2<const float>(b, enc, n, c),
                                             .weight = v1<const float>(b, lnw), .mean = v1<const float>(b, mean),
                                             .rstd = v1<const float>(b, rstd)});
    exec(ops::layernorm_backward_params<float>{.dweight = v1<float>(b, dlnw), .dbias = v1<float>(b, dlnb),
                                              .dout = v2<const float>(b, dres, n, c),
                                              .inp = v2<const float>(b, enc, n, c),
                                              .mean = v1<const float>(b, mean), .rstd = v1<const float>(b, rstd)});
    exec(ops::encoder_backward_positions<float>{.dwpe = v2<float>(b, dwpe, seq, c),
                                               .dout = v2<const float>(b, dinp, n, c), .sequence_length = seq});
    exec(ops::encoder_backward_tokens<float>{
        .dwte = v2<float>(b, dwte, vocab_padded, c), .dout = v2<const float>(b, dinp, n, c),
        .buckets = {.order = v1<const std::int64_t>(b, order),
                    .starts = v1<const std::int64_t>(b, starts).slice(0, distinct + 1),
                    .ids = v1<const std::int32_t>(b, ids).slice(0, distinct)}});
    exec(ops::make_adamw_update<float>(v1<float>(b, params), v1<float>(b, m), v1<float>(b, v),
                                      v1<const float>(b, dinp), ops::adamw_config{.weight_decay = 0.1}, 3));
    // Attention pieces: n queries at positions 6..17 against 12 keys, two tiles of 6.
    exec(ops::attention_tile_start<float>{.max = v1<float>(b, rmax), .sum = v1<float>(b, rsum),
                                          .acc = v2<float>(b, acc, n, dim)});
    for (std::int64_t tile = 0; tile < 2; ++tile) {
      std::vector<float>& s = scores;
      auto all = v2<float>(b, s, n, 2 * seq);
      memo::tensor_view<float, 2> part(all.data() + tile * seq, {n, seq}, {2 * seq, 1});
      exec(ops::attention_tile_softmax<float>{.scores = part, .max = v1<float>(b, rmax), .sum = v1<float>(b, rsum),
                                             .acc = v2<float>(b, acc, n, dim),
                                             .tile = {.query_first = 0, .key_first = tile * seq}});
    }
    exec(ops::attention_tile_finish<float>{.acc = v2<float>(b, acc, n, dim), .lse = v1<float>(b, lse),
                                          .max = v1<const float>(b, rmax), .sum = v1<const float>(b, rsum)});
    exec(ops::attention_backward_delta<float>{.delta = v1<float>(b, delta),
                                             .dout = v2<const float>(b, dout, n, c).slice(0, n),
                                             .out = v2<const float>(b, dout, n, c).slice(0, n)});
    exec(ops::attention_tile_backward<float>{.scores = v2<float>(b, scores, n, 2 * seq),
                                             .dprobs = v2<float>(b, dscores, n, 2 * seq),
                                             .lse = v1<const float>(b, lse), .delta = v1<const float>(b, delta),
                                             .tile = {.query_first = 0, .key_first = 0}});
  }

  std::vector<std::vector<float>*> outputs() {
    return {&enc, &dwte, &dwpe, &ln, &mean, &rstd, &act, &res, &dinp, &dres, &dlnw, &dlnb, &dbias, &logits,
            &losses, &params, &m, &v, &scores, &rmax, &rsum, &acc, &lse, &delta, &dscores};
  }
};

}  // namespace

TEST_CASE("ops on CUDA: every operator in a kernel matches the host run") {
  world host;
  host_binder hb;
  host.run(hb, host_runner{});

  world device;
  {
    device_binder db;
    device.run(db, device_runner{});
    db.download();
  }
  const char* names[] = {"enc", "dwte", "dwpe", "ln", "mean", "rstd", "act", "res", "dinp", "dres", "dlnw", "dlnb",
                         "dbias", "logits", "losses", "params", "m", "v", "scores", "max", "sum", "acc", "lse",
                         "delta", "dscores"};
  auto h = host.outputs();
  auto d = device.outputs();
  for (std::size_t i = 0; i < h.size(); ++i) check_close(*d[i], *h[i], names[i]);
}

int main(int argc, char** argv) {
  if (memo::cuda_device_count() == 0) {
    std::puts("skipped: no CUDA device");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
