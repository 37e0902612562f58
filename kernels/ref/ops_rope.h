// Scalar reference: rotary position embedding as Hugging Face applies it to Llama's q and k
// (the rotate_half convention: dimension i pairs with i + head_dim / 2, not with i + 1).
//
// x, y [batch, seq, heads, head_dim], head_dim even, token t at position t. With
// half = head_dim / 2, inv_freq[i] = theta^(-2i / head_dim) and angle = t * inv_freq[i]:
//   y[i]        = x[i] * cos(angle) - x[i + half] * sin(angle)
//   y[i + half] = x[i + half] * cos(angle) + x[i] * sin(angle)        for i < half.
// cos and sin are computed in fp64 and rounded to T. Hugging Face forms the angle in fp32, so
// its angles are off by up to about t * 2^-24 radians; ours are exact to rounding.
// y may alias x. The backward is the inverse rotation (rotation by -angle) of dy.
#pragma once

#include <cstdint>

namespace sluice::kernels::ref {

template <typename T>
void RopeForward(const T* x, T* y, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                 float theta);

template <typename T>
void RopeBackward(const T* dy, T* dx, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                  float theta);

}  // namespace sluice::kernels::ref
