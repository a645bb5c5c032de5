// memo/core/device_profile.hpp
//
// The hardware numbers every planning decision is made from: how fast a GPU
// computes, how fast bytes cross the host link each way, how much host
// memory a node can lend to offloaded activations. The alpha LP of MEMO
// section 4.1 (swap/) and the stream-schedule simulator (schedule/) read
// them from here, and so can a pipeline solver above both; that is why they
// live in core/, where every layer can include them without reaching
// sideways. A projection onto a cluster memo is not running on is as good as
// its profile, and the profile is a plain value a user can print and edit.
//
// Presets are dense bf16 tensor-core peaks from the vendors' data sheets and
// effective (not nominal) host-link bandwidths; `efficiency` is the fraction
// of peak that a transformer layer's GEMMs and attention reach in practice.
// The A800 preset is MEMO's own cluster (section 5.1: 8 x A800-80GB per
// node, 32 GB/s GPU-CPU bandwidth, 2 TB CPU memory, NVLink 400 GB/s).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "memo/core/bytes.hpp"
#include "memo/core/error.hpp"

namespace memo {

struct device_profile {
  std::string name;
  double peak_flops = 0.0;        ///< per GPU, dense bf16, FLOP/s
  double efficiency = 0.5;        ///< achieved / peak for a layer's compute, in (0, 1]
  double host_to_device_bytes_per_second = 0.0;  ///< per GPU, effective
  double device_to_host_bytes_per_second = 0.0;  ///< per GPU, effective
  double interconnect_bytes_per_second = 0.0;    ///< per GPU, intra-node collectives
  std::uint64_t device_memory_bytes = 0;         ///< per GPU
  std::uint64_t host_memory_bytes = 0;           ///< per node, budget for activations
  int gpus_per_node = 8;

  /// FLOP/s a layer actually reaches.
  [[nodiscard]] double achieved_flops() const { return peak_flops * efficiency; }
  /// Seconds to compute `flops` at the achieved rate.
  [[nodiscard]] double compute_seconds(double flops) const { return flops / achieved_flops(); }
  /// Host memory one GPU may use when the node's budget is shared evenly.
  [[nodiscard]] std::uint64_t host_memory_bytes_per_gpu() const {
    return host_memory_bytes / static_cast<std::uint64_t>(gpus_per_node);
  }

  /// Throws `memo::error` naming the first field that is out of range.
  void check() const {
    auto positive = [&](double value, const char* field) {
      expects(value > 0.0, [&] {
        return "device profile '" + name + "': " + field + " must be positive, got " +
               std::to_string(value);
      });
    };
    positive(peak_flops, "peak_flops");
    positive(host_to_device_bytes_per_second, "host_to_device_bytes_per_second");
    positive(device_to_host_bytes_per_second, "device_to_host_bytes_per_second");
    expects(efficiency > 0.0 && efficiency <= 1.0, [&] {
      return "device profile '" + name + "': efficiency must be in (0, 1], got " +
             std::to_string(efficiency);
    });
    expects(gpus_per_node > 0, [&] {
      return "device profile '" + name + "': gpus_per_node must be positive, got " +
             std::to_string(gpus_per_node);
    });
  }

  /// A100-SXM4-80GB: 312 TFLOP/s bf16, PCIe 4.0 x16 (~25 GB/s effective).
  static device_profile a100_80gb() {
    return {"A100-80GB", 312e12, 0.55, 25e9, 25e9, 300e9, 80 * gib, 2048 * gib, 8};
  }
  /// A800-80GB as in MEMO's experiments: A100 compute, NVLink 400 GB/s,
  /// 32 GB/s GPU-CPU bandwidth, 2 TB host memory per 8-GPU node.
  static device_profile a800_80gb() {
    return {"A800-80GB", 312e12, 0.55, 32e9, 32e9, 200e9, 80 * gib, 2048 * gib, 8};
  }
  /// H100-SXM5-80GB: 989 TFLOP/s dense bf16, PCIe 5.0 x16 (~50 GB/s effective).
  static device_profile h100_sxm() {
    return {"H100-SXM", 989e12, 0.5, 50e9, 50e9, 450e9, 80 * gib, 2048 * gib, 8};
  }
  /// H200-SXM-141GB: H100 compute, 141 GB HBM3e.
  static device_profile h200() {
    return {"H200", 989e12, 0.5, 50e9, 50e9, 450e9, 141 * gib, 2048 * gib, 8};
  }

  /// The presets by name ("A100-80GB", "A800-80GB", "H100-SXM", "H200").
  static std::vector<device_profile> presets() {
    return {a100_80gb(), a800_80gb(), h100_sxm(), h200()};
  }
  static device_profile preset(std::string_view preset_name) {
    for (auto& profile : presets()) {
      if (profile.name == preset_name) return profile;
    }
    std::string known;
    for (const auto& profile : presets()) known += (known.empty() ? "" : ", ") + profile.name;
    throw error("unknown device profile '" + std::string(preset_name) + "' (known: " + known + ")");
  }
};

}  // namespace memo
