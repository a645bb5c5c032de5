// memo/swap/subsequence_swapper.hpp
//
// SPPO's adaptive offloading, executed (SPPO section 5): the skeletal
// activations of a pipeline stage leave the device between the forward and
// the backward of their subsequence, a ratio alpha_j of subsequence j's
// rows to pinned host memory and the rest to a device store.
//
// Why this is possible. A stage runs the forwards of its N subsequences in
// order, then their backwards in reverse order (pipeline/sppo_schedule.hpp).
// Subsequence j's skeletal tensors are written by its forward and read only
// by its backward; what later subsequences read again, the K/V of earlier
// tokens, the distributed attention keeps in its own state (the first level
// of SPPO's two-level management, section 5.1). So everything here is the
// second level: per subsequence, the share alpha_j (section 5.2) goes to
// the host, the share 1 - alpha_j stays on the device, and neither has to
// be on the device in the layer's own layout until the backward.
//
// The protocol, per unit (layer l of subsequence j), with two slots (a
// `rounding_buffers` of n_max rows of every tensor, alpha 1: nothing shared):
//
//   begin_forward(l, j)   slot u % 2 (u counts units in step order) is
//                         acquired on the compute stream: it waits for the
//                         copies out of unit u - 2. The caller's forward
//                         writes the first n_j rows of every tensor.
//   end_forward(l, j)     the copy stream waits for the compute so far,
//                         copies the first o_j = round(alpha_j n_j) rows'
//                         bytes of every tensor to the host store and the
//                         rest to the device store, and releases the slot
//                         (guard = end of those copies). Unit u + 1
//                         computes meanwhile.
//   begin_backward(l, j)  the slot is refilled on the copy stream (host
//                         rows and kept rows), unless it already was; the
//                         next unit's refill is issued into the other slot
//                         (it waits for the backward of unit u - 1, its
//                         last reader), so it runs during this backward;
//                         the compute stream waits for this unit's refill.
//   end_backward(l, j)    the slot is released on the compute stream.
//
// Resident units. A stage's last forward subsequence is its first
// backward (every SPPO program: pipeline/sppo_schedule.hpp), so the last
// forward unit's backward is the very next unit, and the one before it the
// unit after that. With `resident` = 1 or 2 those last units stay in their
// slot from forward to backward: no copy out, no refill, and no room in the
// stores (MEMO section 4.1 keeps its last two layers on the device for the
// same reason). A backward unit then runs in the slot its forward used;
// otherwise the slots simply alternate. On the last pipeline stage this
// takes the copies off the critical path: its backward of that subsequence
// follows the forward at once.
//
// One copy stream carries both directions: a stage's forwards all precede
// its backwards, so the two seldom overlap, and its FIFO order puts every
// refill after the copy out of the same bytes. A tensor whose bytes for n_j
// rows are not row-major (the attention's log-sum-exp, [heads, tokens]) is
// split the same way by bytes: the store only has to give back what it was
// given. The stores are packed without padding: the device store holds
// exactly layers x sum_j (n_j - o_j) rows' bytes, the host store layers x
// sum_j o_j rows' bytes.
//
// Units must be driven in the order given at construction (forwards, then
// backwards, layers ascending in a forward and descending in a backward);
// anything else is a memo::error. `abandon` resets a step that threw
// part-way.
//
// Memory: the slots and the device store are regions the caller owns (a
// planned arena), sized with `slot_bytes` / `kept_bytes`; the host store is
// allocated here, once. A step allocates nothing. Lifetime: the backend,
// the compute stream and the regions outlive the swapper.
//
// `copy_stream()` is the stream the swapper's copies run on, valid while
// the swapper lives: work enqueued there after begin_backward(u) runs after
// unit u + 1's refill (the look-ahead above), so a caller can see that
// refill done without waiting for the compute stream.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "memo/backend/buffer.hpp"
#include "memo/backend/concepts.hpp"
#include "memo/core/bytes.hpp"
#include "memo/core/error.hpp"
#include "memo/core/memory_region.hpp"
#include "memo/swap/rounding_buffers.hpp"
#include "memo/swap/skeletal_layout.hpp"

namespace memo {

/// Which rows of each subsequence's skeletal tensors leave the device: a
/// plain value, the same on every rank of a stage.
struct subsequence_offload_plan {
  std::vector<std::int64_t> rows;       ///< n_j: rows of subsequence j on this rank
  std::vector<double> alpha;            ///< alpha_j as given
  std::vector<std::int64_t> offloaded;  ///< o_j = round(alpha_j n_j): rows sent to the host

