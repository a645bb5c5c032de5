// memo/project/projection.hpp
//
// What a projection says about one training step of one model on one
// cluster under one strategy and one setting: the per-GPU memory
// breakdown, the host memory per node, the step time split into its parts,
// throughput, MFU, and the first resource that runs out. The strategies
// (megatron.hpp, ulysses.hpp, sppo.hpp) fill it in; strategy.hpp searches
// over settings and lengths.
//
// The accounting every strategy shares, in one place:
//
//  time   GEMM FLOPs at the profile's gemm_efficiency, FlashAttention at its
//         attention_efficiency; a layer's backward is 2 x its GEMMs and
//         2.5 x its attention (FlashAttention-2, Dao 2023, section 3.1: the
//         backward recomputes the score matrix, five matrix products
//         against the forward's two); collectives through
//         schedule/'s `collective_seconds` at the intra-node link when the
//         group fits in a node, else the inter-node link. MFU counts model
//         FLOPs (model_shape::model_flops: backward = 2 x forward, no
//         recomputation); HFU adds what the GPU recomputes.
//  memory bf16 parameters (2 B), gradients, Adam's fp32 master, m and v
//         (12 B), each sharded as the strategy shards it; 3 GiB per GPU of
//         CUDA context, NCCL buffers and library workspaces (E); the
//         classifier's logits as Megatron-LM computes the loss: bf16 logits
//         and their fp32 copy for the softmax (6 B per token per vocabulary
//         entry on the GPU), the spike FPDT 5.4 describes ("the operation
//         usually requires a Float32 data type").
//  allocator  a static plan places exactly the live bytes (MEMO 4.2); a
//         caching allocator reserves `caching_fragmentation` (1.45) times
//         as much. That factor is the one calibrated constant of the model:
//         MEMO Table 4 (rows 1-2: 384K without a plan, 640K with one) is
//         the only published figure behind it; docs/projections.md says so.
#pragma once

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "memo/core/bytes.hpp"
#include "memo/core/error.hpp"
#include "memo/project/cluster_profile.hpp"
#include "memo/project/model_shape.hpp"
#include "memo/schedule/schedule_graph.hpp"

namespace memo::project {

enum class strategy {
  memo,               ///< MEMO: token-wise recompute + swap, planned memory (MEMO 4)
  recompute,          ///< Megatron-LM TP x CP, full recomputation, caching allocator
  ulysses_zero3,      ///< DeepSpeed-Ulysses + ZeRO-3, full recomputation, caching allocator
  fpdt,               ///< FPDT: chunked Ulysses, K/V and checkpoints in host memory (FPDT 4)
  sppo,               ///< SPPO: subsequence pipeline with adaptive offload (SPPO 5-6)
  recompute_planned,  ///< MEMO Table 4 row 2: full recomputation + planned memory
  swap_planned,       ///< MEMO Table 4 row 3: full swapping + planned memory
  sppo_recompute,     ///< Megatron-LM on SPPO's (SP, PP, N) pipeline, full recomputation
};

inline constexpr std::string_view strategy_name(strategy s) {
  switch (s) {
    case strategy::memo: return "memo";
    case strategy::recompute: return "recompute";
    case strategy::ulysses_zero3: return "ulysses-zero3";
    case strategy::fpdt: return "fpdt";
    case strategy::sppo: return "sppo";
    case strategy::recompute_planned: return "recompute-planned";
    case strategy::swap_planned: return "swap-planned";
    case strategy::sppo_recompute: return "sppo-recompute";
  }
  return "?";
}

/// Every strategy, the papers' ablations included.
inline std::vector<strategy> all_strategies() {
  return {strategy::memo,          strategy::recompute,         strategy::ulysses_zero3,
          strategy::fpdt,          strategy::sppo,              strategy::recompute_planned,
          strategy::swap_planned,  strategy::sppo_recompute};
}

/// The strategies `--strategy all` compares.
inline std::vector<strategy> public_strategies() {
  return {strategy::memo, strategy::recompute, strategy::ulysses_zero3, strategy::fpdt, strategy::sppo};
}

inline std::optional<strategy> parse_strategy(std::string_view name) {
  for (auto s : all_strategies()) {
    if (strategy_name(s) == name) return s;
  }
  return std::nullopt;
}

/// The names `parse_strategy` accepts, for messages.
inline std::string strategy_names() {
  std::string names;
  for (auto s : all_strategies()) names += (names.empty() ? "" : ", ") + std::string(strategy_name(s));
  return names;
}

struct cluster {
  cluster_profile profile;
  int gpus = 1;
  int gpus_per_node = 8;  ///< the profile's unless given on the command line

