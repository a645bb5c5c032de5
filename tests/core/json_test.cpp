#include "memo/core/json.hpp"

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

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

TEST_CASE("json: numbers are the shortest text that reads back as the same value") {
  // Parsed with strtod, independently of the writer's to_chars.
  const double doubles[] = {0.1, 1.0 / 3.0, 1075063000575.25, 6.02214076e23, 5e-324, 1.7976931348623157e308, -0.0, 42.0};
  for (const double x : doubles) {
    memo::json_writer j;
    j.value(x);
    CAPTURE(j.str());
    CHECK(std::strtod(j.str().c_str(), nullptr) == x);
    CHECK(j.str().size() <= 24);
  }
  memo::json_writer short_ones;
  short_ones.begin_array().value(0.1).value(2.345f).value(1e21).value(0.5f).end_array();
  CHECK(short_ones.str() == "[0.1,2.345,1e+21,0.5]");
  // A float keeps its own digits, and reads back as the same float.
  const float f = 0.1f + 0.2f;
  memo::json_writer one;
  one.value(f);
  CHECK(std::strtof(one.str().c_str(), nullptr) == f);
  CHECK(one.str() == "0.3");
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

TEST_CASE("json: writer writes a sequence as an array, an absent one as null") {
  const std::vector<double> losses{2.5, std::numeric_limits<double>::infinity(), 0.125};
  const std::vector<std::int64_t> empty;
  using series = std::optional<std::span<const double>>;
  memo::json_writer j;
  j.begin_object()
      .field("loss", losses)
      .field("steps", empty)
      .field("names", std::vector<std::string>{"a", "b"})
      .field("some", series(losses))
      .field("none", series())
      .end_object();
  CHECK(j.str() == R"({"loss":[2.5,null,0.125],"steps":[],"names":["a","b"],"some":[2.5,null,0.125],"none":null})");
}

namespace {

// An independent reading of RFC 3629: a sequence is the lead's bit pattern
// (110x, 1110, 11110) plus that many 10xxxxxx bytes, decoding to a code point
// that needs exactly that many bytes and is not a surrogate or above U+10FFFF.
std::size_t reference_utf8_length(const std::string& s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned>(static_cast<unsigned char>(s[k])); };
  std::size_t n = 0;
  unsigned cp = 0;
  if ((b(i) & 0xE0u) == 0xC0u) {
    n = 2, cp = b(i) & 0x1Fu;
  } else if ((b(i) & 0xF0u) == 0xE0u) {
    n = 3, cp = b(i) & 0x0Fu;
  } else if ((b(i) & 0xF8u) == 0xF0u) {
    n = 4, cp = b(i) & 0x07u;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0u) != 0x80u) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3Fu);
  }
  const unsigned least[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < least[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

// What the writer must print for a string of bytes at or above 0x20 (no
// quotes or backslashes): well-formed sequences as they are, every other
// byte as U+FFFD.
std::string expected_json(const std::string& s) {
  std::string out = "\"";
  for (std::size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      out += s[i++];
    } else if (const std::size_t n = reference_utf8_length(s, i); n > 0) {
      out += s.substr(i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out + "\"";
}

std::string written(const std::string& s) {
  memo::json_writer j;
  j.value(s);
  return j.str();
}

}  // namespace

TEST_CASE("json: text that is not UTF-8 is written as U+FFFD, well-formed text unchanged") {
  CHECK(written("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80") == "\"caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80\"");
  CHECK(written("/tmp/\xFF.profile") == "\"/tmp/\xEF\xBF\xBD.profile\"");
  CHECK(written("\xC0\x80") == "\"\xEF\xBF\xBD\xEF\xBF\xBD\"");  // overlong NUL
  CHECK(written("\xED\xA0\x80") == "\"\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\"");  // a surrogate
  CHECK(written("\xE2\x82") == "\"\xEF\xBF\xBD\xEF\xBF\xBD\"");  // truncated
  // Every lead byte with every second byte, and the three- and four-byte
  // leads whose ranges are special with every second and third byte.
  for (int lead = 0x80; lead <= 0xFF; ++lead) {
    for (int second = 0; second <= 0xFF; ++second) {
      const std::string s{static_cast<char>(lead), static_cast<char>(second == 0 ? 'a' : second), '\x80', '\xBF'};
      if (s[1] == '"' || s[1] == '\\' || static_cast<unsigned char>(s[1]) < 0x20) continue;
      CAPTURE(lead);
      CAPTURE(second);
      REQUIRE(written(s) == expected_json(s));
    }
  }
  for (int lead : {0xE0, 0xED, 0xEF, 0xF0, 0xF4}) {
    for (int second = 0x80; second <= 0xBF; ++second) {
      for (int third = 0x20; third <= 0xFF; ++third) {
        if (third == '"' || third == '\\') continue;
        const std::string s{static_cast<char>(lead), static_cast<char>(second), static_cast<char>(third), '\x80'};
        CAPTURE(lead);
        CAPTURE(second);
        CAPTURE(third);
        REQUIRE(written(s) == expected_json(s));
      }
    }
  }
}
