// CUDA backend of softmax cross-entropy over the vocabulary. kernels/ref/ops_loss.h is the spec:
// PyTorch's F.cross_entropy(logits, targets, ignore_index=kIgnoreIndex (-1), reduction="mean"),
// with the logits in T (float or bf16), the row statistics (lse) in fp32, and 0 as the mean when
// no row counts. Every launcher enqueues on `stream` and returns at once; see launch_status.h.
//
// Targets live on the device, so a launcher cannot check them before launching. The reference
// aborts on a target outside [0, vocab) that is not kIgnoreIndex; here such a target is never
// used as an address: the kernel sets *invalid_target to 1 (never back to 0) and treats the row
// as ignored (no loss, not counted in the mean, zero gradient). invalid_target is a device
// pointer and may be null, which drops the report. Callers holding the targets on the host
// should still check them with kernels::FirstInvalidTarget and return a Status.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/launch_status.h"
#include "kernels/ref/ops_loss.h"

namespace sluice::kernels::cuda {

// logits [rows, vocab] in T, targets [rows] int32, lse [rows] fp32 (every row, saved for the
// backward): lse[r] = log(sum_v exp(logits[r, v])) in one online max/sum pass per row (one
// block per row, fp32). The mean of lse[r] - logits[r, targets[r]] over the counted rows goes
// to *loss_out, a device fp32 scalar, since the host cannot wait for it; the per-row losses are
// summed in fp64 by one block in a fixed order, so the loss is bitwise the same run to run.
// rows == 0 writes 0 to *loss_out.
template <typename T>
LaunchStatus CrossEntropyForward(const T* logits, const int32_t* targets, float* lse, int64_t rows,
                                 int64_t vocab, float* loss_out, int32_t* invalid_target,
                                 cudaStream_t stream);

// Bytes of workspace CrossEntropyBackward needs (the count of counted rows, on the device).
size_t CrossEntropyBackwardWorkspaceBytes(int64_t rows);

// dloss is the gradient of the mean loss, a host value known before the launch: the engine
// passes its loss scale (1, the fp16/bf16 loss-scale factor, or 1 / accumulation steps), as the
// reference takes it. With n the number of counted rows (found on the device):
// dlogits[r, v] = dloss / n * (exp(logits[r, v] - lse[r]) - [v == targets[r]]) rounded to T,
// and 0 for ignored rows and when n == 0. dlogits is overwritten and may alias logits (the LM
// head's logits are then replaced by their gradient).
template <typename T>
LaunchStatus CrossEntropyBackward(const T* logits, const int32_t* targets, const float* lse,
                                  float dloss, T* dlogits, int64_t rows, int64_t vocab,
                                  int32_t* invalid_target, void* workspace, size_t workspace_bytes,
                                  cudaStream_t stream);

}  // namespace sluice::kernels::cuda
