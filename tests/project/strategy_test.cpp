#include "memo/project/strategy.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace mp = memo::project;

namespace {
// MEMO's 7B: its lengths keep SPPO's subsequence counts, and the searches, small.
const mp::model_shape small = mp::parse_model_shape("7b");
}  // namespace

TEST_CASE("strategy: longest_fitting finds the last fitting grid step (against a linear scan)") {
  for (double edge : {1.0, 7.0, 64.0, 1000.0, 1023.0, 1024.0}) {
    auto projector = [&](double s) {
      mp::projection r;
      r.sequence = s;
      if (s > edge) r.limit = mp::resource::device_memory;
      return std::optional<mp::projection>(r);
    };
    double scanned = 0;
    for (double s = 1; s <= 1024; ++s) {
      if (projector(s)->fits()) scanned = s;
    }
    const auto found = mp::longest_fitting(projector, projector, 1, 1024);
    REQUIRE(found);
    CHECK(found->sequence == scanned);
  }
  auto never = [](double s) {
    mp::projection r;
    r.sequence = s;
    r.limit = mp::resource::device_memory;
    return std::optional<mp::projection>(r);
  };
  CHECK_FALSE(mp::longest_fitting(never, never, 1, 16));
  CHECK_THROWS_WITH(mp::longest_fitting(never, never, 0, 16), doctest::Contains("need 1 <= grid <= limit"));
}

TEST_CASE("strategy: the longest sequence is monotone in GPUs and in memory") {
  for (auto kind : mp::public_strategies()) {
    double previous = 0;
    for (int gpus : {4, 8, 16}) {
      const mp::cluster c{mp::load_cluster_profile("a800"), gpus, 4};
      const auto r = mp::longest(kind, small, c);
      REQUIRE(r);
      CHECK_MESSAGE(r->sequence >= previous, mp::strategy_name(kind) << " on " << gpus << " GPUs");
      previous = r->sequence;
    }
    const mp::cluster h100{mp::load_cluster_profile("h100"), 8, 8};
    const mp::cluster h200{mp::load_cluster_profile("h200"), 8, 8};
    CHECK_MESSAGE(mp::longest(kind, small, h200)->sequence >= mp::longest(kind, small, h100)->sequence,
                  mp::strategy_name(kind));
  }
  // More host memory never shortens what offloading strategies reach.
  mp::cluster less{mp::load_cluster_profile("a800"), 8, 8};
  mp::cluster more = less;
  less.profile.host_memory_bytes /= 8;
  for (auto kind : {mp::strategy::memo, mp::strategy::fpdt, mp::strategy::sppo}) {
    CHECK_MESSAGE(mp::longest(kind, small, more)->sequence >= mp::longest(kind, small, less)->sequence,
                  mp::strategy_name(kind));
  }
}

TEST_CASE("strategy: the search answer fits and one grid step more does not") {
  const mp::cluster c{mp::load_cluster_profile("a800"), 8, 8};
  for (auto kind : mp::public_strategies()) {
    const auto r = mp::longest(kind, small, c);
    REQUIRE(r);
    CHECK(r->fits());
    const auto next = mp::project(kind, small, c, r->sequence + 65536);
    REQUIRE(next);
    CHECK_FALSE(next->fits());
  }
}

TEST_CASE("strategy: a setting too large to count is left out, not the end of the projection") {
  // One layer with a 2^31 - 1 wide SwiGLU MLP on 8 GPUs of 2^60 bytes: at
  // 512M tokens TP 1 CP 1 DP 8 needs a caching reserve beyond 2^64 bytes,
  // while CP 8 is countable (it does not fit there, but fits shorter).
  mp::cluster c{mp::load_cluster_profile("a800"), 8, 8};
  c.profile.device_memory_bytes = 0x1p60;
  c.profile.host_memory_bytes = 0x1p60;
  const mp::model_shape wide = mp::parse_model_shape("1,2,2,1,2147483647,1,swiglu");
  const double s = 512.0 * 1048576;
  const auto all = mp::project_settings(mp::strategy::memo, wide, c, s);
  REQUIRE_FALSE(all.empty());
  bool cp8 = false;
  for (const auto& r : all) {
    CHECK(r.uncountable.empty());
    CHECK(mp::representable_bytes(r.device.total()));
    cp8 = cp8 || r.chosen.cp == 8;
  }
  CHECK(cp8);
  mp::settings_pin pin;
  pin.cp = 8;
  const auto at_cp8 = mp::project(mp::strategy::memo, wide, c, s, true, pin);
  REQUIRE(at_cp8);
  CHECK(at_cp8->uncountable.empty());
  CHECK(at_cp8->limit == mp::resource::device_memory);
  // Pinned to the uncountable setting alone: the error names it.
  pin.cp = 1;
  pin.tp = 1;
  pin.dp = 8;
  CHECK_THROWS_WITH_AS(mp::project_settings(mp::strategy::memo, wide, c, s, true, pin),
                       doctest::Contains("setting TP 1 CP 1 SP 1 PP 1 DP 8: caching allocator reserve"),
                       mp::uncountable_projection);
  // The search takes such a length as one that does not fit.
  pin = {};
  pin.cp = 8;
  const auto longest = mp::longest(mp::strategy::memo, wide, c, 65536, 1024.0 * 1048576, pin);
  REQUIRE(longest);
  CHECK(longest->fits());
  CHECK(longest->sequence < s);
  CHECK(longest->chosen.cp == 8);
}

