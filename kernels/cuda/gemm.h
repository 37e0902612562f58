// CUDA backend of the linear layer Y = X·Wᵀ + b (weight [out, in], PyTorch / Hugging Face
// layout) and a general GEMM, through cuBLASLt. Same semantics and gradient convention as
// kernels/ref/ops_linear.h: dx is overwritten, dw and db are accumulated (+=), a null gradient
// pointer skips that gradient. All matrices are row-major and densely packed.
//
// Precision: by default every product uses CUBLAS_COMPUTE_32F (fp32 accumulation, never TF32, so
// the fp32 path matches the reference to ~1e-5). A context's Fp32Math may trade that for tensor
// cores on fp32 data, as PyTorch's float32_matmul_precision does: TF32 or bf16 inputs (rounded
// by cuBLAS), fp32 accumulation and output. With T = __nv_bfloat16 the activations, weight, bias
// and dx are bf16, the parameter gradients dw and db are fp32 (cuBLASLt's bf16 A/B with fp32 C/D).
//
// Row-major [R, C] with leading dimension C is, to column-major cuBLASLt, the matrix [C, R]: its
// transpose. Each product is therefore issued as its transpose (see gemm.cpp for the mapping of
// every call).
//
// GemmContext owns the cuBLASLt handle, a workspace and a cache of plans (descriptors plus the
// chosen algorithm) keyed by shape, dtypes, epilogue, transposes and pointer alignments, so a
// repeated shape skips cublasLtMatmulAlgoGetHeuristic. One context per stream: the workspace
// must not be shared by kernels that may run concurrently (a silent race, and cuBLAS is bitwise
// reproducible only with a per-stream workspace). A context is not thread-safe.
//
// Fused epilogues (bias, GELU) are used when cuBLASLt offers an algorithm for them; when it
// refuses one (alignment, an aux leading dimension that is not a multiple of 8), the launcher
// falls back to a plain product plus its own elementwise kernel, counted by unfused_epilogues().
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/cuda/launch_status.h"

namespace sluice::kernels::cuda {

// How products of fp32 matrices are computed: strictly in fp32, or with the inputs rounded to TF32
// (CUBLAS_COMPUTE_32F_FAST_TF32) or bf16 (CUBLAS_COMPUTE_32F_FAST_16BF) on the tensor cores;
// fp32 accumulation and output either way.
enum class Fp32Math { kStrict, kTf32, kBf16 };

class GemmContext {
 public:
  // What llm.c and TransformerEngine give cuBLASLt on Hopper.
  static constexpr size_t kDefaultWorkspaceBytes = size_t{32} << 20;

  // A context on the current device with its own kDefaultWorkspaceBytes workspace, allocated
  // here with cudaMalloc (creation is not a launcher: the engine creates one per stream at
  // setup) and freed by the destructor.
  static LaunchStatus Create(std::unique_ptr<GemmContext>* out);
  // A context using the caller's device workspace (256-byte aligned, outliving the context, used
  // by no other stream; null with 0 bytes runs without one). workspace_bytes bounds cuBLASLt's
  // split-K scratch and the bias-gradient partial sums.
  static LaunchStatus Create(void* workspace, size_t workspace_bytes,
                             std::unique_ptr<GemmContext>* out);

  GemmContext(const GemmContext&) = delete;
  GemmContext& operator=(const GemmContext&) = delete;
  ~GemmContext();

  // How many times cublasLtMatmulAlgoGetHeuristic was called (once per new plan).
  int64_t heuristic_queries() const;
  // How many epilogues (bias, bias + GELU) ran as a plain product plus a separate kernel.
  int64_t unfused_epilogues() const;
  // Number of cached plans, including cached refusals.
  size_t cached_plans() const;
  // Tests: never ask cuBLASLt for a bias / GELU epilogue, always take the fallback.
  void set_force_unfused_epilogues(bool force);
  // The math of fp32 products planned from now on (plans are cached per math); kStrict by default.
  void set_fp32_math(Fp32Math math);
  Fp32Math fp32_math() const;

  void* workspace() const;
  size_t workspace_bytes() const;

