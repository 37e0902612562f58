#include "offload/swap_handle.h"

#include <utility>

namespace sluice::offload {
namespace {

// The first chunk whose checksum differs, for the error message ("" when unknown).
std::string MismatchedChunk(const ChunkedChecksum& sum, const std::vector<uint64_t>& expected) {
  const std::vector<uint64_t>& got = sum.chunk_sums();
  if (expected.size() != got.size()) return "";
  for (size_t k = 0; k < got.size(); ++k) {
    if (got[k] == expected[k]) continue;
    const uint64_t begin = k * sum.chunk_bytes();
    return fmt::format(
        "; first bad checksum chunk: {} of {} (extent bytes [{}, {}), chunk checksum stored "
        "{:#018x}, read {:#018x})",
        k, got.size(), begin, begin + sum.chunk_bytes(), expected[k], got[k]);
  }
  return "";
}

}  // namespace

struct SwapHandle::Op {
  AioHandle io;
  std::shared_ptr<ChunkedChecksum> checksum;
  std::unique_ptr<Verification> verify;
  Finish finish;
  bool finished = false;
  Status result;

  Status Run() {
    if (finished) return result;
    if (checksum != nullptr) checksum->HelpUntilFinished();
    Status status = io.Wait();
    if (status.ok() && verify != nullptr && checksum->Digest() != verify->expected) {
      status = DataLossError(
          "checksum mismatch in {}: stored {:#018x}, read data hashes to {:#018x} (the bytes "
          "on disk changed after they were written){}",
          verify->what, verify->expected, checksum->Digest(),
          MismatchedChunk(*checksum, verify->expected_chunks));
    }
    if (finish) status = finish(std::move(status), checksum.get());
    finished = true;
    result = status;
    return result;
  }

  ~Op() {
    // The store's metadata (write in flight, new checksum) is settled by Run(): never skip it.
    if (!finished) (void)Run();
  }
};

SwapHandle SwapHandle::Make(AioHandle io, std::shared_ptr<ChunkedChecksum> checksum,
                            std::unique_ptr<Verification> verification, Finish finish) {
  SLUICE_CHECK(verification == nullptr || checksum != nullptr)
      << "verifying a read needs its checksum";
  // A request refused before any I/O was issued never reports a piece to its observer.
  if (checksum != nullptr && io.Poll() && !io.Wait().ok()) checksum->Abandon();
  SwapHandle handle;
  handle.op_ = std::make_shared<Op>();
  handle.op_->io = std::move(io);
  handle.op_->checksum = std::move(checksum);
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

bool SwapHandle::Poll() const { return op_ == nullptr || op_->finished || op_->io.Poll(); }

}  // namespace sluice::offload
