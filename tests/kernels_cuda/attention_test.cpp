// The CUDA attention kernels against the fp64 reference (kernels/ref/ops_attention.h), both
// implementations (SIMT, and tensor cores for bf16 with head_dim 64 or 128), and cuDNN's fused
// attention for bf16 (kernels/cuda/attention_cudnn.h) on the same cases and tolerances, run on the
// same inputs as the reference sees them (bf16-rounded for bf16).
//
// Tolerances (ExpectClose: |got - want| <= tol * (|want| + max |want|)):
//   float: 2e-5. Everything is fp32 with fp32 accumulation over at most a few hundred terms
//     (~1e-6 relative), and the q x 8 case keeps scores below ~30, so exp's argument error stays
//     ~1e-6 too.
//   bf16 out, dq, dk, dv: 2e-2. The outputs are rounded to bf16 (2^-9 = 2e-3 relative), and the
//     tensor-core path also rounds P and dS to bf16 before their products (as FlashAttention
//     does): each term carries up to 2^-9 relative error, which averages down over the sum, so
//     the errors seen are a few 1e-3 of the largest element; 2e-2 leaves headroom while a wrong
//     index, mask or scale (errors of order 1) still fails.
//   lse (fp32 in both cases): 2e-5 for float, 1e-4 for bf16 (fp32 math on exact bf16 products).
//   cuDNN is held to the bf16 bounds above: it also rounds P and dS to bf16 for its tensor-core
//   products and keeps fp32 statistics.
#include "kernels/cuda/attention.h"

#include <cuda_runtime.h>  // DeviceArray's cudaMalloc(T**, size_t) is its template overload
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cuda/attention_cudnn.h"
#include "kernels/ref/ops_attention.h"
#include "tests/kernels_cuda/cuda_test_util.h"

