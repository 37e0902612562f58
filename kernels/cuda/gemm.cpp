// Host side of the CUDA linear layer and GEMM: cuBLASLt plans, cached per shape, and the mapping
// of the row-major products onto column-major cuBLASLt.
//
// Row-major [R, C] (leading dimension C) is read by cuBLASLt as column-major [C, R] = its
// transpose. So each row-major product P = Q·S is issued as Pᵀ = Sᵀ·Qᵀ, and a row-major operand
// is "not transposed" for cuBLASLt exactly when the row-major product uses its transpose:
//
//   forward  Y[rows,out] = X·Wᵀ  ->  Yᵀ[out,rows] = W·Xᵀ
//            A = w (col-major [in,out], ld in), TRANSA = T -> W [out,in]   m = out
//            B = x (col-major [in,rows], ld in), TRANSB = N -> Xᵀ          n = rows, k = in
//            D = y (col-major [out,rows], ld out); bias length m = out, one per row of D.
//   dgrad    dX[rows,in] = dY·W  ->  dXᵀ[in,rows] = Wᵀ·dYᵀ
//            A = w (col-major [in,out], ld in), TRANSA = N -> Wᵀ           m = in
//            B = dy (col-major [out,rows], ld out), TRANSB = N -> dYᵀ      n = rows, k = out
//            D = dx (col-major [in,rows], ld in), beta = 0.
//   wgrad    dW[out,in] += dYᵀ·X  ->  dWᵀ[in,out] += Xᵀ·dY
//            A = x (col-major [in,rows], ld in), TRANSA = N -> Xᵀ          m = in
//            B = dy (col-major [out,rows], ld out), TRANSB = T -> dY       n = out, k = rows
//            C = D = dw (fp32, col-major [in,out], ld in), beta = 1.
//   Gemm     C[m,n] = op(A)·op(B)  ->  Cᵀ[n,m] = op(B)ᵀ·op(A)ᵀ: operands swapped, m and n
//            swapped, each operand keeping its own transpose flag.
#include "kernels/cuda/gemm.h"

#include <cublasLt.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>

#include "kernels/cuda/launch_check.h"

namespace sluice::kernels::cuda {
namespace {

template <typename T>
constexpr cudaDataType_t CudaTypeOf();
template <>
constexpr cudaDataType_t CudaTypeOf<float>() {
  return CUDA_R_32F;
}
template <>
constexpr cudaDataType_t CudaTypeOf<__nv_bfloat16>() {
  return CUDA_R_16BF;
}

size_t SizeOf(cudaDataType_t type) { return type == CUDA_R_32F ? 4 : 2; }

// Alignment in bytes (a power of two, at most 256) of a device pointer. cuBLASLt assumes 256
// unless told otherwise and may pick kernels whose vector loads need it, so the plan passes the
// measured alignments as MIN_ALIGNMENT preferences, and they are part of the cache key.
uint32_t AlignmentOf(const void* pointer) {
  const uintptr_t value = reinterpret_cast<uintptr_t>(pointer);
  if (value == 0) return 256;
  uint32_t alignment = 1;
  while (alignment < 256 && value % (2 * alignment) == 0) alignment *= 2;
  return alignment;
}

// One cuBLASLt product, already in column-major terms. C and D are the same matrix (in place).
struct MatmulCall {
  bool trans_a = false;
  bool trans_b = false;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  void* d = nullptr;
  int64_t ldd = 0;
  cudaDataType_t ab_type = CUDA_R_32F;
  cudaDataType_t d_type = CUDA_R_32F;
  float alpha = 1.0f;
  float beta = 0.0f;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;  // BIAS, GELU_AUX_BIAS: [m], in d_type
  void* aux = nullptr;         // GELU_AUX(_BIAS): the pre-activation, [m, n] with aux_ld, d_type
  int64_t aux_ld = 0;
};

struct PlanKey {
  int64_t m, n, k, lda, ldb, ldd, aux_ld;
  int32_t trans_a, trans_b, ab_type, d_type, epilogue, compute;
  uint32_t align_a, align_b, align_d, align_bias, align_aux;

