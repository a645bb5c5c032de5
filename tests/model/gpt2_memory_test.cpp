#include "memo/model/gpt2_memory.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "memo/plan/bilevel_planner.hpp"

namespace {

memo::gpt2_config shape() { return {64, 11, 16, 3, 4, 32}; }  // maxT, V, Vp, L, NH, C

}  // namespace

TEST_CASE("gpt2_memory: the skeletal layout holds what transformer_layer counts for the alpha LP") {
  const memo::gpt2_config c = shape();
  const std::int64_t T = 48;
  const memo::skeletal_layout layout = memo::gpt2_skeletal_layout(c, T);
  const memo::transformer_layer layer = memo::gpt2_transformer_layer(c, T);
  using enum memo::skeletal_policy;
  // By hand: x, ln1, qkv (3C), atty, res2, ln2, fch (4C), gelu (4C) are 16 C
  // floats per token; two layernorms keep a mean and a 1/std each; the
  // log-sum-exp is one float per head.
  const std::uint64_t per_token = 4 * (16 * 32 + 4 + 4);
  CHECK(layout.layer_bytes() == 48 * per_token);
  CHECK(layout.bytes_with(offload_whole) == 48 * 4 * (32 + 32 + 4));  // input, atty, lse
  CHECK(layout.bytes_with(offload_whole) == layer.input_bytes() + layer.attention_output_bytes());
  CHECK(layout.bytes_with(offload_fraction) == layer.other_bytes());
  CHECK(layout.layer_bytes() == layer.skeletal_bytes());
  CHECK(layout.index_of("input") == 0);
  CHECK(layout.index_of("fch_gelu") == 12);
  // With host K/V: no qkv (3C floats per token), in both descriptions.
  const auto dropped = memo::gpt2_qkv_skeletal::dropped;
  const memo::skeletal_layout without = memo::gpt2_skeletal_layout(c, T, dropped);
  const memo::transformer_layer keeps = memo::gpt2_transformer_layer(c, T, dropped);
  CHECK(without.layer_bytes() == 48 * (per_token - 4 * 3 * 32));
  CHECK(without.layer_bytes() == keeps.skeletal_bytes());
  CHECK(without.bytes_with(offload_fraction) == keeps.other_bytes());
  CHECK(keeps.qkv_bytes() == 48 * 4 * 3 * 32);
}

TEST_CASE("gpt2_memory: the step trace repeats the recorded block per layer around the outside buffers") {
  memo::trace_builder block;
  block.begin_section("layer 0 backward");
  block.malloc(7, 100);
  block.malloc(9, 50);
  block.free(7, 100);
  block.free(9, 50);
  block.end_section("layer 0 backward");
  using enum memo::gpt2_step_phase;
  const std::vector<memo::gpt2_step_buffer> outside = {
      {"whole step", 10, step_begin, step_end},
      {"head", 20, head_begin, loss_end},
      {"after the loss", 30, loss_end, step_end},
      {"until the backward", 40, step_begin, head_end},
  };
  const memo::memory_trace trace = memo::gpt2_step_trace(outside, std::move(block).finish(), 2);
  // The same step written out by hand: ids 0-3 outside, layer l's copy of
  // block buffer b gets 4 + l * 10 + b (stride: largest block id + 1).
  const memo::memory_trace expected = memo::parse_trace(
      "malloc 0 10\nmalloc 3 40\n"                   // step_begin
      "malloc 1 20\n"                                // head_begin
      "free 1 20\nmalloc 2 30\n"                     // loss_end
      "free 3 40\n"                                  // head_end
      "section begin layer 1 backward\n"
      "malloc 21 100\nmalloc 23 50\nfree 21 100\nfree 23 50\n"
      "section end layer 1 backward\n"
      "section begin layer 0 backward\n"
      "malloc 11 100\nmalloc 13 50\nfree 11 100\nfree 13 50\n"
      "section end layer 0 backward\n"
      "free 0 10\nfree 2 30\n");
  REQUIRE(trace.problem.buffers.size() == expected.problem.buffers.size());
  for (std::size_t i = 0; i < trace.problem.buffers.size(); ++i) {
    const auto& got = trace.problem.buffers[i];
    const auto& want = expected.problem.buffers[i];
    INFO("buffer " << i);
    CHECK(got.id == want.id);
    CHECK(got.size_bytes == want.size_bytes);
    CHECK(got.lower == want.lower);
    CHECK(got.upper == want.upper);
  }
  CHECK(trace.sections == expected.sections);
  // Both layer sections are one level-1 problem; the plan is valid.
  const memo::bilevel_result plan = memo::bilevel_planner<>{}.plan(trace);
  CHECK(plan.level1_solves == 1);
  CHECK(memo::validate(trace.problem, plan.plan).ok);
  CHECK(plan.plan.peak_bytes >= plan.flat_lower_bound_bytes);
}

TEST_CASE("gpt2_memory: a recorded block with live buffers or no section is refused") {
  memo::trace_builder open_buffer;
  open_buffer.begin_section("layer 0 backward");
  open_buffer.malloc(1, 8);
  open_buffer.end_section("layer 0 backward");
  CHECK_THROWS_WITH(memo::gpt2_step_trace({}, std::move(open_buffer).finish(), 2),
                    doctest::Contains("1 live buffers"));
  memo::trace_builder no_section;
  no_section.malloc(1, 8);
  no_section.free(1, 8);
  CHECK_THROWS_WITH(memo::gpt2_step_trace({}, std::move(no_section).finish(), 2),
                    doctest::Contains("0 sections"));
}

TEST_CASE("gpt2_memory: the step's outside buffers live from their phase to theirs, sized by hand") {
  const memo::gpt2_config c = shape();  // C = 32, Vp = 16
  const auto buffers = memo::gpt2_step_buffers(c, 48, 8, 1000, 5000);
  using enum memo::gpt2_step_phase;
  auto find = [&](const std::string& name) -> const memo::gpt2_step_buffer& {
    for (const auto& b : buffers) {
      if (b.name == name) return b;
    }
    FAIL("no buffer " << name);
    return buffers.front();
  };
  CHECK(find("residual").bytes == 48 * 32 * 4);
  CHECK(find("residual").dies == head_end);  // the final layernorm's backward reads it
  CHECK(find("logits chunk").bytes == 8 * 16 * 4);
  CHECK(find("logits chunk").dies == loss_end);
  CHECK(find("dresidual").born == loss_end);
  CHECK(find("bucket starts").bytes == 49 * 8);
  CHECK(find("attention scratch").bytes == 1000);
  CHECK(find("skeletal").bytes == 5000);
  for (const auto& b : buffers) {
    INFO(b.name);
    CHECK(static_cast<int>(b.born) < static_cast<int>(b.dies));
  }
}
