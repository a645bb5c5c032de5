// memo/core/command_line.hpp
//
// What the command lines of memo's programs (tools, benches, examples) do
// alike, written once:
//
//   - `command_arguments` reads argv one option at a time; an option's
//     value is read as a bounded integer or number, and a missing,
//     malformed or out-of-range value, or an unknown option, is a
//     `usage_error` naming the option, the value (quoted: control and
//     non-ASCII bytes escaped) and the bound it broke;
//   - `--help`, where a program does not read it itself, prints the usage
//     text on stdout (exit status 0);
//   - `run_command` runs a program's body and gives one exit status per
//     outcome: 0 done, 1 the run failed (stderr: "<tool>: error: <why>",
//     a memo::error's message without where it was raised),
//     2 a usage error (stderr: "<tool>: <why>" and the usage text); an
//     exception never escapes main, and a report that did not reach
//     stdout makes the status 1 (`finish_report`).
#pragma once

#include <cstdint>
#include <cstdio>
#include <exception>
#include <initializer_list>
#include <limits>
#include <optional>
#include <source_location>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "memo/core/error.hpp"
#include "memo/core/report_output.hpp"
#include "memo/core/text.hpp"

namespace memo {

/// A command line that does not say what a program accepts (exit status 2).
class usage_error : public error {
 public:
  // Written out, not inherited: nvcc's front end fails on an inherited
  // constructor whose default argument is std::source_location::current().
  explicit usage_error(std::string message, std::source_location where = std::source_location::current())
      : error(std::move(message), where) {}
};

/// `--help` where a program takes no such option: `run_command` prints the
/// usage text on stdout and exits 0.
class help_request : public std::exception {
 public:
  [[nodiscard]] const char* what() const noexcept override { return "--help"; }
};

/// `text`, the value of `option`, as an integer in [low, high]; else a
/// usage_error naming the option, the value and the bounds.
template <class Int>
Int integer_option(std::string_view option, std::string_view text, Int low,
                   Int high = std::numeric_limits<Int>::max()) {
  const std::optional<Int> v = detail::parse_integer<Int>(text);
  if (!v || *v < low || *v > high) {
    throw usage_error(std::string(option) + " '" + detail::quote(text) + "' is not an integer in [" +
                      std::to_string(low) + ", " + std::to_string(high) + "]");
  }
  return *v;
}

/// argv after the program's name, one option at a time.
class command_arguments {
 public:
  command_arguments(int argc, char** argv) : argc_(argc), argv_(argv) {}

  /// Whether every argument has been read.
  [[nodiscard]] bool done() const { return next_ >= argc_; }

  /// The next argument (the option the value readers below belong to).
  std::string_view next() {
    expects(!done(), "command_arguments: next() past the last argument");
    option_ = argv_[next_++];
    return option_;
  }

  /// The value following the current option.
  std::string_view value() {
    if (done()) throw usage_error(std::string(option_) + " needs a value");
    return argv_[next_++];
  }

  /// The value as an integer in [low, high].
  template <class Int>
  Int integer(Int low, Int high = std::numeric_limits<Int>::max()) {
    const std::string_view text = value();
    return integer_option<Int>(option_, text, low, high);
  }

  /// The value as a decimal number in [low, high] (no infinity or NaN).
  double number(double low, double high = std::numeric_limits<double>::max()) {
    const std::string_view text = value();
    const std::optional<double> v = detail::parse_decimal(text);
    if (!v) throw usage_error(std::string(option_) + " " + detail::decimal_problem(text));
    if (*v < low || *v > high) {
      throw usage_error(std::string(option_) + " '" + detail::quote(text) + "' is not a number in [" +
                        detail::shortest(low) + ", " + detail::shortest(high) + "]");
    }
    return *v;
  }

  /// For a program whose one option is `flag`: whether it was given (a
  /// usage error for any other argument).
  bool only(std::string_view flag) {
    bool given = false;
    while (!done()) {
      if (next() != flag) unknown();
      given = true;
    }
    return given;
  }

  /// For a program that takes no arguments: a usage error naming the first, if any.
  void none() {
    if (done()) return;
    (void)next();
    unknown();
  }

  /// A usage error for the current argument, which the program does not
  /// know (a help_request for `--help`).
  [[noreturn]] void unknown() const {
    if (option_ == "--help") throw help_request{};
    throw usage_error("unknown argument '" + detail::quote(option_) + "'");
  }

 private:
  int argc_;
  char** argv_;
  int next_ = 1;
  std::string_view option_;
};

/// Integer options that each set one field of a `Shape` (a bench's sizes):
/// read in any order, and applied over a base chosen once every option is
/// read (so `--quick` may come before or after them).
template <class Shape>
class shape_options {
 public:
  using field = int Shape::*;

  /// Each option's name and field; every value must lie in [low, high].
  shape_options(std::initializer_list<std::pair<std::string_view, field>> fields, int low, int high)
      : fields_(fields), low_(low), high_(high) {}

  /// Reads the value of `option` (the argument `args` just gave) when it
  /// names a field; false when it names none.
  bool read(command_arguments& args, std::string_view option) {
    for (const auto& [name, f] : fields_) {
      if (name != option) continue;
      given_.emplace_back(f, args.integer<int>(low_, high_));
      return true;
    }
    return false;
  }

  /// `base` with every field given, the last value of each.
  [[nodiscard]] Shape applied(Shape base) const {
    for (const auto& [f, value] : given_) base.*f = value;
    return base;
  }

 private:
  std::vector<std::pair<std::string_view, field>> fields_;
  int low_, high_;
  std::vector<std::pair<field, int>> given_;
};

/// Runs `body` (returning the exit status) as a program's main (see the
/// header comment): `usage` is printed after a usage error's message.
template <class Body>
int run_command(std::string_view tool, std::string_view usage, Body&& body) noexcept {
  report_broken_pipes();
  int status = 1;
  try {
    status = body();
  } catch (const help_request&) {
    std::fwrite(usage.data(), 1, usage.size(), stdout);
    status = 0;
  } catch (const usage_error& e) {
    std::fprintf(stderr, "%.*s: %s\n%.*s", static_cast<int>(tool.size()), tool.data(), e.message().c_str(),
                 static_cast<int>(usage.size()), usage.data());
    status = 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%.*s: error: %s\n", static_cast<int>(tool.size()), tool.data(), message_of(e).c_str());
    status = 1;
  } catch (...) {
    std::fprintf(stderr, "%.*s: error: an exception that is not a std::exception\n", static_cast<int>(tool.size()),
                 tool.data());
    status = 1;
  }
  return finish_report(tool, status);
}

}  // namespace memo
