#include "memo/project/megatron.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace mp = memo::project;

namespace {
// A tiny model and node with round numbers, so every byte can be worked by
// hand: 4 layers, h = 8, 2 heads, f = 32, V = 10; P = 4 x 768 + 80 = 3152.
const mp::model_shape tiny{"tiny", 4, 8, 2, 10};
constexpr double P = 3152;
constexpr double GiB3 = 3.0 * 1073741824.0;

mp::cluster tiny_cluster(double host_bytes, double link = 4e4, double device_bytes = 1e12) {
  return {{"t", 1e6, 0.5, 0.25, link, 1e12, 1e12, device_bytes, host_bytes, 2}, 2, 2};
}
}  // namespace

TEST_CASE("megatron: full recomputation's memory by hand") {
  // s = 16 on TP 2 x CP 1: T = 16 local tokens, 8 per GPU in sequence-split regions.
  const auto r = mp::detail::megatron(mp::strategy::recompute_planned, tiny, tiny_cluster(1e12), 16, 2, 1, 1);
  CHECK(r.device.params == doctest::Approx(2 * P / 2));
  CHECK(r.device.grads == doctest::Approx(4 * P / 2));
  CHECK(r.device.optimizer == doctest::Approx(12 * P / 2));
  // Skeletal bytes per token (core/transformer_layer.hpp's table): input 16,
  // attention output 16 + lse 8, the others 240; a GPU holds 8 tokens' worth.
  // Kept: 4 layer inputs (4 x 128) and the recomputed layer (8 x 280 = 2240).
  CHECK(r.device.skeletal == doctest::Approx(4 * 128 + 2240));
  // Working set: 16 x (dy 2h/TP 8 + two [f/TP] gradients 64 + gathered input
  // 16 + its gradient 16) = 1664; the loss 16 x (6V/TP 30 + 16 + 16) = 992.
  CHECK(r.device.transient == doctest::Approx(1664));
  CHECK(r.device.planned);
  CHECK(r.device.total() == doctest::Approx(3152 + 6304 + 18912 + GiB3 + 2752 + 1664));
  CHECK(r.host_per_node == 0);
  const auto c = mp::detail::megatron(mp::strategy::recompute, tiny, tiny_cluster(1e12), 16, 2, 1, 1);
  CHECK_FALSE(c.device.planned);
  CHECK(c.device.total() == doctest::Approx(3152 + 6304 + 18912 + GiB3 + mp::caching_fragmentation * 4416));
  // Pipeline stages share the parameters and the checkpoints.
  const auto staged = mp::detail::megatron(mp::strategy::recompute, tiny, tiny_cluster(1e12), 16, 2, 1, 1,
                                           std::nullopt, 2);
  CHECK(staged.device.params == doctest::Approx(P / 2));
  CHECK(staged.device.skeletal == doctest::Approx(2 * 128 + 2240));
}

