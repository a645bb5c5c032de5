#include "memo/project/strategy.hpp"

#include <doctest/doctest.h>

namespace mp = memo::project;

namespace {
// A tiny model and a node with round numbers, so every byte below can be
// worked by hand: 4 layers, h = 8, 2 heads, V = 10; P = 4 x 12 x 64 + 80.
const mp::model_shape tiny{"tiny", 4, 8, 2, 10};
constexpr double P = 3152;

mp::cluster tiny_cluster(double host_bytes, double device_bytes = 1e12) {
  return {{"t", 1e6, 0.5, 0.5, 1e12, 1e12, 1e12, device_bytes, host_bytes, 2}, 2, 2};
}

mp::projection with_tp(mp::strategy kind, const mp::cluster& c, double s, int tp) {
  for (const auto& r : mp::project_settings(kind, tiny, c, s)) {
    if (r.chosen.tp == tp) return r;
  }
  FAIL("no setting with tp " << tp);
  return {};
}
}  // namespace

TEST_CASE("strategy: full recompute breakdown by hand") {
  // s = 16 on TP 2 x CP 1: t = 8 token shards per GPU.
  const auto r = with_tp(mp::strategy::recompute_planned, tiny_cluster(1e12), 16, 2);
  CHECK(r.chosen.cp == 1);
  CHECK(r.device.params == doctest::Approx(2 * P / 2));
  CHECK(r.device.grads == doctest::Approx(4 * P / 2));
  CHECK(r.device.optimizer == doctest::Approx(12 * P / 2));
  // Checkpoints 4 layers x 2h x t = 512, one layer's skeletal 32 h t = 2048.
  CHECK(r.device.skeletal == doctest::Approx(512 + 2048));
  // Working set 32 h t = 2048, logits 2 V t = 160.
  CHECK(r.device.transient == doctest::Approx(2048 + 160));
  CHECK(r.device.planned);
  CHECK(r.device.total() == doctest::Approx(3152 + 6304 + 18912 + 2560 + 2208 + 3.0 * 1073741824));
  CHECK(r.host_per_node == 0);
  // The caching allocator pays 1.7x the same activations.
  const auto c = with_tp(mp::strategy::recompute, tiny_cluster(1e12), 16, 2);
  CHECK(c.device.total() == doctest::Approx(3152 + 6304 + 18912 + 1.7 * 4768 + 3.0 * 1073741824));
}

TEST_CASE("strategy: memo's alpha and host memory by hand") {
  // Per GPU per layer: input 2 h t = 128, attention output 128, others
  // 28 h t = 1792. Layers swapped: 4 - 2 = 2. With a host of 4608 bytes
  // for 2 GPUs, each GPU may hold 2304 = 2 x (256 + alpha 1792): alpha = 0.5.
  const auto r = with_tp(mp::strategy::memo, tiny_cluster(4608), 16, 2);
  CHECK(r.chosen.alpha == doctest::Approx(0.5));
  CHECK(r.host_per_node == doctest::Approx(4608));
  CHECK(r.fits());
  CHECK(r.device.skeletal == doctest::Approx(2 * 2048));  // two rounding buffers
  // A host with room for everything: alpha = 1, 2 x 2048 x 2 GPUs.
  const auto all = with_tp(mp::strategy::memo, tiny_cluster(1e9), 16, 2);
  CHECK(all.chosen.alpha == 1.0);
  CHECK(all.host_per_node == doctest::Approx(8192));
  // Not even the whole tensors fit: the host runs out first.
  const auto oohm = with_tp(mp::strategy::memo, tiny_cluster(1000), 16, 2);
  CHECK(oohm.limit == "host memory");
  const auto oom = with_tp(mp::strategy::memo, tiny_cluster(1e9, 1e9), 16, 2);
  CHECK(oom.limit == "device memory");
}

TEST_CASE("strategy: MFU is model FLOPs over GPU-seconds") {
  const auto c = tiny_cluster(1e12);
  const auto r = with_tp(mp::strategy::recompute_planned, c, 16, 2);
  CHECK(r.mfu == doctest::Approx(tiny.model_flops(16) / (r.step_seconds * 2 * 1e6)));
  CHECK(r.tokens_per_gpu_per_second == doctest::Approx(16 / (r.step_seconds * 2)));
  // Full recompute does a fourth forward: it can never beat planned swapping of everything.
  const auto swap = with_tp(mp::strategy::swap_planned, c, 16, 2);
  CHECK(swap.mfu > r.mfu);
}

TEST_CASE("strategy: the longest sequence is monotone in GPUs and device memory") {
  const auto m = mp::parse_model_shape("7b");
  for (auto kind : mp::public_strategies()) {
    double previous = 0;
    for (int gpus : {8, 16, 32, 64}) {
      const mp::cluster c{mp::load_cluster_profile("a800"), gpus, 8};
      const auto r = mp::longest(kind, m, c);
      REQUIRE(r);
      CHECK_MESSAGE(r->sequence >= previous, mp::strategy_name(kind) << " on " << gpus << " GPUs");
      previous = r->sequence;
    }
    const mp::cluster small{mp::load_cluster_profile("h100"), 8, 8};
    const mp::cluster large{mp::load_cluster_profile("h200"), 8, 8};
    CHECK(mp::longest(kind, m, large)->sequence >= mp::longest(kind, m, small)->sequence);
  }
}

TEST_CASE("strategy: the search answer fits and one grid step more does not") {
  const auto m = mp::parse_model_shape("13b");
  const mp::cluster c{mp::load_cluster_profile("a800"), 16, 8};
  for (auto kind : mp::public_strategies()) {
    const auto r = mp::longest(kind, m, c);
    REQUIRE(r);
    CHECK(r->fits());
    const auto next = mp::project(kind, m, c, r->sequence + 65536);
    REQUIRE(next);
    CHECK_FALSE(next->fits());
  }
}

TEST_CASE("strategy: Ulysses never uses more SP than heads") {
  const auto m = mp::parse_model_shape("7b");
  const mp::cluster c{mp::load_cluster_profile("a800"), 64, 8};
  const auto r = mp::project(mp::strategy::ulysses_zero3, m, c, 1048576);
  REQUIRE(r);
  CHECK(r->chosen.sp <= 32);
  CHECK(r->chosen.sp * r->chosen.dp == 64);
}

TEST_CASE("strategy: a cluster out of range is an error, not a long loop") {
  const auto m = mp::parse_model_shape("1,8,8,10");
  const mp::cluster c{mp::load_cluster_profile("a800"), 1 << 21, 8};
  CHECK_THROWS_WITH(mp::project(mp::strategy::ulysses_zero3, m, c, 65536),
                    doctest::Contains("at most 1048576 GPUs, got 2097152"));
}
