// memo/backend/thread_communicator.hpp
//
// N ranks as threads of one process over the host backend: the
// communicator memo's tests run sequence-parallel and pipeline code with
// (FPDT/SPPO collectives without a cluster), under ThreadSanitizer.
//
// The ranks of a group share one rendezvous object. A collective posts the
// rank's call there and waits for every rank; each rank then reads the
// others' send buffers, computes its own result into a private block, waits
// until every rank has finished reading (so an in-place all_reduce cannot
// overwrite a buffer another rank still reads), and only then writes its
// recv buffer. Sums are taken in rank order, so every rank computes the
// same bits. The buffers cross threads only through the group's mutex, so a
// missing event between the stream that fills a buffer and the collective
// is a data race ThreadSanitizer reports, not something the group hides.
//
// Guarantees: no hang. Every wait for a rank to arrive is bounded by the
// group's timeout. The wait for the others' reading is not, on purpose: a
// rank that has arrived is copying (a bounded amount of memory), and a rank
// that gave up there could free or overwrite a buffer another still reads.
// A failure is reported on every rank as a `memo::error`, after which the
// group refuses further calls:
//   - ranks whose calls differ (op, element type, element count, a
//     broadcast's root) fail when the last of them arrives, with every
//     rank's call in the message;
//   - a rank whose communicator is destroyed (it threw, or returned early)
//     while others wait for it fails them at once;
//   - a rank that never arrives fails the others after the timeout;
//   - one rank issuing two collectives at once (from two streams) fails.
// `split` is a host call, collective over the group: synchronise the
// streams that use the communicator before it.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "memo/backend/communicator.hpp"
#include "memo/backend/host_backend.hpp"
#include "memo/core/error.hpp"

namespace memo {

namespace detail {

/// Sums `ranks` blocks of `count` elements in rank order into `out`.
template <class T>
void sum_blocks(const std::vector<const T*>& blocks, std::size_t count, T* out) {
  for (std::size_t i = 0; i < count; ++i) {
    T total = blocks[0][i];
    for (std::size_t r = 1; r < blocks.size(); ++r) total += blocks[r][i];
    out[i] = total;
  }
}

/// The rendezvous shared by the ranks of one thread group.
class thread_group {
 public:
  struct posting {
    comm_call call{};
    bool split = false;
    int color = 0;
    int key = 0;
  };
  struct round {
    bool failed = false;                                  // the ranks' calls differed
    std::vector<posting> postings;                        // [rank]
    std::vector<std::shared_ptr<thread_group>> children;  // [rank], split only
    std::vector<int> child_rank;                          // [rank], split only
  };

  thread_group(int size, std::chrono::milliseconds timeout, std::string name)
      : size_(size), timeout_(timeout), name_(std::move(name)), posted_(static_cast<std::size_t>(size)),
        arrived_at_(static_cast<std::size_t>(size), UINT64_MAX), departed_(static_cast<std::size_t>(size), false) {}

  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] std::chrono::milliseconds timeout() const noexcept { return timeout_; }

  void check_usable(int rank) const {
    std::lock_guard lock(mutex_);
    if (broken_) throw error(label(rank) + ": the group failed earlier: " + *broken_);
  }

  /// Posts `mine` and waits until every rank posted; returns every posting.
  std::shared_ptr<const round> arrive(int rank, const posting& mine) {
    std::unique_lock lock(mutex_);
    throw_if_broken(rank);
    const std::uint64_t generation = generation_;
    expects(arrived_at_[static_cast<std::size_t>(rank)] != generation, [&] {
      return label(rank) + ": rank " + std::to_string(rank) +
             " issued two collectives at once (from two streams): order them with an event";
    });
    posted_[static_cast<std::size_t>(rank)] = mine;
    arrived_at_[static_cast<std::size_t>(rank)] = generation;
    if (++arrived_ == size_) {
      arrived_ = 0;
      auto result = std::make_shared<round>();
      result->postings = posted_;
      if (auto mismatch = find_mismatch(result->postings)) {
        broken_ = *mismatch;
        result->failed = true;
      } else if (mine.split) {
        make_children(*result);
      } else {
        readers_ = size_;  // every rank now reads the others' send buffers
      }
      last_ = std::move(result);
      ++generation_;
      changed_.notify_all();
    } else {
      const auto deadline = std::chrono::steady_clock::now() + timeout_;
      while (generation_ == generation && !broken_) {
        if (auto gone = missing_departed(generation)) {
          fail("rank " + std::to_string(*gone) + " left the group (its communicator was destroyed) while rank " +
               std::to_string(rank) + " waited for it in " + describe_call(mine.call));
          break;
        }
        if (changed_.wait_until(lock, deadline) == std::cv_status::timeout && generation_ == generation &&
            !broken_) {
          fail("rank " + std::to_string(rank) + " waited " + std::to_string(timeout_.count()) + " ms in " +
               describe_call(mine.call) + " but rank(s) " + missing(generation) +
               " never joined (a rank threw, returned early, or issues different collectives)");
        }
      }
      if (generation_ == generation) throw_if_broken(rank);
    }
    // A round that completed stands even if the group broke since (another
    // stream's call failed): every rank of it reads the others' buffers and
    // ends its reading (finish_reading), or the others would wait for it
    // forever; the next call reports the failure.
    auto result = last_;
    if (result->failed) throw_if_broken(rank);
    return result;
  }

