// memo/model/attention.hpp
//
// Chunked causal attention (FPDT sections 4.1-4.2, Figures 4, 5 and 7),
// written once against the Backend concept.
//
// The sequence is cut into chunks of c tokens. Forward: for query chunk i,
// the key/value chunks j = 0 .. i meet it one at a time; each step is two
// GEMMs (S = Q K^T / sqrt(d), acc += P V) around the online-softmax row
// update, so only O [tokens, heads, head_dim] and the per-row log-sum-exp
// [heads, tokens] are kept -- never a [tokens, tokens] score matrix. Chunks
// j > i are fully masked and skipped; only the diagonal chunk j = i applies
// the causal mask (as a count of visible keys, so the GEMMs need none).
//
// Backward (FPDT Figure 7's order): D = rowsum(dO * O) once, then an outer
// loop over key/value chunks j and an inner loop over query chunks i >= j.
// P is recomputed from Q, K and the saved log-sum-exp; dS = P (dP - D).
// dK_j and dV_j accumulate in a chunk-sized tile and are final when their
// outer step ends (which is what lets FPDT keep K/V on the host: each chunk
// comes back exactly once); dQ accumulates across outer steps.
//
// Host offload (shape.offload, FPDT section 4.2): in the forward, the Q, K
// and V of chunk i are packed and copied to pinned host memory during query
// step i; every later use of K/V chunk j < i (forward) and every use of Q,
// K or V in the backward reads the host copy, fetched on a copy stream the
// object owns into one of TWO device slots per kind, so the next fetch
// overlaps the compute on the current chunk. The backward's inner loop
// fetches the query chunk of the next (j, i) pair while the current pair
// computes, which is why FPDT puts queries in the inner loop: a pair's
// attention only has to cover one query chunk's fetch. The outer loop's K/V
// chunk j + 1 is issued on the one (in-order) copy stream just after the
// step's second query, so it has the rest of step j to arrive: only a step
// of one pair must cover a K/V fetch and a query fetch. Events order the
// two streams: the compute stream waits for a slot's fetch, and a fetch
// into a slot waits for the compute that last read it. So with offload
// the caller's Q, K and V are read only for chunk i at forward step i, and
// never by the backward: after the forward the caller may drop or reuse
// them. With shape.keep_queries only K/V go to the host, and the backward
// reads the caller's Q (which must then stay valid until it returns).
//
// Query runs (SPPO section 4: a pipeline stage attends subsequence by
// subsequence): `forward_queries` / `backward_queries` take the queries of
// a run of whole chunks [first, first + n) against the keys before its end.
// Forward runs go in sequence order (with offload each stores its own
// chunks, so later runs find the earlier ones on the host); a backward run
// adds its queries' share of dK/dV into whole-sequence dk and dv, so runs in
// reverse order leave a run's dK/dV complete after its own backward. One
// run over the whole sequence is `forward` / `backward`.
//
// Host carry (shape.host_carry, with offload): what a backward run adds to
// the dK/dV of earlier runs' keys waits in pinned host memory instead of
// whole-sequence device dk and dv. Key chunk j's tile is a device slot that
// starts from the carry fetched from the host (after the first backward
// run) or from zero; after the run's queries have added to it, it goes back
// to the host (a key of an earlier run) or into the caller's dk and dv (the
// run's own key, now complete). Two slots alternate, the fetch of chunk
// j + 1's carry is issued during step j and the store of chunk j right
// after it, so the copies overlap the compute like the K/V fetches. Then
// k, v (forward) and dk, dv (backward) cover only the run's rows and
// nothing of other runs stays on the device: a pipeline stage attending
// subsequence by subsequence holds one subsequence's K/V. Backward runs
// must then go in exact reverse order of the forward's (checked), since a
// run's own keys are complete only once every later run has carried in.
//
// Memory: the object allocates nothing. required_device_bytes(shape) and
// required_pinned_bytes(shape) size the regions (region_carver's counting
// mode). The device region is used only inside a call (each call's copies
// are joined back into the caller's stream before the call returns), so
// objects called in turn on one stream may share it; the pinned region
// holds the object's store. Both grow linearly in tokens (device: the
// [heads, tokens] row statistics of the backward, the rest chunk-sized;
// pinned: Q, K and V of every token, only K and V with keep_queries, and
// dK and dV too with host_carry).
//
// Prefetch across calls. Objects sharing a device region as plain memory
// (the first constructor) cannot see each other's events, so each call's
// copies start after everything the stream enqueued before the call: a
// call's first fetch (the backward's K/V chunk 0 and first query chunk,
// a forward run's K/V chunk 0) waits for the previous call's compute and
// is not hidden. A `chunked_attention_scratch` is the region together
// with the copy stream and the slot and staging events; objects built
// over it (the second constructor; a model's layers) share all three, so
// every copy waits only for the last use of the slot it overwrites,
// whichever object's call made that use. The next call's first fetch then
// runs on the copy stream as soon as the previous call's last read of
// that slot is done -- during the rest of that call and the layer work
// between the two attentions -- and a forward run's K/V chunk 0 is issued
// ahead of the run's first store for the same reason. No extra device
// bytes: the scratch is one object's (required_bytes(shape) ==
// required_device_bytes(shape)). The double-buffer slots are the prefetch
// slots, rather than a dedicated prefetch slot or two scratch sets by
// layer parity, because the work between two attention calls (a layer's
// projections, MLP and norms) is far longer than one chunk's fetch, and
// because nothing is issued ahead of a call: there is no prefetch to
// match with the call that consumes it, so a call that does not follow,
// or another object's call, cannot consume a wrong chunk or leave a
// stale one -- harmless by design. Calls of objects over one scratch must
// be made in turn on one stream (what the events order is the host's
// enqueue order). The data and every GEMM are unchanged: only when the
// copies run moves.
//
// Layouts (all fp32, all views in elements):
//   q, o, dout, dq   [tokens, heads, head_dim]     stride(2) == 1 for q, dout
//   k, v, dk, dv     [tokens, kv_heads, head_dim]  stride(2) == 1 for k, v
//   lse              [heads, tokens]               any strides
// Other strides are free, so q, k and v can be slices of llm.c's fused
// [tokens, 3 C] QKV buffer (C = heads * head_dim, head h at columns h * D):
//   q = {qkv,         {T, H, D}, {3C, D, 1}}
//   k = {qkv + C,     {T, H, D}, {3C, D, 1}}
//   v = {qkv + 2 C,   {T, H, D}, {3C, D, 1}}
// Gradients are accumulated (+=), like every backward operator in memo:
// zero dq, dk, dv first for a plain gradient.
//
// Streams and lifetime: all work is ordered on the caller's stream; the
// copy stream's work is joined back into it before forward/backward return,
// so synchronising the caller's stream covers everything. The backend, both
// regions and a shared scratch must outlive the object; the destructor
// waits for the copy stream. Not copyable or movable (the copy stream's
// events refer to it).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "memo/backend/compute.hpp"
#include "memo/backend/concepts.hpp"
#include "memo/core/bytes.hpp"
#include "memo/core/error.hpp"
#include "memo/core/liveness.hpp"
#include "memo/core/memory_region.hpp"
#include "memo/core/tensor_view.hpp"
#include "memo/model/attention_tiles.hpp"

