// memo/pipeline/sppo_schedule.hpp
//
// SPPO's subsequence pipeline (sections 4 and 6.2, Table 3): one sequence
// cut into N subsequences flows through PP pipeline stages; stage i runs
// forward F(i, j) for j = 0..N-1 after F(i-1, j), then, after the last stage
// has finished forward, backward B(i, j) for j = N-1..0 after B(i+1, j)
// (causal attention: the gradient of an early subsequence's K/V needs every
// later subsequence's backward).
//
// Multiplexed sequence partitioning (section 6.2) fills the warm-up and
// drain bubbles: stage i's subsequences are in three phases,
//
//   Left-SP   [0, PP-1-i)     computed with sequence parallelism over stages
//                             {i, ..., PP-1} (idle before their first input)
//   Steady    [PP-1-i, N-i)   computed by stage i alone
//   Right-SP  [N-i, N)        computed with sequence parallelism over stages
//                             {0, ..., i} (idle after their last forward)
//
// with an SP range only where the phase is non-empty (Definition 6.2 and
// Table 3). The backward pass uses the same sets: Right-SP subsequences are
// the first backward on stage i (stages < i are idle), Left-SP the last
// (stages > i are done).
//
// Definition 6.1 as printed uses closed intervals: Left {0..PP-1-i},
// Steady {PP-1-i..N-i}, Right {N-i..N-1}. For PP = 4, N = 8, stage 0 that
// gives Left {0,1,2,3} and Steady {3,...,8}: subsequence 3 is in two phases
// and subsequence 8 does not exist. Table 3 lists Left {0,1,2}, Steady
// {3..7}; the half-open intervals above reproduce every cell of Table 3, so
// this header follows the table.
//
// `build_sppo_schedule` writes the pipeline as a `stream_schedule` (one
// compute stream per stage, ops with given durations; an op split over k
// stages becomes k pieces of duration/k plus the exchange the caller
// gives for it, which start together, as collectives do, and are joined by
// a marker), so the existing simulator gives the step time.
// Without
// multiplexing and with equal subsequence times the simulated step time is
// the closed form of section 3.3, T = (PP - 1 + N) / N * F(N), bubble ratio
// R_b = (PP - 1) / N.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <vector>

#include "memo/core/error.hpp"
#include "memo/schedule/stream_schedule.hpp"

