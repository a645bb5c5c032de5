// memo/swap/token_fraction_swapper.hpp
//
// Token-wise recomputation and swapping of skeletal activations (MEMO
// section 4.1, Figures 6 and 11; the runtime executor of section 4.3.4).
//
// Three streams take part: the caller's compute stream, and an offload and
// a prefetch stream owned by the swapper. The step itself is not written
// here: the swapper walks `memo_step_protocol` (schedule/memo_protocol.hpp),
// the same action list `build_memo_step` turns into the simulated schedule,
// so what is simulated is what runs. For n layers, K rounding buffers and
// the last `resident_last_layers` layers resident (default 2, the paper's
// "last two transformer layers" whose backward starts right after their
// forward):
//
//   begin_forward(i)   acquire buffer i % K on the compute stream (its guard
//                      is the offload of layer i - K). The caller's forward
//                      writes every skeletal tensor.
//   end_forward(i)     runs the protocol's transfers up to the next caller
//                      action: "offload i" (record on compute, the offload
//                      stream waits, copies the offloaded ranges to the host
//                      store, releases the buffer: guard = end of the copy)
//                      and, after the last forward, the prefetches of the
//                      swapped layers whose buffer no later layer uses.
//   begin_backward(i)  "recompute i" if the protocol has one: the compute
//                      stream waits for layer i's prefetch, then runs the
//                      caller's token-wise `recompute` for the ranges that
//                      were not offloaded and the shared tensors the next
//                      layer overwrote.
//   end_backward(i)    releases buffer i % K on the compute stream (guard =
//                      end of layer i's backward) and runs "prefetch i - K",
//                      which overlaps layers i - 1 ... i - K + 1's backward.
//
// The swapper decides nothing: the offloaded ranges come from the
// `offload_plan` of its rounding buffers, host memory from the host store,
// which is reserved for every swapped layer when the swapper is built (a
// plan over the budget fails there, before any step runs). Layers must be
// driven in protocol order (forward 0..n-1, then backward n-1..0); anything
// else is a `memo::error`. Nothing here blocks the host except
// `synchronize` and `abandon_step`.
//
// Measured steps: after `record_timeline(true)` every step brackets each
// protocol action with events on the stream it runs on (step_recorder.hpp),
// and `last_timeline()` gives the measured step with the simulated
// schedule's stream and op names (build_memo_step in memo_step.hpp), so the
// two compare op by op and both open in chrome://tracing. A caller that
// rebuilds the recomputed ranges with work it issues itself (rather than
// inside the `recompute` function) calls `end_recompute(i)` after issuing
// it, so the measured recompute holds that work and the backward starts
// there.
//
// Lifetime rules:
//   - one swapper per `rounding_buffers` (a second is refused: both would
//     hand the same buffer to two layers), and the buffers and the store
//     must outlive it;
//   - destroying a swapper waits for its streams, releases any buffer a
//     step left held, and returns its host-store slots, so the next swapper
//     over the same store and buffers starts clean;
//   - a step abandoned part-way (an exception between begin_forward and the
//     last end_backward) is reset with `abandon_step()`, which drains the
//     three streams first; the next step then starts at begin_forward(0).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
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
#include "memo/core/liveness.hpp"
#include "memo/schedule/memo_protocol.hpp"
#include "memo/schedule/step_recorder.hpp"
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
  std::size_t resident_last_layers = 2;  ///< never swapped; at most K
  /// Host-store slots are keyed (host_layer_base + layer, ...), so several
  /// swappers (pipeline stages, model chunks) can share one store.
  std::size_t host_layer_base = 0;
};

/// The protocol shape of a swapper over `plan` (min(resident_last_layers,
/// layers) resident): swapped layers recompute when some offloaded tensor
/// keeps a recomputed tail; every layer but the last recomputes when some
/// tensor is shared.
inline memo_protocol_options swap_protocol_options(const offload_plan& plan, std::size_t rounding_buffers,
                                                   const swap_options& options) {
  memo_protocol_options protocol;
  protocol.layers = options.layers;
  protocol.rounding_buffers = rounding_buffers;
  protocol.resident_last_layers = std::min(options.resident_last_layers, options.layers);
  for (std::size_t t = 0; t < plan.layout().size(); ++t) {
    if (plan.shared(t)) {
      protocol.recompute_shared = true;
    } else if (!plan.recomputed(t).empty()) {
      protocol.recompute_swapped = true;
    }
  }
  return protocol;
}

