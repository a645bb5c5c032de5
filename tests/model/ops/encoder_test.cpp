#include "memo/model/ops/encoder.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "test_support.hpp"

namespace ops = memo::ops;
using namespace memo_test;

namespace {

constexpr std::int64_t batch = 2;
constexpr std::int64_t seq = 5;  // T
constexpr std::int64_t tokens_n = batch * seq;
constexpr std::int64_t channels = 3;
constexpr std::int64_t vocab = 7;         // V
constexpr std::int64_t vocab_padded = 8;  // Vp
constexpr std::int64_t max_positions = 6;

const std::vector<std::int32_t> tokens = {3, 1, 3, 0, 6, 1, 1, 5, 3, 2};

template <class T>
std::vector<T> forward(const std::vector<T>& wte, const std::vector<T>& wpe) {
  std::vector<T> out(tokens_n * channels);
  ops::run_on_host(ops::encoder_forward<T>{.out = view2<T>(out, tokens_n, channels),
                                           .tokens = cview1(tokens),
                                           .wte = cview2(wte, vocab_padded, channels),
                                           .wpe = cview2(wpe, max_positions, channels),
                                           .vocab_size = vocab,
                                           .sequence_length = seq});
  return out;
}

struct bucket_storage {
  std::vector<std::int64_t> order = std::vector<std::int64_t>(tokens_n);
  std::vector<std::int64_t> starts = std::vector<std::int64_t>(tokens_n + 1);
  std::vector<std::int32_t> ids = std::vector<std::int32_t>(tokens_n);
  ops::token_buckets build() {
    return ops::build_token_buckets(cview1(tokens), vocab, view1(order), view1(starts), view1(ids));
  }
};

template <class T>
void backward(std::vector<T>& dwte, std::vector<T>& dwpe, const std::vector<T>& dout) {
  bucket_storage storage;
  ops::run_on_host(ops::encoder_backward_tokens<T>{.dwte = view2<T>(dwte, vocab_padded, channels),
                                                   .dout = cview2(dout, tokens_n, channels),
                                                   .buckets = storage.build()});
  ops::run_on_host(ops::encoder_backward_positions<T>{.dwpe = view2<T>(dwpe, max_positions, channels),
                                                      .dout = cview2(dout, tokens_n, channels),
                                                      .sequence_length = seq});
}

}  // namespace

TEST_CASE("encoder: forward adds the token and the position embedding of every row") {
  const auto wte = random_vector<float>(vocab_padded * channels, 1);
  const auto wpe = random_vector<float>(max_positions * channels, 2);
  const auto out = forward(wte, wpe);
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t t = 0; t < seq; ++t)
      for (std::int64_t c = 0; c < channels; ++c) {
        const std::int64_t r = b * seq + t;
        CHECK(out[r * channels + c] == wte[tokens[r] * channels + c] + wpe[t * channels + c]);
      }

  // A chunk of one sequence starting at position 2 reads positions 2, 3, 4.
  std::vector<float> chunk(3 * channels);
  ops::run_on_host(ops::encoder_forward<float>{
      .out = view2<float>(chunk, 3, channels),
      .tokens = cview1(tokens).slice(2, 3),
      .wte = cview2(wte, vocab_padded, channels),
      .wpe = cview2(wpe, max_positions, channels),
      .vocab_size = vocab,
      .sequence_length = seq,
      .position_offset = 2});
  CHECK(std::equal(chunk.begin(), chunk.end(), out.begin() + 2 * channels));
}

TEST_CASE("encoder: a token outside the vocabulary gives a NaN row, not an out-of-bounds read") {
  const auto wte = random_vector<float>(vocab_padded * channels, 1);
  const auto wpe = random_vector<float>(max_positions * channels, 2);
  const std::vector<std::int32_t> bad = {1, 7, -1};  // 7 is a padding row, not a token
  std::vector<float> out(3 * channels);
  ops::run_on_host(ops::encoder_forward<float>{.out = view2<float>(out, 3, channels),
                                               .tokens = cview1(bad),
                                               .wte = cview2(wte, vocab_padded, channels),
                                               .wpe = cview2(wpe, max_positions, channels),
                                               .vocab_size = vocab,
                                               .sequence_length = seq});
  for (std::int64_t c = 0; c < channels; ++c) {
    CHECK_FALSE(std::isnan(out[c]));
    CHECK(std::isnan(out[channels + c]));
    CHECK(std::isnan(out[2 * channels + c]));
  }
}

