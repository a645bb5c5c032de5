// memo/swap/rounding_buffers.hpp
//
// The K device buffers that hold every layer's skeletal activations in turn
// (MEMO section 4.1, Figure 6; section 4.3.4).
//
// Layer i lives in buffer i % K (K = 2 in the paper). In forward, layer i+K
// may overwrite the buffer only after the offload of layer i has finished;
// in backward, the prefetch of layer i may overwrite it only after the
// backward of layer i+K, its last consumer, is done. This class turns that
// rule into the API:
//
//   - `acquire(layer, stream)` hands out buffer layer % K as a `lease` and
//     enqueues on `stream` a wait for the event that guards the buffer, so
//     work enqueued there afterwards cannot touch the bytes before the
//     previous holder's last use completed. The host never blocks;
//     `acquire_on_host` is the explicit blocking form for host writers.
//   - `release(std::move(lease), stream)` records the guard event on the
//     stream of the lease's last use (the offload stream in forward, the
//     compute stream in backward). A lease is move-only and can be released
//     once.
//   - Acquiring a buffer whose previous lease is unreleased is a
//     `memo::error`, and a lease destroyed without `release` poisons its
//     buffer (the last use is unknown, so the buffer is never handed out
//     again and every later `acquire` of it says why). Early reuse is thus
//     impossible through the API, not merely unlikely.
//
// Tensors of which nothing is offloaded (see `offload_plan::shared`) are not
// replicated K times: they live in one shared region written by every
// layer's forward and rewritten by its recompute (the paper's alpha = 0
// special case). The shared region is ordered by the compute stream, which
// is the only stream that may touch it; leases expose it for convenience.
//
// Device memory: the owning constructor allocates exactly
// `planned_device_bytes()` = K * buffer_bytes() + shared_bytes(), once, as K
// + 1 allocations. The region constructor carves the same parts, aligned,
// from a `memory_region` the caller owns (a planned arena), sized first with
// `required_bytes(plan, K)` (region_carver's counting mode); it allocates
// nothing.
//
// Lifetime rules, enforced rather than assumed:
//   - a lease used (sliced or released) after its rounding buffers were
//     destroyed is a `memo::error`, not a read of freed memory (slices
//     copied out of a lease earlier are plain pointers and cannot be
//     checked: do not keep them past the buffers);
//   - at most one user (one swapper) drives a set of rounding buffers at a
//     time: `claim(user)` hands out an `exclusive_use` and a second claim
//     while it lives is a `memo::error` naming both users, because two
//     swappers would hand the same buffer to two layers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "memo/backend/buffer.hpp"
#include "memo/backend/concepts.hpp"
#include "memo/core/bytes.hpp"
#include "memo/core/error.hpp"
#include "memo/core/memory_region.hpp"
#include "memo/swap/skeletal_layout.hpp"

namespace memo {

/// One skeletal tensor of one layer inside a device buffer:
/// [tokens, bytes_per_token] bytes starting at `data`.
struct skeletal_slice {
  std::byte* data = nullptr;
  std::size_t tokens = 0;
  std::size_t bytes_per_token = 0;
  bool shared = false;  ///< lives in the shared (never offloaded) region

  [[nodiscard]] std::uint64_t bytes() const noexcept {
    return static_cast<std::uint64_t>(tokens) * bytes_per_token;
  }
  /// First byte of token `token`.
  [[nodiscard]] std::byte* token(std::size_t index) const noexcept {
    return data + index * bytes_per_token;
  }
  /// Typed view of the slice, e.g. as<float>() for an fp32 [tokens, hidden].
  template <class T>
  [[nodiscard]] T* as() const noexcept {
    return reinterpret_cast<T*>(data);
  }
};

namespace detail {

// Bookkeeping shared between the buffers and their leases, so a lease that
// outlives nothing it should still has somewhere valid to report to.
struct rounding_state {
  enum class holder { free, leased, dropped };
  struct slot {
    holder state = holder::free;
    std::size_t layer = 0;          // the layer of the current or last lease
    std::uint64_t generation = 0;   // bumped on every acquire
  };
  std::mutex mutex;
  std::vector<slot> slots;
  bool destroyed = false;  // the rounding buffers are gone
  std::string user;        // who holds the exclusive claim, if anyone
};

inline void check_alive(const rounding_state& state, const char* what) {
  expects(!state.destroyed, [&] {
    return std::string("rounding buffer lease: ") + what +
           " after its rounding buffers were destroyed (a lease must not outlive them)";
  });
}

}  // namespace detail

template <Backend B>
class rounding_buffers {
 public:
  using backend_type = B;
  using stream_type = typename B::stream;
  using event_type = typename B::event;
  using device_resource =
      std::remove_reference_t<decltype(std::declval<B&>().device_memory())>;

