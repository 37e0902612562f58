#include <algorithm>
#include <cmath>

#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/element_access.cuh"
#include "kernels/cuda/launch_check.h"

namespace sluice::kernels::cuda {
namespace {

// One block per row; a multiple of 32 (the reductions are warp trees).
constexpr int kRowThreads = 512;
// The forward's row blocks: fewer threads than kRowThreads, each with kLseUnroll 16-byte loads in
// flight, so that a 64 KB row (vocab 32000 in bf16) still keeps every thread busy.
constexpr int kLseThreads = 256;
constexpr int kLseUnroll = 4;
// The single block that reduces over rows (mean loss, counted rows).
constexpr int kReduceThreads = 1024;
constexpr int kLossUnroll = 4;

constexpr float kLog2e = 1.4426950408889634f;

using internal::FromFloat;
using internal::ToFloat;

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

// 2^x on the SFU alone (one MUFU op): relative error about 2^-22, far below the fp32 rounding
// of lse, and -inf gives 0. expf adds a range reduction that would make the forward issue-bound.
__device__ __forceinline__ float Exp2Fast(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// A thread's online softmax normaliser: s = sum exp(x - off) over the values seen, m their
// maximum, off = m once m is finite (0 before, so that -inf values add exp(-inf) = 0 rather than
// exp(-inf - -inf) = NaN). A NaN value makes s NaN, as in the reference.
struct LseState {
  float m = -INFINITY;
  float off = 0.0f;
  float s = 0.0f;
};

// Adds K values: the rescale runs once per K values and only when their maximum exceeds m (rare
// after the first few), so each value costs a subtract, a multiply, one MUFU op and an add.
template <int K>
__device__ __forceinline__ void LseAdd(const float (&x)[K], LseState& st) {
  float pm = x[0];
#pragma unroll
  for (int k = 1; k < K; ++k) pm = fmaxf(pm, x[k]);
  if (pm > st.m) {  // false for NaN
    if (st.m != -INFINITY) st.s *= Exp2Fast((st.m - pm) * kLog2e);
    st.m = pm;
    st.off = pm;
  }
  float e[K];
#pragma unroll
  for (int k = 0; k < K; ++k) e[k] = Exp2Fast((x[k] - st.off) * kLog2e);
    // A pairwise tree: shorter dependency chains than adding each value to s.
#pragma unroll
  for (int width = 1; width < K; width *= 2) {
#pragma unroll
    for (int k = 0; k + width < K; k += 2 * width) e[k] += e[k + width];
  }
  st.s += e[0];
}

// Unpacks 16 bytes of logits to fp32 (bf16 is the high half of an fp32).
__device__ __forceinline__ void Unpack(const uint4& raw, float (&x)[8]) {
  const unsigned w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    x[2 * k] = __uint_as_float(w[k] << 16);
    x[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
  }
}
__device__ __forceinline__ void Unpack(const uint4& raw, float (&x)[4]) {
  x[0] = __uint_as_float(raw.x);
  x[1] = __uint_as_float(raw.y);
  x[2] = __uint_as_float(raw.z);
  x[3] = __uint_as_float(raw.w);
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

// One block per row. Each thread keeps its own (m, s) over the 16-byte packs p = tid,
// tid + kLseThreads, ... (kLseUnroll loads issued before any is used), then the block combines
// them in a fixed tree: the result depends only on the row, bitwise.
template <typename T, bool kVector>
__global__ void __launch_bounds__(kLseThreads)
    LseKernel(const T* logits, float* lse, int64_t rows, int64_t vocab) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = logits + r * vocab;
    LseState st;
    if constexpr (kVector) {
      constexpr int kSize = Pack<T>::kSize;
      const auto* packs = reinterpret_cast<const uint4*>(row);
      const int64_t num_packs = vocab / kSize;
      for (int64_t p = threadIdx.x; p < num_packs; p += kLseUnroll * kLseThreads) {
        uint4 raw[kLseUnroll] = {};
#pragma unroll
        for (int u = 0; u < kLseUnroll; ++u) {
          const int64_t q = p + u * kLseThreads;
          if (q < num_packs) raw[u] = __ldg(packs + q);
        }
#pragma unroll
        for (int u = 0; u < kLseUnroll; ++u) {
          if (p + u * kLseThreads < num_packs) {
            float x[kSize];
            Unpack(raw[u], x);
            LseAdd(x, st);
          }
        }
      }
    } else {
      for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) {
        const float x[1] = {ToFloat(row[v])};
        LseAdd(x, st);
      }
    }
    // Combine expects s relative to m; off differs from m only while m is -inf, when s is 0 or
    // NaN and any scale leaves it so.
    float m = st.m;
    float s = st.s;
    BlockMaxSum(m, s);
    if (threadIdx.x == 0) lse[r] = m + logf(s);
  }
}

// loss_r = lse[r] - logits[r, target] in fp64, summed over the counted rows by one block: each
// thread adds its rows r = tid, tid + blockDim, ... in that order, kLossUnroll rows' loads at a
// time (the target, then lse and the gathered logit), so the latency is paid a few times only.
template <typename T>
__global__ void __launch_bounds__(kReduceThreads)
    MeanLossKernel(const T* logits, const int32_t* targets, const float* lse, int64_t rows,
                   int64_t vocab, float* loss_out, int32_t* invalid_target) {
  double sum = 0.0;
  long long count = 0;
  for (int64_t base = threadIdx.x; base < rows; base += kLossUnroll * blockDim.x) {
    int32_t target[kLossUnroll];
#pragma unroll
    for (int u = 0; u < kLossUnroll; ++u) {
      const int64_t r = base + u * static_cast<int64_t>(blockDim.x);
      target[u] = r < rows ? targets[r] : kIgnoreIndex;
    }
    float row_lse[kLossUnroll];
    float logit[kLossUnroll];
#pragma unroll
    for (int u = 0; u < kLossUnroll; ++u) {
      const int64_t r = base + u * static_cast<int64_t>(blockDim.x);
      row_lse[u] = 0.0f;
      logit[u] = 0.0f;
      if (Counted(target[u], vocab)) {
        row_lse[u] = lse[r];
        logit[u] = ToFloat(logits[r * vocab + target[u]]);
      }
    }
#pragma unroll
    for (int u = 0; u < kLossUnroll; ++u) {
      if (Counted(target[u], vocab)) {
        sum += static_cast<double>(row_lse[u]) - static_cast<double>(logit[u]);
        ++count;
      } else if (target[u] != kIgnoreIndex) {
        ReportInvalid(invalid_target);
      }
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
  if (vocab % Pack<T>::kSize == 0 && internal::Aligned(logits)) {
    LseKernel<T, true><<<RowGrid(rows), kLseThreads, 0, stream>>>(logits, lse, rows, vocab);
  } else {
    LseKernel<T, false><<<RowGrid(rows), kLseThreads, 0, stream>>>(logits, lse, rows, vocab);
  }
  if (LaunchStatus s = internal::AfterLaunch("CrossEntropyForward"); !s.ok()) return s;
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
  if (LaunchStatus s = internal::AfterLaunch("CrossEntropyBackward"); !s.ok()) return s;
  if (vocab % Pack<T>::kSize == 0 && internal::Aligned(logits) && internal::Aligned(dlogits)) {
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
