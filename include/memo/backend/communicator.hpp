// memo/backend/communicator.hpp
//
// Collectives between ranks, issued on a backend's streams (DESIGN.md
// "Backends"; FPDT section 3 and SPPO section 4 move sequence chunks with
// all-to-all, all-gather and reduce-scatter inside sequence-parallel groups
// and pass activations between pipeline stages with send/recv).
//
// A `Communicator<C>` is typed on the backend whose streams it uses
// (`C::backend_type`). Every operation names that backend and one of its
// streams and is *enqueued* there like any other stream work: it runs after
// the work enqueued on the stream before it, later work runs after it, and
// other streams order themselves against it with events, exactly as with a
// copy or a GEMM. On the host backend the collective runs on the stream's
// worker thread; on the CUDA backend NCCL enqueues it on the cudaStream_t.
//
//   all_reduce(send[n], recv[n])             recv = sum over ranks of send
//   all_gather(send[n], recv[size * n])      recv block r = send of rank r
//   reduce_scatter(send[size * n], recv[n])  recv = sum over ranks of block `rank` of send
//   all_to_all(send[size * n], recv[size * n])  recv block r = block `rank` of rank r's send
//   send(data[n], to) / recv(data[n], from)  blocking pairwise transfer
//   send_recv(send[n], to, recv[m], from)    both at once (a ring step)
//   broadcast(data[n], root)                 data = data of rank `root` (in place)
//   barrier()                                every rank reaches this point
//   split(color, key)                        sub-groups (host call, collective)
//
// Elements are `float` or `std::int32_t`; all_reduce may run in place
// (send and recv the same span). The shapes above are checked when an
// operation is issued, so a wrong size is a `memo::error` at the call.
// All ranks must issue the same collectives in the same order with the same
// element counts and, for a broadcast, the same root (per stream order;
// keep one communicator's collectives on one stream or order them with
// events). An implementation detects what it can of a mismatch and reports
// it on every rank instead of hanging: the thread group always, MPI with
// `verify_calls`. A blocking `send` and its matching `recv` on the *same*
// stream of two ranks that also wait for each other in the other direction
// deadlock, as NCCL does without a group: use `send_recv`, or two streams.
//
// Lifetimes: a communicator holds no reference to a backend (every
// operation names the backend it is issued on, and the backend checks that
// the stream is its own), so a communicator that outlives a backend cannot
// reach it. Work already enqueued keeps the communicator's state alive, so
// destroying the handle with collectives in flight is safe. A group made by
// `split` refuses to issue anything once the communicator it was split from
// is gone (a `memo::error` naming the group), as its members are a
// sub-division of that communicator's ranks.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "memo/backend/buffer.hpp"
#include "memo/backend/concepts.hpp"
#include "memo/core/digest.hpp"
#include "memo/core/error.hpp"
#include "memo/core/liveness.hpp"
#include "memo/core/text.hpp"

