// memo/model/gpt2_config.hpp
//
// The shape of the reference GPT-2 and the layout of its parameters, exactly
// as llm.c lays them out, so a checkpoint written by llm.c's trainers loads
// here unchanged and one written here loads there.
//
// All parameters live in one flat fp32 buffer (llm.c's "params_memory"),
// sixteen tensors back to back in this order, with their shapes:
//
//   wte [Vp, C]   wpe [maxT, C]
//   ln1w [L, C]   ln1b [L, C]   qkvw [L, 3C, C]   qkvb [L, 3C]
//   attprojw [L, C, C]   attprojb [L, C]   ln2w [L, C]   ln2b [L, C]
//   fcw [L, 4C, C]   fcb [L, 4C]   fcprojw [L, C, 4C]   fcprojb [L, C]
//   lnfw [C]   lnfb [C]
//
// The per-layer tensors hold every layer's copy along the leading L
// dimension. `gpt2_parameter_layout` turns a configuration into the table of
// element counts and offsets (64-bit, every product checked for overflow);
// `view_gpt2_parameters` turns a base pointer into typed tensor views of the
// sixteen tensors (and `layer(l)` one layer's slice of them), so the same
// table serves the parameters, their gradients and the optimiser moments.
//
// A configuration is checked before anything is derived from it:
// `gpt2_config::problem` reports the first field that is wrong (a checker
// returning a report), `validate` throws it as a `memo::error`.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "memo/core/error.hpp"
#include "memo/core/tensor_view.hpp"

namespace memo {

/// The shape of a GPT-2 model (llm.c's GPT2Config). Fields are 32-bit because
/// llm.c's checkpoint header stores them as int32.
struct gpt2_config {
  std::int32_t max_seq_len = 0;        // maxT: rows of the position embedding
  std::int32_t vocab_size = 0;         // V: real tokens (e.g. 50257)
  std::int32_t padded_vocab_size = 0;  // Vp: rows of the token embedding (e.g. 50304)
  std::int32_t num_layers = 0;         // L
  std::int32_t num_heads = 0;          // NH
  std::int32_t channels = 0;           // C

  /// The first thing wrong with this configuration, or nothing.
  [[nodiscard]] std::optional<std::string> problem() const;
  /// Throws `memo::error` with `problem()`, prefixed by `where` when given.
  void validate(std::string_view where = {}) const;

  [[nodiscard]] std::int32_t head_size() const noexcept {
    return num_heads > 0 ? channels / num_heads : 0;
  }
  friend bool operator==(const gpt2_config&, const gpt2_config&) = default;
};

/// The sixteen parameter tensors in llm.c's order.
enum class gpt2_tensor : std::size_t {
  wte, wpe, ln1w, ln1b, qkvw, qkvb, attprojw, attprojb,
  ln2w, ln2b, fcw, fcb, fcprojw, fcprojb, lnfw, lnfb,
};
inline constexpr std::size_t gpt2_tensor_count = 16;

/// One parameter tensor: where it lives in the flat buffer and its shape.
/// Counts and offsets are in elements, not bytes.
struct gpt2_tensor_info {
  std::string_view name;
  std::size_t rank = 0;
  std::array<std::int64_t, 3> shape{};  // the first `rank` entries are used
  std::uint64_t count = 0;              // elements
  std::uint64_t offset = 0;             // elements from the start of the buffer
};

/// The table of all sixteen tensors and the total element count.
struct gpt2_parameter_table {
  std::array<gpt2_tensor_info, gpt2_tensor_count> tensors{};
  std::uint64_t total = 0;  // elements

