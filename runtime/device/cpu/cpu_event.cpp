#include "runtime/device/cpu/cpu_event.h"

#include <fmt/format.h>

#include <optional>

#include "runtime/device/cpu/cpu_stream.h"
#include "runtime/device/cpu/cpu_stream_queue.h"
#include "runtime/trace.h"

namespace sluice {

void CpuEventRecord::Complete(const Status& sticky) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    time_ = std::chrono::steady_clock::now();
    status_ = sticky;
    done_ = true;
  }
  cv_.notify_all();
}

Status CpuEventRecord::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return done_; });
  return status_;
}

bool CpuEventRecord::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

std::chrono::steady_clock::time_point CpuEventRecord::completion_time() const {
  std::lock_guard<std::mutex> lock(mu_);
  return time_;
}

Status CpuEvent::Record(Stream& stream) {
  SLUICE_CHECK(&stream.device() == &device())
      << "event of " << device().name() << " recorded on stream " << stream.name();
  CpuStreamQueue& queue = static_cast<CpuStream&>(stream).queue();
  auto record = std::make_shared<CpuEventRecord>(stream.name(), queue.worker_id());
  if (!queue.EnqueueBookkeeping([record](const Status& sticky) { record->Complete(sticky); })) {
    return FailedPreconditionError("event record on stream {}, which is shut down", stream.name());
  }
  std::lock_guard<std::mutex> lock(mu_);
  latest_ = std::move(record);
  return OkStatus();
}

std::shared_ptr<CpuEventRecord> CpuEvent::latest() const {
  std::lock_guard<std::mutex> lock(mu_);
  return latest_;
}

Status CpuEvent::Synchronize() {
  const std::shared_ptr<CpuEventRecord> record = latest();
  if (record == nullptr) return OkStatus();
  if (std::this_thread::get_id() == record->stream_thread() && !record->done()) {
    return FailedPreconditionError(
        "Event::Synchronize called from a task of stream {}, on which the event is recorded "
        "later (it would wait for itself)",
        record->stream_name());
  }
  std::optional<ScopedTraceEvent> host_wait;
  if (!OnCpuStreamWorker() && TraceRecorder::Global().enabled()) {
    host_wait.emplace(kTraceLaneHostWait,
                      fmt::format("synchronize an event of {}", record->stream_name()));
  }
  return record->Wait();
}

Result<bool> CpuEvent::Query() {
  const std::shared_ptr<CpuEventRecord> record = latest();
  if (record == nullptr) return true;
  if (!record->done()) return false;
  SLUICE_RETURN_IF_ERROR(record->Wait());  // done: returns at once
  return true;
}

Result<float> CpuEvent::ElapsedMsSince(const Event& start) const {
  const std::shared_ptr<CpuEventRecord> begin = static_cast<const CpuEvent&>(start).latest();
  const std::shared_ptr<CpuEventRecord> end = latest();
  if (begin == nullptr || end == nullptr) {
    return FailedPreconditionError("ElapsedMs: the {} event was never recorded",
                                   begin == nullptr ? "start" : "end");
  }
  if (!begin->done() || !end->done()) {
    return FailedPreconditionError(
        "ElapsedMs: the {} event has not completed yet; synchronize it first",
        !begin->done() ? "start" : "end");
  }
  const std::chrono::duration<float, std::milli> elapsed =
      end->completion_time() - begin->completion_time();
  return elapsed.count();
}

}  // namespace sluice
