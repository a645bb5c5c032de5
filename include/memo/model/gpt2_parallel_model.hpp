// memo/model/gpt2_parallel_model.hpp
//
// The reference GPT-2 (gpt2_model.hpp's model, the same layer code) trained
// on P = S x Q ranks: FPDT sequence parallelism over S ranks per pipeline
// stage (sections 4.1-4.2, 5.4), SPPO subsequence pipelining over Q stages
// (sections 4-5), or both. One sequence of T tokens per step, as on one
// device, with the same losses and gradients up to fp32 rounding.
//
// Ranks. World rank w is sequence-parallel rank w % S of stage w / S. The
// constructor splits the world into the S ranks of its stage (all-to-alls,
// gradient sums) and the Q ranks of its sequence-parallel rank (the
// pipeline: activations forward, gradients backward). Stage q holds layers
// [q L/Q, (q+1) L/Q) and only the parameters it uses
// (gpt2_stage_parameter_layout): stage 0 the embeddings, the last stage the
// final layernorm and the head; the token embedding is tied, so the first
// and the last stage both hold wte and sum its gradient.
//
// Tokens. The sequence is cut into N subsequences (SPPO; N = 1 without
// stages), each a whole number of FPDT chunk groups of S c tokens,
// FLOPs-balanced by default (later ones shorter under causal attention).
// Every rank holds its tokens in FPDT's rank-ordinal layout over the whole
// sequence (fpdt_shuffle.hpp: local chunk j of rank r is global chunk
// j S + r), so subsequence i is a contiguous run of every rank's local rows.
// Token-wise work (layernorms, projections, MLP, loss) runs on local rows;
// attention goes through `distributed_attention` over the stage's ranks,
// one run per subsequence, its K/V (and the dK/dV of earlier tokens) kept
// on the stage between runs (SPPO's two-level management keeps K/V on the
// device), or with `kv_offload` in pinned host memory (FPDT's host K/V,
// with the dK/dV carry beside it: the device then holds one
// subsequence's K/V per call, not every layer's of the sequence). Every
// layer's attention is built over one chunked_attention_scratch (one
// layer's bytes), whose shared slot events let a call's first host fetch
// run while the call before it (the layer before, or the last layer of
// the subsequence before) still computes. The
// MLP's backward runs in chunks of c / 2 rows (twice as many chunks as the
// attention's, no offload) and the loss in chunks (FPDT section 5.4).
//
// The step. Each stage executes its program read from the SPPO schedule
// (`sppo_stage_program`, pipeline/sppo_schedule.hpp) that the simulator
// times: forwards F(j) in subsequence order (receive the activations of
// subsequence j from the stage before, or embed them; run the stage's
// layers on its rows; send them on), then backwards B(j) in reverse order
// (the last stage runs the head and the loss of subsequence j first;
// receive, run the layers' backwards, send the gradients back, or add them
// into the position embedding). Reverse order is what makes a subsequence's
// dK/dV complete when its own backward runs: every later subsequence has
// added its share. The stage's parameter gradients are summed over its S
// ranks, wte's over the stages, and AdamW runs on every rank alike.
//
// Gradient reduction (`overlap_gradient_reduction`, on by default). A
// layer's gradient is final after its backward in the stage's last
// backward op; from there its buckets (gpt2_gradient_buckets.hpp: one to
// five collectives a layer, small tensors packed) are summed on the model's
// reduction stream, which waits for that point of the compute stream
// (an event), while the compute stream goes on with the backward of the
// layers below; the embeddings and the final layernorm (and wte over the
// stages) last. The compute stream then waits for the reduction stream's
// last event before the losses are gathered, so the optimizer, a gradient
// read and the next step's zeroing come after every sum. The sums go
// through groups of their own (split from the stage's group and from the
// pipeline's), never used by another stream, so the attention's
// all-to-alls and the hand-offs may run at the same time. Off, the whole
// gradient is summed with one all_reduce on the compute stream after the
// backward, as before. On the thread communicator both give the same bits
// (it sums each element in rank order whatever the message); on MPI and
// NCCL, whose algorithms depend on the message size, they agree to fp32
// rounding. Communication time (`step_communication`) is the time of every
// collective and hand-off, hidden or not; `step_gradient_reduction` adds the
// sums' own time and the part of it the compute stream waited for (from the
// end of its backward until every sum is done: with overlap the tail, off
// the whole), measured with the backend's events. With one
// sequence-parallel rank per stage there is nothing to sum over a stage's
// ranks: only the end stages sum their wte copies, and a middle stage has
// no reduction stream.
//
// Memory (MEMO section 4.2, as in gpt2_model): a step's device memory is
// the parameter state of the stage plus one planned arena, laid out by the
// bi-level plan of the step's trace (every buffer outside the blocks, the
// skeletal tensors of the stage's layers, the attention's workspace and
// state, and one recorded block backward per subsequence and layer), and
// replayed every step: a step allocates nothing. With `kv_offload` the
// block's qkv is not a skeletal tensor (the attention's backward reads Q, K
// and V from its host store): every block writes its QKV output into one
// [T / S, 3C] buffer that its attention's forward reads. Without
// `subsequence_offload` every skeletal tensor of every local row stays in
// place on the device for the whole step. With it (SPPO sections 5.1-5.2,
// swap/subsequence_swapper.hpp) a layer of subsequence j computes into one
// of two slots of the longest subsequence's rows; after its forward a copy
// stream sends round(alpha_j n_j) of its rows to pinned host memory and
// keeps the rest in a device store, while the next layer computes; before
// its backward the slot is refilled (the next layer's refill runs behind
// this layer's backward). The stage's last two layer-subsequence units
// stay in their slots: their backwards come next. K/V stay on the device in
// the attention's state (the first level), or with kv_offload in its host
// store. The slots and the kept rows are outside buffers of the plan, so
// the device holds 2 n_max + layers x sum_j (n_j - o_j) skeletal rows (less
// the two resident units') instead of layers x sum_j n_j; losses and
// gradients are the same bits.
//
// Errors. Ranks given different configs or options fail on every rank at
// the constructor's first collectives, which gather them
// (gpt2_parallel_agreement), naming each difference; ranks given different
// token windows, or a token outside the vocabulary on some rank, fail on
// every rank once the step is done (each step gathers the digests of
// every rank's inputs and targets; a rank with such a token steps on
// token 0, so the step itself reads no memory it should not). Every shape that does
// not split (ranks, heads, layers, context, chunks, subsequences) and every
// offload ratio outside [0, 1] (or a count other than one per subsequence)
// is a memo::error raised on every rank before any other collective,
// naming the numbers. A rank that fails or leaves mid-step
// fails its peers' collectives (what the communicator guarantees: the
// thread communicator within its timeout, MPI by terminating the job); a
// step that threw is abandoned so the next one starts clean: every stream
// is drained first (the swapper's copies, then the reduction stream, then
// the compute, exchange and copy streams), so no sum still runs against
// the gradients or the staging buffer when the next step (or the
// destructor) reaches them, and no failure is inherited.
//
// Collective calls (constructor, initialize, set/get, forward_backward,
// update) must be made by every rank in the same order, with the same
// options. Lifetime: the backend and the world communicator must outlive
// the model; the groups it splits and its two streams are its own. Not
// copyable or movable.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "memo/backend/buffer.hpp"
#include "memo/backend/communicator.hpp"
#include "memo/backend/concepts.hpp"
#include "memo/backend/timed_communicator.hpp"
#include "memo/core/digest.hpp"
#include "memo/model/gpt2_config.hpp"
#include "memo/model/gpt2_gradient_buckets.hpp"
#include "memo/model/gpt2_head.hpp"
#include "memo/model/gpt2_layer.hpp"
#include "memo/model/gpt2_memory.hpp"
#include "memo/model/gpt2_model.hpp"
#include "memo/model/gpt2_parameter_state.hpp"
#include "memo/model/gpt2_step_memory.hpp"
#include "memo/model/ops/adamw.hpp"
#include "memo/model/ops/encoder.hpp"
#include "memo/pipeline/distributed_attention.hpp"
#include "memo/pipeline/fpdt_shuffle.hpp"
#include "memo/pipeline/sppo_partition.hpp"
#include "memo/pipeline/sppo_schedule.hpp"
#include "memo/plan/bilevel_planner.hpp"
#include "memo/plan/planned_arena.hpp"
#include "memo/plan/planned_replay.hpp"
#include "memo/swap/subsequence_swapper.hpp"

