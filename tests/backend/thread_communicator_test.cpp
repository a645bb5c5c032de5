#include "memo/backend/thread_communicator.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "communicator_conformance.hpp"

namespace {

using memo::host_backend;
using memo::thread_communicator;
using memo_test::rank_report;

host_backend::options small_backend() {
  host_backend::options options;
  options.compute_threads = 1;
  return options;
}

/// Runs `body(comm, backend) -> rank_report` on `ranks` threads, each with
/// its own communicator and backend (a rank's device), and returns every
/// rank's report.
template <class Body>
std::vector<rank_report> run_ranks(int ranks, Body body, thread_communicator::options options = {}) {
  auto comms = thread_communicator::create_group(ranks, options);
  std::vector<rank_report> reports(static_cast<std::size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&reports, &body, r, comm = std::move(comms[static_cast<std::size_t>(r)])]() mutable {
      host_backend backend(small_backend());
      reports[static_cast<std::size_t>(r)] = body(comm, backend);
      reports[static_cast<std::size_t>(r)].rank = r;
    });
  }
  for (auto& thread : threads) thread.join();
  return reports;
}

void require_clean(const std::vector<rank_report>& reports) {
  for (const auto& report : reports) {
    for (const auto& problem : report.problems) FAIL_CHECK(problem);
  }
}

/// What each rank's issued collective failed with ("" = nothing).
std::vector<std::string> failures_of(const std::vector<rank_report>& reports) {
  std::vector<std::string> out;
  for (const auto& report : reports) out.push_back(report.problems.empty() ? "" : report.problems.front());
  return out;
}

thread_communicator::options quick_timeout() {
  thread_communicator::options options;
  options.timeout = std::chrono::milliseconds(300);
  options.name = "errors";
  return options;
}

}  // namespace

TEST_CASE("thread_communicator: conformance on 2, 3 and 4 ranks") {
  for (const int ranks : {2, 3, 4}) {
    CAPTURE(ranks);
    require_clean(run_ranks(ranks, [](thread_communicator& comm, host_backend& backend) {
      return memo_test::run_conformance(comm, backend);
    }));
  }
}

TEST_CASE("thread_communicator: a timeout beyond 2^31 - 1 ms is refused, not overflowed into no wait at all") {
  memo::thread_communicator::options options;
  options.timeout = std::chrono::milliseconds::max();
  CHECK_THROWS_WITH_AS(memo::thread_communicator::create_group(2, options),
                       doctest::Contains("the timeout must be from 1 to 2147483647 ms (about 24.8 days), got "
                                         "9223372036854775807 ms"),
                       memo::error);
  options.timeout = std::chrono::milliseconds(2147483647);
  CHECK(memo::thread_communicator::create_group(2, options).size() == 2);
}

TEST_CASE("thread_communicator: conformance on 1 rank") {
  require_clean(run_ranks(1, [](thread_communicator& comm, host_backend& backend) {
    return memo_test::run_conformance(comm, backend);
  }));
}

namespace {
// Issues an all_reduce of `n` floats and reports what synchronising it threw.
rank_report all_reduce_outcome(thread_communicator& comm, host_backend& backend, std::size_t n) {
  rank_report report;
  std::vector<float> send(n, 1.0f);
  std::vector<float> recv(n, 0.0f);
  auto stream = backend.make_stream("s");
  try {
    comm.all_reduce(backend, stream, std::span<const float>(send), std::span<float>(recv));
    backend.synchronize(stream);
  } catch (const memo::error& e) {
    report.problems.push_back(e.what());
  }
  return report;
}
}  // namespace

TEST_CASE("thread_communicator: ranks that disagree on the size fail on every rank, naming each call") {
  const auto failures = failures_of(run_ranks(
      3,
      [](thread_communicator& comm, host_backend& backend) {
        return all_reduce_outcome(comm, backend, comm.rank() == 1 ? 5 : 4);
      },
      quick_timeout()));
  for (const auto& failure : failures) {
    CHECK(failure.find("different collectives") != std::string::npos);
    CHECK(failure.find("rank 1 all_reduce(float32 x 5)") != std::string::npos);
    CHECK(failure.find("rank 0 all_reduce(float32 x 4)") != std::string::npos);
  }
}