  auto Tie() const {
    return std::tie(m, n, k, lda, ldb, ldd, aux_ld, trans_a, trans_b, ab_type, d_type, epilogue,
                    compute, align_a, align_b, align_d, align_bias, align_aux);
  }
  bool operator<(const PlanKey& other) const { return Tie() < other.Tie(); }
};

PlanKey KeyOf(const MatmulCall& call, cublasComputeType_t compute) {
  return PlanKey{call.m,
                 call.n,
                 call.k,
                 call.lda,
                 call.ldb,
                 call.ldd,
                 call.aux_ld,
                 call.trans_a ? 1 : 0,
                 call.trans_b ? 1 : 0,
                 static_cast<int32_t>(call.ab_type),
                 static_cast<int32_t>(call.d_type),
                 static_cast<int32_t>(call.epilogue),
                 static_cast<int32_t>(compute),
                 AlignmentOf(call.a),
                 AlignmentOf(call.b),
                 AlignmentOf(call.d),
                 AlignmentOf(call.bias),
                 AlignmentOf(call.aux)};
}

// The descriptors and the algorithm of one cached shape; has_algo false caches a refusal.
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr;
  cublasLtMatrixLayout_t b = nullptr;
  cublasLtMatrixLayout_t d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool has_algo = false;

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (d != nullptr) cublasLtMatrixLayoutDestroy(d);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

struct PreferenceHolder {
  cublasLtMatmulPreference_t pref = nullptr;
  ~PreferenceHolder() {
    if (pref != nullptr) cublasLtMatmulPreferenceDestroy(pref);
  }
};

template <typename V>
cublasStatus_t SetDesc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute,
                       const V& value) {
  return cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value));
}
template <typename V>
cublasStatus_t SetPref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
                       const V& value) {
  return cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value));
}

}  // namespace

struct GemmContext::Impl {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  bool owns_workspace = false;
  bool force_unfused = false;
  Fp32Math fp32_math = Fp32Math::kStrict;
  int64_t heuristic_queries = 0;
  int64_t unfused_epilogues = 0;
  std::map<PlanKey, std::unique_ptr<Plan>> plans;

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() {
    plans.clear();
    if (handle != nullptr) cublasLtDestroy(handle);
    if (owns_workspace && workspace != nullptr) cudaFree(workspace);
  }
};

namespace {

// The pointer attributes change from call to call; the heuristic also reads them (for their
// alignment), so they are set before it and again before every launch.
LaunchStatus SetPointers(Plan& plan, const MatmulCall& call) {
  if (call.bias != nullptr) {
    SLUICE_CUBLAS_LAUNCH_TRY(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, call.bias));
  }
  if (call.aux != nullptr) {
    SLUICE_CUBLAS_LAUNCH_TRY(
        SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, call.aux));
  }
  return LaunchStatus::Ok();
}

// fp32 inputs take the context's Fp32Math; bf16 inputs always accumulate in plain fp32.
cublasComputeType_t ComputeTypeOf(const GemmContext::Impl& ctx, const MatmulCall& call) {
  if (call.ab_type != CUDA_R_32F) return CUBLAS_COMPUTE_32F;
  switch (ctx.fp32_math) {
    case Fp32Math::kTf32:
      return CUBLAS_COMPUTE_32F_FAST_TF32;
    case Fp32Math::kBf16:
      return CUBLAS_COMPUTE_32F_FAST_16BF;
    case Fp32Math::kStrict:
      break;
  }
  return CUBLAS_COMPUTE_32F;
}

