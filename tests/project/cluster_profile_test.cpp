#include "memo/project/cluster_profile.hpp"

#include <doctest/doctest.h>

#include <string>

using memo::project::parse_cluster_profile;

namespace {
const std::string good =
    "# a test node\n"
    "name = test\n"
    "peak_flops = 1e15\n"
    "gemm_efficiency = 0.5\n"
    "attention_efficiency = 0.4   # trailing comment\n"
    "host_link_bytes_per_second = 2e10\n"
    "intra_node_bytes_per_second = 3e11\n"
    "inter_node_bytes_per_second = 5e10\n"
    "device_memory_bytes = 85899345920\n"
    "host_memory_bytes = 1e12\n"
    "gpus_per_node = 4\n";

std::string replace(std::string text, const std::string& from, const std::string& to) {
  text.replace(text.find(from), from.size(), to);
  return text;
}
}  // namespace

TEST_CASE("cluster_profile: a file with every field parses") {
  const auto p = parse_cluster_profile(good, "node.profile");
  CHECK(p.name == "test");
  CHECK(p.peak_flops == 1e15);
  CHECK(p.attention_efficiency == 0.4);
  CHECK(p.gpus_per_node == 4);
  CHECK(p.device_memory_bytes == 85899345920.0);
}

TEST_CASE("cluster_profile: errors name the field and the line") {
  CHECK_THROWS_WITH(parse_cluster_profile(replace(good, "peak_flops = 1e15\n", ""), "f"),
                    doctest::Contains("f: missing field 'peak_flops'"));
  CHECK_THROWS_WITH(parse_cluster_profile(replace(good, "= 2e10", "= -2e10"), "f"),
                    doctest::Contains("f:6: field 'host_link_bytes_per_second' must be positive, got -2e10"));
  CHECK_THROWS_WITH(parse_cluster_profile(replace(good, "= 4\n", "= 4.5\n"), "f"),
                    doctest::Contains("f:11: field 'gpus_per_node' must be a whole number"));
  CHECK_THROWS_WITH(parse_cluster_profile(good + "peak_flops = 2\n", "f"),
                    doctest::Contains("f:12: field 'peak_flops' given again (first at line 3)"));
  CHECK_THROWS_WITH(parse_cluster_profile(good + "colour = red\n", "f"),
                    doctest::Contains("f:12: unknown field 'colour'"));
  CHECK_THROWS_WITH(parse_cluster_profile(good + "just words\n", "f"),
                    doctest::Contains("f:12: expected 'key = value'"));
  CHECK_THROWS_WITH(parse_cluster_profile(replace(good, "= 0.5", "= fast"), "f"),
                    doctest::Contains("f:4: field 'gemm_efficiency': 'fast' is not a number"));
  CHECK_THROWS_WITH(parse_cluster_profile(replace(good, "= 0.5", "= 1.5"), "f"),
                    doctest::Contains("efficiencies must be at most 1"));
}

TEST_CASE("cluster_profile: presets are valid and unknown names are errors") {
  for (const auto& p : memo::project::cluster_presets()) CHECK_NOTHROW(p.check());
  CHECK(memo::project::load_cluster_profile("h200").device_memory_bytes >
        memo::project::load_cluster_profile("h100").device_memory_bytes);
  CHECK_THROWS_WITH(memo::project::load_cluster_profile("/nonexistent/x.profile"),
                    doctest::Contains("neither a preset"));
}
