// memo/backend/unique_task.hpp
//
// A move-only `void()` callable: what a stream runs. `std::function` needs a
// copyable target, so a task that owns something (a unique_ptr to the
// buffer it fills, a promise) could not be enqueued; this wrapper only
// needs the callable to be movable. Both backends queue their host work as
// `unique_task`s (the host worker's FIFO, CUDA's host-function path).
#pragma once

#include <concepts>
#include <memory>
#include <type_traits>
#include <utility>

namespace memo::detail {

class unique_task {
 public:
  unique_task() = default;
  template <class F>
    requires(!std::same_as<std::remove_cvref_t<F>, unique_task> &&
             std::move_constructible<std::remove_cvref_t<F>> &&
             std::invocable<std::remove_cvref_t<F>&>)
  unique_task(F&& fn)  // NOLINT(google-explicit-constructor): a task is its callable
      : callable_(std::make_unique<model<std::remove_cvref_t<F>>>(std::forward<F>(fn))) {}

  unique_task(unique_task&&) noexcept = default;
  unique_task& operator=(unique_task&&) noexcept = default;
  unique_task(const unique_task&) = delete;
  unique_task& operator=(const unique_task&) = delete;

  explicit operator bool() const noexcept { return callable_ != nullptr; }
  void operator()() { callable_->call(); }

 private:
  struct concept_base {
    virtual ~concept_base() = default;
    virtual void call() = 0;
  };
  template <class F>
  struct model final : concept_base {
    explicit model(F&& f) : fn(std::move(f)) {}
    explicit model(const F& f) : fn(f) {}
    void call() override { fn(); }
    F fn;
  };
  std::unique_ptr<concept_base> callable_;
};

}  // namespace memo::detail