LaunchStatus BuildPlan(GemmContext::Impl& ctx, const MatmulCall& call, const PlanKey& key,
                       std::unique_ptr<Plan>* out) {
  auto plan = std::make_unique<Plan>();
  SLUICE_CUBLAS_LAUNCH_TRY(cublasLtMatmulDescCreate(
      &plan->desc, static_cast<cublasComputeType_t>(key.compute), CUDA_R_32F));
  const cublasOperation_t op_a = call.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = call.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  SLUICE_CUBLAS_LAUNCH_TRY(SetDesc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, op_a));
  SLUICE_CUBLAS_LAUNCH_TRY(SetDesc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, op_b));
  SLUICE_CUBLAS_LAUNCH_TRY(SetDesc(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, call.epilogue));
  const int32_t d_type = static_cast<int32_t>(call.d_type);
  if (call.bias != nullptr) {
    SLUICE_CUBLAS_LAUNCH_TRY(SetDesc(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, d_type));
  }
  if (call.aux != nullptr) {
    SLUICE_CUBLAS_LAUNCH_TRY(
        SetDesc(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, call.aux_ld));
    SLUICE_CUBLAS_LAUNCH_TRY(
        SetDesc(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, d_type));
  }
  // Layouts describe the operands as stored: op(A) is [m, k], so A itself is [k, m] when
  // transposed; likewise B.
  const uint64_t a_rows = static_cast<uint64_t>(call.trans_a ? call.k : call.m);
  const uint64_t a_cols = static_cast<uint64_t>(call.trans_a ? call.m : call.k);
  const uint64_t b_rows = static_cast<uint64_t>(call.trans_b ? call.n : call.k);
  const uint64_t b_cols = static_cast<uint64_t>(call.trans_b ? call.k : call.n);
  SLUICE_CUBLAS_LAUNCH_TRY(
      cublasLtMatrixLayoutCreate(&plan->a, call.ab_type, a_rows, a_cols, call.lda));
  SLUICE_CUBLAS_LAUNCH_TRY(
      cublasLtMatrixLayoutCreate(&plan->b, call.ab_type, b_rows, b_cols, call.ldb));
  SLUICE_CUBLAS_LAUNCH_TRY(cublasLtMatrixLayoutCreate(&plan->d, call.d_type,
                                                      static_cast<uint64_t>(call.m),
                                                      static_cast<uint64_t>(call.n), call.ldd));
  LaunchStatus status = SetPointers(*plan, call);
  if (!status.ok()) return status;

  PreferenceHolder pref;
  SLUICE_CUBLAS_LAUNCH_TRY(cublasLtMatmulPreferenceCreate(&pref.pref));
  const uint64_t workspace_bytes = ctx.workspace_bytes;
  SLUICE_CUBLAS_LAUNCH_TRY(
      SetPref(pref.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace_bytes));
  // Split-K only through an fp32 (compute type) scratch: INPLACE and OUTPUT_TYPE would reduce
  // partial sums in bf16 when D is bf16.
  const uint32_t reduction =
      CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  SLUICE_CUBLAS_LAUNCH_TRY(
      SetPref(pref.pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, reduction));
  SLUICE_CUBLAS_LAUNCH_TRY(
      SetPref(pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_a));
  SLUICE_CUBLAS_LAUNCH_TRY(
      SetPref(pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_b));
  SLUICE_CUBLAS_LAUNCH_TRY(
      SetPref(pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_d));
  SLUICE_CUBLAS_LAUNCH_TRY(
      SetPref(pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_d));

  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  ++ctx.heuristic_queries;
  const cublasStatus_t heuristic = cublasLtMatmulAlgoGetHeuristic(
      ctx.handle, plan->desc, plan->a, plan->b, plan->d, plan->d, pref.pref, 1, &result, &returned);
  if (heuristic == CUBLAS_STATUS_SUCCESS && returned > 0) {
    plan->algo = result.algo;
    plan->has_algo = true;
  } else if (heuristic != CUBLAS_STATUS_SUCCESS && heuristic != CUBLAS_STATUS_NOT_SUPPORTED &&
             heuristic != CUBLAS_STATUS_INVALID_VALUE) {
    // Anything but "no algorithm for this" (e.g. out of host memory) is an error, not cached.
    return internal::FromCublas(heuristic, "cublasLtMatmulAlgoGetHeuristic");
  }
  *out = std::move(plan);
  return LaunchStatus::Ok();
}

