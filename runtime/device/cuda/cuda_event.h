// CUDA backend events: cudaEvent_t created with cudaEventBlockingSync (host waits sleep instead
// of spinning), plus what Sluice needs to report host-function errors recorded before them.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>

#include "runtime/device.h"
#include "runtime/device/cuda/cuda_stream.h"

namespace sluice {

class CudaEvent final : public Event {
 public:
  // Takes ownership of `event`.
  CudaEvent(Device& device, cudaEvent_t event) : Event(device), event_(event) {}
  ~CudaEvent() override;

  Status Record(Stream& stream) override;
  Status Synchronize() override;
  Result<bool> Query() override;

  cudaEvent_t event() const { return event_; }

 protected:
  Result<float> ElapsedMsSince(const Event& start) const override;

 private:
  Status HostError() const;

  cudaEvent_t event_;
  mutable std::mutex mu_;
  std::shared_ptr<CudaStreamState> recorded_on_;  // null until recorded
  uint64_t recorded_after_launch_ = 0;
};

}  // namespace sluice