TEST_CASE("encoder: backward equals a naive fp64 scatter and finite differences") {
  const auto wte = random_vector<double>(vocab_padded * channels, 3);
  const auto wpe = random_vector<double>(max_positions * channels, 4);
  const auto dout = random_vector<double>(tokens_n * channels, 5);
  std::vector<double> dwte(wte.size(), 0.0), dwpe(wpe.size(), 0.0);
  backward(dwte, dwpe, dout);

  std::vector<double> ref_wte(wte.size(), 0.0), ref_wpe(wpe.size(), 0.0);
  for (std::int64_t r = 0; r < tokens_n; ++r)
    for (std::int64_t c = 0; c < channels; ++c) {
      ref_wte[tokens[r] * channels + c] += dout[r * channels + c];
      ref_wpe[(r % seq) * channels + c] += dout[r * channels + c];
    }
  MEMO_CHECK_CLOSE(dwte, ref_wte, 1e-15, 1e-14);
  MEMO_CHECK_CLOSE(dwpe, ref_wpe, 1e-15, 1e-14);

  auto fd_wte = finite_difference([&](const auto& w) { return dot(forward(w, wpe), dout); }, wte);
  auto fd_wpe = finite_difference([&](const auto& w) { return dot(forward(wte, w), dout); }, wpe);
  MEMO_CHECK_CLOSE(dwte, fd_wte, 1e-8, 1e-7);
  MEMO_CHECK_CLOSE(dwpe, fd_wpe, 1e-8, 1e-7);
  // Rows of the padding and of unused positions get nothing.
  for (std::int64_t c = 0; c < channels; ++c) {
    CHECK(dwte[4 * channels + c] == 0.0);  // token 4 does not occur
    CHECK(dwte[7 * channels + c] == 0.0);  // padding
    CHECK(dwpe[5 * channels + c] == 0.0);  // position 5 >= T
  }
}

TEST_CASE("encoder: fp32 backward is bit-identical to the sequential scatter, in any index order") {
  const auto dout = random_vector<float>(tokens_n * channels, 6);
  std::vector<float> dwte(vocab_padded * channels, 0.25f), dwpe(max_positions * channels, 0.5f);
  std::vector<float> seq_wte = dwte, seq_wpe = dwpe;
  backward(dwte, dwpe, dout);
  for (std::int64_t r = 0; r < tokens_n; ++r)
    for (std::int64_t c = 0; c < channels; ++c) {
      seq_wte[tokens[r] * channels + c] += dout[r * channels + c];
      seq_wpe[(r % seq) * channels + c] += dout[r * channels + c];
    }
  CHECK(dwte == seq_wte);
  CHECK(dwpe == seq_wpe);

  // Each index owns its element: running the indices shuffled (as parallel
  // threads may) gives the same bits.
  bucket_storage storage;
  const ops::encoder_backward_tokens<float> op{.dwte = view2<float>(dwte, vocab_padded, channels),
                                               .dout = cview2(dout, tokens_n, channels),
                                               .buckets = storage.build()};
  op.validate();
  std::vector<float> shuffled(vocab_padded * channels, 0.25f);
  auto op2 = op;
  op2.dwte = view2<float>(shuffled, vocab_padded, channels);
  std::vector<std::pair<std::int64_t, std::int64_t>> cells;
  for (std::int64_t k = 0; k < op2.rows(); ++k)
    for (std::int64_t c = 0; c < op2.cols(); ++c) cells.emplace_back(k, c);
  std::shuffle(cells.begin(), cells.end(), std::mt19937(7));
  for (auto [k, c] : cells) op2(k, c);
  CHECK(shuffled == seq_wte);
}

