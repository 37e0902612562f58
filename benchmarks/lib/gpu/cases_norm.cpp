// RMSNorm, LayerNorm and the fused residual add + RMSNorm (kernels/cuda/norm.h) over the
// [tokens, hidden] activations, in GB/s of the bytes they must move against the same-run copy
// bandwidth. LayerNorm is GPT-2's; it runs here at the Llama widths for comparison.
#include <fmt/format.h>

#include <cmath>

#include "benchmarks/lib/gpu/cases.h"
#include "kernels/cuda/norm.h"

namespace sluice::bench::gpu {
namespace {

namespace kc = kernels::cuda;
using bf16 = __nv_bfloat16;

constexpr float kEps = 1e-5f;

enum class Norm { kRms, kLayer, kAddRms };

BenchCase Base(const LlamaShape& model, const std::string& op) {
  BenchCase c;
  c.op = op;
  c.model = model.name;
  c.shape = fmt::format("{}x{}", model.tokens(), model.hidden);
  c.dtype = "bf16, stats fp32";
  c.work = Work::kBytes;
  c.target = kMemoryTarget;
  return c;
}

BenchCase ForwardCase(const LlamaShape& model, Norm norm) {
  const int64_t rows = model.tokens(), cols = model.hidden;
  const double mc = static_cast<double>(rows) * cols;
  BenchCase c = Base(model, norm == Norm::kRms     ? "rmsnorm.fwd"
                            : norm == Norm::kLayer ? "layernorm.fwd"
                                                   : "add_rmsnorm.fwd");
  switch (norm) {
    case Norm::kRms:
      c.amount = 4 * mc + 2.0 * cols + 4.0 * rows;
      c.formula = "2MC x + 2MC y + 2C gamma + 4M rstd";
      break;
    case Norm::kLayer:
      c.amount = 4 * mc + 4.0 * cols + 8.0 * rows;
      c.formula = "2MC x + 2MC y + 4C gamma,beta + 8M mean,rstd";
      break;
    case Norm::kAddRms:
      c.amount = 8 * mc + 2.0 * cols + 4.0 * rows;
      c.formula = "4MC a,b + 2MC r + 2MC y + 2C gamma + 4M rstd";
      break;
  }
  c.footprint_bytes = c.amount;
  c.build = [rows, cols, norm](CaseRun& run, int instances) -> Status {
    for (int i = 0; i < instances; ++i) {
      SLUICE_ASSIGN_OR_RETURN(bf16 * x, run.Input<bf16>(DType::kBf16, rows * cols, -2.0f, 2.0f));
      SLUICE_ASSIGN_OR_RETURN(bf16 * gamma, run.Input<bf16>(DType::kBf16, cols, 0.5f, 1.5f));
      SLUICE_ASSIGN_OR_RETURN(bf16 * y, run.Output<bf16>(DType::kBf16, rows * cols, NAN));
      SLUICE_ASSIGN_OR_RETURN(float* rstd, run.Output<float>(DType::kF32, rows, NAN));
      switch (norm) {
        case Norm::kRms:
          run.AddLaunch([=](cudaStream_t s) {
            return kc::RmsNormForward<bf16>(x, gamma, y, rstd, rows, cols, kEps, s);
          });
          break;
        case Norm::kLayer: {
          SLUICE_ASSIGN_OR_RETURN(bf16 * beta, run.Input<bf16>(DType::kBf16, cols, -0.5f, 0.5f));
          SLUICE_ASSIGN_OR_RETURN(float* mean, run.Output<float>(DType::kF32, rows, NAN));
          run.AddLaunch([=](cudaStream_t s) {
            return kc::LayerNormForward<bf16>(x, gamma, beta, y, mean, rstd, rows, cols, kEps, s);
          });
          break;
        }
        case Norm::kAddRms: {
          SLUICE_ASSIGN_OR_RETURN(bf16 * b,
                                  run.Input<bf16>(DType::kBf16, rows * cols, -2.0f, 2.0f));
          SLUICE_ASSIGN_OR_RETURN(bf16 * r, run.Output<bf16>(DType::kBf16, rows * cols, NAN));
          run.AddLaunch([=](cudaStream_t s) {
            return kc::AddRmsNormForward<bf16>(x, b, r, gamma, y, rstd, rows, cols, kEps, s);
          });
          break;
        }
      }
    }
    return OkStatus();
  };
  return c;
}

BenchCase BackwardCase(const LlamaShape& model, Norm norm) {
  const int64_t rows = model.tokens(), cols = model.hidden;
  const double mc = static_cast<double>(rows) * cols;
  BenchCase c = Base(model, norm == Norm::kRms ? "rmsnorm.bwd" : "layernorm.bwd");
  c.dtype = "bf16, stats+dgamma fp32";
  if (norm == Norm::kRms) {
    c.amount = 6 * mc + 2.0 * cols + 4.0 * rows + 8.0 * cols;
    c.formula = "2MC x + 2MC dy + 2MC dx + 2C gamma + 4M rstd + 8C dgamma (read+write)";
  } else {
    c.amount = 6 * mc + 2.0 * cols + 8.0 * rows + 16.0 * cols;
    c.formula = "2MC x + 2MC dy + 2MC dx + 2C gamma + 8M mean,rstd + 16C dgamma,dbeta";
  }
  c.footprint_bytes = c.amount;
  c.build = [rows, cols, norm](CaseRun& run, int instances) -> Status {
    const size_t ws_bytes = kc::NormBackwardWorkspaceBytes(rows, cols);
    SLUICE_ASSIGN_OR_RETURN(void* ws, run.Scratch(ws_bytes));
    for (int i = 0; i < instances; ++i) {
      SLUICE_ASSIGN_OR_RETURN(bf16 * x, run.Input<bf16>(DType::kBf16, rows * cols, -2.0f, 2.0f));
      SLUICE_ASSIGN_OR_RETURN(bf16 * gamma, run.Input<bf16>(DType::kBf16, cols, 0.5f, 1.5f));
      SLUICE_ASSIGN_OR_RETURN(bf16 * dy, run.Input<bf16>(DType::kBf16, rows * cols, -1.0f, 1.0f));
      // Statistics of plausible rows (|x| up to 2: rstd about 1), not computed: the backward's
      // speed does not depend on their values.
      SLUICE_ASSIGN_OR_RETURN(float* rstd, run.Input<float>(DType::kF32, rows, 0.8f, 1.2f));
      SLUICE_ASSIGN_OR_RETURN(bf16 * dx, run.Output<bf16>(DType::kBf16, rows * cols, NAN));
      SLUICE_ASSIGN_OR_RETURN(float* dgamma, run.Output<float>(DType::kF32, cols, 0.0f));
      if (norm == Norm::kRms) {
        run.AddLaunch([=](cudaStream_t s) {
          return kc::RmsNormBackward<bf16>(x, gamma, rstd, dy, dx, dgamma, rows, cols, ws, ws_bytes,
                                           s);
        });
      } else {
        SLUICE_ASSIGN_OR_RETURN(float* mean, run.Input<float>(DType::kF32, rows, -0.1f, 0.1f));
        SLUICE_ASSIGN_OR_RETURN(float* dbeta, run.Output<float>(DType::kF32, cols, 0.0f));
        run.AddLaunch([=](cudaStream_t s) {
          return kc::LayerNormBackward<bf16>(x, gamma, mean, rstd, dy, dx, dgamma, dbeta, rows,
                                             cols, ws, ws_bytes, s);
        });
      }
    }
    return OkStatus();
  };
  return c;
}

}  // namespace

std::vector<BenchCase> NormCases(const LlamaShape& model) {
  return {ForwardCase(model, Norm::kRms), BackwardCase(model, Norm::kRms),
          ForwardCase(model, Norm::kAddRms), ForwardCase(model, Norm::kLayer),
          BackwardCase(model, Norm::kLayer)};
}

}  // namespace sluice::bench::gpu
