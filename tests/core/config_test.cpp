#include "memo/core/config.hpp"

#include <doctest/doctest.h>

#include <string>

namespace {
MEMO_HOST_DEVICE int twice(int x) { return 2 * x; }
}  // namespace

TEST_CASE("config: host-device functions are plain inline functions without nvcc") {
  CHECK(twice(21) == 42);
  CHECK(MEMO_HAS_CUDA == 0);
}

TEST_CASE("config: version macros agree with the version value") {
  CHECK(memo::version.major == MEMO_VERSION_MAJOR);
  CHECK(memo::version.minor == MEMO_VERSION_MINOR);
  CHECK(memo::version.patch == MEMO_VERSION_PATCH);
  const std::string text = std::to_string(memo::version.major) + "." +
                           std::to_string(memo::version.minor) + "." +
                           std::to_string(memo::version.patch);
  CHECK(text == MEMO_VERSION_STRING);
}
