#include "memo/plan/planned_arena.hpp"

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "memo/backend/memory_resource.hpp"
#include "memo/core/memory_region.hpp"
#include "memo/plan/greedy.hpp"
#include "memo/plan/trace.hpp"

namespace {

// Three buffers worked by hand: 0 and 1 live together, 2 reuses 0's bytes.
//   t: 0 malloc 0 (96 B)   1 malloc 1 (200 B)   2 free 0   3 malloc 2 (64 B)
//      4 free 1            5 free 2
// Plan: 0 at 0, 1 at 256, 2 at 0; peak 456.
memo::memory_trace hand_trace() {
  return memo::parse_trace("malloc 0 96\nmalloc 1 200\nfree 0 96\nmalloc 2 64\nfree 1 200\nfree 2 64\n");
}
const memo::dsa_plan hand_plan{{0, 256, 0}, 456};

}  // namespace

TEST_CASE("planned_arena: one device allocation of the peak, views at the planned offsets") {
  memo::host_memory_resource device("device");
  const auto trace = hand_trace();
  {
    memo::planned_arena arena(device, trace, hand_plan);
    CHECK(device.allocation_count() == 1);
    CHECK(device.current_bytes() == 456);
    CHECK(arena.peak_bytes() == 456);
    CHECK(arena.buffer_count() == 3);
    std::byte* base = arena.memory().data;
    CHECK(memo::is_aligned(base, memo::default_alignment_bytes));

    const auto a = arena.view<float>(0, {4, 6});  // [4, 6] = 96 bytes
    CHECK(reinterpret_cast<std::byte*>(a.data()) == base);
    CHECK(a.extent(0) == 4);
    CHECK(a.stride(0) == 6);
    const auto b = arena.view<double>(1, {25});  // [25] = 200 bytes
    CHECK(reinterpret_cast<std::byte*>(b.data()) == base + 256);
    const auto c = arena.view<std::int32_t>(2, {2, 2, 4});  // [2, 2, 4] = 64 bytes
    CHECK(reinterpret_cast<std::byte*>(c.data()) == base);

    const auto r = arena.region(1);
    CHECK(r.data == base + 256);
    CHECK(r.bytes == 200);
    CHECK(arena.offset(1) == 256);
    CHECK(arena.size_bytes(2) == 64);
    CHECK(arena.contains(2));
    CHECK_FALSE(arena.contains(3));

    // Writing through one view is seen through the region of the same buffer.
    b(24) = 2.5;
    double last = 0;
    std::memcpy(&last, r.data + 192, sizeof last);
    CHECK(last == 2.5);
  }
  CHECK(device.current_bytes() == 0);
  CHECK(device.deallocation_count() == 1);
}

TEST_CASE("planned_arena: a view that does not fit its buffer is an error naming the numbers") {
  memo::host_memory_resource device("device");
  const auto trace = hand_trace();
  memo::planned_arena arena(device, trace, hand_plan);
  CHECK_THROWS_WITH_AS((void)arena.view<float>(0, {5, 5}),
                       doctest::Contains("a view of buffer 0 as [5, 5] of 4-byte elements needs 100 "
                                         "bytes but the plan gives it 96"),
                       memo::error);
  CHECK_THROWS_WITH_AS((void)arena.view<float>(0, {-1, 4}), doctest::Contains("negative extent"),
                       memo::error);
  CHECK_THROWS_WITH_AS((void)arena.view<float>(0, {std::int64_t{1} << 62, 1 << 3}),
                       doctest::Contains("overflows 64 bits"), memo::error);
  CHECK_THROWS_WITH_AS((void)arena.region(7),
                       doctest::Contains("no buffer with id 7 in the plan (3 buffers)"), memo::error);
  CHECK_NOTHROW((void)arena.view<float>(0, {0, 4}));  // empty views fit anywhere
}