TEST_CASE("strategy: a count that overflows inside a setting leaves that setting out, not the strategy") {
  // One layer 2^21 wide, 64 GPUs, 2^40 tokens: the per-token byte counts of
  // CP 1 settings overflow 64 bits inside the layer's own tables (a plain
  // count, not the projection's totals), while CP 64 is countable (and
  // does not fit).
  const mp::cluster c{mp::load_cluster_profile("a800"), 64, 8};
  const mp::model_shape one = mp::parse_model_shape("1,2097152,1,1,1");
  const double s = 1099511627776.0;
  const auto all = mp::project_settings(mp::strategy::recompute, one, c, s);
  REQUIRE_FALSE(all.empty());
  for (const auto& r : all) CHECK(r.uncountable.empty());
  mp::settings_pin pin;
  pin.cp = 64;
  const auto at_cp64 = mp::project(mp::strategy::recompute, one, c, s, true, pin);
  REQUIRE(at_cp64);
  CHECK_FALSE(at_cp64->fits());
  // Alone, the uncountable setting is named as such.
  pin = {};
  pin.cp = 1;
  pin.dp = 64;
  CHECK_THROWS_WITH_AS(mp::project(mp::strategy::recompute, one, c, s, true, pin),
                       doctest::Contains("setting TP 1 CP 1 SP 1 PP 1 DP 64: byte count"), mp::uncountable_projection);
  // SPPO at 2^32 tokens: the causal cost of a position does not fit 63
  // bits, so every setting is uncountable; an uncountable_projection, which
  // the other strategies' answers survive (the command line's `all`).
  const mp::cluster node{mp::load_cluster_profile("a800"), 8, 8};
  const mp::model_shape seven = mp::parse_model_shape("7b");
  CHECK_THROWS_WITH_AS(mp::project(mp::strategy::sppo, seven, node, 4294967296.0),
                       doctest::Contains("the causal pair count of a position overflows 63 bits"),
                       mp::uncountable_projection);
  CHECK_NOTHROW((void)mp::project(mp::strategy::memo, seven, node, 4294967296.0));
}

TEST_CASE("strategy: order_shortfalls refuses a grid that is not a finite number >= 1") {
  const mp::cluster c{mp::load_cluster_profile("a800"), 8, 8};
  auto r = mp::project(mp::strategy::memo, mp::parse_model_shape("7b"), c, 4194304);
  REQUIRE(r);
  REQUIRE_FALSE(r->fits());
  for (const double grid : {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN(), 0.5}) {
    CHECK_THROWS_WITH_AS(mp::order_shortfalls(*r, mp::parse_model_shape("7b"), c, grid),
                         doctest::Contains("grid must be a finite number >= 1"), memo::error);
  }
}

TEST_CASE("strategy: tensor and sequence parallelism only where they split the FFN width too") {
  // An FFN width of 2 x 5503: TP 1 and 2 split it, 4 and 8 do not.
  const mp::cluster c{mp::load_cluster_profile("a800"), 8, 8};
  const mp::model_shape odd = mp::parse_model_shape("32,4096,32,50257,11006");
  CHECK(odd.splits_over(2));
  CHECK_FALSE(odd.splits_over(4));
  CHECK_FALSE(odd.splits_over(0));
  for (const auto kind : {mp::strategy::memo, mp::strategy::recompute}) {
    const auto all = mp::project_settings(kind, odd, c, 65536);
    REQUIRE_FALSE(all.empty());
    for (const auto& r : all) CHECK(11006 % r.chosen.tp == 0);
  }
  const auto sppo = mp::project_settings(mp::strategy::sppo, odd, c, 1048576);
  REQUIRE_FALSE(sppo.empty());
  for (const auto& r : sppo) CHECK(11006 % r.chosen.sp == 0);
  // Pinned to a TP that does not split it: no setting, and the reason
  // lists the TPs there are, not an error from inside the layer.
  mp::settings_pin pin;
  pin.tp = 4;
  CHECK_FALSE(mp::project(mp::strategy::memo, odd, c, 65536, true, pin));
  CHECK(mp::no_setting_reason(mp::strategy::memo, odd, c, 65536, pin) ==
        "no setting has TP 4; the settings here have TP 1, 2");
}

TEST_CASE("strategy: project picks a fitting setting of highest MFU, else the closest to fitting") {
  const auto m = mp::parse_model_shape("7b");
  const mp::cluster c{mp::load_cluster_profile("a800"), 8, 8};
  const auto all = mp::project_settings(mp::strategy::memo, m, c, 512 * 1024);
  const auto best = mp::project(mp::strategy::memo, m, c, 512 * 1024);
  REQUIRE(best);
  CHECK(best->fits());
  for (const auto& r : all) {
    if (r.fits()) CHECK(r.mfu <= best->mfu);
  }
  const auto too_long = mp::project(mp::strategy::memo, m, c, 64.0 * 1048576);
  REQUIRE(too_long);
  CHECK_FALSE(too_long->fits());
  for (const auto& r : mp::project_settings(mp::strategy::memo, m, c, 64.0 * 1048576)) {
    CHECK(r.pressure() >= too_long->pressure());
  }
}

