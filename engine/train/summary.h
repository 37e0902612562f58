// The end-of-run summary: a table for people (stdout) and summary.json for tools, from the same
// numbers: throughput, time per phase, peak memory per tier (and, from Trainer::Run, per tier and
// category against the estimator's prediction), final train and validation loss.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/train/device_peak.h"
#include "engine/train/memory_report.h"
#include "runtime/memory_kinds.h"
#include "runtime/ops/profiled_ops_backend.h"

namespace sluice::train {

struct PhaseTimes {
  double forward_s = 0.0;
  double backward_s = 0.0;
  double optimizer_s = 0.0;
  double eval_s = 0.0;
  double other_s = 0.0;  // set-up, data loading, logging: wall time minus the phases above
};

// The CPU kernels the run computed with, so that two records can be told apart by more than the
// machine: the GEMM setting and the kernel behind it (library, version, core or ISA, threads:
// kernels/cpu/gemm.h's GemmKernel), the core OpenBLAS runs here (named even when it did not run:
// the setting could be flipped) and the ISA of Sluice's own kernels (Adam, GemmFixed).
struct ComputeKernels {
  std::string cpu_gemm;              // device.cpu_gemm: "blas" or "deterministic"
  std::string gemm_kernel;           // "oneDNN 2.6.3 avx512_core_amx", "GemmFixed avx512"
  std::string gemm_library;          // "oneDNN", "OpenBLAS", "GemmFixed"
  std::string gemm_version;          // "2.6.3"; "" for GemmFixed
  std::string gemm_core;             // oneDNN's dispatch ISA, OpenBLAS's core, GemmFixed's variant
  int gemm_threads = 0;              // the team a product got
  std::string openblas_core;         // openblas_get_corename(), after Sluice set it for the CPU
  std::string openblas_core_reason;  // "picked by OpenBLAS", "set by Sluice for avx512 (...)"
  std::string openblas_config;       // openblas_get_config()
  std::string kernel_isa;            // "avx512", "avx2", "scalar"
  std::string ops_path;  // the other ops' path (kernels/cpu/ops_path.h): "fixed", "vector avx512"
};

// Model FLOPs (flops.h) against the device's peak (device_peak.h).
struct FlopsSummary {
  int64_t per_token = 0;          // 6N + 12 L d_attn T at the training window
  int64_t matmul_parameters = 0;  // N
  double model_flops = 0.0;       // over the steps of this invocation, all ranks
  double tflops = 0.0;            // model_flops / train_s, in TFLOP/s
  std::optional<double> mfu;      // against total_peak_flops_per_s; unset when the peak is unknown
  PeakFlops peak;                 // one rank's (rank 0's)
  double total_peak_flops_per_s = 0.0;  // summed over the ranks
};

// Device time per op of the ops table over `steps` training steps (run.profile_ops), the largest
// total first.
struct OpProfile {
  int64_t steps = 0;
  std::vector<ops::OpTime> ops;
};

struct TrainSummary {
  std::string run_dir;
  std::string model;  // "gpt2, 4 layers, d_model 256"
  int64_t parameters = 0;
  std::string precision;    // "bf16"
  int64_t steps = 0;        // run by this invocation
  int64_t total_steps = 0;  // run.steps
  // The signal the run stopped early for (Trainer's stop_on_signal), 0 when it ran to the end.
  int stop_signal = 0;
  int64_t skipped_steps = 0;
  int64_t tokens = 0;         // over all ranks
  double wall_s = 0.0;        // from the start of set-up to the end of the last evaluation
  double train_s = 0.0;       // summed step times
  double tokens_per_s = 0.0;  // tokens / train_s
  PhaseTimes phases;
  std::array<uint64_t, kNumMemoryTiers> peak_bytes{};  // this rank's
  // Predicted against measured per tier and category; replaces the peak_bytes row of the table.
  std::optional<MemoryReport> memory;
  int world_size = 1;
  double final_train_loss = 0.0;  // mean over the last kFinalLossWindow applied steps
  int64_t final_train_loss_window = 0;
  std::optional<double> initial_val_loss;  // before the first step
  std::optional<double> final_val_loss;    // after the last step
  double final_loss_scale = 1.0;
  ComputeKernels kernels;
  FlopsSummary flops;
  std::optional<OpProfile> op_profile;  // run.profile_ops
};

inline constexpr int64_t kFinalLossWindow = 10;

std::string FormatSummaryTable(const TrainSummary& summary);
nlohmann::ordered_json SummaryToJson(const TrainSummary& summary);

}  // namespace sluice::train
