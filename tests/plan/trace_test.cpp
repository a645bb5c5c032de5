#include "memo/plan/trace.hpp"

#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace {

// The message of the memo::error that `fn` raises (without the C++ source
// location prefix), or "" if it raises nothing.
template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const memo::error& e) {
    return e.message();
  }
  return {};
}

constexpr std::uint64_t mib = std::uint64_t{1} << 20;

const char* const figure4 = R"(# Figure 4
section begin layer 0 forward
malloc 13 128MiB
malloc 14 128MiB
free   14 128MiB
malloc 15 256MiB
free   13 128MiB
malloc 16 512MiB
malloc 17 128MiB
malloc 18 128MiB
malloc 19 256MiB
free   17 128MiB
free   19 256MiB
free   18 128MiB
section end layer 0 forward
section begin layer 0 backward
malloc 20 512MiB
free   20 512MiB
malloc 21 1024MiB
malloc 22 256MiB
free   15 256MiB
malloc 23 128MiB
malloc 24 512MiB
free   21 1024MiB
free   22 256MiB
free   23 128MiB
free   24 512MiB
free   16 512MiB
section end layer 0 backward
)";

const memo::dsa_buffer& find(const memo::dsa_problem& p, std::uint64_t id) {
  for (const auto& b : p.buffers) {
    if (b.id == id) return b;
  }
  FAIL("no buffer " << id);
  return p.buffers.front();
}

}  // namespace

TEST_CASE("trace: figure 4 becomes intervals on the request timeline") {
  const auto t = memo::parse_trace(figure4, "figure4");
  REQUIRE(t.problem.buffers.size() == 12);
  CHECK(t.end_time == 24);
  CHECK(t.never_freed.empty());
  // Request k happens at time k; a buffer is live from its malloc to its free.
  CHECK(find(t.problem, 13).lower == 0);
  CHECK(find(t.problem, 13).upper == 4);
  CHECK(find(t.problem, 14).lower == 1);
  CHECK(find(t.problem, 14).upper == 2);
  CHECK(find(t.problem, 15).lower == 3);
  CHECK(find(t.problem, 15).upper == 16);
  CHECK(find(t.problem, 16).upper == 23);
  CHECK(find(t.problem, 21).size_bytes == 1024 * mib);
  REQUIRE(t.sections.size() == 2);
  CHECK(t.sections[0].name == "layer 0 forward");
  CHECK(t.sections[0].begin == 0);
  CHECK(t.sections[0].end == 12);
  CHECK(t.sections[0].layer == 0);
  CHECK(t.sections[0].phase == "forward");
  CHECK(t.sections[1].begin == 12);
  CHECK(t.sections[1].end == 24);
  CHECK(t.sections[1].phase == "backward");
  // By hand: at time 18 tensors 16, 21, 22, 23, 24 are live:
  // 512 + 1024 + 256 + 128 + 512 = 2432 MiB; no instant has more.
  CHECK(memo::lower_bound_bytes(t.problem) == 2432 * mib);
}

TEST_CASE("trace: the bundled figure 4 fixture equals the figure") {
  const auto file = memo::read_problem_file(MEMO_SOURCE_DIR "/examples/traces/figure4.trace");
  const auto inline_text = memo::parse_trace(figure4);
  CHECK(file.problem.buffers == inline_text.problem.buffers);
  CHECK(file.sections == inline_text.sections);
}

TEST_CASE("trace: a buffer never freed is live to the end and reported") {
  const auto t = memo::parse_trace("malloc 1 10\nmalloc 2 20\nfree 1 10\nmalloc 3 5\n");
  REQUIRE(t.never_freed.size() == 2);
  CHECK(t.never_freed[0] == 2);
  CHECK(t.never_freed[1] == 3);
  CHECK(find(t.problem, 2).upper == 4);
  CHECK(find(t.problem, 3).lower == 3);
  CHECK(find(t.problem, 3).upper == 4);
}

TEST_CASE("trace: comments, blank lines and units") {
  const auto t = memo::parse_trace("\n  # comment\nmalloc 7 2KiB # trailing\n\nfree 7 2048\n");
  REQUIRE(t.problem.buffers.size() == 1);
  CHECK(t.problem.buffers[0].size_bytes == 2048);
  CHECK(t.problem.buffers[0].lower == 0);
  CHECK(t.problem.buffers[0].upper == 1);
}