namespace sluice::kernels::cuda {
namespace {

using testing::BitwiseEqual;
using testing::Cast;
using testing::DeviceArray;
using testing::ExpectClose;
using testing::Rng;
using testing::RoundTripToDouble;
using testing::TestStream;
using testing::ToFloat;
using testing::WaitForDevice;

using Bf16 = __nv_bfloat16;

enum class Path { kAuto, kSimt, kCudnn };

const char* PathName(Path path) {
  switch (path) {
    case Path::kAuto:
      return "";
    case Path::kSimt:
      return " simt";
    case Path::kCudnn:
      return " cudnn";
  }
  return "";
}

// One cuDNN context for the whole binary (it caches a graph per shape); null with the reason
// where the build has no cuDNN or libcudnn cannot be loaded.
CudnnAttention* SharedCudnn(std::string* why) {
  static std::unique_ptr<CudnnAttention> context;
  static std::string error;
  static const bool created = [] {
    const LaunchStatus status = CudnnAttention::Create(&context);
    if (!status.ok()) error = status.ToString();
    return status.ok();
  }();
  if (!created && why != nullptr) *why = error;
  return created ? context.get() : nullptr;
}

// Skips the calling test where there is no cuDNN context.
#define SLUICE_SKIP_WITHOUT_CUDNN()                                                        \
  do {                                                                                     \
    std::string sluice_why_;                                                               \
    if (SharedCudnn(&sluice_why_) == nullptr) GTEST_SKIP() << "no cuDNN: " << sluice_why_; \
  } while (0)

struct Case {
  AttentionDims dims;
  double q_scale;  // 8 gives sharp softmax rows (large logits): the online rescaling matters
};

std::string CaseName(const Case& c) {
  const AttentionDims& d = c.dims;
  char name[96];
  std::snprintf(name, sizeof(name), "b%lld_s%lld_h%lld_kv%lld_d%lld%s",
                static_cast<long long>(d.batch), static_cast<long long>(d.seq),
                static_cast<long long>(d.q_heads), static_cast<long long>(d.kv_heads),
                static_cast<long long>(d.head_dim), c.q_scale == 8.0 ? "_qx8" : "");
  return name;
}

// Elements past the end of every output that the kernels must leave alone.
constexpr size_t kGuard = 64;

// An output buffer poisoned with NaN (all bytes 0xff) plus a guard band.
template <typename T>
struct Output {
  explicit Output(size_t n) : size(n), array(n + kGuard) { array.Fill(0xff); }
  T* data() { return array.data(); }
  // The n outputs; fails the test if the guard band was written.
  std::vector<T> Get() const {
    std::vector<T> all = array.Download();
    std::vector<unsigned char> guard(kGuard * sizeof(T));
    std::memcpy(guard.data(), all.data() + size, guard.size());
    for (unsigned char byte : guard) {
      if (byte != 0xff) {
        ADD_FAILURE() << "a kernel wrote past the end of an output";
        break;
      }
    }
    all.resize(size);
    return all;
  }
  size_t size;
  DeviceArray<T> array;
};

// ExpectClose, except where the reference is exactly zero everywhere (dq and dk at seq 1, where
// the only probability is 1 and dS = dP - D cancels exactly in fp64): ExpectClose's bound would
// be 0 there, so the rounding residue of the device's differently ordered sums (~1e-7 for float)
// is held to an absolute tol instead (the terms that cancel are of order 1).
template <typename A>
void ExpectGradientClose(const std::vector<A>& actual, const std::vector<double>& expected,
                         double tol, const std::string& what) {
  bool all_zero = true;
  for (double e : expected) all_zero = all_zero && e == 0.0;
  if (!all_zero) return ExpectClose(actual, expected, tol, what);
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double a = static_cast<double>(actual[i]);
    if (!(std::abs(a) <= tol)) {  // also catches NaN
      ADD_FAILURE() << what << "[" << i << "]: got " << a << ", want 0 (within " << tol << ")";
      return;
    }
  }
}

std::vector<float> Scaled(std::vector<float> values, double scale) {
  for (float& x : values) x = static_cast<float>(x * scale);
  return values;
}

template <typename T>
void RunCase(const Case& c, Path path) {
  constexpr bool kFloat = std::is_same_v<T, float>;
  const double tol = kFloat ? 2e-5 : 2e-2;
  const double lse_tol = kFloat ? 2e-5 : 1e-4;
  const AttentionDims& dims = c.dims;
  const size_t nq = dims.batch * dims.seq * dims.q_heads * dims.head_dim;
  const size_t nkv = dims.batch * dims.seq * dims.kv_heads * dims.head_dim;
  const size_t nlse = dims.batch * dims.q_heads * dims.seq;
  const std::string where = CaseName(c) + (kFloat ? " float" : " bf16") + PathName(path);
  SCOPED_TRACE(where);
  // cuDNN's own workspaces (its launchers run on bf16 only; the callers make sure of that).
  CudnnAttention* cudnn = path == Path::kCudnn ? SharedCudnn(nullptr) : nullptr;
  ASSERT_TRUE(path != Path::kCudnn || cudnn != nullptr);
  size_t cudnn_forward_bytes = 0;
  size_t cudnn_backward_bytes = 0;
  if (cudnn != nullptr) {
    SLUICE_EXPECT_LAUNCH_OK(
        CudnnAttentionWorkspaceBytes(*cudnn, dims, AttentionPass::kForward, &cudnn_forward_bytes));
    SLUICE_EXPECT_LAUNCH_OK(CudnnAttentionWorkspaceBytes(*cudnn, dims, AttentionPass::kBackward,
                                                         &cudnn_backward_bytes));
  }
  DeviceArray<unsigned char> cudnn_workspace(
      std::max<size_t>(std::max(cudnn_forward_bytes, cudnn_backward_bytes), 1));

  Rng rng(1000 + dims.seq * 31 + dims.head_dim * 7 + dims.q_heads * 3 + dims.kv_heads);
  const std::vector<float> q = Scaled(rng.Uniform(nq), c.q_scale);
  const std::vector<float> k = rng.Uniform(nkv);
  const std::vector<float> v = rng.Uniform(nkv);
  const std::vector<float> dout = rng.Uniform(nq);
  const std::vector<double> q_ref = RoundTripToDouble<T>(q);
  const std::vector<double> k_ref = RoundTripToDouble<T>(k);
  const std::vector<double> v_ref = RoundTripToDouble<T>(v);
  const std::vector<double> dout_ref = RoundTripToDouble<T>(dout);
  std::vector<double> workspace(AttentionWorkspaceElements(dims));

  // Forward.
  std::vector<double> out_ref(nq);
  std::vector<double> lse_ref(nlse);
  ref::AttentionForward(q_ref.data(), k_ref.data(), v_ref.data(), out_ref.data(), lse_ref.data(),
                        dims, workspace.data());
  DeviceArray<T> q_dev(Cast<T>(q));
  DeviceArray<T> k_dev(Cast<T>(k));
  DeviceArray<T> v_dev(Cast<T>(v));
  TestStream stream;
  auto forward = [&](Output<T>& out, Output<float>& lse) {
    if constexpr (std::is_same_v<T, Bf16>) {
      if (path == Path::kCudnn) {
        cudnn_workspace.Fill(0xff);  // nothing may be carried over from an earlier launch
        WaitForDevice();
        return AttentionForwardCudnn(*cudnn, q_dev.data(), k_dev.data(), v_dev.data(), out.data(),
                                     lse.data(), dims, cudnn_workspace.data(), cudnn_forward_bytes,
                                     stream.get());
      }
    }
    WaitForDevice();
    return path == Path::kSimt ? AttentionForwardSimt(q_dev.data(), k_dev.data(), v_dev.data(),
                                                      out.data(), lse.data(), dims, stream.get())
                               : AttentionForward(q_dev.data(), k_dev.data(), v_dev.data(),
                                                  out.data(), lse.data(), dims, stream.get());
  };
  Output<T> out(nq);
  Output<float> lse(nlse);
  SLUICE_EXPECT_LAUNCH_OK(forward(out, lse));
  const std::vector<T> out_got = out.Get();
  const std::vector<float> lse_got = lse.Get();
  ExpectClose(ToFloat(out_got), out_ref, tol, where + " out");
  ExpectClose(lse_got, lse_ref, lse_tol, where + " lse");
  Output<T> out2(nq);
  Output<float> lse2(nlse);
  SLUICE_EXPECT_LAUNCH_OK(forward(out2, lse2));
  EXPECT_TRUE(BitwiseEqual(out2.Get(), out_got)) << "forward out differs between two runs";
  EXPECT_TRUE(BitwiseEqual(lse2.Get(), lse_got)) << "forward lse differs between two runs";

  // Backward, given the reference's out and lse as the device holds them (out in T, lse in
  // fp32), so that it is judged on its own.
  const std::vector<float> out_f(out_ref.begin(), out_ref.end());
  const std::vector<float> lse_f(lse_ref.begin(), lse_ref.end());
  const std::vector<double> out_in_ref = RoundTripToDouble<T>(out_f);
  const std::vector<double> lse_in_ref(lse_f.begin(), lse_f.end());
  std::vector<double> dq_ref(nq);
  std::vector<double> dk_ref(nkv);
  std::vector<double> dv_ref(nkv);
  ref::AttentionBackward(q_ref.data(), k_ref.data(), v_ref.data(), out_in_ref.data(),
                         lse_in_ref.data(), dout_ref.data(), dq_ref.data(), dk_ref.data(),
                         dv_ref.data(), dims, workspace.data());
  DeviceArray<T> out_in_dev(Cast<T>(out_f));
  DeviceArray<float> lse_in_dev(lse_f);
  DeviceArray<T> dout_dev(Cast<T>(dout));
  const size_t workspace_bytes = AttentionBackwardWorkspaceBytes(dims);
  DeviceArray<unsigned char> workspace_dev(workspace_bytes);
  auto backward = [&](Output<T>& dq, Output<T>& dk, Output<T>& dv) {
    if constexpr (std::is_same_v<T, Bf16>) {
      if (path == Path::kCudnn) {
        cudnn_workspace.Fill(0xff);
        WaitForDevice();
        return AttentionBackwardCudnn(*cudnn, q_dev.data(), k_dev.data(), v_dev.data(),
                                      out_in_dev.data(), lse_in_dev.data(), dout_dev.data(),
                                      dq.data(), dk.data(), dv.data(), dims, cudnn_workspace.data(),
                                      cudnn_backward_bytes, stream.get());
      }
    }
    workspace_dev.Fill(0xff);  // D is recomputed each time, not carried over
    WaitForDevice();
    return path == Path::kSimt
               ? AttentionBackwardSimt(q_dev.data(), k_dev.data(), v_dev.data(), out_in_dev.data(),
                                       lse_in_dev.data(), dout_dev.data(), dq.data(), dk.data(),
                                       dv.data(), dims, workspace_dev.data(), workspace_bytes,
                                       stream.get())
               : AttentionBackward(q_dev.data(), k_dev.data(), v_dev.data(), out_in_dev.data(),
                                   lse_in_dev.data(), dout_dev.data(), dq.data(), dk.data(),
                                   dv.data(), dims, workspace_dev.data(), workspace_bytes,
                                   stream.get());
  };
  Output<T> dq(nq);
  Output<T> dk(nkv);
  Output<T> dv(nkv);
  SLUICE_EXPECT_LAUNCH_OK(backward(dq, dk, dv));
  const std::vector<T> dq_got = dq.Get();
  const std::vector<T> dk_got = dk.Get();
  const std::vector<T> dv_got = dv.Get();
  ExpectGradientClose(ToFloat(dq_got), dq_ref, tol, where + " dq");
  ExpectGradientClose(ToFloat(dk_got), dk_ref, tol, where + " dk");
  ExpectGradientClose(ToFloat(dv_got), dv_ref, tol, where + " dv");

  Output<T> dq2(nq);
  Output<T> dk2(nkv);
  Output<T> dv2(nkv);
  SLUICE_EXPECT_LAUNCH_OK(backward(dq2, dk2, dv2));
  EXPECT_TRUE(BitwiseEqual(dq2.Get(), dq_got)) << "dq differs between two runs";
  EXPECT_TRUE(BitwiseEqual(dk2.Get(), dk_got)) << "dk differs between two runs";
  EXPECT_TRUE(BitwiseEqual(dv2.Get(), dv_got)) << "dv differs between two runs";
}

class AttentionCaseTest : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionCaseTest, FloatMatchesReference) {
  SLUICE_SKIP_WITHOUT_GPU();
  RunCase<float>(GetParam(), Path::kAuto);
}

