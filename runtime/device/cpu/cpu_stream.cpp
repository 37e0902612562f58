#include "runtime/device/cpu/cpu_stream.h"

#include "runtime/device/cpu/cpu_device.h"
#include "runtime/device/cpu/cpu_event.h"

namespace sluice {

CpuStream::CpuStream(CpuDevice& device)
    : Stream(device),
      queue_(std::make_shared<CpuStreamQueue>(
          name(), fmt::format("sluice-c{}s{}", device.index(), id()), device.protection_key())) {
  device.RegisterStream(id(), queue_);
}

CpuStream::~CpuStream() {
  static_cast<CpuDevice&>(device()).UnregisterStream(id());
  queue_->Shutdown();
}

Status CpuStream::WaitEvent(const Event& event) {
  SLUICE_CHECK(event.device().kind() == DeviceKind::kCpu)
      << "stream " << name() << " waits on an event of " << event.device().name();
  std::shared_ptr<CpuEventRecord> record = static_cast<const CpuEvent&>(event).latest();
  if (record == nullptr) return OkStatus();  // never recorded: nothing to wait for (as CUDA)
  std::string description =
      fmt::format("WaitEvent on an event recorded on {}", record->stream_name());
  if (!queue_->Enqueue(std::move(description), [record] { return record->Wait(); })) {
    return FailedPreconditionError("WaitEvent on stream {}, which is shut down", name());
  }
  return OkStatus();
}

}  // namespace sluice
