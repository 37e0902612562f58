// The flat-buffer ops of kernels/cuda/flat_ops.h. Fill, the conversions, AccumulateToF32, Scale,
// FlagInfOrNan and the segment copies are exact, so they are compared bit for bit (conversions
// against kernels/ref/half.h); SquaredSum against a long-double sum with a declared tolerance.
// Sizes with and without a vector tail, aligned and misaligned pointers (the vector and the
// element-wise kernels), and guard elements around each range that must stay untouched.
#include "kernels/cuda/flat_ops.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>  // cudaMalloc(T**), which DeviceArray calls
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/ref/half.h"
#include "tests/kernels_cuda/cuda_test_util.h"

namespace sluice::kernels::cuda {
namespace {

using testing::DeviceArray;
using testing::Rng;
using testing::TestStream;

constexpr uint8_t kSentinelByte = 0xa5;
constexpr size_t kGuard = 3;

// The sizes every op runs: single elements, vector tails, a multi-block grid.
const std::vector<size_t> kSizes = {1, 3, 7, 8, 1000, 4097, (size_t{1} << 20) + 5};

__nv_bfloat16* AsBf16(uint16_t* p) { return reinterpret_cast<__nv_bfloat16*>(p); }
const __nv_bfloat16* AsBf16(const uint16_t* p) { return reinterpret_cast<const __nv_bfloat16*>(p); }
__half* AsF16(uint16_t* p) { return reinterpret_cast<__half*>(p); }
const __half* AsF16(const uint16_t* p) { return reinterpret_cast<const __half*>(p); }

template <typename T>
uint64_t Bits(T value) {
  if constexpr (sizeof(T) == 8) {
    return std::bit_cast<uint64_t>(value);
  } else if constexpr (sizeof(T) == 4) {
    return std::bit_cast<uint32_t>(value);
  } else {
    uint16_t bits;
    static_assert(sizeof(T) == sizeof(bits));
    std::memcpy(&bits, &value, sizeof(bits));
    return bits;
  }
}

template <typename T>
T Sentinel() {
  T value;
  std::memset(&value, kSentinelByte, sizeof(value));
  return value;
}

// A device array holding `host` at element `offset`, sentinel bytes around it.
template <typename T>
class Placed {
 public:
  Placed(const std::vector<T>& host, size_t offset)
      : offset_(offset), n_(host.size()), device_(host.size() + offset + kGuard) {
    device_.Fill(kSentinelByte);
    if (n_ > 0) {
      EXPECT_EQ(
          cudaMemcpy(device_.data() + offset, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice),
          cudaSuccess);
    }
    // A pageable upload may return before its last DMA lands; the ops run on a non-blocking
    // stream that does not wait for it (seen on an H100: the tail past 1 MiB kept the sentinel).
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  Placed(size_t n, size_t offset) : Placed(std::vector<T>(n, Sentinel<T>()), offset) {}

  T* get() { return device_.data() + offset_; }
  // The range's elements; the guards must hold the sentinel.
  std::vector<T> Download(const std::string& what) const {
    const std::vector<T> all = device_.Download();
    for (size_t i = 0; i < all.size(); ++i) {
      if (i >= offset_ && i < offset_ + n_) continue;
      EXPECT_EQ(Bits(all[i]), Bits(Sentinel<T>())) << what << ": guard element " << i << " written";
    }
    return std::vector<T>(all.begin() + offset_, all.begin() + offset_ + n_);
  }

 private:
  size_t offset_;
  size_t n_;
  DeviceArray<T> device_;
};

template <typename T>
void ExpectBitwise(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (Bits(got[i]) != Bits(want[i]) && ++failures <= 5) {
      ADD_FAILURE() << what << "[" << i << "]: got 0x" << std::hex << Bits(got[i]) << ", want 0x"
                    << Bits(want[i]) << std::dec;
    }
  }
  EXPECT_EQ(failures, 0) << what << ": " << failures << " of " << got.size() << " differ";
}

std::string Name(const char* op, size_t n, size_t offset) {
  return std::string(op) + " n=" + std::to_string(n) + " offset=" + std::to_string(offset);
}

// f32 patterns where rounding to bf16 / f16 is delicate: signed zeros, infinities, quiet and
// signalling NaNs with payloads, f32 subnormals, exact ties and near-ties in both formats, the f16
// overflow threshold, f16 subnormals and their ties, then random bit patterns.
std::vector<float> TrickyFloats(size_t count) {
  std::vector<uint32_t> bits = {
      0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u,
      0xff812345u, 0x7fbfffffu, 0x00000001u, 0x807fffffu, 0x00400000u, 0x7f7fffffu, 0xff7fffffu,
      0x3f808000u, 0x3f818000u, 0x3f80c000u, 0xbf808000u, 0x3f807fffu, 0x3f808001u, 0x7f7f8000u,
      0x7f7f7fffu, 0x477fe000u, 0x477ff000u, 0x477fefffu, 0xc77ff000u, 0x38800000u, 0x387fc000u,
      0x387fe000u, 0x33800000u, 0x33000000u, 0x33000001u, 0xb3000000u, 0x32ffffffu, 0x3f7fffffu,
      0x4b800000u, 0x3c003000u, 0x3c002000u, 0x3c001000u, 0x38801000u, 0x38802000u, 0x38803000u,
      0xb8801000u, 0x33c00000u, 0x34000000u};
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> around_f16(-70000.0f, 70000.0f);
  while (bits.size() < count) {
    bits.push_back(bits.size() % 2 == 0 ? static_cast<uint32_t>(rng())
                                        : std::bit_cast<uint32_t>(around_f16(rng)));
  }
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = std::bit_cast<float>(bits[i]);
  return out;
}

TEST(CudaFlatOps, FillWritesExactlyTheRange) {
  SLUICE_SKIP_WITHOUT_GPU();
  TestStream stream;
  for (size_t n : kSizes) {
    for (size_t offset : {0, 1}) {
      {
        Placed<float> y(n, offset);
        SLUICE_EXPECT_LAUNCH_OK(Fill(y.get(), -1.5f, static_cast<int64_t>(n), stream.get()));
        ExpectBitwise(y.Download(Name("Fill f32", n, offset)), std::vector<float>(n, -1.5f),
                      Name("Fill f32", n, offset));
      }
      {
        Placed<uint16_t> y(n, offset);
        const uint16_t bits = F32ToBf16(3.140625f);
        const __nv_bfloat16 value = testing::ToBf16(3.140625f);
        SLUICE_EXPECT_LAUNCH_OK(
            Fill(AsBf16(y.get()), value, static_cast<int64_t>(n), stream.get()));
        ExpectBitwise(y.Download(Name("Fill bf16", n, offset)), std::vector<uint16_t>(n, bits),
                      Name("Fill bf16", n, offset));
      }
      {
        Placed<int32_t> y(n, offset);
        SLUICE_EXPECT_LAUNCH_OK(Fill(y.get(), int32_t{-7}, static_cast<int64_t>(n), stream.get()));
        ExpectBitwise(y.Download(Name("Fill i32", n, offset)), std::vector<int32_t>(n, -7),
                      Name("Fill i32", n, offset));
      }
    }
  }
  SLUICE_EXPECT_LAUNCH_OK(Fill(static_cast<float*>(nullptr), 1.0f, 0, stream.get()));
  EXPECT_EQ(Fill(static_cast<float*>(nullptr), 1.0f, 5, stream.get()).code(),
            LaunchStatus::Code::kInvalidArgument);
}

TEST(CudaFlatOps, F32ToHalfConversionsMatchReferenceBitForBit) {
  SLUICE_SKIP_WITHOUT_GPU();
  TestStream stream;
  for (size_t count : {size_t{1}, size_t{45}, size_t{100003}}) {
    std::vector<float> x = TrickyFloats(count);
    x.resize(count);
    std::vector<uint16_t> want_bf16(count), want_f16(count);
    for (size_t i = 0; i < count; ++i) {
      want_bf16[i] = F32ToBf16(x[i]);
      want_f16[i] = F32ToF16(x[i]);
    }
    for (size_t offset : {0, 1}) {
      Placed<float> dx(x, offset);
      Placed<uint16_t> bf16(count, offset), f16(count, offset);
      SLUICE_EXPECT_LAUNCH_OK(ConvertF32ToBf16(dx.get(), AsBf16(bf16.get()),
                                               static_cast<int64_t>(count), stream.get()));
      SLUICE_EXPECT_LAUNCH_OK(
          ConvertF32ToF16(dx.get(), AsF16(f16.get()), static_cast<int64_t>(count), stream.get()));
      ExpectBitwise(bf16.Download(Name("f32->bf16", count, offset)), want_bf16,
                    Name("f32->bf16", count, offset));
      ExpectBitwise(f16.Download(Name("f32->f16", count, offset)), want_f16,
                    Name("f32->f16", count, offset));
    }
  }
}

TEST(CudaFlatOps, HalfToF32ConversionsMatchReferenceForEveryPattern) {
  SLUICE_SKIP_WITHOUT_GPU();
  TestStream stream;
  // All 65536 patterns (NaNs, infinities, subnormals), plus one so a vector tail remains.
  std::vector<uint16_t> x(65537);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint16_t>(i * 40503u);
  std::vector<float> want_bf16(x.size()), want_f16(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    want_bf16[i] = Bf16ToF32(x[i]);
    want_f16[i] = F16ToF32(x[i]);
  }
  for (size_t offset : {0, 1}) {
    Placed<uint16_t> dx(x, offset);
    Placed<float> from_bf16(x.size(), offset), from_f16(x.size(), offset);
    const auto n = static_cast<int64_t>(x.size());
    SLUICE_EXPECT_LAUNCH_OK(ConvertBf16ToF32(AsBf16(dx.get()), from_bf16.get(), n, stream.get()));
    SLUICE_EXPECT_LAUNCH_OK(ConvertF16ToF32(AsF16(dx.get()), from_f16.get(), n, stream.get()));
    ExpectBitwise(from_bf16.Download("bf16->f32"), want_bf16, Name("bf16->f32", x.size(), offset));
    ExpectBitwise(from_f16.Download("f16->f32"), want_f16, Name("f16->f32", x.size(), offset));
  }
}

TEST(CudaFlatOps, AccumulateAndScaleAreExactFloatOps) {
  SLUICE_SKIP_WITHOUT_GPU();
  TestStream stream;
  for (size_t n : kSizes) {
    Rng rng(n);
    const std::vector<float> y0 = rng.Uniform<float>(static_cast<int64_t>(n), -10.0, 10.0);
    const std::vector<float> x = rng.Uniform<float>(static_cast<int64_t>(n), -1.0, 1.0);
    std::vector<uint16_t> x16(n);
    for (size_t i = 0; i < n; ++i) x16[i] = F32ToBf16(x[i]);
    for (size_t offset : {0, 1}) {
      std::vector<float> want(n);
      {
        Placed<float> dx(x, offset), dy(y0, offset);
        SLUICE_EXPECT_LAUNCH_OK(
            AccumulateToF32(dx.get(), dy.get(), static_cast<int64_t>(n), stream.get()));
        SLUICE_EXPECT_LAUNCH_OK(
            AccumulateToF32(dx.get(), dy.get(), static_cast<int64_t>(n), stream.get()));
        for (size_t i = 0; i < n; ++i) want[i] = (y0[i] + x[i]) + x[i];
        ExpectBitwise(dy.Download("acc f32"), want, Name("AccumulateToF32 f32", n, offset));
      }
      {
        // The bf16 input misaligned on its own while y stays aligned, and the other way round.
        Placed<uint16_t> dx(x16, offset);
        Placed<float> dy(y0, 1 - offset);
        SLUICE_EXPECT_LAUNCH_OK(
            AccumulateToF32(AsBf16(dx.get()), dy.get(), static_cast<int64_t>(n), stream.get()));
        for (size_t i = 0; i < n; ++i) want[i] = y0[i] + Bf16ToF32(x16[i]);
        ExpectBitwise(dy.Download("acc bf16"), want, Name("AccumulateToF32 bf16", n, offset));
      }
      {
        Placed<float> dy(y0, offset);
        SLUICE_EXPECT_LAUNCH_OK(Scale(dy.get(), 0.3f, static_cast<int64_t>(n), stream.get()));
        for (size_t i = 0; i < n; ++i) want[i] = y0[i] * 0.3f;
        ExpectBitwise(dy.Download("scale"), want, Name("Scale", n, offset));
      }
    }
  }
}

// --- SquaredSum ---------------------------------------------------------------------------------

// Compensated (Kahan) sum in long double: the reference's own error is far below the tolerance.
class ExactishSum {
 public:
  void Add(long double term) {
    const long double y = term - carry_;
    const long double t = sum_ + y;
    carry_ = (t - sum_) - y;
    sum_ = t;
  }
  double value() const { return static_cast<double>(sum_); }

