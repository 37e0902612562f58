// Scalar reference: softmax cross-entropy over the vocabulary, as PyTorch's
// F.cross_entropy(logits, targets, ignore_index=-1, reduction="mean"), forward and backward,
// fp32 or fp64, numerically stable (log-sum-exp around the row maximum).
#pragma once

#include <cstdint>

namespace sluice::kernels {

// A target equal to this contributes neither loss nor gradient (padding, prompt tokens).
inline constexpr int32_t kIgnoreIndex = -1;

// Targets that are not kIgnoreIndex.
int64_t CountValidTargets(const int32_t* targets, int64_t rows);

// The index of the first target outside [0, vocab) that is not kIgnoreIndex, or -1 when all are
// valid. The kernels abort on such a target; callers that read targets from data check first.
int64_t FirstInvalidTarget(const int32_t* targets, int64_t rows, int64_t vocab);

}  // namespace sluice::kernels

namespace sluice::kernels::ref {

// logits [rows, vocab], targets [rows], lse [rows] (saved for the backward, every row):
// lse[r] = log(sum_v exp(logits[r, v])); loss_r = lse[r] - logits[r, targets[r]].
// Returns the mean of loss_r over the rows whose target is not kIgnoreIndex, or 0 when there
// are none (PyTorch returns NaN there; 0 keeps an all-padding micro-batch harmless).
template <typename T>
T CrossEntropyForward(const T* logits, const int32_t* targets, T* lse, int64_t rows, int64_t vocab);

// dloss is the gradient of the returned mean (1, or a loss scale, or 1 / accumulation steps).
// With n = CountValidTargets: dlogits[r, v] = dloss / n * (exp(logits[r, v] - lse[r]) -
// [v == targets[r]]), and 0 for ignored rows. dlogits may alias logits (the LM head's logits
// are then overwritten by their gradient, saving a [rows, vocab] buffer).
template <typename T>
void CrossEntropyBackward(const T* logits, const int32_t* targets, const T* lse, T dloss,
                          T* dlogits, int64_t rows, int64_t vocab);

}  // namespace sluice::kernels::ref
