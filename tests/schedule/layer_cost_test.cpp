#include "memo/schedule/layer_cost.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <string>

using memo::gpt_layer_cost_of;
using memo::skeletal_policy;
using memo::transformer_layer;

namespace {

// Bytes of the tensors MEMO's Figure 5 draws: every skeletal tensor but the
// fp32 statistics the figure leaves out.
std::uint64_t figure5_bytes(const memo::gpt_layer_cost& cost) {
  std::uint64_t total = 0;
  for (const auto& tensor : cost.skeletal) {
    if (tensor.name.find("stats") == std::string::npos && tensor.name != "attention_lse") {
      total += tensor.bytes();
    }
  }
  return total;
}

}  // namespace

TEST_CASE("layer_cost: a small layer matches a hand count of every tensor and FLOP") {
  // hidden 8, heads 2, ffn 32 (= 4h), sequence 16, TP 2, CP 2, 2 bytes.
  // Local tokens: 16 / 2 = 8. Elements per token before the TP split:
  //   input 8, input_norm 8, q 8, k 8, v 8, attention_output 8, residual 8,
  //   mlp_input_norm 8, fc1_output 32, activation_output 32  -> 128 = 16 h.
  // Per GPU: the layernorm region (input, input_norm, residual,
  // mlp_input_norm) holds 8 / 2 = 4 whole tokens of 16 B; the rest holds 8
  // tokens of half a token each. Either way a GPU holds 8 tokens x 128 / 2
  // elements x 2 B: input 64 B, attention_output 64 B, other 896 B -> 1024 B.
  // The backward also reads fp32 statistics: two layernorms' mean and 1/std
  // (4 tokens x 8 B = 32 B each, token-wise, "other") and the attention's
  // log-sum-exp (8 tokens x 1 head per GPU x 4 B = 32 B, kept with the
  // attention output): attention 96 B, other 960 B, total 1120 B.
  transformer_layer shape;
  shape.hidden = 8;
  shape.heads = 2;
  shape.ffn_hidden = 32;
  shape.tokens = 16;
  shape.tensor_parallel = 2;
  shape.context_parallel = 2;
  shape.bytes_per_element = 2;
  const auto cost = gpt_layer_cost_of(shape);
  CHECK(cost.local_tokens == 8);
  REQUIRE(cost.skeletal.size() == 13);
  CHECK(figure5_bytes(cost) == 1024);
  CHECK(cost.input_bytes == 64);
  CHECK(cost.attention_output_bytes == 64 + 32);
  CHECK(cost.other_bytes == 896 + 2 * 32);
  CHECK(cost.skeletal_bytes == 1120);
  std::uint64_t listed = 0;
  for (const auto& tensor : cost.skeletal) listed += tensor.bytes();
  CHECK(listed == cost.skeletal_bytes);
  // FlashAttention's output is 1/16 = 6.25% of Figure 5's bytes.
  std::uint64_t attention_output = 0;
  for (const auto& tensor : cost.skeletal) {
    if (tensor.name == "attention_output") {
      attention_output = tensor.bytes();
      CHECK(tensor.tokens == 8);
      CHECK(tensor.bytes_per_token == 8);
    }
    if (tensor.name == "input") {
      CHECK(tensor.tokens == 4);
      CHECK(tensor.bytes_per_token == 16);
    }
  }
  CHECK(static_cast<double>(attention_output) / static_cast<double>(figure5_bytes(cost)) ==
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
  CHECK(cost.attention_host_bytes == 0);

  // An attention that keeps Q, K and V itself: q, k, v (8 tokens x 3 x 8 / 2
  // elements x 2 B = 192 B) leave S_others for its host store, and the
  // rebuild needs no QKV GEMM: 8 * (128 + 512) / 2 = 2560.
  transformer_layer keeps = shape;
  keeps.attention_keeps_qkv = true;
  const auto fpdt = gpt_layer_cost_of(keeps);
  CHECK(fpdt.skeletal.size() == 10);
  CHECK(fpdt.other_bytes == cost.other_bytes - 192);
  CHECK(fpdt.skeletal_bytes == cost.skeletal_bytes - 192);
  CHECK(fpdt.attention_host_bytes == 192);
  CHECK(fpdt.recompute_flops == doctest::Approx(2560.0));
  CHECK(fpdt.forward_flops == doctest::Approx(cost.forward_flops));

  // alpha = 0.25 offloads 64 + 96 + 960 / 4 bytes.
  CHECK(cost.offload_bytes(0.25) == doctest::Approx(400.0));

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
  transformer_layer shape;
  shape.hidden = 4096;
  shape.heads = 32;
  shape.tokens = std::int64_t{1} << 20;
  const auto cost = gpt_layer_cost_of(shape);
  const double s = static_cast<double>(shape.tokens);
  const double h = 4096.0;
  CHECK(static_cast<double>(figure5_bytes(cost)) == doctest::Approx(16.0 * s * h * 2.0));
  CHECK(32.0 * static_cast<double>(figure5_bytes(cost)) == doctest::Approx(4096.0 * 1024 * 1024 * 1024));
  // Plus the statistics: 2 x 8 B (layernorms) + 32 x 4 B (log-sum-exp) per token.
  CHECK(cost.skeletal_bytes == figure5_bytes(cost) + (std::uint64_t{1} << 20) * (2 * 8 + 32 * 4));
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
  transformer_layer shape;
  shape.hidden = 64;
  shape.heads = 8;
  shape.kv_heads = 2;  // h_kv = 64 / 8 * 2 = 16
  shape.tokens = 4;
  shape.bytes_per_element = 1;
  const auto cost = gpt_layer_cost_of(shape);
  int kv_tensors = 0;
  for (const auto& tensor : cost.skeletal) {
    if (tensor.name == "k" || tensor.name == "v") {
      ++kv_tensors;
      CHECK(tensor.bytes_per_token == 16);
      CHECK(tensor.policy == skeletal_policy::offload_fraction);
    }
  }
  CHECK(kv_tensors == 2);
  // Figure 5's tensors: 6 * 64 + 2 * 16 + 2 * 256 = 928 bytes per token;
  // with the statistics (2 * 8 + 8 heads * 4) 976, for 4 tokens.
  CHECK(figure5_bytes(cost) == 4 * 928);
  CHECK(cost.skeletal_bytes == 4 * 976);
}

TEST_CASE("layer_cost: splits that do not divide are errors naming the numbers") {
  transformer_layer shape;
  shape.hidden = 4096;
  shape.heads = 32;
  shape.tokens = 1000;
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
  shape.tokens = 0;
  CHECK_THROWS_AS(static_cast<void>(gpt_layer_cost_of(shape)), memo::error);
}
