// memo/swap/alpha_solver.hpp
//
// The offload fraction alpha of MEMO section 4.1, equations (1)-(3):
//
//     max  alpha
//     s.t. (S_input + S_attn + alpha * S_others) / B  <=  T_layer        (2)
//          (n - u) * (S_input + S_attn + alpha * S_others)  <=  M_cpu    (3)
//          0 <= alpha <= 1
//
// An attention that keeps Q, K and V in its own host store (FPDT's offload,
// `transformer_layer::attention_keeps_qkv`; then S_others leaves them out)
// adds S_qkv / B to every layer's transfer in (2) and n * S_qkv to the host
// in (3) (`attention_host_bytes`): it moves them whole, in every layer,
// over the same link.
//
// with S_* the skeletal bytes of one layer on one GPU (whole bytes; for a GPT
// layer `transformer_layer`'s, the bytes the planner's trace keeps and the
// rounding buffers hold, S_attn including the attention's log-sum-exp), B
// the device-to-host bandwidth, T_layer one layer's forward time, n layers
// of which the last u (u = 2 in the paper) are never swapped, and M_cpu the
// host memory one GPU may fill (a node's budget divided by its GPUs). Constraint (2) keeps the
// offload of layer i hidden behind the forward of layer i+1; (3) keeps the
// host from running out of memory.
//
// MEMO's LP has no row for the backward, where the other direction of the
// link carries the swapper's prefetches, and such an attention's fetches
// (`attention_fetch_bytes`: every K/V chunk once, each query chunk once per
// key chunk at or before it) share it. With `layer_backward_seconds` set
// the LP adds
//
//     (m * (S_input + S_attn + alpha * S_others) + S_fetch) / B_h2d  <=  T_backward   (4)
//
// m prefetches and one layer's fetches inside one layer's backward, where m
// is how many prefetches the step protocol (schedule/memo_protocol.hpp)
// queues ahead of the first fetches that have no rebuild before them: the
// K - u issued when the forward ends (at most the swapped layers), or, when
// K = u, the one issued after the last layer's backward, which the last
// resident layer's backward must cover; none when nothing is swapped. Later
// prefetches each overlap a swapped layer's rebuild as well. So (4) is the
// step simulator's no-stall condition (schedule/memo_step.hpp, where the
// attention's copies share the swapper's in-order streams) for 0 < alpha <
// 1; at alpha = 0 every layer but the last rebuilds its shared tensors,
// which can absorb an excess. Hence (4) never makes the problem
// infeasible: when even alpha = 0 breaks it, the answer is alpha = 0 with
// the excess as `backward_stall_seconds_per_layer` (an upper bound on what
// the first backward layers wait). The simulator counts a layer's whole
// backward as the time the attention may fetch in, not only the
// attention's part of it: a model of the link's throughput, not of the
// order inside a layer.
//
// The LP is solved with lp_solve (as in the paper), each row scaled to
// natural units (seconds, fraction of the budget) so its coefficients stay
// near 1 for any sequence length. The result names the constraint that binds
// and the stall the schedule should see; if even alpha = 0 breaks (2) or
// (3) the problem has no answer and the error says which constraint and by
// how much. `alpha_closed_form` is the same answer by hand, which the
// tests compare against.
//
// Requires the memo::lpsolve component.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "memo/core/bytes.hpp"
#include "memo/core/error.hpp"
#include "memo/core/lp_solve.hpp"
#include "memo/core/device_profile.hpp"
#include "memo/core/transformer_layer.hpp"
#include "memo/schedule/layer_cost.hpp"

namespace memo {

/// The numbers of equations (2), (3) and (4), per GPU and per layer. Sizes are
/// whole bytes; a GPT layer's come from `transformer_layer` (`from_layer`),
/// the description the trace generator and the skeletal layout also read.
struct alpha_problem {
  std::uint64_t input_bytes = 0;             ///< S_input, offloaded whole
  std::uint64_t attention_output_bytes = 0;  ///< S_attn (with its log-sum-exp), offloaded whole
  std::uint64_t other_bytes = 0;             ///< S_others, alpha of it offloaded
  double bandwidth_bytes_per_second = 0.0;   ///< B, device to host
  double layer_forward_seconds = 0.0;        ///< T_layer
  int layers = 0;                            ///< n
  int resident_last_layers = 2;                  ///< u, the last layers never swapped
  int rounding_buffers = 2;                      ///< K, for row (4)
  std::uint64_t host_budget_bytes = 0;       ///< M_cpu available to this GPU
  /// S_qkv: Q, K and V of one layer that its attention keeps in host memory
  /// itself (0: the skeletal tensors hold them, in other_bytes).
  std::uint64_t attention_host_bytes = 0;
  /// Row (4), present when layer_backward_seconds > 0: one layer's backward
  /// (without the rebuild), the host-to-device bandwidth, and S_fetch, what
  /// the attention reads back from its host store in one layer's backward.
  double layer_backward_seconds = 0.0;
  double host_to_device_bytes_per_second = 0.0;
  std::uint64_t attention_fetch_bytes = 0;

