// memo/backend/host_profile.hpp
//
// A `device_profile` measured on the host backend, so the alpha LP of MEMO
// section 4.1 can be fed numbers from the machine a run actually uses (the
// paper's job profiler, section 4.3.2, measures T_layer and the sizes the
// same way before training).
//
//   - peak_flops:  the rate of an fp32 Eigen GEMM of the given size on the
//                  calling thread (the host backend computes on one thread
//                  per stream); efficiency is 1, because this *is* the
//                  achieved rate;
//   - bandwidths:  `copy_async` of a buffer each way on a fresh stream,
//                  timed with backend events, so a throttled host backend
//                  reports its throttle and an unthrottled one its memcpy
//                  speed;
//   - memory:      the capacities the backend was configured with (0 when
//                  unlimited), one "GPU" per node.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include <Eigen/Core>

#include "memo/backend/buffer.hpp"
#include "memo/backend/host_backend.hpp"
#include "memo/core/error.hpp"
#include "memo/core/device_profile.hpp"

namespace memo {

struct host_profile_options {
  int gemm_size = 256;                     ///< square fp32 GEMM, n x n x n
  int repeats = 3;                         ///< best of this many timings
  std::size_t copy_bytes = 8 * mib;        ///< per direction
};

/// Seconds of one n x n x n fp32 GEMM on the calling thread (best of `repeats`).
inline double measure_gemm_seconds(int size, int repeats) {
  expects(size > 0 && repeats > 0, "measure_gemm_seconds: size and repeats must be positive");
  Eigen::MatrixXf a = Eigen::MatrixXf::Random(size, size);
  Eigen::MatrixXf b = Eigen::MatrixXf::Random(size, size);
  Eigen::MatrixXf c(size, size);
  double best = 0.0;
  for (int r = 0; r < repeats + 1; ++r) {  // the first run warms caches up
    const auto start = std::chrono::steady_clock::now();
    c.noalias() = a * b;
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (r == 1 || (r > 1 && seconds < best)) best = seconds;
  }
  expects(c.allFinite(), "measure_gemm_seconds: the GEMM produced non-finite values");
  return std::max(best, 1e-9);
}

inline device_profile measure_host_profile(host_backend& backend, host_profile_options options = {}) {
  expects(options.copy_bytes > 0, "measure_host_profile: copy_bytes must be positive");
  device_profile profile;
  profile.name = "host (measured)";
  const double n = options.gemm_size;
  profile.peak_flops = 2.0 * n * n * n / measure_gemm_seconds(options.gemm_size, options.repeats);
  profile.efficiency = 1.0;

  auto stream = backend.make_stream("profile copies");
  buffer<std::byte, host_memory_resource> device(backend.device_memory(), options.copy_bytes);
  buffer<std::byte, host_memory_resource> pinned(backend.pinned_memory(), options.copy_bytes);
  buffer<std::byte, host_memory_resource> other(backend.device_memory(), options.copy_bytes);
  auto time_copy = [&](void* destination, const void* source, copy_kind kind) {
    double best = 0.0;
    for (int r = 0; r < options.repeats; ++r) {
      auto start = backend.make_event();
      auto end = backend.make_event();
      backend.record(start, stream);
      backend.copy_async(destination, source, options.copy_bytes, kind, stream);
      backend.record(end, stream);
      backend.synchronize(end);
      const double seconds = std::max(backend.elapsed_seconds(start, end), 1e-9);
      if (r == 0 || seconds < best) best = seconds;
    }
    return static_cast<double>(options.copy_bytes) / best;
  };
  profile.device_to_host_bytes_per_second =
      time_copy(pinned.data(), device.data(), copy_kind::device_to_host);
  profile.host_to_device_bytes_per_second =
      time_copy(device.data(), pinned.data(), copy_kind::host_to_device);
  profile.interconnect_bytes_per_second =
      time_copy(other.data(), device.data(), copy_kind::device_to_device);
  profile.device_memory_bytes = backend.config().device_capacity_bytes.value_or(0);
  profile.host_memory_bytes = backend.config().pinned_capacity_bytes.value_or(0);
  profile.gpus_per_node = 1;
  profile.check();
  return profile;
}

}  // namespace memo
