#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <type_traits>

#include "benchmarks/lib/gpu/bench_device.h"

namespace sluice::bench::gpu {
namespace {

constexpr unsigned kThreads = 256;

unsigned Blocks(size_t count) {
  size_t blocks = (count + kThreads - 1) / kThreads;
  if (blocks < 1) blocks = 1;
  // Grid-stride loops cover the rest; 4 waves of 132 SMs x 8 blocks is plenty.
  return static_cast<unsigned>(blocks < 4096 ? blocks : 4096);
}

__device__ __forceinline__ uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__device__ __forceinline__ float Unit(uint64_t seed, size_t i) {
  return static_cast<float>(SplitMix64(seed * 0x100000001b3ull + i) >> 40) * 0x1p-24f;
}

template <typename T>
__device__ __forceinline__ void Store(T* data, size_t i, float value) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    data[i] = value;
  } else {
    data[i] = __float2bfloat16_rn(value);
  }
}

template <typename T>
__global__ void FillUniformKernel(T* data, size_t count, float lo, float span, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count;
       i += size_t{gridDim.x} * blockDim.x) {
    Store(data, i, lo + span * Unit(seed, i));
  }
}

template <typename T>
__global__ void FillConstantKernel(T* data, size_t count, float value) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count;
       i += size_t{gridDim.x} * blockDim.x) {
    Store(data, i, value);
  }
}

__device__ __forceinline__ bool NonFinite(float v) { return !isfinite(v); }
__device__ __forceinline__ bool NonFinite(double v) { return !isfinite(v); }
__device__ __forceinline__ bool NonFinite(__nv_bfloat16 v) {
  return (__bfloat16_as_ushort(v) & 0x7f80u) == 0x7f80u;
}

template <typename T>
__global__ void CountNonFiniteKernel(const T* data, size_t count, unsigned long long* total) {
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count;
       i += size_t{gridDim.x} * blockDim.x) {
    local += NonFinite(data[i]) ? 1 : 0;
  }
  for (int offset = 16; offset > 0; offset /= 2) local += __shfl_down_sync(~0u, local, offset);
  if ((threadIdx.x & 31) == 0 && local != 0) atomicAdd(total, local);
}

__device__ __forceinline__ uint64_t GlobalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void BlockingKernel(const volatile int* release, int* timed_out, uint64_t timeout_ns) {
  const uint64_t start = GlobalTimerNs();
  while (*release == 0) {
    if (GlobalTimerNs() - start > timeout_ns) {
      *timed_out = 1;
      return;
    }
    __nanosleep(1000);
  }
}

}  // namespace

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kBf16:
      return 2;
    case DType::kF64:
      return 8;
  }
  return 0;
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "fp32";
    case DType::kBf16:
      return "bf16";
    case DType::kI32:
      return "int32";
    case DType::kF64:
      return "fp64";
  }
  return "?";
}

cudaError_t FillUniform(void* data, DType dtype, size_t count, float lo, float hi, uint64_t seed,
                        cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (dtype == DType::kF32) {
    FillUniformKernel<<<Blocks(count), kThreads, 0, stream>>>(static_cast<float*>(data), count, lo,
                                                              hi - lo, seed);
  } else if (dtype == DType::kBf16) {
    FillUniformKernel<<<Blocks(count), kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(data),
                                                              count, lo, hi - lo, seed);
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t FillConstant(void* data, DType dtype, size_t count, float value, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (dtype == DType::kF32) {
    FillConstantKernel<<<Blocks(count), kThreads, 0, stream>>>(static_cast<float*>(data), count,
                                                               value);
  } else if (dtype == DType::kBf16) {
    FillConstantKernel<<<Blocks(count), kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(data),
                                                               count, value);
  } else if (dtype == DType::kF64) {
    FillConstantKernel<<<Blocks(count), kThreads, 0, stream>>>(static_cast<double*>(data), count,
                                                               value);
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t CountNonFinite(const void* data, DType dtype, size_t count,
                           unsigned long long* device_count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (dtype == DType::kF32) {
    CountNonFiniteKernel<<<Blocks(count), kThreads, 0, stream>>>(static_cast<const float*>(data),
                                                                 count, device_count);
  } else if (dtype == DType::kBf16) {
    CountNonFiniteKernel<<<Blocks(count), kThreads, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(data), count, device_count);
  } else if (dtype == DType::kF64) {
    CountNonFiniteKernel<<<Blocks(count), kThreads, 0, stream>>>(static_cast<const double*>(data),
                                                                 count, device_count);
  } else {
    return cudaSuccess;  // integers are always finite
  }
  return cudaGetLastError();
}

cudaError_t LaunchBlockingKernel(const volatile int* release, int* timed_out, uint64_t timeout_ns,
                                 cudaStream_t stream) {
  BlockingKernel<<<1, 1, 0, stream>>>(release, timed_out, timeout_ns);
  return cudaGetLastError();
}

}  // namespace sluice::bench::gpu
