// memo/pipeline/sppo_partition.hpp
//
// Splitting one long sequence into N contiguous subsequences (SPPO
// sections 4-5, "FLOPs-based partitioning policy"). Under causal attention
// token t attends to t+1 keys, so a subsequence [a, b) costs
//
//   cost(a, b) = linear_weight * (b - a) + attention_weight * sum_{t=a}^{b-1} (t + 1)
//
// (GEMMs per token plus attention per query-key pair). Equal lengths leave
// the last subsequence the most expensive; the FLOPs-balanced partition
// makes later subsequences shorter so that the most expensive one is as
// cheap as possible.
//
// Guarantees:
//   - `equal_length_partition` gives lengths differing by at most one token
//     (the longer ones first);
//   - `flops_balanced_partition` returns an integer partition into exactly N
//     non-empty subsequences minimising max cost(a, b) over all such
//     partitions, optionally with every subsequence at most `max_tokens`
//     long (the memory-aware bound: a subsequence's activations must fit).
//     Costs are exact 64-bit integers, so "minimal" is exact; weights are
//     relative (e.g. 6h : 1 for a layer of hidden size h, see
//     `causal_cost_weights`).
//   - bad input (N < 1, N > length, zero weights, a max_tokens that cannot
//     cover the sequence, a cost beyond 2^63) is a memo::error naming the value.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "memo/core/error.hpp"

namespace memo {

/// Relative cost of one token's GEMMs and of one (query, key) attention pair.
struct causal_cost_weights {
  std::uint64_t linear_weight = 1;     ///< per token
  std::uint64_t attention_weight = 0;  ///< per causal (query, key) pair

  /// Weights of a transformer layer of hidden size `hidden`: per token the
  /// GEMMs cost 24 h^2 FLOPs (QKV, output, 4h MLP, fwd), per pair the
  /// attention scores and values 4 h; divided by 4h this is 6h : 1.
  static causal_cost_weights for_hidden(std::uint64_t hidden) {
    expects(hidden > 0, "causal_cost_weights::for_hidden: hidden size must be positive, got 0");
    return {6 * hidden, 1};
  }
};

/// N contiguous subsequences of a sequence: boundaries[k] .. boundaries[k+1].
struct sequence_partition {
  std::vector<std::uint64_t> boundaries;  ///< size N+1, boundaries[0] = 0, back() = length

  [[nodiscard]] std::size_t count() const { return boundaries.empty() ? 0 : boundaries.size() - 1; }
  [[nodiscard]] std::uint64_t length() const { return boundaries.empty() ? 0 : boundaries.back(); }
  [[nodiscard]] std::uint64_t begin(std::size_t k) const { return boundaries.at(k); }
  [[nodiscard]] std::uint64_t end(std::size_t k) const { return boundaries.at(k + 1); }
  [[nodiscard]] std::uint64_t tokens(std::size_t k) const { return end(k) - begin(k); }
  [[nodiscard]] std::vector<std::uint64_t> lengths() const {
    std::vector<std::uint64_t> out;
    for (std::size_t k = 0; k < count(); ++k) out.push_back(tokens(k));
    return out;
  }
  friend bool operator==(const sequence_partition&, const sequence_partition&) = default;
};

namespace detail {

inline std::uint64_t checked_cost_mul(std::uint64_t a, std::uint64_t b, const char* what,
                                      const char* remedy = "use smaller relative weights") {
  expects_countable(a == 0 || b <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) / a, [&] {
    return std::string("sppo partition: ") + what + " overflows 63 bits (" + std::to_string(a) + " * " +
           std::to_string(b) + "); " + remedy;
  });
  return a * b;
}

/// sum_{t=a}^{b-1} (t + 1) = (b (b+1) - a (a+1)) / 2.
inline std::uint64_t causal_pairs(std::uint64_t a, std::uint64_t b) {
  auto tri = [](std::uint64_t x) {
    expects_countable(x < std::numeric_limits<std::uint64_t>::max(),
                      [] { return std::string("sppo partition: a token position overflows"); });
    constexpr const char* what = "the causal pair count of a position";
    constexpr const char* remedy = "the sequence is too long for exact costs";
    return x % 2 == 0 ? checked_cost_mul(x / 2, x + 1, what, remedy) : checked_cost_mul(x, (x + 1) / 2, what, remedy);
  };
  return tri(b) - tri(a);
}

inline void check_partition_input(std::uint64_t length, std::size_t n, const char* where) {
  expects(n >= 1, [&] { return std::string(where) + ": subsequence count must be >= 1, got 0"; });
  expects(length >= n, [&] {
    return std::string(where) + ": sequence of " + std::to_string(length) + " tokens cannot be split into " +
           std::to_string(n) + " non-empty subsequences";
  });
}

}  // namespace detail

