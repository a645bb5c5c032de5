#include "memo/plan/recording_resource.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "memo/backend/buffer.hpp"
#include "memo/backend/memory_resource.hpp"
#include "memo/plan/trace.hpp"

TEST_CASE("recording_resource: records requests and sections in the form memo-plan reads") {
  memo::host_memory_resource device("device");
  memo::recording_resource recorder(device, "one layer");
  void* x = recorder.allocate(4096);
  recorder.begin_section("layer 0 forward");
  void* a = recorder.allocate(1024);
  void* b = recorder.allocate(512, 1024);
  recorder.deallocate(a, 1024);
  recorder.end_section("layer 0 forward");
  recorder.deallocate(b, 512, 1024);
  CHECK(recorder.request_count() == 5);
  // Forwarded: the upstream resource served every request.
  CHECK(device.current_bytes() == 4096);
  CHECK(device.allocation_count() == 3);
  CHECK(device.deallocation_count() == 2);
  CHECK(recorder.current_bytes() == 4096);
  CHECK(recorder.peak_bytes() == 4096 + 1024 + 512);

  // Worked by hand: ids in allocation order, x never freed (yet).
  CHECK(recorder.text() ==
        "malloc 0 4096\n"
        "section begin layer 0 forward\n"
        "malloc 1 1024\n"
        "malloc 2 512\n"
        "free 1 1024\n"
        "section end layer 0 forward\n"
        "free 2 512\n");
  const auto trace = recorder.trace();
  REQUIRE(trace.problem.buffers.size() == 3);
  CHECK(trace.never_freed == std::vector<std::uint64_t>{0});
  CHECK(trace.end_time == 5);
  const auto& buffers = trace.problem.buffers;
  CHECK(buffers[1].lower == 1);
  CHECK(buffers[1].upper == 3);
  CHECK(buffers[2].lower == 2);
  CHECK(buffers[2].upper == 4);
  // The alignment each request asked for travels with the trace.
  CHECK(buffers[0].alignment == memo::default_alignment_bytes);
  CHECK(buffers[2].alignment == 1024);
  REQUIRE(trace.sections.size() == 1);
  CHECK(trace.sections[0].name == "layer 0 forward");
  CHECK(trace.sections[0].layer == 0);
  CHECK(trace.sections[0].begin == 1);
  CHECK(trace.sections[0].end == 4);

  // The text reads back into the same problem, alignments aside.
  auto reread = memo::parse_trace(recorder.text());
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    reread.problem.buffers[i].alignment = buffers[i].alignment;
  }
  CHECK(reread.problem.buffers == buffers);
  CHECK(reread.sections == trace.sections);

  recorder.deallocate(x, 4096);
  CHECK(recorder.trace().never_freed.empty());
  CHECK(device.current_bytes() == 0);
}

TEST_CASE("recording_resource: misuse is an error before the upstream sees it") {
  memo::host_memory_resource device("device");
  memo::recording_resource recorder(device);
  void* p = recorder.allocate(100);
  CHECK_THROWS_WITH_AS(recorder.deallocate(p, 50),
                       doctest::Contains("free of id 0 says 50 bytes but it was allocated with 100 bytes"),
                       memo::error);
  int local = 0;
  CHECK_THROWS_WITH_AS(recorder.deallocate(&local, 4), doctest::Contains("did not allocate"),
                       memo::error);
  CHECK(device.current_bytes() == 100);  // nothing reached the upstream
  recorder.begin_section("layer 0 forward");
  CHECK_THROWS_WITH_AS(recorder.begin_section("layer 1 forward"),
                       doctest::Contains("sections do not nest"), memo::error);
  CHECK_THROWS_WITH_AS(recorder.end_section("layer 0 backward"),
                       doctest::Contains("does not match the open section 'layer 0 forward'"),
                       memo::error);
  CHECK_THROWS_WITH_AS((void)recorder.trace(), doctest::Contains("is never ended"), memo::error);
  recorder.end_section("layer 0 forward");
  recorder.deallocate(p, 100);
  CHECK(recorder.request_count() == 2);
  CHECK(device.current_bytes() == 0);
}

TEST_CASE("recording_resource: upstream failures are not recorded") {
  memo::host_memory_resource device("device", 1000);
  memo::recording_resource recorder(device);
  void* p = recorder.allocate(600);
  CHECK_THROWS_WITH_AS((void)recorder.allocate(600), doctest::Contains("exhausted"), memo::error);
  CHECK(recorder.request_count() == 1);
  CHECK(recorder.allocation_count() == 1);
  recorder.deallocate(p, 600);
  CHECK(recorder.text() == "malloc 0 600\nfree 0 600\n");
}

