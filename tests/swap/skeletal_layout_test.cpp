// Tests of memo/swap/skeletal_layout.hpp: validation and the offloaded /
// recomputed token ranges of an offload plan, against hand-worked values.
#include "memo/swap/skeletal_layout.hpp"

#include <doctest/doctest.h>

#include <limits>
#include <vector>

namespace {

using memo::skeletal_policy;

memo::skeletal_layout layout() {
  return memo::skeletal_layout({
      {"input", 100, 8, skeletal_policy::offload_whole},
      {"attn_out", 100, 8, skeletal_policy::offload_whole},
      {"mlp", 100, 32, skeletal_policy::offload_fraction},
      {"norm", 100, 4, skeletal_policy::recompute},
  });
}

}  // namespace

TEST_CASE("skeletal_layout: validates names, sizes and duplicates") {
  CHECK_THROWS_AS(memo::skeletal_layout(std::vector<memo::skeletal_tensor>{}), memo::error);
  CHECK_THROWS_AS(memo::skeletal_layout({{"", 4, 4, skeletal_policy::recompute}}), memo::error);
  CHECK_THROWS_WITH_AS(memo::skeletal_layout({{"a", 4, 4, skeletal_policy::recompute},
                                              {"a", 4, 4, skeletal_policy::recompute}}),
                       doctest::Contains("'a' appears twice"), memo::error);
  CHECK_THROWS_WITH_AS(memo::skeletal_layout({{"a", 0, 4, skeletal_policy::recompute}}),
                       doctest::Contains("has 0 tokens of 4 bytes"), memo::error);
  CHECK_THROWS_AS(memo::skeletal_layout({{"a", 4, 0, skeletal_policy::recompute}}), memo::error);
  const auto huge = std::numeric_limits<std::size_t>::max() / 2;
  CHECK_THROWS_WITH_AS(memo::skeletal_layout({{"a", huge, 4, skeletal_policy::recompute}}),
                       doctest::Contains("overflows"), memo::error);

  const auto l = layout();
  CHECK(l.size() == 4);
  CHECK(l.index_of("mlp") == 2);
  CHECK_THROWS_WITH_AS((void)l.index_of("gelu"), doctest::Contains("no tensor named 'gelu'"),
                       memo::error);
  CHECK(l.layer_bytes() == 800 + 800 + 3200 + 400);
  CHECK(l.bytes_with(skeletal_policy::offload_whole) == 1600);
  CHECK(l.bytes_with(skeletal_policy::offload_fraction) == 3200);
}

TEST_CASE("offload_plan: offloaded prefixes are rounded down to the granularity") {
  const auto l = layout();
  // alpha = 0.37 of 100 tokens = 37; granularity 8 rounds to 32.
  memo::offload_plan plan(l, 0.37, 8);
  CHECK(plan.offloaded(0) == std::vector<memo::token_range>{{0, 100}});
  CHECK(plan.offloaded(1) == std::vector<memo::token_range>{{0, 100}});
  CHECK(plan.offloaded(2) == std::vector<memo::token_range>{{0, 32}});
  CHECK(plan.recomputed(2) == std::vector<memo::token_range>{{32, 100}});
  CHECK(plan.offloaded(3).empty());
  CHECK(plan.recomputed(3) == std::vector<memo::token_range>{{0, 100}});
  CHECK(plan.recomputed(0).empty());
  CHECK(plan.offloaded_bytes_per_layer() == 800 + 800 + 32 * 32);
  CHECK(plan.recomputed_bytes_per_layer() == 68 * 32 + 400);
  CHECK(plan.effective_alpha() == doctest::Approx(0.32));
  CHECK(!plan.shared(2));
  CHECK(plan.shared(3));

  // Granularity 1 keeps floor(alpha * tokens).
  CHECK(memo::offload_plan(l, 0.375, 1).offloaded(2) == std::vector<memo::token_range>{{0, 37}});
  // alpha = 1 offloads everything whatever the granularity.
  memo::offload_plan all(l, 1.0, 64);
  CHECK(all.offloaded(2) == std::vector<memo::token_range>{{0, 100}});
  CHECK(all.recomputed(2).empty());
  CHECK(all.effective_alpha() == 1.0);
  // A share that rounds to zero makes the tensor shared (never offloaded).
  memo::offload_plan tiny(l, 0.05, 8);
  CHECK(tiny.offloaded(2).empty());
  CHECK(tiny.shared(2));
  memo::offload_plan none(l, 0.0);
  CHECK(none.shared(2));
  CHECK(none.offloaded_bytes_per_layer() == 1600);
}

TEST_CASE("offload_plan: alpha outside [0, 1] and zero granularity are errors") {
  CHECK_THROWS_WITH_AS(memo::offload_plan(layout(), -0.01),
                       doctest::Contains("alpha must be in [0, 1]"), memo::error);
  CHECK_THROWS_AS(memo::offload_plan(layout(), 1.01), memo::error);
  CHECK_THROWS_AS(memo::offload_plan(layout(), std::numeric_limits<double>::quiet_NaN()),
                  memo::error);
  CHECK_THROWS_AS(memo::offload_plan(layout(), 0.5, 0), memo::error);
  CHECK_THROWS_AS(memo::offload_plan(memo::skeletal_layout(), 0.5), memo::error);
}

TEST_CASE("offload_plan: plans compare equal only for the same layout and alpha") {
  CHECK(memo::offload_plan(layout(), 0.5) == memo::offload_plan(layout(), 0.5));
  CHECK(!(memo::offload_plan(layout(), 0.5) == memo::offload_plan(layout(), 0.25)));
  auto tensors = layout().tensors();
  tensors[2].bytes_per_token = 16;
  CHECK(!(memo::offload_plan(layout(), 0.5) ==
          memo::offload_plan(memo::skeletal_layout(tensors), 0.5)));
}

TEST_CASE("skeletal_layout: a transformer layer's layout is its skeletal tensors") {
  memo::transformer_layer layer;
  layer.hidden = 64;
  layer.heads = 8;
  layer.kv_heads = 2;
  layer.tokens = 512;
  layer.tensor_parallel = 2;
  const memo::skeletal_layout from_layer(layer);
  CHECK(from_layer == memo::skeletal_layout(layer.skeletal_tensors()));
  CHECK(from_layer.layer_bytes() == layer.skeletal_bytes());
  CHECK(from_layer.bytes_with(skeletal_policy::offload_whole) ==
        layer.input_bytes() + layer.attention_output_bytes());
  CHECK(from_layer.bytes_with(skeletal_policy::offload_fraction) == layer.other_bytes());
  CHECK(from_layer.bytes_with(skeletal_policy::recompute) == 0);
  // alpha = 0 offloads the whole tensors only; alpha = 1 everything.
  CHECK(memo::offload_plan(from_layer, 0.0).offloaded_bytes_per_layer() ==
        layer.input_bytes() + layer.attention_output_bytes());
  CHECK(memo::offload_plan(from_layer, 1.0).offloaded_bytes_per_layer() == layer.skeletal_bytes());
  layer.tensor_parallel = 3;
  CHECK_THROWS_AS(memo::skeletal_layout{layer}, memo::error);
}
