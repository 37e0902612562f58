// The vector path of the CPU ops (kernels/cpu/ops_path.h) in each ISA variant, AVX2 and AVX-512,
// forced one at a time (a variant the CPU lacks skips, saying so), against the fp64 reference
// through the same kernels::cpu entry points the engine calls. Declared tolerances, in units of
// each output's largest magnitude, the fixed path's own (cpu_dense_test.cpp,
// cpu_loss_embedding_test.cpp, cpu_attention_test.cpp), which therefore hold on every ISA:
//   activations 2e-6 (a polynomial exp to about 2 ulp, GELU through a sigmoid);
//   norms 1e-5, cross-entropy 1e-5 (fp32 sums in 16 or 32 partial sums);
//   attention 1e-5 (blocks of keys with an online softmax: the sums run in another order and
//   the probabilities are rescaled once per block).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/ops_activation.h"
#include "kernels/cpu/ops_attention.h"
#include "kernels/cpu/ops_loss.h"
#include "kernels/cpu/ops_norm.h"
#include "kernels/cpu/ops_path.h"
#include "kernels/cpu/ops_vector_internal.h"
#include "kernels/ref/ops_activation.h"
#include "kernels/ref/ops_attention.h"
#include "kernels/ref/ops_loss.h"
#include "kernels/ref/ops_norm.h"
#include "tests/ops/backend_compare.h"

namespace sluice::kernels {
namespace {

using testing::AsDouble;
using testing::Cast;
using testing::CompareBackends;
using testing::Outputs;
using testing::Rng;

using testing::kActivationTol;
using testing::kAttentionTol;
using testing::kReductionTol;

bool CpuHas(Isa isa) {
  const CpuFeatures& f = DetectCpuFeatures();
  return isa == Isa::kAvx512 ? f.avx512 : f.avx2;
}

// Each test runs with the vector path on and the ISA capped at the parameter; the process's
// settings come back afterwards.
class CpuVectorOps : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!CpuHas(GetParam())) {
      GTEST_SKIP() << "this CPU has no " << IsaName(GetParam()) << " ("
                   << DetectCpuFeatures().model_name << "): its vector kernels are not run here";
    }
    ForceIsa(GetParam());
    cpu::SetOpsPath(cpu::OpsPath::kVector);
  }
  void TearDown() override {
    cpu::SetOpsPath(cpu::OpsPath::kFixed);
    ClearForcedIsa();
  }
};

TEST_P(CpuVectorOps, DispatchesToTheForcedVariant) {
  const cpu::internal::OpsVectorVariant* variant = cpu::internal::ActiveOpsVectorVariant();
  ASSERT_NE(variant, nullptr);
  EXPECT_EQ(variant->isa, GetParam());
  EXPECT_EQ(cpu::OpsPathName(), "vector " + std::string(IsaName(GetParam())));
  cpu::SetOpsPath(cpu::OpsPath::kFixed);
  EXPECT_EQ(cpu::internal::ActiveOpsVectorVariant(), nullptr);
  EXPECT_EQ(cpu::OpsPathName(), "fixed");
}

TEST_P(CpuVectorOps, Activations) {
  Rng rng(1106);
  // Odd, above the parallel threshold, with a range reaching exp's saturation on both sides.
  const int64_t n = 40011;
  auto x = rng.Uniform(n, -12, 12);
  x[0] = 0.0f;
  x[1] = -60.0f;
  x[2] = 60.0f;
  const auto up = rng.Uniform(n, -2, 2), dy = rng.Uniform(n);
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
      kActivationTol, "activations " + std::string(IsaName(GetParam())));
}

