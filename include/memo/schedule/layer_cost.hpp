// memo/schedule/layer_cost.hpp
//
// What one GPT transformer layer costs on one GPU: forward/backward FLOPs,
// the FLOPs of MEMO's token-wise recomputation, the skeletal activations it
// leaves for its backward (MEMO section 3.2, Figure 5), and the collectives
// tensor parallelism adds. The alpha LP (swap/), the step simulator
// (schedule/memo_step.hpp) and the benchmarks all read these numbers from
// here, so they agree on the accounting.
//
// The layer's shape and its skeletal tensors come from
// `transformer_layer` (core/transformer_layer.hpp), the one description the
// trace generator, the skeletal layout and the alpha LP also read; this
// header adds what only a cost model needs. Notation as there: s = tokens,
// h = hidden, f = ffn width, h_kv = key/value width, t = tensor parallel,
// c = context parallel; one GPU holds s / c "local tokens".
//
// FLOPs per GPU (2 per multiply-add):
//   GEMMs      (s / c) * (2 h (h + 2 h_kv) + 2 h h + 4 h f) / t
//   attention  2 * s^2 * h / (t c) with a causal mask (load-balanced CP),
//              4 * s^2 * h / (t c) without
//   backward   2 x forward
//   recompute  (s / c) * (2 h (h + 2 h_kv) + 2 h h + 2 h f) / t: rebuilding the
//              "other" tensors of every local token from the stored input and
//              attention output needs the QKV, output-projection and FC1
//              GEMMs, not attention and not FC2 (layernorm and activation
//              FLOPs are negligible and not counted); without the QKV
//              GEMM when the attention keeps Q, K and V itself
//              (`transformer_layer::attention_keeps_qkv`).
// For h_kv = h, f = 4h the forward is 24 s h^2 + 2 s^2 h per layer, which
// is MEMO's model-FLOPs formula (6 s P + 6 n h s^2 for forward + backward
// with P = 12 h^2 per layer) divided by 3 n.
//
// Tensor-parallel collectives (Megatron sequence parallelism): each forward
// all-gathers the layernorm output before QKV and FC1 and reduce-scatters
// after the output projection and FC2, each over a [s / c, h] tensor;
// the backward mirrors them. Context parallelism's K/V exchange is listed
// as one all-gather of the local K and V over c ranks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memo/core/bytes.hpp"
#include "memo/core/error.hpp"
#include "memo/core/transformer_layer.hpp"
#include "memo/schedule/stream_schedule.hpp"

namespace memo {

/// One collective call of a layer's forward (the backward mirrors it).
struct collective_call {
  std::string name{};
  collective_kind kind = collective_kind::all_gather;
  std::uint64_t bytes = 0;
  int ranks = 1;
};

/// Everything per GPU and per layer, derived from a `transformer_layer`.
struct gpt_layer_cost {
  transformer_layer layer;
  std::int64_t local_tokens = 0;  ///< tokens / context_parallel

  double forward_gemm_flops = 0.0;
  double forward_attention_flops = 0.0;
  double forward_flops = 0.0;   ///< gemm + attention
  double backward_flops = 0.0;  ///< 2 x forward
  double recompute_flops = 0.0; ///< rebuilding every token-wise tensor for all local tokens

  std::vector<skeletal_tensor> skeletal{};  ///< `layer.skeletal_tensors()`, in forward order
  std::uint64_t input_bytes = 0;             ///< S_input
  std::uint64_t attention_output_bytes = 0;  ///< S_attn: attention output and its log-sum-exp
  std::uint64_t other_bytes = 0;             ///< S_others
  std::uint64_t skeletal_bytes = 0;          ///< input + attention_output + other
  /// S_qkv: Q, K and V the attention keeps in its own host store, moved
  /// whole in every layer (attention_keeps_qkv; 0 otherwise).
  std::uint64_t attention_host_bytes = 0;
  /// What that attention fetches back from its store in one layer's
  /// forward and backward (`transformer_layer::attention_fetch_bytes`).
  std::uint64_t attention_forward_fetch_bytes = 0;
  std::uint64_t attention_backward_fetch_bytes = 0;

  std::vector<collective_call> forward_collectives{};