namespace memo {

/// How a gpt2_parallel_model spreads one sequence over its ranks.
struct gpt2_parallel_options {
  std::int64_t context = 0;         ///< T: tokens per step, the whole sequence
  int sequence_parallel = 1;        ///< S: ranks per stage (FPDT / Ulysses)
  int pipeline_stages = 1;          ///< Q: stages, L / Q layers each (SPPO)
  int subsequences = 0;             ///< N: 0 = 1 without stages, 2 Q with
  bool balanced_subsequences = true;  ///< FLOPs-balanced (SPPO) or equal lengths
  std::int64_t layout_chunk = 0;    ///< c: FPDT chunk of a rank; 0 = the largest of 64, 32, ... that fits
  std::int64_t attention_chunk = 0;  ///< 0 = S c (one chunk group); must divide S c with N > 1
  std::int64_t mlp_chunk = 0;       ///< rows of an MLP backward chunk; 0 = c / 2
  std::int64_t loss_chunk = 0;      ///< rows of the logits buffer; 0 = min(T / S, 64)
  bool kv_offload = false;          ///< FPDT's host-resident K/V (and dK/dV carry between subsequences)
  /// With kv_offload: the layers' attentions share one scratch with its
  /// copy stream and slot events (chunked_attention_scratch), so an
  /// attention call's first host fetch runs during the call before it.
  /// false: each call's copies start after everything enqueued before it
  /// (the same values; a reference for measuring the prefetch).
  bool kv_prefetch_across_layers = true;
  bool overlap_exchanges = true;    ///< all-to-alls behind the attention (distributed_attention_shape::overlap)
  /// Gradients summed layer by layer behind the backward on a stream of
  /// their own (gpt2_gradient_buckets.hpp); off: one all_reduce of the
  /// whole gradient after the backward, on the compute stream.
  bool overlap_gradient_reduction = true;
  /// SPPO's per-subsequence offload ratios alpha_j (section 5.2), one per
  /// subsequence, each in [0, 1]: round(alpha_j n_j) of subsequence j's n_j
  /// rows of every skeletal tensor go to pinned host memory between its
  /// forward and its backward, the rest to a device store
  /// (swap/subsequence_swapper.hpp). Unset: every skeletal tensor stays in
  /// place on the device.
  std::optional<std::vector<double>> subsequence_offload{};
  double plan_time_limit_seconds = 0.1;

  /// A finite number of seconds, 0 or more.
  [[nodiscard]] bool plan_time_limit_valid() const noexcept {
    return std::isfinite(plan_time_limit_seconds) && plan_time_limit_seconds >= 0;
  }
};

/// The gradient sums of one step (gpt2_parallel_model::step_gradient_reduction).
struct gpt2_gradient_reduction_totals {
  /// The sums' calls, payload bytes and seconds (host backend: each
  /// collective's whole duration, its wait for peers included).
  communication_totals collectives{};
  /// Seconds the compute stream waited for the sums after its backward.
  double exposed_seconds = 0.0;
};

/// The distributed attention of one block, as the block calls it
/// (gpt2_block_attention in gpt2_layer.hpp): the block's q, k, v and
/// output rows of a run go through the all-to-all of the stage's ranks.
/// `first_row` is the local row of the activations' row 0: 0 when they
/// hold every local row (and the log-sum-exp of the whole sequence), the
/// subsequence's first row when they hold one subsequence (and the
/// log-sum-exp of its tokens).
template <class Comm, Backend B>
struct gpt2_distributed_block_attention {
  distributed_attention<Comm, B>* attention = nullptr;
  std::int64_t heads = 0;
  std::int64_t first_row = 0;

  void forward(typename B::stream& on, gpt2_matrix qkv, gpt2_matrix atty, gpt2_matrix lse, std::int64_t r0,
               std::int64_t n) const {
    const std::int64_t C = atty.extent(1);
    const gpt2_matrix x = qkv.slice(r0, n), o = atty.slice(r0, n);
    using detail::split_heads;
    attention->forward_queries(on, {first_row + r0, first_row + r0 + n}, split_heads(x, 0, C, heads),
                               split_heads(x, C, C, heads), split_heads(x, 2 * C, C, heads),
                               split_heads(o, 0, C, heads), lse);
  }
  void backward(typename B::stream& on, gpt2_matrix qkv, gpt2_matrix atty, gpt2_matrix datty, gpt2_matrix lse,
                gpt2_matrix dqkv, std::int64_t r0, std::int64_t n) const {
    const std::int64_t C = atty.extent(1);
    const gpt2_matrix x = qkv.slice(r0, n), o = atty.slice(r0, n);
    using detail::split_heads;
    attention->backward_queries(on, {first_row + r0, first_row + r0 + n}, split_heads(x, 0, C, heads),
                                split_heads(x, C, C, heads), split_heads(x, 2 * C, C, heads),
                                split_heads(o, 0, C, heads),
                                split_heads(datty, 0, C, heads), lse, split_heads(dqkv, 0, C, heads),
                                split_heads(dqkv, C, C, heads), split_heads(dqkv, 2 * C, C, heads));
  }
};

/// The shape of a parallel run, checked and with its defaults resolved;
/// a pure function of the options, the same on every rank.
struct gpt2_parallel_shape {
  std::int64_t tokens = 0, local_tokens = 0;
  int sp = 1, pp = 1, subsequences = 1;
  std::int64_t layout_chunk = 0, attention_chunk = 0, mlp_chunk = 0, loss_chunk = 0;
  std::int64_t stage_layers = 0;
  sequence_partition partition;  ///< global tokens of each subsequence
  /// Rows of each subsequence that leave the device (subsequence_offload).
  std::optional<subsequence_offload_plan> offload;

  /// Checks `options` against `config` for `ranks` ranks; every problem is
  /// a memo::error naming the numbers.
  static gpt2_parallel_shape resolve(const gpt2_config& config, const gpt2_parallel_options& o, int ranks) {
    config.validate("gpt2_parallel_model");
    gpt2_parallel_shape s;
    s.sp = o.sequence_parallel, s.pp = o.pipeline_stages, s.tokens = o.context;
    expects(s.sp >= 1 && s.pp >= 1 && static_cast<std::int64_t>(s.sp) * s.pp == ranks, [&] {
      return "gpt2_parallel_model: sequence parallel " + std::to_string(s.sp) + " x pipeline stages " +
             std::to_string(s.pp) + " must equal the " + std::to_string(ranks) + " ranks";
    });
    expects(s.tokens >= 1 && s.tokens <= config.max_seq_len, [&] {
      return "gpt2_parallel_model: context " + std::to_string(s.tokens) + " must lie in [1, maxT " +
             std::to_string(config.max_seq_len) + "]";
    });
    expects(config.num_heads % s.sp == 0, [&] {
      return "gpt2_parallel_model: " + std::to_string(config.num_heads) + " heads are not divisible by " +
             std::to_string(s.sp) + " sequence-parallel ranks";
    });
    expects(config.num_layers % s.pp == 0, [&] {
      return "gpt2_parallel_model: " + std::to_string(config.num_layers) + " layers are not divisible by " +
             std::to_string(s.pp) + " pipeline stages";
    });
    for (const auto& [name, value] : {std::pair{"subsequences", static_cast<std::int64_t>(o.subsequences)},
                                      std::pair{"layout_chunk", o.layout_chunk},
                                      std::pair{"attention_chunk", o.attention_chunk},
                                      std::pair{"mlp_chunk", o.mlp_chunk}, std::pair{"loss_chunk", o.loss_chunk}}) {
      expects(value >= 0, [&] {
        return std::string("gpt2_parallel_model: ") + name + " " + std::to_string(value) +
               " is negative (0 chooses the default)";
      });
    }
    expects(o.plan_time_limit_valid(), [&] {
      return "gpt2_parallel_model: plan_time_limit_seconds " + std::to_string(o.plan_time_limit_seconds) +
             " must be a finite number of seconds, 0 or more";
    });
    s.stage_layers = config.num_layers / s.pp;
    s.subsequences = o.subsequences > 0 ? o.subsequences : (s.pp == 1 ? 1 : 2 * s.pp);
    expects(s.subsequences >= s.pp, [&] {
      return "gpt2_parallel_model: " + std::to_string(s.subsequences) + " subsequences for " +
             std::to_string(s.pp) + " pipeline stages: the pipeline needs at least one per stage";
    });
    expects(s.tokens / s.sp >= s.subsequences, [&] {
      return "gpt2_parallel_model: " + std::to_string(s.subsequences) + " subsequences need at least as many of a " +
             "rank's tokens, and context " + std::to_string(s.tokens) + " over " + std::to_string(s.sp) +
             " sequence-parallel ranks gives " + std::to_string(s.tokens / s.sp);
    });
    s.layout_chunk = o.layout_chunk;
    if (s.layout_chunk == 0) {
      for (std::int64_t c = 64; c >= 1 && s.layout_chunk == 0; c /= 2) {
        if (s.tokens % (s.sp * c) == 0 && s.tokens / (s.sp * c) >= s.subsequences) s.layout_chunk = c;
      }
    }
    expects(s.layout_chunk <= s.tokens / s.sp, [&] {
      return "gpt2_parallel_model: layout chunk " + std::to_string(s.layout_chunk) + " is longer than a rank's " +
             std::to_string(s.tokens / s.sp) + " tokens (context " + std::to_string(s.tokens) + " over " +
             std::to_string(s.sp) + " sequence-parallel ranks)";
    });
    expects(s.layout_chunk >= 1, [&] {
      return "gpt2_parallel_model: no layout chunk of 64, 32, ..., 1 tokens fits: context " +
             std::to_string(s.tokens) + " must be a multiple of " + std::to_string(s.sp) +
             " ranks x the chunk and hold at least as many chunk groups as subsequences (" +
             std::to_string(s.subsequences) + ")";
    });
    const std::int64_t group = s.sp * s.layout_chunk;  // <= tokens: no overflow
    expects(s.tokens % group == 0, [&] {
      return "gpt2_parallel_model: context " + std::to_string(s.tokens) + " is not a multiple of " +
             std::to_string(s.sp) + " ranks x chunk " + std::to_string(s.layout_chunk);
    });
    expects(s.tokens / group >= s.subsequences, [&] {
      return "gpt2_parallel_model: context " + std::to_string(s.tokens) + " has " + std::to_string(s.tokens / group) +
             " chunk groups of " + std::to_string(group) + " tokens, fewer than the " +
             std::to_string(s.subsequences) + " subsequences";
    });
    s.local_tokens = s.tokens / s.sp;
    s.attention_chunk = o.attention_chunk > 0 ? o.attention_chunk : group;
    expects(s.attention_chunk <= s.tokens && (s.subsequences == 1 || group % s.attention_chunk == 0), [&] {
      return "gpt2_parallel_model: attention chunk " + std::to_string(s.attention_chunk) +
             (s.attention_chunk > s.tokens ? " is longer than the context " + std::to_string(s.tokens)
                                           : " does not divide a chunk group of " + std::to_string(group) +
                                                 " tokens, where subsequences start");
    });
    s.mlp_chunk = o.mlp_chunk > 0 ? o.mlp_chunk : std::max<std::int64_t>(1, s.layout_chunk / 2);
    s.loss_chunk = o.loss_chunk > 0 ? o.loss_chunk : std::min<std::int64_t>(s.local_tokens, 64);
    expects(s.loss_chunk <= s.local_tokens, [&] {
      return "gpt2_parallel_model: loss chunk " + std::to_string(s.loss_chunk) + " is longer than a rank's " +
             std::to_string(s.local_tokens) + " tokens";
    });
    const auto T = static_cast<std::uint64_t>(s.tokens), N = static_cast<std::size_t>(s.subsequences);
    s.partition = o.balanced_subsequences
                      ? flops_balanced_partition(T, N, causal_cost_weights::for_hidden(
                                                           static_cast<std::uint64_t>(config.channels)),
                                                 0, static_cast<std::uint64_t>(group))
                      : flops_balanced_partition(T, N, causal_cost_weights{1, 0}, 0, static_cast<std::uint64_t>(group));
    if (o.subsequence_offload) {
      std::vector<std::int64_t> rows;
      for (int j = 0; j < s.subsequences; ++j) rows.push_back(s.rows(j).second - s.rows(j).first);
      s.offload = subsequence_offload_plan::from_alpha(std::move(rows), *o.subsequence_offload,
                                                       "gpt2_parallel_model: subsequence_offload");
    }
    return s;
  }