 private:
  long double sum_ = 0;
  long double carry_ = 0;
};

// Every term is positive, so each double addition errs by at most 2^-53 of the running sum; the
// kernel's longest chain of additions is 32 per thread + 8 (block tree) + the finish pass's
// ceil(chunks / 256) + 8, under 100 for these sizes, hence relative error < 100 * 2^-53 ~ 1.1e-14.
constexpr double kSquaredSumTolerance = 2e-14;

template <typename T>
double RunSquaredSum(const T* x, int64_t n, TestStream& stream) {
  DeviceArray<uint8_t> workspace(std::max<size_t>(SquaredSumWorkspaceBytes(n), 1));
  DeviceArray<double> out(1);
  out.Fill(0xff);  // NaN: n == 0 must overwrite it
  const LaunchStatus status =
      SquaredSum(x, n, out.data(), workspace.data(), SquaredSumWorkspaceBytes(n), stream.get());
  EXPECT_TRUE(status.ok()) << status.ToString();
  return out.Download()[0];
}

TEST(CudaFlatOps, SquaredSumMatchesLongDoubleAndIgnoresAlignment) {
  SLUICE_SKIP_WITHOUT_GPU();
  TestStream stream;
  for (size_t n : {size_t{1}, size_t{7}, size_t{8191}, size_t{8192}, size_t{8193},
                   size_t{3 * 8192 + 5}, (size_t{1} << 20) + 3, size_t{3} << 21}) {
    Rng rng(n + 5);
    std::vector<float> x = rng.Uniform<float>(static_cast<int64_t>(n), -2.0, 2.0);
    x[n / 2] = 3e4f;  // large magnitudes alongside small ones
    std::vector<uint16_t> x16(n);
    for (size_t i = 0; i < n; ++i) x16[i] = F32ToBf16(x[i]);
    ExactishSum sum32, sum16;
    for (size_t i = 0; i < n; ++i) {
      sum32.Add(static_cast<long double>(x[i]) * x[i]);
      const long double b = Bf16ToF32(x16[i]);
      sum16.Add(b * b);
    }
    const double want32 = sum32.value(), want16 = sum16.value();
    double first32 = 0, first16 = 0;
    for (size_t offset : {0, 1, 2}) {
      const std::string what = Name("SquaredSum", n, offset);
      Placed<float> dx(x, offset);
      Placed<uint16_t> dx16(x16, offset);
      const double got32 = RunSquaredSum(dx.get(), static_cast<int64_t>(n), stream);
      const double got16 = RunSquaredSum(AsBf16(dx16.get()), static_cast<int64_t>(n), stream);
      EXPECT_LE(std::abs(got32 - want32), kSquaredSumTolerance * want32)
          << what << " f32: got " << got32 << ", want " << want32;
      EXPECT_LE(std::abs(got16 - want16), kSquaredSumTolerance * want16)
          << what << " bf16: got " << got16 << ", want " << want16;
      if (offset == 0) {
        first32 = got32;
        first16 = got16;
        // Run to run: the same bits.
        EXPECT_EQ(Bits(RunSquaredSum(dx.get(), static_cast<int64_t>(n), stream)), Bits(got32))
            << what;
      } else {
        // Whether the kernel loads vectors or elements, the order of the additions is the same.
        EXPECT_EQ(Bits(got32), Bits(first32)) << what << " f32 depends on alignment";
        EXPECT_EQ(Bits(got16), Bits(first16)) << what << " bf16 depends on alignment";
      }
    }
  }
}

TEST(CudaFlatOps, SquaredSumsOfSeveralBuffersShareAWorkspace) {
  SLUICE_SKIP_WITHOUT_GPU();
  TestStream stream;
  const std::vector<int64_t> sizes = {100000, 3, 20000};
  Rng rng(3);
  std::vector<std::vector<float>> buffers;
  std::vector<std::unique_ptr<DeviceArray<float>>> device;
  size_t workspace_bytes = 0;
  for (int64_t n : sizes) {
    buffers.push_back(rng.Uniform<float>(n));
    device.push_back(std::make_unique<DeviceArray<float>>(buffers.back()));
    workspace_bytes = std::max(workspace_bytes, SquaredSumWorkspaceBytes(n));
  }
  DeviceArray<uint8_t> workspace(workspace_bytes);
  DeviceArray<double> out(sizes.size());
  for (size_t k = 0; k < sizes.size(); ++k) {
    SLUICE_EXPECT_LAUNCH_OK(SquaredSum(device[k]->data(), sizes[k], out.data() + k,
                                       workspace.data(), workspace_bytes, stream.get()));
  }
  const std::vector<double> got = out.Download();
  for (size_t k = 0; k < sizes.size(); ++k) {
    EXPECT_EQ(Bits(got[k]), Bits(RunSquaredSum(device[k]->data(), sizes[k], stream)))
        << "buffer " << k;
    ExactishSum want;
    for (float v : buffers[k]) want.Add(static_cast<long double>(v) * v);
    EXPECT_NEAR(got[k], want.value(), kSquaredSumTolerance * want.value()) << "buffer " << k;
  }
}

TEST(CudaFlatOps, SquaredSumEdgeCases) {
  SLUICE_SKIP_WITHOUT_GPU();
  TestStream stream;
  EXPECT_EQ(Bits(RunSquaredSum(static_cast<const float*>(nullptr), 0, stream)), Bits(0.0));
  const size_t n = 20000;
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    std::vector<float> x(n, 0.5f);
    x[n - 1] = bad;
    DeviceArray<float> dx(x);
    const double got = RunSquaredSum(dx.data(), static_cast<int64_t>(n), stream);
    EXPECT_FALSE(std::isfinite(got)) << bad;
    EXPECT_EQ(std::isnan(got), std::isnan(bad)) << bad;
  }
  // Squares of finite fp32 values overflow neither float's double accumulation nor its range.
  std::vector<float> huge(n, 3e38f);
  DeviceArray<float> dhuge(huge);
  const double got = RunSquaredSum(dhuge.data(), static_cast<int64_t>(n), stream);
  const double want = static_cast<double>(n) * (double{3e38f} * double{3e38f});
  EXPECT_NEAR(got, want, kSquaredSumTolerance * want);

