// memo/core/json.hpp
//
// The one JSON writer of memo: every tool, benchmark and Chrome trace prints
// through it, so escaping and number formatting are decided once. It
// produces compact, valid JSON (strings escaped, control bytes as \u00XX,
// non-finite numbers written as null) and manages the commas; programs print
// exactly one object with it.
#pragma once

#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "memo/core/error.hpp"

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
  json_writer& value(double number) {
    separate();
    if (!std::isfinite(number)) {
      out_ += "null";
    } else {
      char text[40];
      std::snprintf(text, sizeof text, "%.6g", number);
      out_ += text;
    }
    return *this;
  }
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
    for (const char ch : text) {
      const auto c = static_cast<unsigned char>(ch);
      if (c == '"' || c == '\\') {
        out_ += '\\';
        out_ += ch;
      } else if (c < 0x20) {
        char esc[8];
        std::snprintf(esc, sizeof esc, "\\u%04x", c);
        out_ += esc;
      } else {
        out_ += ch;
      }
    }
    out_ += '"';
  }

  std::string out_;
  std::vector<bool> first_;
  bool after_key_ = false;
};

}  // namespace memo
