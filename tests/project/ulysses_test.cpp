#include "memo/project/ulysses.hpp"

#include <doctest/doctest.h>

namespace mp = memo::project;

namespace {
// 4 layers, h = 8, 2 heads, f = 32, V = 10: P = 3152, 768 per layer.
const mp::model_shape tiny{"tiny", 4, 8, 2, 10};
constexpr double P = 3152;
constexpr double GiB3 = 3.0 * 1073741824.0;

mp::cluster tiny_cluster(double link = 1e12) {
  return {{"t", 1e6, 0.5, 0.25, link, 1e12, 1e12, 1e12, 1e12, 2}, 2, 2};
}
}  // namespace

TEST_CASE("ulysses: DeepSpeed-Ulysses over ZeRO-3 by hand") {
  // s = 16 over SP 2: T = 8 local tokens with every hidden dimension.
  const auto r = mp::detail::ulysses(mp::strategy::ulysses_zero3, tiny, tiny_cluster(), 16, 2, 0);
  CHECK(r.chosen.sp == 2);
  CHECK(r.chosen.dp == 1);
  CHECK(r.device.params == doctest::Approx(2 * P / 2));
  CHECK(r.device.grads == doctest::Approx(2 * P / 2));
  CHECK(r.device.optimizer == doctest::Approx(12 * P / 2));
  CHECK(r.device.framework == doctest::Approx(GiB3 + 2 * 2 * 768));  // two gathered layers
  // 4 layer inputs of 8 x 16 B and one recomputed layer of 8 x 280 B.
  CHECK(r.device.skeletal == doctest::Approx(4 * 128 + 2240));
  // The MLP backward 8 x (16 + 64 + 16) x 2 = 1536 over the attention's
  // 8 x 80 x 2 = 1280 and the loss 8 x (6 x 10 + 32) = 736.
  CHECK(r.device.transient == doctest::Approx(1536));
  CHECK_FALSE(r.device.planned);
  CHECK(r.host_per_node == 0);
  // With the checkpoints on the host (FPDT Table 3's "OC."), 2 GPUs x 512 B.
  const auto oc = mp::detail::ulysses(mp::strategy::ulysses_zero3, tiny, tiny_cluster(), 16, 2, 0, true);
  CHECK(oc.device.skeletal == doctest::Approx(2240));
  CHECK(oc.host_per_node == doctest::Approx(2 * 4 * 128));
  // Time: GEMMs 2 x 768 x 16 / 2 at 5e5, attention 2 x 256 x 8 / 2 at 2.5e5,
  // both recomputed; the all-to-alls of 8 x 32 x 2 B cost 1/2 of it on 1e12 B/s.
  const double gemm = 12288 / 5e5, attention = 2048 / 2.5e5, a2a = 0.5 * 512 / 1e12;
  const double classifier = 3 * 2 * 16 * 8 * 10 / 2 / 5e5;
  CHECK(r.step_seconds ==
        doctest::Approx(4 * (gemm + attention + a2a + 2 * gemm + 2.5 * attention + a2a + gemm + attention + a2a) +
                        classifier));
}