  /// Checks `alpha` (one per subsequence, each in [0, 1]; the error names
  /// `who`, the index and the value) and rounds it to rows.
  static subsequence_offload_plan from_alpha(std::vector<std::int64_t> rows, std::vector<double> alpha,
                                             const std::string& who) {
    expects(alpha.size() == rows.size(), [&] {
      return who + ": " + std::to_string(alpha.size()) + " offload ratios given for " + std::to_string(rows.size()) +
             " subsequences (one per subsequence)";
    });
    subsequence_offload_plan plan;
    for (std::size_t j = 0; j < rows.size(); ++j) {
      expects(std::isfinite(alpha[j]) && alpha[j] >= 0.0 && alpha[j] <= 1.0, [&] {
        return who + ": offload ratio " + std::to_string(j) + " is " + std::to_string(alpha[j]) +
               ", not a number in [0, 1]";
      });
      expects(rows[j] >= 1, [&] { return who + ": subsequence " + std::to_string(j) + " has no rows"; });
      plan.offloaded.push_back(std::llround(alpha[j] * static_cast<double>(rows[j])));
    }
    plan.rows = std::move(rows), plan.alpha = std::move(alpha);
    return plan;
  }

  [[nodiscard]] std::size_t subsequences() const noexcept { return rows.size(); }
  [[nodiscard]] std::int64_t max_rows() const noexcept {
    std::int64_t m = 0;
    for (const std::int64_t n : rows) m = std::max(m, n);
    return m;
  }
  [[nodiscard]] std::int64_t kept(std::size_t j) const { return rows[j] - offloaded[j]; }
  /// Rows kept on the device (sum_j n_j - o_j) and sent to the host (sum_j o_j), per layer.
  [[nodiscard]] std::int64_t kept_rows() const {
    std::int64_t k = 0;
    for (std::size_t j = 0; j < rows.size(); ++j) k += kept(j);
    return k;
  }
  [[nodiscard]] std::int64_t offloaded_rows() const {
    std::int64_t o = 0;
    for (const std::int64_t n : offloaded) o += n;
    return o;
  }
};

template <Backend B>
class subsequence_swapper {
 public:
  using stream_type = typename B::stream;
  using event_type = typename B::event;

  /// One unit of a step: layer `layer` of subsequence `subsequence`.
  struct unit {
    std::int64_t layer = 0;
    int subsequence = 0;
    bool forward = true;
  };

  /// The units kept in their slots (see the header comment): of the last
  /// `count` forward units (0, 1 or 2), those whose backward is the step's
  /// next backward unit in mirror order (the last forward's backward first,
  /// the one before it second), stopping at the first that is not.
  [[nodiscard]] static std::vector<unit> resident_units(const std::vector<int>& forward_order,
                                                        const std::vector<int>& backward_order, std::int64_t layers,
                                                        int count) {
    expects(count >= 0 && count <= 2, [&] {
      return "subsequence_swapper: " + std::to_string(count) + " resident units asked for; the two slots hold 0 to 2";
    });
    expects(layers >= 1, "subsequence_swapper: a stage needs at least one layer");
    std::vector<unit> out;
    const auto forward_units = static_cast<std::int64_t>(forward_order.size()) * layers;
    for (std::int64_t k = 0; k < count && k < forward_units; ++k) {
      // Forward unit F - 1 - k and backward unit k (forwards: layers
      // ascending; backwards: layers descending).
      const std::int64_t f = forward_units - 1 - k;
      const unit forward{f % layers, forward_order[static_cast<std::size_t>(f / layers)], true};
      if (k / layers >= static_cast<std::int64_t>(backward_order.size())) break;
      const unit backward{layers - 1 - k % layers, backward_order[static_cast<std::size_t>(k / layers)], false};
      if (forward.layer != backward.layer || forward.subsequence != backward.subsequence ||
          is_in(out, forward.layer, forward.subsequence)) {
        break;
      }
      out.push_back(forward);
    }
    return out;
  }

