#include "memo/model/token_data.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "io_test_support.hpp"

namespace {

using memo_test::contains;
using memo_test::error_of;

std::vector<std::uint16_t> counting_tokens(std::size_t n, std::uint16_t modulo) {
  std::vector<std::uint16_t> t(n);
  for (std::size_t i = 0; i < n; ++i) t[i] = static_cast<std::uint16_t>((i * 7919u + 3u) % modulo);
  return t;
}

/// A token file written by hand from the format description.
std::vector<unsigned char> hand_made(std::int32_t magic, std::int32_t version, std::int32_t count,
                                     const std::vector<std::uint16_t>& tokens) {
  std::vector<unsigned char> bytes(1024 + 2 * tokens.size(), 0);
  memo_test::set_int32_at(bytes, 0, magic);
  memo_test::set_int32_at(bytes, 4, version);
  memo_test::set_int32_at(bytes, 8, count);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    bytes[1024 + 2 * i] = static_cast<unsigned char>(tokens[i] & 0xff);
    bytes[1024 + 2 * i + 1] = static_cast<unsigned char>(tokens[i] >> 8);
  }
  return bytes;
}

}  // namespace

TEST_CASE("token_data: a write/read round trip keeps every token, in llm.c's layout") {
  memo_test::scratch_directory dir;
  const auto path = dir / "train.bin";
  auto tokens = counting_tokens(3001, 50257);
  tokens[5] = 65535;  // the largest id a uint16 holds
  memo::write_token_file(path, tokens);
  CHECK(memo::read_token_file(path) == tokens);
  CHECK(memo_test::file_bytes(path) == hand_made(20240520, 1, 3001, tokens));
  // A hand-made file reads too; an empty file of zero tokens is valid.
  memo_test::write_bytes(path, hand_made(20240520, 1, 0, {}));
  CHECK(memo::read_token_file(path).empty());
}

TEST_CASE("token_data: every malformed file is an error naming the file and the value") {
  memo_test::scratch_directory dir;
  const auto path = dir / "bad.bin";
  const auto tokens = counting_tokens(100, 50);
  auto read_with = [&](const std::vector<unsigned char>& bytes, std::optional<std::int64_t> vocab = {}) {
    memo_test::write_bytes(path, bytes);
    const auto message = error_of([&] { (void)memo::read_token_file(path, vocab); });
    CHECK(contains(message, path.string()));
    return message;
  };
  CHECK(contains(read_with(hand_made(20240326, 1, 100, tokens)), "bad magic 20240326"));
  CHECK(contains(read_with(hand_made(20240520, 2, 100, tokens)), "unsupported token file version 2"));
  CHECK(contains(read_with(hand_made(20240520, 1, -4, tokens)), "header counts -4 tokens"));
  auto m = read_with(hand_made(20240520, 1, 101, tokens));
  CHECK(contains(m, "truncated: 1224 bytes, but its header (101 tokens) needs 1226"));
  m = read_with(hand_made(20240520, 1, 98, tokens));
  CHECK(contains(m, "4 trailing bytes after what its header (98 tokens) describes"));
  auto odd = hand_made(20240520, 1, 100, tokens);
  odd.push_back(0);
  CHECK(contains(read_with(odd), "1 trailing bytes"));
  CHECK(contains(read_with(std::vector<unsigned char>(12, 0)), "truncated token file: 12 bytes"));

  // Ids at or above the vocabulary: the first offending position and value.
  auto high = tokens;
  high[37] = 50;
  high[60] = 900;
  m = read_with(hand_made(20240520, 1, 100, high), 50);
  CHECK(contains(m, "token 37 has id 50, outside the vocabulary of 50 ids"));
  memo_test::write_bytes(path, hand_made(20240520, 1, 100, high));
  CHECK(memo::read_token_file(path, 901).size() == 100);
}

TEST_CASE("token_data: writing to a full device fails and names it") {
  if (!std::filesystem::exists("/dev/full")) {
    MESSAGE("no /dev/full on this system");
    return;
  }
  const auto m = error_of([] { memo::write_token_file("/dev/full", counting_tokens(10, 7)); });
  CHECK(contains(m, "'/dev/full'"));
  CHECK(contains(m, "No space left on device"));
}

TEST_CASE("token_data: sequential windows are the tokens shifted by one") {
  const auto tokens = counting_tokens(103, 1000);
  const std::int64_t T = 10;
  memo::token_window_loader loader(tokens, T, memo::window_order::sequential);
  CHECK(loader.windows_per_epoch() == 10);  // (103 - 1) / 10
  std::vector<std::int32_t> in(T), out(T);
  for (int round = 0; round < 25; ++round) {
    const std::int64_t start = loader.next(in, out);
    const std::int64_t expected_start = (round % 10) * T;
    CHECK(start == expected_start);
    for (std::int64_t t = 0; t < T; ++t) {
      CHECK(in[static_cast<std::size_t>(t)] == tokens[static_cast<std::size_t>(expected_start + t)]);
      CHECK(out[static_cast<std::size_t>(t)] == tokens[static_cast<std::size_t>(expected_start + t + 1)]);
    }
  }
  CHECK(loader.epoch() == 2);
}

