#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/cuda/launch_check.h"
#include "kernels/cuda/rope.h"

namespace sluice::kernels::cuda {
namespace {

constexpr unsigned kThreads = 256;
constexpr int64_t kMaxHeadDim = 8192;  // the cos / sin table of a position fits 32 KiB of smem
// Enough blocks to fill the device when seq is short; each block covers one position, so the
// fp64 table is computed once per (position, block) rather than per element.
constexpr int64_t kTargetBlocks = 2048;
constexpr int64_t kMaxGridY = 65535;

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

// Block (t, j) rotates position t of sequences j, j + gridDim.y, ...; sign +1 is the forward,
// -1 the backward. The angles follow kernels/cpu/ops_rope.cpp: inv_freq and the angle in fp64,
// cos and sin in fp64, each rounded once to fp32.
template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    RopeKernel(const T* x, T* y, int64_t batch, int64_t seq, int64_t heads, int head_dim,
               float theta, float sign) {
  extern __shared__ float table[];  // cos [half], then sign * sin [half]
  const int half = head_dim / 2;
  const int64_t t = blockIdx.x;
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const double inv_freq =
        pow(static_cast<double>(theta), -2.0 * static_cast<double>(i) / head_dim);
    const double angle = static_cast<double>(t) * inv_freq;
    table[i] = static_cast<float>(cos(angle));
    table[half + i] = sign * static_cast<float>(sin(angle));
  }
  __syncthreads();
  const int packs = half / V;  // per head; V divides half
  const int64_t work = heads * packs;
  for (int64_t b = blockIdx.y; b < batch; b += gridDim.y) {
    const int64_t token = b * seq + t;
    for (int64_t w = threadIdx.x; w < work; w += blockDim.x) {
      const int64_t head = w / packs;
      const int i0 = static_cast<int>(w % packs) * V;
      const int64_t base = (token * heads + head) * head_dim + i0;
      const Pack<T, V> lo = *reinterpret_cast<const Pack<T, V>*>(x + base);
      const Pack<T, V> hi = *reinterpret_cast<const Pack<T, V>*>(x + base + half);
      Pack<T, V> out_lo;
      Pack<T, V> out_hi;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float c = table[i0 + k];
        const float s = table[half + i0 + k];
        const float l = ToFloat(lo.v[k]);
        const float h = ToFloat(hi.v[k]);
        // Explicit FMAs: the same rounding in every instantiation (the compiler's contraction
        // could otherwise pick a different product to fuse for V = 1 and V = 8).
        out_lo.v[k] = FromFloat<T>(__fmaf_rn(l, c, -(h * s)));
        out_hi.v[k] = FromFloat<T>(__fmaf_rn(h, c, l * s));
      }
      *reinterpret_cast<Pack<T, V>*>(y + base) = out_lo;
      *reinterpret_cast<Pack<T, V>*>(y + base + half) = out_hi;
    }
  }
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename T>
LaunchStatus Rotate(const T* x, T* y, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                    float theta, float sign, const char* what, cudaStream_t stream) {
  SLUICE_CUDA_LAUNCH_REQUIRE(batch >= 0 && seq >= 0 && heads >= 0 && head_dim >= 0,
                             std::string(what) + ": batch, seq, heads and head_dim must be >= 0");
  SLUICE_CUDA_LAUNCH_REQUIRE(head_dim % 2 == 0 && head_dim <= kMaxHeadDim,
                             std::string(what) + ": head_dim must be even and <= 8192");
  SLUICE_CUDA_LAUNCH_REQUIRE(seq < (int64_t{1} << 31), std::string(what) + ": seq must be < 2^31");
  if (batch == 0 || seq == 0 || heads == 0 || head_dim == 0) return LaunchStatus::Ok();
  SLUICE_CUDA_LAUNCH_REQUIRE(x != nullptr && y != nullptr,
                             std::string(what) + ": a pointer is null with a non-empty shape");
  const int64_t half = head_dim / 2;
  const int64_t grid_y =
      std::clamp<int64_t>((kTargetBlocks + seq - 1) / seq, 1, std::min(batch, kMaxGridY));
  const dim3 grid(static_cast<unsigned>(seq), static_cast<unsigned>(grid_y));
  const size_t smem = 2 * half * sizeof(float);
  constexpr int V = kVec<T>;
  const int dim = static_cast<int>(head_dim);
  if (half % V == 0 && Aligned16(x) && Aligned16(y)) {
    RopeKernel<T, V><<<grid, kThreads, smem, stream>>>(x, y, batch, seq, heads, dim, theta, sign);
  } else {
    RopeKernel<T, 1><<<grid, kThreads, smem, stream>>>(x, y, batch, seq, heads, dim, theta, sign);
  }
  return internal::AfterLaunch(what);
}

}  // namespace

template <typename T>
LaunchStatus RopeForward(const T* x, T* y, int64_t batch, int64_t seq, int64_t heads,
                         int64_t head_dim, float theta, cudaStream_t stream) {
  return Rotate(x, y, batch, seq, heads, head_dim, theta, 1.0f, "RopeForward", stream);
}

template <typename T>
LaunchStatus RopeBackward(const T* dy, T* dx, int64_t batch, int64_t seq, int64_t heads,
                          int64_t head_dim, float theta, cudaStream_t stream) {
  return Rotate(dy, dx, batch, seq, heads, head_dim, theta, -1.0f, "RopeBackward", stream);
}

#define SLUICE_INSTANTIATE(T)                                                                    \
  template LaunchStatus RopeForward<T>(const T*, T*, int64_t, int64_t, int64_t, int64_t, float,  \
                                       cudaStream_t);                                            \
  template LaunchStatus RopeBackward<T>(const T*, T*, int64_t, int64_t, int64_t, int64_t, float, \
                                        cudaStream_t);
SLUICE_INSTANTIATE(float)
SLUICE_INSTANTIATE(__nv_bfloat16)
#undef SLUICE_INSTANTIATE

}  // namespace sluice::kernels::cuda
