// memo/model/gpt2_memory.hpp
//
// How a step of the reference GPT-2 (gpt2_model.hpp) is laid out in device
// memory, after MEMO sections 4.1-4.3:
//
//   - Skeletal tensors (section 4.1): `gpt2_skeletal_layout` lists what a
//     block keeps for its backward, token-major, in the order of
//     `gpt2_layer_activations`. The layer input, the attention output and
//     its log-sum-exp are offloaded whole; every other tensor is offloaded
//     for a fraction alpha of its tokens and recomputed token-wise for the
//     rest. Its byte counts per class equal `transformer_layer`'s for the
//     same shape at 4 bytes per element (`gpt2_transformer_layer`), which is
//     what the alpha LP reads, so the LP and the buffers agree.
//   - Transients (section 4.2): one block's backward is recorded once through
//     a `recording_resource` (its five gradient buffers, in the order the
//     code asks for them). `gpt2_step_trace` repeats that recording for
//     every layer, under `layer <l> backward` section markers, around the
//     buffers that live outside the layer sections (`gpt2_step_buffer`: the
//     rounding buffers' region, the attention's scratch and K/V slots, the
//     residual stream, the final layernorm, the logits chunk, the token
//     ids, and with host K/V the forwards' [T, 3C] qkv). The bi-level
//     planner plans that trace: level 1 the recorded
//     block once, level 2 the blocks beside everything else.
//   - Execution (section 4.3.4): the model replays the trace every step
//     through a `planned_replay_resource` over one `planned_arena`, so a
//     step allocates nothing and its device footprint is the plan's peak.
//
// Everything here is a pure function of shapes and the recorded trace.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "memo/core/bytes.hpp"
#include "memo/core/error.hpp"
#include "memo/core/transformer_layer.hpp"
#include "memo/model/gpt2_config.hpp"
#include "memo/plan/trace.hpp"
#include "memo/swap/skeletal_layout.hpp"

