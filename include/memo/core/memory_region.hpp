// memo/core/memory_region.hpp
//
// Memory an object uses but does not own, and the two-phase idiom that sizes
// it (CUB's temporary storage; llm.c's one activation arena carved by a
// table of sizes).
//
// Every owner of device memory in memo (rounding buffers, schedule scratch,
// a BLAS workspace, attention chunk slots) can be built over a
// `memory_region` handed to it by whoever owns the bytes, usually a planned
// arena. To learn how many bytes it needs, the same code runs first over a
// `region_carver` in counting mode (no region: it only adds up sizes and
// alignments), then over a carver of a real region of that many bytes:
//
//   region_carver sizing;                 // counting mode
//   carve_parts(sizing);                  // take() returns null regions
//   auto bytes = sizing.required_bytes();
//   ... obtain a region of `bytes` bytes ...
//   region_carver carver(region, "rounding buffers");
//   carve_parts(carver);                  // the same calls, real pointers
//
// Taking more than the region holds is a `memo::error` that names the owner,
// the part and every number, never a write past the end. Byte counts are
// checked for 64-bit overflow.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "memo/core/bytes.hpp"
#include "memo/core/error.hpp"

namespace memo {

/// `bytes` bytes at `data`, owned by someone else. A null region of zero
/// bytes is the empty region.
struct memory_region {
  std::byte* data = nullptr;
  std::size_t bytes = 0;

  [[nodiscard]] bool empty() const noexcept { return bytes == 0; }
  /// The bytes [offset, offset + count) of this region; throws when they do
  /// not lie inside it.
  [[nodiscard]] memory_region subregion(std::size_t offset, std::size_t count) const {
    expects(offset <= bytes && count <= bytes - offset, [&] {
      return "subregion [" + std::to_string(offset) + ", " + std::to_string(offset) + " + " +
             std::to_string(count) + ") does not lie inside a region of " + std::to_string(bytes) +
             " bytes";
    });
    return {data == nullptr ? nullptr : data + offset, count};
  }
  template <class T>
  [[nodiscard]] T* as() const noexcept {
    return reinterpret_cast<T*>(data);
  }
};

/// Hands out consecutive aligned parts of a region (or, in counting mode,
/// only adds up how many bytes those parts need).
class region_carver {
 public:
  /// Counting mode: `take` returns regions with null data and
  /// `required_bytes` says how large a real region must be.
  region_carver() = default;
  /// Carving mode over `region`, which must be aligned to
  /// `default_alignment_bytes` unless every part asks for less.
  region_carver(memory_region region, std::string_view owner)
      : region_(region), owner_(owner), counting_(false) {
    expects(region.data != nullptr || region.bytes == 0,
            [&] { return owner_ + ": a region of " + std::to_string(region.bytes) +
                         " bytes with a null pointer"; });
  }

  [[nodiscard]] bool counting() const noexcept { return counting_; }

  /// The next `bytes` bytes aligned to `alignment` (a power of two, relative
  /// to the region's start); `part` names it in errors.
  memory_region take(std::size_t bytes, std::string_view part,
                     std::size_t alignment = default_alignment_bytes) {
    expects(is_power_of_two(alignment), [&] {
      return owner_ + ": part '" + std::string(part) + "' asks for alignment " +
             std::to_string(alignment) + ", which is not a power of two";
    });
    const std::uint64_t offset = checked_align_up(used_bytes_, alignment);
    const std::uint64_t end = checked_add(offset, bytes);
    if (counting_) {
      used_bytes_ = end;
      return {nullptr, bytes};
    }
    expects(end <= region_.bytes, [&] {
      return owner_ + ": part '" + std::string(part) + "' needs bytes [" + std::to_string(offset) +
             ", " + std::to_string(end) + ") but the region holds " +
             std::to_string(region_.bytes) + " bytes (size it with a counting region_carver first)";
    });
    expects(is_aligned(region_.data + offset, alignment), [&] {
      return owner_ + ": part '" + std::string(part) + "' needs alignment " +
             std::to_string(alignment) + " but the region's start is not aligned to it";
    });
    used_bytes_ = end;
    return {region_.data + offset, bytes};
  }

  /// Bytes taken so far, alignment padding included.
  [[nodiscard]] std::size_t used_bytes() const noexcept { return used_bytes_; }
  /// In counting mode: the size of the region the same takes would need.
  [[nodiscard]] std::size_t required_bytes() const noexcept { return used_bytes_; }

 private:
  memory_region region_{};
  std::string owner_ = "region";
  bool counting_ = true;
  std::size_t used_bytes_ = 0;
};

}  // namespace memo
