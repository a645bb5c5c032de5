// tests/support/gate.hpp
//
// A gate a task waits at until the test thread opens it, so a test can
// enqueue everything before a stream starts on it. Opened once; `pass()`
// returns at once after that, on any thread.
#pragma once

#include <future>

namespace memo_test {

struct gate {
  std::promise<void> promise;
  std::shared_future<void> future = promise.get_future().share();
  void open() { promise.set_value(); }
  void pass() const { future.wait(); }
};

}  // namespace memo_test
