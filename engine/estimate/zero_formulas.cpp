#include "engine/estimate/zero_formulas.h"

#include "runtime/check.h"
#include "runtime/comm.h"

namespace sluice::estimate {

int64_t MaxShardElements(int64_t elements, int world) {
  SLUICE_CHECK_GE(world, 1);
  return static_cast<int64_t>(ShardRange(static_cast<size_t>(elements), world, 0).count);
}

int64_t LastShardElements(int64_t elements, int world) {
  SLUICE_CHECK_GE(world, 1);
  return static_cast<int64_t>(ShardRange(static_cast<size_t>(elements), world, world - 1).count);
}

ModelStateBytes ZeroModelStateBytes(int64_t parameters, int world, int stage,
                                    const BytesPerElement& bytes) {
  SLUICE_CHECK(stage >= 0 && stage <= 3) << "ZeRO stage " << stage;
  const int64_t shard = MaxShardElements(parameters, world);
  ModelStateBytes s;
  s.params = bytes.params * (stage >= 3 ? shard : parameters);
  s.grads = bytes.grads * (stage >= 2 ? shard : parameters);
  s.optimizer = bytes.optimizer * (stage >= 1 ? shard : parameters);
  return s;
}

}  // namespace sluice::estimate
