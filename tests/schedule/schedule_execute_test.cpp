// Tests of memo/schedule/schedule_execute.hpp on the host backend with a
// throttled copy engine (a missing wait shows as wrong bytes, and
// ThreadSanitizer sees it as a race), and through a recording backend.
#include "memo/schedule/schedule_execute.hpp"

#include "memo/schedule/stream_schedule.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "memo/backend/buffer.hpp"
#include "memo/backend/host_backend.hpp"
#include "schedule_test_helpers.hpp"

using memo::copy_kind;
using memo::host_backend;
using memo::op_id;
using memo::stream_schedule;
using memo::testing::message_of;
using memo::testing::throttled;
using memo::testing::unit_profile;


#include "../support/recording_backend.hpp"

TEST_CASE("stream_schedule: execution on host_backend honours dependencies through throttled copies") {
  // Round trip: prefetch (host->device, throttled) -> compute doubles the
  // values on the device -> offload (device->host, throttled) -> a host-side
  // check on the compute stream waits for the offload. Each consumer reads
  // bytes that a throttled producer on another stream writes; without the
  // event waits it would read them too early (and ThreadSanitizer would
  // report the race).
  constexpr std::size_t count = 16 * 1024;  // elements
  host_backend backend(throttled(64e6));
  memo::buffer<std::uint32_t, memo::host_memory_resource> input(backend.pinned_memory(), count);   // [count]
  memo::buffer<std::uint32_t, memo::host_memory_resource> device(backend.device_memory(), count);  // [count]
  memo::buffer<std::uint32_t, memo::host_memory_resource> output(backend.pinned_memory(), count);  // [count]
  std::iota(input.span().begin(), input.span().end(), 1u);
  std::fill(device.span().begin(), device.span().end(), 0u);
  std::fill(output.span().begin(), output.span().end(), 0u);
  const std::size_t bytes = count * sizeof(std::uint32_t);

  stream_schedule schedule;
  schedule.add_stream("compute");
  schedule.add_stream("offload");
  schedule.add_stream("prefetch");
  // A slow copy ahead of each producer on its stream (the host backend's
  // throttle sleeps after the memcpy), so a consumer that did not wait would
  // run before the producer's bytes exist.
  schedule.add_copy("delay in", "prefetch", copy_kind::host_to_device, {.bytes = 256 * 1024});
  schedule.add_copy("delay out", "offload", copy_kind::device_to_host, {.bytes = 256 * 1024});
  const op_id prefetch = schedule.add_copy("prefetch", "prefetch", copy_kind::host_to_device,
                                           {.bytes = bytes, .destination = device.data(), .source = input.data()});
  std::atomic<std::size_t> doubled_wrong{0};
  const op_id doubling = schedule.add_compute(
      "double", "compute",
      {.flops = 2.0 * count,
       .work = [&](memo::native_stream_ref) {
         std::size_t wrong = 0;
         for (std::size_t i = 0; i < count; ++i) {
           wrong += device.data()[i] != i + 1 ? 1 : 0;  // must see the prefetched values
           device.data()[i] *= 2;
         }
         doubled_wrong = wrong;
       }},
      {prefetch});
  const op_id offload = schedule.add_copy("offload", "offload", copy_kind::device_to_host,
                                          {.bytes = bytes, .destination = output.data(), .source = device.data()},
                                          {doubling});
  std::atomic<std::size_t> offloaded_wrong{count + 1};
  const op_id check = schedule.add_compute("check", "compute",
                                           {.work = [&](memo::native_stream_ref) {
                                             std::size_t wrong = 0;
                                             for (std::size_t i = 0; i < count; ++i) {
                                               wrong += output.data()[i] != 2 * (i + 1) ? 1 : 0;
                                             }
                                             offloaded_wrong = wrong;
                                           }},
                                           {offload});
  const auto executed = schedule.execute(backend);
  CHECK(doubled_wrong == 0);
  CHECK(offloaded_wrong == 0);
  // The measured timeline shows every consumer starting after its producer ended.
  CHECK(executed.op(doubling).start_seconds >= executed.op(prefetch).end_seconds);
  CHECK(executed.op(offload).start_seconds >= executed.op(doubling).end_seconds);
  CHECK(executed.op(check).start_seconds >= executed.op(offload).end_seconds);
  CHECK(executed.origin() == "executed on host");
  CHECK(executed.stall_seconds("compute") > 0.0);  // "double" waited for the throttled prefetch
}

