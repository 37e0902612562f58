// The linear layers of a Llama decoder and its LM head through kernels/cuda/gemm.h, forward and
// backward, in TFLOP/s against the cuBLAS peak measured in the same run.
#include <fmt/format.h>

#include <cmath>
#include <memory>

#include "benchmarks/lib/gpu/cases.h"
#include "kernels/cuda/gemm.h"

namespace sluice::bench::gpu {
namespace {

namespace kc = kernels::cuda;
using bf16 = __nv_bfloat16;

Result<std::shared_ptr<kc::GemmContext>> MakeGemmContext() {
  std::unique_ptr<kc::GemmContext> ctx;
  SLUICE_RETURN_IF_ERROR(FromLaunch(kc::GemmContext::Create(&ctx), "GemmContext::Create"));
  return std::shared_ptr<kc::GemmContext>(std::move(ctx));
}

struct LinearShape {
  const char* name;
  int64_t in;
  int64_t out;
};

BenchCase Forward(const LlamaShape& model, const LinearShape& l) {
  const int64_t m = model.tokens();
  BenchCase c;
  c.op = fmt::format("linear.{}.fwd", l.name);
  c.model = model.name;
  c.shape = fmt::format("M={} K={} N={}", m, l.in, l.out);
  c.dtype = "bf16";
  c.work = Work::kFlops;
  c.amount = 2.0 * m * l.in * l.out;
  c.formula = "2*M*N*K (Y = X*W^T)";
  c.target = kGemmTarget;
  c.footprint_bytes = 2.0 * (m * l.in + l.out * l.in + m * l.out);
  c.build = [m, l, op = c.op](CaseRun& run, int instances) -> Status {
    SLUICE_ASSIGN_OR_RETURN(std::shared_ptr<kc::GemmContext> ctx, MakeGemmContext());
    run.Keep(ctx);
    for (int i = 0; i < instances; ++i) {
      SLUICE_ASSIGN_OR_RETURN(bf16 * x, run.Input<bf16>(DType::kBf16, m * l.in, -1.0f, 1.0f));
      SLUICE_ASSIGN_OR_RETURN(bf16 * w, run.Input<bf16>(DType::kBf16, l.out * l.in, -0.05f, 0.05f));
      SLUICE_ASSIGN_OR_RETURN(bf16 * y, run.Output<bf16>(DType::kBf16, m * l.out, NAN));
      run.AddLaunch([ctx, x, w, y, m, l](cudaStream_t s) {
        return kc::LinearForward<bf16>(*ctx, x, w, nullptr, y, m, l.in, l.out, s);
      });
    }
    return OkStatus();
  };
  return c;
}

BenchCase Backward(const LlamaShape& model, const LinearShape& l) {
  const int64_t m = model.tokens();
  BenchCase c;
  c.op = fmt::format("linear.{}.bwd", l.name);
  c.model = model.name;
  c.shape = fmt::format("M={} K={} N={}", m, l.in, l.out);
  c.dtype = "bf16, dW fp32";
  c.work = Work::kFlops;
  c.amount = 4.0 * m * l.in * l.out;
  c.formula = "4*M*N*K (dX = dY*W and dW += dY^T*X)";
  c.target = kGemmTarget;
  c.footprint_bytes = 2.0 * (2 * m * l.in + l.out * l.in + m * l.out) + 4.0 * l.out * l.in;
  c.build = [m, l](CaseRun& run, int instances) -> Status {
    SLUICE_ASSIGN_OR_RETURN(std::shared_ptr<kc::GemmContext> ctx, MakeGemmContext());
    run.Keep(ctx);
    for (int i = 0; i < instances; ++i) {
      SLUICE_ASSIGN_OR_RETURN(bf16 * x, run.Input<bf16>(DType::kBf16, m * l.in, -1.0f, 1.0f));
      SLUICE_ASSIGN_OR_RETURN(bf16 * w, run.Input<bf16>(DType::kBf16, l.out * l.in, -0.05f, 0.05f));
      SLUICE_ASSIGN_OR_RETURN(bf16 * dy, run.Input<bf16>(DType::kBf16, m * l.out, -1.0f, 1.0f));
      SLUICE_ASSIGN_OR_RETURN(bf16 * dx, run.Output<bf16>(DType::kBf16, m * l.in, NAN));
      // Accumulated into (+=), so poisoned with 0, not NaN.
      SLUICE_ASSIGN_OR_RETURN(float* dw, run.Output<float>(DType::kF32, l.out * l.in, 0.0f));
      run.AddLaunch([ctx, x, w, dy, dx, dw, m, l](cudaStream_t s) {
        return kc::LinearBackward<bf16>(*ctx, x, w, dy, dx, dw, nullptr, m, l.in, l.out, s);
      });
    }
    return OkStatus();
  };
  return c;
}

}  // namespace

std::vector<BenchCase> LinearCases(const LlamaShape& model) {
  const int64_t q_width = model.heads * model.head_dim;
  const int64_t kv_width = model.kv_heads * model.head_dim;
  // qkv as one fused product; gate_up is one of the two [intermediate, hidden] projections
  // (gate_proj and up_proj have the same shape), as the engine's MLP runs them.
  const LinearShape linears[] = {
      {"qkv", model.hidden, q_width + 2 * kv_width}, {"o", q_width, model.hidden},
      {"gate_up", model.hidden, model.intermediate}, {"down", model.intermediate, model.hidden},
      {"lm_head", model.hidden, model.vocab},
  };
  std::vector<BenchCase> cases;
  for (const LinearShape& l : linears) {
    cases.push_back(Forward(model, l));
    cases.push_back(Backward(model, l));
  }
  return cases;
}

BenchCase SquareGemmCase(int64_t n) {
  BenchCase c;
  c.op = "gemm.square";
  c.model = kNoModel;
  c.shape = fmt::format("M=N=K={}", n);
  c.dtype = "bf16";
  c.work = Work::kFlops;
  c.amount = 2.0 * n * n * n;
  c.formula = "2*M*N*K";
  c.target = kGemmTarget;
  c.footprint_bytes = 3.0 * 2 * n * n;
  c.build = [n](CaseRun& run, int instances) -> Status {
    SLUICE_ASSIGN_OR_RETURN(std::shared_ptr<kc::GemmContext> ctx, MakeGemmContext());
    run.Keep(ctx);
    for (int i = 0; i < instances; ++i) {
      SLUICE_ASSIGN_OR_RETURN(void* a, run.Input(DType::kBf16, n * n, -1.0f, 1.0f));
      SLUICE_ASSIGN_OR_RETURN(void* b, run.Input(DType::kBf16, n * n, -1.0f, 1.0f));
      SLUICE_ASSIGN_OR_RETURN(void* d, run.Output(DType::kBf16, n * n, NAN));
      kc::GemmParams p;
      p.m = p.n = p.k = n;
      p.a = a;
      p.lda = n;
      p.b = b;
      p.ldb = n;
      p.c = d;
      p.ldc = n;
      run.AddLaunch([ctx, p](cudaStream_t s) { return kc::Gemm(*ctx, p, s); });
    }
    return OkStatus();
  };
  return c;
}

}  // namespace sluice::bench::gpu
