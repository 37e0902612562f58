// The CUDA elementwise kernels (kernels/cuda/activation.h: GELU, SwiGLU, Add, Accumulate) against
// the fp64 reference (kernels/ref/ops_activation.h, ops_elementwise.h) on the same inputs,
// rounded to bf16 where T is bf16.
//
// Tolerances, on the ExpectClose criterion |got - want| <= tol * (|want| + max |want|):
//   fp32: 1e-5. Each output is a few fp32 operations plus tanhf / expf (2 ulp): ~1e-6 relative.
//   bf16: 5e-3. The fp32 result rounded once to bf16 is within 2^-9 = 1.95e-3 relative.
#include "kernels/cuda/activation.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>  // cudaMalloc(T**), which DeviceArray calls
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cuda/launch_status.h"
#include "kernels/ref/ops_activation.h"
#include "kernels/ref/ops_elementwise.h"
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
// Tails of every length modulo the 4- and 8-element packs, and one over a grid-stride round.
constexpr int64_t kSizes[] = {1, 3, 33, 1000, 4097, 8192 * 3 + 5};

template <typename T>
double OutTol() {
  return std::is_same_v<T, float> ? kFp32Tol : kBf16Tol;
}
template <typename T>
using DevicePtrs = std::vector<T*>;

// One op: its inputs' ranges, output count, the launch and the fp64 reference.
template <typename T>
struct Op {
  std::string name;
  std::vector<std::pair<double, double>> ranges;  // one per input
  int outputs = 1;
  std::function<LaunchStatus(const DevicePtrs<T>& in, const DevicePtrs<T>& out, int64_t n,
                             cudaStream_t stream)>
      launch;
  std::function<void(const std::vector<const double*>& in, const std::vector<double*>& out,
                     int64_t n)>
      reference;
};

template <typename T>
std::vector<Op<T>> AllOps() {
  std::vector<Op<T>> ops;
  ops.push_back({"GeluForward",
                 {{-6.0, 6.0}},
                 1,
                 [](const DevicePtrs<T>& in, const DevicePtrs<T>& out, int64_t n, cudaStream_t s) {
                   return GeluForward<T>(in[0], out[0], n, s);
                 },
                 [](const std::vector<const double*>& in, const std::vector<double*>& out,
                    int64_t n) { ref::GeluForward<double>(in[0], out[0], n); }});
  ops.push_back({"GeluBackward",
                 {{-6.0, 6.0}, {-1.0, 1.0}},
                 1,
                 [](const DevicePtrs<T>& in, const DevicePtrs<T>& out, int64_t n, cudaStream_t s) {
                   return GeluBackward<T>(in[0], in[1], out[0], n, s);
                 },
                 [](const std::vector<const double*>& in, const std::vector<double*>& out,
                    int64_t n) { ref::GeluBackward<double>(in[0], in[1], out[0], n); }});
  ops.push_back({"SwiGluForward",
                 {{-8.0, 8.0}, {-2.0, 2.0}},
                 1,
                 [](const DevicePtrs<T>& in, const DevicePtrs<T>& out, int64_t n, cudaStream_t s) {
                   return SwiGluForward<T>(in[0], in[1], out[0], n, s);
                 },
                 [](const std::vector<const double*>& in, const std::vector<double*>& out,
                    int64_t n) { ref::SwiGluForward<double>(in[0], in[1], out[0], n); }});
  ops.push_back(
      {"SwiGluBackward",
       {{-8.0, 8.0}, {-2.0, 2.0}, {-1.0, 1.0}},
       2,
       [](const DevicePtrs<T>& in, const DevicePtrs<T>& out, int64_t n, cudaStream_t s) {
         return SwiGluBackward<T>(in[0], in[1], in[2], out[0], out[1], n, s);
       },
       [](const std::vector<const double*>& in, const std::vector<double*>& out, int64_t n) {
         ref::SwiGluBackward<double>(in[0], in[1], in[2], out[0], out[1], n);
       }});
  ops.push_back({"Add",
                 {{-3.0, 3.0}, {-3.0, 3.0}},
                 1,
                 [](const DevicePtrs<T>& in, const DevicePtrs<T>& out, int64_t n, cudaStream_t s) {
                   return Add<T>(in[0], in[1], out[0], n, s);
                 },
                 [](const std::vector<const double*>& in, const std::vector<double*>& out,
                    int64_t n) { ref::Add<double>(in[0], in[1], out[0], n); }});
  // Accumulate: input 1 is y's starting value, copied into the output before the launch.
  ops.push_back(
      {"Accumulate",
       {{-3.0, 3.0}, {-3.0, 3.0}},
       1,
       [](const DevicePtrs<T>& in, const DevicePtrs<T>& out, int64_t n, cudaStream_t s) {
         if (out[0] != in[1]) {
           const cudaError_t rc =
               cudaMemcpyAsync(out[0], in[1], n * sizeof(T), cudaMemcpyDeviceToDevice, s);
           if (rc != cudaSuccess) return LaunchStatus::InvalidArgument("copy failed");
         }
         return Accumulate<T>(in[0], out[0], n, s);
       },
       [](const std::vector<const double*>& in, const std::vector<double*>& out, int64_t n) {
         std::copy(in[1], in[1] + n, out[0]);
         ref::Accumulate<double>(in[0], out[0], n);
       }});
  return ops;
}