  [[nodiscard]] int swapped_layers() const { return std::max(0, layers - resident_last_layers); }
  /// S_input + S_attn.
  [[nodiscard]] std::uint64_t whole_bytes() const {
    return checked_add(input_bytes, attention_output_bytes);
  }
  /// Bytes one swapped layer offloads at `alpha`.
  [[nodiscard]] double offload_bytes(double alpha) const {
    return static_cast<double>(whole_bytes()) + alpha * static_cast<double>(other_bytes);
  }
  /// Seconds one layer's offload takes at `alpha`, the attention's own
  /// copies included.
  [[nodiscard]] double transfer_seconds(double alpha) const {
    return (offload_bytes(alpha) + static_cast<double>(attention_host_bytes)) / bandwidth_bytes_per_second;
  }
  /// Whether row (4) is part of the problem.
  [[nodiscard]] bool has_backward_row() const { return layer_backward_seconds > 0.0; }
  /// m of row (4): the prefetches ahead of the first unrebuilt fetches.
  [[nodiscard]] int queued_prefetches() const {
    const int swapped = swapped_layers();
    if (swapped == 0) return 0;
    return std::max(1, std::min(rounding_buffers - resident_last_layers, swapped));
  }
  /// Seconds the link to the device is busy in that layer backward at
  /// `alpha`: m prefetches and the attention's fetches (left side of (4)).
  [[nodiscard]] double backward_transfer_seconds(double alpha) const {
    return (queued_prefetches() * offload_bytes(alpha) + static_cast<double>(attention_fetch_bytes)) /
           host_to_device_bytes_per_second;
  }
  /// Host bytes of every layer's attention store: n x S_qkv.
  [[nodiscard]] double attention_host_total() const {
    return static_cast<double>(layers) * static_cast<double>(attention_host_bytes);
  }
  /// Host bytes at `alpha` (left side of (3)): the swapped layers' skeletal
  /// tensors and every layer's attention store.
  [[nodiscard]] double host_bytes(double alpha) const {
    return static_cast<double>(swapped_layers()) * offload_bytes(alpha) + attention_host_total();
  }

  void check() const {
    // All four sizes together (alpha = 1) must be a byte count.
    expects(other_bytes <= std::numeric_limits<std::uint64_t>::max() - whole_bytes() &&
                attention_host_bytes <= std::numeric_limits<std::uint64_t>::max() - whole_bytes() - other_bytes,
            [&] {
              return "alpha problem: input_bytes + attention_output_bytes + other_bytes + attention_host_bytes (" +
                     std::to_string(input_bytes) + " + " + std::to_string(attention_output_bytes) + " + " +
                     std::to_string(other_bytes) + " + " + std::to_string(attention_host_bytes) +
                     ") overflows 64 bits";
            });
    expects(std::isfinite(bandwidth_bytes_per_second) && bandwidth_bytes_per_second > 0.0, [&] {
      return "alpha problem: bandwidth_bytes_per_second must be positive, got " +
             std::to_string(bandwidth_bytes_per_second);
    });
    expects(std::isfinite(layer_forward_seconds) && layer_forward_seconds > 0.0, [&] {
      return "alpha problem: layer_forward_seconds must be positive, got " +
             std::to_string(layer_forward_seconds);
    });
    expects(std::isfinite(layer_backward_seconds) && layer_backward_seconds >= 0.0, [&] {
      return "alpha problem: layer_backward_seconds must be finite and >= 0, got " +
             std::to_string(layer_backward_seconds);
    });
    expects(!has_backward_row() ||
                (std::isfinite(host_to_device_bytes_per_second) && host_to_device_bytes_per_second > 0.0),
            [&] {
              return "alpha problem: with a backward row (layer_backward_seconds > 0) "
                     "host_to_device_bytes_per_second must be positive, got " +
                     std::to_string(host_to_device_bytes_per_second);
            });
    expects(attention_fetch_bytes == 0 || has_backward_row(), [&] {
      return "alpha problem: attention_fetch_bytes (" + std::to_string(attention_fetch_bytes) +
             ") is counted only in the backward row: set layer_backward_seconds";
    });
    expects(layers >= 1 && resident_last_layers >= 0, [&] {
      return "alpha problem: need layers >= 1 and resident_last_layers >= 0, got " +
             std::to_string(layers) + " and " + std::to_string(resident_last_layers);
    });
    expects(rounding_buffers >= 1, [&] {
      return "alpha problem: rounding_buffers (K) must be >= 1, got " + std::to_string(rounding_buffers);
    });
  }

