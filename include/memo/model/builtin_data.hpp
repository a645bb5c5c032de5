// memo/model/builtin_data.hpp
//
// Built-in training data that can only be predicted with long-range
// attention. It lets a trainer show, without any download, that a model
// trained on very long sequences uses their length. Two tasks:
//
// The recall task (`recall_task`, what `train_gpt` trains by default). Every
// sequence binds K keys to values drawn at random, f: [0, K) -> [0, V), a new
// binding per sequence. Its first half, h = ceil(T / 2) tokens, states the
// binding: each token is a *fact* naming one key and its value, the key drawn
// uniformly. Its second half asks: a *query* token naming a key, then the
// *answer* token naming the key's value, and again:
//
//   fact(k, f(k)) ... fact(k', f(k'))  |  query(k) answer(f(k)) query(k'') ...
//   <------------- h facts ---------->    <-------- T - h tokens ------->
//
// Token ids: fact(k, v) = k V + v, query(k) = K V + k, answer(v) = K V + K + v,
// so the vocabulary has K V + K + V ids. An answer follows from its query and
// a fact of the first half, nothing else in the first half's tail or the
// query's neighbourhood: the second half never states a fact, and an answer
// of the second half only repeats the fact for a model that links a query to
// the token after it (two attention hops, where reading the fact is one). A
// query at position t reaches at least t - h + 1 tokens back to the nearest
// fact, so the answers of the last quarter of a 4096-token sequence are over
// 1024 tokens from any fact. Unlike the copy task below, every fact holds one
// of only K bindings, so a model learns to match a query to its facts in a
// few hundred steps even at a context of thousands of tokens (MQAR, the
// multi-query associative recall of the long-context literature, with facts
// as single tokens).
//
// The copy task (`copy_task`). The first h tokens are drawn uniformly from a
// small vocabulary [0, vocab); the remaining T - h tokens repeat them:
//
//   token[h + i] = token[i]          for 0 <= i < T - h
//
// so every token of the second half is a copy of the token h positions
// earlier. Nothing nearer predicts it: its neighbours are independent random
// tokens. A model has to learn to attend exactly h positions back from no
// signal at all (attention at initialisation spreads over thousands of
// positions), which small GPT-2s do after thousands of steps at a context of
// 128 and not within minutes at thousands of tokens.
//
// In a training window (inputs = tokens [0, T), targets = the next tokens
// [1, T]), target t is token t + 1. The predictable targets of each task are
// a `position_range` (strided for the recall task: the answers), so a trainer
// can report the loss on them separately: it falls towards 0 once attention
// reaches back far enough, while the loss on the random targets stays at the
// entropy of the draws. The last target, t = T - 1, is the first token of
// the next sequence and is random.
//
// Sequences are deterministic functions of (seed, sequence index): any
// sequence can be generated on its own, in any order, on any machine.
// `copy_task_tokens` and `recall_task_tokens` lay n sequences back to back
// plus the first token of sequence n, which is exactly what
// `token_window_loader` with the same context cuts back into the n sequences
// (window k = sequence k, its last target = the first token of sequence
// k + 1); `write_token_file` stores them in llm.c's format.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
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

/// The positions begin, begin + stride, ... below end (a half-open range
/// [begin, end) when stride is 1).
struct position_range {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  std::int64_t stride = 1;  // >= 1
  /// How many positions: 0 for an empty range (or a stride below 1).
  [[nodiscard]] std::int64_t size() const noexcept {
    return end <= begin || stride < 1 ? 0 : (end - begin - 1) / stride + 1;
  }
  [[nodiscard]] bool contains(std::int64_t t) const noexcept {
    return stride >= 1 && t >= begin && t < end && (t - begin) % stride == 0;
  }
  /// The last position, for a range that is not empty.
  [[nodiscard]] std::int64_t last() const noexcept { return begin + (size() - 1) * stride; }
};

/// The mean of `values` (per-token losses) over the positions of `range`;
/// `who` names the caller in the error for an empty range or one outside
/// the values.
inline double mean_over(std::span<const float> values, position_range range, std::string_view who) {
  const auto n = static_cast<std::int64_t>(values.size());
  expects(range.stride >= 1 && range.begin >= 0 && range.size() > 0 && range.end <= n, [&] {
    return std::string(who) + ": range [" + std::to_string(range.begin) + ", " + std::to_string(range.end) +
           ") with stride " + std::to_string(range.stride) + " is empty or outside the context [0, " +
           std::to_string(n) + ")";
  });
  // By count: begin + k stride stays below end, where t += stride could overflow.
  double sum = 0;
  const std::int64_t count = range.size();
  for (std::int64_t k = 0; k < count; ++k) sum += values[static_cast<std::size_t>(range.begin + k * range.stride)];
  return sum / static_cast<double>(count);
}

