#include "memo/project/projection.hpp"

#include <doctest/doctest.h>

namespace mp = memo::project;

TEST_CASE("projection: every strategy's name parses back to it") {
  for (auto s : mp::all_strategies()) {
    REQUIRE(mp::parse_strategy(mp::strategy_name(s)));
    CHECK(*mp::parse_strategy(mp::strategy_name(s)) == s);
  }
  CHECK_FALSE(mp::parse_strategy("megatron"));
  CHECK(mp::strategy_names().find("sppo-recompute") != std::string::npos);
  CHECK(mp::public_strategies().size() == 5);
}

TEST_CASE("projection: finish computes throughput, MFU, HFU and the limit by hand") {
  const mp::model_shape m{"tiny", 4, 8, 2, 10};
  const mp::cluster c{{"t", 1e6, 0.5, 0.5, 1e3, 1e12, 1e12, 1e4, 100, 2}, 2, 2};
  mp::projection r;
  r.sequence = 16;
  r.chosen.dp = 2;
  r.time.compute = 3;
  r.time.recompute = 1;
  r.time.bubble = 1;
  r.device.params = 1000;
  r.device.skeletal = 2000;
  r.device.transient = 1000;
  r.device.planned = true;
  r.host_per_node = 50;
  mp::detail::finish(r, m, c, 2 * m.model_flops(16));
  CHECK(r.step_seconds == 5.0);
  // Two sequences of 16 tokens on 2 GPUs in 5 s.
  CHECK(r.tokens_per_gpu_per_second == doctest::Approx(32.0 / 10));
  CHECK(r.mfu == doctest::Approx(2 * m.model_flops(16) / (10 * 1e6)));
  CHECK(r.hfu == doctest::Approx(2 * r.mfu));
  CHECK(r.device.planned_arena == 3000.0);
  CHECK(r.device.caching_reserve == doctest::Approx(mp::caching_fragmentation * 3000));
  CHECK(r.device.total() == 4000.0);
  CHECK(r.fits());
  CHECK(r.pressure() == doctest::Approx(0.5));
  // The device is checked first, then the host.
  r.host_per_node = 200;
  r.limit.reset();
  mp::detail::finish(r, m, c, 0);
  CHECK(r.limit == mp::resource::host_memory);
  // A caching allocator pays 1.45 x (6000 + 1000) on top of 1000: over 1e4.
  r.device.planned = false;
  r.device.skeletal = 6000;
  r.limit.reset();
  mp::detail::finish(r, m, c, 0);
  CHECK(r.limit == mp::resource::device_memory);
}

TEST_CASE("projection: a cluster out of range is an error naming the bound") {
  mp::cluster c{{"t", 1e6, 0.5, 0.5, 1e3, 1e12, 1e12, 1e4, 100, 2}, 0, 2};
  CHECK_THROWS_WITH(c.check(), doctest::Contains("gpus and gpus_per_node must be positive, got 0 and 2"));
  c.gpus = 1 << 21;
  CHECK_THROWS_WITH(c.check(), doctest::Contains("at most 1048576 GPUs, got 2097152"));
  c.gpus = 16;
  c.gpus_per_node = 1 << 21;  // the node bound is the cluster's, as in a profile file
  CHECK_THROWS_WITH(c.check(), doctest::Contains("at most 1048576 GPUs, got 2097152 per node"));
  c.gpus_per_node = 1 << 20;
  CHECK_NOTHROW(c.check());
  c.gpus_per_node = 2;
  CHECK(c.link_for(2) == 1e12);
  c.profile.inter_node_bytes_per_second = 5;
  CHECK(c.link_for(4) == 5);  // a group larger than a node crosses the network
}

TEST_CASE("projection: a byte count of 2^64 or more is an error naming the figure, never a wrapped count") {
  const mp::model_shape m{"tiny", 4, 8, 2, 10};
  const mp::cluster c{{"t", 1e6, 0.5, 0.5, 1e3, 1e12, 1e12, 1e4, 100, 2}, 2, 2};
  mp::projection r;
  r.sequence = 16;
  r.chosen.tp = 2;
  r.time.compute = 1;
  r.device.skeletal = 0x1p70;
  CHECK_THROWS_WITH(mp::detail::finish(r, m, c, 0),
                    doctest::Contains("setting TP 2 CP 1 SP 1 PP 1 DP 1: skeletal activation bytes 1.181e+21 is not "
                                      "a byte count below 2^64"));
  r.device.skeletal = 1;
  r.host_per_node = 0x1p64;
  CHECK_THROWS_WITH(mp::detail::finish(r, m, c, 0), doctest::Contains("host bytes per node"));
  r.host_per_node = 0;
  r.time.compute = 0;
  CHECK_THROWS_WITH(mp::detail::finish(r, m, c, 0), doctest::Contains("step time is not a positive finite number"));
  // Just below 2^64 is a count.
  r.time.compute = 1;
  r.device.skeletal = 0x1p63;
  CHECK_NOTHROW(mp::detail::finish(r, m, c, 0));
  CHECK(r.limit == mp::resource::device_memory);
}

TEST_CASE("projection: the GPUs a setting uses and the share of a node they fill") {
  mp::settings s;
  s.tp = 4;
  s.cp = 3;
  s.dp = 2;
  CHECK(s.gpus() == 24);
  const mp::cluster c{{"t", 1e6, 0.5, 0.5, 1e3, 1e12, 1e12, 1e4, 100, 8}, 12, 8};
  CHECK(c.gpus_in_a_node() == 8);
  CHECK(c.gpus_in_a_node(4) == 4);    // a setting on 4 of the 12 GPUs fills half a node
  CHECK(c.gpus_in_a_node(12) == 8);
  // The limit is the first of device and host memory that runs out.
  mp::memory_breakdown d;
  d.params = 1e4;
  CHECK(!mp::detail::memory_limit(d, 0, c));
  CHECK(mp::detail::memory_limit(d, 101, c) == mp::resource::host_memory);
  d.skeletal = 1;
  CHECK(mp::detail::memory_limit(d, 101, c) == mp::resource::device_memory);
}
