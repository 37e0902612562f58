// CPU backend stream: a handle on a CpuStreamQueue, registered with its device so that buffers
// allocated on it can be freed on it later (or at once when the stream is gone).
#pragma once

#include <memory>

#include "runtime/device.h"
#include "runtime/device/cpu/cpu_stream_queue.h"

namespace sluice {

class CpuDevice;

class CpuStream final : public Stream {
 public:
  explicit CpuStream(CpuDevice& device);
  ~CpuStream() override;  // waits for the enqueued work

  Status Synchronize() override { return queue_->Synchronize(); }
  Status WaitEvent(const Event& event) override;
  Result<bool> Query() override { return queue_->Query(); }
  void* native() const override { return queue_.get(); }

  CpuStreamQueue& queue() const { return *queue_; }
  const std::shared_ptr<CpuStreamQueue>& shared_queue() const { return queue_; }

 private:
  std::shared_ptr<CpuStreamQueue> queue_;
};

}  // namespace sluice