TEST_CASE("recording_resource: zero-byte requests are forwarded, not recorded") {
  memo::host_memory_resource device("device");
  memo::recording_resource recorder(device);
  {
    memo::buffer<float, memo::recording_resource<memo::host_memory_resource>> none(recorder, 0);
    memo::buffer<float, memo::recording_resource<memo::host_memory_resource>> some(recorder, 8);
  }
  CHECK(device.allocation_count() == 2);
  CHECK(device.deallocation_count() == 2);
  CHECK(recorder.text() == "malloc 0 32\nfree 0 32\n");
}

TEST_CASE("recording_resource: section markers reach only resources that keep them") {
  memo::host_memory_resource device("device");
  memo::recording_resource recorder(device);
  memo::mark_section_begin(device, "layer 0 forward");  // nothing to mark: a no-op
  memo::mark_section_begin(recorder, "layer 0 forward");
  void* p = recorder.allocate(8);
  recorder.deallocate(p, 8);
  memo::mark_section_end(recorder, "layer 0 forward");
  memo::mark_section_end(device, "layer 0 forward");
  static_assert(!memo::SectionMarking<memo::host_memory_resource>);
  CHECK(recorder.trace().sections.size() == 1);
}

TEST_CASE("recording_resource: concurrent requests are all recorded, each pair in order") {
  memo::host_memory_resource device("device");
  memo::recording_resource recorder(device);
  auto worker = [&](unsigned seed) {
    std::mt19937 rng(seed);
    for (int i = 0; i < 300; ++i) {
      const std::size_t bytes = 1 + rng() % 1000;
      void* p = recorder.allocate(bytes);
      recorder.deallocate(p, bytes);
    }
  };
  std::thread a(worker, 1u), b(worker, 2u);
  a.join();
  b.join();
  const auto trace = recorder.trace();
  CHECK(trace.problem.buffers.size() == 600);
  CHECK(trace.end_time == 1200);
  CHECK(trace.never_freed.empty());
  // Independently: the live bytes never exceeded what two threads hold at once.
  std::uint64_t largest = 0;
  for (const auto& buffer : trace.problem.buffers) largest = std::max(largest, buffer.size_bytes);
  CHECK(memo::lower_bound_bytes(trace.problem) <= 2 * largest);
  CHECK(memo::parse_trace(recorder.text()).problem.buffers.size() == 600);
}

TEST_CASE("recording_resource: an upstream destroyed first is refused, not touched") {
  auto device = std::make_unique<memo::host_memory_resource>("device");
  memo::recording_resource recorder(*device, "short-lived upstream");
  memo::buffer<char, memo::recording_resource<memo::host_memory_resource>> survivor(recorder, 64);
  device.reset();  // frees the 64 bytes itself
  CHECK_THROWS_WITH_AS((void)recorder.allocate(16), doctest::Contains("upstream memory resource was destroyed"),
                       memo::error);
  // The buffer watches the recorder, which is alive, but its memory was the upstream's.
  CHECK_FALSE(survivor.resource_alive());
  CHECK_THROWS_WITH_AS((void)survivor.data(), doctest::Contains("after the memory resource"), memo::error);
  // The recorder is alive, so the buffer returns its bytes to it; the
  // recorder records the free without reaching the upstream that is gone.
  survivor = {};
  CHECK(recorder.current_bytes() == 0);
  CHECK(recorder.text() == "malloc 0 64\nfree 0 64\n");
}

TEST_CASE("recording_resource: allocations still live when it goes are returned to the upstream") {
  memo::host_memory_resource device("device");
  std::optional<memo::buffer<char, memo::recording_resource<memo::host_memory_resource>>> survivor;
  {
    memo::recording_resource recorder(device, "short-lived recorder");
    survivor.emplace(recorder, 4096);
    memo::buffer<char, memo::recording_resource<memo::host_memory_resource>> freed(recorder, 128);
    void* empty = recorder.allocate(0);  // forwarded, not recorded, still returned when the recorder goes
    CHECK(empty != nullptr);
    CHECK(device.current_bytes() == 4096 + 128);
    CHECK(device.allocation_count() == 3);
  }
  CHECK(device.current_bytes() == 0);
  CHECK(device.deallocation_count() == 3);
  CHECK_FALSE(survivor->resource_alive());
  survivor.reset();  // returns nothing: its recorder is gone
  CHECK(device.deallocation_count() == 3);
}
