// bench/swap_bench.cpp
//
// MEMO section 4.1 on the host backend, and projected onto the paper's 7B
// setting. Everything that swaps, plans and predicts is the library's:
// rounding_buffers, host_store, token_fraction_swapper (which walks the same
// step protocol the simulator runs), solve_alpha and simulate_memo_step. The
// bench only supplies a layer to swap and a stopwatch.
//
// Part 1 (measured). A synthetic layer writes MEMO's ten skeletal tensors
// (Figure 5) into the rounding buffers: the layer input, an attention output
// whose cost grows with a causal window over the sequence (so, as at long
// context, attention dominates the layer), and eight token-wise functions of
// those two (recomputable per token). Its backward reads every skeletal
// tensor and costs about twice the forward. The layer's forward is profiled
// as it runs when swapped, then the copy engine is throttled so that
// offloading a whole layer takes 1.5x that forward (a GPU-like ratio of PCIe
// to compute time). Configurations run one step each per round, rounds
// interleaved (at least 5):
//   - no offload (every layer keeps its skeletal tensors on device),
//   - alpha from the LP (equations 1-3, lp_solve),
//   - alpha = 1 (everything offloaded: the LP predicts a stall),
//   - alpha = 0 (input and attention output offloaded, the rest recomputed),
// and each step is reported as median and min-max over rounds, as a ratio to
// the same round's no-offload step, beside the ratio and stall that the
// simulated MEMO step predicts from the layer times measured in the run.
//
// Part 2 (simulated). The 7B GPT of the paper (32 layers, hidden 4096) on 8
// A800-80GB GPUs with TP 4 x CP 2, 16K..1M tokens: alpha from the LP, the
// transfer per layer, host memory per node and the simulated step's stall.
//
// Part 3 (simulated). FPDT's setting (section 5.1): Llama-3 8B (hidden 4096,
// 32 heads, 8 K/V heads, FFN 14336) on 4 A100s, its attention split over
// the GPUs by heads (Ulysses; here tensor_parallel 4, which splits the
// attention the same way) and keeping Q, K and V on the host, read back in
// chunks of 16K, 6K or 4K tokens, on the a100x4 cluster profile's effective
// host link (project/cluster_profile.hpp). Alpha from MEMO's rows (2)-(3)
// alone and with the backward row (4), and the simulated step's stalls at
// each, forward and backward. With grouped K/V the backward reads queries
// per chunk pair while the forward reads only the smaller K/V, so small
// chunks make (4) bind, or leave no alpha at which the backward keeps up.
//
// --json prints one JSON object (memo::json_writer); --quick runs in seconds.
#include "memo/core/config.hpp"

#if !MEMO_HAS_LPSOLVE
#include <cstdio>
int main() {
  std::fprintf(stderr, "swap_bench needs the memo::lpsolve component (lp_solve was not found)\n");
  return 1;
}
#else

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "memo/backend/buffer.hpp"
#include "memo/backend/host_backend.hpp"
#include "memo/core/command_line.hpp"
#include "memo/core/device_profile.hpp"
#include "memo/core/json.hpp"
#include "memo/core/spread.hpp"
#include "memo/project/cluster_profile.hpp"
#include "memo/schedule/layer_cost.hpp"
#include "memo/schedule/memo_step.hpp"
#include "memo/swap/alpha_solver.hpp"
#include "memo/swap/host_store.hpp"
#include "memo/swap/rounding_buffers.hpp"
#include "memo/swap/token_fraction_swapper.hpp"

namespace {

using memo::host_backend;
using memo::spread;
using memo::spread_of;
using clock_type = std::chrono::steady_clock;

double since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}


struct bench_shape {
  int layers = 8;
  int tokens = 4096;
  int hidden = 32;
  int window = 512;  // causal attention window: the non-token-wise cost
  int rounds = 6;    // measured rounds after one warm-up round
};

