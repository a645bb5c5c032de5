#include "memo/backend/memory_resource.hpp"

#include "memo/backend/concepts.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <vector>

// One case asks the allocator for 2^62 bytes: under a sanitizer that must
// fail as bad_alloc, as it does without one, instead of stopping the test.
// The sanitizer runtimes read these before their *SAN_OPTIONS variables.
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }
extern "C" const char* __tsan_default_options() { return "allocator_may_return_null=1"; }

TEST_CASE("memory_resource: peak equals the maximum of a replayed allocation sequence") {
  memo::host_memory_resource resource("test");
  std::mt19937 rng(11);
  std::vector<std::pair<void*, std::size_t>> live;
  std::size_t current = 0, peak = 0;  // independent bookkeeping
  for (int step = 0; step < 2000; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      const std::size_t bytes = 1 + rng() % 5000;
      live.emplace_back(resource.allocate(bytes), bytes);
      current += bytes;
      peak = std::max(peak, current);
    } else {
      const std::size_t k = rng() % live.size();
      resource.deallocate(live[k].first, live[k].second);
      current -= live[k].second;
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    }
    CHECK(resource.current_bytes() == current);
  }
  CHECK(resource.peak_bytes() == peak);
  resource.reset_peak();
  CHECK(resource.peak_bytes() == current);
  for (auto& [pointer, bytes] : live) resource.deallocate(pointer, bytes);
}

TEST_CASE("memory_resource: misuse is an error, not heap corruption") {
  memo::host_memory_resource resource("device");
  void* p = resource.allocate(128);
  CHECK_THROWS_WITH_AS(resource.deallocate(p, 64), doctest::Contains("from an allocation of 128"),
                       memo::error);
  int local = 0;
  CHECK_THROWS_WITH_AS(resource.deallocate(&local, 4), doctest::Contains("did not allocate"),
                       memo::error);
  resource.deallocate(p, 128);
  CHECK_THROWS_AS(resource.deallocate(p, 128), memo::error);
  CHECK_THROWS_WITH_AS((void)resource.allocate(8, 3), doctest::Contains("power of two"),
                       memo::error);
}

TEST_CASE("memory_resource: concurrent allocation keeps the books straight") {
  memo::host_memory_resource resource("shared");
  auto worker = [&] {
    for (int i = 0; i < 500; ++i) {
      void* p = resource.allocate(1000);
      resource.deallocate(p, 1000);
    }
  };
  std::thread a(worker), b(worker);
  a.join();
  b.join();
  CHECK(resource.current_bytes() == 0);
  CHECK(resource.peak_bytes() >= 1000);
  CHECK(resource.peak_bytes() <= 2000);
}

TEST_CASE("memory_resource: a request near SIZE_MAX is the exhausted error, not bad_alloc") {
  const std::size_t capacity = 4096;
  memo::host_memory_resource resource("device", capacity);
  void* p = resource.allocate(1000);
  const std::size_t huge = std::numeric_limits<std::size_t>::max() - 10;
  // `current + huge` wraps to 989 < 4096, which a naive check would let through.
  const std::string expected =
      "device exhausted: allocating " + std::to_string(huge) + " bytes with 1000 of 4096 bytes in use";
  CHECK_THROWS_WITH_AS((void)resource.allocate(huge), doctest::Contains(expected.c_str()),
                       memo::error);
  CHECK_THROWS_WITH_AS((void)resource.allocate(3097),
                       doctest::Contains("allocating 3097 bytes with 1000 of 4096"), memo::error);
  CHECK(resource.current_bytes() == 1000);
  void* q = resource.allocate(3096);  // exactly full
  CHECK(resource.current_bytes() == capacity);
  resource.deallocate(q, 3096);
  resource.deallocate(p, 1000);
  CHECK(resource.current_bytes() == 0);
  // The failed requests never reached the allocator and are not counted.
  CHECK(resource.allocation_count() == 2);
  CHECK(resource.deallocation_count() == 2);
}