  /// Device bytes of the two slots for `layout` (every tensor of n_max
  /// rows, the plan's max_rows()).
  [[nodiscard]] static std::size_t slot_bytes(const skeletal_layout& layout) {
    return rounding_buffers<B>::required_bytes(offload_plan(layout, 1.0), 2);
  }
  /// Device bytes of the kept rows of `layers` layers (packed), without
  /// those of the `resident` units.
  [[nodiscard]] static std::uint64_t kept_bytes(const skeletal_layout& layout, const subsequence_offload_plan& plan,
                                                std::int64_t layers, const std::vector<unit>& resident = {}) {
    return store_bytes(layout, plan, layers, resident, [&](std::size_t j) { return plan.kept(j); });
  }
  /// Pinned host bytes of the offloaded rows of `layers` layers (packed),
  /// without those of the `resident` units.
  [[nodiscard]] static std::uint64_t host_bytes(const skeletal_layout& layout, const subsequence_offload_plan& plan,
                                                std::int64_t layers, const std::vector<unit>& resident = {}) {
    return store_bytes(layout, plan, layers, resident, [&](std::size_t j) { return plan.offloaded[j]; });
  }
  /// Bytes of one row of every tensor of `layout`.
  [[nodiscard]] static std::uint64_t row_bytes(const skeletal_layout& layout) {
    std::uint64_t total = 0;
    for (const auto& t : layout.tensors()) total = checked_add(total, t.bytes_per_token);
    return total;
  }

  /// `layout`: one layer's skeletal tensors of plan.max_rows() rows each.
  /// `forward_order` / `backward_order`: the subsequences of the step's
  /// forwards and backwards, in program order. `resident`: how many of the
  /// last forward units may stay in their slots (resident_units). `slots`
  /// and `kept` are regions of slot_bytes(layout) and kept_bytes(layout,
  /// plan, layers, resident_units(...)).
  subsequence_swapper(B& backend, stream_type& compute, skeletal_layout layout, subsequence_offload_plan plan,
                      std::int64_t layers, const std::vector<int>& forward_order,
                      const std::vector<int>& backward_order, memory_region slots, memory_region kept,
                      int resident = 0)
      : backend_(&backend), compute_(&compute), layout_(std::move(layout)), plan_(std::move(plan)),
        layers_(layers) {
    const std::int64_t n_max = plan_.max_rows();
    for (const auto& t : layout_.tensors()) {
      expects(static_cast<std::int64_t>(t.tokens) == n_max, [&] {
        return "subsequence_swapper: tensor '" + t.name + "' has " + std::to_string(t.tokens) +
               " rows, the slots hold the longest subsequence's " + std::to_string(n_max);
      });
    }
    expects(layers_ >= 1, "subsequence_swapper: a stage needs at least one layer");
    // Each subsequence forward once, and backward once: the backward order
    // is a permutation of the forward order.
    expects(!forward_order.empty(), "subsequence_swapper: the step has no subsequence to run");
    {
      std::vector<int> forwards = forward_order, backwards = backward_order;
      std::ranges::sort(forwards);
      std::ranges::sort(backwards);
      expects(std::ranges::adjacent_find(forwards) == forwards.end(),
              "subsequence_swapper: a subsequence appears twice in the forward order");
      expects(forwards == backwards,
              "subsequence_swapper: the backward order must run every forward subsequence exactly once");
    }
    auto add_units = [&](const std::vector<int>& order, bool forward) {
      for (const int j : order) {
        expects(j >= 0 && static_cast<std::size_t>(j) < plan_.subsequences(), [&] {
          return "subsequence_swapper: subsequence " + std::to_string(j) + " is not in the plan's " +
                 std::to_string(plan_.subsequences());
        });
        for (std::int64_t k = 0; k < layers_; ++k) units_.push_back({forward ? k : layers_ - 1 - k, j, forward});
      }
    };
    add_units(forward_order, true);
    add_units(backward_order, false);
    // Slots alternate (slot_of); every forward has its backward.
    expects(units_.size() % 2 == 0 && forward_order.size() == backward_order.size(),
            "subsequence_swapper: every forward needs its backward");
    const std::vector<unit> stay = resident_units(forward_order, backward_order, layers_, resident);
    resident_ = stay.size();
    const std::uint64_t needed = kept_bytes(layout_, plan_, layers_, stay);
    expects(kept.bytes >= needed, [&] {
      return "subsequence_swapper: the kept region has " + std::to_string(kept.bytes) + " bytes, the plan needs " +
             std::to_string(needed);
    });
    // Where each (layer, subsequence) lives in the two stores (a resident
    // unit nowhere).
    const std::uint64_t row = row_bytes(layout_);
    std::uint64_t host = 0, device = 0;
    for (std::int64_t l = 0; l < layers_; ++l) {
      for (std::size_t j = 0; j < plan_.subsequences(); ++j) {
        host_offset_.push_back(host), kept_offset_.push_back(device);
        if (is_in(stay, l, static_cast<int>(j))) continue;
        host += static_cast<std::uint64_t>(plan_.offloaded[j]) * row;
        device += static_cast<std::uint64_t>(plan_.kept(j)) * row;
      }
    }
    kept_base_ = kept.template as<std::byte>();
    if (host > 0) host_ = pinned_bytes(backend.pinned_memory(), static_cast<std::size_t>(host));
    slots_.emplace(backend, offload_plan(layout_, 1.0), 2, slots);
    copy_.emplace(backend.make_stream("subsequence offload"));
    computed_.emplace(backend.make_event());
    copied_.emplace(backend.make_event());
    for (int k = 0; k < 2; ++k) filled_.push_back(backend.make_event());
  }
  subsequence_swapper(const subsequence_swapper&) = delete;
  subsequence_swapper& operator=(const subsequence_swapper&) = delete;
  ~subsequence_swapper() {
    if (copy_) drain(*backend_, *copy_);
    release_held();
  }