TEST_P(CpuVectorOps, Norms) {
  // The demo's and GPT-2's widths, and widths leaving every kind of tail.
  for (const int64_t cols : {int64_t{160}, int64_t{768}, int64_t{7}, int64_t{37}, int64_t{33}}) {
    const int64_t rows = 45;
    Rng rng(1200 + cols);
    const auto x = rng.Uniform(rows * cols, -3, 3), gamma = rng.Uniform(cols, 0.5, 1.5);
    const auto beta = rng.Uniform(cols), dy = rng.Uniform(rows * cols);
    const auto dgamma0 = rng.Uniform(cols), dbeta0 = rng.Uniform(cols);
    CompareBackends(
        [&](auto backend) {
          using T = typename decltype(backend)::T;
          std::vector<T> tx = Cast<T>(x), tg = Cast<T>(gamma), tb = Cast<T>(beta);
          std::vector<T> tdy = Cast<T>(dy), y(rows * cols), mean(rows), rstd(rows);
          std::vector<T> dx(rows * cols), dgamma = Cast<T>(dgamma0), dbeta = Cast<T>(dbeta0);
          std::vector<T> ry(rows * cols), rrstd(rows), rdx(rows * cols), rdgamma = Cast<T>(dgamma0);
          SLUICE_OPS_CALL(backend, LayerNormForward, tx.data(), tg.data(), tb.data(), y.data(),
                          mean.data(), rstd.data(), rows, cols, 1e-5f);
          SLUICE_OPS_CALL(backend, LayerNormBackward, tx.data(), tg.data(), mean.data(),
                          rstd.data(), tdy.data(), dx.data(), dgamma.data(), dbeta.data(), rows,
                          cols);
          SLUICE_OPS_CALL(backend, RmsNormForward, tx.data(), tg.data(), ry.data(), rrstd.data(),
                          rows, cols, 1e-5f);
          SLUICE_OPS_CALL(backend, RmsNormBackward, tx.data(), tg.data(), rrstd.data(), tdy.data(),
                          rdx.data(), rdgamma.data(), rows, cols);
          return Outputs{{"ln y", AsDouble(y)},           {"ln mean", AsDouble(mean)},
                         {"ln rstd", AsDouble(rstd)},     {"ln dx", AsDouble(dx)},
                         {"ln dgamma", AsDouble(dgamma)}, {"ln dbeta", AsDouble(dbeta)},
                         {"rms y", AsDouble(ry)},         {"rms rstd", AsDouble(rrstd)},
                         {"rms dx", AsDouble(rdx)},       {"rms dgamma", AsDouble(rdgamma)}};
        },
        kReductionTol,
        "norms cols " + std::to_string(cols) + " " + std::string(IsaName(GetParam())));
  }
}

TEST_P(CpuVectorOps, CrossEntropy) {
  struct Case {
    int64_t rows, vocab;
  };
  // GPT-2's vocabulary, the demo's, and small odd ones (a vocabulary of 1 is all tail).
  for (const Case c : {Case{5, 50257}, Case{33, 256}, Case{21, 37}, Case{3, 1}}) {
    Rng rng(1300 + c.vocab);
    auto logits = rng.Uniform(c.rows * c.vocab, -6, 6);
    // A row whose other logits are far below its max: exp underflows to 0 there.
    for (int64_t v = 0; v < c.vocab; ++v) logits[v] = v == 0 ? 40.0f : -60.0f;
    std::vector<int32_t> targets = rng.Ints(c.rows, 0, static_cast<int32_t>(c.vocab - 1));
    for (int64_t r = 1; r < c.rows; r += 4) targets[r] = kIgnoreIndex;
    CompareBackends(
        [&](auto backend) {
          using T = typename decltype(backend)::T;
          std::vector<T> tlogits = Cast<T>(logits), lse(c.rows), dlogits(c.rows * c.vocab, T(4));
          T loss;
          if constexpr (decltype(backend)::kCpu) {
            loss = cpu::CrossEntropyForward(tlogits.data(), targets.data(), lse.data(), c.rows,
                                            c.vocab);
          } else {
            loss = ref::CrossEntropyForward(tlogits.data(), targets.data(), lse.data(), c.rows,
                                            c.vocab);
          }
          SLUICE_OPS_CALL(backend, CrossEntropyBackward, tlogits.data(), targets.data(), lse.data(),
                          T(0.75), dlogits.data(), c.rows, c.vocab);
          SLUICE_OPS_CALL(backend, CrossEntropyBackward, tlogits.data(), targets.data(), lse.data(),
                          T(0.75), tlogits.data(), c.rows, c.vocab);
          return Outputs{{"loss", {static_cast<double>(loss)}},
                         {"lse", AsDouble(lse)},
                         {"dlogits", AsDouble(dlogits)},
                         {"dlogits in place", AsDouble(tlogits)}};
        },
        kReductionTol,
        "cross_entropy vocab " + std::to_string(c.vocab) + " " + std::string(IsaName(GetParam())));
  }
}

