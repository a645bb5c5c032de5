// Tests of memo/swap/rounding_buffers.hpp: adversarial acquire/release
// orders, and that a new holder's work really waits for the previous
// holder's last use (checked with a gate that keeps that use from ending).
#include "memo/swap/rounding_buffers.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <optional>
#include <thread>

#include "memo/backend/host_backend.hpp"
#include "../support/gate.hpp"

namespace {

using memo::host_backend;
using memo::skeletal_policy;
using buffers_type = memo::rounding_buffers<host_backend>;

memo::skeletal_layout layout() {
  return memo::skeletal_layout({
      {"input", 16, 8, skeletal_policy::offload_whole},      // 128 bytes
      {"mlp", 16, 20, skeletal_policy::offload_fraction},   // 320 bytes
      {"norm", 16, 4, skeletal_policy::recompute},          // 64 bytes
  });
}

using memo_test::gate;

}  // namespace

TEST_CASE("rounding_buffers: slices, sizes and the shared region") {
  host_backend backend;
  buffers_type buffers(backend, memo::offload_plan(layout(), 0.5), 2);
  // input at 0, mlp at 256 (aligned): 576 bytes per buffer; norm shared.
  CHECK(buffers.buffer_bytes() == 256 + 320);
  CHECK(buffers.shared_bytes() == 64);
  CHECK(buffers.planned_device_bytes() == 2 * 576 + 64);
  CHECK(backend.device_memory().current_bytes() == buffers.planned_device_bytes());

  auto stream = backend.make_stream("compute");
  auto first = buffers.acquire(0, stream);
  auto second = buffers.acquire(1, stream);
  CHECK(first.buffer_index() == 0);
  CHECK(second.buffer_index() == 1);
  CHECK(first["mlp"].data - first["input"].data == 256);
  CHECK(first["mlp"].bytes() == 320);
  CHECK(second["input"].data != first["input"].data);
  CHECK(first["norm"].shared);
  CHECK(first["norm"].data == second["norm"].data);  // one shared region
  CHECK(buffers.shared_slice(2).data == first["norm"].data);
  CHECK_THROWS_AS((void)buffers.shared_slice(0), memo::error);
  buffers.release(std::move(first), stream);
  buffers.release(std::move(second), stream);
  backend.synchronize();

  // alpha = 0: only the layer input is replicated K times.
  buffers_type zero(backend, memo::offload_plan(layout(), 0.0), 3);
  CHECK(zero.buffer_bytes() == 128);
  CHECK(zero.shared_bytes() == 512 + 64);  // mlp at 0, norm at 512
  CHECK(zero.planned_device_bytes() == 3 * 128 + 576);
}

TEST_CASE("rounding_buffers: adversarial acquire and release orders are errors") {
  host_backend backend;
  auto stream = backend.make_stream("s");
  buffers_type buffers(backend, memo::offload_plan(layout(), 1.0), 2);
  buffers_type other(backend, memo::offload_plan(layout(), 1.0), 2);

  auto held = buffers.acquire(4, stream);  // buffer 0
  CHECK(buffers.leased(0));
  CHECK_THROWS_WITH_AS((void)buffers.acquire(4, stream),
                       doctest::Contains("while layer 4 still holds it"), memo::error);
  CHECK_THROWS_WITH_AS((void)buffers.acquire(6, stream),
                       doctest::Contains("acquiring buffer 0 for layer 6"), memo::error);
  CHECK_THROWS_AS((void)buffers.acquire_on_host(2), memo::error);
  CHECK_THROWS_WITH_AS(other.release(std::move(held), stream),
                       doctest::Contains("handed out by other rounding buffers"), memo::error);
  CHECK(buffers.leased(0));  // a refused release changes nothing

  auto moved = std::move(held);
  CHECK(!held.active());
  CHECK_THROWS_WITH_AS(buffers.release(std::move(held), stream),
                       doctest::Contains("already released or moved from"), memo::error);
  CHECK_THROWS_AS((void)held["input"], memo::error);
  buffers.release(std::move(moved), stream);
  CHECK(!buffers.leased(0));
  CHECK_THROWS_AS(buffers.release(std::move(moved), stream), memo::error);

  // A lease dropped without release poisons its buffer, not the others.
  { auto dropped = buffers.acquire(1, stream); }
  CHECK_THROWS_WITH_AS((void)buffers.acquire(3, stream),
                       doctest::Contains("destroyed without release"), memo::error);
  auto fine = buffers.acquire(2, stream);
  buffers.release(std::move(fine), stream);
  // Move-assigning over an active lease drops it too.
  auto a = buffers.acquire(0, stream);
  a = buffers_type::lease{};
  CHECK_THROWS_AS((void)buffers.acquire(0, stream), memo::error);
  backend.synchronize();
}

