// memo/project/model_shape.hpp
//
// The shape of the GPT model a projection is made for: n layers, hidden
// size h, a heads, vocabulary V (MEMO section 3, Table 1 notation; FFN of
// 4h as in MEMO's GPT models). The presets are the four models of MEMO
// section 5.1 (7B: 32 x 4096, 32 heads; 13B: 40 x 5120, 40 heads; 30B:
// 60 x 6656, 52 heads; 65B: 80 x 8192, 64 heads), with a 32,000-token
// vocabulary (the LLaMA tokenizer these sizes come from). A custom shape
// is "L,C,H,V". Guarantees: a shape returned by `parse_model_shape` has
// every field positive and hidden divisible by heads; bad text is a
// memo::error quoting it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "memo/core/error.hpp"
#include "memo/plan/text_input.hpp"

namespace memo::project {

struct model_shape {
  std::string name;
  int layers = 0;   ///< n
  int hidden = 0;   ///< h
  int heads = 0;    ///< a; bounds the Ulysses sequence-parallel degree
  int vocab = 0;    ///< V

  /// Parameters: 12 h^2 per layer (QKV 3h^2, projection h^2, FFN 8h^2;
  /// biases and norms are below 0.1% and left out) plus the V x h
  /// embedding, tied with the classifier.
  [[nodiscard]] double parameters() const {
    const double h = hidden;
    return layers * 12.0 * h * h + static_cast<double>(vocab) * h;
  }
  /// Forward FLOPs of one layer on a sequence of s tokens: 24 s h^2 in the
  /// GEMMs, 2 s^2 h in causal attention (QK^T and PV, half the square).
  [[nodiscard]] double layer_gemm_flops(double s) const {
    const double h = hidden;
    return 24.0 * s * h * h;
  }
  [[nodiscard]] double layer_attention_flops(double s) const {
    return 2.0 * s * s * static_cast<double>(hidden);
  }
  [[nodiscard]] double classifier_flops(double s) const {
    return 2.0 * s * static_cast<double>(hidden) * vocab;
  }
  /// Model FLOPs of one training step (forward + backward = 3 x forward),
  /// the numerator of MFU: recomputation is not counted.
  [[nodiscard]] double model_flops(double s) const {
    return 3.0 * (layers * (layer_gemm_flops(s) + layer_attention_flops(s)) + classifier_flops(s));
  }

  void check() const {
    expects(layers > 0 && hidden > 0 && heads > 0 && vocab > 0, [&] {
      return "model '" + name + "': layers, hidden, heads and vocab must be positive, got " +
             std::to_string(layers) + "," + std::to_string(hidden) + "," + std::to_string(heads) +
             "," + std::to_string(vocab);
    });
    expects(hidden % heads == 0, [&] {
      return "model '" + name + "': hidden " + std::to_string(hidden) +
             " is not divisible by heads " + std::to_string(heads);
    });
  }
};

inline std::vector<model_shape> model_presets() {
  return {{"7b", 32, 4096, 32, 32000},
          {"13b", 40, 5120, 40, 32000},
          {"30b", 60, 6656, 52, 32000},
          {"65b", 80, 8192, 64, 32000}};
}

/// "7b" | "13b" | "30b" | "65b" | "L,C,H,V".
inline model_shape parse_model_shape(std::string_view text) {
  for (auto& preset : model_presets()) {
    if (preset.name == text) return preset;
  }
  std::vector<int> fields;
  std::string_view rest = text;
  while (true) {
    const auto comma = rest.find(',');
    const auto part = rest.substr(0, comma);
    const auto value = detail::parse_integer<int>(part);
    expects(value.has_value() && *value > 0, [&] {
      return "model '" + detail::quote(text) + "': '" + detail::quote(part) +
             "' is not a positive integer (expected 7b, 13b, 30b, 65b or L,C,H,V)";
    });
    fields.push_back(*value);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  expects(fields.size() == 4, [&] {
    return "model '" + detail::quote(text) + "': expected 7b, 13b, 30b, 65b or L,C,H,V (4 fields), got " +
           std::to_string(fields.size()) + " field(s)";
  });
  model_shape shape{std::string(text), fields[0], fields[1], fields[2], fields[3]};
  shape.check();
  return shape;
}

}  // namespace memo::project
