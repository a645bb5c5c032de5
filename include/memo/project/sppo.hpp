// memo/project/sppo.hpp
//
// One step under SPPO (sections 4-6): the sequence cut into N subsequences
// with FLOPs-balanced lengths (pipeline/sppo_partition.hpp), pipelined
// through PP stages of n/PP layers, each stage a group of SP GPUs inside a
// node running Megatron sequence parallelism (SPPO 2.2, 6.2), every
// subsequence's K/V kept on the device and a fraction alpha_i of its other
// skeletal activations offloaded (pipeline/sppo_offload.hpp: section 5.2,
// alpha_i A_i = BW x T_balanced, through MEMO's alpha LP), the rest kept on
// the device, nothing recomputed. The pipeline, with multiplexed sequence
// partitioning, is simulated by pipeline/sppo_schedule.hpp; the settings
// obey section 6.1's restrictions as pipeline/sppo_solver.hpp states them
// (`sppo_candidate_allowed`: SP divides a node, SP x PP = all GPUs, PP
// divides the layers, N >= PP); on a cluster where no SP x PP is every
// GPU, copies of smaller pipelines run data-parallel (`sppo_settings`).
// Section 6.1 bounds the work per subsequence at 2K-16K tokens "per layer
// per device"; Table 4's settings (7B: 512K/32 = 16K ... 1024K/160 = 6.4K
// tokens per subsequence, i.e. 2K ... 0.8K per GPU) keep s/N, not
// s/(N SP), in that range, so this model does the same; N is tried at
// s/16K and at 2 and 4 times that.
//
// `sppo-recompute` is the baseline SPPO 7.1 compares against "under the
// same parallelism strategy": Megatron-LM on the same (SP, PP, N)
// pipeline with full recomputation, no offload, no multiplexing, a
// caching allocator.
//
// Per GPU of the fullest stage (the first or the last: they also hold the
// embedding or the classifier):
//  states     (n/PP layers + V h) x (2 + 4 + 12) B / SP (Megatron-LM's
//             mixed precision), Adam's 12 B also over the DP copies.
//  skeletal   sppo: the offload plan's peak (K/V of every subsequence and
//             what alpha_i left behind, section 5.2's M_i), plus the
//             gradients of K and V: under causal attention the backward of
//             subsequence j adds to dK, dV of every earlier subsequence in
//             every layer of the stage, and those sums are complete only at
//             that subsequence's own backward, so they are live for the
//             whole backward phase (section 5 does not count them).
//             sppo-recompute: K/V and their gradients, every layer input of
//             every subsequence, one layer's skeletal tensors of the widest
//             subsequence being recomputed.
//  transient  one layer's backward working set of the widest subsequence
//             (megatron.hpp's, with T = its tokens), or its loss (last
//             stage), plus two prefetch buffers of the largest offloaded
//             alpha_i A_i (sppo).
//
// Time per subsequence and stage: n/PP layers of GEMMs and attention over
// the subsequence's causal pairs at their efficiencies, four Megatron-SP
// collectives forward and four backward, and a fixed `sppo_layer_overhead`
// per layer per pass (kernel launches and synchronisation of ~40 kernels,
// 0.2 ms, E: what makes more subsequences cost more, SPPO 3.3; reported
// as compute). Stage hand-offs of the widest subsequence's [s_j/SP, h]
// over the inter-node link when stages span nodes. A multiplexed
// subsequence split over k stages pays its Megatron-SP collectives across
// the stages: four per layer and pass, each piece receiving inside its
// stage what an unsplit op receives, and the other k - 1 stages' shares
// of the subsequence's [s_j/SP, h] rows over the inter-node link unless
// the k x SP GPUs share a node; and what running the owner's layers on
// the helpers hands over (`split_piece_handover_bytes`): the owner's
// weights and their gradients, the K/V of the tokens before a Right-SP
// phase and their dK/dV, and the K/V of each Left-SP piece back to the
// owner and their dK/dV out again (reported as communication: the pieces
// of the stage that takes part in the most). The classifier is added
// once. A multiplexed pipeline's GPUs also hold what they compute for
// other stages (`split_helper_bytes_by_stage`: those stages' weights and
// gradients, the pieces' activations, the K/V before a Right-SP phase),
// added to each stage's own memory, at the stage where the sum is the
// most; the plain pipeline is kept where that does not fit.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "memo/pipeline/sppo_offload.hpp"
#include "memo/pipeline/sppo_partition.hpp"
#include "memo/pipeline/sppo_schedule.hpp"
#include "memo/pipeline/sppo_solver.hpp"
#include "memo/project/projection.hpp"

