// The CUDA linear layer and GEMM (kernels/cuda/gemm.h, cuBLASLt) against the fp64 reference
// (kernels/ref/ops_linear.h, ops_activation.h) run on the same inputs, rounded to bf16 where T is
// bf16.
//
// Tolerances (ExpectClose: |got - want| <= tol * (|want| + max |want|)):
//   outputs in fp32 (y, dx with T = float; dw, db always; Gemm with an f32 C): 1e-5. Every
//     product accumulates in fp32 (CUBLAS_COMPUTE_32F, no TF32), and bf16 x bf16 products are
//     exact in fp32, so the only error is fp32 summation: ~sqrt(k) * 6e-8 of the terms.
//   outputs in bf16 (y, pre, dx with T = bf16; Gemm with a bf16 C): 1e-2. One rounding to bf16
//     (2^-9 relative) of an fp32 result; the unfused bias path rounds twice.
//   y of the fused cuBLASLt GELU epilogue in fp32: 1e-3, since cuBLASLt does not document its
//     tanh's accuracy (a hardware tanh.approx is 2^-11 relative); the unfused kernel (tanhf)
//     keeps 1e-5. GeluEpilogueIsTanhForm checks separately that the form is tanh, not erf.
#include "kernels/cuda/gemm.h"

#include <cuda_bf16.h>
// Before cuda_test_util.h: DeviceArray's cudaMalloc(&data_, ...) on a T** needs the typed overload,
// which only cuda_runtime.h declares.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/ref/ops_activation.h"
#include "kernels/ref/ops_linear.h"
#include "tests/kernels_cuda/cuda_test_util.h"

namespace sluice::kernels::cuda {
namespace {

using testing::Cast;
using testing::DeviceArray;
using testing::ExpectClose;
using testing::Rng;
using testing::RoundTripToDouble;
using testing::TestStream;
using testing::ToFloat;

constexpr double kF32Tol = 1e-5;
constexpr double kBf16Tol = 1e-2;
constexpr double kFusedGeluF32Tol = 1e-3;

template <typename T>
constexpr double OutTol() {
  return std::is_same_v<T, float> ? kF32Tol : kBf16Tol;
}
template <typename T>
const char* TypeName() {
  return std::is_same_v<T, float> ? "f32" : "bf16";
}

struct Shape {
  int64_t rows;
  int64_t in;
  int64_t out;
};

std::string Describe(const char* what, const char* type, Shape s) {
  return std::string(what) + "<" + type + "> rows=" + std::to_string(s.rows) +
         " in=" + std::to_string(s.in) + " out=" + std::to_string(s.out);
}

uint64_t SeedOf(Shape s, uint64_t salt) {
  return salt * 1000003u + static_cast<uint64_t>(s.rows) * 7919u +
         static_cast<uint64_t>(s.in) * 104729u + static_cast<uint64_t>(s.out);
}

std::unique_ptr<GemmContext> MakeContext() {
  std::unique_ptr<GemmContext> ctx;
  const LaunchStatus status = GemmContext::Create(&ctx);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return ctx;
}

template <typename T>
bool SameBits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

template <typename T>
bool AllBytesAre(const std::vector<T>& values, uint8_t byte) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(values.data());
  for (size_t i = 0; i < values.size() * sizeof(T); ++i) {
    if (bytes[i] != byte) return false;
  }
  return true;
}

// Device copies of host data, placed `offset` elements into their allocation so that tests can
// hand cuBLASLt pointers that are not 256-byte aligned.
template <typename T>
class OffsetArray {
 public:
  OffsetArray(const std::vector<T>& host, size_t offset)
      : offset_(offset), size_(host.size()), storage_(host.size() + offset) {
    std::vector<T> padded(host.size() + offset);
    std::memset(static_cast<void*>(padded.data()), 0xFF, padded.size() * sizeof(T));
    for (size_t i = 0; i < host.size(); ++i) padded[offset + i] = host[i];
    storage_.Upload(padded);
  }
  T* data() { return size_ == 0 ? nullptr : storage_.data() + offset_; }
  std::vector<T> Download() const {
    const std::vector<T> all = storage_.Download();
    return std::vector<T>(all.begin() + static_cast<std::ptrdiff_t>(offset_), all.end());
  }

