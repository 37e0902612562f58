// The CUDA LayerNorm / RMSNorm kernels (kernels/cuda/norm.h) against the fp64 reference
// (kernels/ref/ops_norm.h) run on the same inputs, rounded to bf16 where T is bf16.
//
// Tolerances, on the ExpectClose criterion |got - want| <= tol * (|want| + scale):
//   fp32 outputs (y and dx of T = float; mean, rstd, dgamma, dbeta of either T): 1e-5. The math is
//     fp32 over at most 20000 terms per sum, a few 1e-7 relative.
//   bf16 outputs (y, r, dx of T = bf16): 5e-3. One rounding of the fp32 result to bf16 (8
//     significant bits) is at most 2^-9 = 1.95e-3 relative; 5e-3 leaves room for the fp32 error
//     and still fails a truncating or twice-rounding conversion on most arrays.
// scale is max |want| over the array, except for dx, whose terms rstd * dy * gamma may cancel to
// far below them (RMSNorm with cols = 1 gives rstd * g * eps / (x^2 + eps)): there scale is the
// largest term, the size the fp32 rounding errors follow.
#include "kernels/cuda/norm.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>  // cudaMalloc(T**), which DeviceArray calls
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cuda/launch_status.h"
#include "kernels/ref/ops_norm.h"
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
using testing::WaitForDevice;

constexpr float kEps = 1e-5f;
constexpr double kFp32Tol = 1e-5;
constexpr double kBf16Tol = 5e-3;
constexpr int64_t kCols[] = {1, 3, 33, 160, 1000, 4097, 8192};
constexpr int64_t kRows[] = {1, 7, 64};

template <typename T>
double OutTol() {
  return std::is_same_v<T, float> ? kFp32Tol : kBf16Tol;
}
std::string Shape(int64_t rows, int64_t cols) {
  return " [" + std::to_string(rows) + " x " + std::to_string(cols) + "]";
}

// Device copies of host values, starting `offset` elements into the allocation (offset 1 puts
// every row off 16-byte alignment, forcing the element-wise path).
template <typename T>
std::unique_ptr<DeviceArray<T>> Upload(const std::vector<float>& values, int offset) {
  return std::make_unique<DeviceArray<T>>(CastAfter<T>(values, offset));
}
template <typename T>
std::unique_ptr<DeviceArray<T>> Poisoned(size_t n, int offset) {  // NaN in fp32 and bf16
  auto array = std::make_unique<DeviceArray<T>>(n + offset);
  array->Fill(0xFF);
  return array;
}

// |got - want| <= tol * (|want| + scale) for every element, with the caller's scale.
void ExpectCloseScaled(const std::vector<float>& got, const std::vector<double>& want, double tol,
                       double scale, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= tol * (std::abs(want[i]) + scale)) && ++failures <= 5) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i] << " (scale "
                    << scale << ")";
    }
  }
  EXPECT_EQ(failures, 0) << what;
}

// ---------------------------------------------------------------------------------------------
// Forward

struct ForwardSpec {
  bool layer_norm = true;
  bool fused = false;  // AddLayerNormForward / AddRmsNormForward: the rows are a + b
  bool with_beta = true;
  bool misaligned = false;
  bool in_place = false;  // y = x (unfused) or r = a (fused)
  int64_t rows = 1;
  int64_t cols = 1;
};

struct ForwardInputs {
  std::vector<float> a;  // x, or a of a + b
  std::vector<float> b;  // fused only
  std::vector<float> gamma;
  std::vector<float> beta;
};

ForwardInputs MakeForwardInputs(const ForwardSpec& spec, double lo, double hi, uint64_t seed) {
  Rng rng(seed);
  const int64_t n = spec.rows * spec.cols;
  ForwardInputs in;
  in.a = rng.Uniform(n, lo, hi);
  if (spec.fused) in.b = rng.Uniform(n, lo / 2, hi / 2);
  in.gamma = rng.Uniform(spec.cols, 0.5, 1.5);
  in.beta = rng.Uniform(spec.cols, -1.0, 1.0);
  return in;
}

