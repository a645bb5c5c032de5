// memo/model/gpt2_model.hpp
//
// The reference GPT-2 (llm.c's model, fp32) on any `Backend`: embedding,
// L pre-LN blocks (gpt2_layer.hpp, with chunked causal attention), a final layernorm, the language-model
// head tied to the token embedding over the padded vocabulary, and softmax
// cross-entropy; its backward; and AdamW.
//
// Memory. Parameters, gradients and the two AdamW moments are one device
// allocation each, laid out by `gpt2_parameter_layout` (llm.c's order, so
// a checkpoint is one copy). Everything a step uses besides them is one
// `planned_arena` (MEMO sections 4.1-4.3, gpt2_memory.hpp):
//   - every layer's skeletal tensors live in rounding buffers driven by a
//     `token_fraction_swapper`: one buffer per layer and nothing moved by
//     default; with `offload_alpha` two buffers, every layer but the last
//     two offloading its input and attention output whole and a fraction
//     alpha of the tokens of the rest, recomputing the others token-wise
//     before its backward (`gpt2_layer_recompute`);
//   - the constructor records one block backward through a
//     `recording_resource`, repeats it per layer around the buffers outside
//     the layers (`gpt2_step_trace`) and plans the trace with the bi-level
//     planner; every step replays it through a `planned_replay_resource`.
// All of it is set up in the constructor: a step allocates nothing through
// the backend's resources, and its device footprint is the parameter state
// plus the plan's peak. With `kv_offload` each layer has its own chunked
// attention with host-resident K/V (FPDT), whose pinned memory is also
// allocated here. The model trains one sequence of `context` tokens per
// step (batch 1).
//
// Chunked loss (FPDT section 5.4). The logits of the whole sequence, [T, Vp],
// never exist: the head's GEMM writes `loss_chunk` rows at a time into one
// [loss_chunk, Vp] buffer, `ops::cross_entropy_chunk` turns them into their
// gradient in place, and the head's two backward GEMMs consume it before
// the next chunk reuses the buffer. Rows are independent, so the chunk size
// changes neither the loss nor any gradient.
//
// Work runs in order on one compute stream of the backend (plus the
// swapper's offload and prefetch streams and, with host K/V, the attention's
// copy streams, all joined back into it); the calls that return host values
// (`forward_backward`, `get_parameters`, `get_gradients`) synchronise it. A
// step that throws part-way is abandoned (streams drained, the replay
// rewound), so the next step starts clean. The backend must outlive the
// model.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "memo/backend/buffer.hpp"
#include "memo/backend/concepts.hpp"
#include "memo/model/builtin_data.hpp"
#include "memo/model/gpt2_config.hpp"
#include "memo/model/gpt2_layer.hpp"
#include "memo/model/ops/adamw.hpp"
#include "memo/model/ops/cross_entropy.hpp"
#include "memo/model/ops/encoder.hpp"
#include "memo/model/gpt2_memory.hpp"
#include "memo/model/token_data.hpp"
#include "memo/plan/bilevel_planner.hpp"
#include "memo/plan/planned_arena.hpp"
#include "memo/plan/planned_replay.hpp"
#include "memo/plan/recording_resource.hpp"
#include "memo/swap/token_fraction_swapper.hpp"

namespace memo {

/// How a `gpt2_model` is sized for training.
struct gpt2_model_options {
  std::int64_t context = 0;     // T: tokens per step, 1 <= T <= maxT
  std::int64_t loss_chunk = 0;  // rows of the logits buffer; 0 = min(T, 64)
  std::int64_t attention_chunk = 0;  // tokens per attention chunk; 0 = min(T, 64)
  /// Skeletal offload (MEMO section 4.1). Unset: every layer keeps its
  /// skeletal tensors on the device (one rounding buffer per layer, nothing
  /// copied or recomputed). Set: two rounding buffers; every layer but the
  /// last two offloads its input and attention output whole and this
  /// fraction of the tokens of every other skeletal tensor, and recomputes
  /// the rest token-wise before its backward.
  std::optional<double> offload_alpha{};
  /// Offloaded prefixes are rounded down to a multiple of this many tokens.
  std::int64_t offload_granularity = 1;
  /// FPDT's host-resident K/V in the chunked attention (attention.hpp).
  bool kv_offload = false;
  /// Time the bi-level planner may take (level 2 of a small model is solved
  /// well before it, but the exact search may not prove optimality).
  double plan_time_limit_seconds = 0.1;
};

template <Backend B>
class gpt2_model {
  using device_resource = std::remove_reference_t<decltype(std::declval<B&>().device_memory())>;
  using pinned_resource = std::remove_reference_t<decltype(std::declval<B&>().pinned_memory())>;