  [[nodiscard]] int gpus_in_a_node() const { return std::min(gpus, gpus_per_node); }
  /// The GPUs of one node a setting using `used` GPUs occupies (the
  /// settings fill nodes one after another; the rest stay idle).
  [[nodiscard]] int gpus_in_a_node(int used) const { return std::min({used, gpus, gpus_per_node}); }
  /// The link a group of `ranks` consecutive GPUs communicates over.
  [[nodiscard]] double link_for(int ranks) const {
    return ranks > gpus_per_node ? profile.inter_node_bytes_per_second : profile.intra_node_bytes_per_second;
  }
  void check() const {
    profile.check();
    expects(gpus >= 1 && gpus_per_node >= 1, [&] {
      return "cluster: gpus and gpus_per_node must be positive, got " + std::to_string(gpus) + " and " +
             std::to_string(gpus_per_node);
    });
    expects(gpus <= max_cluster_gpus && gpus_per_node <= max_cluster_gpus, [&] {
      return "cluster: at most " + std::to_string(max_cluster_gpus) + " GPUs, got " +
             std::to_string(std::max(gpus, gpus_per_node)) + (gpus_per_node > gpus ? " per node" : "");
    });
  }
};

/// Per-GPU device memory, bytes.
struct memory_breakdown {
  double params = 0, grads = 0, optimizer = 0;
  double skeletal = 0;         ///< activations kept for backward (checkpoints, buffers, K/V)
  double transient = 0;        ///< the largest working set: one layer's backward, or the loss
  double framework = 0;        ///< CUDA context, NCCL, workspaces, gathered ZeRO-3 layers
  double planned_arena = 0;    ///< skeletal + transient as a static plan places them
  double caching_reserve = 0;  ///< what a caching allocator reserves for the same requests
  bool planned = true;         ///< which of the two the strategy pays
  [[nodiscard]] double activations() const { return planned ? planned_arena : caching_reserve; }
  [[nodiscard]] double total() const { return params + grads + optimizer + framework + activations(); }
};

struct settings {
  int tp = 1, cp = 1, sp = 1, pp = 1, dp = 1;
  /// The GPUs the setting uses; the cluster's others stay idle (and count
  /// against throughput per GPU and MFU).
  [[nodiscard]] int gpus() const { return tp * cp * sp * pp * dp; }
  int subsequences = 1;            ///< sppo: N
  double alpha = 0.0;              ///< memo: fraction of the other skeletal tokens offloaded
  std::vector<double> alpha_i{};   ///< sppo: per subsequence (SPPO 5.2)
  double chunk_tokens = 0.0;       ///< fpdt: global tokens per chunk
  /// sppo: Left-SP / Right-SP pieces spread over idle stages (section 6.2),
  /// chosen where they shorten the step.
  bool multiplexed = false;
};

/// Settings a user fixes instead of letting the search choose them
/// (`memo-project --tp 4 --cp 2 --alpha 0.5`). The whole-number fields
/// select among the settings a strategy enumerates; `alpha` (memo) replaces
/// the LP's offload fraction and `chunk_tokens` (fpdt) the 64K chunk, and a
/// fixed `subsequences` (sppo) is taken as given, outside section 6.1's 2K
/// to 16K tokens per subsequence, which only narrows the solver's search.
/// Each field applies to the strategies whose settings have it
/// (`pin_fields`); `project_settings` refuses one that does not. The fields
/// are listed once, in `settings_pin::fields`, which everything that walks
/// them (matching, messages, the command line, the JSON) reads.
struct settings_pin {
  std::optional<int> tp, cp, sp, pp, dp, subsequences;
  std::optional<double> alpha, chunk_tokens;

