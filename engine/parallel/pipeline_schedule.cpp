#include "engine/parallel/pipeline_schedule.h"

#include <fmt/format.h>

#include <algorithm>

namespace sluice::parallel {
namespace {

PipeInstruction Op(PipeOp op, int micro, int chunk) {
  return {.op = op, .micro = micro, .chunk = chunk};
}

Status CheckSizes(int stages, int micro_batches, int chunks) {
  if (stages < 1) {
    return InvalidArgumentError(
        "pipeline schedule: stages (pipeline.stages) must be at least 1, got {}", stages);
  }
  if (micro_batches < 1) {
    return InvalidArgumentError(
        "pipeline schedule: micro_batches (gradient_accumulation_steps) must be at least 1, got {}",
        micro_batches);
  }
  if (chunks < 1) {
    return InvalidArgumentError(
        "pipeline schedule: chunks (model chunks per stage) must be at least 1, got {}", chunks);
  }
  return OkStatus();
}

PipelineSchedule Empty(ScheduleKind kind, int stages, int micro_batches, int chunks) {
  PipelineSchedule schedule{
      .kind = kind, .stages = stages, .micro_batches = micro_batches, .chunks = chunks};
  schedule.stage_instructions.resize(stages);
  return schedule;
}

// Adds what surrounds each compute instruction of `compute` (one list per stage, compute ops
// only): loads, receives before and sends after, wherever the neighbouring virtual stage is on
// another stage, and the step's tail (pipeline_schedule.h, "Lowering").
void Lower(const std::vector<std::vector<PipeInstruction>>& compute, PipelineSchedule& schedule) {
  const int last = schedule.virtual_stages() - 1;
  // Neighbouring virtual stages are on other stages unless there is only one.
  const bool p2p = schedule.stages > 1;
  for (int r = 0; r < schedule.stages; ++r) {
    std::vector<PipeInstruction>& out = schedule.stage_instructions[r];
    for (const PipeInstruction& in : compute[r]) {
      const int k = schedule.VirtualStage(r, in.chunk);
      switch (in.op) {
        case PipeOp::kForward:
          if (k == 0 || k == last) out.push_back(Op(PipeOp::kLoadMicroBatch, in.micro, in.chunk));
          if (k > 0 && p2p) out.push_back(Op(PipeOp::kRecvActivation, in.micro, in.chunk));
          out.push_back(in);
          if (k < last && p2p) out.push_back(Op(PipeOp::kSendActivation, in.micro, in.chunk));
          break;
        case PipeOp::kBackward:
        case PipeOp::kBackwardInput:
          if (k < last && p2p) out.push_back(Op(PipeOp::kRecvGrad, in.micro, in.chunk));
          out.push_back(in);
          if (k > 0 && p2p) out.push_back(Op(PipeOp::kSendGrad, in.micro, in.chunk));
          break;
        default:
          out.push_back(in);
          break;
      }
    }
    out.push_back(Op(PipeOp::kReduceTiedGrads, -1, 0));
    out.push_back(Op(PipeOp::kReduceGrads, -1, 0));
    out.push_back(Op(PipeOp::kOptimizerStep, -1, 0));
  }
}

}  // namespace

std::string_view PipeOpName(PipeOp op) {
  switch (op) {
    case PipeOp::kLoadMicroBatch:
      return "load-micro-batch";
    case PipeOp::kForward:
      return "forward";
    case PipeOp::kBackward:
      return "backward";
    case PipeOp::kBackwardInput:
      return "backward-input";
    case PipeOp::kBackwardWeight:
      return "backward-weight";
    case PipeOp::kSendActivation:
      return "send-activation";
    case PipeOp::kRecvActivation:
      return "recv-activation";
    case PipeOp::kSendGrad:
      return "send-grad";
    case PipeOp::kRecvGrad:
      return "recv-grad";
    case PipeOp::kReduceTiedGrads:
      return "reduce-tied-grads";
    case PipeOp::kReduceGrads:
      return "reduce-grads";
    case PipeOp::kOptimizerStep:
      return "optimizer-step";
  }
  return "?";
}

bool IsCompute(PipeOp op) {
  return op == PipeOp::kForward || op == PipeOp::kBackward || op == PipeOp::kBackwardInput ||
         op == PipeOp::kBackwardWeight;
}

bool IsInputBackward(PipeOp op) { return op == PipeOp::kBackward || op == PipeOp::kBackwardInput; }

std::string PipeInstruction::Label(bool show_chunk) const {
  std::string_view prefix;
  switch (op) {
    case PipeOp::kLoadMicroBatch:
      prefix = "L";
      break;
    case PipeOp::kForward:
      prefix = "F";
      break;
    case PipeOp::kBackward:
    case PipeOp::kBackwardInput:
      prefix = "B";
      break;
    case PipeOp::kBackwardWeight:
      prefix = "W";
      break;
    case PipeOp::kSendActivation:
      prefix = "SA";
      break;
    case PipeOp::kRecvActivation:
      prefix = "RA";
      break;
    case PipeOp::kSendGrad:
      prefix = "SG";
      break;
    case PipeOp::kRecvGrad:
      prefix = "RG";
      break;
    case PipeOp::kReduceTiedGrads:
      return "TIED";
    case PipeOp::kReduceGrads:
      return "REDUCE";
    case PipeOp::kOptimizerStep:
      return "STEP";
  }
  return show_chunk ? fmt::format("{}{}.{}", prefix, micro, chunk)
                    : fmt::format("{}{}", prefix, micro);
}

std::string PipeInstruction::Describe() const {
  if (micro < 0) return std::string(PipeOpName(op));
  return fmt::format("{} of micro-batch {}, chunk {}", PipeOpName(op), micro, chunk);
}

std::string_view ScheduleKindName(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGPipe:
      return "gpipe";
    case ScheduleKind::kOneFOneB:
      return "1f1b";
    case ScheduleKind::kInterleaved1F1B:
      return "interleaved-1f1b";
    case ScheduleKind::kZeroBubbleH1:
      return "zb-h1";
  }
  return "?";
}