 public:
  gpt2_model(B& backend, const gpt2_config& config, const gpt2_model_options& options)
      : backend_(&backend),
        config_(checked_config(config, options)),
        T_(options.context),
        chunk_(options.loss_chunk == 0 ? std::min<std::int64_t>(T_, 64) : options.loss_chunk),
        attention_shape_{.tokens = T_, .heads = config_.num_heads, .kv_heads = config_.num_heads,
                         .head_dim = config_.head_size(),
                         .chunk = options.attention_chunk == 0 ? std::min<std::int64_t>(T_, 64)
                                                               : options.attention_chunk},
        table_(gpt2_parameter_layout(config_)) {
    expects(attention_shape_.chunk >= 1 && attention_shape_.chunk <= T_, [&] {
      return "gpt2_model: attention_chunk " + std::to_string(options.attention_chunk) +
             " must lie in [1, context " + std::to_string(T_) + "] (0 picks one)";
    });
    expects(chunk_ >= 1 && chunk_ <= T_, [&] {
      return "gpt2_model: loss_chunk " + std::to_string(options.loss_chunk) +
             " must lie in [1, context " + std::to_string(T_) + "] (0 picks one)";
    });
    expects(!options.offload_alpha ||
                (std::isfinite(*options.offload_alpha) && *options.offload_alpha >= 0.0 &&
                 *options.offload_alpha <= 1.0),
            [&] {
              return "gpt2_model: offload_alpha " + std::to_string(*options.offload_alpha) +
                     " must lie in [0, 1]";
            });
    expects(options.offload_granularity >= 1 && options.offload_granularity <= T_, [&] {
      return "gpt2_model: offload_granularity " + std::to_string(options.offload_granularity) +
             " must lie in [1, context " + std::to_string(T_) + "]";
    });
    const auto P = static_cast<std::size_t>(table_.total);
    const auto T = static_cast<std::size_t>(T_);
    const std::int64_t L = config_.num_layers;
    params_ = device_floats(backend.device_memory(), P);
    grads_ = device_floats(backend.device_memory(), P);
    adam_m_ = device_floats(backend.device_memory(), P);
    adam_v_ = device_floats(backend.device_memory(), P);
    staging_ = pinned_floats(backend.pinned_memory(), P);
    host_losses_ = pinned_floats(backend.pinned_memory(), T);
    host_inputs_ = pinned_ints(backend.pinned_memory(), T);
    host_targets_ = pinned_ints(backend.pinned_memory(), T);
    host_order_ = pinned_longs(backend.pinned_memory(), T);
    host_starts_ = pinned_longs(backend.pinned_memory(), T + 1);
    host_ids_ = pinned_ints(backend.pinned_memory(), T);
    if (backend.stream_workspace_bytes() > 0) {
      workspace_ = device_bytes_buffer(backend.device_memory(), backend.stream_workspace_bytes());
    }
    stream_.emplace(backend.make_stream("gpt2_model",
                                        memory_region{workspace_.data(), workspace_.size_bytes()}));
    p_ = view_gpt2_parameters(config_, params_.span());
    g_ = view_gpt2_parameters(config_, grads_.span());
    for (auto* b : {&params_, &adam_m_, &adam_v_, &grads_}) {
      backend.memset_async(b->data(), 0, b->size_bytes(), *stream_);
    }
    // What the skeletal tensors keep, and where (MEMO section 4.1).
    const bool swapping = options.offload_alpha.has_value();
    offload_plan skeletal(gpt2_skeletal_layout(config_, T_), swapping ? *options.offload_alpha : 1.0,
                          static_cast<std::size_t>(options.offload_granularity));
    const std::size_t K = swapping ? std::min<std::size_t>(2, static_cast<std::size_t>(L))
                                   : static_cast<std::size_t>(L);
    attention_shape_.offload = options.kv_offload;
    // The plan (MEMO section 4.2): one block's backward recorded, then the step.
    outside_ = gpt2_step_buffers(config_, T_, chunk_, attention_scratch_bytes(),
                                 rounding_buffers<B>::required_bytes(skeletal, K));
    step_trace_ = gpt2_step_trace(outside_, record_block_backward(), L);
    dsa_solve_options solve;
    solve.time_limit_seconds = options.plan_time_limit_seconds;
    plan_ = bilevel_planner<>{}.plan(step_trace_, solve);
    arena_options arena;
    arena.fill = [b = &backend, s = &*stream_](memory_region r, std::byte value) {
      // Stream-ordered, like every free of a replay driven from this stream.
      if (r.bytes > 0) b->memset_async(r.data, static_cast<int>(value), r.bytes, *s);
    };
    arena_.emplace(backend, step_trace_, plan_.plan, std::move(arena));
    replay_.emplace(*arena_);
    bind_outside_buffers();
    rounding_.emplace(backend, std::move(skeletal), K, arena_->region(index_of("skeletal")));
    swap_options swap;
    swap.layers = static_cast<std::size_t>(L);
    swap.resident_last_layers = swapping ? K : static_cast<std::size_t>(L);
    auto slots = host_slots_for(rounding_->plan(), static_cast<std::size_t>(L) - swap.resident_last_layers);
    store_.emplace(backend, host_store<B>::required_bytes(slots));
    swapper_.emplace(backend, *stream_, *rounding_, *store_, swap);
    const std::size_t attentions = attention_count();
    const std::size_t device_each = chunked_causal_attention<B>::required_device_bytes(attention_shape_);
    const std::size_t pinned_each = chunked_causal_attention<B>::required_pinned_bytes(attention_shape_);
    region_carver pinned_sizing;
    for (std::size_t l = 0; l < attentions; ++l) (void)pinned_sizing.take(pinned_each, "host K/V");
    if (pinned_each > 0) {
      attention_pinned_ = pinned_bytes_buffer(backend.pinned_memory(), pinned_sizing.required_bytes());
    }
    region_carver pinned(memory_region{attention_pinned_.data(), attention_pinned_.size_bytes()},
                         "gpt2_model host K/V");
    region_carver device(arena_->region(index_of("attention scratch")), "gpt2_model attention scratch");
    for (std::size_t l = 0; l < attentions; ++l) {
      const std::string part = "attention of layer " + std::to_string(l);
      const memory_region scratch = device.take(device_each, part);
      attention_.push_back(std::make_unique<chunked_causal_attention<B>>(
          backend, attention_shape_, scratch,
          pinned_each > 0 ? pinned.take(pinned_each, part) : memory_region{}));
    }
    backend.synchronize(*stream_);
  }
  gpt2_model(const gpt2_model&) = delete;
  gpt2_model& operator=(const gpt2_model&) = delete;
  ~gpt2_model() {
    try {
      if (stream_) backend_->synchronize(*stream_);
    } catch (...) {  // a failed step was reported where it was synchronised
    }
  }

