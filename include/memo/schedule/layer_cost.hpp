// memo/schedule/layer_cost.hpp
//
// What one GPT transformer layer costs on one GPU: forward/backward FLOPs,
// the FLOPs of MEMO's token-wise recomputation, the skeletal activations it
// leaves for its backward (MEMO section 3.2, Figure 5), and the collectives
// tensor parallelism adds. The alpha LP (swap/), the step simulator
// (schedule/memo_step.hpp) and the benchmarks all read these numbers from
// here, so they agree on the accounting.
//
// Accounting (s = sequence, h = hidden, f = ffn hidden, h_kv = key/value
// width = h * kv_heads / heads, t = tensor parallel, c = context parallel,
// e = bytes per element). One GPU holds s / c tokens of the sequence
// ("local tokens"); tensor parallelism splits every skeletal tensor t ways
// (along hidden for the attention/MLP tensors, along the sequence for the
// layernorm-region tensors under Megatron sequence parallelism), so each
// local token costs the per-token elements below divided by t.
//
//   skeletal tensor          elements per token   class
//   input                    h                    input      (offloaded whole)
//   input_norm               h                    other      (token-wise)
//   q                        h                    other
//   k                        h_kv                 other
//   v                        h_kv                 other
//   attention_output         h                    attention  (offloaded whole)
//   residual (LN2 input)     h                    other
//   mlp_input_norm           h                    other
//   fc1_output               f                    other
//   activation_output        f                    other
//
// With h_kv = h and f = 4h this is MEMO's 16 s h elements per layer, of
// which the FlashAttention output is 1/16 = 6.25%. The softmax statistics
// FlashAttention keeps (s x heads floats) are left out, as in the paper.
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
//              FLOPs are negligible and not counted).
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
#include "memo/schedule/stream_schedule.hpp"

namespace memo {

/// The shape of one GPT layer and how it is split over GPUs.
struct gpt_layer_shape {
  std::int64_t hidden = 4096;
  std::int64_t heads = 32;
  std::int64_t kv_heads = 0;        ///< 0 = heads (multi-head attention)
  std::int64_t ffn_hidden = 0;      ///< 0 = 4 * hidden
  std::int64_t sequence = 0;        ///< tokens of one sequence (batch 1)
  std::int64_t tensor_parallel = 1;
  std::int64_t context_parallel = 1;
  std::int64_t bytes_per_element = 2;  ///< bf16
  bool causal = true;
};

/// Which part of MEMO's offload policy a skeletal tensor falls under.
enum class skeletal_class { input, attention_output, other };

inline constexpr const char* to_string(skeletal_class cls) {
  switch (cls) {
    case skeletal_class::input: return "input";
    case skeletal_class::attention_output: return "attention_output";
    case skeletal_class::other: return "other";
  }
  return "unknown";
}

struct skeletal_tensor {
  std::string name{};
  skeletal_class cls = skeletal_class::other;
  std::uint64_t bytes_per_token = 0;  ///< per local token, on one GPU
  std::uint64_t bytes = 0;            ///< for all local tokens, on one GPU
};

/// One collective call of a layer's forward (the backward mirrors it).
struct collective_call {
  std::string name{};
  collective_kind kind = collective_kind::all_gather;
  std::uint64_t bytes = 0;
  int ranks = 1;
};

/// Everything per GPU and per layer.
struct gpt_layer_cost {
  gpt_layer_shape shape;
  std::int64_t local_tokens = 0;  ///< sequence / context_parallel

  double forward_gemm_flops = 0.0;
  double forward_attention_flops = 0.0;
  double forward_flops = 0.0;   ///< gemm + attention
  double backward_flops = 0.0;  ///< 2 x forward
  double recompute_flops = 0.0; ///< rebuilding every "other" tensor for all local tokens

  std::vector<skeletal_tensor> skeletal{};  ///< Figure 5, in forward order
  std::uint64_t input_bytes = 0;
  std::uint64_t attention_output_bytes = 0;
  std::uint64_t other_bytes = 0;
  std::uint64_t skeletal_bytes = 0;  ///< input + attention_output + other

  std::vector<collective_call> forward_collectives{};

