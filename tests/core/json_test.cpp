#include "memo/core/json.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

TEST_CASE("json: writer handles commas, nesting, escapes and non-finite numbers") {
  memo::json_writer j;
  j.begin_object()
      .field("a", 1)
      .field("s", "q\"\\\n")
      .key("list")
      .begin_array()
      .value(true)
      .value(2.5)
      .begin_object()
      .end_object()
      .end_array()
      .field("nan", std::numeric_limits<double>::quiet_NaN())
      .key("n")
      .null()
      .end_object();
  CHECK(j.str() == R"({"a":1,"s":"q\"\\\u000a","list":[true,2.5,{}],"nan":null,"n":null})");
}

TEST_CASE("json: writer writes an optional as its value or null") {
  memo::json_writer j;
  j.begin_object()
      .field("some", std::optional<std::int64_t>(32))
      .field("none", std::optional<std::uint64_t>())
      .field("path", std::optional<std::string>("p.csv"))
      .end_object();
  CHECK(j.str() == R"({"some":32,"none":null,"path":"p.csv"})");
}