  /// Local rows [begin, end) of subsequence j on every rank.
  [[nodiscard]] std::pair<std::int64_t, std::int64_t> rows(int j) const {
    const auto k = static_cast<std::size_t>(j);
    return {static_cast<std::int64_t>(partition.begin(k)) / sp, static_cast<std::int64_t>(partition.end(k)) / sp};
  }
};

/// What every rank must agree on: the model's shape and every option but
/// the planner's time limit (each rank plans its own memory; only whether
/// it is valid must agree, so that a bad one fails every rank), in a fixed
/// number of values. The offload ratios count as their number and a digest
/// of their bits.
inline std::vector<agreed_value> gpt2_parallel_agreement(const gpt2_config& c, const gpt2_parallel_options& o) {
  auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
  constexpr auto boolean = agreed_value::kind::boolean;
  static const std::vector<double> none;
  const std::vector<double>& ratios = o.subsequence_offload ? *o.subsequence_offload : none;
  return {{"config.max_seq_len", u(c.max_seq_len)},
          {"config.vocab_size", u(c.vocab_size)},
          {"config.padded_vocab_size", u(c.padded_vocab_size)},
          {"config.num_layers", u(c.num_layers)},
          {"config.num_heads", u(c.num_heads)},
          {"config.channels", u(c.channels)},
          {"context", u(o.context)},
          {"sequence_parallel", u(o.sequence_parallel)},
          {"pipeline_stages", u(o.pipeline_stages)},
          {"subsequences", u(o.subsequences)},
          {"balanced_subsequences", o.balanced_subsequences, boolean},
          {"layout_chunk", u(o.layout_chunk)},
          {"attention_chunk", u(o.attention_chunk)},
          {"mlp_chunk", u(o.mlp_chunk)},
          {"loss_chunk", u(o.loss_chunk)},
          {"kv_offload", o.kv_offload, boolean},
          {"kv_prefetch_across_layers", o.kv_prefetch_across_layers, boolean},
          {"overlap_exchanges", o.overlap_exchanges, boolean},
          {"overlap_gradient_reduction", o.overlap_gradient_reduction, boolean},
          {"subsequence_offload given", o.subsequence_offload.has_value(), boolean},
          {"subsequence_offload ratios", ratios.size()},
          agreed_value::of_reals("subsequence_offload values", ratios),
          // Each rank's own, but a bad one must fail every rank (resolve checks it).
          {"plan_time_limit_seconds is finite and 0 or more",
           o.plan_time_limit_valid(), boolean}};
}

template <class Comm, Backend B>
  requires CommunicatorOf<Comm, B>
class gpt2_parallel_model {
  using device_resource = std::remove_reference_t<decltype(std::declval<B&>().device_memory())>;
  using pinned_resource = std::remove_reference_t<decltype(std::declval<B&>().pinned_memory())>;

 public:
  using comm_type = timed_communicator<Comm>;

  /// Collective over `world`: checks that every rank was given the same
  /// config and options (gpt2_parallel_agreement) and the shape (the same
  /// error on every rank), splits the groups, plans and builds the step.
  gpt2_parallel_model(B& backend, Comm& world, const gpt2_config& config, const gpt2_parallel_options& options)
      : backend_(&backend), config_(config), options_(agreed(backend, world, config, options)),
        shape_(gpt2_parallel_shape::resolve(config_, options_, world.size())),
        stage_(world.rank() / shape_.sp), sp_rank_(world.rank() % shape_.sp),
        world_(std::in_place, world.split(0, world.rank())) {
    // Groups: the ranks of this stage, and this sequence-parallel rank's
    // ranks across the stages (ordered by stage).
    sp_.emplace(world_->split(stage_, sp_rank_));
    pp_.emplace(world_->split(sp_rank_, stage_));
    // The gradient sums go through groups of their own: the stage's ranks,
    // and the first and last stage (which share the tied token embedding).
    // Only the stream that sums uses them, so they never meet the
    // all-to-alls or hand-offs of the other streams in one group; their
    // counters are their own, for step_gradient_reduction.
    grad_.emplace(sp_->inner().split(0, sp_rank_));
    if (shape_.pp > 1) tied_.emplace(pp_->inner().split(first_stage() || last_stage() ? 0 : 1, stage_));
    stage_config_ = config_;
    stage_config_.num_layers = static_cast<std::int32_t>(shape_.stage_layers);
    full_table_ = gpt2_parameter_layout(config_);
    stage_table_ = gpt2_stage_parameter_layout(config_, shape_.stage_layers, first_stage(), last_stage());
    // Over one rank a sum changes nothing: no buckets, no staging buffer.
    if (shape_.sp > 1) gradient_buckets_ = plan_gpt2_gradient_buckets(stage_table_, shape_.stage_layers);
    layout_.emplace(shape_.sp, shape_.tokens / (shape_.sp * shape_.layout_chunk), shape_.layout_chunk);
    // The stage's program, read from the schedule the simulator times
    // (durations: each subsequence's relative cost, for projections).
    sppo_schedule_options schedule;
    schedule.stages = shape_.pp;
    const auto weights = causal_cost_weights::for_hidden(static_cast<std::uint64_t>(config_.channels));
    for (std::size_t j = 0; j < shape_.partition.count(); ++j) {
      const double cost = static_cast<double>(causal_cost(shape_.partition.begin(j), shape_.partition.end(j), weights));
      schedule.forward_seconds.push_back(cost);
      schedule.backward_seconds.push_back(2 * cost);
    }
    schedule_ = build_sppo_schedule(schedule);
    program_ = sppo_stage_program(schedule_, stage_);

    const auto T = static_cast<std::size_t>(shape_.tokens), Tl = static_cast<std::size_t>(shape_.local_tokens);
    host_losses_ = pinned_floats(backend.pinned_memory(), T);
    host_inputs_ = pinned_ints(backend.pinned_memory(), Tl);
    host_targets_ = pinned_ints(backend.pinned_memory(), Tl);
    host_order_ = pinned_longs(backend.pinned_memory(), Tl);
    host_starts_ = pinned_longs(backend.pinned_memory(), Tl + 1);
    host_ids_ = pinned_ints(backend.pinned_memory(), Tl);
    host_digests_ = pinned_words(backend.pinned_memory(), window_digest_words());
    global_losses_.assign(T, 0.0f);
    if (backend.stream_workspace_bytes() > 0) {
      workspace_ = device_bytes(backend.device_memory(), backend.stream_workspace_bytes());
    }
    stream_.emplace(backend.make_stream("gpt2_parallel_model",
                                        memory_region{workspace_.data(), workspace_.size_bytes()}));
    if (options_.overlap_gradient_reduction && sums_gradients()) {
      reduce_stream_.emplace(backend.make_stream("gpt2_parallel_model gradient reduction"));
    }
    for (auto* e : {&gradients_ready_, &reduced_, &backward_end_, &reduced_end_}) e->emplace(backend.make_event());
    try {  // a failed allocation must not free buffers the stream is zeroing
      state_.emplace(backend, *stream_, stage_table_);
      p_ = state_->parameters();
      g_ = state_->gradients();
      plan_step();
    } catch (...) {
      drain(backend, *stream_);
      throw;
    }
    backend.synchronize(*stream_);
  }
  gpt2_parallel_model(const gpt2_parallel_model&) = delete;
  gpt2_parallel_model& operator=(const gpt2_parallel_model&) = delete;
  ~gpt2_parallel_model() {
    if (reduce_stream_) drain(*backend_, *reduce_stream_);
    if (stream_) drain(*backend_, *stream_);
  }

