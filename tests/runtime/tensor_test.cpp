#include "runtime/tensor.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

namespace sluice {
namespace {

class TensorDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST(ShapeTest, DimsRankNumelAndText) {
  Shape shape({4, 1024});
  EXPECT_EQ(shape.rank(), 2);
  EXPECT_EQ(shape.dim(0), 4);
  EXPECT_EQ(shape.dim(1), 1024);
  EXPECT_EQ(shape.numel(), 4096);
  EXPECT_EQ(shape.ToString(), "[4, 1024]");
  EXPECT_EQ(Shape().rank(), 0);
  EXPECT_EQ(Shape().numel(), 1);  // a scalar
  EXPECT_EQ(Shape().ToString(), "[]");
  EXPECT_EQ(Shape({3, 0, 5}).numel(), 0);
}

TEST(ShapeTest, EqualityComparesRankAndEveryDim) {
  EXPECT_EQ(Shape({2, 3}), Shape({2, 3}));
  EXPECT_FALSE(Shape({2, 3}) == Shape({3, 2}));
  EXPECT_FALSE(Shape({6}) == Shape({6, 1}));
  EXPECT_EQ(Shape(), Shape());
}

TEST(ShapeTest, FromSpanAndMaxRank) {
  std::vector<int64_t> dims = {1, 2, 1, 2, 1, 2, 1, 2};
  Shape shape{std::span<const int64_t>(dims)};
  EXPECT_EQ(shape.rank(), Shape::kMaxRank);
  EXPECT_EQ(shape.numel(), 16);
  EXPECT_EQ(std::vector<int64_t>(shape.dims().begin(), shape.dims().end()), dims);
}

TEST_F(TensorDeathTest, ShapeRejectsTooManyDimsNegativeDimsAndOverflow) {
  EXPECT_DEATH(Shape({1, 1, 1, 1, 1, 1, 1, 1, 1}), "shape rank too large");
  EXPECT_DEATH(Shape({4, -1}), "negative dimension");
  EXPECT_DEATH(Shape({int64_t{1} << 40, int64_t{1} << 40}), "overflows int64");
  EXPECT_DEATH((void)Shape({2, 3}).dim(2), "dimension 2 of rank-2 shape");
}

TEST(TensorTest, DefaultIsEmpty) {
  Tensor tensor;
  EXPECT_EQ(tensor.raw_data(), nullptr);
  EXPECT_EQ(tensor.numel(), 0);
  EXPECT_EQ(tensor.nbytes(), 0u);
  EXPECT_EQ(tensor.ToString(), "f32[0] on host");
}

TEST(TensorTest, DescribesItsBytes) {
  std::vector<float> storage(4 * 6);
  Tensor tensor(storage.data(), DType::kF32, {4, 6}, MemoryTier::kHostPinned);
  EXPECT_EQ(tensor.raw_data(), storage.data());
  EXPECT_EQ(tensor.data<float>(), storage.data());
  EXPECT_EQ(tensor.data<const float>(), storage.data());
  EXPECT_EQ(tensor.dtype(), DType::kF32);
  EXPECT_EQ(tensor.rank(), 2);
  EXPECT_EQ(tensor.dim(0), 4);
  EXPECT_EQ(tensor.dim(1), 6);
  EXPECT_EQ(tensor.numel(), 24);
  EXPECT_EQ(tensor.nbytes(), 96u);
  EXPECT_EQ(tensor.tier(), MemoryTier::kHostPinned);
  EXPECT_EQ(tensor.device_index(), 0);

  std::vector<uint16_t> halves(10);
  Tensor bf16(halves.data(), DType::kBF16, {10}, MemoryTier::kDevice, 1);
  EXPECT_EQ(bf16.nbytes(), 20u);
  EXPECT_EQ(bf16.data<uint16_t>(), halves.data());
  Tensor f16(halves.data(), DType::kF16, {2, 5});
  EXPECT_EQ(f16.data<uint16_t>(), halves.data());
  EXPECT_EQ(f16.tier(), MemoryTier::kHost);
}

TEST(TensorTest, ToStringNamesDtypeShapeAndPlace) {
  uint16_t dummy = 0;
  EXPECT_EQ(Tensor(&dummy, DType::kBF16, {4, 1024}, MemoryTier::kDevice, 0).ToString(),
            "bf16[4, 1024] on device:0");
  EXPECT_EQ(Tensor(&dummy, DType::kF16, {7}, MemoryTier::kDevice, 3).ToString(),
            "f16[7] on device:3");
  EXPECT_EQ(Tensor(&dummy, DType::kF32, {8}, MemoryTier::kHostPinned).ToString(),
            "f32[8] on host_pinned");
  EXPECT_EQ(Tensor(&dummy, DType::kF32, Shape(), MemoryTier::kHost).ToString(), "f32[] on host");
  EXPECT_EQ(Tensor(nullptr, DType::kBF16, {2, 2}, MemoryTier::kNvme).ToString(),
            "bf16[2, 2] on nvme");
}

TEST(TensorTest, SliceSharesRowsAlongDimZero) {
  std::vector<float> storage(4 * 3 * 2);
  std::iota(storage.begin(), storage.end(), 0.0f);
  Tensor tensor(storage.data(), DType::kF32, {4, 3, 2}, MemoryTier::kDevice, 2);

  Tensor rows = tensor.Slice(1, 3);
  EXPECT_EQ(rows.shape(), Shape({2, 3, 2}));
  EXPECT_EQ(rows.data<float>(), storage.data() + 6);
  EXPECT_EQ(rows.data<float>()[0], 6.0f);
  EXPECT_EQ(rows.data<float>()[rows.numel() - 1], 17.0f);
  EXPECT_EQ(rows.tier(), MemoryTier::kDevice);
  EXPECT_EQ(rows.device_index(), 2);

  rows.data<float>()[0] = -1.0f;  // a view: writes land in the parent's bytes
  EXPECT_EQ(storage[6], -1.0f);

  EXPECT_EQ(tensor.Slice(0, 4).raw_data(), tensor.raw_data());
  EXPECT_EQ(tensor.Slice(0, 4).shape(), tensor.shape());
  Tensor empty = tensor.Slice(4, 4);
  EXPECT_EQ(empty.numel(), 0);
  EXPECT_EQ(empty.data<float>(), storage.data() + storage.size());
}

TEST(TensorTest, SliceOfHalfTypesStepsByTwoBytes) {
  std::vector<uint16_t> storage(5 * 8);
  Tensor tensor(storage.data(), DType::kBF16, {5, 8});
  EXPECT_EQ(tensor.Slice(2, 5).data<uint16_t>(), storage.data() + 16);
  EXPECT_EQ(tensor.Slice(2, 5).nbytes(), 3u * 8 * 2);
}

TEST(TensorTest, ReshapeKeepsBytesAndChecksElementCount) {
  std::vector<float> storage(24);
  Tensor tensor(storage.data(), DType::kF32, {4, 6}, MemoryTier::kHost);
  for (const Shape& shape : {Shape({6, 4}), Shape({24}), Shape({2, 3, 4}), Shape({1, 24, 1})}) {
    Result<Tensor> reshaped = tensor.Reshape(shape);
    ASSERT_TRUE(reshaped.ok()) << reshaped.status().ToString();
    EXPECT_EQ(reshaped->shape(), shape);
    EXPECT_EQ(reshaped->raw_data(), storage.data());
    EXPECT_EQ(reshaped->dtype(), DType::kF32);
    EXPECT_EQ(reshaped->tier(), MemoryTier::kHost);
  }
  float scalar = 1.0f;
  EXPECT_TRUE(Tensor(&scalar, DType::kF32, {1, 1}).Reshape(Shape()).ok());
}

TEST(TensorTest, ReshapeToADifferentElementCountNamesBothShapes) {
  std::vector<uint16_t> storage(24);
  Tensor tensor(storage.data(), DType::kBF16, {4, 6}, MemoryTier::kDevice, 1);
  Result<Tensor> reshaped = tensor.Reshape({5, 5});
  ASSERT_FALSE(reshaped.ok());
  EXPECT_EQ(reshaped.status().code(), StatusCode::kInvalidArgument);
  const std::string& message = reshaped.status().message();
  EXPECT_NE(message.find("bf16[4, 6] on device:1"), std::string::npos) << message;
  EXPECT_NE(message.find("[5, 5]"), std::string::npos) << message;
  EXPECT_NE(message.find("24"), std::string::npos) << message;
  EXPECT_NE(message.find("25"), std::string::npos) << message;
}

TEST(TensorTest, FlattenIsRankOne) {
  std::vector<uint16_t> storage(2 * 3 * 4);
  Tensor flat = Tensor(storage.data(), DType::kF16, {2, 3, 4}, MemoryTier::kHostPinned).Flatten();
  EXPECT_EQ(flat.shape(), Shape({24}));
  EXPECT_EQ(flat.raw_data(), storage.data());
  EXPECT_EQ(flat.dtype(), DType::kF16);
  EXPECT_EQ(flat.tier(), MemoryTier::kHostPinned);
  float scalar = 0.0f;
  EXPECT_EQ(Tensor(&scalar, DType::kF32, Shape()).Flatten().shape(), Shape({1}));
}

TEST_F(TensorDeathTest, TypedAccessChecksTheDtype) {
  std::vector<uint16_t> halves(4);
  Tensor bf16(halves.data(), DType::kBF16, {4}, MemoryTier::kDevice, 0);
  EXPECT_DEATH(bf16.data<float>(), "does not hold bf16: bf16\\[4\\] on device:0");
  float value = 0.0f;
  Tensor f32(&value, DType::kF32, {1});
  EXPECT_DEATH(f32.data<uint16_t>(), "does not hold f32");
}

TEST_F(TensorDeathTest, SliceOutOfBoundsAborts) {
  std::vector<float> storage(8);
  Tensor tensor(storage.data(), DType::kF32, {4, 2});
  EXPECT_DEATH(tensor.Slice(3, 5), "Slice\\(3, 5\\) out of bounds of f32\\[4, 2\\] on host");
  EXPECT_DEATH(tensor.Slice(2, 1), "out of bounds");
  EXPECT_DEATH(tensor.Slice(-1, 1), "out of bounds");
  EXPECT_DEATH(Tensor(storage.data(), DType::kF32, Shape()).Slice(0, 0), "Slice of a scalar");
}

}  // namespace
}  // namespace sluice
