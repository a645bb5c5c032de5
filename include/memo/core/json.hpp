// memo/core/json.hpp
//
// The one JSON writer of memo: every tool, benchmark and Chrome trace prints
// through it, so escaping and number formatting are decided once. It
// produces compact, valid JSON (strings escaped, control bytes as \u00XX,
// bytes that are not UTF-8 as U+FFFD, non-finite numbers written as null)
// and manages the commas; programs print exactly one object with it.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "memo/core/error.hpp"
#include "memo/core/text.hpp"

namespace memo {

/// Appends JSON text with commas and escaping handled.
class json_writer {
 public:
  json_writer& begin_object() { return open('{'); }
  json_writer& end_object() { return close('}'); }
  json_writer& begin_array() { return open('['); }
  json_writer& end_array() { return close(']'); }

  json_writer& key(std::string_view name) {
    separate();
    quote(name);
    out_ += ':';
    after_key_ = true;
    return *this;
  }

  json_writer& value(std::string_view text) {
    separate();
    quote(text);
    return *this;
  }
  json_writer& value(const char* text) { return value(std::string_view(text)); }
  json_writer& value(bool flag) {
    separate();
    out_ += flag ? "true" : "false";
    return *this;
  }
  /// The shortest text that reads back as the same number (so figures
  /// that add up still add up when parsed); JSON has no NaN or infinity,
  /// so those are written as null.
  json_writer& value(double number) { return real(number); }
  /// A float as its own shortest text (2.345f is "2.345", not the 17
  /// digits of the double it widens to).
  json_writer& value(float number) { return real(number); }
  template <class Int>
    requires std::is_integral_v<Int>
  json_writer& value(Int number) {
    separate();
    out_ += std::to_string(number);
    return *this;
  }
  json_writer& null() {
    separate();
    out_ += "null";
    return *this;
  }
  /// A vector or span of numbers or strings, written as an array.
  template <class T>
  json_writer& value(std::span<const T> items) {
    begin_array();
    for (const T& item : items) value(item);
    return end_array();
  }
  template <class T>
  json_writer& value(const std::vector<T>& items) {
    return value(std::span<const T>(items));
  }
  /// An absent optional is written as `null`.
  template <class T>
  json_writer& value(const std::optional<T>& v) {
    return v ? value(*v) : null();
  }

  template <class T>
  json_writer& field(std::string_view name, const T& v) {
    key(name);
    return value(v);
  }

  [[nodiscard]] const std::string& str() const noexcept { return out_; }

 private:
  template <class Real>
  json_writer& real(Real number) {
    separate();
    if (!std::isfinite(number)) {
      out_ += "null";
      return *this;
    }
    out_ += detail::shortest(number);
    return *this;
  }

  json_writer& open(char c) {
    separate();
    out_ += c;
    first_.push_back(true);
    return *this;
  }
  json_writer& close(char c) {
    expects(!first_.empty(), "json_writer: close without open");
    first_.pop_back();
    out_ += c;
    return *this;
  }
  void separate() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (!first_.empty()) {
      if (!first_.back()) out_ += ',';
      first_.back() = false;
    }
  }
  void quote(std::string_view text) {
    out_ += '"';
    for (std::size_t i = 0; i < text.size();) {
      const auto c = static_cast<unsigned char>(text[i]);
      if (c == '"' || c == '\\') {
        out_ += '\\';
        out_ += text[i++];
      } else if (c < 0x20) {
        char esc[8];
        std::snprintf(esc, sizeof esc, "\\u%04x", c);
        out_ += esc;
        ++i;
      } else if (c < 0x80) {
        out_ += text[i++];
      } else if (const std::size_t n = utf8_sequence_length(text.substr(i)); n > 0) {
        out_.append(text.substr(i, n));
        i += n;
      } else {
        // Not UTF-8 (a file name or a file's bytes the user gave us): JSON
        // text must be Unicode, so the byte becomes the replacement character.
        out_ += "\xEF\xBF\xBD";
        ++i;
      }
    }
    out_ += '"';
  }
  /// The length of the well-formed UTF-8 sequence at the start of `text`
  /// (RFC 3629: no overlong forms, no surrogates, at most U+10FFFF), or 0.
  static std::size_t utf8_sequence_length(std::string_view text) {
    const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
    const unsigned char lead = byte(0);
    std::size_t n = 0;
    unsigned char low = 0x80, high = 0xBF;  // the second byte's range
    if (lead >= 0xC2 && lead <= 0xDF) {
      n = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      n = 3;
      if (lead == 0xE0) low = 0xA0;   // overlong
      if (lead == 0xED) high = 0x9F;  // surrogates
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      n = 4;
      if (lead == 0xF0) low = 0x90;   // overlong
      if (lead == 0xF4) high = 0x8F;  // above U+10FFFF
    } else {
      return 0;
    }
    if (text.size() < n || byte(1) < low || byte(1) > high) return 0;
    for (std::size_t k = 2; k < n; ++k) {
      if (byte(k) < 0x80 || byte(k) > 0xBF) return 0;
    }
    return n;
  }

  std::string out_;
  std::vector<bool> first_;
  bool after_key_ = false;
};

}  // namespace memo