  [[nodiscard]] const subsequence_offload_plan& plan() const noexcept { return plan_; }
  [[nodiscard]] const skeletal_layout& layout() const noexcept { return layout_; }
  /// Pinned host bytes of the offloaded rows.
  [[nodiscard]] std::uint64_t host_bytes() const noexcept { return host_.size_bytes(); }
  /// The units of a step, in the order they must be driven.
  [[nodiscard]] const std::vector<unit>& units() const noexcept { return units_; }
  /// How many of the last forward units stay in their slots (0 to 2).
  [[nodiscard]] std::size_t resident() const noexcept { return resident_; }
  /// The slot (0 or 1) unit `u` runs in.
  [[nodiscard]] std::size_t slot_of(std::size_t u) const noexcept {
    // Backward unit F + k mirrors forward unit F - 1 - k; with resident
    // units it takes that unit's slot, so backwards run one parity over.
    const std::size_t forwards = units_.size() / 2;
    return (u < forwards || resident_ == 0 ? u : u + 1) % 2;
  }
  /// Payload bytes copied to and from the host so far.
  [[nodiscard]] std::uint64_t offloaded_bytes() const noexcept { return offloaded_bytes_; }
  [[nodiscard]] std::uint64_t prefetched_bytes() const noexcept { return prefetched_bytes_; }
  /// The stream the swapper's copies run on, valid while the swapper lives:
  /// work enqueued there after begin_backward(u) runs after unit u + 1's
  /// refill.
  [[nodiscard]] stream_type& copy_stream() noexcept { return *copy_; }

  /// The slices of layer `layer` of subsequence `j` (n_j rows each), writable
  /// by work enqueued on the compute stream from now on.
  [[nodiscard]] std::vector<skeletal_slice> begin_forward(std::int64_t layer, int j) {
    expect_next(layer, j, true, "begin_forward");
    held_[slot_of(next_)] = slots_->acquire(slot_of(next_), *compute_);
    in_unit_ = true;
    return slices(next_);
  }

  /// Ends the forward: the unit's rows go to the stores once the compute
  /// stream reaches this point (a resident unit keeps its slot).
  void end_forward(std::int64_t layer, int j) {
    expect_end(layer, j, true, "end_forward");
    if (!is_resident(next_)) {
      backend_->record(*computed_, *compute_);
      backend_->wait(*copy_, *computed_);
      copy_unit(next_, true);
      slots_->release(std::move(*held_[slot_of(next_)]), *copy_);
      held_[slot_of(next_)].reset();
    }
    finish_unit();
  }

  /// The slices of the unit, holding its forward's bytes for work enqueued
  /// on the compute stream from now on; the next unit's refill starts.
  [[nodiscard]] std::vector<skeletal_slice> begin_backward(std::int64_t layer, int j) {
    expect_next(layer, j, false, "begin_backward");
    if (filled_up_to_ <= next_) fill(next_);
    if (next_ + 1 < units_.size()) fill(next_ + 1);
    // A resident unit's bytes were written on the compute stream itself.
    if (!is_resident(next_)) backend_->wait(*compute_, filled_[slot_of(next_)]);
    in_unit_ = true;
    return slices(next_);
  }

