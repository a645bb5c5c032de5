#include "memo/project/cluster_profile.hpp"

#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
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
  struct bad {
    std::string text;
    const char* message;
  };
  // Byte counts are whole numbers, judged as written: 2^60 + 1 is past
  // the bound although it rounds to 2^60 as a double, and a count a double
  // cannot hold exactly is refused rather than changed.
  const bad cases[] = {
      {replace(good, "peak_flops = 1e15\n", ""),
       "f: missing field 'peak_flops'"},
      {replace(good, "= 2e10", "= -2e10"),
       "f:6: field 'host_link_bytes_per_second' must be positive and finite, got -2e10"},
      {replace(good, "= 1e12", "= inf"),
       "f:10: field 'host_memory_bytes': 'inf' is not a number"},
      {replace(good, "= 4\n", "= 4.5\n"),
       "f:11: field 'gpus_per_node' must be a whole number"},
      {replace(good, "= 4\n", "= 1e12\n"),
       "f:11: field 'gpus_per_node' must be a whole number up to 1048576"},
      {replace(good, "= 4\n", "= 1048577\n"),
       "f:11: field 'gpus_per_node' must be a whole number up to 1048576"},
      {good + "peak_flops = 2\n",
       "f:12: field 'peak_flops' given again (first at line 3)"},
      {good + "colour = red\n",
       "f:12: unknown field 'colour'"},
      {good + "just words\n",
       "f:12: expected 'key = value'"},
      {replace(good, "= 0.5", "= fast"),
       "f:4: field 'gemm_efficiency': 'fast' is not a number"},
      {replace(good, "= 0.5", "= 1.5"),
       "efficiencies must be at most 1"},
      {replace(good, "= 85899345920\n", "= 85899345920.5\n"),
       "f:9: field 'device_memory_bytes' must be a whole number of bytes"},
      {replace(good, "= 85899345920\n", "= 1152921504606846977\n"),
       "f:9: field 'device_memory_bytes' must be between 1 and 1152921504606846976"},
      {replace(good, "= 85899345920\n", "= 9007199254740993\n"),
       "f:9: field 'device_memory_bytes' is not exactly representable"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.message);
    CHECK_THROWS_WITH(parse_cluster_profile(c.text, "f"), doctest::Contains(c.message));
  }
  CHECK_THROWS_WITH(parse_cluster_profile("", "empty.profile"), doctest::Contains("empty.profile: missing field"));
  CHECK(parse_cluster_profile(replace(good, "= 85899345920\n", "= 1152921504606846976\n"), "f").device_memory_bytes ==
        0x1p60);
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
  // The cause is named: a missing file, a path through a regular file.
  CHECK_THROWS_WITH(memo::project::load_cluster_profile("/nonexistent/x.profile"),
                    doctest::Contains("nor a readable file: it does not exist"));
  {
    std::ofstream out(path);
    out << good;
  }
  CHECK_THROWS_WITH(memo::project::load_cluster_profile(path + "/x"), doctest::Contains("nor a readable file: "));
  std::remove(path.c_str());
}

TEST_CASE("cluster_profile: a byte-order mark, CRLF line ends and binary junk") {
  CHECK(parse_cluster_profile("\xEF\xBB\xBF" + good, "bom.profile").name == "test");
  std::string crlf;
  for (char c : good) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
  CHECK(parse_cluster_profile(crlf, "crlf.profile").gpus_per_node == 4);
  // Old Mac line ends (a lone CR), after a comment line: every field is
  // read, and the line numbers count them.
  std::string cr = "# a comment\r";
  for (char c : good) cr += c == '\n' ? '\r' : c;
  CHECK(parse_cluster_profile(cr, "cr.profile").gpus_per_node == 4);
  CHECK_THROWS_WITH(parse_cluster_profile(cr + "bogus = 1\r", "cr.profile"),
                    doctest::Contains("cr.profile:13: unknown field 'bogus'"));
  // Bytes from the file are quoted with control and non-ASCII bytes escaped.
  CHECK_THROWS_WITH(parse_cluster_profile(std::string("\x01\xff junk\n"), "j"),
                    doctest::Contains("j:1: expected 'key = value', got '\\x01\\xff junk'"));
  CHECK_THROWS_WITH(parse_cluster_profile(good + "name2\x1b = 3\n", "j"), doctest::Contains("unknown field 'name2\\x1b'"));
  CHECK_THROWS_WITH(parse_cluster_profile(replace(good, "name = test", "name = \x1b[31mred"), "j"),
                    doctest::Contains("j:2: field 'name' must be printable text, got '\\x1b[31mred'"));
  CHECK_THROWS_WITH(parse_cluster_profile(good + "= 3\n", "j"), doctest::Contains("j:12: expected 'key = value', got no key"));
}