namespace memo::project {

inline constexpr double sppo_layer_overhead = 2e-4;  ///< seconds per layer per subsequence per pass (E)
inline constexpr double sppo_min_subsequence = 2048;  ///< SPPO 6.1, tokens per subsequence
inline constexpr double sppo_max_subsequence = 16384;
inline constexpr double sppo_max_subsequences = 1 << 20;  ///< N beyond this is not tried (16G tokens)
/// The most subsequences a fixed N (`settings_pin::subsequences`) may have
/// (the partition, the offload plan and the schedule grow with N: 16384
/// over 4 stages take about a second and 100 MB to project).
inline constexpr int sppo_max_pinned_subsequences = 16384;
/// The most operations a simulated schedule may have (sppo_schedule_ops:
/// 2 N PP, 2 N (PP - 1) hand-offs, and about 4 PP^3 / 3 more for the
/// multiplexed pieces). A setting with more is timed as the plain pipeline
/// by section 3.3's closed form and the hand-offs (exact for equal
/// subsequences), without what multiplexing could save: the simulator holds
/// about 2 KB per operation, so this keeps a projection below 1 GB.
inline constexpr std::uint64_t sppo_max_simulated_ops = 350'000;

namespace detail {

/// The split pieces' exchange seconds (`sp_exchange_seconds`, forward and
/// backward) of the stage of a multiplexed pipeline that pays the most.
inline double sppo_most_exchange_seconds(const sppo_schedule_options& options) {
  const int pp = options.stages, n = static_cast<int>(options.forward_seconds.size());
  std::vector<double> paid(static_cast<std::size_t>(pp), 0.0);
  auto split = [&](int j, int owner, int first, int k) {
    const double seconds = 2 * options.sp_exchange_seconds(j, owner, first, k);
    for (int stage = first; stage < first + k; ++stage) paid[static_cast<std::size_t>(stage)] += seconds;
  };
  for (int i = 0; i < pp; ++i) {
    const sppo_stage_phases phases = sppo_phases(pp, n, i);
    for (const int j : phases.left) split(j, i, phases.left_sp.front(), static_cast<int>(phases.left_sp.size()));
    for (const int j : phases.right) split(j, i, phases.right_sp.front(), static_cast<int>(phases.right_sp.size()));
  }
  return *std::max_element(paid.begin(), paid.end());
}

/// One split piece of a multiplexed pipeline (sppo_schedule_options::
/// sp_exchange_seconds) and the sizes its hand-over depends on, per GPU of
/// the owner's SP group.
struct split_piece {
  int subsequence = 0, owner = 0, first = 0, stages = 2;  ///< j, the op's stage, its range [first, first + k)
  int subsequences = 2;                                    ///< N
  double tokens_before = 0, tokens = 0;  ///< subsequence j's first token and its tokens
  double kv_bytes = 0;                   ///< K and V of one token, every layer of the stage, per GPU
  double weight_bytes = 0;               ///< the stage's weights, 16-bit, per GPU
};

/// Bytes a GPU of the owner's SP group sends or receives, on top of the
/// sequence-parallel collectives, because a split piece runs stage
/// `owner`'s layers on GPUs that hold neither them nor the K/V they attend
/// to. Split over k stages, each GPU takes 1/k of the heads (and of the
/// weights) the owner's GPU holds, so the owner's GPU moves (k - 1)/k of
/// each of the following, and each helper's GPU 1/k: the owner's is the
/// busiest link.
///  - The first piece of a phase (Left-SP: j = 0, Right-SP: j = N - owner)
///    hands the helpers the owner's weights, and takes their gradients
///    back in the backward (16-bit both ways).
///  - The first Right-SP piece hands the helpers the owner's K/V of every
///    earlier token (the owner holds them all: those of its Left-SP
///    pieces came back to it) and takes their dK/dV
///    back in the backward; the later Right-SP pieces attend to these and
///    to what the same GPUs computed for the same heads before, so move
///    nothing more.
///  - After each Left-SP piece the owner takes back the K/V of the piece's
///    tokens the helpers computed (its Steady subsequences attend to
///    them), and in the backward hands them the dK/dV the Steady
///    backwards added.
/// Forward and backward move the same bytes, so one figure serves both.
inline double split_piece_handover_bytes(const split_piece& piece) {
  const double k = piece.stages;
  const bool left = piece.first == piece.owner;  // Left-SP ranges start at their stage, Right-SP ones end there
  const int first_of_phase = left ? 0 : piece.subsequences - piece.owner;
  double bytes = piece.subsequence == first_of_phase ? piece.weight_bytes : 0.0;
  if (left) {
    bytes += piece.tokens * piece.kv_bytes;
  } else if (piece.subsequence == first_of_phase) {
    bytes += piece.tokens_before * piece.kv_bytes;
  }
  return (k - 1.0) / k * bytes;
}

/// What one GPU holds for the split pieces it computes for other stages.
struct split_helper_memory {
  double params = 0, grads = 0, activations = 0;
  [[nodiscard]] double total() const { return params + grads + activations; }
};

/// What a GPU of each stage holds as a helper of the other stages' split
/// pieces (see split_piece_handover_bytes), all at once: what a Left-SP
/// piece keeps lives from its forward at the step's start to its backward
/// at the end, and every Right-SP piece's from the end of the forwards to
/// the start of the backwards. For each stage it helps, over k stages, it
/// holds 1/k of that stage's per-GPU share of: the weights (16-bit) and
/// their gradients (fp32); for each piece, the skeletal activations of the
/// piece's tokens and their dK/dV (`skeletal_bytes` and `kv_bytes`: one
/// token, every layer of the stage, per GPU of its SP group); and before
/// a Right-SP phase, the K/V of every earlier token and their dK/dV.
/// `owner_parameters(i)`: the parameters of stage i.
template <class Parameters>
std::vector<split_helper_memory> split_helper_bytes_by_stage(const sequence_partition& part, int pp, int sp,
                                                             double skeletal_bytes, double kv_bytes,
                                                             Parameters owner_parameters) {
  const int n = static_cast<int>(part.count());
  std::vector<split_helper_memory> out;
  for (int stage = 0; stage < pp; ++stage) {
    split_helper_memory held;
    auto help = [&](int owner, int k, int first_j, int last_j, double tokens_before) {
      held.params += owner_parameters(owner) * bytes_per_element / (static_cast<double>(sp) * k);
      held.grads += owner_parameters(owner) * 4.0 / (static_cast<double>(sp) * k);
      for (int j = first_j; j < last_j; ++j) {
        held.activations += static_cast<double>(part.tokens(static_cast<std::size_t>(j))) * (skeletal_bytes + kv_bytes) / k;
      }
      held.activations += 2 * tokens_before * kv_bytes / k;
    };
    for (int owner = 0; owner < pp; ++owner) {
      if (owner < stage) help(owner, pp - owner, 0, pp - 1 - owner, 0.0);  // its Left-SP range {owner..PP-1}
      if (owner > stage) {                                                  // its Right-SP range {0..owner}
        help(owner, owner + 1, n - owner, n, static_cast<double>(part.begin(static_cast<std::size_t>(n - owner))));
      }
    }
    out.push_back(held);
  }
  return out;
}

/// The most of split_helper_bytes_by_stage: what the busiest helper holds.
template <class Parameters>
split_helper_memory split_helper_bytes(const sequence_partition& part, int pp, int sp, double skeletal_bytes,
                                       double kv_bytes, Parameters owner_parameters) {
  split_helper_memory most;
  for (const split_helper_memory& held :
       split_helper_bytes_by_stage(part, pp, sp, skeletal_bytes, kv_bytes, owner_parameters)) {
    if (held.total() > most.total()) most = held;
  }
  return most;
}

/// Where copies of a pipeline of `gpus` GPUs run: one inside a node (any
/// SP x PP up to the node's GPUs) runs beside others of its node, up to
/// `per_node` of them on each node (whole nodes hold node / gpus, a partial
/// node what it can); one over more GPUs than a node runs on whole nodes.
struct sppo_copy_placement {
  int whole_nodes = 0;  ///< nodes of gpus_per_node GPUs
  int most = 0;         ///< copies a whole node holds (0: copies span whole nodes)
  int partial = 0;      ///< copies the partial node holds