TEST_CASE("strategy: bad lengths and clusters are errors naming the value") {
  const mp::cluster c{mp::load_cluster_profile("a800"), 8, 8};
  CHECK_THROWS_WITH(mp::project(mp::strategy::memo, small, c, 0), doctest::Contains("between 1 and 2^40 tokens, got 0"));
  CHECK_THROWS_WITH(mp::project(mp::strategy::sppo, small, c, 1e13),
                    doctest::Contains("between 1 and 2^40 tokens, got 10000000000000"));
  CHECK_THROWS_WITH(mp::project(mp::strategy::memo, small, c, std::nan("")), doctest::Contains("got nan"));
  const mp::cluster huge{mp::load_cluster_profile("a800"), 1 << 21, 8};
  CHECK_THROWS_WITH(mp::project(mp::strategy::ulysses_zero3, small, huge, 65536),
                    doctest::Contains("at most 1048576 GPUs, got 2097152"));
  // SPPO's one pipeline needs whole nodes: on 12 GPUs it runs on 8 of them.
  const mp::cluster twelve{mp::load_cluster_profile("a800"), 12, 8};
  const auto sppo = mp::project(mp::strategy::sppo, small, twelve, 1 << 20);
  REQUIRE(sppo);
  CHECK(sppo->chosen.gpus() == 8);
}

TEST_CASE("strategy: more GPUs never fit less, GPU by GPU (every strategy may leave GPUs idle)") {
  // Every count from 1 to 20 GPUs, 8 per node, against every smaller count.
  for (auto kind : {mp::strategy::memo, mp::strategy::recompute, mp::strategy::ulysses_zero3, mp::strategy::fpdt,
                    mp::strategy::recompute_planned, mp::strategy::swap_planned, mp::strategy::sppo,
                    mp::strategy::sppo_recompute}) {
    std::vector<double> reached;
    for (int gpus = 1; gpus <= 20; ++gpus) {
      const mp::cluster c{mp::load_cluster_profile("a800"), gpus, 8};
      const auto r = mp::longest(kind, small, c);
      reached.push_back(r ? r->sequence : 0);
      for (int fewer = 1; fewer < gpus; ++fewer) {
        CHECK_MESSAGE(reached.back() >= reached[fewer - 1],
                      mp::strategy_name(kind) << ": " << gpus << " GPUs reach " << reached.back() << ", " << fewer
                                              << " reach " << reached[fewer - 1]);
      }
      if (r) CHECK(r->chosen.gpus() <= gpus);
    }
    // Idle GPUs are what 5 GPUs need to reach what 4 reach (only TP 1 and SP 1 divide 5).
    CHECK(reached[4] > 0);
  }
  // SPPO's copies: a 5-stage pipeline of a 10-layer model inside an 8-GPU
  // node stays one when more GPUs come (6 to 9 leave the rest idle, 10 run
  // two), and idle GPUs take no host memory from the busy ones (8 layers).
  for (const char* shape : {"10,512,2,1000", "8,512,8,1000"}) {
    const mp::model_shape tiny = mp::parse_model_shape(shape);
    double reached = 0;
    for (int gpus = 1; gpus <= 10; ++gpus) {
      const auto r = mp::longest(mp::strategy::sppo, tiny, {mp::load_cluster_profile("a800"), gpus, 8});
      REQUIRE(r);
      CHECK_MESSAGE(r->sequence >= reached, shape << " on " << gpus << " GPUs reaches " << r->sequence);
      CHECK(r->chosen.gpus() <= gpus);
      reached = r->sequence;
    }
  }
  // 5 GPUs: MEMO's longest runs on 4 of them (TP 4 or TP 2 x CP 2).
  const auto five = mp::longest(mp::strategy::memo, small, {mp::load_cluster_profile("a800"), 5, 8});
  REQUIRE(five);
  CHECK(five->chosen.gpus() == 4);
}

TEST_CASE("strategy: why no setting applies, for SPPO only") {
  const mp::cluster twelve{mp::load_cluster_profile("a800"), 12, 8};
  CHECK(mp::no_setting_reason(mp::strategy::sppo, small, twelve, 1024) ==
        "no SP x PP x N of section 6.1 on 12 GPUs (8 per node) at 1024 tokens, nor copies of a smaller pipeline: "
        "one pipeline over every GPU needs whole nodes (12 GPUs are not a multiple of 8) (every SP); no "
        "subsequence count N with 2048 to 16384 tokens each, N >= PP and N <= 1048576 (SP 8 PP 1); SP must divide "
        "the heads (32), key/value heads (32) and FFN width (16384) (SP 7 PP 1)");
  CHECK(mp::no_setting_reason(mp::strategy::sppo, small, twelve, 1 << 20).empty());
  // 40 GPUs: SP 8 leaves PP 5, which does not divide 32 layers: one copy of SP 8 x PP 4 (or
  // five of SP 8 x PP 1, ...) runs instead.
  const mp::cluster forty{mp::load_cluster_profile("a800"), 40, 8};
  const auto copies = mp::project(mp::strategy::sppo, small, forty, 1 << 20);
  REQUIRE(copies);
  CHECK(copies->chosen.gpus() <= 40);
  CHECK(copies->chosen.pp != 5);
  CHECK(mp::no_setting_reason(mp::strategy::sppo, small, forty, 1024).find(
            "PP must divide the layers (32) (SP 8 PP 5)") != std::string::npos);
  const mp::cluster eight{mp::load_cluster_profile("a800"), 8, 8};
  CHECK(mp::no_setting_reason(mp::strategy::sppo, small, eight, 1 << 20).empty());
  CHECK(mp::no_setting_reason(mp::strategy::memo, small, twelve, 1 << 20).empty());
}