namespace detail {

/// `sequences` sequences of `context` tokens written by `fill(index, span)`
/// back to back, then the first token of the next one. `what` names the task
/// in errors.
template <class Fill>
std::vector<std::uint16_t> sequences_back_to_back(const char* what, std::int64_t context,
                                                  std::int64_t sequences, Fill fill) {
  const auto T = static_cast<std::uint64_t>(context);
  expects(sequences >= 1 && static_cast<std::uint64_t>(sequences) <=
                                (static_cast<std::uint64_t>(token_file_max_tokens) - 1) / T,
          [&] {
            return std::string(what) + ": " + std::to_string(sequences) + " sequences of " +
                   std::to_string(T) + " tokens: must be at least 1 and fit one token file (" +
                   std::to_string(token_file_max_tokens) + " tokens)";
          });
  const auto n = static_cast<std::uint64_t>(sequences);
  std::vector<std::uint16_t> tokens(static_cast<std::size_t>(n * T + 1));
  for (std::uint64_t s = 0; s < n; ++s) fill(s, std::span<std::uint16_t>(tokens.data() + s * T, T));
  std::vector<std::uint16_t> next(static_cast<std::size_t>(T));
  fill(n, std::span<std::uint16_t>(next));
  tokens.back() = next.front();
  return tokens;
}

/// The random stream of sequence `index` of a task seeded with `seed`.
constexpr std::uint64_t sequence_stream(std::uint64_t seed, std::uint64_t index) noexcept {
  return mix64(seed ^ mix64(index));
}

/// Checks that `out` holds one sequence of `context` tokens.
inline void expect_sequence_span(const char* what, std::int64_t context, std::size_t size) {
  expects(size == static_cast<std::uint64_t>(context), [&] {
    return std::string(what) + ": a sequence has " + std::to_string(context) +
           " tokens, the span given holds " + std::to_string(size);
  });
}

}  // namespace detail

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
  detail::expect_sequence_span("copy task", task.context, out.size());
  const std::uint64_t stream = detail::sequence_stream(task.seed, index);
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
  return detail::sequences_back_to_back(
      "copy task", task.context, sequences,
      [&](std::uint64_t index, std::span<std::uint16_t> out) { fill_copy_task_sequence(task, index, out); });
}

/// The recall task's parameters (see the top of this file).
struct recall_task {
  std::int64_t context = 0;  // T: tokens per sequence, >= 4
  std::int32_t keys = 0;     // K >= 1
  std::int32_t values = 0;   // V >= 2
  std::uint64_t seed = 0;

  /// K V + K + V: facts, queries and answers.
  [[nodiscard]] std::int64_t vocab() const noexcept {
    return std::int64_t{keys} * values + keys + values;
  }
  /// Throws `memo::error` naming the field and its bound.
  void validate() const {
    expects(context >= 4, [&] {
      return "recall task: context " + std::to_string(context) +
             " is too short, needs at least 4 tokens (two facts, a query and its answer)";
    });
    expects(keys >= 1 && values >= 2, [&] {
      return "recall task: " + std::to_string(keys) + " keys and " + std::to_string(values) +
             " values: needs at least 1 key and 2 values";
    });
    expects(vocab() <= 65536, [&] {
      return "recall task: " + std::to_string(keys) + " keys and " + std::to_string(values) +
             " values need " + std::to_string(vocab()) +
             " token ids (K V + K + V), more than 65536 (token ids are uint16)";
    });
  }
  /// h: the length of the first half, the facts.
  [[nodiscard]] std::int64_t first_half() const noexcept { return (context + 1) / 2; }
  [[nodiscard]] std::uint16_t fact(std::int32_t key, std::int32_t value) const noexcept {
    return static_cast<std::uint16_t>(std::int64_t{key} * values + value);
  }
  [[nodiscard]] std::uint16_t query(std::int32_t key) const noexcept {
    return static_cast<std::uint16_t>(std::int64_t{keys} * values + key);
  }
  [[nodiscard]] std::uint16_t answer(std::int32_t value) const noexcept {
    return static_cast<std::uint16_t>(std::int64_t{keys} * values + keys + value);
  }
};

/// The targets that are answers: every other position from h, the queries'
/// positions, below T - 1. Not empty (T >= 4).
inline position_range recall_task_answer_targets(const recall_task& task) {
  task.validate();
  return {task.first_half(), task.context - 1, 2};
}

/// The answers of the second half's second half: their queries are at least
/// (T - h) / 2 + 1 tokens after the last fact. Not empty for T >= 8.
inline position_range recall_task_far_answer_targets(const recall_task& task) {
  task.validate();
  const std::int64_t h = task.first_half();
  std::int64_t begin = h + (task.context - h) / 2;
  begin += (begin - h) % 2;  // a query's position
  return {begin, task.context - 1, 2};
}

