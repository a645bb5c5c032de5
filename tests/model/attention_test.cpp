#include "memo/model/attention.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "memo/backend/host_backend.hpp"
#include "memo/core/transformer_layer.hpp"
#include "../support/recording_backend.hpp"
#include "attention_reference.hpp"
#include "ops/test_support.hpp"

using memo::attention_shape;
using memo::tensor_view;
using namespace memo_test;
using attention = memo::chunked_causal_attention<memo::host_backend>;

namespace {

// A region from one of the backend's resources, returned on destruction.
template <class Resource>
struct owned_region {
  Resource& resource;
  memo::memory_region region;
  owned_region(Resource& r, std::size_t bytes)
      : resource(r), region{static_cast<std::byte*>(r.allocate(bytes, 256)), bytes} {}
  ~owned_region() { resource.deallocate(region.data, region.bytes, 256); }
  owned_region(const owned_region&) = delete;
  owned_region& operator=(const owned_region&) = delete;
};

template <class T>
tensor_view<T, 3> dense3(std::vector<std::remove_const_t<T>>& v, std::int64_t a, std::int64_t b,
                         std::int64_t c) {
  REQUIRE(static_cast<std::int64_t>(v.size()) == a * b * c);
  return tensor_view<T, 3>::contiguous(v.data(), {a, b, c});
}

struct result {
  std::vector<float> o, lse, dq, dk, dv;
};

// Rows [a, a + n) of a dense [T, heads, D] tensor.
template <class V>
auto row_view(V& x, std::int64_t heads, std::int64_t D, std::int64_t a, std::int64_t n) {
  using E = std::remove_reference_t<decltype(x[0])>;
  return tensor_view<E, 3>(x.data() + a * heads * D, {n, heads, D}, {heads * D, D, 1});
}
// Columns [a, a + n) of a dense [H, T] tensor (the log-sum-exp).
template <class V>
auto column_view(V& x, std::int64_t H, std::int64_t T, std::int64_t a, std::int64_t n) {
  using E = std::remove_reference_t<decltype(x[0])>;
  return tensor_view<E, 2>(x.data() + a, {H, n}, {T, 1});
}

// With offload the backward reads K and V (and Q unless keep_queries) from
// the host store only: after the forward the caller's copies are
// overwritten with NaN, so any read of them shows in every gradient.
void poison_after_forward(memo::host_backend& backend, memo::host_backend::stream& stream,
                          std::initializer_list<std::vector<float>*> tensors) {
  backend.synchronize(stream);
  for (auto* t : tensors) std::fill(t->begin(), t->end(), std::numeric_limits<float>::quiet_NaN());
}

// Forward then backward on the host backend with dense tensors; the
// gradients start from `grad_init` (the attention accumulates).
result run_dense(memo::host_backend& backend, const attention_shape& s, const inputs& in,
                 float grad_init = 0.0f) {
  const std::int64_t T = s.tokens, H = s.heads, Hkv = s.kv_heads, D = s.head_dim;
  owned_region device(backend.device_memory(), attention::required_device_bytes(s));
  owned_region pinned(backend.pinned_memory(), attention::required_pinned_bytes(s));
  attention attn(backend, s, device.region, pinned.region);
  auto stream = backend.make_stream("compute");
  auto q = in.q, k = in.k, v = in.v, dout = in.dout;
  result r{std::vector<float>(T * H * D, -7.0f), std::vector<float>(H * T, -7.0f),
           std::vector<float>(T * H * D, grad_init), std::vector<float>(T * Hkv * D, grad_init),
           std::vector<float>(T * Hkv * D, grad_init)};
  attn.forward(stream, dense3<const float>(q, T, H, D), dense3<const float>(k, T, Hkv, D),
               dense3<const float>(v, T, Hkv, D), dense3<float>(r.o, T, H, D),
               view2<float>(r.lse, H, T));
  if (s.queries_on_host()) poison_after_forward(backend, stream, {&q, &k, &v});
  if (s.offload && s.keep_queries) poison_after_forward(backend, stream, {&k, &v});
  attn.backward(stream, dense3<const float>(q, T, H, D), dense3<const float>(k, T, Hkv, D),
                dense3<const float>(v, T, Hkv, D), dense3<const float>(r.o, T, H, D),
                dense3<const float>(dout, T, H, D), cview2<float>(r.lse, H, T),
                dense3<float>(r.dq, T, H, D), dense3<float>(r.dk, T, Hkv, D),
                dense3<float>(r.dv, T, Hkv, D));
  backend.synchronize(stream);
  return r;
}

std::vector<double> plus(std::vector<double> v, double x) {
  for (auto& e : v) e += x;
  return v;
}

void check_against_naive(const result& got, const outputs& ref, float grad_init, double tol) {
  MEMO_CHECK_CLOSE(got.o, ref.o, tol, 10 * tol);
  MEMO_CHECK_CLOSE(got.lse, ref.lse, tol, 10 * tol);
  MEMO_CHECK_CLOSE(got.dq, plus(ref.dq, grad_init), tol, 10 * tol);
  MEMO_CHECK_CLOSE(got.dk, plus(ref.dk, grad_init), tol, 10 * tol);
  MEMO_CHECK_CLOSE(got.dv, plus(ref.dv, grad_init), tol, 10 * tol);
}

}  // namespace

TEST_CASE("chunked_causal_attention: forward and backward equal an fp64 naive attention") {
  memo::host_backend backend;
  struct config {
    std::int64_t tokens, chunk, heads, kv_heads, head_dim;
  };
  const config configs[] = {
      {1, 4, 2, 2, 8},     // T = 1
      {5, 8, 2, 1, 8},     // T < c, GQA with one kv head
      {7, 3, 4, 2, 16},    // c does not divide T, Hkv = H / 2
      {16, 4, 4, 4, 8},    // c divides T
      {33, 8, 4, 1, 16},   // a one-token last chunk
      {9, 1, 1, 1, 4},     // c = 1
      {17, 17, 3, 3, 8},   // c = T
      {40, 16, 2, 1, 64},  // head_dim 64
      {24, 16, 2, 2, 128}, // head_dim 128
  };
  for (const auto& c : configs) {
    // No offload; Q, K and V on the host; K and V only (keep_queries).
    for (const auto& [offload, keep_queries] : {std::pair{false, false}, {true, false}, {true, true}}) {
      const attention_shape s{c.tokens, c.heads, c.kv_heads, c.head_dim, c.chunk, offload, keep_queries};
      CAPTURE(s.tokens);
      CAPTURE(s.chunk);
      CAPTURE(s.heads);
      CAPTURE(s.kv_heads);
      CAPTURE(s.head_dim);
      CAPTURE(offload);
      CAPTURE(keep_queries);
      const auto in = random_inputs(s, static_cast<unsigned>(c.tokens * 31 + c.chunk));
      const float init = 0.25f;  // gradients accumulate onto what is there
      check_against_naive(run_dense(backend, s, in, init), naive_attention(s, in), init, 2e-5);
    }
  }
}

