#include "memo/model/builtin_data.hpp"

#include <doctest/doctest.h>

#include <limits>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "io_test_support.hpp"

namespace {

using memo_test::contains;
using memo_test::error_of;

std::vector<std::uint16_t> sequence(const memo::copy_task& task, std::uint64_t index) {
  std::vector<std::uint16_t> s(static_cast<std::size_t>(task.context));
  memo::fill_copy_task_sequence(task, index, s);
  return s;
}

}  // namespace

TEST_CASE("builtin_data: the second half of a sequence repeats its first half") {
  for (std::int64_t T : {2, 3, 4, 7, 64, 4097}) {
    CAPTURE(T);
    const memo::copy_task task{T, 13, 99};
    const std::int64_t h = (T + 1) / 2;  // the first half rounds up
    CHECK(task.first_half() == h);
    for (std::uint64_t index : {0u, 1u, 1000u}) {
      const auto s = sequence(task, index);
      for (std::int64_t i = 0; i < T; ++i) CHECK(s[static_cast<std::size_t>(i)] < 13);
      for (std::int64_t i = h; i < T; ++i) {
        CHECK(s[static_cast<std::size_t>(i)] == s[static_cast<std::size_t>(i - h)]);
      }
    }
  }
}

TEST_CASE("builtin_data: sequences are deterministic in the seed and index and look uniform") {
  const memo::copy_task task{2048, 16, 5};
  CHECK(sequence(task, 3) == sequence(task, 3));
  CHECK(sequence(task, 3) != sequence(task, 4));
  CHECK(sequence(task, 3) != sequence({2048, 16, 6}, 3));
  // Uniform first halves: over 64 sequences (65536 draws) every id's share is
  // within 10% of 1/16 (the standard deviation of a count is ~62 of 4096).
  std::vector<int> counts(16, 0);
  for (std::uint64_t s = 0; s < 64; ++s) {
    const auto seq = sequence(task, s);
    for (std::int64_t i = 0; i < task.first_half(); ++i) ++counts[seq[static_cast<std::size_t>(i)]];
  }
  for (int id = 0; id < 16; ++id) {
    CAPTURE(id);
    CHECK(counts[static_cast<std::size_t>(id)] > 4096 * 9 / 10);
    CHECK(counts[static_cast<std::size_t>(id)] < 4096 * 11 / 10);
  }
}

TEST_CASE("builtin_data: the predictable targets are exactly the copies") {
  for (std::int64_t T : {2, 3, 8, 9, 1000}) {
    CAPTURE(T);
    const memo::copy_task task{T, 50, 1};
    const auto range = memo::copy_task_predictable_targets(task);
    const std::int64_t h = task.first_half();
    // From the definition: target t is token t + 1 of the window, a copy when
    // it lies in the second half [h, T) of the sequence.
    for (std::int64_t t = 0; t < T; ++t) {
      const bool copy = t + 1 >= h && t + 1 < T;
      CHECK(range.contains(t) == copy);
    }
    CHECK(range.size() == T - h);
    CHECK(range.size() >= 1);
  }
}

TEST_CASE("builtin_data: a token file of the task cuts back into its sequences") {
  memo_test::scratch_directory dir;
  const auto path = dir / "copy.bin";
  const memo::copy_task task{16, 10, 3};
  const auto tokens = memo::copy_task_tokens(task, 5);
  CHECK(tokens.size() == 5 * 16 + 1);
  memo::write_token_file(path, tokens);

  auto loader = memo::token_window_loader::from_file(path, 16, memo::window_order::sequential, 0, 10);
  CHECK(loader.windows_per_epoch() == 5);
  const auto range = memo::copy_task_predictable_targets(task);
  std::vector<std::int32_t> in(16), out(16);
  for (std::uint64_t k = 0; k < 5; ++k) {
    CAPTURE(k);
    loader.next(in, out);
    const auto s = sequence(task, k);
    const auto following = sequence(task, k + 1);
    for (std::size_t t = 0; t < 16; ++t) CHECK(in[t] == s[t]);
    for (std::size_t t = 0; t + 1 < 16; ++t) CHECK(out[t] == s[t + 1]);
    CHECK(out[15] == following[0]);
    // A predictable target equals the input h - 1 positions before it.
    for (std::int64_t t = range.begin; t < range.end; ++t) {
      CHECK(out[static_cast<std::size_t>(t)] == in[static_cast<std::size_t>(t + 1 - task.first_half())]);
    }
  }
}

