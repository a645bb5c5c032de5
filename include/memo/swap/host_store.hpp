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
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
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

template <Backend B>
class host_store {
 public:
  using pinned_resource = std::remove_reference_t<decltype(std::declval<B&>().pinned_memory())>;

  /// A store that may hold at most `budget_bytes` bytes of slots.
  host_store(B& backend, std::uint64_t budget_bytes)
      : backend_(&backend), budget_bytes_(budget_bytes) {}
  host_store(const host_store&) = delete;
  host_store& operator=(const host_store&) = delete;

  [[nodiscard]] std::uint64_t budget_bytes() const noexcept { return budget_bytes_; }
  [[nodiscard]] std::uint64_t used_bytes() const noexcept { return used_bytes_; }
  [[nodiscard]] std::size_t slot_count() const noexcept { return slots_.size(); }
  [[nodiscard]] bool contains(const host_slot_key& key) const { return slots_.contains(key); }

  /// Reserves every requested slot, or none of them (see the header).
  void reserve(std::span<const host_slot_request> requests) {
    std::uint64_t batch_bytes = 0;
    std::map<host_slot_key, std::uint64_t> batch;  // key -> offset in the new block
    for (const auto& request : requests) {
      expects(!request.key.tokens.empty() && request.bytes > 0, [&] {
        return "host store: slot " + request.key.to_string() + " of " +
               std::to_string(request.bytes) + " bytes is empty";
      });
      expects(!slots_.contains(request.key) && !batch.contains(request.key), [&] {
        return "host store: slot " + request.key.to_string() + " is requested twice";
      });
      batch_bytes = checked_align_up(batch_bytes, default_alignment_bytes);
      batch.emplace(request.key, batch_bytes);
      batch_bytes = checked_add(batch_bytes, request.bytes);
    }
    if (batch.empty()) return;
    const std::uint64_t total_bytes = checked_add(used_bytes_, batch_bytes);
    expects(total_bytes <= budget_bytes_, [&] {
      return "host store: " + std::to_string(requests.size()) + " slots need " +
             std::to_string(batch_bytes) + " bytes (" + format_bytes(batch_bytes) + ") on top of " +
             std::to_string(used_bytes_) + " bytes in use, exceeding the host-memory budget of " +
             std::to_string(budget_bytes_) + " bytes (" + format_bytes(budget_bytes_) + ") by " +
             std::to_string(total_bytes - budget_bytes_) + " bytes";
    });
    // Allocation may still fail (the pinned resource's own capacity); it
    // throws before any bookkeeping changes.
    pinned_buffer block(backend_->pinned_memory(), static_cast<std::size_t>(batch_bytes));
    std::byte* base = block.data();
    blocks_.push_back(std::move(block));
    for (const auto& request : requests) {
      slots_.emplace(request.key, slot_info{base + batch.at(request.key), request.bytes});
    }
    used_bytes_ = total_bytes;
  }
  void reserve(std::initializer_list<host_slot_request> requests) {
    reserve(std::span<const host_slot_request>(requests.begin(), requests.size()));
  }

  /// Host address of a reserved slot.
  [[nodiscard]] std::byte* slot(const host_slot_key& key) const {
    const auto it = slots_.find(key);
    expects(it != slots_.end(), [&] {
      return "host store: no slot " + key.to_string() + " was reserved";
    });
    return it->second.data;
  }
  /// Bytes of a reserved slot.
  [[nodiscard]] std::uint64_t slot_bytes(const host_slot_key& key) const {
    const auto it = slots_.find(key);
    expects(it != slots_.end(), [&] {
      return "host store: no slot " + key.to_string() + " was reserved";
    });
    return it->second.bytes;
  }

 private:
  using pinned_buffer = buffer<std::byte, pinned_resource>;
  struct slot_info {
    std::byte* data;
    std::uint64_t bytes;
  };

  B* backend_;
  std::uint64_t budget_bytes_;
  std::uint64_t used_bytes_ = 0;  // includes alignment padding
  std::vector<pinned_buffer> blocks_;          // one [batch bytes] block per reserve()
  std::map<host_slot_key, slot_info> slots_;
};

}  // namespace memo
