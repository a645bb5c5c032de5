// Tests of memo/schedule/stream_schedule.hpp: one schedule both executed and
// simulated.
#include "memo/schedule/stream_schedule.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

#include "memo/backend/host_backend.hpp"
#include "schedule_test_helpers.hpp"

using memo::copy_kind;
using memo::host_backend;
using memo::op_id;
using memo::stream_schedule;
using memo::testing::throttled;
using memo::testing::unit_profile;

TEST_CASE("stream_schedule: executed and simulated timelines have the same op order per stream") {
  stream_schedule schedule;
  schedule.add_stream("compute");
  schedule.add_stream("offload");
  schedule.add_stream("prefetch");
  std::atomic<int> ran{0};
  std::vector<op_id> forward;
  for (int layer = 0; layer < 6; ++layer) {
    const std::string name = std::to_string(layer);
    std::vector<op_id> after;
    if (layer >= 2) after.push_back(schedule.find("offload " + std::to_string(layer - 2)));
    forward.push_back(schedule.add_compute("forward " + name, "compute",
                                           {.flops = 1000.0, .work = [&](memo::native_stream_ref) { ++ran; }},
                                           after));
    schedule.add_copy("offload " + name, "offload", copy_kind::device_to_host, {.bytes = 4096},
                      {forward.back()});
  }
  for (int layer = 5; layer >= 0; --layer) {
    const op_id prefetch = schedule.add_copy("prefetch " + std::to_string(layer), "prefetch",
                                             copy_kind::host_to_device, {.bytes = 4096},
                                             {schedule.find("offload " + std::to_string(layer))});
    schedule.add_compute("backward " + std::to_string(layer), "compute",
                         {.flops = 2000.0, .work = [&](memo::native_stream_ref) { ++ran; }}, {prefetch});
  }
  host_backend backend(throttled(4e6));
  const auto executed = schedule.execute(backend);
  const auto simulated = schedule.simulate(unit_profile());
  CHECK(ran == 12);
  const auto difference = executed.op_order_difference(simulated);
  CHECK_MESSAGE(difference.empty(), difference);
  CHECK(executed.same_op_order(simulated));
  // Executor-owned scratch served the pointer-less copies and was released.
  CHECK(backend.device_memory().peak_bytes() == 2 * 4096);  // one per copy stream
  CHECK(backend.device_memory().current_bytes() == 0);
  CHECK(backend.pinned_memory().current_bytes() == 0);

  // The comparison does detect a different order.
  auto ops = simulated.ops();
  std::swap(ops[0].start_seconds, ops[2].start_seconds);  // forward 0 <-> forward 1
  std::swap(ops[0].end_seconds, ops[2].end_seconds);
  const memo::timeline reordered("reordered", simulated.streams(), ops);
  const auto found = reordered.op_order_difference(simulated);
  CHECK(found.find("'forward 1'") != std::string::npos);
  CHECK(found.find("stream 'compute'") != std::string::npos);
}

