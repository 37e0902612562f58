// The CUDA embedding kernels against the fp64 reference (kernels/ref/ops_embedding.h), run on the
// same inputs (bf16-rounded where T is bf16). Declared tolerances, in units of
// |expected| + the output's largest magnitude (tests/ops/ops_test_util.h):
// - EmbeddingForward: 0, a bitwise copy of the table rows.
// - EmbeddingBackward, PositionEmbeddingBackward: 1e-5, fp32 sums of up to a few thousand rows
//   (the rounding of a sum of k terms grows like sqrt(k) * 2^-24 of its partial sums).
// - PositionEmbeddingForward: fp32 1e-6 (one fp32 add); bf16 4e-3 (the add is rounded once to
//   bf16, whose half ulp is at most 2^-8 = 3.9e-3 of the value).
// The backward runs are repeated and must be bitwise equal, and dtable rows no token names must
// keep their bits.
#include "kernels/cuda/embedding.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>  // cudaMalloc(T**), which DeviceArray calls
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/ref/ops_embedding.h"
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
using testing::TypeName;

constexpr double kSumTol = 1e-5;

template <typename T>
double AddTol() {
  return std::is_same_v<T, float> ? 1e-6 : 4e-3;
}

template <typename T>
class CudaEmbedding : public ::testing::Test {};
using Types = ::testing::Types<float, __nv_bfloat16>;
TYPED_TEST_SUITE(CudaEmbedding, Types);

// ---- EmbeddingForward

// `offset` elements in front of the table move its start off 16-byte alignment, so the copy
// falls back to narrower words.
template <typename T>
void CheckForward(int64_t n, int64_t vocab, int64_t dim, int64_t offset, uint64_t seed) {
  const std::string what = "EmbeddingForward " + TypeName<T>() + " n=" + std::to_string(n) +
                           " vocab=" + std::to_string(vocab) + " dim=" + std::to_string(dim) +
                           " offset=" + std::to_string(offset);
  SCOPED_TRACE(what);
  Rng rng(seed);
  const std::vector<float> table = rng.Uniform(vocab * dim, -3, 3);
  std::vector<int32_t> tokens = rng.Ints(n, 0, static_cast<int32_t>(vocab - 1));
  tokens[0] = static_cast<int32_t>(vocab - 1);  // the last row of the table
  std::vector<T> padded(offset + vocab * dim);
  const std::vector<T> cast = Cast<T>(table);
  std::copy(cast.begin(), cast.end(), padded.begin() + offset);

  DeviceArray<T> d_table(padded);
  DeviceArray<int32_t> d_tokens(tokens);
  DeviceArray<T> d_out(n * dim);
  d_out.Fill(0xFF);  // NaN: every element must be written
  DeviceArray<int32_t> d_flag(std::vector<int32_t>{0});
  TestStream stream;
  SLUICE_EXPECT_LAUNCH_OK(EmbeddingForward<T>(d_tokens.data(), d_table.data() + offset,
                                              d_out.data(), n, vocab, dim, d_flag.data(),
                                              stream.get()));
  const std::vector<T> out = d_out.Download();

  std::vector<double> expected(n * dim);
  ref::EmbeddingForward<double>(tokens.data(), RoundTripToDouble<T>(table).data(), expected.data(),
                                n, vocab, dim);
  ExpectClose(ToFloat(out), expected, 0.0, what);
  EXPECT_EQ(d_flag.Download()[0], 0);
}

TYPED_TEST(CudaEmbedding, ForwardCopiesRowsBitwise) {
  SLUICE_SKIP_WITHOUT_GPU();
  using T = TypeParam;
  CheckForward<T>(1, 1, 1, 0, 1);
  CheckForward<T>(7, 5, 3, 0, 2);
  CheckForward<T>(5, 7, 2, 0, 3);   // bf16: 4-byte words; fp32: 8-byte words
  CheckForward<T>(5, 7, 4, 0, 4);   // bf16: 8-byte words; fp32: 16-byte words
  CheckForward<T>(9, 11, 8, 1, 5);  // misaligned table: element-sized words
  CheckForward<T>(64, 1000, 33, 0, 6);
  CheckForward<T>(4, 9, 1000, 2, 7);
  CheckForward<T>(3, 4, 768, 0, 8);
  CheckForward<T>(33, 50257, 64, 0, 9);
  CheckForward<T>(17, 128256, 8, 0, 10);
  CheckForward<T>(2, 3, 4097, 0, 11);
}

