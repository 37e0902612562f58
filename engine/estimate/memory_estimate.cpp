#include "engine/estimate/memory_estimate.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include "engine/estimate/activation_estimate.h"
#include "engine/estimate/count_format.h"
#include "engine/estimate/model_layout.h"
#include "engine/estimate/zero_simulation.h"
#include "engine/train/precision.h"
#include "engine/train/run_setup.h"
#include "engine/zero/offload_options.h"
#include "engine/zero/offload_staging_ring.h"
#include "runtime/comm.h"

namespace sluice::estimate {
namespace {

constexpr int64_t kF32 = 4;
constexpr int64_t kSwapAlignment = 4096;  // NVMe extents are whole 4 KiB blocks (swap_format.md)

int64_t AlignUp(int64_t bytes, int64_t alignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

// An element count and how it was obtained: "ceil(Ψ/4)" and 31,109,952.
struct Count {
  std::string what;
  int64_t elements = 0;
};

// "4 B x ceil(Ψ/4) = 4 x 31,109,952"; `per_text` names the element size ("2 B (bf16)").
std::string Times(int64_t per, const Count& count, std::string_view per_text = "") {
  return fmt::format("{} x {} = {} x {}", per_text.empty() ? fmt::format("{} B", per) : per_text,
                     count.what, per, FormatCount(count.elements));
}

constexpr int64_t kPage = 4096;  // host shards are whole pages

MemoryTier HostTier(bool pin_memory) {
  return pin_memory ? MemoryTier::kHostPinned : MemoryTier::kHost;
}

// NVMe bytes of `elements` fp32 values stored as extents of at most `group` elements each, every
// extent rounded up to the swap block.
int64_t SwapBytes(int64_t elements, int64_t group, int64_t element_bytes) {
  if (elements <= 0) return 0;
  const int64_t full = elements / group;
  const int64_t rest = elements % group;
  return full * AlignUp(group * element_bytes, kSwapAlignment) +
         (rest > 0 ? AlignUp(rest * element_bytes, kSwapAlignment) : 0);
}

Status CheckSupported(const Config& config, int world_size) {
  if (!config.model.present) {
    return InvalidArgumentError(
        "{} has no model section: the estimate needs the model; add a `model:` section (family, "
        "n_layer, n_head, d_model, d_ff, vocab_size, seq_len) or pass --model FILE",
        config.source_file.empty() ? std::string("the config") : config.source_file);
  }
  if (world_size < 1) return InvalidArgumentError("--ranks {} must be at least 1", world_size);
  const ZeroConfig& z = config.zero;
  if (z.stage < 0 || z.stage > 3) {
    return InvalidArgumentError("zero_optimization.stage {} is not 0, 1, 2 or 3", z.stage);
  }
  if (z.stage == 0 && z.offload_optimizer.device != OffloadDevice::kNone) {
    return InvalidArgumentError(
        "zero_optimization.offload_optimizer.device {} needs zero_optimization.stage 1, 2 or 3",
        OffloadDeviceName(z.offload_optimizer.device));
  }
  if (z.stage != 3 && z.offload_param.device != OffloadDevice::kNone) {
    return InvalidArgumentError(
        "zero_optimization.offload_param.device {} needs zero_optimization.stage 3 (stage is {})",
        OffloadDeviceName(z.offload_param.device), z.stage);
  }
  if (z.offload_optimizer.ratio < 1.0 && z.stage != 3) {
    return InvalidArgumentError(
        "zero_optimization.offload_optimizer.ratio {} needs zero_optimization.stage 3",
        z.offload_optimizer.ratio);
  }
  return OkStatus();
}

class ItemList {
 public:
  void Add(std::string name, MemoryTier tier, MemoryCategory category, int64_t bytes,
           std::string formula, Lifetime lifetime = Lifetime::kHeld) {
    if (bytes <= 0) return;
    items_.push_back(
        LineItem{std::move(name), tier, category, bytes, std::move(formula), lifetime});
  }
  std::vector<LineItem> Take() { return std::move(items_); }

 private:
  std::vector<LineItem> items_;
};

// Everything the line items are computed from.
struct Context {
  const ZeroConfig* z = nullptr;
  int stage = 0;
  int n = 1;
  train::Precision precision = train::Precision::kF32;
  model::ModelOptions model;
  std::vector<ZeroUnit> units;
  int64_t psi = 0;
  int64_t shard = 0;       // every rank's shard, padding included (Ψ when not sharded)
  int64_t persistent = 0;  // stage 3: elements of persistent parameters
  DType param_dtype = DType::kF32;
  int64_t p = 4;       // bytes of a stored parameter element
  std::string p_text;  // "2 B (bf16)"
  Count all;
  Count sharded;
};

// Optimizer state and the gradients it consumes, on the device or offloaded: the host (cpu) or
// NVMe through pinned swap buffers; ratio < 1 keeps 1 - ratio of the shard on the device.
// `elements` is what the optimizer steps (Ψ at stage 0, else the shard).
void AddOptimizer(const Context& c, const Count& elements, bool master, ItemList& items) {
  const ZeroConfig& z = *c.z;
  const OffloadOptimizerConfig& oo = z.offload_optimizer;
  int64_t off = 0;
  if (oo.device != OffloadDevice::kNone) {
    off = static_cast<int64_t>(std::llround(oo.ratio * static_cast<double>(elements.elements)));
  }
  const int64_t dev = elements.elements - off;
  const Count dev_count =
      off == 0 ? elements : Count{fmt::format("(1 - ratio {}) x {}", oo.ratio, elements.what), dev};
  const Count off_count = oo.ratio == 1.0
                              ? elements
                              : Count{fmt::format("ratio {} x {}", oo.ratio, elements.what), off};
  items.Add("Adam exp_avg + exp_avg_sq (fp32)", MemoryTier::kDevice, MemoryCategory::kOptimizer,
            2 * kF32 * dev, Times(2 * kF32, dev_count));
  if (master) {
    items.Add("fp32 master weights", MemoryTier::kDevice, MemoryCategory::kOptimizer, kF32 * dev,
              Times(kF32, dev_count));
  }
  if (c.stage >= 1) {
    items.Add("fp32 gradient shard", MemoryTier::kDevice, MemoryCategory::kGrads, kF32 * dev,
              Times(kF32, dev_count));
  }
  if (oo.device == OffloadDevice::kNone) return;
  // As engine/zero/zero_optimizer.cpp places it: the fp32 gradient shard and (cpu) the state in
  // pageable host memory, only the staging ring pinned; (nvme) one swap extent per tile.
  const bool nvme = oo.device == OffloadDevice::kNvme;
  const int64_t tile =
      std::max<int64_t>(1, std::min(zero::OffloadTileElements(z.sub_group_size), off));
  const int64_t tiles = (off + tile - 1) / tile;
  items.Add("fp32 gradient shard for the offloaded optimizer", MemoryTier::kHost,
            MemoryCategory::kGrads, AlignUp(kF32 * off, kPage), Times(kF32, off_count) + ", pages");
  if (nvme) {
    items.Add("fp32 master + exp_avg + exp_avg_sq on NVMe", MemoryTier::kNvme,
              MemoryCategory::kOptimizer, SwapBytes(off, tile, 3 * kF32),
              fmt::format("12 B x {} in {} tile(s) of <= {} (sub_group_size), 4 KiB blocks",
                          off_count.what, tiles, FormatCount(tile)));
  } else {
    items.Add("fp32 master + exp_avg + exp_avg_sq (offload_optimizer cpu)", MemoryTier::kHost,
              MemoryCategory::kOptimizer, 3 * AlignUp(kF32 * off, kPage),
              Times(3 * kF32, off_count) + ", pages");
  }
  const zero::StagingSlotLayout slot =
      zero::ComputeStagingSlotLayout(tile, DType::kF32, c.param_dtype, nvme);
  items.Add(
      "optimizer staging ring", MemoryTier::kHostPinned, MemoryCategory::kOptimizer,
      static_cast<int64_t>(slot.slot_bytes) * oo.buffer_count,
      fmt::format("offload_optimizer.buffer_count {} x {} B per tile of {} ({}gradients, "
                  "parameters)",
                  oo.buffer_count, slot.slot_bytes, FormatCount(tile), nvme ? "state, " : ""));
}

// Stage 3 parameter offload: the shard on the host (cpu) or on NVMe behind pinned buffers.
void AddOffloadedParameters(const Context& c, ItemList& items) {
  const OffloadParamConfig& op = c.z->offload_param;
  const MemoryTier host = HostTier(op.pin_memory);
  if (op.device == OffloadDevice::kCpu) {  // pageable, as engine/zero/host_shard_buffer.h
    items.Add("parameter shard (offload_param cpu)", MemoryTier::kHost, MemoryCategory::kParams,
              AlignUp(c.p * c.shard, kPage), Times(c.p, c.sharded, c.p_text) + ", pages");
    return;
  }
  const int64_t in_cpu = std::min(op.max_in_cpu, c.shard);
  const int64_t on_nvme = c.shard - in_cpu;
  items.Add(
      "parameter shard kept in host memory (offload_param.max_in_cpu)", host,
      MemoryCategory::kParams, c.p * in_cpu,
      fmt::format("{} x min(max_in_cpu {}, shard {}) = {} x {}", c.p_text,
                  FormatCount(op.max_in_cpu), FormatCount(c.shard), c.p, FormatCount(in_cpu)));
  items.Add("parameter shard on NVMe", MemoryTier::kNvme, MemoryCategory::kParams,
            AlignUp(c.p * on_nvme, kSwapAlignment),
            fmt::format("{} x (shard - max_in_cpu) = {} x {}, 4 KiB blocks", c.p_text, c.p,
                        FormatCount(on_nvme)));
  if (on_nvme > 0) {
    items.Add("parameter swap buffers", host, MemoryCategory::kBuffers,
              op.buffer_count * AlignUp(c.p * op.buffer_size, kSwapAlignment),
              fmt::format("offload_param.buffer_count {} x buffer_size {} x {} B", op.buffer_count,
                          FormatCount(op.buffer_size), c.p));
  }
}

// The ZeRO engine (engine/zero/zero_engine.h): the model computes on fp32 parameters the engine
// binds; shards are per-parameter partitions of ceil(numel / N) elements (padding included).
void AddZeroEngine(const Context& c, ItemList& items, std::vector<std::string>& notes) {
  const ZeroConfig& z = *c.z;
  const int stage = c.stage;
  const bool f32 = c.precision == train::Precision::kF32;
  if (stage <= 2) {
    items.Add("replicated fp32 compute parameters", MemoryTier::kDevice, MemoryCategory::kParams,
              kF32 * c.psi, Times(kF32, c.all));
  }
  if (stage == 3 && z.offload_param.device != OffloadDevice::kNone) {
    AddOffloadedParameters(c, items);
    notes.push_back(
        "offload_param: the device holds no parameter shard, only the gathered and the "
        "persistent parameters");
  } else if (!(stage == 0 && f32)) {  // stage 0 in f32: the compute copy is the master copy
    items.Add(stage == 0 ? "parameters (storage dtype)" : "parameter shard", MemoryTier::kDevice,
              MemoryCategory::kParams, c.p * c.shard, Times(c.p, c.sharded, c.p_text));
  }
  if (stage <= 1) {
    items.Add("replicated fp32 gradients", MemoryTier::kDevice, MemoryCategory::kGrads,
              kF32 * c.psi, Times(kF32, c.all));
  }
  AddOptimizer(c, stage == 0 ? c.all : c.sharded, !f32, items);

  if (stage == 1 || stage == 2) {
    // With overlap_comm every bucket is issued before the first is waited for.
    const AllGatherBuckets buckets = PublishBuckets(c.units, c.n, z.allgather_bucket_size);
    const int64_t staging = z.overlap_comm ? buckets.total_elements : buckets.largest_elements;
    const std::string which = z.overlap_comm
                                  ? std::string("all buckets at once (overlap_comm): N x shard")
                                  : fmt::format(
                                        "the largest bucket, N x partitions within "
                                        "allgather_bucket_size {}",
                                        FormatCount(z.allgather_bucket_size));
    items.Add("all-gather staging of updated parameters", MemoryTier::kDevice,
              MemoryCategory::kBuffers, c.p * staging,
              fmt::format("{} x {} = {} x {}", c.p_text, which, c.p, FormatCount(staging)),
              Lifetime::kOptimizerStep);
  }
  if (stage >= 2) {
    const ReducerPeaks reducer = SimulateReduceScatter(c.units, c.n, z.reduce_bucket_size);
    items.Add(
        "unit gradient buffers (fp32, until reduce-scattered)", MemoryTier::kDevice,
        MemoryCategory::kGrads, kF32 * reducer.unit_gradient_elements,
        fmt::format("4 B x the backward's peak of full-size unit gradients with "
                    "reduce_bucket_size {} = 4 x {}",
                    FormatCount(z.reduce_bucket_size), FormatCount(reducer.unit_gradient_elements)),
        Lifetime::kPass);
    // With overlap_comm two buckets may be in flight during the backward's compute.
    const int64_t in_flight = z.overlap_comm ? 2 : 1;
    items.Add("reduce-scatter staging (fp32)", MemoryTier::kDevice, MemoryCategory::kBuffers,
              kF32 * in_flight * reducer.staging_elements,
              fmt::format("4 B x {}N x partitions of the largest bucket = 4 x {}",
                          z.overlap_comm ? "2 in flight x " : "",
                          FormatCount(in_flight * reducer.staging_elements)),
              z.overlap_comm ? Lifetime::kCompute : Lifetime::kReduce);
    if (z.overlap_comm) {
      notes.push_back(
          "overlap_comm: the gradient buckets are assumed to complete as fast as the backward "
          "issues them; when the collectives fall behind, up to two more buckets (their unit "
          "gradients and staging) stay alive");
    }
  }
  if (stage == 3) {
    items.Add(
        "persistent parameters (fp32, always gathered)", MemoryTier::kDevice,
        MemoryCategory::kParams, kF32 * c.persistent,
        fmt::format("4 B x {} elements in parameters of <= "
                    "stage3_param_persistence_threshold {}",
                    FormatCount(c.persistent), FormatCount(z.stage3_param_persistence_threshold)));
    CoordinatorLimits limits;
    limits.world = c.n;
    limits.persistent = c.persistent;
    limits.prefetch_bucket_size = z.stage3_prefetch_bucket_size;
    limits.max_live_parameters = z.stage3_max_live_parameters;
    limits.max_reuse_distance = z.stage3_max_reuse_distance;
    const CoordinatorPeaks coordinator = SimulateCoordinator(c.units, limits);
    const int64_t gathered = coordinator.gathered_elements;
    items.Add("gathered parameters (fp32)", MemoryTier::kDevice, MemoryCategory::kParams,
              kF32 * gathered,
              fmt::format("4 B x the coordinator's peak: running unit + prefetch {} + units kept "
                          "for reuse within {}, live <= {} = 4 x {}",
                          FormatCount(z.stage3_prefetch_bucket_size),
                          FormatCount(z.stage3_max_reuse_distance),
                          FormatCount(z.stage3_max_live_parameters), FormatCount(gathered)));
    if (gathered + c.persistent >= c.psi) {
      notes.push_back(
          "stage 3 keeps every parameter gathered here: units come back within "
          "stage3_max_reuse_distance and stage3_max_live_parameters allows them all; lower "
          "either to hold only part of the model");
    }
    // With overlap_comm the gathers not yet waited for (prefetches) are in flight together.
    const int64_t staging =
        z.overlap_comm ? coordinator.largest_pending_staging : coordinator.largest_gather_staging;
    items.Add("parameter all-gather staging", MemoryTier::kDevice, MemoryCategory::kBuffers,
              c.p * staging,
              fmt::format("{} x N x (partitions + 1) of {} = {} x {}", c.p_text,
                          z.overlap_comm ? "the gathers not yet waited for, in flight during "
                                           "the compute (overlap_comm)"
                                         : "the largest unit",
                          c.p, FormatCount(staging)),
              z.overlap_comm ? Lifetime::kCompute : Lifetime::kGather);
    // After each step the persistent parameters are all-gathered again, in one collective.
    int64_t persistent_partitions = 0;
    for (const ZeroUnit& unit : c.units) {
      for (int64_t numel : unit.params) {
        if (numel <= z.stage3_param_persistence_threshold) {
          persistent_partitions += (numel + c.n - 1) / c.n;
        }
      }
    }
    if (persistent_partitions > 0) {
      const int64_t elements = c.n * (persistent_partitions + 1);
      items.Add("all-gather staging of the persistent parameters", MemoryTier::kDevice,
                MemoryCategory::kBuffers, c.p * elements,
                fmt::format("{} x N x (their partitions + 1) = {} x {}", c.p_text, c.p,
                            FormatCount(elements)),
                Lifetime::kOptimizerStep);
    }
  }
}

}  // namespace

namespace {

// held + max(pass + max(compute, gather, reduce), optimizer step) over the items `in` selects.
template <typename Selector>
int64_t PeakOf(const std::vector<LineItem>& items, Selector in) {
  std::array<int64_t, static_cast<size_t>(Lifetime::kOptimizerStep) + 1> by{};
  for (const LineItem& item : items) {
    if (in(item)) by[static_cast<size_t>(item.lifetime)] += item.bytes;
  }
  const auto at = [&by](Lifetime lifetime) { return by[static_cast<size_t>(lifetime)]; };
  const int64_t pass =
      at(Lifetime::kPass) +
      std::max({at(Lifetime::kCompute), at(Lifetime::kGather), at(Lifetime::kReduce)});
  return at(Lifetime::kHeld) + std::max(pass, at(Lifetime::kOptimizerStep));
}

}  // namespace

int64_t MemoryEstimate::bytes(MemoryTier tier, MemoryCategory category) const {
  return PeakOf(
      items, [&](const LineItem& item) { return item.tier == tier && item.category == category; });
}

int64_t MemoryEstimate::tier_bytes(MemoryTier tier) const {
  return PeakOf(items, [&](const LineItem& item) { return item.tier == tier; });
}

int64_t MemoryEstimate::host_bytes() const {
  return tier_bytes(MemoryTier::kHostPinned) + tier_bytes(MemoryTier::kHost);
}

int64_t MemoryEstimate::total_bytes() const {
  int64_t sum = 0;
  for (MemoryTier tier : kAllMemoryTiers) sum += tier_bytes(tier);
  return sum;
}

Result<MemoryEstimate> EstimateMemory(const Config& config, int world_size,
                                      const EstimateOptions& options) {
  SLUICE_RETURN_IF_ERROR(CheckSupported(config, world_size));
  Context c;
  c.z = &config.zero;
  c.stage = config.zero.stage;
  c.n = world_size;
  c.precision = train::PrecisionOf(config.model.dtype);
  SLUICE_ASSIGN_OR_RETURN(c.model, train::ModelOptionsFromConfig(config, c.precision));
  c.model.activation_checkpointing = options.activation_checkpointing;
  const int64_t threshold = c.stage == 3 ? c.z->stage3_param_persistence_threshold : -1;
  const std::vector<UnitLayout> layout = DescribeUnits(c.model);
  c.units = ExpandUnits(layout, threshold);
  c.psi = SummarizeLayout(layout).parameters;
  c.persistent = SummarizeLayout(layout, threshold).persistent_elements;
  const int shard_world = c.stage == 0 ? 1 : c.n;  // stage 0 is a world of one
  c.shard = ShardElements(c.units, shard_world);
  const DType stored = config.model.dtype;
  c.param_dtype = stored;
  c.p = static_cast<int64_t>(DTypeSize(stored));
  c.p_text = fmt::format("{} B ({})", c.p, DTypeName(stored));
  c.all = Count{"Ψ", c.psi};
  c.sharded = Count{fmt::format("shard Σ ceil(numel/{})", shard_world), c.shard};

  MemoryEstimate e;
  e.world_size = c.n;
  e.stage = c.stage;
  e.precision = std::string(train::PrecisionName(c.precision));
  e.param_dtype = stored;
  e.parameters = c.psi;
  e.shard_elements = c.shard;
  e.last_shard_elements = 0;
  for (const ZeroUnit& unit : c.units) {
    for (int64_t numel : unit.params) {
      e.last_shard_elements += static_cast<int64_t>(
          ShardRange(static_cast<size_t>(numel), shard_world, shard_world - 1).count);
    }
  }
  e.micro_batch = config.batch.micro_batch_per_gpu;
  e.seq_len = config.model.seq_len;
  e.activation_checkpointing = options.activation_checkpointing;
  e.offload_optimizer = c.z->offload_optimizer.device;
  e.offload_param = c.z->offload_param.device;

  ItemList items;
  AddZeroEngine(c, items, e.notes);
  // The model's forward/backward on one micro-batch. Under the ZeRO engine the model reads the
  // fp32 parameters the engine binds: no bf16 widening.
  model::ModelOptions pass = c.model;
  pass.param_dtype = DType::kF32;
  const ActivationEstimate act = EstimateActivations(pass, e.micro_batch, c.model.seq_len);
  items.Add(fmt::format("activations (micro-batch {} x seq {}{})", e.micro_batch, c.model.seq_len,
                        options.activation_checkpointing ? ", checkpointed blocks" : ""),
            MemoryTier::kDevice, MemoryCategory::kActivations, act.peak_bytes, act.peak_formula,
            Lifetime::kPass);
  items.Add("forward/backward scratch", MemoryTier::kDevice, MemoryCategory::kBuffers,
            act.scratch_peak_bytes, act.scratch_formula, Lifetime::kCompute);
  e.items = items.Take();

  if (e.last_shard_elements != e.shard_elements) {
    e.notes.push_back(fmt::format(
        "shards: every rank holds {} elements (each parameter cut into ceil(numel/{}) per rank); "
        "the last rank owns {} of them, the rest is padding",
        FormatCount(c.shard), c.n, FormatCount(e.last_shard_elements)));
  }
  if (!options.activation_checkpointing) {
    e.notes.push_back(
        "activations without checkpointing, as the trainer runs today (--activation-"
        "checkpointing shows checkpointing every block)");
  }
  return e;
}

}  // namespace sluice::estimate
