// The semantics every Communicator must have (communicator.hpp), written
// once as per-rank bodies: each rank runs the same body on its own
// communicator, computes the expected result of every collective naively
// from the inputs all ranks are known to hold, and records what differs.
// The thread tests run the bodies on N threads and the MPI test on N
// processes; both then assert that no rank recorded a problem.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "memo/backend/buffer.hpp"
#include "memo/backend/communicator.hpp"
#include "memo/backend/host_backend.hpp"
#include "memo/core/error.hpp"

namespace memo_test {

/// What one rank found wrong.
struct rank_report {
  int rank = 0;
  std::vector<std::string> problems;
  void expect(bool ok, const std::string& what) {
    if (!ok) problems.push_back("rank " + std::to_string(rank) + ": " + what);
  }
};

/// The value rank `r` holds at element `i` of input `salt`: small integers,
/// so sums of a few ranks are exact in float.
template <class T>
T input_value(int r, std::size_t i, int salt) {
  return static_cast<T>((r + 1) * 100 + static_cast<int>(i % 89) + salt * 7);
}

template <class T>
using device_vector = memo::buffer<T, memo::host_memory_resource>;

template <class T>
device_vector<T> filled(memo::host_backend& backend, std::size_t n, int r, int salt) {
  device_vector<T> v(backend.device_memory(), n);
  for (std::size_t i = 0; i < n; ++i) v.data()[i] = input_value<T>(r, i, salt);
  return v;
}

template <class T>
device_vector<T> zeros(memo::host_backend& backend, std::size_t n) {
  device_vector<T> v(backend.device_memory(), n);
  for (std::size_t i = 0; i < n; ++i) v.data()[i] = T(-1);
  return v;
}

template <class T, class C>
void check_all_reduce(C& comm, memo::host_backend& backend, rank_report& report, std::size_t n, bool in_place) {
  const int p = comm.size();
  auto stream = backend.make_stream("all_reduce");
  auto send = filled<T>(backend, n, comm.rank(), 1);
  auto recv = in_place ? device_vector<T>{} : zeros<T>(backend, n);
  T* out = in_place ? send.data() : recv.data();
  comm.all_reduce(backend, stream, std::span<const T>(send.data(), n), std::span<T>(out, n));
  backend.synchronize(stream);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) {
    T expected = 0;
    for (int r = 0; r < p; ++r) expected += input_value<T>(r, i, 1);
    wrong += out[i] != expected ? 1 : 0;
  }
  report.expect(wrong == 0, "all_reduce of " + std::to_string(n) + (in_place ? " in place" : "") + ": " +
                                std::to_string(wrong) + " wrong elements");
}

template <class T, class C>
void check_all_gather(C& comm, memo::host_backend& backend, rank_report& report, std::size_t n) {
  const int p = comm.size();
  auto stream = backend.make_stream("all_gather");
  auto send = filled<T>(backend, n, comm.rank(), 2);
  auto recv = zeros<T>(backend, n * static_cast<std::size_t>(p));
  comm.all_gather(backend, stream, std::span<const T>(send.span()), recv.span());
  backend.synchronize(stream);
  std::size_t wrong = 0;
  for (int r = 0; r < p; ++r) {
    for (std::size_t i = 0; i < n; ++i) wrong += recv.data()[static_cast<std::size_t>(r) * n + i] != input_value<T>(r, i, 2);
  }
  report.expect(wrong == 0, "all_gather of " + std::to_string(n) + ": " + std::to_string(wrong) + " wrong elements");
}

template <class T, class C>
void check_reduce_scatter(C& comm, memo::host_backend& backend, rank_report& report, std::size_t n) {
  const int p = comm.size();
  const auto me = static_cast<std::size_t>(comm.rank());
  auto stream = backend.make_stream("reduce_scatter");
  auto send = filled<T>(backend, n * static_cast<std::size_t>(p), comm.rank(), 3);
  auto recv = zeros<T>(backend, n);
  comm.reduce_scatter(backend, stream, std::span<const T>(send.span()), recv.span());
  backend.synchronize(stream);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) {
    T expected = 0;
    for (int r = 0; r < p; ++r) expected += input_value<T>(r, me * n + i, 3);
    wrong += recv.data()[i] != expected;
  }
  report.expect(wrong == 0, "reduce_scatter of " + std::to_string(n) + ": " + std::to_string(wrong) + " wrong elements");
}

