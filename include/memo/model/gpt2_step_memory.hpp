// memo/model/gpt2_step_memory.hpp
//
// The device memory of one GPT-2 training step (MEMO sections 4.1-4.3), as
// the reference model (gpt2_model.hpp) owns it: the rounding buffers and
// the token-fraction swapper for the skeletal tensors, the attention
// objects (one per layer with host K/V, over one shared scratch whose slot
// events let a layer's first host fetch run during the layer before it),
// and one planned arena for
// everything else, laid out by the bi-level plan of the step's trace and
// replayed every step (gpt2_memory.hpp says what the trace holds).
//
// The constructor records one block backward through a recording resource
// on the caller's stream (so it runs a block backward on zeros), plans the
// step and builds everything over the arena. A step then calls `phase` at
// each phase of gpt2_step_phase, walks the swapper, takes its transients
// from `replay()` and ends with `replay().end_step()`; `abandon` resets a
// step that threw part-way.
//
// Lifetime: the backend and the stream outlive the object; everything here
// is used on that one stream (plus the swapper's and the attention's own
// streams, joined back into it), and returned buffers are reused in stream
// order only. Not copyable or movable (the swapper and the attention hold
// pointers into it).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "memo/backend/buffer.hpp"
#include "memo/backend/concepts.hpp"
#include "memo/model/attention.hpp"
#include "memo/model/gpt2_config.hpp"
#include "memo/model/gpt2_layer.hpp"
#include "memo/model/gpt2_memory.hpp"
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
  /// With offload_alpha: the last layers that keep their skeletal tensors
  /// (MEMO's "last two": their backward starts right after their forward,
  /// so offloading them would only add a round trip). Unset: min(2, layers).
  /// Set: 0 (every layer swapped) to min(2, layers), the rounding buffers.
  std::optional<std::int64_t> resident_last_layers{};
  /// FPDT's host-resident K/V in the chunked attention (attention.hpp).
  bool kv_offload = false;
  /// With kv_offload: the layers' attentions share one scratch with its
  /// copy stream and slot events (chunked_attention_scratch), so a layer's
  /// first host fetch runs while the layer before it still computes.
  /// false: each attention call's copies start after everything enqueued
  /// before it (the same values; a reference for measuring the prefetch).
  bool kv_prefetch_across_layers = true;
  /// Time the bi-level planner may take (level 2 of a small model is solved
  /// well before it, but the exact search may not prove optimality).
  double plan_time_limit_seconds = 0.1;
};

/// The buffers outside the layer sections, at their planned addresses
/// (the same every step).
struct gpt2_step_views {
  gpt2_matrix residual, lnf, dlnf, dresidual, logits;  // [T, C] x 4, [loss chunk, Vp]
  gpt2_vector lnf_mean, lnf_rstd, losses;              // [T]
  tensor_view<const std::int32_t, 1> tokens, targets;   // [T]
  // [T, 3C] with host K/V: each block's QKV output, from its projection to
  // its attention; freed at head_begin, so in the backward a dead view that
  // nothing reads (the attention reads Q, K and V from its host store).
  gpt2_matrix qkv;
  std::int64_t* order = nullptr;                       // [T]
  std::int64_t* starts = nullptr;                      // [T + 1]
  std::int32_t* ids = nullptr;                         // [T]
};

/// The buffers of a step outside the layer sections (gpt2_memory.hpp's
/// table), at the addresses the plan gave them: each phase's frees and
/// mallocs go through the step's replay, and a malloc that lands anywhere
/// else is an error. `release` hands back what a step that threw still
/// holds. The arena and the replay must outlive the object.
class gpt2_outside_buffers {
 public:
  gpt2_outside_buffers(std::vector<gpt2_step_buffer> table, const planned_arena& arena,
                       planned_replay_resource& replay)
      : table_(std::move(table)), arena_(&arena), replay_(&replay), live_(table_.size(), nullptr) {}

  [[nodiscard]] const std::vector<gpt2_step_buffer>& table() const noexcept { return table_; }
  /// Where buffer `name` lives (the same every step).
  [[nodiscard]] memory_region region(std::string_view name) const { return arena_->region(index_of(name)); }

