#include "memo/project/model_shape.hpp"

#include <doctest/doctest.h>

#include "memo/schedule/layer_cost.hpp"

using memo::project::parse_model_shape;

TEST_CASE("model_shape: presets are MEMO Table 2's models and Llama 3 8B") {
  const auto m7 = parse_model_shape("7b");
  CHECK(m7.layers == 32);
  CHECK(m7.hidden == 4096);
  CHECK(m7.heads == 32);
  CHECK(m7.vocab == 50257);
  // 32 x 12 x 4096^2 + 50257 x 4096, by hand.
  CHECK(m7.parameters() == doctest::Approx(6442450944.0 + 205852672.0));
  const auto m30 = parse_model_shape("30b");
  CHECK(m30.layers == 48);
  CHECK(m30.hidden == 7168);
  CHECK(m30.heads == 56);
  // Llama 3 8B: per layer 2 x 4096^2 (Q, O) + 2 x 4096 x 1024 (K, V) + 3 x 4096 x 14336,
  // and untied 128256 x 4096 embedding and classifier: 8.03 billion.
  const auto llama = parse_model_shape("8b");
  const double layer = 2.0 * 4096 * 4096 + 2.0 * 4096 * 1024 + 3.0 * 4096 * 14336;
  CHECK(llama.layer_parameters() == doctest::Approx(layer));
  CHECK(llama.parameters() == doctest::Approx(32 * layer + 2.0 * 128256 * 4096));
  CHECK(llama.parameters() == doctest::Approx(8.03e9).epsilon(0.001));
  CHECK(llama.kv_width() == 1024.0);
}

TEST_CASE("model_shape: FLOPs by hand") {
  const auto m = parse_model_shape("2,8,2,10");
  // s = 4: GEMM 2 x 4 x 12 x 64 = 6144, attention 2 x 16 x 8 = 256, classifier 2 x 4 x 8 x 10 = 640.
  CHECK(m.layer_gemm_flops(4) == 6144.0);
  CHECK(m.layer_attention_flops(4) == 256.0);
  CHECK(m.classifier_flops(4) == 640.0);
  CHECK(m.model_flops(4) == 3.0 * (2 * (6144.0 + 256.0) + 640.0));
}

TEST_CASE("model_shape: model FLOPs are MEMO 5.1's 6 s P + 6 n h s^2 for tied GPT shapes") {
  for (const char* name : {"7b", "13b", "30b", "65b"}) {
    const auto m = parse_model_shape(name);
    for (double s : {65536.0, 1048576.0}) {
      CHECK(m.model_flops(s) == doctest::Approx(6 * s * m.parameters() + 6.0 * m.layers * m.hidden * s * s));
    }
  }
}

TEST_CASE("model_shape: GEMM FLOPs agree with schedule/layer_cost.hpp for every non-gated shape") {
  for (const char* name : {"7b", "65b", "24,2048,16,50257,6144", "8,1024,16,1000,4096,4"}) {
    const auto m = parse_model_shape(name);
    const auto cost = memo::gpt_layer_cost_of(m.layer(65536, 1, 1));
    CHECK(m.layer_gemm_flops(65536) == doctest::Approx(cost.forward_gemm_flops));
    CHECK(m.layer_attention_flops(65536) == doctest::Approx(cost.forward_attention_flops));
  }
}

TEST_CASE("model_shape: custom shapes and bad text") {
  const auto m = parse_model_shape("24,2048,16,50257");
  CHECK(m.layers == 24);
  CHECK(m.vocab == 50257);
  CHECK(m.ffn_width() == 8192.0);
  const auto g = parse_model_shape("32,4096,32,128256,14336,8,swiglu");
  CHECK(g.gated_mlp);
  CHECK(g.kv_head_count() == 8);
  CHECK(g.ffn_width() == 14336.0);
  CHECK_THROWS_WITH(parse_model_shape("24,2048,16"), doctest::Contains("4 to 6 numbers"));
  CHECK_THROWS_WITH(parse_model_shape("24,2048,-16,5"), doctest::Contains("'-16' is not a positive integer"));
  CHECK_THROWS_WITH(parse_model_shape("9b"), doctest::Contains("expected 7b, 13b, 30b, 65b, 8b or L,C,H,V"));
  CHECK_THROWS_WITH(parse_model_shape("2,100,3,10"), doctest::Contains("not divisible by heads 3"));
  CHECK_THROWS_WITH(parse_model_shape("2,96,12,10,384,5"), doctest::Contains("not divisible by kv heads 5"));
  CHECK_THROWS_WITH(parse_model_shape("swiglu"), doctest::Contains("'swiglu' is not a positive integer"));
}

TEST_CASE("model_shape: errors name the field, and an integer too large for it says the bound") {
  CHECK_THROWS_WITH(parse_model_shape("32,4096,32,0"), doctest::Contains("vocab '0' is not a positive integer"));
  CHECK_THROWS_WITH(parse_model_shape("0,4096,32,5"), doctest::Contains("layers '0' is not a positive integer"));
  CHECK_THROWS_WITH(parse_model_shape("32,99999999999,32,5"),
                    doctest::Contains("hidden '99999999999' is not a positive integer up to 2147483647"));
  CHECK_THROWS_WITH(parse_model_shape("2,96,12,10,384,x"), doctest::Contains("kv heads 'x' is not a positive integer"));
  CHECK_THROWS_WITH(parse_model_shape("2,96,12,10,384,4,x"), doctest::Contains("field 7 'x'"));
  // Control bytes and long text are quoted, never echoed raw.
  CHECK_THROWS_WITH(parse_model_shape("\x1b[31m"), doctest::Contains("model '\\x1b[31m'"));
}

TEST_CASE("model_shape: parameters are counted exactly, and a shape beyond 2^48 of them is an error") {
  // 7B by hand: 32 x 12 x 4096^2 + 50257 x 4096.
  CHECK(parse_model_shape("7b").exact_parameters() == 6442450944ULL + 205852672ULL);
  // Llama 3 8B: 32 x (2 x 4096^2 + 2 x 4096 x 1024 + 3 x 4096 x 14336) + 2 x 128256 x 4096.
  CHECK(parse_model_shape("8b").exact_parameters() == 32ULL * 218103808ULL + 2ULL * 128256ULL * 4096ULL);
  // One layer of h = 2^22: 12 x 2^44 = 0.75 x 2^48, plus a vocabulary of 1: below the bound.
  const auto below = parse_model_shape("1,4194304,1,1");
  CHECK(below.exact_parameters() == 12ULL * (1ULL << 44) + 4194304ULL);
  // Two such layers: 1.5 x 2^48.
  CHECK_THROWS_WITH(parse_model_shape("2,4194304,1,1"), doctest::Contains("above the 281474976710656 (2^48)"));
  // Every field at its largest: the count saturates instead of wrapping.
  memo::project::model_shape huge{"huge", 2147483647, 2147483647, 1, 2147483647};
  CHECK(huge.exact_parameters() == ~0ULL);
  CHECK_THROWS_WITH(huge.check(), doctest::Contains("model 'huge': 1.19e+29 parameters"));
  CHECK_THROWS_WITH(parse_model_shape("2147483647,2147483647,1,2147483647"), doctest::Contains("parameters, above"));
}
