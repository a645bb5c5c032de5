// memo/backend/memory_resource.hpp
//
// Accounting shared by every memory resource memo hands out: current bytes,
// peak bytes, an optional capacity, and how many allocations and
// deallocations went through it. The peak is what the benchmarks compare
// against a plan ("the measured device peak of a swapped run equals the
// planned bytes"), so it counts exactly the bytes requested, not what an
// underlying allocator rounded them to. The counts are what a test reads to
// show that a planned step allocates nothing: take them before and after.
//
// The capacity check cannot wrap: a request of nearly SIZE_MAX bytes against
// a capacity is the "exhausted" error naming the numbers, never a call into
// the underlying allocator.
//
// `host_memory_resource` is the host backend's device and pinned-host
// memory: aligned operator new, the accounting above, and a table of live
// allocations so a deallocation of a pointer it never handed out, or with a
// size that differs from the allocation's, is an error instead of heap
// corruption.
//
// Lifetime: a resource frees what is still allocated from it when it is
// destroyed, and keeps a liveness token (`watch()`). A `buffer` or a
// `planned_arena` made from it watches that token, so one that outlives its
// resource returns nothing to it and refuses access to its memory with a
// memo::error, instead of touching the freed resource.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <unordered_map>

#include "memo/core/bytes.hpp"
#include "memo/core/error.hpp"
#include "memo/core/liveness.hpp"

namespace memo {

/// Thread-safe current/peak/capacity bookkeeping and allocation counts.
class memory_accounting {
 public:
  explicit memory_accounting(std::string name, std::optional<std::size_t> capacity_bytes = {})
      : name_(std::move(name)), capacity_bytes_(capacity_bytes) {}

  /// Reserves `bytes`; throws when the capacity would be exceeded.
  void add(std::size_t bytes) {
    std::lock_guard lock(mutex_);
    reserve(bytes);
    peak_bytes_ = std::max(peak_bytes_, current_bytes_);
  }
  /// Reserves `bytes`, then runs `allocate()` and returns its pointer; if
  /// `allocate` throws, the reservation is undone before the error leaves.
  /// Only a successful allocation counts in `allocation_count()`.
  /// The peak counts the request only once it succeeded, so a failed one
  /// leaves the peak as it was too (up to a concurrent success, whose peak
  /// may include a reservation that then fails).
  template <class Allocate>
  void* charge(std::size_t bytes, Allocate&& allocate) {
    {
      std::lock_guard lock(mutex_);
      reserve(bytes);
    }
    void* pointer = nullptr;
    try {
      pointer = allocate();
    } catch (...) {
      undo(bytes);
      throw;
    }
    std::lock_guard lock(mutex_);
    peak_bytes_ = std::max(peak_bytes_, current_bytes_);
    ++allocations_;
    return pointer;
  }
  /// Returns `bytes` of a deallocation; counts in `deallocation_count()`.
  void remove(std::size_t bytes) noexcept {
    std::lock_guard lock(mutex_);
    current_bytes_ -= std::min(bytes, current_bytes_);
    ++deallocations_;
  }
  /// Successful allocations so far (every `charge` that returned).
  [[nodiscard]] std::uint64_t allocation_count() const {
    std::lock_guard lock(mutex_);
    return allocations_;
  }
  /// Deallocations so far (every `remove`).
  [[nodiscard]] std::uint64_t deallocation_count() const {
    std::lock_guard lock(mutex_);
    return deallocations_;
  }
  [[nodiscard]] std::size_t current_bytes() const {
    std::lock_guard lock(mutex_);
    return current_bytes_;
  }
  [[nodiscard]] std::size_t peak_bytes() const {
    std::lock_guard lock(mutex_);
    return peak_bytes_;
  }
  /// Starts a new measurement window: the peak becomes the current usage.
  void reset_peak() {
    std::lock_guard lock(mutex_);
    peak_bytes_ = current_bytes_;
  }
  [[nodiscard]] std::optional<std::size_t> capacity_bytes() const { return capacity_bytes_; }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }

