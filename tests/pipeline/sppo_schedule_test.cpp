#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "memo/pipeline/sppo_schedule.hpp"

namespace {

memo::device_profile profile() {
  memo::device_profile p;
  p.name = "test";
  p.peak_flops = 1e12;
  p.host_to_device_bytes_per_second = 1e9;
  p.device_to_host_bytes_per_second = 1e9;
  p.interconnect_bytes_per_second = 1e9;
  p.device_memory_bytes = 1ull << 30;
  p.host_memory_bytes = 1ull << 34;
  return p;
}

std::vector<int> range(int a, int b) {
  std::vector<int> out;
  for (int x = a; x <= b; ++x) out.push_back(x);
  return out;
}

// Independent reference for the plain pipeline: the flow-shop recurrence
// end(i, j) = max(end(i-1, j), end(i, j-1)) + t_j, forward then mirrored backward.
double flow_shop(int pp, const std::vector<double>& f, const std::vector<double>& b) {
  const int n = static_cast<int>(f.size());
  std::vector<std::vector<double>> fe(pp, std::vector<double>(n)), be(pp, std::vector<double>(n));
  for (int i = 0; i < pp; ++i)
    for (int j = 0; j < n; ++j)
      fe[i][j] = std::max(i ? fe[i - 1][j] : 0.0, j ? fe[i][j - 1] : 0.0) + f[j];
  for (int i = pp - 1; i >= 0; --i)
    for (int j = n - 1; j >= 0; --j) {
      double start = std::max(fe[i][n - 1], fe[pp - 1][n - 1]);
      if (i < pp - 1) start = std::max(start, be[i + 1][j]);
      if (j < n - 1) start = std::max(start, be[i][j + 1]);
      be[i][j] = start + b[j];
    }
  return be[0][0];
}

}  // namespace

TEST_CASE("sppo_schedule: phases reproduce Table 3 (PP = 4, N = 8)") {
  // Transcribed from the paper's Table 3.
  std::vector<memo::sppo_stage_phases> table(4);
  table[0] = {range(0, 2), range(3, 7), {}, range(0, 3), {}};
  table[1] = {range(0, 1), range(2, 6), {7}, {1, 2, 3}, {0, 1}};
  table[2] = {{0}, range(1, 5), {6, 7}, {2, 3}, {0, 1, 2}};
  table[3] = {{}, range(0, 4), range(5, 7), {}, range(0, 3)};
  for (int i = 0; i < 4; ++i) {
    CAPTURE(i);
    CHECK(memo::sppo_phases(4, 8, i) == table[i]);
  }
}

TEST_CASE("sppo_schedule: Definition 6.1 as printed (closed intervals) disagrees with Table 3") {
  // Printed: Left {0..PP-1-i}, Steady {PP-1-i..N-i}. Stage 0: Left has 4
  // elements (table: 3) and subsequence PP-1-i = 3 sits in two phases.
  const int pp = 4, n = 8, i = 0;
  const auto printed_left = range(0, pp - 1 - i);
  const auto printed_steady = range(pp - 1 - i, n - i);
  CHECK(printed_left.size() == 4);
  CHECK(printed_steady.back() == 8);  // no subsequence 8 exists
  CHECK(memo::sppo_phases(pp, n, i).left.size() == 3);
}

TEST_CASE("sppo_schedule: every stage's phases partition the subsequences") {
  for (int pp = 1; pp <= 6; ++pp)
    for (int n = pp; n <= 12; ++n)
      for (int i = 0; i < pp; ++i) {
        const auto ph = memo::sppo_phases(pp, n, i);
        std::vector<int> all = ph.left;
        all.insert(all.end(), ph.steady.begin(), ph.steady.end());
        all.insert(all.end(), ph.right.begin(), ph.right.end());
        CHECK(all == range(0, n - 1));
        CHECK(ph.steady.size() == static_cast<std::size_t>(n - pp + 1));
      }
}

TEST_CASE("sppo_schedule: uniform subsequences meet the closed form of section 3.3") {
  for (int pp : {1, 2, 4}) {
    for (int n : {4, 8, 16}) {
      if (n < pp) continue;
      memo::sppo_schedule_options o;
      o.stages = pp;
      o.forward_seconds.assign(n, 1.0);
      o.backward_seconds.assign(n, 2.0);
      const auto figures = memo::simulate_sppo(o, profile());
      CHECK(figures.step_seconds == doctest::Approx(memo::sppo_closed_form_step_seconds(pp, n, 3.0 * n)));
      CHECK(figures.bubble_ratio == doctest::Approx(memo::sppo_closed_form_bubble_ratio(pp, n)));
    }
  }
  // The paper's example: p = 4, N = 16 -> 3/16.
  CHECK(memo::sppo_closed_form_bubble_ratio(4, 16) == doctest::Approx(3.0 / 16.0));
}