TEST_CASE("trace: each malformed request names file, line and reason") {
  auto msg = [](const char* text) { return error_of([&] { memo::parse_trace(text, "t.trace"); }); };
  CHECK(msg("malloc 1 10\nmalloc x 10\n") == "t.trace:2: id 'x' is not a non-negative integer");
  CHECK(msg("malloc 1 ten\n") ==
        "t.trace:1: size 'ten' is not a byte count (digits, optionally KiB/MiB/GiB/TiB)");
  CHECK(msg("malloc 1 0\n") == "t.trace:1: malloc of id 1: size must be positive, got 0");
  CHECK(msg("malloc 1 -5\n") == "t.trace:1: size must be positive, got '-5'");
  CHECK(msg("malloc 1 10\nmalloc 1 10\n") ==
        "t.trace:2: duplicate id 1: already allocated at line 1");
  CHECK(msg("malloc 1 10\nfree 2 10\n") == "t.trace:2: free of unknown id 2");
  CHECK(msg("malloc 1 10\nfree 1 10\n\nfree 1 10\n") ==
        "t.trace:4: free of id 1, already freed at line 2");
  CHECK(msg("malloc 1 10\nfree 1 12\n") ==
        "t.trace:2: free of id 1 says 12 bytes but it was allocated with 10 bytes at line 1");
  CHECK(msg("alloc 1 10\n") == "t.trace:1: unknown request 'alloc' (expected malloc, free or section)");
  CHECK(msg("malloc 1\n") == "t.trace:1: expected 'malloc <id> <bytes>', got 2 fields");
  CHECK(msg("section begin a\nsection begin b\n") ==
        "t.trace:2: section 'b' begins inside the open section 'a' at line 1; sections do not nest");
  CHECK(msg("section begin a\nsection end b\n") ==
        "t.trace:2: section end 'b' does not match the open section 'a' at line 1");
  CHECK(msg("section end a\n") == "t.trace:1: section end 'a' without a matching begin");
  CHECK(msg("malloc 1 1\nsection begin a\n") == "t.trace:2: section 'a' is never ended");
  CHECK(msg("section open a\n") ==
        "t.trace:1: expected 'section begin <name>' or 'section end <name>'");
  CHECK(msg("malloc 1 99999999999999999999\n") ==
        "t.trace:1: size '99999999999999999999' is not a byte count that fits in 64 bits (at most "
        "18446744073709551615 bytes)");
  CHECK(msg("malloc 1 18446744073709551615\nmalloc 2 1\n") ==
        "t.trace:2: malloc of id 2: its size 1 takes the sizes of all buffers together past 2^64 - 1 = "
        "18446744073709551615: the 1 buffer(s) before it total 18446744073709551615 bytes");
}

TEST_CASE("trace: capacity below the lower bound names both numbers") {
  memo::parse_options options;
  options.capacity_bytes = 25;
  const auto msg = error_of([&] {
    memo::parse_trace("malloc 1 10\nmalloc 2 20\nfree 1 10\nfree 2 20\n", "c.trace", options);
  });
  CHECK(msg ==
        "c.trace: capacity 25 bytes is below the lower bound 30 bytes (the most bytes live at one "
        "instant)");
  options.capacity_bytes = 30;
  CHECK(memo::parse_trace("malloc 1 10\nmalloc 2 20\n", "c.trace", options).problem.capacity_bytes ==
        30);
}

TEST_CASE("trace: dsa csv parses in any column order, with alignment") {
  const auto p = memo::parse_dsa_csv("size,id,upper,lower,alignment\n64,3,9,2,32\n8,4,3,0,1\n");
  REQUIRE(p.buffers.size() == 2);
  CHECK(p.buffers[0].id == 3);
  CHECK(p.buffers[0].lower == 2);
  CHECK(p.buffers[0].upper == 9);
  CHECK(p.buffers[0].size_bytes == 64);
  CHECK(p.buffers[0].alignment == 32);
  CHECK(p.buffers[1].alignment == 1);
}

