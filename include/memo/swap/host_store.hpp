// memo/swap/host_store.hpp
//
// Pinned host memory for offloaded skeletal activations, under a fixed
// budget (MEMO section 4.1, constraint (3): the node's CPU memory bounds how
// much of every layer may be offloaded).
//
// The store is planned, then used. `reserve` takes the whole list of slots
// a plan needs, one per (layer, tensor, token range), checks them as a
// batch — no duplicates, no empty range, total within the budget — and only
// then allocates one pinned block for the batch. A request that does not
// fit fails with the requested, used and budget byte counts before anything
// is allocated, so the error comes when the plan is made, before any step
// runs, and every slot reserved earlier (and the bytes in it) is untouched.
// During a step, `slot(key)` returns where a range lives; lookups never
// allocate.
//
// Each `reserve` is one batch and returns its `host_reservation`;
// `release(reservation)` gives the batch back (its slots disappear and its
// bytes count against the budget no more), so an owner that reserved slots
// (a swapper) returns them when it is destroyed and another can take the
// same keys.
//
// Memory: the owning constructor allocates one pinned block per batch. The
// region constructor places batches first-fit in a pinned `memory_region`
// the caller owns (budget = the region's size; `required_bytes(requests)`
// says how many bytes one batch takes) and allocates nothing.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "memo/backend/buffer.hpp"
#include "memo/backend/concepts.hpp"
#include "memo/core/bytes.hpp"
#include "memo/core/error.hpp"
#include "memo/core/liveness.hpp"
#include "memo/core/memory_region.hpp"
#include "memo/swap/skeletal_layout.hpp"

namespace memo {

/// Identifies one stored token range: (layer, tensor index, [begin, end)).
struct host_slot_key {
  std::size_t layer = 0;
  std::size_t tensor = 0;
  token_range tokens;

  friend bool operator==(const host_slot_key&, const host_slot_key&) = default;
  friend bool operator<(const host_slot_key& a, const host_slot_key& b) {
    return std::tie(a.layer, a.tensor, a.tokens.begin, a.tokens.end) <
           std::tie(b.layer, b.tensor, b.tokens.begin, b.tokens.end);
  }
  [[nodiscard]] std::string to_string() const {
    return "(layer " + std::to_string(layer) + ", tensor " + std::to_string(tensor) +
           ", tokens [" + std::to_string(tokens.begin) + ", " + std::to_string(tokens.end) + "))";
  }
};

/// A slot request: where and how many bytes.
struct host_slot_request {
  host_slot_key key;
  std::uint64_t bytes = 0;
};

/// The host-memory slots one plan needs for `layers` swapped layers: every
/// offloaded range of every tensor of every layer in [0, layers).
inline std::vector<host_slot_request> host_slots_for(const offload_plan& plan, std::size_t layers) {
  std::vector<host_slot_request> requests;
  const auto& layout = plan.layout();
  for (std::size_t layer = 0; layer < layers; ++layer) {
    for (std::size_t t = 0; t < layout.size(); ++t) {
      for (const auto& range : plan.offloaded(t)) {
        requests.push_back(
            {{layer, t, range}, checked_mul(range.tokens(), layout[t].bytes_per_token)});
      }
    }
  }
  return requests;
}

/// One batch of slots taken by `host_store::reserve`.
struct host_reservation {
  std::uint64_t id = 0;  ///< 0 = nothing reserved
  [[nodiscard]] bool empty() const noexcept { return id == 0; }
};

template <Backend B>
class host_store {
 public:
  using pinned_resource = std::remove_reference_t<decltype(std::declval<B&>().pinned_memory())>;

  /// Bytes one `reserve(requests)` takes (slots aligned to
  /// default_alignment_bytes, padding included).
  [[nodiscard]] static std::uint64_t required_bytes(std::span<const host_slot_request> requests) {
    std::uint64_t bytes = 0;
    for (const auto& request : requests) {
      bytes = checked_add(checked_align_up(bytes, default_alignment_bytes), request.bytes);
    }
    return bytes;
  }

  /// A store that may hold at most `budget_bytes` bytes of slots, allocated
  /// batch by batch.
  host_store(B& backend, std::uint64_t budget_bytes) : backend_(&backend), budget_bytes_(budget_bytes) {}
  /// A store over pinned host memory it does not own; the budget is the
  /// region's size. The region must be aligned to default_alignment_bytes and
  /// outlive the store.
  host_store(B& backend, memory_region pinned_region)
      : backend_(&backend), budget_bytes_(pinned_region.bytes), region_(pinned_region) {
    expects(pinned_region.data != nullptr || pinned_region.bytes == 0,
            "host store: a region with a null pointer");
    expects(is_aligned(pinned_region.data, default_alignment_bytes), [&] {
      return "host store: the region must be aligned to " + std::to_string(default_alignment_bytes) + " bytes";
    });
  }
  host_store(const host_store&) = delete;
  host_store& operator=(const host_store&) = delete;

  [[nodiscard]] std::uint64_t budget_bytes() const noexcept { return budget_bytes_; }
  [[nodiscard]] std::uint64_t used_bytes() const noexcept { return used_bytes_; }
  [[nodiscard]] std::size_t slot_count() const noexcept { return slots_.size(); }
  [[nodiscard]] bool contains(const host_slot_key& key) const { return slots_.contains(key); }
  /// True when the store places slots in a region it does not own.
  [[nodiscard]] bool over_region() const noexcept { return region_.has_value(); }

