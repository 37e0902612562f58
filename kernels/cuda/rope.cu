#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/cuda/element_access.cuh"
#include "kernels/cuda/launch_check.h"
#include "kernels/cuda/rope.h"

namespace sluice::kernels::cuda {
namespace {

constexpr unsigned kThreads = 256;
constexpr int64_t kMaxHeadDim = 8192;
// Rotations (a lo pack and its hi pack) a thread holds in registers at once: their loads are all
// issued before the block computes its cos / sin table, so the fp64 latency hides under them.
constexpr int kRounds = 2;
// A block covers kItemsPerBlock rotations of one sequence: several positions when a position has
// few (the k of GQA, short heads), so that no thread idles and the fp64 table is computed once
// per (position, block). Positions x half <= 4096 keeps the table within 32 KiB of smem.
constexpr int64_t kItemsPerBlock = kRounds * kThreads;
constexpr int64_t kMaxGridY = 65535;

using internal::FromFloat;
using internal::kVec;
using internal::Pack;
using internal::ToFloat;

// Block (p, j) rotates positions [p * positions, (p + 1) * positions) of sequences j,
// j + gridDim.y, ...; sign +1 is the forward, -1 the backward. The angles follow
// kernels/cpu/ops_rope.cpp: inv_freq and the angle in fp64, cos and sin in fp64, each rounded once
// to fp32. A rotation (item) is one pack of V pairs (i, i + half) of one head of one token; items
// run over (position, head, pack) in memory order, so neighbouring threads read neighbouring
// 16-byte packs.
template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    RopeKernel(const T* x, T* y, int64_t batch, int64_t seq, int heads, int head_dim, int positions,
               float theta, float sign) {
  extern __shared__ float table[];  // cos [positions][half], then sign * sin [positions][half]
  const int half = head_dim / 2;
  const int packs = half / V;  // per head; V divides half
  const int64_t t0 = int64_t{blockIdx.x} * positions;
  const int here = static_cast<int>(seq - t0 < positions ? seq - t0 : positions);
  const int entries = here * half;
  const int items = entries / V * heads;  // here * heads * packs
  bool table_ready = false;
  for (int64_t b = blockIdx.y; b < batch; b += gridDim.y) {
    const int64_t first_row = (b * seq + t0) * heads;  // (token, head) row of the block's first
    for (int base = 0; base < items; base += kRounds * kThreads) {  // block-uniform trip count
      Pack<T, V> lo[kRounds];
      Pack<T, V> hi[kRounds];
      int64_t at[kRounds] = {};
      int angle[kRounds] = {};
#pragma unroll
      for (int r = 0; r < kRounds; ++r) {
        const int item = base + r * kThreads + static_cast<int>(threadIdx.x);
        if (item < items) {
          const int row = item / packs;  // position_in_block * heads + head
          const int i0 = (item - row * packs) * V;
          at[r] = (first_row + row) * head_dim + i0;
          angle[r] = row / heads * half + i0;
          lo[r] = *reinterpret_cast<const Pack<T, V>*>(x + at[r]);
          hi[r] = *reinterpret_cast<const Pack<T, V>*>(x + at[r] + half);
        }
      }
      if (!table_ready) {  // once per block, while the first loads are in flight
        for (int e = threadIdx.x; e < entries; e += blockDim.x) {
          const int p = e / half;
          const int i = e - p * half;
          const double inv_freq =
              pow(static_cast<double>(theta), -2.0 * static_cast<double>(i) / head_dim);
          const double a = static_cast<double>(t0 + p) * inv_freq;
          table[e] = static_cast<float>(cos(a));
          table[entries + e] = sign * static_cast<float>(sin(a));
        }
        __syncthreads();
        table_ready = true;
      }
#pragma unroll
      for (int r = 0; r < kRounds; ++r) {
        const int item = base + r * kThreads + static_cast<int>(threadIdx.x);
        if (item < items) {
          Pack<T, V> out_lo;
          Pack<T, V> out_hi;
#pragma unroll
          for (int k = 0; k < V; ++k) {
            const float c = table[angle[r] + k];
            const float s = table[entries + angle[r] + k];
            const float l = ToFloat(lo[r].v[k]);
            const float h = ToFloat(hi[r].v[k]);
            // Explicit FMAs: the same rounding in every instantiation (the compiler's contraction
            // could otherwise pick a different product to fuse for V = 1 and V = 8).
            out_lo.v[k] = FromFloat<T>(__fmaf_rn(l, c, -(h * s)));
            out_hi.v[k] = FromFloat<T>(__fmaf_rn(h, c, l * s));
          }
          *reinterpret_cast<Pack<T, V>*>(y + at[r]) = out_lo;
          *reinterpret_cast<Pack<T, V>*>(y + at[r] + half) = out_hi;
        }
      }
    }
  }
}

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
  SLUICE_CUDA_LAUNCH_REQUIRE(heads * head_dim < (int64_t{1} << 31),
                             std::string(what) + ": heads * head_dim must be < 2^31");
  const int64_t half = head_dim / 2;
  constexpr int V = kVec<T>;
  const bool vec = half % V == 0 && internal::Aligned(x) && internal::Aligned(y);
  // Positions per block: a function of the shape and the path (not of the device), and the same
  // rotation math whichever is chosen, so the bits are too.
  const int64_t per_position = heads * (vec ? half / V : half);
  const int64_t positions =
      std::clamp<int64_t>(kItemsPerBlock / per_position, 1, std::min(seq, 4096 / half));
  const int64_t blocks_x = (seq + positions - 1) / positions;
  const int64_t grid_y = std::min(batch, kMaxGridY);
  const dim3 grid(static_cast<unsigned>(blocks_x), static_cast<unsigned>(grid_y));
  const size_t smem = 2 * positions * half * sizeof(float);
  const int dim = static_cast<int>(head_dim);
  const int h = static_cast<int>(heads);
  const int pos = static_cast<int>(positions);
  if (vec) {
    RopeKernel<T, V><<<grid, kThreads, smem, stream>>>(x, y, batch, seq, h, dim, pos, theta, sign);
  } else {
    RopeKernel<T, 1><<<grid, kThreads, smem, stream>>>(x, y, batch, seq, h, dim, pos, theta, sign);
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
