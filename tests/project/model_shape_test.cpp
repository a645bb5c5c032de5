#include "memo/project/model_shape.hpp"

#include <doctest/doctest.h>

using memo::project::parse_model_shape;

TEST_CASE("model_shape: presets are MEMO 5.1's models") {
  const auto m = parse_model_shape("7b");
  CHECK(m.layers == 32);
  CHECK(m.hidden == 4096);
  CHECK(m.heads == 32);
  // 32 x 12 x 4096^2 + 32000 x 4096, by hand.
  CHECK(m.parameters() == doctest::Approx(6442450944.0 + 131072000.0));
  CHECK(parse_model_shape("65b").hidden == 8192);
  CHECK(parse_model_shape("30b").heads == 52);
}

TEST_CASE("model_shape: FLOPs by hand") {
  const auto m = parse_model_shape("2,8,2,10");
  // s = 4: GEMM 24*4*64 = 6144, attention 2*16*8 = 256, classifier 2*4*8*10 = 640.
  CHECK(m.layer_gemm_flops(4) == 6144.0);
  CHECK(m.layer_attention_flops(4) == 256.0);
  CHECK(m.model_flops(4) == 3.0 * (2 * (6144.0 + 256.0) + 640.0));
}

TEST_CASE("model_shape: custom shapes and bad text") {
  const auto m = parse_model_shape("24,2048,16,50257");
  CHECK(m.layers == 24);
  CHECK(m.vocab == 50257);
  CHECK_THROWS_WITH(parse_model_shape("24,2048,16"), doctest::Contains("4 fields"));
  CHECK_THROWS_WITH(parse_model_shape("24,2048,-16,5"), doctest::Contains("'-16' is not a positive integer"));
  CHECK_THROWS_WITH(parse_model_shape("9b"), doctest::Contains("expected 7b, 13b, 30b, 65b or L,C,H,V"));
  CHECK_THROWS_WITH(parse_model_shape("2,100,3,10"), doctest::Contains("not divisible by heads 3"));
}
