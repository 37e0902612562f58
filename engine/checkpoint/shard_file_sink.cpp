#include "engine/checkpoint/shard_file_sink.h"

#include <fmt/format.h>

#include <utility>

#include "runtime/durable_file.h"

namespace sluice::checkpoint {
namespace {

class BufferedShardSink final : public ShardFileSink {
 public:
  BufferedShardSink(std::filesystem::path path, ScopedFd fd)
      : path_(std::move(path)), fd_(std::move(fd)) {}

  Status Put(uint64_t offset, const void* data, uint64_t bytes) override {
    return WriteAt(fd_.get(), data, bytes, offset, path_);
  }
  Status Finish() override {
    SLUICE_RETURN_IF_ERROR(FsyncFd(fd_.get(), path_));
    return fd_.Close();
  }

 private:
  std::filesystem::path path_;
  ScopedFd fd_;
};

}  // namespace

Result<std::unique_ptr<ShardFileSink>> CreateShardFileSink(const std::filesystem::path& path,
                                                           uint64_t file_bytes,
                                                           const ShardFileIo& io) {
  if (io.open) return io.open(path, file_bytes);
  SLUICE_ASSIGN_OR_RETURN(ScopedFd fd, CreateExclusive(path));
  return std::unique_ptr<ShardFileSink>(new BufferedShardSink(path, std::move(fd)));
}

}  // namespace sluice::checkpoint