TEST_CASE("stream_schedule: a dependency on an op inserted later is still waited for") {
  // The consumer is inserted before its producer and tied to it afterwards;
  // execution must record the producer's event before the consumer's stream
  // waits on it (a wait on a not-yet-recorded event would not wait at all).
  host_backend backend(throttled(64e6));
  memo::buffer<std::uint64_t, memo::host_memory_resource> source(backend.pinned_memory(), 512);  // [512]
  memo::buffer<std::uint64_t, memo::host_memory_resource> target(backend.device_memory(), 512);  // [512]
  std::fill(source.span().begin(), source.span().end(), 0x5eedULL);
  std::fill(target.span().begin(), target.span().end(), 0ULL);
  stream_schedule schedule;
  schedule.add_stream("compute");
  schedule.add_stream("copy");
  std::atomic<std::size_t> seen_wrong{513};
  const op_id consumer = schedule.add_compute("consumer", "compute",
                                              {.work = [&](memo::native_stream_ref) {
                                                seen_wrong = static_cast<std::size_t>(std::count_if(
                                                    target.span().begin(), target.span().end(),
                                                    [](std::uint64_t v) { return v != 0x5eedULL; }));
                                              }});
  schedule.add_copy("delay", "copy", copy_kind::host_to_device, {.bytes = 256 * 1024});
  const op_id producer = schedule.add_copy("producer", "copy", copy_kind::host_to_device,
                                           {.bytes = 512 * sizeof(std::uint64_t),
                                            .destination = target.data(),
                                            .source = source.data()});
  schedule.add_dependency(consumer, producer);
  const auto order = schedule.topological_order();
  CHECK(std::find(order.begin(), order.end(), producer.index) <
        std::find(order.begin(), order.end(), consumer.index));
  const auto executed = schedule.execute(backend);
  CHECK(seen_wrong == 0);
  CHECK(executed.op(consumer).start_seconds >= executed.op(producer).end_seconds);
}

TEST_CASE("stream_schedule: an exception from a callable surfaces from execute") {
  stream_schedule schedule;
  schedule.add_stream("compute");
  schedule.add_stream("copy");
  const op_id bad = schedule.add_compute("bad", "compute", {.work = [](memo::native_stream_ref) {
                                           throw std::runtime_error("kernel failed");
                                         }});
  std::atomic<bool> later_ran{false};
  schedule.add_compute("after bad", "copy", {.work = [&](memo::native_stream_ref) { later_ran = true; }}, {bad});
  host_backend backend;
  CHECK_THROWS_WITH_AS(static_cast<void>(schedule.execute(backend)), "kernel failed", std::runtime_error);
  CHECK_FALSE(later_ran);  // its stream inherited the failure through the event
}

TEST_CASE("stream_schedule: callables receive the backend's native stream through native_stream_ref") {
  stream_schedule schedule;
  schedule.add_stream("compute");
  schedule.add_stream("side");
  std::string seen;
  std::string wrong_backend;
  schedule.add_compute("probe", "side", {.work = [&](memo::native_stream_ref ref) {
                                           seen = std::string(ref.get<host_backend>().name);
                                         }});
  host_backend backend;
  static_cast<void>(schedule.execute(backend));
  CHECK(seen == "side");

  const int not_a_host_stream = 3;
  const memo::native_stream_ref ref(not_a_host_stream, "other");
  CHECK(message_of([&] { static_cast<void>(ref.get<host_backend>()); }).find("'other'") !=
        std::string::npos);
}

