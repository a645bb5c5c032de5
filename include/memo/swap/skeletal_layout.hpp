// memo/swap/skeletal_layout.hpp
//
// What one transformer layer keeps for its backward pass, and which of it
// goes to host memory (MEMO section 3.2 and section 4.1, Figure 6).
//
// A `skeletal_layout` lists a layer's skeletal tensors (`skeletal_tensor`,
// core/transformer_layer.hpp): a name, a token count and the bytes each token
// occupies. Every tensor is stored token-major ([tokens, bytes_per_token]),
// so any token range is one contiguous byte range and can be copied with a
// single call. A GPT layer's layout is `skeletal_layout(transformer_layer)`,
// the same tensors the trace generator and the alpha LP count; tests and
// small examples list their own. Each tensor carries a policy:
//
//   - offload_whole:    always copied to host whole (the layer input and the
//                       attention output in the paper: recomputing the
//                       attention output would cost a whole FlashAttention);
//   - offload_fraction: a fraction alpha of its tokens is copied to host,
//                       the rest is recomputed token-wise before backward;
//   - recompute:        never copied; always recomputed token-wise.
//
// An `offload_plan` applies one alpha to a layout: for every tensor it fixes
// the token ranges that are offloaded (one contiguous prefix, its length
// rounded down to a granularity so copies stay large and aligned; alpha = 1
// offloads everything) and therefore the ranges that are recomputed. Rounding
// down never offloads more than the alpha the LP allowed. Tensors of which
// nothing is offloaded (policy `recompute`, or `offload_fraction` whose
// rounded share is zero, e.g. alpha = 0) are *shared*: they need not survive
// the next layer's forward, so every layer writes them into one common
// region instead of a rounding buffer (the paper's alpha = 0 special case,
// applied tensor by tensor). Everything else lives in the rounding buffers.
//
// Both types validate themselves on construction and compare equal only
// when they describe the same bytes, which is how the rounding buffers, the
// host store and the swapper refuse a plan made for a different layout.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "memo/core/bytes.hpp"
#include "memo/core/error.hpp"
#include "memo/core/transformer_layer.hpp"

namespace memo {

/// A half-open token range [begin, end).
struct token_range {
  std::size_t begin = 0;
  std::size_t end = 0;
  [[nodiscard]] std::size_t tokens() const noexcept { return end - begin; }
  [[nodiscard]] bool empty() const noexcept { return end <= begin; }
  friend bool operator==(const token_range&, const token_range&) = default;
};

/// The skeletal tensors of one layer (identical for every layer).
class skeletal_layout {
 public:
  skeletal_layout() = default;
  explicit skeletal_layout(std::vector<skeletal_tensor> tensors) : tensors_(std::move(tensors)) {
    validate();
  }
  /// The skeletal tensors of one GPU's share of `layer`
  /// (`transformer_layer::skeletal_tensors()`), the bytes the alpha LP and
  /// the trace generator count.
  explicit skeletal_layout(const transformer_layer& layer) : skeletal_layout(layer.skeletal_tensors()) {}

  [[nodiscard]] const std::vector<skeletal_tensor>& tensors() const noexcept { return tensors_; }
  [[nodiscard]] std::size_t size() const noexcept { return tensors_.size(); }
  [[nodiscard]] const skeletal_tensor& operator[](std::size_t index) const {
    expects(index < tensors_.size(), [&] {
      return "skeletal layout: tensor index " + std::to_string(index) + " outside [0, " +
             std::to_string(tensors_.size()) + ")";
    });
    return tensors_[index];
  }

  /// The index of the tensor called `name`; throws when there is none.
  [[nodiscard]] std::size_t index_of(std::string_view name) const {
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      if (tensors_[i].name == name) return i;
    }
    throw error("skeletal layout has no tensor named '" + std::string(name) + "' (tensors: " +
                names() + ")");
  }

  /// Bytes of all tensors of one layer, without alignment padding.
  [[nodiscard]] std::uint64_t layer_bytes() const {
    std::uint64_t total = 0;
    for (const auto& tensor : tensors_) total = checked_add(total, tensor.bytes());
    return total;
  }
  /// Bytes of the tensors with the given policy.
  [[nodiscard]] std::uint64_t bytes_with(skeletal_policy policy) const {
    std::uint64_t total = 0;
    for (const auto& tensor : tensors_) {
      if (tensor.policy == policy) total = checked_add(total, tensor.bytes());
    }
    return total;
  }

  [[nodiscard]] std::string names() const {
    std::string text;
    for (const auto& tensor : tensors_) text += (text.empty() ? "" : ", ") + tensor.name;
    return text;
  }

  friend bool operator==(const skeletal_layout&, const skeletal_layout&) = default;