TEST_CASE("strategy: misuse of the API is an error naming what was wrong") {
  const mp::cluster c{mp::load_cluster_profile("a800"), 8, 8};
  CHECK_THROWS_WITH(mp::project(static_cast<mp::strategy>(42), small, c, 65536),
                    doctest::Contains("unknown strategy 42"));
  CHECK_THROWS_WITH(mp::project(mp::strategy::memo, small, c, 1000.5),
                    doctest::Contains("whole number between 1 and 2^40 tokens, got 1000.500"));
  auto never = [](double s) {
    mp::projection r;
    r.sequence = s;
    r.limit = mp::resource::device_memory;
    return std::optional<mp::projection>(r);
  };
  CHECK_THROWS_WITH(mp::longest_fitting(never, never, 1, std::numeric_limits<double>::infinity()),
                    doctest::Contains("need 1 <= grid <= limit"));
  // A profile or a model built in code is checked before it is used.
  mp::cluster bad = c;
  bad.profile.gemm_efficiency = 1e-320;
  CHECK_THROWS_WITH(mp::project(mp::strategy::memo, small, bad, 65536),
                    doctest::Contains("field 'gemm_efficiency' must be between 0.001 and 1"));
  const mp::model_shape wide{"wide", 2147483647, 2147483647, 1, 2147483647};
  CHECK_THROWS_WITH(mp::project(mp::strategy::memo, wide, c, 65536), doctest::Contains("parameters, above"));
  // A length whose bytes a 64-bit count cannot hold: an error saying where.
  const auto one = mp::parse_model_shape("1,2097152,1,1");
  const mp::cluster gpu{mp::load_cluster_profile("a800"), 1, 8};
  // Its one setting is named, and it counts as too large to count (not as
  // a malformed input).
  CHECK_THROWS_WITH_AS(mp::project(mp::strategy::memo, one, gpu, 1099511627776.0),
                       doctest::Contains("memo at 1099511627776 tokens on model '1,2097152,1,1': setting TP 1 CP 1 "
                                         "SP 1 PP 1 DP 1: byte count"),
                       mp::uncountable_projection);
  CHECK_THROWS_WITH(mp::project(mp::strategy::fpdt, one, gpu, 1099511627776.0),
                    doctest::Contains("is not a byte count below 2^64"));
}

TEST_CASE("strategy: more device or host memory never fits less, step by step") {
  // SPPO's searches simulate; the test above compares it on two memories.
  const double gib = 1073741824.0;
  for (auto kind : {mp::strategy::memo, mp::strategy::recompute, mp::strategy::ulysses_zero3, mp::strategy::fpdt}) {
    double previous = 0;
    for (double device : {40.0, 64.0, 80.0, 112.0, 160.0}) {
      mp::cluster c{mp::load_cluster_profile("a800"), 8, 8};
      c.profile.device_memory_bytes = device * gib;
      const auto r = mp::longest(kind, small, c);
      const double reached = r ? r->sequence : 0;
      CHECK_MESSAGE(reached >= previous, mp::strategy_name(kind) << " with " << device << " GiB");
      previous = reached;
    }
  }
  for (auto kind : {mp::strategy::memo, mp::strategy::fpdt, mp::strategy::swap_planned}) {
    double previous = 0;
    for (double host : {64.0, 256.0, 1024.0, 1843.0, 4096.0}) {
      mp::cluster c{mp::load_cluster_profile("a800"), 8, 8};
      c.profile.host_memory_bytes = host * gib;
      const auto r = mp::longest(kind, small, c);
      const double reached = r ? r->sequence : 0;
      CHECK_MESSAGE(reached >= previous, mp::strategy_name(kind) << " with " << host << " GiB of host");
      previous = reached;
    }
  }
}

TEST_CASE("strategy: the search starts at the shortest length with a setting, not at one grid step") {
  // No setting below 5 steps (as SPPO's N >= PP needs PP x 2K tokens); fits up to 37.
  auto projector = [](double s) -> std::optional<mp::projection> {
    if (s < 5) return std::nullopt;
    mp::projection r;
    r.sequence = s;
    if (s > 37) r.limit = mp::resource::device_memory;
    return r;
  };
  CHECK(mp::shortest_with_setting(projector, 1, 1024) == 5.0);
  const auto found = mp::longest_fitting(projector, projector, 1, 1024);
  REQUIRE(found);
  CHECK(found->sequence == 37);
  // A setting only at the very last step; none at all.
  auto last_only = [](double s) -> std::optional<mp::projection> {
    if (s < 1000) return std::nullopt;
    mp::projection r;
    r.sequence = s;
    return r;
  };
  CHECK(mp::shortest_with_setting(last_only, 1, 1000) == 1000.0);
  CHECK(mp::longest_fitting(last_only, last_only, 1, 1000)->sequence == 1000);
  auto none = [](double) { return std::optional<mp::projection>(); };
  CHECK_FALSE(mp::shortest_with_setting(none, 1, 1000));
  CHECK_FALSE(mp::longest_fitting(none, none, 1, 1000));
}

