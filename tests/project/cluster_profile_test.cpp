#include "memo/project/cluster_profile.hpp"

#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
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
  // The single-GPU view the schedule simulator reads.
  const auto d = p.device();
  CHECK(d.host_to_device_bytes_per_second == 2e10);
  CHECK(d.device_to_host_bytes_per_second == 2e10);
  CHECK(d.interconnect_bytes_per_second == 3e11);
  CHECK(d.gpus_per_node == 4);
  CHECK_NOTHROW(d.check());
}

TEST_CASE("cluster_profile: errors name the field and the line") {
  CHECK_THROWS_WITH(parse_cluster_profile(replace(good, "peak_flops = 1e15\n", ""), "f"),
                    doctest::Contains("f: missing field 'peak_flops'"));
  CHECK_THROWS_WITH(parse_cluster_profile(replace(good, "= 2e10", "= -2e10"), "f"),
                    doctest::Contains("f:6: field 'host_link_bytes_per_second' must be positive and finite, got -2e10"));
  CHECK_THROWS_WITH(parse_cluster_profile(replace(good, "= 1e12", "= inf"), "f"),
                    doctest::Contains("f:10: field 'host_memory_bytes': 'inf' is not a number"));
  CHECK_THROWS_WITH(parse_cluster_profile(replace(good, "= 4\n", "= 4.5\n"), "f"),
                    doctest::Contains("f:11: field 'gpus_per_node' must be a whole number"));
  CHECK_THROWS_WITH(parse_cluster_profile(replace(good, "= 4\n", "= 1e12\n"), "f"),
                    doctest::Contains("f:11: field 'gpus_per_node' must be a whole number up to 1000000"));
  CHECK_THROWS_WITH(parse_cluster_profile(good + "peak_flops = 2\n", "f"),
                    doctest::Contains("f:12: field 'peak_flops' given again (first at line 3)"));
  CHECK_THROWS_WITH(parse_cluster_profile(good + "colour = red\n", "f"), doctest::Contains("f:12: unknown field 'colour'"));
  CHECK_THROWS_WITH(parse_cluster_profile(good + "just words\n", "f"), doctest::Contains("f:12: expected 'key = value'"));
  CHECK_THROWS_WITH(parse_cluster_profile(replace(good, "= 0.5", "= fast"), "f"),
                    doctest::Contains("f:4: field 'gemm_efficiency': 'fast' is not a number"));
  CHECK_THROWS_WITH(parse_cluster_profile(replace(good, "= 0.5", "= 1.5"), "f"),
                    doctest::Contains("efficiencies must be at most 1"));
  CHECK_THROWS_WITH(parse_cluster_profile("", "empty.profile"), doctest::Contains("empty.profile: missing field"));
}

TEST_CASE("cluster_profile: presets are valid and one per piece of hardware") {
  for (const auto& p : memo::project::cluster_presets()) CHECK_NOTHROW(p.check());
  const auto a800 = memo::project::load_cluster_profile("a800");
  const auto a100x4 = memo::project::load_cluster_profile("a100x4");
  // MEMO 5.1: 8 GPUs and 2 TB per node; FPDT 5.1: 4 GPUs and 1 TB per node.
  CHECK(a800.gpus_per_node == 8);
  CHECK(a100x4.gpus_per_node == 4);
  CHECK(a800.host_memory_bytes == doctest::Approx(2 * a100x4.host_memory_bytes).epsilon(0.01));
  // The concurrent host link is below the links' nominal 32 GB/s.
  CHECK(a800.host_link_bytes_per_second < 32e9);
  CHECK(memo::project::load_cluster_profile("h200").device_memory_bytes >
        memo::project::load_cluster_profile("h100").device_memory_bytes);
}

TEST_CASE("cluster_profile: files are read, unknown names and endless files are errors") {
  const std::string path = "cluster_profile_test.profile";
  {
    std::ofstream out(path);
    out << good;
  }
  CHECK(memo::project::load_cluster_profile(path).name == "test");
  {
    std::ofstream out(path);
    out << std::string((1 << 20) + 10, '#');
  }
  CHECK_THROWS_WITH(memo::project::load_cluster_profile(path), doctest::Contains("longer than 1048576 bytes"));
  std::remove(path.c_str());
  CHECK_THROWS_WITH(memo::project::load_cluster_profile("/nonexistent/x.profile"),
                    doctest::Contains("neither a preset (a800, a100, a100x4, h100, h200) nor a readable file"));
}