  [[nodiscard]] const gpt2_config& config() const noexcept { return config_; }
  [[nodiscard]] std::int64_t context() const noexcept { return T_; }
  [[nodiscard]] std::int64_t loss_chunk() const noexcept { return chunk_; }
  [[nodiscard]] std::int64_t attention_chunk() const noexcept { return attention_shape_.chunk; }
  [[nodiscard]] std::uint64_t parameter_count() const noexcept { return table_.total; }
  /// Device bytes of the parameters, gradients and moments (4 x 4 bytes each).
  [[nodiscard]] std::size_t parameter_state_bytes() const noexcept { return 4 * params_.size_bytes(); }
  /// Device bytes of everything else a step uses: the planned arena (the
  /// plan's peak) and the stream's BLAS workspace.
  [[nodiscard]] std::size_t activation_bytes() const noexcept {
    return arena_->peak_bytes() + workspace_.size_bytes();
  }
  /// The bi-level plan of a step's request trace (`step_trace()`).
  [[nodiscard]] const bilevel_result& memory_plan() const noexcept { return plan_; }
  [[nodiscard]] const memory_trace& step_trace() const noexcept { return step_trace_; }
  /// Which skeletal token ranges are offloaded and which recomputed.
  [[nodiscard]] const offload_plan& skeletal_plan() const noexcept { return rounding_->plan(); }
  /// Device bytes of the rounding buffers (K buffers and the shared region).
  [[nodiscard]] std::uint64_t rounding_buffer_bytes() const noexcept { return rounding_->planned_device_bytes(); }
  [[nodiscard]] std::size_t rounding_buffer_count() const noexcept { return rounding_->count(); }
  /// Layers whose skeletal tensors go to host memory each step.
  [[nodiscard]] std::size_t swapped_layers() const noexcept { return swapper_->swapped_layers(); }
  /// Pinned host bytes of the offloaded skeletal tensors and the host K/V.
  [[nodiscard]] std::uint64_t host_offload_bytes() const {
    return host_store<B>::required_bytes(host_slots_for(rounding_->plan(), swapper_->swapped_layers())) +
           attention_pinned_.size_bytes();
  }
  [[nodiscard]] bool kv_offload() const noexcept { return attention_shape_.offload; }
  /// The swapper's running byte counts (offloaded, prefetched, recomputed).
  [[nodiscard]] const token_fraction_swapper<B>& swapper() const noexcept { return *swapper_; }
  /// AdamW steps taken so far.
  [[nodiscard]] std::int64_t steps() const noexcept { return step_; }

