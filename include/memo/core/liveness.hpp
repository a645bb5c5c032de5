// memo/core/liveness.hpp
//
// How an object that depends on another, without owning it, finds out
// that the other is gone: the owner holds a liveness token, each dependent
// a watch of it, and a dependent checks its watch before touching the
// owner, so a use after the owner's end is a memo::error naming both
// rather than a use of freed memory. (A group split from a communicator
// watches its parent; an attention built over a shared scratch watches
// the scratch.) Not a lock: it catches the owner being destroyed first in
// one thread, not an owner destroyed concurrently with a use.
#pragma once

#include <concepts>
#include <memory>
#include <optional>

namespace memo {

/// What an owner holds; destroyed with it.
using liveness_token = std::shared_ptr<const int>;
/// What a dependent holds: expired() once the owner's token is destroyed.
using liveness_watch = std::weak_ptr<const int>;

inline liveness_token make_liveness_token() { return std::make_shared<const int>(0); }

/// A watch of `owner` when it keeps a liveness token (has `watch()`);
/// nothing for an owner that does not, whose lifetime stays the caller's rule.
template <class Owner>
std::optional<liveness_watch> watch_if_kept(const Owner& owner) {
  if constexpr (requires { { owner.watch() } -> std::convertible_to<liveness_watch>; }) {
    return owner.watch();
  } else {
    return std::nullopt;
  }
}

/// True when `watch` watched an owner that is gone.
inline bool owner_gone(const std::optional<liveness_watch>& watch) noexcept {
  return watch.has_value() && watch->expired();
}

}  // namespace memo