TEST_CASE("chunked_causal_attention: query runs forward in order and backward in reverse equal the whole attention") {
  memo::host_backend backend;
  struct config {
    std::int64_t tokens, chunk, heads, kv_heads, head_dim;
    std::vector<std::int64_t> boundaries;  // run starts, then the end
  };
  const std::vector<config> configs = {
      {16, 4, 2, 2, 8, {0, 4, 12, 16}},    // runs of 1, 2 and 1 chunks
      {15, 4, 4, 2, 8, {0, 8, 15}},        // the last run ends at a short last chunk
      {24, 3, 2, 1, 16, {0, 3, 6, 9, 24}}, // GQA with one K/V head, unequal runs
      {8, 8, 2, 2, 4, {0, 8}},             // one run: the whole sequence
  };
  struct mode {
    bool offload, keep_queries, host_carry;
  };
  const mode modes[] = {{false, false, false}, {true, false, false}, {true, true, false}, {true, false, true},
                        {true, true, true}};
  for (const auto& c : configs) {
    for (const auto& [offload, keep_queries, host_carry] : modes) {
      const attention_shape s{c.tokens, c.heads, c.kv_heads, c.head_dim, c.chunk, offload, keep_queries, host_carry};
      CAPTURE(s.tokens);
      CAPTURE(s.chunk);
      CAPTURE(offload);
      CAPTURE(keep_queries);
      CAPTURE(host_carry);
      const std::int64_t T = s.tokens, H = s.heads, Hkv = s.kv_heads, D = s.head_dim;
      const auto in = random_inputs(s, static_cast<unsigned>(c.tokens * 7 + c.chunk));
      owned_region device(backend.device_memory(), attention::required_device_bytes(s));
      owned_region pinned(backend.pinned_memory(), attention::required_pinned_bytes(s));
      attention attn(backend, s, device.region, pinned.region);
      auto stream = backend.make_stream("compute");
      auto q = in.q, k = in.k, v = in.v, dout = in.dout;
      result r{std::vector<float>(T * H * D, -7.0f), std::vector<float>(H * T, -7.0f),
               std::vector<float>(T * H * D, 0.0f), std::vector<float>(T * Hkv * D, 0.0f),
               std::vector<float>(T * Hkv * D, 0.0f)};
      auto rows = [&](auto& x, std::int64_t heads, std::int64_t a, std::int64_t n) {
        return row_view(x, heads, D, a, n);
      };
      auto columns = [&](auto& x, std::int64_t a, std::int64_t n) { return column_view(x, H, T, a, n); };
      // K, V and their gradients: the whole sequence, or with host_carry
      // the run's rows only (the rest of the view stays untouched).
      auto keys = [&](auto& x, std::int64_t a, std::int64_t n) {
        return host_carry ? rows(x, Hkv, a, n) : rows(x, Hkv, 0, T);
      };
      const std::size_t runs = c.boundaries.size() - 1;
      for (std::size_t j = 0; j < runs; ++j) {
        const std::int64_t a = c.boundaries[j], n = c.boundaries[j + 1] - a;
        attn.forward_queries(stream, a, rows(std::as_const(q), H, a, n), keys(std::as_const(k), a, n),
                             keys(std::as_const(v), a, n), rows(r.o, H, a, n), columns(r.lse, a, n));
      }
      if (s.queries_on_host()) poison_after_forward(backend, stream, {&q, &k, &v});
      if (offload && keep_queries) poison_after_forward(backend, stream, {&k, &v});
      for (std::size_t j = runs; j-- > 0;) {
        const std::int64_t a = c.boundaries[j], n = c.boundaries[j + 1] - a;
        attn.backward_queries(stream, a, rows(std::as_const(q), H, a, n), keys(std::as_const(k), a, n),
                              keys(std::as_const(v), a, n), rows(std::as_const(r.o), H, a, n),
                              rows(std::as_const(dout), H, a, n), columns(std::as_const(r.lse), a, n),
                              rows(r.dq, H, a, n), keys(r.dk, a, n), keys(r.dv, a, n));
      }
      backend.synchronize(stream);
      check_against_naive(r, naive_attention(s, in), 0.0f, 2e-5);
    }
  }
  // A run that does not start at a chunk boundary, or skips the host store.
  const attention_shape s{16, 2, 2, 8, 4, true};
  owned_region device(backend.device_memory(), attention::required_device_bytes(s));
  owned_region pinned(backend.pinned_memory(), attention::required_pinned_bytes(s));
  attention attn(backend, s, device.region, pinned.region);
  auto stream = backend.make_stream("compute");
  std::vector<float> x(16 * 2 * 8), lse(2 * 4);
  const auto q4 = tensor_view<const float, 3>::contiguous(x.data(), {4, 2, 8});
  const auto o4 = tensor_view<float, 3>::contiguous(x.data(), {4, 2, 8});
  const auto kv = tensor_view<const float, 3>::contiguous(x.data(), {16, 2, 8});
  CHECK_THROWS_WITH_AS(attn.forward_queries(stream, 2, q4, kv, kv, o4, view2<float>(lse, 2, 4)),
                       doctest::Contains("queries [2, 6) are not whole chunks of 4 tokens"), memo::error);
  CHECK_THROWS_WITH_AS(attn.forward_queries(stream, 8, q4, kv, kv, o4, view2<float>(lse, 2, 4)),
                       doctest::Contains("only 0 were stored"), memo::error);
  backend.synchronize(stream);
}

TEST_CASE("chunked_causal_attention: strided views inside a fused [T, 3C] QKV buffer") {
  memo::host_backend backend;
  for (const bool offload : {false, true}) {
    CAPTURE(offload);
    const attention_shape s{.tokens = 19, .heads = 4, .kv_heads = 4, .head_dim = 8, .chunk = 5, .offload = offload};
    const std::int64_t T = s.tokens, H = s.heads, D = s.head_dim, C = H * D;
    const auto qkv = random_vector<float>(T * 3 * C, 41);
    // The dense copies the reference reads: q | k | v columns of each row.
    inputs in{std::vector<float>(T * C), std::vector<float>(T * C), std::vector<float>(T * C),
              random_vector<float>(T * C, 42)};
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t x = 0; x < C; ++x) {
        in.q[t * C + x] = qkv[t * 3 * C + x];
        in.k[t * C + x] = qkv[t * 3 * C + C + x];
        in.v[t * C + x] = qkv[t * 3 * C + 2 * C + x];
      }
    const auto ref = naive_attention(s, in);

    // O lives in a padded [T, C + 3] buffer; the padding must stay untouched.
    const std::int64_t o_ld = C + 3;
    std::vector<float> o_buffer(T * o_ld, 99.0f), lse(H * T), dqkv(T * 3 * C, 0.0f);
    auto fused = [&](auto* base, std::int64_t part) {
      using T3 = std::remove_pointer_t<decltype(base)>;
      return tensor_view<T3, 3>(base + part * C, {T, H, D}, {3 * C, D, 1});
    };
    const tensor_view<float, 3> o(o_buffer.data(), {T, H, D}, {o_ld, D, 1});
    owned_region device(backend.device_memory(), attention::required_device_bytes(s));
    owned_region pinned(backend.pinned_memory(), attention::required_pinned_bytes(s));
    attention attn(backend, s, device.region, pinned.region);
    auto stream = backend.make_stream();
    attn.forward(stream, fused(qkv.data(), 0), fused(qkv.data(), 1), fused(qkv.data(), 2), o,
                 view2<float>(lse, H, T));
    attn.backward(stream, fused(qkv.data(), 0), fused(qkv.data(), 1), fused(qkv.data(), 2), o,
                  dense3<const float>(in.dout, T, H, D), cview2<float>(lse, H, T),
                  fused(dqkv.data(), 0), fused(dqkv.data(), 1), fused(dqkv.data(), 2));
    backend.synchronize(stream);

    std::vector<float> got_o(T * C), dq(T * C), dk(T * C), dv(T * C);
    for (std::int64_t t = 0; t < T; ++t) {
      for (std::int64_t x = 0; x < C; ++x) {
        got_o[t * C + x] = o_buffer[t * o_ld + x];
        dq[t * C + x] = dqkv[t * 3 * C + x];
        dk[t * C + x] = dqkv[t * 3 * C + C + x];
        dv[t * C + x] = dqkv[t * 3 * C + 2 * C + x];
      }
      for (std::int64_t x = C; x < o_ld; ++x) CHECK(o_buffer[t * o_ld + x] == 99.0f);
    }
    MEMO_CHECK_CLOSE(got_o, ref.o, 2e-5, 2e-4);
    MEMO_CHECK_CLOSE(lse, ref.lse, 2e-5, 2e-4);
    MEMO_CHECK_CLOSE(dq, ref.dq, 2e-5, 2e-4);
    MEMO_CHECK_CLOSE(dk, ref.dk, 2e-5, 2e-4);
    MEMO_CHECK_CLOSE(dv, ref.dv, 2e-5, 2e-4);
  }
}