TEST_CASE("trace: each malformed csv line names file, line and reason") {
  auto msg = [](const char* text) { return error_of([&] { memo::parse_dsa_csv(text, "b.csv"); }); };
  CHECK(msg("id,lower,upper,size\n1,0,x,4\n") == "b.csv:2: field 'upper' is not an integer: 'x'");
  CHECK(msg("id,lower,upper,size\n1,0,2,0\n") == "b.csv:2: buffer 1: size must be positive, got 0");
  CHECK(msg("id,lower,upper,size\n1,0,2,-3\n") ==
        "b.csv:2: buffer 1: size must be positive, got -3");
  CHECK(msg("id,lower,upper,size\n1,5,5,4\n") ==
        "b.csv:2: buffer 1: upper (5) must be greater than lower (5)");
  CHECK(msg("id,lower,upper,size\n1,0,2,4\n# c\n1,1,3,4\n") ==
        "b.csv:4: duplicate id 1 (first at line 2)");
  CHECK(msg("id,lower,upper,size\n1,0,2\n") == "b.csv:2: expected 4 fields, got 3");
  CHECK(msg("id,lower,size\n") ==
        "b.csv:1: header lacks the column 'upper' (expected id,lower,upper,size[,alignment])");
  CHECK(msg("id,lower,upper,size,colour\n") ==
        "b.csv:1: unknown column 'colour' in header (expected id,lower,upper,size[,alignment])");
  CHECK(msg("id,lower,upper,size,alignment\n1,0,2,4,3\n") ==
        "b.csv:2: buffer 1: alignment must be a power of two, got 3");
  CHECK(msg("-1,lower,upper,size\n").find("unknown column '-1'") != std::string::npos);
  CHECK(msg("") == "b.csv: no header line (expected id,lower,upper,size)");
  // CSV sizes are signed 64-bit fields; two of the largest still fit, three do not.
  CHECK(msg("id,lower,upper,size\n1,0,2,9223372036854775807\n2,0,2,9223372036854775807\n"
            "3,0,2,9223372036854775807\n") ==
        "b.csv:4: buffer 3: its size 9223372036854775807 takes the sizes of all buffers together past "
        "2^64 - 1 = 18446744073709551615: the 2 buffer(s) before it total 18446744073709551614 bytes");
  memo::parse_options options;
  options.capacity_bytes = 7;
  CHECK(error_of([&] {
          memo::parse_dsa_csv("id,lower,upper,size\n1,0,2,4\n2,1,3,4\n", "b.csv", options);
        }) == "b.csv: capacity 7 bytes is below the lower bound 8 bytes (the most bytes live at "
              "one instant)");
}

TEST_CASE("trace: write_trace round-trips sections, frees and never-freed buffers") {
  const auto t = memo::parse_trace(std::string(figure4) + "malloc 99 4\n");
  const auto back = memo::parse_trace(memo::write_trace(t));
  CHECK(back.problem.buffers == t.problem.buffers);
  CHECK(back.sections == t.sections);
  CHECK(back.never_freed == t.never_freed);
}

TEST_CASE("trace: write_trace keeps an empty section after the sections closing with it") {
  // A section holding no request begins and ends at the same instant as the
  // end of the section before it; written back, its end must follow its begin.
  const auto trace = memo::parse_trace(
      "section begin a\nmalloc 1 64\nsection end a\nsection begin b\nsection end b\n"
      "free 1 64\n",
      "empty.trace");
  REQUIRE(trace.sections.size() == 2);
  CHECK(trace.sections[1].begin == trace.sections[1].end);
  const auto back = memo::parse_trace(memo::write_trace(trace), "round trip");
  CHECK(back.sections == trace.sections);
  CHECK(back.problem.buffers == trace.problem.buffers);
}

TEST_CASE("trace: write_trace puts a section's begin before the free that opens it") {
  const auto trace = memo::parse_trace(
      "malloc 1 64\nmalloc 2 32\nsection begin backward\nfree 2 32\nfree 1 64\n"
      "section end backward\n",
      "opens-with-free.trace");
  const auto back = memo::parse_trace(memo::write_trace(trace), "round trip");
  CHECK(back.sections == trace.sections);
  CHECK(back.problem.buffers == trace.problem.buffers);
}

