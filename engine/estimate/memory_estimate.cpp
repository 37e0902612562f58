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
#include "engine/zero/offload_ratio.h"
#include "engine/zero/step_guard.h"
#include "offload/aligned_buffer.h"
#include "offload/staging_ring.h"
#include "offload/swap_format.h"
#include "offload/swap_store.h"
#include "runtime/comm.h"
#include "runtime/logging.h"

namespace sluice::estimate {
namespace {

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

// The NVMe items of the two swap stores around their extents (see optimizer_swap_bytes).
constexpr std::string_view kOptimizerSwapFile = "optimizer swap file around that state";
constexpr std::string_view kParamSwapFile = "parameter swap file around that shard";

// What a swap store takes on disk beyond its extents, as the engine creates one (one nvme_path
// directory, the default geometry: offload::SwapStoreDiskBytes): the header slots and padding
// before the data, the extents rounded up to whole stripe rows, the lock file. A store is grown
// to its final size in one step, so nothing else is preallocated.
struct SwapFileOverhead {
  int64_t bytes = 0;
  std::string formula;
};

SwapFileOverhead SwapFileOverheadOf(int64_t extent_bytes) {
  offload::SwapStoreOptions options;
  options.paths = {"nvme_path"};
  const auto extents = static_cast<uint64_t>(extent_bytes);
  const uint64_t data_offset = offload::SwapDataOffset(offload::SwapSlotBytes(options.max_extents));
  const uint64_t rounding =
      offload::AlignUp(extents, options.stripe_size) - extents;  // one directory: row = stripe
  SwapFileOverhead overhead;
  overhead.bytes = static_cast<int64_t>(offload::SwapStoreDiskBytes(options, extents) - extents);
  overhead.formula = fmt::format(
      "header slots and padding before the data {} B + the extents rounded up to whole {} B "
      "stripe rows {} B + lock file {} B",
      data_offset, options.stripe_size, rounding, offload::kSwapLockFileBytes);
  return overhead;
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
  // The engine's own rules for the zero_optimization section (stage, offload combinations).
  return zero::ZeroOptionsFromConfig(config).status();
}

// What the model build refuses at this tensor-parallel size (ModelOptionsFromConfig validated the
// heads and d_ff), and what the sequence-parallel pass refuses for the configured micro-batch.
Status CheckTensorSplit(const Config& config, const model::ModelOptions& o, bool vocab_parallel) {
  const int64_t t = o.tensor_parallel_size;
  if (t <= 1) return OkStatus();
  if (vocab_parallel && o.vocab_size < t) {
    return InvalidArgumentError(
        "model.vocab_size = {} cannot split over tensor_parallel.autotp_size = {}: each tensor "
        "rank needs at least one id of the vocabulary",
        o.vocab_size, t);
  }
  const int64_t tokens = config.batch.micro_batch_per_gpu * config.model.seq_len;
  if (o.sequence_parallel && tokens % t != 0) {
    return InvalidArgumentError(
        "tensor_parallel.sequence_parallel splits each micro-batch's {} x {} = {} tokens into {} "
        "equal slices, and {} does not divide by {}; change train_micro_batch_size_per_gpu or "
        "model.seq_len, or turn sequence_parallel off",
        config.batch.micro_batch_per_gpu, config.model.seq_len, tokens, t, tokens, t);
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
  bool vocab_parallel = false;  // SplitsVocabulary
  std::vector<ZeroUnit> units;
  int64_t psi = 0;
  int64_t shard = 0;       // every rank's shard, padding included (Ψ when not sharded)
  int64_t persistent = 0;  // stage 3: elements of persistent parameters
  DType param_dtype = DType::kF32;
  int64_t p = 4;       // bytes of a stored parameter element
  std::string p_text;  // "2 B (bf16)"
  Count all;
  Count sharded;
  // ratio "auto": the device part's elements (the budget cap; see EstimateMemory), or, when the
  // budget cannot hold a split at all, everything offloaded as with ratio 1.
  int64_t auto_device_elements = 0;
  bool auto_offloads_all = false;
  OptimizerType optimizer = OptimizerType::kAdamW;
  int moments = 2;  // fp32 moment tensors per element: Adam's exp_avg and exp_avg_sq, Lion's one
};

// Where the optimizer's elements keep their state: all on the device (offload none), all
// offloaded (ratio 1), or split (ratio < 1 or "auto", engine/zero/split_optimizer.h), the first
// `device` on the device and the rest offloaded. With "auto" each tier gets its worst case: the
// device part at the budget cap, the offloaded part as if everything were offloaded.
struct OptimizerPlacement {
  bool split = false;
  Count device;
  Count offloaded;
};

bool SplitsOptimizer(const Context& c) {
  const OffloadOptimizerConfig& oo = c.z->offload_optimizer;
  return oo.device != OffloadDevice::kNone && oo.partial() &&
         !(oo.ratio_auto && c.auto_offloads_all);
}

OptimizerPlacement PlaceOptimizer(const Context& c, const Count& elements) {
  const OffloadOptimizerConfig& oo = c.z->offload_optimizer;
  OptimizerPlacement place;
  if (oo.device == OffloadDevice::kNone) {
    place.device = elements;
    return place;
  }
  place.split = SplitsOptimizer(c);
  if (!place.split) {
    place.offloaded = elements;
    return place;
  }
  const int64_t tile = zero::OffloadTileElements(c.z->sub_group_size);
  if (oo.ratio_auto && !c.auto_offloads_all) {
    place.device = Count{fmt::format("the ratio-auto device budget's whole tiles of {} of {}",
                                     FormatCount(tile), elements.what),
                         c.auto_device_elements};
    place.offloaded = Count{fmt::format("{} (auto's worst case: all offloaded)", elements.what),
                            elements.elements};
    return place;
  }
  const int64_t device = zero::DeviceElementsForRatio(elements.elements, tile, oo.ratio);
  place.device = Count{fmt::format("the first floor((1 - ratio {}) x N) tiles of {} of {}",
                                   oo.ratio, FormatCount(tile), elements.what),
                       device};
  place.offloaded = Count{fmt::format("the rest of {}", elements.what), elements.elements - device};
  return place;
}

// Optimizer state and the gradients it consumes, on the device or offloaded: the host (cpu) or
// NVMe through pinned swap buffers; ratio < 1 keeps the first tiles of the shard on the device
// (PlaceOptimizer). `elements` is what the optimizer steps (Ψ at stage 0, else the shard).
void AddOptimizer(const Context& c, const Count& elements, bool master, ItemList& items) {
  const ZeroConfig& z = *c.z;
  const OffloadOptimizerConfig& oo = z.offload_optimizer;
  const OptimizerPlacement place = PlaceOptimizer(c, elements);
  const int64_t dev = place.device.elements;
  const int64_t off = place.offloaded.elements;
  const bool lion = c.optimizer == OptimizerType::kLion;
  const int64_t moment_bytes = c.moments * kF32;
  const char* moments = lion                                  ? "Lion exp_avg (fp32)"
                        : c.optimizer == OptimizerType::kLamb ? "Lamb exp_avg + exp_avg_sq (fp32)"
                                                              : "Adam exp_avg + exp_avg_sq (fp32)";
  items.Add(moments, MemoryTier::kDevice, MemoryCategory::kOptimizer, moment_bytes * dev,
            Times(moment_bytes, place.device));
  if (master) {
    items.Add("fp32 master weights", MemoryTier::kDevice, MemoryCategory::kOptimizer, kF32 * dev,
              Times(kF32, place.device));
  }
  // The whole gradient shard stays on the device unless everything is offloaded: a split's
  // device part reads it there, and its offloaded part copies its tiles off itself.
  const bool device_grads = oo.device == OffloadDevice::kNone || place.split;
  if (c.stage >= 1 && device_grads) {
    items.Add("fp32 gradient shard", MemoryTier::kDevice, MemoryCategory::kGrads,
              kF32 * elements.elements, Times(kF32, elements));
  }
  if (c.param_dtype == DType::kF16 && device_grads) {
    // The step guard rounds the device gradients through it (engine/zero/step_guard.h).
    const int64_t block = std::min(zero::kF16RoundBlock, elements.elements);
    items.Add("fp16 gradient rounding block", MemoryTier::kDevice, MemoryCategory::kBuffers,
              2 * block, fmt::format("2 B x min(2^16, {})", FormatCount(elements.elements)));
  }
  if (off == 0) return;
  // As engine/zero/zero_optimizer.cpp places it: the fp32 gradient shard and (cpu) the state in
  // pageable host memory, only the staging ring pinned; (nvme) one swap extent per tile.
  const bool nvme = oo.device == OffloadDevice::kNvme;
  const int64_t tile =
      std::max<int64_t>(1, std::min(zero::OffloadTileElements(z.sub_group_size), off));
  const int64_t tiles = (off + tile - 1) / tile;
  if (!device_grads) {
    items.Add("fp32 gradient shard for the offloaded optimizer", MemoryTier::kHost,
              MemoryCategory::kGrads, AlignUp(kF32 * off, kPage),
              Times(kF32, place.offloaded) + ", pages");
  }
  if (nvme) {
    const int64_t state_bytes = kF32 + moment_bytes;
    const int64_t state = SwapBytes(off, tile, state_bytes);
    items.Add(lion ? "fp32 master + exp_avg on NVMe (Lion)"
                   : "fp32 master + exp_avg + exp_avg_sq on NVMe",
              MemoryTier::kNvme, MemoryCategory::kOptimizer, state,
              fmt::format("{} B x {} in {} tile(s) of <= {} (sub_group_size), 4 KiB blocks",
                          state_bytes, place.offloaded.what, tiles, FormatCount(tile)));
    const SwapFileOverhead file = SwapFileOverheadOf(state);
    items.Add(std::string(kOptimizerSwapFile), MemoryTier::kNvme, MemoryCategory::kBuffers,
              file.bytes, file.formula);
  } else {
    items.Add(lion ? "fp32 master + exp_avg (offload_optimizer cpu, Lion)"
                   : "fp32 master + exp_avg + exp_avg_sq (offload_optimizer cpu)",
              MemoryTier::kHost, MemoryCategory::kOptimizer,
              (1 + c.moments) * AlignUp(kF32 * off, kPage),
              Times((1 + c.moments) * kF32, place.offloaded) + ", pages");
  }
  const offload::StagingSlotLayout slot =
      offload::ComputeStagingSlotLayout(tile, DType::kF32, c.param_dtype, nvme, c.moments);
  items.Add(
      "optimizer staging ring", MemoryTier::kHostPinned, MemoryCategory::kOptimizer,
      static_cast<int64_t>(slot.slot_bytes) * oo.buffer_count,
      fmt::format("offload_optimizer.buffer_count {} x {} B per tile of {} ({}gradients, "
                  "parameters)",
                  oo.buffer_count, slot.slot_bytes, FormatCount(tile), nvme ? "state, " : ""));
}

// This rank's pieces of the NVMe parameter groups (offload/nvme_param_store.h), in the order
// they are first read: the persistent run (gathered after initialization), then each unit's
// non-persistent run in trace order. Every piece is ceil(numel / N) a parameter.
std::vector<int64_t> NvmeParamGroupElements(const Context& c) {
  const int64_t threshold = c.z->stage3_param_persistence_threshold;
  std::vector<int64_t> groups;
  int64_t persistent = 0;
  for (const ZeroUnit& unit : c.units) {
    for (int64_t numel : unit.params) {
      if (numel <= threshold) persistent += (numel + c.n - 1) / c.n;
    }
  }
  if (persistent > 0) groups.push_back(persistent);
  for (const ZeroUnit& unit : c.units) {
    int64_t elements = 0;
    for (int64_t numel : unit.gathered_params) elements += (numel + c.n - 1) / c.n;
    if (elements > 0) groups.push_back(elements);
  }
  return groups;
}

// Stage 3 parameter offload: the shard on the host (cpu) or on NVMe behind pinned buffers.
void AddOffloadedParameters(const Context& c, ItemList& items) {
  const OffloadParamConfig& op = c.z->offload_param;
  if (op.device == OffloadDevice::kCpu) {  // pageable, as offload/host_shard_buffer.h
    items.Add("parameter shard (offload_param cpu)", MemoryTier::kHost, MemoryCategory::kParams,
              AlignUp(c.p * c.shard, kPage), Times(c.p, c.sharded, c.p_text) + ", pages");
    return;
  }
  // As the NVMe parameter store places it: one extent per group; staging slots of the largest
  // group (pinned); groups cached in pageable host memory, in first-read order, while the cached
  // elements stay within max_in_cpu.
  int64_t nvme = 0;
  int64_t largest = 0;
  int64_t cached = 0;
  int64_t cached_bytes = 0;
  for (int64_t elements : NvmeParamGroupElements(c)) {
    nvme += AlignUp(c.p * elements, kSwapAlignment);
    largest = std::max(largest, elements);
    if (cached + elements <= op.max_in_cpu) {
      cached += elements;
      cached_bytes += AlignUp(c.p * elements, kPage);
    }
  }
  items.Add("parameter shard on NVMe", MemoryTier::kNvme, MemoryCategory::kParams, nvme,
            fmt::format("{} x shard {}, one 4 KiB-aligned extent per unit", c.p_text,
                        FormatCount(c.shard)));
  if (nvme > 0) {
    const SwapFileOverhead file = SwapFileOverheadOf(nvme);
    items.Add(std::string(kParamSwapFile), MemoryTier::kNvme, MemoryCategory::kBuffers, file.bytes,
              file.formula);
  }
  items.Add("parameter swap buffers", MemoryTier::kHostPinned, MemoryCategory::kBuffers,
            op.buffer_count * AlignUp(c.p * largest, kSwapAlignment),
            fmt::format("offload_param.buffer_count {} x the largest unit's piece {} x {} B",
                        op.buffer_count, FormatCount(largest), c.p));
  if (cached > 0) {
    items.Add("parameter groups cached in host memory (offload_param.max_in_cpu)",
              MemoryTier::kHost, MemoryCategory::kParams, cached_bytes,
              fmt::format("{} x {} elements of whole units within max_in_cpu {}", c.p_text,
                          FormatCount(cached), FormatCount(op.max_in_cpu)));
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

  // The comm queue's one staging buffer, held from the engine's start: every collective stages
  // through it in turn (they run one at a time on the comm stream), so it is the largest one's.
  struct Staging {
    int64_t bytes = 0;
    std::string formula;
  };
  Staging staging;
  auto consider = [&staging](int64_t bytes, std::string formula) {
    if (bytes > staging.bytes) staging = {bytes, std::move(formula)};
  };
  if (stage == 1 || stage == 2) {
    const AllGatherBuckets buckets = PublishBuckets(c.units, c.n, z.allgather_bucket_size);
    consider(c.p * buckets.largest_elements,
             fmt::format("{} x the largest all-gather of updated parameters (N x partitions within "
                         "allgather_bucket_size {}) = {} x {}",
                         c.p_text, FormatCount(z.allgather_bucket_size), c.p,
                         FormatCount(buckets.largest_elements)));
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
    consider(kF32 * reducer.staging_elements,
             fmt::format("4 B x the largest reduce-scatter bucket (N x its partitions) = 4 x {}",
                         FormatCount(reducer.staging_elements)));
    if (z.offload_optimizer.device != OffloadDevice::kNone && !SplitsOptimizer(c)) {
      // The reduced piece of each bucket is copied out to pinned memory and added into the host
      // gradient shard there (engine/zero/reduce_scatter_reducer.h).
      items.Add("reduced gradient bucket copied out for the host shard", MemoryTier::kHostPinned,
                MemoryCategory::kGrads, kF32 * (reducer.staging_elements / c.n),
                fmt::format("4 B x this rank's piece of the largest bucket = 4 x {}",
                            FormatCount(reducer.staging_elements / c.n)));
    }
    if (z.overlap_comm) {
      notes.push_back(
          "overlap_comm: the gradient buckets are assumed to complete as fast as the backward "
          "issues them; when the collectives fall behind, up to two more buckets' unit "
          "gradients stay alive");
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
    limits.budgets = {.prefetch_bucket_size = z.stage3_prefetch_bucket_size,
                      .max_live_parameters = z.stage3_max_live_parameters,
                      .max_reuse_distance = z.stage3_max_reuse_distance};
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
    consider(c.p * coordinator.largest_gather_staging,
             fmt::format("{} x the largest unit's all-gather (N x (partitions + 1)) = {} x {}",
                         c.p_text, c.p, FormatCount(coordinator.largest_gather_staging)));
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
      consider(c.p * elements,
               fmt::format("{} x the persistent parameters' all-gather (N x (their partitions + "
                           "1)) = {} x {}",
                           c.p_text, c.p, FormatCount(elements)));
    }
  }
  if (staging.bytes > 0) {
    items.Add("collective staging (one buffer, the largest collective's)", MemoryTier::kDevice,
              MemoryCategory::kBuffers, staging.bytes, staging.formula);
  }
}

}  // namespace

namespace {

// held + pass + compute over the items `in` selects.
template <typename Selector>
int64_t PeakOf(const std::vector<LineItem>& items, Selector in) {
  int64_t bytes = 0;
  for (const LineItem& item : items) {
    if (in(item)) bytes += item.bytes;
  }
  return bytes;
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
  c.optimizer = config.optimizer.type;
  c.moments = OptimizerMoments(config.optimizer.type);
  c.n = world_size;
  c.precision = train::PrecisionOf(config.model.dtype);
  SLUICE_ASSIGN_OR_RETURN(c.model, train::ModelOptionsFromConfig(config, c.precision));
  // The config's model.activation_checkpointing (ModelOptionsFromConfig), or the option's.
  c.model.activation_checkpointing =
      c.model.activation_checkpointing || options.activation_checkpointing;
  const int64_t tensor = c.model.tensor_parallel_size;
  c.vocab_parallel = tensor > 1 && SplitsVocabulary(config);
  SLUICE_RETURN_IF_ERROR(CheckTensorSplit(config, c.model, c.vocab_parallel));
  const int64_t threshold = c.stage == 3 ? c.z->stage3_param_persistence_threshold : -1;
  const std::vector<UnitLayout> layout =
      options.pipeline_stage
          ? DescribeStageUnits(c.model, *options.pipeline_stage, c.vocab_parallel)
          : DescribeUnits(c.model, c.vocab_parallel);
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
  if (c.stage == 3 && c.z->offload_param.device == OffloadDevice::kNvme) {
    // The engine refuses the same (offload/nvme_param_store.h): a unit is read in one piece.
    for (int64_t elements : NvmeParamGroupElements(c)) {
      if (elements > c.z->offload_param.buffer_size) {
        return InvalidArgumentError(
            "zero_optimization.offload_param.buffer_size = {} elements is smaller than a unit's "
            "parameters on one of {} ranks ({} elements, read from NVMe in one piece): raise "
            "buffer_size to at least {}",
            c.z->offload_param.buffer_size, c.n, elements, elements);
      }
    }
  }

  MemoryEstimate e;
  e.world_size = c.n;
  e.tensor_parallel = static_cast<int>(tensor);
  e.sequence_parallel = c.model.sequence_parallel;
  e.vocab_parallel = c.vocab_parallel;
  e.stage = c.stage;
  e.precision = std::string(train::PrecisionName(c.precision));
  e.param_dtype = stored;
  e.parameters = c.psi;
  e.model_parameters = c.psi;
  if (tensor > 1) {
    model::ModelOptions whole = c.model;
    whole.tensor_parallel_size = 1;
    whole.sequence_parallel = false;
    e.model_parameters =
        SummarizeLayout(options.pipeline_stage ? DescribeStageUnits(whole, *options.pipeline_stage)
                                               : DescribeUnits(whole))
            .parameters;
  }
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
  e.activation_checkpointing = c.model.activation_checkpointing;
  e.checkpointed_blocks = model::CheckpointedBlocks(c.model);
  e.cpu_checkpointing = e.checkpointed_blocks > 0 && c.model.checkpointing.host;
  e.offload_optimizer = c.z->offload_optimizer.device;
  e.offload_param = c.z->offload_param.device;

  // The model's forward/backward on one micro-batch. Under the ZeRO engine the model reads the
  // fp32 parameters the engine binds: no bf16 widening.
  model::ModelOptions pass = c.model;
  pass.param_dtype = DType::kF32;
  const ActivationEstimate act =
      options.pipeline_stage
          ? EstimateStageActivations(pass, *options.pipeline_stage, e.micro_batch, e.seq_len,
                                     c.vocab_parallel)
          : EstimateActivations(pass, e.micro_batch, e.seq_len, c.vocab_parallel);
  int64_t blocks = c.model.n_layer;  // the decoder blocks estimated
  if (options.pipeline_stage) {
    e.checkpointed_blocks = act.checkpointed_blocks;
    blocks = 0;
    for (const UnitLayout& unit : layout) blocks += unit.name == "block" ? unit.count : 0;
  }
  auto build = [&](std::vector<std::string>& notes) {
    ItemList items;
    AddZeroEngine(c, items, notes);
    const std::string checkpointed =
        e.checkpointed_blocks == 0 ? std::string()
        : e.checkpointed_blocks == blocks
            ? std::string(", checkpointed blocks")
            : fmt::format(", {} of {} blocks checkpointed", e.checkpointed_blocks, blocks);
    items.Add(fmt::format("activations (micro-batch {} x seq {}{})", e.micro_batch, e.seq_len,
                          checkpointed),
              MemoryTier::kDevice, MemoryCategory::kActivations, act.peak_bytes, act.peak_formula,
              Lifetime::kPass);
    // Pinned once, by the first pass, and kept (engine/model/checkpointed_inputs.h).
    items.Add("checkpointed block inputs (cpu_checkpointing)", MemoryTier::kHostPinned,
              MemoryCategory::kActivations, act.host_kept_bytes, act.host_formula, Lifetime::kHeld);
    items.Add("forward/backward scratch", MemoryTier::kDevice, MemoryCategory::kBuffers,
              act.scratch_peak_bytes, act.scratch_formula, Lifetime::kCompute);
    if (options.pipeline_stage) {
      const StageShape& shape = *options.pipeline_stage;
      items.Add("pipeline send buffers (kept to the step's tail)", MemoryTier::kDevice,
                MemoryCategory::kBuffers, StageSendBytes(pass, shape, e.micro_batch, e.seq_len),
                fmt::format("4 B x {} sends x R*d_model {}", shape.sends,
                            FormatCount(act.tokens * c.model.d_model)),
                Lifetime::kPass);
    }
    return items.Take();
  };
  const OffloadOptimizerConfig& oo = c.z->offload_optimizer;
  if (oo.ratio_auto && oo.device != OffloadDevice::kNone) {
    // The device part may take what the device budget leaves once everything else (the split's
    // device gradient shard included) is counted: the estimate without it, then with the cap.
    std::vector<std::string> unused;
    e.items = build(unused);
    const int64_t tile = zero::OffloadTileElements(c.z->sub_group_size);
    if (config.device.memory_limit.has_value()) {
      e.auto_state_budget = *config.device.memory_limit - e.tier_bytes(MemoryTier::kDevice);
      c.auto_device_elements =
          zero::DeviceElementsWithinBudget(*e.auto_state_budget, stored, c.shard, tile);
    } else {
      c.auto_device_elements = c.shard;  // no limit known before the GPU opens
    }
    // A split keeps the whole fp32 gradient shard on the device: when that leaves no room for a
    // single tile of state, offloading everything (the gradients in host memory) is better.
    c.auto_offloads_all = c.shard > 0 && c.auto_device_elements == 0;
    e.auto_offloads_all = c.auto_offloads_all;
    if (c.auto_offloads_all) {
      e.notes.push_back(fmt::format(
          "offload_optimizer.ratio auto: device.memory_limit cannot hold a split's fp32 gradient "
          "shard and one tile of optimizer state ({} bytes left): everything is offloaded, as "
          "with ratio 1",
          *e.auto_state_budget));
    } else {
      e.notes.push_back(fmt::format(
          "offload_optimizer.ratio auto: the engine measures the split when it starts; each tier "
          "shows its worst case: {} of {} elements on the device ({}), all of them offloaded",
          FormatCount(c.auto_device_elements), FormatCount(c.shard),
          e.auto_state_budget.has_value()
              ? fmt::format("what device.memory_limit leaves: {} bytes", *e.auto_state_budget)
              : std::string("no device.memory_limit: the whole shard")));
    }
  }
  e.items = build(e.notes);
  for (const LineItem& item : e.items) {
    if (item.tier != MemoryTier::kNvme) continue;
    const bool optimizer =
        item.category == MemoryCategory::kOptimizer || item.name == kOptimizerSwapFile;
    (optimizer ? e.optimizer_swap_bytes : e.param_swap_bytes) += item.bytes;
  }

  if (tensor > 1) {
    // Fewer key/value heads than ranks: each is copied to the tensor / n_kv_head ranks sharing it.
    const int64_t kv = c.model.n_kv_head;
    const std::string heads =
        kv < tensor ? fmt::format(
                          "its query heads, a copy of the key/value head it shares with "
                          "{} other tensor rank(s)",
                          tensor / kv - 1)
                    : "its heads";
    e.notes.push_back(fmt::format(
        "tensor parallelism over {} ranks{}: this is tensor rank 0, holding {} of the {} "
        "parameters ({}, d_ff columns{}; the norms{} whole on every tensor rank); "
        "ZeRO shards them over the {} data-parallel rank(s); attention and MLP activations are "
        "1/{}{}",
        tensor, c.model.sequence_parallel ? " with sequence parallelism" : "", FormatCount(c.psi),
        FormatCount(e.model_parameters), heads,
        c.vocab_parallel ? " and the longest piece of the vocabulary" : "",
        std::string(c.vocab_parallel ? "" : ", token table, LM head") +
            (c.model.family == model::Family::kGpt2 ? ", positions and row-parallel biases" : ""),
        c.n, tensor,
        c.model.sequence_parallel
            ? ", the norms' and the residual stream's rows 1/" + std::to_string(tensor) + " too"
            : ""));
    if (!c.vocab_parallel) {
      e.notes.push_back(
          "the cuda ops backend has no kernels for a piece of the vocabulary yet: the token "
          "table, LM head and logits stay whole on every tensor rank");
    }
  }
  if (e.last_shard_elements != e.shard_elements) {
    e.notes.push_back(fmt::format(
        "shards: every rank holds {} elements (each parameter cut into ceil(numel/{}) per rank); "
        "the last rank owns {} of them, the rest is padding",
        FormatCount(c.shard), c.n, FormatCount(e.last_shard_elements)));
  }
  if (!e.activation_checkpointing) {
    e.notes.push_back(
        "activations without checkpointing, as the config trains (model.activation_checkpointing: "
        "true, or --activation-checkpointing here, checkpoints the decoder blocks)");
  }
  return e;
}

bool SplitsVocabulary(const Config& config) { return config.device.type != DeviceType::kCuda; }

Status ResolveAutoRatioBudget(Config* config, int world_size) {
  OffloadOptimizerConfig& oo = config->zero.offload_optimizer;
  if (!oo.ratio_auto || oo.device == OffloadDevice::kNone) return OkStatus();
  Result<MemoryEstimate> estimate = EstimateMemory(*config, world_size);
  if (!estimate.ok()) {
    return Status(estimate.status())
        .WithContext(
            "estimating the device budget of zero_optimization.offload_optimizer.ratio "
            "\"auto\"");
  }
  if (estimate->auto_offloads_all) {
    // No room for a split (its gradient shard stays on the device): the plain offloaded
    // optimizer, with the gradient shard in host memory.
    oo.ratio_auto = false;
    oo.ratio = 1.0;
    SLUICE_LOG(kInfo, "offload",
               "zero_optimization.offload_optimizer.ratio auto: device.memory_limit leaves no room "
               "for a split's gradient shard and one tile of state on the device ({} bytes "
               "left); offloading everything (ratio 1)",
               *estimate->auto_state_budget);
    return OkStatus();
  }
  if (estimate->auto_state_budget.has_value()) {
    oo.auto_state_budget = std::max<int64_t>(0, *estimate->auto_state_budget);
  }
  return OkStatus();
}

}  // namespace sluice::estimate
