// memo/pipeline/distributed_attention.hpp
//
// Causal attention over a sequence spread on P ranks (FPDT sections 4.1-4.2,
// Figures 4-7; DeepSpeed-Ulysses' head/sequence all-to-all).
//
// Each rank holds its tokens in FPDT's rank-ordinal layout (fpdt_shuffle.hpp:
// local chunk j of rank r is global chunk j P + r) with every head. For each
// local chunk j one all-to-all per tensor scatters heads and gathers the
// sequence: afterwards rank r holds global chunk group j, the contiguous
// tokens [j P c, (j + 1) P c), for its H / P query heads and their K/V
// heads. Once all u groups are in, rank r runs memo's chunked causal
// attention (model/attention.hpp: online softmax, host-resident K/V fetched
// double-buffered when `offload` is on) over the whole sequence for its
// heads; a reverse all-to-all per chunk brings O back to the local layout.
// The backward is the mirror: dO forward through the all-to-all, the
// attention backward (FPDT Figure 7's loop order), dQ/dK/dV back through the
// reverse all-to-all.
//
// Grouped-query attention. K/V heads are sharded like query heads when P
// divides them. With fewer K/V heads than ranks (P a multiple of H_kv) each
// rank receives the one K/V head its query heads read, the same head going
// to P / H_kv ranks; in the backward those ranks' dK/dV of that head are
// summed when they come back (the reverse all-to-all delivers every copy's
// gradient to the token's owner, which adds them in rank order).
//
// Shapes and errors: heads must be divisible by P, and P by H_kv or H_kv by
// P; the sequence must be a multiple of P c (checked with the numbers).
//
// Lifetime: the object owns its device and pinned buffers (sized once in
// the constructor, nothing is allocated by forward/backward); the backend
// and the communicator must outlive it. backward() uses what the last
// forward() saved (its sharded Q, K, V, O and log-sum-exp) and throws if
// there was none. All work is issued on the caller's stream; the
// communicator's collectives are issued on it too.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "memo/backend/buffer.hpp"
#include "memo/backend/communicator.hpp"
#include "memo/backend/concepts.hpp"
#include "memo/core/config.hpp"
#include "memo/core/error.hpp"
#include "memo/core/tensor_view.hpp"
#include "memo/model/attention.hpp"
#include "memo/pipeline/fpdt_shuffle.hpp"

namespace memo {

struct distributed_attention_shape {
  std::int64_t tokens = 0;           ///< T: the whole sequence
  std::int64_t heads = 0;            ///< H
  std::int64_t kv_heads = 0;         ///< H_kv
  std::int64_t head_dim = 0;         ///< D
  std::int64_t layout_chunk = 0;     ///< c: FPDT chunk (T = P u c)
  std::int64_t attention_chunk = 0;  ///< chunk of the local chunked attention
  bool offload = false;              ///< K/V of the local attention in host memory
};

namespace detail {

/// out(r, c) = in(r, c), or out(r, c) += in(r, c) with `accumulate`: the
/// packing of all-to-all blocks (any strides).
struct block_copy {
  tensor_view<float, 2> out;
  tensor_view<const float, 2> in;
  bool accumulate = false;

  MEMO_HOST_DEVICE std::int64_t rows() const { return out.extent(0); }
  MEMO_HOST_DEVICE std::int64_t cols() const { return out.extent(1); }
  MEMO_HOST_DEVICE void operator()(std::int64_t r, std::int64_t c) const {
    out(r, c) = accumulate ? out(r, c) + in(r, c) : in(r, c);
  }
  void validate() const {
    expects(out.extent(0) == in.extent(0) && out.extent(1) == in.extent(1),
            "distributed attention: block copy between views of different shapes");
  }
};

}  // namespace detail

template <class C, Backend B>
requires CommunicatorOf<C, B>
class distributed_attention {
 public:
  using stream_type = typename B::stream;