// The tensor-core kernels where they apply (head_dim 64 and 128), else the SIMT ones.
TEST_P(AttentionCaseTest, Bf16MatchesReference) {
  SLUICE_SKIP_WITHOUT_GPU();
  RunCase<Bf16>(GetParam(), Path::kAuto);
}

TEST_P(AttentionCaseTest, Bf16SimtMatchesReference) {
  SLUICE_SKIP_WITHOUT_GPU();
  const int64_t head_dim = GetParam().dims.head_dim;
  if (head_dim != 64 && head_dim != 128) GTEST_SKIP() << "Bf16MatchesReference runs SIMT here";
  RunCase<Bf16>(GetParam(), Path::kSimt);
}

// cuDNN's fused attention on every case. The product's head_dims (64, 128) must be supported
// past one token; for the others a "not supported" from cuDNN skips the case with its reason
// (kAuto runs our kernels there: AutoFallsBackWhereCudnnRefuses).
TEST_P(AttentionCaseTest, Bf16CudnnMatchesReference) {
  SLUICE_SKIP_WITHOUT_GPU();
  SLUICE_SKIP_WITHOUT_CUDNN();
  const AttentionDims& dims = GetParam().dims;
  CudnnAttention* cudnn = SharedCudnn(nullptr);
  for (const AttentionPass pass : {AttentionPass::kForward, AttentionPass::kBackward}) {
    size_t bytes = 0;
    const LaunchStatus status = CudnnAttentionWorkspaceBytes(*cudnn, dims, pass, &bytes);
    const bool product_shape = (dims.head_dim == 64 || dims.head_dim == 128) && dims.seq > 1;
    if (!status.ok() && !product_shape &&
        status.message().find("not supported") != std::string::npos) {
      GTEST_SKIP() << status.ToString();
    }
    ASSERT_TRUE(status.ok()) << cudnn->Describe() << ": " << status.ToString();
  }
  RunCase<Bf16>(GetParam(), Path::kCudnn);
}

