// memo/pipeline/sppo_offload.hpp
//
// SPPO's adaptive offloading (section 5): per-subsequence offload ratios
// and the two-level activation management.
//
// Two levels (section 5.1): under causal attention K_i and V_i of every
// earlier subsequence are read again by each later subsequence's forward,
// so they stay on the device (2 s_i H elements per layer); every other
// skeletal activation of subsequence i (A_i) may go to the host.
//
// Sequence-aware ratio (section 5.2): while subsequence i computes, the
// offload of alpha_{i-1} A_{i-1} runs beside it, so device memory follows
//
//     M_i = M_{i-1} + A_i - alpha_{i-1} A_{i-1},   M_{-1} = 0,
//
// and alpha is chosen so that every subsequence offloads the same amount,
// alpha_i A_i = M_threshold, with M_threshold / BW_D2H equal to the balanced
// compute time of one subsequence. alpha_i is one instance of MEMO's alpha
// LP (swap/alpha_solver.hpp, equations (2) and (3)) with nothing offloaded
// whole (K/V stay), S_others = A_i, T_layer = the balanced compute time and
// the host budget shared evenly by the N subsequences, solved by its closed
// form (alpha_closed_form, which the alpha solver's tests hold equal to
// the LP); it also caps alpha_i at 1 and at the host budget, so a short
// subsequence whose A_i is below M_threshold goes to the host whole.
//
// Note on order: the paper writes s_0 <= s_1 <= ... and alpha_0 >= alpha_1
// >= ...; the FLOPs-balanced partition for causal attention
// (sppo_partition.hpp) gives the opposite order (later subsequences are
// shorter), so alpha grows with i there. The rule alpha_i A_i = M_threshold
// is the same either way.
//
// Requires the memo::lpsolve component (through alpha_solver.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "memo/core/error.hpp"
#include "memo/swap/alpha_solver.hpp"

namespace memo {

/// One pipeline stage's activations per subsequence.
struct sppo_offload_problem {
  std::vector<std::uint64_t> tokens;          ///< s_i per subsequence (per GPU)
  std::uint64_t kv_bytes_per_token = 0;       ///< K and V, kept on the device, per layer
  std::uint64_t other_bytes_per_token = 0;    ///< the rest of the skeletal activations, per layer
  int layers = 1;                             ///< layers on this stage
  double compute_seconds = 0.0;               ///< balanced compute time of one subsequence, per layer
  double bandwidth_bytes_per_second = 0.0;    ///< BW_D2H
  std::uint64_t host_budget_bytes = 0;        ///< host memory this GPU may fill

  void check() const {
    expects(!tokens.empty(), "sppo_offload_problem: no subsequences");
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      expects(tokens[i] > 0, [&] { return "sppo_offload_problem: subsequence " + std::to_string(i) + " is empty"; });
    }
    expects(layers >= 1, [&] { return "sppo_offload_problem: layers must be >= 1, got " + std::to_string(layers); });
    // Checked here as well as by the alpha LP, which subsequences with no
    // offloadable bytes never reach.
    expects(std::isfinite(compute_seconds) && compute_seconds > 0.0, [&] {
      return "sppo_offload_problem: compute_seconds must be a finite number > 0, got " +
             std::to_string(compute_seconds);
    });
    expects(std::isfinite(bandwidth_bytes_per_second) && bandwidth_bytes_per_second > 0.0, [&] {
      return "sppo_offload_problem: bandwidth_bytes_per_second must be a finite number > 0, got " +
             std::to_string(bandwidth_bytes_per_second);
    });
  }
};

struct sppo_offload_plan {
  std::vector<double> alpha;                 ///< per subsequence
  std::vector<double> offloaded_bytes;       ///< alpha_i A_i per layer
  std::vector<double> device_bytes;          ///< M_i + K/V of 0..i, per layer, while i computes
  double threshold_bytes = 0.0;              ///< M_threshold = BW x T_compute, per layer
  double peak_device_bytes = 0.0;            ///< max over i of device_bytes, times layers
  double host_bytes = 0.0;                   ///< sum alpha_i A_i, times layers
};

/// The per-subsequence alpha_i and the memory they leave on the device.
inline sppo_offload_plan plan_sppo_offload(const sppo_offload_problem& problem) {
  problem.check();
  const std::size_t n = problem.tokens.size();
  sppo_offload_plan plan;
  plan.threshold_bytes = problem.bandwidth_bytes_per_second * problem.compute_seconds;
  double resident = 0.0, kv = 0.0, previous_offload = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    alpha_problem lp;
    lp.input_bytes = 0;
    lp.attention_output_bytes = 0;
    lp.other_bytes = checked_mul(problem.tokens[i], problem.other_bytes_per_token);
    lp.bandwidth_bytes_per_second = problem.bandwidth_bytes_per_second;
    lp.layer_forward_seconds = problem.compute_seconds;
    lp.layers = problem.layers;
    lp.resident_last_layers = 0;
    lp.host_budget_bytes = problem.host_budget_bytes / n;
    const double alpha = lp.other_bytes == 0 ? 1.0 : alpha_closed_form(lp).alpha;
    const double a = static_cast<double>(lp.other_bytes);
    plan.alpha.push_back(alpha);
    plan.offloaded_bytes.push_back(alpha * a);
    kv += static_cast<double>(checked_mul(problem.tokens[i], problem.kv_bytes_per_token));
    resident += a - previous_offload;  // M_i = M_{i-1} + A_i - alpha_{i-1} A_{i-1}
    previous_offload = alpha * a;
    plan.device_bytes.push_back(resident + kv);
    plan.host_bytes += alpha * a * problem.layers;
  }
  plan.peak_device_bytes =
      *std::max_element(plan.device_bytes.begin(), plan.device_bytes.end()) * problem.layers;
  return plan;
}

}  // namespace memo
