// tests/schedule/schedule_test_helpers.hpp
//
// What the tests of the stream-schedule headers share: a device profile with
// round numbers, a throttled host backend, and the message of an error.
#pragma once

#include <functional>
#include <string>

#include "memo/backend/host_backend.hpp"
#include "memo/core/error.hpp"
#include "memo/core/device_profile.hpp"

namespace memo::testing {

// Round numbers so every hand-computed time is exact: 1000 FLOP/s, 1000 B/s
// host-to-device and interconnect, 500 B/s device-to-host.
inline memo::device_profile unit_profile() {
  memo::device_profile profile;
  profile.name = "unit";
  profile.peak_flops = 1000.0;
  profile.efficiency = 1.0;
  profile.host_to_device_bytes_per_second = 1000.0;
  profile.device_to_host_bytes_per_second = 500.0;
  profile.interconnect_bytes_per_second = 1000.0;
  return profile;
}

inline memo::host_backend::options throttled(double bytes_per_second) {
  memo::host_backend::options options;
  options.host_to_device_bytes_per_second = bytes_per_second;
  options.device_to_host_bytes_per_second = bytes_per_second;
  return options;
}

inline std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const memo::error& e) {
    return e.message();
  }
  return "(no error)";
}

}  // namespace memo::testing
