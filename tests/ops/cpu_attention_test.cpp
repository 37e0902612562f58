// The CPU attention kernels (products through either CPU GEMM backend, softmax rows on the
// calling thread) against the fp64 reference,
// multi-head and grouped-query, with odd sizes. Declared tolerance: 2e-5 of each output's
// largest magnitude (fp32 sums over head_dim and seq terms, exp and log in fp32).
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/ops_attention.h"
#include "kernels/ref/ops_attention.h"
#include "tests/ops/backend_compare.h"

namespace sluice::kernels {
namespace {

using testing::AsDouble;
using testing::Cast;
using testing::CompareBackends;
using testing::Outputs;
using testing::Rng;

using testing::kAttentionTol;

class CpuAttention : public ::testing::TestWithParam<AttentionDims> {};

TEST_P(CpuAttention, ForwardAndBackward) {
  const AttentionDims dims = GetParam();
  Rng rng(200 + dims.seq + dims.kv_heads);
  const int64_t tokens = dims.batch * dims.seq;
  const int64_t nq = tokens * dims.q_heads * dims.head_dim;
  const int64_t nkv = tokens * dims.kv_heads * dims.head_dim;
  const auto q = rng.Uniform(nq, -2, 2), k = rng.Uniform(nkv, -2, 2), v = rng.Uniform(nkv);
  const auto dout = rng.Uniform(nq);
  testing::ForEachGemmBackend([&](const std::string& gemm) {
    CompareBackends(
        [&](auto backend) {
          using T = typename decltype(backend)::T;
          std::vector<T> tq = Cast<T>(q), tk = Cast<T>(k), tv = Cast<T>(v), tdout = Cast<T>(dout);
          std::vector<T> out(nq), lse(dims.batch * dims.q_heads * dims.seq);
          // Gradients start as garbage: the kernels must overwrite them.
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
        kAttentionTol, "attention (" + gemm + ")");
  });
}

std::string Name(const ::testing::TestParamInfo<AttentionDims>& info) {
  const AttentionDims& d = info.param;
  std::ostringstream name;
  name << "b" << d.batch << "t" << d.seq << "hq" << d.q_heads << "hkv" << d.kv_heads << "d"
       << d.head_dim;
  return name.str();
}

INSTANTIATE_TEST_SUITE_P(
    Dims, CpuAttention,
    ::testing::Values(
        AttentionDims{.batch = 3, .seq = 7, .q_heads = 4, .kv_heads = 4, .head_dim = 12},
        AttentionDims{.batch = 3, .seq = 7, .q_heads = 4, .kv_heads = 2, .head_dim = 12},
        AttentionDims{.batch = 3, .seq = 7, .q_heads = 4, .kv_heads = 1, .head_dim = 12},
        // seq * seq above the parallel threshold: the OpenMP softmax rows.
        AttentionDims{.batch = 1, .seq = 190, .q_heads = 3, .kv_heads = 1, .head_dim = 16}),
    Name);

// One token attends only to itself: out = v, lse = its score, dv = dout, and dq, dk vanish
// (exactly in real arithmetic, to fp32 rounding of P * (dP - D) here).
TEST(CpuAttention, SingleTokenCopiesValue) {
  const AttentionDims dims{.batch = 2, .seq = 1, .q_heads = 2, .kv_heads = 1, .head_dim = 8};
  Rng rng(205);
  const auto q = rng.Uniform(32), k = rng.Uniform(16), v = rng.Uniform(16), dout = rng.Uniform(32);
  std::vector<float> out(32), lse(4), dq(32, 5.0f), dk(16, 5.0f), dv(16, 5.0f);
  std::vector<float> workspace(AttentionWorkspaceElements(dims));
  cpu::AttentionForward(q.data(), k.data(), v.data(), out.data(), lse.data(), dims,
                        workspace.data());
  cpu::AttentionBackward(q.data(), k.data(), v.data(), out.data(), lse.data(), dout.data(),
                         dq.data(), dk.data(), dv.data(), dims, workspace.data());
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t h = 0; h < 2; ++h) {
      float score = 0.0f;
      for (int64_t d = 0; d < 8; ++d) {
        EXPECT_EQ(out[(b * 2 + h) * 8 + d], v[b * 8 + d]);
        score += q[(b * 2 + h) * 8 + d] * k[b * 8 + d];
      }
      EXPECT_NEAR(lse[b * 2 + h], score / std::sqrt(8.0f), 1e-6f);
    }
    for (int64_t d = 0; d < 8; ++d) {
      EXPECT_NEAR(dv[b * 8 + d], dout[(b * 2) * 8 + d] + dout[(b * 2 + 1) * 8 + d], 1e-6f);
      EXPECT_NEAR(dk[b * 8 + d], 0.0f, 1e-6f);
    }
  }
  for (float g : dq) EXPECT_NEAR(g, 0.0f, 1e-6f);
}

}  // namespace
}  // namespace sluice::kernels
