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
// heads. Once the groups are in, rank r runs memo's chunked causal attention
// (model/attention.hpp: online softmax, host-resident Q/K/V fetched
// double-buffered when `offload` is on) for its heads; a reverse all-to-all
// per chunk brings O back to the local layout. The backward is the mirror:
// dO forward through the all-to-all, the attention backward (FPDT Figure 7's
// loop order), dQ/dK/dV back through the reverse all-to-all.
//
// Two ways to call it:
//   - `forward(q, k, v, o)` / `backward(dout, dq, dk, dv)`: the whole
//     sequence; the object keeps the sharded Q, K, V, O and the log-sum-exp
//     of the forward for the backward, and the backward overwrites dq, dk,
//     dv (a self-contained attention, as in the tests and the example).
//   - `forward_queries` / `backward_queries`: a run of whole local chunks
//     (the queries of a subsequence, or the whole sequence), with the
//     log-sum-exp in the caller's memory ([H / P, T], sharded by head) and
//     the gradients added (+=) into the caller's: what a model's layer
//     calls (model/gpt2_parallel_model.hpp), keeping only its local tensors
//     between forward and backward. The backward re-sends O and dO of the
//     run through the all-to-all. With `offload` Q, K and V come from the
//     attention's host store, where the forward left the gathered chunks
//     (FPDT section 4.2: no all-to-all of Q, K or V in the backward). With
//     offload and `max_run_tokens` shorter than the sequence, the dK/dV a
//     run gives earlier runs' keys wait there too (the attention's host
//     carry): the state then holds one run's sharded K/V/dK/dV during a
//     call and nothing between calls, so runs need no `keep_state` and the
//     device memory does not grow with the sequence.
//     Without offload Q is re-sent, and K and V come from the object's state
//     (`keep_state`: the K/V of every run stay there from the forward, as a
//     pipeline stage keeps them, SPPO section 5) or are re-sent too. Runs
//     go forward in sequence order and backward in reverse order; with
//     `keep_state` the state also carries the dK/dV of earlier tokens from
//     later runs' backwards, so a run's dK/dV are complete when its own
//     backward ends.
//
// Grouped-query attention. K/V heads are sharded like query heads when P
// divides them. With fewer K/V heads than ranks (P a multiple of H_kv) each
// rank receives the one K/V head its query heads read, the same head going
// to P / H_kv ranks; in the backward those ranks' dK/dV of that head are
// summed when they come back (the reverse all-to-all delivers every copy's
// gradient to the token's owner, which adds them in rank order).
//
// Shapes and errors: heads must be divisible by P, and P by H_kv or H_kv by
// P; the sequence must be a multiple of P c (checked with the numbers, on
// every rank, before any collective).
//
// Memory: `required_bytes(shape, P)` sizes four regions (two-phase, like
// chunked_causal_attention): the workspace (all-to-all buffers and the
// sharded Q, O, dO, dQ of the longest run) is only used inside a call of
// the run API (forward_queries, backward_queries), so objects called in
// turn on one stream may share it; the state (sharded K, V, dK, dV of the
// whole sequence, or of the longest run with the host carry) may be
// shared the same way unless `keep_state` without it. The whole-sequence
// pair is the exception: backward() reads the sharded Q, O and
// log-sum-exp forward() left in the workspace and the K/V in the state,
// so an object that uses it owns both regions from forward() until
// backward() returns (a run call in between is refused by backward()). So
// may
// the attention's device scratch (Q/K/V and carry slots with offload): as
// a plain region (its copies start after what the stream enqueued before
// the call), or as a `chunked_attention_scratch` built for
// `local_attention_shape(shape, P)`, whose shared slot events let a call's
// first host fetch run during the call before it (model/attention.hpp,
// "Prefetch across calls"; a model's layers); the pinned Q/K/V/dK/dV store
// belongs to one object. The owning constructor allocates the four itself.
// forward and backward allocate nothing.
//
// Lifetime: the backend and the communicator must outlive the object; the
// regions too. All work, collectives included, is issued on the caller's
// stream.
#pragma once

#include <algorithm>
#include <array>
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
#include "memo/core/memory_region.hpp"
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
  bool offload = false;              ///< Q/K/V of the local attention in host memory
  /// Global tokens of the longest run forward_queries is given (a
  /// multiple of P c); 0 = the whole sequence.
  std::int64_t max_run_tokens = 0;
  /// The state (sharded K/V and the dK/dV carried between runs) belongs to
  /// this object and lives between its calls: needed for more than one run
  /// per sequence, unless offload with a max_run_tokens shorter than the
  /// sequence keeps both on the host (then this has no effect).
  bool keep_state = false;
  /// All-to-alls behind the attention's compute (see the header); false:
  /// all of a call's sends before its attention, all returns after it
  /// (the same values; a reference for measuring the overlap).
  bool overlap = true;
};

