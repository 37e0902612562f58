// What the elementwise and row kernels share: 16-byte packs of T and the fp32 round trip of an
// element (bf16 rounds to nearest even on the way back). Included by .cu files of kernels/cuda
// only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace sluice::kernels::cuda::internal {

// Elements per 16-byte access.
template <typename T>
constexpr int kVec = 16 / static_cast<int>(sizeof(T));

template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

}  // namespace sluice::kernels::cuda::internal