  DeviceArray<double> out(1);
  DeviceArray<float> dx(std::vector<float>(n, 1.0f));
  const size_t needed = SquaredSumWorkspaceBytes(static_cast<int64_t>(n));
  ASSERT_GT(needed, 0u);
  DeviceArray<uint8_t> small(needed);
  EXPECT_EQ(SquaredSum(dx.data(), static_cast<int64_t>(n), out.data(), small.data(), needed - 8,
                       stream.get())
                .code(),
            LaunchStatus::Code::kInvalidArgument);
  EXPECT_EQ(SquaredSumWorkspaceBytes(kSquaredSumChunk), 0u);
}

// --- FlagInfOrNan -------------------------------------------------------------------------------

TEST(CudaFlatOps, FlagInfOrNanFindsEveryPositionAndOrs) {
  SLUICE_SKIP_WITHOUT_GPU();
  TestStream stream;
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<uint32_t> bad32 = {std::bit_cast<uint32_t>(inf),
                                       std::bit_cast<uint32_t>(-inf),
                                       0x7fc00000u,
                                       0xffc00000u,
                                       0x7f800001u,
                                       0xff812345u};
  const std::vector<uint16_t> bad16 = {0x7f80u, 0xff80u, 0x7fc0u, 0xffc1u, 0x7f81u};
  for (size_t n : {size_t{1}, size_t{5}, size_t{8}, size_t{1000}, (size_t{1} << 20) + 3}) {
    for (size_t offset : {0, 1}) {
      // Largest finite values and -0 must not raise the flag.
      std::vector<float> clean32(n, 1.0f);
      std::vector<uint16_t> clean16(n, F32ToBf16(1.0f));
      for (size_t i : {size_t{0}, n / 2, n - 1}) {
        clean32[i] = i == 0 ? std::numeric_limits<float>::max()
                            : (i == n - 1 ? -std::numeric_limits<float>::max() : -0.0f);
        clean16[i] = i == 0 ? 0x7f7fu : (i == n - 1 ? 0xff7fu : 0x8000u);
      }
      std::vector<size_t> positions = {0, n / 2, n - 1};
      for (int where = -1; where < static_cast<int>(positions.size()); ++where) {
        const std::string what = Name("FlagInfOrNan", n, offset) + " position " +
                                 (where < 0 ? "none" : std::to_string(positions[where]));
        std::vector<float> x32 = clean32;
        std::vector<uint16_t> x16 = clean16;
        const size_t pick = static_cast<size_t>(where + 1);
        if (where >= 0) {
          x32[positions[where]] = std::bit_cast<float>(bad32[(pick + n) % bad32.size()]);
          x16[positions[where]] = bad16[(pick + n) % bad16.size()];
        }
        Placed<float> d32(x32, offset);
        Placed<uint16_t> d16(x16, offset);
        DeviceArray<int32_t> flags(std::vector<int32_t>{0, 0});
        SLUICE_EXPECT_LAUNCH_OK(
            FlagInfOrNan(d32.get(), static_cast<int64_t>(n), flags.data(), stream.get()));
        SLUICE_EXPECT_LAUNCH_OK(FlagInfOrNan(AsBf16(d16.get()), static_cast<int64_t>(n),
                                             flags.data() + 1, stream.get()));
        const std::vector<int32_t> got = flags.Download();
        const int32_t want = where >= 0 ? 1 : 0;
        EXPECT_EQ(got[0], want) << what << " f32";
        EXPECT_EQ(got[1], want) << what << " bf16";
      }
    }
  }
  // A set flag stays set when a clean buffer follows (the check of several buffers ORs).
  DeviceArray<float> clean(std::vector<float>(100, 2.0f));
  DeviceArray<int32_t> flag(std::vector<int32_t>{1});
  SLUICE_EXPECT_LAUNCH_OK(FlagInfOrNan(clean.data(), 100, flag.data(), stream.get()));
  EXPECT_EQ(flag.Download()[0], 1);
}

// --- Segment copies -----------------------------------------------------------------------------

// A ZeRO layout (engine/zero/shard_layout.h): parameters of odd sizes partitioned over `world`
// ranks with partition = ceil(numel / world), rank r owning [r * partition, min(numel, (r + 1) *
// partition)); the last ranks own fewer elements, possibly none.
struct Layout {
  std::vector<int64_t> numel, full_offset, partition;
  int world = 3;
  int64_t total = 0;
  int64_t piece = 0;  // one rank's elements in the bucket: the sum of the partitions
  int64_t Owned(size_t p, int r) const {
    const int64_t begin = std::min(numel[p], r * partition[p]);
    const int64_t end = std::min(numel[p], (r + 1) * partition[p]);
    return end - begin;
  }
};

Layout MakeLayout() {
  Layout layout;
  for (int64_t n : {1, 3, 7, 1000, 4097, 5, 2}) {
    layout.numel.push_back(n);
    layout.full_offset.push_back(layout.total);
    layout.partition.push_back((n + layout.world - 1) / layout.world);
    layout.total += n;
    layout.piece += layout.partition.back();
  }
  return layout;
}

// PackForReduceScatter (engine/zero/partition_copy.cpp) as segments: the full buffer into world
// rank-major pieces, each partition padded with zeros.
std::vector<FlatSegment> PackSegments(const Layout& layout) {
  std::vector<FlatSegment> segments;
  for (int r = 0; r < layout.world; ++r) {
    int64_t at = r * layout.piece;
    for (size_t p = 0; p < layout.numel.size(); ++p) {
      const int64_t owned = layout.Owned(p, r);
      segments.push_back(FlatSegment{.src_offset = layout.full_offset[p] + r * layout.partition[p],
                                     .dst_offset = at,
                                     .count = owned,
                                     .zero_fill = layout.partition[p] - owned});
      at += layout.partition[p];
    }
  }
  return segments;
}

// UnpackGathered: the inverse, without the padding.
std::vector<FlatSegment> UnpackSegments(const Layout& layout) {
  std::vector<FlatSegment> segments;
  for (const FlatSegment& s : PackSegments(layout)) {
    segments.push_back(FlatSegment{
        .src_offset = s.dst_offset, .dst_offset = s.src_offset, .count = s.count, .zero_fill = 0});
  }
  return segments;
}

template <typename T>
std::vector<T> HostPack(const Layout& layout, const std::vector<T>& full) {
  std::vector<T> bucket(static_cast<size_t>(layout.world * layout.piece));
  for (const FlatSegment& s : PackSegments(layout)) {
    for (int64_t i = 0; i < s.count; ++i) bucket[s.dst_offset + i] = full[s.src_offset + i];
    for (int64_t i = 0; i < s.zero_fill; ++i) bucket[s.dst_offset + s.count + i] = T{0};
  }
  return bucket;
}

TEST(CudaFlatOps, PackUnpackRoundTripWithPadding) {
  SLUICE_SKIP_WITHOUT_GPU();
  TestStream stream;
  const Layout layout = MakeLayout();
  const std::vector<FlatSegment> pack = PackSegments(layout);
  const std::vector<FlatSegment> unpack = UnpackSegments(layout);
  DeviceArray<FlatSegment> dpack(pack), dunpack(unpack);
  const int num = static_cast<int>(pack.size());
  const size_t bucket_size = static_cast<size_t>(layout.world * layout.piece);
  const size_t total = static_cast<size_t>(layout.total);

  Rng rng(21);
  std::vector<float> full = rng.Uniform<float>(layout.total);
  full[4] = std::bit_cast<float>(0x7fa00001u);  // a NaN payload must survive an fp32 copy
  // max_segment_elements: the true largest, and a hint far too small (it only sizes the grid).
  for (int64_t hint : {int64_t{1366}, int64_t{1}}) {
    const std::string what = "hint " + std::to_string(hint);
    Placed<float> dfull(full, 0);
    Placed<float> bucket(bucket_size, 0);
    Placed<float> back(total, 0);
    SLUICE_EXPECT_LAUNCH_OK(
        CopySegments(dfull.get(), bucket.get(), dpack.data(), num, hint, stream.get()));
    ExpectBitwise(bucket.Download(what), HostPack(layout, full), "pack f32 " + what);
    SLUICE_EXPECT_LAUNCH_OK(
        CopySegments(bucket.get(), back.get(), dunpack.data(), num, hint, stream.get()));
    ExpectBitwise(back.Download(what), full, "unpack f32 " + what);
  }

  // Pack rounding to bf16 / f16, unpack widening to fp32 (UnpackGathered of a 16-bit gather).
  std::vector<float> rounded_bf16(total), rounded_f16(total);
  std::vector<uint16_t> full_bf16(total), full_f16(total);
  for (size_t i = 0; i < total; ++i) {
    full_bf16[i] = F32ToBf16(full[i]);
    full_f16[i] = F32ToF16(full[i] * 100.0f);
    rounded_bf16[i] = Bf16ToF32(full_bf16[i]);
    rounded_f16[i] = F16ToF32(full_f16[i]);
  }
  {
    Placed<float> dfull(full, 0);
    Placed<uint16_t> bucket(bucket_size, 0);
    Placed<float> back(total, 0);
    SLUICE_EXPECT_LAUNCH_OK(
        CopySegments(dfull.get(), AsBf16(bucket.get()), dpack.data(), num, 1366, stream.get()));
    ExpectBitwise(bucket.Download("bf16"), HostPack(layout, full_bf16), "pack f32->bf16");
    SLUICE_EXPECT_LAUNCH_OK(
        CopySegments(AsBf16(bucket.get()), back.get(), dunpack.data(), num, 1366, stream.get()));
    ExpectBitwise(back.Download("bf16"), rounded_bf16, "unpack bf16->f32");
  }
  {
    std::vector<float> scaled(total);
    for (size_t i = 0; i < total; ++i) scaled[i] = full[i] * 100.0f;
    Placed<float> dfull(scaled, 0);
    Placed<uint16_t> bucket(bucket_size, 0);
    Placed<float> back(total, 0);
    SLUICE_EXPECT_LAUNCH_OK(
        CopySegments(dfull.get(), AsF16(bucket.get()), dpack.data(), num, 1366, stream.get()));
    ExpectBitwise(bucket.Download("f16"), HostPack(layout, full_f16), "pack f32->f16");
    SLUICE_EXPECT_LAUNCH_OK(
        CopySegments(AsF16(bucket.get()), back.get(), dunpack.data(), num, 1366, stream.get()));
    ExpectBitwise(back.Download("f16"), rounded_f16, "unpack f16->f32");
  }
  {
    // Same-type 16-bit copies move raw bits: a signalling-NaN pattern arrives unchanged.
    std::vector<uint16_t> raw = full_bf16;
    raw[2] = 0x7f81u;
    Placed<uint16_t> dfull(raw, 0);
    Placed<uint16_t> bucket(bucket_size, 0), bucket_f16(bucket_size, 0);
    SLUICE_EXPECT_LAUNCH_OK(CopySegments(AsBf16(static_cast<const uint16_t*>(dfull.get())),
                                         AsBf16(bucket.get()), dpack.data(), num, 1366,
                                         stream.get()));
    ExpectBitwise(bucket.Download("raw bf16"), HostPack(layout, raw), "pack bf16->bf16");
    SLUICE_EXPECT_LAUNCH_OK(CopySegments(AsF16(static_cast<const uint16_t*>(dfull.get())),
                                         AsF16(bucket_f16.get()), dpack.data(), num, 1366,
                                         stream.get()));
    ExpectBitwise(bucket_f16.Download("raw f16"), HostPack(layout, raw), "pack f16->f16");
  }

  SLUICE_EXPECT_LAUNCH_OK(CopySegments(static_cast<const float*>(nullptr),
                                       static_cast<float*>(nullptr), nullptr, 0, 0, stream.get()));
  EXPECT_EQ(CopySegments(static_cast<const float*>(nullptr), static_cast<float*>(nullptr),
                         dpack.data(), num, 1, stream.get())
                .code(),
            LaunchStatus::Code::kInvalidArgument);
}

// AccumulateIntoShard: this rank's reduced piece added into its shard at each partition's offset.
TEST(CudaFlatOps, AccumulateSegmentsAddsPiecesIntoTheShard) {
  SLUICE_SKIP_WITHOUT_GPU();
  TestStream stream;
  const Layout layout = MakeLayout();
  // The shard holds the partitions back to back; so does the piece, but reversed in order, so that
  // source and destination offsets differ.
  std::vector<FlatSegment> segments;
  int64_t shard_at = 0;
  int64_t piece_at = layout.piece;
  for (size_t p = 0; p < layout.numel.size(); ++p) {
    piece_at -= layout.partition[p];
    segments.push_back(FlatSegment{.src_offset = piece_at,
                                   .dst_offset = shard_at,
                                   .count = layout.partition[p],
                                   .zero_fill = 5});  // ignored
    shard_at += layout.partition[p];
  }
  Rng rng(9);
  const std::vector<float> piece = rng.Uniform<float>(layout.piece);
  const std::vector<float> shard0 = rng.Uniform<float>(layout.piece, -5.0, 5.0);
  std::vector<float> want = shard0;
  for (const FlatSegment& s : segments) {
    for (int64_t i = 0; i < s.count; ++i) want[s.dst_offset + i] += piece[s.src_offset + i];
  }
  DeviceArray<FlatSegment> dsegments(segments);
  Placed<float> dpiece(piece, 1), dshard(shard0, 1);
  SLUICE_EXPECT_LAUNCH_OK(AccumulateSegments(dpiece.get(), dshard.get(), dsegments.data(),
                                             static_cast<int>(segments.size()), 1366,
                                             stream.get()));
  ExpectBitwise(dshard.Download("shard"), want, "AccumulateSegments");
}

}  // namespace
}  // namespace sluice::kernels::cuda
