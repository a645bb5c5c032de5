// memo/core/tensor_view.hpp
//
// A non-owning view of a strided tensor: a pointer, an extent per dimension
// and a stride per dimension, all in elements. The rank is part of the type,
// so `tensor_view<float, 2>` cannot be passed where a 3-d view is expected;
// extents are run-time values, asserted where they matter (`expect_shape`).
// Views are trivially copyable and usable in device code, so the same view
// type describes a slice of a rounding buffer on the host backend and a
// kernel argument on the CUDA backend.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "memo/core/config.hpp"
#include "memo/core/error.hpp"

namespace memo {

template <class T, std::size_t Rank>
class tensor_view {
  static_assert(Rank >= 1, "tensor_view needs at least one dimension");

 public:
  using element_type = T;
  using index_type = std::int64_t;
  using extents_type = std::array<index_type, Rank>;
  static constexpr std::size_t rank = Rank;

  constexpr tensor_view() = default;
  MEMO_HOST_DEVICE constexpr tensor_view(T* data, extents_type extents, extents_type strides)
      : data_(data), extents_(extents), strides_(strides) {}

  /// A densely packed row-major view (the last dimension is contiguous).
  MEMO_HOST_DEVICE static constexpr tensor_view contiguous(T* data, extents_type extents) {
    extents_type strides{};
    index_type stride = 1;
    for (std::size_t d = Rank; d-- > 0;) {
      strides[d] = stride;
      stride *= extents[d];
    }
    return tensor_view(data, extents, strides);
  }

  MEMO_HOST_DEVICE constexpr T* data() const noexcept { return data_; }
  MEMO_HOST_DEVICE constexpr index_type extent(std::size_t d) const noexcept { return extents_[d]; }
  MEMO_HOST_DEVICE constexpr index_type stride(std::size_t d) const noexcept { return strides_[d]; }
  MEMO_HOST_DEVICE constexpr const extents_type& extents() const noexcept { return extents_; }
  MEMO_HOST_DEVICE constexpr const extents_type& strides() const noexcept { return strides_; }

  /// Number of elements.
  MEMO_HOST_DEVICE constexpr index_type size() const noexcept {
    index_type n = 1;
    for (std::size_t d = 0; d < Rank; ++d) n *= extents_[d];
    return n;
  }
  MEMO_HOST_DEVICE constexpr std::size_t size_bytes() const noexcept {
    return static_cast<std::size_t>(size()) * sizeof(T);
  }

  /// True when the view is packed row-major with no gaps.
  MEMO_HOST_DEVICE constexpr bool is_contiguous() const noexcept {
    index_type stride = 1;
    for (std::size_t d = Rank; d-- > 0;) {
      if (extents_[d] != 1 && strides_[d] != stride) return false;
      stride *= extents_[d];
    }
    return true;
  }

  template <class... Indices>
    requires(sizeof...(Indices) == Rank && (std::is_integral_v<Indices> && ...))
  MEMO_HOST_DEVICE constexpr T& operator()(Indices... indices) const noexcept {
    const index_type idx[] = {static_cast<index_type>(indices)...};
    index_type offset = 0;
    for (std::size_t d = 0; d < Rank; ++d) offset += idx[d] * strides_[d];
    return data_[offset];
  }

  /// The rows [first, first + count) of dimension 0 (e.g. a token range).
  MEMO_HOST_DEVICE constexpr tensor_view slice(index_type first, index_type count) const noexcept {
    extents_type extents = extents_;
    extents[0] = count;
    return tensor_view(data_ + first * strides_[0], extents, strides_);
  }

  /// Throws `memo::error` unless the extents equal `expected`, naming both.
  void expect_shape(const extents_type& expected, const char* what = "tensor") const {
    if (expected == extents_) return;
    throw error(std::string(what) + " has shape " + shape_string(extents_) + ", expected " +
                shape_string(expected));
  }

  /// Read-only view of the same elements.
  MEMO_HOST_DEVICE constexpr operator tensor_view<const T, Rank>() const noexcept
    requires(!std::is_const_v<T>)
  {
    return tensor_view<const T, Rank>(data_, extents_, strides_);
  }

  static std::string shape_string(const extents_type& extents) {
    std::string text = "[";
    for (std::size_t d = 0; d < Rank; ++d) {
      if (d > 0) text += ", ";
      text += std::to_string(extents[d]);
    }
    return text + "]";
  }

 private:
  T* data_ = nullptr;
  extents_type extents_{};
  extents_type strides_{};
};

}  // namespace memo
