// Shared by the checkpoint, token-file and built-in data tests: a scratch
// directory removed at the end of the test, raw file bytes, and the message
// of the memo::error an action raises.
#pragma once

#include <sys/resource.h>

#include <atomic>
#include <csignal>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "memo/core/error.hpp"

namespace memo_test {

class scratch_directory {
 public:
  scratch_directory() {
    static std::atomic<int> counter{0};
    const auto stamp = std::chrono::steady_clock::now().time_since_epoch().count();
    path_ = std::filesystem::temp_directory_path() /
            ("memo_io_test_" + std::to_string(stamp) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  scratch_directory(const scratch_directory&) = delete;
  scratch_directory& operator=(const scratch_directory&) = delete;
  ~scratch_directory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  [[nodiscard]] std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }
  /// Names of the entries in the directory, to see that no temporary remains.
  [[nodiscard]] std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(path_)) {
      names.push_back(e.path().filename().string());
    }
    return names;
  }

 private:
  std::filesystem::path path_;
};

inline std::vector<unsigned char> file_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const std::filesystem::path& path, const std::vector<unsigned char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

/// Little-endian int32 at byte `offset` of `bytes` (an independent decoder).
inline std::int32_t int32_at(const std::vector<unsigned char>& bytes, std::size_t offset) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | bytes.at(offset + static_cast<std::size_t>(i));
  return static_cast<std::int32_t>(v);
}

inline void set_int32_at(std::vector<unsigned char>& bytes, std::size_t offset, std::int32_t value) {
  auto v = static_cast<std::uint32_t>(value);
  for (int i = 0; i < 4; ++i) bytes.at(offset + static_cast<std::size_t>(i)) = static_cast<unsigned char>(v >> (8 * i));
}

/// The message of the memo::error `action` throws, or "" when it throws none.
template <class Action>
std::string error_of(Action&& action) {
  try {
    action();
  } catch (const memo::error& e) {
    return e.message();
  }
  return "";
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// Caps the size of files this process may write (RLIMIT_FSIZE) for the scope,
/// so a write past the cap fails with EFBIG (SIGXFSZ ignored) like a full disk.
class file_size_cap {
 public:
  explicit file_size_cap(rlim_t bytes) {
    previous_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    getrlimit(RLIMIT_FSIZE, &previous_);
    rlimit capped = previous_;
    capped.rlim_cur = bytes;
    ok_ = setrlimit(RLIMIT_FSIZE, &capped) == 0;
  }
  file_size_cap(const file_size_cap&) = delete;
  file_size_cap& operator=(const file_size_cap&) = delete;
  ~file_size_cap() {
    setrlimit(RLIMIT_FSIZE, &previous_);
    std::signal(SIGXFSZ, previous_handler_);
  }
  [[nodiscard]] bool ok() const { return ok_; }

 private:
  rlimit previous_{};
  void (*previous_handler_)(int) = nullptr;
  bool ok_ = false;
};

}  // namespace memo_test
