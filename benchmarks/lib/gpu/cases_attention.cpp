// Causal attention (kernels/cuda/attention.h) at seq 2048, forward, backward and both, in
// TFLOP/s against the cuBLAS peak measured in the same run: our kernels (attention.*) and, where
// the build has cuDNN, cuDNN's fused attention with its deterministic backward
// (attention.cudnn.*), at the same shapes and FLOP counts, so that one run compares the two.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "benchmarks/lib/gpu/cases.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_cudnn.h"

namespace sluice::bench::gpu {
namespace {

namespace kc = kernels::cuda;
using bf16 = __nv_bfloat16;

enum class Pass { kForward, kBackward, kBoth };
enum class Impl { kOwn, kCudnn };

// One cuDNN context for the process (it keeps the graph of each shape); null with the reason
// where libcudnn cannot be loaded or has no device.
kc::CudnnAttention* SharedCudnn(std::string* why) {
  static std::unique_ptr<kc::CudnnAttention> context;
  static std::string error;
  static const bool created = [] {
    const kc::LaunchStatus status = kc::CudnnAttention::Create(&context);
    if (!status.ok()) error = status.ToString();
    return status.ok();
  }();
  if (!created) *why = error;
  return context.get();
}

// One instance's tensors. The backward's out and lse come from a real forward, enqueued when
// the instance is built: random values there would be softmax statistics of nothing.
struct AttentionTensors {
  bf16 *q, *k, *v, *out, *dout, *dq, *dk, *dv;
  float* lse;
};

Result<AttentionTensors> Allocate(CaseRun& run, const kernels::AttentionDims& d, Pass pass) {
  const int64_t q_elems = d.batch * d.seq * d.q_heads * d.head_dim;
  const int64_t kv_elems = d.batch * d.seq * d.kv_heads * d.head_dim;
  const int64_t lse_elems = d.batch * d.q_heads * d.seq;
  AttentionTensors t{};
  SLUICE_ASSIGN_OR_RETURN(t.q, run.Input<bf16>(DType::kBf16, q_elems, -1.0f, 1.0f));
  SLUICE_ASSIGN_OR_RETURN(t.k, run.Input<bf16>(DType::kBf16, kv_elems, -1.0f, 1.0f));
  SLUICE_ASSIGN_OR_RETURN(t.v, run.Input<bf16>(DType::kBf16, kv_elems, -1.0f, 1.0f));
  // The forward's outputs are checked wherever the forward is timed; for the backward alone
  // they are inputs.
  if (pass == Pass::kBackward) {
    SLUICE_ASSIGN_OR_RETURN(void* out, run.Scratch(q_elems * sizeof(bf16)));
    SLUICE_ASSIGN_OR_RETURN(void* lse, run.Scratch(lse_elems * sizeof(float)));
    t.out = static_cast<bf16*>(out);
    t.lse = static_cast<float*>(lse);
  } else {
    SLUICE_ASSIGN_OR_RETURN(t.out, run.Output<bf16>(DType::kBf16, q_elems, NAN));
    SLUICE_ASSIGN_OR_RETURN(t.lse, run.Output<float>(DType::kF32, lse_elems, NAN));
  }
  if (pass != Pass::kForward) {
    SLUICE_ASSIGN_OR_RETURN(t.dout, run.Input<bf16>(DType::kBf16, q_elems, -1.0f, 1.0f));
    SLUICE_ASSIGN_OR_RETURN(t.dq, run.Output<bf16>(DType::kBf16, q_elems, NAN));
    SLUICE_ASSIGN_OR_RETURN(t.dk, run.Output<bf16>(DType::kBf16, kv_elems, NAN));
    SLUICE_ASSIGN_OR_RETURN(t.dv, run.Output<bf16>(DType::kBf16, kv_elems, NAN));
  }
  return t;
}

BenchCase MakeCase(const LlamaShape& model, Pass pass, Impl impl) {
  const kernels::AttentionDims dims{.batch = model.batch,
                                    .seq = model.seq,
                                    .q_heads = model.heads,
                                    .kv_heads = model.kv_heads,
                                    .head_dim = model.head_dim};
  // Causal: half of the b*h*s^2 score matrix, two products (QK^T, PV) of 2*d FLOPs per entry.
  const double forward_flops =
      4.0 * dims.batch * dims.q_heads * dims.seq * dims.seq * dims.head_dim / 2;
  const double q_bytes = 2.0 * dims.batch * dims.seq * dims.q_heads * dims.head_dim;
  const double kv_bytes = 2.0 * dims.batch * dims.seq * dims.kv_heads * dims.head_dim;
  BenchCase c;
  c.model = model.name;
  c.shape = fmt::format("b={} s={} hq={} hkv={} d={}", dims.batch, dims.seq, dims.q_heads,
                        dims.kv_heads, dims.head_dim);
  c.dtype = "bf16";
  c.work = Work::kFlops;
  c.footprint_bytes = 5 * q_bytes + 4 * kv_bytes;
  const std::string prefix = impl == Impl::kCudnn ? "attention.cudnn" : "attention";
  switch (pass) {
    case Pass::kForward:
      c.op = prefix + ".fwd";
      c.amount = forward_flops;
      c.formula = "F = 4*b*hq*s^2*d/2 (causal)";
      break;
    case Pass::kBackward:
      c.op = prefix + ".bwd";
      c.amount = 2.5 * forward_flops;
      c.formula = "2.5*F (five products of the forward's size)";
      break;
    case Pass::kBoth:
      c.op = prefix + ".fwd+bwd";
      c.amount = 3.5 * forward_flops;
      c.formula = "3.5*F";
      // The issue's target is on forward + backward together, and only at its scope: "attention
      // forward+backward at seq 2048, head dim 128 >= 45% of the cuBLAS peak" (issue 18). Other
      // shapes (the 1b model's head dim 64) are measured against the peak with no target.
      if (dims.seq == kAttentionTargetSeq && dims.head_dim == kAttentionTargetHeadDim) {
        c.target = kAttentionTarget;
      }
      break;
  }
  c.build = [dims, pass, impl](CaseRun& run, int instances) -> Status {
    const std::string dims_error = kernels::AttentionDimsError(dims);
    if (!dims_error.empty()) return InvalidArgumentError("attention dims: {}", dims_error);
    kc::CudnnAttention* cudnn = nullptr;
    size_t ws_bytes = kc::AttentionBackwardWorkspaceBytes(dims);
    size_t forward_ws_bytes = 0;
    if (impl == Impl::kCudnn) {
      std::string why;
      cudnn = SharedCudnn(&why);
      if (cudnn == nullptr) return InvalidArgumentError("no cuDNN: {}", why);
      // These build the two graphs, outside the timed launches.
      SLUICE_RETURN_IF_ERROR(
          FromLaunch(kc::CudnnAttentionWorkspaceBytes(*cudnn, dims, kc::AttentionPass::kForward,
                                                      &forward_ws_bytes),
                     "CudnnAttentionWorkspaceBytes"));
      SLUICE_RETURN_IF_ERROR(FromLaunch(
          kc::CudnnAttentionWorkspaceBytes(*cudnn, dims, kc::AttentionPass::kBackward, &ws_bytes),
          "CudnnAttentionWorkspaceBytes"));
    }
    // One workspace for every instance (and both passes): they run one after the other on one
    // stream.
    void* ws = nullptr;
    if (pass != Pass::kForward || forward_ws_bytes > 0) {
      SLUICE_ASSIGN_OR_RETURN(
          ws, run.Scratch(std::max<size_t>(std::max(ws_bytes, forward_ws_bytes), 1)));
    }
    for (int i = 0; i < instances; ++i) {
      SLUICE_ASSIGN_OR_RETURN(AttentionTensors t, Allocate(run, dims, pass));
      auto forward = [t, dims, cudnn, ws, forward_ws_bytes](cudaStream_t s) {
        if (cudnn != nullptr) {
          return kc::AttentionForwardCudnn(*cudnn, t.q, t.k, t.v, t.out, t.lse, dims, ws,
                                           forward_ws_bytes, s);
        }
        return kc::AttentionForward<bf16>(t.q, t.k, t.v, t.out, t.lse, dims, s);
      };
      auto backward = [t, dims, cudnn, ws, ws_bytes](cudaStream_t s) {
        if (cudnn != nullptr) {
          return kc::AttentionBackwardCudnn(*cudnn, t.q, t.k, t.v, t.out, t.lse, t.dout, t.dq, t.dk,
                                            t.dv, dims, ws, ws_bytes, s);
        }
        return kc::AttentionBackward<bf16>(t.q, t.k, t.v, t.out, t.lse, t.dout, t.dq, t.dk, t.dv,
                                           dims, ws, ws_bytes, s);
      };
      switch (pass) {
        case Pass::kForward:
          run.AddLaunch(forward);
          break;
        case Pass::kBackward:
          SLUICE_RETURN_IF_ERROR(FromLaunch(forward(run.stream()), cudnn != nullptr
                                                                       ? "AttentionForwardCudnn"
                                                                       : "AttentionForward"));
          run.AddLaunch(backward);
          break;
        case Pass::kBoth:
          run.AddLaunch([forward, backward](cudaStream_t s) {
            kc::LaunchStatus status = forward(s);
            return status.ok() ? backward(s) : status;
          });
          break;
      }
    }
    return OkStatus();
  };
  return c;
}

}  // namespace

std::vector<BenchCase> AttentionCases(const LlamaShape& model) {
  std::vector<BenchCase> cases = {MakeCase(model, Pass::kForward, Impl::kOwn),
                                  MakeCase(model, Pass::kBackward, Impl::kOwn),
                                  MakeCase(model, Pass::kBoth, Impl::kOwn)};
  if (kc::CudnnAttentionBuilt()) {
    for (const Pass pass : {Pass::kForward, Pass::kBackward, Pass::kBoth}) {
      cases.push_back(MakeCase(model, pass, Impl::kCudnn));
    }
  }
  return cases;
}

}  // namespace sluice::bench::gpu
