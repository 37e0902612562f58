// The per-layer compute times pipeline.partition_method "time" balances: a probe of the model
// (two decoder layers, with the embeddings, final norm and head, one tensor rank's worth: the
// whole model's shapes at tensor-parallel size 1) runs forward and backward passes of one
// micro-batch on the device, and events recorded on its stream around every unit take the
// times the stream ran them (not when the host enqueued them). The probe's parameters are a
// constant and the token ids random: the ops' cost does not depend on the values.
//
//   SLUICE_ASSIGN_OR_RETURN(estimate::LayerTimes times,
//                           MeasureLayerTimes(options, device, ops, micro_batch, seq_len));
//
// Medians over `repeats` passes after one warm-up: the embeddings' forward and backward, a
// block's (the mean of the two), and the tail's (final norm, LM head and the loss between the
// head's forward and backward). In milliseconds. The probe's memory is freed on return.
#pragma once

#include <cstdint>

#include "engine/estimate/partition_weights.h"
#include "engine/model/model_options.h"
#include "runtime/device.h"
#include "runtime/ops/ops_backend.h"
#include "runtime/status.h"

namespace sluice::train {

Result<estimate::LayerTimes> MeasureLayerTimes(const model::ModelOptions& options,
                                               ops::OpsBackend& ops, int64_t micro_batch,
                                               int64_t seq_len, int repeats = 3);

}  // namespace sluice::train
