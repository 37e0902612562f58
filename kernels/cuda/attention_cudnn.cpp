// cuDNN's fused attention through the cuDNN frontend's graph API (header-only; found by
// cmake/SluiceCuda.cmake). One graph per (dims, direction), built on first use and kept.
//
// Our tensors are token-major, [batch, seq, heads, head_dim]; cuDNN's SDPA names its dimensions
// (b, h, s, d) and takes any strides, so the same memory is described with strides
// b: seq * heads * d, h: d, s: heads * d, d: 1. The stats tensor (b, h, s, 1) with strides
// (h * s, s, 1, 1) is our lse [batch, q_heads, seq]. cuDNN's stats are the natural-log
// log-sum-exp of the scaled, masked scores (max + ln(sum exp(s - max)); the frontend's
// set_stats_use_log2, which we leave off, would switch to base 2), which is exactly our lse.
//
// libcudnn is loaded at run time (the frontend's dynamic loading, dlopen of libcudnn.so.9 by the
// first Create), not linked: a binary built here still starts on a machine without cuDNN, where
// Create answers that it found none and everything else runs as before.
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING 1

#include "kernels/cuda/attention_cudnn.h"

#include <cudnn.h>
#include <cudnn_frontend.h>
#include <dlfcn.h>

#include <cmath>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#include "kernels/cuda/launch_check.h"

// The frontend's dynamic loading looks cuDNN's symbols up in this handle; LoadCudnn sets it.
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}  // namespace cudnn_frontend

namespace sluice::kernels::cuda {
namespace {

namespace fe = cudnn_frontend;

// dlopens libcudnn once per process. Empty when it is loaded, else why not.
std::string LoadCudnn() {
  static std::once_flag once;
  static std::string error;
  std::call_once(once, [] {
    for (const char* name : {"libcudnn.so.9", "libcudnn.so"}) {
      fe::cudnn_dlhandle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (fe::cudnn_dlhandle != nullptr) return;
      if (error.empty()) {
        const char* text = dlerror();
        error = text != nullptr ? text : "dlopen failed";
      }
    }
  });
  return fe::cudnn_dlhandle != nullptr ? std::string() : error;
}
using Bf16 = __nv_bfloat16;

// Tensor uids. The launch hands the frontend its pointers as an array sorted by uid, so the
// values matter: forward 1..5, backward 1..9, in the order of the arrays in the launchers.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

struct GraphKey {
  int64_t batch, seq, q_heads, kv_heads, head_dim;
  AttentionPass pass;
  bool operator<(const GraphKey& o) const {
    return std::tie(batch, seq, q_heads, kv_heads, head_dim, pass) <
           std::tie(o.batch, o.seq, o.q_heads, o.kv_heads, o.head_dim, o.pass);
  }
};

struct BuiltGraph {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspace_bytes = 0;
};

LaunchStatus CudnnError(const std::string& what, const std::string& message) {
  return LaunchStatus::Error(LaunchStatus::Code::kCudaError, "cuDNN: " + what + ": " + message);
}

LaunchStatus FromFrontend(const fe::error_t& error, const std::string& what) {
  if (error.is_good()) return LaunchStatus::Ok();
  if (error.code == fe::error_code_t::GRAPH_NOT_SUPPORTED) {
    return LaunchStatus::InvalidArgument("cuDNN: " + what + ": not supported: " + error.err_msg);
  }
  return CudnnError(what, error.err_msg);
}

std::string DimsText(const AttentionDims& d) {
  return "b=" + std::to_string(d.batch) + " s=" + std::to_string(d.seq) +
         " hq=" + std::to_string(d.q_heads) + " hkv=" + std::to_string(d.kv_heads) +
         " d=" + std::to_string(d.head_dim);
}

// (b, h, s, d) dims and strides of a token-major [batch, seq, heads, head_dim] tensor.
fe::graph::Tensor_attributes TokenMajor(const char* name, Uid uid, const AttentionDims& d,
                                        int64_t heads) {
  return fe::graph::Tensor_attributes()
      .set_name(name)
      .set_uid(uid)
      .set_dim({d.batch, heads, d.seq, d.head_dim})
      .set_stride({d.seq * heads * d.head_dim, d.head_dim, heads * d.head_dim, 1});
}

std::vector<int64_t> TokenMajorDims(const AttentionDims& d, int64_t heads) {
  return {d.batch, heads, d.seq, d.head_dim};
}
std::vector<int64_t> TokenMajorStrides(const AttentionDims& d, int64_t heads) {
  return {d.seq * heads * d.head_dim, d.head_dim, heads * d.head_dim, 1};
}

fe::graph::Tensor_attributes Stats(const AttentionDims& d) {
  return fe::graph::Tensor_attributes()
      .set_name("stats")
      .set_uid(kStats)
      .set_dim({d.batch, d.q_heads, d.seq, 1})
      .set_stride({d.q_heads * d.seq, d.seq, 1, 1})
      .set_data_type(fe::DataType_t::FLOAT);
}

float Scale(const AttentionDims& d) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.head_dim)));
}

