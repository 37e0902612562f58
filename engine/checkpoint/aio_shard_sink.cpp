#include "engine/checkpoint/aio_shard_sink.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "offload/aligned_buffer.h"
#include "runtime/durable_file.h"
#include "runtime/foreign_call.h"

namespace sluice::checkpoint {
namespace {

using offload::kIoAlignment;

class AioShardSink final : public ShardFileSink {
 public:
  AioShardSink(offload::AioEngine& aio, std::filesystem::path path, uint64_t file_bytes,
               uint64_t window_bytes, int max_slots)
      : aio_(aio),
        path_(std::move(path)),
        file_bytes_(file_bytes),
        window_bytes_(window_bytes),
        max_slots_(max_slots),
        written_((file_bytes + window_bytes - 1) / window_bytes, false) {
    slots_.reserve(static_cast<size_t>(max_slots));
  }

  ~AioShardSink() override {
    // An unfinished file (a failed save): Close waits for the writes in flight, which use the
    // buffers freed after it.
    if (open_) (void)aio_.Close(file_);
  }

  Status Open(ScopedFd fd, offload::StagingReservation reservation) {
    fd_ = std::move(fd);
    reservation_ = std::move(reservation);
    offload::AioFileOptions options;
    options.paths = {path_.string()};
    options.create = false;  // CreateExclusive made it
    SLUICE_ASSIGN_OR_RETURN(file_, aio_.Open(options));
    open_ = true;
    return OkStatus();
  }

  Status Put(uint64_t offset, const void* data, uint64_t bytes) override {
    SLUICE_CHECK_LE(offset + bytes, file_bytes_) << path_.string();
    SLUICE_RETURN_IF_ERROR(error_);
    const char* in = static_cast<const char*>(data);
    while (bytes > 0) {
      const int64_t window = static_cast<int64_t>(offset / window_bytes_);
      const uint64_t within = offset - WindowBegin(window);
      const uint64_t take = std::min(bytes, DataBytes(window) - within);
      SLUICE_ASSIGN_OR_RETURN(Slot * slot, Acquire(window));
      std::memcpy(slot->buffer.as<char>() + within, in, take);
      uint64_t& missing = missing_.try_emplace(window, DataBytes(window)).first->second;
      SLUICE_CHECK_LE(take, missing)
          << path_.string() << ": bytes of window " << window << " put twice";
      missing -= take;
      if (missing == 0) Submit(*slot);
      offset += take;
      in += take;
      bytes -= take;
    }
    return OkStatus();
  }

  Status Finish() override {
    SLUICE_RETURN_IF_ERROR(error_);
    SLUICE_CHECK(resident_.empty() && spilled_.empty())
        << path_.string() << ": " << resident_.size() + spilled_.size()
        << " window(s) still miss bytes at Finish";
    for (Slot& slot : slots_) SLUICE_RETURN_IF_ERROR(Fail(slot.write.Wait()));
    open_ = false;
    SLUICE_RETURN_IF_ERROR(Fail(aio_.Close(file_)));
    // The last window was written up to a whole page; the file ends right after its data.
    if (!offload::IsAligned(file_bytes_) &&
        ::ftruncate(fd_.get(), static_cast<off_t>(file_bytes_)) != 0) {
      return Fail(IoError("truncating {} to {} bytes: {}", path_.string(), file_bytes_,
                          internal::ErrnoText(errno)));
    }
    // fsync covers the inode, whichever descriptor wrote its data.
    SLUICE_RETURN_IF_ERROR(Fail(FsyncFd(fd_.get(), path_)));
    return Fail(fd_.Close());
  }

 private:
  struct Slot {
    offload::AlignedBuffer buffer;
    int64_t window = -1;       // the window it holds; -1: free once `write` is done
    offload::AioHandle write;  // the write of the last window it held
    uint64_t last_use = 0;
  };

  uint64_t WindowBegin(int64_t window) const {
    return static_cast<uint64_t>(window) * window_bytes_;
  }
  // The window's bytes of the file, and what is written of it: whole pages.
  uint64_t DataBytes(int64_t window) const {
    return std::min(window_bytes_, file_bytes_ - WindowBegin(window));
  }
  uint64_t IoBytes(int64_t window) const {
    return offload::AlignUp(DataBytes(window), kIoAlignment);
  }

  // Keeps the first failure: the file is then abandoned (SaveCheckpoint removes it).
  Status Fail(Status status) {
    if (status.ok()) return status;
    if (error_.ok()) {
      error_ = std::move(status).WithContext(
          fmt::format("writing checkpoint shard file {} through the I/O engine", path_.string()));
    }
    return error_;
  }

  // Every byte of the window arrived: written in the background, the slot free once done.
  void Submit(Slot& slot) {
    const int64_t window = slot.window;
    slot.write = aio_.Write(file_, WindowBegin(window), slot.buffer.data(), IoBytes(window));
    resident_.erase(window);
    missing_.erase(window);
    written_[static_cast<size_t>(window)] = true;
    slot.window = -1;
  }

