// Tests of memo/core/transformer_layer.hpp: the skeletal tensors of one GPU
// against a hand-worked table and against a brute-force split of the whole
// layer's tensors over tensor- and context-parallel ranks; validation
// messages; 64-bit overflow.
#include "memo/core/transformer_layer.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

using memo::skeletal_policy;
using memo::transformer_layer;

namespace {

// h 16, a 4 (head_dim 4), a_kv 2 (h_kv 8), f 24, s 32, t 2, c 2, e 2.
transformer_layer small_gqa_layer() {
  transformer_layer layer;
  layer.hidden = 16;
  layer.heads = 4;
  layer.kv_heads = 2;
  layer.ffn_hidden = 24;
  layer.tokens = 32;
  layer.tensor_parallel = 2;
  layer.context_parallel = 2;
  layer.bytes_per_element = 2;
  return layer;
}

}  // namespace

TEST_CASE("transformer_layer: the skeletal tensors of a small GQA layer, by hand") {
  // h 16, a 4 (head_dim 4), a_kv 2 (h_kv 8), f 24, s 32, t 2, c 2, e 2.
  // One GPU: T = 16 tokens; the layernorm region holds T / t = 8 whole
  // tokens, the attention / MLP region all 16 tokens at 1/t of the width.
  transformer_layer layer = small_gqa_layer();
  CHECK(layer.local_tokens() == 16);
  CHECK(layer.head_dim() == 4);
  CHECK(layer.kv_width() == 8);
  CHECK(layer.ffn_width() == 24);

  const auto whole = skeletal_policy::offload_whole;
  const auto fraction = skeletal_policy::offload_fraction;
  const std::vector<memo::skeletal_tensor> expected = {
      {"input", 8, 32, whole},                     // [8, 16] bf16
      {"input_norm", 8, 32, fraction},             // [8, 16] bf16
      {"input_norm_stats", 8, 8, fraction},        // [8, 2] fp32
      {"q", 16, 16, fraction},                     // [16, 16 / 2] bf16
      {"k", 16, 8, fraction},                      // [16, 8 / 2] bf16
      {"v", 16, 8, fraction},                      // [16, 8 / 2] bf16
      {"attention_output", 16, 16, whole},         // [16, 16 / 2] bf16
      {"attention_lse", 16, 8, whole},             // [16, 4 / 2 heads] fp32
      {"residual", 8, 32, fraction},               // [8, 16] bf16
      {"mlp_input_norm", 8, 32, fraction},         // [8, 16] bf16
      {"mlp_input_norm_stats", 8, 8, fraction},    // [8, 2] fp32
      {"fc1_output", 16, 24, fraction},            // [16, 24 / 2] bf16
      {"activation_output", 16, 24, fraction},     // [16, 24 / 2] bf16
  };
  CHECK(layer.skeletal_tensors() == expected);
  // 256 input; 256 + 128 attention; the rest other.
  CHECK(layer.input_bytes() == 256);
  CHECK(layer.attention_output_bytes() == 256 + 128);
  CHECK(layer.other_bytes() == 256 + 64 + 256 + 128 + 128 + 256 + 256 + 64 + 384 + 384);
  CHECK(layer.skeletal_bytes() ==
        layer.input_bytes() + layer.attention_output_bytes() + layer.other_bytes());
  // q [16, 8] + k [16, 4] + v [16, 4] bf16.
  CHECK(layer.qkv_bytes() == 256 + 128 + 128);
  // An attention that keeps Q, K and V itself: they are not skeletal.
  transformer_layer keeps = layer;
  keeps.attention_keeps_qkv = true;
  std::vector<memo::skeletal_tensor> without;
  for (const auto& t : expected) {
    if (t.name != "q" && t.name != "k" && t.name != "v") without.push_back(t);
  }
  CHECK(keeps.skeletal_tensors() == without);
  CHECK(keeps.input_bytes() == layer.input_bytes());
  CHECK(keeps.attention_output_bytes() == layer.attention_output_bytes());
  CHECK(keeps.other_bytes() == layer.other_bytes() - 512);
  CHECK(keeps.skeletal_bytes() == layer.skeletal_bytes() - 512);
  CHECK(keeps.qkv_bytes() == 512);
  // A [T, 3] fp32 activation on one GPU: 16 / 2 tokens x 12 B.
  CHECK(layer.activation_bytes(12) == 96);
}

