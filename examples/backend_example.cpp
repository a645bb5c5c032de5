// backend_example: the Backend concept in one page.
//
// A "layer" writes an activation on the compute stream (a `parallel_for`
// over a MEMO_HOST_DEVICE functor) and multiplies it by a weight (`gemm`);
// an offload stream copies the activation to pinned host memory while the
// compute stream moves on; a prefetch stream brings it back. The function
// doing it is a template over `memo::Backend` and never branches on the
// backend: it runs on `host_backend` (here, with the host link throttled to
// a PCIe-like bandwidth) and, compiled by nvcc, on `cuda_backend`.
//
// Usage: backend_example [--json]
#include <memo/backend/buffer.hpp>
#include <memo/backend/host_backend.hpp>
#include <memo/core/command_line.hpp>
#include <memo/core/json.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace {

// Kernel math written once: element i of the activation. Runs in a loop on
// the host backend and inside a kernel on the CUDA backend.
struct write_activation {
  float* out;  // [tokens * hidden]
  MEMO_HOST_DEVICE void operator()(std::int64_t i) const { out[i] = static_cast<float>(i % 97) * 0.01f; }
};

struct offload_report {
  bool round_trip_ok = false;
  bool gemm_ok = false;
  double offload_seconds = 0.0;
  std::size_t device_peak_bytes = 0;
  std::size_t pinned_peak_bytes = 0;
};

template <memo::Backend B>
offload_report offload_and_restore(B& backend, std::int64_t tokens, std::int64_t hidden) {
  const auto floats = static_cast<std::size_t>(tokens * hidden);
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
  const auto weight_floats = static_cast<std::size_t>(hidden * hidden);
  device_floats weight(backend.device_memory(), weight_floats);  // [hidden, hidden]
  device_floats projected(backend.device_memory(), floats);      // [tokens, hidden]
  pinned_floats host_weight(backend.pinned_memory(), weight_floats);
  pinned_floats host_projected(backend.pinned_memory(), floats);
  for (std::size_t i = 0; i < weight_floats; ++i) host_weight.data()[i] = (i % hidden == i / hidden) ? 2.0f : 0.0f;
  backend.copy_async(weight.data(), host_weight.data(), weight.size_bytes(),
                     memo::copy_kind::host_to_device, compute);

  // Layer i writes its activation, then projects it: projected = activation x weight.
  backend.parallel_for(compute, memo::extent_1d{tokens * hidden}, write_activation{activation.data()});
  backend.record(written, compute);
  backend.gemm(compute, memo::gemm_shape{.m = tokens, .n = hidden, .k = hidden}, 1.0f,
               activation.data(), weight.data(), 0.0f, projected.data());
  backend.copy_async(host_projected.data(), projected.data(), projected.size_bytes(),
                     memo::copy_kind::device_to_host, compute);

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

  // The host may only read the restored bytes after the prefetch.
  pinned_floats check(backend.pinned_memory(), floats);
  backend.wait(compute, restored);
  backend.copy_async(check.data(), restored_activation.data(), bytes,
                     memo::copy_kind::device_to_host, compute);
  backend.synchronize(compute);

  offload_report report;
  report.round_trip_ok = true;
  report.gemm_ok = true;
  for (std::size_t i = 0; i < floats; ++i) {
    const float written_value = static_cast<float>(static_cast<std::int64_t>(i) % 97) * 0.01f;
    report.round_trip_ok = report.round_trip_ok && check.data()[i] == written_value;
    report.gemm_ok = report.gemm_ok && std::abs(host_projected.data()[i] - 2.0f * written_value) < 1e-5f;
  }
  report.offload_seconds = backend.elapsed_seconds(start, offloaded);
  report.device_peak_bytes = backend.device_memory().peak_bytes();
  report.pinned_peak_bytes = backend.pinned_memory().peak_bytes();
  return report;
}

}  // namespace

int example_main(int argc, char** argv) {
  const bool json = memo::command_arguments(argc, argv).only("--json");
  memo::host_backend::options options;
  options.device_to_host_bytes_per_second = 2.0e9;  // a slow host link: 2 GB/s
  options.host_to_device_bytes_per_second = 2.0e9;
  memo::host_backend backend(options);

  constexpr std::int64_t tokens = 4096;
  constexpr std::int64_t hidden = 1024;  // 16 MiB of activation: >= 8 ms each way at 2 GB/s
  constexpr std::size_t floats = tokens * hidden;
  const auto report = offload_and_restore(backend, tokens, hidden);
  if (json) {
    memo::json_writer out;
    out.begin_object()
        .field("round_trip_ok", report.round_trip_ok)
        .field("gemm_ok", report.gemm_ok)
        .field("offload_seconds", report.offload_seconds)
        .field("offload_bytes", floats * sizeof(float))
        .field("device_peak_bytes", report.device_peak_bytes)
        .field("pinned_peak_bytes", report.pinned_peak_bytes)
        .end_object();
    std::printf("%s\n", out.str().c_str());
  } else {
    std::printf("round trip          %s\n", report.round_trip_ok ? "bytes identical" : "MISMATCH");
    std::printf("projection (gemm)   %s\n", report.gemm_ok ? "matches 2 x activation" : "MISMATCH");
    std::printf("offload of %zu MiB  %.2f ms (throttled to 2 GB/s: >= %.2f ms)\n",
                floats * sizeof(float) >> 20, report.offload_seconds * 1e3,
                static_cast<double>(floats * sizeof(float)) / 2.0e9 * 1e3);
    std::printf("device peak         %s\n", memo::format_bytes(report.device_peak_bytes).c_str());
    std::printf("pinned peak         %s\n", memo::format_bytes(report.pinned_peak_bytes).c_str());
  }
  return report.round_trip_ok && report.gemm_ok ? 0 : 1;
}

int main(int argc, char** argv) {
  return memo::run_command("backend_example", "usage: backend_example [--json]\n",
                           [&] { return example_main(argc, argv); });
}