  /// Runs the requests of `phase` through the replay.
  void phase(gpt2_step_phase phase) {
    for_each_step_request(
        table_, phase,
        [&](std::size_t i) {
          replay_->deallocate(std::exchange(live_[i], nullptr), table_[i].bytes, default_alignment_bytes);
        },
        [&](std::size_t i) {
          live_[i] = replay_->allocate(table_[i].bytes, default_alignment_bytes);
          expects(live_[i] == arena_->region(i).data, [&] {
            return "gpt2 step: the replay placed '" + table_[i].name + "' away from its planned address";
          });
        });
  }

  /// Returns every buffer the current step holds (after a step threw).
  void release() noexcept {
    for (std::size_t i = 0; i < live_.size(); ++i) {
      if (live_[i] == nullptr) continue;
      try {
        replay_->deallocate(std::exchange(live_[i], nullptr), table_[i].bytes, default_alignment_bytes);
      } catch (...) {  // the step's own error is already on its way
      }
    }
  }

 private:
  [[nodiscard]] std::size_t index_of(std::string_view name) const {
    for (std::size_t i = 0; i < table_.size(); ++i) {
      if (table_[i].name == name) return i;
    }
    throw error("gpt2 step: no step buffer named '" + std::string(name) + "'");
  }

  std::vector<gpt2_step_buffer> table_;
  const planned_arena* arena_;
  planned_replay_resource* replay_;
  std::vector<void*> live_;  // [table]: held by the current step
};

/// The job profiler of MEMO section 4.3.2 for one block: runs the backward
/// of a block of `rows` tokens once, on zeros, through a recording
/// resource, and returns the trace of its transient requests (one section,
/// `layer 0 backward`). The attention is left out: it takes nothing from the
/// block's resource, so the requests are those of every real backward of
/// that many rows with that MLP chunk. p0 and g0 are one layer's parameters
/// and gradients (the gradients are left as garbage).
template <Backend B>
memory_trace record_gpt2_block_backward(B& backend, typename B::stream& stream, const gpt2_config& config,
                                        std::int64_t rows, std::int64_t mlp_chunk,
                                        const gpt2_layer_views<float>& p0, const gpt2_layer_views<float>& g0) {
  using device_resource = std::remove_reference_t<decltype(backend.device_memory())>;
  const std::int64_t C = config.channels, NH = config.num_heads;
  const skeletal_layout layout = gpt2_skeletal_layout(config, rows);
  auto carve = [&](region_carver& c, std::vector<skeletal_slice>* slices) {
    for (const auto& t : layout.tensors()) {
      const memory_region r = c.take(static_cast<std::size_t>(t.bytes()), t.name);
      if (slices) slices->push_back({r.data, t.tokens, t.bytes_per_token, false});
    }
    return detail::carve_matrix(c, rows, C, "dresidual");
  };
  region_carver counting;
  (void)carve(counting, nullptr);
  buffer<std::byte, device_resource> temporary(backend.device_memory(), counting.required_bytes());
  region_carver carver(memory_region{temporary.data(), temporary.size_bytes()}, "gpt2 block recording");
  std::vector<skeletal_slice> slices;
  const gpt2_matrix dresidual = carve(carver, &slices);
  backend.memset_async(temporary.data(), 0, temporary.size_bytes(), stream);
  const auto a = gpt2_layer_activations::from_skeletal(slices, rows, C, NH);
  detail::stream_synchronizing_resource<B, device_resource> upstream(backend, stream, backend.device_memory());
  recording_resource recorder(upstream, "gpt2 block backward");
  detail::gpt2_no_attention<B> no_attention;
  recorder.begin_section("layer 0 backward");
  gpt2_layer_backward(backend, stream, p0, g0, a, dresidual, recorder, no_attention, 0, rows, mlp_chunk);
  recorder.end_section("layer 0 backward");
  backend.synchronize(stream);
  return recorder.trace();
}

template <Backend B>
class gpt2_step_memory {
  using device_resource = std::remove_reference_t<decltype(std::declval<B&>().device_memory())>;
  using pinned_resource = std::remove_reference_t<decltype(std::declval<B&>().pinned_memory())>;
  using device_bytes_buffer = buffer<std::byte, device_resource>;
  using pinned_bytes_buffer = buffer<std::byte, pinned_resource>;

