// memo/backend/mpi_communicator.hpp
//
// Ranks as real processes (Open MPI), over the host backend: what memo's
// sequence-parallel and pipeline code (FPDT section 3, SPPO section 4) runs
// on across a cluster without GPUs, and how the thread communicator's
// semantics are checked against a real MPI. Include only with the
// `memo::mpi` component.
//
// - Collectives run as stream work: each call is enqueued on a host stream
//   and made (blocking) on that stream's worker thread, in order with the
//   stream's other work. Different streams are different threads, so MPI
//   must provide MPI_THREAD_MULTIPLE: `mpi_environment` asks for it and
//   throws a `memo::error` naming the level the library provided when it is
//   less (as does an `mpi_communicator` made under a weaker MPI_Init).
// - Every communicator is a duplicate of the one it is made from with
//   MPI_ERRORS_RETURN installed, so an MPI failure becomes a `memo::error`
//   from the stream's synchronisation (mpi_check.hpp) instead of aborting.
// - Lifetimes: the MPI communicator is freed when the last handle and the
//   last task in flight let go. Issuing (or running) anything after
//   MPI_Finalize is a `memo::error`; a communicator destroyed after it is
//   released without MPI calls. A group made by `split` refuses to issue
//   once the communicator it was split from is gone.
// - MPI cannot see a mismatch of element counts between ranks in every
//   case; what it reports (a truncated receive) surfaces as a `memo::error`,
//   and so does a receive that got fewer elements than it asked for. Nor
//   does it see a float32 sent and an int32 received (the same size), or
//   collectives of different kinds issued against each other (Open MPI
//   matches nonblocking collectives by order, not by kind), or a broadcast
//   whose ranks name different roots (erroneous in MPI: some ranks may
//   return with another rank's data while others wait, until the timeout
//   or forever without one): the ranks must issue the same calls in the
//   same order, as with every MPI program. `options.verify_calls` checks
//   the collectives: before each one (and each split) every rank's call
//   is gathered, and when they differ in kind, element type, count or
//   root every rank fails with each rank's call named, as the thread
//   group does, before anything is sent (one small all_gather more per
//   collective). Point-to-point calls are not checked.
// - Timeouts: MPI's calls have none, so a rank that stops taking part
//   (stuck, or dead without the launcher noticing) would hold its peers
//   forever. Every call is made with the nonblocking MPI-3 form (so ranks
//   with different timeouts still match: MPI never matches a blocking
//   collective with a nonblocking one) and polled until it completes or,
//   with `options.timeout` > 0, the time is up (a `memo::error` naming the
//   rank, the call and the time). Polling spins for a millisecond, then
//   sleeps about 50-100 us between polls (the timer's slack included):
//   calls that take longer give their core to the ranks and backend
//   threads that share it, at that much latency each. Nonblocking
//   collectives may use other algorithms than the blocking ones. `split`
//   gathers every rank's color and key (with verify_calls, its call
//   signature instead) that way first (so a rank that never comes fails
//   it after the timeout), then calls MPI_Comm_split, which has no
//   nonblocking form. One case stays unbounded: a rank whose
//   gather times out just as the others' complete leaves them in
//   MPI_Comm_split until the job ends (which it should: that rank's
//   communicator is unusable, and train_gpt calls MPI_Abort). Groups made
//   by `split` inherit the timeout.
// - After a timeout the communicator is unusable: every later call on it
//   (and `split`) is a `memo::error` naming the call that timed out, and
//   the job should end (`MPI_Abort`, as train_gpt does). A peer's late
//   message would otherwise be taken by a later call (MPI matches messages
//   in order), and a timed-out collective stays posted (MPI cannot cancel
//   one): the peers would match it with their next call of its kind and
//   get wrong data. A point-to-point call is cancelled first (MPI_Cancel,
//   given `withdraw_seconds`); one that completed anyway (a small send MPI
//   delivered at once) is not a timeout. What cannot be withdrawn (a
//   collective; a send Open MPI does not cancel) stays posted, its buffers
//   MPI's until the job ends; a communicator holding such a call makes no
//   MPI call when destroyed. Only the rank that timed out knows: its peers
//   learn of it by their own timeouts, or when the job ends. A call posted
//   on another stream of the same communicator before the timeout is not
//   refused, and may still take the peer's late message.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "memo/backend/communicator.hpp"
#include "memo/backend/host_backend.hpp"
#include "memo/backend/mpi_check.hpp"
#include "memo/core/error.hpp"

