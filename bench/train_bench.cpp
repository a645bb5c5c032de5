// train_bench: how fast the reference GPT-2 (gpt2_model, chunked causal
// attention) trains on the host backend at long contexts, and how long a
// context fits a fixed device-memory budget against the same model with
// unchunked attention.
//
// Speed. For each context T (1K .. 16K by default, --max-context up to 64K;
// quick: 256 and 512), one model of the same shape trains on the copy task
// (builtin_data.hpp). Every round times one train_step (forward, chunked
// loss, backward, AdamW; synchronised) per context, each next to a square
// backend.gemm that measures the machine's GEMM rate in the same run; the
// configurations are interleaved and repeated (5 rounds; median, min-max).
//   model FLOPs per step = 6 T (12 L C^2 + C Vp)       (the projections and the head)
//                        + 6 L C T (T + 1) / 2 * 2     (causal attention: forward
//                          Q K^T and P V, backward dV, dP, dS K, dS^T Q; each a
//                          GEMM of 2 C T (T + 1) / 2 FLOPs over the causal pairs)
//   MFU = model FLOPs / step time / GEMM rate.
// The attention backward recomputes Q K^T: that GEMM is work, not model
// FLOPs, so it counts against the MFU. "ideal s" beside each measured step
// time is the prediction model FLOPs / GEMM rate (MFU 1).
//
// Memory. The longest context whose training fits `budget` bytes:
//   memo:     the model as it trains with offload: parameter state
//             (parameters, gradients, two AdamW moments) + gpt2_model's one
//             planned activation arena (parameter_state_bytes() +
//             activation_bytes()) with every skeletal tensor of all but the
//             last two blocks offloaded (alpha = 1) and K/V in host memory,
//             chunked attention, chunked loss. The host memory that needs
//             (host_offload_bytes()) is printed beside it. Both are linear
//             in T for fixed chunks; the lines are measured from models
//             built at two contexts and checked against a third. Where this
//             machine can hold it, the model is then built at the longest
//             context the line gives (lowered while it is over the budget):
//             its allocations are those of training, since a step
//             allocates nothing.
//   baseline: the same model with unchunked attention: each block keeps its
//             softmax probabilities P [NH, T, T] for the backward (the
//             scores S are a transient of the forward; dP and dS transients
//             of the block's backward), every other activation resident as
//             in memo, one allocation per tensor, freed after its last use,
//             through a PyTorch-like caching allocator
//             (plan/caching_allocator.hpp); its reserved peak is the figure.
// The timed runs also print the device peak the host backend measured
// beside memo's predicted bytes.
//
// Usage: train_bench [--quick] [--json] [--min-context N] [--max-context N]
//                    [--layers N] [--channels C] [--heads H]
#include <memo/backend/host_backend.hpp>
#include <memo/core/bytes.hpp>
#include <memo/core/command_line.hpp>
#include <memo/core/json.hpp>
#include <memo/core/spread.hpp>
#include <memo/core/text.hpp>
#include <memo/model/builtin_data.hpp>
#include <memo/model/gpt2_model.hpp>
#include <memo/plan/caching_allocator.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gemm_reference.hpp"

