#include "memo/backend/timed_communicator.hpp"

#include <doctest/doctest.h>

#include <span>
#include <thread>
#include <vector>

#include "communicator_conformance.hpp"
#include "memo/backend/thread_communicator.hpp"

namespace {

using memo::host_backend;
using memo::thread_communicator;
using timed = memo::timed_communicator<thread_communicator>;

static_assert(memo::CommunicatorOf<timed, host_backend>, "a timed communicator is a communicator of its backend");

host_backend::options one_thread() {
  host_backend::options options;
  options.compute_threads = 1;
  return options;
}

/// Runs `body(timed comm, backend)` on `ranks` threads.
template <class Body>
void on_ranks(int ranks, Body body) {
  auto comms = thread_communicator::create_group(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&body, comm = std::move(comms[static_cast<std::size_t>(r)])]() mutable {
      host_backend backend(one_thread());
      timed wrapped(std::move(comm));
      body(wrapped, backend);
    });
  }
  for (auto& thread : threads) thread.join();
}

}  // namespace

TEST_CASE("timed_communicator: passes the communicator conformance suite of the one it wraps") {
  for (const int ranks : {1, 2, 3}) {
    CAPTURE(ranks);
    std::vector<memo_test::rank_report> reports(static_cast<std::size_t>(ranks));
    on_ranks(ranks, [&](timed& comm, host_backend& backend) {
      reports[static_cast<std::size_t>(comm.rank())] = memo_test::run_conformance(comm, backend);
    });
    for (const auto& report : reports) {
      for (const auto& problem : report.problems) FAIL_CHECK(problem);
    }
  }
}

TEST_CASE("timed_communicator: counts calls and payload bytes of its own and of the groups split from it") {
  std::vector<memo::communication_totals> after_calls(4), after_reset(4);
  on_ranks(4, [&](timed& comm, host_backend& backend) {
    auto stream = backend.make_stream();
    std::vector<float> a(100, 1.0f), b(100);
    comm.all_reduce<float>(backend, stream, std::span<const float>(a), std::span<float>(b));  // 400 B
    backend.synchronize(stream);                            // split is a host call: the stream is idle first
    timed pair = comm.split(comm.rank() / 2, comm.rank());  // two groups of 2
    std::vector<float> gathered(200);
    pair.all_gather<float>(backend, stream, std::span<const float>(a), std::span<float>(gathered));  // 800 B
    pair.broadcast<float>(backend, stream, std::span<float>(a.data(), 25), 1);  // 100 B
    backend.synchronize(stream);
    after_calls[static_cast<std::size_t>(comm.rank())] = comm.totals();
    comm.barrier(backend, stream);
    backend.synchronize(stream);
    comm.reset_totals();
    after_reset[static_cast<std::size_t>(comm.rank())] = pair.totals();  // shared with the parent
  });
  for (int r = 0; r < 4; ++r) {
    CAPTURE(r);
    CHECK(after_calls[static_cast<std::size_t>(r)].calls == 3);
    CHECK(after_calls[static_cast<std::size_t>(r)].payload_bytes == 400 + 800 + 100);
    CHECK(after_calls[static_cast<std::size_t>(r)].seconds > 0.0);
    CHECK(after_reset[static_cast<std::size_t>(r)].calls == 0);
    CHECK(after_reset[static_cast<std::size_t>(r)].payload_bytes == 0);
  }
}
