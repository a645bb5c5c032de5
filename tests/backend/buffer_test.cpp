#include "memo/backend/buffer.hpp"
#include "memo/backend/memory_resource.hpp"

#include <doctest/doctest.h>

#include <utility>

TEST_CASE("buffer: returns its bytes to the resource on every path") {
  memo::host_memory_resource resource("device");
  {
    memo::buffer<float, memo::host_memory_resource> a(resource, 1000);  // [1000]
    CHECK(a.size() == 1000);
    CHECK(a.size_bytes() == 4000);
    CHECK(resource.current_bytes() == 4000);
    auto b = std::move(a);
    CHECK(a.empty());
    CHECK(resource.current_bytes() == 4000);
    a = memo::buffer<float, memo::host_memory_resource>(resource, 10);
    CHECK(resource.current_bytes() == 4040);
    b.span()[999] = 1.5f;
    CHECK(b.data()[999] == 1.5f);
  }
  CHECK(resource.current_bytes() == 0);
  CHECK(resource.peak_bytes() == 4040);
  try {
    memo::buffer<double, memo::host_memory_resource> big(resource, 16);
    throw 1;
  } catch (int) {
  }
  CHECK(resource.current_bytes() == 0);
}

TEST_CASE("buffer: one allocation per buffer, none for a move") {
  memo::host_memory_resource resource("device");
  {
    memo::buffer<int, memo::host_memory_resource> a(resource, 64);  // [64]
    CHECK(resource.allocation_count() == 1);
    auto b = std::move(a);
    memo::buffer<int, memo::host_memory_resource> c;
    c = std::move(b);
    CHECK(resource.allocation_count() == 1);
    CHECK(resource.deallocation_count() == 0);
  }
  CHECK(resource.deallocation_count() == 1);
}