namespace memo {

/// What a communicator operation does.
enum class comm_op { all_reduce, all_gather, reduce_scatter, all_to_all, send, recv, send_recv, barrier, broadcast };

inline constexpr const char* to_string(comm_op op) {
  switch (op) {
    case comm_op::all_reduce: return "all_reduce";
    case comm_op::all_gather: return "all_gather";
    case comm_op::reduce_scatter: return "reduce_scatter";
    case comm_op::all_to_all: return "all_to_all";
    case comm_op::send: return "send";
    case comm_op::recv: return "recv";
    case comm_op::send_recv: return "send_recv";
    case comm_op::barrier: return "barrier";
    case comm_op::broadcast: return "broadcast";
  }
  return "unknown";
}

/// Element types a communicator moves.
enum class comm_type { float32, int32 };

inline constexpr const char* to_string(comm_type type) {
  return type == comm_type::float32 ? "float32" : "int32";
}

template <class T>
concept communicator_element = std::same_as<T, float> || std::same_as<T, std::int32_t>;

template <communicator_element T>
inline constexpr comm_type comm_type_of = std::same_as<T, float> ? comm_type::float32 : comm_type::int32;

inline constexpr std::size_t comm_type_bytes(comm_type) noexcept { return 4; }

/// One operation as an implementation executes it: pointers, the element
/// count of one rank's block (`count`), and for send_recv the receive
/// count and source. Built and checked by `communicator_ops`.
struct comm_call {
  comm_op op = comm_op::barrier;
  comm_type type = comm_type::float32;
  const void* send = nullptr;
  void* recv = nullptr;
  std::size_t count = 0;       ///< elements of one block (all_reduce: the whole buffer)
  int peer = -1;               ///< send / recv / send_recv: destination (send) or source (recv); broadcast: root
  int source = -1;             ///< send_recv: the rank received from
  std::size_t recv_count = 0;  ///< send_recv: elements received
};

/// The payload in bytes of one rank's side of `call`, as the simulator's
/// collective cost counts it (schedule_graph.hpp `collective_seconds`):
/// all_reduce the buffer, all_gather the gathered output, reduce_scatter
/// the full input, all_to_all one rank's buffer, broadcast the buffer.
inline std::uint64_t comm_payload_bytes(const comm_call& call, int ranks) {
  const std::uint64_t block = static_cast<std::uint64_t>(call.count) * comm_type_bytes(call.type);
  switch (call.op) {
    case comm_op::all_reduce: return block;
    case comm_op::all_gather:
    case comm_op::reduce_scatter:
    case comm_op::all_to_all: return block * static_cast<std::uint64_t>(ranks);
    case comm_op::send:
    case comm_op::recv:
    case comm_op::broadcast: return block;
    case comm_op::send_recv:
      return block + static_cast<std::uint64_t>(call.recv_count) * comm_type_bytes(call.type);
    case comm_op::barrier: return 0;
  }
  return 0;
}

namespace detail {

/// A call as its error messages name it: "broadcast(float32 x 4, root 1)";
/// `count`, when given, is written in place of the element count.
inline std::string describe_call(const comm_call& call, const std::string& count = {}) {
  if (call.op == comm_op::barrier) return "barrier()";
  std::string text = std::string(to_string(call.op)) + "(" + to_string(call.type) + " x " +
                     (count.empty() ? std::to_string(call.count) : count);
  if (call.op == comm_op::send_recv) text += ", recv " + std::to_string(call.recv_count);
  if (call.op == comm_op::broadcast) text += ", root " + std::to_string(call.peer);
  return text + ")";
}

/// "ranks issued different collectives: rank 0 <calls[0]>; rank 1 ...",
/// the message of every rank when a group's calls do not match.
inline std::string different_calls_text(const std::vector<std::string>& calls) {
  std::string text = "ranks issued different collectives:";
  for (std::size_t r = 0; r < calls.size(); ++r) {
    text += " rank " + std::to_string(r) + " " + calls[r] + (r + 1 < calls.size() ? ";" : "");
  }
  return text;
}

/// Liveness of a communicator, watched by the groups split from it.
using comm_liveness = liveness_token;
using comm_liveness_watch = liveness_watch;

inline comm_liveness make_comm_liveness() { return make_liveness_token(); }

}  // namespace detail

/// The typed surface of every communicator, written once: checks the
/// shapes of a call where it is issued and enqueues the implementation's
/// task on the stream. `Derived` provides
///   int rank() const, int size() const, std::string describe() const,
///   task(comm_call) -> a copyable callable `void(native_stream_t<B>)`
///     that runs (host) or enqueues (CUDA) the call on that native stream,
///   void check_usable() const  (throws when the communicator may not issue).
template <class Derived, Backend B>
class communicator_ops {
 public:
  using backend_type = B;
  using stream_type = typename B::stream;

