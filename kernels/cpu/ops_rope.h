// CPU backend of rotary position embedding (Hugging Face's rotate_half convention): fp32, the
// cos / sin table for the call's positions built once per call in fp64, OpenMP over tokens.
// Same semantics and shapes as kernels/ref/ops_rope.h; y may alias x.
#pragma once

#include <cstdint>

namespace sluice::kernels::cpu {

void RopeForward(const float* x, float* y, int64_t batch, int64_t seq, int64_t heads,
                 int64_t head_dim, float theta, int num_threads = 0);

void RopeBackward(const float* dy, float* dx, int64_t batch, int64_t seq, int64_t heads,
                  int64_t head_dim, float theta, int num_threads = 0);

}  // namespace sluice::kernels::cpu