  /// GPT-2's initialisation from `seed`: weights N(0, 0.02), the two
  /// projections into the residual stream N(0, 0.02 / sqrt(2L)), layernorm
  /// weights 1, biases 0. Resets the AdamW moments and the step count.
  void initialize(std::uint64_t seed) {
    std::span<float> host = staging_.span();
    const double residual_std = 0.02 / std::sqrt(2.0 * config_.num_layers);
    for (std::size_t t = 0; t < gpt2_tensor_count; ++t) {
      const gpt2_tensor_info& info = table_.tensors[t];
      const std::string_view n = info.name;
      const bool bias = n.ends_with('b');
      const bool norm_weight = n == "ln1w" || n == "ln2w" || n == "lnfw";
      const double std_dev = (n == "attprojw" || n == "fcprojw") ? residual_std : 0.02;
      for (std::uint64_t i = info.offset; i < info.offset + info.count; ++i) {
        host[i] = bias ? 0.0f : norm_weight ? 1.0f : static_cast<float>(std_dev * normal(seed, i));
      }
    }
    set_parameters(host);
  }

  /// Copies `parameters` (llm.c's order, `parameter_count()` values) in and
  /// resets the AdamW moments and the step count.
  void set_parameters(std::span<const float> parameters) {
    expect_parameter_span(parameters.size(), "set_parameters");
    if (parameters.data() != staging_.data()) {
      std::copy(parameters.begin(), parameters.end(), staging_.data());
    }
    backend_->copy_async(params_.data(), staging_.data(), params_.size_bytes(),
                         copy_kind::host_to_device, *stream_);
    backend_->memset_async(adam_m_.data(), 0, adam_m_.size_bytes(), *stream_);
    backend_->memset_async(adam_v_.data(), 0, adam_v_.size_bytes(), *stream_);
    backend_->synchronize(*stream_);
    step_ = 0;
  }
  void get_parameters(std::span<float> out) { read_back(params_, out, "get_parameters"); }
  /// The gradients of the last `forward_backward`.
  void get_gradients(std::span<float> out) { read_back(grads_, out, "get_gradients"); }

  /// Zeroes the gradients, runs the forward pass and the chunked loss on
  /// `inputs` -> `targets` (T token ids each, in [0, V)), and the backward
  /// pass. Returns the mean loss over the T targets.
  float forward_backward(std::span<const std::int32_t> inputs,
                         std::span<const std::int32_t> targets) {
    const std::int64_t distinct = check_tokens(inputs, targets);
    try {
      run_step(distinct);
    } catch (...) {
      abandon_step();
      throw;
    }
    return static_cast<float>(mean_loss({0, T_}));
  }

  /// One AdamW step over every parameter with the last gradients.
  void update(const ops::adamw_config& adamw) {
    const std::size_t P = params_.size();
    auto flat = [P](float* d) { return tensor_view<float, 1>::contiguous(d, {static_cast<std::int64_t>(P)}); };
    const auto op = ops::make_adamw_update<float>(flat(params_.data()), flat(adam_m_.data()),
                                                  flat(adam_v_.data()), flat(grads_.data()),
                                                  adamw, step_ + 1);
    detail::launch(*backend_, *stream_, op);
    backend_->synchronize(*stream_);
    ++step_;
  }

  /// forward_backward, then update; returns the loss before the update.
  float train_step(std::span<const std::int32_t> inputs, std::span<const std::int32_t> targets,
                   const ops::adamw_config& adamw) {
    const float loss = forward_backward(inputs, targets);
    update(adamw);
    return loss;
  }

  /// Per-token losses of the last forward_backward: [T].
  [[nodiscard]] std::span<const float> token_losses() const noexcept { return host_losses_.span(); }
  /// Mean of the last per-token losses over target positions `range`.
  [[nodiscard]] double mean_loss(position_range range) const {
    expects(range.begin >= 0 && range.begin < range.end && range.end <= T_, [&] {
      return "gpt2_model::mean_loss: range [" + std::to_string(range.begin) + ", " +
             std::to_string(range.end) + ") is empty or outside the context [0, " +
             std::to_string(T_) + ")";
    });
    double sum = 0;
    for (std::int64_t t = range.begin; t < range.end; ++t) sum += host_losses_.data()[t];
    return sum / static_cast<double>(range.size());
  }

 private:
  using device_floats = buffer<float, device_resource>;
  using device_bytes_buffer = buffer<std::byte, device_resource>;
  using pinned_floats = buffer<float, pinned_resource>;
  using pinned_ints = buffer<std::int32_t, pinned_resource>;
  using pinned_longs = buffer<std::int64_t, pinned_resource>;
  using pinned_bytes_buffer = buffer<std::byte, pinned_resource>;

