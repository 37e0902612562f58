// One macro family for calls into foreign APIs. Each names the failed call (its source text),
// the library's own error text, and the file and line:
//
//   SLUICE_TRY_SYS(fd = open(path, O_RDONLY));   // -1 + errno        -> Status from the function
//   SLUICE_TRY_URING(io_uring_submit(&ring));    // negative errno    -> Status
//   SLUICE_CHECK_SYS(pthread_...)                // same tests, but abort: for invariants
//
// Library-specific members live beside their backend so the core does not include their headers:
// SLUICE_TRY_MPI (runtime/comm/mpi/mpi_call.h), SLUICE_TRY_CUDA / SLUICE_TRY_NCCL /
// SLUICE_TRY_CUBLAS (runtime/device/cuda/cuda_call.h), SLUICE_TRY_HWLOC (runtime/topology.h).
// They are all built on SLUICE_FOREIGN_CALL below.
#pragma once

#include <cerrno>
#include <cstring>
#include <string>

#include "runtime/status.h"

namespace sluice::internal {

std::string ErrnoText(int err);  // "No space left on device (ENOSPC)"

Status ForeignCallError(const char* library, const char* call, const std::string& error,
                        const char* file, int line);

}  // namespace sluice::internal

// Evaluates `call` once into `result_var`; when `failed` (an expression over result_var) holds,
// returns a Status naming library, call and `error_text` (an expression giving a std::string).
// Each wrapper passes `#call` as call_text itself: a macro argument forwarded to another macro is
// expanded first, which would print O_CREAT as 0100.
#define SLUICE_FOREIGN_CALL(library, call, call_text, result_var, failed, error_text) \
  do {                                                                               \
    auto result_var = (call);                                                        \
    if (failed) {                                                                    \
      return ::sluice::internal::ForeignCallError(library, call_text, (error_text),  \
                                                  __FILE__, __LINE__);               \
    }                                                                                \
  } while (0)

#define SLUICE_FOREIGN_CHECK(library, call, call_text, result_var, failed, error_text) \
  do {                                                                                \
    auto result_var = (call);                                                         \
    if (failed) {                                                                     \
      SLUICE_CHECK(false) << ::sluice::internal::ForeignCallError(                    \
                                 library, call_text, (error_text), __FILE__, __LINE__) \
                                 .message();                                          \
    }                                                                                 \
  } while (0)

#define SLUICE_TRY_SYS(call)                                               \
  SLUICE_FOREIGN_CALL("syscall", call, #call, sluice_rc_, sluice_rc_ == -1,      \
                      ::sluice::internal::ErrnoText(errno))
#define SLUICE_CHECK_SYS(call)                                             \
  SLUICE_FOREIGN_CHECK("syscall", call, #call, sluice_rc_, sluice_rc_ == -1,     \
                       ::sluice::internal::ErrnoText(errno))
// pthread_* and posix_* calls return the error number instead of setting errno.
#define SLUICE_TRY_POSIX(call)                                             \
  SLUICE_FOREIGN_CALL("posix", call, #call, sluice_rc_, sluice_rc_ != 0,         \
                      ::sluice::internal::ErrnoText(sluice_rc_))
#define SLUICE_TRY_URING(call)                                             \
  SLUICE_FOREIGN_CALL("liburing", call, #call, sluice_rc_, sluice_rc_ < 0,       \
                      ::sluice::internal::ErrnoText(-sluice_rc_))
#define SLUICE_CHECK_URING(call)                                           \
  SLUICE_FOREIGN_CHECK("liburing", call, #call, sluice_rc_, sluice_rc_ < 0,      \
                       ::sluice::internal::ErrnoText(-sluice_rc_))
