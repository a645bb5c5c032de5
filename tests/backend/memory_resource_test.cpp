#include "memo/backend/memory_resource.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <thread>
#include <vector>

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