TEST_CASE("thread_communicator: ranks that disagree on the operation fail on every rank") {
  const auto failures = failures_of(run_ranks(
      2,
      [](thread_communicator& comm, host_backend& backend) {
        rank_report report;
        std::vector<float> send(4, 1.0f);
        std::vector<float> recv(8, 0.0f);
        auto stream = backend.make_stream("s");
        try {
          if (comm.rank() == 0) {
            comm.all_gather(backend, stream, std::span<const float>(send), std::span<float>(recv));
          } else {
            comm.reduce_scatter(backend, stream, std::span<const float>(recv), std::span<float>(send));
          }
          backend.synchronize(stream);
        } catch (const memo::error& e) {
          report.problems.push_back(e.what());
        }
        return report;
      },
      quick_timeout()));
  for (const auto& failure : failures) CHECK(failure.find("different collectives") != std::string::npos);
}

TEST_CASE("thread_communicator: ranks that name different broadcast roots fail on every rank, naming each root") {
  const auto failures = failures_of(run_ranks(
      3,
      [](thread_communicator& comm, host_backend& backend) {
        rank_report report;
        std::vector<float> data(4, static_cast<float>(comm.rank()));
        auto stream = backend.make_stream("s");
        try {
          comm.broadcast(backend, stream, std::span<float>(data), comm.rank() == 2 ? 1 : 0);
          backend.synchronize(stream);
        } catch (const memo::error& e) {
          report.problems.push_back(e.what());
        }
        // Nothing was written: every rank still holds its own values.
        for (const float v : data) report.expect(v == static_cast<float>(comm.rank()), "a failed broadcast wrote data");
        return report;
      },
      quick_timeout()));
  for (const auto& failure : failures) {
    CHECK(failure.find("different collectives") != std::string::npos);
    CHECK(failure.find("rank 0 broadcast(float32 x 4, root 0)") != std::string::npos);
    CHECK(failure.find("rank 2 broadcast(float32 x 4, root 1)") != std::string::npos);
  }
}

TEST_CASE("thread_communicator: a broadcast call built without the root check fails every rank, reading nothing") {
  // make() leaves the root unchecked (-1 by default); every rank agreeing
  // on a root outside the group must not read past the ranks' buffers.
  for (const int root : {-1, 3}) {
    CAPTURE(root);
    const auto failures = failures_of(run_ranks(
        3,
        [root](thread_communicator& comm, host_backend& backend) {
          rank_report report;
          std::vector<float> data(4, 1.0f);
          auto call = thread_communicator::make<float>(memo::comm_op::broadcast, data.data(), data.data(), 4);
          call.peer = root;
          auto stream = backend.make_stream("s");
          try {
            backend.enqueue(stream, comm.task(call));
            backend.synchronize(stream);
          } catch (const memo::error& e) {
            report.problems.push_back(e.what());
          }
          return report;
        },
        quick_timeout()));
    for (const auto& failure : failures) {
      CHECK(failure.find("the root is not a rank of [0, 3)") != std::string::npos);
    }
  }
}

TEST_CASE("thread_communicator: a rank that throws fails the others instead of hanging") {
  const auto failures = failures_of(run_ranks(
      3,
      [](thread_communicator& comm, host_backend& backend) {
        if (comm.rank() == 2) {
          // Leaves without joining: its communicator is destroyed with the thread.
          return rank_report{2, {"threw"}};
        }
        return all_reduce_outcome(comm, backend, 3);
      },
      [] {
        auto options = quick_timeout();
        options.timeout = std::chrono::milliseconds(20000);  // failure comes from the departure, not the clock
        return options;
      }()));
  CHECK(failures[0].find("rank 2 left the group") != std::string::npos);
  CHECK(failures[1].find("rank 2 left the group") != std::string::npos);
}

TEST_CASE("thread_communicator: a rank that never joins fails the others after the timeout") {
  auto comms = thread_communicator::create_group(2, quick_timeout());
  std::vector<rank_report> reports(1);
  std::thread waiter([&] {
    host_backend backend(small_backend());
    reports[0] = all_reduce_outcome(comms[0], backend, 2);
  });
  waiter.join();  // rank 1's communicator stays alive but never calls
  REQUIRE(reports[0].problems.size() == 1);
  CHECK(reports[0].problems[0].find("never joined") != std::string::npos);
  CHECK(reports[0].problems[0].find("rank(s) 1") != std::string::npos);
  // The group is broken from now on, for the rank that never joined too.
  host_backend backend(small_backend());
  auto stream = backend.make_stream("late");
  std::vector<float> data(2, 0.0f);
  CHECK_THROWS_AS(comms[1].all_reduce(backend, stream, std::span<const float>(data), std::span<float>(data)),
                  memo::error);
}