  [[nodiscard]] const gpt2_tensor_info& operator[](gpt2_tensor t) const noexcept {
    return tensors[static_cast<std::size_t>(t)];
  }
  /// Bytes of the whole buffer at `bytes_per_element`, checked for overflow.
  [[nodiscard]] std::uint64_t bytes(std::uint64_t bytes_per_element) const;
};

namespace detail {

inline std::string gpt2_field_text(const gpt2_config& c) {
  return "maxT=" + std::to_string(c.max_seq_len) + " V=" + std::to_string(c.vocab_size) +
         " Vp=" + std::to_string(c.padded_vocab_size) + " L=" + std::to_string(c.num_layers) +
         " NH=" + std::to_string(c.num_heads) + " C=" + std::to_string(c.channels);
}

/// a * b for element counts, or nothing when it does not fit in 63 bits (so
/// every count is also a valid tensor_view index and a valid size_t byte
/// count on 64-bit hosts after multiplying by 4).
inline std::optional<std::uint64_t> count_product(std::initializer_list<std::uint64_t> factors) {
  constexpr std::uint64_t limit = std::uint64_t{1} << 59;  // leaves room for 8-byte elements
  std::uint64_t product = 1;
  for (std::uint64_t f : factors) {
    if (f != 0 && product > limit / f) return std::nullopt;
    product *= f;
  }
  return product;
}

}  // namespace detail

inline std::optional<std::string> gpt2_config::problem() const {
  const std::pair<const char*, std::int32_t> fields[] = {
      {"max_seq_len (maxT)", max_seq_len}, {"vocab_size (V)", vocab_size},
      {"padded_vocab_size (Vp)", padded_vocab_size}, {"num_layers (L)", num_layers},
      {"num_heads (NH)", num_heads}, {"channels (C)", channels}};
  for (const auto& [name, value] : fields) {
    if (value <= 0) {
      return std::string(name) + " is " + std::to_string(value) + ", must be positive (" +
             detail::gpt2_field_text(*this) + ")";
    }
  }
  if (padded_vocab_size < vocab_size) {
    return "padded_vocab_size (Vp) " + std::to_string(padded_vocab_size) +
           " is smaller than vocab_size (V) " + std::to_string(vocab_size);
  }
  if (channels % num_heads != 0) {
    return "channels (C) " + std::to_string(channels) + " is not a multiple of num_heads (NH) " +
           std::to_string(num_heads);
  }
  const std::uint64_t L = static_cast<std::uint64_t>(num_layers);
  const std::uint64_t C = static_cast<std::uint64_t>(channels);
  // The largest tensors and their sum must fit; the sum of all sixteen is at
  // most (Vp + maxT + 2 + 12 L C + 13 L) C, checked term by term.
  const auto wte = detail::count_product({static_cast<std::uint64_t>(padded_vocab_size), C});
  const auto wpe = detail::count_product({static_cast<std::uint64_t>(max_seq_len), C});
  const auto layer = detail::count_product({L, 12, C, C});  // qkvw + attprojw + fcw + fcprojw
  const auto small = detail::count_product({L, 13, C});     // the per-layer vectors
  std::optional<std::uint64_t> total;
  if (wte && wpe && layer && small) {
    total = 0;
    for (std::uint64_t part : {*wte, *wpe, *layer, *small, 2 * C}) {
      if (*total > (std::uint64_t{1} << 59) - part) {
        total.reset();
        break;
      }
      *total += part;
    }
  }
  if (!total) {
    return "the parameter count of " + detail::gpt2_field_text(*this) +
           " overflows the 2^59 elements a buffer may hold";
  }
  return std::nullopt;
}

inline void gpt2_config::validate(std::string_view where) const {
  if (auto p = problem()) {
    throw error(where.empty() ? "GPT-2 config: " + *p : std::string(where) + ": " + *p);
  }
}

inline std::uint64_t gpt2_parameter_table::bytes(std::uint64_t bytes_per_element) const {
  const auto b = detail::count_product({total, bytes_per_element});
  expects(b.has_value(), [&] {
    return std::to_string(total) + " parameters of " + std::to_string(bytes_per_element) +
           " bytes overflow 64 bits";
  });
  return *b;
}

/// The sixteen tensors of `config` in llm.c's order, with element counts and
/// offsets into one flat buffer. Validates `config` first.
inline gpt2_parameter_table gpt2_parameter_layout(const gpt2_config& config) {
  config.validate();
  const std::int64_t Vp = config.padded_vocab_size, maxT = config.max_seq_len;
  const std::int64_t L = config.num_layers, C = config.channels;
  struct row {
    std::string_view name;
    std::size_t rank;
    std::array<std::int64_t, 3> shape;
  };
  const row rows[gpt2_tensor_count] = {
      {"wte", 2, {Vp, C, 0}},           {"wpe", 2, {maxT, C, 0}},
      {"ln1w", 2, {L, C, 0}},           {"ln1b", 2, {L, C, 0}},
      {"qkvw", 3, {L, 3 * C, C}},       {"qkvb", 2, {L, 3 * C, 0}},
      {"attprojw", 3, {L, C, C}},       {"attprojb", 2, {L, C, 0}},
      {"ln2w", 2, {L, C, 0}},           {"ln2b", 2, {L, C, 0}},
      {"fcw", 3, {L, 4 * C, C}},        {"fcb", 2, {L, 4 * C, 0}},
      {"fcprojw", 3, {L, C, 4 * C}},    {"fcprojb", 2, {L, C, 0}},
      {"lnfw", 1, {C, 0, 0}},           {"lnfb", 1, {C, 0, 0}},
  };
  gpt2_parameter_table table;
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < gpt2_tensor_count; ++i) {
    gpt2_tensor_info& t = table.tensors[i];
    t.name = rows[i].name;
    t.rank = rows[i].rank;
    t.shape = rows[i].shape;
    // validate() bounded the total below 2^59, so no product or sum here wraps.
    t.count = 1;
    for (std::size_t d = 0; d < t.rank; ++d) t.count *= static_cast<std::uint64_t>(t.shape[d]);
    t.offset = offset;
    offset += t.count;
  }
  table.total = offset;
  return table;
}

