// Status conversion needs the CUDA runtime library but no device.
#include "memo/backend/cuda_check.hpp"

#include <doctest/doctest.h>

#include <string>

TEST_CASE("cuda_check: success passes, failures become memo errors with the runtime's text") {
  CHECK_NOTHROW(memo::check_cuda(cudaSuccess, "cudaMemcpy"));
  try {
    memo::check_cuda(cudaErrorInvalidValue, "cudaMemcpyAsync");
    FAIL("no error raised");
  } catch (const memo::error& e) {
    CHECK(e.domain() == "cuda");
    REQUIRE(e.status());
    CHECK(*e.status() == static_cast<long>(cudaErrorInvalidValue));
    const std::string text = e.what();
    CHECK(text.find("cudaMemcpyAsync failed") != std::string::npos);
    CHECK(text.find(cudaGetErrorName(cudaErrorInvalidValue)) != std::string::npos);
    CHECK(text.find("cuda_check_test.cpp") != std::string::npos);
  }
}

TEST_CASE("cuda_check: cuBLAS statuses are named") {
  CHECK_NOTHROW(memo::check_cublas(CUBLAS_STATUS_SUCCESS, "cublasSgemm"));
  CHECK_THROWS_WITH_AS(memo::check_cublas(CUBLAS_STATUS_INVALID_VALUE, "cublasSgemm"),
                       doctest::Contains("cublasSgemm failed: CUBLAS_STATUS_INVALID_VALUE"),
                       memo::error);
}