 private:
  // A reservation whose allocation failed: not a deallocation.
  // Adds `bytes` to the current usage, or throws; the caller holds mutex_.
  void reserve(std::size_t bytes) {
    // current <= capacity always holds, so the subtraction cannot wrap.
    if (capacity_bytes_ && bytes > *capacity_bytes_ - current_bytes_) {
      throw error(name_ + " exhausted: allocating " + std::to_string(bytes) + " bytes with " +
                  std::to_string(current_bytes_) + " of " + std::to_string(*capacity_bytes_) +
                  " bytes in use");
    }
    expects(bytes <= std::numeric_limits<std::size_t>::max() - current_bytes_, [&] {
      return name_ + ": allocating " + std::to_string(bytes) + " bytes with " +
             std::to_string(current_bytes_) + " bytes in use overflows the byte count";
    });
    current_bytes_ += bytes;
  }

  void undo(std::size_t bytes) noexcept {
    std::lock_guard lock(mutex_);
    current_bytes_ -= std::min(bytes, current_bytes_);
  }

  std::string name_;
  std::optional<std::size_t> capacity_bytes_;
  mutable std::mutex mutex_;
  std::size_t current_bytes_ = 0;
  std::size_t peak_bytes_ = 0;
  std::uint64_t allocations_ = 0;
  std::uint64_t deallocations_ = 0;
};

/// Whether the memory `resource` hands out still exists: a resource that
/// forwards to another (a recorder, a replay over an arena) says so through
/// `memory_alive()`; any other resource's memory lives as long as it does.
template <class R>
bool resource_memory_alive(const R& resource) noexcept {
  if constexpr (requires { { resource.memory_alive() } -> std::convertible_to<bool>; }) {
    return resource.memory_alive();
  } else {
    return true;
  }
}

namespace detail {

/// The accounting half every memo resource shares: its accessors read the
/// resource's `memory_accounting`, which the allocating half charges.
class accounted_resource {
 public:
  [[nodiscard]] std::size_t current_bytes() const { return accounting_.current_bytes(); }
  [[nodiscard]] std::size_t peak_bytes() const { return accounting_.peak_bytes(); }
  void reset_peak() { accounting_.reset_peak(); }
  [[nodiscard]] std::optional<std::size_t> capacity_bytes() const {
    return accounting_.capacity_bytes();
  }
  [[nodiscard]] std::uint64_t allocation_count() const { return accounting_.allocation_count(); }
  [[nodiscard]] std::uint64_t deallocation_count() const {
    return accounting_.deallocation_count();
  }
  [[nodiscard]] const std::string& name() const noexcept { return accounting_.name(); }
  /// Expires when the resource is destroyed; see the lifetime rule above.
  [[nodiscard]] liveness_watch watch() const noexcept { return alive_; }

 protected:
  explicit accounted_resource(std::string name, std::optional<std::size_t> capacity_bytes = {})
      : accounting_(std::move(name), capacity_bytes) {}
  memory_accounting accounting_;

 private:
  liveness_token alive_ = make_liveness_token();
};

/// The live allocations of a resource: a deallocation of a pointer it never
/// handed out, or with another size or alignment, is an error naming the
/// resource; what is still live when the resource goes is freed by it.
class allocation_table {
 public:
  struct block {
    std::size_t bytes;
    std::size_t alignment;
  };