  /// Ends the backward (everything enqueued on the compute stream so far
  /// was the unit's last read of its slot).
  void end_backward(std::int64_t layer, int j) {
    expect_end(layer, j, false, "end_backward");
    slots_->release(std::move(*held_[slot_of(next_)]), *compute_);
    held_[slot_of(next_)].reset();
    finish_unit();
  }

  /// Resets a step that threw part-way: drains the copy and compute
  /// streams, releases the slots the step held; the next step starts at its
  /// first forward. Errors of the streams are dropped (the caller's own
  /// error is on its way).
  void abandon() noexcept {
    drain(*backend_, *copy_);
    release_held();
    try {
      slots_->refresh_guards(*compute_);
      backend_->synchronize(*compute_);
    } catch (...) {
    }
    next_ = 0, filled_up_to_ = 0, in_unit_ = false;
  }

 private:
  using pinned_resource = std::remove_reference_t<decltype(std::declval<B&>().pinned_memory())>;
  using pinned_bytes = buffer<std::byte, pinned_resource>;
  using lease = typename rounding_buffers<B>::lease;

  void expect_next(std::int64_t layer, int j, bool forward, const char* call) const {
    const unit& u = units_[next_];
    expects(!in_unit_ && u.layer == layer && u.subsequence == j && u.forward == forward, [&] {
      return std::string("subsequence_swapper: ") + call + "(layer " + std::to_string(layer) + ", subsequence " +
             std::to_string(j) + ") out of order: expected " + (in_unit_ ? "the end of " : "the start of ") +
             (u.forward ? "the forward" : "the backward") + " of layer " + std::to_string(u.layer) +
             ", subsequence " + std::to_string(u.subsequence);
    });
  }
  void expect_end(std::int64_t layer, int j, bool forward, const char* call) const {
    const unit& u = units_[next_];
    expects(in_unit_ && u.layer == layer && u.subsequence == j && u.forward == forward, [&] {
      return std::string("subsequence_swapper: ") + call + "(layer " + std::to_string(layer) + ", subsequence " +
             std::to_string(j) + ") without its begin";
    });
  }

  void finish_unit() {
    in_unit_ = false;
    if (++next_ < units_.size()) return;
    // The step's end on the compute stream covers every copy.
    backend_->record(*copied_, *copy_);
    backend_->wait(*compute_, *copied_);
    next_ = 0, filled_up_to_ = 0;
  }

  /// Refills the slot of backward unit `u` on the copy stream (a resident
  /// unit's slot still holds its bytes, and its lease).
  void fill(std::size_t u) {
    if (!is_resident(u)) {
      held_[slot_of(u)] = slots_->acquire(slot_of(u), *copy_);
      copy_unit(u, false);
      backend_->record(filled_[slot_of(u)], *copy_);
    }
    filled_up_to_ = u + 1;
  }

  /// Whether unit `u` (forward or backward) is one of the resident units:
  /// the last `resident_` forwards and the first `resident_` backwards.
  [[nodiscard]] bool is_resident(std::size_t u) const noexcept {
    const std::size_t forwards = units_.size() / 2;
    return u < forwards ? forwards - u <= resident_ : u - forwards < resident_;
  }
  [[nodiscard]] static bool is_in(const std::vector<unit>& units, std::int64_t layer, int j) {
    return std::ranges::any_of(units, [&](const unit& w) { return w.layer == layer && w.subsequence == j; });
  }
  /// Bytes of a store: `rows_of(j)` rows of every unit but the resident ones.
  template <class RowsOf>
  [[nodiscard]] static std::uint64_t store_bytes(const skeletal_layout& layout, const subsequence_offload_plan& plan,
                                                 std::int64_t layers, const std::vector<unit>& resident,
                                                 RowsOf rows_of) {
    std::uint64_t rows = 0;
    for (std::size_t j = 0; j < plan.subsequences(); ++j) {
      rows = checked_add(rows, checked_mul(static_cast<std::uint64_t>(rows_of(j)), static_cast<std::uint64_t>(layers)));
    }
    for (std::size_t k = 0; k < resident.size(); ++k) {
      const unit& w = resident[k];
      expects(!is_in({resident.begin(), resident.begin() + static_cast<std::ptrdiff_t>(k)}, w.layer, w.subsequence),
              "subsequence_swapper: a resident unit is listed twice");
      expects(w.subsequence >= 0 && static_cast<std::size_t>(w.subsequence) < plan.subsequences() && w.layer >= 0 &&
                  w.layer < layers,
              [&] {
                return "subsequence_swapper: resident unit (layer " + std::to_string(w.layer) + ", subsequence " +
                       std::to_string(w.subsequence) + ") is not one of " + std::to_string(layers) + " layers x " +
                       std::to_string(plan.subsequences()) + " subsequences";
              });
      rows -= static_cast<std::uint64_t>(rows_of(static_cast<std::size_t>(w.subsequence)));
    }
    return checked_mul(rows, row_bytes(layout));
  }

