// memo/core/transformer_layer.hpp
//
// One GPT transformer layer, described once (MEMO section 3, Figure 5, and
// section 4.1). The trace generator (plan/gpt_trace.hpp), the cost model
// (schedule/layer_cost.hpp), the skeletal layout the rounding buffers hold
// (swap/skeletal_layout.hpp) and the alpha LP (swap/alpha_solver.hpp) all
// derive their byte counts from `transformer_layer`, so the planner and the
// LP cannot disagree on what a layer keeps for its backward pass.
//
// The shape: `tokens` of one sequence (micro-batch 1, as in MEMO's runs),
// hidden h, heads a, key/value heads a_kv (grouped-query attention; h_kv =
// h / a * a_kv), FFN width f, `bytes_per_element` e, split over
// `tensor_parallel` t and `context_parallel` c ranks. One GPU holds
// T = tokens / c tokens of the sequence. Tensor parallelism with Megatron
// sequence parallelism splits every activation t ways: the layernorm region
// along the sequence (T / t whole tokens per GPU), the attention and MLP
// along hidden (all T tokens, 1/t of each token's width). Either way a GPU
// holds T * (bytes per token) / t bytes of an activation.
//
// The skeletal tensors (made in the forward, read by the backward), in
// forward order, with their bytes per token before the TP split:
//
//   tensor                 bytes/token  split     kept
//   input                  e h          sequence  offloaded whole
//   input_norm             e h          sequence  alpha of tokens offloaded, rest recomputed
//   input_norm_stats       8            sequence  "  (mean and 1/std, fp32)
//   q                      e h          hidden    "
//   k, v                   e h_kv       hidden    "
//   attention_output       e h          hidden    offloaded whole
//   attention_lse          4 a          hidden    offloaded whole (FlashAttention's softmax log-sum-exp, fp32)
//   residual               e h          sequence  alpha / recomputed
//   mlp_input_norm         e h          sequence  "
//   mlp_input_norm_stats   8            sequence  "
//   fc1_output             e f          hidden    "
//   activation_output      e f          hidden    "
//
// With h_kv = h and f = 4h the activations are Figure 5's 16 s h elements
// (the attention output 1/16 = 6.25% of them); the three statistics tensors
// are what the backward of the two layernorms and of FlashAttention also
// read, which the figure leaves out (8 + 8 + 4a bytes per token against
// 32 h at bf16: 0.1% for the 7B model). The log-sum-exp travels with the
// attention output: rebuilding it would cost the whole attention forward the
// paper offloads the output to avoid. Everything else is a token-wise
// function of the layer input and the attention output, so any token range
// of it can be recomputed (MEMO section 4.1).
//
// An attention that keeps Q, K and V in its own host store (FPDT's offload,
// `attention_keeps_qkv`) reads none of the layer's q, k and v in the
// backward: they are then not skeletal tensors, and `qkv_bytes()` is what
// that attention moves to the host instead, whole, in every layer. It
// cuts the T local tokens into u = ceil(T / c) chunks of `attention_chunk`
// c tokens and reads its store back chunk by chunk (model/attention.hpp):
// the forward of query chunk i fetches the K/V chunks j < i, the backward
// fetches each K/V chunk once and, for every pair of a key chunk j and a
// query chunk i >= j, query chunk i (`attention_fetch_bytes`). With c
// dividing T that is (u - 1) / 2 x S_kv forward and S_kv + (u + 1) / 2 x
// S_q backward. This is a causal attention over the GPU's own T tokens (as
// FPDT runs it after the all-to-all: T is the whole sequence there); keys
// a context-parallel ring brings from other ranks are not counted.
//
// Byte counts are 64-bit integers, every product checked for overflow.
// `check()` rejects non-positive sizes and splits that do not divide, naming
// both numbers.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "memo/core/bytes.hpp"
#include "memo/core/error.hpp"

