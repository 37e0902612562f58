// One step of the configured optimizer (optimizer.type) over tensors laid out as Adam's, for the
// engine's two optimizer wrappers: Adam / AdamW through kernels/cpu/adam.h, Lion through
// kernels/cpu/lion.h (then exp_avg_sq is not read and may be null).
//
// EnqueueLionStep is ShardedAdam's Lion on the device: the ops backend table
// (runtime/ops/ops_backend.h) has an AdamStep op but no Lion op yet, so until it does this enqueues
// the CPU kernel (or, for the ref column, the scalar reference) as a host function on the stream,
// which only a device whose memory the host can address allows: a CUDA device is refused, naming
// optimizer.type and zero_optimization.offload_optimizer.device. Moving it into the table (and
// adding a CUDA kernel) is what lifts that refusal.
#pragma once

#include <cstdint>
#include <string>

#include "engine/zero/zero_sections.h"
#include "kernels/cpu/adam.h"
#include "kernels/ref/lion_ref.h"
#include "runtime/device.h"
#include "runtime/ops/ops_backend.h"
#include "runtime/status.h"

namespace sluice::zero {

// OK, or Unimplemented naming optimizer.type and the offload setting when Lion's state cannot live
// on `ops`' device (a CUDA device: see above).
Status CheckLionOnDevice(const ops::OpsBackend& ops);

// Lion over `t` (memory of `ops`' device) enqueued on `stream`, as an ops call would be, with the
// CPU kernel's `threading` (results do not depend on it).
Status EnqueueLionStep(ops::OpsBackend& ops, Stream& stream, const kernels::LionTensors& t,
                       const kernels::LionHyperparams& hyper, float grad_scale,
                       const kernels::AdamThreading& threading = {});

}  // namespace sluice::zero