/// Bytes of the four regions a distributed_attention is built over.
struct distributed_attention_bytes {
  std::size_t workspace = 0;         ///< device; shareable between objects called in turn
  std::size_t state = 0;             ///< device; shareable unless keep_state (without the host carry)
  std::size_t attention_device = 0;  ///< device; shareable like the workspace
  std::size_t attention_pinned = 0;  ///< pinned host; this object's (offload)
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
  using event_type = typename B::event;

  /// The four regions' sizes for `shape` on `ranks` ranks; checks the shape.
  [[nodiscard]] static distributed_attention_bytes required_bytes(const distributed_attention_shape& shape,
                                                                  int ranks) {
    const fpdt_layout layout = check(shape, ranks);
    region_carver workspace, state;
    (void)carve(shape, layout, workspace, state);
    const attention_shape local = local_attention_shape(shape, ranks);
    return {workspace.required_bytes(), state.required_bytes(),
            chunked_causal_attention<B>::required_device_bytes(local),
            chunked_causal_attention<B>::required_pinned_bytes(local)};
  }

  /// The shape of this rank's chunked attention on `ranks` ranks (what a
  /// chunked_attention_scratch shared by several objects is built for).
  [[nodiscard]] static attention_shape local_attention_shape(const distributed_attention_shape& s, int ranks) {
    (void)check(s, ranks);
    const int P = ranks;
    return {.tokens = s.tokens,
            .heads = s.heads / P,
            .kv_heads = s.kv_heads >= P ? s.kv_heads / P : 1,
            .head_dim = s.head_dim,
            .chunk = s.attention_chunk,
            .offload = s.offload,
            .host_carry = host_carry(s)};
  }

  /// Owns its memory: the four regions allocated here.
  distributed_attention(B& backend, C& comm, const distributed_attention_shape& shape)
      : distributed_attention(backend, comm, shape, owned_memory(backend, shape, comm.size())) {}

  /// Over the caller's regions, of at least `required_bytes(shape, P)`.
  distributed_attention(B& backend, C& comm, const distributed_attention_shape& shape, memory_region workspace,
                        memory_region state, memory_region attention_device, memory_region attention_pinned)
      : backend_(backend), comm_(comm), shape_(shape), P_(comm.size()), layout_(check(shape, comm.size())) {
    build(workspace, state);
    attention_.emplace(backend_, local_attention_shape(shape_, P_), attention_device, attention_pinned);
  }

  /// The same, with the local attention over `attention_scratch` (built
  /// for local_attention_shape(shape, P); shared with the other objects
  /// over it, whose calls come in turn on one stream): the first host
  /// fetch of a call then runs during the previous call (attention.hpp,
  /// "Prefetch across calls"). The scratch must outlive the object.
  distributed_attention(B& backend, C& comm, const distributed_attention_shape& shape, memory_region workspace,
                        memory_region state, chunked_attention_scratch<B>& attention_scratch,
                        memory_region attention_pinned)
      : backend_(backend), comm_(comm), shape_(shape), P_(comm.size()), layout_(check(shape, comm.size())) {
    const attention_shape want = local_attention_shape(shape_, P_), has = attention_scratch.shape();
    expects(has == want, [&] {
      return "distributed attention: the attention scratch is for " + has.text(false) +
             "; this rank's attention needs local_attention_shape(shape, " + std::to_string(P_) +
             "): " + want.text(false) + "; in full: " + has.text() + " against " + want.text();
    });
    build(workspace, state);
    attention_.emplace(attention_scratch, attention_pinned);
  }

  distributed_attention(const distributed_attention&) = delete;
  distributed_attention& operator=(const distributed_attention&) = delete;
  ~distributed_attention() {
    if (exchange_) memo::drain(backend_, *exchange_);  // its error reached the caller's stream, which waits for it
  }

  /// Waits for the exchanges and copies queued so far and drops their
  /// error: for a step abandoned part-way, whose failure reached these
  /// streams through the events they wait for (else the next step's
  /// exchanges and copies would inherit it).
  void drain() noexcept {
    if (exchange_) memo::drain(backend_, *exchange_);
    if (attention_) attention_->drain();
  }

  [[nodiscard]] const fpdt_layout& layout() const noexcept { return layout_; }
  [[nodiscard]] const distributed_attention_shape& shape() const noexcept { return shape_; }
  /// Query heads and K/V heads this rank attends with.
  [[nodiscard]] std::int64_t local_heads() const noexcept { return Hr_; }
  [[nodiscard]] std::int64_t local_kv_heads() const noexcept { return Kr_; }

