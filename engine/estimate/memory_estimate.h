// `sluice estimate`: the bytes one rank holds, per tier (device, host pinned, host, NVMe) and per
// category (params, grads, optimizer, activations, buffers), for the configured model, ZeRO stage
// and offload, on `world_size` data-parallel ranks. With tensor_parallel.autotp_size t > 1 the
// rank is tensor rank 0 of t (the largest: its piece of the vocabulary is the longest): it holds
// its pieces of the parameters (engine/parallel/tensor_layout.h, the plan's own rules), which ZeRO
// shards over the data-parallel group like a whole model's, and its share of the activations
// (activation_estimate.h; tensor_parallel.sequence_parallel splits the norms' and the residual
// stream's rows too). The estimate is a list of line items, each with the formula that produced
// it, so a table can explain itself:
//
//   SLUICE_ASSIGN_OR_RETURN(MemoryEstimate e, EstimateMemory(config, /*world_size=*/4));
//   e.tier_bytes(MemoryTier::kDevice);
//   e.bytes(MemoryTier::kHostPinned, MemoryCategory::kOptimizer);
//
// It follows the engine that runs every configuration, the ZeRO engine (engine/zero; `sluice
// train` runs through it on any number of ranks), whose shards are per-parameter partitions of
// ceil(numel / N) elements (padding included, the same length on every rank) and whose stage-3
// coordinator and gradient reducer are replayed (zero_simulation.h). Parameters are stored in their
// dtype, gradients and the optimizer's state (Adam: master, m, v; Lion: master, m) in fp32.
// Offloaded items follow the engine's placement
// (zero_optimizer.h; a partial offload ratio: split_optimizer.h). docs/memory_estimator.md has
// every formula and assumption.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/estimate/stage_layout.h"
#include "runtime/dtype.h"
#include "runtime/memory_kinds.h"
#include "runtime/status.h"

namespace sluice::estimate {

// When an item's bytes are held, for adding up peaks: for the whole run, through the
// forward/backward of each micro-batch, or inside one unit's compute. A peak (of a category or of
// a tier) is held + pass + compute: the collectives stage through one held buffer.
enum class Lifetime : uint8_t {
  kHeld = 0,
  kPass,     // alive through the forward/backward (activations, unit gradients)
  kCompute,  // inside a unit's forward or backward (scratch)
};

struct LineItem {
  std::string name;  // "fp32 master weights"
  MemoryTier tier = MemoryTier::kDevice;
  MemoryCategory category = MemoryCategory::kParams;
  int64_t bytes = 0;
  std::string formula;  // "4 B x shard Σ ceil(numel/4) = 4 x 31,109,952"
  Lifetime lifetime = Lifetime::kHeld;
};

struct EstimateOptions {
  // Estimate as if model.activation_checkpointing were true (`sluice estimate
  // --activation-checkpointing`, and the alternatives of estimate_fit.h): what checkpointing
  // would save. The activation_checkpointing section applies as in the trainer (number_checkpoints
  // unset: every block). Without it the config decides, as the trainer does.
  bool activation_checkpointing = false;
  // One pipeline stage (pipeline_estimate.h builds them): its units and the activations its
  // schedule keeps in flight; world_size is then the stage's data-parallel group. Unset: the
  // whole model.
  std::optional<StageShape> pipeline_stage;
};

struct MemoryEstimate {
  int world_size = 1;       // data-parallel ranks: ZeRO's world
  int tensor_parallel = 1;  // tensor ranks per data-parallel rank (tensor_parallel.autotp_size)
  bool sequence_parallel = false;
  // The token table and LM head split along the vocabulary over the tensor ranks (every ops
  // backend but cuda's so far: OpsBackend::SupportsVocabShards).
  bool vocab_parallel = false;
  int stage = 0;
  std::string precision;            // "f32", "bf16", "f16"
  DType param_dtype = DType::kF32;  // storage dtype of the parameters
  int64_t parameters = 0;           // Ψ: this tensor rank's pieces (the model's at t = 1)
  int64_t model_parameters = 0;     // the whole model's (a pipeline stage's) Ψ, every tensor rank
  int64_t shard_elements = 0;       // rank 0's shard, ceil(Ψ/N)
  int64_t last_shard_elements = 0;  // the last rank's (fewer when N does not divide Ψ)
  int64_t micro_batch = 0;
  int64_t seq_len = 0;
  bool activation_checkpointing = false;  // checkpointing estimated (the config's or the option's)
  int64_t checkpointed_blocks = 0;        // the first ones (model::CheckpointedBlocks)
  bool cpu_checkpointing = false;         // their inputs in pinned host memory
  OffloadDevice offload_optimizer = OffloadDevice::kNone;
  OffloadDevice offload_param = OffloadDevice::kNone;
  std::vector<LineItem> items;
  std::vector<std::string> notes;  // assumptions that matter for this configuration
  // offload_optimizer.ratio "auto" with device.memory_limit: the device bytes left for the
  // optimizer's device part, the limit minus the peak of everything else (may be negative).
  std::optional<int64_t> auto_state_budget;
  // ratio "auto" whose budget cannot hold a split (its fp32 gradient shard on the device and one
  // tile of state): estimated, and run (ResolveAutoRatioBudget), as ratio 1.
  bool auto_offloads_all = false;
  // The disk space of each of one rank's swap stores (0 without one): its extents (in the
  // store's category, as the engine's ledger counts them) and the file around them (category
  // buffers: header slots, rounding to stripe rows, lock file). The NVMe budget compares each with
  // the free space of its own nvme_path.
  int64_t optimizer_swap_bytes = 0;
  int64_t param_swap_bytes = 0;

  // The category's peak (see Lifetime).
  int64_t bytes(MemoryTier tier, MemoryCategory category) const;
  // The tier's peak, all its items together (see Lifetime); at most the sum of its category
  // peaks, which may fall at different moments.
  int64_t tier_bytes(MemoryTier tier) const;
  // host_pinned + host.
  int64_t host_bytes() const;
  int64_t total_bytes() const;
  // The ranks that hold this estimate's figures: data-parallel x tensor-parallel.
  int ranks() const { return world_size * tensor_parallel; }
};

// Whether the ops backend the config runs on splits the vocabulary over tensor ranks (the cpu
// ones do; the cuda backend keeps the token table, head and logits whole on every tensor rank).
bool SplitsVocabulary(const Config& config);

// InvalidArgument when the config has no model section (naming the two ways to give one), for a
// world size below 1, for offload combinations the engine cannot run (offload with stage 0,
// parameter offload below stage 3, a partial offload ratio below stage 3 or with offload_param
// nvme), and for a model that does not split over config.parallel.tensor ranks (heads, d_ff,
// fewer vocabulary ids than ranks; with sequence parallelism a micro-batch whose tokens do not
// divide by the size).
Result<MemoryEstimate> EstimateMemory(const Config& config, int world_size,
                                      const EstimateOptions& options = {});

// offload_optimizer.ratio "auto": sets config->zero.offload_optimizer.auto_state_budget to the
// estimate's auto_state_budget, the cap the engine's measured split must respect, or, when that
// budget cannot hold a split (auto_offloads_all), turns the config into ratio 1 (logged). A no-op
// for any other ratio or without device.memory_limit. Call before creating the engine.
Status ResolveAutoRatioBudget(Config* config, int world_size);

}  // namespace sluice::estimate