TEST_CASE("thread_communicator: a send and recv of different sizes fail both ranks") {
  const auto failures = failures_of(run_ranks(
      2,
      [](thread_communicator& comm, host_backend& backend) {
        rank_report report;
        std::vector<float> data(6, 1.0f);
        auto stream = backend.make_stream("s");
        try {
          if (comm.rank() == 0) {
            comm.send(backend, stream, std::span<const float>(data.data(), 6), 1);
          } else {
            comm.recv(backend, stream, std::span<float>(data.data(), 4), 0);
          }
          backend.synchronize(stream);
        } catch (const memo::error& e) {
          report.problems.push_back(e.what());
        }
        return report;
      },
      quick_timeout()));
  CHECK(failures[1].find("rank 0 sent 6 float32 to rank 1, which receives 4 float32") != std::string::npos);
  CHECK(failures[0].find("rank 0 sent 6 float32") != std::string::npos);
}

TEST_CASE("thread_communicator: creating a group of no ranks is refused") {
  CHECK_THROWS_AS(thread_communicator::create_group(0), memo::error);
}

TEST_CASE("thread_communicator: a communicator outlives the backend it ran on and runs on the next one") {
  require_clean(run_ranks(2, [](thread_communicator& comm, host_backend&) {
    rank_report report;
    report.rank = comm.rank();
    for (int round = 0; round < 2; ++round) {
      host_backend backend(small_backend());  // destroyed after each round; the communicator stays
      auto stream = backend.make_stream("s");
      std::vector<std::int32_t> data(3, comm.rank() + round);
      comm.all_reduce(backend, stream, std::span<const std::int32_t>(data), std::span<std::int32_t>(data));
      backend.synchronize(stream);
      const std::int32_t expected = 0 + 1 + 2 * round;  // ranks 0 and 1, each + round
      report.expect(data[0] == expected && data[2] == expected, "round " + std::to_string(round));
    }
    return report;
  }));
}

