// memo/core/error.hpp
//
// One exception type for the whole library.
//
// Every failure that reaches a user is a `memo::error`: bad input (a trace
// line that does not parse, a capacity below the lower bound), an infeasible
// request (a host budget too small even for alpha = 0), or a status code from
// a library memo calls (CUDA, NCCL, MPI, lp_solve). The error carries the
// message, the source location of the check that raised it and, for foreign
// status codes, the code and the name of the library it came from, so a
// caller can both print it and act on it.
//
// Library code never calls exit() or abort(); it throws this.
#pragma once

#include <optional>
#include <source_location>
#include <stdexcept>
#include <string>
#include <string_view>

namespace memo {

class error : public std::runtime_error {
 public:
  /// An error raised by memo itself.
  explicit error(std::string message,
                 std::source_location where = std::source_location::current())
      : std::runtime_error(format(message, where, {}, {})),
        message_(std::move(message)),
        where_(where) {}

  /// An error carrying a status code of a foreign library ("cuda", "nccl",
  /// "mpi", "lp_solve"), raised where that library was called.
  error(std::string message, std::string_view domain, long status,
        std::source_location where = std::source_location::current())
      : std::runtime_error(format(message, where, domain, status)),
        message_(std::move(message)),
        where_(where),
        domain_(domain),
        status_(status) {}

  /// The message without the location prefix.
  [[nodiscard]] const std::string& message() const noexcept { return message_; }
  [[nodiscard]] const std::source_location& where() const noexcept { return where_; }
  /// The library the status code belongs to; empty for memo's own errors.
  [[nodiscard]] std::string_view domain() const noexcept { return domain_; }
  /// The foreign status code, if any.
  [[nodiscard]] std::optional<long> status() const noexcept { return status_; }

 private:
  static std::string format(const std::string& message, const std::source_location& where,
                            std::string_view domain, std::optional<long> status) {
    std::string text = where.file_name();
    text += ':';
    text += std::to_string(where.line());
    text += ": ";
    text += message;
    if (status) {
      text += " [";
      text += domain;
      text += " status ";
      text += std::to_string(*status);
      text += ']';
    }
    return text;
  }

  std::string message_;
  std::source_location where_;
  std::string_view domain_;
  std::optional<long> status_;
};

/// What a user is shown of `e`: a memo::error's message (and a foreign
/// library's status), without where memo raised it; another exception's
/// what().
inline std::string message_of(const std::exception& e) {
  const auto* raised = dynamic_cast<const error*>(&e);
  if (raised == nullptr) return e.what();
  std::string text = raised->message();
  if (raised->status()) {
    text += " [" + std::string(raised->domain()) + " status " + std::to_string(*raised->status()) + "]";
  }
  return text;
}

/// A count (bytes, elements, a cost) that does not fit the integer that
/// holds it: the input is too large to count, not malformed. Code that
/// weighs many candidates (memo-project's settings) sets the one that threw
/// aside and goes on with the others.
class count_overflow : public error {
 public:
  explicit count_overflow(std::string message, std::source_location where = std::source_location::current())
      : error(std::move(message), where) {}
};

/// Throws `memo::count_overflow(message)` when `condition` is false.
template <class MessageFn>
  requires std::is_invocable_r_v<std::string, MessageFn>
inline void expects_countable(bool condition, MessageFn&& message,
                              std::source_location where = std::source_location::current()) {
  if (!condition) throw count_overflow(message(), where);
}

/// Throws `memo::error(message)` when `condition` is false. The message is
/// only built on failure when passed as a callable returning a string.
inline void expects(bool condition, std::string_view message,
                    std::source_location where = std::source_location::current()) {
  if (!condition) throw error(std::string(message), where);
}

template <class MessageFn>
  requires std::is_invocable_r_v<std::string, MessageFn>
inline void expects(bool condition, MessageFn&& message,
                    std::source_location where = std::source_location::current()) {
  if (!condition) throw error(message(), where);
}

}  // namespace memo