template <typename T>
struct ForwardResult {
  std::vector<T> y;
  std::vector<T> r;
  std::vector<float> mean;
  std::vector<float> rstd;
};

template <typename T>
ForwardResult<T> RunForward(const ForwardSpec& spec, const ForwardInputs& in) {
  const int offset = spec.misaligned ? 1 : 0;
  const int64_t n = spec.rows * spec.cols;
  auto a = Upload<T>(in.a, offset);
  auto b = Upload<T>(spec.fused ? in.b : std::vector<float>(), offset);
  auto gamma = Upload<T>(in.gamma, offset);
  auto beta = Upload<T>(in.beta, offset);
  auto y = Poisoned<T>(n, offset);
  auto r = Poisoned<T>(n, offset);
  auto mean = Poisoned<float>(spec.rows, 0);
  auto rstd = Poisoned<float>(spec.rows, 0);
  WaitForDevice();
  TestStream stream;
  const T* beta_ptr = spec.layer_norm && spec.with_beta ? beta->data() + offset : nullptr;
  T* a_ptr = a->data() + offset;
  T* y_ptr = spec.in_place && !spec.fused ? a_ptr : y->data() + offset;
  T* r_ptr = spec.in_place ? a_ptr : r->data() + offset;
  ForwardResult<T> out;
  LaunchStatus status;
  if (!spec.fused && spec.layer_norm) {
    status = LayerNormForward<T>(a_ptr, gamma->data() + offset, beta_ptr, y_ptr, mean->data(),
                                 rstd->data(), spec.rows, spec.cols, kEps, stream.get());
  } else if (!spec.fused) {
    status = RmsNormForward<T>(a_ptr, gamma->data() + offset, y_ptr, rstd->data(), spec.rows,
                               spec.cols, kEps, stream.get());
  } else if (spec.layer_norm) {
    status = AddLayerNormForward<T>(a_ptr, b->data() + offset, r_ptr, gamma->data() + offset,
                                    beta_ptr, y->data() + offset, mean->data(), rstd->data(),
                                    spec.rows, spec.cols, kEps, stream.get());
  } else {
    status = AddRmsNormForward<T>(a_ptr, b->data() + offset, r_ptr, gamma->data() + offset,
                                  y->data() + offset, rstd->data(), spec.rows, spec.cols, kEps,
                                  stream.get());
  }
  EXPECT_TRUE(status.ok()) << status.ToString();
  out.y = (spec.in_place && !spec.fused ? *a : *y).DownloadFrom(offset);
  if (spec.fused) out.r = (spec.in_place ? *a : *r).DownloadFrom(offset);
  out.mean = mean->Download();
  out.rstd = rstd->Download();
  return out;
}

template <typename T>
void CheckForward(const ForwardSpec& spec, double lo, double hi, uint64_t seed) {
  const std::string what = TypeName<T>() + (spec.fused ? " Add" : " ") +
                           (spec.layer_norm ? "LayerNorm" : "RmsNorm") + "Forward" +
                           Shape(spec.rows, spec.cols) + (spec.with_beta ? "" : " no beta") +
                           (spec.misaligned ? " misaligned" : "");
  const ForwardInputs in = MakeForwardInputs(spec, lo, hi, seed);
  const int64_t n = spec.rows * spec.cols;
  // The rows as the device normalizes them: x, or r = a + b rounded to fp32 then to T.
  std::vector<double> x = RoundTripToDouble<T>(in.a);
  if (spec.fused) {
    const std::vector<double> b = RoundTripToDouble<T>(in.b);
    std::vector<float> sum(n);
    for (int64_t i = 0; i < n; ++i) sum[i] = static_cast<float>(x[i] + b[i]);
    x = RoundTripToDouble<T>(sum);
  }
  const std::vector<double> gamma = RoundTripToDouble<T>(in.gamma);
  const std::vector<double> beta = RoundTripToDouble<T>(in.beta);
  std::vector<double> y(n), mean(spec.rows), rstd(spec.rows);
  if (spec.layer_norm) {
    ref::LayerNormForward<double>(x.data(), gamma.data(), spec.with_beta ? beta.data() : nullptr,
                                  y.data(), mean.data(), rstd.data(), spec.rows, spec.cols, kEps);
  } else {
    ref::RmsNormForward<double>(x.data(), gamma.data(), y.data(), rstd.data(), spec.rows, spec.cols,
                                kEps);
  }

  const ForwardResult<T> got = RunForward<T>(spec, in);
  ExpectClose(ToFloat(got.y), y, OutTol<T>(), what + " y");
  if (spec.layer_norm) ExpectClose(got.mean, mean, kFp32Tol, what + " mean");
  ExpectClose(got.rstd, rstd, kFp32Tol, what + " rstd");
  if (spec.fused) ExpectClose(ToFloat(got.r), x, OutTol<T>(), what + " r");
}