namespace {

using clock_type = std::chrono::steady_clock;
using model_type = memo::gpt2_model<memo::host_backend>;

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

struct model_shape {
  std::int64_t layers = 2, channels = 128, heads = 2, vocab = 64;
  [[nodiscard]] std::int64_t padded_vocab() const { return (vocab + 63) / 64 * 64; }
  [[nodiscard]] memo::gpt2_config config(std::int64_t context) const {
    return {static_cast<std::int32_t>(context), static_cast<std::int32_t>(vocab),
            static_cast<std::int32_t>(padded_vocab()), static_cast<std::int32_t>(layers),
            static_cast<std::int32_t>(heads), static_cast<std::int32_t>(channels)};
  }
  [[nodiscard]] std::string name() const {
    return "L" + std::to_string(layers) + " C" + std::to_string(channels) + " NH" + std::to_string(heads) +
           " V" + std::to_string(vocab);
  }
  [[nodiscard]] double parameters_excluding_wpe() const {
    const auto C = static_cast<double>(channels);
    return 12.0 * static_cast<double>(layers) * C * C + static_cast<double>(padded_vocab()) * C;
  }
  [[nodiscard]] double model_flops(std::int64_t context) const {
    const auto T = static_cast<double>(context);
    const auto C = static_cast<double>(channels);
    const auto L = static_cast<double>(layers);
    return 6.0 * T * (12.0 * L * C * C + C * static_cast<double>(padded_vocab())) +
           6.0 * L * C * T * (T + 1.0);
  }
};

/// The attention chunk the model runs with: the host tile size for its head dimension.
std::int64_t chunk_for(const model_shape& m, std::int64_t context) {
  return std::min(context, memo::host_attention_chunk(m.channels / m.heads, memo::mib));
}
constexpr std::int64_t loss_chunk = 64;

memo::gpt2_model_options options_for(const model_shape& m, std::int64_t context) {
  return {.context = context, .loss_chunk = std::min(context, loss_chunk),
          .attention_chunk = chunk_for(m, context)};
}

// ---------------------------------------------------------------- speed

struct timed_context {
  std::int64_t context = 0;
  std::unique_ptr<model_type> model;
  std::vector<std::int32_t> inputs, targets;
  std::size_t predicted_bytes = 0;  // memo: parameter state + activations
  std::size_t peak_bytes = 0;       // the host backend's device peak while it trained
  std::vector<double> seconds, mfu, tokens_per_second;
};

// ---------------------------------------------------------------- memory

/// memo's bytes for a context: a + b T, measured from built models.
struct linear_bytes {
  double a = 0, b = 0;
  [[nodiscard]] double at(std::int64_t t) const { return a + b * static_cast<double>(t); }
};

/// Device bytes (and, through `host`, host bytes) of memo's model at
/// `context`, skeletal tensors and K/V offloaded.
std::size_t memo_bytes_measured(memo::host_backend& backend, const model_shape& m, std::int64_t context,
                                double* host = nullptr) {
  memo::gpt2_model_options options = options_for(m, context);
  options.offload_alpha = 1.0;
  options.kv_offload = true;
  const model_type model(backend, m.config(context), options);
  if (host != nullptr) *host = static_cast<double>(model.host_offload_bytes());
  return model.parameter_state_bytes() + model.activation_bytes();
}

/// The line through two built contexts, checked at a third; the chunks are
/// the same at all three (contexts at least the attention chunk).
linear_bytes memo_line(memo::host_backend& backend, const model_shape& m, std::int64_t base,
                       std::int64_t& checked_at, double& check_error, linear_bytes& host_line) {
  double h1 = 0, h2 = 0;
  const auto b1 = static_cast<double>(memo_bytes_measured(backend, m, base, &h1));
  const auto b2 = static_cast<double>(memo_bytes_measured(backend, m, 2 * base, &h2));
  linear_bytes line;
  line.b = (b2 - b1) / static_cast<double>(base);
  line.a = b1 - line.b * static_cast<double>(base);
  host_line.b = (h2 - h1) / static_cast<double>(base);
  host_line.a = h1 - host_line.b * static_cast<double>(base);
  checked_at = 3 * base;
  check_error = static_cast<double>(memo_bytes_measured(backend, m, checked_at)) - line.at(checked_at);
  return line;
}

/// The unchunked baseline's reserved peak through the caching allocator.
std::uint64_t baseline_reserved_bytes(const model_shape& m, std::int64_t context) {
  const auto T = static_cast<std::uint64_t>(context);
  const auto C = static_cast<std::uint64_t>(m.channels);
  const auto NH = static_cast<std::uint64_t>(m.heads);
  const auto L = static_cast<std::uint64_t>(m.layers);
  const auto Vp = static_cast<std::uint64_t>(m.padded_vocab());
  const std::uint64_t f = sizeof(float);
  memo::caching_allocator_simulator sim;
  std::uint64_t next_id = 0;
  auto take = [&](std::uint64_t bytes) {
    const std::uint64_t id = next_id++;
    sim.malloc(id, bytes);
    return id;
  };
  // Parameter state: llm.c's parameter count with maxT = T, four copies.
  const std::uint64_t params = Vp * C + T * C + L * (12 * C * C + 13 * C) + 2 * C;
  for (int i = 0; i < 4; ++i) (void)take(params * f);
  (void)take(T * 4);  // tokens
  (void)take(T * 4);  // targets
  const std::uint64_t encoded = take(T * C * f);
  struct kept {
    std::vector<std::uint64_t> ids;
  };
  std::vector<kept> layers(L);
  const std::uint64_t scores = NH * T * T * f;
  for (auto& layer : layers) {
    for (const std::uint64_t bytes : {T * C * f, T * f, T * f, 3 * T * C * f}) layer.ids.push_back(take(bytes));
    const std::uint64_t s = take(scores);  // S = Q K^T / sqrt(d), masked
    layer.ids.push_back(take(scores));     // P = softmax(S), kept for the backward
    sim.free(s);
    for (const std::uint64_t bytes : {T * C * f, T * C * f, T * C * f, T * f, T * f, 4 * T * C * f,
                                      4 * T * C * f, T * C * f}) {
      layer.ids.push_back(take(bytes));  // atty, res2, ln2, means, fch, fch_gelu, res3
    }
  }
  const std::uint64_t lnf = take(T * C * f);
  const std::uint64_t lnf_stats = take(2 * T * f);
  const std::uint64_t losses = take(T * f);
  const std::uint64_t dln = take(T * C * f);
  for (std::uint64_t r = 0; r < T; r += loss_chunk) {
    const std::uint64_t logits = take(std::min<std::uint64_t>(loss_chunk, T - r) * Vp * f);
    sim.free(logits);
  }
  std::uint64_t dresidual = take(T * C * f);
  sim.free(dln);
  sim.free(lnf);
  sim.free(lnf_stats);
  for (std::uint64_t l = L; l-- > 0;) {
    // MLP half: dfch_gelu, dfch, dln2; attention half: datty, dP, dS, dqkv, dln1.
    const std::uint64_t dgelu = take(4 * T * C * f);
    const std::uint64_t dfch = take(4 * T * C * f);
    sim.free(dgelu);
    const std::uint64_t dln2 = take(T * C * f);
    sim.free(dfch);
    sim.free(dln2);
    const std::uint64_t datty = take(T * C * f);
    const std::uint64_t dp = take(scores);
    const std::uint64_t ds = take(scores);
    sim.free(dp);
    const std::uint64_t dqkv = take(3 * T * C * f);
    sim.free(ds);
    sim.free(datty);
    const std::uint64_t dln1 = take(T * C * f);
    sim.free(dqkv);
    sim.free(dln1);
    for (const std::uint64_t id : layers[l].ids) sim.free(id);
  }
  sim.free(dresidual);
  sim.free(encoded);
  sim.free(losses);
  return sim.report().reserved_peak_bytes;
}

/// The largest multiple of `step` (<= limit) for which fits(t) holds, or 0;
/// fits must be monotone (true up to some context, false beyond).
template <class Fits>
std::int64_t longest(std::int64_t step, std::int64_t limit, const Fits& fits) {
  std::int64_t lo = 0, hi = limit / step;  // fits(lo * step) assumed (0: nothing), answer in [lo, hi]
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo + 1) / 2;
    if (fits(mid * step)) lo = mid;
    else hi = mid - 1;
  }
  return lo * step;
}