namespace memo {

/// Stage i's three phases (subsequence ids) and SP ranges (stage ids).
struct sppo_stage_phases {
  std::vector<int> left;      ///< Left-SP subsequences
  std::vector<int> steady;    ///< Steady subsequences
  std::vector<int> right;     ///< Right-SP subsequences
  std::vector<int> left_sp;   ///< stages sharing the Left-SP subsequences (empty if no Left-SP)
  std::vector<int> right_sp;  ///< stages sharing the Right-SP subsequences (empty if no Right-SP)
  friend bool operator==(const sppo_stage_phases&, const sppo_stage_phases&) = default;
};

enum class sppo_phase { left_sp, steady, right_sp };

namespace detail {

inline void check_pipeline_shape(int pp, int n, const char* where) {
  expects(pp >= 1, [&] { return std::string(where) + ": pipeline stages PP must be >= 1, got " + std::to_string(pp); });
  expects(n >= pp, [&] {
    return std::string(where) + ": SPPO phases need N >= PP subsequences, got N = " + std::to_string(n) +
           ", PP = " + std::to_string(pp);
  });
}

inline std::vector<int> iota_range(int first, int last_exclusive) {
  std::vector<int> out;
  for (int x = first; x < last_exclusive; ++x) out.push_back(x);
  return out;
}

}  // namespace detail

/// Phases of stage `stage` of a `pp`-stage pipeline over `n` subsequences.
inline sppo_stage_phases sppo_phases(int pp, int n, int stage) {
  detail::check_pipeline_shape(pp, n, "sppo_phases");
  expects(stage >= 0 && stage < pp, [&] {
    return "sppo_phases: stage " + std::to_string(stage) + " outside [0, " + std::to_string(pp) + ")";
  });
  sppo_stage_phases out;
  out.left = detail::iota_range(0, pp - 1 - stage);
  out.steady = detail::iota_range(pp - 1 - stage, n - stage);
  out.right = detail::iota_range(n - stage, n);
  if (!out.left.empty()) out.left_sp = detail::iota_range(stage, pp);
  if (!out.right.empty()) out.right_sp = detail::iota_range(0, stage + 1);
  return out;
}

/// The phase subsequence `j` is in on stage `stage`.
inline sppo_phase sppo_phase_of(int pp, int n, int stage, int j) {
  expects(j >= 0 && j < n, [&] {
    return "sppo_phase_of: subsequence " + std::to_string(j) + " outside [0, " + std::to_string(n) + ")";
  });
  detail::check_pipeline_shape(pp, n, "sppo_phase_of");
  expects(stage >= 0 && stage < pp, [&] {
    return "sppo_phase_of: stage " + std::to_string(stage) + " outside [0, " + std::to_string(pp) + ")";
  });
  if (j < pp - 1 - stage) return sppo_phase::left_sp;
  if (j >= n - stage) return sppo_phase::right_sp;
  return sppo_phase::steady;
}

/// Inputs of the schedule: per-subsequence times on one stage (every stage
/// holds the same number of layers, so the same times).
struct sppo_schedule_options {
  int stages = 1;                          ///< PP
  std::vector<double> forward_seconds;     ///< per subsequence, one stage, one GPU
  std::vector<double> backward_seconds;    ///< per subsequence, one stage, one GPU
  bool multiplexed = false;                ///< split Left-SP / Right-SP work over idle stages
  /// Seconds each piece of a split op adds for the SP exchange between the
  /// stages sharing it (the collectives of the sequence parallelism that
  /// spans them, and whatever the stage whose op it is hands its helpers),
  /// given the subsequence, that stage, the first stage of the range and
  /// the number of stages k > 1 (the range is contiguous: it starts at
  /// `stage` for a Left-SP op and ends there for a Right-SP one); unset:
  /// none. Called once per split op, forward and backward alike; a negative
  /// or not-a-number result is an error.
  std::function<double(int subsequence, int stage, int first_stage, int stages)> sp_exchange_seconds{};
  /// Seconds of the point-to-point hand-off between stages (0 = none).
  double p2p_seconds = 0.0;
};

/// The op name of a forward / backward of subsequence j on stage i.
inline std::string sppo_op_name(bool forward, int stage, int j) {
  return std::string(forward ? "F" : "B") + "(" + std::to_string(stage) + "," + std::to_string(j) + ")";
}
inline std::string sppo_stream_name(int stage) { return "stage" + std::to_string(stage); }

/// The SPPO pipeline as a stream schedule. Ops are named F(i,j) / B(i,j)
/// (a marker ending a split op carries that name; its pieces add "/s<k>").
inline stream_schedule build_sppo_schedule(const sppo_schedule_options& options) {
  const int pp = options.stages;
  const int n = static_cast<int>(options.forward_seconds.size());
  detail::check_pipeline_shape(pp, n, "build_sppo_schedule");
  expects(options.backward_seconds.size() == options.forward_seconds.size(), [&] {
    return "build_sppo_schedule: " + std::to_string(options.backward_seconds.size()) +
           " backward times for " + std::to_string(n) + " subsequences";
  });
  for (int j = 0; j < n; ++j) {
    const auto at = static_cast<std::size_t>(j);
    expects(options.forward_seconds[at] >= 0.0 && options.backward_seconds[at] >= 0.0, [&] {
      return "build_sppo_schedule: negative or not-a-number time for subsequence " + std::to_string(j);
    });
  }
  auto exchange = [&](int j, int stage, const std::vector<int>& range) {
    if (!options.sp_exchange_seconds) return 0.0;
    const int k = static_cast<int>(range.size());
    const double seconds = options.sp_exchange_seconds(j, stage, range.front(), k);
    expects(seconds >= 0.0, [&] {
      return "build_sppo_schedule: SP exchange time " + std::to_string(seconds) + " for subsequence " +
             std::to_string(j) + " of stage " + std::to_string(stage) + " over stages " +
             std::to_string(range.front()) + ".." + std::to_string(range.back()) + " is negative or not a number";
    });
    return seconds;
  };
  expects(options.p2p_seconds >= 0.0, "build_sppo_schedule: the hand-off time must be >= 0");

  stream_schedule schedule;
  for (int i = 0; i < pp; ++i) schedule.add_stream(sppo_stream_name(i));
  if (options.p2p_seconds > 0.0) {
    for (int i = 0; i < pp; ++i) schedule.add_stream("p2p" + std::to_string(i));  // links into stage i
  }
  const auto at = [n](int i, int j) { return static_cast<std::size_t>(i) * static_cast<std::size_t>(n) + j; };
  std::vector<op_id> fwd(static_cast<std::size_t>(pp) * n), bwd(fwd.size());
  // The last op placed on each stage's stream.
  std::vector<std::optional<op_id>> last(static_cast<std::size_t>(pp));

  // One op (or its split pieces) of stage i, subsequence j.
  auto place = [&](bool forward, int i, int j, const std::vector<op_id>& after) {
    const double seconds = forward ? options.forward_seconds[j] : options.backward_seconds[j];
    std::vector<int> range{i};
    if (options.multiplexed) {
      // The SP ranges of `sppo_phases` without listing every phase's
      // subsequences (that would make building the schedule O(PP N^2)).
      const sppo_phase phase = sppo_phase_of(pp, n, i, j);
      if (phase == sppo_phase::left_sp) range = detail::iota_range(i, pp);
      if (phase == sppo_phase::right_sp) range = detail::iota_range(0, i + 1);
    }
    const std::string name = sppo_op_name(forward, i, j);
    if (range.size() == 1) {
      compute_op spec;
      spec.duration_seconds = seconds;
      const op_id id = schedule.add_compute(name, sppo_stream_name(i), spec, after);
      last[static_cast<std::size_t>(i)] = id;
      return id;
    }
    // The pieces exchange data (SP's collectives) as they run, so they
    // start together: each waits for every stream of the range to be free.
    std::vector<op_id> start = after;
    for (const int s : range) {
      if (last[static_cast<std::size_t>(s)]) start.push_back(*last[static_cast<std::size_t>(s)]);
    }
    const double piece = seconds / static_cast<double>(range.size()) + exchange(j, i, range);
    std::vector<op_id> pieces;
    for (const int s : range) {
      compute_op spec;
      spec.duration_seconds = piece;
      pieces.push_back(schedule.add_compute(name + "/s" + std::to_string(s), sppo_stream_name(s), spec, start));
      last[static_cast<std::size_t>(s)] = pieces.back();
    }
    const op_id marker = schedule.add_marker(name, sppo_stream_name(i), pieces);
    last[static_cast<std::size_t>(i)] = marker;
    return marker;
  };
  // Forward in wavefront order (diagonal i + j, then stage): every op's
  // dependencies are inserted before it, so stream FIFO order is a
  // topological order and split pieces interleave without deadlock.
  for (int d = 0; d <= pp - 1 + n - 1; ++d) {
    for (int i = 0; i < pp; ++i) {
      const int j = d - i;
      if (j < 0 || j >= n) continue;
      std::vector<op_id> after;
      if (i > 0) after.push_back(fwd[at(i - 1, j)]);
      if (j > 0) after.push_back(fwd[at(i, j - 1)]);
      if (i > 0 && options.p2p_seconds > 0.0) {
        compute_op link;
        link.duration_seconds = options.p2p_seconds;
        after = {schedule.add_compute("P2P" + sppo_op_name(true, i, j), "p2p" + std::to_string(i),
                                      link, {fwd[at(i - 1, j)]})};
        if (j > 0) after.push_back(fwd[at(i, j - 1)]);
      }
      fwd[at(i, j)] = place(true, i, j, after);
    }
  }
  // Backward: the mirror wavefront, from (PP-1, N-1) to (0, 0).
  for (int d = 0; d <= pp - 1 + n - 1; ++d) {
    for (int i = pp - 1; i >= 0; --i) {
      const int j = (n - 1) - (d - (pp - 1 - i));
      if (j < 0 || j >= n) continue;
      std::vector<op_id> after;
      after.push_back(fwd[at(i, j)]);  // a stage's backward needs its own forward's activations
      if (i < pp - 1) {
        if (options.p2p_seconds > 0.0) {
          compute_op link;
          link.duration_seconds = options.p2p_seconds;
          after.push_back(schedule.add_compute("P2P" + sppo_op_name(false, i, j), "p2p" + std::to_string(i),
                                               link, {bwd[at(i + 1, j)]}));
        } else {
          after.push_back(bwd[at(i + 1, j)]);
        }
      }
      if (j < n - 1) after.push_back(bwd[at(i, j + 1)]);
      bwd[at(i, j)] = place(false, i, j, after);
    }
  }
  return schedule;
}

/// One op of a stage in a pipeline step, as the stage's rank executes it:
/// the forward or backward of a subsequence, the stage it first receives
/// that subsequence's activations (forward) or gradients (backward) from,
/// and the stage it sends its own to afterwards (-1: none).
struct sppo_stage_op {
  bool forward = true;
  int subsequence = 0;
  int receive_from = -1;
  int send_to = -1;
  friend bool operator==(const sppo_stage_op&, const sppo_stage_op&) = default;
};

namespace detail {

/// (forward, stage, subsequence) of an op named F(i,j) / B(i,j); nothing
/// for other names (hand-offs, split pieces).
inline std::optional<std::tuple<bool, int, int>> parse_sppo_op(std::string_view name) {
  if (name.size() < 6 || (name[0] != 'F' && name[0] != 'B') || name[1] != '(' || name.back() != ')') return {};
  const std::string_view inner = name.substr(2, name.size() - 3);
  const std::size_t comma = inner.find(',');
  if (comma == std::string_view::npos) return {};
  int stage = 0, j = 0;
  const auto a = std::from_chars(inner.data(), inner.data() + comma, stage);
  const auto b = std::from_chars(inner.data() + comma + 1, inner.data() + inner.size(), j);
  if (a.ec != std::errc{} || a.ptr != inner.data() + comma || b.ec != std::errc{} ||
      b.ptr != inner.data() + inner.size()) {
    return {};
  }
  return std::tuple{name[0] == 'F', stage, j};
}

}  // namespace detail

/// What stage `stage` of a pipeline schedule built by `build_sppo_schedule`
/// (not multiplexed; with or without hand-off streams) executes, in its
/// stream's order: its F/B ops, each with the stage whose op it depends on
/// (directly or through a hand-off op) and the stage whose op depends on it.
/// The executed pipeline (model/gpt2_parallel_model.hpp) walks this list,
/// so what runs is what the simulator timed. Throws for a multiplexed
/// schedule (its split pieces run on other stages' ranks, which do not hold
/// the stage's layers) and for ops with more than one peer on either side.
inline std::vector<sppo_stage_op> sppo_stage_program(const stream_schedule& schedule, int stage) {
  const std::string stream = sppo_stream_name(stage);
  expects(schedule.has_stream(stream), [&] {
    return "sppo_stage_program: the schedule has no stream '" + stream + "' (stage " + std::to_string(stage) + ")";
  });
  const auto& ops = schedule.ops();
  const std::size_t mine = schedule.stream_index(stream);
  // The stage op an op stands for: itself, or the op a hand-off depends on.
  auto stage_op = [&](std::size_t index) -> std::optional<std::tuple<bool, int, int>> {
    for (int hops = 0; hops < 2; ++hops) {
      if (auto parsed = detail::parse_sppo_op(ops[index].name)) return parsed;
      if (ops[index].dependencies.size() != 1) return {};
      index = ops[index].dependencies.front();
    }
    return {};
  };
  // Who depends on each op (one pass, so the program is linear in the ops).
  std::vector<std::vector<std::size_t>> dependents(ops.size());
  for (std::size_t k = 0; k < ops.size(); ++k) {
    for (const std::size_t d : ops[k].dependencies) dependents[d].push_back(k);
  }
  std::vector<sppo_stage_op> program;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].stream != mine) continue;
    expects(ops[i].name.find("/s") == std::string::npos && ops[i].kind() != op_kind::marker, [&] {
      return "sppo_stage_program: op '" + ops[i].name +
             "' is part of a multiplexed (split) op, which is simulated but not executed";
    });
    const auto parsed = detail::parse_sppo_op(ops[i].name);
    expects(parsed && std::get<1>(*parsed) == stage, [&] {
      return "sppo_stage_program: op '" + ops[i].name + "' on stream '" + stream + "' is not F(" +
             std::to_string(stage) + ",j) or B(" + std::to_string(stage) + ",j)";
    });
    sppo_stage_op op{std::get<0>(*parsed), std::get<2>(*parsed), -1, -1};
    auto set_peer = [&](int& peer, int other, const char* side) {
      if (other == stage) return;
      expects(peer < 0 || peer == other, [&] {
        return "sppo_stage_program: op '" + ops[i].name + "' " + side + " two stages (" + std::to_string(peer) +
               " and " + std::to_string(other) + ")";
      });
      peer = other;
    };
    for (const std::size_t d : ops[i].dependencies) {
      if (auto from = stage_op(d)) set_peer(op.receive_from, std::get<1>(*from), "receives from");
    }
    for (const std::size_t k : dependents[i]) {
      if (ops[k].stream == mine) continue;
      // A direct dependent on another stage, or a hand-off feeding one.
      if (auto to = detail::parse_sppo_op(ops[k].name)) {
        set_peer(op.send_to, std::get<1>(*to), "sends to");
      } else {
        for (const std::size_t m : dependents[k]) {
          if (auto next = detail::parse_sppo_op(ops[m].name)) set_peer(op.send_to, std::get<1>(*next), "sends to");
        }
      }
    }
    program.push_back(op);
  }
  return program;
}

