// memo/swap/token_fraction_swapper.hpp
//
// Token-wise recomputation and swapping of skeletal activations (MEMO
// section 4.1, Figures 6 and 11; the runtime executor of section 4.3.4).
//
// Three streams take part: the caller's compute stream, and an offload and
// a prefetch stream owned by the swapper. For an n-layer model with K
// rounding buffers and R resident last layers (default 2, the paper's "last
// two transformer layers" whose backward starts right after their forward):
//
//   forward, layer i    begin_forward(i): acquire buffer i % K on the compute
//                       stream (its guard: the offload of layer i - K).
//                       The caller's forward writes every skeletal tensor.
//                       end_forward(i): for i < n - R, record the compute
//                       event; the offload stream waits on it, copies the
//                       offloaded token ranges to the host store and
//                       releases the buffer (guard = end of that copy).
//                       Layers >= n - R keep their buffer.
//   backward, layer i   begin_backward(i, recompute): the compute stream
//                       waits for layer i's prefetch, then runs the
//                       caller's token-wise `recompute` on the stream for
//                       every range that was not offloaded (and for the
//                       shared, never-offloaded tensors when the shared
//                       region no longer holds layer i's values).
//                       end_backward(i): release buffer i % K on the compute
//                       stream (guard = end of layer i's backward) and start
//                       prefetching layer i - K into it, so the copy runs
//                       while layers i - 1 ... i - K + 1 compute backward.
//
// The swapper decides nothing: the offloaded ranges come from the
// `offload_plan` of its rounding buffers, host memory from the host store,
// which is reserved for every swapped layer when the swapper is built (a
// plan over the budget fails there, before any step runs). Layers must be
// driven in step order (forward 0..n-1, then backward n-1..0); anything else
// is a `memo::error`, because the prefetch schedule depends on it. Nothing
// here blocks the host; every ordering is a stream wait on an event, so the
// same code runs on any `Backend`.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "memo/backend/concepts.hpp"
#include "memo/core/bytes.hpp"
#include "memo/core/error.hpp"
#include "memo/swap/host_store.hpp"
#include "memo/swap/rounding_buffers.hpp"
#include "memo/swap/skeletal_layout.hpp"

namespace memo {

/// The slices of one layer's skeletal tensors, in layout order.
class skeletal_views {
 public:
  skeletal_views() = default;
  skeletal_views(const skeletal_layout* layout, std::size_t layer, std::vector<skeletal_slice> slices)
      : layout_(layout), layer_(layer), slices_(std::move(slices)) {}

  [[nodiscard]] std::size_t layer() const noexcept { return layer_; }
  [[nodiscard]] std::size_t size() const noexcept { return slices_.size(); }
  [[nodiscard]] const skeletal_slice& operator[](std::size_t index) const {
    expects(index < slices_.size(), [&] {
      return "skeletal views: tensor index " + std::to_string(index) + " outside [0, " +
             std::to_string(slices_.size()) + ")";
    });
    return slices_[index];
  }
  [[nodiscard]] const skeletal_slice& operator[](std::string_view name) const {
    expects(layout_ != nullptr, "skeletal views: empty view");
    return slices_[layout_->index_of(name)];
  }

 private:
  const skeletal_layout* layout_ = nullptr;
  std::size_t layer_ = 0;
  std::vector<skeletal_slice> slices_;
};

/// What the caller's recompute function must rematerialise: for each listed
/// (tensor, token range), the bytes that its forward wrote there. It may
/// read every other range of the layer (the layer input and the attention
/// output are always present).
struct recompute_request {
  struct item {
    std::size_t tensor = 0;
    token_range tokens;
  };
  std::size_t layer = 0;
  skeletal_views views;
  std::vector<item> items;
};

/// Options of a swapper; the plan itself comes from the rounding buffers.
struct swap_options {
  std::size_t layers = 0;                ///< n, layers per step
  std::size_t resident_last_layers = 2;  ///< R, never swapped; R <= K
  /// Host-store slots are keyed (host_layer_base + layer, ...), so several
  /// swappers (pipeline stages, model chunks) can share one store.
  std::size_t host_layer_base = 0;
};

template <Backend B>
class token_fraction_swapper {
 public:
  using stream_type = typename B::stream;
  using event_type = typename B::event;
  using native_stream = typename B::native_stream;
  using buffers_type = rounding_buffers<B>;
  using store_type = host_store<B>;
  using recompute_function = std::function<void(native_stream, const recompute_request&)>;

