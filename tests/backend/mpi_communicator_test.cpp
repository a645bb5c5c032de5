// Run by mpirun on 2 and 4 processes (tests/backend/CMakeLists.txt): every
// process runs every test case on its rank of MPI_COMM_WORLD; mpirun fails
// when any process does.
#define DOCTEST_CONFIG_IMPLEMENT
#include "memo/backend/mpi_communicator.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "communicator_conformance.hpp"

namespace {

/// The memo::error that `issue` (and the stream's work it issued) raised, or "(no error)".
template <class Issue>
std::string error_of(memo::host_backend& backend, memo::host_backend::stream& stream, Issue&& issue) {
  try {
    issue();
    backend.synchronize(stream);
  } catch (const memo::error& e) {
    return std::string(e.what());
  }
  return std::string("(no error)");
}

}  // namespace

TEST_CASE("mpi_communicator: conformance on every rank of MPI_COMM_WORLD") {
  memo::host_backend::options options;
  options.compute_threads = 1;
  memo::host_backend backend(options);
  memo::mpi_communicator comm;
  int world_size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  CHECK(comm.size() == world_size);
  const auto report = memo_test::run_conformance(comm, backend);
  for (const auto& problem : report.problems) FAIL_CHECK(problem);
}

TEST_CASE("mpi_communicator: with a timeout (nonblocking calls, polled) the conformance suite still holds") {
  memo::host_backend::options options;
  options.compute_threads = 1;
  memo::host_backend backend(options);
  memo::mpi_communicator comm(MPI_COMM_WORLD, {.timeout = std::chrono::milliseconds(60000)});
  const auto report = memo_test::run_conformance(comm, backend);
  for (const auto& problem : report.problems) FAIL_CHECK(problem);
}

TEST_CASE("mpi_communicator: with verify_calls the conformance suite still holds") {
  memo::host_backend::options options;
  options.compute_threads = 1;
  memo::host_backend backend(options);
  memo::mpi_communicator comm(MPI_COMM_WORLD, {.timeout = std::chrono::milliseconds(60000), .verify_calls = true});
  const auto report = memo_test::run_conformance(comm, backend);
  for (const auto& problem : report.problems) FAIL_CHECK(problem);
}

