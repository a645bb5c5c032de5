// Tests of memo/schedule/schedule_graph.hpp: validation names the ops of
// every malformed graph.
#include "memo/schedule/schedule_graph.hpp"

#include "memo/schedule/stream_schedule.hpp"

#include <doctest/doctest.h>

#include <string>

#include "memo/backend/host_backend.hpp"
#include "schedule_test_helpers.hpp"

using memo::copy_kind;
using memo::host_backend;
using memo::op_id;
using memo::stream_schedule;
using memo::testing::message_of;
using memo::testing::unit_profile;

TEST_CASE("stream_schedule: a cycle across streams is an error naming its ops") {
  stream_schedule schedule;
  schedule.add_stream("compute");
  schedule.add_stream("copy");
  // first -> second on compute (FIFO); copy waits for second; first waits for
  // copy: first -> second -> copy -> first.
  const op_id first = schedule.add_compute("first", "compute", {.flops = 1.0});
  const op_id second = schedule.add_compute("second", "compute", {.flops = 1.0});
  const op_id copy = schedule.add_copy("copy out", "copy", copy_kind::device_to_host, {.bytes = 8}, {second});
  schedule.add_dependency(first, copy);
  const auto message = message_of([&] { schedule.validate(); });
  CHECK(message.find("cycle") != std::string::npos);
  CHECK(message.find("'first'") != std::string::npos);
  CHECK(message.find("'second'") != std::string::npos);
  CHECK(message.find("'copy out'") != std::string::npos);
  CHECK_THROWS_AS(static_cast<void>(schedule.simulate(unit_profile())), memo::error);
  host_backend backend;
  CHECK_THROWS_AS(static_cast<void>(schedule.execute(backend)), memo::error);
}

TEST_CASE("stream_schedule: a dependency on a later op of the same stream is an error") {
  stream_schedule schedule;
  schedule.add_stream("compute");
  const op_id early = schedule.add_compute("early", "compute", {.flops = 1.0});
  const op_id late = schedule.add_compute("late", "compute", {.flops = 1.0});
  schedule.add_dependency(early, late);
  const auto message = message_of([&] { schedule.validate(); });
  CHECK(message.find("'early'") != std::string::npos);
  CHECK(message.find("'late'") != std::string::npos);
  CHECK(message.find("later on the same stream") != std::string::npos);

  stream_schedule self;
  self.add_stream("s");
  const op_id alone = self.add_compute("alone", "s", {});
  self.add_dependency(alone, alone);
  CHECK(message_of([&] { self.validate(); }).find("'alone' depends on itself") != std::string::npos);
}

TEST_CASE("stream_schedule: unknown streams, duplicate names and bad ids are errors") {
  stream_schedule schedule;
  schedule.add_stream("compute");
  CHECK(message_of([&] { schedule.add_compute("k", "comptue", {}); }).find("'comptue'") !=
        std::string::npos);
  CHECK_THROWS_AS(schedule.add_stream("compute"), memo::error);
  CHECK_THROWS_AS(schedule.add_stream(""), memo::error);
  schedule.add_compute("k", "compute", {});
  CHECK(message_of([&] { schedule.add_marker("k", "compute"); }).find("'k' is used twice") !=
        std::string::npos);
  CHECK_THROWS_AS(schedule.add_marker("m", "compute", {op_id{7}}), memo::error);
  CHECK_THROWS_AS(schedule.add_dependency(op_id{0}, op_id{9}), memo::error);
  CHECK_THROWS_AS(schedule.add_copy("d2d", "compute", copy_kind::device_to_device, {.bytes = 1}),
                  memo::error);
  CHECK_THROWS_AS(schedule.add_compute("negative", "compute", {.flops = -1.0}), memo::error);
  int value = 0;
  CHECK_THROWS_AS(schedule.add_copy("half bound", "compute", copy_kind::host_to_device,
                                    {.bytes = 4, .destination = &value}),
                  memo::error);
  CHECK(schedule.size() == 1);  // failed additions leave nothing behind
}

