// Argument checks and dispatch of the attention launchers, and the backward's first step
// (D_i = dout_i . out_i); the kernels themselves are in attention_simt.cu and attention_mma.cu.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_internal.h"
#include "kernels/cuda/element_access.cuh"
#include "kernels/cuda/launch_check.h"

namespace sluice::kernels::cuda {
namespace {

using Bf16 = __nv_bfloat16;

using internal::ToFloat;

constexpr int kDeltaRowsPerBlock = 8;  // one warp per (token, head) row

// delta[b, h, i] = sum_d dout[b, i, h, d] * out[b, i, h, d] in fp32, in a fixed order (each lane
// strides the row, then a fixed butterfly), so the result does not depend on the launch.
template <typename T>
__global__ void __launch_bounds__(32 * kDeltaRowsPerBlock)
    AttentionDeltaKernel(const T* __restrict__ out, const T* __restrict__ dout,
                         float* __restrict__ delta, int64_t rows, int seq, int q_heads,
                         int head_dim) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kDeltaRowsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  const T* o = out + row * head_dim;
  const T* g = dout + row * head_dim;
  float sum = 0.f;
  for (int d = lane; d < head_dim; d += 32) sum = fmaf(ToFloat(g[d]), ToFloat(o[d]), sum);
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (lane == 0) {
    // row = (b * seq + i) * q_heads + h, token-major as out is stored; delta is head-major.
    const int64_t h = row % q_heads;
    const int64_t token = row / q_heads;
    const int64_t b = token / seq;
    const int64_t i = token % seq;
    delta[(b * q_heads + h) * seq + i] = sum;
  }
}

// InvalidArgument for dims the kernels do not take, naming the launcher.
LaunchStatus CheckDims(const AttentionDims& dims, const char* op) {
  const std::string error = AttentionDimsError(dims);
  if (!error.empty()) return LaunchStatus::InvalidArgument(std::string(op) + ": " + error);
  if (internal::SimtAttentionWidth(dims.head_dim) == 0) {
    return LaunchStatus::InvalidArgument(std::string(op) +
                                         ": head_dim = " + std::to_string(dims.head_dim) +
                                         " is not supported (1 to 128)");
  }
  // The 1-D grids (tiles x q_heads x batch blocks) and the int arithmetic of the kernels.
  const int64_t max_blocks = internal::kAttentionMaxBlocks;
  const int64_t tiles = std::max<int64_t>(internal::AttentionTiles(dims.seq), 1);
  if (dims.seq > (int64_t{1} << 30) || dims.q_heads > max_blocks ||
      (dims.batch > 0 && dims.q_heads > max_blocks / tiles / dims.batch)) {
    return LaunchStatus::InvalidArgument(
        std::string(op) + ": batch = " + std::to_string(dims.batch) +
        ", seq = " + std::to_string(dims.seq) + " and q_heads = " + std::to_string(dims.q_heads) +
        " need more than 2^31 - 1 blocks (or seq > 2^30)");
  }
  return LaunchStatus::Ok();
}

template <typename T>
bool UseMma(const AttentionDims& dims, std::initializer_list<const void*> tensors) {
  if (!std::is_same_v<T, Bf16> || !internal::MmaAttentionSupports(dims.head_dim)) return false;
  for (const void* p : tensors) {
    if (!internal::Aligned(p)) return false;
  }
  return true;
}

int64_t DeltaElements(const AttentionDims& dims) { return dims.batch * dims.q_heads * dims.seq; }

template <typename T>
LaunchStatus Forward(const T* q, const T* k, const T* v, T* out, float* lse,
                     const AttentionDims& dims, bool allow_mma, const char* op,
                     cudaStream_t stream) {
  if (LaunchStatus status = CheckDims(dims, op); !status.ok()) return status;
  if (dims.batch == 0 || dims.seq == 0) return LaunchStatus::Ok();
  SLUICE_CUDA_LAUNCH_REQUIRE(q != nullptr && k != nullptr && v != nullptr,
                             std::string(op) + ": q, k and v must not be null");
  SLUICE_CUDA_LAUNCH_REQUIRE(out != nullptr && lse != nullptr,
                             std::string(op) + ": out and lse must not be null");
  if constexpr (std::is_same_v<T, Bf16>) {
    if (allow_mma && UseMma<T>(dims, {q, k, v, out})) {
      return internal::MmaAttentionForward(q, k, v, out, lse, dims, stream);
    }
  }
  return internal::SimtAttentionForward(q, k, v, out, lse, dims, stream);
}

template <typename T>
LaunchStatus Backward(const T* q, const T* k, const T* v, const T* out, const float* lse,
                      const T* dout, T* dq, T* dk, T* dv, const AttentionDims& dims,
                      void* workspace, size_t workspace_bytes, bool allow_mma, const char* op,
                      cudaStream_t stream) {
  if (LaunchStatus status = CheckDims(dims, op); !status.ok()) return status;
  if (dims.batch == 0 || dims.seq == 0) return LaunchStatus::Ok();
  SLUICE_CUDA_LAUNCH_REQUIRE(q != nullptr && k != nullptr && v != nullptr && out != nullptr &&
                                 lse != nullptr && dout != nullptr,
                             std::string(op) + ": q, k, v, out, lse and dout must not be null");
  SLUICE_CUDA_LAUNCH_REQUIRE(dq != nullptr && dk != nullptr && dv != nullptr,
                             std::string(op) + ": dq, dk and dv must not be null");
  const size_t needed = AttentionBackwardWorkspaceBytes(dims);
  SLUICE_CUDA_LAUNCH_REQUIRE(workspace != nullptr && workspace_bytes >= needed,
                             std::string(op) + ": the workspace holds " +
                                 std::to_string(workspace_bytes) + " bytes, it needs " +
                                 std::to_string(needed) + " (AttentionBackwardWorkspaceBytes)");
  SLUICE_CUDA_LAUNCH_REQUIRE(internal::Aligned(workspace),
                             std::string(op) + ": the workspace must be 16-byte aligned");
  float* delta = static_cast<float*>(workspace);
  const int64_t rows = dims.batch * dims.seq * dims.q_heads;
  const int64_t blocks = (rows + kDeltaRowsPerBlock - 1) / kDeltaRowsPerBlock;
  SLUICE_CUDA_LAUNCH_REQUIRE(blocks <= 0x7fffffff,
                             std::string(op) + ": batch * seq * q_heads is too large");
  AttentionDeltaKernel<T><<<static_cast<unsigned>(blocks), 32 * kDeltaRowsPerBlock, 0, stream>>>(
      out, dout, delta, rows, static_cast<int>(dims.seq), static_cast<int>(dims.q_heads),
      static_cast<int>(dims.head_dim));
  if (LaunchStatus status = internal::AfterLaunch(op); !status.ok()) return status;
  if constexpr (std::is_same_v<T, Bf16>) {
    if (allow_mma && UseMma<T>(dims, {q, k, v, dout, dq, dk, dv})) {
      return internal::MmaAttentionBackward(q, k, v, lse, delta, dout, dq, dk, dv, dims, stream);
    }
  }
  return internal::SimtAttentionBackward(q, k, v, lse, delta, dout, dq, dk, dv, dims, stream);
}

}  // namespace