TEST_CASE("planned_arena: alignment of offsets, element types and regions is checked") {
  memo::host_memory_resource device("device");
  // Buffer 1 at offset 4 is legal for a buffer without alignment...
  const auto trace = memo::parse_trace("malloc 0 4\nmalloc 1 16\nfree 0 4\nfree 1 16\n");
  const memo::dsa_plan plan{{0, 4}, 20};
  memo::planned_arena arena(device, trace, plan);
  CHECK_NOTHROW((void)arena.view<float>(1, {4}));
  // ...but not for a double, which needs 8.
  CHECK_THROWS_WITH_AS((void)arena.view<double>(1, {2}),
                       doctest::Contains("buffer 1 at offset 4 is not aligned to 8 bytes"),
                       memo::error);

  // A buffer that asks for 64-byte alignment, placed at 32: the plan is rejected.
  auto aligned = trace;
  aligned.problem.buffers[1].alignment = 64;
  CHECK_THROWS_WITH_AS(memo::planned_arena(device, aligned, memo::dsa_plan{{0, 32}, 48}),
                       doctest::Contains("breaks its alignment 64"), memo::error);
  // A 1024-byte alignment raises the arena's own alignment.
  aligned.problem.buffers[1].alignment = 1024;
  memo::planned_arena big(device, aligned, memo::dsa_plan{{0, 1024}, 1040});
  CHECK(memo::planned_arena::required_alignment(aligned) == 1024);
  CHECK(memo::is_aligned(big.region(1).data, 1024));
}

TEST_CASE("planned_arena: an invalid plan is refused") {
  memo::host_memory_resource device("device");
  const auto trace = hand_trace();
  // Buffers 0 and 1 are live together; placing both at 0 overlaps them.
  CHECK_THROWS_WITH_AS(memo::planned_arena(device, trace, memo::dsa_plan{{0, 0, 256}, 320}),
                       doctest::Contains("overlap in address"), memo::error);
  CHECK_THROWS_WITH_AS(memo::planned_arena(device, trace, memo::dsa_plan{{0, 256}, 456}),
                       doctest::Contains("2 offsets for 3 buffers"), memo::error);
  CHECK(device.allocation_count() == 0);
}

TEST_CASE("planned_arena: built over a region sized in two phases, it allocates nothing") {
  const auto trace = hand_trace();
  const auto plan = memo::greedy_by_size_solver{}.solve(trace.problem).plan;
  // Phase 1: count what a workspace and the arena need together.
  memo::region_carver sizing;
  (void)sizing.take(1000, "workspace");
  (void)memo::planned_arena::take_region(sizing, trace, plan);
  const std::size_t bytes = sizing.required_bytes();
  CHECK(bytes == memo::align_up(1000, memo::default_alignment_bytes) + plan.peak_bytes);

  // Phase 2: one allocation, carved.
  memo::host_memory_resource device("device");
  void* block = device.allocate(bytes);
  {
    memo::region_carver carver({static_cast<std::byte*>(block), bytes}, "step memory");
    const auto workspace = carver.take(1000, "workspace");
    const auto arena_bytes = memo::planned_arena::take_region(carver, trace, plan);
    memo::planned_arena arena(arena_bytes, trace, plan);
    CHECK(arena.memory().data == arena_bytes.data);
    CHECK(arena.region(1).data == arena_bytes.data + arena.offset(1));
    CHECK(arena.memory().data >= workspace.data + workspace.bytes);
    CHECK_FALSE(arena.poisoning());  // a region of unknown kind cannot be filled
    CHECK(device.allocation_count() == 1);
  }
  CHECK(device.deallocation_count() == 0);  // the arena did not own the region
  CHECK(device.current_bytes() == bytes);
  device.deallocate(block, bytes);

  std::vector<std::byte> small(plan.peak_bytes - 1);
  const std::string message = "the plan needs " + std::to_string(plan.peak_bytes) +
                              " bytes but the region holds " + std::to_string(small.size());
  CHECK_THROWS_WITH_AS(
      memo::planned_arena(memo::memory_region{small.data(), small.size()}, trace, plan),
      doctest::Contains(message.c_str()), memo::error);
}