  template <communicator_element T>
  void all_reduce(B& backend, stream_type& on, std::span<const std::type_identity_t<T>> send, std::span<T> recv) {
    issue(backend, on, checked_call<T>(comm_op::all_reduce, send, recv));
  }
  template <communicator_element T>
  void all_gather(B& backend, stream_type& on, std::span<const std::type_identity_t<T>> send, std::span<T> recv) {
    issue(backend, on, checked_call<T>(comm_op::all_gather, send, recv));
  }
  template <communicator_element T>
  void reduce_scatter(B& backend, stream_type& on, std::span<const std::type_identity_t<T>> send, std::span<T> recv) {
    issue(backend, on, checked_call<T>(comm_op::reduce_scatter, send, recv));
  }
  template <communicator_element T>
  void all_to_all(B& backend, stream_type& on, std::span<const std::type_identity_t<T>> send, std::span<T> recv) {
    issue(backend, on, checked_call<T>(comm_op::all_to_all, send, recv));
  }

  /// The call one of the four collectives above would issue, after the
  /// same checks of its shapes; for code that enqueues `task(call)` itself
  /// (a stream_schedule's collective op, see schedule_collective.hpp).
  template <communicator_element T>
  [[nodiscard]] comm_call checked_call(comm_op op, std::span<const std::type_identity_t<T>> send,
                                       std::span<T> recv) const {
    const std::size_t p = ranks();
    switch (op) {
      case comm_op::all_reduce:
        expects(send.size() == recv.size(), [&] {
          return self().describe() + ": all_reduce needs send and recv of one size, got " +
                 std::to_string(send.size()) + " and " + std::to_string(recv.size()) + " elements";
        });
        expects(static_cast<const void*>(send.data()) == static_cast<const void*>(recv.data()) ||
                    !overlap<T>(send, recv),
                [&] { return self().describe() + ": all_reduce send and recv partly overlap"; });
        return make<T>(op, send.data(), recv.data(), send.size());
      case comm_op::all_gather:
        expects(recv.size() % p == 0 && recv.size() / p == send.size(), [&] {  // no product to overflow
          return self().describe() + ": all_gather needs recv of size() * send elements = " +
                 product_text(send.size(), p) + ", got " + std::to_string(recv.size());
        });
        separate<T>(send, recv, "all_gather");
        return make<T>(op, send.data(), recv.data(), send.size());
      case comm_op::reduce_scatter:
        expects(send.size() % p == 0 && send.size() / p == recv.size(), [&] {  // no product to overflow
          return self().describe() + ": reduce_scatter needs send of size() * recv elements = " +
                 product_text(recv.size(), p) + ", got " + std::to_string(send.size());
        });
        separate<T>(send, recv, "reduce_scatter");
        return make<T>(op, send.data(), recv.data(), recv.size());
      case comm_op::all_to_all:
        expects(send.size() == recv.size() && send.size() % p == 0, [&] {
          return self().describe() + ": all_to_all needs send and recv of one size, a multiple of size() = " +
                 std::to_string(p) + ", got " + std::to_string(send.size()) + " and " +
                 std::to_string(recv.size()) + " elements";
        });
        separate<T>(send, recv, "all_to_all");
        return make<T>(op, send.data(), recv.data(), send.size() / p);
      default:
        throw error(self().describe() + ": checked_call takes all_reduce, all_gather, reduce_scatter or "
                    "all_to_all, not " + to_string(op) +
                    (op == comm_op::broadcast ? " (use broadcast_call)" : ""));
    }
  }

  /// a * b in words, or "more than 2^64 - 1" when the product does not fit.
  static std::string product_text(std::size_t a, std::size_t b) {
    return b != 0 && a > SIZE_MAX / b ? std::string("more than 2^64 - 1") : std::to_string(a * b);
  }

  template <class U>
    requires communicator_element<std::remove_const_t<U>>
  void send(B& backend, stream_type& on, std::span<U> data, int to) {
    using T = std::remove_const_t<U>;
    check_peer(to, "send");
    auto call = make<T>(comm_op::send, static_cast<const T*>(data.data()), nullptr, data.size());
    call.peer = to;
    issue(backend, on, call);
  }