// Skeletal tensors of one layer, [tokens, width floats] each: input and
// attention output whole, the rest token-wise functions of those two.
constexpr std::size_t kInput = 0;
constexpr std::size_t kAttention = 1;
memo::skeletal_layout synthetic_layout(const bench_shape& shape) {
  const auto s = static_cast<std::size_t>(shape.tokens);
  const auto h = static_cast<std::size_t>(shape.hidden) * sizeof(float);
  using memo::skeletal_policy;
  return memo::skeletal_layout({
      {"input", s, h, skeletal_policy::offload_whole},
      {"attention_output", s, h, skeletal_policy::offload_whole},
      {"input_norm", s, h, skeletal_policy::offload_fraction},
      {"q", s, h, skeletal_policy::offload_fraction},
      {"k", s, h, skeletal_policy::offload_fraction},
      {"v", s, h, skeletal_policy::offload_fraction},
      {"residual", s, h, skeletal_policy::offload_fraction},
      {"mlp_input_norm", s, h, skeletal_policy::offload_fraction},
      {"fc1_output", s, 4 * h, skeletal_policy::offload_fraction},
      {"activation_output", s, 4 * h, skeletal_policy::offload_fraction},
  });
}

// The synthetic layer. Its state (the hidden activations passed between
// layers and a gradient) lives in the backend's device memory, so the
// backend's peak counts it.
class synthetic_layer {
 public:
  synthetic_layer(host_backend& backend, const bench_shape& shape)
      : s_(static_cast<std::size_t>(shape.tokens)), h_(static_cast<std::size_t>(shape.hidden)),
        window_(static_cast<std::size_t>(shape.window)),
        hidden_(backend.device_memory(), s_ * h_), grad_(backend.device_memory(), s_ * h_) {}

  void reset_input() {
    for (std::size_t i = 0; i < s_ * h_; ++i) hidden_.data()[i] = std::sin(0.01f * static_cast<float>(i));
    std::fill(grad_.span().begin(), grad_.span().end(), 0.0f);
  }

  void forward(const memo::skeletal_views& v) {
    float* input = v[kInput].as<float>();
    float* attention = v[kAttention].as<float>();
    std::copy(hidden_.data(), hidden_.data() + s_ * h_, input);
    window_mix(input, attention);
    tokenwise(v, 0, s_);
    // The layer output (not skeletal) feeds the next layer.
    for (std::size_t i = 0; i < s_ * h_; ++i) hidden_.data()[i] = 0.5f * (input[i] + attention[i]);
  }

  void recompute(const memo::recompute_request& request) const {
    for (const auto& item : request.items) tokenwise_tensor(request.views, item.tensor, item.tokens.begin, item.tokens.end);
  }

  void backward(const memo::skeletal_views& v) {
    // Reads every skeletal tensor, and mixes the gradient back over the
    // window twice (about twice the forward's attention cost).
    float sum = 0.0f;
    for (std::size_t t = 2; t < v.size(); ++t) {
      const float* data = v[t].as<float>();
      for (std::size_t i = 0; i < v[t].bytes() / sizeof(float); ++i) sum += data[i];
    }
    // Three passes of the forward's windowed mixing (the gradients of the
    // attention output and of the input): about twice the forward, whose
    // token-wise part is a third of it.
    window_mix(v[kAttention].as<float>(), grad_.data());
    window_mix(v[kInput].as<float>(), grad_.data());
    window_mix(v[kAttention].as<float>(), grad_.data());
    grad_.data()[0] += 1e-12f * sum;
  }

  [[nodiscard]] std::uint64_t state_bytes() const { return hidden_.size_bytes() + grad_.size_bytes(); }

 private:
  // out[t] = mean over the causal window u in (t - window, t] of
  // in[u] * in[u] (elementwise): O(s window h), not token-wise.
  void window_mix(const float* in, float* out) const {
    for (std::size_t t = 0; t < s_; ++t) {
      float* o = out + t * h_;
      std::fill(o, o + h_, 0.0f);
      const std::size_t first = t >= window_ ? t - window_ + 1 : 0;
      for (std::size_t u = first; u <= t; ++u) {
        const float* row = in + u * h_;
        for (std::size_t j = 0; j < h_; ++j) o[j] += row[j] * row[j];
      }
      const float scale = 1.0f / static_cast<float>(t - first + 1);
      for (std::size_t j = 0; j < h_; ++j) o[j] *= scale;
    }
  }

