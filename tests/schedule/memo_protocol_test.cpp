// Tests of memo/schedule/memo_protocol.hpp against action lists worked out
// by hand from MEMO's Figure 11 (the swapper's test checks that a real
// swapper issues exactly these actions and waits).
#include "memo/schedule/memo_protocol.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace {

struct expected_action {
  std::string name;
  std::vector<std::size_t> after;
};

void check_actions(const std::vector<memo::memo_action>& actions, const std::vector<expected_action>& expected) {
  REQUIRE(actions.size() == expected.size());
  for (std::size_t a = 0; a < actions.size(); ++a) {
    CAPTURE(a);
    CHECK(actions[a].name() == expected[a].name);
    CHECK(actions[a].after == expected[a].after);
  }
}

}  // namespace

TEST_CASE("memo_protocol: four layers, K = 2, the last two resident, a fraction offloaded") {
  memo::memo_protocol_options options;
  options.layers = 4;
  options.rounding_buffers = 2;
  options.resident_last_layers = 2;
  options.recompute_swapped = true;
  // Layers 0 and 1 are swapped. No swapped layer j has j + 2 >= 4, so no
  // prefetch at the turn: prefetch 1 follows backward 3, prefetch 0 backward 2.
  check_actions(memo::memo_step_protocol(options), {
                                                       {"forward 0", {}},      // 0
                                                       {"offload 0", {0}},     // 1
                                                       {"forward 1", {}},      // 2
                                                       {"offload 1", {2}},     // 3
                                                       {"forward 2", {1}},     // 4: buffer 0 after offload 0
                                                       {"forward 3", {3}},     // 5
                                                       {"backward 3", {}},     // 6
                                                       {"prefetch 1", {6}},    // 7
                                                       {"backward 2", {}},     // 8
                                                       {"prefetch 0", {8}},    // 9
                                                       {"recompute 1", {7}},   // 10
                                                       {"backward 1", {7}},    // 11
                                                       {"recompute 0", {9}},   // 12
                                                       {"backward 0", {9}},    // 13
                                                   });
  CHECK(memo::memo_step_protocol(options)[1].stream() == memo::memo_stream::offload);
  CHECK(memo::memo_step_protocol(options)[7].stream() == memo::memo_stream::prefetch);
  CHECK(memo::memo_step_protocol(options)[10].stream() == memo::memo_stream::compute);
}

TEST_CASE("memo_protocol: K = 3, nothing resident, shared tensors recomputed by every layer but the last") {
  memo::memo_protocol_options options;
  options.layers = 4;
  options.rounding_buffers = 3;
  options.resident_last_layers = 0;
  options.recompute_shared = true;
  // Layers 1..3 reuse no buffer after themselves (j + 3 >= 4): fetched back
  // at the turn, newest first; layer 0's buffer is next used by layer 3.
  check_actions(memo::memo_step_protocol(options), {
                                                       {"forward 0", {}},      // 0
                                                       {"offload 0", {0}},     // 1
                                                       {"forward 1", {}},      // 2
                                                       {"offload 1", {2}},     // 3
                                                       {"forward 2", {}},      // 4
                                                       {"offload 2", {4}},     // 5
                                                       {"forward 3", {1}},     // 6
                                                       {"offload 3", {6}},     // 7
                                                       {"prefetch 3", {7}},    // 8
                                                       {"prefetch 2", {5}},    // 9
                                                       {"prefetch 1", {3}},    // 10
                                                       {"backward 3", {8}},    // 11: its shared tensors are intact
                                                       {"prefetch 0", {11}},   // 12
                                                       {"recompute 2", {9}},   // 13
                                                       {"backward 2", {9}},    // 14
                                                       {"recompute 1", {10}},  // 15
                                                       {"backward 1", {10}},   // 16
                                                       {"recompute 0", {12}},  // 17
                                                       {"backward 0", {12}},   // 18
                                                   });
}

TEST_CASE("memo_protocol: every layer is offloaded and fetched once, after it is free, in any shape") {
  for (std::size_t n = 1; n <= 8; ++n) {
    for (std::size_t k = 1; k <= 4; ++k) {
      for (std::size_t resident = 0; resident <= std::min(k, n); ++resident) {
        CAPTURE(n);
        CAPTURE(k);
        CAPTURE(resident);
        memo::memo_protocol_options options{n, k, resident, true, true};
        const auto actions = memo::memo_step_protocol(options);
        std::vector<int> offloads(n, 0);
        std::vector<int> prefetches(n, 0);
        for (std::size_t a = 0; a < actions.size(); ++a) {
          for (const std::size_t before : actions[a].after) {
            CHECK(before < a);  // issue order: a wait refers to something already issued
            CHECK(actions[before].stream() != actions[a].stream());
          }
          if (actions[a].kind == memo::memo_action_kind::offload) ++offloads[actions[a].layer];
          if (actions[a].kind == memo::memo_action_kind::prefetch) ++prefetches[actions[a].layer];
        }
        for (std::size_t i = 0; i < n; ++i) {
          CHECK(offloads[i] == (i < n - resident ? 1 : 0));
          CHECK(prefetches[i] == offloads[i]);
        }
      }
    }
  }
  CHECK_THROWS_WITH_AS(memo::memo_step_protocol({4, 2, 3}), doctest::Contains("resident_last_layers must be in [0, min(K = 2"),
                       memo::error);
  CHECK_THROWS_AS(memo::memo_step_protocol({0, 2, 0}), memo::error);
  CHECK_THROWS_AS(memo::memo_step_protocol({4, 0, 0}), memo::error);
}
