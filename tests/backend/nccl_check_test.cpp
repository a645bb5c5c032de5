// Status conversion needs libnccl but no device.
#include "memo/backend/nccl_check.hpp"

#include <doctest/doctest.h>

#include <string>

TEST_CASE("nccl_check: failures carry NCCL's own message and code") {
  CHECK_NOTHROW(memo::check_nccl(ncclSuccess, "ncclAllReduce"));
  try {
    memo::check_nccl(ncclInvalidArgument, "ncclAllReduce");
    FAIL("no error raised");
  } catch (const memo::error& e) {
    CHECK(e.domain() == "nccl");
    CHECK(*e.status() == static_cast<long>(ncclInvalidArgument));
    CHECK(std::string(e.what()).find(ncclGetErrorString(ncclInvalidArgument)) != std::string::npos);
  }
}