  distributed_attention(B& backend, C& comm, const distributed_attention_shape& shape)
      : backend_(backend),
        comm_(comm),
        shape_(shape),
        P_(comm.size()),
        rank_(comm.rank()),
        layout_(check(shape, comm.size())) {
    const std::int64_t T = shape.tokens, D = shape.head_dim;
    Hr_ = shape.heads / P_;
    Kr_ = shape.kv_heads >= P_ ? shape.kv_heads / P_ : 1;
    local_shape_ = {.tokens = T,
                    .heads = Hr_,
                    .kv_heads = Kr_,
                    .head_dim = D,
                    .chunk = shape.attention_chunk,
                    .offload = shape.offload};
    auto& device = backend.device_memory();
    auto floats = [&](std::int64_t n) { return buffer<float, device_resource>(device, static_cast<std::size_t>(n)); };
    q_ = floats(T * Hr_ * D), o_ = floats(T * Hr_ * D), dout_ = floats(T * Hr_ * D), dq_ = floats(T * Hr_ * D);
    k_ = floats(T * Kr_ * D), v_ = floats(T * Kr_ * D), dk_ = floats(T * Kr_ * D), dv_ = floats(T * Kr_ * D);
    lse_ = floats(Hr_ * T);
    const std::int64_t block = layout_.chunk_tokens() * std::max(Hr_, Kr_) * D;
    send_ = floats(block * P_), recv_ = floats(block * P_);
    const auto device_bytes = chunked_causal_attention<B>::required_device_bytes(local_shape_);
    const auto pinned_bytes = chunked_causal_attention<B>::required_pinned_bytes(local_shape_);
    scratch_ = buffer<std::byte, device_resource>(device, std::max<std::size_t>(device_bytes, 1));
    pinned_ = buffer<std::byte, pinned_resource>(backend.pinned_memory(), std::max<std::size_t>(pinned_bytes, 1));
    attention_.emplace(backend, local_shape_, memory_region{scratch_.data(), device_bytes},
                       memory_region{pinned_.data(), pinned_bytes});
  }

  distributed_attention(const distributed_attention&) = delete;
  distributed_attention& operator=(const distributed_attention&) = delete;

  [[nodiscard]] const fpdt_layout& layout() const noexcept { return layout_; }
  /// Query heads and K/V heads this rank attends with.
  [[nodiscard]] std::int64_t local_heads() const noexcept { return Hr_; }
  [[nodiscard]] std::int64_t local_kv_heads() const noexcept { return Kr_; }

  /// q [L, H, D], k and v [L, H_kv, D], o [L, H, D] in the rank-ordinal
  /// layout, L = T / P, dense.
  void forward(stream_type& on, tensor_view<const float, 3> q, tensor_view<const float, 3> k,
               tensor_view<const float, 3> v, tensor_view<float, 3> o) {
    expect_local(q, shape_.heads, "q"), expect_local(k, shape_.kv_heads, "k");
    expect_local(v, shape_.kv_heads, "v"), expect_local(o, shape_.heads, "o");
    const std::int64_t T = shape_.tokens, D = shape_.head_dim;
    for (std::int64_t j = 0; j < layout_.chunks_per_rank(); ++j) {
      scatter_heads(on, q, j, shape_.heads, Hr_, false, q_.data());
      scatter_heads(on, k, j, shape_.kv_heads, Kr_, true, k_.data());
      scatter_heads(on, v, j, shape_.kv_heads, Kr_, true, v_.data());
    }
    attention_->forward(on, sharded<const float>(q_.data(), Hr_), sharded<const float>(k_.data(), Kr_),
                        sharded<const float>(v_.data(), Kr_), sharded<float>(o_.data(), Hr_),
                        tensor_view<float, 2>::contiguous(lse_.data(), {Hr_, T}));
    for (std::int64_t j = 0; j < layout_.chunks_per_rank(); ++j) {
      gather_heads(on, o_.data(), j, shape_.heads, Hr_, false, o);
    }
    saved_ = true;
    (void)D;
  }