  /// Unit u's slot <-> the stores, on the copy stream: for every tensor,
  /// the first o_j rows' bytes with the host, the other n_j - o_j rows'
  /// bytes with the device store.
  void copy_unit(std::size_t u, bool out) {
    const unit& w = units_[u];
    const auto j = static_cast<std::size_t>(w.subsequence);
    const std::size_t at = static_cast<std::size_t>(w.layer) * plan_.subsequences() + j;
    std::byte* host = host_.data() + host_offset_[at];
    std::byte* kept = kept_base_ + kept_offset_[at];
    const auto o = static_cast<std::uint64_t>(plan_.offloaded[j]), k = static_cast<std::uint64_t>(plan_.kept(j));
    const std::vector<skeletal_slice> held = slices(u);
    for (const skeletal_slice& s : held) {
      const std::uint64_t to_host = o * s.bytes_per_token, to_kept = k * s.bytes_per_token;
      if (to_host > 0) {
        if (out) {
          backend_->copy_async(host, s.data, to_host, copy_kind::device_to_host, *copy_);
        } else {
          backend_->copy_async(s.data, host, to_host, copy_kind::host_to_device, *copy_);
        }
      }
      if (to_kept > 0) {
        std::byte* rows = s.data + to_host;
        backend_->copy_async(out ? kept : rows, out ? rows : kept, to_kept, copy_kind::device_to_device, *copy_);
      }
      host += to_host, kept += to_kept;
      (out ? offloaded_bytes_ : prefetched_bytes_) += to_host;
    }
  }

  /// Unit u's slices: n_j rows of every tensor at the start of its part of the slot.
  [[nodiscard]] std::vector<skeletal_slice> slices(std::size_t u) const {
    const auto rows = static_cast<std::size_t>(plan_.rows[static_cast<std::size_t>(units_[u].subsequence)]);
    std::vector<skeletal_slice> out;
    for (std::size_t t = 0; t < layout_.size(); ++t) {
      skeletal_slice s = (*held_[slot_of(u)])[t];
      s.tokens = rows;
      out.push_back(s);
    }
    return out;
  }

  void release_held() noexcept {
    if (!slots_) return;
    drain(*backend_, *compute_);
    for (auto& held : held_) {
      if (!held) continue;
      try {
        slots_->release(std::move(*held), *compute_);
      } catch (...) {
      }
      held.reset();
    }
  }

  B* backend_;
  stream_type* compute_;
  skeletal_layout layout_;
  subsequence_offload_plan plan_;
  std::int64_t layers_;
  std::vector<unit> units_;                 // [2 N layers]: forwards, then backwards
  std::vector<std::uint64_t> host_offset_;  // [layer N + subsequence] -> bytes into host_
  std::vector<std::uint64_t> kept_offset_;  // [layer N + subsequence] -> bytes into the kept region
  std::byte* kept_base_ = nullptr;
  pinned_bytes host_;                       // [sum over layers and j of o_j rows]
  std::optional<rounding_buffers<B>> slots_;
  std::optional<stream_type> copy_;
  std::optional<event_type> computed_, copied_;
  std::vector<event_type> filled_;          // [2]: a slot's refill
  std::optional<lease> held_[2];            // the leases of the two slots
  std::size_t resident_ = 0;                // the last forward units that stay in their slots
  std::size_t next_ = 0;                    // the unit whose begin or end comes next
  std::size_t filled_up_to_ = 0;            // backward units before this one have their refill issued
  bool in_unit_ = false;
  std::uint64_t offloaded_bytes_ = 0, prefetched_bytes_ = 0;
};

}  // namespace memo
