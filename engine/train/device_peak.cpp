#include "engine/train/device_peak.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "engine/zero/word_gather.h"
#include "kernels/cpu/gemm.h"

namespace sluice::train {
namespace {

struct CudaProduct {
  // Every part must occur in the product name (case-insensitive); the first match wins, so more
  // specific names come first.
  std::vector<std::string_view> parts;
  std::string_view label;
  double bf16_tflops;  // dense tensor-core bf16/fp16 (half the "with sparsity" datasheet figure)
  double fp32_tflops;  // fp32, no tensor cores
};

// NVIDIA datasheets: H100 (SXM5, PCIe, NVL), H200 (SXM, NVL), GH200, A100 (SXM4 and PCIe, 40 and
// 80 GB have the same rates).
const std::vector<CudaProduct>& CudaProducts() {
  static const std::vector<CudaProduct> products = {
      {{"GH200"}, "GH200", 989.5, 67.0},
      {{"H200", "NVL"}, "H200 NVL", 835.5, 60.0},
      {{"H200"}, "H200 SXM", 989.5, 67.0},
      {{"H100", "PCIE"}, "H100 PCIe", 756.5, 51.0},
      {{"H100", "NVL"}, "H100 NVL", 835.5, 60.0},
      {{"H100"}, "H100 SXM", 989.5, 67.0},
      {{"A100"}, "A100", 312.0, 19.5},
  };
  return products;
}

std::string Upper(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

double Seconds() {
  using Clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

// Big enough to keep every core of a large machine busy through GemmFixed's panels, small enough
// that one product takes a few milliseconds on two cores.
constexpr int64_t kProbeSize = 768;
constexpr double kProbeBudgetS = 0.08;
constexpr int kProbeMaxProducts = 16;

PeakFlops TimeCpuGemm(int threads) {
  const int64_t n = kProbeSize;
  std::vector<float> a(static_cast<size_t>(n * n)), b(a.size()), c(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>(i % 7) * 0.125f;
    b[i] = static_cast<float>(i % 5) * 0.25f;
  }
  auto product = [&] {
    kernels::cpu::Gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n,
                       threads);
  };
  product();  // warm-up: page faults, thread team, packing buffers
  const double flops = 2.0 * static_cast<double>(n * n * n);
  double best = 0.0;
  int runs = 0;
  const double start = Seconds();
  while (runs < 3 || (runs < kProbeMaxProducts && Seconds() - start < kProbeBudgetS)) {
    const double t0 = Seconds();
    product();
    const double t = Seconds() - t0;
    if (t > 0) best = std::max(best, flops / t);
    ++runs;
  }
  PeakFlops peak;
  peak.flops_per_s = best;
  peak.dtype = "f32";
  const std::string threads_text = threads == 1  ? std::string("1 thread")
                                   : threads > 1 ? fmt::format("{} threads", threads)
                                                 : std::string("all cores");
  peak.device = fmt::format("cpu ({}, {})", kernels::cpu::GemmKernelName(), threads_text);
  peak.source =
      fmt::format("measured: best of {} fp32 GEMMs {}x{}x{} through device.cpu_gemm {} at set-up",
                  runs, n, n, n, kernels::cpu::GemmBackendName(kernels::cpu::CurrentGemmBackend()));
  return peak;
}

}  // namespace

std::optional<PeakFlops> CudaPeakFromTable(std::string_view product_name, Precision precision) {
  const std::string name = Upper(product_name);
  for (const CudaProduct& p : CudaProducts()) {
    const bool match = std::all_of(p.parts.begin(), p.parts.end(), [&](std::string_view part) {
      return name.find(Upper(part)) != std::string::npos;
    });
    if (!match) continue;
    const bool f32 = precision == Precision::kF32;
    PeakFlops peak;
    peak.flops_per_s = 1e12 * (f32 ? p.fp32_tflops : p.bf16_tflops);
    peak.dtype = std::string(PrecisionName(precision));
    peak.device = std::string(product_name);
    peak.source =
        fmt::format("table: {} {} (NVIDIA datasheet{})", p.label,
                    f32 ? "fp32" : "dense tensor-core bf16/fp16", f32 ? "" : ", without sparsity");
    return peak;
  }
  return std::nullopt;
}

PeakFlops MeasureCpuGemmPeak(int threads) {
  static std::mutex mu;
  static std::map<std::pair<int, int>, PeakFlops> measured;
  const std::pair<int, int> key{static_cast<int>(kernels::cpu::CurrentGemmBackend()), threads};
  std::lock_guard lock(mu);
  auto it = measured.find(key);
  if (it == measured.end()) it = measured.emplace(key, TimeCpuGemm(threads)).first;
  return it->second;
}

Result<RunPeak> MeasureRunPeak(Comm& world, const Device& device, int cpu_threads,
                               ops::MatmulPrecision matmul) {
  RunPeak run;
  run.ranks = world.size();
  if (device.kind() == DeviceKind::kCuda) {
    // The model computes in fp32 on the GPU; its products run at the rate of their matmul
    // precision: fp32 without tensor cores, bf16 on them, TF32 at half the bf16 rate (as every
    // NVIDIA datasheet since Ampere gives it).
    const bool tensor_cores = matmul != ops::MatmulPrecision::kFp32;
    std::optional<PeakFlops> table =
        CudaPeakFromTable(device.product(), tensor_cores ? Precision::kBF16 : Precision::kF32);
    if (table.has_value() && matmul == ops::MatmulPrecision::kTf32) {
      table->flops_per_s /= 2;
      table->dtype = "tf32";
      table->source += "; TF32 at half the bf16 rate";
    }
    if (table.has_value()) {
      run.rank = *table;
    } else {
      run.rank.device = device.product();
      run.rank.source = "not in the datasheet table (engine/train/device_peak.cpp): no MFU";
    }
  } else {
    // Ranks sharing a machine time their GEMMs together, as they will run the model.
    if (world.size() > 1) SLUICE_RETURN_IF_ERROR(world.Barrier());
    run.rank = MeasureCpuGemmPeak(cpu_threads);
  }
  // Exact sums and the rank 0 values on every rank: the same record whoever writes it.
  SLUICE_ASSIGN_OR_RETURN(run.total_flops_per_s, zero::SumInRankOrder(world, run.rank.flops_per_s));
  return run;
}

}  // namespace sluice::train
