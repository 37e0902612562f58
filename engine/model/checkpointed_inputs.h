// Where checkpointed decoder blocks keep their inputs from the forward to the recomputation in
// the backward, as ModelOptions::checkpointing says (DeepSpeed's activation_checkpointing
// section):
//   device (default): a view of the input, which its producer keeps alive; nothing is copied.
//   device, contiguous: a copy in one buffer with a slot per checkpointed block, allocated in the
//     pass's context by the first checkpointed block's forward and freed after its backward (the
//     last of the pass).
//   host (cpu_checkpointing): a stream-ordered device-to-host copy into pinned host memory, one
//     buffer per block or, contiguous, one buffer with a slot per block; the pinned buffers stay
//     from pass to pass (grown when a pass has more tokens) since pinning is slow. Before the
//     recomputation the input is copied back (host-to-device, on the stream) into a buffer of the
//     recomputation's context.
// The host never reads device memory: every copy is enqueued on the pass's stream.
//
// Hand-off. When the input is copied, its device memory is needed only by this block's forward.
// If it is the output of the previous checkpointed block, whose only consumer is this block,
// that output is released as soon as this block's forward is enqueued: the device then holds one
// block output at a time instead of one per block. (An output consumed by anything else, a block
// that is not checkpointed or the final norm, stays with its producer.)
//
// Profiling (checkpointing.profile): host functions on the stream take the time before and after
// each recomputation, so the span is when the stream ran it, not when the host enqueued it; each
// becomes a "recompute <block>" span on the compute lane of the trace recorder (when enabled),
// and the pass's total is logged after the last backward.
//
// Micro-batches. A pipelined pass (model.h, "Passes") has several micro-batches in flight, each
// with its own ForwardContext: what one micro-batch keeps (its pinned slots, its hand-off) is kept
// under ForwardContext::micro_batch(), taken at its first checkpointed block's forward and given
// back after that block's backward; a finished micro-batch's pinned slots serve the next one.
//
// One object per model (a pipeline stage: its checkpointed blocks only), shared by its blocks.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/model/forward_context.h"
#include "engine/model/model_options.h"
#include "engine/model/model_stage.h"
#include "engine/model/module.h"
#include "runtime/device.h"
#include "runtime/status.h"

namespace sluice::model {

template <typename T>
class CheckpointedInputs {
 public:
  // `builder` gives the id under which the contiguous device buffer is saved in a pass; `options`
  // the blocks (CheckpointedBlocks) and how they keep their inputs; `stage` the blocks the model
  // holds (the whole model without it).
  CheckpointedInputs(ModuleBuilder& builder, const ModelOptions& options);
  CheckpointedInputs(ModuleBuilder& builder, const ModelOptions& options, const ModelStage& stage);
  CheckpointedInputs(const CheckpointedInputs&) = delete;
  CheckpointedInputs& operator=(const CheckpointedInputs&) = delete;

  // Blocks checkpointed: the checkpointed blocks of the stage, first() .. first() + count() - 1;
  // slot i is block i.
  int64_t first() const { return first_; }
  int64_t count() const { return count_; }
  bool holds(int64_t slot) const { return slot >= first_ && slot < first_ + count_; }
  const CheckpointingOptions& options() const { return options_; }

  // In checkpointed block `slot`'s forward (block id `block_id`), before its inner forward: keeps
  // its input `x`.
  Status Keep(ForwardContext<T>& ctx, int block_id, int64_t slot, Act<T> x);
  // After that forward, whose output `y` is saved under `block_id` in `ctx`: releases `x` if it
  // was the previous checkpointed block's output (see Hand-off), and offers `y` to the next.
  void HandOff(ForwardContext<T>& ctx, const T* x, int block_id, const T* y);
  // In the backward, the input that `slot` kept, in device memory for the recomputation in
  // `work` (cpu_checkpointing: a copy allocated as saved under `block_id` in `work`).
  Result<T*> Restore(ForwardContext<T>& ctx, ForwardContext<T>& work, int block_id, int64_t slot,
                     int64_t rows);
  // After `slot`'s backward: slot first(), the micro-batch's last, frees the contiguous device
  // buffer, lets the micro-batch's state go and logs the recomputation time when profiling.
  Status Done(ForwardContext<T>& ctx, int64_t slot);
  // After a pass, its stream drained: lets the state of every micro-batch still kept go (an
  // evaluation pass's, or a failed pass's); their pinned slots serve later passes.
  void DropMicroBatches();

  // Profiling: enqueue the clock readings around the recomputation of `slot` (named `name`).
  Status BeginRecompute(Stream& stream, int64_t slot);
  Status EndRecompute(Stream& stream, int64_t slot, const std::string& name);
  // Recomputations timed and their total time since the model was built (read once the stream
  // has run them: after the pass).
  int64_t recomputed_blocks() const { return recomputed_blocks_.load(); }
  int64_t recompute_ns() const { return recompute_ns_.load(); }

 private:
  // What one micro-batch keeps between its forward and its backward.
  struct MicroBatch {
    std::vector<PinnedBuffer> host;  // one per slot, or one for all (contiguous)
    // The output of the last checkpointed block whose forward ran, for the hand-off.
    int pending_id = -1;
    const T* pending = nullptr;
  };

  bool copies() const { return options_.host || options_.contiguous; }
  // The state of ctx's micro-batch, begun by its first checkpointed block.
  MicroBatch& Begin(const ForwardContext<T>& ctx);
  MicroBatch& Of(const ForwardContext<T>& ctx);
  // The pinned slot of `slot` for `count` elements, allocated or grown when too small.
  Result<T*> HostSlot(MicroBatch& micro, Stream& stream, int64_t slot, int64_t count);

  CheckpointingOptions options_;
  int64_t first_;
  int64_t count_;
  int64_t d_model_;
  int buffer_id_;  // the contiguous device buffer's key in a pass's saved state
  std::unordered_map<int, MicroBatch> micro_batches_;  // by ForwardContext::micro_batch()
  std::vector<std::vector<PinnedBuffer>> spare_host_;  // pinned slots of finished micro-batches
  // Profiling: written by host functions on the stream.
  std::vector<int64_t> start_ns_;
  int64_t pass_ns_ = 0;
  int64_t pass_blocks_ = 0;
  std::atomic<int64_t> recomputed_blocks_{0};
  std::atomic<int64_t> recompute_ns_{0};
};

extern template class CheckpointedInputs<float>;
extern template class CheckpointedInputs<double>;

}  // namespace sluice::model
