// memo/model/binary_file.hpp
//
// Reading and writing the little binary files llm.c's ecosystem uses
// (checkpoints and token files: a 256 x int32 little-endian header, then
// packed little-endian values), with every failure a `memo::error` that names
// the file.
//
// Reading: `binary_file_reader` knows the file's size up front, so a header
// can be checked against it before a byte of payload is read, and a short
// read says how many bytes were missing.
//
// Writing: `atomic_file_writer` (core/atomic_file.hpp), complete or not at
// all.
#pragma once

#include <array>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>

#include "memo/core/atomic_file.hpp"
#include "memo/core/error.hpp"
#include "memo/core/input_file.hpp"

namespace memo {

/// llm.c's file header: 256 little-endian int32 values.
inline constexpr std::size_t llmc_header_ints = 256;
inline constexpr std::size_t llmc_header_bytes = llmc_header_ints * sizeof(std::int32_t);
using llmc_header = std::array<std::int32_t, llmc_header_ints>;

namespace detail {

template <class U>
  requires std::is_unsigned_v<U>
inline U load_little_endian(const std::byte* p) noexcept {
  U value = 0;
  for (std::size_t i = 0; i < sizeof(U); ++i) {
    value |= static_cast<U>(static_cast<U>(std::to_integer<unsigned>(p[i])) << (8 * i));
  }
  return value;
}

template <class U>
  requires std::is_unsigned_v<U>
inline void store_little_endian(std::byte* p, U value) noexcept {
  for (std::size_t i = 0; i < sizeof(U); ++i) {
    p[i] = static_cast<std::byte>((value >> (8 * i)) & 0xffu);
  }
}

}  // namespace detail

/// Decodes a header from its 1024 little-endian bytes.
inline llmc_header decode_llmc_header(std::span<const std::byte, llmc_header_bytes> bytes) {
  llmc_header header{};
  for (std::size_t i = 0; i < llmc_header_ints; ++i) {
    header[i] = std::bit_cast<std::int32_t>(detail::load_little_endian<std::uint32_t>(&bytes[4 * i]));
  }
  return header;
}

/// Encodes a header as its 1024 little-endian bytes.
inline std::array<std::byte, llmc_header_bytes> encode_llmc_header(const llmc_header& header) {
  std::array<std::byte, llmc_header_bytes> bytes{};
  for (std::size_t i = 0; i < llmc_header_ints; ++i) {
    detail::store_little_endian(&bytes[4 * i], std::bit_cast<std::uint32_t>(header[i]));
  }
  return bytes;
}

/// A regular file opened for reading, with its size known.
class binary_file_reader {
 public:
  explicit binary_file_reader(std::filesystem::path path) : path_(std::move(path)) {
    const input_file_status status = inspect_input_file(path_);
    if (status.what == input_file_status::kind::missing || status.what == input_file_status::kind::uninspectable) {
      throw error(detail::quoted(path_) + ": cannot open for reading: " +
                  (status.what == input_file_status::kind::missing ? std::string("no such file") : status.problem));
    }
    if (!status.ok()) throw error(detail::quoted(path_) + ": " + status.problem + ", not a regular file");
    std::error_code ec;
    size_bytes_ = std::filesystem::file_size(path_, ec);
    if (ec) throw error(detail::quoted(path_) + ": cannot read its size: " + ec.message());
    file_ = std::fopen(path_.c_str(), "rb");
    if (file_ == nullptr) {
      throw error(detail::quoted(path_) + ": cannot open for reading: " + detail::errno_text(errno));
    }
  }
  binary_file_reader(const binary_file_reader&) = delete;
  binary_file_reader& operator=(const binary_file_reader&) = delete;
  ~binary_file_reader() {
    if (file_ != nullptr) std::fclose(file_);
  }

  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  [[nodiscard]] std::uint64_t size_bytes() const noexcept { return size_bytes_; }
  [[nodiscard]] std::uint64_t position_bytes() const noexcept { return position_; }

  /// Reads exactly `out.size()` bytes; `what` names them in the error.
  void read(std::span<std::byte> out, std::string_view what) {
    const std::size_t got = out.empty() ? 0 : std::fread(out.data(), 1, out.size(), file_);
    if (got != out.size()) {
      const bool failed = std::ferror(file_) != 0;
      throw error(detail::quoted(path_) + ": " + (failed ? "read error" : "truncated") +
                  " while reading " + std::string(what) + ": got " + std::to_string(got) +
                  " of " + std::to_string(out.size()) + " bytes at offset " +
                  std::to_string(position_) + " (file size " + std::to_string(size_bytes_) +
                  " bytes)");
    }
    position_ += got;
  }

  /// Throws unless the file is exactly `expected_bytes` long, the size its
  /// header promises for `contents` (e.g. "98 tokens"): a shorter file is
  /// truncated, a longer one has trailing bytes.
  void require_size(std::uint64_t expected_bytes, std::string_view contents) const {
    if (size_bytes_ < expected_bytes) {
      throw error(detail::quoted(path_) + ": truncated: " + std::to_string(size_bytes_) +
                  " bytes, but its header (" + std::string(contents) + ") needs " +
                  std::to_string(expected_bytes));
    }
    if (size_bytes_ > expected_bytes) {
      throw error(detail::quoted(path_) + ": " + std::to_string(size_bytes_ - expected_bytes) +
                  " trailing bytes after what its header (" + std::string(contents) +
                  ") describes (" + std::to_string(expected_bytes) + " bytes expected, file has " +
                  std::to_string(size_bytes_) + ")");
    }
  }

  /// Reads and decodes llm.c's 1024-byte header, saying so if the file is
  /// too short to hold one.
  llmc_header read_header(std::string_view kind) {
    if (size_bytes_ < llmc_header_bytes) {
      throw error(detail::quoted(path_) + ": truncated " + std::string(kind) + ": " +
                  std::to_string(size_bytes_) + " bytes, the header alone needs " +
                  std::to_string(llmc_header_bytes));
    }
    std::array<std::byte, llmc_header_bytes> bytes;
    read(bytes, std::string(kind) + " header");
    return decode_llmc_header(bytes);
  }

 private:
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
  std::uint64_t size_bytes_ = 0;
  std::uint64_t position_ = 0;
};


}  // namespace memo