TEST_CASE("mpi_communicator: verify_calls fails every rank on calls that differ, naming each, and stays usable") {
  memo::host_backend backend;
  memo::mpi_communicator comm(MPI_COMM_WORLD, {.timeout = std::chrono::milliseconds(60000), .verify_calls = true});
  auto stream = backend.make_stream("verify");
  const int P = comm.size(), me = comm.rank();
  // Every rank's call, as the message must list them (written out here).
  auto listed = [&](auto call_of) {
    std::string text = "ranks issued different collectives:";
    for (int r = 0; r < P; ++r) text += " rank " + std::to_string(r) + " " + call_of(r) + (r + 1 < P ? ";" : "");
    return text;
  };
  auto fails_with = [&](const std::string& message, const std::string& expected) {
    CHECK_MESSAGE(message.find(expected) != std::string::npos, message);
    CHECK_MESSAGE(message.find("nothing was sent") != std::string::npos, message);
  };
  // A broadcast whose ranks name different roots: without the check some
  // ranks would return with another rank's data.
  std::vector<float> data(4, static_cast<float>(me));
  fails_with(error_of(backend, stream, [&] { comm.broadcast(backend, stream, std::span<float>(data), me % 2); }),
             listed([](int r) { return "broadcast(float32 x 4, root " + std::to_string(r % 2) + ")"; }));
  for (const float v : data) CHECK(v == static_cast<float>(me));  // nothing written
  // The same size in another element type: rank 0 sums int32, the others float32.
  std::vector<std::int32_t> ints(3, 1);
  std::vector<float> floats(3, 1.0f);
  fails_with(error_of(backend, stream,
                      [&] {
                        if (me == 0) {
                          comm.all_reduce(backend, stream, std::span<const std::int32_t>(ints), std::span<std::int32_t>(ints));
                        } else {
                          comm.all_reduce(backend, stream, std::span<const float>(floats), std::span<float>(floats));
                        }
                      }),
             listed([](int r) { return std::string("all_reduce(") + (r == 0 ? "int32" : "float32") + " x 3)"; }));
  // Different kinds, and different counts.
  std::vector<float> gathered(static_cast<std::size_t>(P) * 4);
  fails_with(error_of(backend, stream,
                      [&] {
                        if (me == 0) {
                          comm.barrier(backend, stream);
                        } else {
                          comm.all_gather(backend, stream, std::span<const float>(data.data(), 1),
                                          std::span<float>(gathered.data(), static_cast<std::size_t>(P)));
                        }
                      }),
             listed([](int r) { return r == 0 ? std::string("barrier()") : std::string("all_gather(float32 x 1)"); }));
  const auto mine = static_cast<std::size_t>(1 + me % 2);
  fails_with(error_of(backend, stream,
                      [&] {
                        comm.all_gather(backend, stream, std::span<const float>(data.data(), mine),
                                        std::span<float>(gathered.data(), mine * static_cast<std::size_t>(P)));
                      }),
             listed([](int r) { return "all_gather(float32 x " + std::to_string(1 + r % 2) + ")"; }));
  // A split met by a barrier: the split throws where it is called, the
  // barrier from the stream.
  const std::string split_or_barrier = error_of(backend, stream, [&] {
    if (me == 0) {
      (void)comm.split(0, 0);
    } else {
      comm.barrier(backend, stream);
    }
  });
  fails_with(split_or_barrier, listed([](int r) { return r == 0 ? std::string("split") : std::string("barrier()"); }));
  // Still usable: the same calls on every rank go through, checked.
  std::vector<float> sum(1, static_cast<float>(me));
  comm.all_reduce(backend, stream, std::span<const float>(sum), std::span<float>(sum));
  comm.broadcast(backend, stream, std::span<float>(data), P - 1);
  backend.synchronize(stream);
  CHECK(sum[0] == static_cast<float>(P * (P - 1) / 2));
  CHECK(data[0] == static_cast<float>(P - 1));
  // Groups inherit the check.
  memo::mpi_communicator half = comm.split(me % 2, me);
  if (half.size() > 1) {
    std::vector<float> one(1, 0.0f);
    fails_with(error_of(backend, stream, [&] { half.broadcast(backend, stream, std::span<float>(one), half.rank()); }),
               "ranks issued different collectives: rank 0 broadcast(float32 x 1, root 0); rank 1 broadcast(float32 x "
               "1, root 1)");
  }
  comm.barrier(backend, stream);
  backend.synchronize(stream);
}

TEST_CASE("mpi_communicator: a negative split color on one rank fails every rank alike, which stay usable") {
  memo::host_backend backend;
  auto stream = backend.make_stream("colors");
  for (const bool verify : {false, true}) {
    CAPTURE(verify);
    memo::mpi_communicator comm(MPI_COMM_WORLD, {.timeout = std::chrono::milliseconds(60000), .verify_calls = verify});
    const int P = comm.size(), me = comm.rank();
    const std::string message = error_of(backend, stream, [&] { (void)comm.split(me == P - 1 ? -1 : 0, me); });
    const std::string expected =
        verify ? (P == 1 ? std::string("split color must be >= 0, got -1")
                         : "rank " + std::to_string(P - 1) + " split(a negative color)")
               : "split color must be >= 0: rank " + std::to_string(P - 1) + " gave -1";
    CHECK_MESSAGE(message.find(expected) != std::string::npos, message);
    // Usable afterwards: a split every rank makes alike.
    memo::mpi_communicator all = comm.split(0, me);
    CHECK(all.size() == P);
  }
}

