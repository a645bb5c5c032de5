#include "memo/backend/self_communicator.hpp"

#include <doctest/doctest.h>

#include "communicator_conformance.hpp"

TEST_CASE("self_communicator: conformance on one rank") {
  memo::host_backend backend;
  memo::self_communicator comm;
  CHECK(comm.rank() == 0);
  CHECK(comm.size() == 1);
  const auto report = memo_test::run_conformance(comm, backend);
  for (const auto& problem : report.problems) FAIL_CHECK(problem);
}

TEST_CASE("self_communicator: a one-rank all_gather is a copy done in stream order") {
  memo::host_backend backend;
  memo::self_communicator comm;
  auto stream = backend.make_stream("s");
  std::vector<float> send = {1.5f, -2.0f, 3.25f};
  std::vector<float> recv(3, 0.0f);
  comm.all_gather(backend, stream, std::span<const float>(send), std::span<float>(recv));
  backend.synchronize(stream);
  CHECK(recv == send);
}