namespace memo {

namespace detail {

inline const char* mpi_thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return "an unknown MPI thread level";
  }
}

inline void require_mpi_thread_multiple(int provided, const char* where) {
  expects(provided >= MPI_THREAD_MULTIPLE, [&] {
    return std::string(where) + ": MPI provides thread level " + mpi_thread_level_name(provided) +
           ", but memo runs collectives on the worker threads of several streams and needs "
           "MPI_THREAD_MULTIPLE (use an Open MPI built with thread support, and MPI_Init_thread)";
  });
}

inline bool mpi_finalized() {
  int finalized = 0;
  (void)MPI_Finalized(&finalized);
  return finalized != 0;
}

inline MPI_Datatype mpi_type(comm_type type) { return type == comm_type::float32 ? MPI_FLOAT : MPI_INT32_T; }

/// An MPI communicator owned by memo (a duplicate, MPI_ERRORS_RETURN).
struct mpi_comm_state {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
  std::chrono::milliseconds timeout{0};  // 0: no limit
  bool verify = false;                   // every collective's signature compared first (options::verify_calls)
  /// How long a timed-out (or failed) point-to-point call's requests get to
  /// be withdrawn before they are left posted.
  static constexpr std::chrono::seconds withdraw_seconds{1};
  explicit mpi_comm_state(MPI_Comm owned, std::chrono::milliseconds limit = {}, bool verify_calls = false)
      : comm(owned), timeout(limit), verify(verify_calls) {
    check_mpi(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  }
  mpi_comm_state(const mpi_comm_state&) = delete;
  mpi_comm_state& operator=(const mpi_comm_state&) = delete;
  ~mpi_comm_state() {
    // With a call left posted nothing here drives MPI's progress (which
    // could complete it into buffers that are gone by now): the
    // communicator is left to the end of the job.
    if (comm == MPI_COMM_NULL || mpi_finalized() || !stranded.empty()) return;
    (void)MPI_Comm_free(&comm);
  }

  /// `call`, after checking that every rank issues the same one when
  /// `verify` is set and it is a collective.
  void run(const comm_call& call) const {
    if (verify && !pairwise(call.op)) agree(signature(call), describe_call(call));
    run_call(call);
  }

  /// What `agree` gathers of a call, six words: a marker, the operation
  /// (-1: split), the element type, the count (-1 beyond MPI's int count:
  /// every rank with such a count fails alike at the call itself), a zero
  /// (reserved), and the root.
  using call_signature = std::array<std::int32_t, 6>;
  static constexpr std::int32_t signature_marker = 0x43414c4c;  // "CALL"
  static constexpr std::int32_t split_signature = -1;
  static call_signature signature(const comm_call& call) {
    return {signature_marker, static_cast<std::int32_t>(call.op), static_cast<std::int32_t>(call.type),
            call.count <= static_cast<std::size_t>(INT32_MAX) ? static_cast<std::int32_t>(call.count) : -1, 0,
            call.op == comm_op::broadcast ? call.peer : -1};
  }
  /// A split's signature: word 4 says whether its color is negative (every
  /// rank fails alike when the ranks differ in it, or when all have one).
  static call_signature signature_of_split(bool negative_color = false) {
    return {signature_marker, split_signature, 0, 0, negative_color ? 1 : 0, -1};
  }
  /// A gathered signature as its call's name ("broadcast(float32 x 4, root 1)", "split").
  static std::string describe_signature(const std::int32_t* sig) {
    if (sig[0] != signature_marker) return "a call that does not verify";
    if (sig[1] == split_signature) return sig[4] != 0 ? "split(a negative color)" : "split";
    if (sig[1] < 0 || sig[1] > static_cast<std::int32_t>(comm_op::broadcast) || sig[2] < 0 || sig[2] > 1) {
      return "a call this build does not know";
    }
    comm_call call;
    call.op = static_cast<comm_op>(sig[1]);
    call.type = static_cast<comm_type>(sig[2]);
    call.count = sig[3] < 0 ? 0 : static_cast<std::size_t>(sig[3]);
    call.peer = sig[5];
    return describe_call(call, sig[3] < 0 ? "more than " + std::to_string(INT32_MAX) : std::string());
  }

  /// Gathers every rank's signature of the call about to be made (under
  /// the timeout, like any call) and fails every rank alike, naming each
  /// rank's call, when they differ; nothing else was posted, so the
  /// communicator stays usable.
  void agree(const call_signature& mine, const std::string& what) const {
    check_usable(what);  // refused before anything is made
    // On the heap: a gather that times out stays posted, its buffers MPI's.
    struct gathered {
      call_signature mine;
      std::vector<std::int32_t> all;
    };
    auto buffers = std::make_unique<gathered>(gathered{mine, {}});
    buffers->all.resize(mine.size() * static_cast<std::size_t>(size));
    comm_call gather;
    gather.op = comm_op::all_gather;
    gather.type = comm_type::int32;
    gather.send = buffers->mine.data();
    gather.recv = buffers->all.data();
    gather.count = mine.size();
    try {
      run_call(gather, " (checking that every rank issues " + what + ")");
    } catch (...) {
      (void)buffers.release();
      throw;
    }
    const auto& all = buffers->all;
    bool same = true;
    for (std::size_t i = 0; i < all.size(); ++i) same = same && all[i] == mine[i % mine.size()];
    if (same) return;
    std::vector<std::string> calls;
    for (std::size_t r = 0; r < all.size(); r += mine.size()) calls.push_back(describe_signature(all.data() + r));
    throw error(who() + ": " + different_calls_text(calls) + " (checked before the call: nothing was sent, and the "
                "communicator stays usable)");
  }

  /// `call` in its nonblocking MPI-3 form, always (MPI does not match a
  /// blocking collective with a nonblocking one, so ranks with and without
  /// a timeout still meet), polled until done (or `timeout`, when set).
  /// `checking` names the call a verification gather is made for, in its
  /// timeout message.
  void run_call(const comm_call& call, const std::string& checking = {}) const {
    expects(!mpi_finalized(), "mpi_communicator: a call ran after MPI_Finalize");
    check_usable(to_string(call.op));
    const MPI_Datatype type = mpi_type(call.type);
    const int count = checked_count(call.count);
    constexpr int tag = 7;
    MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    int pending = 1;
    // A failure with a request still posted withdraws it first.
    auto post = [&](int status, const char* name) {
      if (status != MPI_SUCCESS) {
        int ignored = MPI_SUCCESS;  // the failure at hand is reported below
        (void)withdraw(requests, pending, call, std::string(name) + " failed", ignored);
      }
      check_mpi(status, name);
    };
    switch (call.op) {
      case comm_op::all_reduce:
        check_mpi(MPI_Iallreduce(call.send == call.recv ? MPI_IN_PLACE : call.send, call.recv, count, type, MPI_SUM,
                                 comm, &requests[0]),
                  "MPI_Iallreduce");
        break;
      case comm_op::all_gather:
        check_mpi(MPI_Iallgather(call.send, count, type, call.recv, count, type, comm, &requests[0]), "MPI_Iallgather");
        break;
      case comm_op::reduce_scatter:
        check_mpi(MPI_Ireduce_scatter_block(call.send, call.recv, count, type, MPI_SUM, comm, &requests[0]),
                  "MPI_Ireduce_scatter_block");
        break;
      case comm_op::all_to_all:
        check_mpi(MPI_Ialltoall(call.send, count, type, call.recv, count, type, comm, &requests[0]), "MPI_Ialltoall");
        break;
      case comm_op::send:
        check_mpi(MPI_Isend(call.send, count, type, call.peer, tag, comm, &requests[0]), "MPI_Isend");
        break;
      case comm_op::recv:
        check_mpi(MPI_Irecv(call.recv, count, type, call.peer, tag, comm, &requests[0]), "MPI_Irecv");
        break;
      case comm_op::send_recv:
        check_mpi(MPI_Irecv(call.recv, checked_count(call.recv_count), type, call.source, tag, comm, &requests[0]),
                  "MPI_Irecv");
        pending = 2;
        post(MPI_Isend(call.send, count, type, call.peer, tag, comm, &requests[1]), "MPI_Isend");
        break;
      case comm_op::barrier: check_mpi(MPI_Ibarrier(comm, &requests[0]), "MPI_Ibarrier"); break;
      case comm_op::broadcast:
        check_mpi(MPI_Ibcast(call.recv, count, type, call.peer, comm, &requests[0]), "MPI_Ibcast");
        break;
    }
    // Polled rather than waited for (MPI_Waitall spins): a call that does
    // not complete within a millisecond of polling sleeps between polls,
    // leaving the core to ranks and backend threads that share it.
    const auto start = std::chrono::steady_clock::now();
    constexpr auto spin = std::chrono::milliseconds(1);
    for (;;) {
      int done = 0;
      MPI_Status statuses[2];
      int status = MPI_Testall(pending, requests, &done, statuses);
      if (status == MPI_ERR_IN_STATUS) {  // the failed request's own error, e.g. a truncated receive
        for (int i = 0; i < pending; ++i) {
          if (statuses[i].MPI_ERROR != MPI_SUCCESS && statuses[i].MPI_ERROR != MPI_ERR_PENDING) {
            status = statuses[i].MPI_ERROR;
            break;
          }
        }
      }
      post(status, completed(call.op));
      if (done != 0) {
        if (call.op == comm_op::recv || call.op == comm_op::send_recv) check_received(call, statuses[0], type);
        return;
      }
      if (timeout.count() > 0 && std::chrono::steady_clock::now() - start >= timeout) {
        const std::string waited =
            "waited " + std::to_string(timeout.count()) + " ms in " + to_string(call.op) +
            (call.op == comm_op::send || call.op == comm_op::recv ? " with rank " + std::to_string(call.peer)
             : call.op == comm_op::send_recv ? " sending to rank " + std::to_string(call.peer) +
                                                   " and receiving from rank " + std::to_string(call.source)
             : call.op == comm_op::broadcast ? " from root " + std::to_string(call.peer) + " (" +
                                                   std::to_string(call.count) + " elements) for its peers"
                                             : std::string(" for its peers")) +
            checking;
        int failure = MPI_SUCCESS;
        MPI_Status received{};
        const withdrawal outcome = withdraw(requests, pending, call, waited, failure, &received);
        if (outcome == withdrawal::completed) {  // done after all, before the cancel took
          if (call.op == comm_op::recv || call.op == comm_op::send_recv) check_received(call, received, type);
          return;
        }
        mark_unusable(call, waited);
        check_mpi(failure, completed(call.op));  // it ended in a failure while being withdrawn
        throw error(who() + ": " + waited + " (one may have failed or stopped); the communicator is unusable from "
                    "now on" +
                    (outcome == withdrawal::withdrawn ? std::string(" (the call was withdrawn)")
                     : pairwise(call.op)
                         ? " (MPI could not withdraw the call: its buffers stay MPI's), and the job should end "
                           "(MPI_Abort)"
                         : " (MPI cannot cancel a collective: its buffers stay MPI's), and the job should end "
                           "(MPI_Abort)"));
      }
      if (std::chrono::steady_clock::now() - start >= spin) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  /// A receive that completed with fewer elements than it asked for (MPI
  /// completes it, leaving the rest of the buffer as it was) is an error
  /// naming both counts; a longer message already failed as truncated.
  void check_received(const comm_call& call, const MPI_Status& status, MPI_Datatype type) const {
    const std::size_t wanted = call.op == comm_op::recv ? call.count : call.recv_count;
    const int from = call.op == comm_op::recv ? call.peer : call.source;
    int received = 0;
    check_mpi(MPI_Get_count(&status, type, &received), "MPI_Get_count");
    expects(received >= 0 && static_cast<std::size_t>(received) == wanted, [&] {
      return who() + ": " + to_string(call.op) + " of " + std::to_string(wanted) + " " + to_string(call.type) +
             " from rank " + std::to_string(from) + " got " +
             (received == MPI_UNDEFINED ? std::string("a message that is not a whole number of them")
                                        : std::to_string(received)) +
             " (the sender sent fewer)";
    });
  }

  /// A memo::error once a call timed out or was left posted (see withdraw).
  void check_usable(std::string_view what) const {
    const std::lock_guard lock(mutex);
    expects(unusable.empty(), [&] {
      return who() + ": " + std::string(what) + " refused: the communicator is unusable since " + unusable +
             " (end the job: MPI_Abort)";
    });
  }
  std::string who() const { return "mpi_communicator rank " + std::to_string(rank) + "/" + std::to_string(size); }
  static bool pairwise(comm_op op) { return op == comm_op::send || op == comm_op::recv || op == comm_op::send_recv; }

  /// What became of a call's requests when it was taken back.
  enum class withdrawal {
    completed,  ///< every request completed (none was cancelled)
    withdrawn,  ///< every request is done, at least one cancelled
    stranded,   ///< some are still posted (kept in `stranded`)
  };

  /// Takes back the call's posted requests: point-to-point ones are
  /// cancelled and given `withdraw_seconds` to finish, each read with
  /// MPI_Test_cancelled (a cancel may lose to the completion). A request
  /// that failed is released (Open MPI keeps failed point-to-point
  /// requests allocated). What stays posted (a collective, or a send MPI
  /// does not cancel) is kept, and the communicator becomes unusable, as
  /// it does when some requests completed and others were cancelled.
  /// `failure` receives the first error a request ended with (its call
  /// then did not complete: never `withdrawal::completed`); `first`, if
  /// given, the status of request 0 when it completed (a receive's count).
  withdrawal withdraw(MPI_Request* requests, int pending, const comm_call& call, const std::string& why,
                      int& failure, MPI_Status* first = nullptr) const {
    const bool cancellable = pairwise(call.op);
    bool cancelled = false, completed = false;
    auto settle = [&] {
      bool all = true;
      for (int i = 0; i < pending; ++i) {
        if (requests[i] == MPI_REQUEST_NULL) continue;
        int done = 0;
        MPI_Status status;
        if (const int code = MPI_Test(&requests[i], &done, &status); code != MPI_SUCCESS) {
          // Open MPI keeps a failed point-to-point request allocated (MPICH
          // frees it and nulls the handle); freeing a collective's is erroneous.
          if (cancellable && requests[i] != MPI_REQUEST_NULL) (void)MPI_Request_free(&requests[i]);
          requests[i] = MPI_REQUEST_NULL;
          if (failure == MPI_SUCCESS) failure = code;
          cancelled = true;  // it did not complete
          continue;
        }
        if (done == 0) {
          all = false;
          continue;
        }
        int flag = 0;
        (void)MPI_Test_cancelled(&status, &flag);
        (flag != 0 ? cancelled : completed) = true;
        if (i == 0 && flag == 0 && first != nullptr) *first = status;  // what a completed receive got
      }
      return all;
    };
    if (cancellable) {
      for (int i = 0; i < pending; ++i) {
        if (requests[i] != MPI_REQUEST_NULL) (void)MPI_Cancel(&requests[i]);
      }
    }
    const auto start = std::chrono::steady_clock::now();
    bool settled = settle();
    while (!settled && cancellable && std::chrono::steady_clock::now() - start < withdraw_seconds) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      settled = settle();
    }
    if (settled && !cancelled) return withdrawal::completed;
    if (settled && !completed) return withdrawal::withdrawn;
    if (!settled) {
      const std::lock_guard lock(mutex);
      for (int i = 0; i < pending; ++i) {
        if (requests[i] != MPI_REQUEST_NULL) stranded.push_back(requests[i]);
      }
    }
    mark_unusable(call, why);
    return settled ? withdrawal::withdrawn : withdrawal::stranded;
  }

  /// From now on every call is refused, naming this one (the first reason stays).
  void mark_unusable(const comm_call& call, const std::string& why) const {
    const std::lock_guard lock(mutex);
    if (unusable.empty()) unusable = "its " + std::string(to_string(call.op)) + " was abandoned (" + why + ")";
  }

  /// What a failure found when the call completes is named: the call as
  /// its blocking form ("MPI_Recv failed: message truncated").
  static const char* completed(comm_op op) {
    switch (op) {
      case comm_op::all_reduce: return "MPI_Allreduce";
      case comm_op::all_gather: return "MPI_Allgather";
      case comm_op::reduce_scatter: return "MPI_Reduce_scatter_block";
      case comm_op::all_to_all: return "MPI_Alltoall";
      case comm_op::send: return "MPI_Send";
      case comm_op::recv: return "MPI_Recv";
      case comm_op::send_recv: return "MPI_Sendrecv";
      case comm_op::barrier: return "MPI_Barrier";
      case comm_op::broadcast: return "MPI_Bcast";
    }
    return "MPI request";
  }

  // Set once a call times out or is left posted (see withdraw); guarded by `mutex`.
  mutable std::mutex mutex;
  mutable std::string unusable;
  mutable std::vector<MPI_Request> stranded;

  static int checked_count(std::size_t count) {
    expects(count <= static_cast<std::size_t>(INT32_MAX), [&] {
      return "mpi_communicator: " + std::to_string(count) + " elements exceed MPI's int count limit " +
             std::to_string(INT32_MAX);
    });
    return static_cast<int>(count);
  }
};

}  // namespace detail

/// MPI_Init_thread(MPI_THREAD_MULTIPLE) for the lifetime of the object, and
/// MPI_Finalize after it, unless MPI was initialised before (then it only
/// checks the thread level and leaves finalisation to whoever initialised).
class mpi_environment {
 public:
  mpi_environment(int* argc, char*** argv) {
    int initialized = 0;
    check_mpi(MPI_Initialized(&initialized), "MPI_Initialized");
    int provided = MPI_THREAD_SINGLE;
    if (initialized == 0) {
      check_mpi(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
      owns_ = true;
    } else {
      check_mpi(MPI_Query_thread(&provided), "MPI_Query_thread");
    }
    provided_ = provided;
    if (provided < MPI_THREAD_MULTIPLE && owns_) {
      (void)MPI_Finalize();
      owns_ = false;
    }
    detail::require_mpi_thread_multiple(provided, "mpi_environment");
  }
  mpi_environment(const mpi_environment&) = delete;
  mpi_environment& operator=(const mpi_environment&) = delete;
  ~mpi_environment() {
    if (owns_ && !detail::mpi_finalized()) (void)MPI_Finalize();
  }
  [[nodiscard]] int thread_level() const noexcept { return provided_; }

 private:
  bool owns_ = false;
  int provided_ = MPI_THREAD_SINGLE;
};

class mpi_communicator : public communicator_ops<mpi_communicator, host_backend> {
 public:
  struct options {
    /// How long one call may wait for its peers; 0: no limit (see the
    /// header). Ranks may differ in it.
    std::chrono::milliseconds timeout{0};
    /// Before each collective (and split), gather every rank's call
    /// (operation, element type, count, root) and fail every rank, naming
    /// each rank's call, when they differ: what MPI itself cannot see (see
    /// the header). One small all_gather more per collective. Every rank
    /// must set it alike (checked when the communicator is made); the
    /// groups split from it inherit it.
    bool verify_calls = false;
  };