template <class T, class C>
void check_all_to_all(C& comm, memo::host_backend& backend, rank_report& report, std::size_t n) {
  const int p = comm.size();
  const auto me = static_cast<std::size_t>(comm.rank());
  auto stream = backend.make_stream("all_to_all");
  auto send = filled<T>(backend, n * static_cast<std::size_t>(p), comm.rank(), 4);
  auto recv = zeros<T>(backend, n * static_cast<std::size_t>(p));
  comm.all_to_all(backend, stream, std::span<const T>(send.span()), recv.span());
  backend.synchronize(stream);
  std::size_t wrong = 0;
  for (int r = 0; r < p; ++r) {
    for (std::size_t i = 0; i < n; ++i) {
      wrong += recv.data()[static_cast<std::size_t>(r) * n + i] != input_value<T>(r, me * n + i, 4);
    }
  }
  report.expect(wrong == 0, "all_to_all of " + std::to_string(n) + ": " + std::to_string(wrong) + " wrong elements");
}

/// Every rank's root in turn: the root's data lands on every other rank,
/// in place, and the root's own data is left as it was.
template <class T, class C>
void check_broadcast(C& comm, memo::host_backend& backend, rank_report& report, std::size_t n) {
  const int p = comm.size();
  auto stream = backend.make_stream("broadcast");
  for (int root = 0; root < p; ++root) {
    auto data = filled<T>(backend, n, comm.rank(), 5 + root);
    comm.broadcast(backend, stream, data.span(), root);
    backend.synchronize(stream);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) wrong += data.data()[i] != input_value<T>(root, i, 5 + root);
    report.expect(wrong == 0, "broadcast of " + std::to_string(n) + " from root " + std::to_string(root) + ": " +
                                  std::to_string(wrong) + " wrong elements");
  }
}

/// A ring: every rank passes its block to the next and receives the
/// previous one's, first with send_recv on one stream, then with send and
/// recv on two streams of the rank.
template <class C>
void check_ring(C& comm, memo::host_backend& backend, rank_report& report, std::size_t n) {
  const int p = comm.size();
  if (p == 1) return;
  const int next = (comm.rank() + 1) % p;
  const int previous = (comm.rank() + p - 1) % p;
  auto send = filled<float>(backend, n, comm.rank(), 5);
  auto recv = zeros<float>(backend, n);
  auto stream = backend.make_stream("ring");
  comm.send_recv(backend, stream, std::span<const float>(send.span()), next, recv.span(), previous);
  backend.synchronize(stream);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) wrong += recv.data()[i] != input_value<float>(previous, i, 5);
  report.expect(wrong == 0, "send_recv ring of " + std::to_string(n) + ": " + std::to_string(wrong) + " wrong elements");

  auto recv_stream = backend.make_stream("ring recv");
  auto again = zeros<float>(backend, n);
  comm.send(backend, stream, std::span<const float>(send.span()), next);
  comm.recv(backend, recv_stream, again.span(), previous);
  backend.synchronize(stream);
  backend.synchronize(recv_stream);
  wrong = 0;
  for (std::size_t i = 0; i < n; ++i) wrong += again.data()[i] != input_value<float>(previous, i, 5);
  report.expect(wrong == 0, "send/recv ring on two streams of " + std::to_string(n) + ": " + std::to_string(wrong) +
                                " wrong elements");
}

/// A collective is stream work: it sees what earlier work on another
/// stream wrote once an event orders the two, and later work sees its result.
template <class C>
void check_stream_order(C& comm, memo::host_backend& backend, rank_report& report) {
  const std::size_t n = 37;
  const int p = comm.size();
  auto producer = backend.make_stream("producer");
  auto comm_stream = backend.make_stream("collective");
  auto data = zeros<float>(backend, n);
  auto doubled = zeros<float>(backend, n);
  float* values = data.data();
  float* twice = doubled.data();
  const int me = comm.rank();
  backend.parallel_for(producer, memo::extent_1d{n}, [values, me](std::size_t i) { values[i] = float(me + 1) * float(i); });
  auto ready = backend.make_event();
  backend.record(ready, producer);
  backend.wait(comm_stream, ready);
  comm.all_reduce(backend, comm_stream, std::span<const float>(values, n), std::span<float>(values, n));
  backend.parallel_for(comm_stream, memo::extent_1d{n}, [values, twice](std::size_t i) { twice[i] = 2.0f * values[i]; });
  backend.synchronize(comm_stream);
  const float rank_sum = float(p) * float(p + 1) / 2.0f;
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) wrong += twice[i] != 2.0f * rank_sum * float(i);
  report.expect(wrong == 0, "all_reduce ordered by events: " + std::to_string(wrong) + " wrong elements");
}

