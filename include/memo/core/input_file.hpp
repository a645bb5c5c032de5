// memo/core/input_file.hpp
//
// What an input path names, asked before the file is opened. Opening a
// FIFO for reading blocks until a writer appears, and a character device
// may never end, so an input that must be a file (a profile, a trace) is
// checked with stat() first, which never blocks: anything but a regular
// file is refused with an error naming the path and what it is instead.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

#include "memo/core/error.hpp"
#include "memo/core/text.hpp"

namespace memo {

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
    case file_type::not_found: return "missing";
    default: return "not a regular file";
  }
}

}  // namespace detail

/// Why `path` (symbolic links followed) is not a regular file to read: an
/// empty string when it is one, else "does not exist", "is a directory",
/// "is a FIFO (named pipe)", ... Never opens the file.
inline std::string regular_file_problem(const std::filesystem::path& path) {
  std::error_code ec;
  const auto type = std::filesystem::status(path, ec).type();
  if (type == std::filesystem::file_type::not_found) return "does not exist";
  if (ec) return "cannot be inspected: " + ec.message();
  if (type == std::filesystem::file_type::regular) return {};
  return "is " + std::string(detail::file_type_text(type));
}

/// Throws a memo::error unless `path` is a regular file: "<what> '<path>'
/// is a FIFO (named pipe), not a regular file". Never opens the file.
inline void require_regular_file(const std::filesystem::path& path, std::string_view what) {
  const std::string problem = regular_file_problem(path);
  if (problem.empty()) return;
  throw error(std::string(what) + " '" + detail::quote(path.string()) + "' " + problem +
              (problem.starts_with("is ") ? ", not a regular file" : ""));
}

}  // namespace memo