TEST_CASE("megatron: MEMO's alpha, buffers and host memory by hand") {
  // Forward per GPU: GEMMs 2 x 768 x 16 / 2 = 12288 FLOPs at 5e5/s, causal
  // attention 2 x 256 x 8 / 2 = 2048 at 2.5e5/s, TP collectives of 256 B at 1e12 B/s.
  const double gemm = 12288 / 5e5, attention = 2048 / 2.5e5, comm = 4 * 0.5 * 256 / 1e12;
  const double forward = gemm + attention + comm;
  // Bandwidth-bound: 4e4 B/s x forward = 320 + alpha x 1920 (eq. 2).
  const double alpha = (4e4 * forward - 320) / 1920;
  const auto r = mp::detail::megatron(mp::strategy::memo, tiny, tiny_cluster(1e12), 16, 2, 1, 1);
  CHECK(r.chosen.alpha == doctest::Approx(alpha));
  CHECK(r.time.offload_stall == doctest::Approx(0).epsilon(1e-12));
  CHECK(r.device.skeletal == doctest::Approx(2 * 320 + 2 * 1920));  // two rounding buffers
  // Two GPUs of the node, 4 - 2 swapped layers.
  CHECK(r.host_per_node == doctest::Approx(2 * 2 * (320 + alpha * 1920)));
  // Step: 4 layers of forward, backward (2 x GEMMs, 2.5 x attention) and the
  // token-wise recomputation of QKV, projection and fc1 (2/3 of the GEMMs,
  // three of the four collectives) for 1 - alpha of the tokens; the classifier.
  const double backward = 2 * gemm + 2.5 * attention + comm;
  const double recompute = (1 - alpha) * (2.0 / 3 * gemm + 0.75 * comm);
  const double classifier = 3 * 2 * 16 * 8 * 10 / 2 / 5e5;
  CHECK(r.step_seconds == doctest::Approx(4 * (forward + backward + recompute) + classifier));
  // Host-bound: each GPU may hold 3200 / 2 = 1600 = 2 layers x (320 + alpha 1920): alpha = 0.25.
  const auto h = mp::detail::megatron(mp::strategy::memo, tiny, tiny_cluster(3200, 1e9), 16, 2, 1, 1);
  CHECK(h.chosen.alpha == doctest::Approx(0.25));
  CHECK(h.host_per_node == doctest::Approx(3200));
  CHECK(h.fits());
  // alpha = 0: one buffer for the other tensors (MEMO 4.1's special case).
  const auto zero = mp::detail::megatron(mp::strategy::memo, tiny, tiny_cluster(1e12), 16, 2, 1, 1, 0.0);
  CHECK(zero.device.skeletal == doctest::Approx(2 * 320 + 1920));
  // Not even the whole-offloaded tensors fit the host: it runs out.
  const auto oohm = mp::detail::megatron(mp::strategy::memo, tiny, tiny_cluster(1000, 1e9), 16, 2, 1, 1);
  CHECK(oohm.limit == mp::resource::host_memory);
  // Full swapping on a slow link stalls by what the offload outlasts.
  const auto swap = mp::detail::megatron(mp::strategy::swap_planned, tiny, tiny_cluster(1e12, 1e3), 16, 2, 1, 1);
  CHECK(swap.time.offload_stall == doctest::Approx(2 * (2240 / 1e3 - forward + 2240 / 1e3 - backward)));
  CHECK(swap.link_bound());
}

TEST_CASE("megatron: settings divide heads and GPUs, and MEMO also tries alpha = 0") {
  const auto m = mp::parse_model_shape("7b");
  const mp::cluster c{mp::load_cluster_profile("a800"), 16, 8};
  for (const auto& r : mp::detail::megatron_settings(mp::strategy::memo, m, c, 1 << 20)) {
    CHECK(r.chosen.tp * r.chosen.cp * r.chosen.dp == 16);
    CHECK(r.chosen.tp <= 8);
    CHECK(32 % r.chosen.tp == 0);
  }
  bool staged = false;
  for (const auto& r : mp::detail::megatron_settings(mp::strategy::recompute, m, c, 1 << 20)) {
    CHECK(r.chosen.tp * r.chosen.cp * r.chosen.dp * r.chosen.pp == 16);
    CHECK(32 % r.chosen.pp == 0);
    staged = staged || r.chosen.pp > 1;
  }
  CHECK(staged);
}

TEST_CASE("megatron: the a800 profile agrees with MEMO 4.1's statements about its hardware") {
  const auto m = mp::parse_model_shape("7b");
  const mp::cluster c{mp::load_cluster_profile("a800"), 8, 8};
  // Figure 1(b): a layer's skeletal activations hide behind its forward from 192K on at TP 8.
  const auto at192 = mp::detail::megatron_layer_of(m, c, 192 * 1024, 8, 1);
  const double rate = (at192.input + at192.attention_output + at192.other) / at192.forward;
  CHECK(rate / c.profile.host_link_bytes_per_second == doctest::Approx(1).epsilon(0.10));
  // Figure 7: FlashAttention is over 90% of the forward from 576K on (TP 8).
  const auto at576 = mp::detail::megatron_layer_of(m, c, 576 * 1024, 8, 1);
  CHECK(at576.attention / at576.forward == doctest::Approx(0.90).epsilon(0.02));
}

