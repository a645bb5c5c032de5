// bench/swap_bench.cpp
//
// MEMO section 4.1 on the host backend, and projected onto the paper's 7B
// setting.
//
// Part 1 (measured). A synthetic transformer layer whose compute is real
// fp32 work through Eigen — RMSNorm, QKV, causal softmax attention, output
// projection, MLP with GELU; a backward of about twice the forward FLOPs that
// reads every skeletal tensor — writes its ten skeletal tensors (Figure 5)
// into the rounding buffers. The layer's forward is timed first, then the
// host backend's copy engine is throttled so that offloading a whole layer
// takes 1.5x that forward (a GPU-like ratio of PCIe to compute time). One
// step of an n-layer model is then run, rounds interleaved, with
//   - no offload (every layer's skeletal tensors stay on device),
//   - alpha from the LP (equations 1-3, lp_solve),
//   - alpha = 1 (everything offloaded: the LP predicts a stall),
//   - alpha = 0 (input and attention output offloaded, the rest recomputed),
// and each step time is reported as a ratio to no offload, next to the ratio
// the stream-schedule simulator predicts from the measured layer times, and
// to the device peak (measured by the backend's accounting, and planned).
//
// Part 2 (simulated). The 7B GPT of the paper (32 layers, hidden 4096, 32
// heads) on 8 A800-80GB GPUs with TP 4 x CP 2, for 64K..1M tokens: alpha
// from the LP, the layer's forward time, the per-layer transfer time, the
// host memory per node and the stall of the simulated step.
//
// --json prints one JSON object; --quick runs a small model in seconds.
#include "memo/core/config.hpp"

#if !MEMO_HAS_LPSOLVE
#include <cstdio>
int main() {
  std::fprintf(stderr, "swap_bench needs the memo::lpsolve component (lp_solve was not found)\n");
  return 1;
}
#else

#include <Eigen/Dense>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "memo/backend/buffer.hpp"
#include "memo/backend/host_backend.hpp"
#include "memo/core/device_profile.hpp"
#include "memo/schedule/layer_cost.hpp"
#include "memo/schedule/memo_step.hpp"
#include "memo/swap/alpha_solver.hpp"
#include "memo/swap/host_store.hpp"
#include "memo/swap/rounding_buffers.hpp"
#include "memo/swap/token_fraction_swapper.hpp"

