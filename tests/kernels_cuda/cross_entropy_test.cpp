// The CUDA softmax cross-entropy against the fp64 reference (kernels/ref/ops_loss.h), run on the
// same logits (bf16-rounded where T is bf16). Each output must satisfy
// |actual - expected| <= tol * (|expected| + magnitude), where magnitude is the size of the terms
// the output was computed from, so that a result that cancels is judged against the rounding of
// its terms:
// - lse (fp32 for either T), tol 1e-5; magnitude max |lse| + |row max| (lse = max + log(sum)).
//   The fp32 log-sum-exp over up to 128256 values rounds to about 1e-6 of its terms.
// - the mean loss (fp32), tol 1e-5; magnitude max |lse| + max |row max|: each row's loss is the
//   difference lse - logits[target], which cancels when the target dominates its row.
// - dlogits = dloss / n * (p - [v == target]); magnitude max |dlogits| + |dloss / n| at target
//   entries, where p - 1 cancels as p -> 1. fp32 tol 1e-5 (p = exp(x - lse) inherits the
//   rounding of the fp32 lse: half an ulp of |lse|, about 1e-6 relative for |lse| < 32); 2e-5 for
//   the large-magnitude logits, where |lse| is about 130 and its half ulp is 7.6e-6. bf16 tol
//   4e-3: one rounding to bf16, whose half ulp is at most 2^-8 = 3.9e-3 of the value.
// Every case runs twice, out of place and in place (dlogits aliasing logits, as the LM head uses
// it), and the two runs must agree bitwise.
#include "kernels/cuda/cross_entropy.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>  // cudaMalloc(T**), which DeviceArray calls
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/ref/ops_loss.h"
#include "tests/kernels_cuda/cuda_test_util.h"