/// The parameters one pipeline stage holds, in llm.c's order: the twelve
/// per-layer tensors of `layers` blocks; the token embedding only when the
/// stage embeds or holds the (tied) head, the position embedding only when
/// it embeds, the final layernorm only with the head. Tensors a stage does
/// not hold have no elements (shape [0, C] or [0]). With all three flags
/// set and every layer it is `gpt2_parameter_layout(config)`.
inline gpt2_parameter_table gpt2_stage_parameter_layout(const gpt2_config& config, std::int64_t layers,
                                                        bool embedding, bool head) {
  config.validate();
  expects(layers >= 1 && layers <= config.num_layers, [&] {
    return "gpt2_stage_parameter_layout: " + std::to_string(layers) + " layers for a model of " +
           std::to_string(config.num_layers);
  });
  gpt2_config stage = config;
  stage.num_layers = static_cast<std::int32_t>(layers);
  gpt2_parameter_table table = gpt2_parameter_layout(stage);
  const auto held = [&](gpt2_tensor t) {
    if (t == gpt2_tensor::wte) return embedding || head;
    if (t == gpt2_tensor::wpe) return embedding;
    if (t == gpt2_tensor::lnfw || t == gpt2_tensor::lnfb) return head;
    return true;
  };
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < gpt2_tensor_count; ++i) {
    gpt2_tensor_info& t = table.tensors[i];
    if (!held(static_cast<gpt2_tensor>(i))) {
      t.shape[0] = 0;
      t.count = 0;
    }
    t.offset = offset;
    offset += t.count;
  }
  table.total = offset;
  return table;
}

/// Element types a parameter buffer may hold (fp32 parameters, gradients,
/// moments; a lower-precision copy).
template <class T>
concept gpt2_parameter_element = std::is_trivially_copyable_v<std::remove_const_t<T>> &&
                                 !std::is_pointer_v<T> && !std::is_void_v<T>;

/// One layer's slice of the twelve per-layer tensors (the leading L dropped).
template <gpt2_parameter_element T>
struct gpt2_layer_views {
  tensor_view<T, 1> ln1w;      // [C]
  tensor_view<T, 1> ln1b;      // [C]
  tensor_view<T, 2> qkvw;      // [3C, C]
  tensor_view<T, 1> qkvb;      // [3C]
  tensor_view<T, 2> attprojw;  // [C, C]
  tensor_view<T, 1> attprojb;  // [C]
  tensor_view<T, 1> ln2w;      // [C]
  tensor_view<T, 1> ln2b;      // [C]
  tensor_view<T, 2> fcw;       // [4C, C]
  tensor_view<T, 1> fcb;       // [4C]
  tensor_view<T, 2> fcprojw;   // [C, 4C]
  tensor_view<T, 1> fcprojb;   // [C]
};

namespace detail {

/// Row `l` of a contiguous view, as a view of one rank less.
template <class T, std::size_t Rank>
tensor_view<T, Rank - 1> layer_row(const tensor_view<T, Rank>& all, std::int64_t l) {
  typename tensor_view<T, Rank - 1>::extents_type extents{};
  for (std::size_t d = 1; d < Rank; ++d) extents[d - 1] = all.extent(d);
  return tensor_view<T, Rank - 1>::contiguous(all.data() + l * all.stride(0), extents);
}

}  // namespace detail