TEST_CASE("mpi_communicator: verify_calls' signature of a call, and counts beyond MPI's int") {
  using state = memo::detail::mpi_comm_state;
  memo::comm_call call;
  call.op = memo::comm_op::broadcast;
  call.type = memo::comm_type::int32;
  call.count = 7;
  call.peer = 3;
  CHECK(state::describe_signature(state::signature(call).data()) == "broadcast(int32 x 7, root 3)");
  // Every count MPI cannot take is one signature: the ranks agree, then each
  // fails alike at the call (its count check), none posting it.
  call.op = memo::comm_op::all_reduce;
  call.count = std::size_t{1} << 31;
  const auto big = state::signature(call);
  call.count = (std::size_t{1} << 62) + 7;
  CHECK(state::signature(call) == big);
  CHECK(state::describe_signature(big.data()) == "all_reduce(int32 x more than 2147483647)");
  call.count = 7;
  CHECK(state::signature(call) != big);
  call.count = 2147483647;
  CHECK(state::signature(call) != big);
  CHECK(state::describe_signature(state::signature_of_split().data()) == "split");
  CHECK(state::describe_signature(state::signature_of_split(true).data()) == "split(a negative color)");
  CHECK(state::signature_of_split(true) != state::signature_of_split());
}

TEST_CASE("mpi_communicator: ranks that disagree on verify_calls fail where the communicator is made") {
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  CHECK_THROWS_WITH_AS(memo::mpi_communicator(MPI_COMM_WORLD, {.verify_calls = me == 0}),
                       doctest::Contains("the ranks disagree on options.verify_calls: set on rank(s) 0, not on "
                                         "rank(s) 1"),
                       memo::error);
  // Then the world is as before: a communicator made alike works.
  memo::host_backend backend;
  memo::mpi_communicator comm(MPI_COMM_WORLD, {.verify_calls = true});
  auto stream = backend.make_stream("after");
  comm.barrier(backend, stream);
  backend.synchronize(stream);
}

TEST_CASE("mpi_communicator: a receive from a rank that never sends fails after the timeout, naming both") {
  memo::host_backend backend;
  memo::mpi_communicator world;  // no timeout: the barrier below waits for the slow rank
  memo::mpi_communicator quick(MPI_COMM_WORLD, {.timeout = std::chrono::milliseconds(200)});
  memo::mpi_communicator pair = quick.split(quick.rank() / 2, quick.rank());
  auto stream = backend.make_stream("pair");
  if (pair.size() == 2 && pair.rank() == 0) {
    std::vector<float> data(3);
    pair.recv(backend, stream, std::span<float>(data), 1);
    try {
      backend.synchronize(stream);
      FAIL_CHECK("a receive nobody answered did not time out");
    } catch (const memo::error& e) {
      CHECK(std::string(e.what()).find("waited 200 ms in recv with rank 1") != std::string::npos);
    }
  }
  // The other communicators stay usable.
  world.barrier(backend, stream);
  backend.synchronize(stream);
}

TEST_CASE("mpi_communicator: a collective that timed out leaves the communicator unusable, naming the call") {
  memo::host_backend backend;
  std::vector<float> data(4, 1.0f);  // MPI's until the stranded all_reduce completes: outlives `quick`
  memo::mpi_communicator world;      // no timeout
  const bool late = world.rank() == 0;
  // Rank 0 waits 200 ms for an all_reduce the others join only later; they
  // wait a minute (ranks may differ in their timeouts).
  memo::mpi_communicator quick(MPI_COMM_WORLD, {.timeout = std::chrono::milliseconds(late ? 200 : 60000)});
  auto stream = backend.make_stream("quick");
  auto message_of = [&](auto&& issue) { return error_of(backend, stream, issue); };
  if (late) {
    const std::string timed_out = message_of([&] { quick.all_reduce(backend, stream, std::span<const float>(data), std::span<float>(data)); });
    CHECK_MESSAGE(timed_out.find("waited 200 ms in all_reduce for its peers") != std::string::npos, timed_out);
    CHECK_MESSAGE(timed_out.find("MPI cannot cancel a collective") != std::string::npos, timed_out);
    // Any later call would be matched with the others' late all_reduce: refused.
    const std::string refused = message_of([&] { quick.barrier(backend, stream); });
    CHECK_MESSAGE(refused.find("barrier refused: the communicator is unusable since its all_reduce was abandoned "
                               "(waited 200 ms in all_reduce for its peers)") != std::string::npos,
                  refused);
    const std::string split = message_of([&] { (void)quick.split(0, 0); });
    CHECK_MESSAGE(split.find("unusable since its all_reduce") != std::string::npos, split);
  }
  world.barrier(backend, stream);
  backend.synchronize(stream);
  if (!late) {  // completes with rank 0's stranded contribution
    quick.all_reduce(backend, stream, std::span<const float>(data), std::span<float>(data));
    backend.synchronize(stream);
    CHECK(data[0] == static_cast<float>(world.size()));
  }
  world.barrier(backend, stream);
  backend.synchronize(stream);
}

