// CPU backend of the residual add, gradient accumulation, scaling and bias add: fp32, OpenMP
// across the caller's threads (num_threads 0 = OpenMP's default). Same semantics and shapes as
// kernels/ref/ops_elementwise.h.
#pragma once

#include <cstdint>

namespace sluice::kernels::cpu {

void Add(const float* a, const float* b, float* y, int64_t n, int num_threads = 0);
void Accumulate(const float* x, float* y, int64_t n, int num_threads = 0);
void Scale(float* y, float s, int64_t n, int num_threads = 0);
void BiasAddForward(const float* bias, float* y, int64_t rows, int64_t cols, int num_threads = 0);
void BiasAddBackward(const float* dy, float* dbias, int64_t rows, int64_t cols,
                     int num_threads = 0);

}  // namespace sluice::kernels::cpu