namespace memo {

template <Backend B>
class chunked_attention_scratch;

namespace detail {

/// The default of backward_queries' keys_done: nothing to do.
struct no_keys_done {
  void operator()(std::int64_t) const noexcept {}
};

}  // namespace detail

template <Backend B>
class chunked_causal_attention {
 public:
  using stream_type = typename B::stream;
  using event_type = typename B::event;

  /// Device scratch bytes for `shape` (score tiles, row statistics, K/V slots).
  [[nodiscard]] static std::size_t required_device_bytes(const attention_shape& shape) {
    shape.validate();
    region_carver device;
    region_carver pinned;
    (void)carve(shape, device, pinned);
    return device.required_bytes();
  }
  /// Pinned host bytes for `shape` (the host-resident Q/K/V, and the dK/dV
  /// carry with host_carry; 0 without offload).
  [[nodiscard]] static std::size_t required_pinned_bytes(const attention_shape& shape) {
    shape.validate();
    region_carver device;
    region_carver pinned;
    (void)carve(shape, device, pinned);
    return pinned.required_bytes();
  }

  /// Builds over regions of at least required_device_bytes(shape) (device)
  /// and required_pinned_bytes(shape) (pinned host) bytes, which the caller
  /// owns. Creates the copy stream when offloading. The device region may
  /// be shared with other objects called in turn on one stream: each
  /// call's copies start after what that stream enqueued before the call.
  chunked_causal_attention(B& backend, const attention_shape& shape, memory_region device,
                           memory_region pinned)
      : own_scratch_(std::in_place, backend, shape, device, false), scratch_(*own_scratch_) {
    build(pinned);
  }

  /// Builds over `scratch` (shared with the other objects built over it:
  /// its device region, copy stream and slot events) and a pinned region of
  /// at least required_pinned_bytes(scratch.shape()) bytes; the shape is
  /// the scratch's. The scratch must outlive the object: a call made after
  /// the scratch is destroyed is a memo::error (the object watches it), and
  /// destroying the object then touches nothing of it.
  chunked_causal_attention(chunked_attention_scratch<B>& scratch, memory_region pinned) : scratch_(scratch) {
    build(pinned);
  }

  chunked_causal_attention(const chunked_causal_attention&) = delete;
  chunked_causal_attention& operator=(const chunked_causal_attention&) = delete;

  ~chunked_causal_attention() {
    if (scratch_alive_.expired()) return;  // the scratch drained its copy stream as it ended
    if (copy_) memo::drain(backend_, *copy_);  // its error also reached the caller's stream
  }

  /// Waits for the copies queued so far and drops their error (the copy
  /// stream's, shared with the other objects over the scratch): see
  /// chunked_attention_scratch::drain. Nothing once the scratch is gone.
  void drain() noexcept {
    if (!scratch_alive_.expired()) scratch_.drain();
  }

  [[nodiscard]] const attention_shape& shape() const noexcept { return shape_; }
  /// The scratch the object is built over (its own with the first constructor).
  [[nodiscard]] const chunked_attention_scratch<B>& device_scratch() const noexcept { return scratch_; }

  /// O and lse of causal softmax(Q K^T / sqrt(d)) V, enqueued on `on`.
  void forward(stream_type& on,
               tensor_view<const float, 3> q,  // [tokens, heads, head_dim]
               tensor_view<const float, 3> k,  // [tokens, kv_heads, head_dim]
               tensor_view<const float, 3> v,  // [tokens, kv_heads, head_dim]
               tensor_view<float, 3> o,        // [tokens, heads, head_dim]
               tensor_view<float, 2> lse) {    // [heads, tokens]
    forward_queries(on, 0, q, k, v, o, lse);
  }