template <typename T>
void ForwardSweep(bool layer_norm, bool fused) {
  uint64_t seed = 100;
  for (int64_t cols : kCols) {
    for (int64_t rows : kRows) {
      ForwardSpec spec;
      spec.layer_norm = layer_norm;
      spec.fused = fused;
      spec.rows = rows;
      spec.cols = cols;
      spec.with_beta = (cols + rows) % 2 == 0;  // both forms, over the sweep
      CheckForward<T>(spec, -1.0, 1.0, ++seed);
    }
  }
  // Rows too long for registers (the wide kernel), in both the vector and element-wise forms.
  for (int64_t cols : {20000, 20003}) {
    ForwardSpec spec;
    spec.layer_norm = layer_norm;
    spec.fused = fused;
    spec.rows = 5;
    spec.cols = cols;
    CheckForward<T>(spec, -1.0, 1.0, ++seed);
  }
  // Many rows per launch (forward rows beyond one block-row each).
  ForwardSpec many;
  many.layer_norm = layer_norm;
  many.fused = fused;
  many.rows = 3001;
  many.cols = 96;
  CheckForward<T>(many, -1.0, 1.0, ++seed);
}

TEST(CudaNorm, LayerNormForwardFp32) {
  SLUICE_SKIP_WITHOUT_GPU();
  ForwardSweep<float>(true, false);
}
TEST(CudaNorm, LayerNormForwardBf16) {
  SLUICE_SKIP_WITHOUT_GPU();
  ForwardSweep<__nv_bfloat16>(true, false);
}
TEST(CudaNorm, RmsNormForwardFp32) {
  SLUICE_SKIP_WITHOUT_GPU();
  ForwardSweep<float>(false, false);
}
TEST(CudaNorm, RmsNormForwardBf16) {
  SLUICE_SKIP_WITHOUT_GPU();
  ForwardSweep<__nv_bfloat16>(false, false);
}
TEST(CudaNorm, AddLayerNormForwardFp32) {
  SLUICE_SKIP_WITHOUT_GPU();
  ForwardSweep<float>(true, true);
}
TEST(CudaNorm, AddLayerNormForwardBf16) {
  SLUICE_SKIP_WITHOUT_GPU();
  ForwardSweep<__nv_bfloat16>(true, true);
}
TEST(CudaNorm, AddRmsNormForwardFp32) {
  SLUICE_SKIP_WITHOUT_GPU();
  ForwardSweep<float>(false, true);
}
TEST(CudaNorm, AddRmsNormForwardBf16) {
  SLUICE_SKIP_WITHOUT_GPU();
  ForwardSweep<__nv_bfloat16>(false, true);
}

// ---------------------------------------------------------------------------------------------
// Backward

struct BackwardSpec {
  bool layer_norm = true;
  bool with_dbeta = true;
  bool misaligned = false;
  bool in_place = false;  // dx = dy
  int64_t rows = 1;
  int64_t cols = 1;
};

struct BackwardInputs {
  std::vector<float> x;
  std::vector<float> dy;
  std::vector<float> gamma;
  std::vector<float> mean;  // what a forward saved: the fp64 statistics of x, rounded to fp32
  std::vector<float> rstd;
  std::vector<float> dgamma;  // the starting values the gradients accumulate onto
  std::vector<float> dbeta;
};

