#include "runtime/comm/comm_factory.h"

#include "runtime/comm/mpi/mpi_comm.h"

namespace sluice {

std::string_view CommBackendName(CommBackend backend) {
  return backend == CommBackend::kNccl ? "nccl" : "mpi";
}

Result<CommBackend> ParseCommBackend(std::string_view name) {
  if (name == "mpi") return CommBackend::kMpi;
  if (name == "nccl") return CommBackend::kNccl;
  return InvalidArgumentError("unknown communication backend '{}': expected 'mpi' or 'nccl'", name);
}

Result<std::unique_ptr<Comm>> CreateWorldComm(const CommOptions& options) {
  if (options.backend == CommBackend::kNccl) return internal::CreateNcclWorldComm(options);
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<mpi::MpiComm> world,
                          mpi::CreateMpiWorld(options.timeout_seconds));
  return std::unique_ptr<Comm>(std::move(world));
}

}  // namespace sluice