  /// The forward of the queries of tokens [first, first + n) only, against
  /// the keys of tokens [0, first + n): a run of whole chunks starting at a
  /// chunk boundary (the last may end at the sequence's end). q, o and lse
  /// cover the n query tokens; k and v the whole sequence, of which the
  /// rows before first + n are read (with offload: the run's own chunks from
  /// k and v, the earlier ones from the host store, filled by earlier runs;
  /// the run's q, k and v chunks are stored there for the backward). With
  /// host_carry k and v cover the run's n rows only.
  /// Runs are how a pipeline stage attends subsequence by subsequence
  /// (SPPO section 4); one run over the whole sequence is `forward`.
  void forward_queries(stream_type& on, std::int64_t first,
                       tensor_view<const float, 3> q,  // [n, heads, head_dim]
                       tensor_view<const float, 3> k,  // [tokens, kv_heads, head_dim]
                       tensor_view<const float, 3> v,  // [tokens, kv_heads, head_dim]
                       tensor_view<float, 3> o,        // [n, heads, head_dim]
                       tensor_view<float, 2> lse) {    // [heads, n]
    const char* call = "chunked_causal_attention::forward";
    const auto [i0, i1] = query_chunks(first, q.extent(0), call);
    expect_operand(q, shape_.heads, call, "q", true, q.extent(0));
    expect_operand(k, shape_.kv_heads, call, "k", true, key_rows(q.extent(0)));
    expect_operand(v, shape_.kv_heads, call, "v", true, key_rows(q.extent(0)));
    expect_operand(o, shape_.heads, call, "o", false, q.extent(0));
    expect_lse(lse, call, q.extent(0));
    expects(!shape_.offload || i0 <= stored_, [&] {
      return std::string(call) + ": with offload, queries from chunk " + std::to_string(i0) +
             " need the host store to hold chunks [0, " + std::to_string(i0) + "), but only " +
             std::to_string(stored_) + " were stored: run the forward of the earlier tokens first";
    });
    if (first == 0) {  // a new sequence: nothing stored or carried is its own yet
      stored_ = 0;
      carried_below_ = -1;
      carry_broken_ = false;
    }
    const std::int64_t key_row0 = shape_.host_carry ? first : 0;  // the token of row 0 of k and v

    const std::int64_t c = shape_.chunk;
    const std::int64_t t = shape_.tile();
    const std::int64_t heads = shape_.heads;
    const detail::attention_scratch s = scratch();
    begin_copies(on);
    for (std::int64_t i = i0; i < i1; ++i) {
      const std::int64_t q0 = i * c;       // global token of the chunk's first query
      const std::int64_t r0 = q0 - first;  // its row in q, o and lse
      const std::int64_t rows = rows_of(i);
      // K/V chunk 0 goes on the copy stream before chunk i's store: it waits
      // only for slot 0's last read (the previous step's, or the previous
      // call's over a shared scratch), not for chunk i's packing.
      if (shape_.offload && i > 0) fetch(0);
      if (shape_.offload) store_chunk(on, q, r0, k, v, q0 - key_row0, i);
      launch(on, detail::attention_start_kernel{s, rows}, {heads, rows});
      for (std::int64_t j = 0; j <= i; ++j) {
        const bool diagonal = j == i;
        kv_chunk kv = diagonal || !shape_.offload ? caller_chunk(k, v, j * c - key_row0) : slot_chunk(j);
        if (!diagonal && shape_.offload) {
          if (j + 1 < i) fetch(j + 1);
          backend_.wait(on, fetched_[j % 2]);
        }
        const std::int64_t cols = rows_of(j);
        // S = Q_i K_j^T / sqrt(d)                        [heads][rows, cols]
        grouped_gemm(on, {rows, cols, shape_.head_dim, matrix_op::none, matrix_op::transpose},
                     scale(), query_operand(q, r0), kv.k, 0.0f,
                     output_operand{s.scores, cols, t * t, true});
        launch(on,
               detail::attention_softmax_kernel{s, rows, cols, {q0, j * c, diagonal}},
               {heads, rows});
        // acc += P V_j                                   [heads][rows, head_dim]
        grouped_gemm(on, {rows, shape_.head_dim, cols}, 1.0f, gemm_operand{s.scores, cols, t * t, true},
                     kv.v, 1.0f, output_operand{s.acc, shape_.head_dim, t * shape_.head_dim, true});
        if (!diagonal && shape_.offload) backend_.record(slot_free_[j % 2], on);
      }
      launch(on, detail::attention_finish_kernel{s, rows, r0, o, lse}, {heads, rows});
    }
    join_copies(on);
    stored_ = i1;
  }

  /// dq += dL/dQ, dk += dL/dK, dv += dL/dV given dout = dL/dO, enqueued on
  /// `on`. q, k, v, o and lse are the forward's; with offload k and v, and
  /// q unless keep_queries, are not read (they come from the host store the
  /// forward filled) and may be empty views.
  void backward(stream_type& on,
                tensor_view<const float, 3> q,     // [tokens, heads, head_dim]
                tensor_view<const float, 3> k,     // [tokens, kv_heads, head_dim]
                tensor_view<const float, 3> v,     // [tokens, kv_heads, head_dim]
                tensor_view<const float, 3> o,     // [tokens, heads, head_dim]
                tensor_view<const float, 3> dout,  // [tokens, heads, head_dim]
                tensor_view<const float, 2> lse,   // [heads, tokens]
                tensor_view<float, 3> dq,          // [tokens, heads, head_dim]
                tensor_view<float, 3> dk,          // [tokens, kv_heads, head_dim]
                tensor_view<float, 3> dv) {        // [tokens, kv_heads, head_dim]
    backward_queries(on, 0, q, k, v, o, dout, lse, dq, dk, dv);
  }