  /// The right to use one buffer for one layer until released.
  class lease {
   public:
    lease() = default;
    lease(const lease&) = delete;
    lease& operator=(const lease&) = delete;
    lease(lease&& other) noexcept
        : owner_(std::exchange(other.owner_, nullptr)),
          state_(std::move(other.state_)),
          layer_(other.layer_),
          buffer_(other.buffer_),
          generation_(other.generation_) {}
    lease& operator=(lease&& other) noexcept {
      if (this != &other) {
        drop();
        owner_ = std::exchange(other.owner_, nullptr);
        state_ = std::move(other.state_);
        layer_ = other.layer_;
        buffer_ = other.buffer_;
        generation_ = other.generation_;
      }
      return *this;
    }
    /// A lease destroyed unreleased poisons its buffer (see the header).
    ~lease() { drop(); }

    [[nodiscard]] bool active() const noexcept { return owner_ != nullptr; }
    [[nodiscard]] std::size_t layer() const noexcept { return layer_; }
    [[nodiscard]] std::size_t buffer_index() const noexcept { return buffer_; }

    /// The slice of tensor `index` (layout order) for this lease's layer.
    [[nodiscard]] skeletal_slice operator[](std::size_t index) const {
      expects(active(), "rounding buffer lease: using a lease that was released or moved from");
      std::lock_guard lock(state_->mutex);
      detail::check_alive(*state_, "slicing a lease");
      return owner_->slice(buffer_, index);
    }
    [[nodiscard]] skeletal_slice operator[](std::string_view name) const {
      expects(active(), "rounding buffer lease: using a lease that was released or moved from");
      std::lock_guard lock(state_->mutex);
      detail::check_alive(*state_, "slicing a lease");
      return owner_->slice(buffer_, owner_->plan_.layout().index_of(name));
    }

   private:
    friend class rounding_buffers;
    lease(rounding_buffers* owner, std::shared_ptr<detail::rounding_state> state,
          std::size_t layer, std::size_t buffer, std::uint64_t generation)
        : owner_(owner), state_(std::move(state)), layer_(layer), buffer_(buffer),
          generation_(generation) {}

    void drop() noexcept {
      if (owner_ == nullptr) return;
      std::lock_guard lock(state_->mutex);
      auto& slot = state_->slots[buffer_];
      if (slot.generation == generation_ && slot.state == detail::rounding_state::holder::leased) {
        slot.state = detail::rounding_state::holder::dropped;
      }
      owner_ = nullptr;
    }

    rounding_buffers* owner_ = nullptr;
    std::shared_ptr<detail::rounding_state> state_;
    std::size_t layer_ = 0;
    std::size_t buffer_ = 0;
    std::uint64_t generation_ = 0;
  };

  /// The exclusive right to drive these buffers (see `claim`).
  class exclusive_use {
   public:
    exclusive_use() = default;
    exclusive_use(const exclusive_use&) = delete;
    exclusive_use& operator=(const exclusive_use&) = delete;
    exclusive_use(exclusive_use&& other) noexcept : state_(std::move(other.state_)) {}
    exclusive_use& operator=(exclusive_use&& other) noexcept {
      if (this != &other) {
        reset();
        state_ = std::move(other.state_);
      }
      return *this;
    }
    ~exclusive_use() { reset(); }
    /// False once the rounding buffers are destroyed.
    [[nodiscard]] bool buffers_alive() const {
      if (!state_) return false;
      std::lock_guard lock(state_->mutex);
      return !state_->destroyed;
    }