TEST_CASE("strategy: longest_fitting_from starts at the length given, without searching for it") {
  int probes = 0;
  auto projector = [&](double s) -> std::optional<mp::projection> {
    ++probes;
    if (s < 5) return std::nullopt;
    mp::projection r;
    r.sequence = s;
    if (s > 37) r.limit = mp::resource::device_memory;
    return r;
  };
  const std::optional<double> first = mp::shortest_with_setting(projector, 1, 1024);
  REQUIRE(first == 5.0);
  probes = 0;
  const auto searched = mp::longest_fitting(projector, projector, 1, 1024);
  const int searching = probes;
  probes = 0;
  const auto given = mp::longest_fitting_from(projector, projector, 1, 1024, *first);
  REQUIRE(searched);
  REQUIRE(given);
  CHECK(given->sequence == 37);
  CHECK(searched->sequence == 37);
  // The bisection alone: the start, ceil(log2(1020)) = 10 halvings of
  // [5, 1025), and the answer: 12 probes, fewer than with the search for 5.
  CHECK(probes <= 12);
  CHECK(probes < searching);
  // A start that does not fit gives nullopt; one off the grid or past the
  // limit is refused.
  CHECK_FALSE(mp::longest_fitting_from(projector, projector, 1, 1024, 40.0));
  CHECK_THROWS_WITH(mp::longest_fitting_from(projector, projector, 2, 1024, 5.0),
                    doctest::Contains("the first length 5 is not a multiple of the grid 2"));
  CHECK_THROWS_WITH(mp::longest_fitting_from(projector, projector, 1, 1024, 2048.0),
                    doctest::Contains("the first length 2048 is outside [grid 1, limit 1024]"));
}

TEST_CASE("strategy: SPPO's search on pipelines deeper than 32 stages (N >= PP subsequences of 2K)") {
  // 13B (40 layers) on 320 GPUs: SP 8 x PP 40, so N >= 40 subsequences of at
  // least 2048 tokens: 81920 tokens, the 64K grid's 128K; SP 4 x PP 80 does not
  // divide the layers. 65B (80 layers) on 640: PP 80, 163840 tokens, 192K.
  const auto m13 = mp::parse_model_shape("13b");
  const mp::cluster c320{mp::load_cluster_profile("a800"), 320, 8};
  auto probe13 = [&](double s) { return mp::project(mp::strategy::sppo, m13, c320, s, false); };
  CHECK(mp::shortest_with_setting(probe13, 65536, 1024.0 * 1048576) == 128.0 * 1024);
  const auto r13 = mp::longest(mp::strategy::sppo, m13, c320);
  REQUIRE(r13);
  CHECK(r13->fits());
  CHECK(r13->chosen.pp == 40);
  CHECK(r13->sequence >= 2.0 * 1048576);  // --seq 2M fits
  const auto m65 = mp::parse_model_shape("65b");
  const mp::cluster c640{mp::load_cluster_profile("a100"), 640, 8};
  auto probe65 = [&](double s) { return mp::project(mp::strategy::sppo, m65, c640, s, false); };
  CHECK(mp::shortest_with_setting(probe65, 65536, 1024.0 * 1048576) == 192.0 * 1024);
  const auto r65 = mp::longest(mp::strategy::sppo, m65, c640);
  REQUIRE(r65);
  CHECK(r65->fits());
}

TEST_CASE("strategy: every memory exceeded is reported, the one that runs out at the shortest length first") {
  // Full swapping of 7B on one 8-GPU node keeps (32 - 2) layers of every
  // token's skeletal tensors in host memory: 131216 bytes per token and layer
  // (8 [s, h] bf16 tensors, two [s, 4h], 16 B of norm statistics, 4 B x 32
  // heads of log-sum-exp), however TP x CP splits them. 1843 GiB per node
  // holds 1978906181632 / (30 x 131216) = 502709 tokens: 448K fits, 512K not.
  const mp::cluster c{mp::load_cluster_profile("a800"), 8, 8};
  auto r = mp::project(mp::strategy::swap_planned, small, c, 896 * 1024);
  REQUIRE(r);
  REQUIRE(r->shortfalls.size() >= 2);
  mp::order_shortfalls(*r, small, c);
  CHECK(r->limit == mp::resource::host_memory);
  CHECK(r->shortfalls[0].resource == mp::resource::host_memory);
  CHECK(r->shortfalls[0].runs_out_at == 512 * 1024);
  CHECK(r->shortfalls[0].need == doctest::Approx(30.0 * 131216 * 896 * 1024));
  CHECK(r->shortfalls[0].capacity == 1978906181632.0);
  CHECK(r->shortfalls[1].resource == mp::resource::device_memory);
  CHECK(r->shortfalls[1].runs_out_at > 512 * 1024);
  CHECK(r->shortfalls[1].runs_out_at <= 896 * 1024);
}