  /// q [L, H, D], k and v [L, H_kv, D], o [L, H, D] in the rank-ordinal
  /// layout, L = T / P, dense.
  void forward(stream_type& on, tensor_view<const float, 3> q, tensor_view<const float, 3> k,
               tensor_view<const float, 3> v, tensor_view<float, 3> o) {
    const std::int64_t L = layout_.local_tokens();
    expect_dense(q, shape_.heads, "q"), expect_dense(k, shape_.kv_heads, "k");
    expect_dense(v, shape_.kv_heads, "v"), expect_dense(o, shape_.heads, "o");
    expects(run_capacity_ >= shape_.tokens, [&] {
      return "distributed attention: forward of the whole sequence needs max_run_tokens 0 or " +
             std::to_string(shape_.tokens) + ", the shape has " + std::to_string(shape_.max_run_tokens);
    });
    forward_queries(on, {0, L}, q, k, v, o,
                    tensor_view<float, 2>::contiguous(parts_.lse.template as<float>(), {Hr_, shape_.tokens}));
    saved_ = true;
  }

  /// dout [L, H, D] in; dq [L, H, D], dk and dv [L, H_kv, D] out
  /// (overwritten, not accumulated).
  void backward(stream_type& on, tensor_view<const float, 3> dout, tensor_view<float, 3> dq, tensor_view<float, 3> dk,
                tensor_view<float, 3> dv) {
    expects(saved_, "distributed attention: backward() needs the whole-sequence forward() just before it (none "
                    "yet, or a run call since, which overwrote what it saved)");
    expect_dense(dout, shape_.heads, "dout"), expect_dense(dq, shape_.heads, "dq");
    expect_dense(dk, shape_.kv_heads, "dk"), expect_dense(dv, shape_.kv_heads, "dv");
    for (auto* g : {&dq, &dk, &dv}) {
      const auto bytes = static_cast<std::size_t>(g->extent(0) * g->extent(1) * g->extent(2)) * sizeof(float);
      backend_.memset_async(g->data(), 0, bytes, on);
    }
    const std::int64_t L = layout_.local_tokens();
    const run r = checked_run({0, L}, "backward");
    attention_->expect_backward_run(r.first, r.tokens);  // before any collective
    begin_exchange(on);
    run_backward(on, r, dout,
                 tensor_view<const float, 2>::contiguous(parts_.lse.template as<float>(), {Hr_, shape_.tokens}), dq,
                 dk, dv);
  }

  /// The forward of the queries of local rows [begin, end) (whole local
  /// chunks; their global tokens are the chunk groups begin / c .. end / c,
  /// which must start at a multiple of the attention chunk) against the
  /// keys of every token before the run's end. q, k, v and o cover the
  /// run's local rows ([end - begin, heads, D], any row stride, heads
  /// dense); lse is this rank's [H / P, T] log-sum-exp of the whole
  /// sequence, of which the run's columns are written, or [H / P, run
  /// tokens], the run's columns only (a caller that keeps a run's
  /// activations apart from the others'). A run from token 0 starts a new
  /// sequence.
  void forward_queries(stream_type& on, std::pair<std::int64_t, std::int64_t> rows, tensor_view<const float, 3> q,
                       tensor_view<const float, 3> k, tensor_view<const float, 3> v, tensor_view<float, 3> o,
                       tensor_view<float, 2> lse) {
    const run r = checked_run(rows, "forward_queries");
    expect_run_view(q, shape_.heads, r, "q"), expect_run_view(k, shape_.kv_heads, r, "k");
    expect_run_view(v, shape_.kv_heads, r, "v"), expect_run_view(o, shape_.heads, r, "o");
    const tensor_view<float, 2> run_lse = lse_of_run(lse, r);
    expects(r.first == 0 || shape_.keep_state || host_carry(shape_), [&] {
      return "distributed attention: a run from token " + std::to_string(r.first) +
             " attends to the K/V of earlier runs and carries their dK/dV, which needs keep_state, or offload "
             "with max_run_tokens shorter than the sequence";
    });
    saved_ = false;  // this run overwrites what a whole-sequence forward() left for backward()
    if (r.first == 0 && state_persists()) {
      zero(on, parts_.dk, Kr_ * shape_.tokens), zero(on, parts_.dv, Kr_ * shape_.tokens);
    }
    const std::int64_t k0 = state_first(r);
    stream_type& comm = *exchange_;
    begin_exchange(on);
    auto scatter_group = [&](std::int64_t j) {
      scatter_heads(comm, q, j - r.g0, shape_.heads, Hr_, false, sharded(parts_.q, Hr_, r.first, j));
      scatter_heads(comm, k, j - r.g0, shape_.kv_heads, Kr_, true, sharded(parts_.k, Kr_, k0, j));
      scatter_heads(comm, v, j - r.g0, shape_.kv_heads, Kr_, true, sharded(parts_.v, Kr_, k0, j));
    };
    // Group by group when the attention's chunks tile a group: the
    // all-to-alls of group j + 1 in and of group j's output back run on the
    // exchange stream while group j attends (FPDT section 4.1).
    const std::int64_t group = layout_.group_begin(1);
    const bool pipelined = shape_.overlap && group % shape_.attention_chunk == 0;
    const std::int64_t step = pipelined ? 1 : r.g1 - r.g0;
    for (std::int64_t i = r.g0; i < r.g0 + step; ++i) scatter_group(i);
    backend_.record(scattered_[r.g0 % 2], comm);
    for (std::int64_t j = r.g0; j < r.g1; j += step) {
      const std::int64_t last = j + step;  // groups [j, last) attend now
      if (last < r.g1) {  // the next group's inputs, ahead of this group's output
        scatter_group(last);
        backend_.record(scattered_[last % 2], comm);
      }
      backend_.wait(on, scattered_[j % 2]);
      const std::int64_t first = layout_.group_begin(j), tokens = layout_.group_begin(last) - first;
      // K/V: the whole sequence's, or with the attention's host carry the
      // attending groups' only.
      const bool carry = host_carry(shape_);
      const std::int64_t kv_row = carry ? first - k0 : 0, kv_rows = carry ? tokens : shape_.tokens;
      attention_->forward_queries(on, first, rows_view<const float>(parts_.q, Hr_, first - r.first, tokens),
                                  rows_view<const float>(parts_.k, Kr_, kv_row, kv_rows),
                                  rows_view<const float>(parts_.v, Kr_, kv_row, kv_rows),
                                  rows_view<float>(parts_.o, Hr_, first - r.first, tokens),
                                  lse_columns(run_lse, first - r.first, tokens));
      backend_.record(computed_[j % 2], on);
      backend_.wait(comm, computed_[j % 2]);
      for (std::int64_t i = j; i < last; ++i) {
        gather_heads(comm, sharded(parts_.o, Hr_, r.first, i), i - r.g0, shape_.heads, Hr_, false, o, false);
      }
    }
    end_exchange(on);
  }

