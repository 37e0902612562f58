// GemmFixed (kernels/cpu/gemm_fixed.h) keeps its contract: every variant (scalar, AVX2,
// AVX-512) and every thread count gives the bits of the documented definition -- an FMA chain
// over k in order from +0, then alpha * s, then (beta * C) + t -- computed here by a plain loop,
// on odd shapes, all four transposes, padded leading dimensions and several column blocks. And
// it computes the product: within 1e-5 (of the output's largest magnitude, testing::ExpectClose)
// of the fp64 reference linear layer.
#include "kernels/cpu/gemm_fixed.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm.h"
#include "kernels/ref/ops_linear.h"
#include "tests/ops/ops_test_util.h"

namespace sluice::kernels {
namespace {

using testing::Rng;

constexpr double kGemmTol = 1e-5;

struct GemmCase {
  bool trans_a, trans_b;
  int64_t m, n, k;
  float alpha, beta;
  int64_t pad;  // added to every leading dimension: operands read in place from wider rows
};

std::string Describe(const GemmCase& c) {
  return std::string(c.trans_a ? "T" : "N") + (c.trans_b ? "T" : "N") + " m" + std::to_string(c.m) +
         " n" + std::to_string(c.n) + " k" + std::to_string(c.k) + " alpha " +
         std::to_string(c.alpha) + " beta " + std::to_string(c.beta) + " pad " +
         std::to_string(c.pad);
}

// The operands of one case, random, with C holding random values to be scaled by beta (and NaN
// where beta is 0: BLAS semantics say C is then not read).
struct Operands {
  int64_t lda, ldb, ldc;
  std::vector<float> a, b, c;

  Operands(const GemmCase& g, uint64_t seed) {
    Rng rng(seed);
    lda = (g.trans_a ? g.m : g.k) + g.pad;
    ldb = (g.trans_b ? g.k : g.n) + g.pad;
    ldc = g.n + g.pad;
    a = rng.Uniform((g.trans_a ? g.k : g.m) * lda);
    b = rng.Uniform((g.trans_b ? g.n : g.k) * ldb);
    c = rng.Uniform(g.m * ldc);
    if (g.beta == 0.0f) {
      for (int64_t i = 0; i < g.m; ++i) {
        for (int64_t j = 0; j < g.n; ++j) c[i * ldc + j] = std::numeric_limits<float>::quiet_NaN();
      }
    }
  }
};

// gemm_fixed.h's definition, written out. This file has no FMA target flags, so the compiler
// cannot contract the epilogue; std::fma is exact-rounded everywhere.
std::vector<float> Definition(const GemmCase& g, const Operands& o) {
  std::vector<float> c = o.c;
  for (int64_t i = 0; i < g.m; ++i) {
    for (int64_t j = 0; j < g.n; ++j) {
      float s = 0.0f;
      for (int64_t p = 0; p < g.k; ++p) {
        const float a = g.trans_a ? o.a[p * o.lda + i] : o.a[i * o.lda + p];
        const float b = g.trans_b ? o.b[j * o.ldb + p] : o.b[p * o.ldb + j];
        s = std::fma(a, b, s);
      }
      const float t = g.alpha * s;
      float& out = c[i * o.ldc + j];
      if (g.beta == 0.0f) {
        out = t;
      } else {
        const float scaled = g.beta * out;
        out = scaled + t;
      }
    }
  }
  return c;
}

std::vector<float> RunGemmFixed(const GemmCase& g, const Operands& o, int threads) {
  std::vector<float> c = o.c;
  cpu::GemmFixed(g.trans_a, g.trans_b, g.m, g.n, g.k, g.alpha, o.a.data(), o.lda, o.b.data(), o.ldb,
                 g.beta, c.data(), o.ldc, threads);
  return c;
}

std::string Bits(float value) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.9g (%a)", value, value);
  return text;
}

// Bitwise, NaN included (the padding columns of C keep their NaN or values untouched).
void ExpectSameBits(const std::vector<float>& got, const std::vector<float>& want,
                    const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      FAIL() << what << ": element " << i << " is " << Bits(got[i]) << ", the definition gives "
             << Bits(want[i]);
    }
  }
}

// The cases: every combination of the odd sizes for each transpose pair, cycling through the
// alpha/beta pairs the ops use (1/0 forward, 1/1 accumulate, a scale) and a general one, with
// and without padded leading dimensions; then shapes that take several column blocks (large k)
// and the empty sum (k = 0).
std::vector<GemmCase> Cases() {
  const int64_t sizes[] = {1, 3, 17, 64, 161};
  const float alpha_beta[][2] = {{1.0f, 0.0f}, {1.0f, 1.0f}, {0.125f, 0.0f}, {-1.3f, 0.7f}};
  std::vector<GemmCase> cases;
  int turn = 0;
  for (int t = 0; t < 4; ++t) {
    for (int64_t m : sizes) {
      for (int64_t n : sizes) {
        for (int64_t k : sizes) {
          const float* ab = alpha_beta[turn % 4];
          cases.push_back({t / 2 == 1, t % 2 == 1, m, n, k, ab[0], ab[1], turn % 3 == 0 ? 5 : 0});
          ++turn;
        }
      }
    }
  }
  // k * panel width above the packed-B budget: several column blocks, repacked between them.
  cases.push_back({false, true, 37, 300, 1030, 1.0f, 0.0f, 0});
  cases.push_back({true, false, 29, 333, 2049, 0.5f, 1.0f, 3});
  cases.push_back({false, false, 13, 70, 0, 1.0f, 0.0f, 0});
  cases.push_back({true, true, 13, 70, 0, -2.0f, 0.5f, 1});
  return cases;
}

struct IsaCase {
  Isa isa;
  bool (*available)(const CpuFeatures&);
};

