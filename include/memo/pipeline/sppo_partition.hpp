// memo/pipeline/sppo_partition.hpp
//
// Splitting one sequence into N subsequences (SPPO sections 4 and 6, its
// "FLOPs-based partitioning policy").
//
// With causal attention a token at position t attends to t + 1 tokens, so
// the subsequence [a, b) costs
//
//   cost(a, b) = linear (b - a) + pair (b (b + 1) - a (a + 1)) / 2
//
// FLOPs, `linear` being the per-token FLOPs of the projections and the MLP
// and `pair` the FLOPs of one (query, key) pair. Equal-length subsequences
// therefore cost more the later they come; a pipeline runs at the pace of
// its most expensive subsequence, so SPPO shortens the later ones until the
// costs balance.
//
//   equal_partition(S, N)          lengths differing by at most one token
//   flops_balanced_partition(...)  the contiguous split into N non-empty
//                                  subsequences whose largest cost is the
//                                  smallest possible (exact, not a rounding
//                                  of a continuous solution)
//
// A partition is returned as its N + 1 boundaries 0 = b_0 < b_1 < ... < b_N
// = S; subsequence i is [b_i, b_{i+1}).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "memo/core/error.hpp"

namespace memo {

/// Per-token and per-pair FLOPs of one layer (any consistent unit).
struct causal_cost_model {
  double linear = 0.0;  ///< FLOPs per token outside attention's score/value products
  double pair = 0.0;    ///< FLOPs per (query, key) pair of causal attention

  /// The cost of tokens [begin, end) of a sequence.
  [[nodiscard]] double cost(std::int64_t begin, std::int64_t end) const {
    const double a = static_cast<double>(begin), b = static_cast<double>(end);
    return linear * (b - a) + pair * (b * (b + 1.0) - a * (a + 1.0)) / 2.0;
  }
};

/// N + 1 boundaries of a partition of [0, S).
struct sequence_partition {
  std::vector<std::int64_t> bounds;

  [[nodiscard]] std::size_t count() const noexcept { return bounds.empty() ? 0 : bounds.size() - 1; }
  [[nodiscard]] std::int64_t begin(std::size_t i) const { return bounds.at(i); }
  [[nodiscard]] std::int64_t end(std::size_t i) const { return bounds.at(i + 1); }
  [[nodiscard]] std::int64_t length(std::size_t i) const { return end(i) - begin(i); }
  /// The largest cost of one subsequence under `model`.
  [[nodiscard]] double max_cost(const causal_cost_model& model) const {
    double worst = 0.0;
    for (std::size_t i = 0; i < count(); ++i) worst = std::max(worst, model.cost(begin(i), end(i)));
    return worst;
  }
};

namespace detail {

inline void check_partition_request(std::int64_t tokens, std::int64_t parts) {
  expects(parts >= 1 && tokens >= parts, [&] {
    return "sequence partition: " + std::to_string(tokens) + " tokens cannot be split into " + std::to_string(parts) +
           " non-empty subsequences (needs 1 <= N <= tokens)";
  });
}

}  // namespace detail

/// N subsequences whose lengths differ by at most one (the longer ones first).
inline sequence_partition equal_partition(std::int64_t tokens, std::int64_t parts) {
  detail::check_partition_request(tokens, parts);
  sequence_partition p;
  p.bounds.reserve(static_cast<std::size_t>(parts) + 1);
  p.bounds.push_back(0);
  const std::int64_t base = tokens / parts, extra = tokens % parts;
  for (std::int64_t i = 0; i < parts; ++i) p.bounds.push_back(p.bounds.back() + base + (i < extra ? 1 : 0));
  return p;
}

/// The contiguous split into `parts` non-empty subsequences minimising the
/// largest `model.cost`. Exact: the optimum is the cost of some subsequence
/// [a, b); for a bound C the greedy "longest prefix within C" split uses the
/// fewest parts (cost grows with b and shrinks with a), so the smallest
/// feasible C is found by bisection on C and then made exact by taking the
/// largest part cost of the split it gives.
inline sequence_partition flops_balanced_partition(std::int64_t tokens, std::int64_t parts,
                                                   const causal_cost_model& model) {
  detail::check_partition_request(tokens, parts);
  expects(model.linear >= 0.0 && model.pair >= 0.0 && model.linear + model.pair > 0.0, [&] {
    return "sequence partition: cost model (linear " + std::to_string(model.linear) + ", pair " +
           std::to_string(model.pair) + ") needs non-negative costs, not both zero";
  });
  // The end of the longest part starting at `a` whose cost stays within c
  // (at least a + 1: a single token is always a part).
  auto reach = [&](std::int64_t a, double c) {
    // cost(a, b) <= c is a quadratic in b: start from its root, then a few
    // exact steps either way (rounding), then bisection as the fallback.
    const double budget = c + model.cost(0, a);
    double guess = 0.0;
    if (model.pair > 0.0) {
      // pair/2 (b^2 + b) + linear b = budget
      const double qa = model.pair / 2.0, qb = model.pair / 2.0 + model.linear;
      guess = (-qb + std::sqrt(qb * qb + 4.0 * qa * budget)) / (2.0 * qa);
    } else {
      guess = budget / model.linear;
    }
    std::int64_t b = std::clamp(static_cast<std::int64_t>(guess), a + 1, tokens);
    for (int step = 0; step < 4 && b < tokens && model.cost(a, b + 1) <= c; ++step) ++b;
    for (int step = 0; step < 4 && b > a + 1 && model.cost(a, b) > c; ++step) --b;
    if ((b == tokens || model.cost(a, b + 1) > c) && (b == a + 1 || model.cost(a, b) <= c)) return b;
    std::int64_t lo = a + 1, hi = tokens;
    while (lo < hi) {
      const std::int64_t mid = lo + (hi - lo + 1) / 2;
      if (model.cost(a, mid) <= c) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    return lo;
  };
  auto parts_needed = [&](double c) {
    std::int64_t count = 0;
    for (std::int64_t a = 0; a < tokens; a = reach(a, c)) ++count;
    return count;
  };
  double lo = 0.0, hi = model.cost(0, tokens);
  for (int iteration = 0; iteration < 200 && lo < hi; ++iteration) {
    const double mid = lo + (hi - lo) / 2;
    if (mid <= lo || mid >= hi) break;
    if (parts_needed(mid) <= parts) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  // Greedy split at hi, then split the longest parts until there are
  // exactly `parts` (splitting never raises the largest cost).
  std::vector<std::int64_t> bounds{0};
  for (std::int64_t a = 0; a < tokens;) bounds.push_back(a = reach(a, hi));
  while (static_cast<std::int64_t>(bounds.size()) - 1 < parts) {
    std::size_t longest = 0;
    for (std::size_t i = 0; i + 1 < bounds.size(); ++i) {
      if (bounds[i + 1] - bounds[i] > bounds[longest + 1] - bounds[longest]) longest = i;
    }
    bounds.insert(bounds.begin() + static_cast<std::ptrdiff_t>(longest) + 1,
                  bounds[longest] + (bounds[longest + 1] - bounds[longest]) / 2);
  }
  return sequence_partition{std::move(bounds)};
}

}  // namespace memo