size_t AttentionBackwardWorkspaceBytes(const AttentionDims& dims) {
  if (!AttentionDimsError(dims).empty()) return 0;
  const size_t bytes = static_cast<size_t>(DeltaElements(dims)) * sizeof(float);
  return (bytes + 255) / 256 * 256;
}

template <typename T>
LaunchStatus AttentionForward(const T* q, const T* k, const T* v, T* out, float* lse,
                              const AttentionDims& dims, cudaStream_t stream) {
  return Forward(q, k, v, out, lse, dims, /*allow_mma=*/true, "AttentionForward", stream);
}

template <typename T>
LaunchStatus AttentionForwardSimt(const T* q, const T* k, const T* v, T* out, float* lse,
                                  const AttentionDims& dims, cudaStream_t stream) {
  return Forward(q, k, v, out, lse, dims, /*allow_mma=*/false, "AttentionForwardSimt", stream);
}

template <typename T>
LaunchStatus AttentionBackward(const T* q, const T* k, const T* v, const T* out, const float* lse,
                               const T* dout, T* dq, T* dk, T* dv, const AttentionDims& dims,
                               void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  return Backward(q, k, v, out, lse, dout, dq, dk, dv, dims, workspace, workspace_bytes,
                  /*allow_mma=*/true, "AttentionBackward", stream);
}

template <typename T>
LaunchStatus AttentionBackwardSimt(const T* q, const T* k, const T* v, const T* out,
                                   const float* lse, const T* dout, T* dq, T* dk, T* dv,
                                   const AttentionDims& dims, void* workspace,
                                   size_t workspace_bytes, cudaStream_t stream) {
  return Backward(q, k, v, out, lse, dout, dq, dk, dv, dims, workspace, workspace_bytes,
                  /*allow_mma=*/false, "AttentionBackwardSimt", stream);
}

#define SLUICE_INSTANTIATE(T)                                                                      \
  template LaunchStatus AttentionForward<T>(const T*, const T*, const T*, T*, float*,              \
                                            const AttentionDims&, cudaStream_t);                   \
  template LaunchStatus AttentionForwardSimt<T>(const T*, const T*, const T*, T*, float*,          \
                                                const AttentionDims&, cudaStream_t);               \
  template LaunchStatus AttentionBackward<T>(const T*, const T*, const T*, const T*, const float*, \
                                             const T*, T*, T*, T*, const AttentionDims&, void*,    \
                                             size_t, cudaStream_t);                                \
  template LaunchStatus AttentionBackwardSimt<T>(                                                  \
      const T*, const T*, const T*, const T*, const float*, const T*, T*, T*, T*,                  \
      const AttentionDims&, void*, size_t, cudaStream_t);
SLUICE_INSTANTIATE(float)
SLUICE_INSTANTIATE(__nv_bfloat16)
#undef SLUICE_INSTANTIATE

}  // namespace sluice::kernels::cuda
