// memo/core/text.hpp
//
// Text that users give us, read strictly and echoed safely: an integer is
// the whole token or nothing (no trailing bytes, no silent wrap), and a
// token quoted in an error message is cut to 64 characters with its control
// and non-ASCII bytes escaped, so a hostile input cannot flood or garble a
// terminal. Shared by the file parsers, the command lines and the benches.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

namespace memo::detail {

/// `text` as an Int when it is exactly one (an optional leading '+'), else
/// nullopt: empty, malformed, trailing bytes and out-of-range all fail.
template <class Int>
std::optional<Int> parse_integer(std::string_view text) {
  Int value{};
  if (text.empty()) return std::nullopt;
  if (text.front() == '+') {
    text.remove_prefix(1);
    if (text.empty() || text.front() == '-') return std::nullopt;  // "+" or "+-5"
  }
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || ptr != text.data() + text.size()) return std::nullopt;
  return value;
}

/// What reading a decimal number found.
enum class decimal_status { ok, malformed, out_of_range };
struct decimal_reading {
  double value = 0.0;
  decimal_status status = decimal_status::malformed;
};

/// `text` read as exactly one decimal number (an optional sign, digits
/// with an optional point and exponent: "0.5", "+1", "2e-3", "1."):
/// `out_of_range` for a well-formed number beyond a double's range (1e999,
/// 1e-400), `malformed` for anything else that is not one (empty, blanks,
/// hexadecimal, infinity, NaN, trailing bytes).
inline decimal_reading read_decimal(std::string_view text) {
  if (!text.empty() && text.front() == '+') {
    text.remove_prefix(1);
    if (text.empty() || text.front() == '-') return {};
  }
  if (text.empty()) return {};
  double value = 0.0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value, std::chars_format::general);
  if (ptr != text.data() + text.size()) return {};
  if (ec == std::errc::result_out_of_range) return {0.0, decimal_status::out_of_range};
  if (ec != std::errc{} || !std::isfinite(value)) return {};
  return {value + 0.0, decimal_status::ok};  // -0 is 0
}

/// `read_decimal`'s value when it is one, else nullopt.
inline std::optional<double> parse_decimal(std::string_view text) {
  const decimal_reading r = read_decimal(text);
  if (r.status != decimal_status::ok) return std::nullopt;
  return r.value;
}

/// `text` for an error message: at most `shown` characters (64 for a
/// token; a path may be given more), then "..." and the full length;
/// control bytes and non-ASCII bytes as \xNN.
inline std::string quote(std::string_view text, std::size_t shown = 64) {
  std::string out;
  for (std::size_t k = 0; k < text.size() && k < shown; ++k) {
    const auto c = static_cast<unsigned char>(text[k]);
    if (c < 0x20 || c >= 0x7f || c == '\\') {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (text.size() > shown) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

/// The shortest text that reads back as `number` ("0.5", "1e+300").
template <class Real>
std::string shortest(Real number) {
  char text[64];
  const auto [end, failed] = std::to_chars(text, text + sizeof text, number);
  if (failed != std::errc{}) return std::to_string(number);  // cannot happen: 64 characters hold any double
  return std::string(text, end);
}

/// A path as error messages show it: control bytes escaped, cut past 256
/// characters (a file name is input too).
inline std::string shown_path(const std::filesystem::path& path) { return quote(path.string(), 256); }

/// Why `text` is not an integer of type Int: out of range when it is a
/// well-formed number, malformed otherwise.
template <class Int>
std::string integer_problem(std::string_view text) {
  std::string_view digits = text;
  if (!digits.empty() && (digits.front() == '+' || digits.front() == '-')) digits.remove_prefix(1);
  const bool numeric = !digits.empty() && std::all_of(digits.begin(), digits.end(),
                                                      [](char c) { return c >= '0' && c <= '9'; });
  if (numeric) {
    using limits = std::numeric_limits<Int>;
    std::string why = "'";
    why += quote(text);
    why += "' does not fit in ";
    why += limits::is_signed ? "a signed " : "an unsigned ";
    why += std::to_string(limits::digits + (limits::is_signed ? 1 : 0));
    why += "-bit integer (" + std::to_string(limits::min());
    why += " to " + std::to_string(limits::max()) + ")";
    return why;
  }
  std::string why = "'";
  why += quote(text);
  why += std::numeric_limits<Int>::is_signed ? "' is not an integer" : "' is not a non-negative integer";
  return why;
}

/// Why `text` is not a decimal number: outside a double's range when it is
/// a well-formed one, malformed otherwise (`read_decimal`).
inline std::string decimal_problem(std::string_view text) {
  if (read_decimal(text).status == decimal_status::out_of_range) {
    return "'" + quote(text) + "' is outside the range of a double (magnitudes from about 2.2e-308 to 1.8e308)";
  }
  return "'" + quote(text) + "' is not a decimal number";
}

}  // namespace memo::detail