struct memory_case {
  model_shape model;
  std::uint64_t budget = 0;
  std::int64_t memo_context = 0, baseline_context = 0;
  double memo_bytes = 0;                  // at memo_context (the line)
  std::uint64_t baseline_bytes = 0;       // at baseline_context (simulated)
  double memo_bytes_per_token = 0;
  double memo_host_bytes = 0;             // host memory memo's run needs at memo_context (the line)
  std::int64_t checked_at = 0;
  double check_error = 0;
  std::int64_t line_context = 0;  // memo's longest context by the line
  // memo's model built at memo_context (where the machine can hold it): the
  // device bytes it allocated and the pinned host bytes it reserved.
  bool built = false;
  std::string not_built;  // why not, when not
  std::size_t built_bytes = 0;
  double built_host_bytes = 0;
};

/// The longest contexts of `m` within `budget`. With `build`, memo's model
/// is then built at its longest context (its plan, arena, rounding buffers
/// and host K/V allocated, as for training; a step allocates nothing more)
/// and the context is lowered while the built model is over the budget.
memory_case run_memory_case(memo::host_backend& backend, const model_shape& m, std::uint64_t budget,
                            std::int64_t base, bool build) {
  memory_case r;
  r.model = m;
  r.budget = budget;
  linear_bytes host_line;
  const linear_bytes line = memo_line(backend, m, base, r.checked_at, r.check_error, host_line);
  r.memo_bytes_per_token = line.b;
  const std::int64_t step = 256;
  const std::int64_t limit = std::int64_t{1} << 22;  // 4M tokens: T^2 scores stay far from 2^64 bytes
  r.memo_context = longest(step, limit, [&](std::int64_t t) { return line.at(t) <= static_cast<double>(budget); });
  r.line_context = r.memo_context;
  // Built only where the budget and the host memory fit in half of this
  // machine's; a model over the budget lowers the context by the line's
  // bytes per token (whole steps), a few times at most.
  const double machine = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
  if (!build) {
    r.not_built = "not asked";
  } else if (static_cast<double>(budget) + host_line.at(r.memo_context) > machine / 2) {
    r.not_built = "more memory than this machine has";
  } else {
    for (int tries = 0; tries < 4 && r.memo_context > 0 && !r.built; ++tries) {
      r.built_bytes = memo_bytes_measured(backend, m, r.memo_context, &r.built_host_bytes);
      if (r.built_bytes <= budget) {
        r.built = true;
      } else {
        const double over_tokens = static_cast<double>(r.built_bytes - budget) / std::max(line.b, 1.0);
        r.memo_context -= step * std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(over_tokens / step)));
      }
    }
    if (!r.built) {
      r.not_built = "no build within the budget in 4 tries below the line's " + std::to_string(r.line_context) + " tokens";
      r.memo_context = r.line_context;
    }
  }
  r.memo_bytes = line.at(r.memo_context);
  r.memo_host_bytes = host_line.at(r.memo_context);
  r.baseline_context = longest(step, limit, [&](std::int64_t t) { return baseline_reserved_bytes(m, t) <= budget; });
  r.baseline_bytes = r.baseline_context > 0 ? baseline_reserved_bytes(m, r.baseline_context) : 0;
  return r;
}