std::shared_ptr<fe::graph::Graph> NewGraph() {
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return graph;
}

std::shared_ptr<fe::graph::Graph> ForwardGraph(const AttentionDims& d) {
  auto graph = NewGraph();
  auto q = graph->tensor(TokenMajor("q", kQ, d, d.q_heads));
  auto k = graph->tensor(TokenMajor("k", kK, d, d.kv_heads));
  auto v = graph->tensor(TokenMajor("v", kV, d, d.kv_heads));
  // Causal: key j is kept for query i when j <= i + 0, counted from the top-left corner.
  auto attributes = fe::graph::SDPA_attributes()
                        .set_name("attention_forward")
                        .set_generate_stats(true)
                        .set_attn_scale(Scale(d))
                        .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                        .set_diagonal_band_right_bound(0);
  auto [out, stats] = graph->sdpa(q, k, v, attributes);
  out->set_output(true)
      .set_name("out")
      .set_uid(kO)
      .set_dim(TokenMajorDims(d, d.q_heads))
      .set_stride(TokenMajorStrides(d, d.q_heads));
  stats->set_output(true)
      .set_uid(kStats)
      .set_dim({d.batch, d.q_heads, d.seq, 1})
      .set_stride({d.q_heads * d.seq, d.seq, 1, 1})
      .set_data_type(fe::DataType_t::FLOAT);
  return graph;
}

std::shared_ptr<fe::graph::Graph> BackwardGraph(const AttentionDims& d, bool deterministic) {
  auto graph = NewGraph();
  auto q = graph->tensor(TokenMajor("q", kQ, d, d.q_heads));
  auto k = graph->tensor(TokenMajor("k", kK, d, d.kv_heads));
  auto v = graph->tensor(TokenMajor("v", kV, d, d.kv_heads));
  auto out = graph->tensor(TokenMajor("out", kO, d, d.q_heads));
  auto dout = graph->tensor(TokenMajor("dout", kDO, d, d.q_heads));
  auto stats = graph->tensor(Stats(d));
  auto attributes = fe::graph::SDPA_backward_attributes()
                        .set_name("attention_backward")
                        .set_attn_scale(Scale(d))
                        .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                        .set_diagonal_band_right_bound(0)
                        .set_deterministic_algorithm(deterministic);
  auto [dq, dk, dv] = graph->sdpa_backward(q, k, v, out, dout, stats, attributes);
  dq->set_output(true)
      .set_name("dq")
      .set_uid(kDQ)
      .set_dim(TokenMajorDims(d, d.q_heads))
      .set_stride(TokenMajorStrides(d, d.q_heads));
  dk->set_output(true)
      .set_name("dk")
      .set_uid(kDK)
      .set_dim(TokenMajorDims(d, d.kv_heads))
      .set_stride(TokenMajorStrides(d, d.kv_heads));
  dv->set_output(true)
      .set_name("dv")
      .set_uid(kDV)
      .set_dim(TokenMajorDims(d, d.kv_heads))
      .set_stride(TokenMajorStrides(d, d.kv_heads));
  return graph;
}

LaunchStatus CheckDims(const AttentionDims& dims, const char* op) {
  const std::string error = AttentionDimsError(dims);
  if (!error.empty()) return LaunchStatus::InvalidArgument(std::string(op) + ": " + error);
  if (dims.head_dim % 8 != 0 || dims.head_dim > 128) {
    return LaunchStatus::InvalidArgument(std::string(op) +
                                         ": head_dim = " + std::to_string(dims.head_dim) +
                                         " is not supported (a multiple of 8, at most 128)");
  }
  return LaunchStatus::Ok();
}

}  // namespace

struct CudnnAttention::Impl {
  ~Impl() {
    if (handle != nullptr) fe::detail::destroy_handle(handle);
  }

  // The graph of key, built on first use. Call with mutex held.
  LaunchStatus Get(const GraphKey& key, bool deterministic, const BuiltGraph** built) {
    if (auto it = graphs.find(key); it != graphs.end()) {
      *built = &it->second;
      return LaunchStatus::Ok();
    }
    const AttentionDims dims{key.batch, key.seq, key.q_heads, key.kv_heads, key.head_dim};
    const std::string what =
        std::string(key.pass == AttentionPass::kForward ? "building the forward graph for "
                                                        : "building the backward graph for ") +
        DimsText(dims);
    try {
      BuiltGraph graph;
      graph.graph = key.pass == AttentionPass::kForward ? ForwardGraph(dims)
                                                        : BackwardGraph(dims, deterministic);
      if (LaunchStatus s = FromFrontend(graph.graph->build(handle, {fe::HeurMode_t::A}), what);
          !s.ok()) {
        return s;
      }
      if (LaunchStatus s = FromFrontend(graph.graph->get_workspace_size(graph.workspace_bytes),
                                        what + " (workspace size)");
          !s.ok()) {
        return s;
      }
      *built = &graphs.emplace(key, std::move(graph)).first->second;
      return LaunchStatus::Ok();
    } catch (const std::exception& e) {
      return CudnnError(what, e.what());
    }
  }