TEST_CASE("strategy: the host link is listed among the shortfalls exactly when it is the bottleneck") {
  const mp::cluster c{mp::load_cluster_profile("a800"), 8, 8};
  // MEMO 5.3.2: full swapping stalls at 64K and hides behind the layer at 256K.
  const auto short_one = mp::detail::megatron(mp::strategy::swap_planned, small, c, 64 * 1024, 4, 2, 1);
  CHECK(short_one.fits());
  CHECK(short_one.link_bound());
  REQUIRE(short_one.shortfalls.size() == 1);
  CHECK(short_one.shortfalls[0].resource == mp::resource::host_link);
  CHECK(short_one.shortfalls[0].capacity == 12e9);
  CHECK(short_one.shortfalls[0].need > 12e9);
  const auto long_one = mp::detail::megatron(mp::strategy::swap_planned, small, c, 256 * 1024, 4, 2, 1);
  CHECK_FALSE(long_one.link_bound());
  CHECK(long_one.shortfalls.empty());
  CHECK(long_one.link_needed_bytes_per_second <= 12e9);
}

TEST_CASE("strategy: pinned settings select among the strategy's settings (against a filter by hand)") {
  const mp::cluster c{mp::load_cluster_profile("a800"), 8, 8};
  const double s = 256 * 1024;
  const auto all = mp::project_settings(mp::strategy::recompute, small, c, s);
  for (int tp : {1, 2, 4, 8}) {
    mp::settings_pin pin;
    pin.tp = tp;
    const auto pinned = mp::project_settings(mp::strategy::recompute, small, c, s, true, pin);
    std::size_t by_hand = 0;
    for (const auto& r : all) by_hand += r.chosen.tp == tp ? 1 : 0;
    CHECK(pinned.size() == by_hand);
    CHECK(by_hand > 0);
    for (const auto& r : pinned) CHECK(r.chosen.tp == tp);
    // The best of them is the best of the hand-filtered ones.
    const auto best = mp::project(mp::strategy::recompute, small, c, s, true, pin);
    REQUIRE(best);
    for (const auto& r : all) {
      if (r.chosen.tp == tp && r.fits() == best->fits() && best->fits()) CHECK(r.mfu <= best->mfu);
    }
  }
  mp::settings_pin both;
  both.tp = 4;
  both.cp = 2;
  const auto one = mp::project_settings(mp::strategy::recompute, small, c, s, true, both);
  REQUIRE(!one.empty());
  for (const auto& r : one) CHECK((r.chosen.tp == 4 && r.chosen.cp == 2));
}

TEST_CASE("strategy: a pinned alpha or chunk is the projection at that value") {
  const mp::cluster c{mp::load_cluster_profile("a800"), 8, 8};
  const double s = 512 * 1024;
  mp::settings_pin pin;
  pin.tp = 4;
  pin.cp = 2;
  pin.alpha = 0.5;
  const auto pinned = mp::project_settings(mp::strategy::memo, small, c, s, true, pin);
  REQUIRE(pinned.size() == 1);  // TP 4 x CP 2 uses all 8 GPUs: DP 1, one alpha
  const auto direct = mp::detail::megatron(mp::strategy::memo, small, c, s, 4, 2, 1, 0.5);
  CHECK(pinned.front().chosen.alpha == 0.5);
  CHECK(pinned.front().step_seconds == direct.step_seconds);
  CHECK(pinned.front().device.total() == direct.device.total());
  CHECK(pinned.front().host_per_node == direct.host_per_node);
  // Unpinned, MEMO tries the LP's alpha and 0, neither of them 0.5 here.
  mp::settings_pin grid;
  grid.tp = 4;
  grid.cp = 2;
  for (const auto& r : mp::project_settings(mp::strategy::memo, small, c, s, true, grid)) {
    CHECK(r.chosen.alpha != 0.5);
  }
  // FPDT with 32K chunks instead of 64K.
  mp::settings_pin chunk;
  chunk.sp = 8;
  chunk.chunk_tokens = 32768;
  const auto fpdt = mp::project(mp::strategy::fpdt, small, c, s, true, chunk);
  REQUIRE(fpdt);
  const auto by_hand = mp::detail::ulysses(mp::strategy::fpdt, small, c, s, 8, 32768, false, 1);
  CHECK(fpdt->chosen.chunk_tokens == 32768);
  CHECK(fpdt->step_seconds == by_hand.step_seconds);
  CHECK(fpdt->device.total() == by_hand.device.total());
}