 public:
  /// Plans and builds a step of `T` tokens; `attention` is the shape
  /// without host K/V (options.kv_offload sets it); p0 and g0 are layer 0's
  /// parameters and gradients, used by the recorded block backward (its
  /// gradients are left as garbage: the model zeroes them every step).
  gpt2_step_memory(B& backend, typename B::stream& stream, const gpt2_config& config, std::int64_t T,
                   std::int64_t loss_chunk, const attention_shape& attention,
                   const gpt2_model_options& options, const gpt2_layer_views<float>& p0,
                   const gpt2_layer_views<float>& g0)
      : backend_(&backend), stream_(&stream), config_(config), T_(T), loss_chunk_(loss_chunk),
        attention_shape_(attention) {
    const std::int64_t L = config_.num_layers;
    // What the skeletal tensors keep, and where (MEMO section 4.1).
    const bool swapping = options.offload_alpha.has_value();
    // With host K/V the attention's backward reads Q, K and V from its own
    // host store, so the blocks do not keep qkv: one [T, 3C] buffer serves
    // every block from its QKV projection to its attention.
    qkv_ = gpt2_qkv_skeletal_for(options.kv_offload);
    offload_plan skeletal(gpt2_skeletal_layout(config_, T_, qkv_), swapping ? *options.offload_alpha : 1.0,
                          static_cast<std::size_t>(options.offload_granularity));
    const std::size_t K = swapping ? std::min<std::size_t>(2, static_cast<std::size_t>(L))
                                   : static_cast<std::size_t>(L);
    attention_shape_.offload = options.kv_offload;
    attention_shape_.keep_queries = false;  // Q goes to the host store with K and V
    // The plan (MEMO section 4.2): one block's backward recorded, then the step.
    std::vector<gpt2_step_buffer> outside = gpt2_step_buffers(config_, T_, loss_chunk, attention_scratch_bytes(),
                                                              rounding_buffers<B>::required_bytes(skeletal, K));
    if (qkv_ == gpt2_qkv_skeletal::dropped) {  // the forwards' only: the backward reads the host store
      outside.push_back(
          {"qkv", gpt2_qkv_buffer_bytes(config_, T_), gpt2_step_phase::step_begin, gpt2_step_phase::head_begin});
    }
    step_trace_ = gpt2_step_trace(outside, record_block_backward(p0, g0), L);
    dsa_solve_options solve;
    solve.time_limit_seconds = options.plan_time_limit_seconds;
    plan_ = bilevel_planner<>{}.plan(step_trace_, solve);
    arena_options arena;
    arena.fill = [b = &backend, s = stream_](memory_region r, std::byte value) {
      // Stream-ordered, like every free of a replay driven from this stream.
      if (r.bytes > 0) b->memset_async(r.data, static_cast<int>(value), r.bytes, *s);
    };
    arena_.emplace(backend, step_trace_, plan_.plan, std::move(arena));
    replay_.emplace(*arena_);
    outside_.emplace(std::move(outside), *arena_, *replay_);
    bind_outside_buffers();
    rounding_.emplace(backend, std::move(skeletal), K, outside_->region("skeletal"));
    swap_options swap;
    swap.layers = static_cast<std::size_t>(L);
    swap.resident_last_layers =
        swapping ? static_cast<std::size_t>(options.resident_last_layers.value_or(static_cast<std::int64_t>(K)))
                 : static_cast<std::size_t>(L);
    auto slots = host_slots_for(rounding_->plan(), static_cast<std::size_t>(L) - swap.resident_last_layers);
    store_.emplace(backend, host_store<B>::required_bytes(slots));
    swapper_.emplace(backend, *stream_, *rounding_, *store_, swap);
    const std::size_t attentions = attention_count();
    const std::size_t pinned_each = chunked_causal_attention<B>::required_pinned_bytes(attention_shape_);
    region_carver pinned_sizing;
    for (std::size_t l = 0; l < attentions; ++l) (void)pinned_sizing.take(pinned_each, "host Q/K/V");
    if (pinned_each > 0) {
      attention_pinned_ = pinned_bytes_buffer(backend.pinned_memory(), pinned_sizing.required_bytes());
    }
    region_carver pinned(memory_region{attention_pinned_.data(), attention_pinned_.size_bytes()},
                         "gpt2 step host Q/K/V");
    attention_scratch_.emplace(backend, attention_shape_, outside_->region("attention scratch"),
                               options.kv_prefetch_across_layers);
    for (std::size_t l = 0; l < attentions; ++l) {
      const std::string part = "attention of layer " + std::to_string(l);
      attention_.push_back(std::make_unique<chunked_causal_attention<B>>(
          *attention_scratch_, pinned_each > 0 ? pinned.take(pinned_each, part) : memory_region{}));
    }
  }
  gpt2_step_memory(const gpt2_step_memory&) = delete;
  gpt2_step_memory& operator=(const gpt2_step_memory&) = delete;

