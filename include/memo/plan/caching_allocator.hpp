// memo/plan/caching_allocator.hpp
//
// A simulator of a general-purpose GPU caching allocator, the kind PyTorch
// training runs on (MEMO sections 1 and 3.3): what it reserves from the
// device for a request trace is the baseline a static plan is measured
// against, and the gap between its reserved peak and the lower bound is the
// fragmentation the plan removes.
//
// The rules simulated (the defaults mirror PyTorch's CUDA caching
// allocator, without its optional knobs):
//
// * every request is rounded up to a multiple of 512 bytes (minimum 512);
// * requests of at most 1 MiB are served from the small pool, larger ones
//   from the large pool; blocks never move between pools;
// * a request is served by the smallest cached free block of its pool that
//   holds it (ties: older segment, lower offset);
// * when none does, a new segment is reserved: 2 MiB for small requests,
//   20 MiB for large requests under 10 MiB, otherwise the request rounded up
//   to a multiple of 2 MiB;
// * a block larger than the request is split when the remainder is at least
//   512 bytes (small pool) or more than 1 MiB (large pool); otherwise the
//   request gets the whole block;
// * a freed block is cached, merged with free neighbours of its own segment,
//   and never returned to the device; nothing is ever moved (no compaction).
//
// Requests are replayed in time order, frees before mallocs at the same
// instant, i.e. exactly in trace order for a parsed request trace.
//
// Alignment: every block starts at a multiple of `round_bytes` (512 by
// default) of a segment the device aligns at least as much, so a buffer
// alignment that divides `round_bytes` is honoured, as PyTorch honours it;
// a larger `dsa_buffer::alignment` is not simulated (PyTorch has no such
// request): on a problem with one, the reserved peak may be below what an
// allocator honouring it would need.
#pragma once

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "memo/core/bytes.hpp"
#include "memo/core/error.hpp"
#include "memo/plan/dsa_problem.hpp"

namespace memo {

struct caching_allocator_config {
  std::uint64_t round_bytes = 512;                   ///< request granularity
  std::uint64_t small_request_bytes = 1 << 20;       ///< <= this: small pool
  std::uint64_t small_segment_bytes = 2 << 20;       ///< segment of the small pool
  std::uint64_t large_segment_bytes = 20 << 20;      ///< segment for mid-size requests
  std::uint64_t min_large_alloc_bytes = 10 << 20;    ///< from here: a segment of its own
  std::uint64_t large_round_bytes = 2 << 20;         ///< rounding of such segments
};

struct caching_allocator_report {
  std::uint64_t reserved_peak_bytes = 0;   ///< device memory held in segments
  std::uint64_t allocated_peak_bytes = 0;  ///< bytes of blocks handed out (after rounding)
  std::uint64_t requested_peak_bytes = 0;  ///< bytes asked for (= the lower bound)
  std::uint64_t segments = 0;              ///< device allocations made
};

/// The allocator itself, usable request by request.
class caching_allocator_simulator {
 public:
  explicit caching_allocator_simulator(caching_allocator_config config = {}) : config_(config) {
    expects(config_.round_bytes > 0 && config_.small_segment_bytes >= config_.small_request_bytes &&
                config_.large_round_bytes > 0,
            "caching allocator config: round_bytes and large_round_bytes must be positive and a "
            "small segment must hold the largest small request");
  }