template <class C>
void check_barrier(C& comm, memo::host_backend& backend, rank_report& report) {
  auto stream = backend.make_stream("barrier");
  comm.barrier(backend, stream);
  comm.barrier(backend, stream);
  bool ok = true;
  try {
    backend.synchronize(stream);
  } catch (const std::exception& e) {
    ok = false;
    report.expect(false, std::string("barrier failed: ") + e.what());
  }
  report.expect(ok, "barrier");
}

/// Splits into sequence-parallel groups (ranks with one parity, reversed
/// by key) and pipeline pairs (ranks 2k, 2k+1), and checks rank, size and
/// an all_reduce inside each.
template <class C>
void check_split(C& comm, memo::host_backend& backend, rank_report& report) {
  const int p = comm.size();
  const int me = comm.rank();
  {
    C parity = comm.split(me % 2, -me);
    std::vector<int> members;  // parent ranks of my group, by key = -rank
    for (int r = p - 1; r >= 0; --r) {
      if (r % 2 == me % 2) members.push_back(r);
    }
    int expected_rank = 0;
    while (members[static_cast<std::size_t>(expected_rank)] != me) ++expected_rank;
    report.expect(parity.size() == static_cast<int>(members.size()),
                  "split by parity: size " + std::to_string(parity.size()) + ", expected " + std::to_string(members.size()));
    report.expect(parity.rank() == expected_rank, "split by parity: rank " + std::to_string(parity.rank()) +
                                                      ", expected " + std::to_string(expected_rank));
    const std::size_t n = 13;
    auto stream = backend.make_stream("split");
    auto send = filled<std::int32_t>(backend, n, me, 6);
    auto recv = zeros<std::int32_t>(backend, n);
    parity.all_reduce(backend, stream, std::span<const std::int32_t>(send.span()), recv.span());
    auto gathered = zeros<std::int32_t>(backend, members.size());
    const std::int32_t mine = me;
    auto own = filled<std::int32_t>(backend, 1, 0, 0);
    own.data()[0] = mine;
    parity.all_gather(backend, stream, std::span<const std::int32_t>(own.span()), gathered.span());
    backend.synchronize(stream);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) {
      std::int32_t expected = 0;
      for (const int r : members) expected += input_value<std::int32_t>(r, i, 6);
      wrong += recv.data()[i] != expected;
    }
    for (std::size_t k = 0; k < members.size(); ++k) wrong += gathered.data()[k] != members[k];
    report.expect(wrong == 0, "all_reduce/all_gather in a parity group: " + std::to_string(wrong) + " wrong elements");
  }
  {
    C pair = comm.split(me / 2, me);
    const int expected_size = (me / 2) * 2 + 1 < p ? 2 : 1;
    report.expect(pair.size() == expected_size && pair.rank() == me % 2,
                  "pipeline pair: rank " + std::to_string(pair.rank()) + " of " + std::to_string(pair.size()));
    if (pair.size() == 2) {
      auto stream = backend.make_stream("pair");
      auto send = filled<float>(backend, 5, me, 7);
      auto recv = zeros<float>(backend, 5);
      pair.send_recv(backend, stream, std::span<const float>(send.span()), 1 - pair.rank(), recv.span(), 1 - pair.rank());
      backend.synchronize(stream);
      const int partner = me ^ 1;
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < 5; ++i) wrong += recv.data()[i] != input_value<float>(partner, i, 7);
      report.expect(wrong == 0, "send_recv in a pipeline pair: " + std::to_string(wrong) + " wrong elements");
    }
  }
}

/// Calls whose shapes are wrong are refused where they are issued, on the
/// calling rank alone (nothing is enqueued, so no other rank is involved).
template <class C>
void check_refused_calls(C& comm, memo::host_backend& backend, rank_report& report) {
  const int p = comm.size();
  auto stream = backend.make_stream("refused");
  auto a = zeros<float>(backend, 6);
  auto b = zeros<float>(backend, 6 * static_cast<std::size_t>(p) + 1);
  const auto refused = [&](auto&& call, const char* what) {
    bool thrown = false;
    try {
      call();
    } catch (const memo::error&) {
      thrown = true;
    }
    report.expect(thrown, std::string(what) + " was not refused");
  };
  refused([&] { comm.all_reduce(backend, stream, std::span<const float>(a.data(), 6), std::span<float>(b.data(), 5)); },
          "all_reduce with recv smaller than send");
  refused([&] { comm.all_gather(backend, stream, std::span<const float>(a.data(), 6), b.span()); },
          "all_gather with recv not size() * send");
  refused([&] { comm.reduce_scatter(backend, stream, b.span(), std::span<float>(a.data(), 6)); },
          "reduce_scatter with send not size() * recv");
  refused([&] { comm.send(backend, stream, std::span<const float>(a.span()), p); }, "send to rank size()");
  refused([&] { comm.recv(backend, stream, a.span(), -1); }, "recv from rank -1");
  refused([&] { comm.broadcast(backend, stream, a.span(), p); }, "broadcast from root size()");
  refused([&] { comm.broadcast(backend, stream, a.span(), -1); }, "broadcast from root -1");
  refused([&] { comm.send(backend, stream, std::span<const float>(a.span()), comm.rank()); }, "send to itself");
  refused([&] { comm.all_to_all(backend, stream, std::span<const float>(a.data(), 6), std::span<float>(a.data(), 6)); },
          "all_to_all in place");
  backend.synchronize(stream);
}

