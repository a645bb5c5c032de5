#include "memo/backend/stream_failure.hpp"

#include <doctest/doctest.h>

#include <new>
#include <stdexcept>

namespace {
template <class Throw>
memo::detail::stream_failure_ptr capture(Throw&& thrower) {
  try {
    thrower();
  } catch (...) {
    return memo::detail::stream_failure::capture_current();
  }
  FAIL("nothing was thrown");
  return nullptr;
}
}  // namespace

TEST_CASE("stream_failure: memo errors keep message, location and status") {
  const int line = __LINE__ + 1;
  auto failure = capture([] { throw memo::error("cudaMemcpyAsync failed", "cuda", 700); });
  try {
    failure->raise();
    FAIL("raise returned");
  } catch (const memo::error& e) {
    CHECK(e.message() == "cudaMemcpyAsync failed");
    CHECK(e.where().line() == static_cast<unsigned>(line));
    CHECK(e.domain() == "cuda");
    REQUIRE(e.status());
    CHECK(*e.status() == 700);
  }
}

TEST_CASE("stream_failure: standard exceptions keep their message, bad_alloc its type") {
  auto logic = capture([] { throw std::logic_error("bad layout"); });
  CHECK_THROWS_WITH_AS(logic->raise(), "bad layout", std::runtime_error);
  auto oom = capture([] { throw std::bad_alloc(); });
  CHECK_THROWS_AS(oom->raise(), std::bad_alloc);
}

TEST_CASE("stream_failure: other exceptions travel as the original object") {
  auto odd = capture([] { throw 42; });
  CHECK_THROWS_AS(odd->raise(), int);
  // Raising twice gives two independent exceptions from one capture.
  auto twice = capture([] { throw memo::error("once"); });
  CHECK_THROWS_AS(twice->raise(), memo::error);
  CHECK_THROWS_AS(twice->raise(), memo::error);
}

TEST_CASE("stream_failure: a sink hands out the first orphaned failure once") {
  memo::detail::stream_failure_sink sink;
  CHECK(sink.take_first() == nullptr);
  sink.add(nullptr);  // nothing to keep
  sink.add(capture([] { throw memo::error("first"); }));
  sink.add(capture([] { throw memo::error("second"); }));
  auto first = sink.take_first();
  REQUIRE(first);
  CHECK_THROWS_WITH_AS(first->raise(), doctest::Contains("first"), memo::error);
  CHECK(sink.take_first() == nullptr);
}
