// memo/pipeline/fpdt_shuffle.hpp
//
// FPDT's rank-ordinal chunk layout (section 4.1, Figure 6). A sequence of
// T = P u c tokens is cut into P u chunks of c tokens; rank r of P holds
// the u chunks r, r + P, r + 2P, ... (its local chunk j is global chunk
// j P + r). The all-to-all of local chunk j (scatter heads, gather
// sequence) then hands every rank global chunks j P .. j P + P - 1 in rank
// order, which are the contiguous tokens [j P c, (j + 1) P c): the causal
// attention of "chunk group" j needs K/V of groups 0 .. j only, so the
// plain causal mask holds group by group. With a contiguous split (rank r
// holding chunks r u .. r u + u - 1) the all-to-all of local chunk j would
// gather chunks j, j + u, j + 2u, ..., whose mask must be built chunk by
// chunk (the paper's example: T_5 attends to T_0 and T_4 only); letting
// one rank at a time scatter its chunks keeps the order but loads the
// links unevenly (FPDT section 4.1).
//
// `fpdt_layout` maps between a rank's local token order and the global
// order, and shuffles/unshuffles any per-token data (tokens, targets,
// positions, activations of `width` elements per token).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "memo/core/error.hpp"

namespace memo {

class fpdt_layout {
 public:
  /// P ranks, u chunks per rank, c tokens per chunk; throws when a count is
  /// not positive or T = P u c overflows.
  fpdt_layout(std::int64_t ranks, std::int64_t chunks_per_rank, std::int64_t chunk_tokens)
      : ranks_(ranks), chunks_(chunks_per_rank), chunk_(chunk_tokens) {
    expects(ranks >= 1 && chunks_per_rank >= 1 && chunk_tokens >= 1, [&] {
      return "fpdt layout: ranks " + std::to_string(ranks) + ", chunks per rank " + std::to_string(chunks_per_rank) +
             " and chunk tokens " + std::to_string(chunk_tokens) + " must all be positive";
    });
    expects(chunks_per_rank <= INT64_MAX / ranks / chunk_tokens, "fpdt layout: P u c overflows 64 bits");
  }

  /// The layout of a `tokens`-token sequence on `ranks` ranks with chunks of
  /// `chunk_tokens`; throws unless P c divides the sequence.
  static fpdt_layout for_sequence(std::int64_t tokens, std::int64_t ranks, std::int64_t chunk_tokens) {
    expects(ranks >= 1 && chunk_tokens >= 1 && tokens >= 1, [&] {
      return "fpdt layout: sequence " + std::to_string(tokens) + ", ranks " + std::to_string(ranks) + " and chunk " +
             std::to_string(chunk_tokens) + " must be positive";
    });
    expects(chunk_tokens <= tokens / ranks && tokens % (ranks * chunk_tokens) == 0, [&] {
      return "fpdt layout: a sequence of " + std::to_string(tokens) +
             " tokens is not a multiple of ranks x chunk = " + std::to_string(ranks) + " x " +
             std::to_string(chunk_tokens);
    });
    return {ranks, tokens / (ranks * chunk_tokens), chunk_tokens};
  }

  [[nodiscard]] std::int64_t ranks() const noexcept { return ranks_; }
  [[nodiscard]] std::int64_t chunks_per_rank() const noexcept { return chunks_; }
  [[nodiscard]] std::int64_t chunk_tokens() const noexcept { return chunk_; }
  [[nodiscard]] std::int64_t sequence_tokens() const noexcept { return ranks_ * chunks_ * chunk_; }
  [[nodiscard]] std::int64_t local_tokens() const noexcept { return chunks_ * chunk_; }

  /// The global chunk a rank holds as its local chunk j: j P + r.
  [[nodiscard]] std::int64_t global_chunk(std::int64_t rank, std::int64_t local_chunk) const {
    check_rank(rank);
    expects(local_chunk >= 0 && local_chunk < chunks_, [&] {
      return "fpdt layout: local chunk " + std::to_string(local_chunk) + " is outside [0, " + std::to_string(chunks_) +
             ")";
    });
    return local_chunk * ranks_ + rank;
  }
  /// The global position of local token `t` of `rank`.
  [[nodiscard]] std::int64_t global_token(std::int64_t rank, std::int64_t t) const {
    expects(t >= 0 && t < local_tokens(), [&] {
      return "fpdt layout: local token " + std::to_string(t) + " is outside [0, " + std::to_string(local_tokens()) +
             ")";
    });
    return global_chunk(rank, t / chunk_) * chunk_ + t % chunk_;
  }
  /// The contiguous global tokens every rank holds after the all-to-all of
  /// local chunk j: [j P c, (j + 1) P c). j = u (the chunk count) gives
  /// the end of the sequence.
  [[nodiscard]] std::int64_t group_begin(std::int64_t local_chunk) const {
    expects(local_chunk >= 0 && local_chunk <= chunks_, [&] {
      return "fpdt layout: chunk group " + std::to_string(local_chunk) + " is outside [0, " +
             std::to_string(chunks_) + "]";
    });
    return local_chunk * ranks_ * chunk_;
  }

  /// `rank`'s part of `global` (T x width elements) in local order.
  template <class T>
  void shuffle(std::span<const T> global, std::int64_t rank, std::span<T> local, std::int64_t width = 1) const {
    check_spans(global.size(), local.size(), width);
    for_each_chunk(rank, width, [&](std::size_t g, std::size_t l, std::size_t n) {
      for (std::size_t k = 0; k < n; ++k) local[l + k] = global[g + k];
    });
  }
  /// Writes `rank`'s local data back to its positions in `global`.
  template <class T>
  void unshuffle(std::span<const T> local, std::int64_t rank, std::span<T> global, std::int64_t width = 1) const {
    check_spans(global.size(), local.size(), width);
    for_each_chunk(rank, width, [&](std::size_t g, std::size_t l, std::size_t n) {
      for (std::size_t k = 0; k < n; ++k) global[g + k] = local[l + k];
    });
  }

 private:
  void check_rank(std::int64_t rank) const {
    expects(rank >= 0 && rank < ranks_, [&] {
      return "fpdt layout: rank " + std::to_string(rank) + " is outside [0, " + std::to_string(ranks_) + ")";
    });
  }
  void check_spans(std::size_t global, std::size_t local, std::int64_t width) const {
    expects(width >= 1 && sequence_tokens() <= INT64_MAX / width, [&] {
      return "fpdt layout: width " + std::to_string(width) + " must be positive and T x width fit 64 bits";
    });
    const auto want_global = static_cast<std::uint64_t>(sequence_tokens() * width);
    const auto want_local = static_cast<std::uint64_t>(local_tokens() * width);
    expects(global == want_global && local == want_local, [&] {
      return "fpdt layout: spans of " + std::to_string(global) + " (global) and " + std::to_string(local) +
             " (local) elements, expected " + std::to_string(want_global) + " and " + std::to_string(want_local);
    });
  }
  // f(global offset, local offset, elements) for each of the rank's chunks.
  template <class F>
  void for_each_chunk(std::int64_t rank, std::int64_t width, F f) const {
    check_rank(rank);
    const auto n = static_cast<std::size_t>(chunk_ * width);
    for (std::int64_t j = 0; j < chunks_; ++j) {
      f(static_cast<std::size_t>(global_chunk(rank, j)) * n, static_cast<std::size_t>(j) * n, n);
    }
  }

  std::int64_t ranks_, chunks_, chunk_;
};

}  // namespace memo