   private:
    friend class rounding_buffers;
    explicit exclusive_use(std::shared_ptr<detail::rounding_state> state) : state_(std::move(state)) {}
    void reset() noexcept {
      if (!state_) return;
      // The state may go with this last handle: drop it only after its
      // mutex is unlocked (buffers destroyed first leave this one the owner).
      const std::shared_ptr<detail::rounding_state> state = std::move(state_);
      std::lock_guard lock(state->mutex);
      state->user.clear();
    }
    std::shared_ptr<detail::rounding_state> state_;
  };

  /// Bytes of a region that holds `count` buffers for `plan` (alignment
  /// padding included): the size the region constructor needs.
  [[nodiscard]] static std::size_t required_bytes(const offload_plan& plan, std::size_t count = 2) {
    const auto sizes = layout_sizes(plan);
    region_carver counting;
    for (std::size_t b = 0; b < count; ++b) counting.take(static_cast<std::size_t>(sizes.buffer_bytes), "buffer");
    counting.take(static_cast<std::size_t>(sizes.shared_bytes), "shared region");
    return counting.required_bytes();
  }

  /// `count` (K) buffers for `plan`'s layout, allocated here; K >= 1, the
  /// paper uses 2.
  rounding_buffers(B& backend, offload_plan plan, std::size_t count = 2)
      : rounding_buffers(backend, std::move(plan), count, nullptr) {
    buffers_.reserve(count_);
    for (std::size_t b = 0; b < count_; ++b) {
      if (buffer_bytes_ > 0) {
        buffers_.emplace_back(backend.device_memory(), static_cast<std::size_t>(buffer_bytes_));
        bases_[b] = buffers_.back().data();
      }
    }
    if (shared_bytes_ > 0) {
      shared_ = device_buffer(backend.device_memory(), static_cast<std::size_t>(shared_bytes_));
      shared_base_ = shared_.data();
    }
  }

  /// The same buffers carved from `device_region`, which the caller owns and
  /// which must outlive them (size it with `required_bytes(plan, count)`).
  rounding_buffers(B& backend, offload_plan plan, std::size_t count, memory_region device_region)
      : rounding_buffers(backend, std::move(plan), count, nullptr) {
    region_carver carver(device_region, "rounding buffers");
    for (std::size_t b = 0; b < count_; ++b) {
      bases_[b] = carver.take(static_cast<std::size_t>(buffer_bytes_), "buffer " + std::to_string(b)).data;
    }
    shared_base_ = carver.take(static_cast<std::size_t>(shared_bytes_), "shared region").data;
  }

  ~rounding_buffers() {
    std::lock_guard lock(state_->mutex);
    state_->destroyed = true;
  }
  rounding_buffers(const rounding_buffers&) = delete;
  rounding_buffers& operator=(const rounding_buffers&) = delete;

  [[nodiscard]] const offload_plan& plan() const noexcept { return plan_; }
  [[nodiscard]] const skeletal_layout& layout() const noexcept { return plan_.layout(); }
  [[nodiscard]] std::size_t count() const noexcept { return count_; }
  /// Bytes of one rounding buffer (the tensors that are offloaded, aligned).
  [[nodiscard]] std::uint64_t buffer_bytes() const noexcept { return buffer_bytes_; }
  /// Bytes of the shared region (the tensors never offloaded, aligned).
  [[nodiscard]] std::uint64_t shared_bytes() const noexcept { return shared_bytes_; }
  /// All device memory these buffers hold.
  [[nodiscard]] std::uint64_t planned_device_bytes() const noexcept {
    return buffer_bytes_ * count_ + shared_bytes_;
  }
  /// Offset of tensor `index` inside its region.
  [[nodiscard]] std::uint64_t offset_bytes(std::size_t index) const {
    (void)layout()[index];
    return offsets_bytes_[index];
  }
  /// The buffer a layer uses.
  [[nodiscard]] std::size_t buffer_of(std::size_t layer) const noexcept { return layer % count_; }
  /// True while buffer `buffer` is leased.
  [[nodiscard]] bool leased(std::size_t buffer) const {
    std::lock_guard lock(state_->mutex);
    check_buffer(buffer);
    return state_->slots[buffer].state == detail::rounding_state::holder::leased;
  }