  /// Reserves the host slots of every swapped layer in `store`; throws (and
  /// leaves the store as it was) when they do not fit its budget.
  token_fraction_swapper(B& backend, stream_type& compute, buffers_type& buffers,
                         store_type& store, swap_options options)
      : backend_(&backend), compute_(&compute), buffers_(&buffers), store_(&store),
        options_(options), offload_(backend.make_stream("offload")),
        prefetch_(backend.make_stream("prefetch")), compute_done_(backend.make_event()) {
    const std::size_t n = options_.layers;
    expects(n > 0, "token_fraction_swapper: the model needs at least one layer");
    expects(options_.resident_last_layers <= buffers.count(), [&] {
      return "token_fraction_swapper: " + std::to_string(options_.resident_last_layers) +
             " resident last layers need as many rounding buffers, but K = " +
             std::to_string(buffers.count());
    });
    resident_ = std::min(options_.resident_last_layers, n);
    auto requests = host_slots_for(plan(), swapped_layers());
    for (auto& request : requests) request.key.layer += options_.host_layer_base;
    check_against_store(requests);
    store.reserve(requests);
    prefetch_done_.reserve(n);
    for (std::size_t i = 0; i < n; ++i) prefetch_done_.push_back(backend.make_event());
    leases_.resize(n);
  }
  token_fraction_swapper(const token_fraction_swapper&) = delete;
  token_fraction_swapper& operator=(const token_fraction_swapper&) = delete;
  ~token_fraction_swapper() {
    // Copies in flight reference the buffers and the store; let them land.
    // Errors are reported by synchronize(), which callers use.
    try {
      backend_->synchronize(offload_);
    } catch (...) {
    }
    try {
      backend_->synchronize(prefetch_);
    } catch (...) {
    }
  }

  [[nodiscard]] const offload_plan& plan() const noexcept { return buffers_->plan(); }
  [[nodiscard]] const skeletal_layout& layout() const noexcept { return buffers_->layout(); }
  [[nodiscard]] std::size_t layers() const noexcept { return options_.layers; }
  [[nodiscard]] std::size_t resident_layers() const noexcept { return resident_; }
  [[nodiscard]] std::size_t swapped_layers() const noexcept { return options_.layers - resident_; }
  /// True when layer `layer` is offloaded in forward and prefetched in backward.
  [[nodiscard]] bool swapped(std::size_t layer) const noexcept { return layer < swapped_layers(); }
  [[nodiscard]] stream_type& offload_stream() noexcept { return offload_; }
  [[nodiscard]] stream_type& prefetch_stream() noexcept { return prefetch_; }

  /// Payload bytes issued so far (alignment padding copied along is not
  /// counted), for reports.
  [[nodiscard]] std::uint64_t offloaded_bytes() const noexcept { return offloaded_bytes_; }
  [[nodiscard]] std::uint64_t prefetched_bytes() const noexcept { return prefetched_bytes_; }
  [[nodiscard]] std::uint64_t recomputed_bytes() const noexcept { return recomputed_bytes_; }

  // --- forward --------------------------------------------------------------

  /// Starts layer `layer`'s forward: its skeletal slices, writable by work
  /// enqueued on the compute stream from now on.
  [[nodiscard]] skeletal_views begin_forward(std::size_t layer) {
    expects(phase_ == phase::forward && !in_layer_ && layer == next_layer_, [&] {
      return "token_fraction_swapper: begin_forward(" + std::to_string(layer) + ") out of order (" +
             expected() + ")";
    });
    leases_[layer] = buffers_->acquire(layer, *compute_);
    in_layer_ = true;
    shared_holder_ = layer;
    return views_of(layer);
  }

