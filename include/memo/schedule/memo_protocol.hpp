// memo/schedule/memo_protocol.hpp
//
// The MEMO step protocol (section 4.1, Figure 6; section 4.3.4, Figure 11),
// written once as data: which action happens on which stream, in the order
// the runtime issues them, and which earlier action on another stream each
// one waits for. Two consumers read the same list:
//
//   - `token_fraction_swapper` (swap/) walks it during a real step: its
//     begin_/end_ calls execute the actions between the caller's forward and
//     backward work;
//   - `build_memo_step` (schedule/memo_step.hpp) turns it into the
//     `stream_schedule` that the simulator runs.
//
// So what is simulated is what runs; tests/swap/token_fraction_swapper_test.cpp
// records a real swapper's backend calls and checks that they produce the
// schedule's op order on every stream and its happens-before relation.
//
// For n layers, K rounding buffers and `resident_last_layers` layers kept
// resident at the end (at most K; the paper keeps the last two), layer i
// uses buffer i % K and is *swapped* when i < n - resident_last_layers.
// Issue order and waits:
//
//   forward i     (compute)   after offload i-K (the last user of buffer i % K)
//   offload i     (offload)   after forward i; swapped layers only
//   -- at the end of forward n-1: prefetch j for every swapped j with
//      j + K >= n (no later layer uses its buffer), after offload j
//   recompute i   (compute)   after prefetch i when swapped; present when
//                             the layer has token ranges or shared tensors
//                             to rebuild (see below)
//   backward i    (compute)   after prefetch i when swapped
//   prefetch i-K  (prefetch)  after backward i (the last user of the buffer)
//
// Recompute: a swapped layer rebuilds the ranges that were not offloaded
// (`recompute_swapped`); every layer but the last also rebuilds its shared
// tensors (`recompute_shared`, the tensors of which nothing is offloaded and
// which all layers write into one region), because the next layer's forward
// overwrote them. The last layer's backward follows its own forward, so its
// shared tensors are still there.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "memo/core/error.hpp"

namespace memo {

/// The numbers that fix the shape of one MEMO step.
struct memo_protocol_options {
  std::size_t layers = 0;                ///< n
  std::size_t rounding_buffers = 2;      ///< K
  std::size_t resident_last_layers = 2;  ///< never swapped; at most K and at most n
  /// Swapped layers have token ranges to recompute (0 < alpha < 1).
  bool recompute_swapped = false;
  /// Some tensors live in the shared region (nothing of them is offloaded).
  bool recompute_shared = false;

  void check() const {
    expects(layers >= 1, [&] { return "memo protocol: layers must be >= 1, got " + std::to_string(layers); });
    expects(rounding_buffers >= 1, [&] {
      return "memo protocol: rounding_buffers (K) must be >= 1, got " + std::to_string(rounding_buffers);
    });
    expects(resident_last_layers <= rounding_buffers && resident_last_layers <= layers, [&] {
      return "memo protocol: resident_last_layers must be in [0, min(K = " + std::to_string(rounding_buffers) +
             ", layers = " + std::to_string(layers) + ")], got " + std::to_string(resident_last_layers) +
             " (resident layers keep their rounding buffer until their backward)";
    });
  }
  [[nodiscard]] std::size_t swapped_layers() const noexcept { return layers - resident_last_layers; }
  [[nodiscard]] bool swapped(std::size_t layer) const noexcept { return layer < swapped_layers(); }
  /// True when layer `layer`'s backward is preceded by a recompute.
  [[nodiscard]] bool recomputes(std::size_t layer) const noexcept {
    return (swapped(layer) && recompute_swapped) || (recompute_shared && layer + 1 != layers);
  }
};

enum class memo_action_kind { forward, offload, prefetch, recompute, backward };

inline constexpr const char* to_string(memo_action_kind kind) {
  switch (kind) {
    case memo_action_kind::forward: return "forward";
    case memo_action_kind::offload: return "offload";
    case memo_action_kind::prefetch: return "prefetch";
    case memo_action_kind::recompute: return "recompute";
    case memo_action_kind::backward: return "backward";
  }
  return "unknown";
}

/// The three streams of a MEMO step.
enum class memo_stream { compute, offload, prefetch };

/// "compute", "offload", "prefetch": the stream names of the simulated
/// step (memo_step_config's defaults) and of the swapper's measured one.
inline constexpr const char* to_string(memo_stream stream) {
  switch (stream) {
    case memo_stream::compute: return "compute";
    case memo_stream::offload: return "offload";
    case memo_stream::prefetch: return "prefetch";
  }
  return "unknown";
}

/// One action of the step.
struct memo_action {
  memo_action_kind kind = memo_action_kind::forward;
  std::size_t layer = 0;
  /// Indices of earlier actions, on other streams, that must end first.
  std::vector<std::size_t> after{};

  [[nodiscard]] memo_stream stream() const noexcept {
    switch (kind) {
      case memo_action_kind::offload: return memo_stream::offload;
      case memo_action_kind::prefetch: return memo_stream::prefetch;
      default: return memo_stream::compute;
    }
  }
  /// "forward 3", "prefetch 0", ...: the op names of the simulated schedule.
  [[nodiscard]] std::string name() const { return std::string(to_string(kind)) + " " + std::to_string(layer); }
  /// Work the caller enqueues itself (forward and backward); the rest is the
  /// swapper's.
  [[nodiscard]] bool caller_work() const noexcept {
    return kind == memo_action_kind::forward || kind == memo_action_kind::backward;
  }
};

/// Every action of one step in issue order (see the header comment).
inline std::vector<memo_action> memo_step_protocol(const memo_protocol_options& options) {
  options.check();
  const std::size_t n = options.layers;
  const std::size_t k = options.rounding_buffers;
  constexpr std::size_t none = static_cast<std::size_t>(-1);
  std::vector<memo_action> actions;
  std::vector<std::size_t> offload(n, none);
  std::vector<std::size_t> prefetch(n, none);
  std::vector<std::size_t> backward(n, none);
  auto add = [&](memo_action_kind kind, std::size_t layer, std::vector<std::size_t> after) {
    actions.push_back({kind, layer, std::move(after)});
    return actions.size() - 1;
  };
  auto add_prefetch = [&](std::size_t layer, std::size_t buffer_free) {
    prefetch[layer] = add(memo_action_kind::prefetch, layer, {buffer_free});
  };

  for (std::size_t i = 0; i < n; ++i) {
    std::vector<std::size_t> after;
    if (i >= k && offload[i - k] != none) after.push_back(offload[i - k]);
    const std::size_t forward = add(memo_action_kind::forward, i, std::move(after));
    if (options.swapped(i)) offload[i] = add(memo_action_kind::offload, i, {forward});
  }
  // The turn: swapped layers whose buffer no later layer uses come back now.
  for (std::size_t j = options.swapped_layers(); j-- > 0 && j + k >= n;) add_prefetch(j, offload[j]);
  for (std::size_t i = n; i-- > 0;) {
    std::vector<std::size_t> after;
    if (options.swapped(i)) after.push_back(prefetch[i]);
    if (options.recomputes(i)) add(memo_action_kind::recompute, i, after);
    backward[i] = add(memo_action_kind::backward, i, after);
    if (i >= k) add_prefetch(i - k, backward[i]);
  }
  return actions;
}

}  // namespace memo