  [[nodiscard]] const gpt2_config& config() const noexcept { return config_; }
  [[nodiscard]] const gpt2_parallel_shape& shape() const noexcept { return shape_; }
  [[nodiscard]] std::int64_t context() const noexcept { return shape_.tokens; }
  [[nodiscard]] std::int64_t loss_chunk() const noexcept { return shape_.loss_chunk; }
  [[nodiscard]] std::int64_t attention_chunk() const noexcept { return shape_.attention_chunk; }
  /// This rank's stage and its rank in the stage's sequence-parallel group.
  [[nodiscard]] int stage() const noexcept { return stage_; }
  [[nodiscard]] int sequence_parallel_rank() const noexcept { return sp_rank_; }
  /// Parameters of the whole model (what checkpoints hold).
  [[nodiscard]] std::uint64_t parameter_count() const noexcept { return full_table_.total; }
  /// Device bytes of this rank's parameters, gradients and moments.
  [[nodiscard]] std::size_t parameter_state_bytes() const noexcept { return state_->bytes(); }
  /// Device bytes of everything else a step uses on this rank: the planned
  /// arena and the stream's BLAS workspace.
  [[nodiscard]] std::size_t activation_bytes() const noexcept { return arena_->peak_bytes() + workspace_.size_bytes(); }
  [[nodiscard]] const bilevel_result& memory_plan() const noexcept { return plan_; }
  [[nodiscard]] const memory_trace& step_trace() const noexcept { return trace_; }
  /// Pinned host bytes of the attention's host store (kv_offload: Q, K, V
  /// and the dK/dV carry) and of the offloaded
  /// skeletal rows (subsequence_offload).
  [[nodiscard]] std::uint64_t host_offload_bytes() const noexcept {
    return attention_pinned_.size_bytes() + skeletal_host_bytes();
  }
  /// The offload ratio of each subsequence (empty without subsequence_offload)
  /// and the rows of each it sends to the host (round(alpha_j n_j)).
  [[nodiscard]] std::vector<double> subsequence_offload_alpha() const {
    return shape_.offload ? shape_.offload->alpha : std::vector<double>{};
  }
  [[nodiscard]] std::vector<std::int64_t> subsequence_offloaded_rows() const {
    return shape_.offload ? shape_.offload->offloaded : std::vector<std::int64_t>{};
  }
  /// Device bytes of the skeletal tensors in the plan: every layer's of
  /// every local row, or the two slots and the kept rows.
  [[nodiscard]] std::uint64_t skeletal_device_bytes() const {
    std::uint64_t bytes = 0;
    for (const auto& b : outside_->table()) bytes += b.name == "skeletal" || b.name == "skeletal kept" ? b.bytes : 0;
    return bytes;
  }
  /// Pinned host bytes of the offloaded skeletal rows (subsequence_offload).
  [[nodiscard]] std::uint64_t skeletal_host_bytes() const noexcept {
    return swapper_ ? swapper_->host_bytes() : 0;
  }
  [[nodiscard]] bool kv_offload() const noexcept { return options_.kv_offload; }
  /// The pipeline schedule every stage's program is read from (simulate it
  /// with a device profile for a projection) and this stage's program.
  [[nodiscard]] const stream_schedule& schedule() const noexcept { return schedule_; }
  [[nodiscard]] const std::vector<sppo_stage_op>& program() const noexcept { return program_; }
  /// Time, calls and bytes of this rank's collectives and transfers in the
  /// last forward_backward + update (host backend: including waits for peers).
  [[nodiscard]] const communication_totals& step_communication() const noexcept { return step_comm_; }
  /// The gradient sums of the last forward_backward: their collectives
  /// (part of step_communication) and the seconds the compute stream
  /// waited for them after its backward (`exposed_seconds`; see the header
  /// comment).
  [[nodiscard]] const gpt2_gradient_reduction_totals& step_gradient_reduction() const noexcept {
    return step_reduction_;
  }
  /// Which pieces of this stage's gradient are summed together, in issue
  /// order (none with one sequence-parallel rank: nothing to sum).
  [[nodiscard]] const gpt2_gradient_buckets& gradient_buckets() const noexcept { return gradient_buckets_; }
  [[nodiscard]] bool overlap_gradient_reduction() const noexcept { return options_.overlap_gradient_reduction; }
  /// Whether this rank sums gradients with others at all: over its stage's
  /// ranks (sequence_parallel > 1), or the tied wte (first and last stage).
  [[nodiscard]] bool sums_gradients() const noexcept { return shape_.sp > 1 || tied_stage(); }
  [[nodiscard]] std::int64_t steps() const noexcept { return state_->steps(); }

  /// GPT-2's initialisation from `seed` (gpt2_initial_parameters, weights
  /// N(0, weight_std)): the values a single-device model gets, each stage
  /// taking its part.
  void initialize(std::uint64_t seed, double weight_std = 0.02) {
    std::vector<float> full(full_table_.total);
    gpt2_initial_parameters(config_, seed, full, weight_std);
    set_parameters(full);
  }

  /// Takes this stage's part of `parameters` (the whole model, llm.c's
  /// order); resets the AdamW moments and the step count. Every rank must
  /// pass the same values.
  void set_parameters(std::span<const float> parameters) {
    expect_full(parameters.size(), "set_parameters");
    const std::span<float> staging = state_->staging();
    for_each_stage_tensor([&](std::uint64_t stage_offset, std::uint64_t full_offset, std::uint64_t count, bool) {
      std::copy_n(parameters.data() + full_offset, count, staging.data() + stage_offset);
    });
    state_->load(*stream_, staging);
  }
  /// The whole model's parameters on every rank (collective; allocates a
  /// temporary device buffer of the whole model, outside any step).
  void get_parameters(std::span<float> out) { gather(state_->device_parameters(), out, "get_parameters"); }
  /// The gradients of the last forward_backward, summed over the ranks.
  void get_gradients(std::span<float> out) { gather(state_->device_gradients(), out, "get_gradients"); }

  /// One step's forward and backward on `inputs` -> `targets` (the whole
  /// sequence, T token ids each, the same on every rank): each rank takes
  /// its tokens, the stages run their programs, and the gradients are
  /// summed. Returns the mean loss over the T targets (on every rank).
  float forward_backward(std::span<const std::int32_t> inputs, std::span<const std::int32_t> targets) {
    const std::int64_t distinct = take_tokens(inputs, targets);
    world_->reset_totals();
    grad_->reset_totals();
    if (tied_) tied_->reset_totals();
    try {
      run_step(distinct);
    } catch (...) {
      abandon();
      throw;
    }
    communication_totals sums = grad_->totals();
    if (tied_) sums = sums + tied_->totals();
    step_reduction_.collectives = sums;
    step_comm_ = world_->totals() + sums;
    check_windows_agree();
    double sum = 0;
    for (const float l : global_losses_) sum += l;
    return static_cast<float>(sum / static_cast<double>(shape_.tokens));
  }

  /// One AdamW step over this stage's parameters (identical on every rank
  /// of the stage: their gradients were summed).
  void update(const ops::adamw_config& adamw) { state_->update(*stream_, adamw); }

  float train_step(std::span<const std::int32_t> inputs, std::span<const std::int32_t> targets,
                   const ops::adamw_config& adamw) {
    const float loss = forward_backward(inputs, targets);
    update(adamw);
    return loss;
  }

  /// Per-token losses of the last forward_backward, in sequence order: [T].
  [[nodiscard]] std::span<const float> token_losses() const noexcept { return global_losses_; }
  /// Mean of the last per-token losses over target positions `range`.
  [[nodiscard]] double mean_loss(position_range range) const {
    return mean_over(token_losses(), range, "gpt2_parallel_model::mean_loss");
  }


 private:
  using device_floats = buffer<float, device_resource>;
  using device_bytes = buffer<std::byte, device_resource>;
  using pinned_floats = buffer<float, pinned_resource>;
  using pinned_ints = buffer<std::int32_t, pinned_resource>;
  using pinned_words = buffer<std::uint64_t, pinned_resource>;
  using pinned_longs = buffer<std::int64_t, pinned_resource>;
  using pinned_bytes = buffer<std::byte, pinned_resource>;
  using attention_type = distributed_attention<comm_type, B>;
  using skeletal_swapper = subsequence_swapper<B>;

  [[nodiscard]] bool first_stage() const noexcept { return stage_ == 0; }
  [[nodiscard]] bool last_stage() const noexcept { return stage_ == shape_.pp - 1; }
  /// Whether this stage holds a copy of the tied token embedding that is
  /// summed over the stages (the first and last of a pipeline).
  [[nodiscard]] bool tied_stage() const noexcept { return shape_.pp > 1 && (first_stage() || last_stage()); }

