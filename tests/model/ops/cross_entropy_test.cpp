#include "memo/model/ops/cross_entropy.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "test_support.hpp"

namespace ops = memo::ops;
using namespace memo_test;

namespace {

constexpr std::int64_t tokens_n = 7;
constexpr std::int64_t vocab = 10;
constexpr std::int64_t vocab_padded = 12;

const std::vector<std::int32_t> targets = {0, 9, 4, 4, 2, 7, 1};

struct ce_result {
  std::vector<long double> losses;
  std::vector<long double> dlogits;  // [tokens, vocab_padded]
};

// Unshifted softmax in long double (its range holds exp(1e4)): a reference
// that shares nothing with the operator's max-shifting.
ce_result naive(const std::vector<double>& logits) {
  ce_result r{std::vector<long double>(tokens_n), std::vector<long double>(logits.size(), 0.0L)};
  for (std::int64_t t = 0; t < tokens_n; ++t) {
    long double z = 0;
    for (std::int64_t i = 0; i < vocab; ++i) z += std::exp(static_cast<long double>(logits[t * vocab_padded + i]));
    r.losses[t] = -std::log(std::exp(static_cast<long double>(logits[t * vocab_padded + targets[t]])) / z);
    for (std::int64_t i = 0; i < vocab; ++i) {
      const long double p = std::exp(static_cast<long double>(logits[t * vocab_padded + i])) / z;
      r.dlogits[t * vocab_padded + i] = (p - (i == targets[t] ? 1.0L : 0.0L)) / tokens_n;
    }
  }
  return r;
}

/// Runs the operator over the tokens in chunks of `chunk` rows; logits
/// becomes the gradient.
template <class T>
std::vector<T> run_chunked(std::vector<T>& logits, std::int64_t chunk) {
  std::vector<T> losses(tokens_n);
  auto all = view2<T>(logits, tokens_n, vocab_padded);
  for (std::int64_t first = 0; first < tokens_n; first += chunk) {
    const std::int64_t count = std::min(chunk, tokens_n - first);
    ops::run_on_host(ops::cross_entropy_chunk<T>{.logits = all.slice(first, count),
                                                 .losses = view1(losses).slice(first, count),
                                                 .targets = cview1(targets).slice(first, count),
                                                 .vocab_size = vocab,
                                                 .dloss = T(1) / T(tokens_n)});
  }
  return losses;
}

template <class T>
std::vector<double> to_double(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

}  // namespace

TEST_CASE("cross entropy: fp32 loss and gradient match an unshifted long-double softmax") {
  auto logits = random_vector<double>(tokens_n * vocab_padded, 1, -3.0, 3.0);
  const auto ref = naive(logits);
  auto f32 = convert<float>(logits);
  const auto losses = run_chunked(f32, tokens_n);
  MEMO_CHECK_CLOSE(losses, to_double(ref.losses), 1e-6, 1e-5);
  MEMO_CHECK_CLOSE(f32, to_double(ref.dlogits), 1e-7, 1e-5);
}

TEST_CASE("cross entropy: fp64 gradient equals finite differences of the mean loss") {
  const auto logits = random_vector<double>(tokens_n * vocab_padded, 2, -3.0, 3.0);
  auto grad = logits;
  run_chunked(grad, 3);
  auto mean_loss = [](const std::vector<double>& x) {
    auto copy = x;
    const auto losses = run_chunked(copy, tokens_n);
    double s = 0;
    for (double l : losses) s += l;
    return s / tokens_n;
  };
  MEMO_CHECK_CLOSE(grad, finite_difference(mean_loss, logits), 1e-9, 1e-6);
  MEMO_CHECK_CLOSE(grad, to_double(naive(logits).dlogits), 1e-15, 1e-12);
}

TEST_CASE("cross entropy: any chunking, dividing the tokens or not, gives the unchunked result") {
  const auto logits = convert<float>(random_vector<double>(tokens_n * vocab_padded, 3, -5.0, 5.0));
  auto whole = logits;
  const auto whole_losses = run_chunked(whole, tokens_n);
  for (std::int64_t chunk : {1, 2, 3, 4, 5, 6}) {
    CAPTURE(chunk);
    auto part = logits;
    CHECK(run_chunked(part, chunk) == whole_losses);
    CHECK(part == whole);
  }
}

TEST_CASE("cross entropy: huge logits do not overflow and padded columns get zero gradient") {
  auto logits = random_vector<double>(tokens_n * vocab_padded, 4, -1.0, 1.0);
  for (std::int64_t t = 0; t < tokens_n; ++t) {
    logits[t * vocab_padded + (t % vocab)] = 1e4;              // one huge logit per row
    logits[t * vocab_padded + ((t + 3) % vocab)] = 1e4 - 2.0;  // and a close second
    logits[t * vocab_padded + vocab] = 1e30;                   // padding: must be ignored
    logits[t * vocab_padded + vocab + 1] = NAN;
  }
  const auto ref = naive(logits);
  auto f32 = convert<float>(logits);
  const auto losses = run_chunked(f32, 3);
  for (float l : losses) CHECK(std::isfinite(l));
  // fp32 holds 1e4 to about 1e-3 absolute: the loss, a difference of such
  // values, is accurate to that.
  MEMO_CHECK_CLOSE(losses, to_double(ref.losses), 2e-3, 1e-4);
  MEMO_CHECK_CLOSE(f32, to_double(ref.dlogits), 1e-5, 1e-3);
  for (std::int64_t t = 0; t < tokens_n; ++t) {
    CHECK(f32[t * vocab_padded + vocab] == 0.0f);
    CHECK(f32[t * vocab_padded + vocab + 1] == 0.0f);
  }
}

TEST_CASE("cross entropy: a target outside the vocabulary gives NaN, and check_targets names it") {
  std::vector<float> logits(2 * vocab_padded, 0.5f), losses(2);
  const std::vector<std::int32_t> bad = {3, vocab};  // vocab itself is a padding column
  ops::run_on_host(ops::cross_entropy_chunk<float>{.logits = view2<float>(logits, 2, vocab_padded),
                                                   .losses = view1(losses),
                                                   .targets = cview1(bad),
                                                   .vocab_size = vocab,
                                                   .dloss = 0.5f});
  CHECK(losses[0] == doctest::Approx(std::log(10.0)));
  CHECK(std::isnan(losses[1]));
  CHECK(std::isnan(logits[vocab_padded]));
  CHECK(logits[vocab_padded + vocab] == 0.0f);
  CHECK_NOTHROW(ops::check_targets(cview1(targets), vocab));
  CHECK_THROWS_WITH_AS(ops::check_targets(cview1(bad), vocab),
                       doctest::Contains("target 10 at row 1 is outside the vocabulary [0, 10)"),
                       memo::error);
  CHECK_THROWS_WITH_AS(ops::run_on_host(ops::cross_entropy_chunk<float>{
                           .logits = view2<float>(logits, 2, vocab_padded),
                           .losses = view1(losses),
                           .targets = cview1(bad),
                           .vocab_size = vocab_padded + 1}),
                       doctest::Contains("vocab_size = 13 is outside [1, 12]"), memo::error);
}