  sppo_copy_placement(const cluster& c, int gpus) : whole_nodes(c.gpus / c.gpus_per_node) {
    if (gpus > c.gpus_per_node) return;
    most = c.gpus_per_node / gpus;
    partial = (c.gpus % c.gpus_per_node) / gpus;
  }
  /// Copies the cluster holds with at most `per_node` to a node.
  [[nodiscard]] std::int64_t copies(int per_node) const {
    return static_cast<std::int64_t>(whole_nodes) * std::min(per_node, most) + std::min(per_node, partial);
  }
  /// The copies a node holds when `replicas` are spread as evenly as the
  /// nodes hold them (the fewest to a node that place them all).
  [[nodiscard]] int per_node(int replicas) const {
    expects(replicas >= 1 && (most == 0 || replicas <= copies(most)), [&] {
      return "sppo_copy_placement: " + std::to_string(replicas) + " copies, the nodes hold 1 to " +
             std::to_string(copies(most));
    });
    if (whole_nodes == 0) return replicas;
    // Up to `partial` to a node every node, the partial one too; beyond, whole nodes only.
    const std::int64_t even = static_cast<std::int64_t>(whole_nodes + 1) * partial;
    if (replicas <= even) return static_cast<int>((replicas + whole_nodes) / (whole_nodes + 1));
    return static_cast<int>((replicas - partial + whole_nodes - 1) / whole_nodes);
  }
};

/// The copy counts tried for pipelines of `gpus` GPUs (see
/// sppo_copy_placement), the most first: over whole nodes, as many as fit
/// or one; inside a node, as many as fit with 1, 2, 4, ... copies to a
/// node and as many as a node holds, or one with the rest idle (the copies
/// of a node share its host memory, so fewer to a node may reach a longer
/// sequence, and one to each node as far as one alone). `pinned`: that
/// count alone, if the cluster holds it.
inline std::vector<int> sppo_copy_counts(const cluster& c, int gpus, std::optional<int> pinned = std::nullopt) {
  const sppo_copy_placement place(c, gpus);
  const std::int64_t most =
      place.most == 0 ? c.gpus / gpus : place.copies(place.most);  // at most 2^20 (cluster::check)
  if (pinned) return *pinned >= 1 && *pinned <= most ? std::vector<int>{*pinned} : std::vector<int>{};
  std::vector<int> out{static_cast<int>(most)};
  if (place.most > 0) {
    int below = 1;
    while (below * 2 < place.most) below *= 2;
    for (int per_node = below; per_node >= 1; per_node /= 2) out.push_back(static_cast<int>(place.copies(per_node)));
  }
  out.push_back(1);
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

/// Which pipeline a SPPO step is timed with.
enum class sppo_pipeline {
  shorter,      ///< the shorter of the two (what SPPO's workflow chooses)
  plain,        ///< every subsequence on its own stage
  multiplexed,  ///< Left-SP and Right-SP subsequences split over idle stages
};

/// `kind` (sppo or sppo-recompute) with SP x PP GPUs and N subsequences
/// (`replicas` such pipelines, each on its own sequence, data-parallel:
/// Adam's states sharded over them, their gradient sums not timed, as in
/// megatron.hpp).
/// A setting whose work alone (its step without any bubble) already
/// exceeds `prune_above` seconds cannot be the best; it is timed by section
/// 3.3's closed form instead of the simulator. `pipeline` other than
/// `shorter` times that pipeline alone (sppo-recompute is never
/// multiplexed, and a setting that does not fit is timed by the closed
/// form either way; a multiplexed schedule too large to simulate is an
/// error).
inline projection sppo(strategy kind, const model_shape& m, const cluster& c, double s, int sp, int pp, int n,
                       double prune_above = std::numeric_limits<double>::infinity(),
                       sppo_pipeline pipeline = sppo_pipeline::shorter, int replicas = 1) {
  const auto& p = c.profile;
  const bool offload = kind == strategy::sppo;
  const double h = m.hidden, L = m.layers, layers = L / pp;
  const auto length = static_cast<std::uint64_t>(s);
  const causal_cost_weights weights{
      static_cast<std::uint64_t>(std::max(1.0, std::round(m.layer_parameters() / (2 * h)))), 1};
  projection r;
  r.kind = kind;
  r.sequence = s;
  r.chosen.sp = sp;
  r.chosen.pp = pp;
  r.chosen.dp = replicas;
  r.chosen.subsequences = n;

  // Memory that does not depend on the schedule first: when the model
  // states and K/V alone overflow the device, the closed form of section
  // 3.3 (T = (PP - 1 + N) / N x F(N)) stands in for the simulation, which
  // at such lengths would walk millions of operations for a setting that
  // cannot run anyway.
  const double stage_parameters = layers * m.layer_parameters() + static_cast<double>(m.vocab) * h;
  const double kv_per_token = std::ceil(2 * m.kv_width() * bytes_per_element / sp);
  const double kv_all = layers * kv_per_token * s;
  const bool hopeless = 18 * stage_parameters / sp + 2 * kv_all > p.device_memory_bytes;
  const auto count = static_cast<std::size_t>(n);
  const sequence_partition part =
      hopeless ? equal_length_partition(length, count) : flops_balanced_partition(length, count, weights);

  // Per-subsequence times on one stage (one GPU of its SP group).
  sppo_schedule_options options;
  options.stages = pp;
  options.multiplexed = offload && pipeline != sppo_pipeline::plain;
  double compute = 0, communication = 0, recompute = 0, widest = 0;
  std::vector<double> stage_comm;  // per subsequence: one pass's collectives inside a stage
  const double sp_link = c.link_for(sp);
  for (std::size_t j = 0; j < part.count(); ++j) {
    const double tokens = static_cast<double>(part.tokens(j));
    widest = std::max(widest, tokens);
    const double pairs = static_cast<double>(causal_cost(part.begin(j), part.end(j), {0, 1}));
    const double gemm = layers * gemm_seconds(p, m.layer_gemm_flops(tokens) / sp);
    const double attention = layers * attention_seconds(p, 4 * h * pairs / sp);
    const double comm =
        layers * 4 * collective(collective_kind::all_gather, tokens * h * bytes_per_element, sp, sp_link);
    const double overhead = layers * sppo_layer_overhead;
    const double forward = gemm + attention + comm + overhead;
    const double backward = 2 * gemm + attention_backward_factor * attention + comm + overhead;
    options.forward_seconds.push_back(forward);
    options.backward_seconds.push_back(backward + (offload ? 0.0 : forward));
    stage_comm.push_back(comm);
    compute += 3 * gemm + (1 + attention_backward_factor) * attention + 2 * overhead;
    communication += 2 * comm;
    if (!offload) recompute += forward;
  }
  const double hand_off = widest / sp * h * bytes_per_element;
  if (pp > 1) options.p2p_seconds = hand_off / c.link_for(sp * pp);
  // A multiplexed piece of subsequence j over k stages: its Megatron-SP
  // collectives (four per layer and pass) span the k x SP GPUs of stages
  // [first, first + k). Gathered hierarchically, each GPU still receives
  // its stage's (SP - 1) / SP share of the subsequence inside the node (a
  // stage's own collectives, which the schedule divides by k with the
  // rest of the op: the (k - 1) / k of them added back here), and the
  // other stages' shares of its [s_j / SP, h] rows across the range, over
  // the inter-node link unless the range's GPUs share a node.
  const int per_node = c.gpus_in_a_node();
  // The GPUs of the fullest node that work: copies inside a node spread
  // over the nodes as evenly as they fit (sppo_copy_placement), a pipeline
  // over whole nodes keeps them busy; the others idle and use no host
  // memory.
  const int pipeline_gpus = sp * pp;
  const int busy_in_a_node = pipeline_gpus > per_node
                                 ? per_node
                                 : sppo_copy_placement(c, pipeline_gpus).per_node(replicas) * pipeline_gpus;
  auto in_one_node = [sp, per_node](int first, int k) {
    const int first_gpu = first * sp, last_gpu = (first + k) * sp - 1;
    return first_gpu / per_node == last_gpu / per_node;
  };
  // Stage `owner`'s parameters, which running its layers on other stages'
  // GPUs moves there and back (split_piece_handover_bytes) and keeps
  // there (split_helper_bytes_by_stage): its layers, and the embedding or the
  // classifier on the first and the last stage.
  const double embedding = static_cast<double>(m.vocab) * h;
  auto owner_weights = [&, layers](int owner) {
    return layers * m.layer_parameters() + (owner == 0 || owner == pp - 1 ? embedding : 0.0);
  };
  options.sp_exchange_seconds = [&part, &p, &stage_comm, &owner_weights, in_one_node, layers, sp, n, h,
                                 kv_per_token](int j, int owner, int first, int k) {
    const auto at = static_cast<std::size_t>(j);
    const double link = in_one_node(first, k) ? p.intra_node_bytes_per_second : p.inter_node_bytes_per_second;
    const double rows = static_cast<double>(part.tokens(at)) / sp;
    const double across = layers * 4 * rows * h * bytes_per_element / link;
    const double handover = split_piece_handover_bytes(
        {.subsequence = j, .owner = owner, .first = first, .stages = k, .subsequences = n,
         .tokens_before = static_cast<double>(part.begin(at)), .tokens = static_cast<double>(part.tokens(at)),
         .kv_bytes = layers * kv_per_token, .weight_bytes = owner_weights(owner) * bytes_per_element / sp});
    return (k - 1.0) / k * (stage_comm[at] + across) + handover / link;
  };

  // Memory of one GPU of the fullest stage.
  auto& d = r.device;
  d.params = 2 * stage_parameters / sp;
  d.grads = 4 * stage_parameters / sp;
  d.optimizer = 12 * stage_parameters / (static_cast<double>(sp) * replicas);  // sharded over the replicas
  d.framework = framework_bytes;
  d.planned = offload;
  const transformer_layer per_token = m.layer(sp, sp, 1);  // sp tokens: bytes one GPU keeps per token x sp
  const double skeletal_per_token = std::ceil(static_cast<double>(per_token.skeletal_bytes()) / sp);
  const double mlp_width = m.gated_mlp ? 2 * m.ffn_width() : m.ffn_width();
  const double working = widest * (2 * h / sp + 4 * mlp_width / sp + (sp > 1 ? 2 * h : 0.0) + 2 * h);
  const double loss = widest * (loss_bytes_per_logit * m.vocab / sp + (sp > 1 ? 2 * h : 0.0) + 2 * h);
  d.transient = std::max(working, loss);
  // A GPU of another stage than the last: no loss; of a middle stage: no
  // embedding or classifier either (its parameters, gradients, states).
  auto own_memory = [&d, &owner_weights, stage_parameters, working, loss, sp, pp, replicas](int stage) {
    memory_breakdown own = d;
    if (stage != pp - 1) own.transient -= std::max(working, loss) - working;
    const double missing = stage_parameters - owner_weights(stage);
    own.params -= 2 * missing / sp;
    own.grads -= 4 * missing / sp;
    own.optimizer -= 12 * missing / (static_cast<double>(sp) * replicas);
    return own;
  };
  // The offload plan is closed form per subsequence, so it is made on the
  // hopeless path too (on its equal-length partition): the host memory the
  // setting would fill is reported whether or not the device holds it.
  if (offload) {
    sppo_offload_problem problem;
    for (std::size_t j = 0; j < part.count(); ++j) problem.tokens.push_back(part.tokens(j));
    problem.kv_bytes_per_token = static_cast<std::uint64_t>(kv_per_token);
    problem.other_bytes_per_token = static_cast<std::uint64_t>(skeletal_per_token - kv_per_token);
    problem.layers = static_cast<int>(layers);
    double forward_compute = 0;
    for (std::size_t j = 0; j < part.count(); ++j) forward_compute += options.forward_seconds[j];
    problem.compute_seconds = forward_compute / (n * layers);
    problem.bandwidth_bytes_per_second = p.host_link_bytes_per_second;
    problem.host_budget_bytes = static_cast<std::uint64_t>(p.host_memory_bytes / busy_in_a_node);
    const sppo_offload_plan plan = plan_sppo_offload(problem);
    r.chosen.alpha_i = plan.alpha;
    double largest_offload = 0;
    for (double bytes : plan.offloaded_bytes) largest_offload = std::max(largest_offload, bytes);
    r.host_per_node = plan.host_bytes * busy_in_a_node;
    r.link_needed_bytes_per_second = largest_offload / problem.compute_seconds;
    if (!hopeless) {
      d.skeletal = plan.peak_device_bytes + kv_all;
      d.transient += 2 * largest_offload;
    }
  }
  if (hopeless) {
    d.skeletal = 2 * kv_all;
  } else if (!offload) {
    d.skeletal = 2 * kv_all + layers * s * h * bytes_per_element / sp + widest * skeletal_per_token;
  }

  // The step.
  sppo_pipeline_figures figures;
  for (std::size_t j = 0; j < part.count(); ++j) {
    figures.work_seconds += options.forward_seconds[j] + options.backward_seconds[j];
  }
  // Only a setting that fits and may be the fastest is simulated: the
  // memory above is the plain pipeline's (the multiplexed one adds what its
  // helpers hold, below), and the closed form times the others (what
  // `project` ranks them by is how close they come to fitting, not their
  // time).
  bool fits = !memory_limit(d, r.host_per_node, c);
  // A multiplexed pipeline's GPUs also hold what they compute for other
  // stages (split_helper_bytes_by_stage): each stage's own memory plus
  // that, at the stage where the sum is the most. SPPO 6.2 says
  // multiplexing adds no memory; it does not say where the pieces'
  // weights, activations and K/V live.
  memory_breakdown helped = d;
  if (options.multiplexed) {
    const std::vector<split_helper_memory> helpers =
        split_helper_bytes_by_stage(part, pp, sp, layers * skeletal_per_token, layers * kv_per_token, owner_weights);
    for (int stage = 0; stage < pp; ++stage) {
      const split_helper_memory& helper = helpers[static_cast<std::size_t>(stage)];
      memory_breakdown both = own_memory(stage);
      both.params += helper.params;
      both.grads += helper.grads;
      both.skeletal += helper.activations;
      if (stage == 0 || arranged(both).total() > arranged(helped).total()) helped = both;
    }
  }
  const bool fits_multiplexed = options.multiplexed && !memory_limit(helped, r.host_per_node, c);
  if (pipeline == sppo_pipeline::multiplexed && options.multiplexed) d = helped, fits = fits_multiplexed;
  // SPPO multiplexes only when the pipeline "still exhibits excessive
  // bubble ratios" (section 4's workflow, step 3): both schedules are
  // simulated and the shorter kept. Splitting a subsequence over up to PP
  // stages pays each piece an exchange between the stages (across nodes
  // unless they share one), so with many stages the plain pipeline can be
  // the shorter.
  sppo_schedule_options plain = options;
  plain.multiplexed = false;
  if (hopeless || !fits || figures.work_seconds > prune_above) {
    figures.step_seconds = sppo_closed_form_step_seconds(pp, n, figures.work_seconds);
  } else if (pipeline == sppo_pipeline::multiplexed && options.multiplexed) {
    expects(sppo_schedule_ops(options) <= sppo_max_simulated_ops, [&] {
      return "sppo: the multiplexed schedule of PP " + std::to_string(pp) + " N " + std::to_string(n) + " has " +
             std::to_string(sppo_schedule_ops(options)) + " operations, more than the " +
             std::to_string(sppo_max_simulated_ops) + " the simulator is given";
    });
    figures = simulate_sppo(options, p.device());
    r.chosen.multiplexed = true;
  } else if (sppo_schedule_ops(plain) > sppo_max_simulated_ops) {
    // Too large to simulate, yet a candidate: the plain pipeline, with the
    // first forward's and the last backward's hand-offs through the stages
    // (on its critical path, as the simulator has them).
    figures.step_seconds = sppo_closed_form_step_seconds(pp, n, figures.work_seconds) +
                           2.0 * (pp - 1) * options.p2p_seconds;
  } else {
    figures = simulate_sppo(plain, p.device());
    if (fits_multiplexed && sppo_schedule_ops(options) <= sppo_max_simulated_ops) {
      const sppo_pipeline_figures multiplexed = simulate_sppo(options, p.device());
      if (multiplexed.step_seconds < figures.step_seconds) {
        figures = multiplexed, r.chosen.multiplexed = true;
        d = helped;
      }
    }
  }
  // The step, part by part: a stage's own work, the exchanges of the split
  // pieces of the stage that takes part in the most (no more than the step
  // leaves beside the work), and the rest idle.
  const double own = compute + communication + recompute;
  const double exchange =
      r.chosen.multiplexed ? std::min(sppo_most_exchange_seconds(options), std::max(0.0, figures.step_seconds - own))
                           : 0.0;
  const double classifier = gemm_seconds(p, 3 * m.classifier_flops(s) / sp);
  r.time.compute = compute + classifier;
  r.time.communication = communication + exchange;
  r.time.recompute = recompute;
  r.time.bubble = std::max(0.0, figures.step_seconds - (own + exchange));
  finish(r, m, c, m.model_flops(s) + (offload ? 0.0 : L * (m.layer_gemm_flops(s) + m.layer_attention_flops(s))));
  return r;
}

/// The numbers of subsequences tried for SP x PP: s/16K, then 2 and 4
/// times as many, within s/N in [2K, 16K] and N >= PP.
inline std::vector<int> sppo_subsequence_counts(double s, int pp) {
  const double low = std::max<double>(pp, std::ceil(s / sppo_max_subsequence));
  const double high = std::floor(s / sppo_min_subsequence);
  std::vector<int> out;
  for (double k = 1; k <= 4 && low * k <= high && low * k <= sppo_max_subsequences; k *= 2) {
    out.push_back(static_cast<int>(low * k));
  }
  return out;
}

/// Every (SP, PP, N) section 6.1 allows (see the header comment): one
/// pipeline over every GPU. Where no SP x PP can use every GPU at any
/// length (PP would not divide the layers, SP the heads, or the GPUs are
/// not whole nodes), copies of smaller pipelines run data-parallel (DP):
/// each copy inside a node (any SP x PP up to the node) or on whole nodes
/// (SP dividing a node), the counts of sppo_copy_counts (a pinned DP: any
/// the GPUs hold), the remaining GPUs idle; so more GPUs of a node do not
/// fit a shorter sequence (one pipeline over every GPU: the node's host
/// memory is shared by more GPUs, which can). With `simulate` false, only
/// the N needing the least memory, timed by the closed form (whether some
/// setting fits is the same either way). Only the SP and PP of `pin` are
/// tried when it has them (so the fastest setting that prunes the
/// simulation of slower ones is one of them); its N is the only one tried,
/// outside the 2K-16K tokens per subsequence (still N >= PP, N x SP at
/// most the tokens, and N at most `sppo_max_pinned_subsequences`). When
/// none is allowed and `why` is given, it is set to the reasons, each with
/// the first (SP, PP) it rejected.
inline std::vector<projection> sppo_settings(strategy kind, const model_shape& m, const cluster& c, double s,
                                             bool simulate = true, std::string* why = nullptr,
                                             const settings_pin& pin = {}) {
  const std::optional<int> subsequences = pin.subsequences;
  std::vector<projection> out;
  std::vector<std::pair<std::string, std::string>> rejected;  // reason, first example
  auto reject = [&](int sp, int pp, std::string reason) {
    for (const auto& r : rejected) {
      if (r.first == reason) return;
    }
    rejected.emplace_back(std::move(reason), "SP " + std::to_string(sp) + " PP " + std::to_string(pp));
  };
  const int per_node = std::min(c.gpus_per_node, c.gpus);
  double fastest = std::numeric_limits<double>::infinity();  // seconds per sequence of the settings that fit
  // The settings of `replicas` pipelines of SP x PP GPUs each.
  auto add_pipelines = [&](int sp, int pp, int replicas) {
    if ((pin.sp && *pin.sp != sp) || (pin.pp && *pin.pp != pp) || (pin.dp && *pin.dp != replicas)) return;
    if (!m.splits_over(sp)) {
      char ffn[32];
      std::snprintf(ffn, sizeof ffn, "%.0f", m.ffn_width());
      reject(sp, pp, "SP must divide the heads (" + std::to_string(m.heads) + "), key/value heads (" +
                         std::to_string(m.kv_head_count()) + ") and FFN width (" + ffn + ")");
      return;
    }
    // Before the length's rules: no length makes this PP divide the layers.
    if (m.layers % pp != 0) {
      reject(sp, pp, "PP must divide the layers (" + std::to_string(m.layers) + ")");
      return;
    }
    // Section 6.1's rules, for one pipeline: its SP x PP GPUs are all it has.
    const int gpus = sp * pp;
    sppo_solver_input rules;
    rules.sequence_length = static_cast<std::uint64_t>(s);
    rules.hidden = static_cast<std::uint64_t>(m.hidden);
    rules.layers = m.layers;
    rules.profile = c.profile.device();
    rules.profile.gpus_per_node = std::min(per_node, gpus);
    rules.nodes = gpus / rules.profile.gpus_per_node;
    rules.profile.device_memory_bytes = ~std::uint64_t{0} / 4;  // memory is judged by this model
    rules.min_tokens = 1;
    rules.max_tokens = rules.sequence_length;
    std::vector<int> counts = sppo_subsequence_counts(s, pp);
    if (subsequences) {
      counts.clear();
      if (*subsequences > sppo_max_pinned_subsequences) {
        reject(sp, pp, "a fixed N must be at most " + std::to_string(sppo_max_pinned_subsequences) +
                           " (the longest pipeline the simulator is given), got " + std::to_string(*subsequences));
      } else if (static_cast<double>(*subsequences) * sp > s) {
        char text[160];
        std::snprintf(text, sizeof text, "N x SP must not exceed the %.0f tokens (at least one per GPU), got %d x %d",
                      s, *subsequences, sp);
        reject(sp, pp, text);
      } else {
        counts.push_back(*subsequences);
      }
    } else if (counts.empty()) {
      char text[160];
      std::snprintf(text, sizeof text,
                    "no subsequence count N with %.0f to %.0f tokens each, N >= PP and N <= %.0f",
                    sppo_min_subsequence, sppo_max_subsequence, sppo_max_subsequences);
      reject(sp, pp, text);
    }
    // Without simulation only whether it fits matters: the most subsequences
    // need the least memory (shorter subsequences, the same offloaded share),
    // so that count alone answers it.
    if (!simulate && !counts.empty()) counts.erase(counts.begin(), counts.end() - 1);
    for (const int n : counts) {
      std::string reason;
      if (!sppo_candidate_allowed(rules, sp, pp, n, &reason)) {
        reject(sp, pp, reason);
        continue;
      }
      add_setting(out, kind, s, {.sp = sp, .pp = pp, .dp = replicas, .subsequences = n}, [&] {
        return sppo(kind, m, c, s, sp, pp, n, simulate ? fastest * replicas : 0.0, sppo_pipeline::shorter, replicas);
      });
      if (out.back().fits()) fastest = std::min(fastest, out.back().step_seconds / replicas);
    }
  };
  // Section 6.1: one pipeline over every GPU, on whole nodes, when the
  // cluster has such a shape (whatever the length: a length too short for
  // it has no setting, so that fitting stays monotone in the length).
  const bool whole_nodes = c.gpus % per_node == 0;
  bool one_pipeline = false;
  for (int sp = per_node; sp >= 1 && whole_nodes; --sp) {
    one_pipeline = one_pipeline || (per_node % sp == 0 && c.gpus % sp == 0 && m.splits_over(sp) &&
                                    m.layers % (c.gpus / sp) == 0);
  }
  if (whole_nodes) {
    for (int sp = per_node; sp >= 1; --sp) {
      if (c.gpus % sp == 0) add_pipelines(sp, c.gpus / sp, 1);
    }
  }
  // Otherwise copies of smaller pipelines: up to a node's GPUs (as many
  // copies to a node as it holds whole, a partial node what it can; SP
  // then need not divide the node) or a whole number of nodes (each stage
  // inside one: SP divides the node), as many as sppo_copy_counts tries:
  // the copies of a node share its host memory, so fewer to a node may
  // reach further than all of them.
  if (!one_pipeline) {
    const int node = c.gpus_per_node;
    bool refused = false;  // an SP the model does not split over was tried (its reason is kept once)
    for (int sp = std::min(node, c.gpus); sp >= 1; --sp) {
      // Refused for every PP alike: only the first such SP is tried, for
      // its reason (a node of 2^20 GPUs would otherwise try each).
      if (!m.splits_over(sp) && std::exchange(refused, true)) continue;
      for (int pp = 1; static_cast<std::int64_t>(sp) * pp < c.gpus; ++pp) {
        const int gpus = sp * pp;
        if (m.layers % pp != 0 || (gpus > node && (gpus % node != 0 || node % sp != 0))) continue;
        for (const int replicas : sppo_copy_counts(c, gpus, pin.dp)) add_pipelines(sp, pp, replicas);
        if (!m.splits_over(sp)) break;
      }
    }
  }
  if (!out.empty()) return out;
  if (why) {
    char length[32];
    std::snprintf(length, sizeof length, "%.0f", s);
    std::string text = "no SP x PP x N of section 6.1 on " + std::to_string(c.gpus) + " GPUs (" +
                       std::to_string(per_node) + " per node) at " + length + " tokens" +
                       (one_pipeline ? ": " : ", nor copies of a smaller pipeline: ");
    // Nothing was rejected by a rule: the pin left no shape to try.
    if (rejected.empty()) {
      settings_pin shape;
      shape.sp = pin.sp;
      shape.pp = pin.pp;
      shape.dp = pin.dp;
      rejected.emplace_back(
          one_pipeline ? "SP must divide the GPUs of a node (" + std::to_string(per_node) +
                             ") and SP x PP use every GPU (copies run only where no one pipeline can)"
                       : "copies need SP x PP up to a node (" + std::to_string(c.gpus_per_node) +
                             " GPUs) or whole nodes with SP dividing a node, and DP at most as many as the "
                             "GPUs hold",
          shape.empty() ? std::string("every SP") : shape.text());
    }
    if (!whole_nodes) {
      rejected.insert(rejected.begin(), {"one pipeline over every GPU needs whole nodes (" + std::to_string(c.gpus) +
                                             " GPUs are not a multiple of " + std::to_string(per_node) + ")",
                                         "every SP"});
    }
    for (std::size_t k = 0; k < rejected.size(); ++k) {
      text += (k ? "; " : "") + rejected[k].first + " (" + rejected[k].second + ")";
    }
    *why = std::move(text);
  }
  return out;
}

}  // namespace detail

}  // namespace memo::project