  /// dout [L, H, D] in; dq [L, H, D], dk and dv [L, H_kv, D] out
  /// (overwritten, not accumulated).
  void backward(stream_type& on, tensor_view<const float, 3> dout, tensor_view<float, 3> dq, tensor_view<float, 3> dk,
                tensor_view<float, 3> dv) {
    expects(saved_, "distributed attention: backward() before any forward()");
    expect_local(dout, shape_.heads, "dout"), expect_local(dq, shape_.heads, "dq");
    expect_local(dk, shape_.kv_heads, "dk"), expect_local(dv, shape_.kv_heads, "dv");
    const std::int64_t T = shape_.tokens;
    for (std::int64_t j = 0; j < layout_.chunks_per_rank(); ++j) {
      scatter_heads(on, dout, j, shape_.heads, Hr_, false, dout_.data());
    }
    zero(on, dq_), zero(on, dk_), zero(on, dv_);
    attention_->backward(
        on, sharded<const float>(q_.data(), Hr_), sharded<const float>(k_.data(), Kr_),
        sharded<const float>(v_.data(), Kr_), sharded<const float>(o_.data(), Hr_),
        sharded<const float>(dout_.data(), Hr_), tensor_view<const float, 2>::contiguous(lse_.data(), {Hr_, T}),
        sharded<float>(dq_.data(), Hr_), sharded<float>(dk_.data(), Kr_), sharded<float>(dv_.data(), Kr_));
    for (std::int64_t j = 0; j < layout_.chunks_per_rank(); ++j) {
      gather_heads(on, dq_.data(), j, shape_.heads, Hr_, false, dq);
      gather_heads(on, dk_.data(), j, shape_.kv_heads, Kr_, true, dk);
      gather_heads(on, dv_.data(), j, shape_.kv_heads, Kr_, true, dv);
    }
  }

 private:
  using device_resource = std::remove_reference_t<decltype(std::declval<B&>().device_memory())>;
  using pinned_resource = std::remove_reference_t<decltype(std::declval<B&>().pinned_memory())>;

  static fpdt_layout check(const distributed_attention_shape& s, int P) {
    expects(s.heads >= 1 && s.kv_heads >= 1 && s.head_dim >= 1 && s.attention_chunk >= 1, [&] {
      return "distributed attention: heads " + std::to_string(s.heads) + ", kv_heads " + std::to_string(s.kv_heads) +
             ", head_dim " + std::to_string(s.head_dim) + " and attention chunk " + std::to_string(s.attention_chunk) +
             " must be positive";
    });
    expects(s.heads % P == 0, [&] {
      return "distributed attention: " + std::to_string(s.heads) + " heads are not divisible by " + std::to_string(P) +
             " ranks";
    });
    expects(s.heads % s.kv_heads == 0 && (s.kv_heads % P == 0 || P % s.kv_heads == 0), [&] {
      return "distributed attention: " + std::to_string(s.kv_heads) + " K/V heads for " + std::to_string(s.heads) +
             " heads on " + std::to_string(P) +
             " ranks: K/V heads must divide the heads, and divide or be a "
             "multiple of the ranks";
    });
    return fpdt_layout::for_sequence(s.tokens, P, s.layout_chunk);
  }

  // The first K/V head rank r holds (its query heads' group).
  [[nodiscard]] std::int64_t first_head(std::int64_t r, std::int64_t total, std::int64_t per_rank, bool kv) const {
    if (!kv || total >= P_) return r * per_rank;
    return r * total / P_;  // replicated: P / H_kv consecutive ranks share a head
  }

  template <class T>
  tensor_view<T, 3> sharded(std::remove_const_t<T>* data, std::int64_t heads) const {
    return tensor_view<T, 3>::contiguous(data, {shape_.tokens, heads, shape_.head_dim});
  }

  void expect_local(const auto& view, std::int64_t heads, const char* name) const {
    const std::int64_t L = layout_.local_tokens(), D = shape_.head_dim;
    expects(view.extent(0) == L && view.extent(1) == heads && view.extent(2) == D && view.stride(2) == 1 &&
                view.stride(1) == D && view.stride(0) == heads * D,
            [&] {
              return std::string("distributed attention: ") + name + " must be a dense [" + std::to_string(L) + ", " +
                     std::to_string(heads) + ", " + std::to_string(D) + "] view (rank-local tokens, heads, head_dim)";
            });
  }