TEST_CASE("trace: plan csv round-trips and rejects mismatches") {
  const auto p = memo::parse_dsa_csv("id,lower,upper,size\n1,0,2,4\n2,1,3,8\n");
  memo::dsa_plan plan{{8, 0}, 12};
  const std::string text = memo::write_plan_csv(p, plan);
  CHECK(text == "id,offset,size,lower,upper\n1,8,4,0,2\n2,0,8,1,3\n");
  CHECK(memo::parse_plan_csv(text, p) == plan);
  auto msg = [&](const char* t) { return error_of([&] { memo::parse_plan_csv(t, p, "p.csv"); }); };
  CHECK(msg("id,offset,size,lower,upper\n1,8,4,0,2\n") == "p.csv: buffer 2 has no offset");
  CHECK(msg("id,offset,size,lower,upper\n3,8,4,0,2\n") == "p.csv:2: id 3 is not in the problem");
  CHECK(msg("id,offset,size,lower,upper\n1,8,5,0,2\n") ==
        "p.csv:2: buffer 1 has size 5 live [0, 2) but the problem says size 4 live [0, 2)");
  CHECK(msg("id,offset,size,lower,upper\n1,z,4,0,2\n") ==
        "p.csv:2: field 'offset' is not an integer: 'z'");
}

TEST_CASE("trace: buffers of 2^63 bytes and more keep an exact lower bound") {
  const auto t = memo::parse_trace("malloc 1 8388608TiB\nmalloc 2 1\nfree 1 9223372036854775808\n");
  CHECK(memo::lower_bound_bytes(t.problem) == (std::uint64_t{1} << 63) + 1);
}

TEST_CASE("trace: a missing file is an error naming it") {
  CHECK(error_of([] { memo::read_problem_file("/nonexistent/dir/x.trace"); }) ==
        "/nonexistent/dir/x.trace: cannot open file for reading: No such file or directory");
  // A path is input too: its control bytes are escaped in the message.
  CHECK(error_of([] { memo::read_problem_file("/nonexistent/\x1b[2Jx.trace"); }) ==
        "/nonexistent/\\x1b[2Jx.trace: cannot open file for reading: No such file or directory");
}

TEST_CASE("trace: read_problem_file tells csv from a trace by content") {
  const auto csv = memo::read_problem_file(MEMO_SOURCE_DIR "/examples/traces/random12.csv");
  CHECK(csv.problem.buffers.size() == 12);
  CHECK(csv.end_time == 15);
  CHECK(csv.sections.empty());
  const auto trace = memo::read_problem_file(MEMO_SOURCE_DIR "/examples/traces/unfreed.trace");
  CHECK(trace.never_freed == std::vector<std::uint64_t>{3});
}

TEST_CASE("trace: the pieces are usable on their own and through trace.hpp") {
  // trace.hpp includes text_input, request_trace and dsa_csv: the names
  // other code uses are all reachable from here.
  memo::trace_builder builder("built");
  builder.malloc(1, 8);
  builder.free(1, 8);
  const memo::memory_trace t = std::move(builder).finish();
  CHECK(memo::parse_trace(memo::write_trace(t)).problem.buffers == t.problem.buffers);
  CHECK(memo::parse_dsa_csv("id,lower,upper,size\n1,0,1,8\n").buffers.size() == 1);
}

TEST_CASE("trace: a byte-order mark is skipped, tokens in messages are cut and escaped") {
  CHECK(memo::parse_trace("\xEF\xBB\xBFmalloc 1 8\n").problem.buffers.size() == 1);
  CHECK(memo::parse_dsa_csv("\xEF\xBB\xBFid,lower,upper,size\n1,0,1,8\n").buffers.size() == 1);
  auto msg = [](const std::string& text) { return error_of([&] { memo::parse_trace(text, "t"); }); };
  const std::string long_token(500, 'q');
  CHECK(msg("malloc 1 " + long_token + "\n") ==
        "t:1: size '" + std::string(64, 'q') +
            "... (500 bytes)' is not a byte count (digits, optionally KiB/MiB/GiB/TiB)");
  CHECK(msg("ma\x1b[31mlloc 1 8\n") ==
        "t:1: unknown request 'ma\\x1b[31mlloc' (expected malloc, free or section)");
  CHECK(msg("malloc 18446744073709551616 8\n") ==
        "t:1: id '18446744073709551616' does not fit in an unsigned 64-bit integer (0 to "
        "18446744073709551615)");
  CHECK(msg("") == "t: empty trace (no malloc, free or section line)");
  CHECK(msg("# only a comment\n\n") == "t: empty trace (no malloc, free or section line)");
}