  /// A problem from a GPT layer's cost on a device: T_layer from the
  /// forward FLOPs at the profile's achieved rate, B its device-to-host
  /// bandwidth, M_cpu the node's host memory divided by its GPUs, and row
  /// (4) from the backward FLOPs, the host-to-device bandwidth and the
  /// attention's backward fetches.
  static alpha_problem from_layer_cost(const gpt_layer_cost& cost, const device_profile& profile,
                                       int layers, int resident_last_layers = 2) {
    alpha_problem problem;
    problem.input_bytes = cost.input_bytes;
    problem.attention_output_bytes = cost.attention_output_bytes;
    problem.other_bytes = cost.other_bytes;
    problem.attention_host_bytes = cost.attention_host_bytes;
    problem.bandwidth_bytes_per_second = profile.device_to_host_bytes_per_second;
    problem.layer_forward_seconds = profile.compute_seconds(cost.forward_flops);
    problem.layer_backward_seconds = profile.compute_seconds(cost.backward_flops);
    problem.host_to_device_bytes_per_second = profile.host_to_device_bytes_per_second;
    problem.attention_fetch_bytes = cost.attention_backward_fetch_bytes;
    problem.layers = layers;
    problem.resident_last_layers = resident_last_layers;
    problem.host_budget_bytes = profile.host_memory_bytes_per_gpu();
    return problem;
  }
  /// `from_layer_cost(gpt_layer_cost_of(layer), ...)`.
  static alpha_problem from_layer(const transformer_layer& layer, const device_profile& profile,
                                  int layers, int resident_last_layers = 2) {
    return from_layer_cost(gpt_layer_cost_of(layer), profile, layers, resident_last_layers);
  }
};

/// Which constraint stops alpha from growing.
enum class alpha_bound {
  bandwidth,    ///< (2): a larger alpha would make the offload outlast the layer
  host_memory,  ///< (3): a larger alpha would overflow the host budget
  everything,   ///< alpha = 1: everything is offloaded and every constraint holds
  prefetch,     ///< (4): a larger alpha would make the backward wait on the link to the device
};

inline constexpr const char* to_string(alpha_bound bound) {
  switch (bound) {
    case alpha_bound::bandwidth: return "bandwidth (eq. 2)";
    case alpha_bound::host_memory: return "host memory (eq. 3)";
    case alpha_bound::everything: return "alpha = 1 (nothing to recompute)";
    case alpha_bound::prefetch: return "prefetch bandwidth (backward row 4)";
  }
  return "unknown";
}

struct alpha_solution {
  double alpha = 0.0;
  alpha_bound binding = alpha_bound::everything;
  double transfer_seconds = 0.0;   ///< one layer's offload at alpha, the attention's own copies included
  double host_bytes = 0.0;         ///< (n - u) x offload bytes at alpha + n x attention_host_bytes
  /// Compute-stream stall per forward layer, max(0, transfer - T_layer):
  /// zero at the LP's alpha by (2); see `predicted_stall_seconds`.
  double stall_seconds_per_layer = 0.0;
  /// Row (4)'s link time at alpha (m prefetches and the attention's
  /// fetches; 0 without the row) and the stall it would leave, max(0, that
  /// - T_backward): zero at the LP's alpha unless even alpha = 0 breaks (4).
  double backward_transfer_seconds = 0.0;
  double backward_stall_seconds_per_layer = 0.0;
};

/// Forward stall per layer at any alpha: the compute stream waits for the
/// offload of the layer K back whenever a transfer outlasts a forward.
inline double predicted_stall_seconds(const alpha_problem& problem, double alpha) {
  return std::max(0.0, problem.transfer_seconds(alpha) - problem.layer_forward_seconds);
}

namespace detail {

inline void check_alpha_zero_feasible(const alpha_problem& problem) {
  const double whole_seconds = problem.transfer_seconds(0.0);
  expects(whole_seconds <= problem.layer_forward_seconds, [&] {
    const std::string attention = problem.attention_host_bytes == 0
                                      ? ""
                                      : " and the attention's host Q, K and V (" +
                                            std::to_string(problem.attention_host_bytes) + " bytes)";
    return "alpha LP infeasible: even alpha = 0 breaks the bandwidth constraint (eq. 2): offloading "
           "the layer input and attention output (" +
           std::to_string(problem.whole_bytes()) + " bytes)" + attention + " takes " +
           std::to_string(whole_seconds) + " s at " +
           std::to_string(problem.bandwidth_bytes_per_second) + " bytes/s, " +
           std::to_string(whole_seconds - problem.layer_forward_seconds) +
           " s longer than the layer forward time of " +
           std::to_string(problem.layer_forward_seconds) + " s";
  });
  // Whole bytes: n x S_qkv + (n - u) x (S_input + S_attn) <= M_cpu, in
  // integers (a <= floor(b / n) is a x n <= b).
  const auto layers = static_cast<std::uint64_t>(problem.layers);
  expects(problem.attention_host_bytes <= problem.host_budget_bytes / layers, [&] {
    const bool exact = problem.attention_host_bytes <= std::numeric_limits<std::uint64_t>::max() / layers;
    const double total = problem.attention_host_total();
    const double budget = static_cast<double>(problem.host_budget_bytes);
    return "alpha LP infeasible: even alpha = 0 breaks the host-memory constraint (eq. 3): " +
           std::to_string(problem.layers) + " layers x the attention's host Q, K and V (" +
           std::to_string(problem.attention_host_bytes) + " bytes) = " +
           (exact ? std::to_string(layers * problem.attention_host_bytes) : std::to_string(total)) +
           " bytes exceeds the budget of " + std::to_string(problem.host_budget_bytes) + " bytes by " +
           (exact ? std::to_string(layers * problem.attention_host_bytes - problem.host_budget_bytes)
                  : std::to_string(total - budget)) +
           " bytes";
  });
  const std::uint64_t budget = problem.host_budget_bytes - layers * problem.attention_host_bytes;
  const auto swapped = static_cast<std::uint64_t>(problem.swapped_layers());
  const std::uint64_t whole = problem.whole_bytes();
  const bool fits = swapped == 0 || whole <= budget / swapped;
  expects(fits, [&] {
    const double host_bytes = problem.host_bytes(0.0) - problem.attention_host_total();
    const bool exact = whole <= std::numeric_limits<std::uint64_t>::max() / swapped;
    const std::string left = problem.attention_host_bytes == 0
                                 ? ""
                                 : " (what every layer's attention store leaves of " +
                                       std::to_string(problem.host_budget_bytes) + ")";
    return "alpha LP infeasible: even alpha = 0 breaks the host-memory constraint (eq. 3): " +
           std::to_string(problem.swapped_layers()) + " swapped layers x (input + attention output) = " +
           (exact ? std::to_string(swapped * whole) : std::to_string(host_bytes)) +
           " bytes exceeds the budget of " + std::to_string(budget) + " bytes" + left + " by " +
           (exact ? std::to_string(swapped * whole - budget)
                  : std::to_string(host_bytes - static_cast<double>(budget))) +
           " bytes";
  });
}

inline alpha_solution finish_alpha(const alpha_problem& problem, double alpha) {
  alpha_solution solution;
  solution.alpha = alpha;
  solution.transfer_seconds = problem.transfer_seconds(alpha);
  solution.host_bytes = problem.host_bytes(alpha);
  solution.stall_seconds_per_layer = predicted_stall_seconds(problem, alpha);
  if (problem.has_backward_row()) {
    solution.backward_transfer_seconds = problem.backward_transfer_seconds(alpha);
    solution.backward_stall_seconds_per_layer =
        std::max(0.0, solution.backward_transfer_seconds - problem.layer_backward_seconds);
  }
  if (alpha >= 1.0 - 1e-9 || problem.other_bytes == 0) {
    solution.binding = alpha_bound::everything;
    return solution;
  }
  // Slack of each row in its own unit relative to its right side.
  const auto budget = static_cast<double>(problem.host_budget_bytes);
  const double bandwidth_slack =
      (problem.layer_forward_seconds - solution.transfer_seconds) / problem.layer_forward_seconds;
  const double host_slack = problem.swapped_layers() == 0
                                ? std::numeric_limits<double>::infinity()
                                : (budget - solution.host_bytes) / std::max(budget, 1.0);
  const double prefetch_slack =
      problem.has_backward_row()
          ? (problem.layer_backward_seconds - solution.backward_transfer_seconds) / problem.layer_backward_seconds
          : std::numeric_limits<double>::infinity();
  solution.binding = bandwidth_slack <= host_slack ? alpha_bound::bandwidth : alpha_bound::host_memory;
  if (prefetch_slack < std::min(bandwidth_slack, host_slack)) solution.binding = alpha_bound::prefetch;
  return solution;
}

}  // namespace detail

/// The LP's answer by hand: min(1, bandwidth limit, host limit, prefetch limit).
inline alpha_solution alpha_closed_form(const alpha_problem& problem) {
  problem.check();
  detail::check_alpha_zero_feasible(problem);
  const auto whole = static_cast<double>(problem.whole_bytes());
  const auto other = static_cast<double>(problem.other_bytes);
  double alpha = 1.0;
  if (problem.other_bytes > 0) {
    const auto attention = static_cast<double>(problem.attention_host_bytes);
    alpha = std::min(alpha, (problem.bandwidth_bytes_per_second * problem.layer_forward_seconds - whole -
                             attention) / other);
    if (problem.swapped_layers() > 0) {
      const double per_layer = (static_cast<double>(problem.host_budget_bytes) - problem.attention_host_total()) /
                               static_cast<double>(problem.swapped_layers());
      alpha = std::min(alpha, (per_layer - whole) / other);
    }
    if (problem.has_backward_row()) {
      // Where even alpha = 0 breaks it, alpha = 0 (see the header comment).
      const double m = problem.queued_prefetches();
      const auto fetch = static_cast<double>(problem.attention_fetch_bytes);
      if (m > 0.0) {
        alpha = std::min(alpha, (problem.host_to_device_bytes_per_second * problem.layer_backward_seconds -
                                 m * whole - fetch) / (m * other));
      }
    }
  }
  return detail::finish_alpha(problem, std::clamp(alpha, 0.0, 1.0));
}

/// Solves equations (1)-(4) with lp_solve.
inline alpha_solution solve_alpha(const alpha_problem& problem) {
  problem.check();
  detail::check_alpha_zero_feasible(problem);
  const auto other = static_cast<double>(problem.other_bytes);
  lp_model lp(1);
  lp.set_name(0, "alpha");
  lp.set_bounds(0, 0.0, 1.0);
  const int column[] = {0};
  // (2) in seconds: alpha * S_others / B <= T_layer - (S_input + S_attn) / B.
  {
    const double coefficient[] = {other / problem.bandwidth_bytes_per_second};
    lp.add_row(column, coefficient, lp_sense::less_equal,
               problem.layer_forward_seconds - problem.transfer_seconds(0.0));
  }
  // (3) as a fraction of the budget.
  if (problem.swapped_layers() > 0) {
    const double swapped = static_cast<double>(problem.swapped_layers());
    const auto budget = static_cast<double>(problem.host_budget_bytes);
    const double scale = budget > 0.0 ? budget : 1.0;
    const double coefficient[] = {swapped * other / scale};
    lp.add_row(column, coefficient, lp_sense::less_equal, (budget - problem.host_bytes(0.0)) / scale);
  }
  // (4) in seconds: alpha * m S_others / B_h2d <= T_b - (m (S_input + S_attn) + S_fetch) / B_h2d; where
  // even alpha = 0 breaks it the answer is alpha = 0 (see the header comment), so the row is left out.
  // With nothing swapped (m = 0) alpha moves nothing through it.
  const bool backward_row_fits = !problem.has_backward_row() || problem.queued_prefetches() == 0 ||
                                 problem.backward_transfer_seconds(0.0) <= problem.layer_backward_seconds;
  if (problem.has_backward_row() && backward_row_fits && problem.queued_prefetches() > 0) {
    const double coefficient[] = {problem.queued_prefetches() * other / problem.host_to_device_bytes_per_second};
    lp.add_row(column, coefficient, lp_sense::less_equal,
               problem.layer_backward_seconds - problem.backward_transfer_seconds(0.0));
  }
  const double objective[] = {1.0};
  lp.set_objective(column, objective, true);
  const lp_outcome outcome = lp.solve();
  expects(outcome == lp_outcome::optimal, [&] {
    return std::string("alpha LP: lp_solve returned ") + to_string(outcome) +
           " for a problem that is feasible at alpha = 0";
  });
  // lp_solve's tolerances can leave alpha a hair outside [0, 1].
  return detail::finish_alpha(problem, backward_row_fits ? std::clamp(lp.solution()[0], 0.0, 1.0) : 0.0);
}

}  // namespace memo