  /// Ends this rank's reading of the other ranks' send buffers in the
  /// collective that just completed, and waits until every rank has ended
  /// its own: only then may any of them return and free its buffers. No
  /// timeout and no failure ends this wait early (a rank that has passed
  /// `arrive` is reading, a bounded copy, and always gets here); a failure
  /// of the group meanwhile is reported by the next call.
  void finish_reading() noexcept {
    std::unique_lock lock(mutex_);
    if (--readers_ == 0) {
      changed_.notify_all();
      return;
    }
    changed_.wait(lock, [&] { return readers_ == 0; });
  }

  /// Hands `count` elements at `data` to rank `to`; waits until taken.
  void send(int rank, int to, comm_type type, const void* data, std::size_t count) {
    auto entry = post(rank, to, type, data, count);
    wait_taken(rank, to, *entry);
  }

  /// Receives `count` elements from rank `from` into `data`.
  void recv(int rank, int from, comm_type type, void* data, std::size_t count) {
    std::unique_lock lock(mutex_);
    throw_if_broken(rank);
    auto& box = mailbox_[{from, rank}];
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    while (box.empty() && !broken_) {
      if (departed_[static_cast<std::size_t>(from)]) {
        fail("rank " + std::to_string(rank) + " waited in recv from rank " + std::to_string(from) +
             ", which left the group");
        break;
      }
      if (changed_.wait_until(lock, deadline) == std::cv_status::timeout && box.empty() && !broken_) {
        fail("rank " + std::to_string(rank) + " waited " + std::to_string(timeout_.count()) +
             " ms in recv from rank " + std::to_string(from) + ", which never sent");
      }
    }
    throw_if_broken(rank);
    auto entry = box.front();
    box.pop_front();
    if (entry->type != type || entry->count != count) {
      fail("rank " + std::to_string(from) + " sent " + std::to_string(entry->count) + " " +
           to_string(entry->type) + " to rank " + std::to_string(rank) + ", which receives " +
           std::to_string(count) + " " + to_string(type));
      throw_if_broken(rank);
    }
    if (count > 0) std::memcpy(data, entry->data, count * comm_type_bytes(type));
    entry->taken = true;
    changed_.notify_all();
  }

  /// A send to `to` and a receive from `from` at once (a ring step).
  void send_recv(int rank, int to, comm_type type, const void* send_data, std::size_t send_count, int from,
                 void* recv_data, std::size_t recv_count) {
    auto entry = post(rank, to, type, send_data, send_count);
    recv(rank, from, type, recv_data, recv_count);
    wait_taken(rank, to, *entry);
  }

  void depart(int rank) noexcept {
    std::lock_guard lock(mutex_);
    departed_[static_cast<std::size_t>(rank)] = true;
    changed_.notify_all();
  }

  [[nodiscard]] std::string label(int rank) const {
    return "thread_communicator '" + name_ + "' rank " + std::to_string(rank) + "/" + std::to_string(size_);
  }

 private:
  struct mailbox_entry {
    comm_type type;
    std::size_t count;
    const void* data;
    bool taken = false;
  };

  std::shared_ptr<mailbox_entry> post(int rank, int to, comm_type type, const void* data, std::size_t count) {
    std::lock_guard lock(mutex_);
    throw_if_broken(rank);
    auto item = std::make_shared<mailbox_entry>(mailbox_entry{type, count, data});
    mailbox_[{rank, to}].push_back(item);
    changed_.notify_all();
    return item;
  }