namespace {

using memo::host_backend;
using matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using matrix_map = Eigen::Map<matrix>;
using device_floats = memo::buffer<float, memo::host_memory_resource>;

struct bench_shape {
  int layers = 8;
  int tokens = 3072;  // long-context regime: attention dominates, as in MEMO
  int hidden = 32;
  int rounds = 6;  // measured rounds after one warm-up round
};

memo::skeletal_layout synthetic_layout(const bench_shape& shape) {
  const auto s = static_cast<std::size_t>(shape.tokens);
  const auto h = static_cast<std::size_t>(shape.hidden) * sizeof(float);
  const auto f = 4 * h;
  using memo::skeletal_policy;
  return memo::skeletal_layout({
      {"input", s, h, skeletal_policy::offload_whole},
      {"input_norm", s, h, skeletal_policy::offload_fraction},
      {"q", s, h, skeletal_policy::offload_fraction},
      {"k", s, h, skeletal_policy::offload_fraction},
      {"v", s, h, skeletal_policy::offload_fraction},
      {"attention_output", s, h, skeletal_policy::offload_whole},
      {"residual", s, h, skeletal_policy::offload_fraction},
      {"mlp_input_norm", s, h, skeletal_policy::offload_fraction},
      {"fc1_output", s, f, skeletal_policy::offload_fraction},
      {"activation_output", s, f, skeletal_policy::offload_fraction},
  });
}

enum tensor_index : std::size_t {
  t_input, t_input_norm, t_q, t_k, t_v, t_attention, t_residual, t_mlp_norm, t_fc1, t_act
};

float gelu(float x) { return 0.5f * x * (1.0f + std::tanh(0.7978845608f * (x + 0.044715f * x * x * x))); }
float gelu_grad(float x) {
  const float u = 0.7978845608f * (x + 0.044715f * x * x * x);
  const float t = std::tanh(u);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * 0.7978845608f * (1.0f + 3.0f * 0.044715f * x * x);
}

// One GPT-like layer with weights shared by every layer (the bench measures
// time and memory, not learning). Weights, gradients and transients live in
// the backend's device memory, so its peak counts everything.
class synthetic_model {
 public:
  synthetic_model(host_backend& backend, const bench_shape& shape)
      : s_(shape.tokens), h_(shape.hidden), f_(4 * shape.hidden) {
    auto& device = backend.device_memory();
    const auto hh = static_cast<std::size_t>(h_ * h_);
    const auto hf = static_cast<std::size_t>(h_ * f_);
    for (auto* w : {&wq_, &wk_, &wv_, &wo_, &dwq_, &dwk_, &dwv_, &dwo_}) *w = device_floats(device, hh);
    for (auto* w : {&w1_, &w2_, &dw1_, &dw2_}) *w = device_floats(device, hf);
    const auto sh = static_cast<std::size_t>(s_ * h_);
    const auto ss = static_cast<std::size_t>(s_) * static_cast<std::size_t>(s_);
    for (auto* t : {&hidden_, &grad_, &dres_, &dq_, &dk_, &dv_}) *t = device_floats(device, sh);
    for (auto* t : {&scores_, &dscores_}) *t = device_floats(device, ss);
    for (auto* t : {&dact_}) *t = device_floats(device, static_cast<std::size_t>(s_ * f_));
    std::mt19937 random(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (auto* w : {&wq_, &wk_, &wv_, &wo_}) {
      for (auto& x : w->span()) x = normal(random) / std::sqrt(static_cast<float>(h_));
    }
    for (auto& x : w1_.span()) x = normal(random) / std::sqrt(static_cast<float>(h_));
    for (auto& x : w2_.span()) x = normal(random) / std::sqrt(static_cast<float>(f_));
    reset_input();
  }

  void reset_input() {
    std::mt19937 random(11);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (auto& x : hidden_.span()) x = normal(random);
    for (auto& x : grad_.span()) x = normal(random) * 0.01f;
  }

  // Rebuilds every "other" tensor of tokens [begin, end) from the layer input
  // and the attention output: the token-wise part of the forward.
  void tokenwise(const memo::skeletal_views& v, int begin, int end) const {
    const int rows = end - begin;
    if (rows <= 0) return;
    auto rows_of = [&](std::size_t t, int width) {
      return matrix_map(v[t].as<float>() + static_cast<std::ptrdiff_t>(begin) * width, rows, width);
    };
    auto input = rows_of(t_input, h_);
    auto norm = rows_of(t_input_norm, h_);
    rms_norm(input, norm);
    rows_of(t_q, h_).noalias() = norm * map(wq_, h_, h_);
    rows_of(t_k, h_).noalias() = norm * map(wk_, h_, h_);
    rows_of(t_v, h_).noalias() = norm * map(wv_, h_, h_);
    auto residual = rows_of(t_residual, h_);
    residual = input;
    residual.noalias() += rows_of(t_attention, h_) * map(wo_, h_, h_);
    auto mlp_norm = rows_of(t_mlp_norm, h_);
    rms_norm(residual, mlp_norm);
    auto fc1 = rows_of(t_fc1, f_);
    fc1.noalias() = mlp_norm * map(w1_, h_, f_);
    rows_of(t_act, f_) = fc1.unaryExpr([](float x) { return gelu(x); });
  }

  void forward(const memo::skeletal_views& v) {
    auto input = slice(v, t_input, h_);
    input = map(hidden_, s_, h_);
    tokenwise_part_attention(v);
    tokenwise(v, 0, s_);
    // The layer output (fc2) is not skeletal: it becomes the next input.
    auto hidden = map(hidden_, s_, h_);
    hidden = slice(v, t_residual, h_);
    hidden.noalias() += slice(v, t_act, f_) * map(w2_, f_, h_);
    hidden *= 1.0f / std::max(1.0f, hidden.norm() / std::sqrt(static_cast<float>(hidden.size())));
  }

  void recompute(const memo::recompute_request& request) const {
    if (request.items.empty()) return;
    // Every recomputed tensor shares one token range (one alpha, one layout).
    const auto range = request.items.front().tokens;
    tokenwise(request.views, static_cast<int>(range.begin), static_cast<int>(range.end));
  }

  void backward(const memo::skeletal_views& v) {
    auto g = map(grad_, s_, h_);
    auto dact = map(dact_, s_, f_);
    dact.noalias() = g * map(w2_, f_, h_).transpose();
    map(dw2_, f_, h_).noalias() += slice(v, t_act, f_).transpose() * g;
    dact = dact.cwiseProduct(slice(v, t_fc1, f_).unaryExpr([](float x) { return gelu_grad(x); }));
    auto dres = map(dres_, s_, h_);
    dres = g;
    dres.noalias() += dact * map(w1_, h_, f_).transpose();
    map(dw1_, h_, f_).noalias() += slice(v, t_mlp_norm, h_).transpose() * dact;
    // Attention backward (FlashAttention-style: the probabilities are
    // recomputed from q and k).
    auto dattn = map(dq_, s_, h_);  // reused as scratch until dq is formed
    dattn.noalias() = dres * map(wo_, h_, h_).transpose();
    map(dwo_, h_, h_).noalias() += slice(v, t_attention, h_).transpose() * dres;
    auto p = probabilities(v);
    auto dp = map(dscores_, s_, s_);
    dp.noalias() = dattn * slice(v, t_v, h_).transpose();
    auto dv = map(dv_, s_, h_);
    dv.noalias() = p.transpose() * dattn;
    const Eigen::VectorXf row_dot = dp.cwiseProduct(p).rowwise().sum();
    dp = p.cwiseProduct(dp.colwise() - row_dot);
    const float scale = 1.0f / std::sqrt(static_cast<float>(h_));
    auto dq = map(dq_, s_, h_);
    dq.noalias() = scale * (dp * slice(v, t_k, h_));
    auto dk = map(dk_, s_, h_);
    dk.noalias() = scale * (dp.transpose() * slice(v, t_q, h_));
    const auto norm = slice(v, t_input_norm, h_);
    map(dwq_, h_, h_).noalias() += norm.transpose() * dq;
    map(dwk_, h_, h_).noalias() += norm.transpose() * dk;
    map(dwv_, h_, h_).noalias() += norm.transpose() * dv;
    g = dres;
    g.noalias() += dq * map(wq_, h_, h_).transpose();
    g.noalias() += dk * map(wk_, h_, h_).transpose();
    g.noalias() += dv * map(wv_, h_, h_).transpose();
    g *= 1.0f / std::max(1.0f, g.norm() / std::sqrt(static_cast<float>(g.size())));
  }

  /// Device bytes of weights, gradients and transients.
  [[nodiscard]] std::uint64_t fixed_bytes() const {
    std::uint64_t total = 0;
    for (const auto* b : {&wq_, &wk_, &wv_, &wo_, &w1_, &w2_, &dwq_, &dwk_, &dwv_, &dwo_, &dw1_,
                          &dw2_, &hidden_, &grad_, &dres_, &dq_, &dk_, &dv_, &scores_, &dscores_, &dact_}) {
      total += b->size_bytes();
    }
    return total;
  }

  [[nodiscard]] double forward_flops() const {
    const double s = s_, h = h_, f = f_;
    return s * (2 * h * 3 * h + 2 * h * h + 4 * h * f) + 4 * s * s * h;
  }

 private:
  static matrix_map map(device_floats& b, int rows, int cols) { return matrix_map(b.data(), rows, cols); }
  static matrix_map map(const device_floats& b, int rows, int cols) {
    return matrix_map(const_cast<float*>(b.data()), rows, cols);
  }
  matrix_map slice(const memo::skeletal_views& v, std::size_t t, int width) const {
    return matrix_map(v[t].as<float>(), s_, width);
  }
  static void rms_norm(const matrix_map& in, matrix_map& out) {
    const Eigen::VectorXf inv =
        ((in.cwiseProduct(in).rowwise().sum() / static_cast<float>(in.cols())).array() + 1e-5f).rsqrt();
    out = inv.asDiagonal() * in;
  }
  // softmax(q k^T / sqrt(h)) with a causal mask, into scores_.
  matrix_map probabilities(const memo::skeletal_views& v) {
    auto p = map(scores_, s_, s_);
    p.noalias() = (1.0f / std::sqrt(static_cast<float>(h_))) * (slice(v, t_q, h_) * slice(v, t_k, h_).transpose());
    for (int i = 0; i < s_; ++i) {
      auto row = p.row(i);
      const float top = row.head(i + 1).maxCoeff();
      row.head(i + 1) = (row.head(i + 1).array() - top).exp();
      row.head(i + 1) /= row.head(i + 1).sum();
      row.tail(s_ - i - 1).setZero();
    }
    return p;
  }
  void tokenwise_part_attention(const memo::skeletal_views& v) {
    // q, k, v of every token are needed before attention: the token-wise
    // QKV part runs here for all tokens, then attention, then the rest.
    auto input = slice(v, t_input, h_);
    auto norm = slice(v, t_input_norm, h_);
    rms_norm(input, norm);
    slice(v, t_q, h_).noalias() = norm * map(wq_, h_, h_);
    slice(v, t_k, h_).noalias() = norm * map(wk_, h_, h_);
    slice(v, t_v, h_).noalias() = norm * map(wv_, h_, h_);
    auto p = probabilities(v);
    slice(v, t_attention, h_).noalias() = p * slice(v, t_v, h_);
  }

  int s_, h_, f_;
  device_floats wq_, wk_, wv_, wo_, w1_, w2_;        // [h,h] x 4, [h,f], [f,h]
  device_floats dwq_, dwk_, dwv_, dwo_, dw1_, dw2_;  // gradients, same shapes
  device_floats hidden_, grad_, dres_, dq_, dk_, dv_;  // [s,h]
  device_floats scores_, dscores_;                   // [s,s]
  device_floats dact_;                               // [s,f]
};

// One configuration: its own backend (own throttle and accounting), model,
// rounding buffers, host store and swapper.
struct config_run {
  std::string name;
  double alpha = 1.0;
  std::unique_ptr<host_backend> backend;
  std::optional<host_backend::stream> compute;
  std::unique_ptr<synthetic_model> model;
  std::unique_ptr<memo::rounding_buffers<host_backend>> buffers;
  std::unique_ptr<memo::host_store<host_backend>> store;
  std::unique_ptr<memo::token_fraction_swapper<host_backend>> swapper;
  double alpha_effective = 1.0;
  std::vector<double> step_seconds;
  std::vector<double> forward_per_layer;    // in-run compute times, per step
  std::vector<double> backward_per_layer;
  std::vector<double> recompute_per_layer;  // scaled to a whole-layer recompute
  std::vector<double> stall_seconds;        // step - compute busy time
  double step_forward_s = 0, step_backward_s = 0, step_recompute_s = 0, step_other_s = 0;
  int step_recompute_calls = 0;
  std::uint64_t planned_device_bytes = 0;

