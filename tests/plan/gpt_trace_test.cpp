#include "memo/plan/gpt_trace.hpp"

#include <doctest/doctest.h>

#include "memo/plan/bilevel_planner.hpp"

namespace {

// Bytes live just before time t: sum of sizes of buffers with lower < t <= upper... i.e.
// live on [t-1, t).
std::uint64_t live_at(const memo::dsa_problem& p, std::int64_t t) {
  std::uint64_t total = 0;
  for (const auto& b : p.buffers) {
    if (b.lower <= t && t < b.upper) total += b.size_bytes;
  }
  return total;
}

}  // namespace

TEST_CASE("gpt trace: skeletal accounting is MEMO's 16 bsh elements per layer") {
  memo::gpt_shape g;  // 7B: h 4096, 32 heads
  g.tokens = 1 << 20;
  // 16 [s, h] fp16 activations = 32 s h bytes, plus fp32 statistics:
  // two layernorms ([s, 2] each) and the log-sum-exp [a, s].
  const std::uint64_t s = g.tokens;
  CHECK(g.skeletal_bytes() == 32 * s * 4096 + 2 * 8 * s + 4 * 32 * s);
  // MEMO section 3.2: 32 layers of 1M tokens at fp16 hold 4096 GB of skeletal
  // activations; the 16bsh part is exactly 4 TiB.
  CHECK(32 * 32 * s * 4096 == (std::uint64_t{4} << 40));
}

TEST_CASE("gpt trace: structure, sections and the load at the end of the forward pass") {
  memo::gpt_shape g;
  g.hidden = 64;
  g.heads = 4;
  g.layers = 3;
  g.tokens = 1000;
  g.vocab = 50;
  g.loss_chunk_tokens = 300;  // 4 chunks: 300, 300, 300, 100
  const auto t = memo::make_gpt_trace(g);
  CHECK(t.never_freed.empty());
  REQUIRE(t.sections.size() == 2 * 3 + 3);
  CHECK(t.sections.front().name == "embedding forward");
  CHECK(t.sections[1].name == "layer 0 forward");
  CHECK(t.sections[4].name == "classifier");
  CHECK(t.sections[5].name == "layer 2 backward");
  CHECK(t.sections.back().name == "embedding backward");
  // 2 embedding + 19 per layer forward + 3 + 2 per chunk + 1 classifier + 12 per layer backward.
  CHECK(t.problem.buffers.size() == 2 + 19 * 3 + 3 + 2 * 4 + 1 + 12 * 3);
  // When the classifier begins, every layer's skeletal tensors, the last
  // layer's output and the token ids are live, nothing else.
  const std::uint64_t hidden_bytes = 1000 * 64 * 2;
  const std::int64_t at = t.sections[4].begin;
  CHECK(live_at(t.problem, at - 1) ==
        3 * g.skeletal_bytes() + hidden_bytes + 1000 * 8);
  memo::check_problem(t.problem);
}

TEST_CASE("gpt trace: the bi-level plan of a small model is valid and near the flat bound") {
  memo::gpt_shape g;
  g.hidden = 128;
  g.heads = 8;
  g.layers = 8;
  g.tokens = 4096;
  g.vocab = 1000;
  g.loss_chunk_tokens = 1024;
  const auto t = memo::make_gpt_trace(g);
  memo::bilevel_planner<> planner;
  const auto r = planner.plan(t);
  CHECK(memo::validate(t.problem, r.plan).ok);
  CHECK(r.level1_solves <= 5);  // embedding x2, classifier, one forward, one backward shape
  CHECK(r.plan.peak_bytes >= r.flat_lower_bound_bytes);
  CHECK(static_cast<double>(r.plan.peak_bytes) <= 1.05 * static_cast<double>(r.flat_lower_bound_bytes));
}

TEST_CASE("gpt trace: bad shapes are errors") {
  memo::gpt_shape g;
  g.heads = 3;
  CHECK_THROWS_WITH_AS(memo::make_gpt_trace(g), doctest::Contains("not a multiple of heads"),
                       memo::error);
  g = {};
  g.tensor_parallel = 3;
  CHECK_THROWS_WITH_AS(memo::make_gpt_trace(g), doctest::Contains("do not split over 3"),
                       memo::error);
  g = {};
  g.attention_keeps_qkv = true;
  CHECK_THROWS_WITH_AS(memo::make_gpt_trace(g), doctest::Contains("attention_keeps_qkv"), memo::error);
}