  /// Hands out buffer layer % K; later work on `on` waits for the guard.
  [[nodiscard]] lease acquire(std::size_t layer, stream_type& on) {
    lease handed = take(layer);
    backend_->wait(on, guards_[handed.buffer_index()]);
    return handed;
  }

  /// Hands out buffer layer % K after blocking the calling host thread until
  /// the guard has fired (for host code that writes the buffer directly).
  [[nodiscard]] lease acquire_on_host(std::size_t layer) {
    lease handed = take(layer);
    backend_->synchronize(guards_[handed.buffer_index()]);
    return handed;
  }

  /// Ends a lease; `last_use` is the stream of the last work that touches
  /// the buffer (everything enqueued on it so far is covered).
  void release(lease&& handed, stream_type& last_use) {
    expects(handed.owner_ == this, [&] {
      return std::string(handed.owner_ == nullptr
                             ? "rounding buffers: releasing a lease that was already released or moved from"
                             : "rounding buffers: releasing a lease handed out by other rounding buffers");
    });
    {
      std::lock_guard lock(state_->mutex);
      auto& slot = state_->slots[handed.buffer_];
      expects(slot.generation == handed.generation_ &&
                  slot.state == detail::rounding_state::holder::leased,
              "rounding buffers: releasing a stale lease");
      backend_->record(guards_[handed.buffer_], last_use);
      slot.state = detail::rounding_state::holder::free;
    }
    handed.owner_ = nullptr;
    handed.state_.reset();
  }

  /// Records every guard on `on` anew. For a user that drained all its
  /// streams after an abandoned step: a guard recorded after a failed task
  /// would otherwise hand that failure to the next acquire of its buffer.
  /// Every lease must be released.
  void refresh_guards(stream_type& on) {
    std::lock_guard lock(state_->mutex);
    for (std::size_t b = 0; b < count_; ++b) {
      expects(state_->slots[b].state != detail::rounding_state::holder::leased, [&] {
        return "rounding buffers: refresh_guards while layer " + std::to_string(state_->slots[b].layer) +
               " still holds buffer " + std::to_string(b);
      });
    }
    for (auto& guard : guards_) backend_->record(guard, on);
  }

  /// Claims these buffers for `user` (a swapper); a second claim while the
  /// first `exclusive_use` lives is an error naming both users.
  [[nodiscard]] exclusive_use claim(std::string user) {
    std::lock_guard lock(state_->mutex);
    expects(state_->user.empty(), [&] {
      return "rounding buffers: already driven by " + state_->user + "; " + user +
             " cannot share them (two users would hand one buffer to two layers: give each its own "
             "rounding buffers)";
    });
    expects(!user.empty(), "rounding buffers: claim needs a non-empty user name");
    state_->user = std::move(user);
    return exclusive_use(state_);
  }
  /// True while someone holds the exclusive claim.
  [[nodiscard]] bool claimed() const {
    std::lock_guard lock(state_->mutex);
    return !state_->user.empty();
  }

  /// The shared-region slice of a never-offloaded tensor (compute stream only).
  [[nodiscard]] skeletal_slice shared_slice(std::size_t index) const {
    expects(plan_.shared(index), [&] {
      return "rounding buffers: tensor '" + layout()[index].name +
             "' is offloaded, so it lives in the rounding buffers, not the shared region";
    });
    return slice(0, index);
  }

 private:
  using device_buffer = buffer<std::byte, device_resource>;

