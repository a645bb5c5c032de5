// memo/model/gpt2_model.hpp
//
// The reference GPT-2 (llm.c's model, fp32) on any `Backend`: embedding,
// L pre-LN blocks (gpt2_layer.hpp, with chunked causal attention), a final layernorm, the language-model
// head tied to the token embedding over the padded vocabulary, and softmax
// cross-entropy; its backward; and AdamW.
//
// Memory. Parameters, gradients and the two AdamW moments are one device
// allocation each, laid out by `gpt2_parameter_layout` (llm.c's order, so
// a checkpoint is one copy; gpt2_parameter_state.hpp). Everything a step uses besides them is one
// `planned_arena` (MEMO sections 4.1-4.3, gpt2_memory.hpp; owned by a
// `gpt2_step_memory`, gpt2_step_memory.hpp):
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
// attention with host-resident Q, K and V (FPDT), whose pinned memory is
// also allocated here; its backward reads them from there, so the blocks
// leave qkv out of their skeletal tensors and share one [T, 3C] buffer from
// each QKV projection to its attention. The layers' attentions share one
// device scratch (chunked_attention_scratch, one layer's bytes) and its
// slot events, so a layer's first host fetch in the backward runs while
// the layer after it still computes (`kv_prefetch_across_layers`). The
// model trains one sequence of `context` tokens per step (batch 1).
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
// step that throws part-way is abandoned (every stream drained, the
// attentions' marks for their next call forgotten, the replay rewound), so
// the next step starts clean, whether the failure was raised where work was
// issued or where it ran. The backend must outlive the
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
#include <string_view>
#include <type_traits>
#include <vector>

#include "memo/backend/buffer.hpp"
#include "memo/backend/concepts.hpp"
#include "memo/model/builtin_data.hpp"
#include "memo/model/gpt2_config.hpp"
#include "memo/model/gpt2_head.hpp"
#include "memo/model/gpt2_layer.hpp"
#include "memo/model/ops/adamw.hpp"
#include "memo/model/ops/cross_entropy.hpp"
#include "memo/model/ops/encoder.hpp"
#include "memo/model/gpt2_memory.hpp"
#include "memo/model/gpt2_parameter_state.hpp"
#include "memo/model/gpt2_step_memory.hpp"
#include "memo/model/token_data.hpp"
#include "memo/plan/bilevel_planner.hpp"
#include "memo/plan/planned_arena.hpp"
#include "memo/plan/planned_replay.hpp"
#include "memo/plan/recording_resource.hpp"
#include "memo/schedule/layer_cost.hpp"
#include "memo/schedule/memo_step.hpp"
#include "memo/swap/token_fraction_swapper.hpp"