TEST_CASE("chunked_causal_attention: scores in the thousands stay finite and accurate") {
  memo::host_backend backend;
  // |q|, |k| up to 60 with head_dim 16: scores up to 60 * 60 * 16 / 4 = 14400,
  // exp of which overflows fp32 and fp64 unless the maximum is shifted out.
  const attention_shape s{.tokens = 21, .heads = 2, .kv_heads = 1, .head_dim = 16, .chunk = 6, .offload = true};
  const auto in = random_inputs(s, 77, 60.0);
  const auto got = run_dense(backend, s, in);
  const auto ref = naive_attention(s, in);
  for (const auto* v : {&got.o, &got.lse, &got.dq, &got.dk, &got.dv})
    CHECK(std::all_of(v->begin(), v->end(), [](float x) { return std::isfinite(x); }));
  MEMO_CHECK_CLOSE(got.o, ref.o, 1e-3, 1e-3);
  MEMO_CHECK_CLOSE(got.lse, ref.lse, 1e-3, 1e-5);
  MEMO_CHECK_CLOSE(got.dv, ref.dv, 1e-3, 1e-3);
  // dS = P (dP - D) is a difference of nearly equal terms for a one-hot P;
  // scaled by |k| ~ 60 its fp32 rounding is what remains.
  MEMO_CHECK_CLOSE(got.dq, ref.dq, 2e-2, 1e-2);
  MEMO_CHECK_CLOSE(got.dk, ref.dk, 2e-2, 1e-2);
}

TEST_CASE("chunked_causal_attention: backward by central finite differences of the forward") {
  memo::host_backend backend;
  const attention_shape s{.tokens = 5, .heads = 2, .kv_heads = 1, .head_dim = 4, .chunk = 2, .offload = true};
  const std::int64_t T = s.tokens, H = s.heads, Hkv = s.kv_heads, D = s.head_dim;
  const auto in = random_inputs(s, 5);
  // loss = sum(O * dout), so dL/dO = dout.
  owned_region device(backend.device_memory(), attention::required_device_bytes(s));
  owned_region pinned(backend.pinned_memory(), attention::required_pinned_bytes(s));
  attention attn(backend, s, device.region, pinned.region);
  auto stream = backend.make_stream();
  std::vector<float> o(T * H * D), lse(H * T);
  auto loss = [&](const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v) {
    auto qc = q, kc = k, vc = v;
    attn.forward(stream, dense3<const float>(qc, T, H, D), dense3<const float>(kc, T, Hkv, D),
                 dense3<const float>(vc, T, Hkv, D), dense3<float>(o, T, H, D), view2<float>(lse, H, T));
    backend.synchronize(stream);
    double l = 0;
    for (std::size_t i = 0; i < o.size(); ++i) l += double(o[i]) * double(in.dout[i]);
    return l;
  };
  const double h = 1e-2;  // fp32 forward: a large step keeps rounding below the truncation error
  auto fd = [&](int which) {
    auto x = convert<double>(which == 0 ? in.q : which == 1 ? in.k : in.v);
    return finite_difference(
        [&](const std::vector<double>& p) {
          const auto pf = convert<float>(p);
          return loss(which == 0 ? pf : in.q, which == 1 ? pf : in.k, which == 2 ? pf : in.v);
        },
        x, h);
  };
  const auto fd_q = fd(0), fd_k = fd(1), fd_v = fd(2);
  const auto got = run_dense(backend, s, in);
  MEMO_CHECK_CLOSE(got.dq, fd_q, 1e-3, 1e-2);
  MEMO_CHECK_CLOSE(got.dk, fd_k, 1e-3, 1e-2);
  MEMO_CHECK_CLOSE(got.dv, fd_v, 1e-3, 1e-2);
}

TEST_CASE("chunked_causal_attention: with offload the backward reads K/V only from the host store") {
  memo::host_backend backend;
  const attention_shape s{.tokens = 23, .heads = 4, .kv_heads = 2, .head_dim = 8, .chunk = 4, .offload = true};
  const std::int64_t T = s.tokens, H = s.heads, Hkv = s.kv_heads, D = s.head_dim;
  const auto in = random_inputs(s, 9);
  const auto ref = naive_attention(s, in);
  owned_region device(backend.device_memory(), attention::required_device_bytes(s));
  owned_region pinned(backend.pinned_memory(), attention::required_pinned_bytes(s));
  attention attn(backend, s, device.region, pinned.region);
  auto stream = backend.make_stream();
  auto q = in.q, k = in.k, v = in.v, dout = in.dout;
  std::vector<float> o(T * H * D), lse(H * T), dq(T * H * D), dk(T * Hkv * D), dv(T * Hkv * D);
  for (int step = 0; step < 2; ++step) {  // the object is reusable: a second step gives the same
    CAPTURE(step);
    k = in.k;
    v = in.v;
    std::fill(dq.begin(), dq.end(), 0.0f);
    std::fill(dk.begin(), dk.end(), 0.0f);
    std::fill(dv.begin(), dv.end(), 0.0f);
    attn.forward(stream, dense3<const float>(q, T, H, D), dense3<const float>(k, T, Hkv, D),
                 dense3<const float>(v, T, Hkv, D), dense3<float>(o, T, H, D), view2<float>(lse, H, T));
    backend.synchronize(stream);
    // The caller's K/V are gone: poison them and pass empty views.
    std::fill(k.begin(), k.end(), std::numeric_limits<float>::quiet_NaN());
    std::fill(v.begin(), v.end(), std::numeric_limits<float>::quiet_NaN());
    attn.backward(stream, dense3<const float>(q, T, H, D), {}, {}, dense3<const float>(o, T, H, D),
                  dense3<const float>(dout, T, H, D), cview2<float>(lse, H, T),
                  dense3<float>(dq, T, H, D), dense3<float>(dk, T, Hkv, D), dense3<float>(dv, T, Hkv, D));
    backend.synchronize(stream);
    MEMO_CHECK_CLOSE(o, ref.o, 2e-5, 2e-4);
    MEMO_CHECK_CLOSE(dq, ref.dq, 2e-5, 2e-4);
    MEMO_CHECK_CLOSE(dk, ref.dk, 2e-5, 2e-4);
    MEMO_CHECK_CLOSE(dv, ref.dv, 2e-5, 2e-4);
  }
}