  /// Bytes one layer offloads at offload fraction `alpha` (MEMO eq. 2's numerator).
  [[nodiscard]] double offload_bytes(double alpha) const {
    return static_cast<double>(input_bytes + attention_output_bytes) +
           alpha * static_cast<double>(other_bytes);
  }
  [[nodiscard]] std::uint64_t skeletal_bytes_per_token() const {
    std::uint64_t total = 0;
    for (const auto& tensor : skeletal) total += tensor.bytes_per_token;
    return total;
  }
};

/// The cost of one GPT layer on one GPU; throws `memo::error` when a size is
/// not positive or a split does not divide evenly (naming both numbers).
inline gpt_layer_cost gpt_layer_cost_of(const gpt_layer_shape& shape) {
  auto positive = [](std::int64_t value, const char* field) {
    expects(value > 0, [&] {
      return std::string("gpt layer shape: ") + field + " must be positive, got " +
             std::to_string(value);
    });
  };
  auto divides = [](std::int64_t divisor, std::int64_t value, const char* what) {
    expects(value % divisor == 0, [&] {
      return std::string("gpt layer shape: ") + what + " (" + std::to_string(value) +
             ") is not divisible by " + std::to_string(divisor);
    });
  };
  gpt_layer_cost cost;
  cost.shape = shape;
  auto& s = cost.shape;
  if (s.kv_heads == 0) s.kv_heads = s.heads;
  if (s.ffn_hidden == 0) s.ffn_hidden = 4 * s.hidden;
  positive(s.hidden, "hidden");
  positive(s.heads, "heads");
  positive(s.kv_heads, "kv_heads");
  positive(s.ffn_hidden, "ffn_hidden");
  positive(s.sequence, "sequence");
  positive(s.tensor_parallel, "tensor_parallel");
  positive(s.context_parallel, "context_parallel");
  positive(s.bytes_per_element, "bytes_per_element");
  divides(s.heads, s.hidden, "hidden");
  divides(s.kv_heads, s.heads, "heads");
  divides(s.tensor_parallel, s.kv_heads, "kv_heads");
  divides(s.tensor_parallel, s.ffn_hidden, "ffn_hidden");
  divides(s.context_parallel, s.sequence, "sequence");
  divides(s.tensor_parallel, s.sequence / s.context_parallel,
          "sequence / context_parallel (sequence-parallel layernorm region)");

  const std::int64_t h = s.hidden;
  const std::int64_t h_kv = h / s.heads * s.kv_heads;
  const std::int64_t f = s.ffn_hidden;
  const std::int64_t t = s.tensor_parallel;
  const std::int64_t e = s.bytes_per_element;
  cost.local_tokens = s.sequence / s.context_parallel;
  const auto tokens = static_cast<std::uint64_t>(cost.local_tokens);

  struct row {
    const char* name;
    skeletal_class cls;
    std::int64_t elements_per_token;  // before the tensor-parallel split
  };
  const row rows[] = {
      {"input", skeletal_class::input, h},
      {"input_norm", skeletal_class::other, h},
      {"q", skeletal_class::other, h},
      {"k", skeletal_class::other, h_kv},
      {"v", skeletal_class::other, h_kv},
      {"attention_output", skeletal_class::attention_output, h},
      {"residual", skeletal_class::other, h},
      {"mlp_input_norm", skeletal_class::other, h},
      {"fc1_output", skeletal_class::other, f},
      {"activation_output", skeletal_class::other, f},
  };
  for (const auto& r : rows) {
    skeletal_tensor tensor;
    tensor.name = r.name;
    tensor.cls = r.cls;
    // h, h_kv and f are all divisible by t (checked above).
    tensor.bytes_per_token = static_cast<std::uint64_t>(r.elements_per_token / t * e);
    tensor.bytes = checked_mul(tensor.bytes_per_token, tokens);
    switch (r.cls) {
      case skeletal_class::input: cost.input_bytes += tensor.bytes; break;
      case skeletal_class::attention_output: cost.attention_output_bytes += tensor.bytes; break;
      case skeletal_class::other: cost.other_bytes += tensor.bytes; break;
    }
    cost.skeletal.push_back(std::move(tensor));
  }
  cost.skeletal_bytes = cost.input_bytes + cost.attention_output_bytes + cost.other_bytes;

  const double hd = static_cast<double>(h);
  const double hkv = static_cast<double>(h_kv);
  const double fd = static_cast<double>(f);
  const double td = static_cast<double>(t);
  const double cd = static_cast<double>(s.context_parallel);
  const double local = static_cast<double>(cost.local_tokens);
  const double seq = static_cast<double>(s.sequence);
  const double qkv_flops_per_token = 2.0 * hd * (hd + 2.0 * hkv);
  const double projection_flops_per_token = 2.0 * hd * hd;
  const double fc1_flops_per_token = 2.0 * hd * fd;
  const double fc2_flops_per_token = 2.0 * fd * hd;
  cost.forward_gemm_flops = local *
                            (qkv_flops_per_token + projection_flops_per_token +
                             fc1_flops_per_token + fc2_flops_per_token) /
                            td;
  cost.forward_attention_flops = (s.causal ? 2.0 : 4.0) * seq * seq * hd / (td * cd);
  cost.forward_flops = cost.forward_gemm_flops + cost.forward_attention_flops;
  cost.backward_flops = 2.0 * cost.forward_flops;
  cost.recompute_flops =
      local * (qkv_flops_per_token + projection_flops_per_token + fc1_flops_per_token) / td;

  if (t > 1) {
    const std::uint64_t full_bytes =
        checked_mul(checked_mul(tokens, static_cast<std::uint64_t>(h)), static_cast<std::uint64_t>(e));
    const int ranks = static_cast<int>(t);
    cost.forward_collectives.push_back({"all_gather_before_qkv", collective_kind::all_gather, full_bytes, ranks});
    cost.forward_collectives.push_back({"reduce_scatter_after_projection", collective_kind::reduce_scatter, full_bytes, ranks});
    cost.forward_collectives.push_back({"all_gather_before_fc1", collective_kind::all_gather, full_bytes, ranks});
    cost.forward_collectives.push_back({"reduce_scatter_after_fc2", collective_kind::reduce_scatter, full_bytes, ranks});
  }
  if (s.context_parallel > 1) {
    // Every rank ends up having seen every other rank's K and V chunk.
    const std::uint64_t kv_bytes = checked_mul(
        checked_mul(tokens, static_cast<std::uint64_t>(2 * h_kv / t)), static_cast<std::uint64_t>(e));
    cost.forward_collectives.push_back({"context_parallel_kv_exchange", collective_kind::all_gather,
                                        checked_mul(kv_bytes, static_cast<std::uint64_t>(s.context_parallel)),
                                        static_cast<int>(s.context_parallel)});
  }
  return cost;
}

}  // namespace memo
