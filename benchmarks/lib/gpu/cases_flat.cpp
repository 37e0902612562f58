// The ops over flat fp32 / bf16 buffers that the ZeRO engine runs on its shards: Adam
// (kernels/cuda/adam.h) and conversion, accumulation, scaling, squared sum, inf/NaN check and
// segment copies (kernels/cuda/flat_ops.h), over 2^28 elements, in GB/s of the bytes they must
// move against the same-run copy bandwidth.
#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "benchmarks/lib/gpu/cases.h"
#include "kernels/cuda/adam.h"
#include "kernels/cuda/flat_ops.h"

namespace sluice::bench::gpu {
namespace {

namespace kc = kernels::cuda;
using bf16 = __nv_bfloat16;

constexpr int64_t kN = kFlatElements;
// Segments of the pack / unpack cases: 64 equal pieces, like the partitions of one bucket.
constexpr int kSegments = 64;

BenchCase Flat(const std::string& op, const std::string& dtype, double bytes_per_element,
               const std::string& formula) {
  BenchCase c;
  c.op = op;
  c.model = "flat";
  c.shape = fmt::format("n={}", CountLabel(kN));
  c.dtype = dtype;
  c.work = Work::kBytes;
  c.amount = bytes_per_element * static_cast<double>(kN);
  c.formula = formula;
  c.target = kMemoryTarget;
  c.footprint_bytes = c.amount;
  return c;
}

BenchCase Adam(bool bf16_grads) {
  BenchCase c = bf16_grads ? Flat("adam.bf16_grads", "fp32 state, bf16 grads+copy", 28,
                                  "(12 read + 12 written) p,m,v + 2 grad + 2 bf16 copy per param")
                           : Flat("adam.fp32_grads", "fp32 state+grads, bf16 copy", 30,
                                  "(12 read + 12 written) p,m,v + 4 grad + 2 bf16 copy per param");
  c.build = [bf16_grads](CaseRun& run, int instances) -> Status {
    for (int i = 0; i < instances; ++i) {
      kernels::AdamTensors t;
      SLUICE_ASSIGN_OR_RETURN(t.params, run.InOut<float>(DType::kF32, kN, -1.0f, 1.0f));
      SLUICE_ASSIGN_OR_RETURN(t.exp_avg, run.InOut<float>(DType::kF32, kN, -1e-3f, 1e-3f));
      SLUICE_ASSIGN_OR_RETURN(t.exp_avg_sq, run.InOut<float>(DType::kF32, kN, 0.0f, 1e-6f));
      SLUICE_ASSIGN_OR_RETURN(
          t.grads, run.Input(bf16_grads ? DType::kBf16 : DType::kF32, kN, -1e-2f, 1e-2f));
      t.grad_type = bf16_grads ? kernels::AdamGradType::kBF16 : kernels::AdamGradType::kF32;
      SLUICE_ASSIGN_OR_RETURN(t.param_copy, run.Output(DType::kBf16, kN, NAN));
      t.copy_type = kernels::AdamCopyType::kBF16;
      t.count = static_cast<size_t>(kN);
      const kernels::AdamHyperparams hyper{.lr = 1e-4f, .weight_decay = 0.01f, .step = 1};
      run.AddLaunch([t, hyper](cudaStream_t s) { return kc::AdamStep(t, hyper, 1.0f, s); });
    }
    return OkStatus();
  };
  return c;
}

BenchCase Convert(bool to_bf16) {
  BenchCase c = to_bf16 ? Flat("convert.fp32_to_bf16", "fp32->bf16", 6, "4n read + 2n written")
                        : Flat("convert.bf16_to_fp32", "bf16->fp32", 6, "2n read + 4n written");
  c.build = [to_bf16](CaseRun& run, int instances) -> Status {
    for (int i = 0; i < instances; ++i) {
      if (to_bf16) {
        SLUICE_ASSIGN_OR_RETURN(float* x, run.Input<float>(DType::kF32, kN, -1.0f, 1.0f));
        SLUICE_ASSIGN_OR_RETURN(bf16 * y, run.Output<bf16>(DType::kBf16, kN, NAN));
        run.AddLaunch([=](cudaStream_t s) { return kc::ConvertF32ToBf16(x, y, kN, s); });
      } else {
        SLUICE_ASSIGN_OR_RETURN(bf16 * x, run.Input<bf16>(DType::kBf16, kN, -1.0f, 1.0f));
        SLUICE_ASSIGN_OR_RETURN(float* y, run.Output<float>(DType::kF32, kN, NAN));
        run.AddLaunch([=](cudaStream_t s) { return kc::ConvertBf16ToF32(x, y, kN, s); });
      }
    }
    return OkStatus();
  };
  return c;
}

BenchCase AccumulateBf16() {
  BenchCase c = Flat("accumulate.bf16_to_fp32", "bf16 += into fp32", 10,
                     "2n x read + 4n y read + 4n y written");
  c.build = [](CaseRun& run, int instances) -> Status {
    for (int i = 0; i < instances; ++i) {
      SLUICE_ASSIGN_OR_RETURN(bf16 * x, run.Input<bf16>(DType::kBf16, kN, -1e-2f, 1e-2f));
      SLUICE_ASSIGN_OR_RETURN(float* y, run.InOut<float>(DType::kF32, kN, -1.0f, 1.0f));
      run.AddLaunch([=](cudaStream_t s) { return kc::AccumulateToF32<bf16>(x, y, kN, s); });
    }
    return OkStatus();
  };
  return c;
}

BenchCase Scale() {
  BenchCase c = Flat("scale.fp32", "fp32", 8, "4n read + 4n written");
  c.build = [](CaseRun& run, int instances) -> Status {
    for (int i = 0; i < instances; ++i) {
      SLUICE_ASSIGN_OR_RETURN(float* y, run.InOut<float>(DType::kF32, kN, -1.0f, 1.0f));
      // 1: repeated samples leave the values as they are.
      run.AddLaunch([=](cudaStream_t s) { return kc::Scale(y, 1.0f, kN, s); });
    }
    return OkStatus();
  };
  return c;
}

template <typename T>
BenchCase SquaredSum() {
  constexpr bool kBf16 = std::is_same_v<T, bf16>;
  BenchCase c = kBf16 ? Flat("squared_sum.bf16", "bf16 -> fp64", 2, "2n read")
                      : Flat("squared_sum.fp32", "fp32 -> fp64", 4, "4n read");
  c.build = [](CaseRun& run, int instances) -> Status {
    const size_t ws_bytes = kc::SquaredSumWorkspaceBytes(kN);
    SLUICE_ASSIGN_OR_RETURN(void* ws, run.Scratch(ws_bytes));
    for (int i = 0; i < instances; ++i) {
      SLUICE_ASSIGN_OR_RETURN(T * x,
                              run.Input<T>(kBf16 ? DType::kBf16 : DType::kF32, kN, -1.0f, 1.0f));
      SLUICE_ASSIGN_OR_RETURN(double* out, run.Output<double>(DType::kF64, 1, NAN));
      run.AddLaunch([=](cudaStream_t s) { return kc::SquaredSum<T>(x, kN, out, ws, ws_bytes, s); });
    }
    return OkStatus();
  };
  return c;
}

BenchCase FlagInfOrNan() {
  BenchCase c = Flat("flag_inf_nan.fp32", "fp32", 4, "4n read");
  c.build = [](CaseRun& run, int instances) -> Status {
    for (int i = 0; i < instances; ++i) {
      SLUICE_ASSIGN_OR_RETURN(float* x, run.Input<float>(DType::kF32, kN, -1.0f, 1.0f));
      // Finite inputs: a raised flag fails the check.
      SLUICE_ASSIGN_OR_RETURN(int32_t * flag, run.ErrorFlag());
      run.AddLaunch([=](cudaStream_t s) { return kc::FlagInfOrNan<float>(x, kN, flag, s); });
    }
    return OkStatus();
  };
  return c;
}

// kSegments contiguous pieces of n / kSegments elements, src and dst at the same offsets.
Result<kc::FlatSegment*> Segments(CaseRun& run) {
  std::vector<kc::FlatSegment> segments(kSegments);
  const int64_t piece = kN / kSegments;
  for (int i = 0; i < kSegments; ++i) {
    segments[i] = {.src_offset = i * piece, .dst_offset = i * piece, .count = piece};
  }
  SLUICE_ASSIGN_OR_RETURN(void* p,
                          run.Upload(segments.data(), segments.size() * sizeof(kc::FlatSegment)));
  return static_cast<kc::FlatSegment*>(p);
}

template <typename TSrc, typename TDst>
BenchCase CopySegments() {
  constexpr bool kSrcBf16 = std::is_same_v<TSrc, bf16>;
  constexpr bool kDstBf16 = std::is_same_v<TDst, bf16>;
  const double bytes = (kSrcBf16 ? 2 : 4) + (kDstBf16 ? 2 : 4);
  BenchCase c = Flat(
      fmt::format("copy_segments.{}_to_{}", kSrcBf16 ? "bf16" : "fp32", kDstBf16 ? "bf16" : "fp32"),
      fmt::format("{}->{}", kSrcBf16 ? "bf16" : "fp32", kDstBf16 ? "bf16" : "fp32"), bytes,
      fmt::format("{} segments; n read + n written, {} bytes/element", kSegments, bytes));
  c.build = [](CaseRun& run, int instances) -> Status {
    for (int i = 0; i < instances; ++i) {
      SLUICE_ASSIGN_OR_RETURN(kc::FlatSegment * segments, Segments(run));
      SLUICE_ASSIGN_OR_RETURN(
          TSrc * src, run.Input<TSrc>(kSrcBf16 ? DType::kBf16 : DType::kF32, kN, -1.0f, 1.0f));
      SLUICE_ASSIGN_OR_RETURN(TDst * dst,
                              run.Output<TDst>(kDstBf16 ? DType::kBf16 : DType::kF32, kN, NAN));
      run.AddLaunch([=](cudaStream_t s) {
        return kc::CopySegments<TSrc, TDst>(src, dst, segments, kSegments, kN / kSegments, s);
      });
    }
    return OkStatus();
  };
  return c;
}

BenchCase AccumulateSegments() {
  BenchCase c =
      Flat("accumulate_segments.fp32", "fp32", 12,
           fmt::format("{} segments; 4n src read + 4n dst read + 4n dst written", kSegments));
  c.build = [](CaseRun& run, int instances) -> Status {
    for (int i = 0; i < instances; ++i) {
      SLUICE_ASSIGN_OR_RETURN(kc::FlatSegment * segments, Segments(run));
      SLUICE_ASSIGN_OR_RETURN(float* src, run.Input<float>(DType::kF32, kN, -1e-2f, 1e-2f));
      SLUICE_ASSIGN_OR_RETURN(float* dst, run.InOut<float>(DType::kF32, kN, -1.0f, 1.0f));
      run.AddLaunch([=](cudaStream_t s) {
        return kc::AccumulateSegments(src, dst, segments, kSegments, kN / kSegments, s);
      });
    }
    return OkStatus();
  };
  return c;
}

}  // namespace

std::vector<BenchCase> FlatCases() {
  return {Adam(false),
          Adam(true),
          Convert(true),
          Convert(false),
          AccumulateBf16(),
          Scale(),
          SquaredSum<float>(),
          SquaredSum<bf16>(),
          FlagInfOrNan(),
          CopySegments<bf16, bf16>(),
          CopySegments<float, bf16>(),
          AccumulateSegments()};
}

}  // namespace sluice::bench::gpu
