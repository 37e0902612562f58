// The CPU kernels of the dense ops (elementwise, linear, norms, activations, RoPE) against the
// fp64 reference, with the fp32 reference held to the same tolerance. Declared tolerances, in
// units of the output's largest magnitude (testing::ExpectClose):
//   elementwise and RoPE: 1e-6 (one or two roundings per element);
//   activations: 2e-6 (tanh / exp in fp32);
//   norms and linear: 1e-5 (fp32 sums over up to a few hundred terms; GEMM blocking changes the
//   order of the sums, not their size).
// Parameter gradients start from random values, so the tests see that they accumulate.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/cpu/ops_activation.h"
#include "kernels/cpu/ops_convert.h"
#include "kernels/cpu/ops_elementwise.h"
#include "kernels/cpu/ops_linear.h"
#include "kernels/cpu/ops_norm.h"
#include "kernels/cpu/ops_rope.h"
#include "kernels/ref/ops_activation.h"
#include "kernels/ref/ops_convert.h"
#include "kernels/ref/ops_elementwise.h"
#include "kernels/ref/ops_linear.h"
#include "kernels/ref/ops_norm.h"
#include "kernels/ref/ops_rope.h"
#include "tests/ops/backend_compare.h"

namespace sluice::kernels {
namespace {

using testing::AsDouble;
using testing::Cast;
using testing::CompareBackends;
using testing::Outputs;
using testing::Rng;

constexpr double kElementwiseTol = 1e-6;
using testing::kActivationTol;
using testing::kReductionTol;

TEST(CpuVsRef, AddAccumulateBias) {
  Rng rng(100);
  const int64_t rows = 300, cols = 129;  // above the parallel threshold
  const auto a = rng.Uniform(rows * cols), b = rng.Uniform(rows * cols);
  const auto bias = rng.Uniform(cols), dbias0 = rng.Uniform(cols);
  CompareBackends(
      [&](auto backend) {
        using T = typename decltype(backend)::T;
        std::vector<T> ta = Cast<T>(a), tb = Cast<T>(b), y(rows * cols), tbias = Cast<T>(bias);
        std::vector<T> dbias = Cast<T>(dbias0);
        SLUICE_OPS_CALL(backend, Add, ta.data(), tb.data(), y.data(), rows * cols);
        SLUICE_OPS_CALL(backend, BiasAddForward, tbias.data(), y.data(), rows, cols);
        SLUICE_OPS_CALL(backend, Accumulate, ta.data(), tb.data(), rows * cols);
        SLUICE_OPS_CALL(backend, BiasAddBackward, y.data(), dbias.data(), rows, cols);
        return Outputs{
            {"y", AsDouble(y)}, {"accumulated", AsDouble(tb)}, {"dbias", AsDouble(dbias)}};
      },
      kElementwiseTol * 10, "elementwise");  // dbias sums 300 rows
}

struct LinearCase {
  int64_t rows, in, out;
  bool bias;
};

class CpuLinear : public ::testing::TestWithParam<LinearCase> {};

TEST_P(CpuLinear, ForwardAndBackward) {
  const LinearCase c = GetParam();
  Rng rng(101 + c.rows);
  const auto x = rng.Uniform(c.rows * c.in), w = rng.Uniform(c.out * c.in);
  const auto b = rng.Uniform(c.out), dy = rng.Uniform(c.rows * c.out);
  const auto dw0 = rng.Uniform(c.out * c.in), db0 = rng.Uniform(c.out);
  testing::ForEachGemmBackend([&](const std::string& gemm) {
    CompareBackends(
        [&](auto backend) {
          using T = typename decltype(backend)::T;
          std::vector<T> tx = Cast<T>(x), tw = Cast<T>(w), tb = Cast<T>(b), tdy = Cast<T>(dy);
          std::vector<T> y(c.rows * c.out), dx(c.rows * c.in, T(9)), dw = Cast<T>(dw0),
                                                                     db = Cast<T>(db0);
          const T* bias = c.bias ? tb.data() : nullptr;
          SLUICE_OPS_CALL(backend, LinearForward, tx.data(), tw.data(), bias, y.data(), c.rows,
                          c.in, c.out);
          SLUICE_OPS_CALL(backend, LinearBackward, tx.data(), tw.data(), tdy.data(), dx.data(),
                          dw.data(), c.bias ? db.data() : nullptr, c.rows, c.in, c.out);
          return Outputs{
              {"y", AsDouble(y)}, {"dx", AsDouble(dx)}, {"dw", AsDouble(dw)}, {"db", AsDouble(db)}};
        },
        kReductionTol, "linear (" + gemm + ")");
  });
}

INSTANTIATE_TEST_SUITE_P(Shapes, CpuLinear,
                         ::testing::Values(LinearCase{21, 37, 29, true},
                                           LinearCase{21, 37, 29, false},
                                           LinearCase{67, 129, 97, true},
                                           LinearCase{1, 5, 3, true}));

TEST(CpuVsRef, LinearSkipsNullGradients) {
  Rng rng(102);
  const int64_t rows = 3, in = 4, out = 5;
  const auto x = rng.Uniform(rows * in), w = rng.Uniform(out * in), dy = rng.Uniform(rows * out);
  std::vector<float> dx(rows * in), dw(out * in, 0.0f);
  cpu::LinearBackward(x.data(), w.data(), dy.data(), nullptr, dw.data(), nullptr, rows, in, out);
  std::vector<double> want_dw(out * in, 0.0);
  ref::LinearBackward(testing::ToDouble(x).data(), testing::ToDouble(w).data(),
                      testing::ToDouble(dy).data(), static_cast<double*>(nullptr), want_dw.data(),
                      static_cast<double*>(nullptr), rows, in, out);
  testing::ExpectClose(dw, want_dw, kReductionTol, "dw only");
  cpu::LinearBackward(x.data(), w.data(), dy.data(), dx.data(), nullptr, nullptr, rows, in, out);
  std::vector<double> want_dx(rows * in);
  ref::LinearBackward(testing::ToDouble(x).data(), testing::ToDouble(w).data(),
                      testing::ToDouble(dy).data(), want_dx.data(), static_cast<double*>(nullptr),
                      static_cast<double*>(nullptr), rows, in, out);
  testing::ExpectClose(dx, want_dx, kReductionTol, "dx only");
}

// The bf16-weight variants equal the fp32 op on the widened weights: the CPU one within the
// GEMM tolerance of the fp64 reference, the reference one exactly.
TEST(CpuVsRef, LinearWithBf16Weight) {
  Rng rng(103);
  const int64_t rows = 21, in = 37, out = 29;
  const auto x = rng.Uniform(rows * in), w = rng.Uniform(out * in), b = rng.Uniform(out);
  const auto dy = rng.Uniform(rows * out);
  std::vector<uint16_t> w16(out * in), b16(out);
  ref::ConvertF32ToBf16(w.data(), w16.data(), out * in);
  ref::ConvertF32ToBf16(b.data(), b16.data(), out);
  std::vector<float> w_wide(out * in), b_wide(out);
  ref::ConvertBf16ToF32(w16.data(), w_wide.data(), out * in);
  ref::ConvertBf16ToF32(b16.data(), b_wide.data(), out);

  std::vector<double> want_y(rows * out), want_dx(rows * in), want_dw(out * in, 0.0),
      want_db(out, 0.0);
  ref::LinearForward(testing::ToDouble(x).data(), testing::ToDouble(w_wide).data(),
                     testing::ToDouble(b_wide).data(), want_y.data(), rows, in, out);
  ref::LinearBackward(testing::ToDouble(x).data(), testing::ToDouble(w_wide).data(),
                      testing::ToDouble(dy).data(), want_dx.data(), want_dw.data(), want_db.data(),
                      rows, in, out);

  std::vector<float> workspace(LinearBf16WorkspaceFloats(in, out));
  std::vector<float> y(rows * out), dx(rows * in), dw(out * in, 0.0f), db(out, 0.0f);
  cpu::LinearForwardBf16Weight(x.data(), w16.data(), b16.data(), y.data(), rows, in, out,
                               workspace.data());
  cpu::LinearBackwardBf16Weight(x.data(), w16.data(), dy.data(), dx.data(), dw.data(), db.data(),
                                rows, in, out, workspace.data());
  testing::ExpectClose(y, want_y, kReductionTol, "bf16 linear cpu y");
  testing::ExpectClose(dx, want_dx, kReductionTol, "bf16 linear cpu dx");
  testing::ExpectClose(dw, want_dw, kReductionTol, "bf16 linear cpu dw");
  testing::ExpectClose(db, want_db, kReductionTol, "bf16 linear cpu db");

  std::vector<float> ref_y(rows * out), ref_y32(rows * out), ref_dx(rows * in), ref_dx32(rows * in);
  ref::LinearForwardBf16Weight(x.data(), w16.data(), b16.data(), ref_y.data(), rows, in, out,
                               workspace.data());
  ref::LinearForward(x.data(), w_wide.data(), b_wide.data(), ref_y32.data(), rows, in, out);
  EXPECT_EQ(ref_y, ref_y32);
  ref::LinearBackwardBf16Weight(x.data(), w16.data(), dy.data(), ref_dx.data(), nullptr, nullptr,
                                rows, in, out, workspace.data());
  ref::LinearBackward(x.data(), w_wide.data(), dy.data(), ref_dx32.data(),
                      static_cast<float*>(nullptr), static_cast<float*>(nullptr), rows, in, out);
  EXPECT_EQ(ref_dx, ref_dx32);
}

struct NormCase {
  int64_t rows, cols;
};

class CpuNorm : public ::testing::TestWithParam<NormCase> {};

TEST_P(CpuNorm, LayerNormForwardAndBackward) {
  const auto [rows, cols] = GetParam();
  Rng rng(104 + rows);
  const auto x = rng.Uniform(rows * cols, -3, 3), gamma = rng.Uniform(cols, 0.5, 1.5);
  const auto beta = rng.Uniform(cols), dy = rng.Uniform(rows * cols);
  const auto dgamma0 = rng.Uniform(cols), dbeta0 = rng.Uniform(cols);
  CompareBackends(
      [&](auto backend) {
        using T = typename decltype(backend)::T;
        std::vector<T> tx = Cast<T>(x), tg = Cast<T>(gamma), tb = Cast<T>(beta), tdy = Cast<T>(dy);
        std::vector<T> y(rows * cols), mean(rows), rstd(rows), dx(rows * cols);
        std::vector<T> dgamma = Cast<T>(dgamma0), dbeta = Cast<T>(dbeta0);
        SLUICE_OPS_CALL(backend, LayerNormForward, tx.data(), tg.data(), tb.data(), y.data(),
                        mean.data(), rstd.data(), rows, cols, 1e-5f);
        SLUICE_OPS_CALL(backend, LayerNormBackward, tx.data(), tg.data(), mean.data(), rstd.data(),
                        tdy.data(), dx.data(), dgamma.data(), dbeta.data(), rows, cols);
        return Outputs{{"y", AsDouble(y)},           {"mean", AsDouble(mean)},
                       {"rstd", AsDouble(rstd)},     {"dx", AsDouble(dx)},
                       {"dgamma", AsDouble(dgamma)}, {"dbeta", AsDouble(dbeta)}};
      },
      kReductionTol, "layernorm");
}

TEST_P(CpuNorm, RmsNormForwardAndBackward) {
  const auto [rows, cols] = GetParam();
  Rng rng(105 + rows);
  const auto x = rng.Uniform(rows * cols, -3, 3), gamma = rng.Uniform(cols, 0.5, 1.5);
  const auto dy = rng.Uniform(rows * cols), dgamma0 = rng.Uniform(cols);
  CompareBackends(
      [&](auto backend) {
        using T = typename decltype(backend)::T;
        std::vector<T> tx = Cast<T>(x), tg = Cast<T>(gamma), tdy = Cast<T>(dy);
        std::vector<T> y(rows * cols), rstd(rows), dx(rows * cols), dgamma = Cast<T>(dgamma0);
        SLUICE_OPS_CALL(backend, RmsNormForward, tx.data(), tg.data(), y.data(), rstd.data(), rows,
                        cols, 1e-6f);
        SLUICE_OPS_CALL(backend, RmsNormBackward, tx.data(), tg.data(), rstd.data(), tdy.data(),
                        dx.data(), dgamma.data(), rows, cols);
        return Outputs{{"y", AsDouble(y)},
                       {"rstd", AsDouble(rstd)},
                       {"dx", AsDouble(dx)},
                       {"dgamma", AsDouble(dgamma)}};
      },
      kReductionTol, "rmsnorm");
}

INSTANTIATE_TEST_SUITE_P(Shapes, CpuNorm,
                         ::testing::Values(NormCase{21, 37}, NormCase{300, 129}, NormCase{5, 700}));

TEST(CpuVsRef, Activations) {
  Rng rng(106);
  const int64_t n = 40001;  // above the parallel threshold, odd
  const auto x = rng.Uniform(n, -8, 8), up = rng.Uniform(n, -2, 2), dy = rng.Uniform(n);
  CompareBackends(
      [&](auto backend) {
        using T = typename decltype(backend)::T;
        std::vector<T> tx = Cast<T>(x), tup = Cast<T>(up), tdy = Cast<T>(dy);
        std::vector<T> gelu(n), dgelu(n), swiglu(n), dgate(n), dup(n);
        SLUICE_OPS_CALL(backend, GeluForward, tx.data(), gelu.data(), n);
        SLUICE_OPS_CALL(backend, GeluBackward, tx.data(), tdy.data(), dgelu.data(), n);
        SLUICE_OPS_CALL(backend, SwiGluForward, tx.data(), tup.data(), swiglu.data(), n);
        SLUICE_OPS_CALL(backend, SwiGluBackward, tx.data(), tup.data(), tdy.data(), dgate.data(),
                        dup.data(), n);
        return Outputs{{"gelu", AsDouble(gelu)},
                       {"dgelu", AsDouble(dgelu)},
                       {"swiglu", AsDouble(swiglu)},
                       {"dgate", AsDouble(dgate)},
                       {"dup", AsDouble(dup)}};
      },
      kActivationTol, "activations");
}

TEST(CpuVsRef, Rope) {
  Rng rng(107);
  const int64_t batch = 3, seq = 37, heads = 5, dim = 12;  // 6660 elements
  const int64_t n = batch * seq * heads * dim;
  const auto x = rng.Uniform(n), dy = rng.Uniform(n);
  for (float theta : {10000.0f, 500000.0f}) {
    CompareBackends(
        [&](auto backend) {
          using T = typename decltype(backend)::T;
          std::vector<T> y = Cast<T>(x), dx = Cast<T>(dy);  // in place, as the model calls it
          SLUICE_OPS_CALL(backend, RopeForward, y.data(), y.data(), batch, seq, heads, dim, theta);
          SLUICE_OPS_CALL(backend, RopeBackward, dx.data(), dx.data(), batch, seq, heads, dim,
                          theta);
          return Outputs{{"y", AsDouble(y)}, {"dx", AsDouble(dx)}};
        },
        kElementwiseTol, "rope theta " + std::to_string(theta));
  }
}

TEST(CpuVsRef, RopeOutOfPlaceEqualsInPlace) {
  Rng rng(108);
  const int64_t n = 2 * 300 * 4 * 16;  // above the parallel threshold
  const auto x = rng.Uniform(n);
  std::vector<float> out(n), in_place = x;
  cpu::RopeForward(x.data(), out.data(), 2, 300, 4, 16, 10000.0f);
  cpu::RopeForward(in_place.data(), in_place.data(), 2, 300, 4, 16, 10000.0f);
  EXPECT_EQ(out, in_place);
}

// Results of the CPU kernels do not depend on the number of threads: every reduction sums in a
// fixed order (the loss curve regression guard needs bitwise reproducibility).
TEST(CpuDeterminism, NormsAndBiasGradientsAreThreadCountInvariant) {
  Rng rng(109);
  const int64_t rows = 400, cols = 300;
  const auto x = rng.Uniform(rows * cols, -3, 3), gamma = rng.Uniform(cols, 0.5, 1.5);
  const auto beta = rng.Uniform(cols), dy = rng.Uniform(rows * cols);
  auto run = [&](int threads) {
    std::vector<float> y(rows * cols), mean(rows), rstd(rows), dx(rows * cols);
    std::vector<float> dgamma(cols, 0.0f), dbeta(cols, 0.0f), dbias(cols, 0.0f);
    cpu::LayerNormForward(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(),
                          rows, cols, 1e-5f, threads);
    cpu::LayerNormBackward(x.data(), gamma.data(), mean.data(), rstd.data(), dy.data(), dx.data(),
                           dgamma.data(), dbeta.data(), rows, cols, threads);
    cpu::BiasAddBackward(dy.data(), dbias.data(), rows, cols, threads);
    return std::vector<std::vector<float>>{y, dx, dgamma, dbeta, dbias};
  };
  const auto one = run(1);
  EXPECT_EQ(one, run(2));
  EXPECT_EQ(one, run(3));
}

}  // namespace
}  // namespace sluice::kernels