template <Backend B>
class token_fraction_swapper {
 public:
  using stream_type = typename B::stream;
  using event_type = typename B::event;
  using native_stream = typename B::native_stream;
  using buffers_type = rounding_buffers<B>;
  using store_type = host_store<B>;
  using recompute_function = std::function<void(native_stream, const recompute_request&)>;

  /// Claims `buffers` and reserves the host slots of every swapped layer in
  /// `store`; throws (and leaves both as they were) when the buffers are
  /// driven by another swapper or the slots do not fit the store.
  token_fraction_swapper(B& backend, stream_type& compute, buffers_type& buffers, store_type& store,
                         swap_options options)
      : backend_(&backend),
        compute_(&compute),
        buffers_(&buffers),
        store_(&store),
        store_alive_(store.watch()),
        options_(options) {
    const std::size_t n = options_.layers;
    expects(n > 0, "token_fraction_swapper: the model needs at least one layer");
    expects(options_.resident_last_layers <= buffers.count(), [&] {
      return "token_fraction_swapper: " + std::to_string(options_.resident_last_layers) +
             " resident last layers need as many rounding buffers, but K = " + std::to_string(buffers.count());
    });
    protocol_options_ = swap_protocol_options(buffers.plan(), buffers.count(), options_);
    protocol_ = memo_step_protocol(protocol_options_);
    claim_ = buffers.claim("token_fraction_swapper (host layers " + std::to_string(options_.host_layer_base) +
                           ".." + std::to_string(options_.host_layer_base + n - 1) + ")");
    auto requests = host_slots_for(plan(), swapped_layers());
    for (auto& request : requests) request.key.layer += options_.host_layer_base;
    check_against_store(requests);
    offload_.emplace(backend.make_stream("offload"));
    prefetch_.emplace(backend.make_stream("prefetch"));
    compute_done_.emplace(backend.make_event());
    prefetch_done_.reserve(n);
    for (std::size_t i = 0; i < n; ++i) prefetch_done_.push_back(backend.make_event());
    leases_.resize(n);
    reservation_ = store.reserve(requests);  // last: nothing after it can throw
  }
  token_fraction_swapper(const token_fraction_swapper&) = delete;
  token_fraction_swapper& operator=(const token_fraction_swapper&) = delete;
  ~token_fraction_swapper() {
    // Copies in flight reference the buffers and the store; let them land.
    // Errors are reported by synchronize(), which callers use.
    drain();
    release_held_leases();
    try {
      if (!reservation_.empty() && !store_alive_.expired()) store_->release(reservation_);
    } catch (...) {
      // Only a store that lost the reservation some other way gets here.
    }
  }

  /// The plan and layout of the rounding buffers (read from them: an error
  /// once they are gone).
  [[nodiscard]] const offload_plan& plan() const {
    check_buffers_alive("plan");
    return buffers_->plan();
  }
  [[nodiscard]] const skeletal_layout& layout() const {
    check_buffers_alive("layout");
    return buffers_->layout();
  }
  [[nodiscard]] std::size_t layers() const noexcept { return options_.layers; }
  [[nodiscard]] std::size_t resident_last_layers() const noexcept { return protocol_options_.resident_last_layers; }
  [[nodiscard]] std::size_t swapped_layers() const noexcept { return protocol_options_.swapped_layers(); }
  /// True when layer `layer` is offloaded in forward and prefetched in backward.
  [[nodiscard]] bool swapped(std::size_t layer) const noexcept { return protocol_options_.swapped(layer); }
  /// The action list this swapper walks every step (memo_step_protocol).
  [[nodiscard]] const std::vector<memo_action>& protocol() const noexcept { return protocol_; }
  [[nodiscard]] const memo_protocol_options& protocol_options() const noexcept { return protocol_options_; }
  [[nodiscard]] stream_type& offload_stream() noexcept { return *offload_; }
  [[nodiscard]] stream_type& prefetch_stream() noexcept { return *prefetch_; }
  /// True between begin_forward(0) and the last end_backward.
  [[nodiscard]] bool in_step() const noexcept { return next_ != 0 || in_layer_; }

  /// Measures every later step (`on`) or stops measuring. Between steps
  /// only; turning it on makes the events once, never inside a step.
  void record_timeline(bool on) {
    expects(!in_step(), "token_fraction_swapper: record_timeline inside a step");
    if (!on) {
      recorder_.reset();
    } else if (!recorder_) {
      std::vector<std::string> streams;
      for (const auto s : {memo_stream::compute, memo_stream::offload, memo_stream::prefetch}) {
        streams.emplace_back(to_string(s));
      }
      recorder_.emplace(*backend_, std::move(streams), protocol_.size());
    }
  }
  [[nodiscard]] bool recording_timeline() const noexcept { return recorder_.has_value(); }
  /// The last step measured to its end (after `synchronize()`): one op per
  /// protocol action, on the streams "compute", "offload" and "prefetch".
  [[nodiscard]] timeline last_timeline() const {
    expects(recorder_.has_value(), "token_fraction_swapper::last_timeline: record_timeline(true) was not called");
    return recorder_->last_timeline("measured on " + std::string(B::name()));
  }

