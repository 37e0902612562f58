// The attention launchers that take AttentionOptions: our kernels (attention.cu) or cuDNN's
// (attention_cudnn.cpp, or its stand-in in a build without cuDNN), as ResolveAttentionImpl says.
#include <string>
#include <type_traits>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_cudnn.h"

namespace sluice::kernels::cuda {
namespace {

using Bf16 = __nv_bfloat16;

// cuDNN 9.19 refuses a single-token sequence ("s_q = s_kv = 1 is not supported", seen on an H100).
bool CudnnTakes(const AttentionDims& dims) {
  return dims.head_dim > 0 && dims.head_dim % 8 == 0 && dims.head_dim <= 128 && dims.seq > 1;
}

// The refusal of kCudnn where it cannot run, or Ok.
template <typename T>
LaunchStatus CheckCudnn(const AttentionOptions& options, const char* op) {
  if (!std::is_same_v<T, Bf16>) {
    return LaunchStatus::InvalidArgument(std::string(op) + ": cuDNN attention is bf16 only");
  }
  if (options.cudnn == nullptr) {
    return LaunchStatus::InvalidArgument(std::string(op) +
                                         ": AttentionImpl::kCudnn needs options.cudnn");
  }
  return LaunchStatus::Ok();
}

}  // namespace

template <typename T>
AttentionImpl ResolveAttentionImpl(const AttentionDims& dims, const AttentionOptions& options) {
  switch (options.impl) {
    case AttentionImpl::kOwn:
      return AttentionImpl::kOwn;
    case AttentionImpl::kCudnn:
      return AttentionImpl::kCudnn;
    case AttentionImpl::kAuto:
      break;
  }
  const bool cudnn_can = std::is_same_v<T, Bf16> && options.cudnn != nullptr &&
                         CudnnAttentionBuilt() && CudnnTakes(dims);
  return cudnn_can && kAttentionAutoBf16 == AttentionImpl::kCudnn ? AttentionImpl::kCudnn
                                                                  : AttentionImpl::kOwn;
}

template <typename T>
LaunchStatus AttentionWorkspaceBytes(const AttentionDims& dims, AttentionPass pass,
                                     const AttentionOptions& options, size_t* bytes) {
  if (bytes == nullptr) {
    return LaunchStatus::InvalidArgument("AttentionWorkspaceBytes: bytes is null");
  }
  *bytes = 0;
  if (ResolveAttentionImpl<T>(dims, options) == AttentionImpl::kOwn) {
    if (pass == AttentionPass::kBackward) *bytes = AttentionBackwardWorkspaceBytes(dims);
    return LaunchStatus::Ok();
  }
  if (LaunchStatus s = CheckCudnn<T>(options, "AttentionWorkspaceBytes"); !s.ok()) return s;
  return CudnnAttentionWorkspaceBytes(*options.cudnn, dims, pass, bytes);
}

template <typename T>
LaunchStatus AttentionForward(const T* q, const T* k, const T* v, T* out, float* lse,
                              const AttentionDims& dims, const AttentionOptions& options,
                              void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (ResolveAttentionImpl<T>(dims, options) == AttentionImpl::kOwn) {
    return AttentionForward(q, k, v, out, lse, dims, stream);
  }
  if (LaunchStatus s = CheckCudnn<T>(options, "AttentionForward"); !s.ok()) return s;
  if constexpr (std::is_same_v<T, Bf16>) {
    return AttentionForwardCudnn(*options.cudnn, q, k, v, out, lse, dims, workspace,
                                 workspace_bytes, stream);
  } else {
    return LaunchStatus::InvalidArgument("AttentionForward: cuDNN attention is bf16 only");
  }
}

template <typename T>
LaunchStatus AttentionBackward(const T* q, const T* k, const T* v, const T* out, const float* lse,
                               const T* dout, T* dq, T* dk, T* dv, const AttentionDims& dims,
                               const AttentionOptions& options, void* workspace,
                               size_t workspace_bytes, cudaStream_t stream) {
  if (ResolveAttentionImpl<T>(dims, options) == AttentionImpl::kOwn) {
    return AttentionBackward(q, k, v, out, lse, dout, dq, dk, dv, dims, workspace, workspace_bytes,
                             stream);
  }
  if (LaunchStatus s = CheckCudnn<T>(options, "AttentionBackward"); !s.ok()) return s;
  if constexpr (std::is_same_v<T, Bf16>) {
    return AttentionBackwardCudnn(*options.cudnn, q, k, v, out, lse, dout, dq, dk, dv, dims,
                                  workspace, workspace_bytes, stream);
  } else {
    return LaunchStatus::InvalidArgument("AttentionBackward: cuDNN attention is bf16 only");
  }
}

#define SLUICE_INSTANTIATE(T)                                                                     \
  template AttentionImpl ResolveAttentionImpl<T>(const AttentionDims&, const AttentionOptions&);  \
  template LaunchStatus AttentionWorkspaceBytes<T>(const AttentionDims&, AttentionPass,           \
                                                   const AttentionOptions&, size_t*);             \
  template LaunchStatus AttentionForward<T>(const T*, const T*, const T*, T*, float*,             \
                                            const AttentionDims&, const AttentionOptions&, void*, \
                                            size_t, cudaStream_t);                                \
  template LaunchStatus AttentionBackward<T>(                                                     \
      const T*, const T*, const T*, const T*, const float*, const T*, T*, T*, T*,                 \
      const AttentionDims&, const AttentionOptions&, void*, size_t, cudaStream_t);
SLUICE_INSTANTIATE(float)
SLUICE_INSTANTIATE(__nv_bfloat16)
#undef SLUICE_INSTANTIATE

}  // namespace sluice::kernels::cuda
