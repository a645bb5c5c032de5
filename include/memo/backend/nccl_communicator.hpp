// memo/backend/nccl_communicator.hpp
//
// Ranks as GPUs, over the CUDA backend, through NCCL: the communicator the
// FPDT/SPPO sequence-parallel all-to-alls and the pipeline's send/recv use
// on real hardware. Include only with the `memo::nccl` and `memo::mpi`
// components (one process per GPU, started by mpirun).
//
// - The NCCL unique id is made on rank 0 of an MPI communicator and
//   broadcast over it, then every rank joins with ncclCommInitRank on the
//   backend's device.
// - Every call is enqueued by NCCL on the stream's cudaStream_t when it is
//   issued (cuda_backend::enqueue runs a stream-taking callable at once), so
//   it is ordered with the stream's other work and with other streams
//   through events, as any kernel. all_to_all, send_recv are NCCL groups of
//   point-to-point calls; a barrier is an all-reduce of one int on a
//   4-byte device buffer the communicator owns.
// - split is ncclCommSplit (NCCL >= 2.18): a host call, collective over the
//   communicator. A group refuses to issue once its parent is gone.
// - Lifetimes: the NCCL communicator (and the barrier buffer) are released
//   when the last handle lets go; enqueued NCCL work needs no host state.
// - Failures: NCCL and CUDA status codes become memo::error at the call.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <memory>
#include <string>
#include <utility>

#include "memo/backend/communicator.hpp"
#include "memo/backend/cuda_backend.hpp"
#include "memo/backend/cuda_check.hpp"
#include "memo/backend/mpi_check.hpp"
#include "memo/backend/nccl_check.hpp"
#include "memo/core/error.hpp"

namespace memo {

namespace detail {

inline ncclDataType_t nccl_type(comm_type type) { return type == comm_type::float32 ? ncclFloat32 : ncclInt32; }

struct nccl_comm_state {
  ncclComm_t comm = nullptr;
  int device = 0;
  int rank = 0;
  int size = 1;
  std::int32_t* barrier_word = nullptr;  // [1] device int for barrier()

  nccl_comm_state(ncclComm_t owned, int on_device) : comm(owned), device(on_device) {
    check_nccl(ncclCommUserRank(comm, &rank), "ncclCommUserRank");
    check_nccl(ncclCommCount(comm, &size), "ncclCommCount");
    check_cuda(cudaSetDevice(device), "cudaSetDevice");
    check_cuda(cudaMalloc(reinterpret_cast<void**>(&barrier_word), sizeof(std::int32_t)), "cudaMalloc");
  }
  nccl_comm_state(const nccl_comm_state&) = delete;
  nccl_comm_state& operator=(const nccl_comm_state&) = delete;
  ~nccl_comm_state() {
    if (barrier_word != nullptr) (void)cudaFree(barrier_word);
    if (comm != nullptr) (void)ncclCommDestroy(comm);
  }