  /// Reserves every requested slot, or none of them (see the header).
  host_reservation reserve(std::span<const host_slot_request> requests) {
    std::uint64_t batch_bytes = 0;
    std::map<host_slot_key, std::uint64_t> batch;  // key -> offset in the new block
    for (const auto& request : requests) {
      expects(!request.key.tokens.empty() && request.bytes > 0, [&] {
        return "host store: slot " + request.key.to_string() + " of " + std::to_string(request.bytes) +
               " bytes is empty";
      });
      expects(!slots_.contains(request.key) && !batch.contains(request.key), [&] {
        return "host store: slot " + request.key.to_string() + " is requested twice";
      });
      batch_bytes = checked_align_up(batch_bytes, default_alignment_bytes);
      batch.emplace(request.key, batch_bytes);
      batch_bytes = checked_add(batch_bytes, request.bytes);
    }
    if (batch.empty()) return {};
    const std::uint64_t total_bytes = checked_add(used_bytes_, batch_bytes);
    expects(total_bytes <= budget_bytes_, [&] {
      return "host store: " + std::to_string(requests.size()) + " slots need " + std::to_string(batch_bytes) +
             " bytes (" + format_bytes(batch_bytes) + ") on top of " + std::to_string(used_bytes_) +
             " bytes in use, exceeding the host-memory budget of " + std::to_string(budget_bytes_) +
             " bytes (" + format_bytes(budget_bytes_) + ") by " + std::to_string(total_bytes - budget_bytes_) +
             " bytes";
    });
    // Allocation (or placement) may still fail; it throws before any
    // bookkeeping changes.
    batch_record record;
    record.id = ++last_id_;
    record.bytes = batch_bytes;
    std::byte* base = nullptr;
    if (region_) {
      record.offset = place(batch_bytes);
      base = region_->data + record.offset;
    } else {
      record.block = pinned_buffer(backend_->pinned_memory(), static_cast<std::size_t>(batch_bytes));
      base = record.block.data();
    }
    record.keys.reserve(batch.size());
    for (const auto& [key, offset] : batch) record.keys.push_back(key);
    batches_.push_back(std::move(record));
    for (const auto& request : requests) {
      slots_.emplace(request.key, slot_info{base + batch.at(request.key), request.bytes});
    }
    used_bytes_ = total_bytes;
    return {batches_.back().id};
  }
  host_reservation reserve(std::initializer_list<host_slot_request> requests) {
    return reserve(std::span<const host_slot_request>(requests.begin(), requests.size()));
  }

  /// Gives a batch back: its slots disappear and its bytes are free again.
  /// The caller must have finished every copy into or out of them.
  void release(host_reservation reservation) {
    const auto found = std::find_if(batches_.begin(), batches_.end(),
                                    [&](const batch_record& b) { return b.id == reservation.id; });
    expects(found != batches_.end(), [&] {
      return "host store: reservation #" + std::to_string(reservation.id) +
             " is not held (released twice, or from another store)";
    });
    for (const auto& key : found->keys) slots_.erase(key);
    used_bytes_ -= found->bytes;
    batches_.erase(found);
  }

  /// Host address of a reserved slot.
  [[nodiscard]] std::byte* slot(const host_slot_key& key) const {
    const auto it = slots_.find(key);
    expects(it != slots_.end(), [&] { return "host store: no slot " + key.to_string() + " was reserved"; });
    return it->second.data;
  }
  /// Bytes of a reserved slot.
  [[nodiscard]] std::uint64_t slot_bytes(const host_slot_key& key) const {
    const auto it = slots_.find(key);
    expects(it != slots_.end(), [&] { return "host store: no slot " + key.to_string() + " was reserved"; });
    return it->second.bytes;
  }

  /// Expires when the store is destroyed (what a swapper over it checks).
  [[nodiscard]] liveness_watch watch() const noexcept { return alive_; }

 private:
  using pinned_buffer = buffer<std::byte, pinned_resource>;
  struct slot_info {
    std::byte* data;
    std::uint64_t bytes;
  };
  struct batch_record {
    std::uint64_t id = 0;
    std::uint64_t offset = 0;  // in the region (region mode)
    std::uint64_t bytes = 0;
    pinned_buffer block;       // owning mode: [bytes] bytes
    std::vector<host_slot_key> keys;
  };

  // First fit: the lowest aligned offset where `bytes` bytes do not overlap
  // any batch of the region.
  [[nodiscard]] std::uint64_t place(std::uint64_t bytes) const {
    std::vector<std::pair<std::uint64_t, std::uint64_t>> taken;  // [begin, end)
    for (const auto& b : batches_) taken.emplace_back(b.offset, b.offset + b.bytes);
    std::sort(taken.begin(), taken.end());
    std::uint64_t candidate = 0;
    for (const auto& [begin, end] : taken) {
      if (checked_add(candidate, bytes) <= begin) break;
      candidate = std::max(candidate, checked_align_up(end, default_alignment_bytes));
    }
    expects(checked_add(candidate, bytes) <= region_->bytes, [&] {
      return "host store: no gap of " + std::to_string(bytes) + " bytes left in the region of " +
             std::to_string(region_->bytes) + " bytes (" + std::to_string(used_bytes_) +
             " bytes in use; alignment padding between batches counts too)";
    });
    return candidate;
  }

  B* backend_;
  std::uint64_t budget_bytes_;
  liveness_token alive_ = make_liveness_token();
  std::optional<memory_region> region_;
  std::uint64_t used_bytes_ = 0;       // includes alignment padding inside batches
  std::uint64_t last_id_ = 0;
  std::vector<batch_record> batches_;  // one per reserve()
  std::map<host_slot_key, slot_info> slots_;
};

}  // namespace memo
