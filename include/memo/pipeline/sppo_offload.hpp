// memo/pipeline/sppo_offload.hpp
//
// SPPO's sequence-aware offloading (section 5.2). While subsequence i
// computes, the offloaded part of subsequence i - 1's activations is copied
// to the host; until the copy ends the device holds both. With A_i the
// activation bytes of subsequence i and alpha_i the fraction offloaded, the
// device memory after subsequence i is
//
//   M_i = M_{i-1} + A_i - alpha_{i-1} A_{i-1},      M_{-1} = 0,
//
// (the offloaded part of the previous subsequence leaves once its copy has
// ended). A copy hides behind compute when it takes no longer than the
// compute it overlaps, so SPPO offloads the same volume from every
// subsequence,
//
//   alpha_i A_i = M_threshold = BW_D2H x T_balanced_comp,
//
// T_balanced_comp being one subsequence's compute time under the FLOPs-
// balanced partition (equal for all i). alpha_i is capped at 1: a
// subsequence smaller than the threshold is offloaded whole.
//
// Two-level activation management (section 5.1): K and V of every
// subsequence stay on the device (later subsequences' attention reads them),
// only the rest of a subsequence's activations is offloadable, so A_i above
// is the offloadable part and `resident_bytes` the part that never moves.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "memo/core/error.hpp"

namespace memo {

/// One subsequence's activations, split by the two-level scheme.
struct sppo_activation {
  double offloadable_bytes = 0.0;  ///< A_i
  double resident_bytes = 0.0;     ///< K/V kept on the device for later subsequences
};

struct sppo_offload_plan {
  std::vector<double> alpha;         ///< alpha_i
  std::vector<double> memory_bytes;  ///< M_i: device bytes after subsequence i's forward
  double threshold_bytes = 0.0;      ///< M_threshold
  double peak_bytes = 0.0;           ///< max_i M_i
};

/// alpha_i and M_i for subsequences with activations `activations`, a
/// device-to-host rate and the balanced compute time of one subsequence.
inline sppo_offload_plan sppo_offload_ratios(const std::vector<sppo_activation>& activations,
                                             double device_to_host_bytes_per_second, double balanced_compute_seconds) {
  expects(!activations.empty(), "sppo offload: no subsequences");
  expects(device_to_host_bytes_per_second > 0.0 && balanced_compute_seconds >= 0.0, [&] {
    return "sppo offload: bandwidth " + std::to_string(device_to_host_bytes_per_second) + " B/s and compute time " +
           std::to_string(balanced_compute_seconds) + " s must be positive and non-negative";
  });
  sppo_offload_plan plan;
  plan.threshold_bytes = device_to_host_bytes_per_second * balanced_compute_seconds;
  double memory = 0.0, offloaded_before = 0.0;
  for (std::size_t i = 0; i < activations.size(); ++i) {
    const sppo_activation& a = activations[i];
    expects(a.offloadable_bytes >= 0.0 && a.resident_bytes >= 0.0,
            [&] { return "sppo offload: subsequence " + std::to_string(i) + " has negative activation bytes"; });
    const double alpha = a.offloadable_bytes > 0.0 ? std::min(1.0, plan.threshold_bytes / a.offloadable_bytes) : 0.0;
    memory += a.offloadable_bytes + a.resident_bytes - offloaded_before;
    offloaded_before = alpha * a.offloadable_bytes;
    plan.alpha.push_back(alpha);
    plan.memory_bytes.push_back(memory);
    plan.peak_bytes = std::max(plan.peak_bytes, memory);
  }
  return plan;
}

}  // namespace memo