  // ---- setup ----

  [[nodiscard]] distributed_attention_shape attention_shape_of() const {
    std::int64_t longest = 0;
    for (std::size_t j = 0; j < shape_.partition.count(); ++j) {
      longest = std::max(longest, static_cast<std::int64_t>(shape_.partition.tokens(j)));
    }
    return {.tokens = shape_.tokens,
            .heads = config_.num_heads,
            .kv_heads = config_.num_heads,
            .head_dim = config_.head_size(),
            .layout_chunk = shape_.layout_chunk,
            .attention_chunk = shape_.attention_chunk,
            .offload = options_.kv_offload,
            .max_run_tokens = longest,
            .keep_state = state_per_layer(),
            .overlap = options_.overlap_exchanges};
  }

  /// The buffers of a step outside the block sections: the single-device
  /// step's table (gpt2_step_buffers) for this rank's tokens, the head's
  /// only on the last stage, plus the gathered losses and the attention's
  /// workspace and state; all live the whole step (with subsequences the
  /// head of one runs between the others' blocks). The skeletal tensors
  /// are every layer's of every local row, or with subsequence offload the
  /// swapper's two slots ("skeletal") and its kept rows ("skeletal kept").
  [[nodiscard]] std::vector<gpt2_step_buffer> outside_buffers(const distributed_attention_bytes& attention) const {
    const auto layers = static_cast<std::uint64_t>(shape_.stage_layers);
    std::uint64_t skeletal_bytes = 0;
    if (shape_.offload) {
      skeletal_bytes = skeletal_swapper::slot_bytes(slot_layout());
    } else {
      region_carver skeletal;
      const skeletal_layout layout = gpt2_skeletal_layout(config_, shape_.local_tokens, qkv_skeletal());
      for (std::uint64_t l = 0; l < layers; ++l) {
        for (const auto& t : layout.tensors()) (void)skeletal.take(static_cast<std::size_t>(t.bytes()), t.name);
      }
      skeletal_bytes = skeletal.required_bytes();
    }
    std::vector<gpt2_step_buffer> out = gpt2_step_buffers(
        config_, shape_.local_tokens, shape_.loss_chunk,
        attention.attention_device, skeletal_bytes);
    if (!last_stage()) {
      std::erase_if(out, [](const gpt2_step_buffer& b) {
        return b.name == "lnf" || b.name == "lnf_mean" || b.name == "lnf_rstd" || b.name == "dlnf" ||
               b.name == "logits chunk";
      });
    }
    out.push_back({"gathered losses", checked_mul(static_cast<std::uint64_t>(shape_.tokens), sizeof(float))});
    out.push_back({"window digests", window_digest_words() * sizeof(std::uint64_t)});
    out.push_back({"attention workspace", attention.workspace});
    out.push_back({"attention state", repeated_bytes(attention.state, state_per_layer() ? layers : 1)});
    if (qkv_skeletal() == gpt2_qkv_skeletal::dropped) {  // one block's QKV output at a time
      out.push_back({"qkv", gpt2_qkv_buffer_bytes(config_, shape_.local_tokens)});
    }
    if (options_.overlap_gradient_reduction && gradient_buckets_.staging_floats > 0) {
      // [largest packed bucket]: the reduction stream's, until the step's join.
      out.push_back({"gradient staging", checked_mul(gradient_buckets_.staging_floats, sizeof(float))});
    }
    if (shape_.offload) {
      // All subsequences' kept rows coexist after the last forward (the
      // step's peak), so one region for the whole step costs nothing more.
      const auto [forwards, backwards] = program_subsequences();
      const std::uint64_t kept = skeletal_swapper::kept_bytes(
          slot_layout(), *shape_.offload, shape_.stage_layers,
          skeletal_swapper::resident_units(forwards, backwards, shape_.stage_layers, resident_units));
      if (kept > 0) out.push_back({"skeletal kept", kept});
    }
    for (auto& b : out) b.born = gpt2_step_phase::step_begin, b.dies = gpt2_step_phase::step_end;
    return out;
  }

  /// This rank's window digest and every rank's (the last step's inputs
  /// and targets, gathered over the world to check that they agree).
  [[nodiscard]] std::size_t window_digest_words() const { return 1 + static_cast<std::size_t>(world_->size()); }

  /// The window digest of a rank given a token outside the vocabulary
  /// (a real window's digest that equals it is changed in its last bit).
  static constexpr std::uint64_t invalid_window = 0x6261642d746f6b6eull;  // "bad-tokn"

  /// After a step: every rank was given the same window, with every token
  /// inside the vocabulary (the same error on every rank otherwise: each
  /// holds every rank's digest; the rank given such a token names it).
  void check_windows_agree() {
    if (world_->size() == 1) return;
    const std::span<const std::uint64_t> all(host_digests_.data() + 1, window_digest_words() - 1);
    if (!invalid_tokens_.empty()) throw error(std::exchange(invalid_tokens_, {}) + " (every rank fails this step)");
    std::string given;  // the ranks given a token outside the vocabulary
    for (std::size_t r = 0; r < all.size(); ++r) {
      if (all[r] == invalid_window) given += (given.empty() ? "" : ", ") + std::to_string(r);
    }
    if (!given.empty()) {
      throw error("gpt2_parallel_model: token ids outside the vocabulary [0, " + std::to_string(config_.vocab_size) +
                  ") were given to rank(s) " + given + " (each names the first); this step's loss and gradients are "
                  "not valid");
    }
    expects(std::all_of(all.begin(), all.end(), [&](std::uint64_t d) { return d == all[0]; }), [&] {
      return "gpt2_parallel_model: the ranks were given different token windows in one forward_backward (every "
             "rank must be given the same whole sequence of inputs and targets; this step's loss and gradients "
             "are not valid): " + ranks_holding(all, 1, 0, [](std::uint64_t, std::size_t k) {
               return std::string(k == 0 ? "one window" : "another");
             });
    });
  }

  /// Whether each layer's attention keeps its own state between calls: the
  /// K/V and dK/dV carry of earlier subsequences, on the device unless
  /// kv_offload puts them on the host (then one state serves every layer).
  [[nodiscard]] bool state_per_layer() const noexcept { return shape_.subsequences > 1 && !options_.kv_offload; }
  /// With host K/V the attention's backward reads Q, K and V from its host
  /// store, never the block's qkv: qkv is then not a skeletal tensor, only
  /// one [T / S, 3C] buffer from each block's QKV projection to its
  /// attention's forward (FPDT's device saving).
  [[nodiscard]] gpt2_qkv_skeletal qkv_skeletal() const noexcept {
    return gpt2_qkv_skeletal_for(options_.kv_offload);
  }

  /// The subsequences of this stage's forwards and backwards, in program order.
  [[nodiscard]] std::pair<std::vector<int>, std::vector<int>> program_subsequences() const {
    std::pair<std::vector<int>, std::vector<int>> out;
    for (const sppo_stage_op& op : program_) (op.forward ? out.first : out.second).push_back(op.subsequence);
    return out;
  }
  /// The last forward units that stay in the swapper's slots until their
  /// backward (subsequence_swapper's resident units): both slots' worth.
  static constexpr int resident_units = 2;

  /// One layer's skeletal tensors of the longest subsequence (the swapper's slots).
  [[nodiscard]] skeletal_layout slot_layout() const {
    return gpt2_skeletal_layout(config_, shape_.offload->max_rows(), qkv_skeletal());
  }

  /// Bytes of `count` aligned parts of `bytes` each (region_carver's sizing).
  [[nodiscard]] static std::uint64_t repeated_bytes(std::size_t bytes, std::uint64_t count) {
    region_carver sizing;
    for (std::uint64_t k = 0; k < count; ++k) (void)sizing.take(bytes, "part");
    return sizing.required_bytes();
  }