template <typename T>
BackwardInputs MakeBackwardInputs(const BackwardSpec& spec, double lo, double hi, uint64_t seed) {
  Rng rng(seed);
  const int64_t n = spec.rows * spec.cols;
  BackwardInputs in;
  in.x = rng.Uniform(n, lo, hi);
  in.dy = rng.Uniform(n, -1.0, 1.0);
  in.gamma = rng.Uniform(spec.cols, 0.5, 1.5);
  in.dgamma = rng.Uniform(spec.cols, -1.0, 1.0);
  in.dbeta = rng.Uniform(spec.cols, -1.0, 1.0);
  const std::vector<double> x = RoundTripToDouble<T>(in.x);
  const std::vector<double> gamma = RoundTripToDouble<T>(in.gamma);
  std::vector<double> y(n), mean(spec.rows), rstd(spec.rows);
  ref::LayerNormForward<double>(x.data(), gamma.data(), nullptr, y.data(), mean.data(), rstd.data(),
                                spec.rows, spec.cols, kEps);
  if (!spec.layer_norm) {
    ref::RmsNormForward<double>(x.data(), gamma.data(), y.data(), rstd.data(), spec.rows, spec.cols,
                                kEps);
  }
  in.mean.assign(mean.begin(), mean.end());
  in.rstd.assign(rstd.begin(), rstd.end());
  return in;
}

template <typename T>
struct BackwardResult {
  std::vector<T> dx;
  std::vector<float> dgamma;
  std::vector<float> dbeta;
};

template <typename T>
BackwardResult<T> RunBackward(const BackwardSpec& spec, const BackwardInputs& in) {
  const int offset = spec.misaligned ? 1 : 0;
  const int64_t n = spec.rows * spec.cols;
  auto x = Upload<T>(in.x, offset);
  auto dy = Upload<T>(in.dy, offset);
  auto gamma = Upload<T>(in.gamma, offset);
  auto dx = Poisoned<T>(n, offset);
  DeviceArray<float> mean(in.mean);
  DeviceArray<float> rstd(in.rstd);
  DeviceArray<float> dgamma(in.dgamma);
  DeviceArray<float> dbeta(in.dbeta);
  // Garbage in the workspace: the kernels must not depend on its contents.
  DeviceArray<uint8_t> workspace(NormBackwardWorkspaceBytes(spec.rows, spec.cols));
  workspace.Fill(0xFF);
  WaitForDevice();
  TestStream stream;
  T* dy_ptr = dy->data() + offset;
  T* dx_ptr = spec.in_place ? dy_ptr : dx->data() + offset;
  LaunchStatus status;
  if (spec.layer_norm) {
    status = LayerNormBackward<T>(x->data() + offset, gamma->data() + offset, mean.data(),
                                  rstd.data(), dy_ptr, dx_ptr, dgamma.data(),
                                  spec.with_dbeta ? dbeta.data() : nullptr, spec.rows, spec.cols,
                                  workspace.data(), workspace.size(), stream.get());
  } else {
    status = RmsNormBackward<T>(x->data() + offset, gamma->data() + offset, rstd.data(), dy_ptr,
                                dx_ptr, dgamma.data(), spec.rows, spec.cols, workspace.data(),
                                workspace.size(), stream.get());
  }
  EXPECT_TRUE(status.ok()) << status.ToString();
  BackwardResult<T> out;
  out.dx = (spec.in_place ? *dy : *dx).DownloadFrom(offset);
  out.dgamma = dgamma.Download();
  out.dbeta = dbeta.Download();
  return out;
}

