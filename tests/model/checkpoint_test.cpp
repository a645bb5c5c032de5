#include "memo/model/checkpoint.hpp"

#include <doctest/doctest.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "io_test_support.hpp"

namespace {

using memo_test::contains;
using memo_test::error_of;

// L=2, C=8, NH=2, V=10, Vp=16, maxT=12: 1984 parameters.
memo::gpt2_config tiny() { return {12, 10, 16, 2, 2, 8}; }

/// Parameters with arbitrary bit patterns (including NaN payloads, -0,
/// denormals and infinities) so a round trip must be bit-exact, not just equal.
std::vector<float> arbitrary_parameters(std::size_t n, std::uint32_t seed) {
  std::vector<float> p(n);
  std::uint32_t x = seed;
  for (auto& v : p) {
    x = x * 1664525u + 1013904223u;
    v = std::bit_cast<float>(x);
  }
  if (n >= 4) {
    p[0] = -0.0f;
    p[1] = std::numeric_limits<float>::denorm_min();
    p[2] = std::numeric_limits<float>::infinity();
    p[3] = std::bit_cast<float>(0x7fc01234u);  // a quiet NaN with a payload
  }
  return p;
}

std::vector<std::uint32_t> bits_of(const std::vector<float>& v) {
  std::vector<std::uint32_t> b(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) b[i] = std::bit_cast<std::uint32_t>(v[i]);
  return b;
}

/// A checkpoint written by hand from the format description (not by the
/// library): header ints, then the values as little-endian words of `width` bytes.
std::vector<unsigned char> hand_made(std::int32_t version, const memo::gpt2_config& c,
                                     const std::vector<std::uint32_t>& words, int width) {
  std::vector<unsigned char> bytes(1024 + words.size() * static_cast<std::size_t>(width), 0);
  const std::int32_t fields[] = {20240326, version, c.max_seq_len, c.vocab_size,
                                 c.num_layers, c.num_heads, c.channels, c.padded_vocab_size};
  for (std::size_t i = 0; i < 8; ++i) memo_test::set_int32_at(bytes, 4 * i, fields[i]);
  for (std::size_t i = 0; i < words.size(); ++i) {
    for (int k = 0; k < width; ++k) {
      bytes[1024 + i * static_cast<std::size_t>(width) + static_cast<std::size_t>(k)] =
          static_cast<unsigned char>(words[i] >> (8 * k));
    }
  }
  return bytes;
}

}  // namespace

TEST_CASE("checkpoint: a write/read round trip is bit-identical") {
  memo_test::scratch_directory dir;
  const auto path = dir / "tiny.bin";
  const auto params = arbitrary_parameters(1984, 42);
  memo::write_gpt2_checkpoint(path, tiny(), params);

  const memo::gpt2_checkpoint back = memo::read_gpt2_checkpoint(path);
  CHECK(back.config == tiny());
  CHECK(back.stored_as == memo::gpt2_storage::fp32);
  CHECK(bits_of(back.parameters) == bits_of(params));

  const auto info = memo::read_gpt2_checkpoint_info(path, 12);
  CHECK(info.parameter_count == 1984);
  CHECK(info.file_bytes == 1024 + 1984 * 4);
  CHECK(dir.entries() == std::vector<std::string>{"tiny.bin"});
}

TEST_CASE("checkpoint: the file is llm.c's layout, byte for byte") {
  memo_test::scratch_directory dir;
  const auto path = dir / "layout.bin";
  const auto params = arbitrary_parameters(1984, 7);
  memo::write_gpt2_checkpoint(path, tiny(), params);
  const auto expected = hand_made(3, tiny(), bits_of(params), 4);
  const auto bytes = memo_test::file_bytes(path);
  CHECK(bytes == expected);
  // Header fields at llm.c's positions: magic, version, maxT, V, L, NH, C, Vp.
  CHECK(memo_test::int32_at(bytes, 0) == 20240326);
  CHECK(memo_test::int32_at(bytes, 4) == 3);
  CHECK(memo_test::int32_at(bytes, 8) == 12);
  CHECK(memo_test::int32_at(bytes, 12) == 10);
  CHECK(memo_test::int32_at(bytes, 16) == 2);
  CHECK(memo_test::int32_at(bytes, 20) == 2);
  CHECK(memo_test::int32_at(bytes, 24) == 8);
  CHECK(memo_test::int32_at(bytes, 28) == 16);
  for (std::size_t i = 8; i < 256; ++i) CHECK(memo_test::int32_at(bytes, 4 * i) == 0);
}

TEST_CASE("checkpoint: a hand-made llm.c file reads into views at the right tensors") {
  memo_test::scratch_directory dir;
  const auto path = dir / "handmade.bin";
  // Parameter i holds the value i, so a view's element names its own offset.
  std::vector<std::uint32_t> words(1984);
  for (std::size_t i = 0; i < words.size(); ++i) words[i] = std::bit_cast<std::uint32_t>(static_cast<float>(i));
  memo_test::write_bytes(path, hand_made(3, tiny(), words, 4));
  std::vector<float> params(1984);
  memo::read_gpt2_parameters(path, params);
  const auto v = memo::view_gpt2_parameters(tiny(), std::span<const float>(params));
  CHECK(v.wte(0, 0) == 0.0f);
  CHECK(v.wpe(0, 0) == 128.0f);
  CHECK(v.qkvw(1, 2, 3) == 256.0f + 1 * 24 * 8 + 2 * 8 + 3);
  CHECK(v.fcb(1, 31) == 1376.0f + 32 + 31);
  CHECK(v.lnfb(7) == 1983.0f);
}

