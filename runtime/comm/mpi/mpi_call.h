// SLUICE_TRY_MPI: the MPI member of the foreign-call macro family (runtime/foreign_call.h).
// Communicators and windows use MPI_ERRORS_RETURN, so failures come back as codes.
#pragma once

// Sluice uses MPI's C API only; the deprecated C++ bindings would need libmpi_cxx.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <string>

#include "runtime/foreign_call.h"

namespace sluice::mpi {

// MPI_Error_string of `code`, e.g. "MPI_ERR_TRUNCATE: message truncated".
inline std::string MpiErrorText(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) {
    return "MPI error " + std::to_string(code);
  }
  return std::string(text, static_cast<size_t>(length));
}

}  // namespace sluice::mpi

#define SLUICE_TRY_MPI(call)                                                             \
  SLUICE_FOREIGN_CALL("MPI", call, #call, sluice_mpi_rc_, sluice_mpi_rc_ != MPI_SUCCESS, \
                      ::sluice::mpi::MpiErrorText(sluice_mpi_rc_))
