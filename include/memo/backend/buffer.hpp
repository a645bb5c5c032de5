// memo/backend/buffer.hpp
//
// An owning, typed allocation from a memory resource: the RAII form of
// allocate/deallocate, so a buffer is returned to the resource that made it
// on every path, exceptions included. Element counts and byte counts are
// kept apart: `size()` is elements, `size_bytes()` is bytes.
//
// Lifetime: the resource must outlive the buffer. For memo's resources (which
// keep a liveness token) that is enforced: a buffer that outlives its
// resource returns nothing to it when destroyed (the resource freed the
// memory when it went), and `data()` and `span()` are then a memo::error.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <type_traits>
#include <utility>

#include "memo/backend/concepts.hpp"
#include "memo/backend/memory_resource.hpp"
#include "memo/core/bytes.hpp"
#include "memo/core/error.hpp"
#include "memo/core/liveness.hpp"

namespace memo {

template <class T, MemoryResource Resource>
class buffer {
  static_assert(std::is_trivially_copyable_v<T>,
                "memo::buffer holds raw device bytes: T must be trivially copyable");

 public:
  buffer() = default;
  buffer(Resource& resource, std::size_t count,
         std::size_t alignment = default_alignment_bytes)
      : buffer(resource, watch_if_kept(resource), count, alignment) {}
  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;
  buffer(buffer&& other) noexcept
      : resource_(std::exchange(other.resource_, nullptr)),
        watched_(std::exchange(other.watched_, false)),
        resource_watch_(std::exchange(other.resource_watch_, liveness_watch{})),
        data_(std::exchange(other.data_, nullptr)),
        count_(std::exchange(other.count_, 0)),
        alignment_(other.alignment_) {}
  buffer& operator=(buffer&& other) noexcept {
    if (this != &other) {
      release();
      resource_ = std::exchange(other.resource_, nullptr);
      watched_ = std::exchange(other.watched_, false);
      resource_watch_ = std::exchange(other.resource_watch_, liveness_watch{});
      data_ = std::exchange(other.data_, nullptr);
      count_ = std::exchange(other.count_, 0);
      alignment_ = other.alignment_;
    }
    return *this;
  }
  ~buffer() { release(); }

  /// The memory; an error once the resource that made it is gone.
  [[nodiscard]] T* data() {
    check_resource();
    return data_;
  }
  [[nodiscard]] const T* data() const {
    check_resource();
    return data_;
  }
  [[nodiscard]] std::size_t size() const noexcept { return count_; }
  [[nodiscard]] std::size_t size_bytes() const noexcept { return count_ * sizeof(T); }
  [[nodiscard]] bool empty() const noexcept { return count_ == 0; }
  /// A span over the elements; only dereference it where the memory is
  /// host-accessible (any host_backend resource, or pinned CUDA memory).
  [[nodiscard]] std::span<T> span() { return {data(), count_}; }
  [[nodiscard]] std::span<const T> span() const { return {data(), count_}; }
  /// False once the resource that made the buffer is gone, or the memory it
  /// forwarded from another (a recorder's upstream, a replayed arena's
  /// resource); never for a default-constructed or moved-from buffer, or one
  /// from a resource that keeps no liveness token.
  [[nodiscard]] bool resource_alive() const noexcept {
    if (!watched_) return true;  // unwatched: the caller's rule
    return !resource_watch_.expired() && resource_memory_alive(*resource_);
  }

 private:
  buffer(Resource& resource, const std::optional<liveness_watch>& watch, std::size_t count, std::size_t alignment)
      : resource_(&resource),
        watched_(watch.has_value()),
        resource_watch_(watch.value_or(liveness_watch{})),
        data_(static_cast<T*>(resource.allocate(checked_mul(count, sizeof(T)), alignment))),
        count_(count),
        alignment_(alignment) {}

  void check_resource() const {
    expects(resource_alive(), [&] {
      return "buffer of " + std::to_string(size_bytes()) +
             " bytes used after the memory resource that made it was destroyed (the resource must "
             "outlive its buffers)";
    });
  }
  void release() noexcept {
    // A resource that is gone freed its memory itself; nothing to return.
    // One that is alive takes it back even if the memory behind it is gone
    // (it then only does its bookkeeping).
    if (resource_ != nullptr && data_ != nullptr && !(watched_ && resource_watch_.expired())) {
      resource_->deallocate(data_, count_ * sizeof(T), alignment_);
    }
    data_ = nullptr;
    count_ = 0;
    watched_ = false;
    resource_watch_.reset();
  }

  Resource* resource_ = nullptr;
  bool watched_ = false;            // the resource keeps a liveness token
  liveness_watch resource_watch_;  // of the resource, when watched_
  T* data_ = nullptr;
  std::size_t count_ = 0;
  std::size_t alignment_ = default_alignment_bytes;
};

}  // namespace memo
