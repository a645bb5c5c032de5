// Run by mpirun on 2 and 4 processes (tests/backend/CMakeLists.txt): every
// process runs every test case on its rank of MPI_COMM_WORLD; mpirun fails
// when any process does.
#define DOCTEST_CONFIG_IMPLEMENT
#include "memo/backend/mpi_communicator.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "communicator_conformance.hpp"

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
  // The withdrawn receive leaves the communicator usable.
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