namespace sluice::kernels::cuda {
namespace {

using testing::BitwiseEqual;
using testing::Cast;
using testing::DeviceArray;
using testing::Rng;
using testing::RoundTripToDouble;
using testing::TestStream;
using testing::ToFloat;
using testing::TypeName;

constexpr double kStatTol = 1e-5;

template <typename T>
double GradTol() {
  return std::is_same_v<T, float> ? 1e-5 : 4e-3;
}

// |actual[i] - expected[i]| <= tol * (|expected[i]| + magnitude[i]) for every i (also fails on
// NaN); reports the first few failures.
template <typename A>
void ExpectWithin(const std::vector<A>& actual, const std::vector<double>& expected,
                  const std::vector<double>& magnitude, double tol, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  ASSERT_EQ(magnitude.size(), expected.size()) << what;
  int failures = 0;
  double worst = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double err = std::abs(static_cast<double>(actual[i]) - expected[i]);
    const double bound = tol * (std::abs(expected[i]) + magnitude[i]);
    if (!(err <= bound)) {
      if (++failures <= 5) {
        ADD_FAILURE() << what << "[" << i << "]: got " << static_cast<double>(actual[i])
                      << ", want " << expected[i] << " (error " << err << " > bound " << bound
                      << ")";
      }
    }
    if (bound > 0) worst = std::max(worst, err / bound);
  }
  EXPECT_EQ(failures, 0) << what << ": " << failures << " of " << actual.size()
                         << " elements outside tolerance " << tol << "; worst error / bound "
                         << worst;
}

template <typename T>
class CudaCrossEntropy : public ::testing::Test {};
using Types = ::testing::Types<float, __nv_bfloat16>;
TYPED_TEST_SUITE(CudaCrossEntropy, Types);

template <typename T>
struct Run {
  std::vector<float> lse;
  float loss = 0;
  std::vector<T> dlogits;
  std::vector<T> logits_after;  // the logits buffer after the backward
  int32_t forward_flag = -1;
  int32_t backward_flag = -1;
};

// Forward then backward on the device. `offset` elements in front of the logits move them off
// 16-byte alignment (the scalar path); in_place passes the logits buffer as dlogits.
template <typename T>
Run<T> RunCrossEntropy(const std::vector<T>& logits, const std::vector<int32_t>& targets,
                       int64_t rows, int64_t vocab, float dloss, bool in_place, int64_t offset) {
  Run<T> run;
  std::vector<T> padded(offset + logits.size());
  std::copy(logits.begin(), logits.end(), padded.begin() + offset);
  DeviceArray<T> d_logits(padded);
  DeviceArray<int32_t> d_targets(targets);
  DeviceArray<float> d_lse(rows);
  d_lse.Fill(0xFF);  // NaN: every row must be written
  DeviceArray<float> d_loss(1);
  d_loss.Fill(0xFF);
  DeviceArray<T> d_dlogits(padded.size());
  d_dlogits.Fill(0xFF);
  DeviceArray<int32_t> d_flag(std::vector<int32_t>{0});
  const size_t bytes = CrossEntropyBackwardWorkspaceBytes(rows);
  DeviceArray<uint8_t> d_workspace(bytes + 3);
  d_workspace.Fill(0xA5);
  TestStream stream;

  T* logits_ptr = d_logits.data() + offset;
  T* dlogits_ptr = in_place ? logits_ptr : d_dlogits.data() + offset;
  const LaunchStatus forward =
      CrossEntropyForward<T>(logits_ptr, d_targets.data(), d_lse.data(), rows, vocab, d_loss.data(),
                             d_flag.data(), stream.get());
  EXPECT_TRUE(forward.ok()) << forward.ToString();
  run.lse = d_lse.Download();
  run.loss = d_loss.Download()[0];
  run.forward_flag = d_flag.Download()[0];
  d_flag.Upload({0});
  // 3 bytes in front: the launcher must align the workspace itself.
  const LaunchStatus backward =
      CrossEntropyBackward<T>(logits_ptr, d_targets.data(), d_lse.data(), dloss, dlogits_ptr, rows,
                              vocab, d_flag.data(), d_workspace.data() + 3, bytes, stream.get());
  EXPECT_TRUE(backward.ok()) << backward.ToString();
  run.backward_flag = d_flag.Download()[0];
  const std::vector<T> all_logits = d_logits.Download();
  const std::vector<T> all_dlogits = in_place ? all_logits : d_dlogits.Download();
  run.logits_after.assign(all_logits.begin() + offset, all_logits.end());
  run.dlogits.assign(all_dlogits.begin() + offset, all_dlogits.end());
  return run;
}

// Runs the device twice (out of place, in place) and checks both against the reference. Targets
// outside [0, vocab) other than kIgnoreIndex are expected to be treated as ignored and flagged.
template <typename T>
void Check(const std::vector<float>& logits, const std::vector<int32_t>& targets, int64_t rows,
           int64_t vocab, float dloss, const std::string& label, int64_t offset = 0,
           double grad_tol = GradTol<T>()) {
  const std::string what = TypeName<T>() + " " + label + " rows=" + std::to_string(rows) +
                           " vocab=" + std::to_string(vocab);
  SCOPED_TRACE(what);
  std::vector<int32_t> ref_targets = targets;
  bool any_invalid = false;
  for (int32_t& t : ref_targets) {
    if (t != kIgnoreIndex && (t < 0 || t >= vocab)) {
      t = kIgnoreIndex;
      any_invalid = true;
    }
  }
  const std::vector<double> x = RoundTripToDouble<T>(logits);
  std::vector<double> lse(rows), dlogits(rows * vocab);
  const double loss =
      ref::CrossEntropyForward<double>(x.data(), ref_targets.data(), lse.data(), rows, vocab);
  ref::CrossEntropyBackward<double>(x.data(), ref_targets.data(), lse.data(), dloss, dlogits.data(),
                                    rows, vocab);

  double max_lse = 0, max_row_max = 0, max_dlogit = 0;
  std::vector<double> row_max(rows, -std::numeric_limits<double>::infinity());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t v = 0; v < vocab; ++v) row_max[r] = std::max(row_max[r], x[r * vocab + v]);
    max_lse = std::max(max_lse, std::abs(lse[r]));
    max_row_max = std::max(max_row_max, std::abs(row_max[r]));
  }
  for (double g : dlogits) max_dlogit = std::max(max_dlogit, std::abs(g));
  const int64_t n = CountValidTargets(ref_targets.data(), rows);
  const double scale = n > 0 ? std::abs(static_cast<double>(dloss)) / n : 0.0;
  std::vector<double> lse_magnitude(rows), grad_magnitude(rows * vocab, max_dlogit);
  for (int64_t r = 0; r < rows; ++r) {
    lse_magnitude[r] = max_lse + std::abs(row_max[r]);
    if (ref_targets[r] != kIgnoreIndex) grad_magnitude[r * vocab + ref_targets[r]] += scale;
  }

  const std::vector<T> device_logits = Cast<T>(logits);
  const Run<T> out = RunCrossEntropy<T>(device_logits, targets, rows, vocab, dloss, false, offset);
  ExpectWithin(out.lse, lse, lse_magnitude, kStatTol, "lse " + what);
  ExpectWithin(std::vector<float>{out.loss}, {loss}, {max_lse + max_row_max}, kStatTol,
               "loss " + what);
  ExpectWithin(ToFloat(out.dlogits), dlogits, grad_magnitude, grad_tol, "dlogits " + what);
  EXPECT_TRUE(BitwiseEqual(out.logits_after, device_logits)) << "logits modified: " << what;
  EXPECT_EQ(out.forward_flag, any_invalid ? 1 : 0) << what;
  EXPECT_EQ(out.backward_flag, any_invalid ? 1 : 0) << what;

  const Run<T> in = RunCrossEntropy<T>(device_logits, targets, rows, vocab, dloss, true, offset);
  EXPECT_TRUE(BitwiseEqual(in.lse, out.lse)) << "lse not repeatable: " << what;
  EXPECT_EQ(std::memcmp(&in.loss, &out.loss, sizeof(float)), 0) << "loss not repeatable: " << what;
  EXPECT_TRUE(BitwiseEqual(in.dlogits, out.dlogits)) << "in-place dlogits differ: " << what;
}