TEST_CASE("cluster_profile: every field has a range, checked at its line and by check()") {
  // Below or above the range: denormals, overflowing doubles, memories no
  // 64-bit count holds, percentages written as fractions.
  CHECK_THROWS_WITH(parse_cluster_profile(replace(good, "= 0.5", "= 1e-320"), "f"),
                    doctest::Contains("f:4: field 'gemm_efficiency' must be between 0.001 and 1, got 1e-320"));
  CHECK_THROWS_WITH(parse_cluster_profile(replace(good, "= 0.5", "= 1e400"), "f"),
                    doctest::Contains("f:4: field 'gemm_efficiency' must be between 0.001 and 1, got 1e400"));
  CHECK_THROWS_WITH(parse_cluster_profile(replace(good, "= 0.5", "= 62"), "f"),
                    doctest::Contains("f:4: field 'gemm_efficiency' is above 1: efficiencies must be at most 1"));
  CHECK_THROWS_WITH(
      parse_cluster_profile(replace(good, "= 85899345920", "= 1e300"), "f"),
      doctest::Contains("f:9: field 'device_memory_bytes' must be between 1 and 1152921504606846976, got 1e300"));
  CHECK_THROWS_WITH(parse_cluster_profile(replace(good, "= 1e15", "= 1e-300"), "f"),
                    doctest::Contains("f:3: field 'peak_flops' must be between 1 and 1e+21, got 1e-300"));
  CHECK_THROWS_WITH(parse_cluster_profile(replace(good, "= 1e12", "= nan"), "f"),
                    doctest::Contains("f:10: field 'host_memory_bytes': 'nan' is not a number"));
  // Each range's ends are accepted, a step beyond them is not.
  for (const auto& range : memo::project::profile_field_ranges) {
    const auto value_line = [&](double v) {
      char text[64];
      std::snprintf(text, sizeof text, "%.17g", v);
      return std::string(range.field) + " = " + text;
    };
    const auto at = [&](double v) {
      const auto start = good.find(std::string(range.field) + " = ");
      const auto end = good.find('\n', start);
      std::string text = good;
      return text.replace(start, end - start, value_line(v));
    };
    CHECK_NOTHROW(parse_cluster_profile(at(range.low), "f"));
    CHECK_NOTHROW(parse_cluster_profile(at(range.high), "f"));
    CHECK_THROWS_WITH(parse_cluster_profile(at(range.low * 0.5), "f"), doctest::Contains(std::string(range.field).c_str()));
    CHECK_THROWS_WITH(parse_cluster_profile(at(range.high * 2), "f"), doctest::Contains(std::string(range.field).c_str()));
  }
  // A profile built in code gets the same checks, before any conversion to
  // 64-bit byte counts.
  auto p = parse_cluster_profile(good, "f");
  p.device_memory_bytes = 1e300;
  CHECK_THROWS_WITH(p.check(), doctest::Contains("profile 'test': field 'device_memory_bytes' must be between"));
  CHECK_THROWS_WITH(p.device(), doctest::Contains("device_memory_bytes"));
  p = parse_cluster_profile(good, "f");
  p.attention_efficiency = 1e-320;
  CHECK_THROWS_WITH(p.check(), doctest::Contains("field 'attention_efficiency' must be between 0.001 and 1"));
}

TEST_CASE("cluster_profile: every missing field is named, and a directory is not a profile") {
  CHECK_THROWS_WITH(parse_cluster_profile("# nothing\n", "empty.profile"),
                    doctest::Contains("empty.profile: missing field 'attention_efficiency' (also missing: "
                                      "device_memory_bytes, gemm_efficiency, gpus_per_node, "
                                      "host_link_bytes_per_second, host_memory_bytes, inter_node_bytes_per_second, "
                                      "intra_node_bytes_per_second, peak_flops)"));
  CHECK_THROWS_WITH(memo::project::load_cluster_profile("."), doctest::Contains("profile '.' is a directory"));
}

TEST_CASE("cluster_profile: a file name's control bytes are escaped in every error, never echoed") {
  const std::string name = "evil\x1b[31m\nline.profile";
  for (const std::string text : {"# nothing\n", "peak_flops = 1e15\nbad line\n"}) {
    try {
      (void)parse_cluster_profile(text, name);
      FAIL("no error");
    } catch (const memo::error& e) {
      const std::string message = e.what();
      CHECK(message.find("evil\\x1b[31m\\x0aline.profile") != std::string::npos);
      CHECK(message.find('\x1b') == std::string::npos);
      CHECK(message.find('\n') == std::string::npos);
    }
  }
}

#ifndef _WIN32
#include <sys/stat.h>

TEST_CASE("cluster_profile: a FIFO is refused by name before it is opened (an open would block)") {
  const auto fifo = std::filesystem::temp_directory_path() / "memo_cluster_profile_test.fifo";
  std::filesystem::remove(fifo);
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const std::string named = "profile '" + fifo.string() + "' is a FIFO (named pipe), not a regular file";
  CHECK_THROWS_WITH(memo::project::load_cluster_profile(fifo.string()), doctest::Contains(named.c_str()));
  std::filesystem::remove(fifo);
  if (std::filesystem::exists("/dev/zero")) {
    CHECK_THROWS_WITH(memo::project::load_cluster_profile("/dev/zero"),
                      doctest::Contains("profile '/dev/zero' is a character device, not a regular file"));
  }
}
#endif