TEST_CASE("memory_resource: a request the host cannot satisfy is an error naming the resource") {
  // No capacity: the request reaches the allocator, which cannot find 2^62
  // bytes (a 64-bit address space has at most 2^48 or 2^57 of them).
  memo::host_memory_resource resource("device");
  void* p = resource.allocate(100);
  const std::size_t huge = std::size_t{1} << 62;
  const std::string expected = "device: the host could not provide " + std::to_string(huge) +
                               " bytes (100 bytes in use before the request)";
  CHECK_THROWS_WITH_AS((void)resource.allocate(huge), doctest::Contains(expected.c_str()), memo::error);
  CHECK(resource.current_bytes() == 100);
  CHECK(resource.peak_bytes() == 100);
  resource.deallocate(p, 100);
}

TEST_CASE("memory_resource: without a capacity an overflowing byte count is an error") {
  memo::memory_accounting accounting("books");
  accounting.add(100);
  CHECK_THROWS_WITH_AS(accounting.add(std::numeric_limits<std::size_t>::max() - 10),
                       doctest::Contains("overflows the byte count"), memo::error);
  CHECK(accounting.current_bytes() == 100);
}

TEST_CASE("memory_resource: counts allocate and deallocate calls") {
  memo::host_memory_resource resource("device");
  std::mt19937 rng(5);
  std::vector<std::pair<void*, std::size_t>> live;
  std::uint64_t allocations = 0, deallocations = 0;  // independent tally
  for (int step = 0; step < 500; ++step) {
    if (live.empty() || rng() % 2 == 0) {
      const std::size_t bytes = rng() % 300;  // zero-byte requests count too
      live.emplace_back(resource.allocate(bytes), bytes);
      ++allocations;
    } else {
      resource.deallocate(live.back().first, live.back().second);
      live.pop_back();
      ++deallocations;
    }
    REQUIRE(resource.allocation_count() == allocations);
    REQUIRE(resource.deallocation_count() == deallocations);
  }
  resource.deallocate(nullptr, 0);  // a no-op, not a deallocation
  CHECK(resource.deallocation_count() == deallocations);
  for (auto& [pointer, bytes] : live) resource.deallocate(pointer, bytes);
  CHECK(resource.deallocation_count() == allocations);
  // Misuse is neither an allocation nor a deallocation.
  CHECK_THROWS_AS((void)resource.allocate(8, 3), memo::error);
  int local = 0;
  CHECK_THROWS_AS(resource.deallocate(&local, 4), memo::error);
  CHECK(resource.allocation_count() == allocations);
  CHECK(resource.deallocation_count() == allocations);
}

TEST_CASE("memory_resource: a failed allocation leaves the books as they were") {
  memo::memory_accounting accounting("books", 100);
  CHECK_THROWS_AS((void)accounting.charge(40, []() -> void* { throw std::bad_alloc(); }),
                  std::bad_alloc);
  CHECK(accounting.current_bytes() == 0);
  CHECK(accounting.peak_bytes() == 0);
  CHECK(accounting.allocation_count() == 0);
  CHECK(accounting.deallocation_count() == 0);
  int slot = 0;
  CHECK(accounting.charge(40, [&]() -> void* { return &slot; }) == &slot);
  CHECK(accounting.allocation_count() == 1);
  CHECK(accounting.peak_bytes() == 40);
}

TEST_CASE("memory_resource: satisfies MemoryResource") {
  static_assert(memo::MemoryResource<memo::host_memory_resource>);
  static_assert(memo::host_memory_resource::host_accessible);
}

TEST_CASE("memory_resource: two threads freeing one pointer: one succeeds, the other is refused") {
  // The check and the removal are one step: both cannot pass the check and
  // free the block twice (AddressSanitizer reports a double free otherwise).
  memo::host_memory_resource resource("device");
  for (int round = 0; round < 200; ++round) {
    void* p = resource.allocate(64);
    std::atomic<int> refused{0};
    auto free_it = [&] {
      try {
        resource.deallocate(p, 64);
      } catch (const memo::error&) {
        ++refused;
      }
    };
    std::thread first(free_it), second(free_it);
    first.join();
    second.join();
    CHECK(refused == 1);
  }
  CHECK(resource.current_bytes() == 0);
  CHECK(resource.deallocation_count() == 200);
}