// Random targets with every fourth row (from row 2) ignored.
std::vector<int32_t> Targets(Rng& rng, int64_t rows, int64_t vocab) {
  std::vector<int32_t> targets = rng.Ints(rows, 0, static_cast<int32_t>(vocab - 1));
  for (int64_t r = 2; r < rows; r += 4) targets[r] = kIgnoreIndex;
  return targets;
}

TYPED_TEST(CudaCrossEntropy, MatchesReference) {
  SLUICE_SKIP_WITHOUT_GPU();
  using T = TypeParam;
  uint64_t seed = 100;
  for (int64_t vocab : {1, 2, 257, 1000, 50257, 128256}) {
    for (int64_t rows : {1, 7, 64}) {
      Rng rng(++seed);
      const std::vector<float> logits = rng.Uniform(rows * vocab, -5, 5);
      Check<T>(logits, Targets(rng, rows, vocab), rows, vocab, 1.5f, "uniform");
    }
  }
}

TYPED_TEST(CudaCrossEntropy, UnalignedLogitsUseTheScalarPath) {
  SLUICE_SKIP_WITHOUT_GPU();
  using T = TypeParam;
  Rng rng(200);
  const int64_t rows = 7, vocab = 1000;
  const std::vector<float> logits = rng.Uniform(rows * vocab, -5, 5);
  Check<T>(logits, Targets(rng, rows, vocab), rows, vocab, 0.25f, "offset by one element", 1);
}

// Logits near 100 overflow exp() without the running maximum; -inf logits (masked entries) add
// nothing.
TYPED_TEST(CudaCrossEntropy, LargeMagnitudeAndInfiniteLogits) {
  SLUICE_SKIP_WITHOUT_GPU();
  using T = TypeParam;
  Rng rng(210);
  for (int64_t vocab : {257, 1000}) {
    const int64_t rows = 7;
    std::vector<float> logits = rng.Uniform(rows * vocab, 70, 130);
    std::vector<int32_t> targets = Targets(rng, rows, vocab);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t v : {int64_t{0}, int64_t{3}, vocab - 1}) {
        if (v != targets[r]) logits[r * vocab + v] = -std::numeric_limits<float>::infinity();
      }
    }
    Check<T>(logits, targets, rows, vocab, 1.0f, "large magnitude", 0,
             std::is_same_v<T, float> ? 2e-5 : 4e-3);
  }
}

