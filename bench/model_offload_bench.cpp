// bench/model_offload_bench.cpp
//
// MEMO section 4.1 on the real model: the reference GPT-2 (gpt2_model.hpp)
// offloading its skeletal tensors through the token-fraction swapper on the
// host backend, with copies throttled to a GPU-like ratio of link time to
// compute time. Everything that swaps, plans and predicts is the library's
// (gpt2_model, solve_alpha, simulate_memo_step); the bench supplies the
// throttle and a stopwatch.
//
//   1. Profile: a few steps of the model without offload give the layer
//      forward time T_layer = step / (3 L) (a backward costs about two
//      forwards; the head is small against L layers).
//   2. Throttle: both copy directions at the bandwidth that makes offloading
//      a whole layer's skeletal bytes take 1.5 x T_layer, the regime where
//      alpha matters (MEMO eq. 2).
//   3. Configurations, each its own backend and model, the fastest of
//      --steps-per-round steps (3) each per round (other work on a shared
//      machine only slows a step down), rounds interleaved (>= 5 after a
//      warm-up round): no offload,
//      alpha from the LP (eq. 1-3), alpha = 0, alpha = 1. Each step time is
//      reported as a ratio to the same round's no-offload step (median and
//      min-max, core/spread.hpp), beside the ratio the simulated MEMO step
//      predicts from T_layer, the throttle and the model's own protocol.
//   4. Host K/V with and without the prefetch across layers (see
//      kv_prefetch_part): the step time of each, interleaved, and their
//      ratio beside the closed form's (each layer's first fetch hidden).
//
// --json prints one JSON object (memo::json_writer); --quick runs in seconds.
#include "memo/core/config.hpp"

#if !MEMO_HAS_LPSOLVE
#include <cstdio>
int main() {
  std::fprintf(stderr, "model_offload_bench needs the memo::lpsolve component (lp_solve was not found)\n");
  return 1;
}
#else

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "memo/backend/host_backend.hpp"
#include "memo/core/command_line.hpp"
#include "memo/core/device_profile.hpp"
#include "memo/core/json.hpp"
#include "memo/core/spread.hpp"
#include "memo/core/text.hpp"
#include "memo/model/gpt2_memory.hpp"
#include "memo/model/gpt2_model.hpp"
#include "memo/schedule/layer_cost.hpp"
#include "memo/schedule/memo_step.hpp"
#include "memo/swap/alpha_solver.hpp"

namespace {

using memo::host_backend;
using clock_type = std::chrono::steady_clock;
using model_type = memo::gpt2_model<host_backend>;

// A context of 2048 with 64 channels: attention is most of a layer's
// forward, as at the long contexts memo is for (attention grows with T^2 C,
// the token-wise GEMMs that recompute redoes with T C^2). At 512 tokens the
// token-wise part, run as small GEMMs, dominates instead.
struct bench_shape {
  int layers = 6, context = 2048, channels = 64, heads = 4, rounds = 7, steps_per_round = 3;
};

memo::gpt2_config config_of(const bench_shape& s) {
  return {s.context, 64, 64, s.layers, s.heads, s.channels};
}

std::vector<std::int32_t> tokens(int n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int32_t> d(0, 63);
  std::vector<std::int32_t> t(static_cast<std::size_t>(n));
  for (auto& v : t) v = d(rng);
  return t;
}

// One configuration: its own (throttled) backend and model.
struct config_run {
  std::string name;
  std::optional<double> alpha;
  std::unique_ptr<host_backend> backend;
  std::unique_ptr<model_type> model;
  std::vector<double> step_s;

