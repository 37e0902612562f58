// The cross-backend suite of the ops table (ops_backend_suite.cpp), instantiated once per column:
// ops_backend_cpu_instantiation.cpp (cpu f32, ref f64) and ops_backend_cuda_instantiation.cpp
// (cuda f32 and bf16). Inputs go to device memory with Device::CopyAsync, results come back with a
// D2H copy and a Synchronize; the test thread never dereferences a device pointer.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "kernels/ref/half.h"
#include "runtime/device.h"
#include "runtime/device/device_factory.h"
#include "runtime/ops/ops_backend.h"
#include "runtime/ops/ops_factory.h"
#include "runtime/tensor.h"

namespace sluice::ops {

struct BackendCase {
  DeviceKind device = DeviceKind::kCpu;
  bool reference = false;  // the ref column (kernels/ref in f64) instead of the device's own
  DType compute = DType::kF32;
};

inline std::string BackendCaseName(const ::testing::TestParamInfo<BackendCase>& info) {
  const BackendCase& c = info.param;
  return std::string(c.reference ? "ref" : DeviceKindName(c.device)) + "_" +
         std::string(DTypeName(c.compute));
}

class OpsBackendTest : public ::testing::TestWithParam<BackendCase> {
 protected:
  void SetUp() override {
    const BackendCase& c = GetParam();
    if (c.device == DeviceKind::kCuda && CudaDeviceCount() == 0) {
      GTEST_SKIP() << "no CUDA GPU on this machine (the gpu label runs on an H100/H200)";
    }
    Result<std::unique_ptr<Device>> device =
        CreateDevice({.kind = c.device, .index = 0, .memory_limit_bytes = 256ull << 20});
    ASSERT_TRUE(device.ok()) << device.status().ToString();
    device_ = std::move(*device);
    Result<std::unique_ptr<OpsBackend>> ops =
        c.reference ? CreateReferenceOpsBackend(*device_) : CreateOpsBackend(*device_);
    ASSERT_TRUE(ops.ok()) << ops.status().ToString();
    ops_ = std::move(*ops);
    Result<std::unique_ptr<Stream>> stream = device_->CreateStream();
    ASSERT_TRUE(stream.ok()) << stream.status().ToString();
    stream_ = std::move(*stream);
  }

  void TearDown() override {
    if (stream_) (void)stream_->Synchronize();
    if (ops_ && stream_) ops_->ReleaseScratch(*stream_);
    if (stream_) (void)stream_->Synchronize();
    buffers_.clear();
    ops_.reset();
    stream_.reset();
    device_.reset();
  }

  DType compute() const { return GetParam().compute; }
  DType accum() const { return AccumDType(compute()); }
  // The declared tolerance of the compute dtype (ExpectClose's criterion, tests/ops).
  double tol() const {
    switch (compute()) {
      case DType::kF64: return 1e-10;
      case DType::kF32: return 2e-5;
      default: return 2e-2;
    }
  }

  // values rounded to dtype and widened back: what the device holds, so the fp64 reference
  // starts from the same inputs.
  static std::vector<double> Rounded(const std::vector<double>& values, DType dtype) {
    std::vector<double> out(values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      switch (dtype) {
        case DType::kF64: out[i] = values[i]; break;
        case DType::kF32: out[i] = static_cast<float>(values[i]); break;
        case DType::kBF16:
          out[i] = kernels::Bf16ToF32(kernels::F32ToBf16(static_cast<float>(values[i])));
          break;
        case DType::kF16:
          out[i] = kernels::F16ToF32(kernels::F32ToF16(static_cast<float>(values[i])));
          break;
      }
    }
    return out;
  }

