// What a checkpoint saves of a ZeRO engine's optimizer state and how a checkpoint (of any world
// size and stage) or a safetensors file is read back into it, as pure functions of the shard
// layout: the engine's ImportState and SavedStateRanges are these over its own layout, and the
// checkpoint code (engine/train/checkpointing.h) speaks in these types.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/zero/zero_sections.h"
#include "engine/model/parameter_registry.h"
#include "engine/zero/shard_layout.h"
#include "offload/optimizer_state_stream.h"
#include "runtime/status.h"

namespace sluice::zero {

// One range of this rank's optimizer state: elements [begin, end) of the flattened parameter
// `param` (a registry index, never a tied alias: aliases have no state of their own), found at
// `shard_offset` of this rank's state shard (optimizer().StreamState / ReadState).
struct ZeroStateRange {
  int param = -1;
  int64_t begin = 0;
  int64_t end = 0;
  int64_t shard_offset = 0;
};

// Fills dst[0, end - begin) with elements [begin, end) of the flattened parameter `param`, as
// fp32 (from a checkpoint of any world size and stage, or a safetensors file).
using ZeroRangeReader = std::function<Status(int param, int64_t begin, int64_t end, float* dst)>;

// What ZeroEngine::ImportState loads. Without `exp_avg` / `exp_avg_sq` (weights only:
// model.init_from) the moments start at zero and `optimizer_step` must be 0. Lion
// (optimizer.type) keeps no second moment: it takes `exp_avg` alone.
struct ZeroStateReaders {
  ZeroRangeReader master;
  ZeroRangeReader exp_avg;
  ZeroRangeReader exp_avg_sq;
  int64_t optimizer_step = 0;
};

// Every owned element of the layout's partitions, as ranges: the ranks together cover each
// parameter once.
std::vector<ZeroStateRange> OwnedStateRanges(const ShardLayout& layout);

// InvalidArgument unless `readers` give the master weights and the moments `optimizer` keeps
// (Adam both, Lion exp_avg), or no moments at all with an optimizer step of 0.
Status CheckStateReaders(const ZeroStateReaders& readers, OptimizerType optimizer);

// The optimizer's restore source over `readers`: each piece of the shard is filled from the
// readers of the partitions it overlaps, padding zero as a fresh shard's. `layout`, `registry`
// and `readers` must outlive the source.
offload::OptimizerStateSource StateSourceOf(const ShardLayout& layout,
                                            const model::ParameterRegistry& registry,
                                            const ZeroStateReaders& readers);

}  // namespace sluice::zero