namespace memo {

/// How a skeletal tensor is kept between its layer's forward and backward.
enum class skeletal_policy {
  offload_whole,     ///< always copied to host whole
  offload_fraction,  ///< a fraction alpha of its tokens copied, the rest recomputed token-wise
  recompute,         ///< never copied; always recomputed token-wise
};

inline constexpr const char* to_string(skeletal_policy policy) {
  switch (policy) {
    case skeletal_policy::offload_whole: return "offload_whole";
    case skeletal_policy::offload_fraction: return "offload_fraction";
    case skeletal_policy::recompute: return "recompute";
  }
  return "unknown";
}

/// One skeletal tensor of a layer on one GPU, stored token-major as
/// [tokens, bytes_per_token], so any token range is one contiguous byte range.
struct skeletal_tensor {
  std::string name;
  std::size_t tokens = 0;           ///< tokens (rows) this GPU holds
  std::size_t bytes_per_token = 0;  ///< bytes of one row on this GPU
  skeletal_policy policy = skeletal_policy::offload_fraction;

  /// tokens * bytes_per_token; throws `memo::error` on 64-bit overflow.
  [[nodiscard]] std::uint64_t bytes() const { return checked_mul(tokens, bytes_per_token); }
  friend bool operator==(const skeletal_tensor&, const skeletal_tensor&) = default;
};

/// The shape of one transformer layer and how it is split over GPUs.
struct transformer_layer {
  std::int64_t tokens = 65536;          ///< tokens of one sequence, before any split
  std::int64_t hidden = 4096;           ///< h
  std::int64_t heads = 32;              ///< a
  std::int64_t kv_heads = 0;            ///< a_kv; 0 = heads (multi-head attention)
  std::int64_t ffn_hidden = 0;          ///< f; 0 = 4 * hidden
  std::int64_t bytes_per_element = 2;   ///< e (bf16)
  std::int64_t tensor_parallel = 1;     ///< t
  std::int64_t context_parallel = 1;    ///< c
  bool causal = true;                   ///< causal attention mask (FLOPs only)
  /// The attention keeps Q, K and V in its own host store (FPDT): q, k and
  /// v are not skeletal tensors (see qkv_bytes()).
  bool attention_keeps_qkv = false;
  /// c: tokens per attention chunk, at most T (0 = T, one chunk); only
  /// the host traffic of attention_keeps_qkv depends on it.
  std::int64_t attention_chunk = 0;

  /// Throws `memo::error` naming the field and its value when a size is not
  /// positive, and both numbers when a split does not divide.
  void check() const;

  /// a_kv (kv_heads, or heads when kv_heads is 0).
  [[nodiscard]] std::uint64_t kv_head_count() const;
  /// h / a.
  [[nodiscard]] std::uint64_t head_dim() const;
  /// h_kv = h / a * a_kv: the width of k and of v.
  [[nodiscard]] std::uint64_t kv_width() const;
  /// f (ffn_hidden, or 4 * hidden when ffn_hidden is 0).
  [[nodiscard]] std::uint64_t ffn_width() const;
  /// T = tokens / context_parallel: the tokens of the sequence one GPU works on.
  [[nodiscard]] std::uint64_t local_tokens() const;

  /// Bytes one GPU holds of an activation of `bytes_per_token` bytes per
  /// token of the whole layer: T / t * bytes_per_token.
  [[nodiscard]] std::uint64_t activation_bytes(std::uint64_t bytes_per_token) const;

  /// The skeletal tensors of Figure 5 plus the statistics the backward
  /// reads, as one GPU holds them, in forward order (table above; without
  /// q, k and v when attention_keeps_qkv).
  [[nodiscard]] std::vector<skeletal_tensor> skeletal_tensors() const;