TEST_CASE("builtin_data: invalid tasks are errors naming the value and bound") {
  CHECK(contains(error_of([] { memo::copy_task{1, 10, 0}.validate(); }), "context 1 is too short"));
  CHECK(contains(error_of([] { memo::copy_task{8, 1, 0}.validate(); }), "vocabulary 1 must lie in [2, 65536]"));
  CHECK(contains(error_of([] { memo::copy_task{8, 65537, 0}.validate(); }), "vocabulary 65537"));
  CHECK(contains(error_of([] { (void)memo::copy_task_tokens({8, 4, 0}, 0); }), "0 sequences of 8 tokens"));
  CHECK(contains(error_of([] { (void)memo::copy_task_tokens({1 << 20, 4, 0}, 4096); }),
                 "fit one token file"));
  std::vector<std::uint16_t> wrong(7);
  CHECK(contains(error_of([&] { memo::fill_copy_task_sequence({8, 4, 0}, 0, wrong); }),
                 "a sequence has 8 tokens, the span given holds 7"));
}

namespace {

std::vector<std::uint16_t> sequence(const memo::recall_task& task, std::uint64_t index) {
  std::vector<std::uint16_t> s(static_cast<std::size_t>(task.context));
  memo::fill_recall_task_sequence(task, index, s);
  return s;
}

// The token classes of the recall task, decoded from the ids as the task's
// documentation defines them (K V facts, then K queries, then V answers).
struct decoded {
  enum kind { fact, query, answer } what;
  std::int64_t key = -1, value = -1;
};
decoded decode(const memo::recall_task& task, std::uint16_t id) {
  const std::int64_t K = task.keys, V = task.values;
  if (id < K * V) return {decoded::fact, id / V, id % V};
  if (id < K * V + K) return {decoded::query, id - K * V, -1};
  REQUIRE(id < K * V + K + V);
  return {decoded::answer, -1, id - K * V - K};
}

}  // namespace

TEST_CASE("builtin_data: a recall sequence states one binding in facts, then queries it") {
  for (std::int64_t T : {4, 5, 8, 9, 64, 4097}) {
    for (auto [K, V] : {std::pair{1, 2}, {4, 4}, {7, 3}, {16, 16}}) {
      CAPTURE(T);
      CAPTURE(K);
      CAPTURE(V);
      const memo::recall_task task{T, K, V, 11};
      CHECK(task.vocab() == K * V + K + V);
      const std::int64_t h = (T + 1) / 2;
      for (std::uint64_t index : {0u, 5u}) {
        const auto s = sequence(task, index);
        std::vector<std::int64_t> bound(static_cast<std::size_t>(K), -1);
        for (std::int64_t t = 0; t < h; ++t) {
          const auto d = decode(task, s[static_cast<std::size_t>(t)]);
          REQUIRE(d.what == decoded::fact);
          auto& b = bound[static_cast<std::size_t>(d.key)];
          if (b < 0) b = d.value;
          CHECK(b == d.value);  // one value per key in a sequence
        }
        for (std::int64_t t = h; t < T; ++t) {
          const auto d = decode(task, s[static_cast<std::size_t>(t)]);
          if ((t - h) % 2 == 0) {
            CHECK(d.what == decoded::query);
          } else {
            REQUIRE(d.what == decoded::answer);
            const auto q = decode(task, s[static_cast<std::size_t>(t - 1)]);
            // The answer is the value the facts bound to the query's key
            // (when the first half happened to state that key).
            const std::int64_t b = bound[static_cast<std::size_t>(q.key)];
            if (b >= 0) CHECK(d.value == b);
          }
        }
      }
    }
  }
}

