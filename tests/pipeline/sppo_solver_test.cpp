#include "memo/pipeline/sppo_solver.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <string>
#include <tuple>

#include "memo/core/error.hpp"
#include "pipeline_test_support.hpp"

namespace {

memo::sppo_problem gpt(int gpus, int layers, std::int64_t hidden, std::int64_t heads, std::int64_t tokens) {
  memo::sppo_problem p;
  p.layer.tokens = tokens;
  p.layer.hidden = hidden;
  p.layer.heads = heads;
  p.layers = layers;
  p.gpus = gpus;
  p.profile = memo::device_profile::a800_80gb();
  return p;
}

}  // namespace

TEST_CASE("sppo_solver: the candidates are exactly the section's search space") {
  const auto p = gpt(16, 24, 2048, 16, 256 * 1024);
  const auto solution = memo::solve_sppo(p);
  // The search space written out: SP divides a node and the GPUs, PP = GPUs / SP
  // divides the layers, N a multiple of PP with 2K..16K tokens per device.
  std::set<std::tuple<int, int, int>> want;
  for (int sp = 1; sp <= 8; ++sp) {
    if (8 % sp != 0 || 16 % sp != 0 || 24 % (16 / sp) != 0) continue;
    const int pp = 16 / sp;
    for (int n = pp; n <= 4096; n += pp) {
      const std::int64_t per_device = (256 * 1024) / (std::int64_t{n} * sp);
      if (per_device >= 2048 && per_device <= 16384) want.insert({sp, pp, n});
    }
  }
  std::set<std::tuple<int, int, int>> got;
  for (const auto& c : solution.candidates) got.insert({c.sp, c.pp, c.n});
  CHECK(got == want);
  CHECK(!want.empty());
}

TEST_CASE("sppo_solver: the choice is the fastest candidate that fits, and memory never makes it slower") {
  auto p = gpt(16, 24, 2048, 16, 512 * 1024);
  const auto solution = memo::solve_sppo(p);
  REQUIRE(solution.best);
  for (const auto& c : solution.candidates) {
    if (c.fits) CHECK(c.step_seconds >= solution.best->step_seconds);
    CHECK(c.bubble_ratio == doctest::Approx(static_cast<double>(c.pp - 1) / c.n));
  }
  // Less device memory: fewer candidates fit and the choice is no faster.
  double previous = solution.best->step_seconds;
  for (const double gib : {40.0, 20.0, 10.0}) {
    p.profile.device_memory_bytes = static_cast<std::uint64_t>(gib * (1ull << 30));
    const auto smaller = memo::solve_sppo(p);
    if (!smaller.best) break;
    CHECK(smaller.best->step_seconds >= previous);
    previous = smaller.best->step_seconds;
  }
  p.profile.device_memory_bytes = 1ull << 20;
  const auto none = memo::solve_sppo(p);
  CHECK(!none.best);
  for (const auto& c : none.candidates) CHECK(c.limit == "device memory");
}

TEST_CASE("sppo_solver: GPT-13B on 64 GPUs at 512K picks Table 4's SP 8, PP 8, N 32") {
  const auto solution = memo::solve_sppo(gpt(64, 40, 5120, 40, 512 * 1024));
  REQUIRE(solution.best);
  CHECK(solution.best->sp == 8);
  CHECK(solution.best->pp == 8);
  CHECK(solution.best->n == 32);
}

TEST_CASE("sppo_solver: bad problems are errors") {
  auto p = gpt(8, 8, 512, 8, 65536);
  p.min_device_tokens = 10, p.max_device_tokens = 5;
  CHECK(memo_test::error_of([&] { (void)memo::solve_sppo(p); }).find("[10, 5] is empty") != std::string::npos);
  p = gpt(0, 8, 512, 8, 65536);
  CHECK(memo_test::error_of([&] { (void)memo::solve_sppo(p); }).find("gpus 0") != std::string::npos);
}