TEST_CASE("sppo_schedule: unequal subsequences match the flow-shop recurrence") {
  const std::vector<double> f{3.0, 1.0, 2.5, 0.5, 2.0, 1.5};
  const std::vector<double> b{5.0, 2.0, 4.0, 1.5, 3.0, 3.5};
  for (int pp = 1; pp <= 5; ++pp) {
    memo::sppo_schedule_options o;
    o.stages = pp;
    o.forward_seconds = f;
    o.backward_seconds = b;
    CHECK(memo::simulate_sppo(o, profile()).step_seconds == doctest::Approx(flow_shop(pp, f, b)));
  }
}

TEST_CASE("sppo_schedule: multiplexing fills the bubbles of a hand-worked PP = 2, N = 2 pipeline") {
  // Stage 0 Left-SP {0} over {0,1}; stage 1 Right-SP {1} over {0,1}.
  // F(0,0) [0,0.5] on both; F(0,1) [0.5,1.5]; F(1,0) [0.5,1.5];
  // F(1,1) [1.5,2] on both; B(1,1) [2,2.5] on both; B(1,0), B(0,1)
  // [2.5,3.5]; B(0,0) [3.5,4] on both: 4 s, no bubble; plain: 3 x 2 = 6 s.
  memo::sppo_schedule_options o;
  o.stages = 2;
  o.forward_seconds = {1.0, 1.0};
  o.backward_seconds = {1.0, 1.0};
  CHECK(memo::simulate_sppo(o, profile()).step_seconds == doctest::Approx(6.0));
  o.multiplexed = true;
  const auto schedule = memo::build_sppo_schedule(o);
  const auto t = schedule.simulate(profile());
  CHECK(t.makespan_seconds() == doctest::Approx(4.0));
  CHECK(t.op(schedule.find("F(1,1)")).end_seconds == doctest::Approx(2.0));
  CHECK(t.op(schedule.find("B(0,1)")).start_seconds == doctest::Approx(2.5));
}

TEST_CASE("sppo_schedule: a split op's pieces pay the exchange given for their subsequence and range") {
  // The PP = 2, N = 2 pipeline above with exchanges 0.1 (subsequence 0)
  // and 0.2 (subsequence 1) per piece: F(0,0) [0,0.6]; F(0,1), F(1,0)
  // [0.6,1.6]; F(1,1) [1.6,2.3]; B(1,1) [2.3,3.0]; B(1,0), B(0,1)
  // [3.0,4.0]; B(0,0) [4.0,4.6].
  memo::sppo_schedule_options o;
  o.stages = 2;
  o.forward_seconds = {1.0, 1.0};
  o.backward_seconds = {1.0, 1.0};
  o.multiplexed = true;
  o.sp_exchange_seconds = [](int j, int, int, int) { return j == 0 ? 0.1 : 0.2; };
  const auto schedule = memo::build_sppo_schedule(o);
  const auto t = schedule.simulate(profile());
  CHECK(t.op(schedule.find("F(0,0)")).end_seconds == doctest::Approx(0.6));
  CHECK(t.op(schedule.find("F(1,1)")).end_seconds == doctest::Approx(2.3));
  CHECK(t.op(schedule.find("B(0,1)")).start_seconds == doctest::Approx(3.0));
  CHECK(t.makespan_seconds() == doctest::Approx(4.6));
  // Unsplit ops never pay it.
  o.multiplexed = false;
  CHECK(memo::simulate_sppo(o, profile()).step_seconds == doctest::Approx(6.0));
  o.multiplexed = true;
  o.sp_exchange_seconds = [](int j, int, int, int) { return j == 1 ? std::nan("") : 0.0; };
  CHECK_THROWS_WITH_AS(memo::build_sppo_schedule(o), doctest::Contains("subsequence 1 of stage 1 over stages 0..1"),
                       memo::error);
}