  /// Bytes the swapper offloads from one layer at offload fraction `alpha`
  /// (MEMO eq. 2's numerator, without attention_host_bytes).
  [[nodiscard]] double offload_bytes(double alpha) const {
    return static_cast<double>(input_bytes + attention_output_bytes) +
           alpha * static_cast<double>(other_bytes);
  }
};

/// The cost of one GPT layer on one GPU; throws `memo::error` when a size is
/// not positive or a split does not divide evenly (naming both numbers).
inline gpt_layer_cost gpt_layer_cost_of(const transformer_layer& layer) {
  layer.check();
  gpt_layer_cost cost;
  cost.layer = layer;
  const std::uint64_t tokens = layer.local_tokens();
  cost.local_tokens = static_cast<std::int64_t>(tokens);

  cost.skeletal = layer.skeletal_tensors();
  cost.input_bytes = layer.input_bytes();
  cost.attention_output_bytes = layer.attention_output_bytes();
  cost.other_bytes = layer.other_bytes();
  cost.skeletal_bytes = layer.skeletal_bytes();
  cost.attention_host_bytes = layer.attention_keeps_qkv ? layer.qkv_bytes() : 0;
  cost.attention_forward_fetch_bytes = layer.attention_fetch_bytes(false);
  cost.attention_backward_fetch_bytes = layer.attention_fetch_bytes(true);

  const std::uint64_t h_kv = layer.kv_width();
  const std::uint64_t t = static_cast<std::uint64_t>(layer.tensor_parallel);
  const std::uint64_t c = static_cast<std::uint64_t>(layer.context_parallel);
  const std::uint64_t e = static_cast<std::uint64_t>(layer.bytes_per_element);
  const double hd = static_cast<double>(layer.hidden);
  const double hkv = static_cast<double>(h_kv);
  const double fd = static_cast<double>(layer.ffn_width());
  const double td = static_cast<double>(t);
  const double cd = static_cast<double>(c);
  const double local = static_cast<double>(tokens);
  const double seq = static_cast<double>(layer.tokens);
  const double qkv_flops_per_token = 2.0 * hd * (hd + 2.0 * hkv);
  const double projection_flops_per_token = 2.0 * hd * hd;
  const double fc1_flops_per_token = 2.0 * hd * fd;
  const double fc2_flops_per_token = 2.0 * fd * hd;
  cost.forward_gemm_flops = local *
                            (qkv_flops_per_token + projection_flops_per_token +
                             fc1_flops_per_token + fc2_flops_per_token) /
                            td;
  cost.forward_attention_flops = (layer.causal ? 2.0 : 4.0) * seq * seq * hd / (td * cd);
  cost.forward_flops = cost.forward_gemm_flops + cost.forward_attention_flops;
  cost.backward_flops = 2.0 * cost.forward_flops;
  const double rebuilt_qkv_flops_per_token = layer.attention_keeps_qkv ? 0.0 : qkv_flops_per_token;
  cost.recompute_flops =
      local * (rebuilt_qkv_flops_per_token + projection_flops_per_token + fc1_flops_per_token) / td;

  if (t > 1) {
    // [s / c, h]: the sequence-parallel activation after its all-gather.
    const std::uint64_t full_bytes =
        checked_mul(checked_mul(tokens, static_cast<std::uint64_t>(layer.hidden)), e);
    const int ranks = static_cast<int>(t);
    cost.forward_collectives.push_back({"all_gather_before_qkv", collective_kind::all_gather, full_bytes, ranks});
    cost.forward_collectives.push_back({"reduce_scatter_after_projection", collective_kind::reduce_scatter, full_bytes, ranks});
    cost.forward_collectives.push_back({"all_gather_before_fc1", collective_kind::all_gather, full_bytes, ranks});
    cost.forward_collectives.push_back({"reduce_scatter_after_fc2", collective_kind::reduce_scatter, full_bytes, ranks});
  }
  if (c > 1) {
    // Every rank ends up having seen every other rank's K and V chunk.
    const std::uint64_t kv_bytes = checked_mul(checked_mul(tokens, 2 * h_kv / t), e);
    cost.forward_collectives.push_back({"context_parallel_kv_exchange", collective_kind::all_gather,
                                        checked_mul(kv_bytes, c), static_cast<int>(c)});
  }
  return cost;
}

}  // namespace memo
