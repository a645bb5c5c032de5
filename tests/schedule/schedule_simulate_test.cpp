// Tests of memo/schedule/schedule_simulate.hpp against timelines worked out
// by hand.
#include "memo/schedule/schedule_simulate.hpp"

#include "memo/schedule/stream_schedule.hpp"

#include <doctest/doctest.h>

#include <string>

#include "memo/backend/host_backend.hpp"
#include "schedule_test_helpers.hpp"

using memo::collective_kind;
using memo::copy_kind;
using memo::op_id;
using memo::stream_schedule;
using memo::testing::message_of;
using memo::testing::unit_profile;

TEST_CASE("stream_schedule: simulation of a copy-then-compute chain matches the hand timeline") {
  stream_schedule schedule;
  schedule.add_stream("compute");
  schedule.add_stream("copy");
  // A: 2000 FLOPs at 1000 FLOP/s = 2 s            -> [0, 2] on compute
  // C: 1000 bytes device-to-host at 500 B/s = 2 s  -> after A: [2, 4] on copy
  // B: 1 s, next on compute (FIFO after A)         -> [2, 3]
  // D: 3 s on compute, waits for C                 -> [max(3, 4), 7] = [4, 7]
  const op_id a = schedule.add_compute("A", "compute", {.flops = 2000.0});
  const op_id c = schedule.add_copy("C", "copy", copy_kind::device_to_host, {.bytes = 1000}, {a});
  const op_id b = schedule.add_compute("B", "compute", {.flops = 1000.0});
  const op_id d = schedule.add_compute("D", "compute", {.flops = 3000.0}, {c});
  const auto t = schedule.simulate(unit_profile());
  CHECK(t.op(a).start_seconds == 0.0);
  CHECK(t.op(a).end_seconds == doctest::Approx(2.0));
  CHECK(t.op(c).start_seconds == doctest::Approx(2.0));
  CHECK(t.op(c).end_seconds == doctest::Approx(4.0));
  CHECK(t.op(b).start_seconds == doctest::Approx(2.0));
  CHECK(t.op(b).end_seconds == doctest::Approx(3.0));
  CHECK(t.op(d).start_seconds == doctest::Approx(4.0));
  CHECK(t.op(d).end_seconds == doctest::Approx(7.0));
  CHECK(t.makespan_seconds() == doctest::Approx(7.0));
  // Busy: compute 2 + 1 + 3 = 6, copy 2. Both busy only during [2, 3].
  CHECK(t.busy_seconds("compute") == doctest::Approx(6.0));
  CHECK(t.busy_seconds("copy") == doctest::Approx(2.0));
  CHECK(t.overlap_seconds() == doctest::Approx(1.0));
  // Compute stalls 1 s before D (ready at 3, C ends at 4); the copy stream,
  // with C queued from time 0, waits 2 s for A.
  CHECK(t.stall_seconds("compute") == doctest::Approx(1.0));
  CHECK(t.op(d).stall_seconds == doctest::Approx(1.0));
  CHECK(t.stall_seconds("copy") == doctest::Approx(2.0));
}