  /// MEMO eq. (2)'s sizes on one GPU: S_input, S_attn (attention output and
  /// its log-sum-exp), S_others, and their sum.
  [[nodiscard]] std::uint64_t input_bytes() const;
  [[nodiscard]] std::uint64_t attention_output_bytes() const;
  [[nodiscard]] std::uint64_t other_bytes() const;
  [[nodiscard]] std::uint64_t skeletal_bytes() const;
  /// The bytes of q, k and v on one GPU: part of other_bytes, or with
  /// attention_keeps_qkv what the attention moves to its host store.
  [[nodiscard]] std::uint64_t qkv_bytes() const;
  /// Bytes an attention_keeps_qkv attention fetches from its host store
  /// in one layer's forward (`backward` false) or backward (true); 0
  /// without it (header comment).
  [[nodiscard]] std::uint64_t attention_fetch_bytes(bool backward) const;
};

// ---------------------------------------------------------------------------

namespace detail {

/// Which of eq. (2)'s sizes a skeletal tensor counts towards.
enum class skeletal_part { input, attention, other };
/// How tensor parallelism splits an activation (see the header comment).
enum class tp_split { sequence, hidden };

struct skeletal_row {
  std::string_view name;
  skeletal_part part;
  tp_split split;
  std::uint64_t bytes_per_token;  // of the whole layer, before the TP split
  bool attention_operand = false; // q, k or v: kept by an attention_keeps_qkv attention instead
};

inline constexpr std::size_t skeletal_tensor_count = 13;

inline std::uint64_t as_bytes(std::int64_t value) { return static_cast<std::uint64_t>(value); }

/// The table of the header comment for a checked layer.
inline std::array<skeletal_row, skeletal_tensor_count> skeletal_rows(const transformer_layer& layer) {
  const std::uint64_t e = as_bytes(layer.bytes_per_element);
  const std::uint64_t eh = checked_mul(e, as_bytes(layer.hidden));
  const std::uint64_t eh_kv = checked_mul(e, layer.kv_width());
  const std::uint64_t ef = checked_mul(e, layer.ffn_width());
  const std::uint64_t lse = checked_mul(4, as_bytes(layer.heads));
  constexpr std::uint64_t stats = 2 * 4;  // mean and 1/std, fp32
  using enum skeletal_part;
  using enum tp_split;
  return {{
      {"input", input, sequence, eh},
      {"input_norm", other, sequence, eh},
      {"input_norm_stats", other, sequence, stats},
      {"q", other, hidden, eh, true},
      {"k", other, hidden, eh_kv, true},
      {"v", other, hidden, eh_kv, true},
      {"attention_output", attention, hidden, eh},
      {"attention_lse", attention, hidden, lse},
      {"residual", other, sequence, eh},
      {"mlp_input_norm", other, sequence, eh},
      {"mlp_input_norm_stats", other, sequence, stats},
      {"fc1_output", other, hidden, ef},
      {"activation_output", other, hidden, ef},
  }};
}

/// Whether `row` is one of `layer`'s skeletal tensors.
inline bool is_skeletal(const transformer_layer& layer, const skeletal_row& row) {
  return !(layer.attention_keeps_qkv && row.attention_operand);
}

inline skeletal_tensor skeletal_tensor_of(const transformer_layer& layer, const skeletal_row& row) {
  const std::uint64_t t = as_bytes(layer.tensor_parallel);
  skeletal_tensor tensor;
  tensor.name = std::string(row.name);
  // check() made T divisible by t, and h, h_kv, f and a divisible by t.
  tensor.tokens = row.split == tp_split::sequence ? layer.local_tokens() / t : layer.local_tokens();
  tensor.bytes_per_token = row.split == tp_split::sequence ? row.bytes_per_token : row.bytes_per_token / t;
  tensor.policy = row.part == skeletal_part::other ? skeletal_policy::offload_fraction
                                                   : skeletal_policy::offload_whole;
  return tensor;
}

/// Bytes of the skeletal tensors counted towards `part`; of all of them
/// when `part` is empty.
inline std::uint64_t skeletal_bytes_of(const transformer_layer& layer, std::optional<skeletal_part> part) {
  layer.check();
  std::uint64_t total = 0;
  for (const auto& row : skeletal_rows(layer)) {
    if (!is_skeletal(layer, row)) continue;
    if (!part || row.part == *part) total = checked_add(total, skeletal_tensor_of(layer, row).bytes());
  }
  return total;
}

}  // namespace detail

inline void transformer_layer::check() const {
  auto positive = [](std::int64_t value, const char* field) {
    expects(value > 0, [&] {
      return std::string("transformer layer: ") + field + " must be positive, got " +
             std::to_string(value);
    });
  };
  positive(tokens, "tokens");
  positive(hidden, "hidden");
  positive(heads, "heads");
  expects(kv_heads >= 0, [&] {
    return "transformer layer: kv_heads must be positive (or 0 for heads), got " +
           std::to_string(kv_heads);
  });
  expects(ffn_hidden >= 0, [&] {
    return "transformer layer: ffn_hidden must be positive (or 0 for 4 * hidden), got " +
           std::to_string(ffn_hidden);
  });
  positive(bytes_per_element, "bytes_per_element");
  positive(tensor_parallel, "tensor_parallel");
  positive(context_parallel, "context_parallel");
  expects(attention_chunk >= 0, [&] {
    return "transformer layer: attention_chunk must be positive (or 0 for all local tokens), got " +
           std::to_string(attention_chunk);
  });

  auto multiple = [](std::int64_t value, const char* what, std::int64_t divisor, const char* by) {
    expects(value % divisor == 0, [&] {
      return std::string("transformer layer: ") + what + " " + std::to_string(value) +
             " is not a multiple of " + by + " " + std::to_string(divisor);
    });
  };
  const std::int64_t a_kv = kv_heads == 0 ? heads : kv_heads;
  multiple(hidden, "hidden", heads, "heads");
  multiple(heads, "heads", a_kv, "kv_heads");
  expects(tokens % context_parallel == 0, [&] {
    return "transformer layer: " + std::to_string(tokens) + " tokens do not split over " +
           std::to_string(context_parallel) + " context-parallel ranks";
  });
  const std::int64_t local = tokens / context_parallel;
  expects(local % tensor_parallel == 0, [&] {
    return "transformer layer: " + std::to_string(local) + " tokens" +
           (context_parallel > 1 ? " per context-parallel rank" : std::string()) +
           " do not split over " + std::to_string(tensor_parallel) +
           " tensor-parallel ranks (sequence-parallel layernorm region)";
  });
  expects(attention_chunk <= local, [&] {
    return "transformer layer: attention_chunk " + std::to_string(attention_chunk) + " exceeds the " +
           std::to_string(local) + " tokens" + (context_parallel > 1 ? " per context-parallel rank" : std::string());
  });
  expects(a_kv % tensor_parallel == 0, [&] {
    return "transformer layer: " + std::to_string(a_kv) + " kv_heads do not split over " +
           std::to_string(tensor_parallel) + " tensor-parallel ranks";
  });
  // 4 * hidden is checked for overflow before it is divided.
  const std::uint64_t f = ffn_hidden == 0 ? checked_mul(4, detail::as_bytes(hidden))
                                          : detail::as_bytes(ffn_hidden);
  expects(f % detail::as_bytes(tensor_parallel) == 0, [&] {
    return "transformer layer: ffn width " + std::to_string(f) + " does not split over " +
           std::to_string(tensor_parallel) + " tensor-parallel ranks";
  });
  // Every tensor of the table (at most max(h, f) elements of at most
  // max(e, 8) bytes per token) must fit in 64 bits on one GPU.
  const std::uint64_t widest = std::max<std::uint64_t>(detail::as_bytes(hidden), f);
  const std::uint64_t element = std::max<std::uint64_t>(detail::as_bytes(bytes_per_element), 8);
  (void)checked_mul(checked_mul(widest, element), detail::as_bytes(local));
}

inline std::uint64_t transformer_layer::kv_head_count() const {
  check();
  return detail::as_bytes(kv_heads == 0 ? heads : kv_heads);
}

inline std::uint64_t transformer_layer::head_dim() const {
  check();
  return detail::as_bytes(hidden / heads);
}

inline std::uint64_t transformer_layer::kv_width() const { return head_dim() * kv_head_count(); }

inline std::uint64_t transformer_layer::ffn_width() const {
  check();
  return ffn_hidden == 0 ? 4 * detail::as_bytes(hidden) : detail::as_bytes(ffn_hidden);
}

inline std::uint64_t transformer_layer::local_tokens() const {
  check();
  return detail::as_bytes(tokens / context_parallel);
}

inline std::uint64_t transformer_layer::activation_bytes(std::uint64_t bytes_per_token) const {
  return checked_mul(local_tokens() / detail::as_bytes(tensor_parallel), bytes_per_token);
}

inline std::vector<skeletal_tensor> transformer_layer::skeletal_tensors() const {
  check();
  std::vector<skeletal_tensor> tensors;
  tensors.reserve(detail::skeletal_tensor_count);
  for (const auto& row : detail::skeletal_rows(*this)) {
    if (!detail::is_skeletal(*this, row)) continue;
    tensors.push_back(detail::skeletal_tensor_of(*this, row));
    (void)tensors.back().bytes();  // throws if rows * bytes per row overflows
  }
  return tensors;
}

inline std::uint64_t transformer_layer::input_bytes() const {
  return detail::skeletal_bytes_of(*this, detail::skeletal_part::input);
}
inline std::uint64_t transformer_layer::attention_output_bytes() const {
  return detail::skeletal_bytes_of(*this, detail::skeletal_part::attention);
}
inline std::uint64_t transformer_layer::other_bytes() const {
  return detail::skeletal_bytes_of(*this, detail::skeletal_part::other);
}
inline std::uint64_t transformer_layer::skeletal_bytes() const {
  return detail::skeletal_bytes_of(*this, std::nullopt);
}
inline std::uint64_t transformer_layer::qkv_bytes() const {
  check();
  std::uint64_t total = 0;
  for (const auto& row : detail::skeletal_rows(*this)) {
    if (row.attention_operand) total = checked_add(total, detail::skeletal_tensor_of(*this, row).bytes());
  }
  return total;
}
inline std::uint64_t transformer_layer::attention_fetch_bytes(bool backward) const {
  check();
  if (!attention_keeps_qkv) return 0;
  // Bytes per token of q and of k + v (every row of an operand holds all
  // T tokens), c tokens per chunk and u chunks, the last one possibly short.
  const std::uint64_t T = local_tokens();
  const std::uint64_t c = attention_chunk == 0 ? T : detail::as_bytes(attention_chunk);
  const std::uint64_t u = (T + c - 1) / c;
  std::uint64_t q_row = 0, kv_row = 0;
  for (const auto& row : detail::skeletal_rows(*this)) {
    if (!row.attention_operand) continue;
    (row.name == "q" ? q_row : kv_row) += detail::skeletal_tensor_of(*this, row).bytes_per_token;
  }
  // Forward: query chunk i fetches the i c keys before it, sum c u (u - 1) / 2.
  const std::uint64_t earlier_keys = checked_mul(c, checked_mul(u, u - 1) / 2);
  if (!backward) return checked_mul(kv_row, earlier_keys);
  // Backward: every key once; key chunk j fetches the T - j c queries from
  // its own chunk on, sum u T - c u (u - 1) / 2.
  const std::uint64_t later_queries = checked_mul(u, T) - earlier_keys;
  return checked_add(checked_mul(kv_row, T), checked_mul(q_row, later_queries));
}

}  // namespace memo
