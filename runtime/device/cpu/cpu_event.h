// CPU backend events. Each Record() creates a CpuEventRecord that the stream completes when it
// reaches it; waits (host or stream) hold the record they captured, so recording the event again
// never changes what an earlier wait waits for.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "runtime/device.h"

namespace sluice {

class CpuEventRecord {
 public:
  CpuEventRecord(std::string stream_name, std::thread::id stream_thread)
      : stream_name_(std::move(stream_name)), stream_thread_(stream_thread) {}

  // Called by the recording stream's worker with its sticky status.
  void Complete(const Status& sticky);
  // Blocks until completed; the recording stream's sticky status at that point.
  Status Wait();
  bool done() const;
  // Valid once done().
  std::chrono::steady_clock::time_point completion_time() const;

  const std::string& stream_name() const { return stream_name_; }
  std::thread::id stream_thread() const { return stream_thread_; }

 private:
  const std::string stream_name_;
  const std::thread::id stream_thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  Status status_;
  std::chrono::steady_clock::time_point time_;
};

class CpuEvent final : public Event {
 public:
  explicit CpuEvent(Device& device) : Event(device) {}

  Status Record(Stream& stream) override;
  Status Synchronize() override;
  Result<bool> Query() override;

  // The latest record, or null when never recorded.
  std::shared_ptr<CpuEventRecord> latest() const;

 protected:
  Result<float> ElapsedMsSince(const Event& start) const override;

 private:
  mutable std::mutex mu_;
  std::shared_ptr<CpuEventRecord> latest_;
};

}  // namespace sluice