  /// Serves a request of `size_bytes` under `id`; returns (segment, offset).
  std::pair<std::uint64_t, std::uint64_t> malloc(std::uint64_t id, std::uint64_t size_bytes) {
    expects(size_bytes > 0, [&] { return "caching allocator: malloc of id " + std::to_string(id) +
                                         " with size 0"; });
    expects(!live_.contains(id), [&] {
      return "caching allocator: malloc of id " + std::to_string(id) + " which is already live";
    });
    const std::uint64_t size = std::max(config_.round_bytes,
                                        checked_align_up(size_bytes, config_.round_bytes));
    const bool small = size <= config_.small_request_bytes;
    auto& pool = small ? small_free_ : large_free_;
    std::size_t chosen = 0;
    const auto it = pool.lower_bound({size, 0, 0, 0});
    if (it != pool.end()) {
      chosen = std::get<3>(*it);
      pool.erase(it);
    } else {
      std::uint64_t segment_bytes = 0;
      if (small) {
        segment_bytes = config_.small_segment_bytes;
      } else if (size < config_.min_large_alloc_bytes) {
        segment_bytes = config_.large_segment_bytes;
      } else {
        segment_bytes = checked_align_up(size, config_.large_round_bytes);
      }
      chosen = blocks_.size();
      blocks_.push_back({segments_, 0, segment_bytes, true, npos, npos});
      ++segments_;
      reserved_bytes_ = checked_add(reserved_bytes_, segment_bytes);
      report_.segments = segments_;
      report_.reserved_peak_bytes = std::max(report_.reserved_peak_bytes, reserved_bytes_);
    }
    block& b = blocks_[chosen];
    const std::uint64_t remaining = b.size - size;
    const bool split = small ? remaining >= config_.round_bytes
                             : remaining > config_.small_request_bytes;
    if (split) {
      const std::size_t rest = blocks_.size();
      blocks_.push_back({b.segment, b.offset + size, remaining, true, chosen, b.next});
      block& head = blocks_[chosen];  // push_back may have moved it
      if (head.next != npos) blocks_[head.next].prev = rest;
      head.next = rest;
      head.size = size;
      pool.insert(key(rest));
    }
    block& used = blocks_[chosen];
    used.free = false;
    live_.emplace(id, live_entry{chosen, size_bytes, small});
    allocated_bytes_ += used.size;
    requested_bytes_ += size_bytes;
    report_.allocated_peak_bytes = std::max(report_.allocated_peak_bytes, allocated_bytes_);
    report_.requested_peak_bytes = std::max(report_.requested_peak_bytes, requested_bytes_);
    return {used.segment, used.offset};
  }

  void free(std::uint64_t id) {
    const auto it = live_.find(id);
    expects(it != live_.end(),
            [&] { return "caching allocator: free of id " + std::to_string(id) + " which is not live"; });
    const auto [index, requested, small] = it->second;
    live_.erase(it);
    auto& pool = small ? small_free_ : large_free_;
    allocated_bytes_ -= blocks_[index].size;
    requested_bytes_ -= requested;
    std::size_t current = index;
    blocks_[current].free = true;
    // Merge with a free successor, then with a free predecessor.
    if (const std::size_t next = blocks_[current].next; next != npos && blocks_[next].free) {
      pool.erase(key(next));
      absorb(current, next);
    }
    if (const std::size_t prev = blocks_[current].prev; prev != npos && blocks_[prev].free) {
      pool.erase(key(prev));
      absorb(prev, current);
      current = prev;
    }
    pool.insert(key(current));
  }

  [[nodiscard]] std::uint64_t reserved_bytes() const noexcept { return reserved_bytes_; }
  [[nodiscard]] std::uint64_t allocated_bytes() const noexcept { return allocated_bytes_; }
  [[nodiscard]] const caching_allocator_report& report() const noexcept { return report_; }

 private:
  static constexpr std::size_t npos = ~std::size_t{0};
  struct block {
    std::uint64_t segment;
    std::uint64_t offset;
    std::uint64_t size;
    bool free;
    std::size_t prev;  // neighbours inside the segment, by address
    std::size_t next;
  };
  struct live_entry {
    std::size_t block;
    std::uint64_t requested;
    bool small;
  };
  // (size, segment, offset, block index): best fit, then older segment, then lower offset.
  using pool_key = std::tuple<std::uint64_t, std::uint64_t, std::uint64_t, std::size_t>;

  [[nodiscard]] pool_key key(std::size_t i) const {
    return {blocks_[i].size, blocks_[i].segment, blocks_[i].offset, i};
  }

  // Merges block `second` (free, right after `first`) into `first`.
  void absorb(std::size_t first, std::size_t second) {
    blocks_[first].size += blocks_[second].size;
    blocks_[first].next = blocks_[second].next;
    if (blocks_[second].next != npos) blocks_[blocks_[second].next].prev = first;
    blocks_[second].size = 0;  // retired; its index is never reused
  }

  caching_allocator_config config_;
  std::vector<block> blocks_;
  std::set<pool_key> small_free_;
  std::set<pool_key> large_free_;
  std::unordered_map<std::uint64_t, live_entry> live_;
  std::uint64_t segments_ = 0;
  std::uint64_t reserved_bytes_ = 0;
  std::uint64_t allocated_bytes_ = 0;
  std::uint64_t requested_bytes_ = 0;
  caching_allocator_report report_;
};

/// Replays `problem`'s requests in time order (frees first at equal times).
inline caching_allocator_report simulate_caching_allocator(const dsa_problem& problem,
                                                           const caching_allocator_config& config = {}) {
  caching_allocator_simulator sim(config);
  for (const auto& e : detail::timeline_events(problem.buffers)) {
    const auto& b = problem.buffers[e.index];
    if (e.is_malloc) {
      sim.malloc(b.id, b.size_bytes);
    } else {
      sim.free(b.id);
    }
  }
  return sim.report();
}

}  // namespace memo