TEST_P(CpuVectorOps, Attention) {
  const std::vector<AttentionDims> cases = {
      // The demo's head (seq 64, head_dim 40), GPT-2's head_dim with a seq that ends mid-block,
      // grouped-query with odd sizes, and one token.
      {.batch = 2, .seq = 64, .q_heads = 4, .kv_heads = 4, .head_dim = 40},
      {.batch = 1, .seq = 77, .q_heads = 3, .kv_heads = 3, .head_dim = 64},
      {.batch = 3, .seq = 23, .q_heads = 6, .kv_heads = 2, .head_dim = 12},
      {.batch = 2, .seq = 1, .q_heads = 2, .kv_heads = 1, .head_dim = 5},
  };
  for (const AttentionDims& dims : cases) {
    Rng rng(1400 + dims.seq);
    const int64_t tokens = dims.batch * dims.seq;
    const int64_t nq = tokens * dims.q_heads * dims.head_dim;
    const int64_t nkv = tokens * dims.kv_heads * dims.head_dim;
    const auto q = rng.Uniform(nq, -2, 2), k = rng.Uniform(nkv, -2, 2), v = rng.Uniform(nkv);
    const auto dout = rng.Uniform(nq);
    CompareBackends(
        [&](auto backend) {
          using T = typename decltype(backend)::T;
          std::vector<T> tq = Cast<T>(q), tk = Cast<T>(k), tv = Cast<T>(v), tdout = Cast<T>(dout);
          std::vector<T> out(nq), lse(dims.batch * dims.q_heads * dims.seq);
          std::vector<T> dq(nq, T(5)), dk(nkv, T(5)), dv(nkv, T(5));
          std::vector<T> workspace(AttentionWorkspaceElements(dims), T(-3));
          SLUICE_OPS_CALL(backend, AttentionForward, tq.data(), tk.data(), tv.data(), out.data(),
                          lse.data(), dims, workspace.data());
          SLUICE_OPS_CALL(backend, AttentionBackward, tq.data(), tk.data(), tv.data(), out.data(),
                          lse.data(), tdout.data(), dq.data(), dk.data(), dv.data(), dims,
                          workspace.data());
          return Outputs{{"out", AsDouble(out)},
                         {"lse", AsDouble(lse)},
                         {"dq", AsDouble(dq)},
                         {"dk", AsDouble(dk)},
                         {"dv", AsDouble(dv)}};
        },
        kAttentionTol,
        "attention seq " + std::to_string(dims.seq) + " " + std::string(IsaName(GetParam())));
  }
}

// The vector attention never reads the caller's workspace: a workspace full of NaN changes
// nothing (it is there for the fixed path's [seq, seq] blocks).
TEST_P(CpuVectorOps, AttentionLeavesTheWorkspaceAlone) {
  const AttentionDims dims{.batch = 1, .seq = 40, .q_heads = 2, .kv_heads = 2, .head_dim = 16};
  Rng rng(1500);
  const int64_t n = dims.batch * dims.seq * dims.q_heads * dims.head_dim;
  const auto q = rng.Uniform(n, -2, 2), k = rng.Uniform(n, -2, 2), v = rng.Uniform(n);
  std::vector<float> out_a(n), out_b(n), lse(dims.q_heads * dims.seq);
  std::vector<float> ws(AttentionWorkspaceElements(dims), 0.0f);
  cpu::AttentionForward(q.data(), k.data(), v.data(), out_a.data(), lse.data(), dims, ws.data());
  std::fill(ws.begin(), ws.end(), std::numeric_limits<float>::quiet_NaN());
  cpu::AttentionForward(q.data(), k.data(), v.data(), out_b.data(), lse.data(), dims, ws.data());
  EXPECT_EQ(out_a, out_b);
  for (float w : ws) ASSERT_TRUE(std::isnan(w));
}

INSTANTIATE_TEST_SUITE_P(Isas, CpuVectorOps, ::testing::Values(Isa::kAvx2, Isa::kAvx512),
                         [](const ::testing::TestParamInfo<Isa>& info) {
                           return std::string(IsaName(info.param));
                         });

}  // namespace
}  // namespace sluice::kernels
