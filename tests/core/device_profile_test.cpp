#include "memo/core/device_profile.hpp"

#include <doctest/doctest.h>

TEST_CASE("device_profile: presets are valid and named") {
  for (const auto& profile : memo::device_profile::presets()) {
    CHECK_NOTHROW(profile.check());
    CHECK(memo::device_profile::preset(profile.name).name == profile.name);
  }
  CHECK_THROWS_WITH_AS(memo::device_profile::preset("TPU"),
                       doctest::Contains("unknown device profile 'TPU' (known: A100-80GB"),
                       memo::error);
}

TEST_CASE("device_profile: the A800 preset is MEMO's cluster") {
  const auto a800 = memo::device_profile::a800_80gb();
  CHECK(a800.host_to_device_bytes_per_second == 32e9);  // section 5.1: 32 GB/s GPU-CPU
  CHECK(a800.host_memory_bytes == 2048 * memo::gib);    // 2 TB CPU memory per node
  CHECK(a800.gpus_per_node == 8);
  CHECK(a800.host_memory_bytes_per_gpu() == 256 * memo::gib);
}

TEST_CASE("device_profile: compute time follows the achieved rate") {
  memo::device_profile profile = memo::device_profile::h100_sxm();
  profile.peak_flops = 1e15;
  profile.efficiency = 0.25;
  CHECK(profile.achieved_flops() == doctest::Approx(2.5e14));
  CHECK(profile.compute_seconds(5e14) == doctest::Approx(2.0));
}

TEST_CASE("device_profile: out-of-range fields are named") {
  auto profile = memo::device_profile::a100_80gb();
  profile.efficiency = 1.5;
  CHECK_THROWS_WITH_AS(profile.check(), doctest::Contains("efficiency must be in (0, 1], got 1.5"),
                       memo::error);
  profile = memo::device_profile::a100_80gb();
  profile.device_to_host_bytes_per_second = 0;
  CHECK_THROWS_WITH_AS(profile.check(), doctest::Contains("device_to_host_bytes_per_second"),
                       memo::error);
  profile = memo::device_profile::a100_80gb();
  profile.gpus_per_node = 0;
  CHECK_THROWS_AS(profile.check(), memo::error);
}