// Rising logits raise each thread's running maximum at every pack (the rescale path), falling
// ones never after the first; a row whose first packs are all -inf starts the sum from nothing.
TYPED_TEST(CudaCrossEntropy, MonotoneRowsAndLeadingInfinities) {
  SLUICE_SKIP_WITHOUT_GPU();
  using T = TypeParam;
  Rng rng(215);
  for (int64_t vocab : {4096, 32000}) {
    const int64_t rows = 4;
    std::vector<float> logits(rows * vocab);
    for (int64_t v = 0; v < vocab; ++v) {
      const float t = static_cast<float>(v) / static_cast<float>(vocab);
      logits[0 * vocab + v] = 40.0f * t - 20.0f;
      logits[1 * vocab + v] = 20.0f - 40.0f * t;
      logits[2 * vocab + v] = v < vocab / 2 ? -std::numeric_limits<float>::infinity() : 8.0f * t;
      logits[3 * vocab + v] = v < vocab - 3 ? -std::numeric_limits<float>::infinity() : 1.0f;
    }
    const std::vector<int32_t> targets = {static_cast<int32_t>(vocab - 1), 0,
                                          static_cast<int32_t>(vocab - 2),
                                          static_cast<int32_t>(vocab - 1)};
    Check<T>(logits, targets, rows, vocab, 1.0f, "monotone rows");
  }
}

TYPED_TEST(CudaCrossEntropy, AllRowsIgnoredGiveZeroLossAndGradient) {
  SLUICE_SKIP_WITHOUT_GPU();
  using T = TypeParam;
  Rng rng(220);
  const int64_t rows = 5, vocab = 1000;
  const std::vector<float> logits = rng.Uniform(rows * vocab, -5, 5);
  const std::vector<int32_t> targets(rows, kIgnoreIndex);
  const Run<T> run = RunCrossEntropy<T>(Cast<T>(logits), targets, rows, vocab, 1.0f, false, 0);
  EXPECT_EQ(run.loss, 0.0f);
  EXPECT_EQ(ToFloat(run.dlogits), std::vector<float>(rows * vocab, 0.0f));
  Check<T>(logits, targets, rows, vocab, 1.0f, "all ignored");
}

TYPED_TEST(CudaCrossEntropy, OutOfRangeTargetsAreFlaggedAndIgnored) {
  SLUICE_SKIP_WITHOUT_GPU();
  using T = TypeParam;
  Rng rng(230);
  for (int64_t vocab : {257, 1000}) {
    const int64_t rows = 9;
    const std::vector<float> logits = rng.Uniform(rows * vocab, -5, 5);
    std::vector<int32_t> targets = Targets(rng, rows, vocab);
    targets[3] = static_cast<int32_t>(vocab);
    targets[5] = -100;
    targets[8] = std::numeric_limits<int32_t>::min();
    Check<T>(logits, targets, rows, vocab, 1.0f, "out-of-range targets");
  }
}

TYPED_TEST(CudaCrossEntropy, RepeatedRunsAreBitwiseEqual) {
  SLUICE_SKIP_WITHOUT_GPU();
  using T = TypeParam;
  Rng rng(240);
  const int64_t rows = 300, vocab = 50257;
  const std::vector<T> logits = Cast<T>(rng.Uniform(rows * vocab, -8, 8));
  const std::vector<int32_t> targets = Targets(rng, rows, vocab);
  const Run<T> a = RunCrossEntropy<T>(logits, targets, rows, vocab, 1.0f / 3, false, 0);
  const Run<T> b = RunCrossEntropy<T>(logits, targets, rows, vocab, 1.0f / 3, false, 0);
  EXPECT_TRUE(BitwiseEqual(a.lse, b.lse));
  EXPECT_EQ(std::memcmp(&a.loss, &b.loss, sizeof(float)), 0);
  EXPECT_TRUE(BitwiseEqual(a.dlogits, b.dlogits));
  EXPECT_TRUE(std::isfinite(a.loss) && a.loss > 0);
}

