#include "memo/model/gpt2_step_memory.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "memo/backend/host_backend.hpp"

namespace {

using memo::host_backend;
using memo::token_range;

// maxT=8, V=11, Vp=16, L=4, NH=2, C=8; T = 8 tokens.
struct step_fixture {
  memo::gpt2_config config{8, 11, 16, 4, 2, 8};
  host_backend backend{};
  host_backend::stream stream = backend.make_stream("step");
  memo::buffer<float, memo::host_memory_resource> params, grads;
  memo::attention_shape shape{.tokens = 8, .heads = 2, .kv_heads = 2, .head_dim = 4, .chunk = 4};

  step_fixture() {
    const auto table = memo::gpt2_parameter_layout(config);
    params = memo::buffer<float, memo::host_memory_resource>(backend.device_memory(), table.total);
    grads = memo::buffer<float, memo::host_memory_resource>(backend.device_memory(), table.total);
    for (auto& v : params.span()) v = 0.0f;
  }
  std::unique_ptr<memo::gpt2_step_memory<host_backend>> make(std::optional<double> alpha, bool kv = false,
                                                             bool prefetch = true) {
    return std::make_unique<memo::gpt2_step_memory<host_backend>>(
              backend, stream, config, 8, 4, shape,
              memo::gpt2_model_options{.context = 8, .offload_alpha = alpha, .kv_offload = kv,
                                       .kv_prefetch_across_layers = prefetch},
              memo::view_gpt2_parameters(config, params.span()).layer(0),
              memo::view_gpt2_parameters(config, grads.span()).layer(0));
  }
};

}  // namespace

TEST_CASE("gpt2_step_memory: the rows each layer rebuilds follow alpha and the two resident layers") {
  step_fixture f;
  const token_range none{};
  {
    auto m = f.make(0.5);  // 4 of 8 tokens offloaded; layers 0 and 1 swapped
    CHECK(m->swapped_layers() == 2);
    CHECK(m->rounding_buffer_count() == 2);
    CHECK(m->rebuild_range(0) == token_range{4, 8});
    CHECK(m->rebuild_range(1) == token_range{4, 8});
    CHECK(m->rebuild_range(2) == none);
    CHECK(m->rebuild_range(3) == none);
  }
  {
    auto m = f.make(0.0);  // nothing of the token-wise tensors kept: a shared region
    CHECK(m->rebuild_range(0) == token_range{0, 8});
    CHECK(m->rebuild_range(2) == token_range{0, 8});  // the next layer overwrote it
    CHECK(m->rebuild_range(3) == none);               // the last layer's forward wrote it last
  }
  {
    auto m = f.make(1.0);
    for (std::size_t l = 0; l < 4; ++l) CHECK(m->rebuild_range(l) == none);
  }
  {
    auto m = f.make(std::nullopt, true);  // no offload: one buffer per layer, host K/V per layer
    CHECK(m->swapped_layers() == 0);
    CHECK(m->rounding_buffer_count() == 4);
    CHECK(m->kv_offload());
    CHECK(m->host_offload_bytes() > 0);
    for (std::size_t l = 0; l < 4; ++l) CHECK(m->rebuild_range(l) == none);
  }
}

TEST_CASE("gpt2_step_memory: with host K/V every layer's attention is built over one scratch of one layer's bytes") {
  // One chunked_attention_scratch for all layers: its slot events order
  // every layer's copies (a layer's first fetch runs during the layer
  // before it), and it costs one attention's device bytes.
  step_fixture f;
  for (const bool prefetch : {true, false}) {
    CAPTURE(prefetch);
    auto m = f.make(std::nullopt, true, prefetch);
    const auto& scratch = m->attention(0).device_scratch();
    for (std::int64_t l = 1; l < 4; ++l) CHECK(&m->attention(l).device_scratch() == &scratch);
    CHECK(scratch.prefetch_across_calls() == prefetch);
    CHECK(scratch.shape().offload);
    const std::size_t one = memo::chunked_causal_attention<host_backend>::required_device_bytes(scratch.shape());
    CHECK(memo::chunked_attention_scratch<host_backend>::required_bytes(scratch.shape()) == one);
    CHECK(scratch.region().bytes == one);
  }
}