/// A group split from a communicator that is gone refuses to issue.
template <class C>
void check_group_outliving_parent(C& comm, memo::host_backend& backend, rank_report& report) {
  auto stream = backend.make_stream("orphan");
  std::optional<C> child;
  {
    C parent = comm.split(0, comm.rank());
    child.emplace(parent.split(0, parent.rank()));
  }
  auto a = zeros<float>(backend, 3);
  bool thrown = false;
  try {
    child->all_reduce(backend, stream, std::span<const float>(a.span()), a.span());
  } catch (const memo::error& e) {
    thrown = std::string(e.what()).find("outlived") != std::string::npos;
  }
  report.expect(thrown, "a group whose parent was destroyed still issued work");
  backend.synchronize(stream);
}

/// gather_host_values: rank r's values (r + 1) x 2^32 + k, 2^64 - 1 - r and
/// 0, for k = 0..n-1 of a few, land at block r on every rank, whole: both
/// 32-bit halves and the top bit.
template <class C>
void check_gather_host_values(C& comm, memo::host_backend& backend, rank_report& report) {
  auto value = [](std::uint64_t r, std::uint64_t k) {
    return k == 0 ? 0 : k == 1 ? ~std::uint64_t{0} - r : ((r + 1) << 32) + k;
  };
  const std::size_t n = 5;
  std::vector<std::uint64_t> mine(n);
  for (std::size_t k = 0; k < n; ++k) mine[k] = value(static_cast<std::uint64_t>(comm.rank()), k);
  const std::vector<std::uint64_t> all = memo::gather_host_values(backend, comm, std::span<const std::uint64_t>(mine));
  report.expect(memo::gather_host_values(backend, comm, std::span<const std::uint64_t>()).empty(),
                "gather_host_values of nothing gave values");
  report.expect(all.size() == n * static_cast<std::size_t>(comm.size()), "gather_host_values: " +
                                                                              std::to_string(all.size()) + " values");
  for (std::size_t r = 0; r < static_cast<std::size_t>(comm.size()) && all.size() == n * static_cast<std::size_t>(comm.size()); ++r) {
    for (std::size_t k = 0; k < n; ++k) {
      report.expect(all[r * n + k] == value(r, k), "gather_host_values: rank " + std::to_string(r) + " value " +
                                                       std::to_string(k) + " is " + std::to_string(all[r * n + k]));
    }
  }
}

/// Everything above, in one order every rank follows.
template <class C>
rank_report run_conformance(C& comm, memo::host_backend& backend) {
  rank_report report;
  report.rank = comm.rank();
  try {
    for (const std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{1001}}) {
      check_all_reduce<float>(comm, backend, report, n, false);
      check_all_reduce<std::int32_t>(comm, backend, report, n, false);
      check_all_reduce<float>(comm, backend, report, n, true);
      check_all_gather<float>(comm, backend, report, n);
      check_reduce_scatter<float>(comm, backend, report, n);
      check_reduce_scatter<std::int32_t>(comm, backend, report, n);
      check_all_to_all<float>(comm, backend, report, n);
      check_all_to_all<std::int32_t>(comm, backend, report, n);
      check_ring(comm, backend, report, n);
      check_broadcast<float>(comm, backend, report, n);
      check_broadcast<std::int32_t>(comm, backend, report, n);
    }
    check_broadcast<float>(comm, backend, report, 0);
    check_all_reduce<float>(comm, backend, report, 0, false);
    check_all_gather<float>(comm, backend, report, 0);
    check_stream_order(comm, backend, report);
    check_barrier(comm, backend, report);
    check_gather_host_values(comm, backend, report);
    check_split(comm, backend, report);
    check_refused_calls(comm, backend, report);
    check_group_outliving_parent(comm, backend, report);
  } catch (const std::exception& e) {
    report.expect(false, std::string("unexpected exception: ") + e.what());
  }
  return report;
}

}  // namespace memo_test