  /// A communicator over the ranks of `base` (MPI_COMM_WORLD by default),
  /// duplicated so memo's traffic and error handler are its own.
  explicit mpi_communicator(MPI_Comm base = MPI_COMM_WORLD) : mpi_communicator(base, options{}) {}
  mpi_communicator(MPI_Comm base, options config) {
    // Bounded, so that the elapsed time is always compared in range.
    expects(config.timeout.count() >= 0 && config.timeout.count() <= std::numeric_limits<std::int32_t>::max(), [&] {
      return "mpi_communicator: the timeout must be from 0 (none) to 2147483647 ms (about 24.8 days), got " +
             std::to_string(config.timeout.count()) + " ms";
    });
    expects(!detail::mpi_finalized(), "mpi_communicator: MPI is finalized");
    int initialized = 0;
    check_mpi(MPI_Initialized(&initialized), "MPI_Initialized");
    expects(initialized != 0, "mpi_communicator: MPI is not initialised (create an mpi_environment first)");
    int provided = MPI_THREAD_SINGLE;
    check_mpi(MPI_Query_thread(&provided), "MPI_Query_thread");
    detail::require_mpi_thread_multiple(provided, "mpi_communicator");
    MPI_Comm copy = MPI_COMM_NULL;
    check_mpi(MPI_Comm_dup(base, &copy), "MPI_Comm_dup");
    state_ = std::make_shared<detail::mpi_comm_state>(copy, config.timeout, config.verify_calls);
    // Whether every rank verifies (a rank that does gathers before each
    // collective, which the others would take for their call): every
    // rank's setting, gathered, so all fail alike or none.
    const int mine = config.verify_calls ? 1 : 0;
    std::vector<int> every(static_cast<std::size_t>(size()));
    check_mpi(MPI_Allgather(&mine, 1, MPI_INT, every.data(), 1, MPI_INT, copy), "MPI_Allgather");
    expects(std::all_of(every.begin(), every.end(), [&](int v) { return v == every.front(); }), [&] {
      auto ranks = [&](int value) {  // the first 16 ranks that have it
        std::string list;
        int listed = 0;
        for (std::size_t r = 0; r < every.size() && listed < 16; ++r) {
          if (every[r] != value) continue;
          list += (listed++ ? ", " : "") + std::to_string(r);
        }
        return list + (static_cast<int>(std::count(every.begin(), every.end(), value)) > listed ? ", ..." : "");
      };
      return describe() + ": the ranks disagree on options.verify_calls: set on rank(s) " + ranks(1) +
             ", not on rank(s) " + ranks(0) + " (every rank must set it alike)";
    });
  }
  mpi_communicator(mpi_communicator&&) noexcept = default;
  mpi_communicator& operator=(mpi_communicator&&) noexcept = default;
  mpi_communicator(const mpi_communicator&) = delete;
  mpi_communicator& operator=(const mpi_communicator&) = delete;

