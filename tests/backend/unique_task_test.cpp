#include "memo/backend/unique_task.hpp"

#include <doctest/doctest.h>

#include <memory>
#include <utility>

TEST_CASE("unique_task: holds a move-only callable and runs it") {
  int seen = 0;
  auto owned = std::make_unique<int>(7);
  memo::detail::unique_task task([&seen, value = std::move(owned)] { seen = *value; });
  CHECK(static_cast<bool>(task));
  memo::detail::unique_task moved = std::move(task);
  moved();
  CHECK(seen == 7);
  CHECK_FALSE(static_cast<bool>(memo::detail::unique_task{}));
}

TEST_CASE("unique_task: destroying the task destroys what the callable owns") {
  auto counter = std::make_shared<int>(0);
  std::weak_ptr<int> watch = counter;
  {
    memo::detail::unique_task task([kept = std::move(counter)] { ++*kept; });
    task();
    CHECK_FALSE(watch.expired());
  }
  CHECK(watch.expired());
}