  /// The backward of the queries of tokens [first, first + n) (a run as in
  /// forward_queries): dq of those queries, and their share of dk and dv of
  /// every key before first + n, added into the whole-sequence dk and dv.
  /// Running the runs of a sequence in any order adds up to `backward`;
  /// in reverse order (SPPO) the keys of a run have all their gradient once
  /// its own backward is done. With host_carry dk and dv are the run's n
  /// rows, which receive their whole gradient (what later runs carried
  /// in, plus this run's share); the share of earlier keys goes to the
  /// host carry, and runs must go in exact reverse order of the forward's.
  ///
  /// `keys_done(e)` is called (on the host, in enqueue order) after the
  /// work of each key chunk is enqueued, with e its end token: from that
  /// point of `on`, dk and dv of keys [0, e) hold this run's whole share
  /// (with host_carry: of keys [first, e), now complete; earlier keys'
  /// share went to the host) and dq of queries before e is final (query i
  /// sees no key after it).
  /// FPDT (Figure 7) sends those gradients back while the next key chunk
  /// computes.
  template <class KeysDone = detail::no_keys_done>
  void backward_queries(stream_type& on, std::int64_t first,
                        tensor_view<const float, 3> q,     // [n, heads, head_dim]
                        tensor_view<const float, 3> k,     // [tokens, kv_heads, head_dim]
                        tensor_view<const float, 3> v,     // [tokens, kv_heads, head_dim]
                        tensor_view<const float, 3> o,     // [n, heads, head_dim]
                        tensor_view<const float, 3> dout,  // [n, heads, head_dim]
                        tensor_view<const float, 2> lse,   // [heads, n]
                        tensor_view<float, 3> dq,          // [n, heads, head_dim]
                        tensor_view<float, 3> dk,          // [tokens, kv_heads, head_dim]
                        tensor_view<float, 3> dv,          // [tokens, kv_heads, head_dim]
                        KeysDone&& keys_done = {}) {
    const char* call = "chunked_causal_attention::backward";
    const std::int64_t n = dout.extent(0);
    const auto [i0, i1] = query_chunks(first, n, call);
    expect_backward_run(first, n);
    if (!shape_.queries_on_host()) expect_operand(q, shape_.heads, call, "q", true, n);
    if (!shape_.offload) {
      expect_operand(k, shape_.kv_heads, call, "k", true);
      expect_operand(v, shape_.kv_heads, call, "v", true);
    }
    expect_operand(o, shape_.heads, call, "o", false, n);
    expect_operand(dout, shape_.heads, call, "dout", true, n);
    expect_lse(lse, call, n);
    expect_operand(dq, shape_.heads, call, "dq", false, n);
    expect_operand(dk, shape_.kv_heads, call, "dk", false, key_rows(n));
    expect_operand(dv, shape_.kv_heads, call, "dv", false, key_rows(n));
    // With host_carry, every key chunk before i1 has a carry on the host
    // unless this is the sequence's first backward run. Until this run
    // completes the carry is part-updated: a run that throws leaves it so
    // (carry_broken_), and only a new forward from token 0 clears that.
    const bool carried = shape_.host_carry && carried_below_ >= 0;
    if (shape_.host_carry) carry_broken_ = true;
    const std::int64_t key_row0 = shape_.host_carry ? first : 0;  // the token of row 0 of dk and dv

    const std::int64_t c = shape_.chunk;
    const std::int64_t t = shape_.tile();
    const std::int64_t d = shape_.head_dim;
    const std::int64_t heads = shape_.heads;
    const std::int64_t kv_heads = shape_.kv_heads;
    const detail::attention_scratch s = scratch();
    const tensor_view<float, 2> delta = delta_view(n);
    begin_copies(on);
    launch(on, detail::attention_delta_kernel{delta, dout, o}, {heads, n});

    const std::size_t kv_tile_bytes = static_cast<std::size_t>(kv_heads * shape_.tile() * d) * sizeof(float);
    // With offload the (j, i) pairs fetch their query chunks in loop order,
    // pair p into query slot p % 2; the next pair's fetch is issued before
    // the current pair waits for its own. K/V chunk j + 1 is fetched right
    // after the query of outer step j's second pair: the copy stream runs
    // in order, so issued earlier it would delay that query by a whole K/V
    // chunk, and issued there it has the rest of the step to arrive.
    std::int64_t pair = 0;
    if (shape_.offload) fetch(0);
    if (shape_.queries_on_host()) fetch_query(0, i0);
    if (carried) move_carry(0, copy_kind::host_to_device);
    for (std::int64_t j = 0; j < i1; ++j) {
      const std::int64_t k0 = j * c;
      const std::int64_t cols = rows_of(j);
      kv_chunk kv = shape_.offload ? slot_chunk(j) : caller_chunk(k, v, k0);
      if (shape_.offload) backend_.wait(on, fetched_[j % 2]);
      // The dK/dV tiles of key chunk j: with host_carry a carry slot, which
      // holds the chunk's carry once fetched (or was stored from two steps
      // ago: either way the copy stream's last use of it is awaited).
      const auto [dk_part, dv_part] = dkv_tiles(j);
      if (shape_.host_carry) backend_.wait(on, carry_ready_[j % 2]);
      if (!carried) {
        backend_.memset_async(dk_part.data, 0, kv_tile_bytes, on);
        backend_.memset_async(dv_part.data, 0, kv_tile_bytes, on);
      }
      const output_operand dk_tile{dk_part.template as<float>(), d, t * d, false};
      const output_operand dv_tile{dv_part.template as<float>(), d, t * d, false};
      for (std::int64_t i = std::max(j, i0); i < i1; ++i) {
        const std::int64_t q0 = i * c;       // global token of the chunk's first query
        const std::int64_t r0 = q0 - first;  // its row in q, o, dout, dq, lse
        const std::int64_t rows = rows_of(i);
        const output_operand scores{s.scores, cols, t * t, true};
        const output_operand dprobs{s.dprobs, cols, t * t, true};
        const gemm_operand query = shape_.queries_on_host() ? query_slot(pair) : query_operand(q, r0);
        if (shape_.queries_on_host()) {
          if (i + 1 < i1) {
            fetch_query(pair + 1, i + 1);
          } else if (j + 1 < i1) {
            fetch_query(pair + 1, std::max(j + 1, i0));
          }
        }
        if (shape_.offload && i == std::max(j, i0) && j + 1 < i1) {
          fetch(j + 1);
          if (carried) move_carry(j + 1, copy_kind::host_to_device);
        }
        if (shape_.queries_on_host()) backend_.wait(on, q_fetched_[pair % 2]);
        // S = Q_i K_j^T / sqrt(d);  dP = dO_i V_j^T       [heads][rows, cols]
        grouped_gemm(on, {rows, cols, d, matrix_op::none, matrix_op::transpose}, scale(),
                     query, kv.k, 0.0f, scores);
        grouped_gemm(on, {rows, cols, d, matrix_op::none, matrix_op::transpose}, 1.0f,
                     query_operand(dout, r0), kv.v, 0.0f, dprobs);
        launch(on,
               detail::attention_backward_kernel{s, rows, cols, r0, lse, delta, {q0, k0, i == j}},
               {heads, rows});
        // dV_j += P^T dO_i;  dK_j += dS^T Q_i / sqrt(d)    [kv_heads][cols, head_dim]
        grouped_gemm(on, {cols, d, rows, matrix_op::transpose, matrix_op::none}, 1.0f, scores,
                     query_operand(dout, r0), 1.0f, dv_tile);
        grouped_gemm(on, {cols, d, rows, matrix_op::transpose, matrix_op::none}, scale(), dprobs,
                     query, 1.0f, dk_tile);
        if (shape_.queries_on_host()) backend_.record(q_slot_free_[pair % 2], on);  // the pair's last read of Q_i
        ++pair;
        // dQ_i += dS K_j / sqrt(d), through the acc tile   [heads][rows, head_dim]
        grouped_gemm(on, {rows, d, cols}, scale(), dprobs, kv.k, 0.0f,
                     output_operand{s.acc, d, t * d, true});
        launch(on, detail::attention_add_rows_kernel{dq, s.acc, t, r0}, {heads, rows});
      }
      if (shape_.offload) backend_.record(slot_free_[j % 2], on);
      if (j >= i0 || !shape_.host_carry) {  // into the caller's dk and dv
        launch(on, detail::attention_add_rows_kernel{dk, dk_part.template as<float>(), t, k0 - key_row0},
               {kv_heads, cols});
        launch(on, detail::attention_add_rows_kernel{dv, dv_part.template as<float>(), t, k0 - key_row0},
               {kv_heads, cols});
      }
      if (shape_.host_carry) {
        backend_.record(carry_used_[j % 2], on);
        if (j < i0) move_carry(j, copy_kind::device_to_host);  // an earlier run's key: carried
      }
      keys_done(k0 + cols);
    }
    join_copies(on);
    if (shape_.host_carry) carried_below_ = i0, carry_broken_ = false;
  }

