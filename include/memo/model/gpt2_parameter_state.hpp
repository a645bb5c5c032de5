// memo/model/gpt2_parameter_state.hpp
//
// The training state of GPT-2 parameters on a device, as the single-device
// model (gpt2_model.hpp) and a pipeline stage of the parallel one
// (gpt2_parallel_model.hpp) hold it: parameters, gradients and the two
// AdamW moments, one device allocation each, laid out by a parameter table
// (the whole model's, or a stage's: gpt2_stage_parameter_layout), so a
// checkpoint of the whole model is one copy; a pinned staging buffer for
// values in and out; AdamW over all of it with the step count.
//
// Every call is enqueued on the stream given; the calls that hand values
// to the host (`load`, `read`) synchronise it. The backend must outlive
// the object.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <type_traits>

#include "memo/backend/buffer.hpp"
#include "memo/backend/concepts.hpp"
#include "memo/model/gpt2_config.hpp"
#include "memo/model/gpt2_layer.hpp"
#include "memo/model/ops/adamw.hpp"

namespace memo {

template <Backend B>
class gpt2_parameter_state {
  using device_resource = std::remove_reference_t<decltype(std::declval<B&>().device_memory())>;
  using pinned_resource = std::remove_reference_t<decltype(std::declval<B&>().pinned_memory())>;
  using device_floats = buffer<float, device_resource>;

 public:
  /// Allocates the four device buffers and the staging buffer of `table`
  /// and zeroes them on `on`.
  gpt2_parameter_state(B& backend, typename B::stream& on, const gpt2_parameter_table& table)
      : backend_(&backend), table_(table) {
    const auto P = static_cast<std::size_t>(table.total);
    // Every allocation before any work is queued: a failed one then leaves
    // no memset running on a buffer its unwinding frees.
    for (auto* b : {&params_, &grads_, &adam_m_, &adam_v_}) *b = device_floats(backend.device_memory(), P);
    staging_ = buffer<float, pinned_resource>(backend.pinned_memory(), P);
    for (auto* b : {&params_, &grads_, &adam_m_, &adam_v_}) backend.memset_async(b->data(), 0, b->size_bytes(), on);
    p_ = view_gpt2_parameters(table_, params_.span());
    g_ = view_gpt2_parameters(table_, grads_.span());
  }

  [[nodiscard]] const gpt2_parameter_table& table() const noexcept { return table_; }
  /// Views of the parameters and of their gradients.
  [[nodiscard]] const gpt2_parameter_views<float>& parameters() const noexcept { return p_; }
  [[nodiscard]] const gpt2_parameter_views<float>& gradients() const noexcept { return g_; }
  [[nodiscard]] std::span<float> gradient_span() { return grads_.span(); }
  /// Device bytes of the parameters, gradients and moments (4 x 4 bytes each).
  [[nodiscard]] std::size_t bytes() const noexcept { return 4 * params_.size_bytes(); }
  /// AdamW steps taken since the last load.
  [[nodiscard]] std::int64_t steps() const noexcept { return step_; }
  /// The pinned staging buffer (table().total values), for callers that
  /// fill or read it in place.
  [[nodiscard]] std::span<float> staging() { return staging_.span(); }

  /// Copies `values` (table().total of them, or the staging buffer itself)
  /// in as the parameters, zeroes the moments and the step count.
  void load(typename B::stream& on, std::span<const float> values) {
    if (values.data() != staging_.data()) std::copy(values.begin(), values.end(), staging_.data());
    backend_->copy_async(params_.data(), staging_.data(), params_.size_bytes(), copy_kind::host_to_device, on);
    backend_->memset_async(adam_m_.data(), 0, adam_m_.size_bytes(), on);
    backend_->memset_async(adam_v_.data(), 0, adam_v_.size_bytes(), on);
    backend_->synchronize(on);
    step_ = 0;
  }

  /// The parameters (or, with `gradients`, the gradients) into the staging
  /// buffer, returned once there.
  std::span<const float> read(typename B::stream& on, bool gradients) {
    const device_floats& from = gradients ? grads_ : params_;
    backend_->copy_async(staging_.data(), from.data(), from.size_bytes(), copy_kind::device_to_host, on);
    backend_->synchronize(on);
    return staging_.span();
  }

  void zero_gradients(typename B::stream& on) { backend_->memset_async(grads_.data(), 0, grads_.size_bytes(), on); }

  /// One AdamW step over every value with the current gradients.
  void update(typename B::stream& on, const ops::adamw_config& adamw) {
    const auto P = static_cast<std::int64_t>(params_.size());
    auto flat = [P](float* d) { return tensor_view<float, 1>::contiguous(d, {P}); };
    const auto op = ops::make_adamw_update<float>(flat(params_.data()), flat(adam_m_.data()), flat(adam_v_.data()),
                                                  flat(grads_.data()), adamw, step_ + 1);
    detail::launch(*backend_, on, op);
    backend_->synchronize(on);
    ++step_;
  }

  /// The device buffers, for copies the caller places itself.
  [[nodiscard]] const float* device_parameters() const { return params_.data(); }
  [[nodiscard]] const float* device_gradients() const { return grads_.data(); }

 private:
  B* backend_;
  gpt2_parameter_table table_;
  device_floats params_, grads_, adam_m_, adam_v_;  // [table.total] each
  buffer<float, pinned_resource> staging_;          // [table.total]
  gpt2_parameter_views<float> p_{}, g_{};
  std::int64_t step_ = 0;
};

}  // namespace memo
