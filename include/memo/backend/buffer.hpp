// memo/backend/buffer.hpp
//
// An owning, typed allocation from a memory resource: the RAII form of
// allocate/deallocate, so a buffer is returned to the resource that made it
// on every path, exceptions included. Element counts and byte counts are
// kept apart: `size()` is elements, `size_bytes()` is bytes.
#pragma once

#include <cstddef>
#include <span>
#include <type_traits>
#include <utility>

#include "memo/backend/concepts.hpp"
#include "memo/core/bytes.hpp"

namespace memo {

template <class T, MemoryResource Resource>
class buffer {
  static_assert(std::is_trivially_copyable_v<T>,
                "memo::buffer holds raw device bytes: T must be trivially copyable");

 public:
  buffer() = default;
  buffer(Resource& resource, std::size_t count,
         std::size_t alignment = default_alignment_bytes)
      : resource_(&resource),
        data_(static_cast<T*>(resource.allocate(checked_mul(count, sizeof(T)), alignment))),
        count_(count),
        alignment_(alignment) {}
  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;
  buffer(buffer&& other) noexcept
      : resource_(std::exchange(other.resource_, nullptr)),
        data_(std::exchange(other.data_, nullptr)),
        count_(std::exchange(other.count_, 0)),
        alignment_(other.alignment_) {}
  buffer& operator=(buffer&& other) noexcept {
    if (this != &other) {
      release();
      resource_ = std::exchange(other.resource_, nullptr);
      data_ = std::exchange(other.data_, nullptr);
      count_ = std::exchange(other.count_, 0);
      alignment_ = other.alignment_;
    }
    return *this;
  }
  ~buffer() { release(); }

  [[nodiscard]] T* data() noexcept { return data_; }
  [[nodiscard]] const T* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return count_; }
  [[nodiscard]] std::size_t size_bytes() const noexcept { return count_ * sizeof(T); }
  [[nodiscard]] bool empty() const noexcept { return count_ == 0; }
  /// A span over the elements; only dereference it where the memory is
  /// host-accessible (any host_backend resource, or pinned CUDA memory).
  [[nodiscard]] std::span<T> span() noexcept { return {data_, count_}; }
  [[nodiscard]] std::span<const T> span() const noexcept { return {data_, count_}; }

 private:
  void release() noexcept {
    if (resource_ != nullptr && data_ != nullptr) {
      resource_->deallocate(data_, count_ * sizeof(T), alignment_);
    }
    data_ = nullptr;
    count_ = 0;
  }

  Resource* resource_ = nullptr;
  T* data_ = nullptr;
  std::size_t count_ = 0;
  std::size_t alignment_ = default_alignment_bytes;
};

}  // namespace memo
