// The elementwise ops of a block (kernels/cuda/activation.h: GELU, SwiGLU, the residual add and
// gradient accumulation) and RoPE on q and k (kernels/cuda/rope.h), in GB/s of the bytes they
// must move against the same-run copy bandwidth. GELU is GPT-2's MLP activation; it runs here
// over the Llama MLP's [tokens, intermediate] activations for comparison.
#include <fmt/format.h>

#include <cmath>

#include "benchmarks/lib/gpu/cases.h"
#include "kernels/cuda/activation.h"
#include "kernels/cuda/rope.h"

namespace sluice::bench::gpu {
namespace {

namespace kc = kernels::cuda;
using bf16 = __nv_bfloat16;

// A bf16 elementwise op over n values: `reads` arrays in, `writes` arrays out.
BenchCase Elementwise(const LlamaShape& model, const std::string& op, int64_t rows, int64_t cols,
                      int reads, int writes, const std::string& formula) {
  BenchCase c;
  c.op = op;
  c.model = model.name;
  c.shape = fmt::format("{}x{}", rows, cols);
  c.dtype = "bf16";
  c.work = Work::kBytes;
  c.amount = 2.0 * (reads + writes) * rows * cols;
  c.formula = formula;
  c.target = kMemoryTarget;
  c.footprint_bytes = c.amount;
  return c;
}

std::vector<BenchCase> MlpCases(const LlamaShape& model) {
  const int64_t m = model.tokens(), f = model.intermediate, d = model.hidden;
  const int64_t n = m * f;
  std::vector<BenchCase> cases;

  BenchCase gelu_fwd = Elementwise(model, "gelu.fwd", m, f, 1, 1, "2n x + 2n y");
  gelu_fwd.build = [n](CaseRun& run, int instances) -> Status {
    for (int i = 0; i < instances; ++i) {
      SLUICE_ASSIGN_OR_RETURN(bf16 * x, run.Input<bf16>(DType::kBf16, n, -4.0f, 4.0f));
      SLUICE_ASSIGN_OR_RETURN(bf16 * y, run.Output<bf16>(DType::kBf16, n, NAN));
      run.AddLaunch([=](cudaStream_t s) { return kc::GeluForward<bf16>(x, y, n, s); });
    }
    return OkStatus();
  };
  cases.push_back(std::move(gelu_fwd));

  BenchCase gelu_bwd = Elementwise(model, "gelu.bwd", m, f, 2, 1, "2n x + 2n dy + 2n dx");
  gelu_bwd.build = [n](CaseRun& run, int instances) -> Status {
    for (int i = 0; i < instances; ++i) {
      SLUICE_ASSIGN_OR_RETURN(bf16 * x, run.Input<bf16>(DType::kBf16, n, -4.0f, 4.0f));
      SLUICE_ASSIGN_OR_RETURN(bf16 * dy, run.Input<bf16>(DType::kBf16, n, -1.0f, 1.0f));
      SLUICE_ASSIGN_OR_RETURN(bf16 * dx, run.Output<bf16>(DType::kBf16, n, NAN));
      run.AddLaunch([=](cudaStream_t s) { return kc::GeluBackward<bf16>(x, dy, dx, n, s); });
    }
    return OkStatus();
  };
  cases.push_back(std::move(gelu_bwd));

  BenchCase swiglu_fwd = Elementwise(model, "swiglu.fwd", m, f, 2, 1, "2n gate + 2n up + 2n y");
  swiglu_fwd.build = [n](CaseRun& run, int instances) -> Status {
    for (int i = 0; i < instances; ++i) {
      SLUICE_ASSIGN_OR_RETURN(bf16 * gate, run.Input<bf16>(DType::kBf16, n, -4.0f, 4.0f));
      SLUICE_ASSIGN_OR_RETURN(bf16 * up, run.Input<bf16>(DType::kBf16, n, -2.0f, 2.0f));
      SLUICE_ASSIGN_OR_RETURN(bf16 * y, run.Output<bf16>(DType::kBf16, n, NAN));
      run.AddLaunch([=](cudaStream_t s) { return kc::SwiGluForward<bf16>(gate, up, y, n, s); });
    }
    return OkStatus();
  };
  cases.push_back(std::move(swiglu_fwd));

  BenchCase swiglu_bwd =
      Elementwise(model, "swiglu.bwd", m, f, 3, 2, "2n gate + 2n up + 2n dy + 2n dgate + 2n dup");
  swiglu_bwd.build = [n](CaseRun& run, int instances) -> Status {
    for (int i = 0; i < instances; ++i) {
      SLUICE_ASSIGN_OR_RETURN(bf16 * gate, run.Input<bf16>(DType::kBf16, n, -4.0f, 4.0f));
      SLUICE_ASSIGN_OR_RETURN(bf16 * up, run.Input<bf16>(DType::kBf16, n, -2.0f, 2.0f));
      SLUICE_ASSIGN_OR_RETURN(bf16 * dy, run.Input<bf16>(DType::kBf16, n, -1.0f, 1.0f));
      SLUICE_ASSIGN_OR_RETURN(bf16 * dgate, run.Output<bf16>(DType::kBf16, n, NAN));
      SLUICE_ASSIGN_OR_RETURN(bf16 * dup, run.Output<bf16>(DType::kBf16, n, NAN));
      run.AddLaunch(
          [=](cudaStream_t s) { return kc::SwiGluBackward<bf16>(gate, up, dy, dgate, dup, n, s); });
    }
    return OkStatus();
  };
  cases.push_back(std::move(swiglu_bwd));

  const int64_t nd = m * d;
  BenchCase add = Elementwise(model, "add", m, d, 2, 1, "2n a + 2n b + 2n y");
  add.build = [nd](CaseRun& run, int instances) -> Status {
    for (int i = 0; i < instances; ++i) {
      SLUICE_ASSIGN_OR_RETURN(bf16 * a, run.Input<bf16>(DType::kBf16, nd, -1.0f, 1.0f));
      SLUICE_ASSIGN_OR_RETURN(bf16 * b, run.Input<bf16>(DType::kBf16, nd, -1.0f, 1.0f));
      SLUICE_ASSIGN_OR_RETURN(bf16 * y, run.Output<bf16>(DType::kBf16, nd, NAN));
      run.AddLaunch([=](cudaStream_t s) { return kc::Add<bf16>(a, b, y, nd, s); });
    }
    return OkStatus();
  };
  cases.push_back(std::move(add));

  BenchCase accumulate =
      Elementwise(model, "accumulate", m, d, 2, 1, "2n x + 2n y read + 2n y written");
  accumulate.build = [nd](CaseRun& run, int instances) -> Status {
    for (int i = 0; i < instances; ++i) {
      SLUICE_ASSIGN_OR_RETURN(bf16 * x, run.Input<bf16>(DType::kBf16, nd, -1e-2f, 1e-2f));
      SLUICE_ASSIGN_OR_RETURN(bf16 * y, run.InOut<bf16>(DType::kBf16, nd, -1.0f, 1.0f));
      run.AddLaunch([=](cudaStream_t s) { return kc::Accumulate<bf16>(x, y, nd, s); });
    }
    return OkStatus();
  };
  cases.push_back(std::move(accumulate));
  return cases;
}

// RoPE over q ([b, s, heads, d]) or k ([b, s, kv_heads, d]), out of place.
BenchCase Rope(const LlamaShape& model, bool keys, bool backward) {
  const int64_t heads = keys ? model.kv_heads : model.heads;
  const int64_t n = model.batch * model.seq * heads * model.head_dim;
  BenchCase c;
  c.op = fmt::format("rope.{}.{}", keys ? "k" : "q", backward ? "bwd" : "fwd");
  c.model = model.name;
  c.shape = fmt::format("b={} s={} h={} d={}", model.batch, model.seq, heads, model.head_dim);
  c.dtype = "bf16";
  c.work = Work::kBytes;
  c.amount = 4.0 * n;
  c.formula = backward ? "2n dy + 2n dx (angles computed, not loaded)"
                       : "2n x + 2n y (angles computed, not loaded)";
  c.target = kMemoryTarget;
  c.footprint_bytes = c.amount;
  const LlamaShape m = model;
  c.build = [m, heads, n, backward](CaseRun& run, int instances) -> Status {
    for (int i = 0; i < instances; ++i) {
      SLUICE_ASSIGN_OR_RETURN(bf16 * x, run.Input<bf16>(DType::kBf16, n, -1.0f, 1.0f));
      SLUICE_ASSIGN_OR_RETURN(bf16 * y, run.Output<bf16>(DType::kBf16, n, NAN));
      const int64_t b = m.batch, s = m.seq, d = m.head_dim;
      const float theta = m.rope_theta;
      if (backward) {
        run.AddLaunch([=](cudaStream_t st) {
          return kc::RopeBackward<bf16>(x, y, b, s, heads, d, theta, st);
        });
      } else {
        run.AddLaunch([=](cudaStream_t st) {
          return kc::RopeForward<bf16>(x, y, b, s, heads, d, theta, st);
        });
      }
    }
    return OkStatus();
  };
  return c;
}

}  // namespace

std::vector<BenchCase> ActivationCases(const LlamaShape& model) {
  std::vector<BenchCase> cases = MlpCases(model);
  for (bool keys : {false, true}) {
    for (bool backward : {false, true}) cases.push_back(Rope(model, keys, backward));
  }
  return cases;
}

}  // namespace sluice::bench::gpu
