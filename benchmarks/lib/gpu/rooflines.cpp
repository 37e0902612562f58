// The two rooflines of `sluice bench kernels`, measured in the same run as the ops: cuBLAS's
// own bf16 GEMM (cublasGemmEx, fp32 compute) at 8192^3, and a device-to-device copy of 1 GiB.
// The same copy at each memory-bound op's byte count is that op's copy@size figure.
#include <cublas_v2.h>
#include <fmt/format.h>

#include <cmath>
#include <memory>

#include "benchmarks/lib/gpu/cases.h"

namespace sluice::bench::gpu {
namespace {

namespace kc = kernels::cuda;

kc::LaunchStatus CublasStatus(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return kc::LaunchStatus::Ok();
  return kc::LaunchStatus::Error(
      kc::LaunchStatus::Code::kCublasError,
      fmt::format("{}: {} ({})", what, cublasGetStatusString(status), static_cast<int>(status)));
}

}  // namespace

BenchCase CublasGemmRoofline(int64_t n) {
  BenchCase c;
  c.op = "roofline.cublas_gemm";
  c.model = kNoModel;
  c.shape = fmt::format("M=N=K={}", n);
  c.dtype = "bf16, fp32 compute";
  c.work = Work::kFlops;
  c.amount = 2.0 * n * n * n;
  c.formula = "2*M*N*K (cublasGemmEx, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)";
  c.footprint_bytes = 3.0 * 2 * n * n;
  c.build = [n](CaseRun& run, int instances) -> Status {
    cublasHandle_t raw = nullptr;
    cublasStatus_t created = cublasCreate(&raw);
    if (created != CUBLAS_STATUS_SUCCESS) {
      return InternalError("cublasCreate: {}", cublasGetStatusString(created));
    }
    std::shared_ptr<cublasContext> handle(raw, [](cublasHandle_t h) { cublasDestroy(h); });
    run.Keep(handle);
    const int ld = static_cast<int>(n);
    for (int i = 0; i < instances; ++i) {
      SLUICE_ASSIGN_OR_RETURN(void* a, run.Input(DType::kBf16, n * n, -1.0f, 1.0f));
      SLUICE_ASSIGN_OR_RETURN(void* b, run.Input(DType::kBf16, n * n, -1.0f, 1.0f));
      SLUICE_ASSIGN_OR_RETURN(void* d, run.Output(DType::kBf16, n * n, NAN));
      run.AddLaunch([handle, a, b, d, ld](cudaStream_t s) {
        kc::LaunchStatus status = CublasStatus(cublasSetStream(handle.get(), s), "cublasSetStream");
        if (!status.ok()) return status;
        const float alpha = 1.0f, beta = 0.0f;
        return CublasStatus(cublasGemmEx(handle.get(), CUBLAS_OP_N, CUBLAS_OP_N, ld, ld, ld, &alpha,
                                         a, CUDA_R_16BF, ld, b, CUDA_R_16BF, ld, &beta, d,
                                         CUDA_R_16BF, ld, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                            "cublasGemmEx");
      });
    }
    return OkStatus();
  };
  return c;
}

BenchCase CopyRoofline(size_t bytes) {
  BenchCase c;
  c.op = "roofline.d2d_copy";
  c.model = kNoModel;
  // Whole MiB for the roofline; the copies sized like an op (copy@size) are rarely whole.
  constexpr size_t kMiB = size_t{1} << 20;
  c.shape = bytes % kMiB == 0
                ? fmt::format("{} MiB", bytes / kMiB)
                : fmt::format("{} bytes ({:.2f} MiB)", bytes, static_cast<double>(bytes) / kMiB);
  c.dtype = "bytes";
  c.work = Work::kBytes;
  c.amount = 2.0 * static_cast<double>(bytes);
  c.formula = "bytes read + bytes written (cudaMemcpyAsync device to device)";
  c.footprint_bytes = c.amount;
  c.build = [bytes](CaseRun& run, int instances) -> Status {
    for (int i = 0; i < instances; ++i) {
      SLUICE_ASSIGN_OR_RETURN(void* src, run.Input(DType::kBf16, bytes / 2, -1.0f, 1.0f));
      SLUICE_ASSIGN_OR_RETURN(void* dst, run.Output(DType::kBf16, bytes / 2, NAN));
      run.AddLaunch([src, dst, bytes](cudaStream_t s) {
        cudaError_t rc = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s);
        if (rc == cudaSuccess) return kc::LaunchStatus::Ok();
        return kc::LaunchStatus::Error(
            kc::LaunchStatus::Code::kCudaError,
            fmt::format("cudaMemcpyAsync: {}: {}", cudaGetErrorName(rc), cudaGetErrorString(rc)));
      });
    }
    return OkStatus();
  };
  return c;
}

}  // namespace sluice::bench::gpu