TEST_CASE("trace: csv numbers out of range and lifetimes past INT64_MAX are said as such") {
  auto msg = [](const char* text) { return error_of([&] { memo::parse_dsa_csv(text, "b.csv"); }); };
  CHECK(msg("id,lower,upper,size\n1,0,2,18446744073709551616\n") ==
        "b.csv:2: buffer 1: '18446744073709551616' does not fit in an unsigned 64-bit integer (0 to "
        "18446744073709551615) as a size");
  CHECK(msg("id,lower,upper,size\n1,0,9223372036854775808,8\n") ==
        "b.csv:2: field 'upper' does not fit in a signed 64-bit integer: '9223372036854775808'");
  CHECK(msg("id,lower,upper,size\n1,-9223372036854775808,9223372036854775807,8\n") ==
        "b.csv:2: buffer 1: the interval [-9223372036854775808, 9223372036854775807) is longer than "
        "INT64_MAX = 9223372036854775807 ticks");
  // Each lifetime fits, the timeline does not.
  CHECK(msg("id,lower,upper,size\n1,-9223372036854775807,0,8\n2,0,9223372036854775807,8\n")
            .find("b.csv: the timeline spans from -9223372036854775807 to 9223372036854775807") == 0);
  // Sizes up to 2^64 - 1 (unsigned now); two of 2^63 stack past 64 bits.
  CHECK(memo::parse_dsa_csv("id,lower,upper,size\n1,0,2,18446744073709551615\n").buffers[0].size_bytes ==
        ~std::uint64_t{0});
  CHECK(msg("id,lower,upper,size,alignment\n1,0,2,5,9223372036854775808\n2,1,3,5,9223372036854775808\n") ==
        "");
}

TEST_CASE("trace: limits on input size and buffer count name the limit") {
  memo::parse_options options;
  options.max_buffers = 2;
  CHECK(error_of([&] { memo::parse_trace("malloc 1 8\nmalloc 2 8\nmalloc 3 8\n", "t", options); }) ==
        "t:3: malloc of id 3: more than 2 buffers, the limit (parse_options::max_buffers)");
  CHECK(error_of([&] { memo::parse_dsa_csv("id,lower,upper,size\n1,0,1,8\n2,0,1,8\n3,0,1,8\n", "c", options); }) ==
        "c:4: more than 2 buffers, the limit (parse_options::max_buffers)");
  const auto path = std::filesystem::temp_directory_path() / "memo_trace_limit_test.trace";
  memo::write_text_file(path, "malloc 1 8\nfree 1 8\n");
  options.max_input_bytes = 10;
  CHECK(error_of([&] { memo::read_problem_file(path, options); }) ==
        path.string() + ": input is larger than the limit of 10 bytes (parse_options::max_input_bytes)");
  options.max_input_bytes = 20;
  CHECK(memo::read_problem_file(path, options).problem.buffers.size() == 1);
  std::filesystem::remove(path);
  // Stacking a layer checks the model's size before building it.
  const auto layer = memo::read_problem_file(MEMO_SOURCE_DIR "/examples/traces/figure4.trace");
  CHECK(error_of([&] { memo::stack_layer_trace(layer, 1000, 100); }) ==
        "stack_layer_trace: 1000 layers of 12 buffers each (and 0 others) make 12000 buffers, more "
        "than the limit of 100 (parse_options::max_buffers)");
}