TEST_CASE("chunked_causal_attention: a throttled copy link still gives the same result") {
  // Slow copies make the fetch of chunk j + 1 still running while chunk j
  // computes, so a missing event shows up as a wrong result (and a race
  // under ThreadSanitizer).
  memo::host_backend::options options;
  options.host_to_device_bytes_per_second = 2.0e7;
  options.device_to_host_bytes_per_second = 2.0e7;
  memo::host_backend backend(options);
  const attention_shape s{.tokens = 30, .heads = 2, .kv_heads = 2, .head_dim = 16, .chunk = 4, .offload = true};
  const auto in = random_inputs(s, 13);
  check_against_naive(run_dense(backend, s, in), naive_attention(s, in), 0.0f, 2e-5);
}

TEST_CASE("chunked_causal_attention: sizing by counting equals what the constructor takes") {
  memo::host_backend backend;
  for (const bool offload : {false, true}) {
    CAPTURE(offload);
    const attention_shape s{.tokens = 50, .heads = 4, .kv_heads = 2, .head_dim = 8, .chunk = 16, .offload = offload};
    const std::size_t device_bytes = attention::required_device_bytes(s);
    const std::size_t pinned_bytes = attention::required_pinned_bytes(s);
    CHECK(device_bytes > 0);
    // The pinned store holds at least K and V for every token, and nothing
    // without offload (its exact parts are checked below).
    CHECK(pinned_bytes >= (offload ? std::size_t{2 * 50 * 2 * 8 * 4} : 0));
    if (!offload) CHECK(pinned_bytes == 0);
    owned_region device(backend.device_memory(), device_bytes);
    owned_region pinned(backend.pinned_memory(), std::max<std::size_t>(pinned_bytes, 1));
    // Exactly the counted bytes are enough ...
    CHECK_NOTHROW((void)attention(backend, s, device.region, pinned.region.subregion(0, pinned_bytes)));
    // ... and one byte fewer is a clear error.
    try {
      (void)attention(backend, s, device.region.subregion(0, device_bytes - 1), pinned.region);
      FAIL("an undersized device region was accepted");
    } catch (const memo::error& e) {
      const std::string what = e.what();
      CHECK(what.find("chunked_causal_attention device scratch") != std::string::npos);
      CHECK(what.find(std::to_string(device_bytes - 1)) != std::string::npos);
    }
    if (offload) {
      CHECK_THROWS_AS((void)attention(backend, s, device.region, pinned.region.subregion(0, pinned_bytes - 1)),
                      memo::error);
    }
  }
  // The host store is Q, K and V of every token; keep_queries leaves Q out
  // (each part is aligned to default_alignment_bytes, hence the slack).
  const attention_shape all{.tokens = 50, .heads = 4, .kv_heads = 2, .head_dim = 8, .chunk = 16, .offload = true};
  attention_shape kv_only = all;
  kv_only.keep_queries = true;
  const std::size_t q_bytes = 50 * 4 * 8 * 4, kv_bytes = 2 * 50 * 2 * 8 * 4;
  CHECK(attention::required_pinned_bytes(all) >= q_bytes + kv_bytes);
  CHECK(attention::required_pinned_bytes(all) < q_bytes + kv_bytes + 3 * memo::default_alignment_bytes);
  CHECK(attention::required_pinned_bytes(kv_only) >= kv_bytes);
  CHECK(attention::required_pinned_bytes(kv_only) < kv_bytes + 2 * memo::default_alignment_bytes);
  // Without the query slots and staging buffer (three [16, 4, 8] tiles).
  CHECK(attention::required_device_bytes(all) - attention::required_device_bytes(kv_only) >= 3 * 16 * 4 * 8 * 4);
  // Device memory grows linearly in tokens at a fixed chunk; naive
  // attention's scores grow quadratically.
  auto bytes = [](std::int64_t t) {
    return static_cast<double>(attention::required_device_bytes({t, 4, 4, 64, 256, true}));
  };
  const double step1 = bytes(8192) - bytes(4096), step2 = bytes(16384) - bytes(8192);
  CHECK(step2 == doctest::Approx(2 * step1).epsilon(0.01));
  CHECK(bytes(65536) < 0.01 * 65536.0 * 65536.0 * 4 * 4);
}

TEST_CASE("chunked_causal_attention: bad shapes and views are errors that name them") {
  memo::host_backend backend;
  CHECK_THROWS_WITH_AS((void)attention::required_device_bytes({10, 6, 4, 8, 4, false}),
                       doctest::Contains("does not divide"), memo::error);
  CHECK_THROWS_WITH_AS((void)attention::required_device_bytes({10, 4, 4, 8, 0, false}),
                       doctest::Contains("chunk = 0"), memo::error);
  CHECK_THROWS_WITH_AS((void)attention::required_device_bytes({-1, 4, 4, 8, 4, false}),
                       doctest::Contains("tokens = -1"), memo::error);

  const attention_shape s{.tokens = 6, .heads = 2, .kv_heads = 1, .head_dim = 4, .chunk = 4};
  owned_region device(backend.device_memory(), attention::required_device_bytes(s));
  attention attn(backend, s, device.region, {});
  auto stream = backend.make_stream();
  std::vector<float> q(6 * 2 * 4), k(6 * 4), o(6 * 2 * 4), lse(2 * 6);
  // k shaped as if it had two kv heads.
  CHECK_THROWS_WITH_AS(attn.forward(stream, dense3<const float>(q, 6, 2, 4), dense3<const float>(q, 6, 2, 4),
                                    dense3<const float>(k, 6, 1, 4), dense3<float>(o, 6, 2, 4),
                                    view2<float>(lse, 2, 6)),
                       doctest::Contains("forward: k has shape [6, 2, 4], expected [6, 1, 4]"), memo::error);
  // q with a non-unit head_dim stride cannot be a GEMM operand.
  const tensor_view<const float, 3> q_strided(q.data(), {6, 2, 2}, {8, 4, 2});
  const attention_shape s2{.tokens = 6, .heads = 2, .kv_heads = 1, .head_dim = 2, .chunk = 4};
  owned_region device2(backend.device_memory(), attention::required_device_bytes(s2));
  attention attn2(backend, s2, device2.region, {});
  const auto k2 = tensor_view<const float, 3>::contiguous(k.data(), {6, 1, 2});
  CHECK_THROWS_WITH_AS(attn2.forward(stream, q_strided, k2, k2,
                                     tensor_view<float, 3>(o.data(), {6, 2, 2}, {4, 2, 1}),
                                     view2<float>(lse, 2, 6)),
                       doctest::Contains("head_dim stride must be 1"), memo::error);
  backend.synchronize(stream);
}