  LaunchStatus Execute(const BuiltGraph& built, void** pointers, int n, void* workspace,
                       cudaStream_t stream, const char* op) {
    try {
      if (const cudnnStatus_t rc = fe::detail::set_stream(handle, stream);
          rc != CUDNN_STATUS_SUCCESS) {
        return CudnnError(std::string(op) + ": cudnnSetStream", fe::detail::get_error_string(rc));
      }
      if (LaunchStatus s = FromFrontend(built.graph->execute(handle, pointers, n, workspace), op);
          !s.ok()) {
        return s;
      }
    } catch (const std::exception& e) {
      return CudnnError(op, e.what());
    }
    return internal::AfterLaunch(op);
  }

  cudnnHandle_t handle = nullptr;
  std::mutex mutex;
  std::map<GraphKey, BuiltGraph> graphs;
};

bool CudnnAttentionBuilt() { return true; }

CudnnAttention::CudnnAttention(const Options& options, std::unique_ptr<Impl> impl)
    : options_(options), impl_(std::move(impl)) {}

CudnnAttention::~CudnnAttention() = default;

LaunchStatus CudnnAttention::Create(const Options& options,
                                    std::unique_ptr<CudnnAttention>* context) {
  SLUICE_CUDA_LAUNCH_REQUIRE(context != nullptr, "CudnnAttention::Create: context is null");
  if (const std::string error = LoadCudnn(); !error.empty()) {
    return CudnnError("loading libcudnn.so.9", error);
  }
  auto impl = std::make_unique<Impl>();
  try {
    if (const cudnnStatus_t rc = fe::detail::create_handle(&impl->handle);
        rc != CUDNN_STATUS_SUCCESS) {
      impl->handle = nullptr;
      return CudnnError("cudnnCreate", fe::detail::get_error_string(rc));
    }
  } catch (const std::exception& e) {
    impl->handle = nullptr;
    return CudnnError("cudnnCreate", e.what());
  }
  context->reset(new CudnnAttention(options, std::move(impl)));
  return LaunchStatus::Ok();
}

std::string CudnnAttention::Describe() const {
  const size_t v = fe::detail::get_backend_version();  // 91900 for 9.19.0
  return "cuDNN " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100) + " (frontend " + std::to_string(CUDNN_FRONTEND_MAJOR_VERSION) +
         "." + std::to_string(CUDNN_FRONTEND_MINOR_VERSION) + "." +
         std::to_string(CUDNN_FRONTEND_PATCH_VERSION) + "), " +
         (options_.deterministic_backward ? "deterministic" : "non-deterministic") + " backward";
}

LaunchStatus CudnnAttentionWorkspaceBytes(CudnnAttention& context, const AttentionDims& dims,
                                          AttentionPass pass, size_t* bytes) {
  SLUICE_CUDA_LAUNCH_REQUIRE(bytes != nullptr, "CudnnAttentionWorkspaceBytes: bytes is null");
  *bytes = 0;
  if (LaunchStatus s = CheckDims(dims, "CudnnAttentionWorkspaceBytes"); !s.ok()) return s;
  if (dims.batch == 0 || dims.seq == 0) return LaunchStatus::Ok();
  CudnnAttention::Impl& impl = context.impl();
  std::lock_guard<std::mutex> lock(impl.mutex);
  const BuiltGraph* built = nullptr;
  const GraphKey key{dims.batch, dims.seq, dims.q_heads, dims.kv_heads, dims.head_dim, pass};
  if (LaunchStatus s = impl.Get(key, context.options().deterministic_backward, &built); !s.ok()) {
    return s;
  }
  *bytes = static_cast<size_t>(built->workspace_bytes);
  return LaunchStatus::Ok();
}