TYPED_TEST(CudaEmbedding, ForwardOutOfRangeTokenSetsFlagAndWritesZeros) {
  SLUICE_SKIP_WITHOUT_GPU();
  using T = TypeParam;
  const int64_t vocab = 5, dim = 3;
  const std::vector<int32_t> tokens = {0, -1, 5, 2, INT32_MIN, INT32_MAX};
  const int64_t n = static_cast<int64_t>(tokens.size());
  Rng rng(20);
  const std::vector<float> table = rng.Uniform(vocab * dim, 1, 2);  // no zeros
  DeviceArray<T> d_table(Cast<T>(table));
  DeviceArray<int32_t> d_tokens(tokens);
  DeviceArray<T> d_out(n * dim);
  d_out.Fill(0xFF);
  DeviceArray<int32_t> d_flag(std::vector<int32_t>{0});
  TestStream stream;
  SLUICE_EXPECT_LAUNCH_OK(EmbeddingForward<T>(d_tokens.data(), d_table.data(), d_out.data(), n,
                                              vocab, dim, d_flag.data(), stream.get()));
  const std::vector<float> out = ToFloat(d_out.Download());
  EXPECT_EQ(d_flag.Download()[0], 1);
  const std::vector<float> rounded = ToFloat(Cast<T>(table));
  for (int64_t i = 0; i < n; ++i) {
    const bool valid = tokens[i] >= 0 && tokens[i] < vocab;
    for (int64_t c = 0; c < dim; ++c) {
      const float want = valid ? rounded[tokens[i] * dim + c] : 0.0f;
      EXPECT_EQ(out[i * dim + c], want) << "row " << i << " col " << c;
    }
  }

  // A later launch with valid ids leaves the flag set (only the caller clears it); a null flag
  // is accepted.
  const std::vector<int32_t> valid_tokens = {1, 4};
  DeviceArray<int32_t> d_valid(valid_tokens);
  SLUICE_EXPECT_LAUNCH_OK(EmbeddingForward<T>(d_valid.data(), d_table.data(), d_out.data(), 2,
                                              vocab, dim, d_flag.data(), stream.get()));
  EXPECT_EQ(d_flag.Download()[0], 1);
  SLUICE_EXPECT_LAUNCH_OK(EmbeddingForward<T>(d_tokens.data(), d_table.data(), d_out.data(), n,
                                              vocab, dim, nullptr, stream.get()));
  EXPECT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
}

// ---- EmbeddingBackward

// Runs the backward twice from the same dtable; returns the first result, checks the second is
// bitwise equal.
template <typename T>
std::vector<float> RunBackward(const std::vector<int32_t>& tokens, const std::vector<T>& dout,
                               const std::vector<float>& dtable0, int64_t vocab, int64_t dim,
                               int32_t* flag_out) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const size_t bytes = EmbeddingBackwardWorkspaceBytes(n, vocab);
  EXPECT_GT(bytes, 0u);
  // 3 bytes in front: the launcher must align the workspace itself.
  DeviceArray<uint8_t> d_workspace(bytes + 3);
  DeviceArray<int32_t> d_tokens(tokens);
  DeviceArray<T> d_dout(dout);
  DeviceArray<float> d_dtable(dtable0);
  DeviceArray<int32_t> d_flag(std::vector<int32_t>{0});
  TestStream stream;
  std::vector<float> first;
  for (int run = 0; run < 2; ++run) {
    d_dtable.Upload(dtable0);
    d_workspace.Fill(run == 0 ? 0x00 : 0xA5);  // stale workspace contents must not matter
    const LaunchStatus status =
        EmbeddingBackward<T>(d_tokens.data(), d_dout.data(), d_dtable.data(), n, vocab, dim,
                             d_flag.data(), d_workspace.data() + 3, bytes, stream.get());
    EXPECT_TRUE(status.ok()) << status.ToString();
    std::vector<float> result = d_dtable.Download();
    if (run == 0) {
      first = std::move(result);
    } else {
      EXPECT_TRUE(BitwiseEqual(first, result)) << "EmbeddingBackward is not bitwise repeatable";
    }
  }
  *flag_out = d_flag.Download()[0];
  return first;
}