  Result<Slot*> Acquire(int64_t window) {
    SLUICE_CHECK(!written_[static_cast<size_t>(window)])
        << path_.string() << ": bytes of window " << window << " put after it was written";
    if (auto it = resident_.find(window); it != resident_.end()) {
      Slot& slot = slots_[it->second];
      slot.last_use = ++clock_;
      return &slot;
    }
    SLUICE_ASSIGN_OR_RETURN(size_t index, FreeSlot());
    Slot& slot = slots_[index];
    slot.window = window;
    slot.last_use = ++clock_;
    resident_[window] = index;
    if (spilled_.erase(window) > 0) {
      SLUICE_RETURN_IF_ERROR(
          Fail(aio_.Read(file_, WindowBegin(window), slot.buffer.data(), IoBytes(window)).Wait()));
    } else {
      // Bytes not put yet are zeros, in a spilled window as in the page past the file's end.
      std::memset(slot.buffer.data(), 0, IoBytes(window));
    }
    return &slot;
  }

  // A slot holding no window: a free one, a new one while under the limit, one whose write
  // finishes, or else the least recently used window written as it stands (spilled).
  Result<size_t> FreeSlot() {
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (slots_[i].window < 0 && slots_[i].write.Poll()) return Reuse(i);
    }
    if (static_cast<int>(slots_.size()) < max_slots_) {
      Result<offload::AlignedBuffer> buffer = offload::AlignedBuffer::Allocate(window_bytes_);
      if (!buffer.ok()) return Fail(buffer.status());
      slots_.push_back(Slot{.buffer = std::move(buffer).value()});
      return slots_.size() - 1;
    }
    size_t oldest = slots_.size();
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (slots_[i].window < 0) return Reuse(i);
      if (oldest == slots_.size() || slots_[i].last_use < slots_[oldest].last_use) oldest = i;
    }
    Slot& victim = slots_[oldest];
    SLUICE_RETURN_IF_ERROR(Fail(
        aio_.Write(file_, WindowBegin(victim.window), victim.buffer.data(), IoBytes(victim.window))
            .Wait()));
    spilled_.insert(victim.window);
    resident_.erase(victim.window);
    victim.window = -1;
    return oldest;
  }

  Result<size_t> Reuse(size_t index) {
    Slot& slot = slots_[index];
    SLUICE_RETURN_IF_ERROR(Fail(slot.write.Wait()));
    slot.write = offload::AioHandle();
    return index;
  }

  offload::AioEngine& aio_;
  const std::filesystem::path path_;
  const uint64_t file_bytes_;
  const uint64_t window_bytes_;
  const int max_slots_;
  ScopedFd fd_;  // the exclusive create: truncation and fsync
  offload::StagingReservation reservation_;
  offload::AioFileId file_ = 0;
  bool open_ = false;
  std::vector<Slot> slots_;                        // capacity max_slots_: never reallocated
  std::unordered_map<int64_t, size_t> resident_;   // window -> slot
  std::unordered_map<int64_t, uint64_t> missing_;  // windows begun: bytes not put yet
  std::unordered_set<int64_t> spilled_;            // written partially, to be read back
  std::vector<bool> written_;                      // windows written complete
  uint64_t clock_ = 0;
  Status error_;
};

}  // namespace

Result<std::unique_ptr<ShardFileSink>> CreateAioShardSink(offload::AioEngine& aio,
                                                          offload::PinnedStagingBudget* budget,
                                                          const std::filesystem::path& path,
                                                          uint64_t file_bytes,
                                                          const AioShardWindows& io) {
  SLUICE_CHECK(io.window_bytes > 0 && offload::IsAligned(io.window_bytes))
      << "shard staging window of " << io.window_bytes << " bytes";
  SLUICE_CHECK_GE(io.windows, 1);
  SLUICE_CHECK_GT(file_bytes, 0u);
  // A small file needs no more than its own size in buffers.
  const uint64_t window_bytes =
      std::min(io.window_bytes, offload::AlignUp(file_bytes, kIoAlignment));
  const uint64_t windows = (file_bytes + window_bytes - 1) / window_bytes;
  const int slots = static_cast<int>(std::min<uint64_t>(windows, io.windows));
  SLUICE_ASSIGN_OR_RETURN(
      offload::StagingReservation reservation,
      offload::StagingReservation::Make(
          budget, window_bytes * static_cast<uint64_t>(slots),
          fmt::format("the staging of checkpoint shard file {}", path.string())));
  SLUICE_ASSIGN_OR_RETURN(ScopedFd fd, CreateExclusive(path));
  auto sink = std::make_unique<AioShardSink>(aio, path, file_bytes, window_bytes, slots);
  Status opened = sink->Open(std::move(fd), std::move(reservation));
  if (!opened.ok()) {
    return std::move(opened).WithContext(
        fmt::format("opening checkpoint shard file {} on the I/O engine", path.string()));
  }
  return std::unique_ptr<ShardFileSink>(std::move(sink));
}

ShardFileIo AioShardFileIo(offload::RankTiers& tiers, const AioShardWindows& windows) {
  return {.open = [&tiers, windows](const std::filesystem::path& path,
                                    uint64_t file_bytes) -> Result<std::unique_ptr<ShardFileSink>> {
    Result<offload::AioEngine*> aio = tiers.Aio("the checkpoint shard files");
    if (!aio.ok()) {
      return Status(aio.status()).WithContext(fmt::format("writing {}", path.string()));
    }
    return CreateAioShardSink(**aio, &tiers.staging_budget(), path, file_bytes, windows);
  }};
}

}  // namespace sluice::checkpoint
