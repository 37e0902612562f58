#include "offload/swap_handle.h"

#include <algorithm>

#include "offload/checksum.h"

namespace sluice::offload {

struct SwapHandle::Op {
  std::vector<AioHandle> pieces;
  std::unique_ptr<Verification> verify;
  std::function<Status(Status)> finish;
  bool finished = false;
  Status result;

  Status Run() {
    if (finished) return result;
    Status status;
    if (verify) {
      StreamingChecksum sum;
      for (size_t i = 0; i < pieces.size(); ++i) {
        Status piece = pieces[i].Wait();
        if (!piece.ok()) {
          if (status.ok()) status = std::move(piece);
          continue;
        }
        if (status.ok()) sum.Update(verify->ranges[i].first, verify->ranges[i].second);
      }
      if (status.ok() && sum.Digest() != verify->expected) {
        status = DataLossError(
            "checksum mismatch in {}: stored {:#018x}, read data hashes to {:#018x} (the bytes "
            "on disk changed after they were written)",
            verify->what, verify->expected, sum.Digest());
      }
    } else {
      status = WaitAll(pieces);
    }
    if (finish) status = finish(std::move(status));
    finished = true;
    result = status;
    return result;
  }

  ~Op() {
    // The store's metadata (write in flight, new checksum) is settled by Run(): never skip it.
    if (!finished) (void)Run();
  }
};

SwapHandle SwapHandle::Make(std::vector<AioHandle> pieces,
                            std::unique_ptr<Verification> verification,
                            std::function<Status(Status)> finish) {
  SwapHandle handle;
  handle.op_ = std::make_shared<Op>();
  handle.op_->pieces = std::move(pieces);
  handle.op_->verify = std::move(verification);
  handle.op_->finish = std::move(finish);
  return handle;
}

SwapHandle SwapHandle::Failed(Status status) {
  SwapHandle handle;
  handle.op_ = std::make_shared<Op>();
  handle.op_->finished = true;
  handle.op_->result = std::move(status);
  return handle;
}

Status SwapHandle::Wait() { return op_ == nullptr ? OkStatus() : op_->Run(); }

bool SwapHandle::Poll() const {
  if (op_ == nullptr || op_->finished) return true;
  return std::all_of(op_->pieces.begin(), op_->pieces.end(),
                     [](const AioHandle& piece) { return piece.Poll(); });
}

}  // namespace sluice::offload
