// memo/project/model_shape.hpp
//
// The shape of the model a projection is made for: n layers, hidden size h,
// a heads (a_kv key/value heads under grouped-query attention), FFN width f
// (GeLU: two h x f matrices; SwiGLU: three), vocabulary V, embeddings tied
// with the classifier or not.
//
// Presets: the four GPT models of MEMO Table 2 (7B 32 x 4096, 32 heads;
// 13B 40 x 5120, 40 heads; 30B 48 x 7168, 56 heads; 65B 80 x 8192, 64
// heads; f = 4h, V = 50257) and Llama 3 8B, the 8B model of FPDT 5 (32 x
// 4096, 32 heads, 8 key/value heads, SwiGLU f = 14336, V = 128256,
// untied). SPPO Table 2's GPT-7B/13B/65B have MEMO's shapes (its vocabulary
// is not given; MEMO's is used). A custom shape is
// "L,C,H,V[,F[,KV]][,swiglu]".
//
// FLOPs (2 per multiply-add) are counted here once and the projection reads
// them from here: a layer's GEMMs 2 s P_layer, causal attention 2 s^2 h (QK^T
// and PV over half the square), the classifier 2 s h V. For MEMO's models
// this is MEMO 5.1's 6 s P + 6 n h s^2 per step; `layer_gemm_flops` equals
// schedule/layer_cost.hpp's forward GEMM count for every non-gated shape
// (tested). The skeletal bytes a layer keeps come from
// core/transformer_layer.hpp (`layer`), the description the alpha LP and
// the planner read.
//
// Guarantees: a shape from `parse_model_shape` or the presets passes
// `check()` (every size positive, h divisible by a, a by a_kv, at most
// `max_parameters` parameters, so that every byte count of the model's
// training states, 18 bytes per parameter at most, is an exact whole number
// in a double and in 64 bits); bad text is a memo::error quoting it and
// naming the field.
#pragma once

#include <cstdint>
#include <cstdio>
#include <iterator>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "memo/core/error.hpp"
#include "memo/core/transformer_layer.hpp"
#include "memo/plan/text_input.hpp"

namespace memo::project {

/// The largest parameter count a shape may have: 2^48 (2.8e14, a hundred
/// times today's largest models), so 18 bytes per parameter stay below 2^53.
inline constexpr std::uint64_t max_parameters = std::uint64_t{1} << 48;

struct model_shape {
  std::string name;
  int layers = 0;               ///< n
  int hidden = 0;               ///< h
  int heads = 0;                ///< a; bounds the Ulysses sequence-parallel degree
  int vocab = 0;                ///< V
  int ffn = 0;                  ///< f; 0 = 4h
  int kv_heads = 0;             ///< a_kv; 0 = a
  bool gated_mlp = false;       ///< SwiGLU (three h x f matrices) instead of GeLU (two)
  bool tied_embeddings = true;  ///< the classifier reuses the embedding matrix

  [[nodiscard]] double ffn_width() const { return ffn > 0 ? ffn : 4.0 * hidden; }
  [[nodiscard]] int kv_head_count() const { return kv_heads > 0 ? kv_heads : heads; }
  /// Whether `ranks` tensor- or sequence-parallel ranks split the layer:
  /// its heads, its key/value heads and its FFN width.
  [[nodiscard]] bool splits_over(int ranks) const {
    return ranks >= 1 && heads % ranks == 0 && kv_head_count() % ranks == 0 &&
           std::fmod(ffn_width(), static_cast<double>(ranks)) == 0.0;
  }
  /// h_kv = h / a * a_kv: the width of K and of V.
  [[nodiscard]] double kv_width() const { return static_cast<double>(hidden) / heads * kv_head_count(); }

  /// Parameters of one layer: Q and O (2 h^2), K and V (2 h h_kv), the MLP
  /// (2 or 3 h f); biases and norms are below 0.1% and left out.
  [[nodiscard]] double layer_parameters() const {
    const double h = hidden;
    return 2.0 * h * h + 2.0 * h * kv_width() + (gated_mlp ? 3.0 : 2.0) * h * ffn_width();
  }
  /// All parameters: n layers and the V x h embedding (twice if untied).
  [[nodiscard]] double parameters() const {
    return layers * layer_parameters() + (tied_embeddings ? 1.0 : 2.0) * vocab * static_cast<double>(hidden);
  }
  /// Forward FLOPs of one layer's GEMMs over s tokens.
  [[nodiscard]] double layer_gemm_flops(double s) const { return 2.0 * s * layer_parameters(); }
  /// Forward FLOPs of one layer's causal attention over a sequence of s tokens.
  [[nodiscard]] double layer_attention_flops(double s) const { return 2.0 * s * s * hidden; }
  /// Forward FLOPs of the classifier over s tokens.
  [[nodiscard]] double classifier_flops(double s) const { return 2.0 * s * static_cast<double>(hidden) * vocab; }
  /// Model FLOPs of one training step (forward + backward = 3 x forward),
  /// the numerator of MFU: recomputation is not counted.
  [[nodiscard]] double model_flops(double s) const {
    return 3.0 * (layers * (layer_gemm_flops(s) + layer_attention_flops(s)) + classifier_flops(s));
  }

