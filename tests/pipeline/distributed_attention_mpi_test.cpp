// Run by mpirun on 2 and 4 processes (tests/pipeline/CMakeLists.txt): each
// process is one rank of distributed attention over MPI_COMM_WORLD and
// checks its own tokens against the fp64 naive attention of the whole
// sequence (every process builds the same inputs from the same seed).
#define DOCTEST_CONFIG_IMPLEMENT
#include "memo/backend/mpi_communicator.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "distributed_attention_support.hpp"

namespace {

// The reference in the rank's local order, as floats' doubles.
std::vector<double> local_reference(const memo::fpdt_layout& layout, int rank, const std::vector<double>& global,
                                    std::int64_t width) {
  std::vector<double> part(static_cast<std::size_t>(layout.local_tokens() * width));
  layout.shuffle<double>(global, rank, part, width);
  return part;
}

}  // namespace

TEST_CASE("distributed_attention over MPI: every rank's outputs equal the single-device attention") {
  memo::mpi_communicator comm;
  const int P = comm.size();
  struct config {
    std::int64_t T, H, K, D, c, chunk;
    bool offload;
  };
  // Heads and K/V heads chosen for P = 2 and P = 4: sharded, GQA, replicated K/V.
  const config configs[] = {{32, 4, 4, 8, 4, 5, false}, {32, 4, 2, 8, 2, 6, true}, {64, 8, 1, 16, 8, 16, false}};
  for (const auto& c : configs) {
    CAPTURE(c.K);
    const memo::attention_shape s{.tokens = c.T, .heads = c.H, .kv_heads = c.K, .head_dim = c.D, .chunk = c.chunk};
    const auto in = memo_test::random_inputs(s, 101 + static_cast<unsigned>(c.T + c.K));
    const auto want = memo_test::naive_attention(s, in);
    memo::host_backend backend(memo_test::one_thread());
    const auto got = memo_test::distributed_rank(comm, backend,
                                                 {.tokens = c.T,
                                                  .heads = c.H,
                                                  .kv_heads = c.K,
                                                  .head_dim = c.D,
                                                  .layout_chunk = c.c,
                                                  .attention_chunk = c.chunk,
                                                  .offload = c.offload},
                                                 in);
    const int r = comm.rank();
    CHECK(memo_test::worst_relative_error(got.o, local_reference(got.layout, r, want.o, c.H * c.D)) < 2e-5);
    CHECK(memo_test::worst_relative_error(got.dq, local_reference(got.layout, r, want.dq, c.H * c.D)) < 2e-5);
    CHECK(memo_test::worst_relative_error(got.dk, local_reference(got.layout, r, want.dk, c.K * c.D)) < 2e-5);
    CHECK(memo_test::worst_relative_error(got.dv, local_reference(got.layout, r, want.dv, c.K * c.D)) < 2e-5);
  }
  (void)P;
}

int main(int argc, char** argv) {
  try {
    memo::mpi_environment mpi(&argc, &argv);
    doctest::Context context(argc, argv);
    const int failed = context.run();
    MPI_Barrier(MPI_COMM_WORLD);
    return failed != 0 ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "distributed_attention_mpi_test: %s\n", e.what());
    return 1;
  }
}
