#include "memo/core/error.hpp"

#include <doctest/doctest.h>

#include <string>

TEST_CASE("error: carries message and the location of the check") {
  const int line = __LINE__ + 2;
  try {
    memo::expects(1 + 1 == 3, "arithmetic broke");
    FAIL("expects did not throw");
  } catch (const memo::error& e) {
    CHECK(e.message() == "arithmetic broke");
    CHECK(e.where().line() == static_cast<unsigned>(line));
    CHECK(std::string(e.what()).find("error_test.cpp:" + std::to_string(line)) !=
          std::string::npos);
    CHECK(std::string(e.what()).find("arithmetic broke") != std::string::npos);
    CHECK_FALSE(e.status().has_value());
    CHECK(e.domain().empty());
  }
}

TEST_CASE("error: a foreign status code is kept with its library's name") {
  const memo::error e("cudaMalloc failed", "cuda", 2);
  REQUIRE(e.status().has_value());
  CHECK(*e.status() == 2);
  CHECK(e.domain() == "cuda");
  CHECK(std::string(e.what()).find("[cuda status 2]") != std::string::npos);
}

TEST_CASE("error: the lazy message is only built on failure") {
  int built = 0;
  auto message = [&] {
    ++built;
    return std::string("value 7 above bound 5");
  };
  memo::expects(true, message);
  CHECK(built == 0);
  CHECK_THROWS_WITH_AS(memo::expects(false, message), doctest::Contains("value 7 above bound 5"),
                       memo::error);
  CHECK(built == 1);
}