// {batch, seq, q_heads, kv_heads, head_dim}, q scale. Seqs 1, 17, 64, 129 and 300 give a
// single row, tiles with masked tails, exactly one tile, one row past a tile, and five tiles;
// heads 4/4 (MHA), 8/2 and 6/1 (GQA groups of 4 and 6). head_dims 8, 24 and 40 (the demo's) run
// zero-padded to a compiled width.
INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionCaseTest,
    ::testing::Values(Case{{1, 1, 4, 4, 32}, 1.0}, Case{{2, 1, 8, 2, 128}, 1.0},
                      Case{{2, 17, 8, 2, 64}, 1.0}, Case{{1, 17, 4, 4, 80}, 1.0},
                      Case{{1, 64, 6, 1, 128}, 1.0}, Case{{2, 64, 4, 4, 64}, 8.0},
                      Case{{2, 129, 4, 4, 64}, 1.0}, Case{{2, 129, 6, 1, 32}, 1.0},
                      Case{{1, 129, 8, 2, 96}, 1.0}, Case{{1, 129, 8, 2, 128}, 8.0},
                      Case{{1, 300, 8, 2, 128}, 1.0}, Case{{1, 300, 4, 4, 32}, 1.0},
                      Case{{1, 300, 6, 1, 64}, 8.0}, Case{{2, 37, 4, 2, 8}, 1.0},
                      Case{{1, 129, 4, 4, 40}, 1.0}, Case{{2, 70, 6, 2, 24}, 8.0}),
    [](const ::testing::TestParamInfo<Case>& info) { return CaseName(info.param); });