  void wait_taken(int rank, int to, const mailbox_entry& item) {
    std::unique_lock lock(mutex_);
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    while (!item.taken && !broken_) {
      if (departed_[static_cast<std::size_t>(to)]) {
        fail("rank " + std::to_string(rank) + " waited in send to rank " + std::to_string(to) +
             ", which left the group");
        break;
      }
      if (changed_.wait_until(lock, deadline) == std::cv_status::timeout && !item.taken && !broken_) {
        fail("rank " + std::to_string(rank) + " waited " + std::to_string(timeout_.count()) +
             " ms in send to rank " + std::to_string(to) + ", which never received");
      }
    }
    if (!item.taken) {
      // The receiver can no longer read the buffer: drop the entry so
      // nothing points at it after this call returns.
      auto& box = mailbox_[{rank, to}];
      std::erase_if(box, [&](const auto& queued) { return queued.get() == &item; });
      throw_if_broken(rank);
    }
  }

  // Mutex held.
  void fail(std::string why) {
    if (!broken_) broken_ = std::move(why);
    changed_.notify_all();
  }
  void throw_if_broken(int rank) const {
    if (broken_) throw error(label(rank) + ": " + *broken_);
  }
  std::optional<int> missing_departed(std::uint64_t generation) const {
    for (int r = 0; r < size_; ++r) {
      if (arrived_at_[static_cast<std::size_t>(r)] != generation && departed_[static_cast<std::size_t>(r)]) return r;
    }
    return std::nullopt;
  }
  std::string missing(std::uint64_t generation) const {
    std::string list;
    for (int r = 0; r < size_; ++r) {
      if (arrived_at_[static_cast<std::size_t>(r)] == generation) continue;
      list += (list.empty() ? "" : ", ") + std::to_string(r);
    }
    return list;
  }

  static std::optional<std::string> find_mismatch(const std::vector<posting>& postings) {
    const auto same = [](const posting& a, const posting& b) {
      if (a.split != b.split) return false;
      if (a.split) return true;
      return a.call.op == b.call.op && a.call.type == b.call.type && a.call.count == b.call.count &&
             a.call.peer == b.call.peer;  // a broadcast's root
    };
    bool all_same = true;
    for (const auto& p : postings) all_same = all_same && same(p, postings.front());
    const comm_call& first = postings.front().call;
    if (all_same && !postings.front().split && first.op == comm_op::broadcast &&
        (first.peer < 0 || static_cast<std::size_t>(first.peer) >= postings.size())) {
      // Only a call built without communicator_ops' check gets here.
      return "every rank issued " + describe_call(first) + ", but the root is not a rank of [0, " +
             std::to_string(postings.size()) + ")";
    }
    if (all_same) return std::nullopt;
    std::vector<std::string> calls;
    for (const auto& p : postings) calls.push_back(p.split ? std::string("split") : describe_call(p.call));
    return different_calls_text(calls);
  }

  void make_children(round& result) const {
    std::map<int, std::vector<std::pair<int, int>>> members;  // color -> (key, rank)
    for (int r = 0; r < size_; ++r) {
      const auto& p = result.postings[static_cast<std::size_t>(r)];
      members[p.color].emplace_back(p.key, r);
    }
    result.children.resize(static_cast<std::size_t>(size_));
    result.child_rank.resize(static_cast<std::size_t>(size_));
    for (auto& [color, list] : members) {
      std::sort(list.begin(), list.end());
      auto child = std::make_shared<thread_group>(static_cast<int>(list.size()), timeout_,
                                                  name_ + "/color " + std::to_string(color));
      for (std::size_t i = 0; i < list.size(); ++i) {
        result.children[static_cast<std::size_t>(list[i].second)] = child;
        result.child_rank[static_cast<std::size_t>(list[i].second)] = static_cast<int>(i);
      }
    }
  }

