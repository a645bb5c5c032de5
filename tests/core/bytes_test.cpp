#include "memo/core/bytes.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <random>

TEST_CASE("bytes: align_up and align_down agree with division on random values") {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 10000; ++i) {
    const std::uint64_t value = rng() % (1ull << 40);
    const std::uint64_t alignment = 1 + rng() % 5000;
    const auto up = memo::align_up(value, alignment);
    const auto down = memo::align_down(value, alignment);
    CHECK(up % alignment == 0);
    CHECK(down % alignment == 0);
    CHECK(up >= value);
    CHECK(up - value < alignment);
    CHECK(down <= value);
    CHECK(value - down < alignment);
    CHECK(memo::is_aligned(up, alignment));
  }
}

TEST_CASE("bytes: powers of two") {
  for (std::uint64_t k = 0; k < 64; ++k) CHECK(memo::is_power_of_two(1ull << k));
  CHECK_FALSE(memo::is_power_of_two(0));
  CHECK_FALSE(memo::is_power_of_two(3));
  CHECK_FALSE(memo::is_power_of_two(96));
}

TEST_CASE("bytes: checked arithmetic refuses to wrap") {
  constexpr auto max = std::numeric_limits<std::uint64_t>::max();
  CHECK(memo::checked_add(1, 2) == 3);
  CHECK(memo::checked_mul(1ull << 20, 1ull << 20) == 1ull << 40);
  CHECK_THROWS_WITH_AS(memo::checked_add(max, 1), doctest::Contains("overflows 64 bits"),
                       memo::error);
  CHECK_THROWS_AS(memo::checked_mul(1ull << 33, 1ull << 33), memo::error);
  CHECK_THROWS_AS(memo::checked_align_up(max - 3, 256), memo::error);
  CHECK(memo::checked_align_up(1000, 256) == 1024);
}

TEST_CASE("bytes: human-readable sizes") {
  CHECK(memo::format_bytes(0) == "0 B");
  CHECK(memo::format_bytes(1023) == "1023 B");
  CHECK(memo::format_bytes(1536) == "1.50 KiB");
  CHECK(memo::format_bytes(3 * memo::gib) == "3.00 GiB");
}
