// memo/core/digest.hpp
//
// A 64-bit digest of values, for ranks to compare what each was given (the
// token windows of a step, offload ratios) by exchanging 8 bytes instead of
// the values. FNV-1a over the values' bytes: fast, deterministic across
// processes and machines of one byte order, and not cryptographic; two
// different inputs share a digest with probability about 2^-64, far below
// what a comparison of a user's own inputs needs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

namespace memo {

class digest {
 public:
  /// Adds the bytes of `values` (trivially copyable elements: their object
  /// representation, so 0.0 and -0.0 differ, as they do to a bit compare).
  template <class T>
    requires std::is_trivially_copyable_v<T>
  digest& add(std::span<const T> values) noexcept {
    const auto* bytes = reinterpret_cast<const unsigned char*>(values.data());
    for (std::size_t i = 0; i < values.size_bytes(); ++i) state_ = (state_ ^ bytes[i]) * prime;
    return *this;
  }
  template <class T>
    requires std::is_trivially_copyable_v<T>
  digest& add(const T& value) noexcept {
    return add(std::span<const T>(&value, 1));
  }

  [[nodiscard]] std::uint64_t value() const noexcept { return state_; }

 private:
  static constexpr std::uint64_t offset_basis = 14695981039346656037ull;
  static constexpr std::uint64_t prime = 1099511628211ull;
  std::uint64_t state_ = offset_basis;
};

}  // namespace memo
