// CPU backend of the MLP activations (GELU tanh approximation, SwiGLU): fp32, elementwise,
// OpenMP over the caller's threads. Same semantics as kernels/ref/ops_activation.h.
#pragma once

#include <cstdint>

namespace sluice::kernels::cpu {

void GeluForward(const float* x, float* y, int64_t n, int num_threads = 0);
void GeluBackward(const float* x, const float* dy, float* dx, int64_t n, int num_threads = 0);
void SwiGluForward(const float* gate, const float* up, float* y, int64_t n, int num_threads = 0);
void SwiGluBackward(const float* gate, const float* up, const float* dy, float* dgate, float* dup,
                    int64_t n, int num_threads = 0);

}  // namespace sluice::kernels::cpu
