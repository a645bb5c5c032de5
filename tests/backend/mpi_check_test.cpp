// Runs without a launcher and without MPI_Init: the conversion must not call
// into MPI functions that are illegal before initialisation.
#include "memo/backend/mpi_check.hpp"

#include <doctest/doctest.h>

#include <string>

TEST_CASE("mpi_check: failures name the call and the code, even before MPI_Init") {
  CHECK_NOTHROW(memo::check_mpi(MPI_SUCCESS, "MPI_Allreduce"));
  try {
    memo::check_mpi(MPI_ERR_COUNT, "MPI_Allreduce");
    FAIL("no error raised");
  } catch (const memo::error& e) {
    CHECK(e.domain() == "mpi");
    CHECK(*e.status() == MPI_ERR_COUNT);
    const std::string text = e.what();
    CHECK(text.find("MPI_Allreduce failed: MPI error code " + std::to_string(MPI_ERR_COUNT)) !=
          std::string::npos);
    CHECK(text.find("not initialised") != std::string::npos);
  }
}
