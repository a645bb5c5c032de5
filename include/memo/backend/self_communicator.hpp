// memo/backend/self_communicator.hpp
//
// The communicator of a run on one rank: every collective degenerates to a
// copy of send into recv (a sum over one rank is the value itself), done on
// the stream in order with its other work, so code written for N ranks runs
// unchanged on one (DESIGN.md "Backends"). There is no other rank, so
// send/recv are refused when issued (`communicator_ops` checks the peer).
// Over the host backend (a one-rank CUDA run uses nccl_communicator with one
// rank, whose copies NCCL makes on the device).
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <string>

#include "memo/backend/communicator.hpp"
#include "memo/backend/host_backend.hpp"

namespace memo {

class self_communicator : public communicator_ops<self_communicator, host_backend> {
 public:
  self_communicator() = default;
  self_communicator(self_communicator&&) noexcept = default;
  self_communicator& operator=(self_communicator&&) noexcept = default;
  self_communicator(const self_communicator&) = delete;
  self_communicator& operator=(const self_communicator&) = delete;

  [[nodiscard]] int rank() const { return 0; }
  [[nodiscard]] int size() const { return 1; }
  [[nodiscard]] std::string describe() const { return std::string("self_communicator over ") + "host"; }

  /// Any color gives the one-rank group again.
  [[nodiscard]] self_communicator split(int, int) {
    check_usable();
    self_communicator child;
    child.parent_ = liveness_;
    child.has_parent_ = true;
    return child;
  }

  void check_usable() const {
    expects(!has_parent_ || !parent_.expired(),
            [&] { return describe() + ": this group outlived the communicator it was split from"; });
  }

  /// The work an issued call enqueues: the copy of send into recv.
  [[nodiscard]] auto task(const comm_call& call) const {
    return [call](host_backend::native_stream) {
      const std::size_t bytes = call.count * comm_type_bytes(call.type);
      if (call.send != nullptr && call.recv != nullptr && call.send != call.recv && bytes > 0) {
        std::memcpy(call.recv, call.send, bytes);
      }
    };
  }

 private:
  detail::comm_liveness liveness_ = detail::make_comm_liveness();
  detail::comm_liveness_watch parent_;
  bool has_parent_ = false;
};

static_assert(CommunicatorOf<self_communicator, host_backend>,
              "self_communicator must satisfy memo::Communicator over host_backend");

}  // namespace memo
