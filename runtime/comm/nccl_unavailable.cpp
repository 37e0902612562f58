// Built instead of runtime/comm/nccl/ when CMake found no nvcc or no NCCL.
#include "runtime/comm/comm_factory.h"

namespace sluice {
namespace {

Status NcclUnavailable() {
  return UnavailableError(
      "the NCCL backend is not part of this build: CMake found no CUDA compiler or no NCCL. "
      "Install the CUDA toolkit and NCCL (nvcc under /usr/local/cuda or on PATH, nccl.h and "
      "libnccl), reconfigure with -DSLUICE_ENABLE_CUDA=ON and rebuild; or use the MPI backend");
}

}  // namespace

Result<std::unique_ptr<Comm>> CreateNcclComm(std::unique_ptr<Comm>, int, void*) {
  return NcclUnavailable();
}

namespace internal {
Result<std::unique_ptr<Comm>> CreateNcclWorldComm(const CommOptions&) { return NcclUnavailable(); }
}  // namespace internal

}  // namespace sluice
