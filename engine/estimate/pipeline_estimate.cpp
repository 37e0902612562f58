#include "engine/estimate/pipeline_estimate.h"

#include <fmt/format.h>

#include <string>
#include <utility>

#include "engine/estimate/count_format.h"
#include "engine/estimate/partition_weights.h"
#include "engine/parallel/schedule_chart.h"
#include "engine/train/precision.h"
#include "engine/train/run_setup.h"
#include "runtime/size_format.h"

namespace sluice::estimate {
namespace {

using parallel::PipeOp;
using parallel::ScheduleKind;

constexpr ScheduleKind kScheduleKinds[] = {ScheduleKind::kGPipe, ScheduleKind::kOneFOneB,
                                           ScheduleKind::kInterleaved1F1B,
                                           ScheduleKind::kZeroBubbleH1};

std::string LayersText(const StageShape& shape) {
  std::string out;
  for (const model::ModelStage& chunk : shape.chunks) {
    if (!out.empty()) out += " ";
    out += fmt::format("[{}, {})", chunk.begin_layer, chunk.end_layer);
  }
  return out;
}

// "for all 2 rank(s)" in a budget's source, for a node of every stage's ranks.
void NameAllRanks(BudgetCheck& check, int data_parallel, int world) {
  const std::string from = fmt::format("for all {} rank(s)", data_parallel);
  const size_t at = check.limit_source.find(from);
  if (at == std::string::npos) return;
  check.limit_source.replace(at, from.size(),
                             fmt::format("for all {} rank(s) (every stage)", world));
}

}  // namespace

Result<ScheduleKind> ParseScheduleKind(std::string_view name, std::string_view key) {
  if (name == "interleaved") return ScheduleKind::kInterleaved1F1B;
  std::string names;
  for (ScheduleKind kind : kScheduleKinds) {
    if (name == parallel::ScheduleKindName(kind)) return kind;
    names += fmt::format("{}\"{}\"", names.empty() ? "" : ", ", parallel::ScheduleKindName(kind));
  }
  return InvalidArgumentError("{} \"{}\" is not a pipeline schedule: use one of {}", key, name,
                              names);
}

Result<PipelineEstimateOptions> PipelineOptionsOf(const Config& config) {
  PipelineEstimateOptions options;
  options.stages = config.parallel.pipeline;
  SLUICE_ASSIGN_OR_RETURN(options.schedule,
                          ParseScheduleKind(config.parallel.schedule, "pipeline.schedule"));
  options.chunks = config.parallel.chunks;
  SLUICE_ASSIGN_OR_RETURN(options.partition,
                          parallel::ParsePartitionMethod(config.parallel.partition_method,
                                                         "pipeline.partition_method"));
  return options;
}

Result<PipelineEstimate> EstimatePipeline(const Config& config, int data_parallel,
                                          const PipelineEstimateOptions& pipeline,
                                          const EstimateOptions& options) {
  // The whole model first: the config's own errors, and Ψ.
  SLUICE_ASSIGN_OR_RETURN(MemoryEstimate whole, EstimateMemory(config, data_parallel, options));
  PipelineEstimate p;
  p.options = pipeline;
  p.data_parallel = data_parallel;
  p.tensor_parallel = whole.tensor_parallel;
  p.parameters = whole.parameters;
  PipelineEstimateOptions& o = p.options;
  if (o.stages < 1) {
    return InvalidArgumentError("{} = {} must be at least 1", o.stages_key, o.stages);
  }
  if (o.micro_batches == 0)
    o.micro_batches = static_cast<int>(config.batch.gradient_accumulation_steps);
  if (o.micro_batches < 1) {
    return InvalidArgumentError(
        "{} micro-batches per step: a pipeline needs at least 1 (gradient_accumulation_steps, or "
        "--micro-batches)",
        o.micro_batches);
  }
  if (o.chunks == 0) o.chunks = o.schedule == ScheduleKind::kInterleaved1F1B ? 2 : 1;

  Result<parallel::PipelineSchedule> schedule =
      parallel::MakePipelineSchedule(o.schedule, o.stages, o.micro_batches, o.chunks);
  if (!schedule.ok()) {
    return Status(schedule.status())
        .WithContext(fmt::format("the {} schedule of {} = {} with {} micro-batches",
                                 parallel::ScheduleKindName(o.schedule), o.stages_key, o.stages,
                                 o.micro_batches));
  }
  p.schedule = *std::move(schedule);
  SLUICE_ASSIGN_OR_RETURN(p.timeline, parallel::SimulateSchedule(p.schedule, o.costs));

  const train::Precision precision = train::PrecisionOf(config.model.dtype);
  SLUICE_ASSIGN_OR_RETURN(model::ModelOptions model,
                          train::ModelOptionsFromConfig(config, precision));
  SLUICE_ASSIGN_OR_RETURN(
      const std::vector<int64_t> weights,
      PartitionWeights(model, o.partition, /*measured=*/nullptr, config.model.seq_len));
  const std::string parts_key =
      o.chunks == 1 ? o.stages_key
                    : fmt::format("{} {} x {} chunks", o.stages_key, o.stages, o.chunks);
  SLUICE_ASSIGN_OR_RETURN(p.bounds, parallel::PartitionLayers(weights, p.schedule.virtual_stages(),
                                                              o.partition.method, parts_key));

  for (int r = 0; r < o.stages; ++r) {
    StageEstimate s;
    s.shape.stage = r;
    s.shape.stages = o.stages;
    s.shape.schedule = std::string(parallel::ScheduleKindName(o.schedule));
    for (int c = 0; c < o.chunks; ++c) {
      const int k = p.schedule.VirtualStage(r, c);
      s.shape.chunks.push_back({p.bounds[k], p.bounds[k + 1]});
    }
    s.shape.in_flight = p.timeline.stages[r].peak_in_flight;
    for (const parallel::PipeInstruction& in : p.schedule.stage_instructions[r]) {
      if (in.op == PipeOp::kSendActivation || in.op == PipeOp::kSendGrad) ++s.shape.sends;
    }
    EstimateOptions stage_options = options;
    stage_options.pipeline_stage = s.shape;
    Result<MemoryEstimate> estimate = EstimateMemory(config, data_parallel, stage_options);
    if (!estimate.ok()) {
      return Status(estimate.status())
          .WithContext(fmt::format("pipeline stage {} (layers {})", r, LayersText(s.shape)));
    }
    s.estimate = *std::move(estimate);
    s.parameters = s.estimate.parameters;
    if (model.tie_embeddings && o.stages > 1 && r == o.stages - 1) {
      s.estimate.notes.push_back(
          "tied embeddings: the last stage holds a copy of the token table for the LM head, its "
          "gradient summed with the first stage's before each step (Megatron's embedding group)");
    }
    p.stages.push_back(std::move(s));
  }
  for (int r = 1; r < o.stages; ++r) {
    if (p.stages[r].estimate.tier_bytes(MemoryTier::kDevice) >
        p.stages[p.worst_stage].estimate.tier_bytes(MemoryTier::kDevice)) {
      p.worst_stage = r;
    }
  }
  return p;
}

FitReport CheckPipelineFit(const Config& config, const PipelineEstimate& pipeline) {
  // One rank of the worst stage's device items beside every stage's other tiers: CheckFit then
  // counts data_parallel ranks of each.
  MemoryEstimate node = pipeline.stages[pipeline.worst_stage].estimate;
  node.items.clear();
  node.optimizer_swap_bytes = 0;
  node.param_swap_bytes = 0;
  for (size_t r = 0; r < pipeline.stages.size(); ++r) {
    const MemoryEstimate& e = pipeline.stages[r].estimate;
    for (const LineItem& item : e.items) {
      if (item.tier != MemoryTier::kDevice || static_cast<int>(r) == pipeline.worst_stage) {
        node.items.push_back(item);
      }
    }
    node.optimizer_swap_bytes += e.optimizer_swap_bytes;
    node.param_swap_bytes += e.param_swap_bytes;
  }
  FitReport fit = CheckFit(config, node);
  for (BudgetCheck& check : fit.checks) {
    if (check.name != "device") {
      NameAllRanks(check, pipeline.data_parallel * pipeline.tensor_parallel, pipeline.world_size());
    } else {
      check.limit_source += fmt::format(" (stage {}, the largest)", pipeline.worst_stage);
    }
  }
  return fit;
}

std::string FormatPipelineText(const Config& config, const PipelineEstimate& p) {
  const PipelineEstimateOptions& o = p.options;
  std::string out = fmt::format(
      "Pipeline: {} stage(s) x {} data-parallel rank(s){} = {} ranks; {} schedule{}, {} "
      "micro-batch(es) of {} per step; layers partitioned by \"{}\"{}; ZeRO shards each stage{} "
      "over its {} data-parallel rank(s)\n",
      o.stages, p.data_parallel,
      p.tensor_parallel > 1 ? fmt::format(" x {} tensor-parallel rank(s)", p.tensor_parallel) : "",
      p.world_size(), parallel::ScheduleKindName(o.schedule),
      o.chunks > 1 ? fmt::format(" with {} chunks per stage", o.chunks) : "", o.micro_batches,
      config.batch.micro_batch_per_gpu, parallel::PartitionMethodName(o.partition),
      o.partition.method == parallel::PartitionMethod::kTime
          ? " (each layer's FLOPs standing in for the times training measures when it starts)"
          : "",
      p.tensor_parallel > 1 ? " (each tensor rank's pieces)" : "", p.data_parallel);
  size_t width = 6;
  for (const StageEstimate& s : p.stages) width = std::max(width, LayersText(s.shape).size());
  out += fmt::format("  {:<5}  {:<{}}  {:>15}  {:>9}  {:>11}  {:>11}  {:>11}  {:>11}  {}\n",
                     "stage", "layers", width, "parameters", "in flight", "device", "host pinned",
                     "host", "nvme", "device fits");
  int64_t sum = 0;
  for (const StageEstimate& s : p.stages) {
    const MemoryEstimate& e = s.estimate;
    const int64_t device = e.tier_bytes(MemoryTier::kDevice);
    std::string fits = "not checked";
    if (config.device.memory_limit.has_value()) {
      fits = device <= *config.device.memory_limit ? "yes" : "NO";
    }
    out += fmt::format(
        "  {:<5}  {:<{}}  {:>15}  {:>9}  {:>11}  {:>11}  {:>11}  {:>11}  {}{}\n", s.shape.stage,
        LayersText(s.shape), width, FormatCount(s.parameters), s.shape.in_flight, ByteCell(device),
        ByteCell(e.tier_bytes(MemoryTier::kHostPinned)), ByteCell(e.tier_bytes(MemoryTier::kHost)),
        ByteCell(e.tier_bytes(MemoryTier::kNvme)), fits,
        s.shape.stage == p.worst_stage ? "  (largest)" : "");
    sum += s.parameters;
  }
  out += fmt::format(
      "  parameters over the stages: {} ({}Ψ {}{}); in flight: (micro-batch, chunk) "
      "pairs forwarded and not yet backwarded, at most, in the simulated step\n",
      FormatCount(sum),
      p.tensor_parallel > 1 ? "tensor rank 0's pieces of the model, " : "the model's ",
      FormatCount(p.parameters),
      sum != p.parameters ? ", plus the tied head's copy of the token table" : "");
  out +=
      fmt::format("\nSchedule ({}: forward {:g}, backward {:g}{}), bubble {:.1f}% of the step:\n",
                  parallel::ScheduleKindName(o.schedule), o.costs.forward, o.costs.backward,
                  o.schedule == ScheduleKind::kZeroBubbleH1
                      ? fmt::format(" = input {:g} + weight {:g}", o.costs.backward_input,
                                    o.costs.backward_weight)
                      : "",
                  100 * p.timeline.bubble_fraction);
  out += parallel::RenderTimeline(p.timeline);
  out += fmt::format("\nStage {} (the largest device peak), in detail:\n", p.worst_stage);
  return out;
}

nlohmann::ordered_json PipelineJson(const PipelineEstimate& p) {
  const PipelineEstimateOptions& o = p.options;
  nlohmann::ordered_json j;
  j["stages"] = o.stages;
  j["data_parallel"] = p.data_parallel;
  j["tensor_parallel"] = p.tensor_parallel;
  j["schedule"] = std::string(parallel::ScheduleKindName(o.schedule));
  j["micro_batches"] = o.micro_batches;
  j["chunks"] = o.chunks;
  j["partition_method"] = parallel::PartitionMethodName(o.partition);
  j["bubble_fraction"] = p.timeline.bubble_fraction;
  j["makespan"] = p.timeline.makespan;
  j["worst_stage"] = p.worst_stage;
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  for (const StageEstimate& s : p.stages) {
    nlohmann::ordered_json stage;
    stage["stage"] = s.shape.stage;
    nlohmann::ordered_json layers = nlohmann::ordered_json::array();
    for (const model::ModelStage& chunk : s.shape.chunks) {
      layers.push_back({chunk.begin_layer, chunk.end_layer});
    }
    stage["layers"] = layers;
    stage["parameters"] = s.parameters;
    stage["in_flight"] = s.shape.in_flight;
    stage["sends"] = s.shape.sends;
    for (MemoryTier tier : kAllMemoryTiers) {
      stage[std::string(MemoryTierName(tier))] = s.estimate.tier_bytes(tier);
    }
    stages.push_back(std::move(stage));
  }
  j["per_stage"] = std::move(stages);
  return j;
}

}  // namespace sluice::estimate