TEST_CASE("chunked_causal_attention: with offload a backward before any forward is an error") {
  memo::host_backend backend;
  const attention_shape s{.tokens = 6, .heads = 1, .kv_heads = 1, .head_dim = 4, .chunk = 4, .offload = true};
  owned_region device(backend.device_memory(), attention::required_device_bytes(s));
  owned_region pinned(backend.pinned_memory(), attention::required_pinned_bytes(s));
  attention attn(backend, s, device.region, pinned.region);
  auto stream = backend.make_stream();
  std::vector<float> x(6 * 4), lse(6), g(6 * 4);
  CHECK_THROWS_WITH_AS(attn.backward(stream, dense3<const float>(x, 6, 1, 4), {}, {}, dense3<const float>(x, 6, 1, 4),
                                     dense3<const float>(x, 6, 1, 4), cview2<float>(lse, 1, 6),
                                     dense3<float>(g, 6, 1, 4), dense3<float>(g, 6, 1, 4), dense3<float>(g, 6, 1, 4)),
                       doctest::Contains("call forward first"), memo::error);
}

TEST_CASE("chunked_causal_attention: forward and backward allocate nothing") {
  memo::host_backend backend;
  const attention_shape s{.tokens = 37, .heads = 4, .kv_heads = 2, .head_dim = 16, .chunk = 8, .offload = true};
  const std::int64_t T = s.tokens, H = s.heads, Hkv = s.kv_heads, D = s.head_dim;
  auto in = random_inputs(s, 3);
  owned_region device(backend.device_memory(), attention::required_device_bytes(s));
  owned_region pinned(backend.pinned_memory(), attention::required_pinned_bytes(s));
  attention attn(backend, s, device.region, pinned.region);
  auto stream = backend.make_stream();
  std::vector<float> o(T * H * D), lse(H * T), dq(T * H * D), dk(T * Hkv * D), dv(T * Hkv * D);
  const auto device_allocations = backend.device_memory().allocation_count();
  const auto pinned_allocations = backend.pinned_memory().allocation_count();
  attn.forward(stream, dense3<const float>(in.q, T, H, D), dense3<const float>(in.k, T, Hkv, D),
               dense3<const float>(in.v, T, Hkv, D), dense3<float>(o, T, H, D), view2<float>(lse, H, T));
  attn.backward(stream, dense3<const float>(in.q, T, H, D), {}, {}, dense3<const float>(o, T, H, D),
                dense3<const float>(in.dout, T, H, D), cview2<float>(lse, H, T), dense3<float>(dq, T, H, D),
                dense3<float>(dk, T, Hkv, D), dense3<float>(dv, T, Hkv, D));
  backend.synchronize(stream);
  CHECK(backend.device_memory().allocation_count() == device_allocations);
  CHECK(backend.pinned_memory().allocation_count() == pinned_allocations);
  // And the work was real.
  MEMO_CHECK_CLOSE(dq, naive_attention(s, in).dq, 2e-5, 2e-4);
}

TEST_CASE("chunked_causal_attention: the host chunk is the largest whose head working set fits the cache") {
  // Working set of one head: 2 c^2 + 5 c d floats.
  auto fits = [](std::int64_t c, std::int64_t d, std::size_t cache) {
    return static_cast<std::size_t>(2 * c * c + 5 * c * d) * sizeof(float) <= cache;
  };
  for (const std::int64_t d : {16, 64, 128, 256}) {
    for (const std::size_t cache : {memo::mib / 4, memo::mib, 2 * memo::mib, 32 * memo::mib}) {
      CAPTURE(d);
      CAPTURE(cache);
      const std::int64_t c = memo::host_attention_chunk(d, cache);
      CHECK(c >= 64);
      CHECK(c <= 1024);
      CHECK((c & (c - 1)) == 0);
      if (c > 64) CHECK(fits(c, d, cache));
      if (c < 1024) CHECK_FALSE(fits(2 * c, d, cache));
    }
  }
  CHECK(memo::host_attention_chunk(64, memo::mib) == 256);
  CHECK(memo::host_attention_chunk(128, memo::mib) == 128);
}

TEST_CASE("chunked_causal_attention: with offload one object serves steps of new inputs, GQA runs and empty q/k/v") {
  // Three steps on one object, each with new inputs, query runs of 2, 1
  // and 3 chunks (the last short) with four query heads on one K/V head,
  // and the backward given empty q, k and v views after the caller's were
  // overwritten with NaN: a host store left from the step before, or any
  // read of the caller's tensors, changes the gradients. With throttled
  // copies too, so a missing wait shows as a wrong result.
  for (const bool throttled : {false, true}) {
    CAPTURE(throttled);
    memo::host_backend::options options;
    if (throttled) {
      options.host_to_device_bytes_per_second = 2.0e7;
      options.device_to_host_bytes_per_second = 2.0e7;
    }
    memo::host_backend backend(options);
    for (const bool host_carry : {false, true}) {
    CAPTURE(host_carry);
    const attention_shape s{
        .tokens = 22, .heads = 4, .kv_heads = 1, .head_dim = 8, .chunk = 4, .offload = true, .host_carry = host_carry};
    const std::int64_t T = s.tokens, H = s.heads, Hkv = s.kv_heads, D = s.head_dim;
    auto keys = [&](auto& x, std::int64_t a, std::int64_t n) {
      return host_carry ? row_view(x, Hkv, D, a, n) : row_view(x, Hkv, D, 0, T);
    };
    owned_region device(backend.device_memory(), attention::required_device_bytes(s));
    owned_region pinned(backend.pinned_memory(), attention::required_pinned_bytes(s));
    attention attn(backend, s, device.region, pinned.region);
    auto stream = backend.make_stream("compute");
    const std::vector<std::int64_t> b = {0, 8, 12, 22};
    for (unsigned step = 0; step < 3; ++step) {
      CAPTURE(step);
      const auto in = random_inputs(s, 1000 + step);
      auto q = in.q, k = in.k, v = in.v, dout = in.dout;
      result r{std::vector<float>(T * H * D, -7.0f), std::vector<float>(H * T, -7.0f),
               std::vector<float>(T * H * D, 0.0f), std::vector<float>(T * Hkv * D, 0.0f),
               std::vector<float>(T * Hkv * D, 0.0f)};
      for (std::size_t j = 0; j + 1 < b.size(); ++j) {
        const std::int64_t a = b[j], n = b[j + 1] - a;
        attn.forward_queries(stream, a, row_view(std::as_const(q), H, D, a, n), keys(std::as_const(k), a, n),
                             keys(std::as_const(v), a, n), row_view(r.o, H, D, a, n), column_view(r.lse, H, T, a, n));
      }
      poison_after_forward(backend, stream, {&q, &k, &v});
      for (std::size_t j = b.size() - 1; j-- > 0;) {
        const std::int64_t a = b[j], n = b[j + 1] - a;
        attn.backward_queries(stream, a, {}, {}, {}, row_view(std::as_const(r.o), H, D, a, n),
                              row_view(std::as_const(dout), H, D, a, n), column_view(std::as_const(r.lse), H, T, a, n),
                              row_view(r.dq, H, D, a, n), keys(r.dk, a, n), keys(r.dv, a, n));
      }
      backend.synchronize(stream);
      check_against_naive(r, naive_attention(s, in), 0.0f, 2e-5);
    }
    }
  }
}