constexpr const char* usage =
    "usage: train_bench [--quick] [--json] [--min-context N] [--max-context N] [--layers N] [--channels C] "
    "[--heads H]\n"
    "--quick times a 1-layer, 64-channel, 1-head model at 256 and 512 tokens; the other options, in any "
    "order, change that.\n";

int bench_main(int argc, char** argv) {
  bool quick = false;
  bool json = false;
  std::optional<std::int64_t> min_given, max_given, layers, channels, heads;
  memo::command_arguments args(argc, argv);
  // A context: whole attention chunks (256 tokens), at most 2^24.
  auto context = [&] {
    const auto t = args.integer<std::int64_t>(256, std::int64_t{1} << 24);
    if (t % 256 != 0) throw memo::usage_error("a context must be a multiple of 256, got " + std::to_string(t));
    return t;
  };
  // The gpt2_config fields are 32-bit.
  auto count = [&] { return args.integer<std::int64_t>(1, std::numeric_limits<std::int32_t>::max()); };
  while (!args.done()) {
    const std::string_view arg = args.next();
    if (arg == "--quick") quick = true;
    else if (arg == "--json") json = true;
    else if (arg == "--max-context") max_given = context();
    else if (arg == "--min-context") min_given = context();
    else if (arg == "--layers") layers = count();
    else if (arg == "--channels") channels = count();
    else if (arg == "--heads") heads = count();
    else args.unknown();
  }
  model_shape shape = quick ? model_shape{1, 64, 1, 64} : model_shape{};
  shape.layers = layers.value_or(shape.layers);
  shape.channels = channels.value_or(shape.channels);
  shape.heads = heads.value_or(shape.heads);
  const std::int64_t min_context = min_given.value_or(quick ? 256 : 1024);
  const std::int64_t max_context = max_given.value_or(quick ? 512 : 16384);
  if (min_context > max_context) {
    throw memo::usage_error("--min-context " + std::to_string(min_context) + " is above --max-context " +
                            std::to_string(max_context) + ": no context to time");
  }
  if (shape.channels % shape.heads != 0) {
    throw memo::usage_error("--channels " + std::to_string(shape.channels) + " is not a multiple of --heads " +
                            std::to_string(shape.heads));
  }

  {
    memo::host_backend backend;
    auto stream = backend.make_stream("gemm reference");
    const int rounds = 5;

    // Speed: one model per context, all built first.
    std::vector<std::int64_t> contexts;
    for (std::int64_t t = min_context; t <= max_context; t *= 2) contexts.push_back(t);
    std::vector<timed_context> runs;
    for (const std::int64_t t : contexts) {
      timed_context r;
      r.context = t;
      backend.device_memory().reset_peak();
      const std::size_t before = backend.device_memory().current_bytes();
      r.model = std::make_unique<model_type>(backend, shape.config(t), options_for(shape, t));
      r.model->initialize(1);
      r.predicted_bytes = r.model->parameter_state_bytes() + r.model->activation_bytes();
      r.peak_bytes = backend.device_memory().peak_bytes() - before;
      const memo::copy_task task{t, static_cast<std::int32_t>(shape.vocab), 1};
      const std::vector<std::uint16_t> tokens = memo::copy_task_tokens(task, 1);
      r.inputs.assign(tokens.begin(), tokens.end() - 1);
      r.targets.assign(tokens.begin() + 1, tokens.end());
      runs.push_back(std::move(r));
    }
    const memo::ops::adamw_config adamw{.learning_rate = 1e-3, .weight_decay = 0.0};
    for (auto& r : runs) (void)r.model->train_step(r.inputs, r.targets, adamw);  // warm up

    memo_bench::gemm_reference gemm(backend, stream, quick ? 512 : 1024, quick ? 0.02 : 0.1);

    std::vector<double> gemm_rates;
    for (int round = 0; round < rounds; ++round) {
      for (auto& r : runs) {  // interleaved: each context next to its GEMM reference
        const auto start = clock_type::now();
        (void)r.model->train_step(r.inputs, r.targets, adamw);
        const double seconds = seconds_since(start);
        const double rate = gemm.flops_per_second();
        gemm_rates.push_back(rate);
        r.seconds.push_back(seconds);
        r.tokens_per_second.push_back(static_cast<double>(r.context) / seconds);
        r.mfu.push_back(shape.model_flops(r.context) / seconds / rate);
      }
    }
    const memo::spread gemm_summary = memo::spread_of(gemm_rates);

    // Memory: the timed shape in 1 GiB (quick: 64 MiB), the same at GPT-2's
    // depth of 12 layers (both built at memo's longest context), and GPT-2
    // 124M in 80 GiB (its line only: this machine cannot hold 80 GiB).
    std::vector<memory_case> memory;
    memory.push_back(run_memory_case(backend, shape, quick ? 64 * memo::mib : memo::gib, quick ? 512 : 1024, true));
    if (!quick) {
      model_shape deep = shape;
      deep.layers = 12;
      if (shape.layers != deep.layers) memory.push_back(run_memory_case(backend, deep, memo::gib, 1024, true));
      memory.push_back(run_memory_case(backend, model_shape{12, 768, 12, 50257}, 80 * memo::gib, 1024, true));
    }

    if (json) {
      memo::json_writer out;
      out.begin_object()
          .field("bench", "train_bench")
          .field("quick", quick)
          .field("rounds", rounds)
          .field("compute_threads", backend.compute_threads())
          .field("model", shape.name())
          .field("parameters_excluding_wpe", shape.parameters_excluding_wpe())
          .field("gemm_n", gemm.n())
          .field("gemm_gflops_median", gemm_summary.median * 1e-9)
          .field("gemm_gflops_min", gemm_summary.min * 1e-9)
          .field("gemm_gflops_max", gemm_summary.max * 1e-9);
      out.key("speed").begin_array();
      for (const auto& r : runs) {
        const auto s = memo::spread_of(r.seconds);
        const auto m = memo::spread_of(r.mfu);
        const auto tps = memo::spread_of(r.tokens_per_second);
        out.begin_object()
            .field("context", r.context)
            .field("attention_chunk", r.model->attention_chunk())
            .field("model_gflop_per_step", shape.model_flops(r.context) * 1e-9)
            .field("step_seconds_median", s.median)
            .field("step_seconds_min", s.min)
            .field("step_seconds_max", s.max)
            .field("ideal_step_seconds", shape.model_flops(r.context) / gemm_summary.median)
            .field("tokens_per_second_median", tps.median)
            .field("mfu_median", m.median)
            .field("mfu_min", m.min)
            .field("mfu_max", m.max)
            .field("predicted_device_bytes", r.predicted_bytes)
            .field("measured_device_peak_bytes", r.peak_bytes)
            .end_object();
      }
      out.end_array();
      out.key("memory").begin_array();
      for (const auto& c : memory) {
        out.begin_object()
            .field("model", c.model.name())
            .field("budget_bytes", c.budget)
            .field("memo_longest_context", c.memo_context)
            .field("memo_bytes", c.memo_bytes)
            .field("memo_bytes_per_token", c.memo_bytes_per_token)
            .field("memo_host_bytes", c.memo_host_bytes)
            .field("memo_line_checked_at", c.checked_at)
            .field("memo_line_check_error_bytes", c.check_error)
            .field("memo_line_longest_context", c.line_context)
            .field("memo_built_at_longest", c.built)
            .field("memo_not_built_reason", c.built ? std::nullopt : std::optional(c.not_built))
            .field("memo_built_device_bytes", c.built ? std::optional(c.built_bytes) : std::nullopt)
            .field("memo_built_host_bytes", c.built ? std::optional(c.built_host_bytes) : std::nullopt)
            .field("baseline_longest_context", c.baseline_context)
            .field("baseline_reserved_bytes", c.baseline_bytes)
            .field("ratio", c.baseline_context > 0 ? static_cast<double>(c.memo_context) / static_cast<double>(c.baseline_context) : 0.0)
            .end_object();
      }
      out.end_array().end_object();
      std::printf("%s\n", out.str().c_str());
    } else {
      std::printf("GPT-2 %s training on the host backend (%zu threads), batch 1, copy task;\n"
                  "backend.gemm %d^3: %.1f GF/s median [%.1f, %.1f] over %zu runs\n",
                  shape.name().c_str(), backend.compute_threads(), gemm.n(), gemm_summary.median * 1e-9,
                  gemm_summary.min * 1e-9, gemm_summary.max * 1e-9, gemm_rates.size());
      std::printf("MFU = model FLOPs / step time / GEMM rate; median [min, max] of %d interleaved rounds\n", rounds);
      std::printf("%7s %5s %8s  %-20s %9s %9s %10s  %11s %11s\n", "context", "chunk", "GFLOP", "MFU", "step s",
                  "ideal s", "tokens/s", "plan MiB", "peak MiB");
      for (const auto& r : runs) {
        const auto s = memo::spread_of(r.seconds);
        const auto m = memo::spread_of(r.mfu);
        const auto tps = memo::spread_of(r.tokens_per_second);
        std::printf("%7lld %5lld %8.2f  %5.2f [%4.2f, %4.2f]   %9.3f %9.3f %10.0f  %11.2f %11.2f\n",
                    static_cast<long long>(r.context), static_cast<long long>(r.model->attention_chunk()),
                    shape.model_flops(r.context) * 1e-9, m.median, m.min, m.max, s.median,
                    shape.model_flops(r.context) / gemm_summary.median, tps.median,
                    static_cast<double>(r.predicted_bytes) / memo::mib,
                    static_cast<double>(r.peak_bytes) / memo::mib);
      }
      std::printf("\nlongest context within a device-memory budget (multiples of 256 tokens)\n");
      std::printf("%-22s %9s  %-28s %-30s %7s\n", "model", "budget", "memo (chunked, planned, offload)",
                  "unchunked + caching allocator", "ratio");
      for (const auto& c : memory) {
        char memo_col[64], base_col[64];
        std::snprintf(memo_col, sizeof memo_col, "%lld (%.0f MiB)", static_cast<long long>(c.memo_context),
                      c.memo_bytes / memo::mib);
        std::snprintf(base_col, sizeof base_col, "%lld (%.0f MiB)", static_cast<long long>(c.baseline_context),
                      static_cast<double>(c.baseline_bytes) / memo::mib);
        std::printf("%-22s %9s  %-28s %-30s %6.1fx\n", c.model.name().c_str(),
                    memo::format_bytes(c.budget).c_str(), memo_col, base_col,
                    c.baseline_context > 0 ? static_cast<double>(c.memo_context) / static_cast<double>(c.baseline_context) : 0.0);
        std::printf("  memo: %.0f device bytes/token (skeletal tensors and K/V offloaded; host memory at that "
                    "context %.1f GiB), line checked at %lld tokens: off by %.0f bytes\n",
                    c.memo_bytes_per_token, c.memo_host_bytes / memo::gib, static_cast<long long>(c.checked_at),
                    c.check_error);
        if (c.built) {
          std::printf("  memo built at %lld tokens: %.2f MiB of device memory (budget %.2f MiB), %.2f GiB pinned "
                      "host memory\n",
                      static_cast<long long>(c.memo_context), static_cast<double>(c.built_bytes) / memo::mib,
                      static_cast<double>(c.budget) / memo::mib, c.built_host_bytes / memo::gib);
        } else {
          std::printf("  memo not built at %lld tokens (%s): the line's figure\n",
                      static_cast<long long>(c.memo_context), c.not_built.c_str());
        }
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return memo::run_command("train_bench", usage, [&] { return bench_main(argc, argv); });
}