  // Tensor t (>= 2) of tokens [begin, end) from the input and the attention output.
  static void tokenwise_tensor(const memo::skeletal_views& v, std::size_t t, std::size_t begin, std::size_t end) {
    const std::size_t h = v[kInput].bytes_per_token / sizeof(float);
    const std::size_t width = v[t].bytes_per_token / sizeof(float);
    for (std::size_t token = begin; token < end; ++token) {
      const float* x = v[kInput].as<float>() + token * h;
      const float* a = v[kAttention].as<float>() + token * h;
      float* out = v[t].as<float>() + token * width;
      for (std::size_t j = 0; j < width; ++j) {
        const float z = x[j % h] * static_cast<float>(t) + a[(j * 7) % h];
        out[j] = z / (1.0f + std::fabs(z));
      }
    }
  }
  void tokenwise(const memo::skeletal_views& v, std::size_t begin, std::size_t end) const {
    for (std::size_t t = 2; t < v.size(); ++t) tokenwise_tensor(v, t, begin, end);
  }

  std::size_t s_, h_, window_;
  memo::buffer<float, memo::host_memory_resource> hidden_;  // [s, h]
  memo::buffer<float, memo::host_memory_resource> grad_;    // [s, h]
};

// One configuration: its own backend (throttle and accounting), layer,
// rounding buffers, host store and swapper.
struct config_run {
  std::string name;
  double alpha;
  std::unique_ptr<host_backend> backend;
  std::optional<host_backend::stream> compute;
  std::unique_ptr<synthetic_layer> layer;
  std::unique_ptr<memo::rounding_buffers<host_backend>> buffers;
  std::unique_ptr<memo::host_store<host_backend>> store;
  std::unique_ptr<memo::token_fraction_swapper<host_backend>> swapper;
  std::uint64_t planned_device_bytes = 0;
  // Per measured round.
  std::vector<double> step_s, stall_s, forward_s, backward_s, recompute_s;
  // Written by compute-stream tasks, read after synchronize.
  double busy_forward = 0, busy_backward = 0, busy_recompute = 0;
  int recompute_calls = 0;

  config_run(std::string label, const bench_shape& shape, double a, std::size_t k, std::size_t resident,
             double bandwidth)
      : name(std::move(label)), alpha(a) {
    host_backend::options options;
    options.device_to_host_bytes_per_second = bandwidth;
    options.host_to_device_bytes_per_second = bandwidth;
    backend = std::make_unique<host_backend>(options);
    compute.emplace(backend->make_stream("compute"));
    layer = std::make_unique<synthetic_layer>(*backend, shape);
    const memo::offload_plan plan(synthetic_layout(shape), alpha, 16);
    buffers = std::make_unique<memo::rounding_buffers<host_backend>>(*backend, plan, k);
    store = std::make_unique<memo::host_store<host_backend>>(*backend, 64 * memo::gib);
    swapper = std::make_unique<memo::token_fraction_swapper<host_backend>>(
        *backend, *compute, *buffers, *store,
        memo::swap_options{.layers = static_cast<std::size_t>(shape.layers), .resident_last_layers = resident});
    planned_device_bytes = layer->state_bytes() + buffers->planned_device_bytes();
  }

  // One step; its compute tasks time themselves.
  void run_step(bool measured) {
    busy_forward = busy_backward = busy_recompute = 0.0;
    recompute_calls = 0;
    const auto start = clock_type::now();
    auto* l = layer.get();
    backend->enqueue(*compute, [l] { l->reset_input(); });
    const std::size_t n = swapper->layers();
    for (std::size_t i = 0; i < n; ++i) {
      const auto views = swapper->begin_forward(i);
      backend->enqueue(*compute, [this, l, views] {
        const auto t0 = clock_type::now();
        l->forward(views);
        busy_forward += since(t0);
      });
      swapper->end_forward(i);
    }
    auto recompute = [this, l](host_backend::native_stream, const memo::recompute_request& request) {
      const auto t0 = clock_type::now();
      l->recompute(request);
      busy_recompute += since(t0);
      ++recompute_calls;
    };
    for (std::size_t i = n; i-- > 0;) {
      const auto views = swapper->begin_backward(i, recompute);
      backend->enqueue(*compute, [this, l, views] {
        const auto t0 = clock_type::now();
        l->backward(views);
        busy_backward += since(t0);
      });
      swapper->end_backward(i);
    }
    swapper->synchronize();
    if (!measured) return;
    const double seconds = since(start);
    step_s.push_back(seconds);
    // What the compute stream did not spend computing, it spent waiting.
    stall_s.push_back(seconds - busy_forward - busy_backward - busy_recompute);
    forward_s.push_back(busy_forward / static_cast<double>(n));
    backward_s.push_back(busy_backward / static_cast<double>(n));
    if (recompute_calls > 0) recompute_s.push_back(busy_recompute / recompute_calls);
  }
};