template <typename T>
std::vector<std::vector<float>> MakeInputs(const Op<T>& op, int64_t n, double scale,
                                           uint64_t seed) {
  Rng rng(seed);
  std::vector<std::vector<float>> inputs;
  for (const auto& [lo, hi] : op.ranges) inputs.push_back(rng.Uniform(n, lo * scale, hi * scale));
  return inputs;
}

// Runs op on the device. offset 1 puts every array one element past 16-byte alignment (the
// element-wise path); alias >= 0 writes output 0 over input `alias`.
template <typename T>
std::vector<std::vector<T>> RunOp(const Op<T>& op, const std::vector<std::vector<float>>& inputs,
                                  int64_t n, int offset, int alias) {
  std::vector<std::unique_ptr<DeviceArray<T>>> in_arrays;
  std::vector<std::unique_ptr<DeviceArray<T>>> out_arrays;
  DevicePtrs<T> in;
  DevicePtrs<T> out;
  for (const std::vector<float>& values : inputs) {
    in_arrays.push_back(std::make_unique<DeviceArray<T>>(CastAfter<T>(values, offset)));
    in.push_back(in_arrays.back()->data() + offset);
  }
  for (int j = 0; j < op.outputs; ++j) {
    out_arrays.push_back(std::make_unique<DeviceArray<T>>(n + offset));
    out_arrays.back()->Fill(0xFF);  // NaN
    out.push_back(out_arrays.back()->data() + offset);
  }
  if (alias >= 0) out[0] = in[alias];
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the uploads ran on the legacy stream
  TestStream stream;
  const LaunchStatus status = op.launch(in, out, n, stream.get());
  EXPECT_TRUE(status.ok()) << op.name << ": " << status.ToString();
  std::vector<std::vector<T>> results;
  for (int j = 0; j < op.outputs; ++j) {
    const DeviceArray<T>& array = j == 0 && alias >= 0 ? *in_arrays[alias] : *out_arrays[j];
    results.push_back(array.DownloadFrom(offset));
  }
  return results;
}

template <typename T>
void CheckOp(const Op<T>& op, int64_t n, double scale, uint64_t seed) {
  const std::string what = TypeName<T>() + " " + op.name + " n=" + std::to_string(n) +
                           (scale != 1.0 ? " scale=" + std::to_string(scale) : "");
  const std::vector<std::vector<float>> inputs = MakeInputs(op, n, scale, seed);
  std::vector<std::vector<double>> ref_in;
  std::vector<const double*> ref_in_ptrs;
  for (const auto& values : inputs) ref_in.push_back(RoundTripToDouble<T>(values));
  for (const auto& values : ref_in) ref_in_ptrs.push_back(values.data());
  std::vector<std::vector<double>> ref_out(op.outputs, std::vector<double>(n));
  std::vector<double*> ref_out_ptrs;
  for (auto& values : ref_out) ref_out_ptrs.push_back(values.data());
  op.reference(ref_in_ptrs, ref_out_ptrs, n);

  const std::vector<std::vector<T>> got = RunOp(op, inputs, n, 0, -1);
  for (int j = 0; j < op.outputs; ++j) {
    ExpectClose(ToFloat(got[j]), ref_out[j], OutTol<T>(), what + " output " + std::to_string(j));
  }
}