  static gpt2_config checked_config(const gpt2_config& config, const gpt2_model_options& o) {
    config.validate("gpt2_model");
    expects(o.context >= 1 && o.context <= config.max_seq_len, [&] {
      return "gpt2_model: context " + std::to_string(o.context) + " must lie in [1, maxT " +
             std::to_string(config.max_seq_len) + "]";
    });
    return config;
  }

  /// One standard normal value per (seed, index), by Box-Muller.
  static double normal(std::uint64_t seed, std::uint64_t index) {
    const std::uint64_t a = detail::mix64(seed ^ detail::mix64(2 * index));
    const std::uint64_t b = detail::mix64(seed ^ detail::mix64(2 * index + 1));
    const double u1 = (static_cast<double>(a >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
    const double u2 = static_cast<double>(b >> 11) * 0x1.0p-53;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

  /// Attention objects: one, or one per layer with host K/V (each layer's
  /// K/V stay on the host from its forward to its backward).
  [[nodiscard]] std::size_t attention_count() const noexcept {
    return attention_shape_.offload ? static_cast<std::size_t>(config_.num_layers) : 1;
  }

  /// Device scratch of the attention objects. With host K/V each object
  /// has its own: its copy stream fills its K/V slots ordered only by its
  /// own events, so two objects must not share slots.
  [[nodiscard]] std::size_t attention_scratch_bytes() const {
    region_carver counting;
    const std::size_t each = chunked_causal_attention<B>::required_device_bytes(attention_shape_);
    for (std::size_t l = 0; l < attention_count(); ++l) (void)counting.take(each, "attention scratch");
    return counting.required_bytes();
  }

  chunked_causal_attention<B>& attention(std::int64_t layer) {
    return *attention_[attention_.size() == 1 ? 0 : static_cast<std::size_t>(layer)];
  }

  [[nodiscard]] std::size_t index_of(std::string_view name) const {
    for (std::size_t i = 0; i < outside_.size(); ++i) {
      if (outside_[i].name == name) return i;
    }
    throw error("gpt2_model: no step buffer named '" + std::string(name) + "'");
  }

  /// Views of the outside buffers at their planned addresses: the same
  /// every step, so objects built over them (rounding buffers, attention)
  /// are built once.
  void bind_outside_buffers() {
    auto region = [&](std::string_view name) { return arena_->region(index_of(name)); };
    const std::int64_t C = config_.channels;
    auto matrix = [&](std::string_view name, std::int64_t rows, std::int64_t cols) {
      return gpt2_matrix::contiguous(region(name).template as<float>(), {rows, cols});
    };
    auto vector = [&](std::string_view name) {
      return gpt2_vector::contiguous(region(name).template as<float>(), {T_});
    };
    tokens_ = tensor_view<const std::int32_t, 1>::contiguous(region("tokens").template as<std::int32_t>(), {T_});
    targets_ = tensor_view<const std::int32_t, 1>::contiguous(region("targets").template as<std::int32_t>(), {T_});
    order_ = region("bucket order").template as<std::int64_t>();
    starts_ = region("bucket starts").template as<std::int64_t>();
    ids_ = region("bucket ids").template as<std::int32_t>();
    losses_ = vector("losses");
    residual_ = matrix("residual", T_, C);
    lnf_ = matrix("lnf", T_, C);
    lnf_mean_ = vector("lnf_mean");
    lnf_rstd_ = vector("lnf_rstd");
    dlnf_ = matrix("dlnf", T_, C);
    logits_ = matrix("logits chunk", chunk_, config_.padded_vocab_size);
    dresidual_ = matrix("dresidual", T_, C);
    live_.assign(outside_.size(), nullptr);
  }

  /// The job profiler of MEMO section 4.3.2 for one block: runs a block's
  /// backward once, on zeros, through a recording resource, and returns
  /// the trace of its transient requests (one section, `layer 0 backward`).
  memory_trace record_block_backward() {
    B& b = *backend_;
    auto& s = *stream_;
    const std::int64_t C = config_.channels, NH = config_.num_heads;
    const skeletal_layout layout = gpt2_skeletal_layout(config_, T_);
    attention_shape shape = attention_shape_;
    shape.offload = false;  // the transients do not depend on where K/V live
    auto carve = [&](region_carver& c, std::vector<skeletal_slice>* slices) {
      for (const auto& t : layout.tensors()) {
        const memory_region r = c.take(static_cast<std::size_t>(t.bytes()), t.name);
        if (slices) slices->push_back({r.data, t.tokens, t.bytes_per_token, false});
      }
      return std::pair{detail::carve_matrix(c, T_, C, "dresidual"),
                       c.take(chunked_causal_attention<B>::required_device_bytes(shape), "attention scratch")};
    };
    region_carver counting;
    (void)carve(counting, nullptr);
    device_bytes_buffer temporary(b.device_memory(), counting.required_bytes());
    region_carver carver(memory_region{temporary.data(), temporary.size_bytes()}, "gpt2 block recording");
    std::vector<skeletal_slice> slices;
    const auto [dresidual, scratch] = carve(carver, &slices);
    b.memset_async(temporary.data(), 0, temporary.size_bytes(), s);
    chunked_causal_attention<B> attention(b, shape, scratch, memory_region{});
    const auto a = gpt2_layer_activations::from_skeletal(slices, T_, C, NH);
    detail::stream_synchronizing_resource<B, device_resource> upstream(b, s, b.device_memory());
    recording_resource recorder(upstream, "gpt2 block backward");
    recorder.begin_section("layer 0 backward");
    gpt2_layer_backward(b, s, p_.layer(0), g_.layer(0), NH, a, dresidual, recorder, attention);
    recorder.end_section("layer 0 backward");
    b.synchronize(s);
    return recorder.trace();
  }

  /// Runs the requests of `phase` through the replay; a malloc must land
  /// where the buffer was bound.
  void step_phase(gpt2_step_phase phase) {
    for_each_step_request(
        outside_, phase,
        [&](std::size_t i) {
          replay_->deallocate(std::exchange(live_[i], nullptr), outside_[i].bytes, default_alignment_bytes);
        },
        [&](std::size_t i) {
          live_[i] = replay_->allocate(outside_[i].bytes, default_alignment_bytes);
          expects(live_[i] == arena_->region(i).data, [&] {
            return "gpt2_model: the replay placed '" + outside_[i].name +
                   "' away from its planned address";
          });
        });
  }

  /// The token range layer `layer` rebuilds before its backward: the
  /// recomputed tails of a swapped layer, and the shared tensors the next
  /// layer overwrote (every layer but the last). Every skeletal tensor has
  /// T tokens, so one range covers them all. Empty when nothing is rebuilt.
  [[nodiscard]] token_range recompute_range(std::size_t layer) const {
    const offload_plan& plan = rounding_->plan();
    const auto last = static_cast<std::size_t>(config_.num_layers) - 1;
    token_range range{static_cast<std::size_t>(T_), 0};
    for (std::size_t t = 0; t < plan.layout().size(); ++t) {
      std::vector<token_range> ranges;
      if (plan.shared(t)) {
        if (layer != last) ranges.push_back({0, plan.layout()[t].tokens});
      } else if (swapper_->swapped(layer)) {
        ranges = plan.recomputed(t);
      }
      for (const auto& r : ranges) {
        range.begin = std::min(range.begin, r.begin);
        range.end = std::max(range.end, r.end);
      }
    }
    return range.empty() ? token_range{} : range;
  }

  void run_step(std::int64_t distinct) {
    B& b = *backend_;
    auto& s = *stream_;
    const std::int64_t C = config_.channels, NH = config_.num_heads, L = config_.num_layers;
    step_phase(gpt2_step_phase::step_begin);
    upload_tokens(distinct);
    b.memset_async(grads_.data(), 0, grads_.size_bytes(), s);
    // Forward: each layer copies the residual stream into its input slice
    // and writes its output back over it.
    detail::launch(b, s, ops::encoder_forward<float>{residual_, tokens_, p_.wte, p_.wpe,
                                                     config_.vocab_size, T_, 0});
    for (std::int64_t l = 0; l < L; ++l) {
      const auto layer = static_cast<std::size_t>(l);
      const auto a = gpt2_layer_activations::from_skeletal(swapper_->begin_forward(layer), T_, C, NH);
      b.copy_async(a.input.data(), residual_.data(), residual_.size_bytes(), copy_kind::device_to_device, s);
      gpt2_layer_forward(b, s, p_.layer(l), NH, a, residual_, attention(l));
      swapper_->end_forward(layer);
    }
    step_phase(gpt2_step_phase::head_begin);
    detail::launch(b, s, ops::layernorm_forward<float>{lnf_, lnf_mean_, lnf_rstd_, residual_, p_.lnfw, p_.lnfb});
    // Loss and the head's backward, chunk by chunk: dlnf <- d(lnf), dwte += ...
    const std::int64_t Vp = config_.padded_vocab_size;
    for (std::int64_t r0 = 0; r0 < T_; r0 += chunk_) {
      const std::int64_t n = std::min(chunk_, T_ - r0);
      const gpt2_matrix logits = logits_.slice(0, n);  // [n, Vp]
      const gpt2_matrix x = lnf_.slice(r0, n);
      b.gemm(s, gemm_shape{.m = n, .n = Vp, .k = C, .op_b = matrix_op::transpose}, 1.0f,
             x.data(), p_.wte.data(), 0.0f, logits.data());
      detail::launch(b, s, ops::cross_entropy_chunk<float>{logits, losses_.slice(r0, n),
                                                           targets_.slice(r0, n), config_.vocab_size,
                                                           1.0f / static_cast<float>(T_)});
      b.gemm(s, gemm_shape{.m = n, .n = C, .k = Vp}, 1.0f, logits.data(), p_.wte.data(), 0.0f,
             dlnf_.slice(r0, n).data());
      b.gemm(s, gemm_shape{.m = Vp, .n = C, .k = n, .op_a = matrix_op::transpose}, 1.0f,
             logits.data(), x.data(), 1.0f, g_.wte.data());
    }
    b.copy_async(host_losses_.data(), losses_.data(), host_losses_.size_bytes(),
                 copy_kind::device_to_host, s);
    step_phase(gpt2_step_phase::loss_end);
    // Backward.
    b.memset_async(dresidual_.data(), 0, dresidual_.size_bytes(), s);
    detail::launch(b, s, ops::layernorm_backward_input<float>{dresidual_, dlnf_, residual_, p_.lnfw, lnf_mean_, lnf_rstd_});
    detail::launch(b, s, ops::layernorm_backward_params<float>{g_.lnfw, g_.lnfb, dlnf_, residual_, lnf_mean_, lnf_rstd_});
    step_phase(gpt2_step_phase::head_end);
    for (std::int64_t l = L - 1; l >= 0; --l) {
      const auto layer = static_cast<std::size_t>(l);
      const std::string section = "layer " + std::to_string(l) + " backward";
      mark_section_begin(*replay_, section);
      const token_range rebuild = recompute_range(layer);
      // The swapper calls this in stream order, before the rebuild below:
      // it checks that the swapper asks for exactly the rows rebuilt here.
      auto check = [rebuild, layer](typename B::native_stream, const recompute_request& request) {
        token_range asked{std::numeric_limits<std::size_t>::max(), 0};
        for (const auto& item : request.items) {
          asked.begin = std::min(asked.begin, item.tokens.begin);
          asked.end = std::max(asked.end, item.tokens.end);
        }
        expects(asked == rebuild, [&] {
          return "gpt2_model: layer " + std::to_string(layer) + ": the swapper asks to rebuild rows [" +
                 std::to_string(asked.begin) + ", " + std::to_string(asked.end) + "), the model rebuilds [" +
                 std::to_string(rebuild.begin) + ", " + std::to_string(rebuild.end) + ")";
        });
      };
      const auto a = gpt2_layer_activations::from_skeletal(swapper_->begin_backward(layer, check), T_, C, NH);
      gpt2_layer_recompute(b, s, p_.layer(l), a, static_cast<std::int64_t>(rebuild.begin),
                           static_cast<std::int64_t>(rebuild.tokens()));
      gpt2_layer_backward(b, s, p_.layer(l), g_.layer(l), NH, a, dresidual_, *replay_, attention(l));
      swapper_->end_backward(layer);
      mark_section_end(*replay_, section);
    }
    detail::launch(b, s, ops::encoder_backward_positions<float>{g_.wpe, dresidual_, T_, 0});
    detail::launch(b, s, ops::encoder_backward_tokens<float>{g_.wte, dresidual_, buckets_});
    swapper_->synchronize();
    step_phase(gpt2_step_phase::step_end);
    replay_->end_step();
  }

  /// Resets a step that threw part-way, so the next one starts clean:
  /// drains the streams, returns what the step held of the plan and
  /// rewinds the replay.
  void abandon_step() noexcept {
    try {
      swapper_->abandon_step();
    } catch (...) {  // the error is already on its way to the caller
    }
    for (std::size_t i = 0; i < live_.size(); ++i) {
      if (live_[i] == nullptr) continue;
      try {
        replay_->deallocate(std::exchange(live_[i], nullptr), outside_[i].bytes, default_alignment_bytes);
      } catch (...) {
      }
    }
    try {
      backend_->synchronize(*stream_);
      replay_->reset();
    } catch (...) {
    }
  }

  void expect_parameter_span(std::size_t n, const char* call) const {
    expects(n == table_.total, [&] {
      return std::string("gpt2_model::") + call + ": " + std::to_string(n) +
             " values given, the model has " + std::to_string(table_.total) + " parameters";
    });
  }

  void read_back(const device_floats& from, std::span<float> out, const char* call) {
    expect_parameter_span(out.size(), call);
    backend_->copy_async(staging_.data(), from.data(), from.size_bytes(), copy_kind::device_to_host,
                         *stream_);
    backend_->synchronize(*stream_);
    std::copy(staging_.data(), staging_.data() + staging_.size(), out.data());
  }

  /// Checks the token ids and groups the inputs by token for the
  /// embedding's backward, on the host; returns the number of groups.
  std::int64_t check_tokens(std::span<const std::int32_t> inputs, std::span<const std::int32_t> targets) {
    expects(inputs.size() == static_cast<std::size_t>(T_) && targets.size() == inputs.size(), [&] {
      return "gpt2_model: " + std::to_string(inputs.size()) + " inputs and " +
             std::to_string(targets.size()) + " targets given, the context is " + std::to_string(T_);
    });
    std::copy(inputs.begin(), inputs.end(), host_inputs_.data());
    std::copy(targets.begin(), targets.end(), host_targets_.data());
    auto host = [&](auto& buf, std::int64_t n) {
      using E = std::remove_reference_t<decltype(*buf.data())>;
      return tensor_view<E, 1>::contiguous(buf.data(), {n});
    };
    ops::check_targets(host(host_targets_, T_), config_.vocab_size);
    const ops::token_buckets found = ops::build_token_buckets(
        host(host_inputs_, T_), config_.vocab_size, host(host_order_, T_),
        host(host_starts_, T_ + 1), host(host_ids_, T_));
    return found.distinct();
  }

  /// Copies the checked ids and groups to their device buffers.
  void upload_tokens(std::int64_t distinct) {
    auto& s = *stream_;
    auto up = [&](void* to, const void* from, std::size_t bytes) {
      backend_->copy_async(to, from, bytes, copy_kind::host_to_device, s);
    };
    up(const_cast<std::int32_t*>(tokens_.data()), host_inputs_.data(), host_inputs_.size_bytes());
    up(const_cast<std::int32_t*>(targets_.data()), host_targets_.data(), host_targets_.size_bytes());
    up(order_, host_order_.data(), host_order_.size_bytes());
    up(starts_, host_starts_.data(), static_cast<std::size_t>(distinct + 1) * sizeof(std::int64_t));
    up(ids_, host_ids_.data(), static_cast<std::size_t>(distinct) * sizeof(std::int32_t));
    buckets_ = {tensor_view<const std::int64_t, 1>::contiguous(order_, {T_}),
                tensor_view<const std::int64_t, 1>::contiguous(starts_, {distinct + 1}),
                tensor_view<const std::int32_t, 1>::contiguous(ids_, {distinct})};
  }

  B* backend_;
  gpt2_config config_;
  std::int64_t T_;
  std::int64_t chunk_;
  attention_shape attention_shape_;
  gpt2_parameter_table table_;
  std::int64_t step_ = 0;
  device_floats params_, grads_, adam_m_, adam_v_;  // [P] each
  device_bytes_buffer workspace_;                   // the stream's BLAS workspace
  pinned_floats staging_;                           // [P]: parameters in and out
  pinned_floats host_losses_;                       // [T]
  pinned_ints host_inputs_, host_targets_, host_ids_;
  pinned_longs host_order_, host_starts_;
  pinned_bytes_buffer attention_pinned_;            // host K/V when kv_offload
  gpt2_parameter_views<float> p_{}, g_{};
  // The step's memory: the outside buffers, the trace, its plan, and the
  // views bound at their planned addresses.
  std::vector<gpt2_step_buffer> outside_;
  memory_trace step_trace_;
  bilevel_result plan_;
  std::vector<void*> live_;                         // [outside]: held by the current step
  gpt2_matrix residual_, lnf_, dlnf_, dresidual_, logits_;  // [T, C] x 4, [chunk, Vp]
  gpt2_vector lnf_mean_, lnf_rstd_, losses_;        // [T]
  tensor_view<const std::int32_t, 1> tokens_, targets_;  // [T]
  std::int64_t* order_ = nullptr;   // [T]
  std::int64_t* starts_ = nullptr;  // [T + 1]
  std::int32_t* ids_ = nullptr;     // [T]
  ops::token_buckets buckets_{};
  // Destroyed in reverse: attention, swapper, store, rounding buffers,
  // replay, arena, then the stream they all use.
  std::optional<typename B::stream> stream_;
  std::optional<planned_arena> arena_;
  std::optional<planned_replay_resource> replay_;
  std::optional<rounding_buffers<B>> rounding_;
  std::optional<host_store<B>> store_;
  std::optional<token_fraction_swapper<B>> swapper_;
  std::vector<std::unique_ptr<chunked_causal_attention<B>>> attention_;  // [1] or [L] with host K/V
};

}  // namespace memo
