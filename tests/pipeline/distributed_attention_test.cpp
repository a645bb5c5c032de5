#include "memo/pipeline/distributed_attention.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "distributed_attention_support.hpp"
#include "memo/backend/host_backend.hpp"
#include "memo/backend/thread_communicator.hpp"

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