  /// Records one block backward per distinct subsequence length, writes the
  /// step's trace (a section per backward of a subsequence and a layer, in
  /// program order), plans it and builds everything over the arena.
  void plan_step() {
    B& b = *backend_;
    const distributed_attention_shape ashape = attention_shape_of();
    const distributed_attention_bytes abytes = attention_type::required_bytes(ashape, shape_.sp);
    std::vector<gpt2_step_buffer> outside = outside_buffers(abytes);
    std::map<std::int64_t, memory_trace> blocks;  // rows -> recorded block backward
    for (int j = 0; j < shape_.subsequences; ++j) {
      const auto [r0, r1] = shape_.rows(j);
      if (!blocks.contains(r1 - r0)) {
        blocks.emplace(r1 - r0, record_gpt2_block_backward(b, *stream_, stage_config_, r1 - r0, shape_.mlp_chunk,
                                                           p_.layer(0), g_.layer(0)));
      }
    }
    std::vector<gpt2_trace_section> sections;
    for (const sppo_stage_op& op : program_) {
      if (op.forward) continue;
      const auto [r0, r1] = shape_.rows(op.subsequence);
      for (std::int64_t l = shape_.stage_layers - 1; l >= 0; --l) {
        sections.push_back({section_name(op.subsequence, l), &blocks.at(r1 - r0),
                            static_cast<std::int64_t>(sections.size())});
      }
    }
    trace_ = gpt2_step_trace(outside, sections);
    dsa_solve_options solve;
    solve.time_limit_seconds = options_.plan_time_limit_seconds;
    plan_ = bilevel_planner<>{}.plan(trace_, solve);
    arena_options arena;
    arena.fill = [b = &b, s = &*stream_](memory_region r, std::byte value) {
      if (r.bytes > 0) b->memset_async(r.data, static_cast<int>(value), r.bytes, *s);
    };
    arena_.emplace(b, trace_, plan_.plan, std::move(arena));
    replay_.emplace(*arena_);
    outside_.emplace(std::move(outside), *arena_, *replay_);
    bind_views();
    if (shape_.offload) {
      const auto [forwards, backwards] = program_subsequences();
      const bool kept = outside_has("skeletal kept");
      swapper_.emplace(b, *stream_, slot_layout(), *shape_.offload, shape_.stage_layers, forwards, backwards,
                       region("skeletal"), kept ? region("skeletal kept") : memory_region{}, resident_units);
    }
    // The attention of every layer over its regions of the arena.
    const auto layers = static_cast<std::size_t>(shape_.stage_layers);
    if (options_.kv_offload) {
      const std::uint64_t bytes = repeated_bytes(abytes.attention_pinned, layers);
      attention_pinned_ = pinned_bytes(b.pinned_memory(), std::max<std::uint64_t>(1, bytes));
    }
    region_carver states(region("attention state"), "gpt2 parallel attention state");
    region_carver scratches(region("attention scratch"), "gpt2 parallel attention scratch");
    region_carver pinned(memory_region{attention_pinned_.data(), attention_pinned_.size_bytes()},
                         "gpt2 parallel host K/V");
    // One scratch for all layers (used only inside a call), with the copy
    // stream and slot events the layers share: a call's first host fetch
    // waits only for the previous call's last read of its slot.
    attention_scratch_.emplace(b, attention_type::local_attention_shape(ashape, shape_.sp),
                               scratches.take(abytes.attention_device, "all layers"),
                               options_.kv_prefetch_across_layers);
    memory_region state;
    for (std::size_t l = 0; l < layers; ++l) {
      // One state per layer when it lives between calls, otherwise shared.
      const std::string part = "layer " + std::to_string(l);
      if (l == 0 || state_per_layer()) state = states.take(abytes.state, part);
      attention_.push_back(std::make_unique<attention_type>(
          b, *sp_, ashape, region("attention workspace"), state, *attention_scratch_,
          options_.kv_offload ? pinned.take(abytes.attention_pinned, part) : memory_region{}));
    }
  }

  [[nodiscard]] static std::string section_name(int subsequence, std::int64_t layer) {
    return "subsequence " + std::to_string(subsequence) + " layer " + std::to_string(layer) + " backward";
  }

  [[nodiscard]] memory_region region(std::string_view name) const { return outside_->region(name); }
  [[nodiscard]] bool outside_has(std::string_view name) const {
    return std::ranges::any_of(outside_->table(), [&](const gpt2_step_buffer& b) { return b.name == name; });
  }

  /// Views of the outside buffers at their planned addresses (the same
  /// every step).
  void bind_views() {
    const std::int64_t Tl = shape_.local_tokens, C = config_.channels;
    auto matrix = [&](std::string_view name, std::int64_t rows, std::int64_t cols) {
      return gpt2_matrix::contiguous(region(name).template as<float>(), {rows, cols});
    };
    auto vector = [&](std::string_view name, std::int64_t n) {
      return gpt2_vector::contiguous(region(name).template as<float>(), {n});
    };
    tokens_ = tensor_view<const std::int32_t, 1>::contiguous(region("tokens").template as<std::int32_t>(), {Tl});
    targets_ = tensor_view<const std::int32_t, 1>::contiguous(region("targets").template as<std::int32_t>(), {Tl});
    losses_ = vector("losses", Tl);
    gathered_ = vector("gathered losses", shape_.tokens);
    residual_ = matrix("residual", Tl, C);
    dresidual_ = matrix("dresidual", Tl, C);
    if (last_stage()) {
      head_ = {residual_, matrix("lnf", Tl, C), matrix("dlnf", Tl, C), vector("lnf_mean", Tl),
               vector("lnf_rstd", Tl), matrix("logits chunk", shape_.loss_chunk, config_.padded_vocab_size),
               losses_, targets_};
    }
    if (qkv_skeletal() == gpt2_qkv_skeletal::dropped) qkv_ = matrix("qkv", Tl, 3 * C);
    // The skeletal tensors of every layer of the stage, carved in order
    // (with subsequence offload the swapper hands out slots instead).
    if (shape_.offload) return;
    region_carver carver(region("skeletal"), "gpt2 parallel skeletal tensors");
    const skeletal_layout layout = gpt2_skeletal_layout(config_, Tl, qkv_skeletal());
    const std::int64_t Hr = config_.num_heads / shape_.sp;
    for (std::int64_t l = 0; l < shape_.stage_layers; ++l) {
      std::vector<skeletal_slice> slices;
      for (const auto& t : layout.tensors()) {
        const memory_region r = carver.take(static_cast<std::size_t>(t.bytes()), t.name);
        slices.push_back({r.data, t.tokens, t.bytes_per_token, false});
      }
      // The log-sum-exp is the attention's: [heads / S, T] of this rank's heads.
      activations_.push_back(qkv_skeletal() == gpt2_qkv_skeletal::dropped
                                 ? gpt2_layer_activations::from_skeletal(slices, Tl, C, Hr, shape_.tokens, qkv_)
                                 : gpt2_layer_activations::from_skeletal(slices, Tl, C, Hr, shape_.tokens));
    }
  }

  // ---- a step ----

  /// Checks the whole sequence's ids (alone, a bad id is an error at once;
  /// among ranks, the step runs on token 0 and every rank fails after it,
  /// check_windows_agree), takes this rank's tokens and groups them for the
  /// embedding's backward. Returns the number of groups.
  std::int64_t take_tokens(std::span<const std::int32_t> inputs, std::span<const std::int32_t> targets) {
    const auto T = static_cast<std::size_t>(shape_.tokens);
    expects(inputs.size() == T && targets.size() == T, [&] {
      return "gpt2_parallel_model: " + std::to_string(inputs.size()) + " inputs and " +
             std::to_string(targets.size()) + " targets given, the context is " + std::to_string(T);
    });
    invalid_tokens_.clear();
    for (std::size_t t = 0; t < T && invalid_tokens_.empty(); ++t) {
      for (const auto& [what, id] : {std::pair{"input", inputs[t]}, std::pair{"target", targets[t]}}) {
        if (id >= 0 && id < config_.vocab_size) continue;
        invalid_tokens_ = std::string("gpt2_parallel_model: ") + what + " token " + std::to_string(id) +
                          " at position " + std::to_string(t) + " is outside the vocabulary [0, " +
                          std::to_string(config_.vocab_size) + ")";
        break;
      }
    }
    // Alone, refused at once. Among ranks, the others may have been given
    // valid windows and would wait for this rank in the step's collectives:
    // the step runs on token 0 everywhere and every rank fails once it is
    // done (check_windows_agree), as for windows that differ.
    if (!invalid_tokens_.empty() && world_->size() == 1) throw error(std::exchange(invalid_tokens_, {}));
    if (!invalid_tokens_.empty()) {
      substitute_tokens_.assign(T, 0);
      inputs = targets = substitute_tokens_;
    }
    const std::uint64_t window = digest{}.add(inputs).add(targets).value();
    host_digests_.data()[0] = !invalid_tokens_.empty() ? invalid_window : window == invalid_window ? window ^ 1 : window;
    layout_->shuffle<std::int32_t>(inputs, sp_rank_, host_inputs_.span());
    layout_->shuffle<std::int32_t>(targets, sp_rank_, host_targets_.span());
    const std::int64_t Tl = shape_.local_tokens;
    auto host = [&](auto& buf, std::int64_t n) {
      using E = std::remove_reference_t<decltype(*buf.data())>;
      return tensor_view<E, 1>::contiguous(buf.data(), {n});
    };
    const ops::token_buckets found = ops::build_token_buckets(
        host(host_inputs_, Tl), config_.vocab_size, host(host_order_, Tl), host(host_starts_, Tl + 1),
        host(host_ids_, Tl));
    return found.distinct();
  }