template <typename T>
void CheckBackward(const std::vector<int32_t>& tokens, int64_t vocab, int64_t dim, uint64_t seed,
                   const std::string& label) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const std::string what = "EmbeddingBackward " + TypeName<T>() + " " + label +
                           " n=" + std::to_string(n) + " vocab=" + std::to_string(vocab) +
                           " dim=" + std::to_string(dim);
  SCOPED_TRACE(what);
  Rng rng(seed);
  const std::vector<float> dout = rng.Uniform(n * dim, -2, 2);
  const std::vector<float> dtable0 = rng.Uniform(vocab * dim, -1, 1);  // accumulate onto this
  int32_t flag = -1;
  const std::vector<float> got = RunBackward<T>(tokens, Cast<T>(dout), dtable0, vocab, dim, &flag);
  EXPECT_EQ(flag, 0);

  std::vector<double> expected(dtable0.begin(), dtable0.end());
  ref::EmbeddingBackward<double>(tokens.data(), RoundTripToDouble<T>(dout).data(), expected.data(),
                                 n, vocab, dim);
  ExpectClose(got, expected, kSumTol, what);

  std::vector<bool> named(vocab, false);
  for (int32_t token : tokens) named[token] = true;
  int64_t changed = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    if (named[v]) continue;
    if (std::memcmp(&got[v * dim], &dtable0[v * dim], dim * sizeof(float)) != 0) ++changed;
  }
  EXPECT_EQ(changed, 0) << what << ": rows that no token names were modified";
}

TYPED_TEST(CudaEmbedding, BackwardMatchesReference) {
  SLUICE_SKIP_WITHOUT_GPU();
  using T = TypeParam;
  Rng rng(30);
  CheckBackward<T>({0}, 1, 1, 31, "single");
  CheckBackward<T>(rng.Ints(7, 0, 4), 5, 3, 32, "random");
  CheckBackward<T>(rng.Ints(64, 0, 999), 1000, 33, 33, "random");
  CheckBackward<T>(rng.Ints(257, 0, 50256), 50257, 64, 34, "random");
  std::vector<int32_t> edges = rng.Ints(300, 0, 128255);
  edges[0] = 0;
  edges[1] = 128255;
  edges[2] = 128255;
  CheckBackward<T>(edges, 128256, 17, 35, "random with edge ids");
  CheckBackward<T>(rng.Ints(40, 0, 6), 7, 4097, 36, "wide rows");
}

TYPED_TEST(CudaEmbedding, BackwardRepeatedTokens) {
  SLUICE_SKIP_WITHOUT_GPU();
  using T = TypeParam;
  Rng rng(40);
  CheckBackward<T>(rng.Ints(1000, 0, 3), 10, 257, 41, "four ids repeated");
  CheckBackward<T>(std::vector<int32_t>(2048, 6), 9, 129, 42, "all the same id");
  CheckBackward<T>(std::vector<int32_t>(500, 0), 1, 1000, 43, "vocab 1");
  // A long-tailed mix, as real text: a few ids hold most tokens.
  std::vector<int32_t> skewed(4096);
  const std::vector<double> u = rng.Uniform<double>(4096, 0, 1);
  for (size_t i = 0; i < skewed.size(); ++i) {
    skewed[i] = static_cast<int32_t>(50257 * u[i] * u[i] * u[i] * u[i]);
  }
  CheckBackward<T>(skewed, 50257, 96, 44, "skewed");
  // 16-byte columns (dim a multiple of 8): one id over several 256-token scan chunks, and
  // rows wider than one block's column tile.
  CheckBackward<T>(std::vector<int32_t>(700, 3), 5, 2048, 45, "one id, wide rows");
  std::vector<int32_t> pairs = rng.Ints(600, 0, 299);
  pairs.insert(pairs.end(), pairs.begin(), pairs.end());  // every id again 600 tokens later
  CheckBackward<T>(pairs, 300, 4104, 46, "repeated half, wider than a tile");
  // The benchmark's mix: a few thousand tokens, nearly all of distinct ids.
  CheckBackward<T>(rng.Ints(4096, 0, 3999), 4000, 264, 47, "mostly distinct");
  CheckBackward<T>(rng.Ints(33, 0, 9), 10, 8, 48, "one warp per row");
}