  config_run(std::string label, const bench_shape& shape, std::optional<double> a, double bandwidth)
      : config_run(std::move(label), shape, memo::gpt2_model_options{.context = shape.context, .offload_alpha = a},
                   bandwidth) {}
  config_run(std::string label, const bench_shape& shape, const memo::gpt2_model_options& options, double bandwidth)
      : name(std::move(label)), alpha(options.offload_alpha) {
    host_backend::options link;
    link.device_to_host_bytes_per_second = bandwidth;
    link.host_to_device_bytes_per_second = bandwidth;
    backend = std::make_unique<host_backend>(link);
    model = std::make_unique<model_type>(*backend, config_of(shape), options);
    model->initialize(1);
  }

  // The fastest of `steps` steps (a burst of other work on the machine only
  // ever slows a step down), recorded when `measured`.
  void step(const std::vector<std::int32_t>& in, const std::vector<std::int32_t>& tg, int steps, bool measured) {
    double fastest = 0.0;
    for (int k = 0; k < steps; ++k) {
      const auto start = clock_type::now();
      (void)model->forward_backward(in, tg);
      const double seconds = std::chrono::duration<double>(clock_type::now() - start).count();
      fastest = k == 0 ? seconds : std::min(fastest, seconds);
    }
    if (measured) step_s.push_back(fastest);
  }
};

void write_spread(memo::json_writer& json, std::string_view key, memo::spread s, double scale = 1.0) {
  json.key(key).begin_object();
  json.field("median", s.median * scale).field("min", s.min * scale).field("max", s.max * scale);
  json.end_object();
}

// Part 2: host K/V (FPDT's host-resident Q/K/V, no skeletal offload),
// with and without the prefetch across layers. A context of four attention
// chunks, so a layer's first backward fetch (its K/V chunk 0 and query
// chunk 0) is a sizeable part of its fetches; copies throttled so that a
// layer's backward fetches take half its backward (FPDT's regime: they
// hide behind the attention inside a call). Prediction: each layer's first
// fetch, which without the prefetch the compute waits for, is hidden, so
// the step shortens by L x (first fetch bytes / bandwidth).
struct kv_prefetch_result {
  std::int64_t attention_chunk = 0;
  double bandwidth = 0.0, first_fetch_bytes = 0.0, predicted_ratio = 0.0;
  memo::spread across, per_call, ratio;
};

kv_prefetch_result kv_prefetch_part(const bench_shape& shape, const std::vector<std::int32_t>& in,
                                    const std::vector<std::int32_t>& tg) {
  kv_prefetch_result r;
  r.attention_chunk = std::max(1, shape.context / 4);
  const memo::gpt2_model_options across{.context = shape.context, .attention_chunk = r.attention_chunk,
                                        .kv_offload = true};
  memo::gpt2_model_options per_call = across;
  per_call.kv_prefetch_across_layers = false;
  // Profile unthrottled: a layer's backward is about 2/3 of step / L.
  double layer_backward_s = 0.0;
  {
    config_run profile("profile", shape, across, 0.0);
    for (int s = 0; s < 4; ++s) profile.step(in, tg, 1, s > 0);
    layer_backward_s = memo::spread_of(profile.step_s).median * 2.0 / (3.0 * shape.layers);
  }
  const memo::gpt2_config config = config_of(shape);
  const memo::transformer_layer layer =
      memo::gpt2_transformer_layer(config, shape.context, memo::gpt2_qkv_skeletal::dropped, r.attention_chunk);
  r.bandwidth = static_cast<double>(layer.attention_fetch_bytes(true)) / (0.5 * layer_backward_s);
  // K and V of chunk 0 and the first query chunk: [chunk, C] each, fp32.
  const auto tile = std::min<std::int64_t>(r.attention_chunk, shape.context);
  r.first_fetch_bytes = 3.0 * static_cast<double>(tile) * config.channels * sizeof(float);
  std::vector<std::unique_ptr<config_run>> runs;
  runs.push_back(std::make_unique<config_run>("across layers", shape, across, r.bandwidth));
  runs.push_back(std::make_unique<config_run>("per call", shape, per_call, r.bandwidth));
  for (int round = 0; round <= shape.rounds; ++round) {
    for (auto& run : runs) run->step(in, tg, shape.steps_per_round, round > 0);  // round 0 warms up
  }
  std::vector<double> ratios;
  for (std::size_t k = 0; k < runs[0]->step_s.size(); ++k) ratios.push_back(runs[0]->step_s[k] / runs[1]->step_s[k]);
  r.across = memo::spread_of(runs[0]->step_s);
  r.per_call = memo::spread_of(runs[1]->step_s);
  r.ratio = memo::spread_of(ratios);
  r.predicted_ratio = 1.0 - shape.layers * (r.first_fetch_bytes / r.bandwidth) / r.per_call.median;
  return r;
}

constexpr const char* usage =
    "usage: model_offload_bench [--json] [--quick] [--layers N] [--context N] [--channels N] [--heads N] "
    "[--rounds N] [--steps-per-round N]\n"
    "--quick runs a 4-layer model at 128 tokens in 5 rounds of 1 step; the other options, in any order, "
    "change that.\n";

/// The shape the command line asks for: --quick's or the default one, then
/// every option given.
bench_shape parse_args(int argc, char** argv, bool& json, bool& quick) {
  memo::command_arguments args(argc, argv);
  memo::shape_options<bench_shape> sizes({{"--layers", &bench_shape::layers},
                                          {"--context", &bench_shape::context},
                                          {"--channels", &bench_shape::channels},
                                          {"--heads", &bench_shape::heads},
                                          {"--rounds", &bench_shape::rounds},
                                          {"--steps-per-round", &bench_shape::steps_per_round}},
                                         1, 1'000'000);
  while (!args.done()) {
    const std::string_view arg = args.next();
    if (arg == "--json") {
      json = true;
    } else if (arg == "--quick") {
      quick = true;
    } else if (!sizes.read(args, arg)) {
      args.unknown();
    }
  }
  const bench_shape shape = sizes.applied(quick ? bench_shape{4, 128, 32, 2, 5, 1} : bench_shape{});
  if (shape.layers < 3) throw memo::usage_error("--layers must be at least 3 (two are never swapped)");
  if (shape.rounds < 5) throw memo::usage_error("--rounds must be at least 5");
  return shape;
}

}  // namespace