  /// Throws unless the queries [first, first + n) can run their backward
  /// now: whole chunks, their keys stored with offload, and with host_carry
  /// the next run in reverse order after a complete forward and complete
  /// backward runs. What backward_queries checks first; a caller may check
  /// before its own collectives.
  void expect_backward_run(std::int64_t first, std::int64_t n) const {
    const char* call = "chunked_causal_attention::backward";
    const auto [i0, i1] = query_chunks(first, n, call);
    expects(!shape_.offload || stored_ > 0,
            "chunked_causal_attention::backward with offload reads the host store that "
            "forward fills: call forward first");
    expects(!shape_.offload || i1 <= stored_, [&] {
      return std::string(call) + ": with offload, queries up to chunk " + std::to_string(i1) +
             " need their keys in the host store, which holds chunks [0, " + std::to_string(stored_) + ")";
    });
    if (!shape_.host_carry) return;
    expects(!carry_broken_, std::string(call) +
                                " with host_carry: an earlier backward run did not complete, so the host dK/dV carry "
                                "is part-updated; run the forward again from token 0");
    const std::int64_t end = carried_below_ < 0 ? stored_ : carried_below_;
    expects(i1 == end, [&] {
      return std::string(call) + " with host_carry: the run of chunks [" + std::to_string(i0) + ", " +
             std::to_string(i1) + ") is not the next in reverse order: it must end at chunk " + std::to_string(end) +
             (carried_below_ < 0 ? ", the end of the stored forward" : ", where the previous backward run began");
    });
  }

 private:
  friend class chunked_attention_scratch<B>;

  struct parts {
    memory_region scores, dprobs, max, sum, acc, delta, dk, dv;
    std::array<memory_region, 2> slot_q, slot_k, slot_v;
    memory_region stage_q, stage_k, stage_v;
    memory_region host_q, host_k, host_v;
    std::array<memory_region, 2> carry_dk, carry_dv;  // host_carry: the dK/dV tiles
    memory_region host_dk, host_dv;                   // host_carry: [chunks, kv_heads, chunk, head_dim]
  };

  /// One matrix per head: row-major, `ld` between rows, `head_stride`
  /// between heads; `per_query_head` says whether the heads are the query
  /// heads (H of them) or the kv heads (H / group).
  struct gemm_operand {
    const float* data;
    std::int64_t ld;
    std::int64_t head_stride;
    bool per_query_head;
  };
  struct output_operand {
    float* data;
    std::int64_t ld;
    std::int64_t head_stride;
    bool per_query_head;
    // A tile written by one GEMM is read by the next.
    operator gemm_operand() const { return {data, ld, head_stride, per_query_head}; }
  };
  struct kv_chunk {
    gemm_operand k, v;
  };

  /// Carves the parts: the device ones from the scratch's region (the same
  /// offsets for every object over it), the host store from `pinned`.
  void build(memory_region pinned) {
    region_carver device_carver(scratch_.device_, "chunked_causal_attention device scratch");
    region_carver pinned_carver(pinned, "chunked_causal_attention pinned Q/K/V store");
    parts_ = carve(shape_, device_carver, pinned_carver);
  }

  static std::size_t float_bytes(std::int64_t a, std::int64_t b, std::int64_t c = 1) {
    return checked_mul(checked_mul(checked_mul(static_cast<std::uint64_t>(a), static_cast<std::uint64_t>(b)),
                                   static_cast<std::uint64_t>(c)),
                       sizeof(float));
  }

  /// The one table of sizes, run in counting mode to size and for real to carve.
  static parts carve(const attention_shape& shape, region_carver& device, region_carver& pinned) {
    const std::int64_t t = shape.tile();
    const std::int64_t h = shape.heads;
    const std::int64_t kv_tile = shape.kv_heads * shape.head_dim;
    const std::int64_t q_tile = h * shape.head_dim;
    parts p;
    p.scores = device.take(float_bytes(h, t, t), "scores [heads, chunk, chunk]");
    p.dprobs = device.take(float_bytes(h, t, t), "dprobs [heads, chunk, chunk]");
    p.max = device.take(float_bytes(h, t), "running max [heads, chunk]");
    p.sum = device.take(float_bytes(h, t), "running sum [heads, chunk]");
    p.acc = device.take(float_bytes(h, t, shape.head_dim), "acc [heads, chunk, head_dim]");
    p.delta = device.take(float_bytes(h, shape.tokens), "delta [heads, tokens]");
    if (shape.host_carry) {
      for (int slot = 0; slot < 2; ++slot) {
        p.carry_dk[slot] = device.take(float_bytes(t, kv_tile), "dK carry slot [kv_heads, chunk, head_dim]");
        p.carry_dv[slot] = device.take(float_bytes(t, kv_tile), "dV carry slot [kv_heads, chunk, head_dim]");
      }
      const std::size_t carry = float_bytes(shape.chunks() * t, kv_tile);
      p.host_dk = pinned.take(carry, "host dK carry [chunks, kv_heads, chunk, head_dim]");
      p.host_dv = pinned.take(carry, "host dV carry [chunks, kv_heads, chunk, head_dim]");
    } else {
      p.dk = device.take(float_bytes(t, kv_tile), "dk tile [kv_heads, chunk, head_dim]");
      p.dv = device.take(float_bytes(t, kv_tile), "dv tile [kv_heads, chunk, head_dim]");
    }
    if (shape.offload) {
      for (int slot = 0; slot < 2; ++slot) {
        if (shape.queries_on_host()) {
          p.slot_q[slot] = device.take(float_bytes(t, q_tile), "Q slot [chunk, heads, head_dim]");
        }
        p.slot_k[slot] = device.take(float_bytes(t, kv_tile), "K slot [chunk, kv_heads, head_dim]");
        p.slot_v[slot] = device.take(float_bytes(t, kv_tile), "V slot [chunk, kv_heads, head_dim]");
      }
      if (shape.queries_on_host()) {
        p.stage_q = device.take(float_bytes(t, q_tile), "Q staging [chunk, heads, head_dim]");
      }
      p.stage_k = device.take(float_bytes(t, kv_tile), "K staging [chunk, kv_heads, head_dim]");
      p.stage_v = device.take(float_bytes(t, kv_tile), "V staging [chunk, kv_heads, head_dim]");
      if (shape.queries_on_host()) {
        p.host_q = pinned.take(float_bytes(shape.tokens, q_tile), "host Q [tokens, heads, head_dim]");
      }
      p.host_k = pinned.take(float_bytes(shape.tokens, kv_tile), "host K [tokens, kv_heads, head_dim]");
      p.host_v = pinned.take(float_bytes(shape.tokens, kv_tile), "host V [tokens, kv_heads, head_dim]");
    }
    return p;
  }

