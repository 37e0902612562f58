#include "runtime/device/cuda/cuda_event.h"

#include "runtime/device/cuda/cuda_call.h"
#include "runtime/logging.h"
#include "runtime/trace.h"

namespace sluice {

CudaEvent::~CudaEvent() {
  if (cudaError_t error = cudaEventDestroy(event_); error != cudaSuccess) {
    SLUICE_LOG(kError, "device", "cudaEventDestroy failed: {}", internal::CudaErrorText(error));
  }
}

Status CudaEvent::Record(Stream& stream) {
  SLUICE_CHECK(&stream.device() == &device())
      << "event of " << device().name() << " recorded on stream " << stream.name();
  const auto& cuda_stream = static_cast<CudaStream&>(stream);
  const std::shared_ptr<CudaStreamState>& state = cuda_stream.state();
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t launches = 0;
  {
    std::lock_guard<std::mutex> state_lock(state->mu);
    launches = state->launches;
  }
  SLUICE_TRY_CUDA(cudaEventRecord(event_, cuda_stream.stream()));
  recorded_on_ = state;
  recorded_after_launch_ = launches;
  return OkStatus();
}

Status CudaEvent::HostError() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (recorded_on_ == nullptr) return OkStatus();
  return recorded_on_->HostErrorUpTo(recorded_after_launch_);
}

Status CudaEvent::Synchronize() {
  ScopedTraceEvent host_wait(kTraceLaneHostWait, "synchronize an event");
  SLUICE_TRY_CUDA(cudaEventSynchronize(event_));
  return HostError();
}

Result<bool> CudaEvent::Query() {
  const cudaError_t error = cudaEventQuery(event_);
  if (error == cudaErrorNotReady) return false;
  if (error != cudaSuccess) {
    return internal::ForeignCallError("CUDA", "cudaEventQuery(event)",
                                      internal::CudaErrorText(error), __FILE__, __LINE__);
  }
  SLUICE_RETURN_IF_ERROR(HostError());
  return true;
}

Result<float> CudaEvent::ElapsedMsSince(const Event& start) const {
  const auto& begin = static_cast<const CudaEvent&>(start);
  {
    std::lock_guard<std::mutex> lock(begin.mu_);
    if (begin.recorded_on_ == nullptr) {
      return FailedPreconditionError("ElapsedMs: the start event was never recorded");
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (recorded_on_ == nullptr) {
      return FailedPreconditionError("ElapsedMs: the end event was never recorded");
    }
  }
  float ms = 0;
  const cudaError_t error = cudaEventElapsedTime(&ms, begin.event_, event_);
  if (error == cudaErrorNotReady) {
    return FailedPreconditionError(
        "ElapsedMs: an event has not completed yet; synchronize it first");
  }
  if (error != cudaSuccess) {
    return internal::ForeignCallError("CUDA", "cudaEventElapsedTime(&ms, start, end)",
                                      internal::CudaErrorText(error), __FILE__, __LINE__);
  }
  return ms;
}

}  // namespace sluice
