// memo/model/token_data.hpp
//
// Token files in llm.c's data format, and the loader that cuts them into
// training windows.
//
// Format: a header of 256 little-endian int32
//   [0] magic 20240520   [1] version 1   [2] number of tokens N   (the rest zero)
// followed by N little-endian uint16 token ids, and nothing else. These are
// the .bin shards llm.c's data scripts produce (tinyshakespeare, fineweb).
//
// Every malformed file is a `memo::error` naming the file and the value: a
// wrong magic or version, a negative count, a size that disagrees with the
// count (too short, or trailing bytes), and, when the caller gives the
// model's vocabulary, the first token id that is not below it with its
// position.
//
// `token_window_loader` yields windows of a context length T as llm.c's
// loader does: window k starts at token k*T and reads T + 1 tokens; the
// inputs are the first T, the targets the last T (the inputs shifted by one:
// targets[t] = inputs[t + 1] is the token that follows inputs[t]). Windows
// are visited epoch by epoch, in order or in a permutation drawn from a seed,
// so a run is reproducible. A file shorter than T + 1 tokens holds no window
// and is an error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "memo/core/error.hpp"
#include "memo/core/tensor_view.hpp"
#include "memo/model/binary_file.hpp"

namespace memo {

inline constexpr std::int32_t token_file_magic = 20240520;
inline constexpr std::int32_t token_file_version = 1;
/// The most tokens one file can count (the header field is an int32).
inline constexpr std::int64_t token_file_max_tokens = std::numeric_limits<std::int32_t>::max();

namespace detail {

/// A 64-bit mixing function (splitmix64's finaliser): consecutive inputs give
/// statistically independent outputs, so seeds and counters can be hashed into
/// random streams that can be entered at any point.
constexpr std::uint64_t mix64(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// A value in [0, bound) from 64 random bits (the modulo bias is below
/// bound / 2^64, far under anything a training run can observe).
constexpr std::uint64_t below(std::uint64_t random_bits, std::uint64_t bound) noexcept {
  return random_bits % bound;
}

}  // namespace detail

/// Throws unless every id in `tokens` is below `vocab_size`, naming `source`,
/// the first offending position and its value.
inline void check_token_ids(std::span<const std::uint16_t> tokens, std::int64_t vocab_size,
                            std::string_view source) {
  expects(vocab_size > 0, [&] {
    return std::string(source) + ": vocabulary size " + std::to_string(vocab_size) +
           " is not positive";
  });
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= vocab_size) {
      throw error(std::string(source) + ": token " + std::to_string(i) + " has id " +
                  std::to_string(tokens[i]) + ", outside the vocabulary of " +
                  std::to_string(vocab_size) + " ids");
    }
  }
}

/// Reads the token file at `path`. With `vocab_size`, every id must be below it.
inline std::vector<std::uint16_t> read_token_file(const std::filesystem::path& path,
                                                  std::optional<std::int64_t> vocab_size = {}) {
  binary_file_reader file(path);
  const std::string name = detail::quoted(path);
  const llmc_header h = file.read_header("token file");
  if (h[0] != token_file_magic) {
    throw error(name + ": bad magic " + std::to_string(h[0]) + " (an llm.c token file starts with " +
                std::to_string(token_file_magic) + ")");
  }
  if (h[1] != token_file_version) {
    throw error(name + ": unsupported token file version " + std::to_string(h[1]) +
                " (expected " + std::to_string(token_file_version) + ")");
  }
  if (h[2] < 0) {
    throw error(name + ": header counts " + std::to_string(h[2]) + " tokens, must not be negative");
  }
  const std::uint64_t count = static_cast<std::uint64_t>(h[2]);
  const std::uint64_t expected = llmc_header_bytes + 2 * count;
  file.require_size(expected, std::to_string(count) + " tokens");
  std::vector<std::byte> bytes(static_cast<std::size_t>(2 * count));
  file.read(bytes, "tokens");
  std::vector<std::uint16_t> tokens(static_cast<std::size_t>(count));
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = detail::load_little_endian<std::uint16_t>(&bytes[2 * i]);
  }
  if (vocab_size) check_token_ids(tokens, *vocab_size, name);
  return tokens;
}

/// Writes `tokens` as an llm.c token file at `path`, atomically.
inline void write_token_file(const std::filesystem::path& path,
                             std::span<const std::uint16_t> tokens) {
  expects(tokens.size() <= static_cast<std::uint64_t>(token_file_max_tokens), [&] {
    return detail::quoted(path) + ": " + std::to_string(tokens.size()) +
           " tokens exceed the token file's limit of " + std::to_string(token_file_max_tokens);
  });
  llmc_header h{};
  h[0] = token_file_magic;
  h[1] = token_file_version;
  h[2] = static_cast<std::int32_t>(tokens.size());
  atomic_file_writer out(path);
  out.write(encode_llmc_header(h));
  std::vector<std::byte> bytes(2 * tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    detail::store_little_endian(&bytes[2 * i], tokens[i]);
  }
  out.write(bytes);
  out.commit();
}

/// The order windows are visited in within an epoch.
enum class window_order { sequential, shuffled };

