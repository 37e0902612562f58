#include "runtime/device/cuda/cuda_stream.h"

#include "runtime/device/cuda/cuda_call.h"
#include "runtime/device/cuda/cuda_device.h"
#include "runtime/device/cuda/cuda_event.h"
#include "runtime/logging.h"
#include "runtime/trace.h"

namespace sluice {
namespace {

Status SyncStream(cudaStream_t stream) {
  SLUICE_TRY_CUDA(cudaStreamSynchronize(stream));
  return OkStatus();
}

}  // namespace

CudaStream::CudaStream(CudaDevice& device, cudaStream_t stream)
    : Stream(device), stream_(stream), state_(std::make_shared<CudaStreamState>(name())) {
  state_->stream = stream;
  device.RegisterStream(id(), state_);
}

CudaStream::~CudaStream() {
  static_cast<CudaDevice&>(device()).UnregisterStream(id());
  // Buffers allocated on this stream and freed after it is gone are freed on the legacy stream,
  // so the stream's work must be finished first. Not under state_->mu: the stream's pending host
  // functions take it.
  if (cudaError_t error = cudaStreamSynchronize(stream_); error != cudaSuccess) {
    SLUICE_LOG(kError, "device", "destroying stream {}: cudaStreamSynchronize failed: {}", name(),
               internal::CudaErrorText(error));
  }
  std::lock_guard<std::mutex> lock(state_->mu);
  // A free enqueued since the synchronization still runs: cudaStreamDestroy lets pending work
  // finish.
  if (cudaError_t error = cudaStreamDestroy(stream_); error != cudaSuccess) {
    SLUICE_LOG(kError, "device", "cudaStreamDestroy of {} failed: {}", name(),
               internal::CudaErrorText(error));
  }
  state_->stream = nullptr;
}

Status CudaStream::Synchronize() {
  ScopedTraceEvent host_wait(kTraceLaneHostWait, "synchronize a stream");
  SLUICE_RETURN_IF_ERROR(SyncStream(stream_).WithContext(fmt::format("stream {}", name())));
  return state_->HostErrorUpTo(UINT64_MAX);
}

Status CudaStream::WaitEvent(const Event& event) {
  SLUICE_CHECK(event.device().kind() == DeviceKind::kCuda)
      << "stream " << name() << " waits on an event of " << event.device().name();
  // cudaStreamWaitEvent has the contract's semantics: the latest record at call time; a never
  // recorded event is a no-op.
  SLUICE_TRY_CUDA(cudaStreamWaitEvent(stream_, static_cast<const CudaEvent&>(event).event(), 0));
  return OkStatus();
}

Result<bool> CudaStream::Query() {
  const cudaError_t error = cudaStreamQuery(stream_);
  if (error == cudaErrorNotReady) return false;
  if (error != cudaSuccess) {
    return internal::ForeignCallError("CUDA", "cudaStreamQuery(stream)",
                                      internal::CudaErrorText(error), __FILE__, __LINE__)
        .WithContext(fmt::format("stream {}", name()));
  }
  SLUICE_RETURN_IF_ERROR(state_->HostErrorUpTo(UINT64_MAX));
  return true;
}

}  // namespace sluice