TEST_CASE("chunked_causal_attention: with host_carry backward runs go in exact reverse order") {
  CHECK_THROWS_WITH_AS((void)attention::required_device_bytes({.tokens = 8, .heads = 1, .kv_heads = 1, .head_dim = 4,
                                                               .chunk = 4, .host_carry = true}),
                       doctest::Contains("host_carry"), memo::error);
  memo::host_backend backend;
  const attention_shape s{
      .tokens = 12, .heads = 2, .kv_heads = 1, .head_dim = 4, .chunk = 4, .offload = true, .host_carry = true};
  const std::int64_t T = s.tokens, H = s.heads, Hkv = s.kv_heads, D = s.head_dim;
  owned_region device(backend.device_memory(), attention::required_device_bytes(s));
  owned_region pinned(backend.pinned_memory(), attention::required_pinned_bytes(s));
  attention attn(backend, s, device.region, pinned.region);
  auto stream = backend.make_stream("compute");
  const auto in = random_inputs(s, 77);
  auto q = in.q, k = in.k, v = in.v, dout = in.dout;
  std::vector<float> o(T * H * D), lse(H * T), dq(T * H * D), dk(T * Hkv * D), dv(T * Hkv * D);
  auto forward = [&](std::int64_t a, std::int64_t n) {
    attn.forward_queries(stream, a, row_view(std::as_const(q), H, D, a, n), row_view(std::as_const(k), Hkv, D, a, n),
                         row_view(std::as_const(v), Hkv, D, a, n), row_view(o, H, D, a, n),
                         column_view(lse, H, T, a, n));
  };
  auto backward = [&](std::int64_t a, std::int64_t n) {
    attn.backward_queries(stream, a, {}, {}, {}, row_view(std::as_const(o), H, D, a, n),
                          row_view(std::as_const(dout), H, D, a, n), column_view(std::as_const(lse), H, T, a, n),
                          row_view(dq, H, D, a, n), row_view(dk, Hkv, D, a, n), row_view(dv, Hkv, D, a, n));
  };
  forward(0, 4), forward(4, 8);
  // The first backward run must end where the forward did, the next where
  // the previous began.
  CHECK_THROWS_WITH_AS(backward(0, 4), doctest::Contains("must end at chunk 3, the end of the stored forward"),
                       memo::error);
  backward(8, 4);
  CHECK_THROWS_WITH_AS(backward(0, 4), doctest::Contains("must end at chunk 2, where the previous backward run began"),
                       memo::error);
  // A backward run that throws part-way (here from its keys_done) leaves
  // the carry part-updated: running it again is an error, and a new
  // forward from token 0 starts clean (its gradients are checked against
  // the fp64 attention).
  struct stop {};
  CHECK_THROWS_AS(attn.backward_queries(stream, 4, {}, {}, {}, row_view(std::as_const(o), H, D, 4, 4),
                                        row_view(std::as_const(dout), H, D, 4, 4),
                                        column_view(std::as_const(lse), H, T, 4, 4), row_view(dq, H, D, 4, 4),
                                        row_view(dk, Hkv, D, 4, 4), row_view(dv, Hkv, D, 4, 4),
                                        [](std::int64_t e) {
                                          if (e == 4) throw stop{};
                                        }),
                  stop);
  backend.synchronize(stream);
  CHECK_THROWS_WITH_AS(backward(4, 4), doctest::Contains("did not complete"), memo::error);
  std::fill(dq.begin(), dq.end(), 0.0f), std::fill(dk.begin(), dk.end(), 0.0f), std::fill(dv.begin(), dv.end(), 0.0f);
  forward(0, 4), forward(4, 8);
  backward(4, 8), backward(0, 4);
  backend.synchronize(stream);
  const memo_test::outputs want = naive_attention(s, in);
  MEMO_CHECK_CLOSE(dq, want.dq, 2e-5, 2e-4);
  MEMO_CHECK_CLOSE(dk, want.dk, 2e-5, 2e-4);
  MEMO_CHECK_CLOSE(dv, want.dv, 2e-5, 2e-4);
  // K and V views of the whole sequence are the wrong shape with host_carry.
  CHECK_THROWS_WITH_AS(attn.forward_queries(stream, 0, row_view(std::as_const(q), H, D, 0, 4),
                                            row_view(std::as_const(k), Hkv, D, 0, T),
                                            row_view(std::as_const(v), Hkv, D, 0, T), row_view(o, H, D, 0, 4),
                                            column_view(lse, H, T, 0, 4)),
                       doctest::Contains("k has shape [12, 1, 4], expected [4, 1, 4]"), memo::error);
  backend.synchronize(stream);
}

TEST_CASE("chunked_causal_attention: its host traffic is what the cost model counts") {
  // The copies the attention really issues, per direction and pass, against
  // transformer_layer's store (qkv_bytes) and fetches
  // (attention_fetch_bytes), which the alpha LP's rows and the step
  // simulator read.
  memo::host_backend inner;
  using recording = memo::testing::recording_backend<memo::host_backend>;
  using recorded_attention = memo::chunked_causal_attention<recording>;
  struct config {
    std::int64_t tokens, chunk, heads, kv_heads, head_dim;
  };
  for (const auto& c : {config{16, 4, 2, 2, 8}, config{30, 4, 4, 2, 8}, config{33, 8, 2, 1, 16},
                        config{9, 9, 2, 2, 4}, config{12, 1, 2, 2, 4}}) {
    CAPTURE(c.tokens);
    CAPTURE(c.chunk);
    recording backend(inner);
    const attention_shape s{c.tokens, c.heads, c.kv_heads, c.head_dim, c.chunk, true, false};
    const std::int64_t T = s.tokens, H = s.heads, Hkv = s.kv_heads, D = s.head_dim;
    const auto in = random_inputs(s, 29);
    owned_region device(backend.device_memory(), recorded_attention::required_device_bytes(s));
    owned_region pinned(backend.pinned_memory(), recorded_attention::required_pinned_bytes(s));
    recorded_attention attn(backend, s, device.region, pinned.region);
    auto stream = backend.make_stream("compute");
    auto q = in.q, k = in.k, v = in.v, dout = in.dout;
    std::vector<float> o(T * H * D), lse(H * T), dq(T * H * D), dk(T * Hkv * D), dv(T * Hkv * D);
    // Bytes copied in each direction by the calls made since the last look.
    auto traffic = [&] {
      std::size_t to_device = 0, to_host = 0;
      for (const auto& call : backend.calls()) {
        if (call.kind != memo::testing::call_kind::copy) continue;
        if (call.direction == memo::copy_kind::host_to_device) to_device += call.bytes;
        if (call.direction == memo::copy_kind::device_to_host) to_host += call.bytes;
      }
      backend.clear_calls();
      return std::pair{to_device, to_host};
    };
    backend.clear_calls();
    attn.forward(stream, dense3<const float>(q, T, H, D), dense3<const float>(k, T, Hkv, D),
                 dense3<const float>(v, T, Hkv, D), dense3<float>(o, T, H, D), view2<float>(lse, H, T));
    backend.synchronize(stream);
    const auto forward = traffic();
    attn.backward(stream, {}, {}, {}, dense3<const float>(o, T, H, D), dense3<const float>(dout, T, H, D),
                  cview2<float>(lse, H, T), dense3<float>(dq, T, H, D), dense3<float>(dk, T, Hkv, D),
                  dense3<float>(dv, T, Hkv, D));
    backend.synchronize(stream);
    const auto backward = traffic();

    memo::transformer_layer layer;  // the same attention as a layer, fp32, one GPU
    layer.tokens = T;
    layer.hidden = H * D;
    layer.heads = H;
    layer.kv_heads = Hkv;
    layer.bytes_per_element = 4;
    layer.attention_keeps_qkv = true;
    layer.attention_chunk = s.chunk;
    CHECK(forward.second == layer.qkv_bytes());
    CHECK(forward.first == layer.attention_fetch_bytes(false));
    CHECK(backward.first == layer.attention_fetch_bytes(true));
    CHECK(backward.second == 0);
  }
}