void write_spread(memo::json_writer& json, std::string_view key, spread s, double scale = 1.0) {
  json.key(key).begin_object();
  json.field("median", s.median * scale).field("min", s.min * scale).field("max", s.max * scale);
  json.end_object();
}

constexpr const char* usage =
    "usage: swap_bench [--json] [--quick] [--layers N] [--tokens N] [--hidden N] [--window N] [--rounds N]\n"
    "--quick runs 5 layers of 1024 tokens, hidden 32, window 256, in 5 rounds; the other options, in any "
    "order, change that.\n";

/// The shape the command line asks for: --quick's or the default one, then
/// every option given.
bench_shape parse_args(int argc, char** argv, bool& json, bool& quick) {
  memo::command_arguments args(argc, argv);
  memo::shape_options<bench_shape> sizes({{"--layers", &bench_shape::layers},
                                          {"--tokens", &bench_shape::tokens},
                                          {"--hidden", &bench_shape::hidden},
                                          {"--window", &bench_shape::window},
                                          {"--rounds", &bench_shape::rounds}},
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
  const bench_shape shape = sizes.applied(quick ? bench_shape{5, 1024, 32, 256, 5} : bench_shape{});
  if (shape.layers < 3) throw memo::usage_error("--layers must be at least 3 (two are never swapped)");
  if (shape.rounds < 5) throw memo::usage_error("--rounds must be at least 5");
  return shape;
}

}  // namespace

