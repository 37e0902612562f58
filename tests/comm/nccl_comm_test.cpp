// The NCCL backend on a real device, one rank (NCCL cannot run two ranks on one GPU; the
// multi-rank logic shared with MPI is proven by the MPI tests). Skips without a GPU.
#include "runtime/comm/nccl/nccl_comm.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tests/common/test_world.h"
#include "typed_buffer.h"

namespace sluice::testing {
namespace {

bool HaveGpu() {
  int devices = 0;
  return cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
}

// A device copy of a TypedBuffer.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(const TypedBuffer& host, DType dtype)
      : bytes_(host.size() * DTypeSize(dtype)) {
    EXPECT_EQ(cudaMalloc(&data_, bytes_ == 0 ? 1 : bytes_), cudaSuccess);
    if (bytes_ > 0) {
      EXPECT_EQ(
          cudaMemcpy(data_, const_cast<TypedBuffer&>(host).data(), bytes_, cudaMemcpyHostToDevice),
          cudaSuccess);
    }
  }
  ~DeviceBuffer() { cudaFree(data_); }
  void* data() { return data_; }
  void CopyTo(TypedBuffer& host) {
    if (bytes_ > 0) {
      EXPECT_EQ(cudaMemcpy(host.data(), data_, bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
    }
  }

 private:
  void* data_ = nullptr;
  size_t bytes_;
};

class NcclCommTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveGpu()) GTEST_SKIP() << "no CUDA device visible";
    Result<std::unique_ptr<Comm>> comm =
        CreateWorldComm({.backend = CommBackend::kNccl, .timeout_seconds = 60});
    ASSERT_TRUE(comm.ok()) << comm.status().ToString();
    comm_ = std::move(comm).value();
  }
  std::unique_ptr<Comm> comm_;
};

TEST_F(NcclCommTest, ReportsBackendAndOwnsAStream) {
  EXPECT_EQ(comm_->backend_name(), "nccl");
  EXPECT_EQ(comm_->size(), 1);
  EXPECT_NE(static_cast<nccl::NcclComm&>(*comm_).native_stream(), nullptr);
}

TEST_F(NcclCommTest, AllReduceSumAndAverageInEveryDtype) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      for (size_t n : {size_t{0}, size_t{1}, size_t{1001}}) {
        SCOPED_TRACE(::testing::Message()
                     << DTypeName(dtype) << " " << ReduceOpName(op) << " " << n);
        TypedBuffer host(dtype, n);
        for (size_t i = 0; i < n; ++i) host.Set(i, static_cast<float>(i % 100));
        DeviceBuffer device(host, dtype);
        CommHandle handle = comm_->AllReduceAsync(device.data(), n, dtype, op);
        EXPECT_TRUE(handle.finished() || handle.native_event() != nullptr);
        ASSERT_TRUE(handle.Wait().ok());
        TypedBuffer back(dtype, n);
        device.CopyTo(back);
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(back.Get(i), static_cast<float>(i % 100)) << i;
      }
    }
  }
}

TEST_F(NcclCommTest, GatherScatterBroadcastBarrierAndSplit) {
  const size_t n = 1001;
  TypedBuffer host(DType::kBF16, n);
  for (size_t i = 0; i < n; ++i) host.Set(i, static_cast<float>(i % 200));
  DeviceBuffer shard(host, DType::kBF16);
  TypedBuffer zeros(DType::kBF16, n, 0.0f);
  DeviceBuffer full(zeros, DType::kBF16);
  ASSERT_TRUE(comm_->AllGather(shard.data(), full.data(), n, DType::kBF16).ok());
  TypedBuffer back(DType::kBF16, n);
  full.CopyTo(back);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(back.Get(i), static_cast<float>(i % 200)) << i;

  DeviceBuffer scattered(zeros, DType::kBF16);
  ASSERT_TRUE(
      comm_->ReduceScatter(full.data(), scattered.data(), n, DType::kBF16, ReduceOp::kAvg).ok());
  scattered.CopyTo(back);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(back.Get(i), static_cast<float>(i % 200)) << i;

  ASSERT_TRUE(comm_->Broadcast(full.data(), n, DType::kBF16, 0).ok());
  ASSERT_TRUE(comm_->Barrier().ok());
  EXPECT_EQ(comm_->Broadcast(full.data(), n, DType::kBF16, 1).code(), StatusCode::kInvalidArgument);

  Result<std::unique_ptr<Comm>> sub = comm_->Split(0, 0);
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  EXPECT_EQ((*sub)->name(), "world/split(0)");
  TypedBuffer ones(DType::kF32, 8, 1.0f);
  DeviceBuffer device_ones(ones, DType::kF32);
  ASSERT_TRUE((*sub)->AllReduce(device_ones.data(), 8, DType::kF32, ReduceOp::kSum).ok());
}

}  // namespace
}  // namespace sluice::testing
