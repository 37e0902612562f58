// device.cpu_gemm: blas (kernels/cpu/gemm.h) computes what GemmFixed computes, within fp32
// rounding, through every library this build has (oneDNN where built, OpenBLAS always), at the
// transformer's linear shapes and in the three forms a training step runs (fwd NT, dx NN, dw TN
// accumulating); OpenBLAS runs a core of the ISA Sluice's own kernels use; and the kernel
// description the env command, summaries and benchmark records print names a real kernel.
// Nothing here depends on which ISA, core or library the machine has: each assertion compares
// the machine's own choices with each other.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_dnnl.h"
#include "kernels/cpu/gemm_fixed.h"
#include "kernels/cpu/gemm_openblas.h"
#include "tests/ops/ops_test_util.h"

namespace sluice::kernels {
namespace {

using cpu::BlasLibrary;
using cpu::GemmBackend;

// One product of a linear [in -> out] at `rows` tokens, stored as ops_linear.cpp stores it.
struct Product {
  const char* form;  // "fwd NT", "dx NN", "dw TN"
  bool trans_a, trans_b;
  int64_t m, n, k;
  float beta;
};

std::vector<Product> LinearProducts(int64_t rows, int64_t in, int64_t out) {
  return {{"fwd NT", false, true, rows, out, in, 1.0f},  // y = x wT + (bias in y)
          {"dx NN", false, false, rows, in, out, 0.0f},  // dx = dy w
          {"dw TN", true, false, out, in, rows, 1.0f}};  // dw += dyT x
}

std::string Describe(const Product& p) {
  return std::string(p.form) + " " + std::to_string(p.m) + "x" + std::to_string(p.n) + "x" +
         std::to_string(p.k);
}

struct BlasOperands {
  int64_t lda, ldb, ldc;
  std::vector<float> a, b, c0;
  BlasOperands(const Product& p, uint64_t seed) {
    testing::Rng rng(seed);
    lda = p.trans_a ? p.m : p.k;
    ldb = p.trans_b ? p.k : p.n;
    ldc = p.n;
    a = rng.Uniform(p.m * p.k);
    b = rng.Uniform(p.k * p.n);
    c0 = rng.Uniform(p.m * p.n);
    // beta 0: BLAS does not read C, so NaN there must not reach the output.
    if (p.beta == 0.0f) c0.assign(c0.size(), std::numeric_limits<float>::quiet_NaN());
  }
};

std::vector<float> RunProduct(GemmBackend backend, const Product& p, const BlasOperands& o) {
  cpu::SetGemmBackend(backend);
  std::vector<float> c = o.c0;
  cpu::Gemm(p.trans_a, p.trans_b, p.m, p.n, p.k, 1.0f, o.a.data(), o.lda, o.b.data(), o.ldb, p.beta,
            c.data(), o.ldc, 0);
  return c;
}

// Each entry of two fp32 products of the same operands lies within (k + 2)·2^-24 (Σ|a·b| +
// |beta·c0|) of the exact one, whatever the summation order: so of each other within twice that.
// Σ|a·b| is GemmFixed's product of |A| and |B| (accurate to far better than the bound needs).
void ExpectWithinRounding(const std::vector<float>& got, const std::vector<float>& fixed,
                          const Product& p, const BlasOperands& o, const std::string& what) {
  std::vector<float> abs_a(o.a.size()), abs_b(o.b.size());
  for (size_t i = 0; i < o.a.size(); ++i) abs_a[i] = std::fabs(o.a[i]);
  for (size_t i = 0; i < o.b.size(); ++i) abs_b[i] = std::fabs(o.b[i]);
  std::vector<float> magnitude(p.m * p.n);
  cpu::GemmFixed(p.trans_a, p.trans_b, p.m, p.n, p.k, 1.0f, abs_a.data(), o.lda, abs_b.data(),
                 o.ldb, 0.0f, magnitude.data(), o.ldc, 0);
  const double unit = 2.0 * static_cast<double>(p.k + 2) * 0x1p-24;
  int failures = 0;
  for (size_t e = 0; e < got.size(); ++e) {
    const double scale = magnitude[e] + (p.beta != 0.0f ? std::fabs(p.beta * o.c0[e]) : 0.0);
    const double diff = std::fabs(static_cast<double>(got[e]) - fixed[e]);
    if (!(diff <= unit * scale) && ++failures <= 3) {  // NaN fails too
      ADD_FAILURE() << what << ": entry " << e << " is " << got[e] << ", GemmFixed's " << fixed[e]
                    << " (bound " << unit * scale << ")";
    }
  }
  EXPECT_EQ(failures, 0) << what;
}

std::vector<BlasLibrary> BuiltLibraries() {
  std::vector<BlasLibrary> built;
  for (BlasLibrary library : {BlasLibrary::kOneDnn, BlasLibrary::kOpenBlas}) {
    if (cpu::BlasLibraryBuilt(library)) built.push_back(library);
  }
  return built;
}

// Restores the process-wide choices a test changes.
class GemmBlasTest : public ::testing::Test {
 protected:
  void TearDown() override {
    cpu::SetGemmBackend(backend_);
    cpu::SetBlasLibrary(library_);
  }
  GemmBackend backend_ = cpu::CurrentGemmBackend();
  BlasLibrary library_ = cpu::CurrentBlasLibrary();
};

// The model's shapes: d_model 160 (the demo) and 768 (GPT-2 small), d_ff = 4 d, 512 tokens.
TEST_F(GemmBlasTest, EveryLibraryMatchesGemmFixedAtTheModelsShapes) {
  struct Layer {
    int64_t rows, in, out;
  };
  const Layer layers[] = {{512, 160, 640}, {512, 640, 160}, {512, 768, 3072}, {512, 3072, 768}};
  for (BlasLibrary library : BuiltLibraries()) {
    cpu::SetBlasLibrary(library);
    const std::string name(cpu::BlasLibraryName(library));
    uint64_t seed = 1;
    for (const Layer& layer : layers) {
      for (const Product& p : LinearProducts(layer.rows, layer.in, layer.out)) {
        const BlasOperands o(p, ++seed);
        const std::vector<float> fixed = RunProduct(GemmBackend::kDeterministic, p, o);
        const std::vector<float> got = RunProduct(GemmBackend::kBlas, p, o);
        ExpectWithinRounding(got, fixed, p, o, name + " " + Describe(p));
      }
    }
  }
}

// An empty sum (k == 0) scales C by beta, or zeroes it (NaN dropped) when beta is 0.
TEST_F(GemmBlasTest, EveryLibraryHandlesAnEmptySum) {
  for (BlasLibrary library : BuiltLibraries()) {
    cpu::SetBlasLibrary(library);
    cpu::SetGemmBackend(GemmBackend::kBlas);
    const std::string name(cpu::BlasLibraryName(library));
    std::vector<float> c = {1.0f, -2.0f, 3.0f, 4.0f};
    cpu::Gemm(false, false, 2, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 0.5f, c.data(), 2, 0);
    EXPECT_EQ(c, (std::vector<float>{0.5f, -1.0f, 1.5f, 2.0f})) << name;
    c.assign(4, std::numeric_limits<float>::quiet_NaN());
    cpu::Gemm(false, false, 2, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 0.0f, c.data(), 2, 0);
    EXPECT_EQ(c, std::vector<float>(4, 0.0f)) << name;
  }
}

// Where Sluice may set OpenBLAS's core (a DYNAMIC_ARCH build, OPENBLAS_CORETYPE unset, a CPU
// with AVX2 or more), the core it runs has the ISA of Sluice's own kernels: SkylakeX-class on
// AVX-512, Haswell-class on AVX2, whatever OpenBLAS picked for itself.
TEST_F(GemmBlasTest, OpenBlasRunsACoreOfTheKernelsIsa) {
  const cpu::OpenBlasCore& settled = cpu::SettleOpenBlasCore();
  EXPECT_FALSE(settled.picked.empty());
  EXPECT_FALSE(settled.reason.empty());
  EXPECT_EQ(settled.core, cpu::DescribeBlas().core);
  const Isa isa = SelectedIsa();
  const bool dynamic = cpu::OpenBlasConfig().find("DYNAMIC_ARCH") != std::string::npos;
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr || !dynamic ||
      cpu::OpenBlasCoreFor(isa).empty()) {
    GTEST_SKIP() << "OpenBLAS's core is not Sluice's to set here: " << settled.reason;
  }
  EXPECT_EQ(cpu::OpenBlasCoreIsa(settled.core), isa)
      << settled.core << " (" << settled.reason << ") for " << IsaName(isa);
}

// A benchmark switches the core and back; each core computes the product, and a name Sluice
// does not know is refused without touching the library.
TEST_F(GemmBlasTest, OpenBlasCoreSwitchesAndBack) {
  const std::string settled = cpu::SettleOpenBlasCore().core;
  EXPECT_NE(cpu::SwitchOpenBlasCore("NoSuchCore"), "");
  EXPECT_EQ(cpu::OpenBlasCoreName(), settled);
  if (cpu::OpenBlasConfig().find("DYNAMIC_ARCH") == std::string::npos) {
    GTEST_SKIP() << "not a DYNAMIC_ARCH OpenBLAS: one core";
  }
  cpu::SetBlasLibrary(BlasLibrary::kOpenBlas);
  const Product p = LinearProducts(512, 160, 640)[0];
  const BlasOperands o(p, 7);
  const std::vector<float> fixed = RunProduct(GemmBackend::kDeterministic, p, o);
  // Prescott's SSE3 kernels run on every x86-64 CPU.
  for (const std::string& core : {std::string("Prescott"), settled}) {
    ASSERT_EQ(cpu::SwitchOpenBlasCore(core), "") << core;
    EXPECT_EQ(cpu::OpenBlasCoreName(), core);
    ExpectWithinRounding(RunProduct(GemmBackend::kBlas, p, o), fixed, p, o, "OpenBLAS " + core);
  }
}

// What `sluice env`, summary.json and bench records print: the library, its version and the
// kernel family it runs, and threads; for GemmFixed its ISA variant.
TEST_F(GemmBlasTest, TheKernelDescriptionNamesTheKernelInUse) {
  const cpu::GemmKernel fixed = cpu::DescribeGemmKernel(GemmBackend::kDeterministic);
  EXPECT_EQ(fixed.library, "GemmFixed");
  EXPECT_EQ(fixed.core, IsaName(cpu::GemmFixedIsa()));
  EXPECT_EQ(fixed.name, "GemmFixed " + fixed.core);
  EXPECT_GE(fixed.threads, 1);
  for (BlasLibrary library : BuiltLibraries()) {
    cpu::SetBlasLibrary(library);
    const cpu::GemmKernel blas = cpu::DescribeGemmKernel(GemmBackend::kBlas);
    if (library == BlasLibrary::kOneDnn) {
      EXPECT_EQ(blas.library, "oneDNN");
      EXPECT_EQ(blas.version, cpu::DnnlVersion());
      EXPECT_EQ(blas.core, cpu::DnnlIsa());
    } else {
      EXPECT_EQ(blas.library, "OpenBLAS");
      EXPECT_EQ(blas.version, cpu::OpenBlasVersion());
      EXPECT_EQ(blas.core, cpu::DescribeBlas().core);
    }
    EXPECT_FALSE(blas.version.empty()) << blas.name;
    EXPECT_FALSE(blas.core.empty()) << blas.name;
    EXPECT_GE(blas.threads, 1) << blas.name;
    EXPECT_EQ(blas.name, blas.library + " " + blas.version + " " + blas.core);
    EXPECT_EQ(cpu::GemmKernelName(GemmBackend::kBlas), blas.name);
    EXPECT_EQ(cpu::BlasLibraryFromName(cpu::BlasLibraryName(library)), library);
  }
  EXPECT_EQ(cpu::BlasLibraryFromName("mkl"), std::nullopt);
}

// Without SLUICE_CPU_BLAS, blas runs the fastest library built: oneDNN where there is one.
TEST(GemmBlasDefaultTest, BlasRunsTheFastestLibraryBuilt) {
  if (std::getenv("SLUICE_CPU_BLAS") != nullptr) GTEST_SKIP() << "SLUICE_CPU_BLAS is set";
  EXPECT_EQ(cpu::CurrentBlasLibrary(),
            cpu::DnnlBuilt() ? BlasLibrary::kOneDnn : BlasLibrary::kOpenBlas);
}

}  // namespace
}  // namespace sluice::kernels