  template <communicator_element T>
  void recv(B& backend, stream_type& on, std::span<T> data, int from) {
    check_peer(from, "recv");
    auto call = make<T>(comm_op::recv, nullptr, data.data(), data.size());
    call.peer = from;
    issue(backend, on, call);
  }

  template <communicator_element T>
  void send_recv(B& backend, stream_type& on, std::span<const std::type_identity_t<T>> send_data, int to, std::span<T> recv_data,
                 int from) {
    check_peer(to, "send_recv (destination)");
    check_peer(from, "send_recv (source)");
    separate<T>(send_data, recv_data, "send_recv");
    auto call = make<T>(comm_op::send_recv, send_data.data(), recv_data.data(), send_data.size());
    call.peer = to;
    call.source = from;
    call.recv_count = recv_data.size();
    issue(backend, on, call);
  }

  /// Rank `root`'s `data` into every other rank's `data` (the same number
  /// of elements on every rank, the same root).
  template <communicator_element T>
  void broadcast(B& backend, stream_type& on, std::span<T> data, int root) {
    issue(backend, on, broadcast_call<T>(data, root));
  }
  /// The call `broadcast(data, root)` would issue, after its check of the
  /// root (for a stream_schedule's collective op).
  template <communicator_element T>
  [[nodiscard]] comm_call broadcast_call(std::span<T> data, int root) const {
    expects(root >= 0 && root < self().size(), [&] {
      return self().describe() + ": broadcast root rank " + std::to_string(root) + " is not a rank of [0, " +
             std::to_string(self().size()) + ")";
    });
    auto call = make<T>(comm_op::broadcast, data.data(), data.data(), data.size());
    call.peer = root;
    return call;
  }

  void barrier(B& backend, stream_type& on) {
    comm_call call;
    call.op = comm_op::barrier;
    issue(backend, on, call);
  }

  /// A call over raw pointers, unchecked (checked_call and the operations
  /// above check shapes first).
  template <communicator_element T>
  [[nodiscard]] static comm_call make(comm_op op, const T* send, T* recv, std::size_t count) {
    comm_call call;
    call.op = op;
    call.type = comm_type_of<T>;
    call.send = send;
    call.recv = recv;
    call.count = count;
    return call;
  }

 protected:
  communicator_ops() = default;

  void issue(B& backend, stream_type& on, const comm_call& call) {
    self().check_usable();
    backend.enqueue(on, self().task(call));
  }

 private:
  const Derived& self() const { return static_cast<const Derived&>(*this); }
  Derived& self() { return static_cast<Derived&>(*this); }
  std::size_t ranks() const { return static_cast<std::size_t>(self().size()); }

  void check_peer(int peer, const char* what) const {
    expects(peer >= 0 && peer < self().size() && peer != self().rank(), [&] {
      return self().describe() + ": " + what + " peer rank " + std::to_string(peer) +
             " is not another rank of [0, " + std::to_string(self().size()) + ")";
    });
  }

  template <class T>
  static bool overlap(std::span<const T> a, std::span<const T> b) {
    if (a.empty() || b.empty()) return false;
    const auto a0 = reinterpret_cast<std::uintptr_t>(a.data());
    const auto b0 = reinterpret_cast<std::uintptr_t>(b.data());
    return a0 < b0 + b.size_bytes() && b0 < a0 + a.size_bytes();
  }