TEST_CASE("checkpoint: a bf16 (version 5) file is widened to fp32 exactly") {
  memo_test::scratch_directory dir;
  const auto path = dir / "bf16.bin";
  std::vector<std::uint32_t> halves(1984);
  for (std::size_t i = 0; i < halves.size(); ++i) halves[i] = static_cast<std::uint32_t>((i * 40503u + 17u) & 0xffffu);
  halves[0] = 0x3f80;  // 1.0
  halves[1] = 0xc040;  // -3.0
  memo_test::write_bytes(path, hand_made(5, tiny(), halves, 2));
  const auto back = memo::read_gpt2_checkpoint(path);
  CHECK(back.stored_as == memo::gpt2_storage::bf16);
  CHECK(back.parameters[0] == 1.0f);
  CHECK(back.parameters[1] == -3.0f);
  for (std::size_t i = 0; i < halves.size(); ++i) {
    CAPTURE(i);
    CHECK(std::bit_cast<std::uint32_t>(back.parameters[i]) == halves[i] << 16);
  }
  // Its size is checked at 2 bytes per parameter: an fp32-sized file is not a bf16 file.
  auto wrong = hand_made(5, tiny(), halves, 4);
  memo_test::write_bytes(path, wrong);
  CHECK(contains(error_of([&] { (void)memo::read_gpt2_checkpoint(path); }), "3968 trailing bytes"));
}

TEST_CASE("checkpoint: every malformed file is an error naming the file and the value") {
  memo_test::scratch_directory dir;
  const auto path = dir / "bad.bin";
  const std::string name = path.string();
  const auto good = hand_made(3, tiny(), bits_of(arbitrary_parameters(1984, 1)), 4);
  auto read_with = [&](std::vector<unsigned char> bytes) {
    memo_test::write_bytes(path, bytes);
    const auto message = error_of([&] { (void)memo::read_gpt2_checkpoint(path); });
    CHECK(contains(message, name));
    return message;
  };

  SUBCASE("wrong magic") {
    auto b = good;
    memo_test::set_int32_at(b, 0, 20240520);  // a token file's magic
    CHECK(contains(read_with(b), "bad magic 20240520"));
  }
  SUBCASE("wrong version") {
    auto b = good;
    memo_test::set_int32_at(b, 4, 4);
    CHECK(contains(read_with(b), "unsupported checkpoint version 4"));
  }
  SUBCASE("shorter than a header") {
    CHECK(contains(read_with(std::vector<unsigned char>(good.begin(), good.begin() + 1000)),
                   "truncated GPT-2 checkpoint: 1000 bytes"));
  }
  SUBCASE("truncated parameters") {
    auto b = good;
    b.resize(b.size() - 3);
    const auto m = read_with(b);
    CHECK(contains(m, "truncated: " + std::to_string(1024 + 1984 * 4 - 3) + " bytes"));
    CHECK(contains(m, "needs " + std::to_string(1024 + 1984 * 4)));
  }
  SUBCASE("trailing bytes") {
    auto b = good;
    b.insert(b.end(), 5, 0);
    CHECK(contains(read_with(b), "5 trailing bytes"));
  }
  SUBCASE("a header that disagrees with the file size") {
    auto b = good;
    memo_test::set_int32_at(b, 16, 3);  // L = 3: more parameters than the file holds
    const auto m = read_with(b);
    CHECK(contains(m, "truncated"));
    CHECK(contains(m, "L=3"));
  }
  SUBCASE("a non-positive field") {
    auto b = good;
    memo_test::set_int32_at(b, 24, -8);  // C
    CHECK(contains(read_with(b), "channels (C) is -8"));
    memo_test::set_int32_at(b, 24, 8);
    memo_test::set_int32_at(b, 8, 0);  // maxT
    CHECK(contains(read_with(b), "max_seq_len (maxT) is 0"));
  }
  SUBCASE("fields whose sizes overflow") {
    auto b = good;
    memo_test::set_int32_at(b, 16, 2147483647);  // L
    memo_test::set_int32_at(b, 20, 1);           // NH
    memo_test::set_int32_at(b, 24, 2147483647);  // C
    const auto m = read_with(b);
    CHECK(contains(m, "overflows"));
    CHECK(contains(m, "C=2147483647"));
  }
  SUBCASE("Vp below V") {
    auto b = good;
    memo_test::set_int32_at(b, 28, 4);
    CHECK(contains(read_with(b), "padded_vocab_size (Vp) 4 is smaller than vocab_size (V) 10"));
  }
}

