// The CUDA RoPE kernels (kernels/cuda/rope.h) against the reference (kernels/ref/ops_rope.h) on
// the same inputs, rounded to bf16 where T is bf16.
//
// Tolerances, on the ExpectClose criterion |got - want| <= tol * (|want| + max |want|):
//   against the fp64 reference: fp32 1e-5; bf16 5e-3 (one rounding to bf16 is 2^-9 = 1.95e-3
//     relative, the fp32 cos / sin tables add 6e-8).
//   fp32 against the fp32 reference, which builds its table exactly as kernels/cpu does (fp64
//     angle, cos and sin rounded once to fp32): 1e-6, "agrees with the CPU backend to an ulp or
//     so" (only the fp32 products and an FMA contraction may differ).
#include "kernels/cuda/rope.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>  // cudaMalloc(T**), which DeviceArray calls
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cuda/launch_status.h"
#include "kernels/ref/ops_rope.h"
#include "tests/kernels_cuda/cuda_test_util.h"

namespace sluice::kernels::cuda {
namespace {

using testing::BitwiseEqual;
using testing::CastAfter;
using testing::DeviceArray;
using testing::ExpectClose;
using testing::Rng;
using testing::RoundTripToDouble;
using testing::TestStream;
using testing::ToFloat;
using testing::TypeName;

constexpr double kFp32Tol = 1e-5;
constexpr double kBf16Tol = 5e-3;
constexpr double kCpuAgreementTol = 1e-6;

struct RopeShape {
  int64_t batch, seq, heads, head_dim;
  float theta;
};

// Odd halves (element-wise path), multiples of the 4 / 8-element packs (vector path), long
// sequences (angles up to 3e4 rad), and Llama's theta values.
constexpr RopeShape kShapes[] = {
    {1, 1, 1, 2, 10000.0f},      {2, 7, 3, 6, 10000.0f},     {3, 5, 1, 10, 10000.0f},
    {2, 33, 4, 64, 10000.0f},    {1, 17, 5, 80, 500000.0f},  {1, 300, 2, 128, 500000.0f},
    {2, 4096, 1, 128, 10000.0f}, {1, 32768, 1, 8, 10000.0f}, {1, 3, 2, 256, 1000000.0f}};

template <typename T>
double OutTol() {
  return std::is_same_v<T, float> ? kFp32Tol : kBf16Tol;
}
std::string Describe(const RopeShape& s) {
  return " [" + std::to_string(s.batch) + ", " + std::to_string(s.seq) + ", " +
         std::to_string(s.heads) + ", " + std::to_string(s.head_dim) +
         "] theta=" + std::to_string(s.theta);
}
int64_t Numel(const RopeShape& s) { return s.batch * s.seq * s.heads * s.head_dim; }

// Runs the forward (or backward) on x. offset 1 puts the arrays off 16-byte alignment;
// in_place writes over x.
template <typename T>
std::vector<T> RunRope(const RopeShape& s, const std::vector<float>& x, bool backward, int offset,
                       bool in_place) {
  DeviceArray<T> in(CastAfter<T>(x, offset));
  DeviceArray<T> out(in.size());
  out.Fill(0xFF);                                   // NaN
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the upload and fill ran on the legacy stream
  TestStream stream;
  const T* src = in.data() + offset;
  T* dst = in_place ? in.data() + offset : out.data() + offset;
  const LaunchStatus status =
      backward
          ? RopeBackward<T>(src, dst, s.batch, s.seq, s.heads, s.head_dim, s.theta, stream.get())
          : RopeForward<T>(src, dst, s.batch, s.seq, s.heads, s.head_dim, s.theta, stream.get());
  EXPECT_TRUE(status.ok()) << status.ToString();
  return (in_place ? in : out).DownloadFrom(offset);
}

template <typename T>
void MatchesReference() {
  uint64_t seed = 20;
  for (const RopeShape& s : kShapes) {
    for (bool backward : {false, true}) {
      const std::string what =
          TypeName<T>() + (backward ? " RopeBackward" : " RopeForward") + Describe(s);
      Rng rng(++seed);
      const std::vector<float> x = rng.Uniform(Numel(s), -2.0, 2.0);
      const std::vector<double> xd = RoundTripToDouble<T>(x);
      std::vector<double> want(xd.size());
      if (backward) {
        ref::RopeBackward<double>(xd.data(), want.data(), s.batch, s.seq, s.heads, s.head_dim,
                                  s.theta);
      } else {
        ref::RopeForward<double>(xd.data(), want.data(), s.batch, s.seq, s.heads, s.head_dim,
                                 s.theta);
      }
      const std::vector<T> got = RunRope<T>(s, x, backward, 0, false);
      ExpectClose(ToFloat(got), want, OutTol<T>(), what);
      if constexpr (std::is_same_v<T, float>) {
        std::vector<float> cpu(x.size());
        if (backward) {
          ref::RopeBackward<float>(x.data(), cpu.data(), s.batch, s.seq, s.heads, s.head_dim,
                                   s.theta);
        } else {
          ref::RopeForward<float>(x.data(), cpu.data(), s.batch, s.seq, s.heads, s.head_dim,
                                  s.theta);
        }
        ExpectClose(got, cpu, kCpuAgreementTol, what + " vs the fp32 table");
      }
    }
  }
}

TEST(CudaRope, MatchesReferenceFp32) {
  SLUICE_SKIP_WITHOUT_GPU();
  MatchesReference<float>();
}
TEST(CudaRope, MatchesReferenceBf16) {
  SLUICE_SKIP_WITHOUT_GPU();
  MatchesReference<__nv_bfloat16>();
}

// The backward is the inverse rotation: backward(forward(x)) = x up to fp32 rounding.
TEST(CudaRope, BackwardUndoesForward) {
  SLUICE_SKIP_WITHOUT_GPU();
  const RopeShape s{2, 300, 3, 64, 10000.0f};
  Rng rng(5);
  const std::vector<float> x = rng.Uniform(Numel(s), -2.0, 2.0);
  const std::vector<float> y = RunRope<float>(s, x, false, 0, false);
  const std::vector<float> back = RunRope<float>(s, y, true, 0, false);
  ExpectClose(back, std::vector<double>(x.begin(), x.end()), kFp32Tol, "backward(forward(x))");
}

// Run to run, aligned or not, in place or not: the same bits.
template <typename T>
void Deterministic() {
  uint64_t seed = 40;
  for (const RopeShape& s : {RopeShape{2, 33, 4, 64, 10000.0f}, RopeShape{2, 7, 3, 6, 10000.0f},
                             RopeShape{1, 300, 2, 128, 500000.0f}}) {
    for (bool backward : {false, true}) {
      const std::string what =
          TypeName<T>() + (backward ? " RopeBackward" : " RopeForward") + Describe(s);
      Rng rng(++seed);
      const std::vector<float> x = rng.Uniform(Numel(s), -2.0, 2.0);
      const std::vector<T> first = RunRope<T>(s, x, backward, 0, false);
      EXPECT_TRUE(BitwiseEqual(first, RunRope<T>(s, x, backward, 0, false))) << what << " rerun";
      EXPECT_TRUE(BitwiseEqual(first, RunRope<T>(s, x, backward, 1, false)))
          << what << " misaligned";
      EXPECT_TRUE(BitwiseEqual(first, RunRope<T>(s, x, backward, 0, true))) << what << " in place";
    }
  }
}

TEST(CudaRope, DeterministicFp32) {
  SLUICE_SKIP_WITHOUT_GPU();
  Deterministic<float>();
}
TEST(CudaRope, DeterministicBf16) {
  SLUICE_SKIP_WITHOUT_GPU();
  Deterministic<__nv_bfloat16>();
}

TEST(CudaRope, RejectsBadArguments) {
  SLUICE_SKIP_WITHOUT_GPU();
  using Code = LaunchStatus::Code;
  TestStream stream;
  const cudaStream_t s = stream.get();
  DeviceArray<float> x(2 * 3 * 4 * 8);
  EXPECT_EQ(RopeForward<float>(nullptr, x.data(), 2, 3, 4, 8, 10000.0f, s).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(RopeBackward<float>(x.data(), nullptr, 2, 3, 4, 8, 10000.0f, s).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(RopeForward<float>(x.data(), x.data(), 2, 3, 8, 3, 10000.0f, s).code(),
            Code::kInvalidArgument);  // odd head_dim
  EXPECT_EQ(RopeForward<float>(x.data(), x.data(), 1, 1, 1, 8194, 10000.0f, s).code(),
            Code::kInvalidArgument);  // head_dim over 8192
  EXPECT_EQ(RopeForward<float>(x.data(), x.data(), -1, 3, 4, 8, 10000.0f, s).code(),
            Code::kInvalidArgument);
  // An empty shape is a no-op, null pointers included.
  EXPECT_TRUE(RopeForward<__nv_bfloat16>(nullptr, nullptr, 0, 3, 4, 8, 10000.0f, s).ok());
  EXPECT_TRUE(RopeBackward<__nv_bfloat16>(nullptr, nullptr, 2, 0, 4, 8, 10000.0f, s).ok());
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
}

}  // namespace
}  // namespace sluice::kernels::cuda
