#include "memo/plan/bilevel_planner.hpp"

#include <doctest/doctest.h>

#include "memo/plan/greedy.hpp"
#include "memo/plan/trace.hpp"

namespace {

constexpr std::uint64_t mib = std::uint64_t{1} << 20;

memo::memory_trace figure4_layer() {
  return memo::read_problem_file(MEMO_SOURCE_DIR "/examples/traces/figure4.trace");
}

}  // namespace

TEST_CASE("bilevel planner: figure 4 stacked n times reaches the hand-worked peak") {
  // Level 1, forward section of one layer: transients 13 [0,4) 128, 14 [1,2)
  // 128, 17 [6,9) 128, 18 [7,11) 128, 19 [8,10) 256 MiB. At time 8 tensors
  // 17, 18, 19 are live: 512 MiB, and stacking those three reaches it.
  // Backward section: 20 [12,13) 512, 21 [14,19) 1024, 22 [15,20) 256,
  // 23 [17,21) 128, 24 [18,22) 512 MiB. 21..24 are all live at time 18:
  // 1920 MiB, which any stacking of them reaches; 20 lives alone.
  // So the blocks are 512 MiB (forward) and 1920 MiB (backward).
  //
  // Level 2 for n layers: skeletal 15 (256) and 16 (512 MiB) of layer k live
  // from layer k's forward to its backward, nested around the later layers.
  // The backward of layer n-1 comes first; at its start its block (1920) and
  // the skeletal tensors of all n layers (768 each) are live: 1920 + 768 n.
  // Nothing else is larger (a forward block is 512 + at most 768 n), and it
  // is reached by stacking layer k's skeletal pair at 768 k and each block
  // right above the skeletal tensors live with it. Bi-level peak: 1920 + 768 n.
  //
  // Flat lower bound: in the first backward section, at its 7th request,
  // 21..24 (1920), 16 of layer n-1 (512; its 15 died at the 5th request) and
  // the 768 of every other layer are live: 1664 + 768 n. The decomposition
  // costs 256 MiB: the backward block reserves room that 15 vacates mid-way.
  const auto layer = figure4_layer();
  for (std::int64_t n = 1; n <= 6; ++n) {
    INFO("layers " << n);
    const auto model = memo::stack_layer_trace(layer, n);
    REQUIRE(model.sections.size() == static_cast<std::size_t>(2 * n));
    const auto un = static_cast<std::uint64_t>(n);
    CHECK(memo::lower_bound_bytes(model.problem) == (1664 + 768 * un) * mib);
    memo::bilevel_planner<> planner;
    const auto r = planner.plan(model);
    CHECK(memo::validate(model.problem, r.plan).ok);
    CHECK(r.flat_lower_bound_bytes == (1664 + 768 * un) * mib);
    CHECK(r.plan.peak_bytes == (1920 + 768 * un) * mib);
    CHECK(r.level2_lower_bound_bytes == (1920 + 768 * un) * mib);
    CHECK(r.level2_proven_optimal);
    CHECK(r.level1_solves == 2);  // every layer reuses the same two solves
    REQUIRE(r.sections.size() == static_cast<std::size_t>(2 * n));
    for (const auto& s : r.sections) {
      CHECK(s.peak_bytes == (s.name.ends_with("forward") ? 512 : 1920) * mib);
      CHECK(s.transients.size() == 5);
    }
    CHECK(r.skeletal_ids.size() == static_cast<std::size_t>(2 * n));
    CHECK(r.outside_ids.empty());
    CHECK(r.level2_problem.buffers.size() == static_cast<std::size_t>(4 * n));
  }
}

TEST_CASE("bilevel planner: a runtime-chosen greedy inner solver gives a valid plan") {
  const auto model = memo::stack_layer_trace(figure4_layer(), 4);
  memo::bilevel_planner<memo::any_dsa_solver> planner(memo::greedy_by_size_solver{},
                                                       memo::best_greedy_solver{});
  const auto r = planner.plan(model);
  CHECK(memo::validate(model.problem, r.plan).ok);
  CHECK(r.plan.peak_bytes >= (1920 + 768 * 4) * mib);
  CHECK(r.level2.solver.starts_with("greedy"));
}

