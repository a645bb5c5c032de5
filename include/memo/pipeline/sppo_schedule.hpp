// memo/pipeline/sppo_schedule.hpp
//
// SPPO's subsequence pipeline (sections 4 and 6): PP stages, each a run of
// layers on its own GPU, and one sequence cut into N subsequences that flow
// through the stages one after another, forward in order s_0 .. s_{N-1},
// backward in the reverse order (with causal attention s_j's K/V gradients
// are complete only after every later subsequence's backward).
//
// Phases (Table 3, multiplexed sequence partitioning). Stage i works on
// subsequence j at forward step j + i; stages after i are still waiting for
// their first subsequence while i runs its first PP - 1 - i ones, and
// stages before i have finished while i runs its last i ones. So, with
// half-open ranges of subsequence ids,
//
//   Left   [0, PP - 1 - i)      its GPUs i .. PP-1 idle otherwise  (Left-SP range)
//   Steady [PP - 1 - i, N - i)  every stage busy
//   Right  [N - i, N)           its GPUs 0 .. i idle otherwise     (Right-SP range)
//
// and an SP range is empty when its phase is. This is Table 3 exactly
// (PP = 4, N = 8; tested). Definition 6.1 prints closed intervals,
// Left {0 <= x <= PP-1-i}, Steady {PP-1-i <= x <= N-i}, Right
// {N-i <= x <= N-1}: those overlap at PP-1-i and N-i, and for stage 0 give
// Left {0,1,2,3} and Steady {3,...,8} with id 8 out of range, where the
// table has {0,1,2} and {3,...,7}. Definition 6.2's SP ranges,
// {i..PP-1} and {0..i}, hold for the non-empty phases only (Table 3 has
// none for stage 3's empty Left and stage 0's empty Right).
//
// `build_sppo_schedule` lays the pipeline out as a stream_schedule, one
// stream per stage, so the simulator gives its step time and every stage's
// idle time. With multiplexing on, an op of a Left or Right subsequence is
// split evenly over the GPUs of its SP range (each GPU's stream gets a part)
// and joined by a marker; with uniform costs and no multiplexing the
// simulated step is (PP - 1 + N) / N x F(N), the section's formula, and the
// bubble ratio (PP - 1) / N.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memo/core/error.hpp"
#include "memo/schedule/stream_schedule.hpp"