template <typename T>
void CheckBackward(const BackwardSpec& spec, double lo, double hi, uint64_t seed) {
  const std::string what = TypeName<T>() + (spec.layer_norm ? " LayerNorm" : " RmsNorm") +
                           "Backward" + Shape(spec.rows, spec.cols) +
                           (spec.with_dbeta ? "" : " no dbeta") +
                           (spec.misaligned ? " misaligned" : "");
  const BackwardInputs in = MakeBackwardInputs<T>(spec, lo, hi, seed);
  const int64_t n = spec.rows * spec.cols;
  const std::vector<double> x = RoundTripToDouble<T>(in.x);
  const std::vector<double> dy = RoundTripToDouble<T>(in.dy);
  const std::vector<double> gamma = RoundTripToDouble<T>(in.gamma);
  const std::vector<double> mean(in.mean.begin(), in.mean.end());
  const std::vector<double> rstd(in.rstd.begin(), in.rstd.end());
  std::vector<double> dx(n);
  std::vector<double> dgamma(in.dgamma.begin(), in.dgamma.end());
  std::vector<double> dbeta(in.dbeta.begin(), in.dbeta.end());
  if (spec.layer_norm) {
    ref::LayerNormBackward<double>(x.data(), gamma.data(), mean.data(), rstd.data(), dy.data(),
                                   dx.data(), dgamma.data(),
                                   spec.with_dbeta ? dbeta.data() : nullptr, spec.rows, spec.cols);
  } else {
    ref::RmsNormBackward<double>(x.data(), gamma.data(), rstd.data(), dy.data(), dx.data(),
                                 dgamma.data(), spec.rows, spec.cols);
  }
  double term_scale = 0.0;  // the largest rstd * |dy * gamma|: the size of dx's terms
  for (int64_t r = 0; r < spec.rows; ++r) {
    for (int64_t c = 0; c < spec.cols; ++c) {
      term_scale = std::max(term_scale, rstd[r] * std::abs(dy[r * spec.cols + c] * gamma[c]));
    }
  }

  const BackwardResult<T> got = RunBackward<T>(spec, in);
  ExpectCloseScaled(ToFloat(got.dx), dx, OutTol<T>(), term_scale, what + " dx");
  ExpectClose(got.dgamma, dgamma, kFp32Tol, what + " dgamma");
  if (spec.layer_norm && spec.with_dbeta) {
    ExpectClose(got.dbeta, dbeta, kFp32Tol, what + " dbeta");
  } else {  // untouched
    EXPECT_TRUE(BitwiseEqual(got.dbeta, in.dbeta)) << what << ": dbeta was written";
  }
}

template <typename T>
void BackwardSweep(bool layer_norm) {
  uint64_t seed = 500;
  for (int64_t cols : kCols) {
    for (int64_t rows : kRows) {
      BackwardSpec spec;
      spec.layer_norm = layer_norm;
      spec.rows = rows;
      spec.cols = cols;
      spec.with_dbeta = (cols + rows) % 2 == 0;
      CheckBackward<T>(spec, -1.0, 1.0, ++seed);
    }
  }
  // Several rows per row group (the dgamma partials then sum rows in registers, or in the
  // workspace for the wide kernel), warp, block and wide kernels, vector and element-wise.
  const int64_t shapes[][2] = {{3001, 33},   {4099, 160},  {517, 1000}, {700, 4097},
                               {1000, 8192}, {300, 20000}, {150, 20003}};
  for (const auto& shape : shapes) {
    BackwardSpec spec;
    spec.layer_norm = layer_norm;
    spec.rows = shape[0];
    spec.cols = shape[1];
    CheckBackward<T>(spec, -1.0, 1.0, ++seed);
  }
}

TEST(CudaNorm, LayerNormBackwardFp32) {
  SLUICE_SKIP_WITHOUT_GPU();
  BackwardSweep<float>(true);
}
TEST(CudaNorm, LayerNormBackwardBf16) {
  SLUICE_SKIP_WITHOUT_GPU();
  BackwardSweep<__nv_bfloat16>(true);
}
TEST(CudaNorm, RmsNormBackwardFp32) {
  SLUICE_SKIP_WITHOUT_GPU();
  BackwardSweep<float>(false);
}
TEST(CudaNorm, RmsNormBackwardBf16) {
  SLUICE_SKIP_WITHOUT_GPU();
  BackwardSweep<__nv_bfloat16>(false);
}

// ---------------------------------------------------------------------------------------------
// Large magnitudes: activations of size 1e4 with an offset (LayerNorm's mean), where a one-pass
// variance would cancel catastrophically and fp32 sums of squares reach 1e12.