TEST_CASE("builtin_data: recall sequences are deterministic, bindings and keys look uniform") {
  const memo::recall_task task{4096, 4, 4, 3};
  CHECK(sequence(task, 2) == sequence(task, 2));
  CHECK(sequence(task, 2) != sequence(task, 3));
  CHECK(sequence(task, 2) != sequence({4096, 4, 4, 4}, 2));
  // Over 400 sequences: every key's share of the facts is within 1% of 1/4
  // (2048 x 400 draws: 5 standard deviations), and every value is bound to key 0 in 15% to 35% of
  // the sequences (a binomial of 400 draws at 1/4: standard deviation 2.2%).
  std::vector<int> keys(4, 0), values(4, 0);
  for (std::uint64_t i = 0; i < 400; ++i) {
    const auto s = sequence(task, i);
    for (std::int64_t t = 0; t < task.first_half(); ++t) ++keys[static_cast<std::size_t>(s[static_cast<std::size_t>(t)] / 4)];
    for (std::int64_t t = 0; t < task.first_half(); ++t) {
      if (s[static_cast<std::size_t>(t)] / 4 == 0) {
        ++values[static_cast<std::size_t>(s[static_cast<std::size_t>(t)] % 4)];
        break;
      }
    }
  }
  for (int k = 0; k < 4; ++k) {
    CAPTURE(k);
    CHECK(std::abs(keys[static_cast<std::size_t>(k)] - 204800) < 204800 / 100);
    CHECK(values[static_cast<std::size_t>(k)] > 60);
    CHECK(values[static_cast<std::size_t>(k)] < 140);
  }
}

TEST_CASE("builtin_data: the recall task's answer ranges are exactly the answers") {
  for (std::int64_t T = 4; T <= 40; ++T) {
    CAPTURE(T);
    const memo::recall_task task{T, 3, 5, 1};
    const auto s = sequence(task, 0);
    const auto answers = memo::recall_task_answer_targets(task);
    const auto far = memo::recall_task_far_answer_targets(task);
    const std::int64_t h = task.first_half();
    std::int64_t count = 0, far_count = 0;
    for (std::int64_t t = 0; t < T; ++t) {
      // Target t is token t + 1; an answer when that token is one (the last
      // target is the next sequence's first token, a fact).
      const bool answer = t + 1 < T && decode(task, s[static_cast<std::size_t>(t + 1)]).what == decoded::answer;
      CHECK(answers.contains(t) == answer);
      // Far: the query at t is at least (T - h) / 2 + 1 tokens after the
      // last fact (at h - 1).
      const bool is_far = answer && t - (h - 1) >= (T - h) / 2 + 1;
      CHECK(far.contains(t) == is_far);
      count += answer, far_count += is_far;
    }
    CHECK(answers.size() == count);
    CHECK(far.size() == far_count);
    CHECK(count >= 1);
    if (T >= 8) CHECK(far_count >= 1);
    if (count > 0) CHECK(answers.contains(answers.last()));
  }
}

TEST_CASE("builtin_data: the value-frequency loss equals its mean over every binding") {
  // Brute force: every binding f of K keys to V values, equally likely; a
  // query names each key with probability 1 / K; the predictor gives the
  // answer probability (keys bound to f(k)) / K.
  for (const auto& [K, V] : {std::pair{1, 2}, std::pair{2, 2}, std::pair{3, 5}, std::pair{4, 4}, std::pair{5, 3},
                             std::pair{6, 2}}) {
    CAPTURE(K);
    CAPTURE(V);
    std::vector<int> f(static_cast<std::size_t>(K), 0);
    double total = 0;
    std::int64_t bindings = 0;
    for (bool more = true; more; ++bindings) {
      for (int k = 0; k < K; ++k) {
        int same = 0;
        for (int j = 0; j < K; ++j) same += f[static_cast<std::size_t>(j)] == f[static_cast<std::size_t>(k)];
        total += -std::log(static_cast<double>(same) / K) / K;
      }
      more = false;  // the next binding, as a base-V counter
      for (std::size_t k = 0; k < f.size() && !more; ++k) {
        if (++f[k] < V) more = true;
        else f[k] = 0;
      }
    }
    const memo::recall_task task{64, K, V, 1};
    CHECK(memo::recall_task_frequency_loss(task) == doctest::Approx(total / static_cast<double>(bindings)).epsilon(1e-12));
    CHECK(memo::recall_task_frequency_loss(task) <= std::log(static_cast<double>(V)));
  }
  CHECK(memo::recall_task_frequency_loss({64, 1, 9, 1}) == 0.0);  // one key: its value is the only one
  CHECK(memo::recall_task_frequency_loss({64, 4, 4, 1}) == doctest::Approx(0.9177196918347137).epsilon(1e-12));
}