// Arguments the launchers must refuse before launching anything.
class AttentionArgumentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SLUICE_SKIP_WITHOUT_GPU();
    buffer_ = std::make_unique<DeviceArray<Bf16>>(4096);
    lse_ = std::make_unique<DeviceArray<float>>(1024);
    workspace_ = std::make_unique<DeviceArray<unsigned char>>(4096);
    stream_ = std::make_unique<TestStream>();
  }

  LaunchStatus Forward(const AttentionDims& dims) {
    Bf16* x = buffer_->data();
    return AttentionForward<Bf16>(x, x, x, x, lse_->data(), dims, stream_->get());
  }
  LaunchStatus Backward(const AttentionDims& dims, size_t workspace_bytes) {
    Bf16* x = buffer_->data();
    return AttentionBackward<Bf16>(x, x, x, x, lse_->data(), x, x, x, x, dims, workspace_->data(),
                                   workspace_bytes, stream_->get());
  }

  std::unique_ptr<DeviceArray<Bf16>> buffer_;
  std::unique_ptr<DeviceArray<float>> lse_;
  std::unique_ptr<DeviceArray<unsigned char>> workspace_;
  std::unique_ptr<TestStream> stream_;
};

TEST_F(AttentionArgumentTest, RejectsUnsupportedHeadDim) {
  const AttentionDims dims{1, 4, 2, 2, 136};
  for (const LaunchStatus& status : {Forward(dims), Backward(dims, 4096)}) {
    EXPECT_EQ(status.code(), LaunchStatus::Code::kInvalidArgument) << status.ToString();
    EXPECT_NE(status.message().find("head_dim = 136"), std::string::npos) << status.ToString();
  }
}

TEST_F(AttentionArgumentTest, RejectsQHeadsNotAMultipleOfKvHeads) {
  const AttentionDims dims{1, 4, 6, 4, 64};
  for (const LaunchStatus& status : {Forward(dims), Backward(dims, 4096)}) {
    EXPECT_EQ(status.code(), LaunchStatus::Code::kInvalidArgument) << status.ToString();
    EXPECT_NE(status.message().find("not a multiple"), std::string::npos) << status.ToString();
  }
}

TEST_F(AttentionArgumentTest, RejectsSmallWorkspaceAndNullPointers) {
  const AttentionDims dims{2, 16, 4, 2, 64};
  const size_t needed = AttentionBackwardWorkspaceBytes(dims);
  ASSERT_GE(needed, sizeof(float) * 2 * 16 * 4);
  EXPECT_EQ(Backward(dims, needed - 1).code(), LaunchStatus::Code::kInvalidArgument);
  EXPECT_EQ(
      AttentionForward<float>(nullptr, nullptr, nullptr, nullptr, nullptr, dims, stream_->get())
          .code(),
      LaunchStatus::Code::kInvalidArgument);
}