  /// The backward of the run of local rows [begin, end): q, k, v, o as the
  /// forward was given them (q is read only without offload, k and v only
  /// when neither offload nor keep_state keeps them), dout [end - begin, H,
  /// D], lse as filled by the forward (the whole sequence's or the run's
  /// columns); dq, dk, dv of the run's rows are added into (+=). Runs go
  /// backward in reverse order of their forwards.
  void backward_queries(stream_type& on, std::pair<std::int64_t, std::int64_t> rows, tensor_view<const float, 3> q,
                        tensor_view<const float, 3> k, tensor_view<const float, 3> v, tensor_view<const float, 3> o,
                        tensor_view<const float, 3> dout, tensor_view<const float, 2> lse, tensor_view<float, 3> dq,
                        tensor_view<float, 3> dk, tensor_view<float, 3> dv) {
    const run r = checked_run(rows, "backward_queries");
    if (!shape_.offload) expect_run_view(q, shape_.heads, r, "q");
    expect_run_view(o, shape_.heads, r, "o");
    expect_run_view(dout, shape_.heads, r, "dout"), expect_run_view(dq, shape_.heads, r, "dq");
    expect_run_view(dk, shape_.kv_heads, r, "dk"), expect_run_view(dv, shape_.kv_heads, r, "dv");
    const bool resend_kv = !shape_.offload && !shape_.keep_state;  // else the state or the host has them
    if (resend_kv) expect_run_view(k, shape_.kv_heads, r, "k"), expect_run_view(v, shape_.kv_heads, r, "v");
    const tensor_view<const float, 2> run_lse = lse_of_run(lse, r);
    attention_->expect_backward_run(r.first, r.tokens);  // before any collective
    saved_ = false;  // as in forward_queries
    begin_exchange(on);
    for (std::int64_t j = r.g0; j < r.g1; ++j) {
      if (!shape_.offload) {
        scatter_heads(*exchange_, q, j - r.g0, shape_.heads, Hr_, false, sharded(parts_.q, Hr_, r.first, j));
      }
      scatter_heads(*exchange_, o, j - r.g0, shape_.heads, Hr_, false, sharded(parts_.o, Hr_, r.first, j));
      if (resend_kv) {
        scatter_heads(*exchange_, k, j - r.g0, shape_.kv_heads, Kr_, true, sharded(parts_.k, Kr_, 0, j));
        scatter_heads(*exchange_, v, j - r.g0, shape_.kv_heads, Kr_, true, sharded(parts_.v, Kr_, 0, j));
      }
    }
    run_backward(on, r, dout, run_lse, dq, dk, dv);
  }

 private:
  using device_resource = std::remove_reference_t<decltype(std::declval<B&>().device_memory())>;
  using pinned_resource = std::remove_reference_t<decltype(std::declval<B&>().pinned_memory())>;