void ExpectInvalid(const LaunchStatus& status, const char* what) {
  EXPECT_EQ(status.code(), LaunchStatus::Code::kInvalidArgument)
      << what << ": " << status.ToString();
}

TYPED_TEST(CudaCrossEntropy, RejectsBadArgumentsAndHandlesNoRows) {
  SLUICE_SKIP_WITHOUT_GPU();
  using T = TypeParam;
  TestStream stream;
  cudaStream_t s = stream.get();
  const int64_t rows = 4, vocab = 8;
  DeviceArray<T> logits(rows * vocab);
  DeviceArray<int32_t> targets(std::vector<int32_t>{0, 1, 2, 3});
  DeviceArray<float> lse(rows);
  DeviceArray<float> loss(1);
  const size_t bytes = CrossEntropyBackwardWorkspaceBytes(rows);
  DeviceArray<uint8_t> ws(bytes);

  ExpectInvalid(CrossEntropyForward<T>(nullptr, targets.data(), lse.data(), rows, vocab,
                                       loss.data(), nullptr, s),
                "forward null logits");
  ExpectInvalid(CrossEntropyForward<T>(logits.data(), nullptr, lse.data(), rows, vocab, loss.data(),
                                       nullptr, s),
                "forward null targets");
  ExpectInvalid(CrossEntropyForward<T>(logits.data(), targets.data(), nullptr, rows, vocab,
                                       loss.data(), nullptr, s),
                "forward null lse");
  ExpectInvalid(CrossEntropyForward<T>(logits.data(), targets.data(), lse.data(), rows, vocab,
                                       nullptr, nullptr, s),
                "forward null loss_out");
  ExpectInvalid(CrossEntropyForward<T>(logits.data(), targets.data(), lse.data(), rows, 0,
                                       loss.data(), nullptr, s),
                "forward empty vocabulary");
  ExpectInvalid(CrossEntropyBackward<T>(nullptr, targets.data(), lse.data(), 1.0f, logits.data(),
                                        rows, vocab, nullptr, ws.data(), bytes, s),
                "backward null logits");
  ExpectInvalid(CrossEntropyBackward<T>(logits.data(), nullptr, lse.data(), 1.0f, logits.data(),
                                        rows, vocab, nullptr, ws.data(), bytes, s),
                "backward null targets");
  ExpectInvalid(CrossEntropyBackward<T>(logits.data(), targets.data(), nullptr, 1.0f, logits.data(),
                                        rows, vocab, nullptr, ws.data(), bytes, s),
                "backward null lse");
  ExpectInvalid(CrossEntropyBackward<T>(logits.data(), targets.data(), lse.data(), 1.0f, nullptr,
                                        rows, vocab, nullptr, ws.data(), bytes, s),
                "backward null dlogits");
  ExpectInvalid(CrossEntropyBackward<T>(logits.data(), targets.data(), lse.data(), 1.0f,
                                        logits.data(), rows, vocab, nullptr, nullptr, bytes, s),
                "backward null workspace");
  ExpectInvalid(
      CrossEntropyBackward<T>(logits.data(), targets.data(), lse.data(), 1.0f, logits.data(), rows,
                              vocab, nullptr, ws.data(), bytes - 1, s),
      "backward small workspace");

  // No rows: the mean is 0, as in the reference, and nothing else is touched.
  loss.Fill(0xFF);
  SLUICE_EXPECT_LAUNCH_OK(
      CrossEntropyForward<T>(nullptr, nullptr, nullptr, 0, vocab, loss.data(), nullptr, s));
  EXPECT_EQ(loss.Download()[0], 0.0f);
  EXPECT_EQ(CrossEntropyBackwardWorkspaceBytes(0), 0u);
  SLUICE_EXPECT_LAUNCH_OK(CrossEntropyBackward<T>(nullptr, nullptr, nullptr, 1.0f, nullptr, 0,
                                                  vocab, nullptr, nullptr, 0, s));
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
}

}  // namespace
}  // namespace sluice::kernels::cuda
