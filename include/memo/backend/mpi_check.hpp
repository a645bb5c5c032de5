// memo/backend/mpi_check.hpp
//
// MPI return codes become `memo::error`s at the call site, with the MPI
// library's own error string. Include only with the `memo::mpi` component.
// memo's MPI calls are made with MPI_ERRORS_RETURN installed on the
// communicators it creates, so errors come back here instead of aborting.
#pragma once

#include <source_location>
#include <string>

// memo uses MPI's C API only; the deprecated C++ bindings would drag in
// names that clash with other libraries' macros.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include "memo/core/error.hpp"

namespace memo {

/// Throws unless `status == MPI_SUCCESS`.
inline void check_mpi(int status, const char* call,
                      std::source_location where = std::source_location::current()) {
  if (status == MPI_SUCCESS) return;
  // MPI_Error_string is only allowed between MPI_Init and MPI_Finalize
  // (Open MPI aborts the process otherwise); the two queries are allowed
  // at any time.
  int initialized = 0;
  int finalized = 0;
  (void)MPI_Initialized(&initialized);
  (void)MPI_Finalized(&finalized);
  std::string reason = "MPI error code " + std::to_string(status);
  if (initialized != 0 && finalized == 0) {
    char text[MPI_MAX_ERROR_STRING] = {};
    int length = 0;
    if (MPI_Error_string(status, text, &length) == MPI_SUCCESS && length > 0) {
      reason = std::string(text, static_cast<std::size_t>(length));
    }
  } else {
    reason += " (MPI is not initialised, so its error string is unavailable)";
  }
  throw error(std::string(call) + " failed: " + reason, "mpi", static_cast<long>(status), where);
}

}  // namespace memo
