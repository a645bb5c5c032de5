// Helpers the pipeline tests share.
#pragma once

#include <string>

#include "memo/core/error.hpp"

namespace memo_test {

/// The what() of the memo::error `action` throws, or "" when it throws none.
template <class Action>
std::string error_of(Action&& action) {
  try {
    action();
  } catch (const memo::error& e) {
    return e.what();
  }
  return "";
}

}  // namespace memo_test