TEST_CASE("stream_schedule: simulation with collectives, a marker and a prefetch matches the hand timeline") {
  stream_schedule schedule;
  schedule.add_stream("s0");
  schedule.add_stream("s1");
  schedule.add_stream("s2");
  // P: 3000 B host-to-device at 1000 B/s = 3 s          [0, 3] on s2
  // X: 1 s                                               [0, 1] on s0
  // R: all_reduce 1000 B over 4 ranks: 2 * 3/4 * 1000 / 1000 = 1.5 s,
  //    after X                                           [1, 2.5] on s1
  // Y: 2 s after P: start max(1, 3)                      [3, 5] on s0
  // Z: marker after Y: start max(2.5, 5)                 [5, 5] on s1
  // W: all_gather 800 B over 4 ranks: 3/4 * 800 / 1000 = 0.6 s
  //                                                      [5, 5.6] on s1
  // V: 0.5 s after W: start max(5, 5.6)                  [5.6, 6.1] on s0
  const op_id p = schedule.add_copy("P", "s2", copy_kind::host_to_device, {.bytes = 3000});
  const op_id x = schedule.add_compute("X", "s0", {.flops = 1000.0});
  const op_id r = schedule.add_collective(
      "R", "s1", {.kind = collective_kind::all_reduce, .bytes = 1000, .ranks = 4}, {x});
  const op_id y = schedule.add_compute("Y", "s0", {.flops = 2000.0}, {p});
  const op_id z = schedule.add_marker("Z", "s1", {y});
  const op_id w = schedule.add_collective(
      "W", "s1", {.kind = collective_kind::all_gather, .bytes = 800, .ranks = 4});
  const op_id v = schedule.add_compute("V", "s0", {.flops = 500.0}, {w});
  const auto t = schedule.simulate(unit_profile());
  CHECK(t.op(p).end_seconds == doctest::Approx(3.0));
  CHECK(t.op(r).start_seconds == doctest::Approx(1.0));
  CHECK(t.op(r).end_seconds == doctest::Approx(2.5));
  CHECK(t.op(y).start_seconds == doctest::Approx(3.0));
  CHECK(t.op(z).start_seconds == doctest::Approx(5.0));
  CHECK(t.op(z).end_seconds == doctest::Approx(5.0));
  CHECK(t.op(w).end_seconds == doctest::Approx(5.6));
  CHECK(t.op(v).start_seconds == doctest::Approx(5.6));
  CHECK(t.makespan_seconds() == doctest::Approx(6.1));
  // Two or more streams busy: [0, 1] (s0, s2) and [1, 2.5] (s1, s2) = 2.5 s.
  CHECK(t.overlap_seconds() == doctest::Approx(2.5));
  // s0 stalls 2 s before Y and 0.6 s before V; s1 1 s before R and 2.5 s
  // before Z; s2 never.
  CHECK(t.stall_seconds("s0") == doctest::Approx(2.6));
  CHECK(t.stall_seconds("s1") == doctest::Approx(3.5));
  CHECK(t.stall_seconds("s2") == 0.0);
  CHECK(t.busy_seconds("s0") == doctest::Approx(3.5));
  CHECK(t.busy_seconds("s1") == doctest::Approx(2.1));
}

TEST_CASE("stream_schedule: the cost model follows its formulas") {
  const auto profile = unit_profile();
  stream_schedule schedule;
  schedule.add_stream("s");
  const op_id roofline = schedule.add_compute("roofline", "s", {.flops = 1000.0, .bytes_touched = 4000.0});
  const op_id measured = schedule.add_compute("measured", "s", {.flops = 1e9, .duration_seconds = 0.25});
  const op_id all_to_all = schedule.add_collective(
      "a2a", "s", {.kind = collective_kind::all_to_all, .bytes = 2000, .ranks = 8});
  const op_id reduce_scatter = schedule.add_collective(
      "rs", "s", {.kind = collective_kind::reduce_scatter, .bytes = 2000, .ranks = 2});
  const op_id single = schedule.add_collective(
      "one rank", "s", {.kind = collective_kind::all_reduce, .bytes = 2000, .ranks = 1});
  const op_id broadcast = schedule.add_collective(
      "bcast", "s", {.kind = collective_kind::broadcast, .bytes = 2000, .ranks = 4});
  CHECK(schedule.modelled_seconds(roofline, profile) == doctest::Approx(1.0));
  // With 2000 B/s of device memory bandwidth, 4000 bytes take 2 s > 1 s of FLOPs.
  CHECK(schedule.modelled_seconds(roofline, profile, {.device_memory_bytes_per_second = 2000.0}) ==
        doctest::Approx(2.0));
  CHECK(schedule.modelled_seconds(measured, profile) == doctest::Approx(0.25));
  CHECK(schedule.modelled_seconds(all_to_all, profile) == doctest::Approx(7.0 / 8.0 * 2.0));
  CHECK(schedule.modelled_seconds(reduce_scatter, profile) == doctest::Approx(1.0));
  CHECK(schedule.modelled_seconds(reduce_scatter, profile, {.collective_latency_seconds = 0.5}) ==
        doctest::Approx(1.5));
  CHECK(schedule.modelled_seconds(single, profile) == 0.0);
  // 2000 B at 1000 B/s: the whole buffer reaches every rank, not (p-1)/p of it.
  CHECK(schedule.modelled_seconds(broadcast, profile) == doctest::Approx(2.0));

  auto no_links = profile;
  no_links.interconnect_bytes_per_second = 0.0;
  CHECK(message_of([&] { static_cast<void>(schedule.simulate(no_links)); })
            .find("a2a") != std::string::npos);
}

