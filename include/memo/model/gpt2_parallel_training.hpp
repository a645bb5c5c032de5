// memo/model/gpt2_parallel_training.hpp
//
// The training loop of `train_gpt` across ranks (examples/train_gpt.cpp
// dispatches here with --sp / --pp): one gpt2_parallel_model over the world
// communicator, every rank reading the same windows of the same data,
// AdamW on every rank alike. Rank 0 prints what the run is and a progress
// line every `log_every` steps (mean loss, the loss on the predictable
// targets, tokens/s, step time, its device peak and time in communication); every rank prints its
// own device peak and communication time per step at the end; with `json`
// rank 0 prints one JSON object (through core/json.hpp) holding every
// rank's figures instead. Communication is the time of every collective
// and hand-off of the step, whether or not compute ran meanwhile (host
// backend: a collective's whole duration, waits for peers included); the
// gradient sums are also given alone, with the part of them the step
// waited for after its backward ("exposed"; with the sums behind the
// backward, only the tail; see gpt2_parallel_model.hpp). A diverged loss
// (the same on every rank) is an error on every rank. Collective: every
// rank calls it with the same arguments.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <optional>
#include <source_location>
#include <span>
#include <string>
#include <vector>

#include "memo/backend/buffer.hpp"
#include "memo/backend/concepts.hpp"
#include "memo/backend/communicator.hpp"
#include "memo/core/bytes.hpp"
#include "memo/core/digest.hpp"
#include "memo/core/error.hpp"
#include "memo/core/json.hpp"
#include "memo/model/builtin_data.hpp"
#include "memo/model/checkpoint.hpp"
#include "memo/model/gpt2_parallel_model.hpp"

