// memo/core/atomic_file.hpp
//
// `atomic_file_writer` writes a file so that it appears complete or not at
// all: it writes to a new temporary file in the target's directory and
// renames it over the target only after every write, the flush, the sync to
// disk and the close succeeded. A failed or abandoned write (a full disk, a
// size limit, an exception in between) removes the temporary file and
// leaves an existing target exactly as it was. A target that exists and is
// a device (such as /dev/full or /dev/null) or a FIFO cannot be replaced by
// a rename and is written in place; its failures are still reported, and a
// FIFO that no process reads is an error, not a wait. A symbolic link at
// the target is replaced, not written through. Checkpoints, token files and
// Chrome traces are written through it.
#pragma once

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <span>
#include <string>
#include <system_error>

#include <fcntl.h>   // open, fcntl (POSIX)
#include <unistd.h>  // fsync, close, getpid (POSIX)

#include "memo/core/error.hpp"

namespace memo {

namespace detail {

inline std::string errno_text(int code) { return std::generic_category().message(code); }

inline std::string quoted(const std::filesystem::path& path) { return "'" + path.string() + "'"; }

}  // namespace detail

/// Writes a file so that it either appears complete or not at all (see the
/// top of this header). Call `commit()` after the last write; destroying an
/// uncommitted writer discards what was written.
class atomic_file_writer {
 public:
  explicit atomic_file_writer(std::filesystem::path target) : target_(std::move(target)) {
    std::error_code ec;
    const auto status = std::filesystem::status(target_, ec);
    in_place_ = std::filesystem::exists(status) && !std::filesystem::is_regular_file(status);
    if (in_place_) {
      if (std::filesystem::is_directory(status)) {
        throw error(detail::quoted(target_) + ": is a directory, cannot write a file there");
      }
      // A socket cannot be opened as a file at all.
      if (std::filesystem::is_socket(status)) {
        throw error(detail::quoted(target_) + ": is a socket; write to a regular file, a device or a FIFO");
      }
      if (std::filesystem::is_fifo(status)) {
        open_fifo();
      } else {
        open_or_throw(target_, "wb");
      }
      return;
    }
    // A fresh name in the same directory (so the rename stays on one file
    // system); "x" refuses to reuse a name someone else just created.
    static std::atomic<std::uint64_t> counter{0};
    const auto stamp = static_cast<std::uint64_t>(
        std::chrono::steady_clock::now().time_since_epoch().count());
    for (int attempt = 0; attempt < 16; ++attempt) {
      const std::uint64_t n = stamp ^ (counter.fetch_add(1) * 0x9e3779b97f4a7c15ull) ^
                              static_cast<std::uint64_t>(::getpid());
      temporary_ = target_;
      temporary_ += ".tmp-" + std::to_string(n % 1000000007u);
      file_ = std::fopen(temporary_.c_str(), "wbx");
      if (file_ != nullptr) return;
      if (errno != EEXIST) break;
    }
    throw error(detail::quoted(target_) + ": cannot create a temporary file " +
                detail::quoted(temporary_) + " beside it: " + detail::errno_text(errno));
  }
  atomic_file_writer(const atomic_file_writer&) = delete;
  atomic_file_writer& operator=(const atomic_file_writer&) = delete;
  ~atomic_file_writer() { discard(); }

  [[nodiscard]] const std::filesystem::path& target() const noexcept { return target_; }
  [[nodiscard]] std::uint64_t written_bytes() const noexcept { return written_; }

  /// Appends `bytes`; a short write is an error naming the file and the cause.
  void write(std::span<const std::byte> bytes) {
    expects(file_ != nullptr, [&] {
      return detail::quoted(target_) + ": write after the file was committed or discarded";
    });
    if (bytes.empty()) return;
    const std::size_t put = std::fwrite(bytes.data(), 1, bytes.size(), file_);
    written_ += put;
    if (put != bytes.size()) {
      const int code = errno;
      discard();
      throw error(detail::quoted(target_) + ": write failed after " + std::to_string(written_) +
                  " bytes: " + detail::errno_text(code));
    }
  }

  /// Flushes, syncs and closes the file, then renames it over the target.
  void commit() {
    expects(file_ != nullptr, [&] {
      return detail::quoted(target_) + ": commit after the file was committed or discarded";
    });
    if (std::fflush(file_) != 0) fail_and_throw("flushing");
    // Devices such as /dev/null do not support fsync (EINVAL); only a real
    // file's data must reach the disk before the rename makes it visible.
    if (!in_place_ && ::fsync(::fileno(file_)) != 0) fail_and_throw("syncing to disk");
    std::FILE* f = file_;
    file_ = nullptr;
    if (std::fclose(f) != 0) {
      const int code = errno;
      remove_temporary();
      throw error(detail::quoted(target_) + ": closing after " + std::to_string(written_) +
                  " bytes failed: " + detail::errno_text(code));
    }
    if (in_place_) return;
    std::error_code ec;
    std::filesystem::rename(temporary_, target_, ec);
    if (ec) {
      remove_temporary();
      throw error(detail::quoted(target_) + ": cannot replace it with " +
                  detail::quoted(temporary_) + ": " + ec.message());
    }
    temporary_.clear();
  }

 private:
  // A FIFO (a named one, or a pipe reached through /dev/fd): opening it
  // blocking would wait for a reader for ever, so it is opened without
  // blocking, which fails at once when nobody reads, then made blocking.
  void open_fifo() {
    const int fd = ::open(target_.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd < 0) {
      const int code = errno;
      throw error(detail::quoted(target_) + ": is a FIFO " +
                  (code == ENXIO ? std::string("that no process is reading")
                                 : "that cannot be opened: " + detail::errno_text(code)));
    }
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0 || (file_ = ::fdopen(fd, "wb")) == nullptr) {
      const int code = errno;
      ::close(fd);
      throw error(detail::quoted(target_) + ": cannot write to the FIFO: " + detail::errno_text(code));
    }
  }

  void open_or_throw(const std::filesystem::path& path, const char* mode) {
    file_ = std::fopen(path.c_str(), mode);
    if (file_ == nullptr) {
      throw error(detail::quoted(path) + ": cannot open for writing: " + detail::errno_text(errno));
    }
  }

  [[noreturn]] void fail_and_throw(const char* doing) {
    const int code = errno;
    discard();
    throw error(detail::quoted(target_) + ": " + doing + " after " + std::to_string(written_) +
                " bytes failed: " + detail::errno_text(code));
  }

  void discard() noexcept {
    if (file_ != nullptr) {
      std::fclose(file_);
      file_ = nullptr;
    }
    remove_temporary();
  }

  void remove_temporary() noexcept {
    if (!temporary_.empty()) {
      std::error_code ignored;
      std::filesystem::remove(temporary_, ignored);
      temporary_.clear();
    }
  }

  std::filesystem::path target_;
  std::filesystem::path temporary_;
  std::FILE* file_ = nullptr;
  std::uint64_t written_ = 0;
  bool in_place_ = false;
};

}  // namespace memo