  /// Payload bytes issued so far (alignment padding copied along is not
  /// counted), for reports.
  [[nodiscard]] std::uint64_t offloaded_bytes() const noexcept { return offloaded_bytes_; }
  [[nodiscard]] std::uint64_t prefetched_bytes() const noexcept { return prefetched_bytes_; }
  [[nodiscard]] std::uint64_t recomputed_bytes() const noexcept { return recomputed_bytes_; }

  // --- forward --------------------------------------------------------------

  /// Starts layer `layer`'s forward: its skeletal slices, writable by work
  /// enqueued on the compute stream from now on.
  [[nodiscard]] skeletal_views begin_forward(std::size_t layer) {
    check_alive("begin_forward");
    expects(!in_layer_ && at(memo_action_kind::forward, layer), [&] {
      return "token_fraction_swapper: begin_forward(" + std::to_string(layer) + ") out of order (" + expected() + ")";
    });
    if (recorder_ && next_ == 0) recorder_->start(*compute_);
    leases_[layer] = buffers_->acquire(layer, *compute_);
    // The buffer's last user was layer - K, whose offload released it on
    // the offload stream when that layer is swapped.
    const std::size_t k = buffers_->count();
    open_op_ = record_begin(op_kind::compute, *compute_, layer >= k && swapped(layer - k));
    in_layer_ = true;
    shared_holder_ = layer;
    return views_of(layer);
  }

  /// Ends layer `layer`'s forward; its offload starts once the compute
  /// stream reaches this point.
  void end_forward(std::size_t layer) {
    check_alive("end_forward");
    expects(in_layer_ && at(memo_action_kind::forward, layer), [&] {
      return "token_fraction_swapper: end_forward(" + std::to_string(layer) + ") out of order (" + expected() + ")";
    });
    in_layer_ = false;
    record_end(*compute_);
    ++next_;
    run_transfers();
  }

  // --- backward -------------------------------------------------------------

  /// Starts layer `layer`'s backward: the compute stream waits for the
  /// prefetch, then runs `recompute` for the ranges that were not offloaded.
  /// The returned slices hold the forward's bytes for work enqueued on the
  /// compute stream from now on.
  [[nodiscard]] skeletal_views begin_backward(std::size_t layer, const recompute_function& recompute) {
    check_alive("begin_backward");
    const bool recomputes = !in_layer_ && at(memo_action_kind::recompute, layer);
    expects(recomputes || (!in_layer_ && at(memo_action_kind::backward, layer)), [&] {
      return "token_fraction_swapper: begin_backward(" + std::to_string(layer) + ") out of order (" + expected() + ")";
    });
    expects(leases_[layer].has_value(), [&] {
      return "token_fraction_swapper: layer " + std::to_string(layer) + " holds no buffer";
    });
    recompute_request request{layer, views_of(layer), {}};
    for (std::size_t t = 0; t < layout().size(); ++t) {
      if (plan().shared(t)) {
        if (shared_holder_ != layer) request.items.push_back({t, {0, layout()[t].tokens}});
      } else if (swapped(layer)) {
        for (const auto& range : plan().recomputed(t)) request.items.push_back({t, range});
      }
    }
    // The protocol and the plan must agree on whether anything is rebuilt.
    expects(recomputes == !request.items.empty(), [&] {
      return "token_fraction_swapper: layer " + std::to_string(layer) + ": the step protocol " +
             (recomputes ? "has" : "has no") + " recompute but the plan gives " +
             std::to_string(request.items.size()) + " ranges to rebuild";
    });
    if (recomputes) {
      expects(static_cast<bool>(recompute), [&] {
        return "token_fraction_swapper: layer " + std::to_string(layer) +
               " has ranges to recompute but no recompute function was given";
      });
    }
    if (swapped(layer)) backend_->wait(*compute_, prefetch_done_[layer]);
    shared_holder_ = layer;
    if (recomputes) {
      for (const auto& item : request.items) {
        recomputed_bytes_ += static_cast<std::uint64_t>(item.tokens.tokens()) * layout()[item.tensor].bytes_per_token;
      }
      recompute_op_ = record_begin(op_kind::compute, *compute_, swapped(layer));
      backend_->enqueue(*compute_, [fn = recompute, req = std::move(request)](native_stream native) { fn(native, req); });
      open_op_ = recompute_op_;
      record_end(*compute_);
      ++next_;
    }
    open_op_ = record_begin(op_kind::compute, *compute_, swapped(layer) && !recomputes);
    recomputed_layer_ = recomputes ? std::optional<std::size_t>(layer) : std::nullopt;
    in_layer_ = true;
    return views_of(layer);
  }

