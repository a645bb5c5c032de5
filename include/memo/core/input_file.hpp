// memo/core/input_file.hpp
//
// What an input path names, asked before the file is opened. Opening a
// FIFO for reading blocks until a writer appears, and a character device
// may never end, so an input that must be a file (a profile, a checkpoint,
// a token file) is checked with stat() first, which never blocks: anything
// but a regular file is refused with an error naming the path and what it
// is instead. (Trace files for memo-plan may be FIFOs on purpose: a trace
// can be piped in; plan/text_input.hpp bounds what it reads instead.)
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

#include "memo/core/error.hpp"
#include "memo/core/text.hpp"

namespace memo {

/// What stat() says a path is, for an input that must be a regular file.
struct input_file_status {
  enum class kind { regular, missing, directory, not_regular, uninspectable };
  kind what = kind::regular;
  /// For a message: "" (regular), "does not exist", "is a directory",
  /// "is a FIFO (named pipe)", ..., "cannot be inspected: <reason>".
  std::string problem;

  [[nodiscard]] bool ok() const noexcept { return what == kind::regular; }
};

namespace detail {

/// "a directory", "a FIFO (named pipe)", ... for a message.
inline std::string_view file_type_text(std::filesystem::file_type type) {
  using std::filesystem::file_type;
  switch (type) {
    case file_type::regular: return "a regular file";
    case file_type::directory: return "a directory";
    case file_type::symlink: return "a symbolic link";
    case file_type::block: return "a block device";
    case file_type::character: return "a character device";
    case file_type::fifo: return "a FIFO (named pipe)";
    case file_type::socket: return "a socket";
    default: return "of an unknown file type";
  }
}

}  // namespace detail

/// What `path` (symbolic links followed) is. Never opens the file.
inline input_file_status inspect_input_file(const std::filesystem::path& path) {
  using kind = input_file_status::kind;
  std::error_code ec;
  const auto type = std::filesystem::status(path, ec).type();
  if (type == std::filesystem::file_type::not_found) return {kind::missing, "does not exist"};
  if (ec) return {kind::uninspectable, "cannot be inspected: " + ec.message()};
  if (type == std::filesystem::file_type::regular) return {kind::regular, {}};
  if (type == std::filesystem::file_type::directory) return {kind::directory, "is a directory"};
  return {kind::not_regular, "is " + std::string(detail::file_type_text(type))};
}

/// Throws a memo::error unless `path` is a regular file: "<what> '<path>'
/// is a FIFO (named pipe), not a regular file". Never opens the file.
inline void require_regular_file(const std::filesystem::path& path, std::string_view what) {
  const input_file_status status = inspect_input_file(path);
  if (status.ok()) return;
  const bool is_something_else =
      status.what == input_file_status::kind::directory || status.what == input_file_status::kind::not_regular;
  throw error(std::string(what) + " '" + detail::quote(path.string()) + "' " + status.problem +
              (is_something_else ? ", not a regular file" : ""));
}

}  // namespace memo
