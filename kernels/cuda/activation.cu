#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/activation.h"
#include "kernels/cuda/element_access.cuh"
#include "kernels/cuda/launch_check.h"

namespace sluice::kernels::cuda {
namespace {

constexpr unsigned kThreads = 256;
constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;

using internal::FromFloat;
using internal::kVec;
using internal::Pack;
using internal::ToFloat;

// The per-element math, in fp32, with accurate expf (the build has no fast math).
__device__ __forceinline__ float Sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

// GELU's tanh form through 1 + tanh(u) = 2 sigmoid(2u) and 1 - tanh(u)^2 = 4 sigmoid(2u)
// sigmoid(-2u): the same function as the reference's 0.5 v (1 + tanh(u)), but where v is very
// negative, 1 + tanh(u) cancels to a few ulps of tanhf's error (CUDA's tanhf is 2 ulp, glibc's 1)
// and the output would keep only 3 significant digits; the sigmoid form keeps them all.
struct GeluForwardOp {
  __device__ void operator()(const float* in, float* out) const {
    const float v = in[0];
    const float u = kGeluC * (v + kGeluA * v * v * v);
    out[0] = v * Sigmoid(2.0f * u);
  }
};

struct GeluBackwardOp {  // in: x, dy
  __device__ void operator()(const float* in, float* out) const {
    const float v = in[0];
    const float u = kGeluC * (v + kGeluA * v * v * v);
    const float du = kGeluC * (1.0f + 3.0f * kGeluA * v * v);
    const float s_pos = Sigmoid(2.0f * u);   // (1 + tanh u) / 2
    const float s_neg = Sigmoid(-2.0f * u);  // (1 - tanh u) / 2
    out[0] = in[1] * (s_pos + 2.0f * v * s_pos * s_neg * du);
  }
};

struct SwiGluForwardOp {  // in: gate, up
  __device__ void operator()(const float* in, float* out) const {
    const float g = in[0];
    out[0] = g * Sigmoid(g) * in[1];
  }
};

struct SwiGluBackwardOp {  // in: gate, up, dy; out: dgate, dup
  __device__ void operator()(const float* in, float* out) const {
    const float g = in[0];
    const float s = Sigmoid(g);
    const float u = in[1];
    const float d = in[2];
    out[0] = d * u * s * (1.0f + g * (1.0f - s));
    out[1] = d * g * s;
  }
};

struct AddOp {  // in: a, b (Accumulate: x, y)
  __device__ void operator()(const float* in, float* out) const { out[0] = in[0] + in[1]; }
};

template <typename T, int kIn, int kOut>
struct MapArgs {
  const T* in[kIn];
  T* out[kOut];
  int64_t n;
};

// out[j][i] = op(in[0][i], ..., in[kIn-1][i]) for i < n: whole packs of V first, then the n % V
// tail element by element. Each element is read and written by one thread, inputs before
// outputs, so an output may alias an input.
template <typename T, int V, int kIn, int kOut, typename Op>
__global__ void __launch_bounds__(kThreads) MapKernel(MapArgs<T, kIn, kOut> args, Op op) {
  const int64_t packs = args.n / V;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t first = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  for (int64_t p = first; p < packs; p += stride) {
    float in[kIn][V];
    float out[kOut][V];
#pragma unroll
    for (int j = 0; j < kIn; ++j) {
      const Pack<T, V> pack = *reinterpret_cast<const Pack<T, V>*>(args.in[j] + p * V);
#pragma unroll
      for (int k = 0; k < V; ++k) in[j][k] = ToFloat(pack.v[k]);
    }
#pragma unroll
    for (int k = 0; k < V; ++k) {
      float a[kIn];
      float b[kOut];
#pragma unroll
      for (int j = 0; j < kIn; ++j) a[j] = in[j][k];
      op(a, b);
#pragma unroll
      for (int j = 0; j < kOut; ++j) out[j][k] = b[j];
    }
#pragma unroll
    for (int j = 0; j < kOut; ++j) {
      Pack<T, V> pack;
#pragma unroll
      for (int k = 0; k < V; ++k) pack.v[k] = FromFloat<T>(out[j][k]);
      *reinterpret_cast<Pack<T, V>*>(args.out[j] + p * V) = pack;
    }
  }
  for (int64_t i = packs * V + first; i < args.n; i += stride) {
    float a[kIn];
    float b[kOut];
#pragma unroll
    for (int j = 0; j < kIn; ++j) a[j] = ToFloat(args.in[j][i]);
    op(a, b);
#pragma unroll
    for (int j = 0; j < kOut; ++j) args.out[j][i] = FromFloat<T>(b[j]);
  }
}

template <typename T, int kIn, int kOut, typename Op>
LaunchStatus LaunchMap(const MapArgs<T, kIn, kOut>& args, Op op, const char* what,
                       cudaStream_t stream) {
  SLUICE_CUDA_LAUNCH_REQUIRE(args.n >= 0, std::string(what) + ": n must be >= 0");
  if (args.n == 0) return LaunchStatus::Ok();
  bool vec = true;
  for (int j = 0; j < kIn; ++j) {
    SLUICE_CUDA_LAUNCH_REQUIRE(args.in[j] != nullptr,
                               std::string(what) + ": an input pointer is null with n > 0");
    vec = vec && internal::Aligned(args.in[j]);
  }
  for (int j = 0; j < kOut; ++j) {
    SLUICE_CUDA_LAUNCH_REQUIRE(args.out[j] != nullptr,
                               std::string(what) + ": an output pointer is null with n > 0");
    vec = vec && internal::Aligned(args.out[j]);
  }
  if (vec) {
    constexpr int V = kVec<T>;
    MapKernel<T, V, kIn, kOut, Op>
        <<<internal::GridFor((args.n + V - 1) / V, kThreads), kThreads, 0, stream>>>(args, op);
  } else {
    MapKernel<T, 1, kIn, kOut, Op>
        <<<internal::GridFor(args.n, kThreads), kThreads, 0, stream>>>(args, op);
  }
  return internal::AfterLaunch(what);
}

}  // namespace

template <typename T>
LaunchStatus GeluForward(const T* x, T* y, int64_t n, cudaStream_t stream) {
  return LaunchMap(MapArgs<T, 1, 1>{{x}, {y}, n}, GeluForwardOp{}, "GeluForward", stream);
}

template <typename T>
LaunchStatus GeluBackward(const T* x, const T* dy, T* dx, int64_t n, cudaStream_t stream) {
  return LaunchMap(MapArgs<T, 2, 1>{{x, dy}, {dx}, n}, GeluBackwardOp{}, "GeluBackward", stream);
}

template <typename T>
LaunchStatus SwiGluForward(const T* gate, const T* up, T* y, int64_t n, cudaStream_t stream) {
  return LaunchMap(MapArgs<T, 2, 1>{{gate, up}, {y}, n}, SwiGluForwardOp{}, "SwiGluForward",
                   stream);
}

template <typename T>
LaunchStatus SwiGluBackward(const T* gate, const T* up, const T* dy, T* dgate, T* dup, int64_t n,
                            cudaStream_t stream) {
  return LaunchMap(MapArgs<T, 3, 2>{{gate, up, dy}, {dgate, dup}, n}, SwiGluBackwardOp{},
                   "SwiGluBackward", stream);
}

template <typename T>
LaunchStatus Add(const T* a, const T* b, T* y, int64_t n, cudaStream_t stream) {
  return LaunchMap(MapArgs<T, 2, 1>{{a, b}, {y}, n}, AddOp{}, "Add", stream);
}

template <typename T>
LaunchStatus Accumulate(const T* x, T* y, int64_t n, cudaStream_t stream) {
  // y = y + x, in the reference's order (addition commutes bitwise anyway).
  return LaunchMap(MapArgs<T, 2, 1>{{y, x}, {y}, n}, AddOp{}, "Accumulate", stream);
}

#define SLUICE_INSTANTIATE(T)                                                            \
  template LaunchStatus GeluForward<T>(const T*, T*, int64_t, cudaStream_t);             \
  template LaunchStatus GeluBackward<T>(const T*, const T*, T*, int64_t, cudaStream_t);  \
  template LaunchStatus SwiGluForward<T>(const T*, const T*, T*, int64_t, cudaStream_t); \
  template LaunchStatus SwiGluBackward<T>(const T*, const T*, const T*, T*, T*, int64_t, \
                                          cudaStream_t);                                 \
  template LaunchStatus Add<T>(const T*, const T*, T*, int64_t, cudaStream_t);           \
  template LaunchStatus Accumulate<T>(const T*, T*, int64_t, cudaStream_t);
SLUICE_INSTANTIATE(float)
SLUICE_INSTANTIATE(__nv_bfloat16)
#undef SLUICE_INSTANTIATE

}  // namespace sluice::kernels::cuda