namespace memo {

/// GPT-2's initialisation of `config`'s parameters (llm.c's order) from
/// `seed`: weights N(0, weight_std) (GPT-2's is 0.02), the two projections
/// into the residual stream N(0, weight_std / sqrt(2L)), layernorm weights 1,
/// biases 0. Every value is a function of (seed, its index) alone (Box-Muller
/// on a hash), so any part of the model (a pipeline stage) can be
/// initialised on its own and agree.
inline void gpt2_initial_parameters(const gpt2_config& config, std::uint64_t seed, std::span<float> out,
                                    double weight_std = 0.02) {
  expects(std::isfinite(weight_std) && weight_std > 0.0, [&] {
    return "gpt2_initial_parameters: weight_std " + std::to_string(weight_std) + " must be a positive number";
  });
  const gpt2_parameter_table table = gpt2_parameter_layout(config);
  expects(out.size() == table.total, [&] {
    return "gpt2_initial_parameters: " + std::to_string(out.size()) + " values given, the model has " +
           std::to_string(table.total) + " parameters";
  });
  auto normal = [seed](std::uint64_t index) {
    const std::uint64_t a = detail::mix64(seed ^ detail::mix64(2 * index));
    const std::uint64_t b = detail::mix64(seed ^ detail::mix64(2 * index + 1));
    const double u1 = (static_cast<double>(a >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
    const double u2 = static_cast<double>(b >> 11) * 0x1.0p-53;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  };
  const double residual_std = weight_std / std::sqrt(2.0 * config.num_layers);
  for (std::size_t t = 0; t < gpt2_tensor_count; ++t) {
    const gpt2_tensor_info& info = table.tensors[t];
    const std::string_view n = info.name;
    const bool bias = n.ends_with('b');
    const bool norm_weight = n == "ln1w" || n == "ln2w" || n == "lnfw";
    const double std_dev = (n == "attprojw" || n == "fcprojw") ? residual_std : weight_std;
    for (std::uint64_t i = info.offset; i < info.offset + info.count; ++i) {
      out[i] = bias ? 0.0f : norm_weight ? 1.0f : static_cast<float>(std_dev * normal(i));
    }
  }
}

template <Backend B>
class gpt2_model {
  using device_resource = std::remove_reference_t<decltype(std::declval<B&>().device_memory())>;
  using pinned_resource = std::remove_reference_t<decltype(std::declval<B&>().pinned_memory())>;

 public:
  gpt2_model(B& backend, const gpt2_config& config, const gpt2_model_options& options)
      : backend_(&backend),
        config_(checked_config(config, options)),
        T_(options.context),
        chunk_(gpt2_chunk_or_default(options.loss_chunk, T_)),
        attention_shape_{.tokens = T_, .heads = config_.num_heads, .kv_heads = config_.num_heads,
                         .head_dim = config_.head_size(),
                         .chunk = gpt2_chunk_or_default(options.attention_chunk, T_)},
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
    const std::int64_t most_resident = std::min<std::int64_t>(2, config_.num_layers);
    expects(!options.resident_last_layers ||
                (*options.resident_last_layers >= 0 && *options.resident_last_layers <= most_resident),
            [&] {
              return "gpt2_model: resident_last_layers " + std::to_string(*options.resident_last_layers) +
                     " must lie in [0, min(2 rounding buffers, " + std::to_string(config_.num_layers) +
                     " layers)]";
            });
    expects(options.offload_granularity >= 1 && options.offload_granularity <= T_, [&] {
      return "gpt2_model: offload_granularity " + std::to_string(options.offload_granularity) +
             " must lie in [1, context " + std::to_string(T_) + "]";
    });
    const auto T = static_cast<std::size_t>(T_);
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
    try {  // a failed allocation must not free buffers the stream is zeroing
      state_.emplace(backend, *stream_, table_);
      p_ = state_->parameters();
      g_ = state_->gradients();
      memory_.emplace(backend, *stream_, config_, T_, chunk_, attention_shape_, options, p_.layer(0),
                      g_.layer(0));
    } catch (...) {
      drain(backend, *stream_);
      throw;
    }
    backend.synchronize(*stream_);
  }
  gpt2_model(const gpt2_model&) = delete;
  gpt2_model& operator=(const gpt2_model&) = delete;
  ~gpt2_model() {
    if (stream_) drain(*backend_, *stream_);
  }

  [[nodiscard]] const gpt2_config& config() const noexcept { return config_; }
  [[nodiscard]] std::int64_t context() const noexcept { return T_; }
  [[nodiscard]] std::int64_t loss_chunk() const noexcept { return chunk_; }
  [[nodiscard]] std::int64_t attention_chunk() const noexcept { return attention_shape_.chunk; }
  [[nodiscard]] std::uint64_t parameter_count() const noexcept { return table_.total; }
  /// Device bytes of the parameters, gradients and moments (4 x 4 bytes each).
  [[nodiscard]] std::size_t parameter_state_bytes() const noexcept { return state_->bytes(); }
  /// Device bytes of everything else a step uses: the planned arena (the
  /// plan's peak) and the stream's BLAS workspace.
  [[nodiscard]] std::size_t activation_bytes() const noexcept {
    return memory_->arena_bytes() + workspace_.size_bytes();
  }
  /// The bi-level plan of a step's request trace (`step_trace()`).
  [[nodiscard]] const bilevel_result& memory_plan() const noexcept { return memory_->plan(); }
  [[nodiscard]] const memory_trace& step_trace() const noexcept { return memory_->step_trace(); }
  /// Which skeletal token ranges are offloaded and which recomputed.
  [[nodiscard]] const offload_plan& skeletal_plan() const noexcept { return memory_->skeletal_plan(); }
  /// Device bytes of the rounding buffers (K buffers and the shared region).
  [[nodiscard]] std::uint64_t rounding_buffer_bytes() const noexcept { return memory_->rounding_buffer_bytes(); }
  [[nodiscard]] std::size_t rounding_buffer_count() const noexcept { return memory_->rounding_buffer_count(); }
  /// Layers whose skeletal tensors go to host memory each step.
  [[nodiscard]] std::size_t swapped_layers() const noexcept { return memory_->swapped_layers(); }
  /// Pinned host bytes of the offloaded skeletal tensors and the host K/V.
  [[nodiscard]] std::uint64_t host_offload_bytes() const { return memory_->host_offload_bytes(); }
  [[nodiscard]] bool kv_offload() const noexcept { return memory_->kv_offload(); }
  /// The swapper's running byte counts (offloaded, prefetched, recomputed).
  [[nodiscard]] const token_fraction_swapper<B>& swapper() const noexcept { return memory_->swapper(); }
  /// Measures every later step's layers (on) or stops (off): each forward,
  /// recompute and backward on the compute stream and each offload and
  /// prefetch on the swapper's streams, named as in the simulated step
  /// (`step_config()`), so the two compare op by op (with `kv_offload` the
  /// simulated step also has the attention's own copies and the markers
  /// joining them, "attention ..." and "... joined", which are not
  /// recorded). Between steps only.
  void record_timeline(bool on) { memory_->swapper().record_timeline(on); }
  /// The last step measured (after forward_backward returned), from the
  /// start of layer 0's forward; the head and the loss run unnamed between
  /// the last forward and the first backward.
  [[nodiscard]] timeline last_step_timeline() const { return memory_->swapper().last_timeline(); }
  /// The simulated counterpart of a step: MEMO's step (memo_step.hpp) over
  /// this model's layer costs, alpha and swap protocol, so
  /// `simulate_memo_step(model.step_config(), profile)` predicts what
  /// `last_step_timeline()` measures (with `kv_offload` also the
  /// attention's host copies, from its chunk, which the timeline does not
  /// list).
  [[nodiscard]] memo_step_config step_config() const {
    const transformer_layer layer =
        gpt2_transformer_layer(config_, T_, memory_->qkv_skeletal(), attention_shape_.chunk);
    auto step = memo_step_config::from_layer_cost(gpt_layer_cost_of(layer),
                                                  config_.num_layers, skeletal_plan().alpha());
    const memo_protocol_options& protocol = swapper().protocol_options();
    step.rounding_buffers = static_cast<int>(protocol.rounding_buffers);
    step.resident_last_layers = static_cast<int>(protocol.resident_last_layers);
    step.protocol = protocol;
    return step;
  }
  /// AdamW steps taken so far.
  [[nodiscard]] std::int64_t steps() const noexcept { return state_->steps(); }

  /// GPT-2's initialisation from `seed` (gpt2_initial_parameters): weights
  /// N(0, weight_std) (GPT-2 uses 0.02), the two projections into the
  /// residual stream N(0, weight_std / sqrt(2L)), layernorm weights 1,
  /// biases 0. Resets the AdamW moments and the step count.
  void initialize(std::uint64_t seed, double weight_std = 0.02) {
    gpt2_initial_parameters(config_, seed, state_->staging(), weight_std);
    set_parameters(state_->staging());
  }

  /// Copies `parameters` (llm.c's order, `parameter_count()` values) in and
  /// resets the AdamW moments and the step count.
  void set_parameters(std::span<const float> parameters) {
    expect_parameter_span(parameters.size(), "set_parameters");
    state_->load(*stream_, parameters);
  }
  void get_parameters(std::span<float> out) { read_back(false, out, "get_parameters"); }
  /// The gradients of the last `forward_backward`.
  void get_gradients(std::span<float> out) { read_back(true, out, "get_gradients"); }

  /// Zeroes the gradients, runs the forward pass and the chunked loss on
  /// `inputs` -> `targets` (T token ids each, in [0, V)), and the backward
  /// pass. Returns the mean loss over the T targets.
  float forward_backward(std::span<const std::int32_t> inputs,
                         std::span<const std::int32_t> targets) {
    const std::int64_t distinct = check_tokens(inputs, targets);
    try {
      run_step(distinct);
    } catch (...) {
      memory_->abandon();
      throw;
    }
    return static_cast<float>(mean_loss({0, T_}));
  }

  /// One AdamW step over every parameter with the last gradients.
  void update(const ops::adamw_config& adamw) { state_->update(*stream_, adamw); }

  /// forward_backward, then update; returns the loss before the update.
  float train_step(std::span<const std::int32_t> inputs, std::span<const std::int32_t> targets,
                   const ops::adamw_config& adamw) {
    const float loss = forward_backward(inputs, targets);
    update(adamw);
    return loss;
  }

  /// Per-token losses of the last forward_backward: [T].
  [[nodiscard]] std::span<const float> token_losses() const { return host_losses_.span(); }
  /// Mean of the last per-token losses over target positions `range`.
  [[nodiscard]] double mean_loss(position_range range) const {
    return mean_over(token_losses(), range, "gpt2_model::mean_loss");
  }


 private:
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

  void run_step(std::int64_t distinct) {
    B& b = *backend_;
    auto& s = *stream_;
    const std::int64_t NH = config_.num_heads, L = config_.num_layers;
    gpt2_step_memory<B>& m = *memory_;
    const gpt2_step_views& v = m.buffers;
    auto& swapper = m.swapper();
    m.phase(gpt2_step_phase::step_begin);
    upload_tokens(distinct);
    state_->zero_gradients(s);
    // Forward: each layer copies the residual stream into its input slice
    // and writes its output back over it.
    gpt2_embedding_forward(b, s, v.residual, v.tokens, p_, config_.vocab_size, 0);
    for (std::int64_t l = 0; l < L; ++l) {
      const auto layer = static_cast<std::size_t>(l);
      const auto a = m.layer_activations(swapper.begin_forward(layer));
      b.copy_async(a.input.data(), v.residual.data(), v.residual.size_bytes(), copy_kind::device_to_device, s);
      gpt2_layer_forward(b, s, p_.layer(l), NH, a, v.residual, m.attention(l));
      swapper.end_forward(layer);
    }
    m.phase(gpt2_step_phase::head_begin);
    // The loss and the head's backward, chunk by chunk (gpt2_head.hpp).
    const gpt2_head_views head{v.residual, v.lnf, v.dlnf, v.lnf_mean, v.lnf_rstd, v.logits, v.losses, v.targets};
    gpt2_head_loss(b, s, p_, g_, head, config_.vocab_size, 1.0f / static_cast<float>(T_));
    b.copy_async(host_losses_.data(), v.losses.data(), host_losses_.size_bytes(),
                 copy_kind::device_to_host, s);
    m.phase(gpt2_step_phase::loss_end);
    // Backward.
    gpt2_head_backward(b, s, p_, g_, head, v.dresidual);
    m.phase(gpt2_step_phase::head_end);
    for (std::int64_t l = L - 1; l >= 0; --l) {
      const auto layer = static_cast<std::size_t>(l);
      const std::string section = "layer " + std::to_string(l) + " backward";
      mark_section_begin(m.replay(), section);
      const token_range rebuild = m.rebuild_range(layer);
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
      const auto a = m.layer_activations(swapper.begin_backward(layer, check));
      gpt2_layer_recompute(b, s, p_.layer(l), a, static_cast<std::int64_t>(rebuild.begin),
                           static_cast<std::int64_t>(rebuild.tokens()), m.qkv_skeletal());
      if (swapper.recomputing(layer)) swapper.end_recompute(layer);  // the measured recompute holds the rebuild
      gpt2_layer_backward(b, s, p_.layer(l), g_.layer(l), NH, a, v.dresidual, m.replay(), m.attention(l));
      swapper.end_backward(layer);
      mark_section_end(m.replay(), section);
    }
    gpt2_position_embedding_backward(b, s, g_, v.dresidual, 0);
    detail::launch(b, s, ops::encoder_backward_tokens<float>{g_.wte, v.dresidual, buckets_});
    swapper.synchronize();
    m.phase(gpt2_step_phase::step_end);
    m.replay().end_step();
  }

  void expect_parameter_span(std::size_t n, const char* call) const {
    expects(n == table_.total, [&] {
      return std::string("gpt2_model::") + call + ": " + std::to_string(n) +
             " values given, the model has " + std::to_string(table_.total) + " parameters";
    });
  }

  void read_back(bool gradients, std::span<float> out, const char* call) {
    expect_parameter_span(out.size(), call);
    const std::span<const float> values = state_->read(*stream_, gradients);
    std::copy(values.begin(), values.end(), out.data());
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
    const gpt2_step_views& v = memory_->buffers;
    auto up = [&](void* to, const void* from, std::size_t bytes) {
      backend_->copy_async(to, from, bytes, copy_kind::host_to_device, s);
    };
    up(const_cast<std::int32_t*>(v.tokens.data()), host_inputs_.data(), host_inputs_.size_bytes());
    up(const_cast<std::int32_t*>(v.targets.data()), host_targets_.data(), host_targets_.size_bytes());
    up(v.order, host_order_.data(), host_order_.size_bytes());
    up(v.starts, host_starts_.data(), static_cast<std::size_t>(distinct + 1) * sizeof(std::int64_t));
    up(v.ids, host_ids_.data(), static_cast<std::size_t>(distinct) * sizeof(std::int32_t));
    buckets_ = {tensor_view<const std::int64_t, 1>::contiguous(v.order, {T_}),
                tensor_view<const std::int64_t, 1>::contiguous(v.starts, {distinct + 1}),
                tensor_view<const std::int32_t, 1>::contiguous(v.ids, {distinct})};
  }

  B* backend_;
  gpt2_config config_;
  std::int64_t T_;
  std::int64_t chunk_;
  attention_shape attention_shape_;
  gpt2_parameter_table table_;
  device_bytes_buffer workspace_;                   // the stream's BLAS workspace
  pinned_floats host_losses_;                       // [T]
  pinned_ints host_inputs_, host_targets_, host_ids_;
  pinned_longs host_order_, host_starts_;
  gpt2_parameter_views<float> p_{}, g_{};
  ops::token_buckets buckets_{};
  std::optional<typename B::stream> stream_;
  std::optional<gpt2_parameter_state<B>> state_;  // parameters, gradients, AdamW moments
  std::optional<gpt2_step_memory<B>> memory_;     // after the stream: destroyed first
};

}  // namespace memo
