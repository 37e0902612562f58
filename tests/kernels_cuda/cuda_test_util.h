// Shared helpers of the CUDA kernel tests: skip without a GPU, device arrays that upload from and
// download to std::vector, bf16 conversions, and the reference tools of tests/ops (seeded random
// inputs, the closeness criterion).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>  // the typed cudaMalloc(T**) overload
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cuda/launch_status.h"
#include "kernels/ref/half.h"
#include "tests/ops/ops_test_util.h"

namespace sluice::kernels::cuda::testing {

using kernels::testing::ExpectClose;
using kernels::testing::Rng;

inline int GpuCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return count;
}

#define SLUICE_SKIP_WITHOUT_GPU()                                                         \
  do {                                                                                    \
    if (::sluice::kernels::cuda::testing::GpuCount() == 0)                                \
      GTEST_SKIP() << "no CUDA GPU on this machine (the gpu label runs on an H100/H200)"; \
  } while (0)

#define SLUICE_EXPECT_LAUNCH_OK(expr)                                               \
  do {                                                                              \
    ::sluice::kernels::cuda::LaunchStatus sluice_status_ = (expr);                  \
    ASSERT_TRUE(sluice_status_.ok()) << #expr << ": " << sluice_status_.ToString(); \
  } while (0)

#define SLUICE_ASSERT_CUDA(expr)                                                             \
  do {                                                                                       \
    cudaError_t sluice_err_ = (expr);                                                        \
    ASSERT_EQ(sluice_err_, cudaSuccess) << #expr << ": " << cudaGetErrorString(sluice_err_); \
  } while (0)

inline __nv_bfloat16 ToBf16(float value) {
  const uint16_t bits = kernels::F32ToBf16(value);
  __nv_bfloat16_raw raw;
  raw.x = bits;
  return __nv_bfloat16(raw);
}
inline float FromBf16(__nv_bfloat16 value) {
  return kernels::Bf16ToF32(static_cast<__nv_bfloat16_raw>(value).x);
}

// Values as the device type T holds them (float, or bf16 rounded to nearest even).
template <typename T>
std::vector<T> Cast(const std::vector<float>& values) {
  std::vector<T> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    if constexpr (std::is_same_v<T, float>) {
      out[i] = values[i];
    } else {
      out[i] = ToBf16(values[i]);
    }
  }
  return out;
}
template <typename T>
std::vector<float> ToFloat(const std::vector<T>& values) {
  std::vector<float> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    if constexpr (std::is_same_v<T, float>) {
      out[i] = values[i];
    } else {
      out[i] = FromBf16(values[i]);
    }
  }
  return out;
}
// `offset` zeros, then the values, as T: uploaded, the values start `offset` elements into the
// allocation (offset 1 puts every row off 16-byte alignment, forcing the element-wise paths).
template <typename T>
std::vector<T> CastAfter(const std::vector<float>& values, int offset) {
  std::vector<float> padded(offset, 0.0f);
  padded.insert(padded.end(), values.begin(), values.end());
  return Cast<T>(padded);
}
// The values the device actually sees, as fp64 for the reference.
template <typename T>
std::vector<double> RoundTripToDouble(const std::vector<float>& values) {
  const std::vector<float> rounded = ToFloat(Cast<T>(values));
  return std::vector<double>(rounded.begin(), rounded.end());
}

// "fp32" or "bf16", for messages and test names.
template <typename T>
std::string TypeName() {
  return std::is_same_v<T, float> ? "fp32" : "bf16";
}

// Same size and the same bytes (NaN payloads included).
template <typename T>
bool BitwiseEqual(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// The launchers run on non-blocking streams, which do not wait for work on the legacy stream.
inline void WaitForDevice() { ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess); }

// Device memory holding n elements of T; freed when destroyed. Test code only (a CUDA error fails
// the test). Upload and Fill return once the device holds the bytes.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : size_(n) {
    if (n > 0 && cudaMalloc(&data_, n * sizeof(T)) != cudaSuccess) {
      ADD_FAILURE() << "cudaMalloc of " << n * sizeof(T) << " bytes failed";
      data_ = nullptr;
    }
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { Upload(host); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() {
    if (data_ != nullptr) cudaFree(data_);
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }

  void Upload(const std::vector<T>& host) {
    EXPECT_EQ(host.size(), size_);
    if (size_ > 0) {
      EXPECT_EQ(cudaMemcpy(data_, host.data(), size_ * sizeof(T), cudaMemcpyHostToDevice),
                cudaSuccess);
    }
    // A pageable upload may return before its DMA lands, and tests launch on non-blocking
    // streams that do not wait for the legacy stream.
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  // Waits for the whole device, then copies back.
  std::vector<T> Download() const {
    std::vector<T> host(size_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    if (size_ > 0) {
      EXPECT_EQ(cudaMemcpy(host.data(), data_, size_ * sizeof(T), cudaMemcpyDeviceToHost),
                cudaSuccess);
    }
    return host;
  }
  // Elements [offset, size()) (the arrays allocated `offset` elements early).
  std::vector<T> DownloadFrom(size_t offset) const {
    const std::vector<T> all = Download();
    return std::vector<T>(all.begin() + static_cast<std::ptrdiff_t>(offset), all.end());
  }
  void Fill(uint8_t byte) {
    if (size_ > 0) {
      EXPECT_EQ(cudaMemset(data_, byte, size_ * sizeof(T)), cudaSuccess);
    }
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

// A stream created for one test (launchers are always given an explicit, non-default stream).
class TestStream {
 public:
  TestStream() {
    EXPECT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
  }
  ~TestStream() {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

}  // namespace sluice::kernels::cuda::testing