TEST_CASE("sppo_schedule: the exchange is asked for each split op's subsequence and stage range (Table 3)") {
  // Every split op, forward and backward, asks once with (j, its stage,
  // first stage, stages) of its phase: Left-SP of stage i over {i..PP-1},
  // Right-SP over {0..i}, as sppo_phases lists them. With N < 2 PP - 2 the
  // same subsequence and range occur in two phases (PP 4, N 4: subsequence
  // 1 over {0..3} is Left-SP of stage 0 and Right-SP of stage 3); the
  // stage tells them apart.
  for (int pp = 2; pp <= 5; ++pp) {
    for (int n = pp; n <= pp + 3; ++n) {
      std::vector<std::tuple<int, int, int, int>> asked, expected;
      memo::sppo_schedule_options o;
      o.stages = pp;
      o.multiplexed = true;
      o.forward_seconds.assign(static_cast<std::size_t>(n), 1.0);
      o.backward_seconds.assign(static_cast<std::size_t>(n), 2.0);
      o.sp_exchange_seconds = [&](int j, int stage, int first, int k) {
        asked.emplace_back(j, stage, first, k);
        return 0.0;
      };
      (void)memo::build_sppo_schedule(o);
      for (int i = 0; i < pp; ++i) {
        const auto phases = memo::sppo_phases(pp, n, i);
        for (const int j : phases.left) {
          for (int pass = 0; pass < 2; ++pass) {
            expected.emplace_back(j, i, phases.left_sp.front(), int(phases.left_sp.size()));
          }
        }
        for (const int j : phases.right) {
          for (int pass = 0; pass < 2; ++pass) {
            expected.emplace_back(j, i, phases.right_sp.front(), int(phases.right_sp.size()));
          }
        }
      }
      std::ranges::sort(asked);
      std::ranges::sort(expected);
      CAPTURE(pp);
      CAPTURE(n);
      CHECK(asked == expected);
    }
  }
}

TEST_CASE("sppo_schedule: multiplexing shortens the PP = 4, N = 8 step") {
  memo::sppo_schedule_options o;
  o.stages = 4;
  o.forward_seconds.assign(8, 1.0);
  o.backward_seconds.assign(8, 2.0);
  const double plain = memo::simulate_sppo(o, profile()).step_seconds;
  o.multiplexed = true;
  const auto msp = memo::simulate_sppo(o, profile());
  CHECK(msp.step_seconds < plain);
  CHECK(msp.step_seconds >= msp.work_seconds - 1e-9);  // PP stages share PP x work
}

TEST_CASE("sppo_schedule: the pieces of a split op start together, as the SP collectives between them need") {
  // PP 3, N 3: F(2,1) is split over stages {0,1,2}; stage 0 is busy with
  // F(0,2) until later than stages 1 and 2 are free, so all three wait.
  std::uint64_t state = 7;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return 0.5 + static_cast<double>(state >> 40) / static_cast<double>(1ull << 24);
  };
  for (int pp = 2; pp <= 5; ++pp) {
    for (int n = pp; n <= pp + 4; ++n) {
      memo::sppo_schedule_options o;
      o.stages = pp;
      o.multiplexed = true;
      for (int j = 0; j < n; ++j) o.forward_seconds.push_back(next()), o.backward_seconds.push_back(2 * next());
      if (pp % 2 == 1) o.sp_exchange_seconds = [](int, int, int, int) { return 0.1; };
      const auto schedule = memo::build_sppo_schedule(o);
      const auto t = schedule.simulate(profile());
      int split = 0;
      for (std::size_t k = 0; k < schedule.ops().size(); ++k) {
        if (schedule.ops()[k].kind() != memo::op_kind::marker) continue;
        ++split;
        const auto& pieces = schedule.ops()[k].dependencies;
        REQUIRE(pieces.size() >= 2);
        for (const auto p : pieces) {
          CAPTURE(schedule.ops()[p].name);
          CHECK(t.op({p}).start_seconds == doctest::Approx(t.op({pieces.front()}).start_seconds));
          CHECK(t.op({p}).end_seconds == doctest::Approx(t.op({pieces.front()}).end_seconds));
        }
      }
      // Left-SP on stages 0..PP-2 and Right-SP on stages 1..PP-1, forward and backward.
      CHECK(split == 2 * 2 * (pp * (pp - 1) / 2));
    }
  }
}

TEST_CASE("sppo_schedule: point-to-point hand-offs add one link per stage boundary") {
  memo::sppo_schedule_options o;
  o.stages = 3;
  o.forward_seconds.assign(4, 1.0);
  o.backward_seconds.assign(4, 1.0);
  o.p2p_seconds = 0.25;
  // Critical path: (PP-1+N) x (f+b) plus 2 (PP-1) links.
  CHECK(memo::simulate_sppo(o, profile()).step_seconds == doctest::Approx(6.0 * 2.0 + 4 * 0.25));
}