  /// The layer as core/ describes it, for `tokens` split over TP x CP.
  [[nodiscard]] transformer_layer layer(std::int64_t tokens, int tensor_parallel, int context_parallel) const {
    transformer_layer l;
    l.tokens = tokens;
    l.hidden = hidden;
    l.heads = heads;
    l.kv_heads = kv_heads;
    l.ffn_hidden = ffn;
    l.tensor_parallel = tensor_parallel;
    l.context_parallel = context_parallel;
    return l;
  }

  void check() const {
    expects(layers > 0 && hidden > 0 && heads > 0 && vocab > 0 && ffn >= 0 && kv_heads >= 0, [&] {
      return "model '" + name + "': layers, hidden, heads and vocab must be positive (ffn, kv heads >= 0), got " +
             std::to_string(layers) + "," + std::to_string(hidden) + "," + std::to_string(heads) + "," +
             std::to_string(vocab) + "," + std::to_string(ffn) + "," + std::to_string(kv_heads);
    });
    expects(hidden % heads == 0, [&] {
      return "model '" + name + "': hidden " + std::to_string(hidden) + " is not divisible by heads " +
             std::to_string(heads);
    });
    expects(heads % kv_head_count() == 0, [&] {
      return "model '" + name + "': heads " + std::to_string(heads) + " is not divisible by kv heads " +
             std::to_string(kv_head_count());
    });
    const std::uint64_t count = exact_parameters();
    expects(count <= max_parameters, [&] {
      char text[32];
      std::snprintf(text, sizeof text, "%.3g", parameters());
      return "model '" + name + "': " + text + " parameters, above the " + std::to_string(max_parameters) +
             " (2^48) a projection counts exactly";
    });
  }

  /// `parameters()` in whole numbers, saturating at 2^64 - 1 instead of
  /// wrapping (what `check()` bounds; every size must be positive).
  [[nodiscard]] std::uint64_t exact_parameters() const {
    constexpr std::uint64_t saturated = std::numeric_limits<std::uint64_t>::max();
    const auto mul = [](std::uint64_t a, std::uint64_t b) { return b != 0 && a > saturated / b ? saturated : a * b; };
    const auto add = [](std::uint64_t a, std::uint64_t b) { return a > saturated - b ? saturated : a + b; };
    const auto h = static_cast<std::uint64_t>(hidden);
    const auto f = ffn > 0 ? static_cast<std::uint64_t>(ffn) : mul(4, h);
    const std::uint64_t kv = h / static_cast<std::uint64_t>(heads) * static_cast<std::uint64_t>(kv_head_count());
    const std::uint64_t layer = add(add(mul(2, mul(h, h)), mul(2, mul(h, kv))), mul(gated_mlp ? 3 : 2, mul(h, f)));
    const std::uint64_t embedding = mul(tied_embeddings ? 1 : 2, mul(static_cast<std::uint64_t>(vocab), h));
    return add(mul(static_cast<std::uint64_t>(layers), layer), embedding);
  }
};

inline std::vector<model_shape> model_presets() {
  return {{"7b", 32, 4096, 32, 50257},
          {"13b", 40, 5120, 40, 50257},
          {"30b", 48, 7168, 56, 50257},
          {"65b", 80, 8192, 64, 50257},
          {"8b", 32, 4096, 32, 128256, 14336, 8, true, false}};
}

/// "7b" | "13b" | "30b" | "65b" | "8b" | "L,C,H,V[,F[,KV]][,swiglu]".
inline model_shape parse_model_shape(std::string_view text) {
  for (auto& preset : model_presets()) {
    if (preset.name == text) return preset;
  }
  const auto usage = [&] {
    return "model '" + memo::detail::quote(text) + "': expected 7b, 13b, 30b, 65b, 8b or L,C,H,V[,F[,KV]][,swiglu]";
  };
  static constexpr const char* field_names[] = {"layers", "hidden", "heads", "vocab", "ffn", "kv heads"};
  std::vector<int> fields;
  bool gated = false;
  std::string_view rest = text;
  while (true) {
    const auto comma = rest.find(',');
    const auto part = rest.substr(0, comma);
    if (part == "swiglu" && comma == std::string_view::npos && fields.size() >= 4) {
      gated = true;
      break;
    }
    const auto value = memo::detail::parse_integer<int>(part);
    expects(value.has_value() && *value > 0, [&] {
      const std::string field =
          fields.size() < std::size(field_names) ? field_names[fields.size()] : "field " + std::to_string(fields.size() + 1);
      const bool too_large = !value && !part.empty() && part.find_first_not_of("+0123456789") == std::string_view::npos;
      return usage() + "; " + field + " '" + memo::detail::quote(part) + "' is not a positive integer" +
             (too_large ? " up to " + std::to_string(std::numeric_limits<int>::max()) : "");
    });
    fields.push_back(*value);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  expects(fields.size() >= 4 && fields.size() <= 6, [&] {
    return usage() + " (4 to 6 numbers), got " + std::to_string(fields.size());
  });
  model_shape shape{std::string(text), fields[0], fields[1], fields[2], fields[3]};
  if (fields.size() > 4) shape.ffn = fields[4];
  if (fields.size() > 5) shape.kv_heads = fields[5];
  shape.gated_mlp = gated;
  shape.check();
  return shape;
}

}  // namespace memo::project