  config_run(std::string label, const bench_shape& shape, double a, std::size_t k,
             std::size_t resident, double bandwidth)
      : name(std::move(label)), alpha(a) {
    host_backend::options options;
    options.device_to_host_bytes_per_second = bandwidth;
    options.host_to_device_bytes_per_second = bandwidth;
    backend = std::make_unique<host_backend>(options);
    compute.emplace(backend->make_stream("compute"));
    model = std::make_unique<synthetic_model>(*backend, shape);
    memo::offload_plan plan(synthetic_layout(shape), alpha, 16);
    buffers = std::make_unique<memo::rounding_buffers<host_backend>>(*backend, plan, k);
    store = std::make_unique<memo::host_store<host_backend>>(*backend, 64 * memo::gib);
    swapper = std::make_unique<memo::token_fraction_swapper<host_backend>>(
        *backend, *compute, *buffers, *store,
        memo::swap_options{static_cast<std::size_t>(shape.layers), resident, 0});
    planned_device_bytes = model->fixed_bytes() + buffers->planned_device_bytes();
    alpha_effective = plan.effective_alpha();
  }

  // Runs one step; the compute stream also times its forward, backward and
  // recompute work (read after synchronize, so no race).
  double run_step(std::size_t layers, bool measured) {
    step_forward_s = step_backward_s = step_recompute_s = 0.0;
    step_recompute_calls = 0;
    const auto start = std::chrono::steady_clock::now();
    auto* m = model.get();
    auto* self = this;
    backend->enqueue(*compute, [m, self] {
      const auto t0 = std::chrono::steady_clock::now();
      m->reset_input();
      self->step_other_s = since(t0);
    });
    for (std::size_t layer = 0; layer < layers; ++layer) {
      auto views = swapper->begin_forward(layer);
      backend->enqueue(*compute, [m, self, views] {
        const auto t0 = std::chrono::steady_clock::now();
        m->forward(views);
        self->step_forward_s += since(t0);
      });
      swapper->end_forward(layer);
    }
    auto recompute = [m, self](host_backend::native_stream, const memo::recompute_request& request) {
      const auto t0 = std::chrono::steady_clock::now();
      m->recompute(request);
      self->step_recompute_s += since(t0);
      ++self->step_recompute_calls;
    };
    for (std::size_t layer = layers; layer-- > 0;) {
      auto views = swapper->begin_backward(layer, recompute);
      backend->enqueue(*compute, [m, self, views] {
        const auto t0 = std::chrono::steady_clock::now();
        m->backward(views);
        self->step_backward_s += since(t0);
      });
      swapper->end_backward(layer);
    }
    swapper->synchronize();
    const double seconds = since(start);
    if (measured) {
      step_seconds.push_back(seconds);
      // Whatever of the step the compute stream did not spend computing, it
      // spent waiting (for copies, or for the host to enqueue work).
      stall_seconds.push_back(
          seconds - (step_forward_s + step_backward_s + step_recompute_s + step_other_s));
      const auto count = static_cast<double>(layers);
      forward_per_layer.push_back(step_forward_s / count);
      backward_per_layer.push_back(step_backward_s / count);
      if (step_recompute_calls > 0) {
        recompute_per_layer.push_back(step_recompute_s / step_recompute_calls / (1.0 - alpha_effective));
      }
    }
    return seconds;
  }