  template <class T>
  void separate(std::span<const T> send, std::span<const T> recv, const char* what) const {
    expects(!overlap<T>(send, recv),
            [&] { return self().describe() + ": " + what + " send and recv overlap (it cannot run in place)"; });
  }
};

/// A communicator over backend `C::backend_type` (see the header comment).
template <class C>
concept Communicator =
    Backend<typename C::backend_type> &&
    requires(C& comm, const C& const_comm, typename C::backend_type& backend,
             typename C::backend_type::stream& stream, std::span<const float> fsend, std::span<float> frecv,
             std::span<const std::int32_t> isend, std::span<std::int32_t> irecv, int peer, const comm_call& call) {
      { const_comm.rank() } -> std::same_as<int>;
      { const_comm.size() } -> std::same_as<int>;
      comm.all_reduce(backend, stream, fsend, frecv);
      comm.all_gather(backend, stream, fsend, frecv);
      comm.reduce_scatter(backend, stream, fsend, frecv);
      comm.all_to_all(backend, stream, fsend, frecv);
      comm.all_reduce(backend, stream, isend, irecv);
      comm.send(backend, stream, fsend, peer);
      comm.recv(backend, stream, frecv, peer);
      comm.send_recv(backend, stream, fsend, peer, frecv, peer);
      comm.broadcast(backend, stream, frecv, peer);
      comm.barrier(backend, stream);
      { comm.split(peer, peer) } -> std::same_as<C>;
      { const_comm.task(call) };
      const_comm.check_usable();
      { const_comm.describe() } -> std::convertible_to<std::string>;
    };

/// A communicator whose streams belong to backend `B`.
template <class C, class B>
concept CommunicatorOf = Communicator<C> && std::same_as<typename C::backend_type, B>;

/// Value i of every rank's n values (`all`: rank by rank), as "A on ranks
/// 0, 1; B on rank 2": each distinct value, in the order of the first rank
/// holding it, shown by show(value, k) for the k-th distinct one.
template <class Show>
std::string ranks_holding(std::span<const std::uint64_t> all, std::size_t n, std::size_t i, Show&& show) {
  std::vector<std::pair<std::uint64_t, std::vector<std::size_t>>> held;
  for (std::size_t r = 0; r * n < all.size(); ++r) {
    const std::uint64_t v = all[r * n + i];
    auto at = std::find_if(held.begin(), held.end(), [&](const auto& h) { return h.first == v; });
    if (at == held.end()) at = held.insert(held.end(), {v, {}});
    at->second.push_back(r);
  }
  std::string out;
  for (std::size_t k = 0; k < held.size(); ++k) {
    const auto& ranks = held[k].second;
    out += (k == 0 ? "" : "; ") + show(held[k].first, k) + (ranks.size() == 1 ? " on rank " : " on ranks ");
    for (std::size_t j = 0; j < ranks.size(); ++j) out += (j ? ", " : "") + std::to_string(ranks[j]);
  }
  return out;
}

namespace detail {

/// gather_host_values without its check of the counts.
template <Backend B, CommunicatorOf<B> C>
std::vector<std::uint64_t> gather_words(B& backend, C& comm, std::span<const std::uint64_t> mine) {
  const std::size_t words = 2 * mine.size();
  const auto P = static_cast<std::size_t>(comm.size());
  if (words == 0) return {};
  std::vector<std::int32_t> packed(words);
  for (std::size_t i = 0; i < mine.size(); ++i) {
    packed[2 * i] = static_cast<std::int32_t>(static_cast<std::uint32_t>(mine[i]));
    packed[2 * i + 1] = static_cast<std::int32_t>(static_cast<std::uint32_t>(mine[i] >> 32));
  }
  using resource = std::remove_reference_t<decltype(backend.device_memory())>;
  buffer<std::int32_t, resource> send(backend.device_memory(), words), recv(backend.device_memory(), words * P);
  auto stream = backend.make_stream("gather_host_values");
  backend.copy_async(send.data(), packed.data(), send.size_bytes(), copy_kind::host_to_device, stream);
  comm.template all_gather<std::int32_t>(backend, stream, std::span<const std::int32_t>(send.data(), words),
                                         std::span<std::int32_t>(recv.data(), words * P));
  std::vector<std::int32_t> all(words * P);
  backend.copy_async(all.data(), recv.data(), recv.size_bytes(), copy_kind::device_to_host, stream);
  backend.synchronize(stream);
  std::vector<std::uint64_t> out(mine.size() * P);
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<std::uint64_t>(static_cast<std::uint32_t>(all[2 * i])) |
             (static_cast<std::uint64_t>(static_cast<std::uint32_t>(all[2 * i + 1])) << 32);
  }
  return out;
}

}  // namespace detail