TEST_CASE("builtin_data: a strided position range counts and contains what it lists") {
  for (std::int64_t begin : {-3, 0, 5}) {
    for (std::int64_t end : {-1, 0, 5, 6, 17}) {
      for (std::int64_t stride : {-1, 0, 1, 2, 3, 7}) {
        CAPTURE(begin);
        CAPTURE(end);
        CAPTURE(stride);
        const memo::position_range r{begin, end, stride};
        std::int64_t n = 0;
        for (std::int64_t t = -10; t < 30; ++t) {
          const bool listed = stride >= 1 && t >= begin && t < end && (t - begin) % stride == 0;
          CHECK(r.contains(t) == listed);
          n += listed;
        }
        CHECK(r.size() == n);
      }
    }
  }
}

TEST_CASE("builtin_data: the mean over a range with a stride near 2^63 takes its one position") {
  // begin + stride overflowed when the loop stepped past the end.
  const std::vector<float> values{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  const std::int64_t huge = std::numeric_limits<std::int64_t>::max();
  CHECK(memo::mean_over(values, {5, 10, huge}, "test") == 6.0);
  CHECK(memo::mean_over(values, {0, 16, huge - 1}, "test") == 1.0);
  CHECK(memo::mean_over(values, {1, 16, 5}, "test") == doctest::Approx((2.0 + 7 + 12) / 3));
}

TEST_CASE("builtin_data: a task window generated on its own equals the loader's window") {
  const memo::recall_task recall{24, 3, 4, 9};
  const memo::copy_task copy{24, 7, 9};
  auto check = [](const auto& task, std::vector<std::uint16_t> tokens) {
    memo::token_window_loader loader(std::move(tokens), 24, memo::window_order::sequential);
    std::vector<std::int32_t> in(24), out(24), in2(24), out2(24);
    for (std::uint64_t k = 0; k < 6; ++k) {
      CAPTURE(k);
      loader.next(in, out);
      memo::fill_task_window(task, k, in2, out2);
      CHECK(in == in2);
      CHECK(out == out2);
    }
  };
  check(recall, memo::recall_task_tokens(recall, 6));
  check(copy, memo::copy_task_tokens(copy, 6));
  std::vector<std::int32_t> wrong(23), right(24);
  CHECK(contains(error_of([&] { memo::fill_task_window(recall, 0, wrong, right); }),
                 "a window has 24 inputs and targets, the spans hold 23 and 24"));
}

TEST_CASE("builtin_data: invalid recall tasks are errors naming the value and bound") {
  CHECK(contains(error_of([] { memo::recall_task{3, 4, 4, 0}.validate(); }), "context 3 is too short"));
  CHECK(contains(error_of([] { memo::recall_task{8, 0, 4, 0}.validate(); }), "0 keys and 4 values"));
  CHECK(contains(error_of([] { memo::recall_task{8, 4, 1, 0}.validate(); }), "4 keys and 1 values"));
  CHECK(contains(error_of([] { memo::recall_task{8, 256, 256, 0}.validate(); }),
                 "need 66048 token ids (K V + K + V), more than 65536"));
  CHECK(contains(error_of([] { memo::recall_task{8, 65536, 65536, 0}.validate(); }), "more than 65536"));
  CHECK(contains(error_of([] { (void)memo::recall_task_tokens({8, 2, 2, 0}, 0); }), "recall task: 0 sequences"));
  std::vector<std::uint16_t> wrong(7);
  CHECK(contains(error_of([&] { memo::fill_recall_task_sequence({8, 2, 2, 0}, 0, wrong); }),
                 "a sequence has 8 tokens, the span given holds 7"));
}
