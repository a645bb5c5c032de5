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
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(status, text, &length) != MPI_SUCCESS) length = 0;
  throw error(std::string(call) + " failed: " + std::string(text, static_cast<std::size_t>(length)),
              "mpi", static_cast<long>(status), where);
}

}  // namespace memo