TEST_CASE("mpi_communicator: split honours the timeout: a rank that never comes fails it, naming the wait") {
  memo::host_backend backend;
  memo::mpi_communicator world;  // no timeout
  const bool early = world.rank() == 0;
  // Rank 0 splits with a 200 ms timeout while the others stay away; they
  // then complete its stranded gather with a plain all_gather of the same
  // shape (calling split would take them into MPI_Comm_split without it).
  memo::mpi_communicator quick(MPI_COMM_WORLD, {.timeout = std::chrono::milliseconds(early ? 200 : 60000)});
  auto stream = backend.make_stream("quick");
  if (early) {
    const std::string timed_out = error_of(backend, stream, [&] { (void)quick.split(0, 0); });
    CHECK_MESSAGE(timed_out.find("waited 200 ms in all_gather for its peers") != std::string::npos, timed_out);
    const std::string refused = error_of(backend, stream, [&] { (void)quick.split(0, 0); });
    CHECK_MESSAGE(refused.find("split refused: the communicator is unusable") != std::string::npos, refused);
  }
  world.barrier(backend, stream);
  backend.synchronize(stream);
  if (!early) {
    std::vector<std::int32_t> mine = {7, 7, 7}, all(3 * static_cast<std::size_t>(world.size()));
    quick.all_gather(backend, stream, std::span<const std::int32_t>(mine), std::span<std::int32_t>(all));
    backend.synchronize(stream);
    CHECK(all[0] == memo::mpi_communicator::split_marker);  // rank 0's (marker, color, key)
    CHECK(all[1] == 0);
  }
  world.barrier(backend, stream);
  backend.synchronize(stream);
}

TEST_CASE("mpi_communicator: after a point-to-point timeout the communicator refuses the next call") {
  // Rank 0 sends and receives with rank 1, which never answers. A small
  // send may be delivered at once, so a later send could be taken for it:
  // the communicator refuses every call after the timeout.
  memo::host_backend backend;
  std::vector<float> out{111.0f}, in(1);
  memo::mpi_communicator world;
  memo::mpi_communicator quick(MPI_COMM_WORLD, {.timeout = std::chrono::milliseconds(200)});
  memo::mpi_communicator pair = quick.split(quick.rank() / 2, quick.rank());
  auto stream = backend.make_stream("pair");
  auto message_of = [&](auto&& issue) { return error_of(backend, stream, issue); };
  if (pair.size() == 2 && pair.rank() == 0) {
    const std::string timed_out = message_of([&] {
      pair.send_recv(backend, stream, std::span<const float>(out), 1, std::span<float>(in), 1);
    });
    CHECK_MESSAGE(timed_out.find("waited 200 ms in send_recv sending to rank 1 and receiving from rank 1") !=
                      std::string::npos,
                  timed_out);
    CHECK_MESSAGE(timed_out.find("the communicator is unusable from now on") != std::string::npos, timed_out);
    const std::string refused = message_of([&] { pair.send(backend, stream, std::span<const float>(out), 1); });
    CHECK_MESSAGE(refused.find("send refused: the communicator is unusable since its send_recv was abandoned") !=
                      std::string::npos,
                  refused);
  }
  world.barrier(backend, stream);
  backend.synchronize(stream);
  if (pair.size() == 2 && pair.rank() == 1) {  // takes a send MPI delivered before the cancel
    int waiting = 0;
    MPI_Status status;
    MPI_Iprobe(0, MPI_ANY_TAG, pair.native(), &waiting, &status);
    if (waiting != 0) MPI_Recv(in.data(), 1, MPI_FLOAT, 0, status.MPI_TAG, pair.native(), MPI_STATUS_IGNORE);
  }
  world.barrier(backend, stream);
  backend.synchronize(stream);
}