  static double since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  static double median(std::vector<double> values) {
    if (values.empty()) return 0.0;
    std::sort(values.begin(), values.end());
    return values[values.size() / 2];
  }

  [[nodiscard]] double best_seconds() const {
    return *std::min_element(step_seconds.begin(), step_seconds.end());
  }
  [[nodiscard]] double median_seconds() const {
    auto sorted = step_seconds;
    std::sort(sorted.begin(), sorted.end());
    return sorted[sorted.size() / 2];
  }
};


struct measured_row {
  std::string name;
  double alpha;
  double step_ms;
  double ratio;       // median over rounds of step / same round's no-offload step
  double best_ratio;  // best step / best no-offload step
  double predicted_ratio;
  double stall_ms;
  double predicted_stall_ms;
  std::uint64_t device_peak_bytes;
  std::uint64_t planned_device_bytes;
};

struct projected_row {
  long tokens;
  bool feasible;
  std::string note;
  double alpha = 0;
  std::string binding;
  double layer_forward_ms = 0;
  double transfer_ms = 0;
  double transfer_alpha1_ms = 0;
  double host_gib_per_node = 0;
  double host_gib_per_node_alpha1 = 0;
  double stall_ms = 0;
  double stall_alpha1_ms = 0;
  double slowdown = 0;
  double slowdown_alpha1 = 0;
};

std::string json_number(double value) {
  char text[64];
  std::snprintf(text, sizeof text, "%.6g", value);
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  bool json = false;
  bool quick = false;
  std::optional<bench_shape> custom;
  auto usage = [&] {
    std::fprintf(stderr,
                 "usage: %s [--json] [--quick] [--layers N] [--tokens N] [--hidden N] [--rounds N]\n",
                 argv[0]);
    return 2;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--json") {
      json = true;
    } else if (arg == "--quick") {
      quick = true;
    } else if ((arg == "--layers" || arg == "--tokens" || arg == "--hidden" || arg == "--rounds") &&
               i + 1 < argc) {
      char* end = nullptr;
      const long value = std::strtol(argv[++i], &end, 10);
      if (end == argv[i] || *end != '\0' || value < 1 || value > 1'000'000) {
        std::fprintf(stderr, "swap_bench: %s needs a positive integer, got '%s'\n", arg.c_str(),
                     argv[i]);
        return 2;
      }
      if (!custom) custom = bench_shape{};
      int& field = arg == "--layers"   ? custom->layers
                   : arg == "--tokens" ? custom->tokens
                   : arg == "--hidden" ? custom->hidden
                                       : custom->rounds;
      field = static_cast<int>(value);
    } else {
      return usage();
    }
  }
  try {
    bench_shape shape;
    if (quick) shape = {5, 768, 32, 4};
    if (custom) shape = *custom;
    memo::expects(shape.layers >= 3, "swap_bench: --layers must be at least 3 (two are never swapped)");

    // --- 1. profile the layer, then throttle the copy engine -------------
    // The profile is taken right before the measured rounds (a job
    // profiler's view, section 4.3.2), so the bandwidth is set for the
    // machine as loaded now. It runs the layer as it runs when swapped:
    // writing into two rounding buffers, with unthrottled copies. (On a CPU
    // a layer writing into two reused buffers runs faster than one writing
    // a fresh region per layer, because its output stays in cache; the LP
    // needs the forward time of the layer it will actually run.)
    memo::skeletal_layout layout = synthetic_layout(shape);
    const auto n = static_cast<std::size_t>(shape.layers);
    double forward_s = 0.0;
    double backward_s = 0.0;
    {
      config_run profile("profile", shape, 1.0, 2, 2, 0.0);
      for (int step = 0; step < 3; ++step) profile.run_step(n, step > 0);
      forward_s = config_run::median(profile.forward_per_layer);
      backward_s = config_run::median(profile.backward_per_layer);
    }
    std::vector<std::unique_ptr<config_run>> runs;
    runs.push_back(std::make_unique<config_run>("no offload", shape, 1.0, n, n, 0.0));
    const double layer_bytes = static_cast<double>(layout.layer_bytes());
    const double bandwidth = layer_bytes / (1.5 * forward_s);

    memo::alpha_problem problem;
    problem.input_bytes = layout[t_input].bytes();
    problem.attention_output_bytes = layout[t_attention].bytes();
    problem.other_bytes = layout.layer_bytes() - problem.input_bytes - problem.attention_output_bytes;
    problem.bandwidth_bytes_per_second = bandwidth;
    problem.layer_forward_seconds = forward_s;
    problem.layers = shape.layers;
    problem.unswapped_layers = 2;
    problem.host_budget_bytes = 64 * memo::gib;
    const auto lp = memo::solve_alpha(problem);

    // --- 2. run the four configurations, rounds interleaved --------------
    runs.push_back(std::make_unique<config_run>("alpha from LP", shape, lp.alpha, 2, 2, bandwidth));
    runs.push_back(std::make_unique<config_run>("alpha = 1", shape, 1.0, 2, 2, bandwidth));
    runs.push_back(std::make_unique<config_run>("alpha = 0", shape, 0.0, 2, 2, bandwidth));
    for (int round = 0; round <= shape.rounds; ++round) {
      for (auto& run : runs) {
        const double seconds = run->run_step(n, round > 0);  // round 0 warms up
        if (std::getenv("MEMO_BENCH_VERBOSE") != nullptr) {
          std::fprintf(stderr, "round %d %-14s %.1f ms  fwd %.1f bwd %.1f rec %.1f other %.1f\n", round,
                       run->name.c_str(), seconds * 1e3, run->step_forward_s * 1e3, run->step_backward_s * 1e3,
                       run->step_recompute_s * 1e3, run->step_other_s * 1e3);
        }
      }
    }

    // The simulator's prediction from the measured layer times.
    memo::device_profile host_profile;
    host_profile.name = "host (measured layer)";
    host_profile.peak_flops = 1e12;
    host_profile.efficiency = 1.0;
    host_profile.device_to_host_bytes_per_second = bandwidth;
    host_profile.host_to_device_bytes_per_second = bandwidth;
    // Layer times as they were during the run (the machine's load may have
    // changed since the probe): forward/backward of the no-offload model,
    // recompute of the alpha = 0 model.
    const double run_forward_s = config_run::median(runs[0]->forward_per_layer);
    const double run_backward_s = config_run::median(runs[0]->backward_per_layer);
    const double run_recompute_s = config_run::median(runs[3]->recompute_per_layer);
    auto predict = [&](double alpha) {
      memo::memo_step_config config;
      config.layers = shape.layers;
      config.alpha = alpha;
      config.layer_forward_seconds = run_forward_s;
      config.layer_backward_seconds = run_backward_s;
      config.recompute_seconds = run_recompute_s;
      config.input_bytes = layout[t_input].bytes();
      config.attention_output_bytes = layout[t_attention].bytes();
      config.other_bytes = static_cast<std::uint64_t>(problem.other_bytes);
      return memo::simulate_memo_step(config, host_profile);
    };

    std::vector<measured_row> measured;
    const double baseline = runs[0]->best_seconds();
    for (std::size_t i = 0; i < runs.size(); ++i) {
      const auto& run = *runs[i];
      // Each round's step over the same round's no-offload step: pairing
      // neighbours in time cancels slow changes in the machine's load.
      std::vector<double> paired;
      for (std::size_t r = 0; r < run.step_seconds.size(); ++r) {
        paired.push_back(run.step_seconds[r] / runs[0]->step_seconds[r]);
      }
      measured_row row{run.name, run.alpha, run.median_seconds() * 1e3, config_run::median(paired),
                       run.best_seconds() / baseline, 1.0, config_run::median(run.stall_seconds) * 1e3, 0.0,
                       run.backend->device_memory().peak_bytes(), run.planned_device_bytes};
      if (i > 0) {
        const auto projection = predict(run.alpha);
        row.predicted_ratio = projection.slowdown();
        row.predicted_stall_ms = projection.compute_stall_seconds * 1e3;
      }
      measured.push_back(row);
    }

    // --- 3. the paper's 7B setting on the A800 preset ---------------------
    const auto a800 = memo::device_profile::a800_80gb();
    std::vector<projected_row> projected;
    for (const long k_tokens : {16L, 32L, 64L, 128L, 256L, 512L, 1024L}) {
      projected_row row;
      row.tokens = k_tokens * 1024;
      memo::transformer_layer gpt;
      gpt.hidden = 4096;
      gpt.heads = 32;
      gpt.tokens = row.tokens;
      gpt.tensor_parallel = 4;
      gpt.context_parallel = 2;
      const auto cost = memo::gpt_layer_cost_of(gpt);
      const auto p = memo::alpha_problem::from_layer_cost(cost, a800, 32);
      row.layer_forward_ms = p.layer_forward_seconds * 1e3;
      row.transfer_alpha1_ms = p.transfer_seconds(1.0) * 1e3;
      row.host_gib_per_node_alpha1 = p.host_bytes(1.0) * a800.gpus_per_node / memo::gib;
      auto simulate = [&](double alpha) {
        auto config = memo::memo_step_config::from_layer_cost(cost, 32, alpha);
        return memo::simulate_memo_step(config, a800);
      };
      const auto all = simulate(1.0);
      row.stall_alpha1_ms = all.compute_stall_seconds * 1e3;
      row.slowdown_alpha1 = all.slowdown();
      try {
        const auto solution = memo::solve_alpha(p);
        row.feasible = true;
        row.alpha = solution.alpha;
        row.binding = solution.binding == memo::alpha_bound::bandwidth     ? "bandwidth"
                      : solution.binding == memo::alpha_bound::host_memory ? "host memory"
                                                                           : "none (alpha=1)";
        row.transfer_ms = solution.transfer_seconds * 1e3;
        row.host_gib_per_node = solution.host_bytes * a800.gpus_per_node / memo::gib;
        const auto at = simulate(solution.alpha);
        row.stall_ms = at.compute_stall_seconds * 1e3;
        row.slowdown = at.slowdown();
      } catch (const memo::error& e) {
        row.feasible = false;
        row.note = e.message();
      }
      projected.push_back(row);
    }

    double load_average = 0.0;
    if (getloadavg(&load_average, 1) != 1) load_average = -1.0;

    // --- output ------------------------------------------------------------
    if (json) {
      std::string out = "{\"bench\":\"swap_bench\",\"quick\":" + std::string(quick ? "true" : "false");
      out += ",\"shape\":{\"layers\":" + std::to_string(shape.layers) + ",\"tokens\":" +
             std::to_string(shape.tokens) + ",\"hidden\":" + std::to_string(shape.hidden) +
             ",\"rounds\":" + std::to_string(shape.rounds) + "}";
      out += ",\"load_average\":" + json_number(load_average);
      out += ",\"layer\":{\"forward_ms\":" + json_number(forward_s * 1e3) + ",\"backward_ms\":" +
             json_number(backward_s * 1e3) +
             ",\"skeletal_bytes\":" + std::to_string(layout.layer_bytes()) +
             ",\"bandwidth_bytes_per_second\":" + json_number(bandwidth) + ",\"whole_offload_to_forward\":" +
             json_number(layer_bytes / bandwidth / forward_s) + "}";
      out += ",\"in_run\":{\"forward_ms\":" + json_number(run_forward_s * 1e3) + ",\"backward_ms\":" +
             json_number(run_backward_s * 1e3) + ",\"recompute_all_ms\":" +
             json_number(run_recompute_s * 1e3) + ",\"whole_offload_to_forward\":" +
             json_number(layer_bytes / bandwidth / run_forward_s) + "}";
      out += ",\"lp\":{\"alpha\":" + json_number(lp.alpha) + ",\"binding\":\"" + memo::to_string(lp.binding) +
             "\",\"predicted_stall_per_layer_alpha1_ms\":" +
             json_number(memo::predicted_stall_seconds(problem, 1.0) * 1e3) + "}";
      out += ",\"measured\":[";
      for (std::size_t i = 0; i < measured.size(); ++i) {
        const auto& r = measured[i];
        out += std::string(i ? "," : "") + "{\"config\":\"" + r.name + "\",\"alpha\":" + json_number(r.alpha) +
               ",\"step_ms\":" + json_number(r.step_ms) + ",\"ratio\":" + json_number(r.ratio) +
               ",\"best_ratio\":" + json_number(r.best_ratio) +
               ",\"predicted_ratio\":" + json_number(r.predicted_ratio) + ",\"stall_ms\":" +
               json_number(r.stall_ms) + ",\"predicted_stall_ms\":" +
               json_number(r.predicted_stall_ms) + ",\"device_peak_bytes\":" +
               std::to_string(r.device_peak_bytes) + ",\"planned_device_bytes\":" +
               std::to_string(r.planned_device_bytes) + "}";
      }
      out += "],\"projection_7b_a800\":[";
      for (std::size_t i = 0; i < projected.size(); ++i) {
        const auto& r = projected[i];
        out += std::string(i ? "," : "") + "{\"tokens\":" + std::to_string(r.tokens) +
               ",\"feasible\":" + (r.feasible ? "true" : "false");
        if (r.feasible) {
          out += ",\"alpha\":" + json_number(r.alpha) + ",\"binding\":\"" + r.binding + "\"";
        }
        out += ",\"layer_forward_ms\":" + json_number(r.layer_forward_ms) + ",\"transfer_ms\":" +
               json_number(r.transfer_ms) + ",\"transfer_alpha1_ms\":" + json_number(r.transfer_alpha1_ms) +
               ",\"host_gib_per_node\":" + json_number(r.host_gib_per_node) +
               ",\"host_gib_per_node_alpha1\":" + json_number(r.host_gib_per_node_alpha1) +
               ",\"stall_ms\":" + json_number(r.stall_ms) + ",\"stall_alpha1_ms\":" +
               json_number(r.stall_alpha1_ms) + ",\"slowdown\":" + json_number(r.slowdown) +
               ",\"slowdown_alpha1\":" + json_number(r.slowdown_alpha1) + "}";
      }
      out += "]}";
      std::printf("%s\n", out.c_str());
      return 0;
    }

    std::printf("swap_bench: synthetic layer, %d layers x %d tokens x hidden %d (fp32, Eigen)%s\n",
                shape.layers, shape.tokens, shape.hidden, quick ? " [quick]" : "");
    std::printf("  profiled (swapped layout, unthrottled copies) before the rounds: layer forward %.2f ms, backward %.2f ms\n",
                forward_s * 1e3, backward_s * 1e3);
    std::printf("  skeletal bytes per layer %s; copy engine throttled to %.1f MB/s each way\n",
                memo::format_bytes(layout.layer_bytes()).c_str(), bandwidth / 1e6);
    std::printf("  => offloading a whole layer takes %.2fx the profiled forward\n", layer_bytes / bandwidth / forward_s);
    std::printf("  during the run (medians): forward %.2f ms, backward %.2f ms, recompute %.2f ms;\n"
                "    whole offload / forward = %.2f\n",
                run_forward_s * 1e3, run_backward_s * 1e3, run_recompute_s * 1e3,
                layer_bytes / bandwidth / run_forward_s);
    std::printf("  LP (eq. 1-3): alpha = %.4f, bound by %s; alpha = 1 predicts %.2f ms stall per layer\n\n",
                lp.alpha, memo::to_string(lp.binding), memo::predicted_stall_seconds(problem, 1.0) * 1e3);
    std::printf("  %-14s %7s %9s %7s %7s %9s %9s %10s %12s %12s\n", "config", "alpha", "step ms", "ratio",
                "best", "predicted", "stall ms", "pred stall", "device peak", "planned");
    for (const auto& r : measured) {
      std::printf("  %-14s %7.4f %9.1f %7.3f %7.3f %9.3f %9.1f %10.1f %12s %12s\n", r.name.c_str(), r.alpha,
                  r.step_ms, r.ratio, r.best_ratio, r.predicted_ratio, r.stall_ms, r.predicted_stall_ms,
                  memo::format_bytes(r.device_peak_bytes).c_str(),
                  memo::format_bytes(r.planned_device_bytes).c_str());
    }
    std::printf("  (step = median over %d interleaved rounds; ratio = median of each round's step over\n"
                "   the same round's no-offload step; best = best step / best no-offload step;\n"
                "   predicted = stream-schedule simulation from the in-run layer times;\n"
                "   stall = step - compute-stream busy time (median), pred stall = the simulated one;\n"
                "   load average during the run %.2f on %u hardware threads)\n\n",
                shape.rounds, load_average, std::thread::hardware_concurrency());
    std::printf("7B GPT (32 layers, hidden 4096), 8 x A800-80GB, TP 4 x CP 2, per GPU; host memory per node:\n");
    std::printf("  %7s %7s %-14s %9s %11s %11s %10s %10s %10s %10s\n", "tokens", "alpha", "binding", "fwd ms",
                "xfer ms", "xfer(a=1)", "host GiB", "host(a=1)", "stall ms", "stall(a=1)");
    for (const auto& r : projected) {
      if (!r.feasible) {
        std::printf("  %6ldK infeasible: %s\n", r.tokens / 1024, r.note.c_str());
        continue;
      }
      std::printf("  %6ldK %7.4f %-14s %9.1f %11.1f %11.1f %10.1f %10.1f %10.1f %10.1f\n", r.tokens / 1024,
                  r.alpha, r.binding.c_str(), r.layer_forward_ms, r.transfer_ms, r.transfer_alpha1_ms,
                  r.host_gib_per_node, r.host_gib_per_node_alpha1, r.stall_ms, r.stall_alpha1_ms);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "swap_bench: %s\n", e.what());
    return 1;
  }
}

#endif  // MEMO_HAS_LPSOLVE
