#include <algorithm>
#include <cmath>

#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/launch_check.h"

namespace sluice::kernels::cuda {
namespace {

// One block per row; a multiple of 32 (the reductions are warp trees).
constexpr int kRowThreads = 512;
// The single block that reduces over rows (mean loss, counted rows).
constexpr int kReduceThreads = 1024;

__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T FromFloat(float x);
template <>
__device__ __forceinline__ float FromFloat<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// 16 bytes of logits, loaded and stored as one vector when the row length and pointers allow.
template <typename T>
struct alignas(16) Pack {
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
};

__device__ __forceinline__ bool Counted(int32_t target, int64_t vocab) {
  return target >= 0 && target < vocab;  // kIgnoreIndex (-1) is not counted
}

__device__ __forceinline__ void ReportInvalid(int32_t* flag) {
  if (flag != nullptr) atomicExch(flag, 1);
}

// Online softmax normaliser: s = sum exp(x - m) over the values seen, m their maximum. A -inf
// value adds nothing (guarding exp(-inf - -inf) = NaN); a NaN value makes s NaN, as in the
// reference.
__device__ __forceinline__ void OnlineAdd(float x, float& m, float& s) {
  if (x > m) {
    s = s * expf(m - x) + 1.0f;
    m = x;
  } else {
    s += x == -INFINITY ? 0.0f : expf(x - m);
  }
}

__device__ __forceinline__ void Combine(float& m, float& s, float m2, float s2) {
  const float mx = fmaxf(m, m2);
  if (mx == -INFINITY) {
    s += s2;  // both empty (or NaN, which must survive)
    return;
  }
  s = s * expf(m - mx) + s2 * expf(m2 - mx);
  m = mx;
}

// Reduces (m, s) over the block in a fixed tree; thread 0 holds the result. Ends with a barrier,
// so the caller may call it again (the next row) at once.
__device__ void BlockMaxSum(float& m, float& s) {
  __shared__ float shared_m[32];
  __shared__ float shared_s[32];
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  for (int offset = 16; offset > 0; offset /= 2) {
    const float m2 = __shfl_down_sync(0xffffffffu, m, offset);
    const float s2 = __shfl_down_sync(0xffffffffu, s, offset);
    Combine(m, s, m2, s2);
  }
  if (lane == 0) {
    shared_m[warp] = m;
    shared_s[warp] = s;
  }
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x / 32;
    m = lane < warps ? shared_m[lane] : -INFINITY;
    s = lane < warps ? shared_s[lane] : 0.0f;
    for (int offset = 16; offset > 0; offset /= 2) {
      const float m2 = __shfl_down_sync(0xffffffffu, m, offset);
      const float s2 = __shfl_down_sync(0xffffffffu, s, offset);
      Combine(m, s, m2, s2);
    }
  }
  __syncthreads();
}

// Sum over the block in a fixed tree (bitwise repeatable); thread 0 holds the result.
template <typename V>
__device__ V BlockSum(V value) {
  __shared__ V shared[32];
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  for (int offset = 16; offset > 0; offset /= 2) {
    value += __shfl_down_sync(0xffffffffu, value, offset);
  }
  if (lane == 0) shared[warp] = value;
  __syncthreads();
  if (warp == 0) {
    value = lane < static_cast<int>(blockDim.x / 32) ? shared[lane] : V(0);
    for (int offset = 16; offset > 0; offset /= 2) {
      value += __shfl_down_sync(0xffffffffu, value, offset);
    }
  }
  __syncthreads();
  return value;
}

template <typename T, bool kVector>
__global__ void __launch_bounds__(kRowThreads)
    LseKernel(const T* logits, float* lse, int64_t rows, int64_t vocab) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = logits + r * vocab;
    float m = -INFINITY;
    float s = 0.0f;
    if constexpr (kVector) {
      const auto* packs = reinterpret_cast<const Pack<T>*>(row);
      const int64_t num_packs = vocab / Pack<T>::kSize;
      for (int64_t p = threadIdx.x; p < num_packs; p += blockDim.x) {
        const Pack<T> pack = packs[p];
#pragma unroll
        for (int k = 0; k < Pack<T>::kSize; ++k) OnlineAdd(ToFloat(pack.v[k]), m, s);
      }
    } else {
      for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) OnlineAdd(ToFloat(row[v]), m, s);
    }
    BlockMaxSum(m, s);
    if (threadIdx.x == 0) lse[r] = m + logf(s);
  }
}

