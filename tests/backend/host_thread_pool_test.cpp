#include "memo/backend/host_thread_pool.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <thread>
#include <vector>

using memo::detail::host_thread_pool;

TEST_CASE("host_thread_pool: every piece runs exactly once") {
  host_thread_pool pool(3);
  CHECK(pool.concurrency() == 3);
  for (std::int64_t count : {0, 1, 2, 7, 1000}) {
    std::vector<std::atomic<int>> runs(static_cast<std::size_t>(count));
    pool.run(count, [&](std::int64_t i) { ++runs[static_cast<std::size_t>(i)]; });
    int wrong = 0;
    for (auto& r : runs) wrong += r.load() != 1;
    CHECK(wrong == 0);
  }
}

TEST_CASE("host_thread_pool: jobs from several threads and nested jobs all finish") {
  host_thread_pool pool(2);
  std::atomic<std::int64_t> sum{0};
  std::vector<std::thread> submitters;
  for (int t = 0; t < 3; ++t) {
    submitters.emplace_back([&] {
      pool.run(50, [&](std::int64_t i) {
        pool.run(4, [&](std::int64_t j) { sum += i * 4 + j; });  // a piece submitting a job
      });
    });
  }
  for (auto& s : submitters) s.join();
  CHECK(sum == 3 * (200 * 199 / 2));
}

TEST_CASE("host_thread_pool: the first exception of a job reaches the submitter") {
  host_thread_pool pool(2);
  std::atomic<int> ran{0};
  CHECK_THROWS_WITH_AS(pool.run(100,
                                [&](std::int64_t i) {
                                  ++ran;
                                  if (i == 42) throw std::runtime_error("piece 42 failed");
                                }),
                       "piece 42 failed", std::runtime_error);
  CHECK(ran == 100);  // the other pieces still ran: the job ends only when all have
  CHECK_NOTHROW(pool.run(10, [](std::int64_t) {}));
}

TEST_CASE("host_thread_pool: pieces see the submitting stream's tag") {
  host_thread_pool pool(2);
  int marker = 0;
  memo::detail::running_stream_tag = &marker;
  std::atomic<int> wrong{0};
  pool.run(64, [&](std::int64_t) { wrong += memo::detail::running_stream_tag != &marker; });
  memo::detail::running_stream_tag = nullptr;
  CHECK(wrong == 0);
}