template <typename T>
void MatchesReference() {
  uint64_t seed = 10;
  for (const Op<T>& op : AllOps<T>()) {
    for (int64_t n : kSizes) CheckOp(op, n, 1.0, ++seed);
    // Saturation: tanh at +-1, sigmoid at 0 / 1 and exp(-g) overflowing to inf for g < -88.
    CheckOp(op, 1001, 16.0, ++seed);
  }
}

TEST(CudaActivation, MatchesReferenceFp32) {
  SLUICE_SKIP_WITHOUT_GPU();
  MatchesReference<float>();
}
TEST(CudaActivation, MatchesReferenceBf16) {
  SLUICE_SKIP_WITHOUT_GPU();
  MatchesReference<__nv_bfloat16>();
}

// Run to run, aligned or not, and with output 0 written over each input in turn: the same bits.
template <typename T>
void Deterministic() {
  uint64_t seed = 70;
  for (const Op<T>& op : AllOps<T>()) {
    const int64_t n = 8192 * 3 + 5;
    const std::vector<std::vector<float>> inputs = MakeInputs(op, n, 1.0, ++seed);
    const std::vector<std::vector<T>> first = RunOp(op, inputs, n, 0, -1);
    const std::vector<std::vector<T>> again = RunOp(op, inputs, n, 0, -1);
    const std::vector<std::vector<T>> misaligned = RunOp(op, inputs, n, 1, -1);
    for (int j = 0; j < op.outputs; ++j) {
      EXPECT_TRUE(BitwiseEqual(first[j], again[j])) << op.name << " rerun, output " << j;
      EXPECT_TRUE(BitwiseEqual(first[j], misaligned[j])) << op.name << " misaligned, output " << j;
    }
    for (int alias = 0; alias < static_cast<int>(op.ranges.size()); ++alias) {
      if (op.name == "Accumulate" && alias == 0) continue;  // y += y is another op
      const std::vector<std::vector<T>> in_place = RunOp(op, inputs, n, 0, alias);
      EXPECT_TRUE(BitwiseEqual(first[0], in_place[0])) << op.name << " output over input " << alias;
    }
  }
}

TEST(CudaActivation, DeterministicFp32) {
  SLUICE_SKIP_WITHOUT_GPU();
  Deterministic<float>();
}
TEST(CudaActivation, DeterministicBf16) {
  SLUICE_SKIP_WITHOUT_GPU();
  Deterministic<__nv_bfloat16>();
}

TEST(CudaActivation, RejectsBadArguments) {
  SLUICE_SKIP_WITHOUT_GPU();
  using Code = LaunchStatus::Code;
  TestStream stream;
  DeviceArray<float> a(64), b(64), c(64);
  const cudaStream_t s = stream.get();
  EXPECT_EQ(GeluForward<float>(nullptr, a.data(), 64, s).code(), Code::kInvalidArgument);
  EXPECT_EQ(GeluBackward<float>(a.data(), b.data(), nullptr, 64, s).code(), Code::kInvalidArgument);
  EXPECT_EQ(SwiGluForward<float>(a.data(), nullptr, c.data(), 64, s).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(SwiGluBackward<float>(a.data(), b.data(), c.data(), a.data(), nullptr, 64, s).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(Add<float>(a.data(), b.data(), nullptr, 64, s).code(), Code::kInvalidArgument);
  EXPECT_EQ(Accumulate<float>(nullptr, a.data(), 64, s).code(), Code::kInvalidArgument);
  EXPECT_EQ(Add<float>(a.data(), b.data(), c.data(), -1, s).code(), Code::kInvalidArgument);
  // n == 0 is a no-op, null pointers included.
  EXPECT_TRUE(Add<__nv_bfloat16>(nullptr, nullptr, nullptr, 0, s).ok());
  EXPECT_TRUE(
      SwiGluBackward<__nv_bfloat16>(nullptr, nullptr, nullptr, nullptr, nullptr, 0, s).ok());
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
}

}  // namespace
}  // namespace sluice::kernels::cuda