/// Cuts a token sequence into training windows of `context` tokens (see the
/// top of this header). Deterministic: the same tokens, context, order and
/// seed give the same windows in the same order.
class token_window_loader {
 public:
  /// `source` names the tokens in errors (usually the file they came from).
  token_window_loader(std::vector<std::uint16_t> tokens, std::int64_t context,
                      window_order order = window_order::shuffled, std::uint64_t seed = 0,
                      std::string source = "token sequence")
      : tokens_(std::move(tokens)), context_(context), order_(order), seed_(seed),
        source_(std::move(source)) {
    expects(context_ > 0, [&] {
      return source_ + ": context length " + std::to_string(context_) + " is not positive";
    });
    const auto n = static_cast<std::uint64_t>(tokens_.size());
    expects(n >= 1 && n - 1 >= static_cast<std::uint64_t>(context_), [&] {
      return source_ + ": " + std::to_string(n) + " tokens are too few for one window of context " +
             std::to_string(context_) + " (needs " + std::to_string(context_) + " + 1 tokens)";
    });
    windows_ = static_cast<std::int64_t>((n - 1) / static_cast<std::uint64_t>(context_));
    order_of_windows_.resize(static_cast<std::size_t>(windows_));
    start_epoch();
  }

  /// Reads the token file at `path` (checking ids against `vocab_size` when given).
  static token_window_loader from_file(const std::filesystem::path& path, std::int64_t context,
                                       window_order order = window_order::shuffled,
                                       std::uint64_t seed = 0,
                                       std::optional<std::int64_t> vocab_size = {}) {
    return token_window_loader(read_token_file(path, vocab_size), context, order, seed,
                               detail::quoted(path));
  }

  [[nodiscard]] std::int64_t context() const noexcept { return context_; }
  [[nodiscard]] std::int64_t windows_per_epoch() const noexcept { return windows_; }
  /// Epochs started so far, counting from 0.
  [[nodiscard]] std::int64_t epoch() const noexcept { return epoch_; }
  [[nodiscard]] std::span<const std::uint16_t> tokens() const noexcept { return tokens_; }

  /// Fills the next window: inputs[t] = tokens[start + t], targets[t] =
  /// tokens[start + t + 1], for t < context. Returns `start`.
  std::int64_t next(std::span<std::int32_t> inputs, std::span<std::int32_t> targets) {
    expects(inputs.size() == static_cast<std::size_t>(context_) &&
                targets.size() == static_cast<std::size_t>(context_),
            [&] {
              return source_ + ": a window holds " + std::to_string(context_) +
                     " inputs and targets, the spans given hold " + std::to_string(inputs.size()) +
                     " and " + std::to_string(targets.size());
            });
    if (position_ == windows_) {
      ++epoch_;
      start_epoch();
    }
    const std::int64_t start = order_of_windows_[static_cast<std::size_t>(position_++)] * context_;
    const std::uint16_t* window = tokens_.data() + start;
    for (std::int64_t t = 0; t < context_; ++t) {
      inputs[static_cast<std::size_t>(t)] = window[t];
      targets[static_cast<std::size_t>(t)] = window[t + 1];
    }
    return start;
  }

  /// Fills a batch of windows, one per row of `inputs` and `targets` [B, T].
  void next_batch(tensor_view<std::int32_t, 2> inputs, tensor_view<std::int32_t, 2> targets) {
    inputs.expect_shape({inputs.extent(0), context_}, "loader inputs");
    targets.expect_shape(inputs.extents(), "loader targets");
    expects(inputs.is_contiguous() && targets.is_contiguous(),
            "loader inputs and targets must be contiguous [B, T] views");
    for (std::int64_t b = 0; b < inputs.extent(0); ++b) {
      next(std::span<std::int32_t>(&inputs(b, 0), static_cast<std::size_t>(context_)),
           std::span<std::int32_t>(&targets(b, 0), static_cast<std::size_t>(context_)));
    }
  }

  /// Back to the first window of epoch 0.
  void reset() {
    epoch_ = 0;
    start_epoch();
  }

 private:
  void start_epoch() {
    position_ = 0;
    std::iota(order_of_windows_.begin(), order_of_windows_.end(), std::int64_t{0});
    if (order_ == window_order::sequential) return;
    // Fisher-Yates with draws hashed from (seed, epoch, step): epoch e's
    // permutation does not depend on how many windows earlier epochs used.
    const std::uint64_t stream = detail::mix64(seed_ ^ detail::mix64(static_cast<std::uint64_t>(epoch_)));
    for (std::size_t i = order_of_windows_.size(); i > 1; --i) {
      const std::size_t j =
          static_cast<std::size_t>(detail::below(detail::mix64(stream + i), i));
      std::swap(order_of_windows_[i - 1], order_of_windows_[j]);
    }
  }

  std::vector<std::uint16_t> tokens_;
  std::int64_t context_;
  window_order order_;
  std::uint64_t seed_;
  std::string source_;
  std::int64_t windows_ = 0;
  std::vector<std::int64_t> order_of_windows_;
  std::int64_t position_ = 0;
  std::int64_t epoch_ = 0;
};

}  // namespace memo