  static std::vector<uint8_t> Encode(const std::vector<double>& values, DType dtype) {
    std::vector<uint8_t> bytes(values.size() * DTypeSize(dtype));
    for (size_t i = 0; i < values.size(); ++i) {
      uint8_t* at = bytes.data() + i * DTypeSize(dtype);
      if (dtype == DType::kF64) {
        std::memcpy(at, &values[i], 8);
      } else if (dtype == DType::kF32) {
        const float f = static_cast<float>(values[i]);
        std::memcpy(at, &f, 4);
      } else {
        const uint16_t h = dtype == DType::kBF16 ? kernels::F32ToBf16(static_cast<float>(values[i]))
                                                 : kernels::F32ToF16(static_cast<float>(values[i]));
        std::memcpy(at, &h, 2);
      }
    }
    return bytes;
  }

  void* UploadBytes(std::vector<uint8_t> bytes) {
    Result<DeviceBuffer> buffer =
        device_->Allocate(std::max<size_t>(bytes.size(), 1), MemoryCategory::kActivations);
    EXPECT_TRUE(buffer.ok()) << buffer.status().ToString();
    if (!buffer.ok()) return nullptr;
    void* data = buffer->data();
    staging_.push_back(std::move(bytes));  // alive until the copy ran (Synchronize in TearDown)
    if (!staging_.back().empty()) {
      EXPECT_TRUE(device_->CopyAsync(data, staging_.back().data(), staging_.back().size(),
                                     CopyKind::kH2D, *stream_)
                      .ok());
    }
    buffers_.push_back(std::move(*buffer));
    return data;
  }

  Tensor Upload(const std::vector<double>& values, DType dtype, Shape shape) {
    EXPECT_EQ(shape.numel(), static_cast<int64_t>(values.size()));
    void* data = UploadBytes(Encode(values, dtype));
    return Tensor(data, dtype, shape, MemoryTier::kDevice, device_->index());
  }
  Tensor Zeros(DType dtype, Shape shape) {
    return Upload(std::vector<double>(shape.numel(), 0.0), dtype, shape);
  }
  Int32View UploadInt32(const std::vector<int32_t>& values) {
    std::vector<uint8_t> bytes(values.size() * 4);
    std::memcpy(bytes.data(), values.data(), bytes.size());
    return {static_cast<const int32_t*>(UploadBytes(std::move(bytes))),
            static_cast<int64_t>(values.size())};
  }

  std::vector<double> Download(const Tensor& t) {
    std::vector<uint8_t> bytes(t.nbytes());
    EXPECT_TRUE(
        device_->CopyAsync(bytes.data(), t.raw_data(), bytes.size(), CopyKind::kD2H, *stream_)
            .ok());
    Status synced = stream_->Synchronize();
    EXPECT_TRUE(synced.ok()) << synced.ToString();
    std::vector<double> out(t.numel());
    for (int64_t i = 0; i < t.numel(); ++i) {
      const uint8_t* at = bytes.data() + i * DTypeSize(t.dtype());
      switch (t.dtype()) {
        case DType::kF64: std::memcpy(&out[i], at, 8); break;
        case DType::kF32: {
          float f;
          std::memcpy(&f, at, 4);
          out[i] = f;
          break;
        }
        default: {
          uint16_t h;
          std::memcpy(&h, at, 2);
          out[i] = t.dtype() == DType::kBF16 ? kernels::Bf16ToF32(h) : kernels::F16ToF32(h);
        }
      }
    }
    return out;
  }
  std::vector<int32_t> DownloadInt32(const int32_t* data, int64_t n) {
    std::vector<int32_t> out(n);
    EXPECT_TRUE(device_->CopyAsync(out.data(), data, n * 4, CopyKind::kD2H, *stream_).ok());
    EXPECT_TRUE(stream_->Synchronize().ok());
    return out;
  }

  std::unique_ptr<Device> device_;
  std::unique_ptr<OpsBackend> ops_;
  std::unique_ptr<Stream> stream_;
  std::deque<std::vector<uint8_t>> staging_;
  std::vector<DeviceBuffer> buffers_;
};

}  // namespace sluice::ops
