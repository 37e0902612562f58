#include "offload/aio_handle.h"

#include <utility>

#include "offload/aio_chunk.h"

namespace sluice::offload {

AioHandle::AioHandle(std::shared_ptr<internal::HandleState> state) : state_(std::move(state)) {}

AioHandle AioHandle::Failed(Status status) {
  auto state = std::make_shared<internal::HandleState>();
  state->status = std::move(status);
  state->failed.store(true);
  state->done.store(true);
  return AioHandle(std::move(state));
}

Status AioHandle::Wait() const {
  if (state_ == nullptr) return OkStatus();
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->done.load(std::memory_order_acquire); });
  return state_->status;
}

bool AioHandle::Poll() const {
  return state_ == nullptr || state_->done.load(std::memory_order_acquire);
}

uint64_t AioHandle::bytes() const { return state_ == nullptr ? 0 : state_->bytes; }

Status WaitAll(std::span<const AioHandle> handles) {
  Status first;
  for (const AioHandle& handle : handles) {
    Status status = handle.Wait();
    if (first.ok() && !status.ok()) first = std::move(status);
  }
  return first;
}

}  // namespace sluice::offload