TEST_CASE("strategy: a pinned N is taken outside section 6.1's 2K-16K tokens per subsequence") {
  const mp::cluster c{mp::load_cluster_profile("a800"), 8, 8};
  const double s = 256 * 1024;
  // 8 subsequences of 32K tokens: more than 6.1's 16K, so the solver never tries it.
  for (const auto& r : mp::project_settings(mp::strategy::sppo, small, c, s)) CHECK(r.chosen.subsequences != 8);
  mp::settings_pin pin;
  pin.subsequences = 8;
  const auto pinned = mp::project_settings(mp::strategy::sppo, small, c, s, true, pin);
  REQUIRE(!pinned.empty());
  for (const auto& r : pinned) {
    CHECK(r.chosen.subsequences == 8);
    CHECK(r.chosen.alpha_i.size() == 8);
    CHECK(r.chosen.pp <= 8);
  }
  // N below the PP asked for: the settings with N = 2 have PP 1 and 2 only.
  pin.subsequences = 2;
  pin.pp = 4;
  CHECK(mp::project_settings(mp::strategy::sppo, small, c, s, true, pin).empty());
  CHECK(mp::no_setting_reason(mp::strategy::sppo, small, c, s, pin) ==
        "no setting has PP 4 N 2; the settings here have PP 1, 2; no SP x PP x N of section 6.1 on 8 GPUs "
        "(8 per node) at 262144 tokens: N must be >= PP (SP 2 PP 4)");
  // More subsequences than tokens per GPU, and more than the simulator is given.
  mp::settings_pin many;
  many.sp = 8;
  many.subsequences = 32769;
  CHECK(mp::no_setting_reason(mp::strategy::sppo, small, c, s, many).find(
            "a fixed N must be at most 16384 (the longest pipeline the simulator is given), got 32769 (SP 8 PP 1)") !=
        std::string::npos);
  many.subsequences = 16384;
  CHECK(mp::no_setting_reason(mp::strategy::sppo, small, c, 65536, many).find(
            "N x SP must not exceed the 65536 tokens (at least one per GPU), got 16384 x 8 (SP 8 PP 1)") !=
        std::string::npos);
  // On 4 nodes every SP x PP has PP >= 4: N = 2 is below all of them (and
  // one pipeline over every GPU exists, so no copies of smaller ones run).
  const mp::cluster four_nodes{mp::load_cluster_profile("a800"), 32, 8};
  mp::settings_pin two;
  two.subsequences = 2;
  CHECK(mp::project_settings(mp::strategy::sppo, small, four_nodes, s, true, two).empty());
  CHECK(mp::no_setting_reason(mp::strategy::sppo, small, four_nodes, s, two).find("N must be >= PP (SP 8 PP 4)") !=
        std::string::npos);
}

TEST_CASE("strategy: pins that match nothing, do not apply, or are out of range") {
  const mp::cluster c{mp::load_cluster_profile("a800"), 8, 8};
  const double s = 128 * 1024;
  mp::settings_pin three;
  three.tp = 3;
  CHECK_FALSE(mp::project(mp::strategy::memo, small, c, s, true, three));
  CHECK(mp::no_setting_reason(mp::strategy::memo, small, c, s, three) ==
        "no setting has TP 3; the settings here have TP 1, 2, 4, 8");
  mp::settings_pin two;
  two.tp = 8;
  two.cp = 2;  // TP 8 leaves one CP x DP on 8 GPUs
  CHECK(mp::no_setting_reason(mp::strategy::recompute, small, c, s, two) ==
        "no setting has TP 8 CP 2; the settings here have TP 1, 2, 4 with CP 2; CP 1 with TP 8");
  CHECK(mp::no_setting_reason(mp::strategy::memo, small, c, s, mp::settings_pin{}).empty());

  mp::settings_pin foreign;
  foreign.tp = 2;
  CHECK_THROWS_WITH(mp::project(mp::strategy::fpdt, small, c, s, true, foreign),
                    doctest::Contains("fpdt has no setting 'tp' (its settings: sp, dp, chunk)"));
  mp::settings_pin alpha_for_recompute;
  alpha_for_recompute.alpha = 0.5;
  CHECK_THROWS_WITH(mp::project(mp::strategy::recompute, small, c, s, true, alpha_for_recompute),
                    doctest::Contains("recompute has no setting 'alpha'"));
  CHECK(mp::inapplicable_pins(mp::strategy::memo, alpha_for_recompute).empty());

  mp::settings_pin bad;
  bad.alpha = 1.5;
  CHECK_THROWS_WITH(mp::project(mp::strategy::memo, small, c, s, true, bad),
                    doctest::Contains("alpha must be in [0, 1], got 1.5"));
  bad.alpha = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_WITH(mp::project(mp::strategy::memo, small, c, s, true, bad), doctest::Contains("alpha must be in [0, 1]"));
  mp::settings_pin zero;
  zero.cp = 0;
  CHECK_THROWS_WITH(mp::project(mp::strategy::memo, small, c, s, true, zero), doctest::Contains("cp must be >= 1, got 0"));
  mp::settings_pin half;
  half.chunk_tokens = 0.5;
  CHECK_THROWS_WITH(mp::project(mp::strategy::fpdt, small, c, s, true, half),
                    doctest::Contains("chunk must be a whole number of tokens in [1, 2^40], got 0.5"));
}

TEST_CASE("strategy: the longest sequence with a pin is the last fitting grid step of that pin (linear scan)") {
  const mp::cluster c{mp::load_cluster_profile("a800"), 8, 8};
  const double grid = 65536;
  for (int tp : {1, 4, 8}) {
    mp::settings_pin pin;
    pin.tp = tp;
    const auto found = mp::longest(mp::strategy::recompute, small, c, grid, 64 * grid, pin);
    double scanned = 0;
    for (double k = 1; k <= 64; ++k) {
      const auto r = mp::project(mp::strategy::recompute, small, c, k * grid, false, pin);
      if (r && r->fits()) scanned = k * grid;
    }
    REQUIRE(found);
    CHECK_MESSAGE(found->sequence == scanned, "TP " << tp);
    CHECK(found->chosen.tp == tp);
    CHECK(found->sequence <= mp::longest(mp::strategy::recompute, small, c, grid, 64 * grid)->sequence);
  }
}

