#include "memo/pipeline/distributed_attention.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "distributed_attention_support.hpp"
#include "memo/backend/host_backend.hpp"
#include "memo/backend/thread_communicator.hpp"
#include "memo/backend/timed_communicator.hpp"

namespace {

using memo::tensor_view;

struct global_result {
  std::vector<float> o, dq, dk, dv;
};

// P ranks as threads, each running distributed_rank (the support header)
// and writing its tokens of the outputs into the global arrays.
global_result run_distributed(int P, const memo::distributed_attention_shape& shape, const memo_test::inputs& in,
                              std::vector<std::string>& errors) {
  global_result out{std::vector<float>(in.q.size()), std::vector<float>(in.q.size()), std::vector<float>(in.k.size()),
                    std::vector<float>(in.k.size())};
  auto comms = memo::thread_communicator::create_group(P);
  errors.assign(static_cast<std::size_t>(P), "");
  std::vector<std::thread> threads;
  for (int r = 0; r < P; ++r) {
    threads.emplace_back([&, r, comm = std::move(comms[static_cast<std::size_t>(r)])]() mutable {
      try {
        memo::host_backend backend(memo_test::one_thread());
        const auto local = memo_test::distributed_rank(comm, backend, shape, in);
        const std::int64_t H = shape.heads, K = shape.kv_heads, D = shape.head_dim;
        local.layout.unshuffle<float>(local.o, r, out.o, H * D);
        local.layout.unshuffle<float>(local.dq, r, out.dq, H * D);
        local.layout.unshuffle<float>(local.dk, r, out.dk, K * D);
        local.layout.unshuffle<float>(local.dv, r, out.dv, K * D);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

void check_close(const std::vector<float>& got, const std::vector<double>& want, const char* what) {
  CAPTURE(what);
  CHECK(memo_test::worst_relative_error(got, want) < 2e-5);
}

}  // namespace

TEST_CASE("distributed_attention: P ranks compute the single-device attention, forward and backward") {
  struct config {
    int P;
    std::int64_t T, H, K, D, c, chunk;
    bool offload;
  };
  const config configs[] = {
      {1, 24, 2, 2, 8, 4, 5, false},    // one rank: the plain chunked attention
      {2, 24, 2, 2, 8, 4, 5, false},    // chunk not dividing the sequence
      {2, 32, 4, 2, 16, 8, 8, true},    // GQA, K/V heads sharded, host K/V
      {4, 32, 4, 4, 8, 2, 3, false},    // u = 4 chunks per rank
      {4, 32, 8, 2, 8, 4, 7, true},     // fewer K/V heads than ranks: replicated
      {4, 48, 4, 1, 8, 3, 16, false},   // one K/V head for four ranks
      {2, 16, 2, 1, 64, 8, 16, false},  // head dim 64
  };
  for (const auto& c : configs) {
    CAPTURE(c.P);
    CAPTURE(c.T);
    CAPTURE(c.H);
    CAPTURE(c.K);
    CAPTURE(c.chunk);
    const memo::attention_shape s{.tokens = c.T, .heads = c.H, .kv_heads = c.K, .head_dim = c.D, .chunk = c.chunk};
    const auto in = memo_test::random_inputs(s, 11 + static_cast<unsigned>(c.P * 7 + c.T));
    const auto want = memo_test::naive_attention(s, in);
    std::vector<std::string> errors;
    const auto got = run_distributed(c.P,
                                     {.tokens = c.T,
                                      .heads = c.H,
                                      .kv_heads = c.K,
                                      .head_dim = c.D,
                                      .layout_chunk = c.c,
                                      .attention_chunk = c.chunk,
                                      .offload = c.offload},
                                     in, errors);
    for (const auto& e : errors) CHECK(e == "");
    check_close(got.o, want.o, "o");
    check_close(got.dq, want.dq, "dq");
    check_close(got.dk, want.dk, "dk");
    check_close(got.dv, want.dv, "dv");
  }
}

TEST_CASE("distributed_attention: shapes that do not split over the ranks fail on every rank with the numbers") {
  const memo::attention_shape s{.tokens = 16, .heads = 3, .kv_heads = 3, .head_dim = 4, .chunk = 4};
  const auto in = memo_test::random_inputs(s, 5);
  std::vector<std::string> errors;
  (void)run_distributed(
      2, {.tokens = 16, .heads = 3, .kv_heads = 3, .head_dim = 4, .layout_chunk = 4, .attention_chunk = 4}, in, errors);
  for (const auto& e : errors) CHECK(e.find("3 heads are not divisible by 2 ranks") != std::string::npos);
  const memo::attention_shape s2{.tokens = 20, .heads = 2, .kv_heads = 2, .head_dim = 4, .chunk = 4};
  const auto in2 = memo_test::random_inputs(s2, 6);
  (void)run_distributed(
      2, {.tokens = 20, .heads = 2, .kv_heads = 2, .head_dim = 4, .layout_chunk = 4, .attention_chunk = 4}, in2,
      errors);
  for (const auto& e : errors)
    CHECK(e.find("20 tokens is not a multiple of ranks x chunk = 2 x 4") != std::string::npos);
}

TEST_CASE("distributed_attention: runs forward in order and backward in reverse equal the single-device attention") {
  struct config {
    int P;
    std::int64_t T, H, K, D, c, chunk;
    std::vector<std::int64_t> runs;  // local chunk boundaries of the runs
    bool keep_state, offload;
    bool run_lse;  // each run's log-sum-exp in its own [H / P, run tokens] buffer
    bool whole_capacity = false;  // max_run_tokens 0 (the sequence), not the longest run
  };
  const std::vector<config> configs = {
      {2, 32, 2, 2, 8, 4, 8, {0, 1, 3, 4}, true, false, false},  // three runs of 1, 2, 1 chunk groups
      {2, 32, 2, 2, 8, 4, 8, {0, 1, 3, 4}, true, false, true},   // the same, a log-sum-exp per run
      {4, 32, 8, 2, 8, 2, 4, {0, 2, 4}, true, false, false},     // GQA, K/V heads replicated
      {4, 32, 8, 2, 8, 2, 4, {0, 2, 4}, true, false, true},
      {1, 24, 2, 1, 8, 4, 2, {0, 2, 3, 6}, true, false, false},  // one rank: runs on the plain attention
      {2, 32, 4, 4, 8, 4, 4, {0, 4}, false, true, false},        // one run, host Q/K/V, shared state
      {2, 32, 4, 2, 8, 4, 4, {0, 1, 4}, true, true, true},       // two runs, host Q/K/V and dK/dV carry, GQA
      {2, 32, 4, 2, 8, 4, 4, {0, 1, 4}, true, true, true, true}, // the same, dK/dV carried in the kept state
      {2, 32, 4, 4, 8, 4, 4, {0, 1, 3, 4}, false, true, false},  // three runs, host Q/K/V and dK/dV carry
      {4, 32, 8, 2, 8, 2, 4, {0, 1, 2, 4}, false, true, true},   // the same, K/V heads replicated
      {2, 32, 4, 4, 8, 4, 4, {0, 4}, false, false, false},       // one run, K/V re-sent in the backward
  };
  for (const auto& c : configs) {
    CAPTURE(c.P);
    CAPTURE(c.T);
    CAPTURE(c.keep_state);
    CAPTURE(c.offload);
    CAPTURE(c.run_lse);
    CAPTURE(c.whole_capacity);
    const memo::attention_shape s{.tokens = c.T, .heads = c.H, .kv_heads = c.K, .head_dim = c.D, .chunk = c.chunk};
    const auto in = memo_test::random_inputs(s, 17 + static_cast<unsigned>(c.P + c.T));
    const auto want = memo_test::naive_attention(s, in);
    std::int64_t longest = 0;  // global tokens of the longest run
    for (std::size_t j = 0; j + 1 < c.runs.size(); ++j) longest = std::max(longest, (c.runs[j + 1] - c.runs[j]) * c.c * c.P);
    const memo::distributed_attention_shape shape{.tokens = c.T,
                                                  .heads = c.H,
                                                  .kv_heads = c.K,
                                                  .head_dim = c.D,
                                                  .layout_chunk = c.c,
                                                  .attention_chunk = c.chunk,
                                                  .offload = c.offload,
                                                  .max_run_tokens = c.whole_capacity ? 0 : longest,
                                                  .keep_state = c.keep_state};
    global_result got{std::vector<float>(in.q.size()), std::vector<float>(in.q.size()),
                      std::vector<float>(in.k.size()), std::vector<float>(in.k.size())};
    auto comms = memo::thread_communicator::create_group(c.P);
    std::vector<std::string> errors(static_cast<std::size_t>(c.P));
    std::vector<std::thread> threads;
    for (int r = 0; r < c.P; ++r) {
      threads.emplace_back([&, r, comm = std::move(comms[static_cast<std::size_t>(r)])]() mutable {
        try {
          memo::host_backend backend(memo_test::one_thread());
          auto stream = backend.make_stream();
          memo::distributed_attention<memo::thread_communicator, memo::host_backend> attention(backend, comm, shape);
          const memo::fpdt_layout& layout = attention.layout();
          const std::int64_t H = c.H, K = c.K, D = c.D;
          memo_test::rank_tensors x(layout, r, in, H, K, D);
          auto &q = x.q, &k = x.k, &v = x.v, &dout = x.dout, &o = x.o, &dq = x.dq, &dk = x.dk, &dv = x.dv;
          std::vector<float> lse(static_cast<std::size_t>(attention.local_heads() * c.T));
          auto rows = [&](auto& values, std::int64_t heads, std::int64_t a, std::int64_t n) {
            using E = std::remove_reference_t<decltype(values[0])>;
            return tensor_view<E, 3>(values.data() + a * heads * D, {n, heads, D}, {heads * D, D, 1});
          };
          // The whole sequence's log-sum-exp, or run j's columns at offset
          // a P (its global tokens) of the same buffer, viewed alone.
          auto lse_view = [&](std::int64_t a, std::int64_t n) {
            const std::int64_t Hr = attention.local_heads();
            if (!c.run_lse) return tensor_view<float, 2>::contiguous(lse.data(), {Hr, c.T});
            return tensor_view<float, 2>::contiguous(lse.data() + Hr * a * c.P, {Hr, n * c.P});
          };
          for (std::size_t j = 0; j + 1 < c.runs.size(); ++j) {
            const std::int64_t a = c.runs[j] * c.c, n = (c.runs[j + 1] - c.runs[j]) * c.c;
            attention.forward_queries(stream, {a, a + n}, rows(std::as_const(q), H, a, n),
                                      rows(std::as_const(k), K, a, n), rows(std::as_const(v), K, a, n),
                                      rows(o, H, a, n), lse_view(a, n));
          }
          if (c.offload) {
            // The backward reads Q, K and V from the host store only: any
            // read of the caller's would spread NaN into every gradient.
            backend.synchronize(stream);
            for (auto* t : {&q, &k, &v}) std::fill(t->begin(), t->end(), std::numeric_limits<float>::quiet_NaN());
          }
          for (std::size_t j = c.runs.size() - 1; j-- > 0;) {
            const std::int64_t a = c.runs[j] * c.c, n = (c.runs[j + 1] - c.runs[j]) * c.c;
            attention.backward_queries(stream, {a, a + n}, rows(std::as_const(q), H, a, n),
                                       rows(std::as_const(k), K, a, n), rows(std::as_const(v), K, a, n),
                                       rows(std::as_const(o), H, a, n), rows(std::as_const(dout), H, a, n),
                                       lse_view(a, n), rows(dq, H, a, n), rows(dk, K, a, n), rows(dv, K, a, n));
          }
          backend.synchronize(stream);
          layout.unshuffle<float>(o, r, got.o, H * D);
          layout.unshuffle<float>(dq, r, got.dq, H * D);
          layout.unshuffle<float>(dk, r, got.dk, K * D);
          layout.unshuffle<float>(dv, r, got.dv, K * D);
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(r)] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (const auto& e : errors) CHECK(e == "");
    check_close(got.o, want.o, "o");
    check_close(got.dq, want.dq, "dq");
    check_close(got.dk, want.dk, "dk");
    check_close(got.dv, want.dv, "dv");
  }
}

TEST_CASE("distributed_attention: with host offload the backward sends no Q, K or V through the all-to-all") {
  // Per rank, the backward's payload without offload minus with offload is
  // exactly what the re-sends carry: Q ([L, H, D]) with K/V kept in the
  // state, Q, K and V ([L, H + 2 K, D]) without. L = local tokens.
  const int P = 2;
  const std::int64_t T = 32, H = 4, K = 2, D = 8, L = T / P;
  const memo::attention_shape s{.tokens = T, .heads = H, .kv_heads = K, .head_dim = D, .chunk = 4};
  const auto in = memo_test::random_inputs(s, 29);
  struct variant {
    bool offload, keep_state;
  };
  auto backward_bytes = [&](variant w) {
    const memo::distributed_attention_shape shape{.tokens = T,
                                                  .heads = H,
                                                  .kv_heads = K,
                                                  .head_dim = D,
                                                  .layout_chunk = 4,
                                                  .attention_chunk = 4,
                                                  .offload = w.offload,
                                                  .keep_state = w.keep_state};
    using timed = memo::timed_communicator<memo::thread_communicator>;
    auto comms = memo::thread_communicator::create_group(P);
    std::vector<std::uint64_t> bytes(P, 0);
    std::vector<std::string> errors(P);
    std::vector<std::thread> threads;
    for (int r = 0; r < P; ++r) {
      threads.emplace_back([&, r, comm = timed(std::move(comms[static_cast<std::size_t>(r)]))]() mutable {
        try {
          memo::host_backend backend(memo_test::one_thread());
          auto stream = backend.make_stream();
          memo::distributed_attention<timed, memo::host_backend> attention(backend, comm, shape);
          const memo::fpdt_layout& layout = attention.layout();
          memo_test::rank_tensors x(layout, r, in, H, K, D);
          auto &q = x.q, &k = x.k, &v = x.v, &dout = x.dout, &o = x.o, &dq = x.dq, &dk = x.dk, &dv = x.dv;
          std::vector<float> lse(static_cast<std::size_t>(attention.local_heads() * T));
          auto all = [&](auto& values, std::int64_t heads) {
            using E = std::remove_reference_t<decltype(values[0])>;
            return tensor_view<E, 3>::contiguous(values.data(), {L, heads, D});
          };
          const auto lse_view = tensor_view<float, 2>::contiguous(lse.data(), {attention.local_heads(), T});
          attention.forward_queries(stream, {0, L}, all(std::as_const(q), H), all(std::as_const(k), K),
                                    all(std::as_const(v), K), all(o, H), lse_view);
          backend.synchronize(stream);
          comm.reset_totals();
          attention.backward_queries(stream, {0, L}, all(std::as_const(q), H), all(std::as_const(k), K),
                                     all(std::as_const(v), K), all(std::as_const(o), H), all(std::as_const(dout), H),
                                     lse_view, all(dq, H), all(dk, K), all(dv, K));
          backend.synchronize(stream);
          bytes[static_cast<std::size_t>(r)] = comm.totals().payload_bytes;
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(r)] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (const auto& e : errors) CHECK(e == "");
    return bytes;
  };
  const std::uint64_t f = sizeof(float);
  const auto offloaded = backward_bytes({true, false});
  const auto kept = backward_bytes({false, true});
  const auto resent = backward_bytes({false, false});
  for (int r = 0; r < P; ++r) {
    CAPTURE(r);
    const auto i = static_cast<std::size_t>(r);
    CHECK(offloaded[i] > 0);
    CHECK(kept[i] - offloaded[i] == static_cast<std::uint64_t>(L * H * D) * f);
    CHECK(resent[i] - offloaded[i] == static_cast<std::uint64_t>(L * (H + 2 * K) * D) * f);
  }
}

TEST_CASE("distributed_attention: with offload the device state is one run's, not the sequence's") {
  // Without offload the state holds the sharded K, V, dK, dV of every
  // token; with offload the host keeps earlier runs' K/V and their dK/dV
  // carry, so the state shrinks with the longest run.
  const std::int64_t T = 4096, D = 64, run = 512;
  memo::distributed_attention_shape s{.tokens = T,
                                      .heads = 8,
                                      .kv_heads = 4,
                                      .head_dim = D,
                                      .layout_chunk = 64,
                                      .attention_chunk = 128,
                                      .max_run_tokens = run,
                                      .keep_state = true};
  using attention = memo::distributed_attention<memo::thread_communicator, memo::host_backend>;
  const std::size_t kept = attention::required_bytes(s, 2).state;
  s.offload = true;
  const std::size_t offloaded = attention::required_bytes(s, 2).state;
  const std::size_t per_token = 4 * 2 * D * sizeof(float);  // K, V, dK, dV of 2 K/V heads per rank
  CHECK(kept >= T * per_token);
  CHECK(offloaded >= run * per_token);
  CHECK(offloaded < run * per_token + 4 * memo::default_alignment_bytes);
  // The host holds what left: Q, K, V and the dK/dV carry of every token.
  const std::size_t pinned = attention::required_bytes(s, 2).attention_pinned;
  CHECK(pinned >= T * (4 + 4 * 2) * D * sizeof(float));
}

TEST_CASE("distributed_attention: with the host carry a backward run out of order fails before any collective") {
  // One rank through a timed communicator: the order is the local
  // attention's to judge, but the distributed attention asks it before its
  // first all-to-all, so a wrong run costs no collective (on P ranks, none
  // that a peer could be left waiting in).
  using timed = memo::timed_communicator<memo::thread_communicator>;
  auto comms = memo::thread_communicator::create_group(1);
  timed comm(std::move(comms[0]));
  memo::host_backend backend(memo_test::one_thread());
  auto stream = backend.make_stream();
  memo::distributed_attention<timed, memo::host_backend> attention(
      backend, comm,
      {.tokens = 32, .heads = 2, .kv_heads = 2, .head_dim = 4, .layout_chunk = 8, .attention_chunk = 8,
       .offload = true, .max_run_tokens = 16});
  std::vector<float> x(32 * 2 * 4, 0.5f), g(32 * 2 * 4), lse(2 * 32);
  auto rows = [](auto& v, std::int64_t a, std::int64_t n) {
    using E = std::remove_reference_t<decltype(v[0])>;
    return tensor_view<E, 3>(v.data() + a * 8, {n, 2, 4}, {8, 4, 1});
  };
  const auto lse_view = tensor_view<float, 2>::contiguous(lse.data(), {2, 32});
  for (const std::int64_t a : {0, 16}) {
    attention.forward_queries(stream, {a, a + 16}, rows(std::as_const(x), a, 16), rows(std::as_const(x), a, 16),
                              rows(std::as_const(x), a, 16), rows(g, a, 16), lse_view);
  }
  backend.synchronize(stream);
  comm.reset_totals();
  const auto gx = rows(std::as_const(g), 0, 16);
  CHECK_THROWS_WITH_AS(attention.backward_queries(stream, {0, 16}, gx, gx, gx, gx, gx, lse_view, rows(g, 0, 16),
                                                  rows(g, 0, 16), rows(g, 0, 16)),
                       doctest::Contains("must end at chunk 4, the end of the stored forward"), memo::error);
  CHECK(comm.totals().calls == 0);
  backend.synchronize(stream);
}

TEST_CASE("distributed_attention: a second run without keep_state, or a run off the attention's chunks, is an error") {
  auto comms = memo::thread_communicator::create_group(1);
  memo::host_backend backend(memo_test::one_thread());
  auto stream = backend.make_stream();
  std::vector<float> x(32 * 2 * 4), lse(2 * 32);
  const auto lse_view = tensor_view<float, 2>::contiguous(lse.data(), {2, 32});
  auto rows = [&](std::int64_t n) { return tensor_view<float, 3>::contiguous(x.data(), {n, 2, 4}); };
  memo::distributed_attention<memo::thread_communicator, memo::host_backend> plain(
      backend, comms[0], {.tokens = 32, .heads = 2, .kv_heads = 2, .head_dim = 4, .layout_chunk = 8, .attention_chunk = 8});
  CHECK_THROWS_WITH_AS(plain.forward_queries(stream, {8, 16}, rows(8), rows(8), rows(8), rows(8), lse_view),
                       doctest::Contains("needs keep_state, or offload with max_run_tokens"), memo::error);
  memo::distributed_attention<memo::thread_communicator, memo::host_backend> odd(
      backend, comms[0],
      {.tokens = 32, .heads = 2, .kv_heads = 2, .head_dim = 4, .layout_chunk = 8, .attention_chunk = 16,
       .keep_state = true});
  CHECK_THROWS_WITH_AS(odd.forward_queries(stream, {8, 16}, rows(8), rows(8), rows(8), rows(8), lse_view),
                       doctest::Contains("does not start at a chunk of the attention (16 tokens)"), memo::error);
  CHECK_THROWS_WITH_AS(odd.forward_queries(stream, {4, 12}, rows(8), rows(8), rows(8), rows(8), lse_view),
                       doctest::Contains("must be whole chunks of 8 rows"), memo::error);
  const auto short_lse = tensor_view<float, 2>::contiguous(lse.data(), {2, 12});
  CHECK_THROWS_WITH_AS(odd.forward_queries(stream, {0, 16}, rows(16), rows(16), rows(16), rows(16), short_lse),
                       doctest::Contains("or a [2, 16] view of the run's tokens"), memo::error);
  backend.synchronize(stream);
}

TEST_CASE("distributed_attention: backward() needs forward() just before it, not a run call in between") {
  // A run call overwrites the sharded Q, O and log-sum-exp the
  // whole-sequence forward() keeps for backward(): its gradients would be
  // silently wrong, so backward() refuses.
  auto comms = memo::thread_communicator::create_group(1);
  memo::host_backend backend(memo_test::one_thread());
  auto stream = backend.make_stream();
  std::vector<float> x(32 * 2 * 4, 0.25f), out(32 * 2 * 4), lse(2 * 32);
  const auto lse_view = tensor_view<float, 2>::contiguous(lse.data(), {2, 32});
  auto in = [&](std::int64_t n) { return tensor_view<const float, 3>::contiguous(x.data(), {n, 2, 4}); };
  auto to = [&](std::int64_t n) { return tensor_view<float, 3>::contiguous(out.data(), {n, 2, 4}); };
  memo::distributed_attention<memo::thread_communicator, memo::host_backend> attention(
      backend, comms[0],
      {.tokens = 32, .heads = 2, .kv_heads = 2, .head_dim = 4, .layout_chunk = 8, .attention_chunk = 8,
       .keep_state = true});
  std::vector<float> dq(32 * 2 * 4), dk(32 * 2 * 4), dv(32 * 2 * 4);
  auto grad = [](std::vector<float>& g) { return tensor_view<float, 3>::contiguous(g.data(), {32, 2, 4}); };
  CHECK_THROWS_WITH_AS(attention.backward(stream, in(32), grad(dq), grad(dk), grad(dv)),
                       doctest::Contains("backward() needs the whole-sequence forward() just before it"), memo::error);
  attention.forward(stream, in(32), in(32), in(32), to(32));
  attention.forward_queries(stream, {0, 8}, in(8), in(8), in(8), to(8), lse_view);
  CHECK_THROWS_WITH_AS(attention.backward(stream, in(32), grad(dq), grad(dk), grad(dv)),
                       doctest::Contains("a run call since, which overwrote what it saved"), memo::error);
  // forward() again: backward() runs.
  attention.forward(stream, in(32), in(32), in(32), to(32));
  attention.backward(stream, in(32), grad(dq), grad(dk), grad(dv));
  backend.synchronize(stream);
}

TEST_CASE("distributed_attention: a shared attention scratch of another shape is an error naming both") {
  memo::host_backend backend(memo_test::one_thread());
  auto comms = memo::thread_communicator::create_group(1);
  using attention = memo::distributed_attention<memo::thread_communicator, memo::host_backend>;
  const memo::distributed_attention_shape s{.tokens = 64, .heads = 4, .kv_heads = 4, .head_dim = 8,
                                            .layout_chunk = 8, .attention_chunk = 16, .offload = true};
  const memo::distributed_attention_bytes bytes = attention::required_bytes(s, 1);
  auto& device = backend.device_memory();
  auto& pinned = backend.pinned_memory();
  auto take = [](auto& resource, std::size_t n) {
    return memo::memory_region{static_cast<std::byte*>(resource.allocate(std::max<std::size_t>(n, 1), 256)), n};
  };
  const memo::memory_region workspace = take(device, bytes.workspace), state = take(device, bytes.state),
                            store = take(pinned, bytes.attention_pinned);
  memo::attention_shape other = attention::local_attention_shape(s, 1);
  CHECK(other.chunk == 16);
  other.chunk = 8;
  const memo::memory_region scratch_region = take(device, memo::chunked_attention_scratch<memo::host_backend>::required_bytes(other));
  {
    memo::chunked_attention_scratch<memo::host_backend> wrong(backend, other, scratch_region);
    CHECK_THROWS_WITH_AS(attention(backend, comms[0], s, workspace, state, wrong, store),
                         doctest::Contains("the attention scratch is for 64 tokens, 4 heads, 4 kv heads, chunk 8; this "
                                           "rank's attention needs local_attention_shape(shape, 1): 64 tokens, 4 heads, "
                                           "4 kv heads, chunk 16"),
                         memo::error);
  }
  {
    // The fields the short form leaves out are compared too, and named.
    memo::attention_shape deeper = attention::local_attention_shape(s, 1);
    deeper.head_dim = 4;
    const memo::memory_region deeper_region = take(device, memo::chunked_attention_scratch<memo::host_backend>::required_bytes(deeper));
    memo::chunked_attention_scratch<memo::host_backend> wrong(backend, deeper, deeper_region);
    CHECK_THROWS_WITH_AS(attention(backend, comms[0], s, workspace, state, wrong, store),
                         doctest::Contains("in full: 64 tokens, 4 heads, 4 kv heads, chunk 16 (head_dim 4; offload on, "
                                           "keep_queries off, host_carry off) against 64 tokens, 4 heads, 4 kv heads, "
                                           "chunk 16 (head_dim 8; offload on, keep_queries off, host_carry off)"),
                         memo::error);
  }
  const memo::memory_region right_region =
      take(device, memo::chunked_attention_scratch<memo::host_backend>::required_bytes(attention::local_attention_shape(s, 1)));
  {
    memo::chunked_attention_scratch<memo::host_backend> right(backend, attention::local_attention_shape(s, 1), right_region);
    CHECK_NOTHROW(attention(backend, comms[0], s, workspace, state, right, store));
  }
  for (const auto& r : {workspace, state, scratch_region, right_region}) device.deallocate(r.data, std::max<std::size_t>(r.bytes, 1), 256);
  pinned.deallocate(store.data, std::max<std::size_t>(store.bytes, 1), 256);
}
