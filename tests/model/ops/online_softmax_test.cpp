#include "memo/model/ops/online_softmax.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "test_support.hpp"

namespace ops = memo::ops;
using namespace memo_test;

namespace {

constexpr std::int64_t keys = 13;
constexpr std::int64_t dim = 4;

struct softmax_row {
  std::vector<double> out;  // [dim]
  double lse;
};

// Unshifted softmax-weighted sum in long double (its range holds exp(1e4)).
softmax_row naive_row(const std::vector<double>& s, const std::vector<double>& v, std::int64_t n) {
  long double z = 0;
  for (std::int64_t j = 0; j < n; ++j) z += std::exp(static_cast<long double>(s[j]));
  softmax_row r{std::vector<double>(dim, 0.0), static_cast<double>(std::log(z))};
  for (std::int64_t d = 0; d < dim; ++d) {
    long double acc = 0;
    for (std::int64_t j = 0; j < n; ++j) acc += std::exp(static_cast<long double>(s[j])) / z * v[j * dim + d];
    r.out[d] = static_cast<double>(acc);
  }
  return r;
}

// One row through online_softmax_update in tiles of `tile` keys.
template <class T>
std::pair<std::vector<T>, T> online_row(const std::vector<T>& s, const std::vector<T>& v, std::int64_t tile) {
  ops::online_softmax_state<T> state;
  std::vector<T> acc(dim, T(0));
  for (std::int64_t first = 0; first < keys; first += tile) {
    const std::int64_t n = std::min(tile, keys - first);
    ops::online_softmax_update(state, view1(acc), cview1(s).slice(first, n),
                               cview2(v, keys, dim).slice(first, n), n);
  }
  const T lse = ops::online_softmax_finish(state, view1(acc));
  return {acc, lse};
}

}  // namespace

TEST_CASE("online softmax: any tiling of a row equals the softmax-weighted sum in fp64") {
  const auto s = random_vector<double>(keys, 1, -4.0, 4.0);
  const auto v = random_vector<double>(keys * dim, 2);
  const auto ref = naive_row(s, v, keys);
  for (std::int64_t tile : {1, 2, 3, 5, 8, 13, 20}) {
    CAPTURE(tile);
    const auto [out64, lse64] = online_row(s, v, tile);
    MEMO_CHECK_CLOSE(out64, ref.out, 1e-14, 1e-12);
    CHECK(lse64 == doctest::Approx(ref.lse).epsilon(1e-13));
    const auto [out32, lse32] = online_row(convert<float>(s), convert<float>(v), tile);
    MEMO_CHECK_CLOSE(out32, ref.out, 1e-6, 1e-5);
    CHECK(lse32 == doctest::Approx(ref.lse).epsilon(1e-6));
  }
}

TEST_CASE("online softmax: scores of 1e4 and rising maxima stay finite and exact") {
  auto s = random_vector<double>(keys, 3, -5.0, 5.0);
  for (std::int64_t j = 0; j < keys; ++j) s[j] += 1e4 + 50.0 * static_cast<double>(j % 4);  // maxima rise and fall
  s[0] = -1e4;
  const auto v = random_vector<double>(keys * dim, 4);
  const auto ref = naive_row(s, v, keys);
  for (std::int64_t tile : {1, 4, 6}) {
    CAPTURE(tile);
    const auto [out32, lse32] = online_row(convert<float>(s), convert<float>(v), tile);
    for (float x : out32) CHECK(std::isfinite(x));
    // The scores themselves are only held to ~1e-3 in fp32.
    MEMO_CHECK_CLOSE(out32, ref.out, 1e-4, 1e-3);
    CHECK(lse32 == doctest::Approx(ref.lse).epsilon(1e-6));
    const auto [out64, lse64] = online_row(s, v, tile);
    MEMO_CHECK_CLOSE(out64, ref.out, 1e-12, 1e-10);
  }
}

