// CPU backend of softmax cross-entropy over the vocabulary (ignore index kIgnoreIndex = -1,
// mean over the remaining rows): fp32 with the row statistics in fp32 and the mean over rows
// in fp64, OpenMP over rows. Same semantics and shapes as kernels/ref/ops_loss.h; dlogits may
// alias logits.
#pragma once

#include <cstdint>

#include "kernels/ref/ops_loss.h"

namespace sluice::kernels::cpu {

float CrossEntropyForward(const float* logits, const int32_t* targets, float* lse, int64_t rows,
                          int64_t vocab, int num_threads = 0);

void CrossEntropyBackward(const float* logits, const int32_t* targets, const float* lse,
                          float dloss, float* dlogits, int64_t rows, int64_t vocab,
                          int num_threads = 0);

}  // namespace sluice::kernels::cpu