 private:
  void validate() const {
    expects(!tensors_.empty(), "skeletal layout: at least one tensor is needed");
    std::unordered_set<std::string> seen;
    for (const auto& tensor : tensors_) {
      expects(!tensor.name.empty(), "skeletal layout: a tensor has an empty name");
      expects(seen.insert(tensor.name).second, [&] {
        return "skeletal layout: tensor name '" + tensor.name + "' appears twice";
      });
      expects(tensor.tokens > 0 && tensor.bytes_per_token > 0, [&] {
        return "skeletal layout: tensor '" + tensor.name + "' has " +
               std::to_string(tensor.tokens) + " tokens of " +
               std::to_string(tensor.bytes_per_token) + " bytes; both must be positive";
      });
      (void)tensor.bytes();  // throws if tokens * bytes_per_token overflows
    }
  }

  std::vector<skeletal_tensor> tensors_;
};

/// One alpha applied to a layout: the offloaded and the recomputed token
/// ranges of every tensor.
class offload_plan {
 public:
  offload_plan() = default;

  /// `granularity_tokens`: offloaded prefixes are rounded down to a multiple
  /// of it (alpha = 1 always offloads every token).
  offload_plan(skeletal_layout layout, double alpha, std::size_t granularity_tokens = 1)
      : layout_(std::move(layout)), alpha_(alpha), granularity_tokens_(granularity_tokens) {
    expects(layout_.size() > 0, "offload plan: the skeletal layout is empty");
    expects(std::isfinite(alpha) && alpha >= 0.0 && alpha <= 1.0, [&] {
      return "offload plan: alpha must be in [0, 1], got " + std::to_string(alpha);
    });
    expects(granularity_tokens > 0, "offload plan: granularity_tokens must be positive");
    offloaded_.resize(layout_.size());
    for (std::size_t i = 0; i < layout_.size(); ++i) {
      const auto& tensor = layout_[i];
      std::size_t tokens = 0;
      switch (tensor.policy) {
        case skeletal_policy::offload_whole: tokens = tensor.tokens; break;
        case skeletal_policy::recompute: tokens = 0; break;
        case skeletal_policy::offload_fraction:
          if (alpha >= 1.0) {
            tokens = tensor.tokens;
          } else {
            const auto wanted =
                static_cast<std::size_t>(std::floor(alpha * static_cast<double>(tensor.tokens)));
            tokens = wanted / granularity_tokens * granularity_tokens;
          }
          break;
      }
      if (tokens > 0) offloaded_[i].push_back({0, tokens});
    }
  }

  [[nodiscard]] const skeletal_layout& layout() const noexcept { return layout_; }
  [[nodiscard]] double alpha() const noexcept { return alpha_; }
  [[nodiscard]] std::size_t granularity_tokens() const noexcept { return granularity_tokens_; }

  /// Token ranges of tensor `index` that are copied to host.
  [[nodiscard]] const std::vector<token_range>& offloaded(std::size_t index) const {
    (void)layout_[index];
    return offloaded_[index];
  }
  /// Token ranges of tensor `index` that are recomputed before backward.
  [[nodiscard]] std::vector<token_range> recomputed(std::size_t index) const {
    const auto& tensor = layout_[index];
    std::vector<token_range> result;
    std::size_t cursor = 0;
    for (const auto& range : offloaded_[index]) {
      if (range.begin > cursor) result.push_back({cursor, range.begin});
      cursor = range.end;
    }
    if (cursor < tensor.tokens) result.push_back({cursor, tensor.tokens});
    return result;
  }
  /// True when nothing of tensor `index` is offloaded: it lives in the
  /// shared region, not in a rounding buffer.
  [[nodiscard]] bool shared(std::size_t index) const { return offloaded(index).empty(); }

  /// Bytes one layer sends to (and later fetches from) host memory.
  [[nodiscard]] std::uint64_t offloaded_bytes_per_layer() const {
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < layout_.size(); ++i) {
      for (const auto& range : offloaded_[i]) {
        total = checked_add(total, checked_mul(range.tokens(), layout_[i].bytes_per_token));
      }
    }
    return total;
  }
  /// Bytes one layer recomputes before its backward.
  [[nodiscard]] std::uint64_t recomputed_bytes_per_layer() const {
    return layout_.layer_bytes() - offloaded_bytes_per_layer();
  }
  /// The fraction of the offload_fraction tensors' bytes actually offloaded
  /// after rounding (<= alpha); 0 when the layout has no such tensor.
  [[nodiscard]] double effective_alpha() const {
    std::uint64_t offloaded = 0;
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < layout_.size(); ++i) {
      if (layout_[i].policy != skeletal_policy::offload_fraction) continue;
      total += layout_[i].bytes();
      for (const auto& range : offloaded_[i]) offloaded += range.tokens() * layout_[i].bytes_per_token;
    }
    return total == 0 ? 0.0 : static_cast<double>(offloaded) / static_cast<double>(total);
  }

  friend bool operator==(const offload_plan&, const offload_plan&) = default;

 private:
  skeletal_layout layout_;
  double alpha_ = 0.0;
  std::size_t granularity_tokens_ = 1;
  std::vector<std::vector<token_range>> offloaded_;  // [tensor] -> ranges
};

}  // namespace memo