TEST_CASE("online softmax: the GEMM-split tile operators give causal attention") {
  // 6 queries at positions 7..12 against 13 keys at positions 0..12, in key
  // tiles of 5 (the last tile is cut by the causal mask for early queries).
  constexpr std::int64_t queries = 6;
  constexpr std::int64_t query_first = 7;
  constexpr std::int64_t tile = 5;
  const auto scores_all = random_vector<double>(queries * keys, 5, -3.0, 3.0);
  const auto v = random_vector<double>(keys * dim, 6);
  for (bool causal : {true, false}) {
    CAPTURE(causal);
    // Garbage first: attention_tile_start must reset it.
    std::vector<double> max(queries, 5.0), sum(queries, 9.0), acc(queries * dim, 3.0), lse(queries);
    ops::run_on_host(ops::attention_tile_start<double>{.max = view1(max), .sum = view1(sum),
                                                       .acc = view2<double>(acc, queries, dim)});
    for (std::int64_t key_first = 0; key_first < keys; key_first += tile) {
      const std::int64_t n = std::min(tile, keys - key_first);
      std::vector<double> p(queries * n);
      for (std::int64_t q = 0; q < queries; ++q)
        for (std::int64_t j = 0; j < n; ++j) p[q * n + j] = scores_all[q * keys + key_first + j];
      ops::run_on_host(ops::attention_tile_softmax<double>{
          .scores = view2<double>(p, queries, n), .max = view1(max), .sum = view1(sum),
          .acc = view2<double>(acc, queries, dim),
          .tile = {.query_first = query_first, .key_first = key_first, .causal = causal}});
      // The caller's GEMM: acc += P V_tile.
      for (std::int64_t q = 0; q < queries; ++q)
        for (std::int64_t d = 0; d < dim; ++d)
          for (std::int64_t j = 0; j < n; ++j) acc[q * dim + d] += p[q * n + j] * v[(key_first + j) * dim + d];
    }
    ops::run_on_host(ops::attention_tile_finish<double>{.acc = view2<double>(acc, queries, dim),
                                                        .lse = view1(lse),
                                                        .max = cview1(max),
                                                        .sum = cview1(sum)});
    for (std::int64_t q = 0; q < queries; ++q) {
      const std::int64_t seen = causal ? query_first + q + 1 : keys;
      std::vector<double> row(scores_all.begin() + q * keys, scores_all.begin() + (q + 1) * keys);
      const auto ref = naive_row(row, v, seen);
      std::vector<double> got(acc.begin() + q * dim, acc.begin() + (q + 1) * dim);
      MEMO_CHECK_CLOSE(got, ref.out, 1e-14, 1e-12);
      CHECK(lse[q] == doctest::Approx(ref.lse).epsilon(1e-13));
    }
  }
}

TEST_CASE("online softmax: a tile a row cannot see leaves it unchanged, an empty row has lse -inf") {
  ops::online_softmax_state<float> state;
  std::vector<float> scores = {3.0f, 4.0f};
  const float c = ops::online_softmax_tile_row(state, view1(scores), 0);
  CHECK(c == 1.0f);
  CHECK(state.sum == 0.0f);
  CHECK(scores == std::vector<float>{0.0f, 0.0f});
  std::vector<float> acc(2, 0.0f);
  CHECK(ops::online_softmax_finish(state, view1(acc)) == -HUGE_VALF);
  CHECK(ops::visible_keys({.query_first = 3, .key_first = 5}, 0, 4) == 0);
  CHECK(ops::visible_keys({.query_first = 3, .key_first = 5}, 3, 4) == 2);
  CHECK(ops::visible_keys({.query_first = 3, .key_first = 5}, 9, 4) == 4);
  CHECK(ops::visible_keys({.query_first = 3, .key_first = 5, .causal = false}, 0, 4) == 4);
}