  struct sizes {
    std::uint64_t buffer_bytes = 0;
    std::uint64_t shared_bytes = 0;
    std::vector<std::uint64_t> offsets_bytes;  // [tensor] -> offset in its region
  };
  static sizes layout_sizes(const offload_plan& plan) {
    const auto& layout = plan.layout();
    expects(layout.size() > 0, "rounding buffers: the offload plan has an empty layout");
    sizes out;
    out.offsets_bytes.resize(layout.size());
    for (std::size_t i = 0; i < layout.size(); ++i) {
      std::uint64_t& end = plan.shared(i) ? out.shared_bytes : out.buffer_bytes;
      end = checked_align_up(end, default_alignment_bytes);
      out.offsets_bytes[i] = end;
      end = checked_add(end, layout[i].bytes());
    }
    return out;
  }

  // Everything but the memory: sizes, offsets, guard events, bookkeeping.
  rounding_buffers(B& backend, offload_plan plan, std::size_t count, std::nullptr_t)
      : backend_(&backend), plan_(std::move(plan)), count_(count),
        state_(std::make_shared<detail::rounding_state>()) {
    expects(count_ >= 1, "rounding buffers: at least one buffer is needed (K >= 1)");
    auto computed = layout_sizes(plan_);
    buffer_bytes_ = computed.buffer_bytes;
    shared_bytes_ = computed.shared_bytes;
    offsets_bytes_ = std::move(computed.offsets_bytes);
    bases_.assign(count_, nullptr);
    guards_.reserve(count_);
    for (std::size_t b = 0; b < count_; ++b) guards_.push_back(backend.make_event());
    state_->slots.resize(count_);
  }

  void check_buffer(std::size_t buffer_index) const {
    expects(buffer_index < count_, [&] {
      return "rounding buffers: buffer " + std::to_string(buffer_index) + " outside [0, " +
             std::to_string(count_) + ")";
    });
  }

  lease take(std::size_t layer) {
    const std::size_t b = buffer_of(layer);
    std::lock_guard lock(state_->mutex);
    auto& slot = state_->slots[b];
    expects(slot.state != detail::rounding_state::holder::leased, [&] {
      return "rounding buffers: acquiring buffer " + std::to_string(b) + " for layer " +
             std::to_string(layer) + " while layer " + std::to_string(slot.layer) +
             " still holds it (release that lease with the stream of its last use first)";
    });
    expects(slot.state != detail::rounding_state::holder::dropped, [&] {
      return "rounding buffers: buffer " + std::to_string(b) + " cannot be handed to layer " +
             std::to_string(layer) + ": the lease of layer " + std::to_string(slot.layer) +
             " was destroyed without release, so when its last use ends is unknown";
    });
    slot.state = detail::rounding_state::holder::leased;
    slot.layer = layer;
    ++slot.generation;
    return lease(this, state_, layer, b, slot.generation);
  }

  skeletal_slice slice(std::size_t buffer_index, std::size_t index) const {
    const auto& tensor = layout()[index];
    const bool shared = plan_.shared(index);
    const std::byte* base = shared ? shared_base_ : bases_[buffer_index];
    // Regions of zero bytes hold no tensor, so `base` is non-null here.
    return {const_cast<std::byte*>(base) + offsets_bytes_[index], tensor.tokens,
            tensor.bytes_per_token, shared};
  }

  B* backend_;
  offload_plan plan_;
  std::size_t count_;
  std::uint64_t buffer_bytes_ = 0;
  std::uint64_t shared_bytes_ = 0;
  std::vector<std::uint64_t> offsets_bytes_;   // [tensor] -> offset in its region
  std::vector<device_buffer> buffers_;         // owning: [K] x [buffer_bytes_] bytes
  device_buffer shared_;                       // owning: [shared_bytes_] bytes
  std::vector<std::byte*> bases_;              // [K] start of each buffer
  std::byte* shared_base_ = nullptr;           // start of the shared region
  std::vector<event_type> guards_;             // [K] last use of each buffer
  std::shared_ptr<detail::rounding_state> state_;
};

}  // namespace memo
