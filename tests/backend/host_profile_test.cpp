// Tests of memo/backend/host_profile.hpp: a measured profile is a valid
// profile, reports the backend's capacities, and sees its throttle.
#include "memo/backend/host_profile.hpp"

#include <doctest/doctest.h>

#include <cmath>

TEST_CASE("host_profile: a measured profile is valid and reports the configured capacities") {
  memo::host_backend::options config;
  config.device_capacity_bytes = 64 * memo::mib;
  config.pinned_capacity_bytes = 32 * memo::mib;
  memo::host_backend backend(config);
  const auto profile = memo::measure_host_profile(backend, {64, 2, 1 * memo::mib});
  CHECK_NOTHROW(profile.check());
  CHECK(std::isfinite(profile.peak_flops));
  CHECK(profile.efficiency == 1.0);
  CHECK(profile.device_memory_bytes == 64 * memo::mib);
  CHECK(profile.host_memory_bytes == 32 * memo::mib);
  // The measurement frees what it allocated.
  CHECK(backend.device_memory().current_bytes() == 0);
  CHECK(backend.pinned_memory().current_bytes() == 0);
}

TEST_CASE("host_profile: a throttled copy engine is never measured faster than its throttle") {
  memo::host_backend::options config;
  config.device_to_host_bytes_per_second = 100e6;
  config.host_to_device_bytes_per_second = 50e6;
  memo::host_backend backend(config);
  const auto profile = memo::measure_host_profile(backend, {32, 1, 2 * memo::mib});
  // The throttle sleeps until bytes / bandwidth has passed: a lower bound on time.
  CHECK(profile.device_to_host_bytes_per_second <= 100e6 * 1.001);
  CHECK(profile.host_to_device_bytes_per_second <= 50e6 * 1.001);
}