namespace {

using recording = memo::testing::recording_backend<memo::host_backend>;

// Several layers' attentions over one chunked_attention_scratch, called as
// a model calls them: the forward runs in order, each layer in turn, then
// the backward runs in reverse, layers in reverse; after every call a
// compute op (a memset) stands for the rest of its layer. Each layer has
// its own inputs; every call and the rest ops are labelled ("forward 1 of
// layer 0", "rest of backward 0 of layer 1").
struct layered_run {
  std::vector<result> results;  // [layer]
  std::vector<memo::testing::recorded_call> calls;
  std::size_t compute = 0, copy = 0;  // stream ids
};

layered_run run_layers(const attention_shape& s, const std::vector<inputs>& in, std::int64_t run_tokens,
                       bool across_calls) {
  memo::host_backend inner;
  recording backend(inner);
  using scratch_type = memo::chunked_attention_scratch<recording>;
  using layer_attention = memo::chunked_causal_attention<recording>;
  const std::int64_t T = s.tokens, H = s.heads, Hkv = s.kv_heads, D = s.head_dim;
  const auto layers = in.size();
  auto stream = backend.make_stream("compute");
  owned_region device(backend.device_memory(), scratch_type::required_bytes(s));
  scratch_type scratch(backend, s, device.region, across_calls);
  using pinned_region = owned_region<std::remove_reference_t<decltype(backend.pinned_memory())>>;
  std::vector<std::unique_ptr<pinned_region>> pinned;
  std::vector<std::unique_ptr<layer_attention>> attn;
  for (std::size_t l = 0; l < layers; ++l) {
    pinned.push_back(std::make_unique<pinned_region>(backend.pinned_memory(), layer_attention::required_pinned_bytes(s)));
    attn.push_back(std::make_unique<layer_attention>(scratch, pinned.back()->region));
  }
  owned_region rest(backend.device_memory(), 4096);
  layered_run out;
  for (std::size_t l = 0; l < layers; ++l) {
    out.results.push_back({std::vector<float>(T * H * D, -7.0f), std::vector<float>(H * T, -7.0f),
                           std::vector<float>(T * H * D, 0.0f), std::vector<float>(T * Hkv * D, 0.0f),
                           std::vector<float>(T * Hkv * D, 0.0f)});
  }
  auto rows = [&](auto& x, std::int64_t heads, std::int64_t a, std::int64_t n) { return row_view(x, heads, D, a, n); };
  auto keys = [&](auto& x, std::int64_t a, std::int64_t n) {
    return s.host_carry ? rows(x, Hkv, a, n) : rows(x, Hkv, 0, T);
  };
  auto columns = [&](auto& x, std::int64_t a, std::int64_t n) { return column_view(x, H, T, a, n); };
  auto rest_of = [&](const std::string& call) {
    backend.set_label("rest of " + call);
    backend.memset_async(rest.region.data, 0, rest.region.bytes, stream);
  };
  const std::int64_t runs = (T + run_tokens - 1) / run_tokens;
  backend.clear_calls();
  for (std::int64_t j = 0; j < runs; ++j) {
    const std::int64_t a = j * run_tokens, n = std::min(run_tokens, T - a);
    for (std::size_t l = 0; l < layers; ++l) {
      const std::string call = "forward " + std::to_string(j) + " of layer " + std::to_string(l);
      backend.set_label(call);
      result& r = out.results[l];
      attn[l]->forward_queries(stream, a, rows(in[l].q, H, a, n), keys(in[l].k, a, n), keys(in[l].v, a, n),
                               rows(r.o, H, a, n), columns(r.lse, a, n));
      rest_of(call);
    }
  }
  for (std::int64_t j = runs; j-- > 0;) {
    const std::int64_t a = j * run_tokens, n = std::min(run_tokens, T - a);
    for (std::size_t l = layers; l-- > 0;) {
      const std::string call = "backward " + std::to_string(j) + " of layer " + std::to_string(l);
      backend.set_label(call);
      result& r = out.results[l];
      attn[l]->backward_queries(stream, a, {}, {}, {}, rows(std::as_const(r.o), H, a, n), rows(in[l].dout, H, a, n),
                                columns(std::as_const(r.lse), a, n), rows(r.dq, H, a, n), keys(r.dk, a, n),
                                keys(r.dv, a, n));
      rest_of(call);
    }
  }
  backend.synchronize(stream);
  out.calls = backend.calls();
  const auto& names = backend.stream_names();
  out.compute = static_cast<std::size_t>(std::find(names.begin(), names.end(), "compute") - names.begin());
  out.copy = static_cast<std::size_t>(std::find(names.begin(), names.end(), "attention Q/K/V copy") - names.begin());
  REQUIRE(out.copy < names.size());
  return out;
}

// The order of a layered run's calls: each call (copy, enqueue) is one op
// named by its index in the log, ordered by its stream and its waits.
struct call_order {
  const layered_run& run;
  memo::testing::replayed_ops ops;
  std::set<std::pair<std::string, std::string>> before;

  explicit call_order(const layered_run& r)
      : run(r), ops(memo::testing::replay(r.calls, std::max(r.compute, r.copy) + 1,
                                          [&](const memo::testing::recorded_call& c) {
                                            return std::to_string(&c - r.calls.data());
                                          })),
        before(memo::testing::happens_before(ops)) {}