// Runs call on stream. When cuBLASLt has no algorithm for it, sets *refused and launches nothing
// (the refusal is cached like a plan, so it is not asked again either).
LaunchStatus RunMatmul(GemmContext::Impl& ctx, const MatmulCall& call, cudaStream_t stream,
                       bool* refused) {
  *refused = false;
  const PlanKey key = KeyOf(call, ComputeTypeOf(ctx, call));
  auto found = ctx.plans.find(key);
  if (found == ctx.plans.end()) {
    std::unique_ptr<Plan> plan;
    LaunchStatus status = BuildPlan(ctx, call, key, &plan);
    if (!status.ok()) return status;
    found = ctx.plans.emplace(key, std::move(plan)).first;
  }
  Plan& plan = *found->second;
  if (!plan.has_algo) {
    *refused = true;
    return LaunchStatus::Ok();
  }
  LaunchStatus status = SetPointers(plan, call);
  if (!status.ok()) return status;
  SLUICE_CUBLAS_LAUNCH_TRY(cublasLtMatmul(
      ctx.handle, plan.desc, &call.alpha, call.a, plan.a, call.b, plan.b, &call.beta, call.d,
      plan.d, call.d, plan.d, &plan.algo, ctx.workspace, ctx.workspace_bytes, stream));
  return LaunchStatus::Ok();
}

// As RunMatmul, where a refusal is an error (a plain product with no epilogue to drop).
LaunchStatus RunPlainMatmul(GemmContext::Impl& ctx, const MatmulCall& call, cudaStream_t stream,
                            const char* what) {
  bool refused = false;
  LaunchStatus status = RunMatmul(ctx, call, stream, &refused);
  if (!status.ok()) return status;
  if (refused) {
    return LaunchStatus::Error(LaunchStatus::Code::kCublasError,
                               std::string("no cuBLASLt algorithm for m=") +
                                   std::to_string(call.m) + " n=" + std::to_string(call.n) +
                                   " k=" + std::to_string(call.k) + " (in " + what +
                                   "; CUBLASLT_LOG_LEVEL=5 shows why)");
  }
  return LaunchStatus::Ok();
}

// Forward of LinearForward (gelu false) and LinearGeluForward (gelu true, pre receives the
// pre-activation).
template <typename T>
LaunchStatus ForwardImpl(GemmContext::Impl& ctx, const T* x, const T* w, const T* b, T* pre, T* y,
                         int64_t rows, int64_t in, int64_t out, bool gelu, const char* what,
                         cudaStream_t stream) {
  if (rows == 0 || out == 0) return LaunchStatus::Ok();
  if (in == 0) {  // an empty sum: y = b (or 0), before any activation
    T* target = gelu ? pre : y;
    SLUICE_CUDA_LAUNCH_TRY(cudaMemsetAsync(target, 0, sizeof(T) * rows * out, stream));
    if (gelu) return internal::GemmBiasGeluRows<T>(pre, b, y, rows, out, stream);
    if (b == nullptr) return LaunchStatus::Ok();
    return internal::GemmAddBiasRows<T>(y, b, rows, out, stream);
  }

  MatmulCall call;  // Yᵀ[out, rows] = W·Xᵀ (see the top of this file)
  call.trans_a = true;
  call.trans_b = false;
  call.m = out;
  call.n = rows;
  call.k = in;
  call.a = w;
  call.lda = in;
  call.b = x;
  call.ldb = in;
  call.d = y;
  call.ldd = out;
  call.ab_type = CudaTypeOf<T>();
  call.d_type = CudaTypeOf<T>();

  const bool has_epilogue = gelu || b != nullptr;
  // The aux (pre-activation) leading dimension must be a multiple of 8 (cublasLt.h).
  const bool may_fuse = has_epilogue && !ctx.force_unfused && (!gelu || out % 8 == 0);
  if (may_fuse) {
    MatmulCall fused = call;
    if (gelu) {
      fused.epilogue = b != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
      fused.aux = pre;
      fused.aux_ld = out;
    } else {
      fused.epilogue = CUBLASLT_EPILOGUE_BIAS;
    }
    fused.bias = b;
    bool refused = false;
    LaunchStatus status = RunMatmul(ctx, fused, stream, &refused);
    if (!status.ok() || !refused) return status;
  }

  // Plain product, then the epilogue as a separate kernel.
  if (has_epilogue) ++ctx.unfused_epilogues;
  if (gelu) call.d = pre;
  LaunchStatus status = RunPlainMatmul(ctx, call, stream, what);
  if (!status.ok()) return status;
  if (gelu) return internal::GemmBiasGeluRows<T>(pre, b, y, rows, out, stream);
  if (b != nullptr) return internal::GemmAddBiasRows<T>(y, b, rows, out, stream);
  return LaunchStatus::Ok();
}

}  // namespace