TEST_CASE("stream_schedule: copies without pointers are an error when scratch is disabled") {
  stream_schedule schedule;
  schedule.add_stream("copy");
  schedule.add_copy("unbound", "copy", copy_kind::host_to_device, {.bytes = 64});
  host_backend backend;
  CHECK(message_of([&] {
          static_cast<void>(schedule.execute(backend, {.scratch_for_unbound_copies = false}));
        }).find("'unbound'") != std::string::npos);
}

TEST_CASE("stream_schedule: a copy the backend rejects fails execute after earlier work drained") {
  // The first copy (into executor scratch) is still running when the second,
  // whose source and destination overlap, is rejected at enqueue time; the
  // error must surface without freeing the scratch under the running copy
  // (ThreadSanitizer and AddressSanitizer builds would report it).
  host_backend backend(throttled(64e6));
  std::vector<unsigned char> bytes(1024);
  stream_schedule schedule;
  schedule.add_stream("copy");
  schedule.add_copy("slow", "copy", copy_kind::host_to_device, {.bytes = 256 * 1024});
  schedule.add_copy("overlapping", "copy", copy_kind::host_to_device,
                    {.bytes = 512, .destination = bytes.data() + 256, .source = bytes.data()});
  CHECK_THROWS_WITH_AS(static_cast<void>(schedule.execute(backend)), doctest::Contains("overlap"),
                       memo::error);
  CHECK(backend.device_memory().current_bytes() == 0);
}

namespace {

// Six layers of forward/offload and backward/prefetch, copies without
// pointers (instance scratch), every compute op counting its runs.
stream_schedule counted_step(std::atomic<int>& ran) {
  stream_schedule schedule;
  schedule.add_stream("compute");
  schedule.add_stream("offload");
  schedule.add_stream("prefetch");
  for (int layer = 0; layer < 6; ++layer) {
    std::vector<op_id> after;
    if (layer >= 2) after.push_back(schedule.find("offload " + std::to_string(layer - 2)));
    const op_id forward = schedule.add_compute("forward " + std::to_string(layer), "compute",
                                               {.flops = 1000.0, .work = [&ran](memo::native_stream_ref) { ++ran; }},
                                               after);
    schedule.add_copy("offload " + std::to_string(layer), "offload", copy_kind::device_to_host, {.bytes = 4096},
                      {forward});
  }
  for (int layer = 5; layer >= 0; --layer) {
    const op_id prefetch = schedule.add_copy("prefetch " + std::to_string(layer), "prefetch",
                                             copy_kind::host_to_device, {.bytes = 2048},
                                             {schedule.find("offload " + std::to_string(layer))});
    schedule.add_compute("backward " + std::to_string(layer), "compute",
                         {.flops = 2000.0, .work = [&ran](memo::native_stream_ref) { ++ran; }}, {prefetch});
  }
  return schedule;
}

}  // namespace