TEST_CASE("rounding_buffers: the next holder's work waits for the previous last use") {
  host_backend backend;
  auto producer = backend.make_stream("offload");
  auto consumer = backend.make_stream("compute");
  buffers_type buffers(backend, memo::offload_plan(layout(), 1.0), 2);
  std::atomic<int> clock{0};
  int producer_end = -1;
  int consumer_start = -1;
  int other_start = -1;

  gate blocker;
  auto first = buffers.acquire(0, producer);
  const auto slice = first["input"];
  backend.enqueue(producer, [future = blocker.future, slice, &clock, &producer_end] {
    future.wait();
    std::memset(slice.data, 0x5A, slice.bytes());  // last use of layer 0
    producer_end = clock++;
  });
  buffers.release(std::move(first), producer);

  // Layer 2 maps to buffer 0: its work must wait behind the gate.
  auto second = buffers.acquire(2, consumer);
  backend.enqueue(consumer, [&clock, &consumer_start, slice] {
    consumer_start = clock++;
    std::memset(slice.data, 0x11, slice.bytes());
  });
  auto consumed = backend.make_event();
  backend.record(consumed, consumer);

  // Layer 1 maps to buffer 1: unrelated, it must not wait.
  auto independent = backend.make_stream("prefetch");
  auto third = buffers.acquire(1, independent);
  backend.enqueue(independent, [&clock, &other_start] { other_start = clock++; });
  backend.synchronize(independent);  // would hang if it waited on the gate
  CHECK(other_start == 0);

  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(!backend.query(consumed));  // still held back by the gate
  blocker.open();
  backend.synchronize(consumer);
  CHECK(producer_end == 1);
  CHECK(consumer_start == 2);
  buffers.release(std::move(second), consumer);
  buffers.release(std::move(third), independent);

  // acquire_on_host blocks the host instead; the bytes written by the
  // consumer are visible (ThreadSanitizer checks the happens-before).
  auto host_lease = buffers.acquire_on_host(0);
  CHECK(host_lease["input"].data[0] == std::byte{0x11});
  CHECK(host_lease["input"].data[slice.bytes() - 1] == std::byte{0x11});
  buffers.release(std::move(host_lease), consumer);
  backend.synchronize();
}

TEST_CASE("rounding_buffers: built over a region they do not own") {
  host_backend backend;
  const memo::offload_plan plan(layout(), 0.5);
  // Buffer 0 [0, 576), buffer 1 at 768 (aligned) [768, 1344), shared [1536, 1600).
  const std::size_t bytes = buffers_type::required_bytes(plan, 2);
  CHECK(bytes == 1600);
  memo::buffer<std::byte, memo::host_memory_resource> arena(backend.device_memory(), bytes);  // [bytes]
  const memo::memory_region region{arena.data(), arena.size()};
  {
    buffers_type buffers(backend, plan, 2, region);
    CHECK(backend.device_memory().current_bytes() == bytes);  // nothing beyond the arena
    auto stream = backend.make_stream("s");
    auto first = buffers.acquire(0, stream);
    auto second = buffers.acquire(1, stream);
    CHECK(first["input"].data == arena.data());
    CHECK(first["mlp"].data == arena.data() + 256);
    CHECK(second["input"].data == arena.data() + 768);
    CHECK(first["norm"].data == arena.data() + 1536);
    CHECK(second["norm"].data == first["norm"].data);
    buffers.release(std::move(first), stream);
    buffers.release(std::move(second), stream);
    backend.synchronize();
  }
  // One byte short is an error naming the part, before anything is handed out.
  CHECK_THROWS_WITH_AS(buffers_type(backend, plan, 2, region.subregion(0, bytes - 1)),
                       doctest::Contains("shared region"), memo::error);
}

TEST_CASE("rounding_buffers: a lease used after its buffers are destroyed is an error") {
  host_backend backend;
  auto stream = backend.make_stream("s");
  std::optional<buffers_type> buffers;
  buffers.emplace(backend, memo::offload_plan(layout(), 1.0), 2);
  auto lease = buffers->acquire(0, stream);
  CHECK(lease["input"].bytes() == 128);
  backend.synchronize();
  buffers.reset();
  CHECK_THROWS_WITH_AS((void)lease["input"], doctest::Contains("after its rounding buffers were destroyed"),
                       memo::error);
  CHECK_THROWS_AS((void)lease[0], memo::error);
  CHECK(lease.active());  // destroying it afterwards is harmless
}

TEST_CASE("rounding_buffers: one exclusive user at a time") {
  host_backend backend;
  buffers_type buffers(backend, memo::offload_plan(layout(), 1.0), 2);
  {
    auto first = buffers.claim("stage 0");
    CHECK(buffers.claimed());
    CHECK_THROWS_WITH_AS((void)buffers.claim("stage 1"), doctest::Contains("already driven by stage 0; stage 1"),
                         memo::error);
  }
  CHECK(!buffers.claimed());
  auto again = buffers.claim("stage 1");
  CHECK(again.buffers_alive());
}