TEST_CASE("mpi_communicator: a receive shorter than the message is a memo::error from synchronize") {
  memo::host_backend backend;
  memo::mpi_communicator world;
  // Pairs (0, 1), (2, 3): the even rank sends 6 elements, the odd one takes 4.
  memo::mpi_communicator pair = world.split(world.rank() / 2, world.rank());
  if (pair.size() < 2) return;
  auto stream = backend.make_stream("pair");
  std::vector<float> data(6, 1.0f);
  if (pair.rank() == 0) {
    pair.send(backend, stream, std::span<const float>(data), 1);
    backend.synchronize(stream);
  } else {
    pair.recv(backend, stream, std::span<float>(data.data(), 4), 0);
    try {
      backend.synchronize(stream);
      FAIL_CHECK("a truncated receive was not reported");
    } catch (const memo::error& e) {
      CHECK(std::string(e.what()).find("MPI_Recv failed") != std::string::npos);
    }
  }
}

TEST_CASE("mpi_communicator: a message shorter than the receive is a memo::error naming both counts") {
  memo::host_backend backend;
  memo::mpi_communicator world;
  // Pairs (0, 1), (2, 3): the even rank sends 4 elements, the odd one asks
  // for 8; then both exchange with send_recv, the odd one asking for 6 of 3.
  memo::mpi_communicator pair = world.split(world.rank() / 2, world.rank());
  if (pair.size() < 2) return;
  auto stream = backend.make_stream("pair");
  std::vector<float> data(8, -1.0f);
  if (pair.rank() == 0) {
    pair.send(backend, stream, std::span<const float>(data.data(), 4), 1);
    backend.synchronize(stream);
    std::vector<float> back(3);
    pair.send_recv(backend, stream, std::span<const float>(data.data(), 3), 1, std::span<float>(back), 1);
    backend.synchronize(stream);
  } else {
    const std::string short_recv =
        error_of(backend, stream, [&] { pair.recv(backend, stream, std::span<float>(data), 0); });
    CHECK(short_recv.find("recv of 8 float32 from rank 0 got 4 (the sender sent fewer)") != std::string::npos);
    // Outside the lambda: the stream receives into it after the lambda returns.
    std::vector<float> six(6);
    const std::string short_exchange = error_of(backend, stream, [&] {
      pair.send_recv(backend, stream, std::span<const float>(data.data(), 3), 0, std::span<float>(six), 0);
    });
    CHECK(short_exchange.find("send_recv of 6 float32 from rank 0 got 3") != std::string::npos);
  }
}

TEST_CASE("mpi_communicator: a timeout beyond 2^31 - 1 ms is refused before any MPI call") {
  // milliseconds::max() overflowed the elapsed-time comparison into a
  // timeout at the first poll.
  CHECK_THROWS_WITH_AS(memo::mpi_communicator(MPI_COMM_WORLD, {.timeout = std::chrono::milliseconds::max()}),
                       doctest::Contains("the timeout must be from 0 (none) to 2147483647 ms"), memo::error);
}

TEST_CASE("mpi_communicator: a thread level below MPI_THREAD_MULTIPLE is refused by name") {
  try {
    memo::detail::require_mpi_thread_multiple(MPI_THREAD_FUNNELED, "test");
    FAIL_CHECK("MPI_THREAD_FUNNELED was accepted");
  } catch (const memo::error& e) {
    CHECK(std::string(e.what()).find("MPI_THREAD_FUNNELED") != std::string::npos);
    CHECK(std::string(e.what()).find("MPI_THREAD_MULTIPLE") != std::string::npos);
  }
}

int main(int argc, char** argv) {
  try {
    memo::mpi_environment mpi(&argc, &argv);
    doctest::Context context(argc, argv);
    const int failed = context.run();
    // Every rank reaches the end before MPI_Finalize, so a failing rank
    // cannot leave the others blocked in a collective of the next case.
    MPI_Barrier(MPI_COMM_WORLD);
    return failed != 0 ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpi_communicator_test: %s\n", e.what());
    return 1;
  }
}