TEST_F(AttentionArgumentTest, EmptyShapesAreNoOps) {
  for (const AttentionDims& dims :
       {AttentionDims{0, 16, 4, 2, 64}, AttentionDims{2, 0, 4, 2, 64}}) {
    SLUICE_EXPECT_LAUNCH_OK(
        AttentionForward<float>(nullptr, nullptr, nullptr, nullptr, nullptr, dims, stream_->get()));
    SLUICE_EXPECT_LAUNCH_OK(AttentionBackward<Bf16>(nullptr, nullptr, nullptr, nullptr, nullptr,
                                                    nullptr, nullptr, nullptr, nullptr, dims,
                                                    nullptr, 0, stream_->get()));
  }
}

// The choice of the AttentionOptions launchers. Host logic: it runs without a GPU.
TEST(AttentionDispatchTest, ResolvesWithoutAContextToOurs) {
  const AttentionDims dims{1, 16, 4, 2, 64};
  EXPECT_EQ(ResolveAttentionImpl<Bf16>(dims, {}), AttentionImpl::kOwn);
  EXPECT_EQ(ResolveAttentionImpl<float>(dims, {}), AttentionImpl::kOwn);
  EXPECT_EQ(ResolveAttentionImpl<Bf16>(dims, {AttentionImpl::kCudnn, nullptr}),
            AttentionImpl::kCudnn);
  size_t bytes = 0;
  SLUICE_EXPECT_LAUNCH_OK(
      AttentionWorkspaceBytes<Bf16>(dims, AttentionPass::kBackward, {}, &bytes));
  EXPECT_EQ(bytes, AttentionBackwardWorkspaceBytes(dims));
  // kCudnn without a context, or for float, is refused before anything is launched.
  const AttentionOptions cudnn_without_context{AttentionImpl::kCudnn, nullptr};
  EXPECT_EQ(AttentionForward<Bf16>(nullptr, nullptr, nullptr, nullptr, nullptr, dims,
                                   cudnn_without_context, nullptr, 0, nullptr)
                .code(),
            LaunchStatus::Code::kInvalidArgument);
  EXPECT_EQ(
      AttentionWorkspaceBytes<float>(dims, AttentionPass::kForward, cudnn_without_context, &bytes)
          .code(),
      LaunchStatus::Code::kInvalidArgument);
  if (!CudnnAttentionBuilt()) {
    std::unique_ptr<CudnnAttention> context;
    EXPECT_EQ(CudnnAttention::Create(&context).code(), LaunchStatus::Code::kInvalidArgument);
  }
}

// kAuto with a context runs what kAttentionAutoBf16 names, for bf16: bitwise the same as that
// launcher called directly.
TEST(AttentionDispatchTest, AutoRunsTheConfiguredImplementation) {
  SLUICE_SKIP_WITHOUT_GPU();
  SLUICE_SKIP_WITHOUT_CUDNN();
  CudnnAttention* cudnn = SharedCudnn(nullptr);
  const AttentionDims dims{2, 129, 8, 2, 64};
  const AttentionOptions automatic{AttentionImpl::kAuto, cudnn};
  EXPECT_EQ(ResolveAttentionImpl<Bf16>(dims, automatic), kAttentionAutoBf16);
  EXPECT_EQ(ResolveAttentionImpl<float>(dims, automatic), AttentionImpl::kOwn);
  // Where cuDNN refuses the shape (a single token), kAuto runs ours.
  EXPECT_EQ(ResolveAttentionImpl<Bf16>(AttentionDims{2, 1, 8, 2, 64}, automatic),
            AttentionImpl::kOwn);
  const AttentionOptions chosen{kAttentionAutoBf16, cudnn};
  const size_t nq = dims.batch * dims.seq * dims.q_heads * dims.head_dim;
  const size_t nkv = dims.batch * dims.seq * dims.kv_heads * dims.head_dim;
  Rng rng(11);
  DeviceArray<Bf16> q(Cast<Bf16>(rng.Uniform(nq)));
  DeviceArray<Bf16> k(Cast<Bf16>(rng.Uniform(nkv)));
  DeviceArray<Bf16> v(Cast<Bf16>(rng.Uniform(nkv)));
  DeviceArray<Bf16> dout(Cast<Bf16>(rng.Uniform(nq)));
  size_t forward_bytes = 0;
  size_t backward_bytes = 0;
  SLUICE_EXPECT_LAUNCH_OK(
      AttentionWorkspaceBytes<Bf16>(dims, AttentionPass::kForward, automatic, &forward_bytes));
  SLUICE_EXPECT_LAUNCH_OK(
      AttentionWorkspaceBytes<Bf16>(dims, AttentionPass::kBackward, automatic, &backward_bytes));
  DeviceArray<unsigned char> workspace(
      std::max<size_t>(std::max(forward_bytes, backward_bytes), 1));
  TestStream stream;
  std::vector<std::vector<Bf16>> results[2];
  std::vector<float> lses[2];
  for (int run = 0; run < 2; ++run) {
    const AttentionOptions& options = run == 0 ? automatic : chosen;
    DeviceArray<Bf16> out(nq);
    DeviceArray<float> lse(dims.batch * dims.q_heads * dims.seq);
    DeviceArray<Bf16> dq(nq);
    DeviceArray<Bf16> dk(nkv);
    DeviceArray<Bf16> dv(nkv);
    WaitForDevice();
    SLUICE_EXPECT_LAUNCH_OK(AttentionForward<Bf16>(q.data(), k.data(), v.data(), out.data(),
                                                   lse.data(), dims, options, workspace.data(),
                                                   forward_bytes, stream.get()));
    SLUICE_EXPECT_LAUNCH_OK(AttentionBackward<Bf16>(
        q.data(), k.data(), v.data(), out.data(), lse.data(), dout.data(), dq.data(), dk.data(),
        dv.data(), dims, options, workspace.data(), backward_bytes, stream.get()));
    SLUICE_ASSERT_CUDA(cudaStreamSynchronize(stream.get()));
    results[run] = {out.Download(), dq.Download(), dk.Download(), dv.Download()};
    lses[run] = lse.Download();
  }
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(BitwiseEqual(results[0][i], results[1][i])) << "tensor " << i;
  }
  EXPECT_TRUE(BitwiseEqual(lses[0], lses[1]));
}