  /// True while layer `layer`'s backward is open and it recomputed (so
  /// `end_recompute(layer)` may be called).
  [[nodiscard]] bool recomputing(std::size_t layer) const noexcept { return recomputed_layer_ == layer; }

  /// Marks where the rebuild of layer `layer`'s recomputed ranges that the
  /// caller issued itself (after begin_backward) ends: the measured
  /// recompute extends to here and the backward starts here. Optional; a
  /// memo::error unless layer `layer` recomputes and its backward is open.
  void end_recompute(std::size_t layer) {
    check_alive("end_recompute");
    expects(in_layer_ && at(memo_action_kind::backward, layer) && recomputed_layer_ == layer, [&] {
      return "token_fraction_swapper: end_recompute(" + std::to_string(layer) +
             ") outside a recomputing layer's backward (" + expected() + ")";
    });
    if (recorder_) {
      recorder_->move_end(recompute_op_, *compute_);
      recorder_->move_begin(open_op_, *compute_);
    }
    recomputed_layer_.reset();  // once per layer
  }

  /// Ends layer `layer`'s backward (everything enqueued on the compute
  /// stream so far was its last use of the buffer).
  void end_backward(std::size_t layer) {
    check_alive("end_backward");
    expects(in_layer_ && at(memo_action_kind::backward, layer), [&] {
      return "token_fraction_swapper: end_backward(" + std::to_string(layer) + ") out of order (" + expected() + ")";
    });
    in_layer_ = false;
    recomputed_layer_.reset();
    record_end(*compute_);
    buffers_->release(std::move(*leases_[layer]), *compute_);
    leases_[layer].reset();
    ++next_;
    run_transfers();
    if (next_ == protocol_.size()) {
      next_ = 0;
      if (recorder_) recorder_->finish();
    }
  }

  /// Waits for the swapper's streams and the compute stream; rethrows errors.
  void synchronize() {
    backend_->synchronize(*offload_);
    backend_->synchronize(*prefetch_);
    backend_->synchronize(*compute_);
  }

  /// Resets a step abandoned part-way: drains the three streams, releases
  /// every buffer the step held (their last use has finished), and starts
  /// the next step at begin_forward(0). Rethrows the first error found in
  /// those streams, after the reset, so the caller sees it once. The host
  /// slots of layers whose offload did not run hold stale bytes; the next
  /// step's forward overwrites them before any prefetch reads them.
  void abandon_step() {
    // The protocol's state first: whatever fails below, the next step
    // starts from layer 0, not "out of order".
    next_ = 0;
    in_layer_ = false;
    shared_holder_.reset();
    recomputed_layer_.reset();
    if (recorder_) recorder_->discard();
    std::exception_ptr failure;
    for (auto* stream : {&*offload_, &*prefetch_, compute_}) {
      try {
        backend_->synchronize(*stream);
      } catch (...) {
        if (!failure) failure = std::current_exception();
      }
    }
    release_held_leases();
    if (claim_.buffers_alive()) {
      buffers_->refresh_guards(*compute_);
      backend_->synchronize(*compute_);
    }
    if (failure) std::rethrow_exception(failure);
  }

 private:
  // The buffers and the store must outlive the swapper: a step on either
  // after its end is an error, not a use of freed memory.
  void check_buffers_alive(const char* call) const {
    expects(claim_.buffers_alive(), [&] {
      return std::string("token_fraction_swapper::") + call +
             ": its rounding buffers were destroyed before it (they must outlive the swapper)";
    });
  }
  void check_alive(const char* call) const {
    check_buffers_alive(call);
    expects(!store_alive_.expired(), [&] {
      return std::string("token_fraction_swapper::") + call +
             ": its host store was destroyed before it (it must outlive the swapper)";
    });
  }

  [[nodiscard]] bool at(memo_action_kind kind, std::size_t layer) const noexcept {
    return protocol_[next_].kind == kind && protocol_[next_].layer == layer;
  }

  [[nodiscard]] std::string expected() const {
    const auto& action = protocol_[next_];
    const bool forward = action.kind == memo_action_kind::forward;
    if (in_layer_) {
      return "layer " + std::to_string(action.layer) + "'s " + (forward ? "forward" : "backward") + " has not ended";
    }
    return std::string("expected begin_") + (forward ? "forward(" : "backward(") + std::to_string(action.layer) + ")";
  }

