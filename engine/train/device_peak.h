// The peak FLOP rate MFU is measured against (flops.h), per rank and for the whole run.
//
//   CUDA devices: the dense (no sparsity) tensor-core bf16/fp16 peak, or the fp32 (non-tensor)
//     peak for an fp32 model, from NVIDIA's datasheets, looked up by the product name CUDA reports
//     (cudaDeviceProp::name: "NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H200",
//     "NVIDIA A100-SXM4-80GB", ...). An unknown product has no peak: MFU is left out.
//   The CPU device: measured. The CPU ops compute in fp32 whatever the storage precision, through
//     the GEMM device.cpu_gemm selects, so the peak is the best rate of that GEMM on a square
//     fp32 product with the run's thread count, timed for about 0.1 s at set-up (and remembered
//     for the process). A measured GEMM rate rather than cores x FMA width x clock: the clock
//     under load is not knowable from /proc, and the GEMM's rate is what the model could get.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "engine/train/precision.h"
#include "runtime/comm.h"
#include "runtime/device.h"
#include "runtime/ops/ops_backend.h"
#include "runtime/status.h"

namespace sluice::train {

struct PeakFlops {
  double flops_per_s = 0.0;  // one rank's device; 0 when unknown
  std::string dtype;         // the arithmetic the peak is for: "bf16", "f32"
  std::string device;        // "NVIDIA H100 PCIe", "cpu (GemmFixed avx512, 2 threads)"
  std::string source;        // how it was found: "table: H100 PCIe bf16 dense (NVIDIA datasheet)"

  bool known() const { return flops_per_s > 0.0; }
};

// The datasheet peak of a CUDA product for `precision` (bf16 and f16: the dense tensor-core
// rate; f32: the fp32 rate), or nullopt when the product is not in the table.
std::optional<PeakFlops> CudaPeakFromTable(std::string_view product_name, Precision precision);

// The fp32 GEMM rate of this machine's CPU with `threads` threads (0: OpenMP's default) through
// the current device.cpu_gemm backend (kernels/cpu/gemm.h). The first call per (backend,
// threads) times it (about 0.1 s); later calls return the remembered value.
PeakFlops MeasureCpuGemmPeak(int threads);

// The whole run's peak: each rank's measured (or looked-up) peak, summed over the ranks. The CPU
// ranks of a job time their GEMMs at the same moment, so ranks that share a machine measure the
// share of it they get. Collective.
struct RunPeak {
  PeakFlops rank;                  // rank 0's
  double total_flops_per_s = 0.0;  // summed over the ranks; 0 when any rank's is unknown
  int ranks = 1;
};
Result<RunPeak> MeasureRunPeak(Comm& world, const Device& device, int cpu_threads,
                               ops::MatmulPrecision matmul = ops::MatmulPrecision::kFp32);

}  // namespace sluice::train
