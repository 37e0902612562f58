// The cases of `sluice bench kernels`, one function per op family (cases_<family>.cpp), and the
// model shapes they are sized by. Each case counts its work (FLOPs or bytes) by the formula in
// its `formula` field; docs/benchmarks.md lists them all.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "benchmarks/lib/gpu/bench_case.h"

namespace sluice::bench::gpu {

// A Llama decoder's dimensions, and the micro-batch every case of that model runs on.
struct LlamaShape {
  std::string name;  // "1b", "7b"
  int64_t hidden = 0;
  int64_t intermediate = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t vocab = 0;
  float rope_theta = 10000.0f;
  int64_t batch = 2;
  int64_t seq = 2048;

  int64_t tokens() const { return batch * seq; }
};

// Llama-3.2-1B's dimensions and Llama-2-7B's, at batch 2 x seq 2048 (4096 tokens).
std::vector<LlamaShape> BenchModels();

// The model column of the cases that belong to no model (the rooflines, the square GEMM).
inline const std::string kNoModel = "-";

// Elements of the flat-buffer cases (Adam, conversions, squared sum...): 2^28.
inline constexpr int64_t kFlatElements = int64_t{1} << 28;

// Target fractions of the same-run rooflines (issue 18).
inline constexpr double kGemmTarget = 0.75;       // of the cuBLAS 8192^3 bf16 GEMM
inline constexpr double kAttentionTarget = 0.45;  // of the same GEMM peak, forward + backward
inline constexpr double kMemoryTarget = 0.70;     // of the device-to-device copy bandwidth
// The attention target's scope, in the issue's words: "attention forward+backward at seq 2048,
// head dim 128 >= 45% of the cuBLAS peak". The 1b shapes (head dim 64) are measured and printed
// without a target.
inline constexpr int64_t kAttentionTargetSeq = 2048;
inline constexpr int64_t kAttentionTargetHeadDim = 128;

// "2^28" for a power of two, else the decimal count.
std::string CountLabel(int64_t n);

// The rooflines: cublasGemmEx bf16 n^3 with fp32 compute (FLOPs), and a device-to-device
// cudaMemcpyAsync of `bytes` (counted as bytes read + bytes written, 2 * bytes). The copy also
// gives each memory-bound op its copy@size figure, at half the bytes the op moves. Defined in
// rooflines.cpp.
BenchCase CublasGemmRoofline(int64_t n);
BenchCase CopyRoofline(size_t bytes);

std::vector<BenchCase> LinearCases(const LlamaShape& model);
// The project's own Gemm (kernels/cuda/gemm.h, cuBLASLt) at the roofline's n^3 bf16 shape.
BenchCase SquareGemmCase(int64_t n);
std::vector<BenchCase> AttentionCases(const LlamaShape& model);
std::vector<BenchCase> NormCases(const LlamaShape& model);
std::vector<BenchCase> ActivationCases(const LlamaShape& model);  // GELU, SwiGLU, add, RoPE
std::vector<BenchCase> EmbeddingLossCases(const LlamaShape& model);
std::vector<BenchCase> FlatCases();

}  // namespace sluice::bench::gpu