  // Implementation state (defined in gemm.cpp; opaque to callers).
  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  explicit GemmContext(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// x [rows, in], w [out, in], b [out] or null, y [rows, out] (no aliasing):
// y = x·wᵀ + b, bias fused into the product (CUBLASLT_EPILOGUE_BIAS) where cuBLASLt allows.
// T is float or __nv_bfloat16; b is in T.
template <typename T>
LaunchStatus LinearForward(GemmContext& ctx, const T* x, const T* w, const T* b, T* y, int64_t rows,
                           int64_t in, int64_t out, cudaStream_t stream);

// As LinearForward followed by GELU (tanh form, kernels/ref/ops_activation.h), fused through
// CUBLASLT_EPILOGUE_GELU_AUX_BIAS: pre [rows, out] receives the pre-activation x·wᵀ + b (in T,
// what GeluBackward needs), y [rows, out] = gelu(pre). The fused form needs out % 8 == 0 (the aux
// leading dimension rule); otherwise the fallback computes the same through its own kernel.
template <typename T>
LaunchStatus LinearGeluForward(GemmContext& ctx, const T* x, const T* w, const T* b, T* pre, T* y,
                               int64_t rows, int64_t in, int64_t out, cudaStream_t stream);

// dy [rows, out]. dx [rows, in] = dy·w (overwritten, in T); dw [out, in] += dyᵀ·x (fp32, beta =
// 1); db [out] += column sums of dy (fp32, deterministic two-pass kernel). Any of dx, dw, db may
// be null; w may be null when dx is, x when dw is.
template <typename T>
LaunchStatus LinearBackward(GemmContext& ctx, const T* x, const T* w, const T* dy, T* dx, float* dw,
                            float* db, int64_t rows, int64_t in, int64_t out, cudaStream_t stream);

// General GEMM, row-major like the rest of the ops: C[m, n] = alpha·op(A)·op(B) + beta·C, with
// op(A) [m, k] (A stored [m, k], or [k, m] when transpose_a) and op(B) [k, n] (B stored [k, n],
// or [n, k] when transpose_b); lda, ldb, ldc are row strides in elements. Supported types
// (a, b -> c): f32 f32 -> f32, bf16 bf16 -> bf16, bf16 bf16 -> f32; compute is always fp32.
// Used by the benchmark for the cuBLAS peak (square bf16).
enum class GemmDtype { kF32, kBf16 };

struct GemmParams {
  bool transpose_a = false;
  bool transpose_b = false;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  void* c = nullptr;
  int64_t ldc = 0;
  GemmDtype ab_type = GemmDtype::kBf16;
  GemmDtype c_type = GemmDtype::kBf16;
  float alpha = 1.0f;
  float beta = 0.0f;
};

LaunchStatus Gemm(GemmContext& ctx, const GemmParams& params, cudaStream_t stream);

namespace internal {

// The elementwise kernels of the unfused paths and the bias gradient (gemm_kernels.cu).

// y[r, c] += b[c] (fp32 add, one rounding to T).
template <typename T>
LaunchStatus GemmAddBiasRows(T* y, const T* b, int64_t rows, int64_t cols, cudaStream_t stream);

// v = pre[r, c] + (b ? b[c] : 0) in fp32; pre[r, c] = v (rounded to T); y[r, c] = gelu_tanh(v).
template <typename T>
LaunchStatus GemmBiasGeluRows(T* pre, const T* b, T* y, int64_t rows, int64_t cols,
                              cudaStream_t stream);

// How many row chunks the bias gradient of [rows, cols] is split into: a function of the shape
// (and, only for rows too wide for their partials to fit max_partial_floats, of the scratch
// size), never of the device, so the summation order and hence the bits are fixed.
int64_t GemmColumnSumChunks(int64_t rows, int64_t cols, int64_t max_partial_floats);

// db[c] += sum over r of dy[r, c]: per-chunk partial sums (chunk-major, in partials, which needs
// chunks * cols floats when chunks > 1), then a second pass adds them in chunk order.
template <typename T>
LaunchStatus GemmColumnSumAccumulate(const T* dy, float* db, int64_t rows, int64_t cols,
                                     int64_t chunks, float* partials, cudaStream_t stream);

}  // namespace internal

}  // namespace sluice::kernels::cuda