TEST_CASE("checkpoint: a context longer than maxT is an error naming both") {
  memo_test::scratch_directory dir;
  const auto path = dir / "ctx.bin";
  memo::write_gpt2_checkpoint(path, tiny(), arbitrary_parameters(1984, 3));
  CHECK(memo::read_gpt2_checkpoint(path, 12).config == tiny());
  auto m = error_of([&] { (void)memo::read_gpt2_checkpoint(path, 13); });
  CHECK(contains(m, path.string()));
  CHECK(contains(m, "context length 13 exceeds the checkpoint's max_seq_len (maxT) 12"));
  m = error_of([&] { (void)memo::read_gpt2_checkpoint_info(path, 0); });
  CHECK(contains(m, "context length 0 is not positive"));
}

TEST_CASE("checkpoint: reading into a buffer of the wrong size names both counts") {
  memo_test::scratch_directory dir;
  const auto path = dir / "size.bin";
  memo::write_gpt2_checkpoint(path, tiny(), arbitrary_parameters(1984, 3));
  std::vector<float> small(1000);
  const auto m = error_of([&] { (void)memo::read_gpt2_parameters(path, small); });
  CHECK(contains(m, path.string()));
  CHECK(contains(m, "holds 1984 parameters"));
  CHECK(contains(m, "holds 1000"));
  // Writing the wrong count is refused before the file is touched.
  const auto w = error_of([&] { memo::write_gpt2_checkpoint(path, tiny(), small); });
  CHECK(contains(w, "1984 parameters, 1000 were given"));
  CHECK(memo::read_gpt2_checkpoint(path).parameters.size() == 1984);
}

TEST_CASE("checkpoint: writing to a full device fails and names it") {
  if (!std::filesystem::exists("/dev/full")) {
    MESSAGE("no /dev/full on this system");
    return;
  }
  const auto m = error_of([] { memo::write_gpt2_checkpoint("/dev/full", tiny(), arbitrary_parameters(1984, 2)); });
  CHECK(contains(m, "'/dev/full'"));
  CHECK(contains(m, "No space left on device"));
}

TEST_CASE("checkpoint: a failed write keeps the existing checkpoint") {
  memo_test::scratch_directory dir;
  const auto path = dir / "keep.bin";
  const auto original = arbitrary_parameters(1984, 11);
  memo::write_gpt2_checkpoint(path, tiny(), original);

  // Part-way: the file size cap stops the write after 4096 of 8960 bytes.
  std::string m;
  {
    memo_test::file_size_cap cap(4096);
    REQUIRE(cap.ok());
    m = error_of([&] { memo::write_gpt2_checkpoint(path, tiny(), arbitrary_parameters(1984, 12)); });
  }
  CHECK(contains(m, path.string()));
  CHECK(contains(m, "File too large"));
  CHECK(bits_of(memo::read_gpt2_checkpoint(path).parameters) == bits_of(original));
  CHECK(dir.entries() == std::vector<std::string>{"keep.bin"});

  // Before writing: an invalid configuration is refused.
  memo::gpt2_config broken = tiny();
  broken.num_heads = 3;
  m = error_of([&] { memo::write_gpt2_checkpoint(path, broken, original); });
  CHECK(contains(m, path.string()));
  CHECK(contains(m, "num_heads (NH) 3"));
  CHECK(bits_of(memo::read_gpt2_checkpoint(path).parameters) == bits_of(original));
  CHECK(dir.entries() == std::vector<std::string>{"keep.bin"});
}

TEST_CASE("checkpoint: a NaN or an infinity is found and named by tensor, element and byte offset") {
  memo_test::scratch_directory dir;
  const auto path = dir / "finite.bin";
  // tiny(): wte [16, 8] = 128 values, then wpe [12, 8]; element 5 of wpe is index 133.
  std::vector<float> p(1984, 0.25f);
  memo::write_gpt2_checkpoint(path, tiny(), p);
  CHECK_NOTHROW(memo::expect_finite_parameters(memo::read_gpt2_checkpoint(path), path));
  p[133] = std::numeric_limits<float>::quiet_NaN();
  p[1000] = std::numeric_limits<float>::infinity();  // after the first: not the one named
  memo::write_gpt2_checkpoint(path, tiny(), p);
  const auto m = error_of([&] { memo::expect_finite_parameters(memo::read_gpt2_checkpoint(path), path); });
  CHECK(contains(m, path.string()));
  CHECK(contains(m, "parameter 133 (wpe element 5, byte offset " + std::to_string(1024 + 4 * 133) + ") is nan"));
  p[133] = 0.0f;
  p[1983] = -std::numeric_limits<float>::infinity();  // the last one: lnfb's last element
  memo::write_gpt2_checkpoint(path, tiny(), p);
  const auto last = error_of([&] { memo::expect_finite_parameters(memo::read_gpt2_checkpoint(path), path); });
  CHECK(contains(last, "parameter 1000 "));
  p[1000] = 0.0f;
  memo::write_gpt2_checkpoint(path, tiny(), p);
  const auto end = error_of([&] { memo::expect_finite_parameters(memo::read_gpt2_checkpoint(path), path); });
  CHECK(contains(end, "parameter 1983 (lnfb element 7, byte offset " + std::to_string(1024 + 4 * 1983) + ") is infinite"));
}