  /// The bi-level plan of a step's request trace (`step_trace()`).
  [[nodiscard]] const bilevel_result& plan() const noexcept { return plan_; }
  /// Device bytes of the arena: the plan's peak.
  [[nodiscard]] std::size_t arena_bytes() const noexcept { return arena_->peak_bytes(); }
  [[nodiscard]] const memory_trace& step_trace() const noexcept { return step_trace_; }
  /// Which skeletal token ranges are offloaded and which recomputed.
  [[nodiscard]] const offload_plan& skeletal_plan() const noexcept { return rounding_->plan(); }
  /// Device bytes of the rounding buffers (K buffers and the shared region).
  [[nodiscard]] std::uint64_t rounding_buffer_bytes() const noexcept { return rounding_->planned_device_bytes(); }
  [[nodiscard]] std::size_t rounding_buffer_count() const noexcept { return rounding_->count(); }
  /// Layers whose skeletal tensors go to host memory each step.
  [[nodiscard]] std::size_t swapped_layers() const noexcept { return swapper_->swapped_layers(); }
  /// Pinned host bytes of the offloaded skeletal tensors and the attention's
  /// host Q, K and V.
  [[nodiscard]] std::uint64_t host_offload_bytes() const {
    return host_store<B>::required_bytes(host_slots_for(rounding_->plan(), swapper_->swapped_layers())) +
           attention_pinned_.size_bytes();
  }
  [[nodiscard]] bool kv_offload() const noexcept { return attention_shape_.offload; }
  /// Whether the skeletal tensors keep qkv (dropped with host K/V).
  [[nodiscard]] gpt2_qkv_skeletal qkv_skeletal() const noexcept { return qkv_; }
  /// A layer's activations: the skeletal slices the swapper handed out,
  /// and qkv from `buffers.qkv` when the skeletal tensors leave it out (in
  /// the backward that view is dead: neither the rebuild nor the attention
  /// touches it).
  template <class Slices>
  [[nodiscard]] gpt2_layer_activations layer_activations(const Slices& slices) const {
    const std::int64_t C = config_.channels, NH = config_.num_heads;
    if (qkv_ == gpt2_qkv_skeletal::dropped) {
      return gpt2_layer_activations::from_skeletal(slices, T_, C, NH, T_, buffers.qkv);
    }
    return gpt2_layer_activations::from_skeletal(slices, T_, C, NH);
  }
  /// The swapper's running byte counts (offloaded, prefetched, recomputed).
  [[nodiscard]] const token_fraction_swapper<B>& swapper() const noexcept { return *swapper_; }
  [[nodiscard]] token_fraction_swapper<B>& swapper() noexcept { return *swapper_; }
  /// The replay every step's requests go through.
  [[nodiscard]] planned_replay_resource& replay() noexcept { return *replay_; }

  /// The attention object of layer `layer`.
  chunked_causal_attention<B>& attention(std::int64_t layer) {
    return *attention_[attention_.size() == 1 ? 0 : static_cast<std::size_t>(layer)];
  }

  /// Runs the requests of `phase` through the replay; a malloc must land
  /// where the buffer was bound.
  void phase(gpt2_step_phase phase) { outside_->phase(phase); }