template <typename T>
void LargeMagnitudes() {
  uint64_t seed = 900;
  for (int64_t cols : {33, 4097, 8192, 20000}) {
    for (bool layer_norm : {true, false}) {
      for (bool fused : {false, true}) {
        ForwardSpec spec;
        spec.layer_norm = layer_norm;
        spec.fused = fused;
        spec.rows = 7;
        spec.cols = cols;
        CheckForward<T>(spec, -1e4 + 3e3, 1e4 + 3e3, ++seed);
      }
      BackwardSpec spec;
      spec.layer_norm = layer_norm;
      spec.rows = 7;
      spec.cols = cols;
      CheckBackward<T>(spec, -1e4 + 3e3, 1e4 + 3e3, ++seed);
    }
  }
}

TEST(CudaNorm, LargeMagnitudesFp32) {
  SLUICE_SKIP_WITHOUT_GPU();
  LargeMagnitudes<float>();
}
TEST(CudaNorm, LargeMagnitudesBf16) {
  SLUICE_SKIP_WITHOUT_GPU();
  LargeMagnitudes<__nv_bfloat16>();
}

// ---------------------------------------------------------------------------------------------
// Determinism: the same inputs give the same bits, run to run, whether the rows are 16-byte
// aligned (vector loads) or not (element-wise loads), and in place or not.

template <typename T>
void ExpectSameForward(const ForwardResult<T>& a, const ForwardResult<T>& b,
                       const std::string& what) {
  EXPECT_TRUE(BitwiseEqual(a.y, b.y)) << what << ": y differs";
  EXPECT_TRUE(BitwiseEqual(a.r, b.r)) << what << ": r differs";
  EXPECT_TRUE(BitwiseEqual(a.mean, b.mean)) << what << ": mean differs";
  EXPECT_TRUE(BitwiseEqual(a.rstd, b.rstd)) << what << ": rstd differs";
}
template <typename T>
void ExpectSameBackward(const BackwardResult<T>& a, const BackwardResult<T>& b,
                        const std::string& what) {
  EXPECT_TRUE(BitwiseEqual(a.dx, b.dx)) << what << ": dx differs";
  EXPECT_TRUE(BitwiseEqual(a.dgamma, b.dgamma)) << what << ": dgamma differs";
  EXPECT_TRUE(BitwiseEqual(a.dbeta, b.dbeta)) << what << ": dbeta differs";
}

template <typename T>
void Determinism() {
  uint64_t seed = 1300;
  const int64_t shapes[][2] = {{64, 160}, {517, 1000}, {1000, 8192}, {40, 20000}};
  for (const auto& shape : shapes) {
    for (bool layer_norm : {true, false}) {
      for (bool fused : {false, true}) {
        ForwardSpec spec;
        spec.layer_norm = layer_norm;
        spec.fused = fused;
        spec.rows = shape[0];
        spec.cols = shape[1];
        const std::string what = TypeName<T>() + " forward" + Shape(spec.rows, spec.cols) +
                                 (layer_norm ? " LayerNorm" : " RmsNorm") + (fused ? " fused" : "");
        const ForwardInputs in = MakeForwardInputs(spec, -2.0, 2.0, ++seed);
        const ForwardResult<T> first = RunForward<T>(spec, in);
        ExpectSameForward(first, RunForward<T>(spec, in), what + " rerun");
        ForwardSpec other = spec;
        other.misaligned = true;
        ExpectSameForward(first, RunForward<T>(other, in), what + " misaligned");
        other = spec;
        other.in_place = true;
        ExpectSameForward(first, RunForward<T>(other, in), what + " in place");
      }
      BackwardSpec spec;
      spec.layer_norm = layer_norm;
      spec.rows = shape[0];
      spec.cols = shape[1];
      const std::string what = TypeName<T>() + " backward" + Shape(spec.rows, spec.cols) +
                               (layer_norm ? " LayerNorm" : " RmsNorm");
      const BackwardInputs in = MakeBackwardInputs<T>(spec, -2.0, 2.0, ++seed);
      const BackwardResult<T> first = RunBackward<T>(spec, in);
      ExpectSameBackward(first, RunBackward<T>(spec, in), what + " rerun");
      BackwardSpec other = spec;
      other.misaligned = true;
      ExpectSameBackward(first, RunBackward<T>(other, in), what + " misaligned");
      other = spec;
      other.in_place = true;
      ExpectSameBackward(first, RunBackward<T>(other, in), what + " in place");
    }
  }
}