// Not a check: with SLUICE_ATTENTION_TIMING set, prints the forward and backward throughput of
// both implementations at the product's shape (seq 2048), in FlashAttention's convention (causal
// forward 2 * 2 * b * h * s^2 * d / 2 FLOP, backward 2.5 times that).
TEST(AttentionTiming, ReportsThroughput) {
  SLUICE_SKIP_WITHOUT_GPU();
  if (std::getenv("SLUICE_ATTENTION_TIMING") == nullptr) {
    GTEST_SKIP() << "set SLUICE_ATTENTION_TIMING=1 to time the kernels";
  }
  for (const AttentionDims& dims :
       {AttentionDims{2, 2048, 16, 4, 128}, AttentionDims{2, 2048, 32, 8, 64}}) {
    const size_t nq = dims.batch * dims.seq * dims.q_heads * dims.head_dim;
    const size_t nkv = dims.batch * dims.seq * dims.kv_heads * dims.head_dim;
    Rng rng(7);
    DeviceArray<Bf16> q(Cast<Bf16>(rng.Uniform(nq)));
    DeviceArray<Bf16> k(Cast<Bf16>(rng.Uniform(nkv)));
    DeviceArray<Bf16> v(Cast<Bf16>(rng.Uniform(nkv)));
    DeviceArray<Bf16> dout(Cast<Bf16>(rng.Uniform(nq)));
    DeviceArray<Bf16> out(nq);
    DeviceArray<Bf16> dq(nq);
    DeviceArray<Bf16> dk(nkv);
    DeviceArray<Bf16> dv(nkv);
    DeviceArray<float> lse(dims.batch * dims.q_heads * dims.seq);
    const size_t workspace_bytes = AttentionBackwardWorkspaceBytes(dims);
    DeviceArray<unsigned char> workspace(workspace_bytes);
    TestStream stream;
    WaitForDevice();
    cudaEvent_t start;
    cudaEvent_t stop;
    SLUICE_ASSERT_CUDA(cudaEventCreate(&start));
    SLUICE_ASSERT_CUDA(cudaEventCreate(&stop));
    const double forward_flop =
        2.0 * dims.batch * dims.q_heads * dims.seq * dims.seq * static_cast<double>(dims.head_dim);
    CudnnAttention* cudnn = SharedCudnn(nullptr);
    size_t cudnn_forward_bytes = 0;
    size_t cudnn_backward_bytes = 0;
    if (cudnn != nullptr) {  // builds both graphs outside the timed loops
      SLUICE_EXPECT_LAUNCH_OK(CudnnAttentionWorkspaceBytes(*cudnn, dims, AttentionPass::kForward,
                                                           &cudnn_forward_bytes));
      SLUICE_EXPECT_LAUNCH_OK(CudnnAttentionWorkspaceBytes(*cudnn, dims, AttentionPass::kBackward,
                                                           &cudnn_backward_bytes));
    }
    DeviceArray<unsigned char> cudnn_workspace(
        std::max<size_t>(std::max(cudnn_forward_bytes, cudnn_backward_bytes), 1));
    for (const Path path : {Path::kAuto, Path::kSimt, Path::kCudnn}) {
      if (path == Path::kCudnn && cudnn == nullptr) continue;
      auto forward = [&] {
        if (path == Path::kCudnn) {
          return AttentionForwardCudnn(*cudnn, q.data(), k.data(), v.data(), out.data(), lse.data(),
                                       dims, cudnn_workspace.data(), cudnn_forward_bytes,
                                       stream.get());
        }
        return path == Path::kSimt ? AttentionForwardSimt(q.data(), k.data(), v.data(), out.data(),
                                                          lse.data(), dims, stream.get())
                                   : AttentionForward(q.data(), k.data(), v.data(), out.data(),
                                                      lse.data(), dims, stream.get());
      };
      auto backward = [&] {
        if (path == Path::kCudnn) {
          return AttentionBackwardCudnn(*cudnn, q.data(), k.data(), v.data(), out.data(),
                                        lse.data(), dout.data(), dq.data(), dk.data(), dv.data(),
                                        dims, cudnn_workspace.data(), cudnn_backward_bytes,
                                        stream.get());
        }
        return path == Path::kSimt
                   ? AttentionBackwardSimt(q.data(), k.data(), v.data(), out.data(), lse.data(),
                                           dout.data(), dq.data(), dk.data(), dv.data(), dims,
                                           workspace.data(), workspace_bytes, stream.get())
                   : AttentionBackward(q.data(), k.data(), v.data(), out.data(), lse.data(),
                                       dout.data(), dq.data(), dk.data(), dv.data(), dims,
                                       workspace.data(), workspace_bytes, stream.get());
      };
      const int iterations = path == Path::kSimt ? 2 : 10;
      float forward_ms = 0.f;
      float backward_ms = 0.f;
      SLUICE_EXPECT_LAUNCH_OK(forward());  // warm-up
      SLUICE_EXPECT_LAUNCH_OK(backward());
      SLUICE_ASSERT_CUDA(cudaEventRecord(start, stream.get()));
      for (int i = 0; i < iterations; ++i) SLUICE_EXPECT_LAUNCH_OK(forward());
      SLUICE_ASSERT_CUDA(cudaEventRecord(stop, stream.get()));
      SLUICE_ASSERT_CUDA(cudaEventSynchronize(stop));
      SLUICE_ASSERT_CUDA(cudaEventElapsedTime(&forward_ms, start, stop));
      SLUICE_ASSERT_CUDA(cudaEventRecord(start, stream.get()));
      for (int i = 0; i < iterations; ++i) SLUICE_EXPECT_LAUNCH_OK(backward());
      SLUICE_ASSERT_CUDA(cudaEventRecord(stop, stream.get()));
      SLUICE_ASSERT_CUDA(cudaEventSynchronize(stop));
      SLUICE_ASSERT_CUDA(cudaEventElapsedTime(&backward_ms, start, stop));
      forward_ms /= iterations;
      backward_ms /= iterations;
      std::printf(
          "attention bf16 b%lld s%lld h%lld/%lld d%lld %-5s: forward %.3f ms (%.0f TFLOP/s), "
          "backward %.3f ms (%.0f TFLOP/s)\n",
          static_cast<long long>(dims.batch), static_cast<long long>(dims.seq),
          static_cast<long long>(dims.q_heads), static_cast<long long>(dims.kv_heads),
          static_cast<long long>(dims.head_dim),
          path == Path::kSimt ? "simt" : (path == Path::kCudnn ? "cudnn" : "auto"), forward_ms,
          forward_flop / (forward_ms * 1e9), backward_ms, 2.5 * forward_flop / (backward_ms * 1e9));
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
}

}  // namespace
}  // namespace sluice::kernels::cuda
