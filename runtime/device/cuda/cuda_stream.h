// CUDA backend streams. CUDA reports its own errors (a failed kernel or copy) through
// cudaStreamSynchronize and friends; errors of host functions are Sluice's and are kept in the
// stream's CudaStreamState, shared with the host functions and events that need them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "runtime/device.h"

namespace sluice {

class CudaDevice;

struct CudaStreamState {
  explicit CudaStreamState(std::string stream_name) : name(std::move(stream_name)) {}

  // The first failed host function, if it was launched at or before `launch`.
  Status HostErrorUpTo(uint64_t launch) const {
    std::lock_guard<std::mutex> lock(mu);
    return host_error_launch != 0 && host_error_launch <= launch ? host_error : OkStatus();
  }

  const std::string name;
  mutable std::mutex mu;
  cudaStream_t stream = nullptr;   // null once the stream is destroyed
  uint64_t launches = 0;           // host functions launched so far
  Status host_error;               // sticky: the first failed host function
  uint64_t host_error_launch = 0;  // its launch number
};

class CudaStream final : public Stream {
 public:
  // Takes ownership of `stream`.
  CudaStream(CudaDevice& device, cudaStream_t stream);
  ~CudaStream() override;  // waits for the enqueued work, then destroys the stream

  Status Synchronize() override;
  Status WaitEvent(const Event& event) override;
  Result<bool> Query() override;
  void* native() const override { return stream_; }

  cudaStream_t stream() const { return stream_; }
  const std::shared_ptr<CudaStreamState>& state() const { return state_; }

 private:
  cudaStream_t stream_;
  std::shared_ptr<CudaStreamState> state_;
};

}  // namespace sluice