namespace memo {

/// What a parallel training run does besides the model's shape.
struct gpt2_parallel_training {
  std::int64_t steps = 1;
  std::int64_t log_every = 0;                 ///< 0: about 25 progress lines
  ops::adamw_config adamw{};
  std::uint64_t seed = 1;                     ///< initialisation, unless `parameters`
  double init_std = 0.02;                     ///< the weights' standard deviation (GPT-2's 0.02)
  std::span<const float> parameters{};        ///< the whole model's (a checkpoint), or empty
  std::optional<position_range> predictable{};  ///< targets a built-in task makes predictable
  std::string predictable_label = "predictable loss";  ///< how the progress lines name their loss
  std::string predictable_key = "predictable_loss";    ///< the JSON key of their losses
  std::optional<position_range> far{};        ///< the predictable targets far from their source
  std::string data_name{};                    ///< for the report
  std::string checkpoint_out{};               ///< written by rank 0 after the last step
  bool json = false;
  std::FILE* out = stdout;
};

/// The error for a step whose loss is not finite: every later step and a
/// checkpoint would hold garbage (and the checkpoint could replace a good
/// one), so training stops there. It names the caller's line.
inline error training_diverged(std::int64_t step, float loss, const ops::adamw_config& adamw, bool checkpoint_asked,
                               std::source_location where = std::source_location::current()) {
  char text[224];
  std::snprintf(text, sizeof text,
                "step %lld: the loss is %s, training diverged (non-finite weights, or a learning rate of %g or a "
                "weight decay of %g too large for this model)",
                static_cast<long long>(step), std::isnan(loss) ? "nan" : loss > 0 ? "inf" : "-inf",
                adamw.learning_rate, adamw.weight_decay);
  return error(std::string(text) + (checkpoint_asked ? "; no checkpoint written" : ""), where);
}

/// One rank's figures, as gathered for the report.
struct gpt2_rank_figures {
  int rank = 0, stage = 0, sequence_parallel_rank = 0;
  std::uint64_t device_peak_bytes = 0, parameter_state_bytes = 0, activation_bytes = 0;
  double communication_seconds = 0.0;  ///< per step, mean
  std::uint64_t communication_bytes = 0;  ///< per step
  double step_seconds = 0.0;           ///< per step, mean
  double reduction_seconds = 0.0;      ///< per step, mean: the gradient sums' collectives
  double exposed_reduction_seconds = 0.0;  ///< per step, mean: the step's wait for them after the backward
};

namespace detail {

/// Every rank's figures on every rank (gather_host_values; seconds as
/// whole nanoseconds).
template <Backend B, class Comm>
std::vector<gpt2_rank_figures> gather_rank_figures(B& backend, Comm& world, const gpt2_rank_figures& mine) {
  auto ns = [](double seconds) { return static_cast<std::uint64_t>(std::llround(std::max(seconds, 0.0) * 1e9)); };
  auto seconds = [](std::uint64_t v) { return static_cast<double>(v) * 1e-9; };
  const std::array<std::uint64_t, 11> packed{static_cast<std::uint64_t>(mine.rank),
                                             static_cast<std::uint64_t>(mine.stage),
                                             static_cast<std::uint64_t>(mine.sequence_parallel_rank),
                                             mine.device_peak_bytes,
                                             mine.parameter_state_bytes,
                                             mine.activation_bytes,
                                             ns(mine.communication_seconds),
                                             mine.communication_bytes,
                                             ns(mine.step_seconds),
                                             ns(mine.reduction_seconds),
                                             ns(mine.exposed_reduction_seconds)};
  const std::vector<std::uint64_t> all = gather_host_values(backend, world, std::span<const std::uint64_t>(packed));
  std::vector<gpt2_rank_figures> out(static_cast<std::size_t>(world.size()));
  for (std::size_t r = 0; r < out.size(); ++r) {
    const std::uint64_t* w = all.data() + r * packed.size();
    out[r] = {static_cast<int>(w[0]), static_cast<int>(w[1]), static_cast<int>(w[2]), w[3], w[4], w[5],
              seconds(w[6]), w[7], seconds(w[8]), seconds(w[9]), seconds(w[10])};
  }
  return out;
}

}  // namespace detail

/// What every rank of a training run must be given alike (besides the
/// model's config and options, which the model checks): the steps, the
/// optimizer, the initialisation or the parameters (their digest), the
/// loss ranges reported, and what is written (and where: rank 0 writes the
/// checkpoint, so a path another rank was given would be ignored). A rank given other steps
/// or a checkpoint to write would issue other collectives; another
/// learning rate would leave the ranks of a stage with different weights;
/// a range one rank refuses would fail that rank alone mid-run; other
/// outputs would mix text into the JSON.
inline std::vector<agreed_value> gpt2_parallel_training_agreement(const gpt2_parallel_training& run) {
  auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
  constexpr auto boolean = agreed_value::kind::boolean;
  auto range = [](const std::optional<position_range>& r) {
    return r ? digest{}.add(r->begin).add(r->end).add(r->stride).value() : 0;
  };
  return {{"steps", u(run.steps)},
          {"predictable range", range(run.predictable), agreed_value::kind::digest},
          {"far range", range(run.far), agreed_value::kind::digest},
          {"log_every", u(run.log_every)},
          agreed_value::of_real("adamw.learning_rate", run.adamw.learning_rate),
          agreed_value::of_real("adamw.beta1", run.adamw.beta1),
          agreed_value::of_real("adamw.beta2", run.adamw.beta2),
          agreed_value::of_real("adamw.epsilon", run.adamw.epsilon),
          agreed_value::of_real("adamw.weight_decay", run.adamw.weight_decay),
          {"seed", run.seed},
          agreed_value::of_real("init_std", run.init_std),
          {"parameters given", !run.parameters.empty(), boolean},
          {"parameter count", run.parameters.size()},
          {"parameter values", digest{}.add(run.parameters).value(), agreed_value::kind::digest},
          {"checkpoint_out given", !run.checkpoint_out.empty(), boolean},
          {"checkpoint_out path", digest{}.add(std::span<const char>(run.checkpoint_out)).value(),
           agreed_value::kind::digest},
          {"json", run.json, boolean}};
}

/// Trains on `world`'s ranks; `next(inputs, targets)` fills the next window
/// (the same on every rank). Returns the per-step losses. Every rank must
/// be given the same run (gpt2_parallel_training_agreement) as well as the
/// same config and options: otherwise every rank fails, naming the
/// differences, before the model is built.
template <class Comm, Backend B, class NextWindow>
std::vector<double> train_gpt2_parallel(B& backend, Comm& world, const gpt2_config& config,
                                        const gpt2_parallel_options& parallel, const gpt2_parallel_training& run,
                                        NextWindow&& next) {
  using clock = std::chrono::steady_clock;
  std::FILE* out = run.out;
  const int rank = world.rank();
  const bool speaker = rank == 0;
  expect_ranks_agree(backend, world, gpt2_parallel_training_agreement(run),
                     "train_gpt2_parallel: the ranks were given different runs (every rank must be given the same)");
  expects(run.steps >= 1, [&] {
    return "train_gpt2_parallel: steps " + std::to_string(run.steps) + " must be 1 or more";
  });
  gpt2_parallel_model<Comm, B> model(backend, world, config, parallel);
  if (run.parameters.empty()) {
    model.initialize(run.seed, run.init_std);
  } else {
    model.set_parameters(run.parameters);
  }
  const gpt2_parallel_shape& shape = model.shape();
  if (speaker && !run.json) {
    std::fprintf(out, "model: L=%d C=%d NH=%d V=%d (padded %d), %llu parameters\n", config.num_layers,
                 config.channels, config.num_heads, config.vocab_size, config.padded_vocab_size,
                 static_cast<unsigned long long>(model.parameter_count()));
    std::fprintf(out, "data: %s, context %lld\n", run.data_name.c_str(), static_cast<long long>(shape.tokens));
    std::string lengths;
    for (std::size_t j = 0; j < shape.partition.count(); ++j) {
      lengths += (j ? " " : "") + std::to_string(shape.partition.tokens(j));
    }
    std::fprintf(out,
                 "ranks: %d = %d sequence-parallel x %d pipeline stages; %d subsequence%s of {%s} tokens; "
                 "chunks: FPDT %lld tokens per rank, attention %lld, MLP %lld rows, loss %lld rows\n",
                 world.size(), shape.sp, shape.pp, shape.subsequences, shape.subsequences == 1 ? "" : "s",
                 lengths.c_str(), static_cast<long long>(shape.layout_chunk),
                 static_cast<long long>(shape.attention_chunk), static_cast<long long>(shape.mlp_chunk),
                 static_cast<long long>(shape.loss_chunk));
  }
  if (!run.json) {
    const auto& plan = model.memory_plan();
    std::string host;
    if (model.kv_offload()) {
      host += ", attention host store " + format_bytes(model.host_offload_bytes() - model.skeletal_host_bytes());
    }
    if (!model.subsequence_offload_alpha().empty()) {
      host += "; skeletal tensors " + format_bytes(model.skeletal_device_bytes()) + " on the device, " +
              format_bytes(model.skeletal_host_bytes()) + " on the host (SPPO offload)";
    }
    std::fprintf(out,
                 "rank %d (stage %d, sequence-parallel rank %d): layers [%lld, %lld), parameters+gradients+AdamW "
                 "%s, planned arena %s (bi-level peak %s, flat lower bound %s)%s\n",
                 rank, model.stage(), model.sequence_parallel_rank(),
                 static_cast<long long>(model.stage() * shape.stage_layers),
                 static_cast<long long>((model.stage() + 1) * shape.stage_layers),
                 format_bytes(model.parameter_state_bytes()).c_str(), format_bytes(model.activation_bytes()).c_str(),
                 format_bytes(plan.plan.peak_bytes).c_str(), format_bytes(plan.flat_lower_bound_bytes).c_str(),
                 host.c_str());
    std::fflush(out);
  }
  backend.device_memory().reset_peak();

  std::vector<std::int32_t> inputs(static_cast<std::size_t>(shape.tokens)), targets(inputs.size());
  std::vector<double> losses, copy_losses, far_losses;
  const std::int64_t log_every = run.log_every > 0 ? run.log_every : std::max<std::int64_t>(1, run.steps / 25);
  double interval_seconds = 0, interval_loss = 0, interval_copy = 0, interval_far = 0, interval_comm = 0;
  double total_comm = 0, total_step = 0, total_reduction = 0, total_exposed = 0;
  std::uint64_t total_comm_bytes = 0;
  std::int64_t interval_steps = 0;
  const auto start = clock::now();
  for (std::int64_t step = 1; step <= run.steps; ++step) {
    next(std::span<std::int32_t>(inputs), std::span<std::int32_t>(targets));
    const auto t0 = clock::now();
    const float loss = model.train_step(inputs, targets, run.adamw);
    if (!std::isfinite(loss)) throw training_diverged(step, loss, run.adamw, !run.checkpoint_out.empty());
    const double seconds = std::chrono::duration<double>(clock::now() - t0).count();
    const communication_totals comm = model.step_communication();
    interval_seconds += seconds, total_step += seconds;
    interval_comm += comm.seconds, total_comm += comm.seconds, total_comm_bytes += comm.payload_bytes;
    total_reduction += model.step_gradient_reduction().collectives.seconds;
    total_exposed += model.step_gradient_reduction().exposed_seconds;
    losses.push_back(loss);
    if (run.predictable) copy_losses.push_back(model.mean_loss(*run.predictable));
    if (run.far) far_losses.push_back(model.mean_loss(*run.far));
    interval_loss += loss;
    interval_copy += run.predictable ? copy_losses.back() : 0.0;
    interval_far += run.far ? far_losses.back() : 0.0;
    ++interval_steps;
    if (speaker && !run.json && (step % log_every == 0 || step == run.steps)) {
      const double n = static_cast<double>(interval_steps);
      char copy[64] = "-";
      if (run.predictable) std::snprintf(copy, sizeof copy, "%.4f", interval_copy / n);
      if (run.far) {
        const std::size_t used = std::strlen(copy);
        std::snprintf(copy + used, sizeof copy - used, " (far %.4f)", interval_far / n);
      }
      std::fprintf(out,
                   "step %5lld  loss %.4f  %s %s  %6.0f tokens/s  %5.2f ms/step  "
                   "rank 0: device peak %s, communication %.2f ms/step\n",
                   static_cast<long long>(step), interval_loss / n, run.predictable_label.c_str(), copy,
                   n * static_cast<double>(shape.tokens) / interval_seconds, interval_seconds / n * 1e3,
                   format_bytes(backend.device_memory().peak_bytes()).c_str(), interval_comm / n * 1e3);
      std::fflush(out);
      interval_seconds = interval_loss = interval_copy = interval_far = interval_comm = 0;
      interval_steps = 0;
    }
  }
  const double total = std::chrono::duration<double>(clock::now() - start).count();
  const double steps = static_cast<double>(run.steps);
  if (!run.checkpoint_out.empty()) {
    std::vector<float> parameters(model.parameter_count());
    model.get_parameters(parameters);  // collective
    std::exception_ptr failed;
    if (speaker) {
      try {
        write_gpt2_checkpoint(run.checkpoint_out, config, parameters);
      } catch (...) {
        failed = std::current_exception();
      }
    }
    // Every rank learns whether the write worked: the others would wait in
    // the gather below for a rank 0 that stopped.
    const std::uint64_t written = failed ? 0 : 1;
    const std::vector<std::uint64_t> all =
        gather_host_values(backend, world, std::span<const std::uint64_t>(&written, 1));
    if (failed) std::rethrow_exception(failed);
    for (std::size_t r = 0; r < all.size(); ++r) {
      if (all[r] == 0) {
        throw error("train_gpt2_parallel: rank " + std::to_string(r) + " could not write the checkpoint to " +
                    run.checkpoint_out + " (rank " + std::to_string(r) + " reports why)");
      }
    }
  }
  const gpt2_rank_figures mine{rank,
                               model.stage(),
                               model.sequence_parallel_rank(),
                               backend.device_memory().peak_bytes(),
                               model.parameter_state_bytes(),
                               model.activation_bytes(),
                               total_comm / steps,
                               static_cast<std::uint64_t>(static_cast<double>(total_comm_bytes) / steps),
                               total_step / steps,
                               total_reduction / steps,
                               total_exposed / steps};
  if (!run.json) {
    std::fprintf(out,
                 "rank %d: device peak %s (parameters+gradients+AdamW %s, activations %s); communication %.2f ms "
                 "of a %.2f ms step (%.1f%%), %s per step; gradient sums %.2f ms of it, %.2f ms exposed (%s)\n",
                 rank, format_bytes(mine.device_peak_bytes).c_str(), format_bytes(mine.parameter_state_bytes).c_str(),
                 format_bytes(mine.activation_bytes).c_str(), mine.communication_seconds * 1e3,
                 mine.step_seconds * 1e3,
                 mine.step_seconds > 0 ? 100.0 * mine.communication_seconds / mine.step_seconds : 0.0,
                 format_bytes(mine.communication_bytes).c_str(), mine.reduction_seconds * 1e3,
                 mine.exposed_reduction_seconds * 1e3,
                 !model.sums_gradients()              ? "nothing to sum on this rank"
                 : model.overlap_gradient_reduction() ? "behind the backward"
                                                      : "after the backward");
    std::fflush(out);
  }
  const std::vector<gpt2_rank_figures> ranks = detail::gather_rank_figures(backend, world, mine);
  const double tokens_per_second = steps * static_cast<double>(shape.tokens) / total;
  if (speaker && run.json) {
    json_writer j;
    j.begin_object();
    j.key("model").begin_object();
    j.field("layers", config.num_layers).field("channels", config.channels);
    j.field("heads", config.num_heads).field("vocab", config.vocab_size);
    j.field("padded_vocab", config.padded_vocab_size);
    j.field("parameters", model.parameter_count()).end_object();
    j.field("data", run.data_name).field("context", shape.tokens);
    j.field("ranks", world.size()).field("sequence_parallel", shape.sp).field("pipeline_stages", shape.pp);
    j.field("subsequences", shape.subsequences);
    j.key("subsequence_tokens").begin_array();
    for (std::size_t k = 0; k < shape.partition.count(); ++k) j.value(shape.partition.tokens(k));
    j.end_array();
    j.field("layout_chunk", shape.layout_chunk).field("attention_chunk", shape.attention_chunk);
    j.field("mlp_chunk", shape.mlp_chunk).field("loss_chunk", shape.loss_chunk);
    j.field("kv_offload", model.kv_offload());
    j.field("overlap_gradient_reduction", model.overlap_gradient_reduction());
    j.key("subsequence_offload");
    if (model.subsequence_offload_alpha().empty()) {
      j.null();
    } else {
      j.begin_array();
      for (const double a : model.subsequence_offload_alpha()) j.value(a);
      j.end_array();
    }
    j.field("steps", run.steps).field("lr", run.adamw.learning_rate).field("weight_decay", run.adamw.weight_decay);
    j.field("seed", run.seed).field("init_std", run.init_std).field("seconds", total);
    j.field("tokens_per_second", tokens_per_second);
    j.field("loss", losses);
    using series = std::optional<std::span<const double>>;  // null where the data has none
    j.field(run.predictable_key, run.predictable.has_value() ? series(copy_losses) : std::nullopt);
    if (run.far) j.field("far_" + run.predictable_key, far_losses);
    j.key("rank_figures").begin_array();
    for (const auto& r : ranks) {
      j.begin_object();
      j.field("rank", r.rank).field("stage", r.stage).field("sequence_parallel_rank", r.sequence_parallel_rank);
      j.field("device_peak_bytes", r.device_peak_bytes).field("parameter_state_bytes", r.parameter_state_bytes);
      j.field("activation_bytes", r.activation_bytes);
      j.field("step_seconds", r.step_seconds).field("communication_seconds_per_step", r.communication_seconds);
      j.field("communication_bytes_per_step", r.communication_bytes);
      j.field("gradient_reduction_seconds_per_step", r.reduction_seconds);
      j.field("gradient_reduction_exposed_seconds_per_step", r.exposed_reduction_seconds);
      j.end_object();
    }
    j.end_array();
    if (!run.checkpoint_out.empty()) j.field("checkpoint_out", run.checkpoint_out);
    j.end_object();
    std::fprintf(out, "%s\n", j.str().c_str());
  } else if (speaker) {
    std::fprintf(out, "done: %lld steps in %.1f s (%.0f tokens/s); loss %.4f -> %.4f", static_cast<long long>(run.steps),
                 total, tokens_per_second, losses.front(), losses.back());
    if (run.predictable) {
      std::fprintf(out, "; %s %.4f -> %.4f", run.predictable_label.c_str(), copy_losses.front(), copy_losses.back());
    }
    if (run.far) std::fprintf(out, " (far %.4f -> %.4f)", far_losses.front(), far_losses.back());
    std::fprintf(out, "\n");
    if (!run.checkpoint_out.empty()) std::fprintf(out, "checkpoint written to %s\n", run.checkpoint_out.c_str());
  }
  std::fflush(out);
  return losses;
}

}  // namespace memo