TEST_CASE("trace: an endless input is refused at the limit, its buffer never past it") {
  // /dev/zero never ends: the reader stops one byte past the limit, and its
  // buffer was reserved once, so it never held more (a string grown by
  // appending would have doubled to twice the limit).
  constexpr std::uint64_t limit = 300'000;
  std::FILE* zero = std::fopen("/dev/zero", "rb");
  REQUIRE(zero != nullptr);
  std::string text;
  CHECK(error_of([&] { memo::detail::read_bounded(zero, "/dev/zero", limit, text); }) ==
        "/dev/zero: input is larger than the limit of 300000 bytes (parse_options::max_input_bytes)");
  std::fclose(zero);
  CHECK(text.size() == limit + 1);
  CHECK(text.capacity() >= limit + 1);
  CHECK(text.capacity() < limit + 64);
  // Through the file reader, the same error.
  CHECK(error_of([&] { memo::detail::read_whole_file("/dev/zero", limit); }) ==
        "/dev/zero: input is larger than the limit of 300000 bytes (parse_options::max_input_bytes)");
  // A regular file over the limit is refused by its size, before reading:
  // nothing is reserved or read.
  const auto path = std::filesystem::temp_directory_path() / "memo_trace_bounded_test.trace";
  memo::write_text_file(path, std::string(5000, '#'));
  std::FILE* file = std::fopen(path.c_str(), "rb");
  REQUIRE(file != nullptr);
  std::string small;
  CHECK(error_of([&] { memo::detail::read_bounded(file, "f", 4999, small); }) ==
        "f: input is larger than the limit of 4999 bytes (parse_options::max_input_bytes)");
  CHECK(small.empty());
  CHECK(small.capacity() < 4999);
  // At exactly the limit it is read whole, into a buffer of its size.
  std::rewind(file);
  memo::detail::read_bounded(file, "f", 5000, small);
  CHECK(small == std::string(5000, '#'));
  CHECK(small.capacity() < 5000 + 64);
  std::fclose(file);
  std::filesystem::remove(path);
}

TEST_CASE("trace: a stream under a huge limit is read without reserving the limit") {
  // A pipe's length is unknown, so the reader reserves at most the default
  // limit's worth (of which only what is read is touched) and grows from
  // there: a limit of 2^62 bytes must not be asked for at once.
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const std::string data(30000, 'm');  // fits in a pipe's buffer, so one thread writes it all
  REQUIRE(::write(fds[1], data.data(), data.size()) == static_cast<ssize_t>(data.size()));
  ::close(fds[1]);
  std::FILE* stream = ::fdopen(fds[0], "rb");
  REQUIRE(stream != nullptr);
  std::string text;
  memo::detail::read_bounded(stream, "pipe", std::uint64_t{1} << 62, text);
  std::fclose(stream);
  CHECK(text == data);
  CHECK(text.capacity() <= memo::parse_options{}.max_input_bytes + 1);
}

TEST_CASE("trace: read and write errors are errors") {
  CHECK(error_of([] { memo::read_problem_file(std::filesystem::temp_directory_path()); })
            .find("is a directory, not a trace file") != std::string::npos);
  if (std::filesystem::exists("/dev/full")) {
    CHECK(error_of([] { memo::write_text_file("/dev/full", std::string(100000, 'x')); }) ==
          "/dev/full: write error: No space left on device (100000 bytes not all written)");
  }
  CHECK(error_of([] { memo::write_text_file("/nonexistent/dir/plan.csv", "x"); })
            .find("/nonexistent/dir/plan.csv: cannot open file for writing") == 0);
}

TEST_CASE("trace: stacking layers never wraps an id") {
  // Ids up to 2^63 + 1: a second copy would need 2 * (2^63 + 2) - ..., past 2^64.
  const auto layer = memo::parse_trace(
      "section begin layer 0 forward\nmalloc 9223372036854775809 8\nsection end layer 0 forward\n"
      "section begin layer 0 backward\nfree 9223372036854775809 8\nsection end layer 0 backward\n");
  CHECK(memo::stack_layer_trace(layer, 1).problem.buffers.size() == 1);
  CHECK(error_of([&] { memo::stack_layer_trace(layer, 2); }) ==
        "stack_layer_trace: layer 1's copy of buffer 9223372036854775809 would get the id "
        "9223372036854775809 + 1 * 9223372036854775810 = 18446744073709551619, past 2^64 - 1 (ids "
        "in the layer trace must stay below 2^64 / 2)");
  // Small ids stack without collisions: every id distinct.
  const auto figure4 = memo::read_problem_file(MEMO_SOURCE_DIR "/examples/traces/figure4.trace");
  const auto model = memo::stack_layer_trace(figure4, 50);
  std::vector<std::uint64_t> ids;
  for (const auto& b : model.problem.buffers) ids.push_back(b.id);
  std::sort(ids.begin(), ids.end());
  CHECK(std::adjacent_find(ids.begin(), ids.end()) == ids.end());
  CHECK(ids.size() == 600);
}