Result<PipelineSchedule> MakeGPipeSchedule(int stages, int micro_batches) {
  SLUICE_RETURN_IF_ERROR(CheckSizes(stages, micro_batches, 1));
  PipelineSchedule schedule = Empty(ScheduleKind::kGPipe, stages, micro_batches, 1);
  std::vector<std::vector<PipeInstruction>> compute(stages);
  for (int r = 0; r < stages; ++r) {
    for (int m = 0; m < micro_batches; ++m) compute[r].push_back(Op(PipeOp::kForward, m, 0));
    for (int m = 0; m < micro_batches; ++m) compute[r].push_back(Op(PipeOp::kBackward, m, 0));
  }
  Lower(compute, schedule);
  return schedule;
}

Result<PipelineSchedule> MakeOneFOneBSchedule(int stages, int micro_batches) {
  SLUICE_RETURN_IF_ERROR(CheckSizes(stages, micro_batches, 1));
  PipelineSchedule schedule = Empty(ScheduleKind::kOneFOneB, stages, micro_batches, 1);
  std::vector<std::vector<PipeInstruction>> compute(stages);
  for (int r = 0; r < stages; ++r) {
    const int warmup = std::min(stages - r - 1, micro_batches);
    std::vector<PipeInstruction>& ops = compute[r];
    for (int m = 0; m < warmup; ++m) ops.push_back(Op(PipeOp::kForward, m, 0));
    for (int i = 0; i < micro_batches - warmup; ++i) {
      ops.push_back(Op(PipeOp::kForward, i + warmup, 0));
      ops.push_back(Op(PipeOp::kBackward, i, 0));
    }
    for (int m = micro_batches - warmup; m < micro_batches; ++m) {
      ops.push_back(Op(PipeOp::kBackward, m, 0));
    }
  }
  Lower(compute, schedule);
  return schedule;
}

