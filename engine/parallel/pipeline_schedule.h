// Pipeline schedules as data (parallelism-study.md §5.4-5.9): each pipeline stage's step is a
// list of instructions, made by a pure function of (stages P, micro-batches M, chunks v), that an
// executor runs in order, a validator checks (schedule_validation.h) and a simulator times
// (schedule_timeline.h) before any rank runs it.
//
// Virtual stages. With v chunks per stage, stage r holds model chunks c = 0..v-1, the virtual
// stages k = c * P + r (Megatron's interleaving): a micro-batch's forward runs k = 0, 1, ...,
// v * P - 1, wrapping from stage P - 1's chunk c to stage 0's chunk c + 1, and its backward runs
// them in reverse. Without interleaving v = 1 and the virtual stage is the stage.
//
// Lowering. A generator orders the compute (forward, backward, or backward-input and
// backward-weight) per stage, then adds the rest around each compute instruction: the first
// virtual stage loads the micro-batch's inputs and the last its targets before the forward;
// a forward is preceded by the receive of its input activation and followed by the send of its
// output, a backward (or backward-input) by the receive of its output gradient and followed by
// the send of its input gradient, wherever the neighbouring virtual stage is on another stage;
// the step ends with ReduceTiedGrads, ReduceGrads and OptimizerStep on every stage (DeepSpeed's
// TrainSchedule tail). Sends are asynchronous (posted and left, MPI Isend / a NCCL group); a
// receive waits for its data. Between one sender and one receiver, activations and gradients
// travel as two ordered streams: receives take them in the order they were sent.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/status.h"

namespace sluice::parallel {

enum class PipeOp : uint8_t {
  kLoadMicroBatch,   // first virtual stage: inputs; last: targets
  kForward,          // Model::Forward(micro) on the chunk
  kBackward,         // Model::Backward(micro): input and weight gradients
  kBackwardInput,    // zero-bubble B: the input gradient only (the critical path)
  kBackwardWeight,   // zero-bubble W: the weight gradient of an earlier kBackwardInput
  kSendActivation,   // the forward's output to the next virtual stage
  kRecvActivation,   // the forward's input from the previous virtual stage
  kSendGrad,         // the backward's input gradient to the previous virtual stage
  kRecvGrad,         // the backward's output gradient from the next virtual stage
  kReduceTiedGrads,  // sum tied parameters' gradients across the stages that hold them
  kReduceGrads,      // the data-parallel gradient reduction
  kOptimizerStep,
};

// "forward", "backward-input", "send-activation", ...
std::string_view PipeOpName(PipeOp op);
// Forward, backward, backward-input and backward-weight: the instructions that cost compute.
bool IsCompute(PipeOp op);
// Backward and backward-input: the ones that take the output gradient and make the input's.
bool IsInputBackward(PipeOp op);

struct PipeInstruction {
  PipeOp op = PipeOp::kForward;
  int micro = -1;  // the micro-batch, 0..M-1; -1 for the step's reductions and optimizer step
  int chunk = 0;   // the model chunk on this stage, 0..v-1

  bool operator==(const PipeInstruction&) const = default;
  // A cell label: F3, B3 (backward or backward-input), W3, L3 (load), SA3 / RA3 (send / receive
  // activation), SG3 / RG3 (gradient), TIED, REDUCE, STEP; ".c" appended for chunk c when
  // `show_chunk` (interleaved schedules).
  std::string Label(bool show_chunk = false) const;
  // "backward-input of micro-batch 3, chunk 1", for messages.
  std::string Describe() const;
};

enum class ScheduleKind {
  kGPipe,            // all forwards, then all backwards
  kOneFOneB,         // 1F1B / PipeDream-flush, Megatron's and DeepSpeed's order
  kInterleaved1F1B,  // Megatron's virtual-pipeline 1F1B, v >= 2 chunks per stage
  kZeroBubbleH1,     // ZB-H1: 1F1B with B split into input and weight gradients
};

// "gpipe", "1f1b", "interleaved-1f1b", "zb-h1".
std::string_view ScheduleKindName(ScheduleKind kind);

struct PipelineSchedule {
  ScheduleKind kind = ScheduleKind::kOneFOneB;
  int stages = 1;         // P
  int micro_batches = 1;  // M
  int chunks = 1;         // v
  // stage_instructions[r]: what stage r runs in one step, in order.
  std::vector<std::vector<PipeInstruction>> stage_instructions;

  int virtual_stages() const { return stages * chunks; }
  // Where a virtual stage lives: stage k mod P, chunk k / P.
  int StageOf(int virtual_stage) const { return virtual_stage % stages; }
  int ChunkOf(int virtual_stage) const { return virtual_stage / stages; }
  int VirtualStage(int stage, int chunk) const { return chunk * stages + stage; }
};

// The generators. InvalidArgument naming the argument when stages, micro_batches or chunks is
// below 1, or the combination is one the schedule does not support (see each).
Result<PipelineSchedule> MakeGPipeSchedule(int stages, int micro_batches);
// Stage r: min(P - r - 1, M) warm-up forwards, then forward / backward pairs, then the
// remaining backwards (Megatron's forward_backward_pipelining_without_interleaving).
Result<PipelineSchedule> MakeOneFOneBSchedule(int stages, int micro_batches);
// Megatron's interleaved schedule with micro-batch groups of P: v >= 2 (one chunk is 1F1B) and
// M a multiple of P (Megatron's rule before it grew micro-batch group sizes).
Result<PipelineSchedule> MakeInterleavedSchedule(int stages, int micro_batches, int chunks);
// ZB-H1 (PyTorch's ZB1P order): 1F1B's warm-up and forward / backward-input pairs; stage r
// appends one deferred backward-weight after each pair once its first r pairs are done, one
// after each cool-down backward-input, and the rest at the end: later stages fill 1F1B's
// cool-down bubble with weight gradients, at most P micro-batches in flight.
Result<PipelineSchedule> MakeZeroBubbleH1Schedule(int stages, int micro_batches);
// Any of the above; `chunks` must be 1 for all but kInterleaved1F1B.
Result<PipelineSchedule> MakePipelineSchedule(ScheduleKind kind, int stages, int micro_batches,
                                              int chunks = 1);

}  // namespace sluice::parallel
