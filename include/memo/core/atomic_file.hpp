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
// FIFO that no process reads is an error, not a wait. A name for one of the
// process's own descriptors (/dev/stdout, /dev/fd/N, /proc/self/fd/N) is
// written through that descriptor, after what was printed to it before; a
// name for another process's descriptor (/proc/<pid>/fd/N) that leads to a
// regular file is appended to, never replaced. A symbolic link at the target is written
// through: the real file is replaced, the link stays. An existing target
// keeps its permission bits (and its owner where the process may set it),
// and one the process may not write is an error, not silently replaced.
// Checkpoints, token files and Chrome traces are written through it.
//
// `names_same_file` and `names_standard_output` let a command line refuse
// two outputs that are one file, or an output that is its own report.
#pragma once

#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <system_error>

#include <fcntl.h>     // open, fcntl (POSIX)
#include <sys/stat.h>  // stat, fchmod (POSIX)
#include <unistd.h>    // fsync, close, getpid, access, fchown (POSIX)

#include "memo/core/error.hpp"
#include "memo/core/text.hpp"

namespace memo {

namespace detail {

inline std::string errno_text(int code) { return std::generic_category().message(code); }

/// A path in quotes as error messages show it (shown_path: control bytes
/// escaped, cut past 256 characters).
inline std::string quoted(const std::filesystem::path& path) { return "'" + shown_path(path) + "'"; }

/// `path` made absolute with "." and ".." resolved by name (no link
/// followed); nullopt when the working directory cannot be read.
inline std::optional<std::filesystem::path> lexically_absolute(const std::filesystem::path& path) {
  std::error_code ec;
  auto normal = std::filesystem::absolute(path, ec).lexically_normal();
  if (ec) return std::nullopt;
  return normal;
}

/// A name for a descriptor some process already has open (/dev/stdout,
/// /dev/stderr, /dev/fd/N, /proc/<pid>/fd/N): a stream, never a file to
/// replace, even when it leads to one.
inline bool is_stream_path(const std::filesystem::path& path) {
  const auto normal = lexically_absolute(path);
  if (!normal) return false;
  const std::string text = normal->string(), parent = normal->parent_path().string();
  return text == "/dev/stdout" || text == "/dev/stderr" || parent == "/dev/fd" ||
         (text.starts_with("/proc/") && normal->parent_path().filename() == "fd");
}

/// The descriptor of this process that `path` names (/dev/stdout 1,
/// /dev/stderr 2, /dev/fd/N and /proc/self/fd/N N), when it is open for
/// writing; nullopt for any other path.
inline std::optional<int> own_descriptor(const std::filesystem::path& path) {
  const auto normal = lexically_absolute(path);
  if (!normal) return std::nullopt;
  const std::string text = normal->string(), parent = normal->parent_path().string();
  std::optional<int> fd;
  if (text == "/dev/stdout") fd = 1;
  if (text == "/dev/stderr") fd = 2;
  if (parent == "/dev/fd" || parent == "/proc/self/fd" || parent == "/proc/" + std::to_string(::getpid()) + "/fd") {
    const std::string name = normal->filename().string();
    int n = 0;
    const auto [end, err] = std::from_chars(name.data(), name.data() + name.size(), n);
    if (err == std::errc{} && end == name.data() + name.size() && !name.empty()) fd = n;
  }
  if (!fd) return std::nullopt;
  const int flags = ::fcntl(*fd, F_GETFL);
  if (flags < 0 || (flags & O_ACCMODE) == O_RDONLY) return std::nullopt;
  return fd;
}

}  // namespace detail

/// Whether output paths `a` and `b` name one file: the same existing file
/// (through hard or symbolic links, /proc/self/fd included) or, for names
/// not yet created, the same absolute path once ".", ".." and the links of
/// existing directories are resolved ("c.bin", "./c.bin" and "/tmp/c.bin"
/// run from /tmp). A device is never "the same" as anything: /dev/null may
/// take any number of outputs. Empty paths name nothing.
inline bool names_same_file(const std::filesystem::path& a, const std::filesystem::path& b) {
  if (a.empty() || b.empty()) return false;
  std::error_code ec;
  if (std::filesystem::is_character_file(a, ec) || std::filesystem::is_block_file(a, ec)) return false;
  if (std::filesystem::equivalent(a, b, ec)) return true;
  std::error_code ea, eb;
  const auto ca = std::filesystem::weakly_canonical(std::filesystem::absolute(a, ea), ea);
  const auto cb = std::filesystem::weakly_canonical(std::filesystem::absolute(b, eb), eb);
  return !ea && !eb && ca == cb;
}

/// Whether writing `path` would write into this process's standard output
/// (/dev/stdout, /proc/self/fd/1, or the file or pipe stdout was redirected
/// to), so a report printed there would be mixed with the file. /dev/null
/// is never the report's place, whatever stdout is.
inline bool names_standard_output(const std::filesystem::path& path) {
  struct ::stat out {}, target {}, null {};
  if (path.empty() || ::fstat(STDOUT_FILENO, &out) != 0 || ::stat(path.c_str(), &target) != 0) return false;
  if (S_ISCHR(target.st_mode) && ::stat("/dev/null", &null) == 0 && null.st_rdev == target.st_rdev) return false;
  return out.st_dev == target.st_dev && out.st_ino == target.st_ino;
}

/// Writes a file so that it either appears complete or not at all (see the
/// top of this header). Call `commit()` after the last write; destroying an
/// uncommitted writer discards what was written.
class atomic_file_writer {
 public:
  explicit atomic_file_writer(std::filesystem::path target) : target_(std::move(target)), path_(target_) {
    std::error_code ec;
    const auto status = std::filesystem::status(target_, ec);
    if (const auto fd = detail::own_descriptor(target_)) {
      // Through a duplicate of the descriptor itself, so the bytes go where
      // the process's own writes to it go (sharing its offset): after what
      // was printed before, which is flushed first.
      std::fflush(nullptr);
      const int copy = ::dup(*fd);
      if (copy < 0 || (file_ = ::fdopen(copy, "wb")) == nullptr) {
        const int code = errno;
        if (copy >= 0) ::close(copy);
        throw error(detail::quoted(target_) + ": cannot write to descriptor " + std::to_string(*fd) + ": " +
                    detail::errno_text(code));
      }
      in_place_ = true;
      return;
    }
    if (detail::is_stream_path(target_) && std::filesystem::is_regular_file(status)) {
      in_place_ = true;
      open_or_throw(target_, "ab");
      return;
    }
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
    // Through a symbolic link: the file it leads to is the one replaced.
    if (std::filesystem::is_symlink(std::filesystem::symlink_status(target_, ec))) {
      std::error_code resolved;
      const auto real = std::filesystem::weakly_canonical(std::filesystem::absolute(target_, resolved), resolved);
      if (resolved) {
        throw error(detail::quoted(target_) + ": is a symbolic link that cannot be followed: " + resolved.message());
      }
      path_ = real;
    }
    struct ::stat existing {};
    const bool replacing = ::stat(path_.c_str(), &existing) == 0;
    if (replacing && ::access(path_.c_str(), W_OK) != 0) {
      throw error(detail::quoted(target_) + ": cannot replace it: " + detail::errno_text(errno));
    }
    // A fresh name in the same directory (so the rename stays on one file
    // system), short enough for any name the target may have; "x" refuses
    // to reuse a name someone else just created.
    static std::atomic<std::uint64_t> counter{0};
    const auto stamp = static_cast<std::uint64_t>(
        std::chrono::steady_clock::now().time_since_epoch().count());
    const std::string stem = path_.filename().string().substr(0, 64);
    for (int attempt = 0; attempt < 16; ++attempt) {
      const std::uint64_t n = stamp ^ (counter.fetch_add(1) * 0x9e3779b97f4a7c15ull) ^
                              static_cast<std::uint64_t>(::getpid());
      temporary_ = path_.parent_path() / ("." + stem + ".tmp-" + std::to_string(n % 1000000007u));
      file_ = std::fopen(temporary_.c_str(), "wbx");
      if (file_ != nullptr) {
        if (replacing) {
          // The replacement takes the old file's permissions; its owner
          // only where the process may give it (root, or the same owner).
          const int fd = ::fileno(file_);
          (void)!::fchown(fd, existing.st_uid, existing.st_gid);
          if (::fchmod(fd, existing.st_mode & 07777) != 0) {
            const int code = errno;
            discard();
            throw error(detail::quoted(target_) + ": cannot give the replacement its permissions: " +
                        detail::errno_text(code));
          }
        }
        return;
      }
      if (errno != EEXIST) break;
    }
    const int code = errno;
    const std::filesystem::path tried = temporary_;
    temporary_.clear();
    throw error(detail::quoted(target_) + ": cannot create a temporary file " + detail::quoted(tried) +
                " beside it: " + detail::errno_text(code));
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
    std::filesystem::rename(temporary_, path_, ec);
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

  std::filesystem::path target_;  // as given (messages)
  std::filesystem::path path_;    // the file replaced: target_, or where its link leads
  std::filesystem::path temporary_;
  std::FILE* file_ = nullptr;
  std::uint64_t written_ = 0;
  bool in_place_ = false;
};

}  // namespace memo
