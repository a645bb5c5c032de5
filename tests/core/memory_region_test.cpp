#include "memo/core/memory_region.hpp"

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace {

// The parts an owner takes, run once to size and once to carve.
template <class Carver>
std::vector<memo::memory_region> take_parts(Carver& carver) {
  return {carver.take(10, "a"), carver.take(300, "b", 128), carver.take(1, "c", 1),
          carver.take(0, "empty"), carver.take(64, "d", 64)};
}

}  // namespace

TEST_CASE("memory_region: counting and carving take the same offsets, aligned and disjoint") {
  memo::region_carver sizing;
  const auto counted = take_parts(sizing);
  for (const auto& part : counted) CHECK(part.data == nullptr);
  // By hand: a at [0,10), b at [128,428), c at [428,429), empty at [512,512), d at [512,576).
  CHECK(sizing.required_bytes() == 576);

  alignas(256) static std::byte storage[576];
  memo::region_carver carver({storage, sizeof storage}, "test owner");
  const auto parts = take_parts(carver);
  CHECK(parts[0].data == storage);
  CHECK(parts[1].data == storage + 128);
  CHECK(parts[2].data == storage + 428);
  CHECK(parts[4].data == storage + 512);
  for (std::size_t i = 0; i < parts.size(); ++i) CHECK(parts[i].bytes == counted[i].bytes);
  CHECK(carver.used_bytes() == 576);
}

TEST_CASE("memory_region: taking past the end names the owner, the part and the numbers") {
  alignas(256) static std::byte storage[100];
  memo::region_carver carver({storage, sizeof storage}, "chunk slots");
  (void)carver.take(60, "first");
  try {
    (void)carver.take(50, "second", 4);
    FAIL("expected an error");
  } catch (const memo::error& e) {
    const std::string message = e.what();
    CHECK(message.find("chunk slots") != std::string::npos);
    CHECK(message.find("'second'") != std::string::npos);
    CHECK(message.find("[60, 110)") != std::string::npos);
    CHECK(message.find("100 bytes") != std::string::npos);
  }
}

TEST_CASE("memory_region: sizes near the 64-bit limit are errors, not wraps") {
  memo::region_carver sizing;
  (void)sizing.take(16, "small");
  CHECK_THROWS_AS((void)sizing.take(std::numeric_limits<std::size_t>::max() - 8, "huge"),
                  memo::error);
  CHECK_THROWS_AS((void)sizing.take(8, "odd alignment", 24), memo::error);
  const memo::memory_region region{nullptr, 0};
  CHECK(region.empty());
  alignas(256) static std::byte storage[32];
  const memo::memory_region whole{storage, 32};
  CHECK(whole.subregion(8, 24).data == storage + 8);
  CHECK_THROWS_AS((void)whole.subregion(8, 25), memo::error);
  CHECK_THROWS_AS((void)whole.subregion(std::numeric_limits<std::size_t>::max(), 2), memo::error);
}