TEST_CASE("encoder: position gradients over row chunks with offsets equal one pass bit for bit") {
  const auto dout = random_vector<float>(tokens_n * channels, 8);
  std::vector<float> whole(max_positions * channels, 0.0f), chunked = whole;
  ops::run_on_host(ops::encoder_backward_positions<float>{.dwpe = view2<float>(whole, max_positions, channels),
                                                          .dout = cview2(dout, tokens_n, channels),
                                                          .sequence_length = seq});
  // Rows [0, 3) start at position 0; rows [3, 10) start at position 3 and
  // wrap into the second sequence.
  for (auto [first, count] : {std::pair<std::int64_t, std::int64_t>{0, 3}, {3, 7}}) {
    ops::run_on_host(ops::encoder_backward_positions<float>{
        .dwpe = view2<float>(chunked, max_positions, channels),
        .dout = cview2(dout, tokens_n, channels).slice(first, count),
        .sequence_length = seq,
        .position_offset = first % seq});
  }
  CHECK(chunked == whole);
  std::vector<float> naive(max_positions * channels, 0.0f);
  for (std::int64_t r = 0; r < tokens_n; ++r)
    for (std::int64_t c = 0; c < channels; ++c) naive[(r % seq) * channels + c] += dout[r * channels + c];
  CHECK(whole == naive);
}

TEST_CASE("encoder: token buckets group rows by token in ascending row order") {
  bucket_storage storage;
  const auto buckets = storage.build();
  // tokens = {3, 1, 3, 0, 6, 1, 1, 5, 3, 2}: distinct 0, 1, 2, 3, 5, 6.
  REQUIRE(buckets.distinct() == 6);
  CHECK(std::vector<std::int32_t>(storage.ids.begin(), storage.ids.begin() + 6) ==
        std::vector<std::int32_t>{0, 1, 2, 3, 5, 6});
  CHECK(std::vector<std::int64_t>(storage.starts.begin(), storage.starts.begin() + 7) ==
        std::vector<std::int64_t>{0, 1, 4, 5, 8, 9, 10});
  CHECK(storage.order == std::vector<std::int64_t>{3, 1, 5, 6, 9, 0, 2, 8, 7, 4});

  const std::vector<std::int32_t> bad = {1, 9};
  std::vector<std::int64_t> order(2), starts(3);
  std::vector<std::int32_t> ids(2);
  CHECK_THROWS_WITH_AS(ops::build_token_buckets(cview1(bad), vocab, view1(order), view1(starts), view1(ids)),
                       doctest::Contains("token 9 at row 1 is outside the vocabulary [0, 7)"),
                       memo::error);
  std::vector<std::int64_t> short_starts(2);
  CHECK_THROWS_WITH_AS(
      ops::build_token_buckets(cview1(bad), vocab, view1(order), view1(short_starts), view1(ids)),
      doctest::Contains("starts has shape [2], expected [3]"), memo::error);
}

TEST_CASE("encoder: positions beyond the table and offsets outside the sequence are errors") {
  std::vector<float> wte(vocab_padded * channels), wpe(max_positions * channels), out(tokens_n * channels);
  ops::encoder_forward<float> op{.out = view2<float>(out, tokens_n, channels),
                                 .tokens = cview1(tokens),
                                 .wte = cview2(wte, vocab_padded, channels),
                                 .wpe = cview2(wpe, max_positions, channels),
                                 .vocab_size = vocab,
                                 .sequence_length = max_positions + 1};
  CHECK_THROWS_WITH_AS(ops::run_on_host(op), doctest::Contains("sequence_length = 7 is outside [1, 6]"),
                       memo::error);
  op.sequence_length = seq;
  op.position_offset = seq;
  CHECK_THROWS_WITH_AS(ops::run_on_host(op), doctest::Contains("position_offset = 5 is outside [0, 4]"),
                       memo::error);
  op.position_offset = 0;
  op.vocab_size = vocab_padded + 1;
  CHECK_THROWS_WITH_AS(ops::run_on_host(op), doctest::Contains("vocab_size = 9"), memo::error);
}