TEST_CASE("ulysses: FPDT's chunks by hand") {
  // s = 64 over SP 2 in chunks of 16: T = 32, u = 4 chunks, 6 pairs.
  const auto r = mp::detail::ulysses(mp::strategy::fpdt, tiny, tiny_cluster(), 64, 2, 16);
  CHECK(r.chosen.chunk_tokens == 16);
  CHECK(r.device.skeletal == doctest::Approx(6 * 32 * 8 * 2));  // six [T, h] tensors
  // 16 [c, h/SP] buffers of the 16-token chunk (2048 B) and an MLP chunk of
  // T / 8 = 4 tokens x (2f + 2h) x 2 = 640 B, over the loss's 32 x 8 / 20 x 60.
  CHECK(r.device.transient == doctest::Approx(2048 + 640));
  // Host: 4 layer inputs [32, 8] and q, k, v, o [32, 32] of one layer, both GPUs.
  CHECK(r.host_per_node == doctest::Approx((4 * 32 * 8 + 32 * 32) * 2 * 2));
  CHECK(r.time.offload_stall == 0);  // a 1e12 B/s link hides every fetch
  // A slow link: each of the 6 pairs waits for K/V twice (forward and
  // recompute) and for q, o, dout once (backward) beyond the pair's attention.
  const auto slow = mp::detail::ulysses(mp::strategy::fpdt, tiny, tiny_cluster(100), 64, 2, 16);
  const double pair = 4.0 * 16 * 16 * 8 / 2 / 2.5e5;
  const double kv = 2.0 * 16 * 8 / 2 * 2 / 100, q = 3.0 * 16 * 8 / 2 * 2 / 100;
  CHECK(slow.time.offload_stall == doctest::Approx(4 * 6 * (2 * (kv - pair) + (q - 2.5 * pair))));
  CHECK(slow.link_bound());
}

TEST_CASE("ulysses: FPDT's pipeline fill and drain by hand") {
  // s = 64 over SP 2 in chunks of 16 (u = 4): a chunk is [16, 8 / 2] per rank
  // for q, o and dout, and [16, 8 / 2] for k and v (kv = h without GQA).
  // Per layer, in bf16 bytes:
  //   forward    write back the last q, k, v:      16 x (8 + 2 x 8) / 2 x 2 = 384
  //   recompute  fetch the first input chunk:       16 x 8 / 2 x 2           = 128
  //              write back the last q, k, v:                                  384
  //   backward   fetch chunk 0's q, k, v, o, dout:  16 x (3 x 8 + 2 x 8) / 2 x 2 = 640
  // 1536 B per layer, 4 layers, at 100 B/s.
  const auto slow = mp::detail::ulysses(mp::strategy::fpdt, tiny, tiny_cluster(100), 64, 2, 16);
  CHECK(slow.time.pipeline_fill == doctest::Approx(4 * (384 + 128 + 384 + 640) / 100.0));
  // It is on the critical path, and not a shortage of link bandwidth: the
  // step is the sum of its parts, and a link that hides every steady-state
  // fetch (1e12 B/s) still pays the fill and drain, without being the bottleneck.
  CHECK(slow.step_seconds == doctest::Approx(slow.time.compute + slow.time.recompute + slow.time.communication +
                                             slow.time.offload_stall + slow.time.pipeline_fill));
  const auto fast = mp::detail::ulysses(mp::strategy::fpdt, tiny, tiny_cluster(), 64, 2, 16);
  CHECK(fast.time.pipeline_fill == doctest::Approx(4 * 1536 / 1e12));
  CHECK_FALSE(fast.link_bound());
  // One chunk (u = 1) is no pipeline: the whole chunk's transfers are exposed.
  const auto whole = mp::detail::ulysses(mp::strategy::fpdt, tiny, tiny_cluster(100), 64, 2, 64);
  CHECK(whole.time.pipeline_fill == doctest::Approx(4 * 4 * 1536 / 100.0));
  CHECK(whole.time.offload_stall == 0);  // no pairs of chunks
  // Ulysses without chunks has no pipeline to fill.
  CHECK(mp::detail::ulysses(mp::strategy::ulysses_zero3, tiny, tiny_cluster(100), 64, 2, 0).time.pipeline_fill == 0);
}