TEST_CASE("planned_arena: a region must be aligned, poisoning needs a way to fill it") {
  const auto trace = hand_trace();
  auto storage = std::make_unique<std::byte[]>(2 * hand_plan.peak_bytes + 512);
  std::byte* aligned = storage.get() + (memo::default_alignment_bytes -
                                        reinterpret_cast<std::uintptr_t>(storage.get()) %
                                            memo::default_alignment_bytes);
  CHECK_THROWS_WITH_AS(memo::planned_arena({aligned + 8, hand_plan.peak_bytes}, trace, hand_plan),
                       doctest::Contains("not aligned to 256 bytes"), memo::error);
  memo::arena_options poison;
  poison.poison = true;
  CHECK_THROWS_WITH_AS(memo::planned_arena({aligned, hand_plan.peak_bytes}, trace, hand_plan, poison),
                       doctest::Contains("poisoning needs host-accessible memory"), memo::error);
  // A fill function makes it possible; the region constructor takes it as is.
  int fills = 0;
  poison.fill = [&](memo::memory_region, std::byte) { ++fills; };
  memo::planned_arena arena({aligned, hand_plan.peak_bytes}, trace, hand_plan, poison);
  CHECK(arena.poisoning());
  memo::arena_options host;
  host.host_accessible_region = true;
  memo::planned_arena host_arena({aligned, hand_plan.peak_bytes}, trace, hand_plan, host);
  CHECK(host_arena.poisoning() == memo::planned_arena::poison_by_default);
}

TEST_CASE("planned_arena: poisoning is on by default exactly in debug builds") {
#if !defined(NDEBUG) || defined(MEMO_POISON_PLANNED_MEMORY)
  CHECK(memo::planned_arena::poison_by_default);
#else
  CHECK_FALSE(memo::planned_arena::poison_by_default);
#endif
  memo::host_memory_resource device("device");
  memo::planned_arena arena(device, hand_trace(), hand_plan);
  CHECK(arena.poisoning() == memo::planned_arena::poison_by_default);
}

TEST_CASE("planned_arena: moves keep the one allocation, a moved-from arena refuses use") {
  memo::host_memory_resource device("device");
  memo::planned_arena a(device, hand_trace(), hand_plan);
  std::byte* base = a.memory().data;
  memo::planned_arena b = std::move(a);
  CHECK(b.memory().data == base);
  CHECK(device.allocation_count() == 1);
  CHECK_THROWS_WITH_AS((void)a.region(0), doctest::Contains("moved-from arena"),  // NOLINT
                       memo::error);
  b = memo::planned_arena(device, hand_trace(), hand_plan);
  CHECK(device.current_bytes() == 456);  // the first allocation was returned
  CHECK(device.deallocation_count() == 1);
}

TEST_CASE("planned_arena: an empty plan allocates nothing") {
  memo::host_memory_resource device("device");
  const memo::memory_trace empty;
  memo::planned_arena arena(device, empty, memo::dsa_plan{});
  CHECK(arena.peak_bytes() == 0);
  CHECK(device.allocation_count() == 0);
}

TEST_CASE("planned_arena: one that outlives its resource refuses use and returns nothing") {
  auto device = std::make_unique<memo::host_memory_resource>("device");
  const auto trace = hand_trace();
  memo::planned_arena arena(*device, trace, hand_plan);
  CHECK(arena.region(1).bytes == 200);
  device.reset();  // frees the arena's 456 bytes itself
  CHECK_THROWS_WITH_AS((void)arena.region(1), doctest::Contains("after the memory resource"), memo::error);
  CHECK_THROWS_AS((void)arena.view<float>(0, {4, 6}), memo::error);
  // Its destruction at the end of the test returns nothing to the resource
  // that is gone (AddressSanitizer reports a use after free otherwise).
}