/// Typed views of the sixteen tensors over one flat buffer of `T`.
template <gpt2_parameter_element T>
struct gpt2_parameter_views {
  tensor_view<T, 2> wte;       // [Vp, C]
  tensor_view<T, 2> wpe;       // [maxT, C]
  tensor_view<T, 2> ln1w;      // [L, C]
  tensor_view<T, 2> ln1b;      // [L, C]
  tensor_view<T, 3> qkvw;      // [L, 3C, C]
  tensor_view<T, 2> qkvb;      // [L, 3C]
  tensor_view<T, 3> attprojw;  // [L, C, C]
  tensor_view<T, 2> attprojb;  // [L, C]
  tensor_view<T, 2> ln2w;      // [L, C]
  tensor_view<T, 2> ln2b;      // [L, C]
  tensor_view<T, 3> fcw;       // [L, 4C, C]
  tensor_view<T, 2> fcb;       // [L, 4C]
  tensor_view<T, 3> fcprojw;   // [L, C, 4C]
  tensor_view<T, 2> fcprojb;   // [L, C]
  tensor_view<T, 1> lnfw;      // [C]
  tensor_view<T, 1> lnfb;      // [C]

  [[nodiscard]] std::int64_t layers() const noexcept { return ln1w.extent(0); }

  /// Layer `l`'s parameters; an error unless 0 <= l < L.
  [[nodiscard]] gpt2_layer_views<T> layer(std::int64_t l) const {
    expects(l >= 0 && l < layers(), [&] {
      return "GPT-2 layer " + std::to_string(l) + " does not exist; the model has " +
             std::to_string(layers()) + " layers";
    });
    using detail::layer_row;
    return {layer_row(ln1w, l), layer_row(ln1b, l), layer_row(qkvw, l), layer_row(qkvb, l),
            layer_row(attprojw, l), layer_row(attprojb, l), layer_row(ln2w, l), layer_row(ln2b, l),
            layer_row(fcw, l), layer_row(fcb, l), layer_row(fcprojw, l), layer_row(fcprojb, l)};
  }
};

/// Views of the sixteen tensors of `config` over `buffer`, which must hold
/// exactly the table's total element count (a buffer of another size is a
/// configuration mismatch, reported with both counts).
template <gpt2_parameter_element T>
gpt2_parameter_views<T> view_gpt2_parameters(const gpt2_parameter_table& table, std::span<T> buffer);

template <gpt2_parameter_element T>
gpt2_parameter_views<T> view_gpt2_parameters(const gpt2_config& config, std::span<T> buffer) {
  const gpt2_parameter_table table = gpt2_parameter_layout(config);
  expects(buffer.size() == table.total, [&] {
    return "a GPT-2 parameter buffer for " + detail::gpt2_field_text(config) + " holds " +
           std::to_string(table.total) + " elements, the buffer given holds " +
           std::to_string(buffer.size());
  });
  return view_gpt2_parameters(table, buffer);
}

/// Views of the sixteen tensors of `table` (a whole model's or a stage's,
/// gpt2_stage_parameter_layout) over `buffer` of exactly its elements.
template <gpt2_parameter_element T>
gpt2_parameter_views<T> view_gpt2_parameters(const gpt2_parameter_table& table, std::span<T> buffer) {
  expects(buffer.size() == table.total, [&] {
    return "a GPT-2 parameter buffer of " + std::to_string(table.total) + " elements expected, the buffer given holds " +
           std::to_string(buffer.size());
  });
  expects(buffer.data() != nullptr, "a GPT-2 parameter buffer is null");
  auto at = [&](gpt2_tensor t) { return buffer.data() + table[t].offset; };
  auto v1 = [&](gpt2_tensor t) {
    const auto& s = table[t].shape;
    return tensor_view<T, 1>::contiguous(at(t), {s[0]});
  };
  auto v2 = [&](gpt2_tensor t) {
    const auto& s = table[t].shape;
    return tensor_view<T, 2>::contiguous(at(t), {s[0], s[1]});
  };
  auto v3 = [&](gpt2_tensor t) {
    const auto& s = table[t].shape;
    return tensor_view<T, 3>::contiguous(at(t), {s[0], s[1], s[2]});
  };
  using g = gpt2_tensor;
  return {v2(g::wte),      v2(g::wpe),  v2(g::ln1w), v2(g::ln1b), v3(g::qkvw),    v2(g::qkvb),
          v3(g::attprojw), v2(g::attprojb), v2(g::ln2w), v2(g::ln2b), v3(g::fcw), v2(g::fcb),
          v3(g::fcprojw),  v2(g::fcprojb), v1(g::lnfw), v1(g::lnfb)};
}

}  // namespace memo