GemmContext::GemmContext(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GemmContext::~GemmContext() = default;

LaunchStatus GemmContext::Create(std::unique_ptr<GemmContext>* out) {
  SLUICE_CUDA_LAUNCH_REQUIRE(out != nullptr, "GemmContext::Create: out is null");
  void* workspace = nullptr;
  SLUICE_CUDA_LAUNCH_TRY(cudaMalloc(&workspace, kDefaultWorkspaceBytes));
  auto impl = std::make_unique<Impl>();
  impl->workspace = workspace;
  impl->workspace_bytes = kDefaultWorkspaceBytes;
  impl->owns_workspace = true;  // freed by ~Impl from here on, also on the error below
  SLUICE_CUBLAS_LAUNCH_TRY(cublasLtCreate(&impl->handle));
  out->reset(new GemmContext(std::move(impl)));
  return LaunchStatus::Ok();
}

LaunchStatus GemmContext::Create(void* workspace, size_t workspace_bytes,
                                 std::unique_ptr<GemmContext>* out) {
  SLUICE_CUDA_LAUNCH_REQUIRE(out != nullptr, "GemmContext::Create: out is null");
  SLUICE_CUDA_LAUNCH_REQUIRE(workspace != nullptr || workspace_bytes == 0,
                             "GemmContext::Create: null workspace with a non-zero size");
  SLUICE_CUDA_LAUNCH_REQUIRE(internal::Aligned(workspace, 256),
                             "GemmContext::Create: the workspace must be 256-byte aligned");
  auto impl = std::make_unique<Impl>();
  impl->workspace = workspace;
  impl->workspace_bytes = workspace_bytes;
  SLUICE_CUBLAS_LAUNCH_TRY(cublasLtCreate(&impl->handle));
  out->reset(new GemmContext(std::move(impl)));
  return LaunchStatus::Ok();
}

int64_t GemmContext::heuristic_queries() const { return impl_->heuristic_queries; }
int64_t GemmContext::unfused_epilogues() const { return impl_->unfused_epilogues; }
size_t GemmContext::cached_plans() const { return impl_->plans.size(); }
void GemmContext::set_force_unfused_epilogues(bool force) { impl_->force_unfused = force; }
void GemmContext::set_fp32_math(Fp32Math math) { impl_->fp32_math = math; }
Fp32Math GemmContext::fp32_math() const { return impl_->fp32_math; }
void* GemmContext::workspace() const { return impl_->workspace; }
size_t GemmContext::workspace_bytes() const { return impl_->workspace_bytes; }

template <typename T>
LaunchStatus LinearForward(GemmContext& ctx, const T* x, const T* w, const T* b, T* y, int64_t rows,
                           int64_t in, int64_t out, cudaStream_t stream) {
  SLUICE_CUDA_LAUNCH_REQUIRE(rows >= 0 && in >= 0 && out >= 0, "LinearForward: negative size");
  SLUICE_CUDA_LAUNCH_REQUIRE(rows == 0 || in == 0 || out == 0 || x != nullptr,
                             "LinearForward: x is null");
  SLUICE_CUDA_LAUNCH_REQUIRE(rows == 0 || in == 0 || out == 0 || w != nullptr,
                             "LinearForward: w is null");
  SLUICE_CUDA_LAUNCH_REQUIRE(rows == 0 || out == 0 || y != nullptr, "LinearForward: y is null");
  return ForwardImpl<T>(ctx.impl(), x, w, b, nullptr, y, rows, in, out, /*gelu=*/false,
                        "LinearForward", stream);
}

template <typename T>
LaunchStatus LinearGeluForward(GemmContext& ctx, const T* x, const T* w, const T* b, T* pre, T* y,
                               int64_t rows, int64_t in, int64_t out, cudaStream_t stream) {
  SLUICE_CUDA_LAUNCH_REQUIRE(rows >= 0 && in >= 0 && out >= 0, "LinearGeluForward: negative size");
  SLUICE_CUDA_LAUNCH_REQUIRE(rows == 0 || in == 0 || out == 0 || x != nullptr,
                             "LinearGeluForward: x is null");
  SLUICE_CUDA_LAUNCH_REQUIRE(rows == 0 || in == 0 || out == 0 || w != nullptr,
                             "LinearGeluForward: w is null");
  SLUICE_CUDA_LAUNCH_REQUIRE(rows == 0 || out == 0 || (y != nullptr && pre != nullptr),
                             "LinearGeluForward: y or pre is null");
  return ForwardImpl<T>(ctx.impl(), x, w, b, pre, y, rows, in, out, /*gelu=*/true,
                        "LinearGeluForward", stream);
}

template <typename T>
LaunchStatus LinearBackward(GemmContext& ctx, const T* x, const T* w, const T* dy, T* dx, float* dw,
                            float* db, int64_t rows, int64_t in, int64_t out, cudaStream_t stream) {
  SLUICE_CUDA_LAUNCH_REQUIRE(rows >= 0 && in >= 0 && out >= 0, "LinearBackward: negative size");
  const bool want_dx = dx != nullptr && rows > 0 && in > 0;
  const bool want_dw = dw != nullptr && rows > 0 && in > 0 && out > 0;
  const bool want_db = db != nullptr && rows > 0 && out > 0;
  SLUICE_CUDA_LAUNCH_REQUIRE(!(want_dx || want_dw || want_db) || out == 0 || dy != nullptr,
                             "LinearBackward: dy is null");
  SLUICE_CUDA_LAUNCH_REQUIRE(!want_dx || out == 0 || w != nullptr,
                             "LinearBackward: w is null but dx is wanted");
  SLUICE_CUDA_LAUNCH_REQUIRE(!want_dw || x != nullptr,
                             "LinearBackward: x is null but dw is wanted");
  GemmContext::Impl& impl = ctx.impl();

  if (want_dx && out == 0) {  // an empty sum
    SLUICE_CUDA_LAUNCH_TRY(cudaMemsetAsync(dx, 0, sizeof(T) * rows * in, stream));
  } else if (want_dx) {
    MatmulCall call;  // dXᵀ[in, rows] = Wᵀ·dYᵀ
    call.trans_a = false;
    call.trans_b = false;
    call.m = in;
    call.n = rows;
    call.k = out;
    call.a = w;
    call.lda = in;
    call.b = dy;
    call.ldb = out;
    call.d = dx;
    call.ldd = in;
    call.ab_type = CudaTypeOf<T>();
    call.d_type = CudaTypeOf<T>();
    LaunchStatus status = RunPlainMatmul(impl, call, stream, "LinearBackward (dx)");
    if (!status.ok()) return status;
  }

  if (want_dw) {
    MatmulCall call;  // dWᵀ[in, out] += Xᵀ·dY, fp32 accumulator
    call.trans_a = false;
    call.trans_b = true;
    call.m = in;
    call.n = out;
    call.k = rows;
    call.a = x;
    call.lda = in;
    call.b = dy;
    call.ldb = out;
    call.d = dw;
    call.ldd = in;
    call.ab_type = CudaTypeOf<T>();
    call.d_type = CUDA_R_32F;
    call.beta = 1.0f;
    LaunchStatus status = RunPlainMatmul(impl, call, stream, "LinearBackward (dw)");
    if (!status.ok()) return status;
  }

  if (want_db) {
    // Own two-pass kernel rather than the BGRADB epilogue: that one stores (ignores beta), exists
    // only inside the wgrad product (so not when dw is skipped), and its order is cuBLASLt's.
    const int64_t chunks = internal::GemmColumnSumChunks(
        rows, out, static_cast<int64_t>(impl.workspace_bytes / sizeof(float)));
    return internal::GemmColumnSumAccumulate<T>(dy, db, rows, out, chunks,
                                                static_cast<float*>(impl.workspace), stream);
  }
  return LaunchStatus::Ok();
}

LaunchStatus Gemm(GemmContext& ctx, const GemmParams& p, cudaStream_t stream) {
  SLUICE_CUDA_LAUNCH_REQUIRE(p.m >= 0 && p.n >= 0 && p.k >= 0, "Gemm: negative size");
  SLUICE_CUDA_LAUNCH_REQUIRE(p.ab_type == GemmDtype::kBf16 || p.c_type == GemmDtype::kF32,
                             "Gemm: f32 inputs need an f32 output");
  const int64_t a_cols = p.transpose_a ? p.m : p.k;  // row length of A as stored
  const int64_t b_cols = p.transpose_b ? p.k : p.n;
  if (p.m == 0 || p.n == 0) return LaunchStatus::Ok();
  SLUICE_CUDA_LAUNCH_REQUIRE(p.c != nullptr, "Gemm: c is null");
  SLUICE_CUDA_LAUNCH_REQUIRE(p.ldc >= p.n, "Gemm: ldc < n");
  const cudaDataType_t ab_type = p.ab_type == GemmDtype::kBf16 ? CUDA_R_16BF : CUDA_R_32F;
  const cudaDataType_t c_type = p.c_type == GemmDtype::kBf16 ? CUDA_R_16BF : CUDA_R_32F;
  if (p.k == 0) {  // C = beta·C with an empty product
    SLUICE_CUDA_LAUNCH_REQUIRE(p.beta == 0.0f || p.beta == 1.0f,
                               "Gemm: k == 0 supports only beta 0 or 1");
    if (p.beta == 1.0f) return LaunchStatus::Ok();
    const size_t element = SizeOf(c_type);
    SLUICE_CUDA_LAUNCH_TRY(cudaMemset2DAsync(p.c, p.ldc * element, 0, p.n * element, p.m, stream));
    return LaunchStatus::Ok();
  }
  SLUICE_CUDA_LAUNCH_REQUIRE(p.a != nullptr && p.b != nullptr, "Gemm: a or b is null");
  SLUICE_CUDA_LAUNCH_REQUIRE(p.lda >= a_cols && p.ldb >= b_cols, "Gemm: lda or ldb too small");

  MatmulCall call;  // Cᵀ[n, m] = op(B)ᵀ·op(A)ᵀ
  call.trans_a = p.transpose_b;
  call.trans_b = p.transpose_a;
  call.m = p.n;
  call.n = p.m;
  call.k = p.k;
  call.a = p.b;
  call.lda = p.ldb;
  call.b = p.a;
  call.ldb = p.lda;
  call.d = p.c;
  call.ldd = p.ldc;
  call.ab_type = ab_type;
  call.d_type = c_type;
  call.alpha = p.alpha;
  call.beta = p.beta;
  return RunPlainMatmul(ctx.impl(), call, stream, "Gemm");
}

#define SLUICE_INSTANTIATE(T)                                                                     \
  template LaunchStatus LinearForward<T>(GemmContext&, const T*, const T*, const T*, T*, int64_t, \
                                         int64_t, int64_t, cudaStream_t);                         \
  template LaunchStatus LinearGeluForward<T>(GemmContext&, const T*, const T*, const T*, T*, T*,  \
                                             int64_t, int64_t, int64_t, cudaStream_t);            \
  template LaunchStatus LinearBackward<T>(GemmContext&, const T*, const T*, const T*, T*, float*, \
                                          float*, int64_t, int64_t, int64_t, cudaStream_t);
SLUICE_INSTANTIATE(float)
SLUICE_INSTANTIATE(__nv_bfloat16)
#undef SLUICE_INSTANTIATE

}  // namespace sluice::kernels::cuda