TEST_CASE("transformer_layer: the attention's host fetches, chunk pair by chunk pair") {
  // The same small GQA layer: one GPU's q is 16 tokens x 16 B (8 columns
  // of bf16 after TP 2), its k + v 16 tokens x 16 B.
  transformer_layer layer = small_gqa_layer();
  CHECK(layer.attention_fetch_bytes(false) == 0);  // the skeletal tensors hold q, k and v
  CHECK(layer.attention_fetch_bytes(true) == 0);
  layer.attention_keeps_qkv = true;
  // By hand, chunks of 4 tokens (u = 4): the forward fetches 0 + 1 + 2 + 3
  // K/V chunks of 64 B; the backward every K/V chunk once (256 B) and, for
  // key chunk j, the query chunks j..3: 4 + 3 + 2 + 1 chunks of 64 B.
  layer.attention_chunk = 4;
  CHECK(layer.attention_fetch_bytes(false) == 6 * 64);
  CHECK(layer.attention_fetch_bytes(true) == 256 + 10 * 64);
  // One chunk (0 = all 16 tokens): nothing fetched forward, q, k, v once back.
  layer.attention_chunk = 0;
  CHECK(layer.attention_fetch_bytes(false) == 0);
  CHECK(layer.attention_fetch_bytes(true) == layer.qkv_bytes());
  // Brute force over the pairs of a loop like the attention's, every chunk
  // size from 1 to T, short last chunks included.
  const std::uint64_t q_row = 16, kv_row = 16, T = 16;
  for (std::int64_t c = 1; c <= 16; ++c) {
    layer.attention_chunk = c;
    std::uint64_t forward = 0, backward = 0;
    for (std::uint64_t i = 0; i * c < T; ++i) {  // query chunk i
      for (std::uint64_t j = 0; j < i; ++j) forward += kv_row * std::min<std::uint64_t>(c, T - j * c);
    }
    for (std::uint64_t j = 0; j * c < T; ++j) {  // key chunk j, then its query chunks i >= j
      backward += kv_row * std::min<std::uint64_t>(c, T - j * c);
      for (std::uint64_t i = j; i * c < T; ++i) backward += q_row * std::min<std::uint64_t>(c, T - i * c);
    }
    CAPTURE(c);
    CHECK(layer.attention_fetch_bytes(false) == forward);
    CHECK(layer.attention_fetch_bytes(true) == backward);
  }
  layer.attention_chunk = 17;
  CHECK_THROWS_WITH_AS(layer.check(),
                       doctest::Contains("attention_chunk 17 exceeds the 16 tokens per context-parallel rank"),
                       memo::error);
  layer.attention_chunk = -2;
  CHECK_THROWS_WITH_AS(layer.check(),
                       doctest::Contains("attention_chunk must be positive (or 0 for all local tokens), got -2"),
                       memo::error);
}

TEST_CASE("transformer_layer: one GPU holds 1 / (t c) of every tensor of the whole layer") {
  // Brute force: the whole layer's tensor of (elements per token x element
  // bytes) over all s tokens, divided over t x c ranks.
  struct shape {
    std::int64_t hidden, heads, kv_heads, ffn, tokens, tp, cp, bytes;
  };
  const shape shapes[] = {
      {64, 8, 0, 0, 96, 1, 1, 2},     {64, 8, 2, 0, 96, 2, 3, 2},  {96, 12, 4, 200, 240, 4, 2, 4},
      {128, 16, 16, 512, 64, 8, 1, 1}, {48, 6, 3, 96, 72, 3, 4, 2},
  };
  for (const auto& x : shapes) {
    transformer_layer layer;
    layer.hidden = x.hidden;
    layer.heads = x.heads;
    layer.kv_heads = x.kv_heads;
    layer.ffn_hidden = x.ffn;
    layer.tokens = x.tokens;
    layer.tensor_parallel = x.tp;
    layer.context_parallel = x.cp;
    layer.bytes_per_element = x.bytes;
    CAPTURE(x.hidden);
    CAPTURE(x.tp);
    CAPTURE(x.cp);
    const std::int64_t h_kv = x.hidden / x.heads * (x.kv_heads == 0 ? x.heads : x.kv_heads);
    const std::int64_t f = x.ffn == 0 ? 4 * x.hidden : x.ffn;
    const std::int64_t e = x.bytes;
    // Whole layer, bytes per token: input; attention (output + lse); other.
    const std::int64_t input = e * x.hidden;
    const std::int64_t attention = e * x.hidden + 4 * x.heads;
    const std::int64_t other = e * (x.hidden /*norm*/ + x.hidden /*q*/ + 2 * h_kv + x.hidden /*residual*/ +
                                    x.hidden /*mlp norm*/ + 2 * f) +
                               2 * 8 /*two layernorms' mean and 1/std*/;
    const std::int64_t ranks = x.tp * x.cp;
    CHECK(layer.input_bytes() == static_cast<std::uint64_t>(input * x.tokens / ranks));
    CHECK(layer.attention_output_bytes() == static_cast<std::uint64_t>(attention * x.tokens / ranks));
    CHECK(layer.other_bytes() == static_cast<std::uint64_t>(other * x.tokens / ranks));
    std::uint64_t listed = 0;
    std::uint64_t whole = 0;
    for (const auto& tensor : layer.skeletal_tensors()) {
      listed += tensor.bytes();
      if (tensor.policy == skeletal_policy::offload_whole) whole += tensor.bytes();
      CHECK(tensor.policy != skeletal_policy::recompute);
    }
    CHECK(listed == layer.skeletal_bytes());
    CHECK(whole == layer.input_bytes() + layer.attention_output_bytes());
  }
}