LaunchStatus AttentionForwardCudnn(CudnnAttention& context, const Bf16* q, const Bf16* k,
                                   const Bf16* v, Bf16* out, float* lse, const AttentionDims& dims,
                                   void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  constexpr const char* kOp = "AttentionForwardCudnn";
  if (LaunchStatus s = CheckDims(dims, kOp); !s.ok()) return s;
  if (dims.batch == 0 || dims.seq == 0) return LaunchStatus::Ok();
  SLUICE_CUDA_LAUNCH_REQUIRE(
      q != nullptr && k != nullptr && v != nullptr && out != nullptr && lse != nullptr,
      std::string(kOp) + ": q, k, v, out and lse must not be null");
  SLUICE_CUDA_LAUNCH_REQUIRE(internal::Aligned(q) && internal::Aligned(k) && internal::Aligned(v) &&
                                 internal::Aligned(out) && internal::Aligned(lse),
                             std::string(kOp) + ": q, k, v, out and lse must be 16-byte aligned");
  CudnnAttention::Impl& impl = context.impl();
  std::lock_guard<std::mutex> lock(impl.mutex);
  const BuiltGraph* built = nullptr;
  const GraphKey key{dims.batch,    dims.seq,      dims.q_heads,
                     dims.kv_heads, dims.head_dim, AttentionPass::kForward};
  if (LaunchStatus s = impl.Get(key, context.options().deterministic_backward, &built); !s.ok()) {
    return s;
  }
  const size_t needed = static_cast<size_t>(built->workspace_bytes);
  SLUICE_CUDA_LAUNCH_REQUIRE(needed == 0 || (workspace != nullptr && workspace_bytes >= needed),
                             std::string(kOp) + ": the workspace holds " +
                                 std::to_string(workspace_bytes) + " bytes, it needs " +
                                 std::to_string(needed) + " (CudnnAttentionWorkspaceBytes)");
  // Sorted by uid: kQ, kK, kV, kO, kStats.
  void* pointers[] = {const_cast<Bf16*>(q), const_cast<Bf16*>(k), const_cast<Bf16*>(v), out, lse};
  return impl.Execute(*built, pointers, 5, needed == 0 ? nullptr : workspace, stream, kOp);
}

LaunchStatus AttentionBackwardCudnn(CudnnAttention& context, const Bf16* q, const Bf16* k,
                                    const Bf16* v, const Bf16* out, const float* lse,
                                    const Bf16* dout, Bf16* dq, Bf16* dk, Bf16* dv,
                                    const AttentionDims& dims, void* workspace,
                                    size_t workspace_bytes, cudaStream_t stream) {
  constexpr const char* kOp = "AttentionBackwardCudnn";
  if (LaunchStatus s = CheckDims(dims, kOp); !s.ok()) return s;
  if (dims.batch == 0 || dims.seq == 0) return LaunchStatus::Ok();
  SLUICE_CUDA_LAUNCH_REQUIRE(q != nullptr && k != nullptr && v != nullptr && out != nullptr &&
                                 lse != nullptr && dout != nullptr,
                             std::string(kOp) + ": q, k, v, out, lse and dout must not be null");
  SLUICE_CUDA_LAUNCH_REQUIRE(dq != nullptr && dk != nullptr && dv != nullptr,
                             std::string(kOp) + ": dq, dk and dv must not be null");
  SLUICE_CUDA_LAUNCH_REQUIRE(internal::Aligned(q) && internal::Aligned(k) && internal::Aligned(v) &&
                                 internal::Aligned(out) && internal::Aligned(lse) &&
                                 internal::Aligned(dout) && internal::Aligned(dq) &&
                                 internal::Aligned(dk) && internal::Aligned(dv),
                             std::string(kOp) + ": every tensor must be 16-byte aligned");
  CudnnAttention::Impl& impl = context.impl();
  std::lock_guard<std::mutex> lock(impl.mutex);
  const BuiltGraph* built = nullptr;
  const GraphKey key{dims.batch,    dims.seq,      dims.q_heads,
                     dims.kv_heads, dims.head_dim, AttentionPass::kBackward};
  if (LaunchStatus s = impl.Get(key, context.options().deterministic_backward, &built); !s.ok()) {
    return s;
  }
  const size_t needed = static_cast<size_t>(built->workspace_bytes);
  SLUICE_CUDA_LAUNCH_REQUIRE(needed == 0 || (workspace != nullptr && workspace_bytes >= needed),
                             std::string(kOp) + ": the workspace holds " +
                                 std::to_string(workspace_bytes) + " bytes, it needs " +
                                 std::to_string(needed) + " (CudnnAttentionWorkspaceBytes)");
  // Sorted by uid: kQ, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV.
  void* pointers[] = {const_cast<Bf16*>(q),
                      const_cast<Bf16*>(k),
                      const_cast<Bf16*>(v),
                      const_cast<Bf16*>(out),
                      const_cast<float*>(lse),
                      const_cast<Bf16*>(dout),
                      dq,
                      dk,
                      dv};
  return impl.Execute(*built, pointers, 9, needed == 0 ? nullptr : workspace, stream, kOp);
}

}  // namespace sluice::kernels::cuda
