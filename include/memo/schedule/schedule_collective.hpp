// memo/schedule/schedule_collective.hpp
//
// A stream schedule's collective op bound to a communicator (FPDT's and
// SPPO's all-to-all, all-gather, reduce-scatter and all-reduce placed on a
// communication stream beside compute and copies, MEMO section 4.3.4's
// picture with a fourth stream).
//
// `add_collective(schedule, name, stream, comm, op, send, recv, after)`
// (and `add_broadcast(schedule, name, stream, comm, data, root, after)`)
// checks the buffers' shapes as the communicator would when issuing, and
// adds one collective op that
//   - simulates from its kind, its payload bytes (comm_payload_bytes) and
//     comm.size() ranks over the device profile's interconnect bandwidth
//     (schedule_simulate.hpp), and
//   - executes as the communicator's own task on the op's stream: the
//     op's callable holds the communicator's shared state (a type-erased
//     handle: the communicator handle may be destroyed before the schedule
//     runs) and asks the stream for the communicator's backend, so running
//     the schedule on another backend is a memo::error.
// Every rank builds the same schedule (same collectives in the same stream
// order) over its own communicator and buffers.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "memo/backend/communicator.hpp"
#include "memo/schedule/schedule_graph.hpp"

namespace memo {

namespace detail {

inline collective_kind schedule_kind_of(comm_op op) {
  switch (op) {
    case comm_op::all_reduce: return collective_kind::all_reduce;
    case comm_op::all_gather: return collective_kind::all_gather;
    case comm_op::reduce_scatter: return collective_kind::reduce_scatter;
    case comm_op::all_to_all: return collective_kind::all_to_all;
    default: break;
  }
  throw error(std::string("stream_schedule: a collective op is all_reduce, all_gather, reduce_scatter or all_to_all, not ") +
              to_string(op) + (op == comm_op::broadcast ? " (use add_broadcast)" : ""));
}

/// The collective op that simulates `call` as `kind` over comm.size()
/// ranks and executes it as the communicator's task.
template <Communicator C>
collective_op bound_collective(const C& comm, collective_kind kind, const comm_call& call) {
  using B = typename C::backend_type;
  collective_op spec;
  spec.kind = kind;
  spec.ranks = comm.size();
  spec.bytes = comm_payload_bytes(call, comm.size());
  spec.communicator = comm.describe();
  spec.work = [task = comm.task(call)](native_stream_ref native) mutable { task(native.get<B>()); };
  return spec;
}

}  // namespace detail

/// Adds collective `op` of `comm` over `send` -> `recv` on `stream`.
template <Communicator C, communicator_element T>
op_id add_collective(schedule_graph& schedule, std::string name, std::string_view stream, const C& comm, comm_op op,
                     std::span<const std::type_identity_t<T>> send, std::span<T> recv,
                     const std::vector<op_id>& after = {}) {
  const collective_kind kind = detail::schedule_kind_of(op);
  comm.check_usable();
  const comm_call call = comm.template checked_call<T>(op, send, recv);
  return schedule.add_collective(std::move(name), stream, detail::bound_collective(comm, kind, call), after);
}

/// Adds a broadcast of rank `root`'s `data` (in place) of `comm` on
/// `stream`, simulated as collective_kind::broadcast.
template <Communicator C, communicator_element T>
op_id add_broadcast(schedule_graph& schedule, std::string name, std::string_view stream, const C& comm,
                    std::span<T> data, int root, const std::vector<op_id>& after = {}) {
  comm.check_usable();
  const comm_call call = comm.template broadcast_call<T>(data, root);
  return schedule.add_collective(std::move(name), stream,
                                 detail::bound_collective(comm, collective_kind::broadcast, call), after);
}

}  // namespace memo