  [[nodiscard]] int rank() const { return state().rank; }
  [[nodiscard]] int size() const { return state().size; }
  [[nodiscard]] std::string describe() const {
    return state().who();
  }
  /// The MPI communicator, for calls memo does not wrap.
  [[nodiscard]] MPI_Comm native() const { return state().comm; }

  /// MPI_Comm_split: a host call, collective over this communicator. It
  /// first gathers every rank's (marker, color, key), or with verify_calls
  /// every rank's call signature, with the polled nonblocking all_gather,
  /// under the communicator's timeout: a rank that never comes, or comes
  /// with another call, fails here instead of holding the others in
  /// MPI_Comm_split (which has no nonblocking form); once every rank is
  /// known to be in split, MPI_Comm_split follows at once.
  [[nodiscard]] mpi_communicator split(int color, int key) {
    check_usable();
    state().check_usable("split");
    if (state().verify) {
      // The check gathers every rank's call already: each is in split.
      state().agree(detail::mpi_comm_state::signature_of_split(color < 0), "split");
    } else {
      gather_split_markers(color, key);
    }
    // After the gather, so that a negative color fails every rank alike:
    // with verify_calls every rank's is negative here, or none is.
    expects(color >= 0, [&] { return describe() + ": split color must be >= 0, got " + std::to_string(color); });
    MPI_Comm child = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split(state().comm, color, key, &child), "MPI_Comm_split");
    mpi_communicator result(std::make_shared<detail::mpi_comm_state>(child, state().timeout, state().verify));
    result.parent_ = liveness_;
    result.has_parent_ = true;
    return result;
  }

