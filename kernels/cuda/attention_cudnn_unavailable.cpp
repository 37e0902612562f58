// The cuDNN attention API of a build without cuDNN (no libcudnn or no cuDNN frontend headers at
// configure time): there is no context to create, so nothing else can be called with one.
#include <string>

#include "kernels/cuda/attention_cudnn.h"

namespace sluice::kernels::cuda {
namespace {

LaunchStatus NotBuilt(const char* op) {
  return LaunchStatus::InvalidArgument(
      std::string(op) +
      ": this build has no cuDNN (install libcudnn 9 and the nvidia-cudnn-frontend headers, "
      "scripts/install-deps.sh, then re-run cmake)");
}

}  // namespace

struct CudnnAttention::Impl {};

bool CudnnAttentionBuilt() { return false; }

CudnnAttention::CudnnAttention(const Options& options, std::unique_ptr<Impl> impl)
    : options_(options), impl_(std::move(impl)) {}

CudnnAttention::~CudnnAttention() = default;

LaunchStatus CudnnAttention::Create(const Options&, std::unique_ptr<CudnnAttention>*) {
  return NotBuilt("CudnnAttention::Create");
}

std::string CudnnAttention::Describe() const { return "cuDNN not built"; }

LaunchStatus CudnnAttentionWorkspaceBytes(CudnnAttention&, const AttentionDims&, AttentionPass,
                                          size_t* bytes) {
  if (bytes != nullptr) *bytes = 0;
  return NotBuilt("CudnnAttentionWorkspaceBytes");
}

LaunchStatus AttentionForwardCudnn(CudnnAttention&, const __nv_bfloat16*, const __nv_bfloat16*,
                                   const __nv_bfloat16*, __nv_bfloat16*, float*,
                                   const AttentionDims&, void*, size_t, cudaStream_t) {
  return NotBuilt("AttentionForwardCudnn");
}

LaunchStatus AttentionBackwardCudnn(CudnnAttention&, const __nv_bfloat16*, const __nv_bfloat16*,
                                    const __nv_bfloat16*, const __nv_bfloat16*, const float*,
                                    const __nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*,
                                    __nv_bfloat16*, const AttentionDims&, void*, size_t,
                                    cudaStream_t) {
  return NotBuilt("AttentionBackwardCudnn");
}

}  // namespace sluice::kernels::cuda
