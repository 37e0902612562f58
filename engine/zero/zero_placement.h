// Where a ZeRO engine keeps each part of the training state, decided once from its options; the
// engine allocates its buffers by it (the optimizer's own tiers: zero_optimizer.h).
#pragma once

#include <cstdint>

#include "engine/zero/zero_options.h"

namespace sluice::zero {

enum class StateTier : uint8_t { kNone, kDevice, kHost, kNvme };

struct ZeroPlacement {
  // The replicated fp32 compute copy of the parameters the passes read (stages 0-2; stage 3
  // gathers units instead).
  bool replicated_params = false;
  // The replicated fp32 gradients the passes accumulate into (stages 0-1).
  bool replicated_grads = false;
  // The parameters in the parameter dtype: the shard (stages 1-3), or all of them in stage 0.
  // kNone in stage 0 with f32, where the compute copy is the master weights themselves. kHost and
  // kNvme: offload_param (stage 3 only).
  StateTier param_shard = StateTier::kDevice;
  // The fp32 gradient shard the optimizer steps with (stages 1-3; kNone in stage 0, which steps
  // the replicated gradients). kHost when the offloaded optimizer reads it in place: the
  // reduce-scattered buckets are accumulated straight into host memory.
  StateTier grad_shard = StateTier::kDevice;
  // The optimizer state (master weights apart from the parameters, moments): offload_optimizer's
  // device (a partial offload keeps the first 1 - ratio of it on the device: split_optimizer.h).
  StateTier optimizer_state = StateTier::kDevice;
};

ZeroPlacement PlaceZeroState(const ZeroOptions& options);

}  // namespace sluice::zero
