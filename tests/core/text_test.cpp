#include "memo/core/text.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

using memo::detail::integer_problem;
using memo::detail::parse_decimal;
using memo::detail::parse_integer;
using memo::detail::quote;

TEST_CASE("text: parse_integer takes exactly one integer, all of the token") {
  CHECK(parse_integer<std::int64_t>("42") == 42);
  CHECK(parse_integer<std::int64_t>("+42") == 42);
  CHECK(parse_integer<std::int64_t>("-42") == -42);
  CHECK(parse_integer<std::int64_t>("-9223372036854775808") == std::numeric_limits<std::int64_t>::min());
  CHECK(parse_integer<std::uint64_t>("18446744073709551615") == std::numeric_limits<std::uint64_t>::max());
  for (const char* bad : {"", "+", "-", "+-5", "++5", " 5", "5 ", "5x", "0x10", "1e3", "3.0", "nan"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_integer<std::int64_t>(bad).has_value());
  }
  CHECK_FALSE(parse_integer<std::uint64_t>("-1").has_value());
  CHECK_FALSE(parse_integer<std::uint64_t>("18446744073709551616").has_value());
  CHECK_FALSE(parse_integer<std::int64_t>("9223372036854775808").has_value());
  CHECK_FALSE(parse_integer<std::int32_t>("2147483648").has_value());
  CHECK(parse_integer<std::int32_t>("2147483647") == 2147483647);
}

TEST_CASE("text: parse_decimal takes exactly one finite decimal number, all of the token") {
  CHECK(parse_decimal("0.5") == 0.5);
  CHECK(parse_decimal("+1") == 1.0);
  CHECK(parse_decimal("-2.25") == -2.25);
  CHECK(parse_decimal(".5") == 0.5);
  CHECK(parse_decimal("2e-3") == 0.002);
  CHECK(parse_decimal("1E3") == 1000.0);
  CHECK(parse_decimal("1e+3") == 1000.0);
  CHECK(parse_decimal("1.") == 1.0);
  const auto zero = parse_decimal("-0");
  REQUIRE(zero.has_value());
  CHECK_FALSE(std::signbit(*zero));  // -0 is 0
  for (const char* bad : {"", "+", "-", "+-5", " 1", "1 ", "1x", "0x1p-1", "inf", "-inf", "nan", "1e999", "1,5", "."}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_decimal(bad).has_value());
  }
  // Out of range is told apart from malformed.
  using memo::detail::decimal_problem;
  using memo::detail::decimal_status;
  using memo::detail::read_decimal;
  CHECK(read_decimal("1e-400").status == decimal_status::out_of_range);
  CHECK(read_decimal("-1e999").status == decimal_status::out_of_range);
  CHECK(read_decimal("1e-400x").status == decimal_status::malformed);
  CHECK(read_decimal("inf").status == decimal_status::malformed);
  CHECK(read_decimal("0.25").status == decimal_status::ok);
  CHECK(decimal_problem("1e-400") ==
        "'1e-400' is outside the range of a double (magnitudes from about 2.2e-308 to 1.8e308)");
  CHECK(decimal_problem("abc") == "'abc' is not a decimal number");
}

TEST_CASE("text: integer_problem tells out of range from malformed, with the type's width") {
  CHECK(integer_problem<std::uint64_t>("18446744073709551616") ==
        "'18446744073709551616' does not fit in an unsigned 64-bit integer (0 to 18446744073709551615)");
  CHECK(integer_problem<std::int32_t>("-2147483649") ==
        "'-2147483649' does not fit in a signed 32-bit integer (-2147483648 to 2147483647)");
  CHECK(integer_problem<std::int64_t>("12a") == "'12a' is not an integer");
  CHECK(integer_problem<std::uint64_t>("x") == "'x' is not a non-negative integer");
}

TEST_CASE("text: quote cuts long tokens and escapes control and non-ASCII bytes") {
  CHECK(quote("plain") == "plain");
  CHECK(quote(std::string("a\nb\x01\\")) == "a\\x0ab\\x01\\x5c");
  CHECK(quote("\xc3\xa9") == "\\xc3\\xa9");
  const std::string long_token(100, 'z');
  CHECK(quote(long_token) == std::string(64, 'z') + "... (100 bytes)");
  CHECK(quote(std::string(64, 'y')) == std::string(64, 'y'));
}