TEST_CASE("sppo_schedule: bad shapes are errors") {
  CHECK_THROWS_AS(memo::sppo_phases(4, 3, 0), memo::error);
  CHECK_THROWS_AS(memo::sppo_phases(4, 8, 4), memo::error);
  CHECK_THROWS_AS(memo::sppo_phases(0, 8, 0), memo::error);
  CHECK_THROWS_WITH_AS(memo::sppo_phase_of(4, 8, 99, 0), doctest::Contains("sppo_phase_of: stage 99 outside [0, 4)"), memo::error);
  CHECK_THROWS_WITH_AS(memo::sppo_phase_of(4, 8, -5, 7), doctest::Contains("sppo_phase_of: stage -5 outside [0, 4)"), memo::error);
  memo::sppo_schedule_options o;
  o.stages = 2;
  o.forward_seconds = {1.0, 1.0};
  o.backward_seconds = {1.0};
  CHECK_THROWS_AS(memo::build_sppo_schedule(o), memo::error);
  o.backward_seconds = {1.0, -1.0};
  CHECK_THROWS_AS(memo::build_sppo_schedule(o), memo::error);
}

TEST_CASE("sppo_schedule: a stage's executed program is its stream in the schedule, with its hand-offs") {
  for (const double p2p : {0.0, 0.5}) {
    for (int pp = 1; pp <= 4; ++pp) {
      for (int n = pp; n <= 7; ++n) {
        memo::sppo_schedule_options o;
        o.stages = pp;
        o.p2p_seconds = p2p;
        for (int j = 0; j < n; ++j) {  // unequal subsequences, later ones shorter
          o.forward_seconds.push_back(1.0 + 0.25 * (n - j));
          o.backward_seconds.push_back(2.0 + 0.5 * (n - j));
        }
        const memo::stream_schedule schedule = memo::build_sppo_schedule(o);
        const memo::timeline simulated = schedule.simulate(profile());
        for (int stage = 0; stage < pp; ++stage) {
          CAPTURE(p2p);
          CAPTURE(pp);
          CAPTURE(n);
          CAPTURE(stage);
          // Written out by hand: forwards in order, backwards in reverse,
          // activations from the stage before, gradients from the one after.
          std::vector<memo::sppo_stage_op> want;
          const int before = stage > 0 ? stage - 1 : -1, after = stage + 1 < pp ? stage + 1 : -1;
          for (int j = 0; j < n; ++j) want.push_back({true, j, before, after});
          for (int j = n - 1; j >= 0; --j) want.push_back({false, j, after, before});
          const auto program = memo::sppo_stage_program(schedule, stage);
          CHECK(program == want);
          // The order is the simulator's: the stage's ops by start time.
          std::vector<std::pair<double, std::string>> started;
          const std::size_t stream = simulated.stream_index(memo::sppo_stream_name(stage));
          for (const auto& op : simulated.ops()) {
            if (op.stream == stream) started.emplace_back(op.start_seconds, op.name);
          }
          std::sort(started.begin(), started.end());
          REQUIRE(started.size() == program.size());
          for (std::size_t k = 0; k < program.size(); ++k) {
            CHECK(started[k].second == memo::sppo_op_name(program[k].forward, stage, program[k].subsequence));
          }
        }
      }
    }
  }
}

TEST_CASE("sppo_schedule: a multiplexed schedule or a missing stage has no executed program") {
  memo::sppo_schedule_options o;
  o.stages = 2;
  o.forward_seconds.assign(2, 1.0);
  o.backward_seconds.assign(2, 1.0);
  o.multiplexed = true;
  CHECK_THROWS_WITH_AS(memo::sppo_stage_program(memo::build_sppo_schedule(o), 0),
                       doctest::Contains("multiplexed"), memo::error);
  o.multiplexed = false;
  CHECK_THROWS_WITH_AS(memo::sppo_stage_program(memo::build_sppo_schedule(o), 2), doctest::Contains("stage 2"),
                       memo::error);
}

TEST_CASE("sppo_schedule: the op count is the built schedule's, without building it") {
  for (int pp = 1; pp <= 6; ++pp) {
    for (int n = pp; n <= pp + 5; ++n) {
      for (const bool multiplexed : {false, true}) {
        for (const double p2p : {0.0, 0.5}) {
          CAPTURE(pp);
          CAPTURE(n);
          CAPTURE(multiplexed);
          CAPTURE(p2p);
          memo::sppo_schedule_options o;
          o.stages = pp;
          o.forward_seconds.assign(static_cast<std::size_t>(n), 1.0);
          o.backward_seconds.assign(static_cast<std::size_t>(n), 2.0);
          o.multiplexed = multiplexed;
          o.p2p_seconds = p2p;
          CHECK(memo::sppo_schedule_ops(o) == memo::build_sppo_schedule(o).ops().size());
        }
      }
    }
  }
}