TEST_CASE("thread_communicator: gather_host_values with different counts fails on every rank, naming them") {
  auto comms = memo::thread_communicator::create_group(3);
  std::vector<std::string> errors(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      memo::host_backend backend;
      const std::vector<std::uint64_t> mine(r == 1 ? 3 : 2, 7);
      try {
        (void)memo::gather_host_values(backend, comms[static_cast<std::size_t>(r)], std::span<const std::uint64_t>(mine));
      } catch (const memo::error& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) {
    CHECK(e.find("gather_host_values needs as many values from every rank: 2 on ranks 0, 2; 3 on rank 1") !=
          std::string::npos);
  }
}

TEST_CASE("thread_communicator: no rank returns from a collective while another still reads its buffer") {
  // Three ranks on few cores with a 2 ms timeout and 8 MiB to gather: a
  // rank done reading early waits far longer than the timeout for one the
  // scheduler holds back. Each rank overwrites its send buffer as soon as
  // the call returns, so a peer still reading it would gather -1s. So every
  // round either fails for every rank before anyone reads (a rank came late
  // to the call), or succeeds for every rank with exactly the ranks' values.
  thread_communicator::options options;
  options.timeout = std::chrono::milliseconds(2);
  const std::size_t n = std::size_t{1} << 21;
  int succeeded = 0;
  for (int round = 0; round < 6; ++round) {
    CAPTURE(round);
    std::vector<int> ok(3, 0);
    const auto reports = run_ranks(
        3,
        [&](thread_communicator& comm, host_backend& backend) {
          rank_report report;
          std::vector<float> send(n, static_cast<float>(comm.rank())), recv(3 * n, 0.0f);
          auto stream = backend.make_stream("gather");
          try {
            comm.all_gather<float>(backend, stream, send, recv);
            backend.synchronize(stream);
          } catch (const memo::error& e) {
            std::fill(send.begin(), send.end(), -1.0f);
            report.problems.push_back(e.message());
            return report;
          }
          std::fill(send.begin(), send.end(), -1.0f);
          for (std::size_t i = 0; i < recv.size(); ++i) {
            if (recv[i] != static_cast<float>(i / n)) {
              report.problems.push_back("element " + std::to_string(i) + " is " + std::to_string(recv[i]));
              break;
            }
          }
          ok[static_cast<std::size_t>(comm.rank())] = report.problems.empty() ? 1 : 0;
          return report;
        },
        options);
    const auto failures = failures_of(reports);
    const int passed = ok[0] + ok[1] + ok[2];
    CHECK((passed == 0 || passed == 3));
    if (passed == 3) ++succeeded;
    for (const auto& f : failures) {
      if (!f.empty()) CHECK(f.find("never joined") != std::string::npos);
    }
  }
  MESSAGE("rounds in which every rank gathered: " << succeeded << " of 6");
}

TEST_CASE("thread_communicator: after a collective every rank waits for the others' reading, past any timeout") {
  // The group's own rendezvous, driven by hand: both ranks join a call,
  // rank 0 ends its reading and must wait for rank 1's, though the group's
  // timeout (200 ms) passes three times over meanwhile.
  memo::detail::thread_group group(2, std::chrono::milliseconds(200), "reading");
  memo::comm_call call;
  call.op = memo::comm_op::barrier;
  std::thread other([&] { (void)group.arrive(1, {call}); });
  (void)group.arrive(0, {call});
  other.join();
  std::atomic<bool> returned{false};
  std::thread reader([&] {
    group.finish_reading();
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  CHECK_FALSE(returned.load());
  group.finish_reading();  // rank 1 is done too
  reader.join();
  CHECK(returned.load());
  // The group is still usable: the next call joins as usual.
  std::thread again([&] {
    (void)group.arrive(1, {call});
    group.finish_reading();
  });
  (void)group.arrive(0, {call});
  group.finish_reading();
  again.join();
}

TEST_CASE("thread_communicator: a round that completed stands when the group breaks before a waiter wakes") {
  // Rank 0 waits in a barrier; rank 1 completes it and at once breaks the
  // group with a mismatched receive (its "other stream"). Rank 0's round
  // completed, so it returns it and ends its reading, whenever it wakes;
  // had it thrown instead, rank 1 would wait in finish_reading forever.
  // The failure reaches rank 0 with its next call.
  for (int trial = 0; trial < 40; ++trial) {
    CAPTURE(trial);
    memo::detail::thread_group group(2, std::chrono::seconds(5), "breaks");
    memo::comm_call barrier;
    barrier.op = memo::comm_op::barrier;
    float three[3] = {1, 2, 3};
    float five[5] = {};
    std::thread sender([&] {  // rank 0's other stream: 3 floats to rank 1
      try {
        group.send(0, 1, memo::comm_type::float32, three, 3);
      } catch (const memo::error&) {
      }
    });
    std::atomic<bool> rank0_threw{false};
    std::thread rank0([&] {
      try {
        (void)group.arrive(0, {barrier});
        group.finish_reading();
      } catch (const memo::error&) {
        rank0_threw = true;
      }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    (void)group.arrive(1, {barrier});
    CHECK_THROWS_AS(group.recv(1, 0, memo::comm_type::float32, five, 5), memo::error);  // 3 sent, 5 asked
    group.finish_reading();
    rank0.join();
    sender.join();
    CHECK_FALSE(rank0_threw.load());
    CHECK_THROWS_WITH_AS((void)group.arrive(0, {barrier}), doctest::Contains("sent 3"), memo::error);
  }
}

TEST_CASE("run_thread_group: every rank runs with its communicator, and every rank's failure is thrown, named") {
  // Each rank sums its rank: every one ends with the same total.
  std::vector<float> sums(4, -1.0f);
  memo::run_thread_group(4, [&](thread_communicator& comm) {
    host_backend backend(small_backend());
    auto stream = backend.make_stream();
    std::vector<float> v(1, static_cast<float>(comm.rank()));
    comm.all_reduce(backend, stream, std::span<const float>(v), std::span<float>(v));
    backend.synchronize(stream);
    sums[static_cast<std::size_t>(comm.rank())] = v[0];
  });
  CHECK(sums == std::vector<float>(4, 6.0f));
  // Rank 2 throws before the barrier: the others fail in it (rank 2 left),
  // and all of it comes back as one error naming each rank.
  std::string message;
  try {
    memo::run_thread_group(3, [&](thread_communicator& comm) {
      if (comm.rank() == 2) throw std::runtime_error("rank two gave up");
      host_backend backend(small_backend());
      auto stream = backend.make_stream();
      comm.barrier(backend, stream);
      backend.synchronize(stream);
    });
    FAIL("no error");
  } catch (const memo::error& e) {
    message = e.message();
  }
  CHECK_MESSAGE(message.find("rank 2: rank two gave up") != std::string::npos, message);
  CHECK_MESSAGE(message.find("rank 0: ") != std::string::npos, message);
  CHECK_MESSAGE(message.find("rank 1: ") != std::string::npos, message);
  CHECK_MESSAGE(message.find("rank 2 left the group") != std::string::npos, message);
  CHECK_MESSAGE(message.rfind("rank 2: rank two gave up", 0) == 0, message);  // the first thrown first
}
