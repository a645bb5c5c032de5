// memo/plan/text_input.hpp
//
// Reading and writing the planner's text files (MEMO section 4.2): the
// pieces the request-trace parser, the DSA CSV parser and the plan CSV
// parser share. Every input error is a `memo::error` whose message starts
// with `<source>:<line>: `; a token echoed in a message is cut to 64
// characters and its control bytes are escaped, so a malformed or hostile
// input cannot flood or garble a terminal. Limits: a file larger than
// `parse_options::max_input_bytes` and an input of more than
// `parse_options::max_buffers` buffers are errors naming the limit, so an
// endless stream (a pipe, /dev/zero) or a runaway input cannot eat memory
// without bound. A UTF-8 byte-order mark at the start of the text is
// skipped. Reads and writes check every call, the close included: a full
// disk or a directory given as a file is an error, never an empty result.
#pragma once

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "memo/core/bytes.hpp"
#include "memo/core/error.hpp"
#include "memo/core/text.hpp"
#include "memo/plan/dsa_problem.hpp"

namespace memo {

/// Options shared by the parsers.
struct parse_options {
  /// Checked against the lower bound once the whole input is read.
  std::optional<std::uint64_t> capacity_bytes;
  /// A file larger than this is refused before it is read to the end.
  std::uint64_t max_input_bytes = std::uint64_t{1} << 30;
  /// An input (or a stacked model) with more buffers is refused.
  std::size_t max_buffers = std::size_t{1} << 24;
};

namespace detail {

inline std::string_view trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(" \t\r\n");
  return text.substr(first, last - first + 1);
}

inline std::vector<std::string_view> split_words(std::string_view text) {
  std::vector<std::string_view> words;
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
    std::size_t j = i;
    while (j < text.size() && text[j] != ' ' && text[j] != '\t') ++j;
    if (j > i) words.push_back(text.substr(i, j - i));
    i = j;
  }
  return words;
}

/// Raises "<source>:<line>: <reason>"; line 0 means "no particular line".
[[noreturn]] inline void input_error(std::string_view source, std::size_t line,
                                     const std::string& reason) {
  std::string text(source);
  if (line > 0) text += ":" + std::to_string(line);
  text += ": " + reason;
  throw error(text);
}



/// A byte count with an optional binary unit suffix; nullopt when malformed
/// or out of range. A leading '-' is reported by the caller as a negative size.
inline std::optional<std::uint64_t> parse_bytes(std::string_view text) {
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0) return std::nullopt;
  const auto number = parse_integer<std::uint64_t>(text.substr(0, digits));
  if (!number) return std::nullopt;
  const std::string_view unit = text.substr(digits);
  std::uint64_t scale = 1;
  if (unit.empty() || unit == "B") {
    scale = 1;
  } else if (unit == "KiB") {
    scale = std::uint64_t{1} << 10;
  } else if (unit == "MiB") {
    scale = std::uint64_t{1} << 20;
  } else if (unit == "GiB") {
    scale = std::uint64_t{1} << 30;
  } else if (unit == "TiB") {
    scale = std::uint64_t{1} << 40;
  } else {
    return std::nullopt;
  }
  if (*number > std::numeric_limits<std::uint64_t>::max() / scale) return std::nullopt;
  return *number * scale;
}


/// Whether `text` is written as a byte count (digits, then an optional
/// unit), whatever its value: what tells "too large" from "malformed".
inline bool is_byte_count_syntax(std::string_view text) {
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  const std::string_view unit = text.substr(digits);
  return digits > 0 && (unit.empty() || unit == "B" || unit == "KiB" || unit == "MiB" || unit == "GiB" ||
                        unit == "TiB");
}

/// Why `text` is not a byte count: too large for 64 bits, or malformed.
inline std::string bytes_problem(std::string_view text) {
  if (is_byte_count_syntax(text)) {
    return "size '" + quote(text) + "' is not a byte count that fits in 64 bits (at most " +
           std::to_string(std::numeric_limits<std::uint64_t>::max()) + " bytes)";
  }
  return "size '" + quote(text) + "' is not a byte count (digits, optionally KiB/MiB/GiB/TiB)";
}

inline void check_capacity(const dsa_problem& problem, std::string_view source) {
  if (!problem.capacity_bytes) return;
  const auto bound = lower_bound_bytes(problem);
  if (*problem.capacity_bytes < bound) {
    input_error(source, 0,
                "capacity " + std::to_string(*problem.capacity_bytes) +
                    " bytes is below the lower bound " + std::to_string(bound) +
                    " bytes (the most bytes live at one instant)");
  }
}


/// Raises "<source>: <reason>" when the problem breaks the limits every
/// solver relies on (`require_representable`).
inline void check_representable(const dsa_problem& problem, std::string_view source) {
  try {
    require_representable(problem);
  } catch (const error& e) {
    input_error(source, 0, e.message());
  }
}