  /// Ends layer `layer`'s forward; its offload starts once the compute
  /// stream reaches this point.
  void end_forward(std::size_t layer) {
    expects(phase_ == phase::forward && in_layer_ && layer == next_layer_, [&] {
      return "token_fraction_swapper: end_forward(" + std::to_string(layer) + ") out of order (" +
             expected() + ")";
    });
    in_layer_ = false;
    if (swapped(layer)) {
      auto& held = *leases_[layer];
      if (plan().offloaded_bytes_per_layer() == 0) {
        buffers_->release(std::move(held), *compute_);
      } else {
        backend_->record(compute_done_, *compute_);
        backend_->wait(offload_, compute_done_);
        for_each_offloaded(layer, [&](std::byte* host, std::byte* device, std::uint64_t bytes) {
          backend_->copy_async(host, device, static_cast<std::size_t>(bytes),
                               copy_kind::device_to_host, offload_);
        });
        offloaded_bytes_ += plan().offloaded_bytes_per_layer();
        buffers_->release(std::move(held), offload_);
      }
      leases_[layer].reset();
    }
    if (layer + 1 < options_.layers) {
      ++next_layer_;
      return;
    }
    // The turn: backward starts with layer n - 1. Swapped layers whose
    // buffer no later layer uses can be fetched back right away.
    phase_ = phase::backward;
    const std::size_t k = buffers_->count();
    for (std::size_t j = swapped_layers(); j-- > 0;) {
      if (j + k < options_.layers) break;
      prefetch(j);
    }
  }

  // --- backward -------------------------------------------------------------

  /// Starts layer `layer`'s backward: the compute stream waits for the
  /// prefetch, then runs `recompute` for the ranges that were not offloaded.
  /// The returned slices hold the forward's bytes for work enqueued on the
  /// compute stream from now on.
  [[nodiscard]] skeletal_views begin_backward(std::size_t layer, const recompute_function& recompute) {
    expects(phase_ == phase::backward && !in_layer_ && layer == next_layer_, [&] {
      return "token_fraction_swapper: begin_backward(" + std::to_string(layer) +
             ") out of order (" + expected() + ")";
    });
    expects(leases_[layer].has_value(), [&] {
      return "token_fraction_swapper: layer " + std::to_string(layer) + " holds no buffer";
    });
    if (swapped(layer)) backend_->wait(*compute_, prefetch_done_[layer]);

    recompute_request request{layer, views_of(layer), {}};
    for (std::size_t t = 0; t < layout().size(); ++t) {
      if (plan().shared(t)) {
        if (shared_holder_ != layer) request.items.push_back({t, {0, layout()[t].tokens}});
      } else if (swapped(layer)) {
        for (const auto& range : plan().recomputed(t)) request.items.push_back({t, range});
      }
    }
    shared_holder_ = layer;
    if (!request.items.empty()) {
      expects(static_cast<bool>(recompute), [&] {
        return "token_fraction_swapper: layer " + std::to_string(layer) +
               " has ranges to recompute but no recompute function was given";
      });
      for (const auto& item : request.items) {
        recomputed_bytes_ += static_cast<std::uint64_t>(item.tokens.tokens()) *
                             layout()[item.tensor].bytes_per_token;
      }
      backend_->enqueue(*compute_, [fn = recompute, req = std::move(request)](native_stream native) {
        fn(native, req);
      });
    }
    in_layer_ = true;
    return views_of(layer);
  }

  /// Ends layer `layer`'s backward (everything enqueued on the compute
  /// stream so far was its last use of the buffer).
  void end_backward(std::size_t layer) {
    expects(phase_ == phase::backward && in_layer_ && layer == next_layer_, [&] {
      return "token_fraction_swapper: end_backward(" + std::to_string(layer) + ") out of order (" +
             expected() + ")";
    });
    in_layer_ = false;
    buffers_->release(std::move(*leases_[layer]), *compute_);
    leases_[layer].reset();
    const std::size_t k = buffers_->count();
    if (layer >= k) prefetch(layer - k);
    if (layer > 0) {
      --next_layer_;
    } else {
      phase_ = phase::forward;
      next_layer_ = 0;
    }
  }

  /// Waits for the swapper's streams and the compute stream; rethrows errors.
  void synchronize() {
    backend_->synchronize(offload_);
    backend_->synchronize(prefetch_);
    backend_->synchronize(*compute_);
  }

 private:
  enum class phase { forward, backward };

  [[nodiscard]] std::string expected() const {
    if (in_layer_) {
      return std::string("layer ") + std::to_string(next_layer_) + "'s " +
             (phase_ == phase::forward ? "forward" : "backward") + " has not ended";
    }
    return std::string("expected begin_") + (phase_ == phase::forward ? "forward(" : "backward(") +
           std::to_string(next_layer_) + ")";
  }