TEST_CASE("strategy: a pin's fields, text and parts") {
  mp::settings_pin pin;
  CHECK(pin.empty());
  CHECK(pin.text().empty());
  pin.tp = 4;
  pin.subsequences = 16;
  pin.alpha = 0.1;
  pin.chunk_tokens = 1048576;
  CHECK_FALSE(pin.empty());
  CHECK(pin.given() == std::vector<std::string_view>{"tp", "subsequences", "alpha", "chunk"});
  CHECK(pin.text() == "TP 4 N 16 alpha 0.1 chunk 1048576");  // the shortest exact form of 0.1
  CHECK(pin.only("alpha").text() == "alpha 0.1");
  CHECK(pin.without("tp").text() == "N 16 alpha 0.1 chunk 1048576");
  CHECK(pin.only("nonsense").empty());
  CHECK(mp::settings_pin::find("subsequences")->label == "N");
  CHECK(mp::settings_pin::find("nonsense") == nullptr);
  // Every field is one of some strategy's settings, and every strategy's settings are fields.
  for (const auto& f : mp::settings_pin::fields) {
    bool somewhere = false;
    for (auto k : mp::all_strategies()) {
      for (auto name : mp::pin_fields(k)) somewhere = somewhere || name == f.name;
    }
    CHECK_MESSAGE(somewhere, f.name);
  }
  for (auto k : mp::all_strategies()) {
    for (auto name : mp::pin_fields(k)) CHECK_MESSAGE(mp::settings_pin::find(name) != nullptr, name);
  }
  mp::settings s;
  s.tp = 4;
  s.subsequences = 16;
  CHECK(pin.matches(s));
  s.subsequences = 8;
  CHECK_FALSE(pin.matches(s));
}

TEST_CASE("strategy: with a pin, what runs out is searched among the pinned settings") {
  // Full recomputation on 8 A800s at TP 1: the checkpoints and the working
  // set grow with the length; the unpinned search may pick other TPs.
  const mp::cluster c{mp::load_cluster_profile("a800"), 8, 8};
  mp::settings_pin pin;
  pin.tp = 1;
  auto r = mp::project(mp::strategy::recompute, small, c, 2048.0 * 1024, true, pin);
  REQUIRE(r);
  REQUIRE_FALSE(r->fits());
  mp::order_shortfalls(*r, small, c, 65536, pin);
  REQUIRE(r->shortfalls.front().resource == mp::resource::device_memory);
  // The shortest grid step at which TP 1's best setting runs out, by a linear scan.
  double scanned = 0;
  for (double k = 1; k <= 32 && scanned == 0; ++k) {
    const auto p = mp::project(mp::strategy::recompute, small, c, k * 65536, false, pin);
    if (p && !p->fits()) scanned = k * 65536;
  }
  CHECK(r->shortfalls.front().runs_out_at == scanned);
}

TEST_CASE("strategy: SPPO's copies spread over the nodes: one a node fits what one copy alone fits") {
  // A 2-layer, 2-head model has no one pipeline over 24 GPUs (SP 1 or 2,
  // PP 24 or 12 does not divide 2 layers). At 11200K one copy of SP 2 x
  // PP 2 fits with its node's host memory to itself; three fit one to a
  // node, at three times the tokens; six (two a node) do not.
  const mp::model_shape m = mp::parse_model_shape("2,1024,2,32000");
  const mp::cluster one_node{mp::load_cluster_profile("a100"), 8, 8}, three_nodes{mp::load_cluster_profile("a100"), 24, 8};
  const double s = 11200.0 * 1024;
  mp::settings_pin pin;
  pin.sp = 2, pin.pp = 2, pin.dp = 1;
  const auto alone = mp::project(mp::strategy::sppo, m, one_node, s, true, pin);
  REQUIRE(alone);
  CHECK(alone->fits());
  const auto best = mp::project(mp::strategy::sppo, m, three_nodes, s);
  REQUIRE(best);
  CHECK(best->fits());
  CHECK(best->chosen.dp == 3);
  CHECK(best->host_per_node == doctest::Approx(alone->host_per_node));
  CHECK(best->tokens_per_gpu_per_second == doctest::Approx(alone->tokens_per_gpu_per_second));
  pin.dp = 6;
  const auto six = mp::project(mp::strategy::sppo, m, three_nodes, s, true, pin);
  REQUIRE(six);
  CHECK_FALSE(six->fits());
}

TEST_CASE("strategy: SPPO's copies never fit a shorter sequence on more GPUs of a node") {
  // A 6-head model: SP 6 on 6 of a node's 8 GPUs is a copy too (it fitted
  // 960K on 6 GPUs and 896K on 8 when copies needed SP dividing the node).
  // A 2-layer model: one copy with the rest idle keeps the node's host
  // memory to itself (two copies on 8 GPUs fitted 9792K, one on 4 11200K).
  const mp::cluster_profile a100 = mp::load_cluster_profile("a100");
  for (const char* shape : {"6,6144,6,50257", "2,1024,2,32000"}) {
    const mp::model_shape m = mp::parse_model_shape(shape);
    double before = 0;
    for (const int gpus : {4, 6, 7, 8}) {
      const auto r = mp::longest(mp::strategy::sppo, m, {a100, gpus, 8});
      REQUIRE(r);
      CAPTURE(shape);
      CAPTURE(gpus);
      CHECK(r->sequence >= before);
      before = r->sequence;
    }
  }
}