  /// One field: its name (also the command-line option without "--"), its
  /// label in messages, and where it lives: a whole number that selects
  /// (with the `settings` member it must equal) or a number that is an
  /// input of the projection.
  struct field {
    std::string_view name, label;
    std::optional<int> settings_pin::*whole = nullptr;
    int settings::*chosen = nullptr;
    std::optional<double> settings_pin::*number = nullptr;
    [[nodiscard]] bool given(const settings_pin& pin) const {
      return whole ? (pin.*whole).has_value() : (pin.*number).has_value();
    }
  };
  static constexpr std::array<field, 8> fields = {{
      {"tp", "TP", &settings_pin::tp, &settings::tp, nullptr},
      {"cp", "CP", &settings_pin::cp, &settings::cp, nullptr},
      {"sp", "SP", &settings_pin::sp, &settings::sp, nullptr},
      {"pp", "PP", &settings_pin::pp, &settings::pp, nullptr},
      {"dp", "DP", &settings_pin::dp, &settings::dp, nullptr},
      {"subsequences", "N", &settings_pin::subsequences, &settings::subsequences, nullptr},
      {"alpha", "alpha", nullptr, nullptr, &settings_pin::alpha},
      {"chunk", "chunk", nullptr, nullptr, &settings_pin::chunk_tokens},
  }};
  /// The field named `name`; nullptr when there is none.
  [[nodiscard]] static const field* find(std::string_view name) {
    for (const field& f : fields) {
      if (f.name == name) return &f;
    }
    return nullptr;
  }