TYPED_TEST(CudaEmbedding, BackwardOutOfRangeTokenSetsFlagAndIsSkipped) {
  SLUICE_SKIP_WITHOUT_GPU();
  using T = TypeParam;
  const int64_t vocab = 6, dim = 5;
  const std::vector<int32_t> tokens = {2, -1, 6, 2, INT32_MAX, 0, INT32_MIN, 5};
  const int64_t n = static_cast<int64_t>(tokens.size());
  Rng rng(50);
  const std::vector<float> dout = rng.Uniform(n * dim, -2, 2);
  const std::vector<float> dtable0 = rng.Uniform(vocab * dim, -1, 1);
  int32_t flag = 0;
  const std::vector<float> got = RunBackward<T>(tokens, Cast<T>(dout), dtable0, vocab, dim, &flag);
  EXPECT_EQ(flag, 1);

  // The reference on the valid rows only.
  std::vector<int32_t> valid_tokens;
  std::vector<double> valid_dout;
  const std::vector<double> rounded = RoundTripToDouble<T>(dout);
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) continue;
    valid_tokens.push_back(tokens[i]);
    valid_dout.insert(valid_dout.end(), rounded.begin() + i * dim, rounded.begin() + (i + 1) * dim);
  }
  std::vector<double> expected(dtable0.begin(), dtable0.end());
  ref::EmbeddingBackward<double>(valid_tokens.data(), valid_dout.data(), expected.data(),
                                 static_cast<int64_t>(valid_tokens.size()), vocab, dim);
  ExpectClose(got, expected, kSumTol, "EmbeddingBackward with out-of-range ids " + TypeName<T>());
}

// ---- Position embeddings

template <typename T>
void CheckPosition(int64_t batch, int64_t seq, int64_t positions, int64_t dim, uint64_t seed) {
  const std::string what =
      TypeName<T>() + " batch=" + std::to_string(batch) + " seq=" + std::to_string(seq) +
      " positions=" + std::to_string(positions) + " dim=" + std::to_string(dim);
  SCOPED_TRACE(what);
  Rng rng(seed);
  const int64_t total = batch * seq * dim;
  const std::vector<float> wpe = rng.Uniform(positions * dim, -1, 1);
  const std::vector<float> x = rng.Uniform(total, -3, 3);
  const std::vector<float> dx = rng.Uniform(total, -2, 2);
  const std::vector<float> dwpe0 = rng.Uniform(positions * dim, -1, 1);
  TestStream stream;

  DeviceArray<T> d_wpe(Cast<T>(wpe));
  DeviceArray<T> d_x(Cast<T>(x));
  SLUICE_EXPECT_LAUNCH_OK(PositionEmbeddingForward<T>(d_wpe.data(), d_x.data(), batch, seq,
                                                      positions, dim, stream.get()));
  std::vector<double> expected_x = RoundTripToDouble<T>(x);
  ref::PositionEmbeddingForward<double>(RoundTripToDouble<T>(wpe).data(), expected_x.data(), batch,
                                        seq, positions, dim);
  ExpectClose(ToFloat(d_x.Download()), expected_x, AddTol<T>(), "PositionEmbeddingForward " + what);

  DeviceArray<T> d_dx(Cast<T>(dx));
  DeviceArray<float> d_dwpe(dwpe0);
  std::vector<float> first;
  for (int run = 0; run < 2; ++run) {
    d_dwpe.Upload(dwpe0);
    SLUICE_EXPECT_LAUNCH_OK(PositionEmbeddingBackward<T>(d_dx.data(), d_dwpe.data(), batch, seq,
                                                         positions, dim, stream.get()));
    std::vector<float> got = d_dwpe.Download();
    if (run == 0) {
      first = std::move(got);
    } else {
      EXPECT_TRUE(BitwiseEqual(first, got)) << "PositionEmbeddingBackward is not repeatable";
    }
  }
  std::vector<double> expected_dwpe(dwpe0.begin(), dwpe0.end());
  ref::PositionEmbeddingBackward<double>(RoundTripToDouble<T>(dx).data(), expected_dwpe.data(),
                                         batch, seq, positions, dim);
  ExpectClose(first, expected_dwpe, kSumTol, "PositionEmbeddingBackward " + what);
  // Positions at or past seq are untouched.
  EXPECT_EQ(std::memcmp(first.data() + seq * dim, dwpe0.data() + seq * dim,
                        (positions - seq) * dim * sizeof(float)),
            0);
}

TYPED_TEST(CudaEmbedding, PositionEmbeddingMatchesReference) {
  SLUICE_SKIP_WITHOUT_GPU();
  using T = TypeParam;
  CheckPosition<T>(1, 1, 1, 1, 60);
  CheckPosition<T>(3, 7, 9, 33, 61);
  CheckPosition<T>(16, 3, 4, 7, 62);
  CheckPosition<T>(4, 64, 128, 1000, 63);
  CheckPosition<T>(2, 5, 5, 4097, 64);
  CheckPosition<T>(1000, 2, 3, 5, 65);  // a long batch sum
}

// ---- Argument checks