TEST_CASE("gpt2_step_memory: phases hand out the bound addresses, and abandon rewinds a broken step") {
  step_fixture f;
  auto m = f.make(0.5);
  const float* residual = m->buffers.residual.data();
  m->phase(memo::gpt2_step_phase::step_begin);
  m->phase(memo::gpt2_step_phase::head_begin);
  // The step stops here. Starting over without rewinding is a request the
  // trace does not have next...
  CHECK_THROWS_WITH(m->phase(memo::gpt2_step_phase::step_begin), doctest::Contains("planned replay"));
  // ...abandon returns what the step held and rewinds, so a step starts again.
  m->abandon();
  CHECK_NOTHROW(m->phase(memo::gpt2_step_phase::step_begin));
  CHECK(m->buffers.residual.data() == residual);
  m->abandon();
}

TEST_CASE("gpt2_step_memory: with host K/V the blocks leave qkv to the attention's host store") {
  step_fixture f;
  // Bytes per token of one block's skeletal tensors, counted by hand from
  // gpt2_layer_activations: input, ln1, atty, res2, ln2 (C each), fch and
  // fch_gelu (4C each), four layernorm statistics, NH log-sum-exps, and qkv
  // (3C).
  const std::uint64_t C = 8, NH = 2, T = 8, L = 4, f32 = 4;
  const std::uint64_t qkv_row = 3 * C * f32;
  const std::uint64_t other_row = (13 * C + 4 + NH) * f32;
  // No offload: one rounding buffer per layer, the whole layer in each
  // (each tensor aligned; qkv's T rows are a multiple of the alignment).
  REQUIRE(T * qkv_row % memo::default_alignment_bytes == 0);
  auto kept = f.make(std::nullopt, false);
  auto dropped = f.make(std::nullopt, true);
  CHECK(kept->qkv_skeletal() == memo::gpt2_qkv_skeletal::kept);
  CHECK(dropped->qkv_skeletal() == memo::gpt2_qkv_skeletal::dropped);
  CHECK(kept->rounding_buffer_bytes() - dropped->rounding_buffer_bytes() == L * T * qkv_row);
  CHECK(dropped->rounding_buffer_bytes() >= L * T * other_row);
  // One [T, 3C] buffer stands in for every block's qkv, within the arena.
  CHECK(kept->buffers.qkv.data() == nullptr);
  REQUIRE(dropped->buffers.qkv.data() != nullptr);
  CHECK(dropped->buffers.qkv.extent(0) == 8);
  CHECK(dropped->buffers.qkv.extent(1) == 24);
  // It serves the forwards only: the step's trace frees it before the first
  // backward section (the outside table's 16th buffer, after the 15 every
  // step has).
  const memo::memory_trace& trace = dropped->step_trace();
  const auto qkv = std::find_if(trace.problem.buffers.begin(), trace.problem.buffers.end(),
                                [](const memo::dsa_buffer& b) { return b.id == 15; });
  REQUIRE(qkv != trace.problem.buffers.end());
  CHECK(qkv->size_bytes == T * qkv_row);
  int backward_sections = 0;
  for (const auto& section : trace.sections) {
    if (section.name.find("backward") == std::string::npos) continue;
    ++backward_sections;
    CHECK(qkv->upper <= section.begin);
  }
  CHECK(backward_sections == 4);
  // The attention keeps Q, K and V of every layer on the host.
  CHECK(dropped->host_offload_bytes() == L * T * qkv_row);
  CHECK(kept->host_offload_bytes() == 0);
  // Swapping half the tokens of two layers: the host no longer holds their
  // qkv rows (each layer's in one slot, aligned), and the attention holds
  // every layer's Q, K and V.
  auto swapped_kept = f.make(0.5, false);
  auto swapped_dropped = f.make(0.5, true);
  const std::uint64_t swapped = 2, offloaded_rows = 4;
  const std::uint64_t slot = (offloaded_rows * qkv_row + memo::default_alignment_bytes - 1) /
                             memo::default_alignment_bytes * memo::default_alignment_bytes;
  CHECK(swapped_kept->host_offload_bytes() + L * T * qkv_row - swapped_dropped->host_offload_bytes() ==
        swapped * slot);
  CHECK(swapped_dropped->rounding_buffer_bytes() < swapped_kept->rounding_buffer_bytes());
}