  int size_;
  std::chrono::milliseconds timeout_;
  std::string name_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::uint64_t generation_ = 0;
  int arrived_ = 0;
  std::vector<posting> posted_;            // [rank]
  std::vector<std::uint64_t> arrived_at_;  // [rank] generation last posted in
  std::vector<bool> departed_;             // [rank]
  std::shared_ptr<const round> last_;
  int readers_ = 0;  // ranks still reading the send buffers of the last collective
  std::optional<std::string> broken_;
  std::map<std::pair<int, int>, std::deque<std::shared_ptr<mailbox_entry>>> mailbox_;  // (from, to)
};

/// One rank's membership; leaving the group when the last handle (or the
/// last task in flight) lets go.
struct thread_rank {
  std::shared_ptr<thread_group> group;
  int rank;
  thread_rank(std::shared_ptr<thread_group> g, int r) : group(std::move(g)), rank(r) {}
  thread_rank(const thread_rank&) = delete;
  thread_rank& operator=(const thread_rank&) = delete;
  ~thread_rank() { group->depart(rank); }

  template <class T>
  void collective(const comm_call& call) const {
    const std::size_t n = call.count;
    const int p = group->size();
    const auto round = group->arrive(rank, {call});
    // Every rank reads the others' send buffers until all are done, even
    // when this one throws (no rank frees or overwrites, in place, a buffer
    // another still reads).
    struct reading {
      thread_group* group;
      void done() noexcept {
        if (group != nullptr) group->finish_reading();
        group = nullptr;
      }
      ~reading() { done(); }
    } reader{group.get()};
    std::vector<const T*> sends;
    sends.reserve(static_cast<std::size_t>(p));
    for (const auto& posted : round->postings) sends.push_back(static_cast<const T*>(posted.call.send));
    std::vector<T> result;
    switch (call.op) {
      case comm_op::all_reduce:
        result.resize(n);
        sum_blocks(sends, n, result.data());
        break;
      case comm_op::all_gather:
        result.resize(n * static_cast<std::size_t>(p));
        for (int r = 0; r < p; ++r) std::copy_n(sends[static_cast<std::size_t>(r)], n, result.data() + n * static_cast<std::size_t>(r));
        break;
      case comm_op::reduce_scatter: {
        std::vector<const T*> blocks;
        for (const T* s : sends) blocks.push_back(s + n * static_cast<std::size_t>(rank));
        result.resize(n);
        sum_blocks(blocks, n, result.data());
        break;
      }
      case comm_op::all_to_all:
        result.resize(n * static_cast<std::size_t>(p));
        for (int r = 0; r < p; ++r) {
          std::copy_n(sends[static_cast<std::size_t>(r)] + n * static_cast<std::size_t>(rank), n,
                      result.data() + n * static_cast<std::size_t>(r));
        }
        break;
      case comm_op::broadcast:
        // Only the root's buffer is read, so the others may write theirs now.
        if (rank != call.peer) std::copy_n(sends[static_cast<std::size_t>(call.peer)], n, static_cast<T*>(call.recv));
        break;
      default: break;  // barrier
    }
    reader.done();
    if (!result.empty()) std::copy(result.begin(), result.end(), static_cast<T*>(call.recv));
  }

  void run(const comm_call& call) const {
    switch (call.op) {
      case comm_op::send: group->send(rank, call.peer, call.type, call.send, call.count); return;
      case comm_op::recv: group->recv(rank, call.peer, call.type, call.recv, call.count); return;
      case comm_op::send_recv:
        group->send_recv(rank, call.peer, call.type, call.send, call.count, call.source, call.recv, call.recv_count);
        return;
      default:
        if (call.type == comm_type::float32) {
          collective<float>(call);
        } else {
          collective<std::int32_t>(call);
        }
    }
  }
};

}  // namespace detail

class thread_communicator : public communicator_ops<thread_communicator, host_backend> {
 public:
  struct options {
    /// Longest wait for the other ranks before every rank fails.
    std::chrono::milliseconds timeout{30000};
    std::string name = "world";
  };

  /// The communicators of a new group of `ranks` ranks, one per rank (move
  /// each into the thread that plays that rank).
  [[nodiscard]] static std::vector<thread_communicator> create_group(int ranks) {
    return create_group(ranks, options{});
  }
  [[nodiscard]] static std::vector<thread_communicator> create_group(int ranks, options config) {
    expects(ranks >= 1, [&] { return "thread_communicator::create_group: ranks must be >= 1, got " + std::to_string(ranks); });
    // Bounded, so that a deadline (now + timeout) is always a time the clock holds.
    expects(config.timeout.count() > 0 && config.timeout.count() <= std::numeric_limits<std::int32_t>::max(), [&] {
      return "thread_communicator::create_group: the timeout must be from 1 to 2147483647 ms (about 24.8 days), "
             "got " + std::to_string(config.timeout.count()) + " ms";
    });
    auto group = std::make_shared<detail::thread_group>(ranks, config.timeout, config.name);
    std::vector<thread_communicator> result;
    result.reserve(static_cast<std::size_t>(ranks));
    for (int r = 0; r < ranks; ++r) result.push_back(thread_communicator(std::make_shared<detail::thread_rank>(group, r), {}));
    return result;
  }