  /// The token range layer `layer` rebuilds before its backward: the
  /// recomputed tails of a swapped layer, and the shared tensors the next
  /// layer overwrote (every layer but the last). Every skeletal tensor has
  /// T tokens, so one range covers them all. Empty when nothing is rebuilt.
  [[nodiscard]] token_range rebuild_range(std::size_t layer) const {
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

  /// Resets a step that threw part-way, so the next one starts clean:
  /// drains the streams (the swapper's, the compute stream and the
  /// attentions' copy stream, which a failure reaches through its waits),
  /// then returns what the step held of the plan (its release may poison
  /// the buffers, which no queued copy may still touch) and rewinds the
  /// replay.
  void abandon() noexcept {
    try {
      swapper_->abandon_step();
    } catch (...) {  // the error is already on its way to the caller
    }
    drain(*backend_, *stream_);
    if (attention_scratch_) attention_scratch_->drain();
    outside_->release();
    try {
      replay_->reset();
    } catch (...) {
    }
  }

  gpt2_step_views buffers;

 private:
  /// Attention objects: one, or one per layer with host K/V (each layer's
  /// Q, K and V stay on the host from its forward to its backward).
  [[nodiscard]] std::size_t attention_count() const noexcept {
    return attention_shape_.offload ? static_cast<std::size_t>(config_.num_layers) : 1;
  }

  /// Device scratch of the attention objects: one chunked_attention_scratch,
  /// which they share (each is called in turn on the compute stream; the
  /// scratch's slot events order their copies, so a layer's first fetch
  /// runs during the layer before it). One object's bytes: sharing adds none.
  [[nodiscard]] std::size_t attention_scratch_bytes() const {
    return chunked_attention_scratch<B>::required_bytes(attention_shape_);
  }

  /// Views of the outside buffers at their planned addresses: the same
  /// every step, so objects built over them (rounding buffers, attention)
  /// are built once.
  void bind_outside_buffers() {
    auto region = [&](std::string_view name) { return outside_->region(name); };
    const std::int64_t C = config_.channels;
    auto matrix = [&](std::string_view name, std::int64_t rows, std::int64_t cols) {
      return gpt2_matrix::contiguous(region(name).template as<float>(), {rows, cols});
    };
    auto vector = [&](std::string_view name) {
      return gpt2_vector::contiguous(region(name).template as<float>(), {T_});
    };
    auto& v = buffers;
    v.tokens = tensor_view<const std::int32_t, 1>::contiguous(region("tokens").template as<std::int32_t>(), {T_});
    v.targets = tensor_view<const std::int32_t, 1>::contiguous(region("targets").template as<std::int32_t>(), {T_});
    v.order = region("bucket order").template as<std::int64_t>();
    v.starts = region("bucket starts").template as<std::int64_t>();
    v.ids = region("bucket ids").template as<std::int32_t>();
    v.losses = vector("losses");
    v.residual = matrix("residual", T_, C);
    v.lnf = matrix("lnf", T_, C);
    v.lnf_mean = vector("lnf_mean");
    v.lnf_rstd = vector("lnf_rstd");
    v.dlnf = matrix("dlnf", T_, C);
    v.logits = matrix("logits chunk", loss_chunk_, config_.padded_vocab_size);
    v.dresidual = matrix("dresidual", T_, C);
    if (qkv_ == gpt2_qkv_skeletal::dropped) v.qkv = matrix("qkv", T_, 3 * C);
  }

  memory_trace record_block_backward(const gpt2_layer_views<float>& p0, const gpt2_layer_views<float>& g0) {
    return record_gpt2_block_backward(*backend_, *stream_, config_, T_, 0, p0, g0);
  }

  B* backend_;
  typename B::stream* stream_;
  gpt2_config config_;
  std::int64_t T_;
  std::int64_t loss_chunk_;
  attention_shape attention_shape_;
  gpt2_qkv_skeletal qkv_ = gpt2_qkv_skeletal::kept;
  memory_trace step_trace_;
  bilevel_result plan_;
  pinned_bytes_buffer attention_pinned_;  // the attention's host Q/K/V when kv_offload
  // Destroyed in reverse: attention, its scratch, swapper, store, rounding
  // buffers, replay, arena.
  std::optional<planned_arena> arena_;
  std::optional<planned_replay_resource> replay_;
  std::optional<gpt2_outside_buffers> outside_;
  std::optional<rounding_buffers<B>> rounding_;
  std::optional<host_store<B>> store_;
  std::optional<token_fraction_swapper<B>> swapper_;
  std::optional<chunked_attention_scratch<B>> attention_scratch_;      // the attentions' shared scratch
  std::vector<std::unique_ptr<chunked_causal_attention<B>>> attention_;  // [1] or [L] with host K/V
};

}  // namespace memo