 private:
  size_t offset_;
  size_t size_;
  DeviceArray<T> storage_;
};

// y = x·wᵀ + b (or the GELU variant) on the device, against the reference.
template <typename T>
void CheckForward(GemmContext& ctx, Shape s, bool with_bias, uint64_t seed, size_t offset = 0,
                  double magnitude = 1.0) {
  SCOPED_TRACE(Describe("LinearForward", TypeName<T>(), s));
  Rng rng(seed);
  const std::vector<float> x = rng.Uniform(s.rows * s.in, -magnitude, magnitude);
  const std::vector<float> w = rng.Uniform(s.out * s.in);
  const std::vector<float> b = rng.Uniform(s.out, -magnitude, magnitude);
  OffsetArray<T> d_x(Cast<T>(x), offset);
  OffsetArray<T> d_w(Cast<T>(w), offset);
  OffsetArray<T> d_b(Cast<T>(b), offset);
  std::vector<T> poison(s.rows * s.out);
  std::memset(static_cast<void*>(poison.data()), 0xFF, poison.size() * sizeof(T));  // NaN
  OffsetArray<T> d_y(poison, offset);
  TestStream stream;
  SLUICE_EXPECT_LAUNCH_OK(LinearForward<T>(ctx, d_x.data(), d_w.data(),
                                           with_bias ? d_b.data() : nullptr, d_y.data(), s.rows,
                                           s.in, s.out, stream.get()));
  const std::vector<float> got = ToFloat(d_y.Download());

  const std::vector<double> xd = RoundTripToDouble<T>(x);
  const std::vector<double> wd = RoundTripToDouble<T>(w);
  const std::vector<double> bd = RoundTripToDouble<T>(b);
  std::vector<double> want(s.rows * s.out);
  ref::LinearForward<double>(xd.data(), wd.data(), with_bias ? bd.data() : nullptr, want.data(),
                             s.rows, s.in, s.out);
  ExpectClose(got, want, OutTol<T>(),
              Describe(with_bias ? "y (bias)" : "y (no bias)", TypeName<T>(), s));
}

// dx, dw, db on the device (each wanted or null), dw and db starting non-zero, against the
// reference; gradients passed as null must stay untouched.
template <typename T>
void CheckBackward(GemmContext& ctx, Shape s, bool want_dx, bool want_dw, bool want_db,
                   uint64_t seed, size_t offset = 0, double magnitude = 1.0) {
  SCOPED_TRACE(Describe("LinearBackward", TypeName<T>(), s) + (want_dx ? " dx" : "") +
               (want_dw ? " dw" : "") + (want_db ? " db" : ""));
  Rng rng(seed);
  const std::vector<float> x = rng.Uniform(s.rows * s.in, -magnitude, magnitude);
  const std::vector<float> w = rng.Uniform(s.out * s.in);
  const std::vector<float> dy = rng.Uniform(s.rows * s.out);
  const std::vector<float> dw0 = rng.Uniform(s.out * s.in);  // accumulators start non-zero
  const std::vector<float> db0 = rng.Uniform(s.out);
  OffsetArray<T> d_x(Cast<T>(x), offset);
  OffsetArray<T> d_w(Cast<T>(w), offset);
  OffsetArray<T> d_dy(Cast<T>(dy), offset);
  std::vector<T> poison(s.rows * s.in);
  std::memset(static_cast<void*>(poison.data()), 0xFF, poison.size() * sizeof(T));
  OffsetArray<T> d_dx(poison, offset);
  OffsetArray<float> d_dw(dw0, offset);
  OffsetArray<float> d_db(db0, offset);
  TestStream stream;
  SLUICE_EXPECT_LAUNCH_OK(LinearBackward<T>(
      ctx, want_dw ? d_x.data() : nullptr, want_dx ? d_w.data() : nullptr, d_dy.data(),
      want_dx ? d_dx.data() : nullptr, want_dw ? d_dw.data() : nullptr,
      want_db ? d_db.data() : nullptr, s.rows, s.in, s.out, stream.get()));

  const std::vector<double> xd = RoundTripToDouble<T>(x);
  const std::vector<double> wd = RoundTripToDouble<T>(w);
  const std::vector<double> dyd = RoundTripToDouble<T>(dy);
  std::vector<double> dx_want(s.rows * s.in);
  std::vector<double> dw_want(dw0.begin(), dw0.end());
  std::vector<double> db_want(db0.begin(), db0.end());
  ref::LinearBackward<double>(xd.data(), wd.data(), dyd.data(), dx_want.data(), dw_want.data(),
                              db_want.data(), s.rows, s.in, s.out);

  const std::vector<T> dx_got = d_dx.Download();
  const std::vector<float> dw_got = d_dw.Download();
  const std::vector<float> db_got = d_db.Download();
  if (want_dx) {
    ExpectClose(ToFloat(dx_got), dx_want, OutTol<T>(), Describe("dx", TypeName<T>(), s));
  } else {
    EXPECT_TRUE(AllBytesAre(dx_got, 0xFF)) << "dx was written although null was passed";
  }
  if (want_dw) {
    ExpectClose(dw_got, dw_want, kF32Tol, Describe("dw (accumulated)", TypeName<T>(), s));
  } else {
    EXPECT_TRUE(SameBits(dw_got, dw0)) << "dw changed although null was passed";
  }
  if (want_db) {
    ExpectClose(db_got, db_want, kF32Tol, Describe("db (accumulated)", TypeName<T>(), s));
  } else {
    EXPECT_TRUE(SameBits(db_got, db0)) << "db changed although null was passed";
  }
}

// pre = x·wᵀ + b and y = gelu_tanh(pre), against the reference.
template <typename T>
void CheckGeluForward(GemmContext& ctx, Shape s, bool with_bias, double y_tol, uint64_t seed) {
  SCOPED_TRACE(Describe("LinearGeluForward", TypeName<T>(), s));
  Rng rng(seed);
  const std::vector<float> x = rng.Uniform(s.rows * s.in);
  const std::vector<float> w = rng.Uniform(s.out * s.in);
  const std::vector<float> b = rng.Uniform(s.out);
  DeviceArray<T> d_x(Cast<T>(x));
  DeviceArray<T> d_w(Cast<T>(w));
  DeviceArray<T> d_b(Cast<T>(b));
  DeviceArray<T> d_pre(s.rows * s.out);
  DeviceArray<T> d_y(s.rows * s.out);
  d_pre.Fill(0xFF);
  d_y.Fill(0xFF);
  TestStream stream;
  SLUICE_EXPECT_LAUNCH_OK(LinearGeluForward<T>(ctx, d_x.data(), d_w.data(),
                                               with_bias ? d_b.data() : nullptr, d_pre.data(),
                                               d_y.data(), s.rows, s.in, s.out, stream.get()));
  const std::vector<double> xd = RoundTripToDouble<T>(x);
  const std::vector<double> wd = RoundTripToDouble<T>(w);
  const std::vector<double> bd = RoundTripToDouble<T>(b);
  std::vector<double> pre_want(s.rows * s.out);
  ref::LinearForward<double>(xd.data(), wd.data(), with_bias ? bd.data() : nullptr, pre_want.data(),
                             s.rows, s.in, s.out);
  std::vector<double> y_want(pre_want.size());
  ref::GeluForward<double>(pre_want.data(), y_want.data(), static_cast<int64_t>(y_want.size()));
  ExpectClose(ToFloat(d_pre.Download()), pre_want, OutTol<T>(),
              Describe("pre-activation", TypeName<T>(), s));
  ExpectClose(ToFloat(d_y.Download()), y_want, y_tol, Describe("gelu(pre)", TypeName<T>(), s));
}

template <typename T>
class CudaGemmTest : public ::testing::Test {};
using ActivationTypes = ::testing::Types<float, __nv_bfloat16>;
TYPED_TEST_SUITE(CudaGemmTest, ActivationTypes);

// rows in {1, 7, 33, 512}, in / out in {1, 3, 64, 160, 1000, 4097}: odd leading dimensions
// (bf16 rows that are not 16-byte multiples), single rows and columns, k = 4097.
const std::vector<Shape>& OddShapes() {
  static const std::vector<Shape> shapes = {
      {1, 1, 1},      {1, 4097, 3},  {1, 3, 4097},     {7, 3, 1000},    {7, 64, 160},
      {7, 1000, 1},   {7, 4097, 64}, {33, 160, 64},    {33, 1, 3},      {33, 1000, 160},
      {512, 64, 160}, {512, 3, 1},   {512, 160, 1000}, {512, 4097, 64}, {512, 1, 4097},
  };
  return shapes;
}

TYPED_TEST(CudaGemmTest, ForwardMatchesReference) {
  SLUICE_SKIP_WITHOUT_GPU();
  auto ctx = MakeContext();
  ASSERT_NE(ctx, nullptr);
  for (const Shape& s : OddShapes()) {
    CheckForward<TypeParam>(*ctx, s, /*with_bias=*/true, SeedOf(s, 1));
    CheckForward<TypeParam>(*ctx, s, /*with_bias=*/false, SeedOf(s, 2));
  }
}

TYPED_TEST(CudaGemmTest, BackwardMatchesReference) {
  SLUICE_SKIP_WITHOUT_GPU();
  auto ctx = MakeContext();
  ASSERT_NE(ctx, nullptr);
  for (const Shape& s : OddShapes())
    CheckBackward<TypeParam>(*ctx, s, true, true, true, SeedOf(s, 3));
}

TYPED_TEST(CudaGemmTest, BackwardNullGradientsAreSkipped) {
  SLUICE_SKIP_WITHOUT_GPU();
  auto ctx = MakeContext();
  ASSERT_NE(ctx, nullptr);
  for (const Shape& s : {Shape{33, 160, 64}, Shape{7, 3, 1000}}) {
    for (int mask = 0; mask < 8; ++mask) {
      CheckBackward<TypeParam>(*ctx, s, (mask & 1) != 0, (mask & 2) != 0, (mask & 4) != 0,
                               SeedOf(s, 10 + mask));
    }
  }
}

TYPED_TEST(CudaGemmTest, LargeMagnitudes) {
  SLUICE_SKIP_WITHOUT_GPU();
  auto ctx = MakeContext();
  ASSERT_NE(ctx, nullptr);
  for (const Shape& s : {Shape{33, 160, 64}, Shape{7, 1000, 3}}) {
    CheckForward<TypeParam>(*ctx, s, true, SeedOf(s, 20), 0, /*magnitude=*/3000.0);
    CheckBackward<TypeParam>(*ctx, s, true, true, true, SeedOf(s, 21), 0, /*magnitude=*/3000.0);
  }
}

// Pointers one element past a 256-byte boundary: cuBLASLt must be told (MIN_ALIGNMENT) or it may
// pick vectorised kernels that fault or read wrong data.
TYPED_TEST(CudaGemmTest, MisalignedPointers) {
  SLUICE_SKIP_WITHOUT_GPU();
  auto ctx = MakeContext();
  ASSERT_NE(ctx, nullptr);
  for (const Shape& s : {Shape{33, 160, 64}, Shape{7, 3, 1000}, Shape{512, 64, 160}}) {
    CheckForward<TypeParam>(*ctx, s, true, SeedOf(s, 30), /*offset=*/1);
    CheckBackward<TypeParam>(*ctx, s, true, true, true, SeedOf(s, 31), /*offset=*/1);
  }
}

// The bias fallback (plain product, then the bias kernel) gives the reference result too, and is
// counted.
TYPED_TEST(CudaGemmTest, UnfusedBiasFallback) {
  SLUICE_SKIP_WITHOUT_GPU();
  auto ctx = MakeContext();
  ASSERT_NE(ctx, nullptr);
  ctx->set_force_unfused_epilogues(true);
  int64_t expected_unfused = 0;
  for (const Shape& s : OddShapes()) {
    if (s.rows * s.in * s.out > 50'000'000) continue;  // the cheap half is enough here
    CheckForward<TypeParam>(*ctx, s, /*with_bias=*/true, SeedOf(s, 40));
    ++expected_unfused;
    EXPECT_EQ(ctx->unfused_epilogues(), expected_unfused);
    CheckForward<TypeParam>(*ctx, s, /*with_bias=*/false, SeedOf(s, 41));  // nothing to unfuse
    EXPECT_EQ(ctx->unfused_epilogues(), expected_unfused);
  }
  CheckForward<TypeParam>(*ctx, Shape{33, 160, 64}, true, 42, /*offset=*/1);
}

TYPED_TEST(CudaGemmTest, GeluForward) {
  SLUICE_SKIP_WITHOUT_GPU();
  auto ctx = MakeContext();
  ASSERT_NE(ctx, nullptr);
  const double fused_tol = std::is_same_v<TypeParam, float> ? kFusedGeluF32Tol : kBf16Tol;
  // out % 8 == 0: the fused epilogue where cuBLASLt offers it.
  for (const Shape& s : {Shape{33, 160, 64}, Shape{512, 1000, 160}, Shape{1, 3, 8}}) {
    CheckGeluForward<TypeParam>(*ctx, s, true, fused_tol, SeedOf(s, 50));
    CheckGeluForward<TypeParam>(*ctx, s, false, fused_tol, SeedOf(s, 51));
  }
  std::fprintf(stderr, "GELU %s: %lld of 6 fused-eligible calls fell back\n", TypeName<TypeParam>(),
               static_cast<long long>(ctx->unfused_epilogues()));
  // out % 8 != 0: the aux leading dimension rule rules the fused form out; always the fallback.
  for (const Shape& s : {Shape{7, 64, 3}, Shape{33, 1000, 1}, Shape{7, 160, 1001}}) {
    const int64_t before = ctx->unfused_epilogues();
    CheckGeluForward<TypeParam>(*ctx, s, true, OutTol<TypeParam>(), SeedOf(s, 52));
    EXPECT_EQ(ctx->unfused_epilogues(), before + 1);
  }
  // Forced fallback on a shape that could fuse: the kernel path, at the tight tolerance.
  ctx->set_force_unfused_epilogues(true);
  const int64_t before = ctx->unfused_epilogues();
  CheckGeluForward<TypeParam>(*ctx, Shape{33, 160, 64}, true, OutTol<TypeParam>(), 53);
  CheckGeluForward<TypeParam>(*ctx, Shape{33, 160, 64}, false, OutTol<TypeParam>(), 54);
  EXPECT_EQ(ctx->unfused_epilogues(), before + 2);
}

// cuBLASLt does not document which GELU its epilogue computes. The reference (and GPT-2) use the
// tanh form; the erf form differs from it by up to 4.7e-4 (at |x| = 2.7). The fused output must
// be nearer the tanh form on average: an accurate tanh misses it by ~1e-7, a hardware tanh.approx
// (2^-11 relative at worst) by less on average than the forms' mean gap. The numbers are printed.
TEST(CudaGemm, GeluEpilogueIsTanhForm) {
  SLUICE_SKIP_WITHOUT_GPU();
  auto ctx = MakeContext();
  ASSERT_NE(ctx, nullptr);
  const Shape s{256, 16, 64};
  Rng rng(60);
  const std::vector<float> x = rng.Uniform(s.rows * s.in);
  const std::vector<float> w = rng.Uniform(s.out * s.in);
  const std::vector<float> b = rng.Uniform(s.out);
  DeviceArray<float> d_x(x), d_w(w), d_b(b), d_pre(s.rows * s.out), d_y(s.rows * s.out);
  TestStream stream;
  SLUICE_EXPECT_LAUNCH_OK(LinearGeluForward<float>(*ctx, d_x.data(), d_w.data(), d_b.data(),
                                                   d_pre.data(), d_y.data(), s.rows, s.in, s.out,
                                                   stream.get()));
  if (ctx->unfused_epilogues() != 0) {
    GTEST_SKIP() << "cuBLASLt refused GELU_AUX_BIAS for fp32; the fallback kernel is tested in "
                    "GeluForward";
  }
  const std::vector<float> pre = d_pre.Download();
  const std::vector<float> y = d_y.Download();
  double tanh_error = 0.0, erf_error = 0.0, form_gap = 0.0;
  for (size_t i = 0; i < y.size(); ++i) {
    const double v = pre[i];
    const double tanh_form =
        0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    const double erf_form = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    tanh_error += std::abs(y[i] - tanh_form);
    erf_error += std::abs(y[i] - erf_form);
    form_gap += std::abs(tanh_form - erf_form);
  }
  const double n = static_cast<double>(y.size());
  std::fprintf(stderr,
               "cuBLASLt GELU epilogue: mean |y - gelu_tanh| %.3g, mean |y - gelu_erf| %.3g "
               "(forms differ by %.3g on average)\n",
               tanh_error / n, erf_error / n, form_gap / n);
  EXPECT_LT(tanh_error, erf_error)
      << "cuBLASLt's GELU epilogue looks like the erf form: LinearGeluForward must not fuse it";
}

TYPED_TEST(CudaGemmTest, DeterministicAcrossRunsAndContexts) {
  SLUICE_SKIP_WITHOUT_GPU();
  using T = TypeParam;
  for (const Shape& s : {Shape{512, 1000, 4097}, Shape{5000, 8, 33}, Shape{7, 3, 1000}}) {
    SCOPED_TRACE(Describe("determinism", TypeName<T>(), s));
    Rng rng(SeedOf(s, 70));
    const std::vector<T> x = Cast<T>(rng.Uniform(s.rows * s.in));
    const std::vector<T> w = Cast<T>(rng.Uniform(s.out * s.in));
    const std::vector<T> b = Cast<T>(rng.Uniform(s.out));
    const std::vector<T> dy = Cast<T>(rng.Uniform(s.rows * s.out));
    const std::vector<float> dw0 = rng.Uniform(s.out * s.in);
    const std::vector<float> db0 = rng.Uniform(s.out);
    DeviceArray<T> d_x(x), d_w(w), d_b(b), d_dy(dy), d_y(s.rows * s.out), d_dx(s.rows * s.in);
    DeviceArray<float> d_dw(dw0), d_db(db0);
    std::vector<T> y_runs[2], dx_runs[2];
    std::vector<float> dw_runs[2], db_runs[2];
    for (int run = 0; run < 2; ++run) {
      auto ctx = MakeContext();  // a fresh context must choose the same algorithms
      ASSERT_NE(ctx, nullptr);
      d_dw.Upload(dw0);
      d_db.Upload(db0);
      TestStream stream;
      SLUICE_EXPECT_LAUNCH_OK(LinearForward<T>(*ctx, d_x.data(), d_w.data(), d_b.data(), d_y.data(),
                                               s.rows, s.in, s.out, stream.get()));
      SLUICE_EXPECT_LAUNCH_OK(LinearBackward<T>(*ctx, d_x.data(), d_w.data(), d_dy.data(),
                                                d_dx.data(), d_dw.data(), d_db.data(), s.rows, s.in,
                                                s.out, stream.get()));
      // Again on the same context (cached plans), accumulating once more into dw and db.
      SLUICE_EXPECT_LAUNCH_OK(LinearBackward<T>(*ctx, d_x.data(), d_w.data(), d_dy.data(),
                                                d_dx.data(), d_dw.data(), d_db.data(), s.rows, s.in,
                                                s.out, stream.get()));
      y_runs[run] = d_y.Download();
      dx_runs[run] = d_dx.Download();
      dw_runs[run] = d_dw.Download();
      db_runs[run] = d_db.Download();
    }
    EXPECT_TRUE(SameBits(y_runs[0], y_runs[1])) << "y differs between runs";
    EXPECT_TRUE(SameBits(dx_runs[0], dx_runs[1])) << "dx differs between runs";
    EXPECT_TRUE(SameBits(dw_runs[0], dw_runs[1])) << "dw differs between runs";
    EXPECT_TRUE(SameBits(db_runs[0], db_runs[1])) << "db differs between runs";
  }
}

// The bias gradient with many row chunks (two passes) and with one (straight into db).
TYPED_TEST(CudaGemmTest, BiasGradientOverManyRows) {
  SLUICE_SKIP_WITHOUT_GPU();
  auto ctx = MakeContext();
  ASSERT_NE(ctx, nullptr);
  for (const Shape& s :
       {Shape{5000, 8, 33}, Shape{300, 5, 7}, Shape{256, 4, 1000}, Shape{20000, 2, 3}}) {
    CheckBackward<TypeParam>(*ctx, s, false, false, true, SeedOf(s, 80));
  }
}

TEST(CudaGemm, ColumnSumChunksDependOnShapeOnly) {
  SLUICE_SKIP_WITHOUT_GPU();
  const int64_t plenty = int64_t{1} << 30;
  EXPECT_EQ(internal::GemmColumnSumChunks(1, 10, plenty), 1);
  EXPECT_EQ(internal::GemmColumnSumChunks(256, 10, plenty), 1);
  EXPECT_EQ(internal::GemmColumnSumChunks(257, 10, plenty), 2);
  EXPECT_EQ(internal::GemmColumnSumChunks(5000, 10, plenty), 20);
  EXPECT_EQ(internal::GemmColumnSumChunks(1 << 20, 10, plenty), 64);
  // Only rows whose partials do not fit the scratch get fewer chunks.
  EXPECT_EQ(internal::GemmColumnSumChunks(5000, 1000, 16384), 16);
  EXPECT_EQ(internal::GemmColumnSumChunks(5000, 1000, 999), 1);
}

// A caller-provided workspace, small enough to limit the bias-gradient chunks.
TYPED_TEST(CudaGemmTest, CallerWorkspace) {
  SLUICE_SKIP_WITHOUT_GPU();
  DeviceArray<float> workspace(16384);  // 64 KiB
  std::unique_ptr<GemmContext> ctx;
  SLUICE_EXPECT_LAUNCH_OK(
      GemmContext::Create(workspace.data(), workspace.size() * sizeof(float), &ctx));
  EXPECT_EQ(ctx->workspace(), workspace.data());
  EXPECT_EQ(ctx->workspace_bytes(), workspace.size() * sizeof(float));
  CheckBackward<TypeParam>(*ctx, Shape{5000, 16, 1000}, true, true, true, 90);
  CheckForward<TypeParam>(*ctx, Shape{512, 160, 1000}, true, 91);
}

TYPED_TEST(CudaGemmTest, HeuristicCache) {
  SLUICE_SKIP_WITHOUT_GPU();
  using T = TypeParam;
  auto ctx = MakeContext();
  ASSERT_NE(ctx, nullptr);
  EXPECT_EQ(ctx->heuristic_queries(), 0);
  const Shape s{33, 160, 64};
  DeviceArray<T> x(s.rows * s.in), w(s.out * s.in), b(s.out), y(s.rows * s.out);
  DeviceArray<T> dy(s.rows * s.out), dx(s.rows * s.in);
  DeviceArray<float> dw(s.out * s.in), db(s.out);
  for (auto* array : {&x, &w, &b, &dy}) array->Fill(0);
  dw.Fill(0);
  db.Fill(0);
  TestStream stream;
  SLUICE_EXPECT_LAUNCH_OK(LinearForward<T>(*ctx, x.data(), w.data(), b.data(), y.data(), s.rows,
                                           s.in, s.out, stream.get()));
  const int64_t after_first = ctx->heuristic_queries();
  const size_t plans_after_first = ctx->cached_plans();
  EXPECT_GE(after_first, 1);
  SLUICE_EXPECT_LAUNCH_OK(LinearForward<T>(*ctx, x.data(), w.data(), b.data(), y.data(), s.rows,
                                           s.in, s.out, stream.get()));
  EXPECT_EQ(ctx->heuristic_queries(), after_first) << "a repeated shape queried the heuristic";
  // Other buffers of the same shape and alignment reuse the plan too.
  DeviceArray<T> x2(s.rows * s.in), y2(s.rows * s.out);
  x2.Fill(0);
  SLUICE_EXPECT_LAUNCH_OK(LinearForward<T>(*ctx, x2.data(), w.data(), b.data(), y2.data(), s.rows,
                                           s.in, s.out, stream.get()));
  EXPECT_EQ(ctx->heuristic_queries(), after_first);
  EXPECT_EQ(ctx->cached_plans(), plans_after_first);
  // A new shape is a new plan.
  SLUICE_EXPECT_LAUNCH_OK(LinearForward<T>(*ctx, x.data(), w.data(), b.data(), y.data(), s.rows - 1,
                                           s.in, s.out, stream.get()));
  EXPECT_GT(ctx->heuristic_queries(), after_first);
  // Backward: dgrad and wgrad plans once, then none.
  SLUICE_EXPECT_LAUNCH_OK(LinearBackward<T>(*ctx, x.data(), w.data(), dy.data(), dx.data(),
                                            dw.data(), db.data(), s.rows, s.in, s.out,
                                            stream.get()));
  const int64_t after_backward = ctx->heuristic_queries();
  for (int i = 0; i < 3; ++i) {
    SLUICE_EXPECT_LAUNCH_OK(LinearBackward<T>(*ctx, x.data(), w.data(), dy.data(), dx.data(),
                                              dw.data(), db.data(), s.rows, s.in, s.out,
                                              stream.get()));
  }
  EXPECT_EQ(ctx->heuristic_queries(), after_backward);
  SLUICE_ASSERT_CUDA(cudaStreamSynchronize(stream.get()));
}

TYPED_TEST(CudaGemmTest, EmptyInnerAndOuterDimensions) {
  SLUICE_SKIP_WITHOUT_GPU();
  auto ctx = MakeContext();
  ASSERT_NE(ctx, nullptr);
  // in == 0: y = b (an empty sum), dw is empty, db still sums dy.
  CheckForward<TypeParam>(*ctx, Shape{7, 0, 5}, true, 100);
  CheckForward<TypeParam>(*ctx, Shape{7, 0, 5}, false, 101);
  CheckBackward<TypeParam>(*ctx, Shape{7, 0, 5}, true, true, true, 102);
  // out == 0: dx = 0.
  CheckBackward<TypeParam>(*ctx, Shape{7, 5, 0}, true, true, true, 103);
  // rows == 0: nothing at all, null pointers allowed.
  TestStream stream;
  SLUICE_EXPECT_LAUNCH_OK(
      LinearForward<TypeParam>(*ctx, nullptr, nullptr, nullptr, nullptr, 0, 5, 7, stream.get()));
  SLUICE_EXPECT_LAUNCH_OK(LinearBackward<TypeParam>(*ctx, nullptr, nullptr, nullptr, nullptr,
                                                    nullptr, nullptr, 0, 5, 7, stream.get()));
  // GELU with in == 0: pre = b, y = gelu(b).
  CheckGeluForward<TypeParam>(*ctx, Shape{3, 0, 16}, true, OutTol<TypeParam>(), 104);
}

TEST(CudaGemm, InvalidArguments) {
  SLUICE_SKIP_WITHOUT_GPU();
  auto ctx = MakeContext();
  ASSERT_NE(ctx, nullptr);
  DeviceArray<float> x(12), w(12), y(12), dy(12), dx(12), dw(12), db(4);
  TestStream stream;
  const cudaStream_t st = stream.get();
  using Code = LaunchStatus::Code;
  EXPECT_EQ(LinearForward<float>(*ctx, nullptr, w.data(), nullptr, y.data(), 3, 4, 3, st).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(LinearForward<float>(*ctx, x.data(), nullptr, nullptr, y.data(), 3, 4, 3, st).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(LinearForward<float>(*ctx, x.data(), w.data(), nullptr, nullptr, 3, 4, 3, st).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(LinearForward<float>(*ctx, x.data(), w.data(), nullptr, y.data(), -1, 4, 3, st).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(
      LinearGeluForward<float>(*ctx, nullptr, w.data(), nullptr, y.data(), y.data(), 3, 4, 3, st)
          .code(),
      Code::kInvalidArgument);
  EXPECT_EQ(
      LinearGeluForward<float>(*ctx, x.data(), w.data(), nullptr, nullptr, y.data(), 3, 4, 3, st)
          .code(),
      Code::kInvalidArgument);
  // Backward: dy is needed by any gradient, w by dx, x by dw.
  EXPECT_EQ(LinearBackward<float>(*ctx, x.data(), w.data(), nullptr, nullptr, nullptr, db.data(), 3,
                                  4, 3, st)
                .code(),
            Code::kInvalidArgument);
  EXPECT_EQ(LinearBackward<float>(*ctx, x.data(), nullptr, dy.data(), dx.data(), nullptr, nullptr,
                                  3, 4, 3, st)
                .code(),
            Code::kInvalidArgument);
  EXPECT_EQ(LinearBackward<float>(*ctx, nullptr, w.data(), dy.data(), nullptr, dw.data(), nullptr,
                                  3, 4, 3, st)
                .code(),
            Code::kInvalidArgument);
  // Null gradients with null inputs they would need are fine.
  SLUICE_EXPECT_LAUNCH_OK(LinearBackward<float>(*ctx, nullptr, nullptr, dy.data(), nullptr, nullptr,
                                                db.data(), 3, 4, 3, st));
  GemmParams params;
  params.m = params.n = params.k = 2;
  params.a = x.data();
  params.b = w.data();
  params.c = y.data();
  params.lda = params.ldb = params.ldc = 2;
  params.ab_type = GemmDtype::kF32;
  params.c_type = GemmDtype::kBf16;
  EXPECT_EQ(Gemm(*ctx, params, st).code(), Code::kInvalidArgument);  // f32 -> bf16
  params.c_type = GemmDtype::kF32;
  params.lda = 1;
  EXPECT_EQ(Gemm(*ctx, params, st).code(), Code::kInvalidArgument);  // lda < k
  params.lda = 2;
  params.a = nullptr;
  EXPECT_EQ(Gemm(*ctx, params, st).code(), Code::kInvalidArgument);
  std::unique_ptr<GemmContext> misaligned;
  EXPECT_EQ(
      GemmContext::Create(static_cast<char*>(static_cast<void*>(x.data())) + 4, 32, &misaligned)
          .code(),
      Code::kInvalidArgument);
  SLUICE_ASSERT_CUDA(cudaStreamSynchronize(st));
}

// The general row-major GEMM: every transpose combination and type pairing, padded leading
// dimensions, alpha and beta; the padding of C must stay untouched.
struct GemmCase {
  bool transpose_a;
  bool transpose_b;
  GemmDtype ab_type;
  GemmDtype c_type;
};

template <typename In, typename Out>
void CheckGemm(GemmContext& ctx, const GemmCase& c, int64_t m, int64_t n, int64_t k, int64_t pad,
               float alpha, float beta, uint64_t seed) {
  const std::string what = std::string("Gemm ") + (c.transpose_a ? "T" : "N") +
                           (c.transpose_b ? "T" : "N") + " " + TypeName<In>() + "->" +
                           TypeName<Out>() + " m=" + std::to_string(m) + " n=" + std::to_string(n) +
                           " k=" + std::to_string(k);
  SCOPED_TRACE(what);
  const int64_t a_rows = c.transpose_a ? k : m, a_cols = c.transpose_a ? m : k;
  const int64_t b_rows = c.transpose_b ? n : k, b_cols = c.transpose_b ? k : n;
  const int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = n + pad;
  Rng rng(seed);
  const std::vector<float> a = rng.Uniform(a_rows * lda);
  const std::vector<float> b = rng.Uniform(b_rows * ldb);
  const std::vector<float> c0 = rng.Uniform(m * ldc);
  DeviceArray<In> d_a(Cast<In>(a)), d_b(Cast<In>(b));
  DeviceArray<Out> d_c(Cast<Out>(c0));
  GemmParams p;
  p.transpose_a = c.transpose_a;
  p.transpose_b = c.transpose_b;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a = d_a.data();
  p.lda = lda;
  p.b = d_b.data();
  p.ldb = ldb;
  p.c = d_c.data();
  p.ldc = ldc;
  p.ab_type = c.ab_type;
  p.c_type = c.c_type;
  p.alpha = alpha;
  p.beta = beta;
  TestStream stream;
  SLUICE_EXPECT_LAUNCH_OK(Gemm(ctx, p, stream.get()));
  const std::vector<float> got_all = ToFloat(d_c.Download());

  const std::vector<double> ad = RoundTripToDouble<In>(a);
  const std::vector<double> bd = RoundTripToDouble<In>(b);
  const std::vector<double> cd = RoundTripToDouble<Out>(c0);
  std::vector<double> want(m * n);
  std::vector<float> got(m * n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0.0;
      for (int64_t q = 0; q < k; ++q) {
        const double av = c.transpose_a ? ad[q * lda + i] : ad[i * lda + q];
        const double bv = c.transpose_b ? bd[j * ldb + q] : bd[q * ldb + j];
        sum += av * bv;
      }
      want[i * n + j] = alpha * sum + beta * cd[i * ldc + j];
      got[i * n + j] = got_all[i * ldc + j];
    }
    for (int64_t j = n; j < ldc; ++j) {
      EXPECT_EQ(got_all[i * ldc + j], ToFloat(Cast<Out>({c0[i * ldc + j]}))[0])
          << "padding of C written at row " << i;
    }
  }
  ExpectClose(got, want, OutTol<Out>(), what);
}

TEST(CudaGemm, GeneralGemmMatchesReference) {
  SLUICE_SKIP_WITHOUT_GPU();
  auto ctx = MakeContext();
  ASSERT_NE(ctx, nullptr);
  uint64_t seed = 200;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      CheckGemm<float, float>(*ctx, {ta, tb, GemmDtype::kF32, GemmDtype::kF32}, 33, 65, 47, 3, 0.5f,
                              0.25f, ++seed);
      CheckGemm<__nv_bfloat16, __nv_bfloat16>(*ctx, {ta, tb, GemmDtype::kBf16, GemmDtype::kBf16},
                                              33, 65, 47, 3, 1.0f, 0.0f, ++seed);
      CheckGemm<__nv_bfloat16, float>(*ctx, {ta, tb, GemmDtype::kBf16, GemmDtype::kF32}, 33, 65, 47,
                                      0, 1.0f, 1.0f, ++seed);
    }
  }
  // The benchmark's square bf16 shape, small.
  CheckGemm<__nv_bfloat16, __nv_bfloat16>(*ctx, {false, false, GemmDtype::kBf16, GemmDtype::kBf16},
                                          256, 256, 256, 0, 1.0f, 0.0f, ++seed);
  CheckGemm<__nv_bfloat16, float>(*ctx, {false, true, GemmDtype::kBf16, GemmDtype::kF32}, 256, 256,
                                  256, 0, 1.0f, 0.0f, ++seed);
  // k == 0: C = beta·C for beta 0 (zeroed, padding kept) and 1 (untouched).
  CheckGemm<float, float>(*ctx, {false, false, GemmDtype::kF32, GemmDtype::kF32}, 5, 6, 0, 2, 1.0f,
                          0.0f, ++seed);
  CheckGemm<float, float>(*ctx, {false, false, GemmDtype::kF32, GemmDtype::kF32}, 5, 6, 0, 2, 1.0f,
                          1.0f, ++seed);
}

// Fp32Math kTf32 / kBf16: fp32 data multiplied on the tensor cores with the inputs rounded to
// TF32 / bf16 (unit roundoff u = 2^-11 / 2^-8, or twice that if cuBLAS truncates) and fp32
// accumulation. Each term x·w is then off by at most ~2·(2u) of |x·w|, so the bound is
// 4u·Σ|x||w| per output against the exact sum. And the mode must take effect: its error is far
// above the strict mode's (~1e-7), on the same context, whose plans are cached per math.
TEST(CudaGemm, FastFp32MathStaysWithinTheRoundingOfItsInputs) {
  SLUICE_SKIP_WITHOUT_GPU();
  auto ctx = MakeContext();
  ASSERT_NE(ctx, nullptr);
  TestStream stream;
  const int64_t rows = 64, in = 256, out = 96;
  Rng rng(77);
  const std::vector<float> x = rng.Uniform(rows * in);
  const std::vector<float> w = rng.Uniform(out * in);
  DeviceArray<float> dx(x), dw(w), dy(static_cast<size_t>(rows * out));
  // The largest error relative to Σ|x||w|, for the math the context has now.
  const auto worst_error = [&]() -> double {
    const LaunchStatus launched = LinearForward<float>(*ctx, dx.data(), dw.data(), nullptr,
                                                       dy.data(), rows, in, out, stream.get());
    EXPECT_TRUE(launched.ok()) << launched.ToString();
    const std::vector<float> y = dy.Download();
    double worst = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t o = 0; o < out; ++o) {
        double exact = 0.0, magnitude = 0.0;
        for (int64_t k = 0; k < in; ++k) {
          const double term = double(x[r * in + k]) * double(w[o * in + k]);
          exact += term;
          magnitude += std::fabs(term);
        }
        worst = std::max(worst, std::fabs(double(y[r * out + o]) - exact) / magnitude);
      }
    }
    return worst;
  };
  const double strict = worst_error();
  EXPECT_LT(strict, 1e-6);
  for (const auto& [math, u] : {std::pair{Fp32Math::kTf32, std::ldexp(1.0, -11)},
                                std::pair{Fp32Math::kBf16, std::ldexp(1.0, -8)}}) {
    ctx->set_fp32_math(math);
    EXPECT_EQ(ctx->fp32_math(), math);
    const double fast = worst_error();
    EXPECT_LE(fast, 4 * u) << "math " << static_cast<int>(math);
    EXPECT_GT(fast, 10 * strict) << "math " << static_cast<int>(math) << " did not take effect";
  }
  ctx->set_fp32_math(Fp32Math::kStrict);
  EXPECT_EQ(worst_error(), strict) << "the strict plan is cached apart from the fast ones";
}

}  // namespace
}  // namespace sluice::kernels::cuda