  // The first host-to-device copy of the call labelled `label`.
  [[nodiscard]] std::string first_fetch(const std::string& label) const {
    for (std::size_t i = 0; i < run.calls.size(); ++i) {
      const auto& c = run.calls[i];
      if (c.label == label && c.stream == run.copy && c.kind == memo::testing::call_kind::copy &&
          c.direction == memo::copy_kind::host_to_device) {
        return std::to_string(i);
      }
    }
    FAIL("no host fetch in " << label);
    return {};
  }
  // The last compute op on the compute stream labelled `label`.
  [[nodiscard]] std::string last_compute(const std::string& label) const {
    for (std::size_t i = run.calls.size(); i-- > 0;) {
      const auto& c = run.calls[i];
      if (c.label == label && c.stream == run.compute && c.kind == memo::testing::call_kind::enqueue) {
        return std::to_string(i);
      }
    }
    FAIL("no compute op in " << label);
    return {};
  }
  [[nodiscard]] bool happens_before(const std::string& a, const std::string& b) const {
    return before.contains({a, b});
  }
  // Whether op `op` waits directly for a compute op labelled `label`.
  [[nodiscard]] bool waits_for_compute_of(const std::string& op, const std::string& label) const {
    const auto found = ops.waits_on.find(op);
    if (found == ops.waits_on.end()) return false;
    return std::ranges::any_of(found->second, [&](const std::string& w) {
      const auto& c = run.calls[std::stoul(w)];
      return c.stream == run.compute && c.label == label;
    });
  }
};

}  // namespace

TEST_CASE("chunked_causal_attention: over a shared scratch a call's first fetch runs during the call before") {
  // Two layers over one scratch, as a model calls them (forward 0 of layer
  // 0, of layer 1, ..., then backward in reverse). Each call's first host
  // fetch must wait for the previous call's last read of its slot -- a
  // compute op of that call -- and for nothing after it: not the previous
  // call's last compute op, nor the rest of its layer. Without the shared
  // ordering (prefetch_across_calls off) it waits for both. The values are
  // the same bits either way, and the naive attention's.
  struct config {
    std::int64_t tokens, chunk, run;
    bool host_carry;
  };
  for (const auto& c : {config{16, 4, 16, false}, config{12, 4, 12, false}, config{16, 4, 8, true},
                        config{24, 4, 8, true}, config{16, 4, 8, false}}) {
    CAPTURE(c.tokens);
    CAPTURE(c.run);
    CAPTURE(c.host_carry);
    const attention_shape s{.tokens = c.tokens, .heads = 2, .kv_heads = 1, .head_dim = 8, .chunk = c.chunk,
                            .offload = true, .host_carry = c.host_carry};
    const std::vector<inputs> in{random_inputs(s, 41), random_inputs(s, 43)};
    const layered_run across = run_layers(s, in, c.run, true);
    const layered_run per_call = run_layers(s, in, c.run, false);
    for (std::size_t l = 0; l < in.size(); ++l) {
      CAPTURE(l);
      CHECK(across.results[l].o == per_call.results[l].o);
      CHECK(across.results[l].lse == per_call.results[l].lse);
      CHECK(across.results[l].dq == per_call.results[l].dq);
      CHECK(across.results[l].dk == per_call.results[l].dk);
      CHECK(across.results[l].dv == per_call.results[l].dv);
      check_against_naive(across.results[l], naive_attention(s, in[l]), 0.0f, 2e-5);
    }
    const call_order order(across), old_order(per_call);
    // (previous call, next call): every pair of consecutive calls whose
    // next call fetches: backwards, and forward runs after the first.
    const std::int64_t runs = (c.tokens + c.run - 1) / c.run;
    std::vector<std::pair<std::string, std::string>> pairs;
    for (std::int64_t j = 1; j < runs; ++j) {
      pairs.push_back({"forward " + std::to_string(j) + " of layer 0", "forward " + std::to_string(j) + " of layer 1"});
    }
    for (std::int64_t j = runs; j-- > 0;) {
      const std::string run = std::to_string(j);
      pairs.push_back({"backward " + run + " of layer 1", "backward " + run + " of layer 0"});
      if (j > 0) pairs.push_back({"backward " + run + " of layer 0", "backward " + std::to_string(j - 1) + " of layer 1"});
    }
    pairs.push_back({"forward " + std::to_string(runs - 1) + " of layer 1",
                     "backward " + std::to_string(runs - 1) + " of layer 1"});
    for (const auto& [previous, next] : pairs) {
      CAPTURE(previous);
      CAPTURE(next);
      const std::string fetch = order.first_fetch(next);
      CHECK(order.waits_for_compute_of(fetch, previous));  // the slot-free dependency
      CHECK_FALSE(order.happens_before(order.last_compute(previous), fetch));
      CHECK_FALSE(order.happens_before(order.last_compute("rest of " + previous), fetch));
      const std::string old_fetch = old_order.first_fetch(next);
      CHECK(old_order.happens_before(old_order.last_compute("rest of " + previous), old_fetch));
    }
  }
}

TEST_CASE("chunked_causal_attention: a call after its shared scratch is gone is an error, and its end touches nothing") {
  // The scratch must outlive the attentions built over it; one that does
  // not is reported at the attention's next call, and destroying the
  // attention afterwards touches nothing of the scratch (AddressSanitizer
  // checks that in the sanitizer build).
  memo::host_backend backend;
  using scratch_type = memo::chunked_attention_scratch<memo::host_backend>;
  for (const bool offload : {false, true}) {
    CAPTURE(offload);
    const attention_shape s{.tokens = 8, .heads = 2, .kv_heads = 1, .head_dim = 4, .chunk = 4, .offload = offload};
    const inputs in = random_inputs(s, 5);
    std::vector<float> o(8 * 2 * 4), lse(2 * 8);
    auto stream = backend.make_stream("compute");
    owned_region device(backend.device_memory(), scratch_type::required_bytes(s));
    owned_region pinned(backend.pinned_memory(), std::max<std::size_t>(attention::required_pinned_bytes(s), 1));
    auto scratch = std::make_unique<scratch_type>(backend, s, device.region);
    attention a(*scratch, pinned.region);
    a.forward_queries(stream, 0, row_view(in.q, 2, 4, 0, 8), row_view(in.k, 1, 4, 0, 8), row_view(in.v, 1, 4, 0, 8),
                      row_view(o, 2, 4, 0, 8), column_view(lse, 2, 8, 0, 8));
    backend.synchronize(stream);
    scratch.reset();
    CHECK_THROWS_WITH_AS(a.forward_queries(stream, 0, row_view(in.q, 2, 4, 0, 8), row_view(in.k, 1, 4, 0, 8),
                                           row_view(in.v, 1, 4, 0, 8), row_view(o, 2, 4, 0, 8),
                                           column_view(lse, 2, 8, 0, 8)),
                         doctest::Contains("chunked_causal_attention::forward: the chunked_attention_scratch this "
                                           "attention was built over was destroyed before it"),
                         memo::error);
    CHECK_THROWS_WITH_AS(a.expect_backward_run(0, 8), doctest::Contains("was destroyed before it"), memo::error);
    a.drain();  // nothing to drain: no use of the scratch
  }
}
