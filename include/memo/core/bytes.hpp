// memo/core/bytes.hpp
//
// Byte and alignment arithmetic. Sizes in memo are always bytes unless the
// name says otherwise; these helpers keep the rounding in one place and check
// it for overflow, because a plan for a million-token sequence easily reaches
// tens of gigabytes and a silent wrap would produce a wrong plan.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>

#include "memo/core/config.hpp"
#include "memo/core/error.hpp"

namespace memo {

inline constexpr std::size_t kib = std::size_t{1} << 10;
inline constexpr std::size_t mib = std::size_t{1} << 20;
inline constexpr std::size_t gib = std::size_t{1} << 30;

/// The alignment every memo allocation honours unless asked for more
/// (cudaMalloc guarantees 256 bytes; so does the host backend).
inline constexpr std::size_t default_alignment_bytes = 256;

MEMO_HOST_DEVICE constexpr bool is_power_of_two(std::uint64_t value) {
  return value != 0 && (value & (value - 1)) == 0;
}

/// Rounds `bytes` up to a multiple of `alignment` (any positive alignment).
MEMO_HOST_DEVICE constexpr std::uint64_t align_up(std::uint64_t bytes, std::uint64_t alignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

/// Rounds `bytes` down to a multiple of `alignment`.
MEMO_HOST_DEVICE constexpr std::uint64_t align_down(std::uint64_t bytes,
                                                    std::uint64_t alignment) {
  return bytes / alignment * alignment;
}

MEMO_HOST_DEVICE constexpr bool is_aligned(std::uint64_t bytes, std::uint64_t alignment) {
  return bytes % alignment == 0;
}

inline bool is_aligned(const void* pointer, std::size_t alignment) {
  return reinterpret_cast<std::uintptr_t>(pointer) % alignment == 0;
}

/// `align_up` that throws `count_overflow` instead of wrapping around.
inline std::uint64_t checked_align_up(std::uint64_t bytes, std::uint64_t alignment) {
  expects(alignment > 0, "alignment must be positive");
  expects_countable(bytes <= std::numeric_limits<std::uint64_t>::max() - (alignment - 1), [&] {
    return "rounding " + std::to_string(bytes) + " bytes up to alignment " +
           std::to_string(alignment) + " overflows 64 bits";
  });
  return align_up(bytes, alignment);
}

/// a + b, throwing `count_overflow` on overflow.
inline std::uint64_t checked_add(std::uint64_t a, std::uint64_t b) {
  expects_countable(b <= std::numeric_limits<std::uint64_t>::max() - a, [&] {
    return "byte count " + std::to_string(a) + " + " + std::to_string(b) + " overflows 64 bits";
  });
  return a + b;
}

/// a * b, throwing `count_overflow` on overflow.
inline std::uint64_t checked_mul(std::uint64_t a, std::uint64_t b) {
  expects_countable(a == 0 || b <= std::numeric_limits<std::uint64_t>::max() / a, [&] {
    return "byte count " + std::to_string(a) + " * " + std::to_string(b) + " overflows 64 bits";
  });
  return a * b;
}

/// "1.50 GiB" style rendering for messages and tables.
inline std::string format_bytes(std::uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  if (unit == 0) {
    std::snprintf(text, sizeof text, "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(text, sizeof text, "%.2f %s", value, units[unit]);
  }
  return text;
}

}  // namespace memo
