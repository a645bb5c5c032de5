#include "memo/model/builtin_data.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
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
