// memo/model/builtin_data.hpp
//
// Built-in training data that can only be predicted with long-range
// attention: the copy task. It lets a trainer show, without any download,
// that a model trained on very long sequences uses their length.
//
// A sequence of T tokens (the context length) is split in two halves. The
// first h = ceil(T / 2) tokens are drawn uniformly from a small vocabulary
// [0, vocab); the remaining T - h tokens repeat the first ones:
//
//   token[h + i] = token[i]          for 0 <= i < T - h
//
// so every token of the second half is a copy of the token h positions
// earlier, thousands of tokens back when T is in the thousands. Nothing
// nearer predicts it: its neighbours are independent random tokens.
//
// In a training window (inputs = tokens [0, T), targets = the next tokens
// [1, T]), target t is token t + 1. Targets t in [h - 1, T - 1) are copies
// and can be predicted exactly; `copy_task_predictable_targets` returns that
// range so a trainer can report the loss on it separately (it falls towards 0
// once attention reaches back h tokens, while the loss on the random targets
// stays at log(vocab)). The last target, t = T - 1, is the first token of the
// next sequence and is random.
//
// Sequences are deterministic functions of (seed, sequence index): any
// sequence can be generated on its own, in any order, on any machine.
// `copy_task_tokens` lays n sequences back to back plus the first token of
// sequence n, which is exactly what `token_window_loader` with the same
// context cuts back into the n sequences (window k = sequence k, its last
// target = the first token of sequence k + 1); `write_token_file` stores it
// in llm.c's format.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "memo/core/error.hpp"
#include "memo/model/token_data.hpp"

namespace memo {

/// The copy task's parameters.
struct copy_task {
  std::int64_t context = 0;  // T: tokens per sequence, >= 2
  std::int32_t vocab = 0;    // ids are drawn from [0, vocab), 2 <= vocab <= 65536
  std::uint64_t seed = 0;

  /// Throws `memo::error` naming the field and its bound.
  void validate() const {
    expects(context >= 2, [&] {
      return "copy task: context " + std::to_string(context) +
             " is too short, needs at least 2 tokens (one to copy, one copy)";
    });
    expects(vocab >= 2 && vocab <= 65536, [&] {
      return "copy task: vocabulary " + std::to_string(vocab) +
             " must lie in [2, 65536] (token ids are uint16)";
    });
  }
  /// h: the length of the random first half, and the distance of every copy.
  [[nodiscard]] std::int64_t first_half() const noexcept { return (context + 1) / 2; }
};

/// A half-open range [begin, end) of positions.
struct position_range {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  [[nodiscard]] std::int64_t size() const noexcept { return end - begin; }
  [[nodiscard]] bool contains(std::int64_t t) const noexcept { return t >= begin && t < end; }
};

/// The target positions of a window of the copy task that repeat an earlier
/// token: [h - 1, T - 1). Never empty for T >= 2.
inline position_range copy_task_predictable_targets(const copy_task& task) {
  task.validate();
  return {task.first_half() - 1, task.context - 1};
}

/// Writes sequence `index` of `task` (T tokens) into `out`.
inline void fill_copy_task_sequence(const copy_task& task, std::uint64_t index,
                                    std::span<std::uint16_t> out) {
  task.validate();
  expects(out.size() == static_cast<std::uint64_t>(task.context), [&] {
    return "copy task: a sequence has " + std::to_string(task.context) +
           " tokens, the span given holds " + std::to_string(out.size());
  });
  const std::uint64_t stream = detail::mix64(task.seed ^ detail::mix64(index));
  const auto h = static_cast<std::size_t>(task.first_half());
  for (std::size_t i = 0; i < h; ++i) {
    out[i] = static_cast<std::uint16_t>(
        detail::below(detail::mix64(stream + i), static_cast<std::uint64_t>(task.vocab)));
  }
  for (std::size_t i = h; i < out.size(); ++i) out[i] = out[i - h];
}

/// `sequences` sequences of `task` back to back, then the first token of the
/// next one: sequences * T + 1 tokens, ready for `token_window_loader` with
/// context T or for `write_token_file`.
inline std::vector<std::uint16_t> copy_task_tokens(const copy_task& task, std::int64_t sequences) {
  task.validate();
  const std::uint64_t T = static_cast<std::uint64_t>(task.context);
  expects(sequences >= 1 && static_cast<std::uint64_t>(sequences) <=
                                (static_cast<std::uint64_t>(token_file_max_tokens) - 1) / T,
          [&] {
            return "copy task: " + std::to_string(sequences) + " sequences of " +
                   std::to_string(T) + " tokens: must be at least 1 and fit one token file (" +
                   std::to_string(token_file_max_tokens) + " tokens)";
          });
  const auto n = static_cast<std::uint64_t>(sequences);
  std::vector<std::uint16_t> tokens(static_cast<std::size_t>(n * T + 1));
  for (std::uint64_t s = 0; s < n; ++s) {
    fill_copy_task_sequence(task, s, std::span<std::uint16_t>(tokens.data() + s * T, T));
  }
  std::vector<std::uint16_t> next(static_cast<std::size_t>(T));
  fill_copy_task_sequence(task, n, next);
  tokens.back() = next.front();
  return tokens;
}

}  // namespace memo
