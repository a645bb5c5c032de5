#include "memo/pipeline/fpdt_shuffle.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "memo/core/error.hpp"
#include "pipeline_test_support.hpp"

namespace {

// The layout from its definition, written out: rank r's chunks are the
// global chunks r, r + P, r + 2P, ... in that order.
std::vector<std::int64_t> reference_positions(std::int64_t P, std::int64_t u, std::int64_t c, std::int64_t r) {
  std::vector<std::int64_t> chunks;
  for (std::int64_t g = 0; g < P * u; ++g) {
    if (g % P == r) chunks.push_back(g);
  }
  std::vector<std::int64_t> positions;
  for (const std::int64_t g : chunks) {
    for (std::int64_t k = 0; k < c; ++k) positions.push_back(g * c + k);
  }
  return positions;
}

}  // namespace

TEST_CASE("fpdt_shuffle: local tokens map to the rank-ordinal global positions") {
  for (std::int64_t P : {1, 2, 3, 4}) {
    for (std::int64_t u : {1, 2, 5}) {
      for (std::int64_t c : {1, 3, 8}) {
        const memo::fpdt_layout layout(P, u, c);
        CHECK(layout.sequence_tokens() == P * u * c);
        for (std::int64_t r = 0; r < P; ++r) {
          const auto want = reference_positions(P, u, c, r);
          REQUIRE(static_cast<std::int64_t>(want.size()) == layout.local_tokens());
          for (std::int64_t t = 0; t < layout.local_tokens(); ++t) {
            CHECK(layout.global_token(r, t) == want[static_cast<std::size_t>(t)]);
          }
        }
      }
    }
  }
}

TEST_CASE("fpdt_shuffle: shuffle then unshuffle on every rank restores the sequence, with width") {
  for (std::int64_t width : {1, 3}) {
    const memo::fpdt_layout layout(3, 4, 5);
    std::vector<std::int32_t> global(static_cast<std::size_t>(layout.sequence_tokens() * width));
    std::iota(global.begin(), global.end(), 1000);
    std::vector<std::int32_t> back(global.size(), -1);
    for (std::int64_t r = 0; r < layout.ranks(); ++r) {
      std::vector<std::int32_t> local(static_cast<std::size_t>(layout.local_tokens() * width));
      layout.shuffle<std::int32_t>(global, r, local, width);
      const auto positions = reference_positions(3, 4, 5, r);
      for (std::size_t t = 0; t < positions.size(); ++t) {
        for (std::int64_t k = 0; k < width; ++k) {
          CHECK(local[t * static_cast<std::size_t>(width) + static_cast<std::size_t>(k)] ==
                global[static_cast<std::size_t>(positions[t] * width + k)]);
        }
      }
      layout.unshuffle<std::int32_t>(local, r, back, width);
    }
    CHECK(back == global);
  }
}

TEST_CASE("fpdt_shuffle: after the all-to-all of local chunk j the ranks' chunks are one contiguous group") {
  const std::int64_t P = 4, u = 3, c = 2;
  const memo::fpdt_layout layout(P, u, c);
  for (std::int64_t j = 0; j < u; ++j) {
    // The gather side of the all-to-all concatenates local chunk j of ranks 0..P-1.
    std::vector<std::int64_t> gathered;
    for (std::int64_t r = 0; r < P; ++r) {
      for (std::int64_t k = 0; k < c; ++k) gathered.push_back(layout.global_token(r, j * c + k));
    }
    for (std::size_t t = 0; t < gathered.size(); ++t) {
      CHECK(gathered[t] == layout.group_begin(j) + static_cast<std::int64_t>(t));
    }
  }
}

TEST_CASE("fpdt_shuffle: shapes that do not divide and wrong spans are errors naming the numbers") {
  CHECK(memo_test::error_of([] {
          (void)memo::fpdt_layout::for_sequence(100, 4, 8);
        }).find("100 tokens is not a multiple of ranks x chunk = 4 x 8") != std::string::npos);
  CHECK(memo_test::error_of([] { (void)memo::fpdt_layout::for_sequence(64, 4, 32); }).find("not a multiple") !=
        std::string::npos);
  CHECK(memo::fpdt_layout::for_sequence(64, 4, 8).chunks_per_rank() == 2);
  CHECK(memo_test::error_of([] { memo::fpdt_layout(0, 1, 1); }).find("ranks 0") != std::string::npos);
  CHECK(memo_test::error_of([] { memo::fpdt_layout(2, INT64_MAX / 2, 4); }).find("overflows") != std::string::npos);
  const memo::fpdt_layout layout(2, 2, 2);
  std::vector<int> global(8), local(3);
  CHECK(memo_test::error_of([&] { layout.shuffle<int>(global, 0, local); }).find("expected 8 and 4") !=
        std::string::npos);
  local.resize(4);
  CHECK(memo_test::error_of([&] { layout.shuffle<int>(global, 2, local); }).find("rank 2 is outside [0, 2)") !=
        std::string::npos);
  CHECK(layout.group_begin(2) == 8);  // the chunk count gives the end
  CHECK(memo_test::error_of([&] { (void)layout.group_begin(3); }).find("chunk group 3 is outside [0, 2]") !=
        std::string::npos);
  CHECK(memo_test::error_of([&] { (void)layout.group_begin(-1); }).find("chunk group -1 is outside [0, 2]") !=
        std::string::npos);
}