Result<PipelineSchedule> MakeInterleavedSchedule(int stages, int micro_batches, int chunks) {
  SLUICE_RETURN_IF_ERROR(CheckSizes(stages, micro_batches, chunks));
  if (chunks < 2) {
    return InvalidArgumentError(
        "interleaved 1F1B: chunks (model chunks per stage) must be at least 2, got {}; use 1F1B "
        "for one chunk per stage",
        chunks);
  }
  if (micro_batches % stages != 0) {
    const int below = micro_batches / stages * stages;
    const int above = below + stages;
    return InvalidArgumentError(
        "interleaved 1F1B: micro_batches (gradient_accumulation_steps) = {} must be a multiple "
        "of stages (pipeline.stages) = {}; use {} micro-batches, or 1F1B",
        micro_batches, stages,
        below > 0 ? fmt::format("{} or {}", below, above) : fmt::format("{}", above));
  }
  PipelineSchedule schedule = Empty(ScheduleKind::kInterleaved1F1B, stages, micro_batches, chunks);
  // Megatron's table: the k-th forward of a stage is micro-batch group k / (P v), chunk
  // (k mod P v) / P, micro-batch group * P + k mod P; the k-th backward the same with the chunks
  // in reverse. The order of k is the same on every stage, only the warm-up depth differs.
  const int group = stages * chunks;
  const int total = micro_batches * chunks;
  auto micro_of = [&](int k) { return k / group * stages + k % stages; };
  auto forward = [&](int k) { return Op(PipeOp::kForward, micro_of(k), k % group / stages); };
  auto backward = [&](int k) {
    return Op(PipeOp::kBackward, micro_of(k), chunks - 1 - k % group / stages);
  };
  std::vector<std::vector<PipeInstruction>> compute(stages);
  for (int r = 0; r < stages; ++r) {
    const int warmup = micro_batches == stages
                           ? total
                           : std::min(2 * (stages - r - 1) + (chunks - 1) * stages, total);
    std::vector<PipeInstruction>& ops = compute[r];
    for (int k = 0; k < warmup; ++k) ops.push_back(forward(k));
    for (int k = 0; k < total - warmup; ++k) {
      ops.push_back(forward(k + warmup));
      ops.push_back(backward(k));
    }
    for (int k = total - warmup; k < total; ++k) ops.push_back(backward(k));
  }
  Lower(compute, schedule);
  return schedule;
}

Result<PipelineSchedule> MakeZeroBubbleH1Schedule(int stages, int micro_batches) {
  SLUICE_RETURN_IF_ERROR(CheckSizes(stages, micro_batches, 1));
  PipelineSchedule schedule = Empty(ScheduleKind::kZeroBubbleH1, stages, micro_batches, 1);
  std::vector<std::vector<PipeInstruction>> compute(stages);
  for (int r = 0; r < stages; ++r) {
    const int warmup = std::min(stages - r - 1, micro_batches);
    std::vector<PipeInstruction>& ops = compute[r];
    int next_weight = 0;
    auto weight = [&] { ops.push_back(Op(PipeOp::kBackwardWeight, next_weight++, 0)); };
    for (int m = 0; m < warmup; ++m) ops.push_back(Op(PipeOp::kForward, m, 0));
    for (int i = 0; i < micro_batches - warmup; ++i) {
      ops.push_back(Op(PipeOp::kForward, i + warmup, 0));
      ops.push_back(Op(PipeOp::kBackwardInput, i, 0));
      // Stage r holds its first r weight gradients back: its cool-down is r slots longer than
      // stage 0's, and that is where they go.
      if (i >= r) weight();
    }
    for (int m = micro_batches - warmup; m < micro_batches; ++m) {
      ops.push_back(Op(PipeOp::kBackwardInput, m, 0));
      weight();
    }
    while (next_weight < micro_batches) weight();
  }
  Lower(compute, schedule);
  return schedule;
}

Result<PipelineSchedule> MakePipelineSchedule(ScheduleKind kind, int stages, int micro_batches,
                                              int chunks) {
  if (kind != ScheduleKind::kInterleaved1F1B && chunks != 1) {
    return InvalidArgumentError(
        "pipeline schedule {}: chunks (model chunks per stage) must be 1, got {}; only "
        "interleaved-1f1b runs several chunks per stage",
        ScheduleKindName(kind), chunks);
  }
  switch (kind) {
    case ScheduleKind::kGPipe:
      return MakeGPipeSchedule(stages, micro_batches);
    case ScheduleKind::kOneFOneB:
      return MakeOneFOneBSchedule(stages, micro_batches);
    case ScheduleKind::kInterleaved1F1B:
      return MakeInterleavedSchedule(stages, micro_batches, chunks);
    case ScheduleKind::kZeroBubbleH1:
      return MakeZeroBubbleH1Schedule(stages, micro_batches);
  }
  return InvalidArgumentError("pipeline schedule: unknown kind {}", static_cast<int>(kind));
}

}  // namespace sluice::parallel
