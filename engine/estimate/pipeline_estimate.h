// The memory estimate of a pipelined configuration: the model's decoder layers partitioned into
// P stages (parallel::PartitionLayers, DeepSpeed's partition_method), each stage's units sharded
// by ZeRO over its data-parallel group (world / (tp x pp)), and the activations each stage keeps
// in flight under the schedule, from SimulateSchedule's per-stage peak: GPipe M micro-batches,
// 1F1B min(P - r, M) on stage r, ZB-H1 at most min(P, M), interleaved 1F1B per Megatron (counted
// in chunks).
// Every rank of a stage holds the same, so the stage with the largest device peak decides
// whether the device budget fits; the host and NVMe budgets count every stage's ranks.
//
//   PipelineEstimateOptions pipeline{.stages = 4, .schedule = ScheduleKind::kOneFOneB};
//   SLUICE_ASSIGN_OR_RETURN(PipelineEstimate p, EstimatePipeline(config, /*data_parallel=*/2,
//                                                                pipeline));
//   p.stages[p.worst_stage].estimate.tier_bytes(MemoryTier::kDevice);
//
// docs/memory_estimator.md ("Pipeline stages") has the formulas.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "engine/config/config.h"
#include "engine/estimate/estimate_fit.h"
#include "engine/estimate/memory_estimate.h"
#include "engine/estimate/stage_layout.h"
#include "engine/parallel/layer_partition.h"
#include "engine/parallel/pipeline_schedule.h"
#include "engine/parallel/schedule_timeline.h"
#include "runtime/status.h"

namespace sluice::estimate {

struct PipelineEstimateOptions {
  int stages = 1;                                                       // P
  parallel::ScheduleKind schedule = parallel::ScheduleKind::kOneFOneB;  // DeepSpeed's
  int micro_batches = 0;  // M per step; 0: batch.gradient_accumulation_steps (DeepSpeed's rule)
  int chunks = 0;         // v; 0: 2 for interleaved 1F1B, else 1
  // parameters, DeepSpeed PipelineModule's default; with time each layer's FLOPs stand in for
  // the times training measures.
  parallel::PartitionSpec partition;
  // The relative costs the timeline is drawn with (forward 1, backward 2, split 1 + 1).
  parallel::PipelineCosts costs;
  // How the stage count was given, for messages ("pipeline.stages", "--pipeline-stages").
  std::string stages_key = "pipeline.stages";
};

struct StageEstimate {
  StageShape shape;
  int64_t parameters = 0;  // elements the stage owns (a tied head's copy included)
  MemoryEstimate estimate;
};

struct PipelineEstimate {
  PipelineEstimateOptions options;  // with micro_batches and chunks resolved
  int data_parallel = 1;            // data-parallel ranks per stage: ZeRO's world
  int tensor_parallel = 1;          // tensor ranks per data-parallel rank (config.parallel.tensor)
  int64_t parameters = 0;           // the whole model's Ψ
  std::vector<int64_t> bounds;      // virtual stage k holds layers [bounds[k], bounds[k + 1])
  parallel::PipelineSchedule schedule;
  parallel::ScheduleTimeline timeline;
  std::vector<StageEstimate> stages;
  int worst_stage = 0;  // the largest device peak (the first of equals)

  int world_size() const { return data_parallel * tensor_parallel * options.stages; }
};

// "gpipe", "1f1b", "interleaved-1f1b" (or "interleaved"), "zb-h1"; InvalidArgument naming `key`.
Result<parallel::ScheduleKind> ParseScheduleKind(std::string_view name, std::string_view key);

// The pipeline `config` trains: pipeline.stages, .schedule, .chunks and .partition_method (the
// micro-batches left to gradient_accumulation_steps). InvalidArgument naming the key for a name
// it does not know.
Result<PipelineEstimateOptions> PipelineOptionsOf(const Config& config);

// EstimateMemory's errors, and InvalidArgument naming the key for fewer than 1 data-parallel
// rank, micro-batch or stage, more (virtual) stages than decoder layers, and a schedule that
// cannot take the stages, micro-batches and chunks (interleaved: M a multiple of P).
Result<PipelineEstimate> EstimatePipeline(const Config& config, int data_parallel,
                                          const PipelineEstimateOptions& pipeline,
                                          const EstimateOptions& options = {});

// The budgets of the whole pipeline: the worst stage's device bytes against device.memory_limit;
// the host and NVMe bytes of every stage's data_parallel x tensor_parallel ranks together against
// the node's.
FitReport CheckPipelineFit(const Config& config, const PipelineEstimate& pipeline);

// The per-stage table (layers, parameters, in flight, bytes per tier, device fit) and the
// schedule's timeline (parallel::RenderTimeline) with its bubble fraction.
std::string FormatPipelineText(const Config& config, const PipelineEstimate& pipeline);

// {"stages": P, "data_parallel": dp, "tensor_parallel": tp, "schedule": "1f1b", "micro_batches": M,
// "chunks": v,
//  "partition_method": "parameters", "bubble_fraction": f, "makespan": t, "worst_stage": r,
//  "per_stage": [{"stage": r, "layers": [[a, b], ...], "parameters": n, "in_flight": k,
//  "sends": s, "device": b, "host_pinned": b, "host": b, "nvme": b}, ...]}
nlohmann::ordered_json PipelineJson(const PipelineEstimate& pipeline);

}  // namespace sluice::estimate