  [[nodiscard]] bool empty() const { return given().empty(); }
  /// The names of the fields given, in `fields` order.
  [[nodiscard]] std::vector<std::string_view> given() const {
    std::vector<std::string_view> out;
    for (const field& f : fields) {
      if (f.given(*this)) out.push_back(f.name);
    }
    return out;
  }
  /// This pin with only the field `name` (nothing when there is no such field).
  [[nodiscard]] settings_pin only(std::string_view name) const {
    settings_pin one;
    if (const field* f = find(name)) {
      if (f->whole) one.*(f->whole) = this->*(f->whole);
      else one.*(f->number) = this->*(f->number);
    }
    return one;
  }
  /// This pin without the field `name`.
  [[nodiscard]] settings_pin without(std::string_view name) const {
    settings_pin rest = *this;
    if (const field* f = find(name)) {
      if (f->whole) (rest.*(f->whole)).reset();
      else (rest.*(f->number)).reset();
    }
    return rest;
  }
  /// Whether `s` has every whole-number value given (alpha and the chunk
  /// are inputs of the projection, not filters).
  [[nodiscard]] bool matches(const settings& s) const {
    for (const field& f : fields) {
      if (f.whole && (this->*(f.whole)) && *(this->*(f.whole)) != s.*(f.chosen)) return false;
    }
    return true;
  }
  /// "TP 4 CP 2 alpha 0.5", for messages.
  [[nodiscard]] std::string text() const {
    std::string out;
    for (const field& f : fields) {
      if (!f.given(*this)) continue;
      char number[64];
      // Whole numbers as they are, the others in their shortest exact form.
      const auto written = f.whole ? std::to_chars(number, number + sizeof number, *(this->*(f.whole)))
                                   : std::to_chars(number, number + sizeof number, *(this->*(f.number)));
      out += (out.empty() ? "" : " ") + std::string(f.label) + " " + std::string(number, written.ptr);
    }
    return out;
  }
  /// Whole numbers >= 1, alpha in [0, 1], the chunk a whole number of
  /// tokens in [1, 2^40]; otherwise a memo::error naming the field and value.
  void check() const {
    for (const field& f : fields) {
      if (!f.whole) continue;
      const std::optional<int>& value = this->*(f.whole);
      expects(!value || *value >= 1, [&] {
        return "settings pin: " + std::string(f.name) + " must be >= 1, got " + std::to_string(*value);
      });
    }
    expects(!alpha || (*alpha >= 0.0 && *alpha <= 1.0), [&] {
      char text[64];
      std::snprintf(text, sizeof text, "%g", *alpha);
      return std::string("settings pin: alpha must be in [0, 1], got ") + text;
    });
    expects(!chunk_tokens || (*chunk_tokens >= 1 && *chunk_tokens <= 1099511627776.0 &&
                              *chunk_tokens == std::floor(*chunk_tokens)),
            [&] {
              char text[64];
              std::snprintf(text, sizeof text, "%g", *chunk_tokens);
              return std::string("settings pin: chunk must be a whole number of tokens in [1, 2^40], got ") + text;
            });
  }
};

/// The `settings_pin` fields a strategy's settings have: Megatron's TP,
/// CP and DP (PP with full recomputation only; alpha for MEMO), Ulysses'
/// SP and DP (the chunk for FPDT), SPPO's SP, PP and N.
inline std::vector<std::string_view> pin_fields(strategy kind) {
  switch (kind) {
    case strategy::memo: return {"tp", "cp", "dp", "alpha"};
    case strategy::swap_planned: return {"tp", "cp", "dp"};
    case strategy::recompute:
    case strategy::recompute_planned: return {"tp", "cp", "pp", "dp"};
    case strategy::ulysses_zero3: return {"sp", "dp"};
    case strategy::fpdt: return {"sp", "dp", "chunk"};
    case strategy::sppo:
    case strategy::sppo_recompute: return {"sp", "pp", "dp", "subsequences"};
  }
  return {};
}

/// The fields of `pin` that `kind` has no setting for (empty: all apply).
inline std::vector<std::string_view> inapplicable_pins(strategy kind, const settings_pin& pin) {
  const auto fields = pin_fields(kind);
  std::vector<std::string_view> out;
  for (const auto name : pin.given()) {
    if (std::find(fields.begin(), fields.end(), name) == fields.end()) out.push_back(name);
  }
  return out;
}

/// Where one step's time goes (seconds, on the critical path).
struct step_breakdown {
  double compute = 0;        ///< forward + backward, GEMMs and attention
  double recompute = 0;      ///< recomputation in the backward
  double communication = 0;  ///< collectives not hidden behind compute
  double offload_stall = 0;  ///< host-link transfers not hidden behind compute
  double bubble = 0;         ///< pipeline idle time
  /// fpdt: the chunk pipeline's fill and drain, host-link transfers before
  /// a layer's first chunk can compute and after its last one has, which
  /// no compute overlaps (FPDT 5.3); not a shortage of link bandwidth.
  double pipeline_fill = 0;
};

/// A resource a step can run out of. Memory that runs out stops the step;
/// a link that runs out slows it (the offload stalls).
enum class resource {
  device_memory,  ///< bytes per GPU
  host_memory,    ///< bytes per node
  host_link,      ///< bytes per second per GPU between device and host
};

inline constexpr std::string_view to_string(resource r) {
  switch (r) {
    case resource::device_memory: return "device memory";
    case resource::host_memory: return "host memory";
    case resource::host_link: return "host link";
  }
  return "unknown resource";
}

/// One resource a projection needs more of than the cluster has: device
/// memory, host memory, or the host link (the bytes per second per GPU that
/// would hide the offload behind the compute it overlaps, against the
/// profile's).
struct shortfall {
  project::resource resource = resource::device_memory;
  double need = 0;
  double capacity = 0;
  /// Memory only, when searched (strategy.hpp's `order_shortfalls`): the
  /// shortest length, on the search grid, at which the best setting
  /// exceeds it; 0 when not searched.
  double runs_out_at = 0;
  [[nodiscard]] bool is_memory() const { return resource != resource::host_link; }
};

struct projection {
  strategy kind = strategy::memo;
  double sequence = 0;           ///< tokens of one sequence
  settings chosen;
  memory_breakdown device;
  double device_capacity = 0;
  double host_per_node = 0;      ///< bytes of offloaded activations per node
  double host_capacity = 0;
  step_breakdown time;
  double step_seconds = 0;
  double tokens_per_gpu_per_second = 0;
  double mfu = 0;                ///< model FLOPs / (step x GPUs x peak)
  double hfu = 0;                ///< the same with recomputation counted
  /// Host-link bytes per second per GPU that would hide every offload and
  /// fetch behind the compute it overlaps (0: nothing offloaded).
  double link_needed_bytes_per_second = 0;
  /// Every resource exceeded: the memories first (in the order they run
  /// out once `order_shortfalls` has searched it, else device before host),
  /// then the host link when it is the bottleneck.
  std::vector<shortfall> shortfalls;
  std::optional<project::resource> limit;  ///< the first memory that runs out; empty when it fits
  /// Set when a byte count of this setting is 2^64 or more (`check_counts`
  /// says which): it needs more than any memory holds, and the figures are
  /// not printed. `project_settings` drops such settings, or throws when
  /// every one is.
  std::string uncountable;
  [[nodiscard]] bool fits() const { return !limit.has_value() && uncountable.empty(); }
  /// The host link is the bottleneck: offload outlasts the compute it hides behind.
  [[nodiscard]] bool link_bound() const { return time.offload_stall > 0.01 * step_seconds; }
  /// How far past capacity the worst resource is (<= 1 when it fits).
  [[nodiscard]] double pressure() const {
    return std::max(device.total() / device_capacity, host_per_node / host_capacity);
  }
};

/// A setting whose byte counts do not fit in 64 bits: more than any memory
/// holds, so it does not fit, but it has no figures to print.
class uncountable_projection : public error {
 public:
  uncountable_projection(std::string message, settings setting,
                         std::source_location where = std::source_location::current())
      : error(std::move(message), where), setting_(std::move(setting)) {}
  [[nodiscard]] const settings& setting() const noexcept { return setting_; }