/// The number of operations `build_sppo_schedule(options)` writes, without
/// building it: 2 N PP forwards and backwards; with multiplexing, each op
/// split over k > 1 stages as k pieces and a marker (about 4 PP^3 / 3 in
/// all); with hand-offs, 2 N (PP - 1) more. The simulator's time and memory
/// grow with it.
inline std::uint64_t sppo_schedule_ops(const sppo_schedule_options& options) {
  const auto pp = static_cast<std::uint64_t>(options.stages);
  const auto n = static_cast<std::uint64_t>(options.forward_seconds.size());
  detail::check_pipeline_shape(options.stages, static_cast<int>(n), "sppo_schedule_ops");
  std::uint64_t pass = 0;  // forward ops of every stage (the backward has as many)
  for (std::uint64_t i = 0; i < pp; ++i) {
    if (!options.multiplexed) {
      pass += n;
      continue;
    }
    // Left-SP [0, PP-1-i) over PP - i stages, Right-SP [N-i, N) over i + 1.
    const std::uint64_t left = pp - 1 - i, right = i;
    pass += (n - left - right) + left * (pp - i + 1) + right * (i + 2);
  }
  const std::uint64_t hand_offs = options.p2p_seconds > 0.0 ? 2 * n * (pp - 1) : 0;
  return 2 * pass + hand_offs;
}

