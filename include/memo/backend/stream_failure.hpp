// memo/backend/stream_failure.hpp
//
// An exception raised by work running on a stream, carried to whichever
// thread synchronises with that stream.
//
// The failure is transported by value, not as a shared std::exception_ptr:
// the exception object behind an exception_ptr is reference-counted inside
// the (uninstrumented) C++ runtime, so sharing one across threads looks like
// a data race to ThreadSanitizer, and the host backend's tests must run clean
// under it. Each `raise()` throws a fresh exception built from the captured
// value: a `memo::error` keeps its message, location and status code, a
// `std::bad_alloc` stays one, any other `std::exception` arrives as a
// `std::runtime_error` with the same `what()`. Only exceptions that are not
// `std::exception`s travel as the original object.
#pragma once

#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <source_location>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "memo/core/error.hpp"

namespace memo::detail {

class stream_failure {
 public:
  /// Captures the exception being handled; call only inside a catch block.
  static std::shared_ptr<const stream_failure> capture_current() {
    auto failure = std::make_shared<stream_failure>();
    try {
      throw;
    } catch (const memo::error& e) {
      failure->kind_ = kind::memo_error;
      failure->message_ = e.message();
      failure->where_ = e.where();
      failure->domain_ = e.domain();
      failure->status_ = e.status();
    } catch (const std::bad_alloc&) {
      failure->kind_ = kind::bad_alloc;
    } catch (const std::exception& e) {
      failure->kind_ = kind::standard;
      failure->message_ = e.what();
    } catch (...) {
      failure->kind_ = kind::other;
      failure->original_ = std::current_exception();
    }
    return failure;
  }

  /// Throws a fresh exception equivalent to the captured one.
  [[noreturn]] void raise() const {
    switch (kind_) {
      case kind::memo_error:
        if (status_) throw memo::error(message_, domain_, *status_, where_);
        throw memo::error(message_, where_);
      case kind::bad_alloc: throw std::bad_alloc();
      case kind::standard: throw std::runtime_error(message_);
      case kind::other: std::rethrow_exception(original_);
    }
    throw std::logic_error("memo: unknown stream failure kind");
  }

 private:
  enum class kind { memo_error, bad_alloc, standard, other };
  kind kind_ = kind::standard;
  std::string message_;
  std::source_location where_;
  std::string_view domain_;
  std::optional<long> status_;
  std::exception_ptr original_;
};

using stream_failure_ptr = std::shared_ptr<const stream_failure>;

/// Where the failures of streams destroyed before anyone synchronised them
/// go, so that the backend's next `synchronize()` reports them instead of
/// losing them. Shared by a backend and its streams so either may go first.
struct stream_failure_sink {
  std::mutex mutex;
  std::vector<stream_failure_ptr> orphans;

  void add(stream_failure_ptr failure) {
    if (!failure) return;
    std::lock_guard lock(mutex);
    orphans.push_back(std::move(failure));
  }
  /// The first orphaned failure, if any; forgets all of them.
  stream_failure_ptr take_first() {
    std::lock_guard lock(mutex);
    stream_failure_ptr first = orphans.empty() ? nullptr : orphans.front();
    orphans.clear();
    return first;
  }
};

}  // namespace memo::detail
