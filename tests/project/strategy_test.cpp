#include "memo/project/strategy.hpp"

#include <doctest/doctest.h>

#include <cmath>

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
      if (s > edge) r.limit = "device memory";
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
    r.limit = "device memory";
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
  // SPPO needs whole nodes; Ulysses' SP must divide the heads.
  const mp::cluster six{mp::load_cluster_profile("a800"), 12, 8};
  CHECK_FALSE(mp::project(mp::strategy::sppo, small, six, 1 << 20));
}