  void copy(stream_type& on, tensor_view<float, 2> out, tensor_view<const float, 2> in, bool accumulate = false) {
    const detail::block_copy op{out, in, accumulate};
    op.validate();
    backend_.parallel_for(on, extent_2d{op.rows(), op.cols()}, op);
  }
  void zero(stream_type& on, buffer<float, device_resource>& b) {
    backend_.memset_async(b.data(), 0, b.size() * sizeof(float), on);
  }

  // Local chunk j of `local` [L, heads, D] -> rank r's heads -> the sharded
  // [T, per_rank, D] tensor at global chunk group j.
  void scatter_heads(stream_type& on, tensor_view<const float, 3> local, std::int64_t j, std::int64_t heads,
                     std::int64_t per_rank, bool kv, float* sharded_out) {
    const std::int64_t c = layout_.chunk_tokens(), D = shape_.head_dim, width = per_rank * D;
    const std::int64_t block = c * width;
    for (int r = 0; r < P_; ++r) {
      copy(on, tensor_view<float, 2>::contiguous(send_.data() + r * block, {c, width}),
           tensor_view<const float, 2>(local.data() + (j * c * heads + first_head(r, heads, per_rank, kv)) * D,
                                       {c, width}, {heads * D, 1}));
    }
    exchange(on, block);
    // Block s is rank s's chunk j: global chunk j P + s, contiguous in order.
    copy(on, tensor_view<float, 2>::contiguous(sharded_out + layout_.group_begin(j) * width, {P_ * c, width}),
         tensor_view<const float, 2>::contiguous(recv_.data(), {P_ * c, width}));
  }

  // The reverse: group j of the sharded tensor back to local chunk j of
  // `local`, summing K/V head copies (overwrites, then adds the copies).
  void gather_heads(stream_type& on, const float* sharded_in, std::int64_t j, std::int64_t heads, std::int64_t per_rank,
                    bool kv, tensor_view<float, 3> local) {
    const std::int64_t c = layout_.chunk_tokens(), D = shape_.head_dim, width = per_rank * D;
    const std::int64_t block = c * width;
    copy(on, tensor_view<float, 2>::contiguous(send_.data(), {P_ * c, width}),
         tensor_view<const float, 2>::contiguous(sharded_in + layout_.group_begin(j) * width, {P_ * c, width}));
    exchange(on, block);
    const bool replicated = kv && heads < P_;
    for (int r = 0; r < P_; ++r) {
      const bool first_copy =
          !replicated || r == 0 || first_head(r, heads, per_rank, kv) != first_head(r - 1, heads, per_rank, kv);
      copy(on,
           tensor_view<float, 2>(local.data() + (j * c * heads + first_head(r, heads, per_rank, kv)) * D, {c, width},
                                 {heads * D, 1}),
           tensor_view<const float, 2>::contiguous(recv_.data() + r * block, {c, width}), !first_copy);
    }
  }

  void exchange(stream_type& on, std::int64_t block) {
    const auto n = static_cast<std::size_t>(block * P_);
    comm_.template all_to_all<float>(backend_, on, std::span<const float>(send_.data(), n),
                                     std::span<float>(recv_.data(), n));
  }

  B& backend_;
  C& comm_;
  distributed_attention_shape shape_;
  int P_, rank_;
  fpdt_layout layout_;
  std::int64_t Hr_ = 0, Kr_ = 0;
  attention_shape local_shape_{};
  buffer<float, device_resource> q_, k_, v_, o_, lse_, dout_, dq_, dk_, dv_, send_, recv_;
  buffer<std::byte, device_resource> scratch_;
  buffer<std::byte, pinned_resource> pinned_;
  std::optional<chunked_causal_attention<B>> attention_;
  bool saved_ = false;
};

}  // namespace memo