TEST_CASE("online softmax: backward pieces give the score gradient of fp64 references and finite differences") {
  // One tile of 3 queries x 13 keys, causal with queries at positions 10..12.
  constexpr std::int64_t queries = 3;
  const ops::tile_position where{.query_first = 10, .key_first = 0, .causal = true};
  const auto scores = random_vector<double>(queries * keys, 7, -3.0, 3.0);
  const auto v = random_vector<double>(keys * dim, 8);
  const auto dout = random_vector<double>(queries * dim, 9);

  // Forward through the operators: out [queries, dim] and lse [queries].
  auto forward = [&](const std::vector<double>& s, std::vector<double>* lse_out) {
    std::vector<double> max(queries, -HUGE_VAL), sum(queries, 0.0), acc(queries * dim, 0.0), lse(queries);
    auto p = s;
    ops::run_on_host(ops::attention_tile_softmax<double>{.scores = view2<double>(p, queries, keys),
                                                         .max = view1(max), .sum = view1(sum),
                                                         .acc = view2<double>(acc, queries, dim),
                                                         .tile = where});
    for (std::int64_t q = 0; q < queries; ++q)
      for (std::int64_t d = 0; d < dim; ++d)
        for (std::int64_t j = 0; j < keys; ++j) acc[q * dim + d] += p[q * keys + j] * v[j * dim + d];
    ops::run_on_host(ops::attention_tile_finish<double>{.acc = view2<double>(acc, queries, dim),
                                                        .lse = view1(lse), .max = cview1(max),
                                                        .sum = cview1(sum)});
    if (lse_out) *lse_out = lse;
    return acc;
  };
  std::vector<double> lse;
  const auto out = forward(scores, &lse);

  // Backward: D, then dP = dO V^T (the caller's GEMM), then P and dS.
  std::vector<double> delta(queries), p = scores, ds(queries * keys);
  ops::run_on_host(ops::attention_backward_delta<double>{.delta = view1(delta),
                                                         .dout = cview2(dout, queries, dim),
                                                         .out = cview2(out, queries, dim)});
  for (std::int64_t q = 0; q < queries; ++q)
    for (std::int64_t j = 0; j < keys; ++j) {
      double s = 0;
      for (std::int64_t d = 0; d < dim; ++d) s += dout[q * dim + d] * v[j * dim + d];
      ds[q * keys + j] = s;
    }
  ops::run_on_host(ops::attention_tile_backward<double>{.scores = view2<double>(p, queries, keys),
                                                        .dprobs = view2<double>(ds, queries, keys),
                                                        .lse = cview1(lse), .delta = cview1(delta),
                                                        .tile = where});

  // Reference: the softmax Jacobian applied to dP, P from a fresh softmax.
  std::vector<double> ref_p(queries * keys, 0.0), ref_ds(queries * keys, 0.0);
  for (std::int64_t q = 0; q < queries; ++q) {
    const std::int64_t seen = where.query_first + q + 1;
    double z = 0;
    for (std::int64_t j = 0; j < seen; ++j) z += std::exp(scores[q * keys + j]);
    for (std::int64_t j = 0; j < seen; ++j) ref_p[q * keys + j] = std::exp(scores[q * keys + j]) / z;
    for (std::int64_t i = 0; i < seen; ++i) {
      double g = 0;
      for (std::int64_t j = 0; j < seen; ++j) {
        double dpj = 0;
        for (std::int64_t d = 0; d < dim; ++d) dpj += dout[q * dim + d] * v[j * dim + d];
        g += ref_p[q * keys + i] * ((i == j ? 1.0 : 0.0) - ref_p[q * keys + j]) * dpj;
      }
      ref_ds[q * keys + i] = g;
    }
  }
  MEMO_CHECK_CLOSE(p, ref_p, 1e-15, 1e-12);
  MEMO_CHECK_CLOSE(ds, ref_ds, 1e-14, 1e-11);
  const auto fd = finite_difference([&](const auto& s) { return dot(forward(s, nullptr), dout); }, scores);
  MEMO_CHECK_CLOSE(ds, fd, 1e-8, 1e-6);
  for (std::int64_t q = 0; q < queries; ++q)
    for (std::int64_t j = where.query_first + q + 1; j < keys; ++j) {
      CHECK(p[q * keys + j] == 0.0);
      CHECK(ds[q * keys + j] == 0.0);
    }
}