  [[nodiscard]] float scale() const {
    return static_cast<float>(1.0 / std::sqrt(static_cast<double>(shape_.head_dim)));
  }
  [[nodiscard]] std::int64_t rows_of(std::int64_t chunk_index) const {
    return std::min(shape_.chunk, shape_.tokens - chunk_index * shape_.chunk);
  }
  [[nodiscard]] detail::attention_scratch scratch() const {
    return {parts_.scores.template as<float>(), parts_.dprobs.template as<float>(),
            parts_.max.template as<float>(),    parts_.sum.template as<float>(),
            parts_.acc.template as<float>(),    shape_.tile(), shape_.head_dim};
  }
  /// delta of n query rows: [heads, n], in the [heads, tokens] scratch.
  [[nodiscard]] tensor_view<float, 2> delta_view(std::int64_t n) const {
    return tensor_view<float, 2>::contiguous(parts_.delta.template as<float>(), {shape_.heads, n});
  }

  /// The query chunks [i0, i1) of the run of n tokens from `first`; throws
  /// unless the run is whole chunks from a chunk boundary (the last may end
  /// at the sequence's end).
  [[nodiscard]] std::pair<std::int64_t, std::int64_t> query_chunks(std::int64_t first, std::int64_t n,
                                                                   const char* call) const {
    expects(!scratch_alive_.expired(), [&] {
      return std::string(call) + ": the chunked_attention_scratch this attention was built over was destroyed "
             "before it (the scratch must outlive every attention built over it)";
    });
    const std::int64_t c = shape_.chunk;
    expects(first >= 0 && n >= 1 && first <= shape_.tokens - n, [&] {
      return std::string(call) + ": queries [" + std::to_string(first) + ", " + std::to_string(first) + " + " +
             std::to_string(n) + ") are empty or outside the sequence [0, " + std::to_string(shape_.tokens) + ")";
    });
    expects(first % c == 0 && ((first + n) % c == 0 || first + n == shape_.tokens), [&] {
      return std::string(call) + ": queries [" + std::to_string(first) + ", " + std::to_string(first + n) +
             ") are not whole chunks of " + std::to_string(c) + " tokens (nor end at the sequence's end " +
             std::to_string(shape_.tokens) + ")";
    });
    return {first / c, (first + n + c - 1) / c};
  }
  [[nodiscard]] static gemm_operand query_operand(const tensor_view<const float, 3>& t,
                                                  std::int64_t first) {
    return {t.data() + first * t.stride(0), t.stride(0), t.stride(1), true};
  }
  /// The chunk of the caller's k and v from their row `first`.
  [[nodiscard]] static kv_chunk caller_chunk(const tensor_view<const float, 3>& k,
                                             const tensor_view<const float, 3>& v, std::int64_t first) {
    return {{k.data() + first * k.stride(0), k.stride(0), k.stride(1), false},
            {v.data() + first * v.stride(0), v.stride(0), v.stride(1), false}};
  }
  /// The query chunk of backward pair `pair`, in its slot ([rows, heads, head_dim]).
  [[nodiscard]] gemm_operand query_slot(std::int64_t pair) const {
    const std::int64_t d = shape_.head_dim;
    return {parts_.slot_q[pair % 2].template as<float>(), shape_.heads * d, d, true};
  }
  [[nodiscard]] kv_chunk slot_chunk(std::int64_t j) const {
    const std::int64_t ld = shape_.kv_heads * shape_.head_dim;
    return {{parts_.slot_k[j % 2].template as<float>(), ld, shape_.head_dim, false},
            {parts_.slot_v[j % 2].template as<float>(), ld, shape_.head_dim, false}};
  }

  /// Rows of the caller's k, v, dk and dv for a run of n queries: the run's
  /// with host_carry, otherwise the whole sequence's.
  [[nodiscard]] std::int64_t key_rows(std::int64_t n) const { return shape_.host_carry ? n : shape_.tokens; }
  /// The dK and dV tiles of backward key chunk j ([kv_heads, tile, head_dim]).
  [[nodiscard]] std::pair<memory_region, memory_region> dkv_tiles(std::int64_t j) const {
    if (!shape_.host_carry) return {parts_.dk, parts_.dv};
    return {parts_.carry_dk[static_cast<std::size_t>(j % 2)], parts_.carry_dv[static_cast<std::size_t>(j % 2)]};
  }

  /// Runs a (head, row) kernel; those built on an ops row operator check
  /// head 0's views on the host first (every head's have the same shape).
  template <class Kernel>
  void launch(stream_type& on, const Kernel& kernel, extent_2d extent) {
    if constexpr (requires { kernel.op(0).validate(); }) kernel.op(0).validate();
    backend_.parallel_for(on, extent, kernel);
  }

  /// C_h = alpha op(A_h) op(B_h) + beta C_h for every query head h, where
  /// kv-head operands are indexed by h / group. One strided batch per
  /// position inside a group (count kv_heads), so query-head operands step
  /// by group * head_stride. A kv-head output accumulates over the group,
  /// so beta must then be 1.
  void grouped_gemm(stream_type& on, gemm_shape shape, float alpha, gemm_operand a,
                    gemm_operand b, float beta, output_operand c) {
    const std::int64_t group = shape_.group();
    shape.lda = a.ld;
    shape.ldb = b.ld;
    shape.ldc = c.ld;
    for (std::int64_t i = 0; i < group; ++i) {
      auto offset = [&](bool per_query, std::int64_t stride) { return per_query ? i * stride : 0; };
      auto step = [&](bool per_query, std::int64_t stride) { return per_query ? group * stride : stride; };
      const gemm_batch batch{shape_.kv_heads, step(a.per_query_head, a.head_stride),
                             step(b.per_query_head, b.head_stride),
                             step(c.per_query_head, c.head_stride)};
      backend_.gemm_strided_batched(on, shape, batch, alpha,
                                    a.data + offset(a.per_query_head, a.head_stride),
                                    b.data + offset(b.per_query_head, b.head_stride), beta,
                                    c.data + offset(c.per_query_head, c.head_stride));
    }
  }