void ExpectInvalid(const LaunchStatus& status, const char* what) {
  EXPECT_EQ(status.code(), LaunchStatus::Code::kInvalidArgument)
      << what << ": " << status.ToString();
}

TYPED_TEST(CudaEmbedding, RejectsBadArguments) {
  SLUICE_SKIP_WITHOUT_GPU();
  using T = TypeParam;
  TestStream stream;
  cudaStream_t s = stream.get();
  DeviceArray<int32_t> tokens(std::vector<int32_t>{0, 1, 2, 3});
  DeviceArray<T> table(4 * 8);
  DeviceArray<T> out(4 * 8);
  DeviceArray<float> dtable(4 * 8);
  const size_t bytes = EmbeddingBackwardWorkspaceBytes(4, 4);
  DeviceArray<uint8_t> ws(bytes);

  ExpectInvalid(EmbeddingForward<T>(nullptr, table.data(), out.data(), 4, 4, 8, nullptr, s),
                "forward null tokens");
  ExpectInvalid(EmbeddingForward<T>(tokens.data(), nullptr, out.data(), 4, 4, 8, nullptr, s),
                "forward null table");
  ExpectInvalid(EmbeddingForward<T>(tokens.data(), table.data(), nullptr, 4, 4, 8, nullptr, s),
                "forward null out");
  ExpectInvalid(EmbeddingForward<T>(tokens.data(), table.data(), out.data(), -1, 4, 8, nullptr, s),
                "forward negative n");
  ExpectInvalid(EmbeddingBackward<T>(nullptr, out.data(), dtable.data(), 4, 4, 8, nullptr,
                                     ws.data(), bytes, s),
                "backward null tokens");
  ExpectInvalid(EmbeddingBackward<T>(tokens.data(), nullptr, dtable.data(), 4, 4, 8, nullptr,
                                     ws.data(), bytes, s),
                "backward null dout");
  ExpectInvalid(EmbeddingBackward<T>(tokens.data(), out.data(), nullptr, 4, 4, 8, nullptr,
                                     ws.data(), bytes, s),
                "backward null dtable");
  ExpectInvalid(EmbeddingBackward<T>(tokens.data(), out.data(), dtable.data(), 4, 4, 8, nullptr,
                                     nullptr, bytes, s),
                "backward null workspace");
  ExpectInvalid(EmbeddingBackward<T>(tokens.data(), out.data(), dtable.data(), 4, 4, 8, nullptr,
                                     ws.data(), bytes - 1, s),
                "backward small workspace");
  ExpectInvalid(EmbeddingBackward<T>(tokens.data(), out.data(), dtable.data(), 4, 0, 8, nullptr,
                                     ws.data(), bytes, s),
                "backward empty vocabulary");
  ExpectInvalid(PositionEmbeddingForward<T>(nullptr, out.data(), 1, 4, 4, 8, s),
                "position forward null wpe");
  ExpectInvalid(PositionEmbeddingForward<T>(table.data(), nullptr, 1, 4, 4, 8, s),
                "position forward null x");
  ExpectInvalid(PositionEmbeddingForward<T>(table.data(), out.data(), 1, 5, 4, 8, s),
                "position forward seq > positions");
  ExpectInvalid(PositionEmbeddingBackward<T>(nullptr, dtable.data(), 1, 4, 4, 8, s),
                "position backward null dx");
  ExpectInvalid(PositionEmbeddingBackward<T>(out.data(), nullptr, 1, 4, 4, 8, s),
                "position backward null dwpe");
  ExpectInvalid(PositionEmbeddingBackward<T>(out.data(), dtable.data(), 1, 5, 4, 8, s),
                "position backward seq > positions");

  // Empty work is a no-op that touches no pointer.
  EXPECT_EQ(EmbeddingBackwardWorkspaceBytes(0, 4), 0u);
  SLUICE_EXPECT_LAUNCH_OK(EmbeddingForward<T>(nullptr, nullptr, nullptr, 0, 4, 8, nullptr, s));
  SLUICE_EXPECT_LAUNCH_OK(
      EmbeddingBackward<T>(nullptr, nullptr, nullptr, 0, 4, 8, nullptr, nullptr, 0, s));
  SLUICE_EXPECT_LAUNCH_OK(PositionEmbeddingForward<T>(nullptr, nullptr, 0, 4, 4, 8, s));
  SLUICE_EXPECT_LAUNCH_OK(PositionEmbeddingBackward<T>(nullptr, nullptr, 0, 4, 4, 8, s));
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
}

}  // namespace
}  // namespace sluice::kernels::cuda
