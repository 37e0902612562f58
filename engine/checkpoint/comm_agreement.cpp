#include "engine/checkpoint/comm_agreement.h"

#include <fmt/format.h>

#include <cstring>
#include <random>

namespace sluice::checkpoint {

AgreeFn CommAgreeFn(Comm& comm) {
  return [&comm](bool local_ok) -> Result<bool> {
    float failed = local_ok ? 0.0f : 1.0f;
    SLUICE_RETURN_IF_ERROR(comm.AllReduce(&failed, 1, DType::kF32, ReduceOp::kSum)
                               .WithContext("agreeing on a checkpoint save"));
    return failed == 0.0f;
  };
}

Result<std::string> AgreeOnAttemptTag(Comm& comm) {
  // The tag travels as the raw bits of two fp32 words: a broadcast copies bytes unchanged.
  uint64_t tag = 0;
  if (comm.rank() == 0) {
    std::random_device device;
    tag = (static_cast<uint64_t>(device()) << 32) | device();
  }
  float words[2];
  std::memcpy(words, &tag, sizeof(tag));
  SLUICE_RETURN_IF_ERROR(comm.Broadcast(words, 2, DType::kF32, /*root=*/0)
                             .WithContext("agreeing on a checkpoint attempt tag"));
  std::memcpy(&tag, words, sizeof(tag));
  return fmt::format("{:016x}", tag);
}

}  // namespace sluice::checkpoint