  /// Forward step i with offload: chunk i of the caller's K/V (from their
  /// row `kv_row`), and Q (from row `q_row` of the run's q) unless
  /// keep_queries, is packed on the compute stream and copied to the host
  /// store on the copy stream.
  void store_chunk(stream_type& on, const tensor_view<const float, 3>& q, std::int64_t q_row,
                   const tensor_view<const float, 3>& k, const tensor_view<const float, 3>& v, std::int64_t kv_row,
                   std::int64_t i) {
    const std::int64_t rows = rows_of(i);
    const std::int64_t first = i * shape_.chunk;
    struct stored {
      const tensor_view<const float, 3>& from;
      std::int64_t from_row;
      memory_region stage, host;
    };
    const stored all[] = {{k, kv_row, parts_.stage_k, parts_.host_k},
                          {v, kv_row, parts_.stage_v, parts_.host_v},
                          {q, q_row, parts_.stage_q, parts_.host_q}};
    const std::span<const stored> tensors(all, shape_.queries_on_host() ? 3 : 2);
    backend_.wait(on, stage_free_);  // the previous chunk's copy has read the staging buffers
    for (const stored& t : tensors) {
      launch(on, detail::attention_pack_rows_kernel{t.stage.template as<float>(), t.from, t.from_row},
             {rows, t.from.extent(1)});
    }
    backend_.record(staged_, on);
    backend_.wait(*copy_, staged_);
    for (const stored& t : tensors) {
      const std::int64_t heads = t.from.extent(1);
      backend_.copy_async(t.host.data + float_bytes(first, heads, shape_.head_dim), t.stage.data,
                          float_bytes(rows, heads, shape_.head_dim), copy_kind::device_to_host, *copy_);
    }
    backend_.record(stage_free_, *copy_);
  }

  /// Fetches query chunk i from the host store into the slot of backward
  /// pair `pair`, once the compute that last read that slot (two pairs
  /// before, or in an earlier backward) is done.
  void fetch_query(std::int64_t pair, std::int64_t i) {
    const auto slot = static_cast<std::size_t>(pair % 2);
    fetch_rows(i, shape_.heads, q_slot_free_[slot], q_fetched_[slot], {{parts_.slot_q[slot], parts_.host_q}});
  }

  /// Fetches K/V chunk j from the host store into slot j % 2, once the
  /// compute that last read that slot is done.
  void fetch(std::int64_t j) {
    const auto slot = static_cast<std::size_t>(j % 2);
    fetch_rows(j, shape_.kv_heads, slot_free_[slot], fetched_[slot],
               {{parts_.slot_k[slot], parts_.host_k}, {parts_.slot_v[slot], parts_.host_v}});
  }

  /// On the copy stream, after `slot_free`: chunk `i` of each host store
  /// ([tokens, heads, head_dim]) into its slot; then records `fetched`.
  void fetch_rows(std::int64_t i, std::int64_t heads, event_type& slot_free, event_type& fetched,
                  std::initializer_list<std::pair<memory_region, memory_region>> slot_and_store) {
    copy_between(copy_kind::host_to_device, float_bytes(rows_of(i), heads, shape_.head_dim),
                 float_bytes(i * shape_.chunk, heads, shape_.head_dim), slot_free, fetched, slot_and_store);
  }

  /// host_carry: on the copy stream, key chunk j's dK/dV carry from the
  /// host into carry slot j % 2 (host_to_device) or back (device_to_host),
  /// once the compute's last use of the slot is done; the compute's next
  /// use waits for carry_ready_.
  void move_carry(std::int64_t j, copy_kind kind) {
    const auto slot = static_cast<std::size_t>(j % 2);
    const std::size_t bytes = float_bytes(shape_.tile(), shape_.kv_heads, shape_.head_dim);
    copy_between(kind, bytes, checked_mul(static_cast<std::uint64_t>(j), bytes), carry_used_[slot], carry_ready_[slot],
                 {{parts_.carry_dk[slot], parts_.host_dk}, {parts_.carry_dv[slot], parts_.host_dv}});
  }

  /// On the copy stream, after `start`: `bytes` between each device region
  /// and its host store at `offset` (direction `kind`); then records `done`.
  void copy_between(copy_kind kind, std::size_t bytes, std::size_t offset, event_type& start, event_type& done,
                    std::initializer_list<std::pair<memory_region, memory_region>> device_and_host) {
    const bool in = kind == copy_kind::host_to_device;
    backend_.wait(*copy_, start);
    for (const auto& [device, host] : device_and_host) {
      backend_.copy_async(in ? device.data : host.data + offset, in ? host.data + offset : device.data, bytes, kind,
                          *copy_);
    }
    backend_.record(done, *copy_);
  }

  /// Over a region shared as plain memory (or a scratch built with
  /// prefetch_across_calls off), the copy stream's work of a call starts
  /// after everything enqueued on `on` so far: no copy touches the device
  /// region while an earlier call (of this object or another sharing the
  /// region) may still use it. Over a shared scratch nothing is needed: the
  /// slot events the objects share order each copy after the last use of
  /// what it overwrites, whichever call made it.
  void begin_copies(stream_type& on) {
    if (!copy_ || scratch_.across_calls_) return;
    backend_.record(call_start_, on);
    backend_.wait(*copy_, call_start_);
  }

  /// Later work on `on` waits for everything issued on the copy stream.
  void join_copies(stream_type& on) {
    if (!copy_) return;
    backend_.record(copy_done_, *copy_);
    backend_.wait(on, copy_done_);
  }

  template <class T>
  void expect_operand(const tensor_view<T, 3>& t, std::int64_t heads, const char* call,
                      const char* name, bool gemm_operand_view, std::int64_t rows = -1) const {
    t.expect_shape({rows < 0 ? shape_.tokens : rows, heads, shape_.head_dim},
                   (std::string(call) + ": " + name).c_str());
    expects(t.data() != nullptr, [&] { return std::string(call) + ": " + name + " is a null view"; });
    expects(t.stride(0) >= 0 && t.stride(1) >= 0 && t.stride(2) >= 0, [&] {
      return std::string(call) + ": " + name + " has a negative stride";
    });
    expects(!gemm_operand_view || t.stride(2) == 1, [&] {
      return std::string(call) + ": " + name + " is a GEMM operand, so its head_dim stride must be 1 (it is " +
             std::to_string(t.stride(2)) + ")";
    });
  }
  template <class T>
  void expect_lse(const tensor_view<T, 2>& lse, const char* call, std::int64_t rows) const {
    lse.expect_shape({shape_.heads, rows}, (std::string(call) + ": lse").c_str());
    expects(lse.data() != nullptr, [&] { return std::string(call) + ": lse is a null view"; });
  }