  /// What every rank's `split` gathers first, beside its color and key.
  static constexpr std::int32_t split_marker = 0x53504c54;  // "SPLT"

  [[nodiscard]] auto task(const comm_call& call) const {
    (void)state();  // a moved-from communicator is an error here, not a null task
    return [state = state_, call](host_backend::native_stream) { state->run(call); };
  }

  void check_usable() const {
    (void)state();
    expects(!detail::mpi_finalized(), [&] { return describe() + ": MPI is finalized"; });
    expects(!has_parent_ || !parent_.expired(),
            [&] { return describe() + ": this group outlived the communicator it was split from"; });
  }

 private:
  /// `split`'s gather of every rank's (marker, color, key) without
  /// verify_calls: returns once every rank is in split with a color >= 0,
  /// else fails every rank alike (the communicator stays usable when only
  /// a color was negative).
  void gather_split_markers(int color, int key) const {
    // On the heap: a gather that times out stays posted, its buffers MPI's
    // until the others come (then they are left to the end of the job).
    struct gathered {
      std::int32_t mine[3];
      std::vector<std::int32_t> all;
    };
    auto buffers = std::make_unique<gathered>(gathered{{split_marker, color, key}, {}});
    buffers->all.resize(3 * static_cast<std::size_t>(size()));
    comm_call gather;
    gather.op = comm_op::all_gather;
    gather.type = comm_type::int32;
    gather.send = buffers->mine;
    gather.recv = buffers->all.data();
    gather.count = 3;
    try {
      state().run_call(gather);
    } catch (...) {
      (void)buffers.release();
      throw;
    }
    for (int r = 0; r < size(); ++r) {
      if (buffers->all[3 * static_cast<std::size_t>(r)] == split_marker) continue;
      const std::string why = "split met another call from rank " + std::to_string(r);
      state().mark_unusable(gather, why);
      throw error(describe() + ": " + why + " (every rank must call split together); the communicator is unusable "
                  "from now on");
    }
    std::string negative;  // "rank 1 gave -1", for the first 16 ranks with a negative color
    int count = 0;
    for (int r = 0; r < size(); ++r) {
      const std::int32_t c = buffers->all[3 * static_cast<std::size_t>(r) + 1];
      if (c >= 0 || ++count > 16) continue;
      negative += (negative.empty() ? "" : ", ") + ("rank " + std::to_string(r) + " gave " + std::to_string(c));
    }
    if (count > 16) negative += " and " + std::to_string(count - 16) + " more";
    if (count > 0) throw error(describe() + ": split color must be >= 0: " + negative);
  }

  explicit mpi_communicator(std::shared_ptr<detail::mpi_comm_state> state) : state_(std::move(state)) {}
  const detail::mpi_comm_state& state() const {
    expects(state_ != nullptr, "use of a moved-from mpi_communicator");
    return *state_;
  }

  std::shared_ptr<detail::mpi_comm_state> state_;
  detail::comm_liveness liveness_ = detail::make_comm_liveness();
  detail::comm_liveness_watch parent_;
  bool has_parent_ = false;
};

static_assert(CommunicatorOf<mpi_communicator, host_backend>,
              "mpi_communicator must satisfy memo::Communicator over host_backend");

}  // namespace memo