  void begin_step(std::int64_t distinct) {
    outside_->phase(gpt2_step_phase::step_begin);
    B& b = *backend_;
    auto& s = *stream_;
    auto up = [&](std::string_view name, const void* from, std::size_t bytes) {
      b.copy_async(region(name).data, from, bytes, copy_kind::host_to_device, s);
    };
    up("tokens", host_inputs_.data(), host_inputs_.size_bytes());
    up("targets", host_targets_.data(), host_targets_.size_bytes());
    up("bucket order", host_order_.data(), host_order_.size_bytes());
    up("bucket starts", host_starts_.data(), static_cast<std::size_t>(distinct + 1) * sizeof(std::int64_t));
    up("bucket ids", host_ids_.data(), static_cast<std::size_t>(distinct) * sizeof(std::int32_t));
    if (world_->size() > 1) {  // every rank's window digest, compared once the step is done
      up("window digests", host_digests_.data(), sizeof(std::uint64_t));
      auto* const words = region("window digests").template as<std::int32_t>();
      const auto P = static_cast<std::size_t>(world_->size());
      world_->template all_gather<std::int32_t>(b, s, std::span<const std::int32_t>(words, 2),
                                                std::span<std::int32_t>(words + 2, 2 * P));
      b.copy_async(host_digests_.data() + 1, words + 2, P * sizeof(std::uint64_t), copy_kind::device_to_host, s);
    }
    const std::int64_t Tl = shape_.local_tokens;
    buckets_ = {tensor_view<const std::int64_t, 1>::contiguous(region("bucket order").template as<std::int64_t>(), {Tl}),
                tensor_view<const std::int64_t, 1>::contiguous(region("bucket starts").template as<std::int64_t>(),
                                                               {distinct + 1}),
                tensor_view<const std::int32_t, 1>::contiguous(region("bucket ids").template as<std::int32_t>(),
                                                               {distinct})};
    state_->zero_gradients(s);
    b.memset_async(losses_.data(), 0, static_cast<std::size_t>(Tl) * sizeof(float), s);
  }

  void end_step() {
    outside_->phase(gpt2_step_phase::step_end);
    replay_->end_step();
  }

  /// Resets a step that threw part-way: drains the streams (a failure on
  /// the compute stream reaches every stream that waited for it), returns
  /// what the step held of the plan and rewinds the replay.
  void abandon() noexcept {
    if (swapper_) swapper_->abandon();
    // The error is already on its way to the caller. The reduction stream
    // before the buffers are released: a sum it still runs reads and writes
    // the gradients and the staging buffer that the next step zeroes and
    // poisons.
    if (reduce_stream_) drain(*backend_, *reduce_stream_);
    drain(*backend_, *stream_);
    for (auto& attention : attention_) attention->drain();  // the exchange streams and the shared copy stream
    outside_->release();
    try {
      replay_->reset();
    } catch (...) {
    }
  }

  /// Layer l's skeletal tensors for the forward or backward of subsequence
  /// j, and the row of `a` where the subsequence starts: its local row in
  /// the layer's own tensors (every local row), or 0 in the swapper's slot
  /// (the subsequence's rows only, its log-sum-exp [heads / S, S n]).
  struct layer_rows {
    gpt2_layer_activations a;
    std::int64_t row = 0;
  };
  [[nodiscard]] layer_rows begin_layer(std::int64_t l, int j, bool forward) {
    const auto [r0, r1] = shape_.rows(j);
    if (!swapper_) return {activations_[static_cast<std::size_t>(l)], r0};
    const std::int64_t n = r1 - r0;
    const std::vector<skeletal_slice> slices = forward ? swapper_->begin_forward(l, j) : swapper_->begin_backward(l, j);
    const std::int64_t C = config_.channels, Hr = config_.num_heads / shape_.sp;
    if (qkv_skeletal() == gpt2_qkv_skeletal::dropped) {
      return {gpt2_layer_activations::from_skeletal(slices, n, C, Hr, shape_.sp * n, qkv_.slice(0, n)), 0};
    }
    return {gpt2_layer_activations::from_skeletal(slices, n, C, Hr, shape_.sp * n), 0};
  }
  void end_layer(std::int64_t l, int j, bool forward) {
    if (!swapper_) return;
    if (forward) {
      swapper_->end_forward(l, j);
    } else {
      swapper_->end_backward(l, j);
    }
  }

  /// f(first local row, first global position) of each chunk of local rows
  /// [r0, r1).
  template <class F>
  void for_each_chunk(std::int64_t r0, std::int64_t r1, F f) const {
    const std::int64_t c = shape_.layout_chunk;
    for (std::int64_t row = r0; row < r1; row += c) f(row, layout_->global_token(sp_rank_, row));
  }

  void run_step(std::int64_t distinct) {
    B& b = *backend_;
    auto& s = *stream_;
    const std::int64_t C = config_.channels, NH = config_.num_heads;
    begin_step(distinct);
    auto rows_of = [&](gpt2_matrix m, std::int64_t r0, std::int64_t n) { return m.slice(r0, n); };
    auto span_of = [&](gpt2_matrix m) {
      return std::span<float>(m.data(), static_cast<std::size_t>(m.extent(0) * m.extent(1)));
    };
    // The last backward op: each layer's gradient is final after its backward there.
    std::size_t last_backward = 0;
    for (std::size_t k = 0; k < program_.size(); ++k) last_backward = program_[k].forward ? last_backward : k;
    // Behind the backward when there is something to sum (sp > 1, or the
    // tied wte); over one rank and no wte copy, nothing is summed at all.
    const bool overlap = reduce_stream_.has_value();
    for (std::size_t k = 0; k < program_.size(); ++k) {
      const sppo_stage_op& op = program_[k];
      const auto [r0, r1] = shape_.rows(op.subsequence);
      const std::int64_t n = r1 - r0;
      if (op.forward) {
        const gpt2_matrix x = rows_of(residual_, r0, n);
        if (op.receive_from >= 0) {
          pp_->template recv<float>(b, s, span_of(x), op.receive_from);
        } else {
          for_each_chunk(r0, r1, [&](std::int64_t row, std::int64_t position) {
            gpt2_embedding_forward(b, s, residual_.slice(row, shape_.layout_chunk),
                                   tokens_.slice(row, shape_.layout_chunk), p_, config_.vocab_size, position);
          });
        }
        for (std::int64_t l = 0; l < shape_.stage_layers; ++l) {
          const layer_rows at = begin_layer(l, op.subsequence, true);
          b.copy_async(at.a.input.slice(at.row, n).data(), x.data(), static_cast<std::size_t>(n * C) * sizeof(float),
                       copy_kind::device_to_device, s);
          gpt2_distributed_block_attention<comm_type, B> attention{attention_[static_cast<std::size_t>(l)].get(), NH,
                                                                   r0 - at.row};
          gpt2_layer_forward(b, s, p_.layer(l), at.a, x, attention, at.row, n);
          end_layer(l, op.subsequence, true);
        }
        if (op.send_to >= 0) pp_->template send<const float>(b, s, span_of(x), op.send_to);
        continue;
      }
      const gpt2_matrix dx = rows_of(dresidual_, r0, n);
      if (op.receive_from >= 0) {
        pp_->template recv<float>(b, s, span_of(dx), op.receive_from);
      } else {
        // The last stage: the loss of this subsequence and the head's backward.
        gpt2_head_views head = head_;
        head.x = rows_of(residual_, r0, n), head.lnf = rows_of(head_.lnf, r0, n);
        head.dlnf = rows_of(head_.dlnf, r0, n);
        head.lnf_mean = head_.lnf_mean.slice(r0, n), head.lnf_rstd = head_.lnf_rstd.slice(r0, n);
        head.losses = losses_.slice(r0, n), head.targets = targets_.slice(r0, n);
        gpt2_head_loss(b, s, p_, g_, head, config_.vocab_size, 1.0f / static_cast<float>(shape_.tokens));
        gpt2_head_backward(b, s, p_, g_, head, dx);
      }
      for (std::int64_t l = shape_.stage_layers - 1; l >= 0; --l) {
        const std::string section = section_name(op.subsequence, l);
        mark_section_begin(*replay_, section);
        const layer_rows at = begin_layer(l, op.subsequence, false);
        gpt2_distributed_block_attention<comm_type, B> attention{attention_[static_cast<std::size_t>(l)].get(), NH,
                                                                 r0 - at.row};
        gpt2_layer_backward(b, s, p_.layer(l), g_.layer(l), at.a, dx, *replay_, attention, at.row, n,
                            shape_.mlp_chunk);
        if (overlap && k == last_backward) reduce_gradients(l);
        end_layer(l, op.subsequence, false);
        mark_section_end(*replay_, section);
      }
      if (op.send_to >= 0) {
        pp_->template send<const float>(b, s, span_of(dx), op.send_to);
      } else {
        for_each_chunk(r0, r1, [&](std::int64_t row, std::int64_t position) {
          gpt2_position_embedding_backward(b, s, g_, dresidual_.slice(row, shape_.layout_chunk), position);
        });
      }
    }
    if (first_stage()) {
      detail::launch(b, s, ops::encoder_backward_tokens<float>{g_.wte, dresidual_, buckets_});
    }
    // Gradients: summed over the stage's ranks, then the tied wte over the
    // stages; behind the backward (the layers' sums are already queued on
    // the reduction stream: the tail now, then a join), or all here.
    const auto wte = std::span<float>(g_.wte.data(), static_cast<std::size_t>(g_.wte.extent(0) * g_.wte.extent(1)));
    if (overlap) {
      reduce_gradients(-1);
      if (tied_stage()) tied_->template all_reduce<float>(b, *reduce_stream_, wte, wte);
      b.record(*reduced_, *reduce_stream_);
      b.record(*backward_end_, s);
      b.wait(s, *reduced_);
    } else {
      b.record(*backward_end_, s);
      if (shape_.sp > 1) grad_->template all_reduce<float>(b, s, state_->gradient_span(), state_->gradient_span());
      if (tied_stage()) tied_->template all_reduce<float>(b, s, wte, wte);
    }
    b.record(*reduced_end_, s);
    // Losses: the last stage's ranks' tokens gathered (in their local order)
    // and handed to the other stages (which contribute zeros).
    const auto Tl = static_cast<std::size_t>(shape_.local_tokens), T = static_cast<std::size_t>(shape_.tokens);
    sp_->template all_gather<float>(b, s, std::span<const float>(losses_.data(), Tl),
                                    std::span<float>(gathered_.data(), T));
    if (shape_.pp > 1) {
      const auto all = std::span<float>(gathered_.data(), T);
      pp_->template all_reduce<float>(b, s, all, all);
    }
    b.copy_async(host_losses_.data(), gathered_.data(), host_losses_.size_bytes(), copy_kind::device_to_host, s);
    end_step();
    b.synchronize(s);
    step_reduction_.exposed_seconds = std::max(0.0, b.elapsed_seconds(*backward_end_, *reduced_end_));
    for (int r = 0; r < shape_.sp; ++r) {
      layout_->unshuffle<float>(std::span<const float>(host_losses_.data() + static_cast<std::size_t>(r) * Tl, Tl), r,
                                global_losses_);
    }
  }