// loss_r = lse[r] - logits[r, target] in fp64, summed over the counted rows by one block.
template <typename T>
__global__ void __launch_bounds__(kReduceThreads)
    MeanLossKernel(const T* logits, const int32_t* targets, const float* lse, int64_t rows,
                   int64_t vocab, float* loss_out, int32_t* invalid_target) {
  double sum = 0.0;
  long long count = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const int32_t target = targets[r];
    if (Counted(target, vocab)) {
      sum += static_cast<double>(lse[r]) - static_cast<double>(ToFloat(logits[r * vocab + target]));
      ++count;
    } else if (target != kIgnoreIndex) {
      ReportInvalid(invalid_target);
    }
  }
  sum = BlockSum(sum);
  count = BlockSum(count);
  if (threadIdx.x == 0) {
    *loss_out = count > 0 ? static_cast<float>(sum / static_cast<double>(count)) : 0.0f;
  }
}

__global__ void __launch_bounds__(kReduceThreads)
    CountKernel(const int32_t* targets, int64_t rows, int64_t vocab, long long* count_out,
                int32_t* invalid_target) {
  long long count = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const int32_t target = targets[r];
    if (Counted(target, vocab)) {
      ++count;
    } else if (target != kIgnoreIndex) {
      ReportInvalid(invalid_target);
    }
  }
  count = BlockSum(count);
  if (threadIdx.x == 0) *count_out = count;
}

__device__ __forceinline__ float Grad(float x, float lse, float scale, bool is_target) {
  const float p = expf(x - lse);
  return scale * (is_target ? p - 1.0f : p);
}

// Each element is read and written by the same thread, so dlogits may alias logits.
template <typename T, bool kVector>
__global__ void __launch_bounds__(kRowThreads)
    GradKernel(const T* logits, const int32_t* targets, const float* lse, float dloss, T* dlogits,
               int64_t rows, int64_t vocab, const long long* count) {
  const long long n = *count;
  const float scale = n > 0 ? dloss / static_cast<float>(n) : 0.0f;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int32_t target = targets[r];
    const bool counted = Counted(target, vocab);
    const float row_lse = lse[r];
    const T* in = logits + r * vocab;
    T* out = dlogits + r * vocab;
    if constexpr (kVector) {
      constexpr int kSize = Pack<T>::kSize;
      const auto* in_packs = reinterpret_cast<const Pack<T>*>(in);
      auto* out_packs = reinterpret_cast<Pack<T>*>(out);
      const int64_t num_packs = vocab / kSize;
      for (int64_t p = threadIdx.x; p < num_packs; p += blockDim.x) {
        Pack<T> pack;
        if (counted) {
          pack = in_packs[p];
#pragma unroll
          for (int k = 0; k < kSize; ++k) {
            pack.v[k] =
                FromFloat<T>(Grad(ToFloat(pack.v[k]), row_lse, scale, p * kSize + k == target));
          }
        } else {
#pragma unroll
          for (int k = 0; k < kSize; ++k) pack.v[k] = FromFloat<T>(0.0f);
        }
        out_packs[p] = pack;
      }
    } else {
      for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) {
        out[v] = counted ? FromFloat<T>(Grad(ToFloat(in[v]), row_lse, scale, v == target))
                         : FromFloat<T>(0.0f);
      }
    }
  }
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

unsigned RowGrid(int64_t rows) { return static_cast<unsigned>(std::min<int64_t>(rows, 1 << 20)); }

}  // namespace