TEST_CASE("megatron: the caching factor lies inside what MEMO Table 4 rows 1-2 allow") {
  // Full recomputation at TP 4 x CP 2 ran at 384K and ran out at 512K on a
  // caching allocator: the factor on the planned activations must let the
  // first fit and not the second.
  const auto m = mp::parse_model_shape("7b");
  const mp::cluster c{mp::load_cluster_profile("a800"), 8, 8};
  auto bound = [&](double s) {
    const auto r = mp::detail::megatron(mp::strategy::recompute_planned, m, c, s, 4, 2, 1);
    return (r.device_capacity - (r.device.total() - r.device.planned_arena)) / r.device.planned_arena;
  };
  CHECK(bound(512 * 1024) < mp::caching_fragmentation);
  CHECK(mp::caching_fragmentation < bound(384 * 1024));
  CHECK(mp::detail::megatron(mp::strategy::recompute, m, c, 384 * 1024, 4, 2, 1).fits());
  CHECK_FALSE(mp::detail::megatron(mp::strategy::recompute, m, c, 512 * 1024, 4, 2, 1).fits());
}

TEST_CASE("megatron: a TP or PP that does not divide the GPUs runs on as many as it divides") {
  const auto m = mp::parse_model_shape("7b");
  const mp::cluster five{mp::load_cluster_profile("a800"), 5, 8};
  // Without idle GPUs only TP 1 divides 5.
  for (const auto& r : mp::detail::megatron_settings(mp::strategy::memo, m, five, 1 << 20)) {
    CHECK(r.chosen.tp == 1);
    CHECK(r.chosen.gpus() == 5);
  }
  // With them: TP 2 x CP 2 and TP 4 on 4 of the 5, each with CP over the
  // whole rest (DP 1), next to every setting on all 5.
  std::vector<std::pair<int, int>> idle;  // (TP, CP) of the settings using fewer GPUs
  for (const auto& r : mp::detail::megatron_settings(mp::strategy::memo, m, five, 1 << 20, true)) {
    CHECK(r.chosen.gpus() <= 5);
    if (r.chosen.gpus() < 5) {
      CHECK(r.chosen.dp == 1);
      idle.emplace_back(r.chosen.tp, r.chosen.cp);
    }
  }
  std::sort(idle.begin(), idle.end());
  idle.erase(std::unique(idle.begin(), idle.end()), idle.end());
  CHECK(idle == std::vector<std::pair<int, int>>{{2, 2}, {4, 1}});
  // Host memory and the alpha LP's budget count the GPUs the setting uses:
  // on 2 of 3 GPUs of a node, 2 x (4 - 2) swapped layers x (320 + alpha 1920) B.
  mp::cluster three = tiny_cluster(1e12);
  three.gpus = 3;
  three.gpus_per_node = 4;
  const auto r = mp::detail::megatron(mp::strategy::memo, tiny, three, 16, 2, 1, 1);
  CHECK(r.chosen.gpus() == 2);
  CHECK(r.host_per_node == doctest::Approx(2 * 2 * (320 + r.chosen.alpha * 1920)));
  // MFU and tokens per GPU count the idle GPU: 3/2 of the time per GPU.
  const auto all = mp::detail::megatron(mp::strategy::memo, tiny, tiny_cluster(1e12), 16, 2, 1, 1);
  CHECK(r.tokens_per_gpu_per_second == doctest::Approx(all.tokens_per_gpu_per_second * 2 / 3));
  CHECK(r.mfu == doctest::Approx(all.mfu * 2 / 3));
}

TEST_CASE("megatron: MEMO's alpha also keeps the backward's prefetch on the link (row 4)") {
  // A hand-made layer whose backward is shorter than its forward (no real
  // Megatron layer is; the row is there so the strategy solves the library's
  // LP): 320 whole bytes, 1920 other bytes, a 4e4 B/s link both ways.
  const auto c = tiny_cluster(1e12);
  mp::detail::megatron_layer l;
  l.input = 128;
  l.attention_output = 192;
  l.other = 1920;
  l.forward = 0.04;   // eq. (2) alone: 4e4 x 0.04 = 1600 = 320 + alpha 1920 -> alpha = 2/3
  l.backward = 0.02;  // row (4), one prefetch: 4e4 x 0.02 = 800 = 320 + alpha 1920 -> alpha = 1/4
  CHECK(mp::detail::memo_alpha(tiny, c, l, 2) == doctest::Approx(0.25));
  l.backward = 0.08;  // a backward longer than the forward: eq. (2) binds again
  CHECK(mp::detail::memo_alpha(tiny, c, l, 2) == doctest::Approx(2.0 / 3));
  l.backward = 0.005;  // not even the whole tensors fit the backward: alpha 0, the excess stalls
  CHECK(mp::detail::memo_alpha(tiny, c, l, 2) == 0.0);
}