  thread_communicator(thread_communicator&&) noexcept = default;
  thread_communicator& operator=(thread_communicator&&) noexcept = default;
  thread_communicator(const thread_communicator&) = delete;
  thread_communicator& operator=(const thread_communicator&) = delete;

  [[nodiscard]] int rank() const { return state().rank; }
  [[nodiscard]] int size() const { return state().group->size(); }
  [[nodiscard]] std::string describe() const { return state().group->label(state().rank); }

  /// Ranks with one `color` form a group, ordered by (key, rank). A host
  /// call, collective over this communicator (see the header comment).
  [[nodiscard]] thread_communicator split(int color, int key) {
    check_usable();
    detail::thread_group::posting mine;
    mine.split = true;
    mine.color = color;
    mine.key = key;
    const auto round = state().group->arrive(state().rank, mine);
    const auto r = static_cast<std::size_t>(state().rank);
    return thread_communicator(std::make_shared<detail::thread_rank>(round->children[r], round->child_rank[r]),
                               liveness_);
  }

  /// The work an issued call enqueues (runs the call on the calling thread).
  [[nodiscard]] auto task(const comm_call& call) const {
    (void)state();  // a moved-from communicator is an error here, not a null task
    return [rank = state_, call](host_backend::native_stream) { rank->run(call); };
  }

  void check_usable() const {
    expects(parent_.expired() == false || !has_parent_, [&] {
      return describe() + ": this group outlived the communicator it was split from";
    });
    state().group->check_usable(state().rank);
  }

 private:
  thread_communicator(std::shared_ptr<detail::thread_rank> state, detail::comm_liveness_watch parent)
      : state_(std::move(state)), parent_(std::move(parent)), has_parent_(!parent_.expired()) {}
  const detail::thread_rank& state() const {
    expects(state_ != nullptr, "use of a moved-from thread_communicator");
    return *state_;
  }

  std::shared_ptr<detail::thread_rank> state_;
  detail::comm_liveness liveness_ = detail::make_comm_liveness();
  detail::comm_liveness_watch parent_;
  bool has_parent_ = false;
};

static_assert(CommunicatorOf<thread_communicator, host_backend>,
              "thread_communicator must satisfy memo::Communicator over host_backend");

/// Plays a new group of `ranks` ranks on as many threads of this process:
/// `body(communicator)` runs on each thread with its rank's communicator
/// (`communicator.rank()` says which), and this returns once every thread
/// has ended. A rank that throws fails its peers' collectives (the
/// group's guarantees above), so every thread ends; then the ranks'
/// failures are one `memo::error`, each rank's message named ("rank 1:
/// ...; rank 0: ..."), in the order they were caught. A thread that cannot
/// be started counts as its rank's failure; the started ones are still
/// joined. `body` runs on every thread at once.
template <class Body>
void run_thread_group(int ranks, Body&& body, thread_communicator::options config = {}) {
  std::vector<thread_communicator> comms = thread_communicator::create_group(ranks, std::move(config));
  std::mutex mutex;
  std::vector<std::string> failures;  // "rank r: message", in the order they were thrown
  auto fail = [&](int rank, const std::string& message) {
    const std::lock_guard<std::mutex> lock(mutex);
    failures.push_back("rank " + std::to_string(rank) + ": " + message);
  };
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    try {
      threads.emplace_back([&, r, comm = std::move(comms[static_cast<std::size_t>(r)])]() mutable {
        try {
          body(comm);
        } catch (const std::exception& e) {
          fail(r, message_of(e));
        } catch (...) {
          fail(r, "an exception that is not a std::exception");
        }
      });
    } catch (const std::exception& e) {
      // Its communicator went with the closure: the peers' waits for it fail.
      fail(r, std::string("its thread could not start: ") + e.what());
    }
  }
  for (std::thread& t : threads) t.join();
  if (failures.empty()) return;
  std::string text;
  for (const std::string& f : failures) text += (text.empty() ? "" : "; ") + f;
  throw error(text);
}

}  // namespace memo