/// Every rank's `mine` on every rank, rank by rank (size() x mine.size()
/// values): the counts first (ranks that give different counts fail, every
/// one, naming them), then an all_gather of the values' 32-bit halves
/// through device buffers, on a stream of its own, waited for. For the few
/// host values ranks compare or report (options, figures), not for data on
/// a step's path.
template <Backend B, CommunicatorOf<B> C>
std::vector<std::uint64_t> gather_host_values(B& backend, C& comm, std::span<const std::uint64_t> mine) {
  const std::uint64_t count = mine.size();
  const std::vector<std::uint64_t> counts = detail::gather_words(backend, comm, std::span<const std::uint64_t>(&count, 1));
  expects(std::all_of(counts.begin(), counts.end(), [&](std::uint64_t c) { return c == counts.front(); }), [&] {
    return comm.describe() + ": gather_host_values needs as many values from every rank: " +
           ranks_holding(counts, 1, 0, [](std::uint64_t v, std::size_t) { return std::to_string(v); });
  });
  return detail::gather_words(backend, comm, mine);
}

/// One value every rank must hold alike, with its name: an integer, a
/// flag, a real or the digest of several values.
struct agreed_value {
  enum class kind { integer, boolean, real, digest };
  const char* name;
  std::uint64_t value;  ///< the integer, 0 or 1, the real's bits, or the digest
  kind is = kind::integer;

  static agreed_value of_real(const char* name, double v) {
    return {name, std::bit_cast<std::uint64_t>(v == 0.0 ? 0.0 : v), kind::real};  // -0 is 0
  }
  /// A real that may not be given (shown as "not given"; NaN stands for it).
  static agreed_value of_optional_real(const char* name, std::optional<double> v) {
    return of_real(name, v.value_or(std::numeric_limits<double>::quiet_NaN()));
  }
  /// Several reals as one digest (-0 counted as 0, as in of_real).
  static agreed_value of_reals(const char* name, std::span<const double> values) {
    digest d;
    for (const double v : values) d.add(v == 0.0 ? 0.0 : v);
    return {name, d.value(), kind::digest};
  }
  /// How a message shows `v`, the `k`th distinct value of this field.
  [[nodiscard]] std::string show(std::uint64_t v, std::size_t k) const {
    switch (is) {
      case kind::boolean: return v ? "true" : "false";
      case kind::digest: return k == 0 ? "one set" : "another";
      case kind::real: {
        const double real = std::bit_cast<double>(v);
        return std::isnan(real) ? "not given" : detail::shortest(real);
      }
      case kind::integer: break;
    }
    return std::to_string(static_cast<std::int64_t>(v));
  }
};

/// Collective: throws memo::error on every rank (the same message: every
/// rank holds every rank's values) unless every rank of `comm` holds the
/// same `mine` (the same number of values, in the same order, on every
/// rank), naming each value that differs and the ranks holding each.
/// `what` opens the message.
template <Backend B, CommunicatorOf<B> C>
void expect_ranks_agree(B& backend, C& comm, std::span<const agreed_value> mine, std::string_view what) {
  std::vector<std::uint64_t> values;
  for (const auto& v : mine) values.push_back(v.value);
  const std::vector<std::uint64_t> all = gather_host_values(backend, comm, std::span<const std::uint64_t>(values));
  const std::size_t n = mine.size();
  std::string differences;
  for (std::size_t i = 0; i < n; ++i) {
    bool agree = true;
    for (std::size_t at = i; at < all.size(); at += n) agree = agree && all[at] == all[i];
    if (agree) continue;
    differences += std::string(differences.empty() ? "" : "; and ") + mine[i].name + ": " +
                   ranks_holding(all, n, i, [&](std::uint64_t v, std::size_t k) { return mine[i].show(v, k); });
  }
  expects(differences.empty(), [&] { return std::string(what) + ": " + differences; });
}

}  // namespace memo