TEST_CASE("transformer_layer: MEMO's 16 s h elements for h_kv = h and f = 4h") {
  transformer_layer layer;  // 7B: h 4096, 32 heads, 64K tokens, bf16
  const std::uint64_t s = 65536;
  const std::uint64_t h = 4096;
  std::uint64_t figure5 = 0;
  std::uint64_t attention_output = 0;
  for (const auto& tensor : layer.skeletal_tensors()) {
    if (tensor.name.find("stats") == std::string::npos && tensor.name != "attention_lse") {
      figure5 += tensor.bytes();
    }
    if (tensor.name == "attention_output") attention_output = tensor.bytes();
  }
  CHECK(figure5 == 16 * s * h * 2);
  CHECK(attention_output * 16 == figure5);  // 6.25%
  CHECK(layer.skeletal_bytes() == figure5 + s * (2 * 8 + 32 * 4));
}

TEST_CASE("transformer_layer: bad sizes and splits are errors naming the numbers") {
  auto fails_with = [](transformer_layer layer, const std::string& text) {
    CAPTURE(text);
    CHECK_THROWS_WITH_AS(layer.check(), doctest::Contains(text.c_str()), memo::error);
    CHECK_THROWS_AS((void)layer.skeletal_tensors(), memo::error);
  };
  transformer_layer layer;
  CHECK_NOTHROW(layer.check());
  layer.hidden = 0;
  fails_with(layer, "hidden must be positive, got 0");
  layer = {};
  layer.tokens = -5;
  fails_with(layer, "tokens must be positive, got -5");
  layer = {};
  layer.kv_heads = -1;
  fails_with(layer, "kv_heads must be positive (or 0 for heads), got -1");
  layer = {};
  layer.context_parallel = 0;
  fails_with(layer, "context_parallel must be positive, got 0");
  layer = {};
  layer.heads = 3;
  fails_with(layer, "hidden 4096 is not a multiple of heads 3");
  layer = {};
  layer.kv_heads = 5;
  fails_with(layer, "heads 32 is not a multiple of kv_heads 5");
  layer = {};
  layer.tokens = 1000;
  layer.context_parallel = 3;
  fails_with(layer, "1000 tokens do not split over 3 context-parallel ranks");
  layer = {};
  layer.tokens = 1000;
  layer.context_parallel = 2;
  layer.tensor_parallel = 3;
  fails_with(layer, "500 tokens per context-parallel rank do not split over 3 tensor-parallel ranks");
  layer = {};
  layer.kv_heads = 4;
  layer.tensor_parallel = 8;
  fails_with(layer, "4 kv_heads do not split over 8 tensor-parallel ranks");
  layer = {};
  layer.ffn_hidden = 1000;
  layer.tensor_parallel = 16;
  fails_with(layer, "ffn width 1000 does not split over 16 tensor-parallel ranks");
}

TEST_CASE("transformer_layer: byte counts that overflow 64 bits are errors") {
  transformer_layer layer;
  layer.tokens = std::int64_t{1} << 40;
  layer.hidden = std::int64_t{1} << 30;
  layer.heads = 1;
  CHECK_THROWS_WITH_AS(layer.check(), doctest::Contains("overflows 64 bits"), memo::error);
  CHECK_THROWS_AS((void)layer.skeletal_bytes(), memo::error);
  // A hidden size near the 64-bit limit.
  layer = {};
  layer.hidden = std::numeric_limits<std::int64_t>::max() / 2;
  layer.heads = 1;
  layer.tokens = 1;
  CHECK_THROWS_AS(layer.check(), memo::error);
  // Just below the limit is fine: 2^31 tokens x 2^14 hidden x 2 B x 16.
  layer = {};
  layer.tokens = std::int64_t{1} << 31;
  layer.hidden = std::int64_t{1} << 14;
  layer.heads = 128;
  CHECK(layer.skeletal_bytes() > (std::uint64_t{1} << 50));
}