TEST_CASE("ulysses: FPDT's fill and drain shrink against the step as the chunks grow in number") {
  // FPDT's 8B on 4 A100s at SP 4 (Table 1, Table 4), chunks of 64K: the
  // fill and drain is fixed per layer while the step grows with the pairs of
  // chunks, 4 chunks at 256K to 32 at 2M.
  const auto m = mp::parse_model_shape("8b");
  const mp::cluster c{mp::load_cluster_profile("a100x4"), 4, 4};
  double previous_share = 1.0, fill_at_256k = 0;
  for (double s : {262144.0, 524288.0, 1048576.0, 2097152.0}) {
    const auto r = mp::detail::ulysses(mp::strategy::fpdt, m, c, s, 4, mp::fpdt_default_chunk);
    const double share = r.time.pipeline_fill / r.step_seconds;
    CAPTURE(s);
    CHECK(share > 0);
    CHECK(share < previous_share);
    if (fill_at_256k == 0) fill_at_256k = r.time.pipeline_fill;
    CHECK(r.time.pipeline_fill == doctest::Approx(fill_at_256k));
    previous_share = share;
  }
  // At 256K, written out: chunk tensors of 64K / 4 = 16K tokens per rank,
  // h = 4096, kv = 1024 (8 of 32 heads), 32 layers, 12 GB/s:
  // 16384 x (2 (h + 2 kv) + h + (3h + 2kv)) x 2 B = 16384 x 30720 x 2 B per layer.
  CHECK(fill_at_256k == doctest::Approx(32 * 16384.0 * 30720 * 2 / 12e9));
  // At one length, smaller chunks (more of them) shrink it in proportion.
  const auto coarse = mp::detail::ulysses(mp::strategy::fpdt, m, c, 262144, 4, 131072);
  const auto fine = mp::detail::ulysses(mp::strategy::fpdt, m, c, 262144, 4, 32768);
  CHECK(fine.time.pipeline_fill == doctest::Approx(coarse.time.pipeline_fill / 4));
  CHECK(fine.time.pipeline_fill / fine.step_seconds < coarse.time.pipeline_fill / coarse.step_seconds);
}

TEST_CASE("ulysses: SP divides the heads and the GPUs, data parallel takes the rest") {
  const auto m = mp::parse_model_shape("7b");
  const mp::cluster c{mp::load_cluster_profile("a800"), 64, 8};
  const auto all = mp::detail::ulysses_settings(mp::strategy::fpdt, m, c, 1 << 20);
  REQUIRE_FALSE(all.empty());
  for (const auto& r : all) {
    CHECK(r.chosen.sp <= 32);
    CHECK(32 % r.chosen.sp == 0);
    CHECK(r.chosen.sp * r.chosen.dp == 64);
  }
}

TEST_CASE("ulysses: an SP that does not divide the GPUs leaves the rest idle, FPDT may run fewer replicas") {
  const auto m = mp::parse_model_shape("7b");
  const mp::cluster twelve{mp::load_cluster_profile("a800"), 12, 8};
  bool sp8 = false, fewer = false;
  for (const auto& r : mp::detail::ulysses_settings(mp::strategy::fpdt, m, twelve, 1 << 20, true)) {
    CHECK(32 % r.chosen.sp == 0);
    CHECK(r.chosen.gpus() <= 12);
    sp8 = sp8 || (r.chosen.sp == 8 && r.chosen.dp == 1);
    fewer = fewer || (r.chosen.sp == 1 && r.chosen.dp == 3);
  }
  CHECK(sp8);    // SP 8 on 8 of the 12 GPUs
  CHECK(fewer);  // 3 replicas of SP 1: fewer sequences offloading to the node's host
  // ZeRO-3 shards over the GPUs used; the host holds what the node's used GPUs offload.
  mp::cluster four = tiny_cluster();
  four.gpus = 4;
  four.gpus_per_node = 4;
  const auto one = mp::detail::ulysses(mp::strategy::fpdt, tiny, four, 64, 2, 16, false, 1);
  const auto two = mp::detail::ulysses(mp::strategy::fpdt, tiny, four, 64, 2, 16);
  CHECK(one.chosen.gpus() == 2);
  CHECK(two.chosen.gpus() == 4);
  CHECK(one.device.params == doctest::Approx(2 * P / 2));
  CHECK(two.device.params == doctest::Approx(2 * P / 4));
  CHECK(one.host_per_node == doctest::Approx((4 * 32 * 8 + 32 * 32) * 2 * 2));
  CHECK(two.host_per_node == doctest::Approx(2 * one.host_per_node));
}
