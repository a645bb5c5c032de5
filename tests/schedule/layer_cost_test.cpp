#include "memo/schedule/layer_cost.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <string>

using memo::gpt_layer_cost_of;
using memo::gpt_layer_shape;
using memo::skeletal_class;

TEST_CASE("layer_cost: a small layer matches a hand count of every tensor and FLOP") {
  // hidden 8, heads 2, ffn 32 (= 4h), sequence 16, TP 2, CP 2, 2 bytes.
  // Local tokens: 16 / 2 = 8. Elements per token before the TP split:
  //   input 8, input_norm 8, q 8, k 8, v 8, attention_output 8, residual 8,
  //   mlp_input_norm 8, fc1_output 32, activation_output 32  -> 128 = 16 h.
  // Per GPU per token: / 2 (TP) * 2 bytes = the element count itself in bytes:
  //   input 8 B, attention_output 8 B, other 8*6 + 32*2 = 112 B -> 128 B.
  // Times 8 local tokens: input 64 B, attention 64 B, other 896 B, total 1024 B.
  gpt_layer_shape shape;
  shape.hidden = 8;
  shape.heads = 2;
  shape.ffn_hidden = 32;
  shape.sequence = 16;
  shape.tensor_parallel = 2;
  shape.context_parallel = 2;
  shape.bytes_per_element = 2;
  const auto cost = gpt_layer_cost_of(shape);
  CHECK(cost.local_tokens == 8);
  REQUIRE(cost.skeletal.size() == 10);
  CHECK(cost.skeletal_bytes_per_token() == 128);
  CHECK(cost.input_bytes == 64);
  CHECK(cost.attention_output_bytes == 64);
  CHECK(cost.other_bytes == 896);
  CHECK(cost.skeletal_bytes == 1024);
  // FlashAttention's output is 1/16 = 6.25% of the skeletal bytes (Figure 5).
  CHECK(static_cast<double>(cost.attention_output_bytes) / static_cast<double>(cost.skeletal_bytes) ==
        doctest::Approx(0.0625));

  // GEMM FLOPs per token (full layer): QKV 2*8*24 = 384, projection 2*8*8 =
  // 128, FC1 2*8*32 = 512, FC2 512 -> 1536; per GPU: 8 tokens * 1536 / 2 =
  // 6144. Causal attention: 2 * 16^2 * 8 / (2 * 2) = 1024. Forward 7168,
  // backward 14336. Recompute: 8 * (384 + 128 + 512) / 2 = 4096.
  CHECK(cost.forward_gemm_flops == doctest::Approx(6144.0));
  CHECK(cost.forward_attention_flops == doctest::Approx(1024.0));
  CHECK(cost.forward_flops == doctest::Approx(7168.0));
  CHECK(cost.backward_flops == doctest::Approx(14336.0));
  CHECK(cost.recompute_flops == doctest::Approx(4096.0));

  // alpha = 0.25 offloads 64 + 64 + 224 bytes.
  CHECK(cost.offload_bytes(0.25) == doctest::Approx(352.0));

  // TP collectives: 2 all-gathers + 2 reduce-scatters of [8 tokens, 8] * 2 B
  // = 128 B over 2 ranks; CP: K and V, 8 tokens * (2 * 8 / 2) * 2 B = 128 B
  // per rank, gathered over 2 ranks = 256 B.
  REQUIRE(cost.forward_collectives.size() == 5);
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(cost.forward_collectives[i].bytes == 128);
    CHECK(cost.forward_collectives[i].ranks == 2);
  }
  CHECK(cost.forward_collectives[4].bytes == 256);
  CHECK(cost.forward_collectives[4].ranks == 2);
}

TEST_CASE("layer_cost: the 7B layer agrees with MEMO's 16 s h and model-FLOPs formulas") {
  // GPT-7B: h = 4096, 32 heads, ffn 4h; s = 1M tokens, bf16, one GPU.
  // Section 3.2: 16 s h elements per layer; 32 layers in half precision
  // = 4096 GiB for one sequence.
  gpt_layer_shape shape;
  shape.hidden = 4096;
  shape.heads = 32;
  shape.sequence = std::int64_t{1} << 20;
  const auto cost = gpt_layer_cost_of(shape);
  const double s = static_cast<double>(shape.sequence);
  const double h = 4096.0;
  CHECK(static_cast<double>(cost.skeletal_bytes) == doctest::Approx(16.0 * s * h * 2.0));
  CHECK(32.0 * static_cast<double>(cost.skeletal_bytes) == doctest::Approx(4096.0 * 1024 * 1024 * 1024));
  // Section 5.1: model FLOPs per sample 6 s P + 6 n h s^2 with P = 12 h^2 per
  // layer is forward + backward, i.e. 3 x forward; per layer:
  CHECK(3.0 * cost.forward_flops == doctest::Approx(6.0 * s * 12.0 * h * h + 6.0 * h * s * s));

  // TP 4 x CP 2 divides every byte and FLOP by 8.
  shape.tensor_parallel = 4;
  shape.context_parallel = 2;
  const auto split = gpt_layer_cost_of(shape);
  CHECK(split.skeletal_bytes * 8 == cost.skeletal_bytes);
  CHECK(split.forward_flops * 8.0 == doctest::Approx(cost.forward_flops));
  CHECK(split.recompute_flops * 8.0 == doctest::Approx(cost.recompute_flops));
}

TEST_CASE("layer_cost: grouped-query attention shrinks k and v only") {
  gpt_layer_shape shape;
  shape.hidden = 64;
  shape.heads = 8;
  shape.kv_heads = 2;  // h_kv = 64 / 8 * 2 = 16
  shape.sequence = 4;
  shape.bytes_per_element = 1;
  const auto cost = gpt_layer_cost_of(shape);
  for (const auto& tensor : cost.skeletal) {
    if (tensor.name == "k" || tensor.name == "v") {
      CHECK(tensor.bytes_per_token == 16);
      CHECK(tensor.cls == skeletal_class::other);
    }
  }
  // 6 * 64 + 2 * 16 + 2 * 256 = 928 bytes per token.
  CHECK(cost.skeletal_bytes_per_token() == 928);
}

TEST_CASE("layer_cost: splits that do not divide are errors naming the numbers") {
  gpt_layer_shape shape;
  shape.hidden = 4096;
  shape.heads = 32;
  shape.sequence = 1000;
  shape.context_parallel = 3;
  try {
    static_cast<void>(gpt_layer_cost_of(shape));
    FAIL("expected an error");
  } catch (const memo::error& e) {
    CHECK(std::string(e.what()).find("1000") != std::string::npos);
    CHECK(std::string(e.what()).find("3") != std::string::npos);
  }
  shape.context_parallel = 1;
  shape.tensor_parallel = 3;
  CHECK_THROWS_AS(static_cast<void>(gpt_layer_cost_of(shape)), memo::error);
  shape.tensor_parallel = 1;
  shape.sequence = 0;
  CHECK_THROWS_AS(static_cast<void>(gpt_layer_cost_of(shape)), memo::error);
}
