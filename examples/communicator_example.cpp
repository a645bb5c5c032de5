// communicator_example: the Communicator concept in one page.
//
// Four ranks, played by four threads, each with its own host backend (its
// "GPU") and its own thread_communicator of one group:
//
//   1. sequence parallelism, Ulysses-style (as FPDT uses it): every rank
//      holds a slice of the sequence for all heads, [tokens / 4, heads];
//      one all_to_all gives every rank the whole sequence for its head,
//      [tokens, 1], so attention can run over all tokens;
//   2. data-parallel gradient sum: all_reduce of a gradient buffer;
//   3. groups: split into two sequence-parallel groups of two ranks
//      (color rank / 2) and all_gather inside each;
//   4. the starting weights: rank 0's (initialised, or read from a
//      checkpoint, on that rank alone) broadcast to every rank.
//
// Every collective is issued on a stream of the rank's backend and ordered
// with the rest of the stream's work, exactly like a copy or a kernel. The
// same function runs over mpi_communicator (processes) or
// nccl_communicator (GPUs); only the communicator type changes.
//
// Usage: communicator_example [--json]
#include <memo/backend/host_backend.hpp>
#include <memo/backend/thread_communicator.hpp>
#include <memo/core/command_line.hpp>
#include <memo/core/json.hpp>

#include <cstdio>
#include <span>
#include <string>
#include <vector>

namespace {

constexpr int ranks = 4;
constexpr int heads = 4;          // one head per rank after the all_to_all
constexpr int local_tokens = 3;   // tokens per rank before it
constexpr int tokens = local_tokens * ranks;

struct rank_result {
  bool all_to_all_ok = false;
  bool all_reduce_ok = false;
  bool group_ok = false;
  bool broadcast_ok = false;
};

// The value of (token, head) in the full activation.
float activation(int token, int head) { return float(token * 10 + head); }

template <memo::Communicator C>
rank_result run_rank(C& comm, typename C::backend_type& backend) {
  rank_result result;
  const int me = comm.rank();
  auto stream = backend.make_stream("communication");

  // 1. send block h = my tokens for head h: [heads][local_tokens]
  std::vector<float> slice(heads * local_tokens);
  for (int h = 0; h < heads; ++h) {
    for (int t = 0; t < local_tokens; ++t) slice[h * local_tokens + t] = activation(me * local_tokens + t, h);
  }
  std::vector<float> my_head(tokens);  // [tokens] of head `me`
  comm.all_to_all(backend, stream, std::span<const float>(slice), std::span<float>(my_head));

  // 2. every rank's gradient is (rank + 1) everywhere; the sum is 1 + 2 + 3 + 4.
  std::vector<float> gradient(1000, float(me + 1));
  comm.all_reduce(backend, stream, std::span<const float>(gradient), std::span<float>(gradient));
  backend.synchronize(stream);

  result.all_to_all_ok = true;
  for (int t = 0; t < tokens; ++t) result.all_to_all_ok &= my_head[t] == activation(t, me);
  result.all_reduce_ok = true;
  for (const float g : gradient) result.all_reduce_ok &= g == 10.0f;

  // 3. groups {0, 1} and {2, 3}: gather the members' ranks.
  C group = comm.split(me / 2, me);
  const std::vector<int> mine = {me};
  std::vector<int> members(2);
  group.all_gather(backend, stream, std::span<const int>(mine), std::span<int>(members));
  backend.synchronize(stream);
  result.group_ok = group.size() == 2 && members[0] == (me / 2) * 2 && members[1] == (me / 2) * 2 + 1;

  // 4. rank 0's weights everywhere: the others' buffers are overwritten.
  std::vector<float> weights(64, me == 0 ? 0.5f : -1.0f);
  comm.broadcast(backend, stream, std::span<float>(weights), 0);
  backend.synchronize(stream);
  result.broadcast_ok = true;
  for (const float w : weights) result.broadcast_ok &= w == 0.5f;
  return result;
}

}  // namespace

constexpr const char* usage = "usage: communicator_example [--json]\n";

int example_main(int argc, char** argv) {
  const bool json = memo::command_arguments(argc, argv).only("--json");
  std::vector<rank_result> results(ranks);
  // A rank that throws fails the others' collectives; every failure is thrown here.
  memo::run_thread_group(ranks, [&](memo::thread_communicator& comm) {
    memo::host_backend::options options;
    options.compute_threads = 1;
    memo::host_backend backend(options);
    results[static_cast<std::size_t>(comm.rank())] = run_rank(comm, backend);
  });

  bool ok = true;
  for (const rank_result& r : results) ok &= r.all_to_all_ok && r.all_reduce_ok && r.group_ok && r.broadcast_ok;
  if (json) {
    memo::json_writer out;
    out.begin_object().field("ranks", ranks).field("ok", ok);
    out.end_object();
    std::printf("%s\n", out.str().c_str());
  } else {
    for (int r = 0; r < ranks; ++r) {
      const rank_result& result = results[static_cast<std::size_t>(r)];
      std::printf("rank %d  all_to_all %-4s  all_reduce %-4s  split+all_gather %-4s  broadcast %s\n", r,
                  result.all_to_all_ok ? "ok" : "BAD", result.all_reduce_ok ? "ok" : "BAD",
                  result.group_ok ? "ok" : "BAD", result.broadcast_ok ? "ok" : "BAD");
    }
  }
  if (!ok) std::fprintf(stderr, "communicator_example: a collective gave a wrong result (BAD above)\n");
  return ok ? 0 : 1;
}

int main(int argc, char** argv) {
  return memo::run_command("communicator_example", usage, [&] { return example_main(argc, argv); });
}