int bench_main(int argc, char** argv) {
  bool json = false;
  bool quick = false;
  const bench_shape shape = parse_args(argc, argv, json, quick);
  {
    const memo::gpt2_config config = config_of(shape);
    config.validate("model_offload_bench");
    const auto in = tokens(shape.context, 1);
    const auto tg = tokens(shape.context, 2);
    const memo::skeletal_layout layout = memo::gpt2_skeletal_layout(config, shape.context);
    const memo::transformer_layer layer = memo::gpt2_transformer_layer(config, shape.context);
    const auto cost = memo::gpt_layer_cost_of(layer);

    // --- 1. profile: the model without offload ------------------------------
    double layer_forward_s = 0.0;
    {
      config_run profile("profile", shape, std::nullopt, 0.0);
      for (int s = 0; s < 4; ++s) profile.step(in, tg, 1, s > 0);
      layer_forward_s = memo::spread_of(profile.step_s).median / (3.0 * shape.layers);
    }
    // --- 2. throttle: a whole layer's offload takes 1.5 x its forward ------
    const double layer_bytes = static_cast<double>(layout.layer_bytes());
    const double bandwidth = layer_bytes / (1.5 * layer_forward_s);
    memo::alpha_problem problem;
    problem.input_bytes = layer.input_bytes();
    problem.attention_output_bytes = layer.attention_output_bytes();
    problem.other_bytes = layer.other_bytes();
    problem.bandwidth_bytes_per_second = bandwidth;
    problem.layer_forward_seconds = layer_forward_s;
    problem.layers = shape.layers;
    problem.host_budget_bytes = 64 * memo::gib;
    const auto lp = memo::solve_alpha(problem);

    // --- 3. the configurations, rounds interleaved ------------------------
    std::vector<std::unique_ptr<config_run>> runs;
    runs.push_back(std::make_unique<config_run>("no offload", shape, std::nullopt, 0.0));
    runs.push_back(std::make_unique<config_run>("alpha from LP", shape, lp.alpha, bandwidth));
    runs.push_back(std::make_unique<config_run>("alpha = 0", shape, 0.0, bandwidth));
    runs.push_back(std::make_unique<config_run>("alpha = 1", shape, 1.0, bandwidth));
    for (int round = 0; round <= shape.rounds; ++round) {
      for (auto& run : runs) run->step(in, tg, shape.steps_per_round, round > 0);  // round 0 warms up
    }

    // The prediction: the simulated MEMO step of the model's own protocol,
    // from the profiled layer time and the throttle.
    memo::device_profile host;
    host.name = "host (profiled model)";
    host.peak_flops = 1e12;  // unused: every compute op has a measured duration
    host.efficiency = 1.0;
    host.device_to_host_bytes_per_second = bandwidth;
    host.host_to_device_bytes_per_second = bandwidth;
    auto predict = [&](const config_run& run) {
      auto step = memo::memo_step_config::from_layer_cost(cost, shape.layers, run.alpha.value_or(1.0));
      const auto& protocol = run.model->swapper().protocol_options();
      step.rounding_buffers = static_cast<int>(protocol.rounding_buffers);
      step.resident_last_layers = static_cast<int>(protocol.resident_last_layers);
      step.protocol = protocol;
      step.layer_forward_seconds = layer_forward_s;
      step.layer_backward_seconds = 2.0 * layer_forward_s;
      step.recompute_seconds = layer_forward_s * cost.recompute_flops / cost.forward_flops;
      return memo::simulate_memo_step(step, host);
    };

    memo::json_writer out;
    out.begin_object().field("bench", "model_offload_bench").field("quick", quick);
    out.key("shape").begin_object().field("layers", shape.layers).field("context", shape.context);
    out.field("channels", shape.channels).field("heads", shape.heads).field("rounds", shape.rounds);
    out.field("steps_per_round", shape.steps_per_round).end_object();
    double load_average = -1.0;
    if (getloadavg(&load_average, 1) != 1) load_average = -1.0;
    out.field("load_average", load_average);
    out.field("layer_forward_ms", layer_forward_s * 1e3).field("skeletal_bytes_per_layer", layout.layer_bytes());
    out.field("bandwidth_bytes_per_second", bandwidth);
    out.key("lp").begin_object().field("alpha", lp.alpha).field("binding", memo::to_string(lp.binding)).end_object();
    if (!json) {
      std::printf("model_offload_bench: GPT-2 %d layers, C %d, %d heads, context %d (fp32, host backend)\n",
                  shape.layers, shape.channels, shape.heads, shape.context);
      std::printf("  layer forward %.2f ms (profiled step / 3L); skeletal bytes per layer %s; copies throttled\n"
                  "  to %.1f MB/s (a whole layer's offload = 1.5x its forward)\n",
                  layer_forward_s * 1e3, memo::format_bytes(layout.layer_bytes()).c_str(), bandwidth / 1e6);
      std::printf("  LP (eq. 1-3): alpha = %.4f, bound by %s\n\n", lp.alpha, memo::to_string(lp.binding));
      std::printf("  %-14s %7s %22s %22s %9s %11s %11s\n", "config", "alpha", "step ms med [min-max]",
                  "ratio med [min-max]", "predicted", "device peak", "planned");
    }
    out.key("measured").begin_array();
    for (const auto& run : runs) {
      std::vector<double> ratios;
      for (std::size_t r = 0; r < run->step_s.size(); ++r) ratios.push_back(run->step_s[r] / runs[0]->step_s[r]);
      const auto step = memo::spread_of(run->step_s);
      const auto ratio = memo::spread_of(ratios);
      const double predicted = run->alpha ? predict(*run).slowdown() : 1.0;
      const auto peak = run->backend->device_memory().peak_bytes();
      const auto planned = run->model->parameter_state_bytes() + run->model->activation_bytes();
      out.begin_object().field("config", run->name);
      out.key("alpha");
      if (run->alpha) {
        out.value(*run->alpha);
      } else {
        out.null();
      }
      write_spread(out, "step_ms", step, 1e3);
      write_spread(out, "ratio", ratio);
      out.field("predicted_ratio", predicted);
      out.field("device_peak_bytes", peak).field("planned_device_bytes", planned).end_object();
      if (!json) {
        std::printf("  %-14s %7s %8.2f [%5.2f-%5.2f] %8.3f [%.3f-%.3f] %9.3f %11s %11s\n", run->name.c_str(),
                    run->alpha ? std::to_string(*run->alpha).substr(0, 6).c_str() : "-", step.median * 1e3,
                    step.min * 1e3, step.max * 1e3, ratio.median, ratio.min, ratio.max, predicted,
                    memo::format_bytes(peak).c_str(), memo::format_bytes(planned).c_str());
      }
    }
    out.end_array();
    const kv_prefetch_result kv = kv_prefetch_part(shape, in, tg);
    out.key("kv_prefetch").begin_object();
    out.field("attention_chunk", kv.attention_chunk).field("bandwidth_bytes_per_second", kv.bandwidth);
    out.field("first_fetch_bytes", kv.first_fetch_bytes);
    write_spread(out, "across_layers_step_ms", kv.across, 1e3);
    write_spread(out, "per_call_step_ms", kv.per_call, 1e3);
    write_spread(out, "ratio", kv.ratio);
    out.field("predicted_ratio", kv.predicted_ratio).end_object();
    out.end_object();
    if (json) {
      std::printf("%s\n", out.str().c_str());
    } else {
      std::printf("  (%d interleaved rounds, the fastest of %d steps each; ratio = each round's step over the\n"
                  "   same round's no-offload step;\n"
                  "   predicted = simulated MEMO step of the model's protocol from the profiled layer time;\n"
                  "   device peak includes the model's setup; load average %.2f)\n",
                  shape.rounds, shape.steps_per_round, load_average);
    }
    if (!json) {
      std::printf("\n  host K/V (no skeletal offload), attention chunk %lld (%d chunks); copies throttled to\n"
                  "  %.1f MB/s (a layer's backward fetches = half its backward); first fetch of a layer %s = %.2f ms\n",
                  static_cast<long long>(kv.attention_chunk), shape.context / static_cast<int>(kv.attention_chunk),
                  kv.bandwidth / 1e6, memo::format_bytes(static_cast<std::uint64_t>(kv.first_fetch_bytes)).c_str(),
                  kv.first_fetch_bytes / kv.bandwidth * 1e3);
      std::printf("  %-24s %22s\n", "prefetch", "step ms med [min-max]");
      std::printf("  %-24s %8.2f [%5.2f-%5.2f]\n", "across layers", kv.across.median * 1e3, kv.across.min * 1e3,
                  kv.across.max * 1e3);
      std::printf("  %-24s %8.2f [%5.2f-%5.2f]\n", "per call (each waits)", kv.per_call.median * 1e3,
                  kv.per_call.min * 1e3, kv.per_call.max * 1e3);
      std::printf("  across / per call: %.3f [%.3f-%.3f], predicted %.3f (L x the first fetch hidden)\n",
                  kv.ratio.median, kv.ratio.min, kv.ratio.max, kv.predicted_ratio);
    }
    return 0;
  }
}

int main(int argc, char** argv) {
  return memo::run_command("model_offload_bench", usage, [&] { return bench_main(argc, argv); });
}

#endif