TEST_CASE("stream_schedule: an instance launched every step creates no stream, event or allocation") {
  host_backend inner(throttled(64e6));
  memo::testing::recording_backend<host_backend> backend(inner);
  std::atomic<int> ran{0};
  const stream_schedule schedule = counted_step(ran);
  auto instance = schedule.instantiate(backend);
  // Instantiation: three streams; an origin, a start and an end per op and a
  // tail per stream; one device and one pinned scratch block.
  CHECK(backend.streams_made() == 3);
  CHECK(backend.events_made() == 1 + 2 * schedule.size() + 3);
  CHECK(backend.allocations() == 2);
  CHECK(inner.device_memory().current_bytes() == 4096 + 2048);  // one part per copy stream

  backend.clear_calls();
  instance.launch();
  instance.synchronize();
  const auto first = backend.calls();
  backend.clear_calls();
  constexpr int more = 4;
  for (int i = 0; i < more; ++i) instance.launch();  // queued back to back
  instance.synchronize();
  CHECK(ran == 12 * (1 + more));
  CHECK(instance.launches() == 1 + more);
  CHECK(backend.streams_made() == 3);
  CHECK(backend.events_made() == 1 + 2 * schedule.size() + 3);
  CHECK(backend.allocations() == 2);
  // Each later launch issues the first one's calls plus a join of the
  // compute stream on the other two streams' tails.
  CHECK(backend.calls().size() == more * (first.size() + 2));
  const auto waits = std::count_if(first.begin(), first.end(), [](const memo::testing::recorded_call& call) {
    return call.kind == memo::testing::call_kind::wait;
  });
  // Origin x 2; forward 2..5 on offloads; offload i on forward i; prefetch
  // i on offload i; backward i on prefetch i.
  CHECK(waits == 2 + 4 + 6 + 6 + 6);
  // The calls of one launch, replayed into ops (each copy or enqueue named
  // by the op whose start event its stream recorded last: event 1 + 2 i is
  // op i's start), give the schedule's op order per stream and its
  // happens-before relation.
  std::vector<std::string> names(first.size());
  std::map<std::size_t, std::size_t> last_start;  // stream -> op
  for (std::size_t c = 0; c < first.size(); ++c) {
    const auto& call = first[c];
    if (call.kind == memo::testing::call_kind::record && call.event % 2 == 1 && call.event < 1 + 2 * schedule.size()) {
      last_start[call.stream] = (call.event - 1) / 2;
    }
    if (call.kind == memo::testing::call_kind::copy || call.kind == memo::testing::call_kind::enqueue) {
      names[c] = schedule.ops()[last_start.at(call.stream)].name;
    }
  }
  const auto replayed = memo::testing::replay(first, 3, [&](const memo::testing::recorded_call& call) {
    return names[static_cast<std::size_t>(&call - first.data())];
  });
  const auto expected = memo::testing::ops_of(schedule);
  CHECK(replayed.order == expected.order);
  CHECK(memo::testing::happens_before(replayed) == memo::testing::happens_before(expected));
  const auto executed = instance.last_timeline();
  const auto difference = executed.op_order_difference(schedule.simulate(unit_profile()));
  CHECK_MESSAGE(difference.empty(), difference);
}

TEST_CASE("stream_schedule: copy scratch carved from regions the caller owns") {
  host_backend backend(throttled(64e6));
  std::atomic<int> ran{0};
  const stream_schedule schedule = counted_step(ran);
  // (offload, device_to_host) 4096 bytes, then (prefetch, host_to_device)
  // 2048 bytes at offset 4096, on each side.
  const auto bytes = memo::schedule_instance<host_backend>::required_scratch(schedule);
  CHECK(bytes.device == 4096 + 2048);
  CHECK(bytes.pinned == 4096 + 2048);
  memo::buffer<std::byte, memo::host_memory_resource> device(backend.device_memory(), bytes.device);  // [bytes]
  memo::buffer<std::byte, memo::host_memory_resource> pinned(backend.pinned_memory(), bytes.pinned);  // [bytes]
  const memo::memory_region device_region{device.data(), device.size()};
  const memo::memory_region pinned_region{pinned.data(), pinned.size()};
  {
    auto instance = schedule.instantiate(backend, device_region, pinned_region);
    instance.launch();
    instance.launch();
    instance.synchronize();
    CHECK(ran == 24);
    CHECK(backend.device_memory().peak_bytes() == bytes.device);  // the caller's region only
    CHECK(backend.pinned_memory().peak_bytes() == bytes.pinned);
  }
  CHECK_THROWS_WITH_AS(static_cast<void>(schedule.instantiate(backend, device_region.subregion(0, bytes.device - 1),
                                                              pinned_region)),
                       doctest::Contains("scratch of stream 'prefetch'"), memo::error);
  // Nothing launched yet: no timeline to read.
  auto idle = schedule.instantiate(backend, device_region, pinned_region);
  CHECK_THROWS_WITH_AS(static_cast<void>(idle.last_timeline()), doctest::Contains("nothing was launched"),
                       memo::error);
}

