// Tests of the CUDA backend. They need a device: without one the program
// prints "skipped: no CUDA device" and exits 77, which ctest reports as a
// skipped test.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <stdexcept>
#include <vector>

#include "memo/backend/buffer.hpp"
#include "memo/backend/cuda_backend.hpp"
#include "conformance.hpp"

MEMO_BACKEND_CONFORMANCE(memo::cuda_backend);

namespace {
__global__ void fill_kernel(unsigned* out, unsigned n, unsigned seed) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i * 2654435761u + seed;
}
}  // namespace

TEST_CASE("cuda_backend: a consumer stream waiting on an event sees the producer's bytes") {
  memo::cuda_backend backend;
  auto compute = backend.make_stream("compute");
  auto offload = backend.make_stream("offload");
  auto written = backend.make_event();
  constexpr unsigned n = 1u << 20;
  auto* device = static_cast<unsigned*>(backend.device_memory().allocate(n * sizeof(unsigned)));
  auto* host = static_cast<unsigned*>(backend.pinned_memory().allocate(n * sizeof(unsigned)));
  for (unsigned round = 0; round < 3; ++round) {
    backend.enqueue(compute, [&](cudaStream_t s) {
      fill_kernel<<<(n + 255) / 256, 256, 0, s>>>(device, n, round);
      memo::check_cuda(cudaGetLastError(), "fill_kernel");
    });
    backend.record(written, compute);
    backend.wait(offload, written);
    backend.copy_async(host, device, n * sizeof(unsigned), memo::copy_kind::device_to_host, offload);
    backend.synchronize(offload);
    for (unsigned i = 0; i < n; i += 4099) CHECK(host[i] == i * 2654435761u + round);
  }
  CHECK(backend.device_memory().peak_bytes() == n * sizeof(unsigned));
  backend.device_memory().deallocate(device, n * sizeof(unsigned));
  backend.pinned_memory().deallocate(host, n * sizeof(unsigned));
  CHECK(backend.device_memory().current_bytes() == 0);
}

TEST_CASE("cuda_backend: host work runs in stream order and its exception surfaces") {
  memo::cuda_backend backend;
  auto stream = backend.make_stream("host work");
  std::vector<int> order;
  for (int i = 0; i < 10; ++i) backend.enqueue(stream, [&order, i] { order.push_back(i); });
  backend.synchronize(stream);
  CHECK(order == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  backend.enqueue(stream, [] { throw std::runtime_error("host task failed"); });
  CHECK_THROWS_WITH(backend.synchronize(stream), "host task failed");
}

TEST_CASE("cuda_backend: events time work and report completion") {
  memo::cuda_backend backend;
  auto stream = backend.make_stream();
  auto start = backend.make_event();
  auto end = backend.make_event();
  CHECK(backend.query(start));  // never recorded
  backend.record(start, stream);
  backend.record(end, stream);
  backend.synchronize(end);
  CHECK(backend.query(end));
  CHECK(backend.elapsed_seconds(start, end) >= 0.0);
}

TEST_CASE("cuda_backend: fp16 and bf16 GEMMs accumulate in fp32 and match fp64 loops") {
  memo::cuda_backend backend;
  // The workspace comes from the caller (two-phase: ask, then provide).
  const std::size_t workspace_bytes = backend.stream_workspace_bytes();
  CHECK(workspace_bytes > 0);
  memo::buffer<std::byte, memo::cuda_device_memory_resource> workspace(backend.device_memory(),
                                                                      workspace_bytes);
  auto stream = backend.make_stream("compute", {workspace.data(), workspace.size_bytes()});
  CHECK_THROWS_WITH_AS(backend.make_stream("small", {workspace.data(), workspace_bytes / 2}),
                       doctest::Contains("cuBLAS workspace"), memo::error);
  constexpr int m = 33, n = 17, k = 40;
  const auto a = memo_conformance::values(m * k, 7);
  const auto b = memo_conformance::values(k * n, 8);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> ha(a.size()), hb(b.size()), hc(m * n);
    for (std::size_t i = 0; i < a.size(); ++i) ha[i] = T(a[i]);
    for (std::size_t i = 0; i < b.size(); ++i) hb[i] = T(b[i]);
    memo::buffer<T, memo::cuda_device_memory_resource> da(backend.device_memory(), ha.size()),
        db(backend.device_memory(), hb.size()), dc(backend.device_memory(), hc.size());
    backend.copy_async(da.data(), ha.data(), da.size_bytes(), memo::copy_kind::host_to_device, stream);
    backend.copy_async(db.data(), hb.data(), db.size_bytes(), memo::copy_kind::host_to_device, stream);
    backend.gemm(stream, memo::gemm_shape{m, n, k}, 1.0f, da.data(), db.data(), 0.0f, dc.data());
    backend.copy_async(hc.data(), dc.data(), dc.size_bytes(), memo::copy_kind::device_to_host, stream);
    backend.synchronize(stream);
    double worst = 0.0;
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j) {
        double sum = 0.0;  // of the rounded inputs, so only accumulation error remains
        for (int p = 0; p < k; ++p) sum += double(float(ha[i * k + p])) * double(float(hb[p * n + j]));
        worst = std::max(worst, std::abs(double(float(hc[i * n + j])) - sum));
      }
    }
    return worst;
  };
  CHECK(run(__half{}) < 0.05);           // output rounded to fp16
  CHECK(run(__nv_bfloat16{}) < 0.3);     // output rounded to bf16
}

int main(int argc, char** argv) {
  if (memo::cuda_device_count() == 0) {
    std::puts("skipped: no CUDA device");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