 private:
  settings setting_;
};

inline constexpr double caching_fragmentation = 1.45;
inline constexpr double framework_bytes = 3.0 * static_cast<double>(gib);
inline constexpr double attention_backward_factor = 2.5;  ///< FlashAttention-2 backward / forward
inline constexpr double loss_bytes_per_logit = 6.0;       ///< bf16 logits + their fp32 copy
inline constexpr double bytes_per_element = 2.0;          ///< bf16 activations

/// Whether `bytes` rounds to a whole number of bytes below 2^64 (what a
/// 64-bit count holds); false for negative and non-finite values.
inline bool representable_bytes(double bytes) { return bytes >= 0 && std::nearbyint(bytes) < 0x1p64; }

/// `bytes` as a 64-bit count, rounded to the nearest byte; a
/// `count_overflow` naming `what` when it is not `representable_bytes`.
inline std::uint64_t byte_count(double bytes, std::string_view what) {
  expects_countable(representable_bytes(bytes), [&] {
    char text[32];
    std::snprintf(text, sizeof text, "%.4g", bytes);
    return std::string(what) + " of " + text + " bytes is not a byte count below 2^64";
  });
  return static_cast<std::uint64_t>(std::nearbyint(bytes));
}

namespace detail {

/// "TP 4 CP 2 SP 1 PP 1 DP 1" (N too for a pipeline of subsequences).
inline std::string describe(const settings& c) {
  std::string text = "TP " + std::to_string(c.tp) + " CP " + std::to_string(c.cp) + " SP " + std::to_string(c.sp) +
                     " PP " + std::to_string(c.pp) + " DP " + std::to_string(c.dp);
  if (c.subsequences > 1) text += " N " + std::to_string(c.subsequences);
  return text;
}

inline double gemm_seconds(const cluster_profile& p, double flops) {
  return flops / (p.peak_flops * p.gemm_efficiency);
}
inline double attention_seconds(const cluster_profile& p, double flops) {
  return flops / (p.peak_flops * p.attention_efficiency);
}
/// All-gather, reduce-scatter or all-to-all of `bytes` (see
/// schedule_graph.hpp for which bytes) over `ranks` on `link`.
inline double collective(collective_kind kind, double bytes, int ranks, double link) {
  return collective_seconds(kind, byte_count(bytes, to_string(kind)), ranks, link);
}
/// The smallest multiple of `unit` that is at least `tokens` (shards are whole tokens).
inline std::int64_t padded_tokens(double tokens, std::int64_t unit) {
  const auto s = static_cast<std::int64_t>(tokens);
  return (s + unit - 1) / unit * unit;
}

/// Every byte count of `r` is below 2^64, and the step time positive and
/// finite; otherwise a memo::error naming the setting and the figure
/// (`project_settings` adds the strategy, the length and the model): a
/// shape and a length whose per-GPU bytes cannot be counted in 64 bits are
/// outside what a projection answers, rather than a wrapped count. The
/// byte counts throw `uncountable_projection`.
inline void check_counts(const projection& r) {
  const auto& d = r.device;
  const std::pair<const char*, double> bytes[] = {
      {"parameter bytes", d.params},           {"gradient bytes", d.grads},
      {"optimizer bytes", d.optimizer},        {"skeletal activation bytes", d.skeletal},
      {"transient activation bytes", d.transient}, {"framework bytes", d.framework},
      {"caching allocator reserve", d.caching_reserve}, {"device total", d.total()},
      {"host bytes per node", r.host_per_node}};
  for (const auto& [what, value] : bytes) {
    if (representable_bytes(value)) continue;
    char text[80];
    std::snprintf(text, sizeof text, "%s %.4g", what, value);
    throw uncountable_projection("setting " + describe(r.chosen) + ": " + text +
                                     " is not a byte count below 2^64: the model or the length is too large to count",
                                 r.chosen);
  }
  expects(std::isfinite(r.step_seconds) && r.step_seconds > 0, [&] {
    return "the step time is not a positive finite number of seconds (" + std::to_string(r.step_seconds) + ")";
  });
}

/// `d` with its planned arena (skeletal + transient, as a static plan
/// places them) and a caching allocator's reserve for the same requests.
inline memory_breakdown arranged(memory_breakdown d) {
  d.planned_arena = d.skeletal + d.transient;
  d.caching_reserve = caching_fragmentation * d.planned_arena;
  return d;
}

/// The first memory `d` and `host_per_node` overflow on `c` (device memory,
/// then host memory), or nullopt when both fit.
inline std::optional<resource> memory_limit(memory_breakdown d, double host_per_node, const cluster& c) {
  d = arranged(d);
  if (d.total() > c.profile.device_memory_bytes) return resource::device_memory;
  if (host_per_node > c.profile.host_memory_bytes) return resource::host_memory;
  return std::nullopt;
}

/// Appends the projection `make()` returns for `setting` or, when its
/// counts do not fit their integers (bytes in 64 bits, a partition's costs
/// in 63), that setting marked `uncountable` (without figures), so one
/// setting too large to count does not end the others' projection.
template <class Make>
void add_setting(std::vector<projection>& out, strategy kind, double s, const settings& setting, Make&& make) {
  auto uncountable = [&](const settings& chosen, std::string message) {
    projection r;
    r.kind = kind;
    r.sequence = s;
    r.chosen = chosen;
    r.uncountable = std::move(message);
    out.push_back(std::move(r));
  };
  try {
    out.push_back(make());
  } catch (const uncountable_projection& e) {
    uncountable(e.setting(), e.message());
  } catch (const count_overflow& e) {
    uncountable(setting, "setting " + describe(setting) + ": " + e.message() +
                             ": the model or the length is too large to count");
  }
}

/// Fills throughput, MFU and the limit from the memory and step time.
inline void finish(projection& r, const model_shape& m, const cluster& c, double hardware_flops) {
  r.device_capacity = c.profile.device_memory_bytes;
  r.host_capacity = c.profile.host_memory_bytes;
  r.step_seconds = r.time.compute + r.time.recompute + r.time.communication + r.time.offload_stall + r.time.bubble +
                   r.time.pipeline_fill;
  const double gpu_seconds = r.step_seconds * c.gpus;
  r.tokens_per_gpu_per_second = r.sequence * r.chosen.dp / gpu_seconds;
  r.mfu = m.model_flops(r.sequence) * r.chosen.dp / (gpu_seconds * c.profile.peak_flops);
  r.hfu = hardware_flops * r.chosen.dp / (gpu_seconds * c.profile.peak_flops);
  r.device = arranged(r.device);
  check_counts(r);
  r.limit = memory_limit(r.device, r.host_per_node, c);
  r.shortfalls.clear();
  if (r.device.total() > r.device_capacity) {
    r.shortfalls.push_back({resource::device_memory, r.device.total(), r.device_capacity});
  }
  if (r.host_per_node > r.host_capacity) r.shortfalls.push_back({resource::host_memory, r.host_per_node, r.host_capacity});
  if (r.link_bound()) {
    r.shortfalls.push_back({resource::host_link, r.link_needed_bytes_per_second, c.profile.host_link_bytes_per_second});
  }
}

}  // namespace detail

}  // namespace memo::project