TEST_CASE("bilevel planner: buffers outside sections and unequal sections") {
  // 1 is born before any section; section a holds 2 and 3; section b holds a
  // different shape (4); 5 is born in a and outlives it.
  const auto t = memo::parse_trace(R"(malloc 1 100
section begin a
malloc 2 10
malloc 5 7
malloc 3 20
free 2 10
free 3 20
section end a
section begin b
malloc 4 40
free 4 40
free 5 7
section end b
free 1 100
)");
  memo::bilevel_planner<> planner;
  const auto r = planner.plan(t);
  CHECK(memo::validate(t.problem, r.plan).ok);
  CHECK(r.level1_solves == 2);
  REQUIRE(r.sections.size() == 2);
  CHECK(r.sections[0].peak_bytes == 30);
  CHECK(r.sections[1].peak_bytes == 40);
  CHECK(r.sections[1].solved_by == 1);
  CHECK(r.outside_ids == std::vector<std::uint64_t>{1});
  CHECK(r.skeletal_ids == std::vector<std::uint64_t>{5});
  // Level 2: 1 (100) all along, block a (30) with 5 (7) at its end, block b
  // (40) with 5: max is 100 + 40 + 7.
  CHECK(r.plan.peak_bytes == 147);
  CHECK(r.flat_lower_bound_bytes == 147);
}

TEST_CASE("bilevel planner: stack_layer_trace rejects a layer buffer used outside its sections") {
  const auto t = memo::parse_trace(
      "section begin layer 0 forward\nmalloc 1 4\nsection end layer 0 forward\nfree 1 4\n"
      "section begin layer 0 backward\nmalloc 2 4\nfree 2 4\nsection end layer 0 backward\n");
  CHECK_THROWS_WITH_AS(memo::stack_layer_trace(t, 2),
                       doctest::Contains("buffer 1 is born in a layer section but used outside it"),
                       memo::error);
}

TEST_CASE("bilevel planner: a capacity between the flat and the level-2 bound is an error naming both") {
  auto model = memo::stack_layer_trace(figure4_layer(), 2);
  model.problem.capacity_bytes = (1664 + 768 * 2) * mib;  // the flat lower bound
  memo::bilevel_planner<> planner;
  CHECK_THROWS_WITH_AS(planner.plan(model),
                       doctest::Contains("capacity 3355443200 bytes is below the level-2 lower bound "
                                         "3623878656 bytes (flat lower bound 3355443200 bytes)"),
                       memo::error);
  model.problem.capacity_bytes = (1920 + 768 * 2) * mib;  // exactly what bi-level needs
  const auto r = planner.plan(model);
  CHECK(r.plan.peak_bytes == (1920 + 768 * 2) * mib);
}

TEST_CASE("bilevel planner: section blocks get free ids whatever ids the trace uses") {
  // Buffers outside sections with ids 0 and 2^64 - 1: the block takes the
  // smallest id nobody has, 1 (the old "largest + 1" wrapped to 0, a
  // duplicate).
  const auto trace = memo::parse_trace(
      "malloc 18446744073709551615 64\nmalloc 0 32\nsection begin a\nmalloc 1 16\nmalloc 5 8\n"
      "free 5 8\nfree 1 16\nsection end a\nfree 0 32\nfree 18446744073709551615 64\n");
  memo::bilevel_planner<memo::any_dsa_solver> planner{memo::greedy_by_size_solver{},
                                                       memo::greedy_by_size_solver{}};
  const auto r = planner.plan(trace);
  CHECK(memo::validate(trace.problem, r.plan).ok);
  std::vector<std::uint64_t> ids;
  for (const auto& b : r.level2_problem.buffers) ids.push_back(b.id);
  std::sort(ids.begin(), ids.end());
  CHECK(ids == std::vector<std::uint64_t>{0, 1, 18446744073709551615u});
}