  void check_against_store(const std::vector<host_slot_request>& requests) const {
    // A slot of another size means the store was planned for another layout;
    // say so before reporting a plain collision.
    for (const auto& request : requests) {
      if (!store_->contains(request.key)) continue;
      const auto existing = store_->slot_bytes(request.key);
      expects(existing == request.bytes, [&] {
        return "token_fraction_swapper: mismatched layouts: host slot " + request.key.to_string() +
               " already holds " + std::to_string(existing) + " bytes but this plan needs " +
               std::to_string(request.bytes) + " (use another host_layer_base or the same layout)";
      });
    }
    for (const auto& request : requests) {
      expects(!store_->contains(request.key), [&] {
        return "token_fraction_swapper: host slot " + request.key.to_string() +
               " is already used by another swapper (set a distinct host_layer_base)";
      });
    }
  }

  skeletal_views views_of(std::size_t layer) const {
    const auto& held = *leases_[layer];
    std::vector<skeletal_slice> slices;
    slices.reserve(layout().size());
    for (std::size_t t = 0; t < layout().size(); ++t) slices.push_back(held[t]);
    return skeletal_views(&layout(), layer, std::move(slices));
  }

  // Calls fn(host, device, bytes) once per copy of layer `layer`'s offloaded
  // ranges. Ranges that follow each other with the same gap on both sides
  // (alignment padding inside one allocation: the layer's rounding buffer and
  // its host slots, reserved together in the same order) become one copy, so
  // at alpha = 0 or 1 a layer moves in a single call.
  template <class Fn>
  void for_each_offloaded(std::size_t layer, Fn&& fn) {
    const auto& held = *leases_[layer];
    std::byte* host_start = nullptr;
    std::byte* device_start = nullptr;
    std::uint64_t run_bytes = 0;
    bool run_ends_tensor = false;  // the run's last range reaches its tensor's end
    for (std::size_t t = 0; t < layout().size(); ++t) {
      const auto slice = held[t];
      for (const auto& range : plan().offloaded(t)) {
        std::byte* host = store_->slot({options_.host_layer_base + layer, t, range});
        std::byte* device = slice.token(range.begin);
        const auto bytes = static_cast<std::uint64_t>(range.tokens()) * slice.bytes_per_token;
        if (run_bytes > 0) {
          // Only padding may lie between: the previous range ended its
          // tensor and this one starts the next, so no token is overwritten.
          const std::byte* host_end = host_start + run_bytes;
          const std::byte* device_end = device_start + run_bytes;
          if (run_ends_tensor && range.begin == 0 && host >= host_end && device >= device_end &&
              host - host_end == device - device_end &&
              static_cast<std::uint64_t>(host - host_end) < default_alignment_bytes) {
            run_bytes = static_cast<std::uint64_t>(host - host_start) + bytes;
            run_ends_tensor = range.end == slice.tokens;
            continue;
          }
          fn(host_start, device_start, run_bytes);
        }
        host_start = host;
        device_start = device;
        run_bytes = bytes;
        run_ends_tensor = range.end == slice.tokens;
      }
    }
    if (run_bytes > 0) fn(host_start, device_start, run_bytes);
  }

  void prefetch(std::size_t layer) {
    leases_[layer] = buffers_->acquire(layer, prefetch_);
    for_each_offloaded(layer, [&](std::byte* host, std::byte* device, std::uint64_t bytes) {
      backend_->copy_async(device, host, static_cast<std::size_t>(bytes),
                           copy_kind::host_to_device, prefetch_);
    });
    prefetched_bytes_ += plan().offloaded_bytes_per_layer();
    backend_->record(prefetch_done_[layer], prefetch_);
  }

  B* backend_;
  stream_type* compute_;
  buffers_type* buffers_;
  store_type* store_;
  swap_options options_;
  std::size_t resident_ = 0;
  stream_type offload_;
  stream_type prefetch_;
  event_type compute_done_;
  std::vector<event_type> prefetch_done_;                            // [layer]
  std::vector<std::optional<typename buffers_type::lease>> leases_;  // [layer]
  phase phase_ = phase::forward;
  std::size_t next_layer_ = 0;
  bool in_layer_ = false;
  std::optional<std::size_t> shared_holder_;  // whose values the shared region holds
  std::uint64_t offloaded_bytes_ = 0;
  std::uint64_t prefetched_bytes_ = 0;
  std::uint64_t recomputed_bytes_ = 0;
};

}  // namespace memo
