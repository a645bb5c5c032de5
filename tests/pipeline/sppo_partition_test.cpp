#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "memo/pipeline/sppo_partition.hpp"

namespace {

// Independent reference: fp-free brute force over every placement of n-1
// cut points, cost summed token by token.
std::uint64_t naive_cost(std::uint64_t a, std::uint64_t b, const memo::causal_cost_weights& w) {
  std::uint64_t c = 0;
  for (std::uint64_t t = a; t < b; ++t) c += w.linear_weight + w.attention_weight * (t + 1);
  return c;
}

void brute(std::uint64_t length, std::size_t n, std::uint64_t max_tokens, const memo::causal_cost_weights& w,
           std::uint64_t start, std::size_t left, std::uint64_t worst, std::uint64_t& best) {
  if (left == 1) {
    if (length - start == 0 || length - start > max_tokens) return;
    best = std::min(best, std::max(worst, naive_cost(start, length, w)));
    return;
  }
  for (std::uint64_t end = start + 1; end < length; ++end) {
    if (end - start > max_tokens) break;
    brute(length, n, max_tokens, w, end, left - 1, std::max(worst, naive_cost(start, end, w)), best);
  }
}

}  // namespace

TEST_CASE("sppo_partition: equal length splits differ by at most one token") {
  const auto p = memo::equal_length_partition(10, 4);
  CHECK(p.lengths() == std::vector<std::uint64_t>{3, 3, 2, 2});
  CHECK(p.length() == 10);
}

TEST_CASE("sppo_partition: causal cost matches token-by-token sum") {
  const memo::causal_cost_weights w{7, 3};
  for (std::uint64_t a = 0; a < 20; ++a)
    for (std::uint64_t b = a; b < 25; ++b) CHECK(memo::causal_cost(a, b, w) == naive_cost(a, b, w));
}

TEST_CASE("sppo_partition: flops-balanced partition is optimal against brute force") {
  const std::vector<memo::causal_cost_weights> weights{{1, 0}, {0, 1}, {6, 1}, {24, 1}, {1, 5}};
  for (const auto& w : weights) {
    for (std::uint64_t length = 1; length <= 14; ++length) {
      for (std::size_t n = 1; n <= std::min<std::uint64_t>(length, 5); ++n) {
        for (std::uint64_t cap : {std::uint64_t{0}, (length + n - 1) / n, (length + n - 1) / n + 2}) {
          const std::uint64_t bound = cap == 0 ? length : cap;
          std::uint64_t best = std::numeric_limits<std::uint64_t>::max();
          brute(length, n, bound, w, 0, n, 0, best);
          const auto p = memo::flops_balanced_partition(length, n, w, cap);
          REQUIRE(p.count() == n);
          CHECK(p.length() == length);
          for (std::size_t k = 0; k < n; ++k) {
            CHECK(p.tokens(k) >= 1);
            CHECK(p.tokens(k) <= bound);
          }
          CHECK(memo::max_cost(p, w) == best);
        }
      }
    }
  }
}

TEST_CASE("sppo_partition: long sequences get the partition a plain bisection of every cut gives") {
  // The reference: the smallest bound some greedy cover meets, each cut the
  // last unit whose cost stays within it, found by bisection alone.
  auto reference = [](std::uint64_t length, std::size_t n, const memo::causal_cost_weights& w, std::uint64_t cap,
                      std::uint64_t unit) {
    auto cover = [&](std::uint64_t limit, std::vector<std::uint64_t>& cuts) {
      cuts.assign(1, 0);
      for (std::uint64_t a = 0; a < length / unit;) {
        std::uint64_t lo = a, hi = std::min(length / unit, a + cap / unit);
        while (lo < hi) {
          const std::uint64_t mid = lo + (hi - lo + 1) / 2;
          if (memo::causal_cost(a * unit, mid * unit, w) <= limit) lo = mid; else hi = mid - 1;
        }
        if (lo == a || cuts.size() > n) return false;
        cuts.push_back(lo * unit);
        a = lo;
      }
      return cuts.size() - 1 <= n;
    };
    std::vector<std::uint64_t> cuts;
    std::uint64_t lo = 1, hi = memo::causal_cost(0, length, w);
    while (lo < hi) {
      const std::uint64_t mid = lo + (hi - lo) / 2;
      if (cover(mid, cuts)) hi = mid; else lo = mid + 1;
    }
    return lo;
  };
  std::mt19937_64 random(7);
  for (int trial = 0; trial < 60; ++trial) {
    const std::uint64_t unit = trial % 3 == 0 ? 4096 : 1;
    const std::uint64_t length = unit * (1 + random() % (trial % 2 == 0 ? (1ull << 20) : (1ull << 31) / unit));
    const std::size_t n = 1 + random() % std::min<std::uint64_t>(64, length / unit);
    const memo::causal_cost_weights w{trial % 5 == 0 ? 0 : 1 + random() % 50000, trial % 7 == 0 && trial % 5 != 0 ? 0u : 1u};
    const std::uint64_t cap = trial % 4 == 0 ? (length / n + unit) / unit * unit * 2 : length;
    CAPTURE(length);
    CAPTURE(n);
    CAPTURE(unit);
    CAPTURE(cap);
    const auto p = memo::flops_balanced_partition(length, n, w, cap, unit);
    REQUIRE(p.count() == n);
    CHECK(p.length() == length);
    CHECK(memo::max_cost(p, w) == reference(length, n, w, std::min(cap, length) / unit * unit, unit));
  }
}