  struct parts {
    memory_region send, recv;      // [P, c, max(Hr, Kr), D] each: one all-to-all
    memory_region q, o, dout, dq;  // [run tokens, Hr, D] sharded
    memory_region lse;             // [Hr, T]: the whole-sequence API's
    memory_region k, v, dk, dv;    // [T, Kr, D] sharded (state)
  };
  // A run of local chunk groups [g0, g1): global tokens [first, first + tokens).
  struct run {
    std::int64_t g0 = 0, g1 = 0, first = 0, tokens = 0;
  };
  struct owned {
    buffer<std::byte, device_resource> workspace, state, device;
    buffer<std::byte, pinned_resource> pinned;
  };

  distributed_attention(B& backend, C& comm, const distributed_attention_shape& shape, owned memory)
      : backend_(backend), comm_(comm), shape_(shape), P_(comm.size()), layout_(check(shape, comm.size())),
        owned_(std::move(memory)) {
    auto region = [](auto& b) { return memory_region{b.data(), b.size_bytes()}; };
    build(region(owned_->workspace), region(owned_->state));
    attention_.emplace(backend_, local_attention_shape(shape_, P_), region(owned_->device), region(owned_->pinned));
  }

  static owned owned_memory(B& backend, const distributed_attention_shape& shape, int ranks) {
    const distributed_attention_bytes bytes = required_bytes(shape, ranks);
    auto device = [&](std::size_t n) {
      return buffer<std::byte, device_resource>(backend.device_memory(), std::max<std::size_t>(n, 1));
    };
    buffer<std::byte, pinned_resource> pinned(backend.pinned_memory(), std::max<std::size_t>(bytes.attention_pinned, 1));
    return {device(bytes.workspace), device(bytes.state), device(bytes.attention_device), std::move(pinned)};
  }

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
    fpdt_layout layout = fpdt_layout::for_sequence(s.tokens, P, s.layout_chunk);
    const std::int64_t group = P * s.layout_chunk;
    expects(s.max_run_tokens >= 0 && s.max_run_tokens <= s.tokens && s.max_run_tokens % group == 0, [&] {
      return "distributed attention: max_run_tokens " + std::to_string(s.max_run_tokens) +
             " must be 0 or a multiple of ranks x chunk = " + std::to_string(group) + " up to the sequence " +
             std::to_string(s.tokens);
    });
    return layout;
  }

  static std::size_t floats(std::int64_t a, std::int64_t b, std::int64_t c) {
    return checked_mul(checked_mul(checked_mul(static_cast<std::uint64_t>(a), static_cast<std::uint64_t>(b)),
                                   static_cast<std::uint64_t>(c)),
                       sizeof(float));
  }

  /// The one table of sizes (counting mode to size, real carvers to build).
  static parts carve(const distributed_attention_shape& s, const fpdt_layout& layout, region_carver& workspace,
                     region_carver& state) {
    const auto P = layout.ranks();
    const std::int64_t Hr = s.heads / P, Kr = s.kv_heads >= P ? s.kv_heads / P : 1, D = s.head_dim;
    const std::int64_t run = s.max_run_tokens == 0 ? s.tokens : s.max_run_tokens;
    parts p;
    const std::size_t block = floats(P * layout.chunk_tokens(), std::max(Hr, Kr), D);
    p.send = workspace.take(block, "all-to-all send [P, chunk, heads, head_dim]");
    p.recv = workspace.take(block, "all-to-all recv [P, chunk, heads, head_dim]");
    p.q = workspace.take(floats(run, Hr, D), "sharded Q [run, heads / P, head_dim]");
    p.o = workspace.take(floats(run, Hr, D), "sharded O [run, heads / P, head_dim]");
    p.dout = workspace.take(floats(run, Hr, D), "sharded dO [run, heads / P, head_dim]");
    p.dq = workspace.take(floats(run, Hr, D), "sharded dQ [run, heads / P, head_dim]");
    p.lse = workspace.take(floats(Hr, s.tokens, 1), "log-sum-exp [heads / P, tokens]");
    // With the host carry the attention keeps earlier runs' K/V and their
    // dK/dV carry on the host: the state holds one run's.
    const std::int64_t kv = host_carry(s) ? run : s.tokens;
    p.k = state.take(floats(kv, Kr, D), "sharded K [tokens, kv heads / P, head_dim]");
    p.v = state.take(floats(kv, Kr, D), "sharded V [tokens, kv heads / P, head_dim]");
    p.dk = state.take(floats(kv, Kr, D), "sharded dK [tokens, kv heads / P, head_dim]");
    p.dv = state.take(floats(kv, Kr, D), "sharded dV [tokens, kv heads / P, head_dim]");
    return p;
  }

  /// Carves the workspace and the state and makes the exchange stream;
  /// the constructor then builds the local attention.
  void build(memory_region workspace, memory_region state) {
    Hr_ = shape_.heads / P_;
    Kr_ = shape_.kv_heads >= P_ ? shape_.kv_heads / P_ : 1;
    run_capacity_ = shape_.max_run_tokens == 0 ? shape_.tokens : shape_.max_run_tokens;
    region_carver w(workspace, "distributed attention workspace");
    region_carver s(state, "distributed attention state");
    parts_ = carve(shape_, layout_, w, s);
    exchange_.emplace(backend_.make_stream("distributed attention all-to-all"));
  }

  /// The dQ/dK/dV part of a backward, after begin_exchange (and the
  /// re-sends the caller queued on the exchange stream): dO of the run
  /// sent, the attention's backward, and each group's dQ, dK, dV sent back
  /// and added into dq, dk, dv as soon as the attention's key loop has
  /// passed it (FPDT Figure 7: while the next key chunk computes). lse
  /// holds the run's columns.
  void run_backward(stream_type& on, const run& r, tensor_view<const float, 3> dout, tensor_view<const float, 2> lse,
                    tensor_view<float, 3> dq, tensor_view<float, 3> dk, tensor_view<float, 3> dv) {
    stream_type& comm = *exchange_;
    for (std::int64_t j = r.g0; j < r.g1; ++j) {
      scatter_heads(comm, dout, j - r.g0, shape_.heads, Hr_, false, sharded(parts_.dout, Hr_, r.first, j));
    }
    backend_.record(scattered_[0], comm);
    backend_.wait(on, scattered_[0]);
    zero(on, parts_.dq, Hr_ * r.tokens);
    const std::int64_t k0 = state_first(r), kv_tokens = state_tokens(r);
    if (!state_persists()) zero(on, parts_.dk, Kr_ * kv_tokens), zero(on, parts_.dv, Kr_ * kv_tokens);
    std::int64_t next = r.g0;  // the first group not yet sent back
    int handoffs = 0;
    auto send_back = [&](std::int64_t keys_end) {
      if (!shape_.overlap && keys_end < layout_.group_begin(r.g1)) return;  // all at the end
      std::int64_t upto = next;
      while (upto < r.g1 && layout_.group_begin(upto + 1) <= keys_end) ++upto;
      if (upto == next) return;
      backend_.record(computed_[handoffs % 2], on);
      backend_.wait(comm, computed_[handoffs % 2]);
      ++handoffs;
      for (; next < upto; ++next) {
        gather_heads(comm, sharded(parts_.dq, Hr_, r.first, next), next - r.g0, shape_.heads, Hr_, false, dq, true);
        gather_heads(comm, sharded(parts_.dk, Kr_, k0, next), next - r.g0, shape_.kv_heads, Kr_, true, dk, true);
        gather_heads(comm, sharded(parts_.dv, Kr_, k0, next), next - r.g0, shape_.kv_heads, Kr_, true, dv, true);
      }
    };
    attention_->backward_queries(on, r.first, run_view<const float>(parts_.q, Hr_, r.tokens),
                                 run_view<const float>(parts_.k, Kr_, kv_tokens),
                                 run_view<const float>(parts_.v, Kr_, kv_tokens),
                                 run_view<const float>(parts_.o, Hr_, r.tokens),
                                 run_view<const float>(parts_.dout, Hr_, r.tokens), lse,
                                 run_view<float>(parts_.dq, Hr_, r.tokens), run_view<float>(parts_.dk, Kr_, kv_tokens),
                                 run_view<float>(parts_.dv, Kr_, kv_tokens), send_back);
    send_back(layout_.group_begin(r.g1));  // nothing left when the key loop reached the run's end
    end_exchange(on);
  }

  /// The exchange stream starts after what `on` has enqueued so far.
  void begin_exchange(stream_type& on) {
    backend_.record(start_, on);
    backend_.wait(*exchange_, start_);
  }
  /// `on` continues after everything enqueued on the exchange stream.
  void end_exchange(stream_type& on) {
    backend_.record(done_, *exchange_);
    backend_.wait(on, done_);
  }

  [[nodiscard]] run checked_run(std::pair<std::int64_t, std::int64_t> rows, const char* call) const {
    const std::int64_t c = layout_.chunk_tokens(), L = layout_.local_tokens();
    expects(rows.first >= 0 && rows.first < rows.second && rows.second <= L && rows.first % c == 0 &&
                rows.second % c == 0,
            [&] {
              return std::string("distributed attention: ") + call + " of local rows [" + std::to_string(rows.first) +
                     ", " + std::to_string(rows.second) + "): a run must be whole chunks of " + std::to_string(c) +
                     " rows inside the " + std::to_string(L) + " local rows";
            });
    run r{rows.first / c, rows.second / c, layout_.group_begin(rows.first / c), 0};
    r.tokens = layout_.group_begin(r.g1) - r.first;
    expects(r.tokens <= run_capacity_, [&] {
      return std::string("distributed attention: ") + call + ": a run of " + std::to_string(r.tokens) +
             " tokens is longer than max_run_tokens " + std::to_string(run_capacity_);
    });
    expects(r.first % shape_.attention_chunk == 0, [&] {
      return std::string("distributed attention: ") + call + ": a run starting at token " + std::to_string(r.first) +
             " does not start at a chunk of the attention (" + std::to_string(shape_.attention_chunk) + " tokens)";
    });
    return r;
  }

  /// Whether the local attention carries dK/dV on the host: offload with
  /// runs shorter than the sequence. Then the state holds the current
  /// run's K/V and dK/dV only.
  [[nodiscard]] static bool host_carry(const distributed_attention_shape& s) noexcept {
    return s.offload && s.max_run_tokens != 0 && s.max_run_tokens < s.tokens;
  }
  /// Whether the state's K/V and dK/dV live between calls.
  [[nodiscard]] bool state_persists() const noexcept { return shape_.keep_state && !host_carry(shape_); }
  /// The global token of the state's row 0, and its rows, during run r.
  [[nodiscard]] std::int64_t state_first(const run& r) const noexcept { return host_carry(shape_) ? r.first : 0; }
  [[nodiscard]] std::int64_t state_tokens(const run& r) const noexcept {
    return host_carry(shape_) ? r.tokens : shape_.tokens;
  }

  // The first K/V head rank r holds (its query heads' group).
  [[nodiscard]] std::int64_t first_head(std::int64_t r, std::int64_t total, std::int64_t per_rank, bool kv) const {
    if (!kv || total >= P_) return r * per_rank;
    return r * total / P_;  // replicated: P / H_kv consecutive ranks share a head
  }

  /// Rows of global chunk group j in a sharded [*, heads, D] buffer whose
  /// row 0 is global token `first`.
  [[nodiscard]] float* sharded(const memory_region& buffer, std::int64_t heads, std::int64_t first,
                               std::int64_t j) const {
    return buffer.template as<float>() + (layout_.group_begin(j) - first) * heads * shape_.head_dim;
  }
  template <class T>
  [[nodiscard]] tensor_view<T, 3> run_view(const memory_region& buffer, std::int64_t heads, std::int64_t tokens) const {
    return tensor_view<T, 3>::contiguous(buffer.template as<float>(), {tokens, heads, shape_.head_dim});
  }
  /// Rows [row, row + tokens) of a sharded [*, heads, D] buffer.
  template <class T>
  [[nodiscard]] tensor_view<T, 3> rows_view(const memory_region& buffer, std::int64_t heads, std::int64_t row,
                                            std::int64_t tokens) const {
    return tensor_view<T, 3>::contiguous(buffer.template as<float>() + row * heads * shape_.head_dim,
                                         {tokens, heads, shape_.head_dim});
  }
  template <class T>
  [[nodiscard]] static tensor_view<T, 2> lse_columns(const tensor_view<T, 2>& lse, std::int64_t first,
                                                     std::int64_t tokens) {
    return tensor_view<T, 2>(lse.data() + first * lse.stride(1), {lse.extent(0), tokens},
                             {lse.stride(0), lse.stride(1)});
  }

  void expect_dense(const auto& view, std::int64_t heads, const char* name) const {
    const std::int64_t L = layout_.local_tokens(), D = shape_.head_dim;
    expects(view.extent(0) == L && view.extent(1) == heads && view.extent(2) == D && view.stride(2) == 1 &&
                view.stride(1) == D && view.stride(0) == heads * D,
            [&] {
              return std::string("distributed attention: ") + name + " must be a dense [" + std::to_string(L) + ", " +
                     std::to_string(heads) + ", " + std::to_string(D) + "] view (rank-local tokens, heads, head_dim)";
            });
  }
  void expect_run_view(const auto& view, std::int64_t heads, const run& r, const char* name) const {
    const std::int64_t n = (r.g1 - r.g0) * layout_.chunk_tokens(), D = shape_.head_dim;
    expects(view.data() != nullptr && view.extent(0) == n && view.extent(1) == heads && view.extent(2) == D &&
                view.stride(2) == 1 && view.stride(1) == D && view.stride(0) >= heads * D,
            [&] {
              return std::string("distributed attention: ") + name + " must be a [" + std::to_string(n) + ", " +
                     std::to_string(heads) + ", " + std::to_string(D) +
                     "] view of the run's local rows, heads and head_dim dense";
            });
  }
  /// The run's columns of lse, given whole ([Hr, T]) or as the run's ([Hr, run tokens]).
  template <class T>
  [[nodiscard]] tensor_view<T, 2> lse_of_run(const tensor_view<T, 2>& lse, const run& r) const {
    const bool whole = lse.extent(1) == shape_.tokens, of_run = lse.extent(1) == r.tokens;
    expects(lse.data() != nullptr && lse.extent(0) == Hr_ && (whole || of_run), [&] {
      return "distributed attention: lse must be a [" + std::to_string(Hr_) + ", " + std::to_string(shape_.tokens) +
             "] view (this rank's heads, the whole sequence) or a [" + std::to_string(Hr_) + ", " +
             std::to_string(r.tokens) + "] view of the run's tokens";
    });
    return whole ? lse_columns(lse, r.first, r.tokens) : lse;
  }

  void copy(stream_type& on, tensor_view<float, 2> out, tensor_view<const float, 2> in, bool accumulate = false) {
    const detail::block_copy op{out, in, accumulate};
    op.validate();
    backend_.parallel_for(on, extent_2d{op.rows(), op.cols()}, op);
  }
  void zero(stream_type& on, const memory_region& part, std::int64_t rows) {
    backend_.memset_async(part.data, 0, floats(rows, shape_.head_dim, 1), on);
  }

  // Chunk `c_in_view` of `local` (a view of a run's rows) -> rank r's
  // heads -> its chunk group of the sharded tensor, at `sharded_out`.
  void scatter_heads(stream_type& on, tensor_view<const float, 3> local, std::int64_t c_in_view, std::int64_t heads,
                     std::int64_t per_rank, bool kv, float* sharded_out) {
    const std::int64_t c = layout_.chunk_tokens(), D = shape_.head_dim, width = per_rank * D;
    const std::int64_t block = c * width;
    float* send = parts_.send.template as<float>();
    for (int r = 0; r < P_; ++r) {
      copy(on, tensor_view<float, 2>::contiguous(send + r * block, {c, width}),
           tensor_view<const float, 2>(local.data() + c_in_view * c * local.stride(0) +
                                           first_head(r, heads, per_rank, kv) * D,
                                       {c, width}, {local.stride(0), 1}));
    }
    exchange(on, block);
    // Block s is rank s's chunk j: global chunk j P + s, contiguous in order.
    copy(on, tensor_view<float, 2>::contiguous(sharded_out, {P_ * c, width}),
         tensor_view<const float, 2>::contiguous(parts_.recv.template as<float>(), {P_ * c, width}));
  }

  // The reverse: a chunk group of the sharded tensor back to chunk
  // `c_in_view` of `local`; K/V head copies are summed. `accumulate` adds
  // into `local`, otherwise the first copy overwrites.
  void gather_heads(stream_type& on, const float* sharded_in, std::int64_t c_in_view, std::int64_t heads,
                    std::int64_t per_rank, bool kv, tensor_view<float, 3> local, bool accumulate) {
    const std::int64_t c = layout_.chunk_tokens(), D = shape_.head_dim, width = per_rank * D;
    const std::int64_t block = c * width;
    copy(on, tensor_view<float, 2>::contiguous(parts_.send.template as<float>(), {P_ * c, width}),
         tensor_view<const float, 2>::contiguous(sharded_in, {P_ * c, width}));
    exchange(on, block);
    const bool replicated = kv && heads < P_;
    const float* recv = parts_.recv.template as<float>();
    for (int r = 0; r < P_; ++r) {
      const bool first_copy =
          !replicated || r == 0 || first_head(r, heads, per_rank, kv) != first_head(r - 1, heads, per_rank, kv);
      copy(on,
           tensor_view<float, 2>(local.data() + c_in_view * c * local.stride(0) + first_head(r, heads, per_rank, kv) * D,
                                 {c, width}, {local.stride(0), 1}),
           tensor_view<const float, 2>::contiguous(recv + r * block, {c, width}), accumulate || !first_copy);
    }
  }

  void exchange(stream_type& on, std::int64_t block) {
    const auto n = static_cast<std::size_t>(block * P_);
    comm_.template all_to_all<float>(backend_, on, std::span<const float>(parts_.send.template as<float>(), n),
                                     std::span<float>(parts_.recv.template as<float>(), n));
  }

  B& backend_;
  C& comm_;
  distributed_attention_shape shape_;
  int P_;
  fpdt_layout layout_;
  std::optional<owned> owned_;
  std::int64_t Hr_ = 0, Kr_ = 0, run_capacity_ = 0;
  parts parts_{};
  std::optional<chunked_causal_attention<B>> attention_;
  // The exchange stream (packing and all-to-alls) and its events with the
  // caller's stream: start, a group's inputs in, a group's output done, end.
  std::optional<stream_type> exchange_;
  event_type start_ = backend_.make_event(), done_ = backend_.make_event();
  std::array<event_type, 2> scattered_{backend_.make_event(), backend_.make_event()};
  std::array<event_type, 2> computed_{backend_.make_event(), backend_.make_event()};
  bool saved_ = false;
};

}  // namespace memo