namespace memo {

/// Whether a block's fused QKV output is among its skeletal tensors: it
/// is, unless the attention keeps Q, K and V in its own host store (FPDT's
/// offload), whose backward then never reads the block's copy.
enum class gpt2_qkv_skeletal { kept, dropped };

/// Dropped with host K/V (`kv_offload`), kept without.
inline gpt2_qkv_skeletal gpt2_qkv_skeletal_for(bool kv_offload) {
  return kv_offload ? gpt2_qkv_skeletal::dropped : gpt2_qkv_skeletal::kept;
}

/// The model's chunk (attention and loss) for a requested one: 0 picks
/// min(T, 64), anything else is kept (and checked by the model).
inline std::int64_t gpt2_chunk_or_default(std::int64_t requested, std::int64_t T) {
  return requested == 0 ? std::min<std::int64_t>(T, 64) : requested;
}

/// Bytes of the [T, 3C] fp32 buffer that holds a block's QKV output when
/// the skeletal tensors leave it out.
inline std::uint64_t gpt2_qkv_buffer_bytes(const gpt2_config& c, std::int64_t T) {
  return checked_mul(checked_mul(static_cast<std::uint64_t>(T), static_cast<std::uint64_t>(3 * c.channels)),
                     sizeof(float));
}

/// The skeletal tensors of one GPT-2 block of T tokens (fp32), in the order
/// of `gpt2_layer_activations`' members (without qkv when dropped).
inline skeletal_layout gpt2_skeletal_layout(const gpt2_config& c, std::int64_t T,
                                            gpt2_qkv_skeletal qkv = gpt2_qkv_skeletal::kept) {
  const auto tokens = static_cast<std::size_t>(T);
  const auto C = static_cast<std::size_t>(c.channels);
  const auto NH = static_cast<std::size_t>(c.num_heads);
  constexpr std::size_t f = sizeof(float);
  using enum skeletal_policy;
  skeletal_layout layout(std::vector<skeletal_tensor>{
      {"input", tokens, f * C, offload_whole},
      {"ln1", tokens, f * C, offload_fraction},
      {"ln1_mean", tokens, f, offload_fraction},
      {"ln1_rstd", tokens, f, offload_fraction},
      {"qkv", tokens, f * 3 * C, offload_fraction},
      {"atty", tokens, f * C, offload_whole},
      {"att_lse", tokens, f * NH, offload_whole},  // stored [NH, T]: only ever copied whole
      {"res2", tokens, f * C, offload_fraction},
      {"ln2", tokens, f * C, offload_fraction},
      {"ln2_mean", tokens, f, offload_fraction},
      {"ln2_rstd", tokens, f, offload_fraction},
      {"fch", tokens, f * 4 * C, offload_fraction},
      {"fch_gelu", tokens, f * 4 * C, offload_fraction},
  });
  if (qkv == gpt2_qkv_skeletal::kept) return layout;
  std::vector<skeletal_tensor> without;
  for (const auto& t : layout.tensors()) {
    if (t.name != "qkv") without.push_back(t);
  }
  return skeletal_layout(std::move(without));
}

/// The same block as a `transformer_layer` (fp32, one GPU): what the alpha
/// LP and the cost model read. Without qkv, its attention keeps Q, K and V
/// and reads them back in chunks of `attention_chunk` tokens (0: all T).
inline transformer_layer gpt2_transformer_layer(const gpt2_config& c, std::int64_t T,
                                                gpt2_qkv_skeletal qkv = gpt2_qkv_skeletal::kept,
                                                std::int64_t attention_chunk = 0) {
  transformer_layer layer;
  layer.tokens = T;
  layer.hidden = c.channels;
  layer.heads = c.num_heads;
  layer.bytes_per_element = 4;
  layer.attention_keeps_qkv = qkv == gpt2_qkv_skeletal::dropped;
  layer.attention_chunk = attention_chunk;
  layer.check();
  return layer;
}

/// When, in a step, a buffer outside the layer sections is born or dies.
/// Phases happen in this order; the layers' forwards run between
/// step_begin and head_begin, their backwards between head_end and
/// step_end.
enum class gpt2_step_phase { step_begin, head_begin, loss_end, head_end, step_end };

inline constexpr std::size_t gpt2_step_phase_count = 5;

/// A buffer of a step outside every layer section.
struct gpt2_step_buffer {
  std::string name;
  std::uint64_t bytes = 0;
  gpt2_step_phase born = gpt2_step_phase::step_begin;
  gpt2_step_phase dies = gpt2_step_phase::step_end;
};

/// The buffers a GPT-2 step of T tokens uses outside the layer sections,
/// in the order it asks for them (their trace ids are their indices): the
/// token ids and the embedding backward's token groups, the per-token
/// losses, the attention scratch and the skeletal region (rounding buffers)
/// for the whole step; the residual stream [T, C] until the final
/// layernorm's backward; the final layernorm's output, statistics and
/// gradient over the head; the [loss_chunk, Vp] logits until the loss is
/// done; the residual gradient [T, C] from then on.
inline std::vector<gpt2_step_buffer> gpt2_step_buffers(const gpt2_config& c, std::int64_t T,
                                                       std::int64_t loss_chunk,
                                                       std::uint64_t attention_scratch_bytes,
                                                       std::uint64_t skeletal_bytes) {
  using enum gpt2_step_phase;
  const auto t = static_cast<std::uint64_t>(T);
  const std::uint64_t f = sizeof(float), i32 = sizeof(std::int32_t), i64 = sizeof(std::int64_t);
  const std::uint64_t tc = checked_mul(checked_mul(t, static_cast<std::uint64_t>(c.channels)), f);
  const std::uint64_t logits = checked_mul(
      checked_mul(static_cast<std::uint64_t>(loss_chunk), static_cast<std::uint64_t>(c.padded_vocab_size)), f);
  return {
      {"tokens", t * i32, step_begin, step_end},
      {"targets", t * i32, step_begin, step_end},
      {"bucket order", t * i64, step_begin, step_end},
      {"bucket starts", (t + 1) * i64, step_begin, step_end},
      {"bucket ids", t * i32, step_begin, step_end},
      {"losses", t * f, step_begin, step_end},
      {"attention scratch", attention_scratch_bytes, step_begin, step_end},
      {"skeletal", skeletal_bytes, step_begin, step_end},
      {"residual", tc, step_begin, head_end},
      {"lnf", tc, head_begin, head_end},
      {"lnf_mean", t * f, head_begin, head_end},
      {"lnf_rstd", t * f, head_begin, head_end},
      {"dlnf", tc, head_begin, head_end},
      {"logits chunk", logits, head_begin, loss_end},
      {"dresidual", tc, loss_end, step_end},
  };
}

/// The requests of phase `phase`, in the order a step makes them: the frees
/// of the buffers dying there, then the mallocs of those born there, each in
/// table order. Calls free(i) / malloc(i) with the table index.
template <class Free, class Malloc>
void for_each_step_request(const std::vector<gpt2_step_buffer>& outside, gpt2_step_phase phase,
                           Free&& free, Malloc&& malloc) {
  for (std::size_t i = 0; i < outside.size(); ++i) {
    if (outside[i].dies == phase) free(i);
  }
  for (std::size_t i = 0; i < outside.size(); ++i) {
    if (outside[i].born == phase) malloc(i);
  }
}

/// Trace id of layer `layer`'s copy of buffer `id` of the recorded block.
inline std::uint64_t gpt2_layer_buffer_id(std::size_t outside_count, std::uint64_t stride,
                                          std::int64_t layer, std::uint64_t id) {
  return outside_count + static_cast<std::uint64_t>(layer) * stride + id;
}

/// One backward section of a step: its name, the recorded block backward
/// it repeats (one section, every buffer born and freed inside it) and the
/// index that numbers its buffers (distinct per section: the layer).
struct gpt2_trace_section {
  std::string name;
  const memory_trace* block = nullptr;
  std::int64_t index = 0;
};

/// The request trace of one step: the outside buffers by phase (ids 0..n-1
/// in table order) and, between head_end and step_end, the sections in the
/// order given, each a copy of its recorded block (section k's buffers get
/// ids gpt2_layer_buffer_id(n, stride, index, id)).
inline memory_trace gpt2_step_trace(const std::vector<gpt2_step_buffer>& outside,
                                    const std::vector<gpt2_trace_section>& sections) {
  std::uint64_t stride = 1;
  for (const auto& section : sections) {
    const memory_trace& block = *section.block;
    expects(block.sections.size() == 1 && block.never_freed.empty(), [&] {
      return "gpt2_step_trace: the recorded block needs exactly one section and no buffer left "
             "live, got " + std::to_string(block.sections.size()) + " sections and " +
             std::to_string(block.never_freed.size()) + " live buffers";
    });
    for (const auto& b : block.problem.buffers) stride = std::max(stride, b.id + 1);
  }
  trace_builder builder("gpt2 step");
  auto phase = [&](gpt2_step_phase p) {
    for_each_step_request(
        outside, p, [&](std::size_t i) { builder.free(i, outside[i].bytes); },
        [&](std::size_t i) { builder.malloc(i, outside[i].bytes); });
  };
  phase(gpt2_step_phase::step_begin);
  phase(gpt2_step_phase::head_begin);
  phase(gpt2_step_phase::loss_end);
  phase(gpt2_step_phase::head_end);
  for (std::size_t k = 0; k < sections.size(); ++k) {
    const memory_trace& block = *sections[k].block;
    builder.begin_section(sections[k].name);
    for (const auto& e : detail::timeline_events(block.problem.buffers)) {
      const auto& b = block.problem.buffers[e.index];
      const std::uint64_t id = gpt2_layer_buffer_id(outside.size(), stride, sections[k].index, b.id);
      if (e.is_malloc) {
        builder.malloc(id, b.size_bytes);
      } else {
        builder.free(id, b.size_bytes);
      }
    }
    builder.end_section(sections[k].name);
  }
  phase(gpt2_step_phase::step_end);
  memory_trace trace = std::move(builder).finish();
  // Keep the alignments the blocks asked for (outside buffers: the default).
  for (auto& b : trace.problem.buffers) {
    if (b.id < outside.size()) {
      b.alignment = default_alignment_bytes;
      continue;
    }
    const auto index = static_cast<std::int64_t>((b.id - outside.size()) / stride);
    const std::uint64_t recorded = (b.id - outside.size()) % stride;
    for (const auto& section : sections) {
      if (section.index != index) continue;
      for (const auto& r : section.block->problem.buffers) {
        if (r.id == recorded) b.alignment = r.alignment;
      }
    }
  }
  return trace;
}

/// The request trace of one step of the single-device model: the outside
/// buffers by phase and, between head_end and step_end, `layers` copies of
/// the recorded block backward `block` for layers L-1 down to 0 (sections
/// `layer <l> backward`).
inline memory_trace gpt2_step_trace(const std::vector<gpt2_step_buffer>& outside,
                                    const memory_trace& block, std::int64_t layers) {
  std::vector<gpt2_trace_section> sections;
  for (std::int64_t l = layers - 1; l >= 0; --l) {
    sections.push_back({"layer " + std::to_string(l) + " backward", &block, l});
  }
  if (layers <= 0) (void)gpt2_step_trace({}, {{"check", &block, 0}});  // the block is checked all the same
  return gpt2_step_trace(outside, sections);
}

}  // namespace memo
