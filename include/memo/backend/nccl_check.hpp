// memo/backend/nccl_check.hpp
//
// NCCL status codes become `memo::error`s at the call site, with NCCL's own
// message. Include only with the `memo::nccl` component.
#pragma once

#include <source_location>
#include <string>

#include <nccl.h>

#include "memo/core/error.hpp"

namespace memo {

/// Throws unless `status == ncclSuccess`.
inline void check_nccl(ncclResult_t status, const char* call,
                       std::source_location where = std::source_location::current()) {
  if (status == ncclSuccess) return;
  throw error(std::string(call) + " failed: " + ncclGetErrorString(status), "nccl",
              static_cast<long>(status), where);
}

}  // namespace memo