int bench_main(int argc, char** argv) {
  bool json = false;
  bool quick = false;
  const bench_shape shape = parse_args(argc, argv, json, quick);
  try {
    const auto n = static_cast<std::size_t>(shape.layers);
    const memo::skeletal_layout layout = synthetic_layout(shape);
    const double layer_bytes = static_cast<double>(layout.layer_bytes());

    // --- 1. profile the layer as it runs when swapped, then throttle ------
    double profiled_forward_s = 0.0;
    {
      config_run profile("profile", shape, 1.0, 2, 2, 0.0);
      for (int step = 0; step < 3; ++step) profile.run_step(step > 0);
      profiled_forward_s = spread_of(profile.forward_s).median;
    }
    const double bandwidth = layer_bytes / (1.5 * profiled_forward_s);

    memo::alpha_problem problem;
    problem.input_bytes = layout[kInput].bytes();
    problem.attention_output_bytes = layout[kAttention].bytes();
    problem.other_bytes = layout.layer_bytes() - problem.input_bytes - problem.attention_output_bytes;
    problem.bandwidth_bytes_per_second = bandwidth;
    problem.layer_forward_seconds = profiled_forward_s;
    problem.layers = shape.layers;
    problem.resident_last_layers = 2;
    problem.host_budget_bytes = 64 * memo::gib;
    const auto lp = memo::solve_alpha(problem);

    // --- 2. the configurations, rounds interleaved ------------------------
    std::vector<std::unique_ptr<config_run>> runs;
    runs.push_back(std::make_unique<config_run>("no offload", shape, 1.0, n, n, 0.0));
    runs.push_back(std::make_unique<config_run>("alpha from LP", shape, lp.alpha, 2, 2, bandwidth));
    runs.push_back(std::make_unique<config_run>("alpha = 1", shape, 1.0, 2, 2, bandwidth));
    runs.push_back(std::make_unique<config_run>("alpha = 0", shape, 0.0, 2, 2, bandwidth));
    for (int round = 0; round <= shape.rounds; ++round) {
      for (auto& run : runs) run->run_step(round > 0);  // round 0 warms up
    }

    // The prediction: the simulated MEMO step from the layer times of this
    // run (forward/backward of the no-offload model, recompute of alpha = 0).
    const double run_forward_s = spread_of(runs[0]->forward_s).median;
    const double run_backward_s = spread_of(runs[0]->backward_s).median;
    const double run_recompute_s = spread_of(runs[3]->recompute_s).median;
    memo::device_profile host;
    host.name = "host (measured layer)";
    host.peak_flops = 1e12;  // unused: every compute op has a measured duration
    host.efficiency = 1.0;
    host.device_to_host_bytes_per_second = bandwidth;
    host.host_to_device_bytes_per_second = bandwidth;
    auto predict = [&](double alpha) {
      memo::memo_step_config config;
      config.layers = shape.layers;
      config.alpha = alpha;
      config.layer_forward_seconds = run_forward_s;
      config.layer_backward_seconds = run_backward_s;
      config.recompute_seconds = run_recompute_s;
      config.input_bytes = layout[kInput].bytes();
      config.attention_output_bytes = layout[kAttention].bytes();
      config.other_bytes = static_cast<std::uint64_t>(problem.other_bytes);
      return memo::simulate_memo_step(config, host);
    };

    // --- 3. the paper's 7B setting on the A800 preset ---------------------
    const auto a800 = memo::device_profile::a800_80gb();

    // --- output -------------------------------------------------------------
    memo::json_writer out;
    out.begin_object().field("bench", "swap_bench").field("quick", quick);
    out.key("shape").begin_object().field("layers", shape.layers).field("tokens", shape.tokens);
    out.field("hidden", shape.hidden).field("window", shape.window).field("rounds", shape.rounds).end_object();
    double load_average = -1.0;
    if (getloadavg(&load_average, 1) != 1) load_average = -1.0;
    out.field("load_average", load_average);
    out.key("layer").begin_object().field("profiled_forward_ms", profiled_forward_s * 1e3);
    out.field("run_forward_ms", run_forward_s * 1e3).field("run_backward_ms", run_backward_s * 1e3);
    out.field("run_recompute_all_ms", run_recompute_s * 1e3).field("skeletal_bytes", layout.layer_bytes());
    out.field("bandwidth_bytes_per_second", bandwidth);
    out.field("whole_offload_to_forward", layer_bytes / bandwidth / run_forward_s).end_object();
    out.key("lp").begin_object().field("alpha", lp.alpha).field("binding", memo::to_string(lp.binding)).end_object();

    if (!json) {
      std::printf("swap_bench: synthetic layer, %d layers x %d tokens x hidden %d, window %d (fp32)\n",
                  shape.layers, shape.tokens, shape.hidden, shape.window);
      std::printf("  layer forward %.2f ms profiled, %.2f ms in the run; backward %.2f ms; full recompute %.2f ms\n",
                  profiled_forward_s * 1e3, run_forward_s * 1e3, run_backward_s * 1e3, run_recompute_s * 1e3);
      std::printf("  skeletal bytes per layer %s; copies throttled to %.1f MB/s (whole offload = %.2fx forward)\n",
                  memo::format_bytes(layout.layer_bytes()).c_str(), bandwidth / 1e6,
                  layer_bytes / bandwidth / run_forward_s);
      std::printf("  LP (eq. 1-3): alpha = %.4f, bound by %s\n\n", lp.alpha, memo::to_string(lp.binding));
      std::printf("  %-14s %7s %22s %20s %9s %9s %10s %11s %11s\n", "config", "alpha", "step ms med [min-max]",
                  "ratio med [min-max]", "predicted", "stall ms", "pred stall", "device peak", "planned");
    }
    out.key("measured").begin_array();
    for (const auto& run : runs) {
      std::vector<double> ratios;
      for (std::size_t r = 0; r < run->step_s.size(); ++r) ratios.push_back(run->step_s[r] / runs[0]->step_s[r]);
      const auto step = spread_of(run->step_s);
      const auto ratio = spread_of(ratios);
      const auto stall = spread_of(run->stall_s);
      const bool offloads = run.get() != runs[0].get();
      std::optional<memo::memo_step_projection> projection;
      if (offloads) projection = predict(run->alpha);
      const double predicted_ratio = projection ? projection->slowdown() : 1.0;
      const double predicted_stall = projection ? projection->compute_stall_seconds : 0.0;
      const auto peak = run->backend->device_memory().peak_bytes();
      out.begin_object().field("config", run->name).field("alpha", run->alpha);
      write_spread(out, "step_ms", step, 1e3);
      write_spread(out, "ratio", ratio);
      out.field("predicted_ratio", predicted_ratio);
      write_spread(out, "stall_ms", stall, 1e3);
      out.field("predicted_stall_ms", predicted_stall * 1e3);
      out.field("device_peak_bytes", peak).field("planned_device_bytes", run->planned_device_bytes).end_object();
      if (!json) {
        std::printf("  %-14s %7.4f %8.1f [%5.1f-%5.1f] %8.3f [%.3f-%.3f] %9.3f %9.1f %10.1f %11s %11s\n",
                    run->name.c_str(), run->alpha, step.median * 1e3, step.min * 1e3, step.max * 1e3, ratio.median,
                    ratio.min, ratio.max, predicted_ratio, stall.median * 1e3, predicted_stall * 1e3,
                    memo::format_bytes(peak).c_str(), memo::format_bytes(run->planned_device_bytes).c_str());
      }
    }
    out.end_array();
    if (!json) {
      std::printf("  (%d interleaved rounds; ratio = each round's step over the same round's no-offload step;\n"
                  "   predicted = simulated MEMO step from the in-run layer times; stall = step - compute busy;\n"
                  "   load average %.2f)\n\n",
                  shape.rounds, load_average);
      std::printf("7B GPT (32 layers, hidden 4096), 8 x A800-80GB, TP 4 x CP 2, per GPU; host memory per node:\n");
      std::printf("  %7s %7s %-34s %9s %9s %10s %10s %10s\n", "tokens", "alpha", "binding", "fwd ms", "xfer ms",
                  "host GiB", "stall ms", "stall(a=1)");
    }
    out.key("projection_7b_a800").begin_array();
    for (const long k_tokens : {16L, 32L, 64L, 128L, 256L, 512L, 1024L}) {
      memo::transformer_layer gpt;
      gpt.hidden = 4096;
      gpt.heads = 32;
      gpt.tokens = k_tokens * 1024;
      gpt.tensor_parallel = 4;
      gpt.context_parallel = 2;
      const auto cost = memo::gpt_layer_cost_of(gpt);
      const auto p = memo::alpha_problem::from_layer_cost(cost, a800, 32);
      auto simulate = [&](double alpha) {
        return memo::simulate_memo_step(memo::memo_step_config::from_layer_cost(cost, 32, alpha), a800);
      };
      const double stall_alpha1 = simulate(1.0).compute_stall_seconds;
      out.begin_object().field("tokens", gpt.tokens).field("layer_forward_ms", p.layer_forward_seconds * 1e3);
      out.field("stall_alpha1_ms", stall_alpha1 * 1e3);
      try {
        const auto solution = memo::solve_alpha(p);
        const double stall = simulate(solution.alpha).compute_stall_seconds;
        const double host_gib = solution.host_bytes * a800.gpus_per_node / memo::gib;
        out.field("feasible", true).field("alpha", solution.alpha).field("binding", memo::to_string(solution.binding));
        out.field("transfer_ms", solution.transfer_seconds * 1e3).field("host_gib_per_node", host_gib);
        out.field("stall_ms", stall * 1e3);
        if (!json) {
          std::printf("  %6ldK %7.4f %-34s %9.1f %9.1f %10.1f %10.1f %10.1f\n", k_tokens, solution.alpha,
                      memo::to_string(solution.binding), p.layer_forward_seconds * 1e3,
                      solution.transfer_seconds * 1e3, host_gib, stall * 1e3, stall_alpha1 * 1e3);
        }
      } catch (const memo::error& e) {
        out.field("feasible", false).field("note", e.message());
        if (!json) std::printf("  %6ldK infeasible: %s\n", k_tokens, e.message().c_str());
      }
      out.end_object();
    }
    out.end_array();

    const memo::device_profile link = memo::project::load_cluster_profile("a100x4").device();
    if (!json) {
      std::printf("\nLlama-3 8B with FPDT attention (Q, K, V on the host), 4 GPUs split by heads, %s at\n"
                  "its effective %.0f GB/s host link; alpha from rows (2)-(3) alone and with (4), and the\n"
                  "simulated step's stall (forward + backward, ms) at each:\n",
                  link.name.c_str(), link.host_to_device_bytes_per_second / 1e9);
      std::printf("  %7s %6s %8s %8s | %7s %12s | %7s %12s  %s\n", "tokens", "chunk", "fwd ms", "bwd ms", "alpha",
                  "stall ms", "alpha", "stall ms", "binding with (4)");
    }
    out.key("projection_8b_fpdt").begin_array();
    struct setting {
      long k_tokens, k_chunk;
    };
    for (const auto [k_tokens, k_chunk] : {setting{64, 16}, setting{64, 4}, setting{128, 16}, setting{128, 6},
                                           setting{128, 4}, setting{256, 16}, setting{256, 6}, setting{512, 16}}) {
      memo::transformer_layer gpt;
      gpt.hidden = 4096;
      gpt.heads = 32;
      gpt.kv_heads = 8;
      gpt.ffn_hidden = 14336;
      gpt.tokens = k_tokens * 1024;
      gpt.tensor_parallel = 4;
      gpt.attention_keeps_qkv = true;
      gpt.attention_chunk = k_chunk * 1024;
      const auto cost = memo::gpt_layer_cost_of(gpt);
      const auto with_row = memo::alpha_problem::from_layer_cost(cost, link, 32);
      auto memo_rows = with_row;  // MEMO's LP: no backward row
      memo_rows.layer_backward_seconds = 0.0;
      memo_rows.attention_fetch_bytes = 0;
      out.begin_object().field("tokens", gpt.tokens).field("attention_chunk", gpt.attention_chunk);
      out.field("layer_forward_ms", with_row.layer_forward_seconds * 1e3);
      out.field("layer_backward_ms", with_row.layer_backward_seconds * 1e3);
      out.field("attention_backward_fetch_bytes", cost.attention_backward_fetch_bytes);
      std::string text;
      char cell[160];
      std::snprintf(cell, sizeof cell, "  %6ldK %5ldK %8.1f %8.1f", k_tokens, k_chunk,
                    with_row.layer_forward_seconds * 1e3, with_row.layer_backward_seconds * 1e3);
      text += cell;
      for (const bool full : {false, true}) {
        out.key(full ? "with_backward_row" : "memo_rows").begin_object();
        try {
          const auto solution = memo::solve_alpha(full ? with_row : memo_rows);
          const auto step =
              memo::simulate_memo_step(memo::memo_step_config::from_layer_cost(cost, 32, solution.alpha), link);
          out.field("feasible", true).field("alpha", solution.alpha);
          out.field("binding", memo::to_string(solution.binding));
          out.field("forward_stall_ms", step.forward_stall_seconds * 1e3);
          out.field("backward_stall_ms", step.backward_stall_seconds * 1e3);
          std::snprintf(cell, sizeof cell, " | %7.4f %5.0f+%-6.0f", solution.alpha, step.forward_stall_seconds * 1e3,
                        step.backward_stall_seconds * 1e3);
          text += cell;
          if (full) text += std::string("  ") + memo::to_string(solution.binding);
        } catch (const memo::error& e) {
          out.field("feasible", false).field("note", e.message());
          text += " | infeasible (see --json)";
        }
        out.end_object();
      }
      out.end_object();
      if (!json) std::printf("%s\n", text.c_str());
    }
    out.end_array().end_object();
    if (json) std::printf("%s\n", out.str().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "swap_bench: %s\n", e.what());
    return 1;
  }
}


int main(int argc, char** argv) {
  return memo::run_command("swap_bench", usage, [&] { return bench_main(argc, argv); });
}

#endif  // MEMO_HAS_LPSOLVE
