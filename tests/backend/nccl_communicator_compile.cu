// Compile-only: nccl_communicator, its schedule binding, and the code
// built on communicators must build with nvcc (no GPU is needed to compile;
// running needs GPUs and mpirun).
#include "memo/backend/nccl_communicator.hpp"
#include "memo/model/gpt2_parallel_model.hpp"
#include "memo/pipeline/distributed_attention.hpp"
#include "memo/schedule/stream_schedule.hpp"

// The distributed attention and the parallel GPT-2 over NCCL on the CUDA
// backend: every member compiles (the host tests run them over threads
// and MPI).
template class memo::distributed_attention<memo::nccl_communicator, memo::cuda_backend>;
template class memo::gpt2_parallel_model<memo::nccl_communicator, memo::cuda_backend>;
// Instantiates every operation and the schedule binding.
void issue_all(memo::cuda_backend& backend, memo::nccl_communicator& comm, memo::cuda_backend::stream& s,
               std::span<const float> a, std::span<float> b, std::span<const std::int32_t> ia, std::span<std::int32_t> ib) {
  comm.all_reduce(backend, s, a, b);
  comm.all_reduce(backend, s, ia, ib);
  comm.all_gather(backend, s, a, b);
  comm.reduce_scatter(backend, s, a, b);
  comm.all_to_all(backend, s, a, b);
  comm.send(backend, s, a, 1);
  comm.recv(backend, s, b, 1);
  comm.send_recv(backend, s, a, 1, b, 1);
  comm.barrier(backend, s);
  auto group = comm.split(0, 0);
  memo::stream_schedule schedule;
  schedule.add_stream("comm");
  memo::add_collective<memo::nccl_communicator, float>(schedule, "ar", "comm", group, memo::comm_op::all_reduce, a, b);
}