/// Cost of subsequence [a, b) under `weights` (exact).
inline std::uint64_t causal_cost(std::uint64_t a, std::uint64_t b, const causal_cost_weights& weights) {
  expects(a <= b, [&] { return "causal_cost: begin " + std::to_string(a) + " after end " + std::to_string(b); });
  const std::uint64_t linear = detail::checked_cost_mul(weights.linear_weight, b - a, "linear cost");
  const std::uint64_t attention = detail::checked_cost_mul(weights.attention_weight, detail::causal_pairs(a, b),
                                                      "attention cost");
  expects_countable(linear <= std::numeric_limits<std::uint64_t>::max() / 2 - attention,
                    [] { return std::string("causal_cost: cost overflows"); });
  return linear + attention;
}

/// The largest subsequence cost of `partition`.
inline std::uint64_t max_cost(const sequence_partition& partition, const causal_cost_weights& weights) {
  std::uint64_t worst = 0;
  for (std::size_t k = 0; k < partition.count(); ++k) {
    worst = std::max(worst, causal_cost(partition.begin(k), partition.end(k), weights));
  }
  return worst;
}

/// `n` subsequences of equal length (+-1 token, longer first).
inline sequence_partition equal_length_partition(std::uint64_t length, std::size_t n) {
  detail::check_partition_input(length, n, "equal_length_partition");
  sequence_partition out;
  out.boundaries.push_back(0);
  const std::uint64_t base = length / n, extra = length % n;
  for (std::size_t k = 0; k < n; ++k) out.boundaries.push_back(out.boundaries.back() + base + (k < extra ? 1 : 0));
  return out;
}

namespace detail {

/// Greedy cover of [0, length) with parts of cost <= limit and length <=
/// max_tokens, boundaries at multiples of `unit`, each part extended as far
/// as possible. Cost(a, b) grows with b and shrinks with a, so greedy uses
/// the fewest parts; returns false when more than `n` are needed.
inline bool greedy_cover(std::uint64_t length, std::size_t n, std::uint64_t limit, std::uint64_t max_tokens,
                         const causal_cost_weights& w, std::vector<std::uint64_t>& boundaries,
                         std::uint64_t unit = 1) {
  boundaries.assign(1, 0);
  std::uint64_t a = 0;  // in units
  const std::uint64_t units = length / unit, max_units = max_tokens / unit;
  const double linear = static_cast<double>(w.linear_weight), pairs = static_cast<double>(w.attention_weight);
  while (a < units) {
    if (boundaries.size() > n) return false;
    // Largest b in (a, min(units, a + max_units)] with cost(a, b) <= limit,
    // by bisection over a bracket around the real root of
    // L (x - a) + A (x (x + 1) - a (a + 1)) / 2 = limit (x in tokens), which
    // holds it unless rounding moved the root by more than a unit; then
    // over the whole range.
    std::uint64_t lo = a, hi = std::min(units, a + max_units);
    const auto fits = [&](std::uint64_t b) { return causal_cost(a * unit, b * unit, w) <= limit; };
    {
      const double at = static_cast<double>(a * unit);
      const double budget = linear * at + pairs * at * (at + 1) / 2 + static_cast<double>(limit);
      const double p = pairs / 2 + linear;
      const double x = pairs == 0 ? budget / linear : (std::sqrt(p * p + 2 * pairs * budget) - p) / pairs;
      const double guess = std::floor(x / static_cast<double>(unit));
      if (std::isfinite(guess) && guess >= static_cast<double>(lo) && guess <= static_cast<double>(hi)) {
        const auto g = static_cast<std::uint64_t>(guess);
        const std::uint64_t below = g > lo + 2 ? g - 2 : lo, above = std::min(hi, g + 2);
        if ((below == lo || fits(below)) && (above == hi || !fits(above + 1))) lo = below, hi = above;
      }
    }
    while (lo < hi) {
      const std::uint64_t mid = lo + (hi - lo + 1) / 2;
      if (fits(mid)) lo = mid; else hi = mid - 1;
    }
    if (lo == a) return false;
    boundaries.push_back(lo * unit);
    a = lo;
  }
  return boundaries.size() - 1 <= n;
}

}  // namespace detail