TEST(CudaNorm, DeterministicFp32) {
  SLUICE_SKIP_WITHOUT_GPU();
  Determinism<float>();
}
TEST(CudaNorm, DeterministicBf16) {
  SLUICE_SKIP_WITHOUT_GPU();
  Determinism<__nv_bfloat16>();
}

// ---------------------------------------------------------------------------------------------
// Arguments

TEST(CudaNorm, RejectsBadArguments) {
  SLUICE_SKIP_WITHOUT_GPU();
  using Code = LaunchStatus::Code;
  TestStream stream;
  DeviceArray<float> x(8 * 16), gamma(16), y(8 * 16), stats(8), dgamma(16);
  DeviceArray<uint8_t> workspace(NormBackwardWorkspaceBytes(8, 16));
  float* none = nullptr;

  EXPECT_EQ(LayerNormForward<float>(none, gamma.data(), nullptr, y.data(), stats.data(),
                                    stats.data(), 8, 16, kEps, stream.get())
                .code(),
            Code::kInvalidArgument);
  EXPECT_EQ(RmsNormForward<float>(x.data(), none, y.data(), stats.data(), 8, 16, kEps, stream.get())
                .code(),
            Code::kInvalidArgument);
  EXPECT_EQ(AddRmsNormForward<float>(x.data(), x.data(), none, gamma.data(), y.data(), stats.data(),
                                     8, 16, kEps, stream.get())
                .code(),
            Code::kInvalidArgument);
  EXPECT_EQ(AddLayerNormForward<float>(x.data(), none, y.data(), gamma.data(), nullptr, y.data(),
                                       stats.data(), stats.data(), 8, 16, kEps, stream.get())
                .code(),
            Code::kInvalidArgument);
  EXPECT_EQ(LayerNormBackward<float>(x.data(), gamma.data(), stats.data(), stats.data(), x.data(),
                                     y.data(), none, nullptr, 8, 16, workspace.data(),
                                     workspace.size(), stream.get())
                .code(),
            Code::kInvalidArgument);
  // A workspace one byte short.
  EXPECT_EQ(RmsNormBackward<float>(x.data(), gamma.data(), stats.data(), x.data(), y.data(),
                                   dgamma.data(), 8, 16, workspace.data(), workspace.size() - 1,
                                   stream.get())
                .code(),
            Code::kInvalidArgument);
  EXPECT_EQ(RmsNormBackward<float>(x.data(), gamma.data(), stats.data(), x.data(), y.data(),
                                   dgamma.data(), 8, 16, nullptr, workspace.size(), stream.get())
                .code(),
            Code::kInvalidArgument);
  // Negative sizes, and rows without columns.
  EXPECT_EQ(RmsNormForward<float>(x.data(), gamma.data(), y.data(), stats.data(), -1, 16, kEps,
                                  stream.get())
                .code(),
            Code::kInvalidArgument);
  EXPECT_EQ(RmsNormForward<float>(x.data(), gamma.data(), y.data(), stats.data(), 8, 0, kEps,
                                  stream.get())
                .code(),
            Code::kInvalidArgument);
  // No rows: a no-op that touches nothing, null pointers included.
  EXPECT_TRUE(LayerNormForward<__nv_bfloat16>(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                              0, 16, kEps, stream.get())
                  .ok());
  EXPECT_TRUE(LayerNormBackward<__nv_bfloat16>(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                               nullptr, nullptr, 0, 16, nullptr, 0, stream.get())
                  .ok());
  EXPECT_EQ(NormBackwardWorkspaceBytes(0, 16), 0u);
  EXPECT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
}

}  // namespace
}  // namespace sluice::kernels::cuda