  /// Queues the sums of the buckets completed by `layer`'s backward in the
  /// last backward op (-1: the tail) on the reduction stream, after what
  /// the compute stream has queued so far. Packed buckets go through the
  /// staging buffer; the others are summed in place.
  void reduce_gradients(std::int64_t layer) {
    B& b = *backend_;
    auto& on = *reduce_stream_;
    b.record(*gradients_ready_, *stream_);
    b.wait(on, *gradients_ready_);
    float* const g = state_->gradient_span().data();
    for (const gpt2_gradient_bucket& bucket : gradient_buckets_.buckets) {
      if (bucket.layer != layer) continue;
      if (!bucket.packed) {
        const gpt2_gradient_piece& p = bucket.pieces.front();
        const auto piece = std::span<float>(g + p.offset, static_cast<std::size_t>(p.count));
        grad_->template all_reduce<float>(b, on, piece, piece);
        continue;
      }
      float* const staging = region("gradient staging").template as<float>();
      auto each = [&](auto&& copy) {
        std::uint64_t at = 0;
        for (const gpt2_gradient_piece& p : bucket.pieces) {
          copy(staging + at, g + p.offset, static_cast<std::size_t>(p.count) * sizeof(float));
          at += p.count;
        }
      };
      each([&](float* staged, float* piece, std::size_t bytes) {
        b.copy_async(staged, piece, bytes, copy_kind::device_to_device, on);
      });
      const auto packed = std::span<float>(staging, static_cast<std::size_t>(bucket.count()));
      grad_->template all_reduce<float>(b, on, packed, packed);
      each([&](float* staged, float* piece, std::size_t bytes) {
        b.copy_async(piece, staged, bytes, copy_kind::device_to_device, on);
      });
    }
  }

  // ---- parameters ----

  /// f(stage offset, full offset, count, owned) for each contiguous piece of
  /// this stage's parameters: the per-layer tensors' rows of its layers,
  /// and wte, wpe, lnfw, lnfb whole where it holds them (count 0 where not);
  /// `owned` says whether this stage's copy is the one that counts (wte:
  /// stage 0 of the two that hold it).
  template <class F>
  void for_each_stage_tensor(F f) const {
    for (std::size_t t = 0; t < gpt2_tensor_count; ++t) {
      const gpt2_tensor_info& mine = stage_table_.tensors[t];
      const gpt2_tensor_info& full = full_table_.tensors[t];
      const auto tensor = static_cast<gpt2_tensor>(t);
      if (tensor == gpt2_tensor::wte || tensor == gpt2_tensor::wpe) {
        f(mine.offset, full.offset, mine.count, first_stage());
      } else if (tensor == gpt2_tensor::lnfw || tensor == gpt2_tensor::lnfb) {
        f(mine.offset, full.offset, mine.count, last_stage());
      } else {
        const auto first_layer = static_cast<std::uint64_t>(stage_ * shape_.stage_layers);
        const std::uint64_t per_layer = full.count / static_cast<std::uint64_t>(config_.num_layers);
        f(mine.offset, full.offset + first_layer * per_layer, mine.count, true);
      }
    }
  }

  void expect_full(std::size_t n, const char* call) const {
    expects(n == full_table_.total, [&] {
      return std::string("gpt2_parallel_model::") + call + ": " + std::to_string(n) + " values given, the model has " +
             std::to_string(full_table_.total) + " parameters";
    });
  }

  /// The whole model's values of `from` on every rank: each stage's
  /// sequence-parallel rank 0 places its part, the others zeros, and a sum
  /// over the world (exact: one value and zeros) gives everyone the model.
  void gather(const float* from, std::span<float> out, const char* call) {
    expect_full(out.size(), call);
    B& b = *backend_;
    auto& s = *stream_;
    device_floats full(b.device_memory(), full_table_.total);
    b.memset_async(full.data(), 0, full.size_bytes(), s);
    if (sp_rank_ == 0) {
      for_each_stage_tensor([&](std::uint64_t stage_offset, std::uint64_t full_offset, std::uint64_t count, bool owned) {
        if (owned && count > 0) {
          b.copy_async(full.data() + full_offset, from + stage_offset, count * sizeof(float),
                       copy_kind::device_to_device, s);
        }
      });
    }
    world_->template all_reduce<float>(b, s, full.span(), full.span());
    pinned_floats host(b.pinned_memory(), full_table_.total);
    b.copy_async(host.data(), full.data(), full.size_bytes(), copy_kind::device_to_host, s);
    b.synchronize(s);
    std::copy_n(host.data(), out.size(), out.data());
  }

  /// `options`, once every rank of `world` is known to have been given the
  /// same config and options; otherwise the same error on every rank,
  /// naming each value that differs and the ranks that hold each.
  static const gpt2_parallel_options& agreed(B& backend, Comm& world, const gpt2_config& config,
                                             const gpt2_parallel_options& options) {
    expect_ranks_agree(backend, world, gpt2_parallel_agreement(config, options),
                       "gpt2_parallel_model: the ranks were given different configs or options (every rank must be "
                       "given the same)");
    return options;
  }

  B* backend_;
  gpt2_config config_, stage_config_{};
  gpt2_parallel_options options_;
  gpt2_parallel_shape shape_;
  int stage_, sp_rank_;
  // A timed copy of the world, the stage's group, the pipeline's group; the
  // gradient sums' groups (the stage's ranks; the first and last stage, for
  // the tied embedding), counted apart.
  std::optional<comm_type> world_, sp_, pp_, grad_, tied_;
  gpt2_parameter_table full_table_{}, stage_table_{};
  gpt2_gradient_buckets gradient_buckets_{};
  std::optional<fpdt_layout> layout_;
  stream_schedule schedule_;
  std::vector<sppo_stage_op> program_;
  device_bytes workspace_;                          // the stream's BLAS workspace
  pinned_floats host_losses_;                       // [T]: gathered, in the ranks' local orders
  pinned_ints host_inputs_, host_targets_, host_ids_;  // [T / S]
  pinned_words host_digests_;  // the step's window digest, then every rank's: [1 + P]
  std::string invalid_tokens_;                  // this step's first token outside the vocabulary, if any
  std::vector<std::int32_t> substitute_tokens_;  // the window a rank given such a token steps on
  pinned_longs host_order_, host_starts_;
  pinned_bytes attention_pinned_;                   // host K/V of every layer (kv_offload)
  std::vector<float> global_losses_;                // [T]: in sequence order
  gpt2_parameter_views<float> p_{}, g_{};
  communication_totals step_comm_{};
  gpt2_gradient_reduction_totals step_reduction_{};
  std::optional<typename B::stream> stream_;
  std::optional<typename B::stream> reduce_stream_;  // the gradient sums (overlap_gradient_reduction)
  // Compute stream -> reduction stream: a layer's gradients are final;
  // back: every sum is done; on the compute stream around the join: the
  // backward's end and the sums' end (the exposed time).
  std::optional<typename B::event> gradients_ready_, reduced_, backward_end_, reduced_end_;
  std::optional<gpt2_parameter_state<B>> state_;  // this stage's parameters, gradients, AdamW moments
  // The plan and what is built over it (after the stream: destroyed first).
  memory_trace trace_;
  bilevel_result plan_;
  std::optional<planned_arena> arena_;
  std::optional<planned_replay_resource> replay_;
  std::optional<gpt2_outside_buffers> outside_;
  tensor_view<const std::int32_t, 1> tokens_{}, targets_{};
  gpt2_vector losses_{}, gathered_{};
  gpt2_matrix residual_{}, dresidual_{};
  gpt2_matrix qkv_{};  // every block's QKV output when it is not skeletal (kv_offload)
  gpt2_head_views head_{};
  ops::token_buckets buckets_{};
  std::vector<gpt2_layer_activations> activations_;           // [stage layers], without subsequence offload
  std::optional<chunked_attention_scratch<B>> attention_scratch_;  // shared by the layers' attentions
  std::vector<std::unique_ptr<attention_type>> attention_;         // [stage layers]
  std::optional<skeletal_swapper> swapper_;                   // with subsequence offload
};

}  // namespace memo