TEST_CASE("sppo_partition: with a unit every boundary is a multiple of it, and the partition is optimal among those") {
  const std::vector<memo::causal_cost_weights> weights{{1, 0}, {6, 1}, {1, 5}};
  for (const auto& w : weights) {
    for (std::uint64_t unit : {2u, 3u, 4u}) {
      for (std::uint64_t units = 1; units <= 8; ++units) {
        const std::uint64_t length = units * unit;
        for (std::size_t n = 1; n <= std::min<std::uint64_t>(units, 4); ++n) {
          for (std::uint64_t cap : {std::uint64_t{0}, (units + n - 1) / n * unit + 1}) {
            // Brute force over cut points at multiples of the unit, by
            // partitioning `units` unit-tokens under the token costs.
            std::uint64_t best = std::numeric_limits<std::uint64_t>::max();
            const std::uint64_t bound = cap == 0 ? length : cap / unit * unit;
            std::vector<std::uint64_t> cuts;
            auto search = [&](auto&& self, std::uint64_t start, std::size_t left, std::uint64_t worst) -> void {
              if (left == 1) {
                if (start == length || length - start > bound) return;
                best = std::min(best, std::max(worst, naive_cost(start, length, w)));
                return;
              }
              for (std::uint64_t end = start + unit; end < length; end += unit) {
                if (end - start > bound) break;
                self(self, end, left - 1, std::max(worst, naive_cost(start, end, w)));
              }
            };
            search(search, 0, n, 0);
            CAPTURE(unit);
            CAPTURE(length);
            CAPTURE(n);
            CAPTURE(cap);
            const auto p = memo::flops_balanced_partition(length, n, w, cap, unit);
            REQUIRE(p.count() == n);
            CHECK(p.length() == length);
            for (std::size_t k = 0; k < n; ++k) {
              CHECK(p.tokens(k) >= unit);
              CHECK(p.begin(k) % unit == 0);
              CHECK(p.tokens(k) <= bound);
            }
            CHECK(memo::max_cost(p, w) == best);
          }
        }
      }
    }
  }
  CHECK_THROWS_WITH_AS(memo::flops_balanced_partition(10, 2, memo::causal_cost_weights{1, 1}, 0, 4),
                       doctest::Contains("10 tokens in units of 4 cannot be split into 2"), memo::error);
  CHECK_THROWS_WITH_AS(memo::flops_balanced_partition(12, 4, memo::causal_cost_weights{1, 1}, 0, 4),
                       doctest::Contains("cannot be split into 4"), memo::error);
}

TEST_CASE("sppo_partition: causal attention makes later subsequences shorter") {
  // Attention-dominated: 64K tokens, hidden 64 (6h = 384 << 64K).
  const auto p = memo::flops_balanced_partition(65536, 8, memo::causal_cost_weights::for_hidden(64));
  const auto len = p.lengths();
  for (std::size_t k = 1; k < len.size(); ++k) CHECK(len[k] <= len[k - 1]);
  CHECK(len.front() > 2 * len.back());
  const auto eq = memo::equal_length_partition(65536, 8);
  CHECK(memo::max_cost(p, memo::causal_cost_weights::for_hidden(64)) <
        memo::max_cost(eq, memo::causal_cost_weights::for_hidden(64)));
}

TEST_CASE("sppo_partition: bad input is an error") {
  const memo::causal_cost_weights w{1, 1};
  CHECK_THROWS_AS(memo::flops_balanced_partition(10, 0, w), memo::error);
  CHECK_THROWS_AS(memo::flops_balanced_partition(3, 4, w), memo::error);
  CHECK_THROWS_AS(memo::flops_balanced_partition(10, 2, memo::causal_cost_weights{0, 0}), memo::error);
  CHECK_THROWS_AS(memo::flops_balanced_partition(10, 2, w, 4), memo::error);
  CHECK_THROWS_AS(memo::equal_length_partition(2, 3), memo::error);
  CHECK_THROWS_AS(memo::causal_cost(0, 1ull << 40, memo::causal_cost_weights{1, 1ull << 40}), memo::error);
  // The pair count itself beyond 2^63 (2^33 tokens: about 2^65 pairs), at
  // weight 1: an error, not a wrapped cost.
  CHECK_THROWS_WITH_AS(memo::causal_cost(0, 1ull << 33, memo::causal_cost_weights{1, 1}),
                       doctest::Contains("the sequence is too long for exact costs"), memo::error);
  CHECK_THROWS_AS(memo::causal_cost(0, std::numeric_limits<std::uint64_t>::max(), w), memo::error);
}

TEST_CASE("sppo_partition: a token bound at or beyond the sequence bounds nothing") {
  // 2^64 - 1 and 2^62 used to wrap (a + max_units, max_tokens x n) into an
  // equal split or a spurious error.
  const memo::causal_cost_weights w{1, 1};
  const auto unbounded = memo::flops_balanced_partition(1000, 4, w);
  CHECK(unbounded.lengths() != std::vector<std::uint64_t>{250, 250, 250, 250});
  for (const std::uint64_t cap : {std::uint64_t{1000}, std::uint64_t{1} << 62, std::numeric_limits<std::uint64_t>::max()}) {
    CAPTURE(cap);
    CHECK(memo::flops_balanced_partition(1000, 4, w, cap) == unbounded);
    CHECK(memo::flops_balanced_partition(1000, 4, w, cap, 8) == memo::flops_balanced_partition(1000, 4, w, 0, 8));
  }
  // The tightest bound that covers: ceil(1000 / 3) = 334.
  CHECK(memo::flops_balanced_partition(1000, 3, w, 334).count() == 3);
  CHECK_THROWS_AS(memo::flops_balanced_partition(1000, 3, w, 333), memo::error);
}