/// The answers' expected loss (nats) for a model that has learned which
/// values the sequence's binding uses and how often, but not which key has
/// which: it predicts value v with probability (keys bound to v) / K. That
/// needs no key-specific recall (attending evenly over the facts, or over
/// earlier answers, gives it), so only an answer loss below this figure
/// shows a query matched to its own key's facts. For key k, the number of
/// keys sharing its value is 1 + B with B ~ Binomial(K - 1, 1 / V), so the
/// loss is E[log(K / (1 + B))] (0.9177 for K = V = 4, against log V =
/// 1.3863 for a model that knows nothing of the sequence).
inline double recall_task_frequency_loss(const recall_task& task) {
  task.validate();
  // The binomial weights in logs, term by term (no lgamma: it writes the
  // global signgam, a race between threads).
  const double K = task.keys, p = 1.0 / task.values;
  const double log_odds = std::log(p) - std::log1p(-p);
  double log_pmf = (K - 1) * std::log1p(-p);  // b = 0
  double loss = 0;
  for (std::int32_t b = 0; b < task.keys; ++b) {
    loss += std::exp(log_pmf) * std::log(K / (1.0 + b));
    log_pmf += std::log((K - 1 - b) / (b + 1.0)) + log_odds;  // to b + 1 (unused after the last)
  }
  return loss;
}

/// Writes sequence `index` of `task` (T tokens) into `out`.
inline void fill_recall_task_sequence(const recall_task& task, std::uint64_t index,
                                      std::span<std::uint16_t> out) {
  task.validate();
  detail::expect_sequence_span("recall task", task.context, out.size());
  const std::uint64_t stream = detail::sequence_stream(task.seed, index);
  std::uint64_t draw = 0;
  auto below = [&](std::int32_t bound) {
    return static_cast<std::int32_t>(
        detail::below(detail::mix64(stream + draw++), static_cast<std::uint64_t>(bound)));
  };
  std::vector<std::int32_t> binding(static_cast<std::size_t>(task.keys));
  for (auto& value : binding) value = below(task.values);
  const auto h = static_cast<std::size_t>(task.first_half());
  for (std::size_t i = 0; i < h; ++i) {
    const std::int32_t key = below(task.keys);
    out[i] = task.fact(key, binding[static_cast<std::size_t>(key)]);
  }
  for (std::size_t i = h; i < out.size(); i += 2) {
    const std::int32_t key = below(task.keys);
    out[i] = task.query(key);
    if (i + 1 < out.size()) out[i + 1] = task.answer(binding[static_cast<std::size_t>(key)]);
  }
}

/// The training window `index` of a task's token stream, generated on its
/// own: inputs = sequence `index`, targets = the inputs shifted by one, the
/// last target the first token of sequence `index` + 1. Equal to window
/// `index` that `token_window_loader` cuts (in order) from the task's tokens,
/// without materialising them. `Task` is `copy_task` or `recall_task`.
template <class Task>
void fill_task_window(const Task& task, std::uint64_t index, std::span<std::int32_t> inputs,
                      std::span<std::int32_t> targets) {
  task.validate();
  const auto T = static_cast<std::size_t>(task.context);
  expects(inputs.size() == T && targets.size() == T, [&] {
    return "built-in task: a window has " + std::to_string(T) + " inputs and targets, the spans hold " +
           std::to_string(inputs.size()) + " and " + std::to_string(targets.size());
  });
  std::vector<std::uint16_t> tokens(T), next(T);
  auto fill = [&](std::uint64_t i, std::span<std::uint16_t> out) {
    if constexpr (std::is_same_v<Task, copy_task>) {
      fill_copy_task_sequence(task, i, out);
    } else {
      static_assert(std::is_same_v<Task, recall_task>, "fill_task_window: Task is copy_task or recall_task");
      fill_recall_task_sequence(task, i, out);
    }
  };
  fill(index, tokens);
  fill(index + 1, next);
  for (std::size_t t = 0; t < T; ++t) {
    inputs[t] = tokens[t];
    targets[t] = t + 1 < T ? tokens[t + 1] : next.front();
  }
}

/// `sequences` sequences of `task` back to back, then the first token of the
/// next one (as `copy_task_tokens`).
inline std::vector<std::uint16_t> recall_task_tokens(const recall_task& task, std::int64_t sequences) {
  task.validate();
  return detail::sequences_back_to_back(
      "recall task", task.context, sequences,
      [&](std::uint64_t index, std::span<std::uint16_t> out) { fill_recall_task_sequence(task, index, out); });
}

}  // namespace memo