void PrintTo(const IsaCase& c, std::ostream* os) { *os << IsaName(c.isa); }

class GemmFixedVariants : public ::testing::TestWithParam<IsaCase> {
 protected:
  void TearDown() override { ClearForcedIsa(); }
};

TEST_P(GemmFixedVariants, GiveTheDefinitionsBitsForAnyThreadCount) {
  const IsaCase variant = GetParam();
  if (!variant.available(DetectCpuFeatures())) {
    GTEST_SKIP() << "this CPU has no " << IsaName(variant.isa);
  }
  ForceIsa(variant.isa);
  ASSERT_EQ(cpu::GemmFixedIsa(), variant.isa);
  uint64_t seed = 300;
  for (const GemmCase& g : Cases()) {
    const Operands o(g, ++seed);
    const std::vector<float> want = Definition(g, o);
    for (int threads : {1, 2}) {
      ExpectSameBits(RunGemmFixed(g, o, threads), want,
                     std::string(IsaName(variant.isa)) + ", " + std::to_string(threads) +
                         " thread(s), " + Describe(g));
      if (HasFatalFailure()) return;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Isas, GemmFixedVariants,
    ::testing::Values(IsaCase{Isa::kScalar, [](const CpuFeatures&) { return true; }},
                      IsaCase{Isa::kAvx2, [](const CpuFeatures& f) { return f.avx2; }},
                      IsaCase{Isa::kAvx512, [](const CpuFeatures& f) { return f.avx512; }}),
    [](const ::testing::TestParamInfo<IsaCase>& info) {
      return std::string(IsaName(info.param.isa));
    });

// The three products of the linear layer through GemmFixed, against the fp64 reference layer.
TEST(GemmFixed, ComputesTheLinearLayerWithinTolerance) {
  Rng rng(400);
  const int64_t rows = 67, in = 161, out = 97;
  const auto x = rng.Uniform(rows * in), w = rng.Uniform(out * in), dy = rng.Uniform(rows * out);
  const auto dw0 = rng.Uniform(out * in);
  std::vector<double> want_y(rows * out), want_dx(rows * in), want_dw(dw0.begin(), dw0.end());
  ref::LinearForward<double>(testing::ToDouble(x).data(), testing::ToDouble(w).data(), nullptr,
                             want_y.data(), rows, in, out);
  ref::LinearBackward<double>(testing::ToDouble(x).data(), testing::ToDouble(w).data(),
                              testing::ToDouble(dy).data(), want_dx.data(), want_dw.data(), nullptr,
                              rows, in, out);
  std::vector<float> y(rows * out), dx(rows * in), dw = dw0;
  cpu::GemmFixed(false, true, rows, out, in, 1.0f, x.data(), in, w.data(), in, 0.0f, y.data(), out,
                 2);
  cpu::GemmFixed(false, false, rows, in, out, 1.0f, dy.data(), out, w.data(), in, 0.0f, dx.data(),
                 in, 2);
  cpu::GemmFixed(true, false, out, in, rows, 1.0f, dy.data(), out, x.data(), in, 1.0f, dw.data(),
                 in, 2);
  testing::ExpectClose(y, want_y, kGemmTol, "y = x wT");
  testing::ExpectClose(dx, want_dx, kGemmTol, "dx = dy w");
  testing::ExpectClose(dw, want_dw, kGemmTol, "dw += dyT x");
}

// A process starts on device.cpu_gemm's default, GemmFixed, so that tools and benchmarks that
// never apply the setting run the GEMM training runs (every test here restores the backend).
TEST(GemmBackendTest, TheProcessStartsOnTheDeterministicBackend) {
  EXPECT_EQ(cpu::CurrentGemmBackend(), cpu::GemmBackend::kDeterministic);
}

// Gemm follows the process-wide backend; both give the product (to tolerance), only the
// deterministic one bit for bit what GemmFixed gives.
TEST(GemmBackendTest, GemmRoutesToTheCurrentBackend) {
  const cpu::GemmBackend saved = cpu::CurrentGemmBackend();
  const GemmCase g{false, true, 40, 33, 70, 1.0f, 1.0f, 0};
  const Operands o(g, 500);
  const std::vector<float> fixed = RunGemmFixed(g, o, 1);
  for (cpu::GemmBackend backend : {cpu::GemmBackend::kBlas, cpu::GemmBackend::kDeterministic}) {
    cpu::SetGemmBackend(backend);
    EXPECT_EQ(cpu::CurrentGemmBackend(), backend);
    std::vector<float> c = o.c;
    cpu::Gemm(g.trans_a, g.trans_b, g.m, g.n, g.k, g.alpha, o.a.data(), o.lda, o.b.data(), o.ldb,
              g.beta, c.data(), o.ldc, 1);
    const std::string name(cpu::GemmBackendName(backend));
    testing::ExpectClose(c, std::vector<double>(fixed.begin(), fixed.end()), kGemmTol, name);
    if (backend == cpu::GemmBackend::kDeterministic) ExpectSameBits(c, fixed, name);
    EXPECT_EQ(cpu::GemmBackendFromName(name), backend);
    EXPECT_EQ(cpu::DescribeGemmKernel().library,
              backend == cpu::GemmBackend::kDeterministic ? "GemmFixed"
              : cpu::CurrentBlasLibrary() == cpu::BlasLibrary::kOneDnn ? "oneDNN"
                                                                       : "OpenBLAS")
        << cpu::GemmKernelName();
  }
  EXPECT_EQ(cpu::GemmBackendFromName("mkl"), std::nullopt);
  EXPECT_FALSE(cpu::DescribeBlas().core.empty());
  cpu::SetGemmBackend(saved);
}

}  // namespace
}  // namespace sluice::kernels