  void run(const comm_call& call, cudaStream_t stream) const {
    const ncclDataType_t type = nccl_type(call.type);
    const std::size_t bytes = comm_type_bytes(call.type);
    switch (call.op) {
      case comm_op::all_reduce:
        check_nccl(ncclAllReduce(call.send, call.recv, call.count, type, ncclSum, comm, stream), "ncclAllReduce");
        return;
      case comm_op::all_gather:
        check_nccl(ncclAllGather(call.send, call.recv, call.count, type, comm, stream), "ncclAllGather");
        return;
      case comm_op::reduce_scatter:
        check_nccl(ncclReduceScatter(call.send, call.recv, call.count, type, ncclSum, comm, stream), "ncclReduceScatter");
        return;
      case comm_op::all_to_all: {
        check_nccl(ncclGroupStart(), "ncclGroupStart");
        ncclResult_t status = ncclSuccess;
        for (int r = 0; r < size && status == ncclSuccess; ++r) {
          const std::size_t offset = call.count * static_cast<std::size_t>(r) * bytes;
          status = ncclSend(static_cast<const char*>(call.send) + offset, call.count, type, r, comm, stream);
          if (status == ncclSuccess) {
            status = ncclRecv(static_cast<char*>(call.recv) + offset, call.count, type, r, comm, stream);
          }
        }
        const ncclResult_t ended = ncclGroupEnd();
        check_nccl(status, "ncclSend/ncclRecv (all_to_all)");
        check_nccl(ended, "ncclGroupEnd (all_to_all)");
        return;
      }
      case comm_op::send: check_nccl(ncclSend(call.send, call.count, type, call.peer, comm, stream), "ncclSend"); return;
      case comm_op::recv: check_nccl(ncclRecv(call.recv, call.count, type, call.peer, comm, stream), "ncclRecv"); return;
      case comm_op::send_recv: {
        check_nccl(ncclGroupStart(), "ncclGroupStart");
        ncclResult_t status = ncclSend(call.send, call.count, type, call.peer, comm, stream);
        if (status == ncclSuccess) status = ncclRecv(call.recv, call.recv_count, type, call.source, comm, stream);
        const ncclResult_t ended = ncclGroupEnd();
        check_nccl(status, "ncclSend/ncclRecv (send_recv)");
        check_nccl(ended, "ncclGroupEnd (send_recv)");
        return;
      }
      case comm_op::broadcast:
        check_nccl(ncclBroadcast(call.send, call.recv, call.count, type, call.peer, comm, stream), "ncclBroadcast");
        return;
      case comm_op::barrier:
        check_nccl(ncclAllReduce(barrier_word, barrier_word, 1, ncclInt32, ncclSum, comm, stream), "ncclAllReduce (barrier)");
        return;
    }
  }
};

}  // namespace detail

class nccl_communicator : public communicator_ops<nccl_communicator, cuda_backend> {
 public:
  /// Joins every rank of `over` (one process per GPU) on `backend`'s device;
  /// the unique id travels over MPI. MPI must be initialised.
  nccl_communicator(const cuda_backend& backend, MPI_Comm over = MPI_COMM_WORLD) {
    int rank = 0;
    int size = 1;
    check_mpi(MPI_Comm_rank(over, &rank), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(over, &size), "MPI_Comm_size");
    ncclUniqueId id{};
    if (rank == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    check_mpi(MPI_Bcast(&id, static_cast<int>(sizeof(id)), MPI_BYTE, 0, over), "MPI_Bcast (NCCL unique id)");
    check_cuda(cudaSetDevice(backend.device()), "cudaSetDevice");
    ncclComm_t comm = nullptr;
    check_nccl(ncclCommInitRank(&comm, size, id, rank), "ncclCommInitRank");
    try {
      state_ = std::make_shared<detail::nccl_comm_state>(comm, backend.device());
    } catch (...) {
      (void)ncclCommDestroy(comm);
      throw;
    }
  }
  nccl_communicator(nccl_communicator&&) noexcept = default;
  nccl_communicator& operator=(nccl_communicator&&) noexcept = default;
  nccl_communicator(const nccl_communicator&) = delete;
  nccl_communicator& operator=(const nccl_communicator&) = delete;

  [[nodiscard]] int rank() const { return state().rank; }
  [[nodiscard]] int size() const { return state().size; }
  [[nodiscard]] std::string describe() const {
    return "nccl_communicator rank " + std::to_string(rank()) + "/" + std::to_string(size()) + " on device " +
           std::to_string(state().device);
  }
  [[nodiscard]] ncclComm_t native() const { return state().comm; }

  /// ncclCommSplit: a host call, collective over this communicator.
  [[nodiscard]] nccl_communicator split(int color, int key) {
    check_usable();
    expects(color >= 0, [&] { return describe() + ": split color must be >= 0, got " + std::to_string(color); });
    ncclComm_t child = nullptr;
    check_nccl(ncclCommSplit(state().comm, color, key, &child, nullptr), "ncclCommSplit");
    nccl_communicator result;
    try {
      result.state_ = std::make_shared<detail::nccl_comm_state>(child, state().device);
    } catch (...) {
      (void)ncclCommDestroy(child);
      throw;
    }
    result.parent_ = liveness_;
    result.has_parent_ = true;
    return result;
  }

  [[nodiscard]] auto task(const comm_call& call) const {
    (void)state();  // a moved-from communicator is an error here, not a null task
    return [state = state_, call](cudaStream_t stream) { state->run(call, stream); };
  }

  void check_usable() const {
    (void)state();
    expects(!has_parent_ || !parent_.expired(),
            [&] { return describe() + ": this group outlived the communicator it was split from"; });
  }

 private:
  nccl_communicator() = default;
  const detail::nccl_comm_state& state() const {
    expects(state_ != nullptr, "use of a moved-from nccl_communicator");
    return *state_;
  }

  std::shared_ptr<detail::nccl_comm_state> state_;
  detail::comm_liveness liveness_ = detail::make_comm_liveness();
  detail::comm_liveness_watch parent_;
  bool has_parent_ = false;
};

static_assert(CommunicatorOf<nccl_communicator, cuda_backend>,
              "nccl_communicator must satisfy memo::Communicator over cuda_backend");

}  // namespace memo
