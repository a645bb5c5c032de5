// Tests of the CUDA backend. They need a device: without one the program
// prints "skipped: no CUDA device" and exits 77, which ctest reports as a
// skipped test.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <stdexcept>
#include <vector>

#include "memo/backend/cuda_backend.hpp"

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

int main(int argc, char** argv) {
  if (memo::cuda_device_count() == 0) {
    std::puts("skipped: no CUDA device");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