  /// Enters a fresh allocation. An address already live is an error (the
  /// allocator handed out memory the table still holds); when the entry
  /// cannot be made, `free(pointer)` returns the fresh memory first.
  template <class Free>
  void insert(const std::string& resource, void* pointer, block allocation, Free&& free) {
    try {
      std::lock_guard lock(mutex_);
      expects(live_.emplace(pointer, allocation).second,
              [&] { return resource + ": the allocator returned an address that is still allocated"; });
    } catch (...) {
      free(pointer);
      throw;
    }
  }
  /// Checks a deallocation of `bytes` at `pointer` (with `alignment`, if
  /// given) against its allocation, runs `free(pointer)` and forgets the
  /// allocation, all under one lock: two deallocations of one pointer
  /// cannot both pass, and the address cannot be handed out again before
  /// the table forgets it. If `free` throws, the allocation stays.
  template <class Free>
  void remove(const std::string& resource, void* pointer, std::size_t bytes, std::optional<std::size_t> alignment,
              Free&& free) {
    std::lock_guard lock(mutex_);
    const auto it = live_.find(pointer);
    expects(it != live_.end(), [&] {
      return resource + ": deallocating a pointer it did not allocate (or twice)";
    });
    expects(it->second.bytes == bytes && (!alignment || it->second.alignment == *alignment), [&] {
      return resource + ": deallocating " + std::to_string(bytes) + " bytes" +
             (alignment ? " (alignment " + std::to_string(*alignment) + ")" : std::string()) +
             " from an allocation of " + std::to_string(it->second.bytes) + " bytes (alignment " +
             std::to_string(it->second.alignment) + ")";
    });
    free(pointer, it->second);
    live_.erase(it);
  }
  /// Calls `free(pointer, block)` on every live allocation and forgets them.
  template <class Free>
  void free_all(Free&& free) noexcept {
    std::lock_guard lock(mutex_);
    for (const auto& [pointer, allocation] : live_) free(pointer, allocation);
    live_.clear();
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<void*, block> live_;
};

}  // namespace detail

class host_memory_resource : public detail::accounted_resource {
 public:
  /// Its memory is ordinary host memory: the host may read, write and
  /// memset it (a planned arena poisons dead buffers this way).
  static constexpr bool host_accessible = true;

  explicit host_memory_resource(std::string name, std::optional<std::size_t> capacity_bytes = {})
      : accounted_resource(std::move(name), capacity_bytes) {}
  host_memory_resource(const host_memory_resource&) = delete;
  host_memory_resource& operator=(const host_memory_resource&) = delete;
  ~host_memory_resource() {
    live_.free_all([](void* pointer, const detail::allocation_table::block& allocation) {
      ::operator delete(pointer, std::align_val_t{allocation.alignment});
    });
  }

  void* allocate(std::size_t bytes, std::size_t alignment = default_alignment_bytes) {
    expects(is_power_of_two(alignment), [&] {
      return accounting_.name() + ": alignment must be a power of two, got " +
             std::to_string(alignment);
    });
    return accounting_.charge(bytes, [&] {
      // A zero-byte request still returns a unique pointer, as cudaMalloc does.
      // nothrow: the failure becomes an error naming the resource (and a
      // sanitizer's allocator reports rather than throws from plain new).
      void* pointer = ::operator new(std::max<std::size_t>(bytes, 1), std::align_val_t{alignment},
                                     std::nothrow);
      if (pointer == nullptr) {
        throw error(accounting_.name() + ": the host could not provide " + std::to_string(bytes) +
                    " bytes (" + std::to_string(accounting_.current_bytes() - bytes) +
                    " bytes in use before the request)");
      }
      live_.insert(accounting_.name(), pointer, {bytes, alignment},
                   [alignment](void* p) { ::operator delete(p, std::align_val_t{alignment}); });
      return pointer;
    });
  }

  void deallocate(void* pointer, std::size_t bytes,
                  std::size_t alignment = default_alignment_bytes) {
    if (pointer == nullptr) return;
    live_.remove(accounting_.name(), pointer, bytes, alignment,
                 [](void* p, const detail::allocation_table::block& allocation) {
                   ::operator delete(p, std::align_val_t{allocation.alignment});
                 });
    accounting_.remove(bytes);
  }

 private:
  detail::allocation_table live_;
};

}  // namespace memo
