// memo/backend/timed_communicator.hpp
//
// A communicator that counts what it does: `timed_communicator<C>` wraps
// any `Communicator` and forwards every call to it, adding up, per wrapped
// communicator and every group split from it, the calls made, the payload
// bytes (comm_payload_bytes) and the seconds its tasks took to run on their
// streams. What those seconds mean depends on the backend: on the host
// backend a task is the whole collective, including the wait for the
// slowest peer (so a rank's total is its time in communication, load
// imbalance included); on a GPU backend the task only enqueues the NCCL
// call, so the seconds are launch overhead and the device timeline (events)
// is the place to look.
//
// The counters are shared by the wrapper, the groups split from it and the
// tasks in flight (a shared_ptr), are updated from the streams' threads and
// read from any thread; read them after synchronising the streams for a
// consistent total. Lifetimes are the wrapped communicator's.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "memo/backend/communicator.hpp"

namespace memo {

/// Totals of a timed communicator (and its groups) since the last reset.
struct communication_totals {
  std::uint64_t calls = 0;
  std::uint64_t payload_bytes = 0;
  double seconds = 0.0;

  /// The totals of two sets of communicators together.
  friend communication_totals operator+(const communication_totals& a, const communication_totals& b) noexcept {
    return {a.calls + b.calls, a.payload_bytes + b.payload_bytes, a.seconds + b.seconds};
  }
};

namespace detail {

struct communication_counters {
  std::atomic<std::uint64_t> calls{0};
  std::atomic<std::uint64_t> payload_bytes{0};
  std::atomic<std::uint64_t> nanoseconds{0};
};

}  // namespace detail

template <Communicator C>
class timed_communicator : public communicator_ops<timed_communicator<C>, typename C::backend_type> {
 public:
  using backend_type = typename C::backend_type;

  /// Wraps `inner` (moved in) with fresh counters.
  explicit timed_communicator(C inner)
      : inner_(std::move(inner)), counters_(std::make_shared<detail::communication_counters>()) {}
  timed_communicator(timed_communicator&&) noexcept = default;
  timed_communicator& operator=(timed_communicator&&) noexcept = default;
  timed_communicator(const timed_communicator&) = delete;
  timed_communicator& operator=(const timed_communicator&) = delete;

  [[nodiscard]] int rank() const { return inner_.rank(); }
  [[nodiscard]] int size() const { return inner_.size(); }
  [[nodiscard]] std::string describe() const { return inner_.describe(); }
  void check_usable() const { inner_.check_usable(); }
  /// The wrapped communicator, for calls that should not be counted.
  [[nodiscard]] C& inner() noexcept { return inner_; }

  /// A group of the wrapped communicator, counting into the same totals.
  [[nodiscard]] timed_communicator split(int color, int key) {
    return timed_communicator(inner_.split(color, key), counters_);
  }

  /// The wrapped task, timed.
  [[nodiscard]] auto task(const comm_call& call) const {
    return [work = inner_.task(call), counters = counters_,
            bytes = comm_payload_bytes(call, inner_.size())](typename backend_type::native_stream native) {
      const auto start = std::chrono::steady_clock::now();
      work(native);
      const auto took = std::chrono::steady_clock::now() - start;
      counters->calls.fetch_add(1, std::memory_order_relaxed);
      counters->payload_bytes.fetch_add(bytes, std::memory_order_relaxed);
      counters->nanoseconds.fetch_add(
          static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(took).count()),
          std::memory_order_relaxed);
    };
  }

  /// The totals so far (of this communicator and every group split from it).
  [[nodiscard]] communication_totals totals() const {
    return {counters_->calls.load(), counters_->payload_bytes.load(),
            static_cast<double>(counters_->nanoseconds.load()) * 1e-9};
  }
  void reset_totals() {
    counters_->calls = 0;
    counters_->payload_bytes = 0;
    counters_->nanoseconds = 0;
  }

 private:
  timed_communicator(C inner, std::shared_ptr<detail::communication_counters> counters)
      : inner_(std::move(inner)), counters_(std::move(counters)) {}

  C inner_;
  std::shared_ptr<detail::communication_counters> counters_;
};

}  // namespace memo
