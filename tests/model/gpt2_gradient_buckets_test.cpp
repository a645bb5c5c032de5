#include "memo/model/gpt2_gradient_buckets.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <string>

namespace {

const memo::gpt2_config gpt2_small{1024, 50257, 50304, 12, 12, 768};

/// The stage layer every piece of `bucket` belongs to, from the table (-1:
/// a tensor outside the layers), or -2 when its pieces disagree.
std::int64_t layer_of(const memo::gpt2_gradient_bucket& bucket, const memo::gpt2_parameter_table& table,
                      std::int64_t layers) {
  std::int64_t found = -3;
  for (const auto& p : bucket.pieces) {
    for (std::size_t t = 0; t < memo::gpt2_tensor_count; ++t) {
      const auto& info = table.tensors[t];
      if (p.offset < info.offset || p.offset >= info.offset + info.count) continue;
      const auto tensor = static_cast<memo::gpt2_tensor>(t);
      const bool outside = tensor == memo::gpt2_tensor::wte || tensor == memo::gpt2_tensor::wpe ||
                           tensor == memo::gpt2_tensor::lnfw || tensor == memo::gpt2_tensor::lnfb;
      const std::int64_t l =
          outside ? -1 : static_cast<std::int64_t>((p.offset - info.offset) / (info.count / static_cast<std::uint64_t>(layers)));
      found = found == -3 || found == l ? l : -2;
    }
  }
  return found;
}

}  // namespace

TEST_CASE("gpt2_gradient_buckets: GPT-2 small sums a layer's four matrices in place and packs its vectors") {
  const memo::gpt2_parameter_table table = memo::gpt2_parameter_layout(gpt2_small);
  const memo::gpt2_gradient_buckets plan = memo::plan_gpt2_gradient_buckets(table, 12);
  CHECK(plan.covers_once(table.total));
  // Five per layer; the tail: wte and wpe in place (each over 1 MiB), lnfw
  // and lnfb adjacent, one piece of 2 C, summed in place.
  REQUIRE(plan.buckets.size() == 12 * 5 + 3);
  const std::uint64_t C = 768;
  CHECK(plan.staging_floats == 13 * C);
  for (std::int64_t l = 11; l >= 0; --l) {
    CAPTURE(l);
    const auto first = static_cast<std::size_t>(11 - l) * 5;
    int packed = 0;
    for (std::size_t k = first; k < first + 5; ++k) {
      const auto& b = plan.buckets[k];
      CHECK(b.layer == l);
      CHECK(layer_of(b, table, 12) == l);
      if (b.packed) {
        ++packed;
        CHECK(b.pieces.size() == 8);
        CHECK(b.count() == 13 * C);
      } else {
        CHECK(b.pieces.size() == 1);
        CHECK(b.count() * sizeof(float) >= memo::gpt2_gradient_buckets::default_in_place_bytes);
      }
    }
    CHECK(packed == 1);
  }
  for (std::size_t k = 60; k < plan.buckets.size(); ++k) {
    CHECK(plan.buckets[k].layer == -1);
    CHECK_FALSE(plan.buckets[k].packed);
    CHECK(layer_of(plan.buckets[k], table, 12) == -1);
  }
  CHECK(plan.buckets.back().count() == 2 * C);
}

TEST_CASE("gpt2_gradient_buckets: a small stage packs each layer into one bucket, and the tail into one") {
  const memo::gpt2_config tiny{64, 11, 16, 4, 4, 16};
  for (const bool first : {true, false}) {
    CAPTURE(first);
    // A middle stage holds no tail at all.
    for (const bool last : {true, false}) {
      const memo::gpt2_parameter_table table = memo::gpt2_stage_parameter_layout(tiny, 2, first, last);
      const memo::gpt2_gradient_buckets plan = memo::plan_gpt2_gradient_buckets(table, 2);
      CHECK(plan.covers_once(table.total));
      const std::size_t tail = first || last ? 1 : 0;
      REQUIRE(plan.buckets.size() == 2 + tail);
      CHECK(plan.buckets[0].layer == 1);
      CHECK(plan.buckets[1].layer == 0);
      for (std::size_t k = 0; k < 2; ++k) {
        CHECK(plan.buckets[k].packed);
        CHECK(plan.buckets[k].pieces.size() == 12);
        CHECK(layer_of(plan.buckets[k], table, 2) == plan.buckets[k].layer);
      }
      if (tail == 1) {
        CHECK(plan.buckets[2].layer == -1);
        // wte + wpe are adjacent (one piece), lnfw + lnfb too; the last
        // stage's wte and lnf are not.
        CHECK(plan.buckets[2].pieces.size() == (last ? 2u : 1u));
        CHECK(plan.buckets[2].packed == last);
      }
      CHECK(plan.staging_floats == 12 * 16 * 16 + 13 * 16);
    }
  }
}

TEST_CASE("gpt2_gradient_buckets: with no size threshold every piece is a bucket of its own") {
  const memo::gpt2_parameter_table table = memo::gpt2_parameter_layout({64, 11, 16, 3, 4, 16});
  const memo::gpt2_gradient_buckets plan = memo::plan_gpt2_gradient_buckets(table, 3, 0);
  CHECK(plan.covers_once(table.total));
  CHECK(plan.buckets.size() == 3 * 12 + 4);
  CHECK(plan.staging_floats == 0);
  for (const auto& b : plan.buckets) CHECK_FALSE(b.packed);
}

TEST_CASE("gpt2_gradient_buckets: a gap or an overlap is not a cover, and a stage without layers is refused") {
  memo::gpt2_gradient_buckets plan;
  plan.buckets.push_back({0, false, {{0, 4}}});
  plan.buckets.push_back({-1, true, {{4, 2}, {8, 2}}});
  CHECK_FALSE(plan.covers_once(10));  // [6, 8) missing
  plan.buckets.push_back({-1, false, {{5, 3}}});
  CHECK_FALSE(plan.covers_once(10));  // 5 twice
  plan.buckets.back() = {-1, false, {{6, 2}}};
  CHECK(plan.covers_once(10));
  const memo::gpt2_parameter_table table = memo::gpt2_parameter_layout({64, 11, 16, 3, 4, 16});
  CHECK_THROWS_WITH_AS(memo::plan_gpt2_gradient_buckets(table, 0),
                       doctest::Contains("plan_gpt2_gradient_buckets: a stage of 0 layers"), memo::error);
}