TEST_CASE("token_data: shuffled windows visit every window once per epoch, reproducibly") {
  const auto tokens = counting_tokens(1001, 60000);
  const std::int64_t T = 10;
  memo::token_window_loader a(tokens, T, memo::window_order::shuffled, 7);
  memo::token_window_loader b(tokens, T, memo::window_order::shuffled, 7);
  memo::token_window_loader c(tokens, T, memo::window_order::shuffled, 8);
  std::vector<std::int32_t> in(T), out(T), in_b(T), out_b(T);
  std::vector<std::int64_t> epoch0, epoch1, other;
  for (int i = 0; i < 200; ++i) {
    const auto start = a.next(in, out);
    CHECK(b.next(in_b, out_b) == start);
    CHECK(in == in_b);
    (i < 100 ? epoch0 : epoch1).push_back(start);
    if (i < 100) other.push_back(c.next(in_b, out_b));
    // Whatever the order, a window is the tokens at its start, shifted by one.
    for (std::int64_t t = 0; t < T; ++t) {
      CHECK(in[static_cast<std::size_t>(t)] == tokens[static_cast<std::size_t>(start + t)]);
      CHECK(out[static_cast<std::size_t>(t)] == tokens[static_cast<std::size_t>(start + t + 1)]);
    }
  }
  std::vector<std::int64_t> all(100);
  for (std::int64_t k = 0; k < 100; ++k) all[static_cast<std::size_t>(k)] = k * T;
  auto sorted = [](std::vector<std::int64_t> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  CHECK(sorted(epoch0) == all);
  CHECK(sorted(epoch1) == all);
  CHECK(sorted(other) == all);
  CHECK(epoch0 != all);     // shuffled
  CHECK(epoch0 != epoch1);  // a new permutation each epoch
  CHECK(epoch0 != other);   // another seed, another order

  a.reset();
  CHECK(a.epoch() == 0);
  CHECK(a.next(in, out) == epoch0.front());
}

TEST_CASE("token_data: a batch fills one window per row") {
  const auto tokens = counting_tokens(41, 500);
  memo::token_window_loader loader(tokens, 8, memo::window_order::sequential);
  std::vector<std::int32_t> in(3 * 8), out(3 * 8);
  auto in_view = memo::tensor_view<std::int32_t, 2>::contiguous(in.data(), {3, 8});    // [B, T]
  auto out_view = memo::tensor_view<std::int32_t, 2>::contiguous(out.data(), {3, 8});  // [B, T]
  loader.next_batch(in_view, out_view);
  for (int b = 0; b < 3; ++b)
    for (int t = 0; t < 8; ++t) {
      CHECK(in_view(b, t) == tokens[static_cast<std::size_t>(b * 8 + t)]);
      CHECK(out_view(b, t) == tokens[static_cast<std::size_t>(b * 8 + t + 1)]);
    }
  auto wrong = memo::tensor_view<std::int32_t, 2>::contiguous(in.data(), {4, 6});
  CHECK(contains(error_of([&] { loader.next_batch(wrong, wrong); }), "expected [4, 8]"));
}

TEST_CASE("token_data: too few tokens for one window is an error naming the counts") {
  memo_test::scratch_directory dir;
  const auto path = dir / "short.bin";
  memo::write_token_file(path, counting_tokens(16, 10));
  // 16 tokens hold one window of 15 (15 inputs + 1 more target), not of 16.
  CHECK(memo::token_window_loader::from_file(path, 15).windows_per_epoch() == 1);
  const auto m = error_of([&] { (void)memo::token_window_loader::from_file(path, 16); });
  CHECK(contains(m, path.string()));
  CHECK(contains(m, "16 tokens are too few for one window of context 16 (needs 16 + 1 tokens)"));
  CHECK(contains(error_of([] { memo::token_window_loader l({}, 4); }), "0 tokens are too few"));
  CHECK(contains(error_of([] { memo::token_window_loader l({1, 2, 3}, 0); }),
                 "context length 0 is not positive"));
  // The file's ids are checked against the vocabulary when it is given.
  const auto v = error_of([&] { (void)memo::token_window_loader::from_file(path, 4, memo::window_order::sequential, 0, 5); });
  CHECK(contains(v, "outside the vocabulary of 5 ids"));
  std::vector<std::int32_t> in(3), out(4);
  memo::token_window_loader loader(counting_tokens(20, 10), 4);
  CHECK(contains(error_of([&] { (void)loader.next(in, out); }), "hold 3 and 4"));
}