  /// The scratch region, copy stream and events: the object's own (the
  /// first constructor), or shared with the other objects over a scratch.
  std::optional<chunked_attention_scratch<B>> own_scratch_;
  chunked_attention_scratch<B>& scratch_;
  B& backend_ = scratch_.backend_;
  attention_shape shape_ = scratch_.shape_;
  parts parts_{};
  std::array<event_type, 2>& fetched_ = scratch_.marks_.fetched;      // slot s holds its chunk (copy stream)
  std::array<event_type, 2>& slot_free_ = scratch_.marks_.slot_free;  // slot s was last read (compute stream)
  std::array<event_type, 2>& q_fetched_ = scratch_.marks_.q_fetched;      // query slot s holds its chunk (copy stream)
  std::array<event_type, 2>& q_slot_free_ = scratch_.marks_.q_slot_free;  // query slot s was last read (compute stream)
  event_type& staged_ = scratch_.marks_.staged;          // the staging buffers hold chunk i
  event_type& stage_free_ = scratch_.marks_.stage_free;  // the staging buffers were copied out
  std::array<event_type, 2>& carry_ready_ = scratch_.marks_.carry_ready;  // the copy stream's last use of carry slot s is done
  std::array<event_type, 2>& carry_used_ = scratch_.marks_.carry_used;    // the compute's last use of carry slot s is done
  event_type& copy_done_ = scratch_.marks_.copy_done;    // everything issued on the copy stream
  event_type& call_start_ = scratch_.marks_.call_start;  // what the caller's stream enqueued before a call
  std::optional<stream_type>& copy_ = scratch_.copy_;
  liveness_watch scratch_alive_ = scratch_.alive_;  // every use of scratch_ checks it first
  std::int64_t stored_ = 0;  // chunks [0, stored_) of this sequence are in the host store (offload)
  // host_carry: chunks [0, carried_below_) hold a dK/dV carry on the host,
  // and the next backward run must end there; -1: no backward run yet.
  std::int64_t carried_below_ = -1;
  bool carry_broken_ = false;  // a backward run with host_carry began and did not complete
};

/// The device scratch of chunked_causal_attention objects that are called
/// in turn on one stream (a model's layers with host K/V), and what orders
/// every use of it: the copy stream and the events of its slots and
/// staging buffers, which the objects built over it share. See the header.
template <Backend B>
class chunked_attention_scratch {
 public:
  using stream_type = typename B::stream;
  using event_type = typename B::event;

  /// Device bytes of the scratch for objects of `shape` (what one object's
  /// required_device_bytes is: sharing adds nothing).
  [[nodiscard]] static std::size_t required_bytes(const attention_shape& shape) {
    return chunked_causal_attention<B>::required_device_bytes(shape);
  }

  /// Over a device region of at least required_bytes(shape), which the
  /// caller owns; creates the copy stream when offloading. With
  /// `prefetch_across_calls` off every call's copies start after what the
  /// stream enqueued before the call, as over a region shared as plain
  /// memory (the same values; a reference for measuring the prefetch).
  chunked_attention_scratch(B& backend, const attention_shape& shape, memory_region device,
                            bool prefetch_across_calls = true)
      : backend_(backend), shape_(shape), device_(device), across_calls_(prefetch_across_calls) {
    shape_.validate();
    region_carver device_carver(device, "chunked_causal_attention device scratch");
    region_carver pinned_counting;
    (void)chunked_causal_attention<B>::carve(shape_, device_carver, pinned_counting);  // throws naming the part
    if (shape_.offload) copy_.emplace(backend_.make_stream("attention Q/K/V copy"));
  }
  chunked_attention_scratch(const chunked_attention_scratch&) = delete;
  chunked_attention_scratch& operator=(const chunked_attention_scratch&) = delete;
  ~chunked_attention_scratch() {
    if (copy_) memo::drain(backend_, *copy_);  // its error also reached the callers' stream
  }

  /// Waits for the copies queued so far and drops their error, and forgets
  /// the marks the calls left for the next one: for a step abandoned
  /// part-way, whose failure reached the copy stream and those marks
  /// through the events the copies wait for (else the next step's copies,
  /// which wait for the last step's marks, would inherit it). The callers'
  /// streams must be drained first.
  void drain() noexcept {
    if (copy_) memo::drain(backend_, *copy_);
    try {
      marks fresh(backend_);  // never recorded: they wait for nothing
      marks_ = std::move(fresh);
    } catch (...) {  // no events to be had: the old marks stay, and the next call reports their failure
    }
  }

  [[nodiscard]] const attention_shape& shape() const noexcept { return shape_; }
  [[nodiscard]] memory_region region() const noexcept { return device_; }
  [[nodiscard]] bool prefetch_across_calls() const noexcept { return across_calls_; }

 private:
  friend class chunked_causal_attention<B>;

  B& backend_;
  attention_shape shape_;
  memory_region device_;
  bool across_calls_;
  /// The events that order every use of the slots, the staging buffers and
  /// the carry between the callers' stream and the copy stream (what each
  /// marks: chunked_causal_attention's references to them). One struct, so
  /// drain() replaces them all or none.
  struct marks {
    explicit marks(B& b)
        : fetched{b.make_event(), b.make_event()},
          slot_free{b.make_event(), b.make_event()},
          q_fetched{b.make_event(), b.make_event()},
          q_slot_free{b.make_event(), b.make_event()},
          carry_ready{b.make_event(), b.make_event()},
          carry_used{b.make_event(), b.make_event()},
          staged(b.make_event()),
          stage_free(b.make_event()),
          copy_done(b.make_event()),
          call_start(b.make_event()) {}
    std::array<event_type, 2> fetched, slot_free, q_fetched, q_slot_free, carry_ready, carry_used;
    event_type staged, stage_free, copy_done, call_start;
  };
  marks marks_{backend_};
  liveness_token alive_ = make_liveness_token();  // watched by the objects built over the scratch
  std::optional<stream_type> copy_;
};

}  // namespace memo