/// Reads `file` to its end into `text`, refusing more than `limit_bytes`
/// (`source` names it in the error). A regular file is reserved once at
/// its size (refused before any read when it is over the limit). A stream
/// of unknown length (a pipe, /dev/zero) is reserved at the limit plus one
/// byte, but at most the default limit's (2^30 + 1; only what is read is
/// touched), and grows geometrically from there up to the limit: so with
/// the default limit an endless stream costs the limit in memory, not the
/// doubling of a growing string, and a huge limit is not asked for at
/// once. At most `limit_bytes + 1` bytes are read. Read errors name the
/// system's reason.
inline void read_bounded(std::FILE* file, std::string_view source, std::uint64_t limit_bytes,
                         std::string& text) {
  const auto too_large = [&] {
    return error(std::string(source) + ": input is larger than the limit of " + std::to_string(limit_bytes) +
                 " bytes (parse_options::max_input_bytes)");
  };
  text.clear();
  // One more than the limit is read to tell "exactly the limit" from "more".
  const std::uint64_t wanted = limit_bytes == std::numeric_limits<std::uint64_t>::max() ? limit_bytes : limit_bytes + 1;
  struct stat info {};
  std::uint64_t reserve = std::min<std::uint64_t>(wanted, parse_options{}.max_input_bytes + 1);
  if (::fstat(::fileno(file), &info) == 0 && S_ISREG(info.st_mode)) {
    const auto size = static_cast<std::uint64_t>(info.st_size);
    if (size > limit_bytes) throw too_large();
    reserve = size + 1;  // a file still growing is cut at the limit below
  }
  if (reserve > text.max_size()) reserve = text.max_size();
  text.reserve(static_cast<std::size_t>(reserve));
  char chunk[1 << 16];
  while (text.size() < wanted) {
    const auto room = std::min<std::uint64_t>(sizeof chunk, wanted - text.size());
    const std::size_t got = std::fread(chunk, 1, static_cast<std::size_t>(room), file);
    if (got == 0) break;
    if (text.size() + got > text.capacity()) {
      // A stream past the first reservation, or a regular file that grew
      // while read: double, up to the limit.
      const std::uint64_t doubled = std::min<std::uint64_t>(wanted, 2 * static_cast<std::uint64_t>(text.capacity()));
      text.reserve(static_cast<std::size_t>(std::max<std::uint64_t>(doubled, text.size() + got)));
    }
    text.append(chunk, got);
  }
  if (text.size() > limit_bytes) throw too_large();
  if (std::ferror(file) != 0) {
    const int code = errno;
    throw error(std::string(source) + ": read error: " + std::strerror(code));
  }
}

/// The whole file, refusing directories, read errors and files larger than
/// `limit_bytes` (see `read_bounded`).
inline std::string read_whole_file(const std::filesystem::path& path,
                                   std::uint64_t limit_bytes = parse_options{}.max_input_bytes) {
  const std::string name = shown_path(path);
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw error(name + ": is a directory, not a trace file");
  }
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    const int code = errno;
    throw error(name + ": cannot open file for reading: " + std::strerror(code));
  }
  std::string text;
  try {
    read_bounded(file, name, limit_bytes, text);
  } catch (...) {
    std::fclose(file);
    throw;
  }
  std::fclose(file);
  return text;
}

/// Calls `fn(line_number, line_without_comment)` for every non-blank line;
/// a UTF-8 byte-order mark at the very start is skipped. Lines end with
/// "\n" or "\r\n", and with `lone_cr_ends_lines` also with a lone "\r"
/// (old Mac files; not for formats whose names may hold one).
template <class Fn>
void for_each_line(std::string_view text, Fn&& fn, bool lone_cr_ends_lines = false) {
  if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);
  std::size_t line_number = 0;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const auto newline = text.find_first_of(lone_cr_ends_lines ? "\r\n" : "\n", pos);
    const auto stop = newline == std::string_view::npos ? text.size() : newline;
    ++line_number;
    std::string_view line = text.substr(pos, stop - pos);
    if (const auto hash = line.find('#'); hash != std::string_view::npos) {
      line = line.substr(0, hash);
    }
    line = trim(line);
    if (!line.empty()) fn(line_number, line);
    if (newline == std::string_view::npos) break;
    pos = newline + (text[newline] == '\r' && text.substr(newline, 2) == "\r\n" ? 2 : 1);
  }
}

}  // namespace detail

/// Writes `text` to `path`; every write, the flush and the close are
/// checked, so a full disk is an error rather than a truncated file.
inline void write_text_file(const std::filesystem::path& path, std::string_view text) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) {
    const int code = errno;
    throw error(detail::shown_path(path) + ": cannot open file for writing: " + std::strerror(code));
  }
  const bool wrote = std::fwrite(text.data(), 1, text.size(), file) == text.size();
  const bool flushed = std::fflush(file) == 0;
  const int code = errno;
  const bool closed = std::fclose(file) == 0;
  if (!wrote || !flushed || !closed) {
    throw error(detail::shown_path(path) + ": write error: " + std::strerror(wrote && flushed ? errno : code) +
                " (" + std::to_string(text.size()) + " bytes not all written)");
  }
}

}  // namespace memo