/// Step-time figures of one simulated schedule.
struct sppo_pipeline_figures {
  double step_seconds = 0.0;      ///< simulated makespan
  double work_seconds = 0.0;      ///< F(N): forward + backward of all subsequences on one stage, one GPU
  double bubble_seconds = 0.0;    ///< step - work (per stage, the paper's t_b)
  double bubble_ratio = 0.0;      ///< bubble / work (the paper's R_b)
};

/// Simulates `options` on `profile` (durations are given, so only the
/// interconnect matters for collectives; none are added here).
inline sppo_pipeline_figures simulate_sppo(const sppo_schedule_options& options, const device_profile& profile) {
  const stream_schedule schedule = build_sppo_schedule(options);
  const timeline result = schedule.simulate(profile);
  sppo_pipeline_figures out;
  out.step_seconds = result.makespan_seconds();
  for (std::size_t j = 0; j < options.forward_seconds.size(); ++j)
    out.work_seconds += options.forward_seconds[j] + options.backward_seconds[j];
  out.bubble_seconds = out.step_seconds - out.work_seconds;
  out.bubble_ratio = out.work_seconds > 0.0 ? out.bubble_seconds / out.work_seconds : 0.0;
  return out;
}

/// Section 3.3's closed form: T = (p - 1 + N) / N * F(N) for equal subsequences.
inline double sppo_closed_form_step_seconds(int pp, int n, double work_seconds) {
  detail::check_pipeline_shape(pp, n, "sppo_closed_form_step_seconds");
  return static_cast<double>(pp - 1 + n) / static_cast<double>(n) * work_seconds;
}
/// Section 3.3's closed form: R_b = (p - 1) / N.
inline double sppo_closed_form_bubble_ratio(int pp, int n) {
  detail::check_pipeline_shape(pp, n, "sppo_closed_form_bubble_ratio");
  return static_cast<double>(pp - 1) / static_cast<double>(n);
}

}  // namespace memo