namespace memo {

/// A half-open range [begin, end) of subsequence ids or stage indices.
struct id_range {
  int begin = 0;
  int end = 0;
  [[nodiscard]] bool empty() const noexcept { return end <= begin; }
  [[nodiscard]] int size() const noexcept { return empty() ? 0 : end - begin; }
  [[nodiscard]] bool contains(int x) const noexcept { return x >= begin && x < end; }
  friend bool operator==(const id_range& a, const id_range& b) noexcept {
    return (a.empty() && b.empty()) || (a.begin == b.begin && a.end == b.end);
  }
};

/// One stage's phases and SP ranges (a column of Table 3).
struct sppo_stage_phases {
  id_range left, steady, right;  ///< subsequence ids
  id_range left_sp, right_sp;    ///< stages (GPUs) sharing a Left / Right subsequence
};

namespace detail {

inline void check_pipeline_shape(int stages, int subsequences) {
  expects(stages >= 1 && subsequences >= stages, [&] {
    return "sppo schedule: " + std::to_string(stages) + " stages and " + std::to_string(subsequences) +
           " subsequences: needs PP >= 1 and N >= PP (every stage has a steady phase)";
  });
}

}  // namespace detail

/// Stage `stage`'s phases for PP = `stages`, N = `subsequences`.
inline sppo_stage_phases sppo_phases(int stages, int subsequences, int stage) {
  detail::check_pipeline_shape(stages, subsequences);
  expects(stage >= 0 && stage < stages, [&] {
    return "sppo schedule: stage " + std::to_string(stage) + " is outside [0, " + std::to_string(stages) + ")";
  });
  sppo_stage_phases p;
  p.left = {0, stages - 1 - stage};
  p.steady = {stages - 1 - stage, subsequences - stage};
  p.right = {subsequences - stage, subsequences};
  if (!p.left.empty()) p.left_sp = {stage, stages};
  if (!p.right.empty()) p.right_sp = {0, stage + 1};
  return p;
}

/// The costs one stage spends on one subsequence.
struct sppo_op_cost {
  double forward_seconds = 0.0;
  double backward_seconds = 0.0;
};

struct sppo_schedule_options {
  int stages = 1;        ///< PP
  int subsequences = 1;  ///< N
  /// cost(j): stage-independent cost of subsequence j on one stage (layers
  /// balanced over stages); size N.
  std::vector<sppo_op_cost> costs;
  bool multiplexed = false;  ///< split Left/Right subsequences over their SP ranges
};

/// The pipeline as a schedule: stream "stage i" per stage; ops named
/// "F s<j> @<i>" and "B s<j> @<i>" (with "/g<k>" for the part on GPU k when
/// multiplexed).
struct sppo_schedule {
  stream_schedule schedule;
  int stages = 1;
  int subsequences = 1;
};

inline sppo_schedule build_sppo_schedule(const sppo_schedule_options& options) {
  const int P = options.stages, N = options.subsequences;
  detail::check_pipeline_shape(P, N);
  expects(options.costs.size() == static_cast<std::size_t>(N), [&] {
    return "sppo schedule: " + std::to_string(options.costs.size()) + " subsequence costs for N = " + std::to_string(N);
  });
  for (std::size_t j = 0; j < options.costs.size(); ++j) {
    expects(options.costs[j].forward_seconds >= 0.0 && options.costs[j].backward_seconds >= 0.0,
            [&] { return "sppo schedule: subsequence " + std::to_string(j) + " has a negative cost"; });
  }
  sppo_schedule out{{}, P, N};
  auto stream = [](int i) { return "stage " + std::to_string(i); };
  for (int i = 0; i < P; ++i) out.schedule.add_stream(stream(i));
  std::vector<sppo_stage_phases> phases;
  for (int i = 0; i < P; ++i) phases.push_back(sppo_phases(P, N, i));

  // One op of stage i on subsequence j, after `after`; split over the SP
  // range when multiplexed and j is in a Left or Right phase.
  auto add = [&](const std::string& name, int i, int j, double seconds, const std::vector<op_id>& after) {
    id_range gpus{i, i + 1};
    if (options.multiplexed) {
      if (phases[i].left.contains(j)) gpus = phases[i].left_sp;
      if (phases[i].right.contains(j)) gpus = phases[i].right_sp;
    }
    if (gpus.size() == 1) {
      return out.schedule.add_compute(name, stream(i), {.duration_seconds = seconds}, after);
    }
    std::vector<op_id> parts;
    for (int g = gpus.begin; g < gpus.end; ++g) {
      parts.push_back(out.schedule.add_compute(name + "/g" + std::to_string(g), stream(g),
                                               {.duration_seconds = seconds / gpus.size()}, after));
    }
    return out.schedule.add_marker(name, stream(i), parts);
  };

  // Forward wavefront: at step c stage i runs subsequence c - i; inserting
  // in step order keeps every stream's op order the pipeline's order.
  std::vector<std::vector<op_id>> fwd(static_cast<std::size_t>(P), std::vector<op_id>(static_cast<std::size_t>(N)));
  for (int c = 0; c < N + P - 1; ++c) {
    for (int i = 0; i < P; ++i) {
      const int j = c - i;
      if (j < 0 || j >= N) continue;
      std::vector<op_id> after;
      if (i > 0) after.push_back(fwd[i - 1][j]);
      if (j > 0) after.push_back(fwd[i][j - 1]);
      fwd[i][j] = add("F s" + std::to_string(j) + " @" + std::to_string(i), i, j,
                      options.costs[static_cast<std::size_t>(j)].forward_seconds, after);
    }
  }
  // Backward wavefront, last stage and last subsequence first.
  std::vector<std::vector<op_id>> bwd(static_cast<std::size_t>(P), std::vector<op_id>(static_cast<std::size_t>(N)));
  for (int c = 0; c < N + P - 1; ++c) {
    for (int i = P - 1; i >= 0; --i) {
      const int j = N - 1 - (c - (P - 1 - i));
      if (j < 0 || j >= N) continue;
      std::vector<op_id> after;
      if (i == P - 1) after.push_back(fwd[i][N - 1]);  // the loss needs the whole forward
      if (i + 1 < P) after.push_back(bwd[i + 1][j]);
      if (j + 1 < N) after.push_back(bwd[i][j + 1]);
      bwd[i][j] = add("B s" + std::to_string(j) + " @" + std::to_string(i), i, j,
                      options.costs[static_cast<std::size_t>(j)].backward_seconds, after);
    }
  }
  return out;
}

/// The section's closed form for N equal subsequences: with F(N) the
/// forward+backward time of all N on one stage, the bubble is (PP-1) F(N)/N
/// and the step (PP - 1 + N) / N x F(N).
struct sppo_bubble {
  double bubble_seconds = 0.0;
  double step_seconds = 0.0;
  double bubble_ratio = 0.0;  ///< (PP - 1) / N
};

inline sppo_bubble sppo_bubble_formula(int stages, int subsequences, double all_subsequences_seconds) {
  detail::check_pipeline_shape(stages, subsequences);
  const double per = all_subsequences_seconds / subsequences;
  return {(stages - 1) * per, (stages - 1 + subsequences) * per, static_cast<double>(stages - 1) / subsequences};
}

}  // namespace memo