/// The exact min-max-cost partition of `length` tokens into `n` non-empty
/// subsequences, each at most `max_tokens` long (0 = no bound), every
/// boundary a multiple of `unit` tokens (which must divide `length`): a
/// subsequence spread over a sequence-parallel group is whole chunk groups
/// of the group (FPDT's P c tokens).
inline sequence_partition flops_balanced_partition(std::uint64_t length, std::size_t n,
                                                   const causal_cost_weights& weights,
                                                   std::uint64_t max_tokens = 0, std::uint64_t unit = 1) {
  detail::check_partition_input(length, n, "flops_balanced_partition");
  expects(unit >= 1 && length % unit == 0 && length / unit >= n, [&] {
    return "flops_balanced_partition: " + std::to_string(length) + " tokens in units of " + std::to_string(unit) +
           " cannot be split into " + std::to_string(n) + " non-empty subsequences of whole units";
  });
  expects(weights.linear_weight > 0 || weights.attention_weight > 0,
          "flops_balanced_partition: both cost weights are zero; every partition would cost nothing");
  // A bound beyond the sequence bounds nothing (and keeps the sums below in range).
  if (max_tokens == 0 || max_tokens > length) max_tokens = length;
  max_tokens -= max_tokens % unit;
  expects(max_tokens >= length / n + (length % n != 0 ? 1 : 0), [&] {
    return "flops_balanced_partition: max_tokens " + std::to_string(max_tokens) + " (in whole units of " +
           std::to_string(unit) + ") x " + std::to_string(n) + " subsequences cannot cover " +
           std::to_string(length) + " tokens";
  });
  std::vector<std::uint64_t> boundaries;
  std::uint64_t lo = 1, hi = causal_cost(0, length, weights);
  while (lo < hi) {
    const std::uint64_t mid = lo + (hi - lo) / 2;
    if (detail::greedy_cover(length, n, mid, max_tokens, weights, boundaries, unit)) hi = mid; else lo = mid + 1;
  }
  const bool ok = detail::greedy_cover(length, n, lo, max_tokens, weights, boundaries, unit);
  expects(ok, "flops_balanced_partition: internal error, the optimal bound does not cover the sequence");
  // Greedy may use fewer than n parts; splitting the longest part in two
  // (at a unit) never raises the maximum (a sub-range costs no more than
  // its range). length / unit >= n, so a part of two units or more exists.
  while (boundaries.size() - 1 < n) {
    std::size_t widest = 0;
    for (std::size_t k = 1; k + 1 < boundaries.size(); ++k) {
      if (boundaries[k + 1] - boundaries[k] > boundaries[widest + 1] - boundaries[widest]) widest = k;
    }
    const std::uint64_t mid = boundaries[widest] + (boundaries[widest + 1] - boundaries[widest]) / unit / 2 * unit;
    boundaries.insert(boundaries.begin() + static_cast<std::ptrdiff_t>(widest) + 1, mid);
  }
  return sequence_partition{std::move(boundaries)};
}

}  // namespace memo