  // Runs the swapper's own transfers (offloads and prefetches) that follow
  // in the protocol, up to the next action that needs the caller.
  void run_transfers() {
    while (next_ < protocol_.size()) {
      const auto& action = protocol_[next_];
      if (action.kind == memo_action_kind::offload) {
        offload(action.layer);
      } else if (action.kind == memo_action_kind::prefetch) {
        prefetch(action.layer);
      } else {
        return;
      }
      ++next_;
    }
  }

  void offload(std::size_t layer) {
    backend_->record(*compute_done_, *compute_);
    backend_->wait(*offload_, *compute_done_);
    open_op_ = record_begin(op_kind::device_to_host, *offload_, true, plan().offloaded_bytes_per_layer());
    for_each_offloaded(layer, [&](std::byte* host, std::byte* device, std::uint64_t bytes) {
      backend_->copy_async(host, device, static_cast<std::size_t>(bytes), copy_kind::device_to_host, *offload_);
    });
    record_end(*offload_);
    offloaded_bytes_ += plan().offloaded_bytes_per_layer();
    buffers_->release(std::move(*leases_[layer]), *offload_);
    leases_[layer].reset();
  }

  void prefetch(std::size_t layer) {
    leases_[layer] = buffers_->acquire(layer, *prefetch_);
    open_op_ = record_begin(op_kind::host_to_device, *prefetch_, true, plan().offloaded_bytes_per_layer());
    for_each_offloaded(layer, [&](std::byte* host, std::byte* device, std::uint64_t bytes) {
      backend_->copy_async(device, host, static_cast<std::size_t>(bytes), copy_kind::host_to_device, *prefetch_);
    });
    record_end(*prefetch_);
    prefetched_bytes_ += plan().offloaded_bytes_per_layer();
    backend_->record(prefetch_done_[layer], *prefetch_);
  }

  // Begins the measured op of protocol_[next_] on `on` (a no-op unless
  // recording); `waits`: `on` was just made to wait on another stream.
  std::size_t record_begin(op_kind kind, stream_type& on, bool waits, std::uint64_t bytes = 0) {
    if (!recorder_) return 0;
    const memo_action& action = protocol_[next_];
    return recorder_->begin(action.name(), static_cast<std::size_t>(action.stream()), kind, on, waits, bytes);
  }
  void record_end(stream_type& on) {
    if (recorder_) recorder_->end(open_op_, on);
  }

  void drain() noexcept {
    for (auto* stream : {offload_ ? &*offload_ : nullptr, prefetch_ ? &*prefetch_ : nullptr}) {
      if (stream != nullptr) memo::drain(*backend_, *stream);
    }
  }

  // Every stream is idle (callers drain first), so any stream may record
  // the release. Buffers destroyed before the swapper cannot be touched.
  void release_held_leases() noexcept {
    if (!claim_.buffers_alive()) return;
    memo::drain(*backend_, *compute_);
    for (auto& held : leases_) {
      if (!held) continue;
      try {
        buffers_->release(std::move(*held), *compute_);
      } catch (...) {
      }
      held.reset();
    }
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

  B* backend_;
  stream_type* compute_;
  buffers_type* buffers_;
  store_type* store_;
  liveness_watch store_alive_;
  swap_options options_;
  memo_protocol_options protocol_options_;
  std::vector<memo_action> protocol_;
  typename buffers_type::exclusive_use claim_;
  host_reservation reservation_;
  std::optional<stream_type> offload_;
  std::optional<stream_type> prefetch_;
  std::optional<event_type> compute_done_;
  std::vector<event_type> prefetch_done_;                            // [layer]
  std::vector<std::optional<typename buffers_type::lease>> leases_;  // [layer]
  std::size_t next_ = 0;   // the protocol action the step is at
  bool in_layer_ = false;  // between begin_ and end_ of protocol_[next_]
  std::optional<std::size_t> shared_holder_;  // whose values the shared region holds
  std::uint64_t offloaded_bytes_ = 0;
  std::uint64_t prefetched_bytes_ = 0;
  std::uint64_t recomputed_bytes_ = 0;
  std::optional<step_recorder<B>> recorder_;  // measures steps when set
  std::size_t open_op_ = 0;                   // the recorded op begun last
  std::size_t recompute_op_ = 0;              // the recorded recompute of the open backward
  std::optional<std::size_t> recomputed_layer_;  // the open backward recomputed (end_recompute allowed)
};

}  // namespace memo
