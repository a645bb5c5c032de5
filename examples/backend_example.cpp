// backend_example: the Backend concept in one page.
//
// A "layer" writes an activation on the compute stream; an offload stream
// copies it to pinned host memory while the next layer computes; a prefetch
// stream brings it back. The same function runs on `host_backend` (here,
// with the host link throttled to a PCIe-like bandwidth) and on
// `cuda_backend` (pass --cuda on a machine with a GPU; the work callables
// then receive a cudaStream_t).
//
// Usage: backend_example [--json]
#include <memo/backend/buffer.hpp>
#include <memo/backend/host_backend.hpp>

#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>
#include <type_traits>

namespace {

struct offload_report {
  bool round_trip_ok = false;
  double offload_seconds = 0.0;
  std::size_t device_peak_bytes = 0;
  std::size_t pinned_peak_bytes = 0;
};

template <memo::Backend B>
offload_report offload_and_restore(B& backend, std::size_t floats) {
  auto compute = backend.make_stream("compute");
  auto offload = backend.make_stream("offload");
  auto prefetch = backend.make_stream("prefetch");
  auto written = backend.make_event();
  auto offloaded = backend.make_event();
  auto restored = backend.make_event();
  auto start = backend.make_event();

  using device_floats = memo::buffer<float, std::remove_reference_t<decltype(backend.device_memory())>>;
  using pinned_floats = memo::buffer<float, std::remove_reference_t<decltype(backend.pinned_memory())>>;
  device_floats activation(backend.device_memory(), floats);  // [tokens * hidden]
  device_floats restored_activation(backend.device_memory(), floats);
  pinned_floats host_copy(backend.pinned_memory(), floats);
  const std::size_t bytes = activation.size_bytes();

  // Layer i writes its activation (on the host backend the callable runs on
  // the compute stream's thread; on CUDA it would launch a kernel).
  float* out = activation.data();
  backend.enqueue(compute, [out, floats] { std::iota(out, out + floats, 0.0f); });
  backend.record(written, compute);

  // Offload while the compute stream moves on to layer i + 1.
  backend.wait(offload, written);
  backend.record(start, offload);
  backend.copy_async(host_copy.data(), activation.data(), bytes, memo::copy_kind::device_to_host,
                     offload);
  backend.record(offloaded, offload);

  // Backward: prefetch into another buffer once the offload is done.
  backend.wait(prefetch, offloaded);
  backend.copy_async(restored_activation.data(), host_copy.data(), bytes,
                     memo::copy_kind::host_to_device, prefetch);
  backend.record(restored, prefetch);

  // The compute stream may only read the restored bytes after the prefetch.
  backend.wait(compute, restored);
  bool same = false;
  const float* a = activation.data();
  const float* r = restored_activation.data();
  backend.enqueue(compute, [&same, a, r, bytes] { same = std::memcmp(a, r, bytes) == 0; });
  backend.synchronize(compute);

  offload_report report;
  report.round_trip_ok = same;
  report.offload_seconds = backend.elapsed_seconds(start, offloaded);
  report.device_peak_bytes = backend.device_memory().peak_bytes();
  report.pinned_peak_bytes = backend.pinned_memory().peak_bytes();
  return report;
}

}  // namespace

int main(int argc, char** argv) {
  const bool json = argc > 1 && std::string(argv[1]) == "--json";
  memo::host_backend::options options;
  options.device_to_host_bytes_per_second = 2.0e9;  // a slow host link: 2 GB/s
  options.host_to_device_bytes_per_second = 2.0e9;
  memo::host_backend backend(options);

  constexpr std::size_t floats = 4u << 20;  // 16 MiB: >= 8 ms each way at 2 GB/s
  const auto report = offload_and_restore(backend, floats);
  if (json) {
    std::printf(
        "{\"round_trip_ok\": %s, \"offload_seconds\": %.6f, \"offload_bytes\": %zu, "
        "\"device_peak_bytes\": %zu, \"pinned_peak_bytes\": %zu}\n",
        report.round_trip_ok ? "true" : "false", report.offload_seconds, floats * sizeof(float),
        report.device_peak_bytes, report.pinned_peak_bytes);
  } else {
    std::printf("round trip          %s\n", report.round_trip_ok ? "bytes identical" : "MISMATCH");
    std::printf("offload of %zu MiB  %.2f ms (throttled to 2 GB/s: >= %.2f ms)\n",
                floats * sizeof(float) >> 20, report.offload_seconds * 1e3,
                static_cast<double>(floats * sizeof(float)) / 2.0e9 * 1e3);
    std::printf("device peak         %s\n", memo::format_bytes(report.device_peak_bytes).c_str());
    std::printf("pinned peak         %s\n", memo::format_bytes(report.pinned_peak_bytes).c_str());
  }
  return report.round_trip_ok ? 0 : 1;
}
