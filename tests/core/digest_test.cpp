#include "memo/core/digest.hpp"

#include <doctest/doctest.h>

#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace {

std::uint64_t of_text(std::string_view text) {
  return memo::digest{}.add(std::span<const char>(text.data(), text.size())).value();
}

}  // namespace

TEST_CASE("digest: FNV-1a 64 of the published test strings") {
  // The values the FNV authors publish for the 64-bit FNV-1a.
  CHECK(of_text("") == 0xcbf29ce484222325ull);
  CHECK(of_text("a") == 0xaf63dc4c8601ec8cull);
  CHECK(of_text("foobar") == 0x85944171f73967e8ull);
}

TEST_CASE("digest: adding in pieces is adding the concatenation, and order and bits count") {
  const std::vector<std::int32_t> tokens{3, 1, 4, 1, 5, 9, 2, 6};
  const std::uint64_t whole = memo::digest{}.add(std::span<const std::int32_t>(tokens)).value();
  memo::digest pieces;
  pieces.add(std::span<const std::int32_t>(tokens).first(3)).add(std::span<const std::int32_t>(tokens).subspan(3));
  CHECK(pieces.value() == whole);
  std::vector<std::int32_t> swapped = tokens;
  std::swap(swapped[0], swapped[1]);
  CHECK(memo::digest{}.add(std::span<const std::int32_t>(swapped)).value() != whole);
  CHECK(memo::digest{}.add(0.0).value() != memo::digest{}.add(-0.0).value());
  // One value is its bytes, little end first on this machine.
  const std::uint32_t one = 0x64636261;  // "abcd"
  CHECK(memo::digest{}.add(one).value() == of_text("abcd"));
}
