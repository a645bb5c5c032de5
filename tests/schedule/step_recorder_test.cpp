// Tests of memo/schedule/step_recorder.hpp on the host backend: measured
// spans hold the work issued between begin and end (a sleep sets a lower
// bound that cannot be undercut), an op that waited on another stream starts
// after what it waited for, stalls go only to ops that waited, and every
// misuse is an error at the call.
#include "memo/schedule/step_recorder.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "memo/backend/host_backend.hpp"

namespace {

using memo::host_backend;
using memo::op_kind;

void sleep_on(host_backend& backend, host_backend::stream& on, std::chrono::milliseconds how_long) {
  backend.enqueue(on, [how_long](host_backend::native_stream) { std::this_thread::sleep_for(how_long); });
}

}  // namespace

TEST_CASE("step_recorder: spans hold their work, a waiting op starts after what it waited for") {
  host_backend backend;
  auto compute = backend.make_stream("compute");
  auto copy = backend.make_stream("copy");
  auto done = backend.make_event();
  memo::step_recorder<host_backend> recorder(backend, {"compute", "copy"}, 4);
  using namespace std::chrono_literals;
  for (int step = 0; step < 2; ++step) {  // a second step reuses the events
    recorder.start(compute);
    const std::size_t a = recorder.begin("A", 0, op_kind::compute, compute, false);
    sleep_on(backend, compute, 20ms);
    recorder.end(a, compute);
    backend.record(done, compute);
    backend.wait(copy, done);
    const std::size_t c = recorder.begin("C", 1, op_kind::device_to_host, copy, true, 64);
    sleep_on(backend, copy, 10ms);
    recorder.end(c, copy);
    const std::size_t b = recorder.begin("B", 0, op_kind::compute, compute, false);
    sleep_on(backend, compute, 5ms);
    recorder.end(b, compute);
    recorder.finish();
    backend.synchronize(compute);
    backend.synchronize(copy);
    const memo::timeline t = recorder.last_timeline("measured");
    REQUIRE(t.ops().size() == 3);
    const auto& opA = t.ops()[0];
    const auto& opC = t.ops()[1];
    const auto& opB = t.ops()[2];
    CHECK(opA.duration_seconds() >= 0.020);
    CHECK(opC.duration_seconds() >= 0.010);
    CHECK(opB.duration_seconds() >= 0.005);
    CHECK(opC.start_seconds >= opA.end_seconds);  // C waited on A's stream
    CHECK(opB.start_seconds >= opA.end_seconds);  // one stream runs in order
    CHECK(opA.stall_seconds == 0.0);
    CHECK(opB.stall_seconds == 0.0);           // B did not wait on another stream
    CHECK(opC.stall_seconds >= 0.019);         // C's stream idled while A ran
    CHECK(opC.bytes == 64);
    CHECK(t.streams() == std::vector<std::string>{"compute", "copy"});
    CHECK(t.origin() == "measured");
  }
}

TEST_CASE("step_recorder: move_end and move_begin take in work issued after an op ended") {
  host_backend backend;
  auto compute = backend.make_stream("compute");
  memo::step_recorder<host_backend> recorder(backend, {"compute"}, 2);
  using namespace std::chrono_literals;
  recorder.start(compute);
  const std::size_t r = recorder.begin("recompute 0", 0, op_kind::compute, compute, false);
  recorder.end(r, compute);  // nothing yet: the caller issues the rebuild after
  const std::size_t b = recorder.begin("backward 0", 0, op_kind::compute, compute, false);
  sleep_on(backend, compute, 15ms);  // the rebuild
  recorder.move_end(r, compute);
  recorder.move_begin(b, compute);
  sleep_on(backend, compute, 5ms);  // the backward
  recorder.end(b, compute);
  recorder.finish();
  backend.synchronize(compute);
  const memo::timeline t = recorder.last_timeline("m");
  CHECK(t.ops()[0].duration_seconds() >= 0.015);
  CHECK(t.ops()[1].start_seconds >= t.ops()[0].end_seconds);
  CHECK(t.ops()[1].duration_seconds() >= 0.005);
}

TEST_CASE("step_recorder: misuse is an error at the call") {
  host_backend backend;
  auto s = backend.make_stream("s");
  memo::step_recorder<host_backend> recorder(backend, {"compute", "copy"}, 2);
  CHECK_THROWS_WITH(recorder.begin("early", 0, op_kind::compute, s, false), doctest::Contains("'early' begun before start"));
  CHECK_THROWS_WITH((void)recorder.last_timeline("x"), doctest::Contains("no step was recorded to its end"));
  CHECK_THROWS_WITH(recorder.finish(), doctest::Contains("finish without a step in progress"));
  recorder.start(s);
  CHECK_THROWS_WITH(recorder.begin("far", 2, op_kind::compute, s, false), doctest::Contains("names stream 2 of 2"));
  const std::size_t a = recorder.begin("a", 0, op_kind::compute, s, false);
  CHECK_THROWS_WITH(recorder.move_end(a, s), doctest::Contains("'a' has not ended"));
  CHECK_THROWS_WITH(recorder.finish(), doctest::Contains("'a' was begun but not ended"));
  recorder.end(a, s);
  CHECK_THROWS_WITH(recorder.end(a, s), doctest::Contains("'a' ended twice"));
  // An ended op's start cannot pass its end.
  CHECK_THROWS_WITH(recorder.move_begin(a, s), doctest::Contains("cannot move the start of op 'a': it has ended"));
  CHECK_THROWS_WITH(recorder.end(5, s), doctest::Contains("cannot end op 5: 1 begun in this step"));
  (void)recorder.begin("b", 1, op_kind::compute, s, false);
  CHECK_THROWS_WITH(recorder.begin("c", 0, op_kind::compute, s, false),
                    doctest::Contains("'c' is op 3 of a step recorded with room for 2"));
  recorder.end(1, s);
  recorder.finish();
  CHECK_THROWS_WITH(recorder.begin("late", 0, op_kind::compute, s, false), doctest::Contains("after the step finished"));
  // A finished step's marks stay where they are.
  CHECK_THROWS_WITH(recorder.move_end(a, s), doctest::Contains("cannot move the end of op 'a': the step has finished"));
  CHECK_THROWS_WITH(recorder.move_begin(a, s),
                    doctest::Contains("cannot move the start of op 'a': the step has finished"));
  backend.synchronize(s);
  CHECK(recorder.last_timeline("x").ops().size() == 2);
  // A new step forgets the last: nothing to read until it finishes.
  recorder.start(s);
  CHECK_THROWS_WITH((void)recorder.last_timeline("x"), doctest::Contains("no step was recorded to its end"));
  recorder.discard();
  CHECK_THROWS_WITH(recorder.begin("gone", 0, op_kind::compute, s, false), doctest::Contains("before start"));
}