template <typename T>
LaunchStatus CrossEntropyForward(const T* logits, const int32_t* targets, float* lse, int64_t rows,
                                 int64_t vocab, float* loss_out, int32_t* invalid_target,
                                 cudaStream_t stream) {
  SLUICE_CUDA_LAUNCH_REQUIRE(rows >= 0 && vocab >= 0, "CrossEntropyForward: negative size");
  SLUICE_CUDA_LAUNCH_REQUIRE(loss_out != nullptr, "CrossEntropyForward: null loss_out");
  if (rows == 0) {
    SLUICE_CUDA_LAUNCH_TRY(cudaMemsetAsync(loss_out, 0, sizeof(float), stream));
    return LaunchStatus::Ok();
  }
  SLUICE_CUDA_LAUNCH_REQUIRE(vocab >= 1, "CrossEntropyForward: empty vocabulary");
  SLUICE_CUDA_LAUNCH_REQUIRE(logits != nullptr && targets != nullptr && lse != nullptr,
                             "CrossEntropyForward: null logits, targets or lse");
  if (vocab % Pack<T>::kSize == 0 && Aligned16(logits)) {
    LseKernel<T, true><<<RowGrid(rows), kRowThreads, 0, stream>>>(logits, lse, rows, vocab);
  } else {
    LseKernel<T, false><<<RowGrid(rows), kRowThreads, 0, stream>>>(logits, lse, rows, vocab);
  }
  SLUICE_CUDA_LAUNCH_TRY(cudaGetLastError());
  MeanLossKernel<T><<<1, kReduceThreads, 0, stream>>>(logits, targets, lse, rows, vocab, loss_out,
                                                      invalid_target);
  return internal::AfterLaunch("CrossEntropyForward");
}

size_t CrossEntropyBackwardWorkspaceBytes(int64_t rows) {
  // The count, plus slack to align it.
  return rows > 0 ? 2 * sizeof(long long) : 0;
}

template <typename T>
LaunchStatus CrossEntropyBackward(const T* logits, const int32_t* targets, const float* lse,
                                  float dloss, T* dlogits, int64_t rows, int64_t vocab,
                                  int32_t* invalid_target, void* workspace, size_t workspace_bytes,
                                  cudaStream_t stream) {
  SLUICE_CUDA_LAUNCH_REQUIRE(rows >= 0 && vocab >= 0, "CrossEntropyBackward: negative size");
  if (rows == 0) return LaunchStatus::Ok();
  SLUICE_CUDA_LAUNCH_REQUIRE(vocab >= 1, "CrossEntropyBackward: empty vocabulary");
  SLUICE_CUDA_LAUNCH_REQUIRE(
      logits != nullptr && targets != nullptr && lse != nullptr && dlogits != nullptr,
      "CrossEntropyBackward: null logits, targets, lse or dlogits");
  SLUICE_CUDA_LAUNCH_REQUIRE(
      workspace != nullptr && workspace_bytes >= CrossEntropyBackwardWorkspaceBytes(rows),
      "CrossEntropyBackward: workspace null or smaller than "
      "CrossEntropyBackwardWorkspaceBytes(rows)");
  auto base = reinterpret_cast<uintptr_t>(workspace);
  base = (base + sizeof(long long) - 1) / sizeof(long long) * sizeof(long long);
  auto* count = reinterpret_cast<long long*>(base);

  CountKernel<<<1, kReduceThreads, 0, stream>>>(targets, rows, vocab, count, invalid_target);
  SLUICE_CUDA_LAUNCH_TRY(cudaGetLastError());
  if (vocab % Pack<T>::kSize == 0 && Aligned16(logits) && Aligned16(dlogits)) {
    GradKernel<T, true><<<RowGrid(rows), kRowThreads, 0, stream>>>(logits, targets, lse, dloss,
                                                                   dlogits, rows, vocab, count);
  } else {
    GradKernel<T, false><<<RowGrid(rows), kRowThreads, 0, stream>>>(logits, targets, lse, dloss,
                                                                    dlogits, rows, vocab, count);
  }
  return internal::AfterLaunch("CrossEntropyBackward");
}

#define SLUICE_INSTANTIATE(T)                                                                      \
  template LaunchStatus CrossEntropyForward<T>(const T*, const int32_t*, float*, int64_t, int64_t, \
                                               float*, int32_t*, cudaStream_t);                    \
  template LaunchStatus CrossEntropyBackward<T>(const T*, const int32_t*, const float*, float, T*, \
                                                int64_t, int64_t, int32_t*, void*, size_t,         \
                                                cudaStream_t);
SLUICE_INSTANTIATE(float)
SLUICE_INSTANTIATE(__nv_bfloat16)
#undef SLUICE_INSTANTIATE

}  // namespace sluice::kernels::cuda
