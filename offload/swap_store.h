// The NVMe swap store: one preallocated file per rank per swap directory (several directories
// are striped into one space), an extent allocator handing out aligned slots for named tensors
// (params, exp_avg, exp_avg_sq, grads of each optimizer sub-group), and a checksum per extent
// (XXH3-64 of per-chunk XXH3-64s, hashed chunk by chunk as the I/O finishes) computed by the
// writer and verified after every read. Layout: docs/swap_format.md.
//
//   auto store = SwapStore::Create(engine, {.paths = {"/nvme0", "/nvme1"}, .rank = r});
//   SLUICE_ASSIGN_OR_RETURN(auto extent, store->Allocate(SwapTensorName(3, kExpAvg), bytes));
//   SwapHandle w = store->WriteAsync(extent.name, pinned, bytes);
//   ... SLUICE_RETURN_IF_ERROR(w.Wait());
//   SLUICE_RETURN_IF_ERROR(store->Read(extent.name, pinned, bytes));  // DataLoss on corruption
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "offload/aio_engine.h"
#include "offload/extent_allocator.h"
#include "offload/swap_format.h"
#include "offload/swap_handle.h"
#include "runtime/file_lock.h"
#include "runtime/status.h"

namespace sluice::offload {

enum class SwapTensorKind { kParams, kExpAvg, kExpAvgSq, kGrads };

// "subgroup3.exp_avg": the extent name of one tensor of one optimizer sub-group.
std::string SwapTensorName(int sub_group, SwapTensorKind kind);

struct SwapStoreOptions {
  std::vector<std::string> paths;  // offload_*.nvme_path: one directory, or several to stripe
  int rank = 0;
  // Logical data bytes preallocated when the store is created.
  uint64_t capacity_bytes = 0;
  // When an allocation does not fit, the files grow by what it lacks beyond the free space at
  // their end, but at least by this much, rounded up to whole stripe rows (0: never grow). The
  // default grows by what is lacking: a store filled extent by extent then ends at the size
  // SwapStoreDiskBytes gives, which the memory estimate counts. (A larger step saves fallocate
  // calls but takes disk space nobody asked for: the step of 256 MiB this had once made runs
  // that `sluice estimate` said fit in a few MiB fail with ENOSPC.)
  uint64_t growth_bytes = 4096;
  uint64_t stripe_size = 1ull << 20;  // striping chunk across paths, a multiple of 4096
  uint32_t max_extents = 4096;        // size of the extent table (fixed when created)
  // Checksum every extent on write and verify it on read (on by default).
  bool verify_checksums = true;
  // Checksum chunk size for new writes (a power of two, 4 KiB to 1 GiB, recorded per extent):
  // each chunk is hashed as soon as its I/O finished, while the rest is in flight.
  uint64_t checksum_chunk_bytes = 1ull << 20;
  // File name in each directory; empty gives "sluice_swap.rank<R>.swp".
  std::string file_name;
  // Scratch space of one process (the engine's offloaded state): Close() removes the files
  // instead of flushing the header, so a finished run leaves nothing behind on the NVMe.
  bool remove_on_close = false;
};

struct SwapExtent {
  std::string name;
  uint64_t offset = 0;
  uint64_t capacity = 0;
  uint64_t length = 0;
  uint64_t checksum = 0;
  bool written = false;
  bool checksummed = false;
  uint64_t checksum_chunk_bytes = 0;  // 0 when not checksummed
};

// Every lock file ("<file>.lock", the owner's pid) is counted as one 4 KiB filesystem block.
inline constexpr uint64_t kSwapLockFileBytes = 4096;

// The disk space a store created with `options` takes once extents holding `extent_bytes` in all
// (each rounded up to 4 KiB) are allocated in a fresh store, in one go (SwapStore::EnsureRoom) or
// one after another with the default growth_bytes: in every file the two header slots and the
// padding up to the data (data_offset), the file's stripes of the data rounded up to whole
// stripe rows (at least options.capacity_bytes), and the lock file. The files are preallocated
// (fallocate), so this is what they hold on disk, not only their apparent size.
uint64_t SwapStoreDiskBytes(const SwapStoreOptions& options, uint64_t extent_bytes);

// Thread-safe. Handles must be waited on (or dropped) before the store is closed or destroyed.
class SwapStore {
 public:
  // A new store: creates (truncating) the files, preallocates capacity_bytes, writes a header.
  static Result<std::unique_ptr<SwapStore>> Create(AioEngine& engine,
                                                   const SwapStoreOptions& options);
  // An existing store: reads and validates every file's header (naming the mismatching field)
  // and rebuilds the allocator from its extent table.
  static Result<std::unique_ptr<SwapStore>> Open(AioEngine& engine,
                                                 const SwapStoreOptions& options);
  // Close()s if still open; an error is logged.
  ~SwapStore();

  SwapStore(const SwapStore&) = delete;
  SwapStore& operator=(const SwapStore&) = delete;

  // Reserves an aligned extent for `bytes` bytes, growing the files when the space is full.
  // A full filesystem or file-size limit is ResourceExhausted; the store is unchanged then.
  Result<SwapExtent> Allocate(std::string_view name, uint64_t bytes);
  // Grows the files once, by what is lacking rounded up to whole stripe rows, so that extents
  // adding up to `bytes` (each rounded up to 4 KiB) can then be allocated in any order without
  // growing again; nothing changes when the free space at the end already holds them. For an
  // owner that knows its final size (one extent per optimizer tile): one preallocation of exactly
  // that size, which the filesystem can keep contiguous, instead of one per extent. Errors as
  // Allocate's (growth_bytes 0 refuses to grow); the store is unchanged then.
  Status EnsureRoom(uint64_t bytes);
  Status Free(std::string_view name);
  Result<SwapExtent> Find(std::string_view name) const;
  std::vector<SwapExtent> Extents() const;

  // Buffers must be 4096-aligned and hold AlignUp(length, 4096) bytes: the padding after
  // `length` is transferred too (it is not part of the checksum).
  SwapHandle WriteAsync(std::string_view name, const void* data, uint64_t length);
  // `length` must be the extent's written length: more is OutOfRange (past the end of the
  // extent), less is InvalidArgument (checksums cover whole extents).
  SwapHandle ReadAsync(std::string_view name, void* data, uint64_t length);
  Status Write(std::string_view name, const void* data, uint64_t length) {
    return WriteAsync(name, data, length).Wait();
  }
  Status Read(std::string_view name, void* data, uint64_t length) {
    return ReadAsync(name, data, length).Wait();
  }

  // Writes the header (extent lengths and checksums) and fdatasyncs the files.
  Status Flush();
  Status Close();

  uint64_t capacity() const;
  uint64_t free_bytes() const;
  const std::vector<std::string>& file_paths() const { return file_paths_; }
  bool verify_checksums() const { return options_.verify_checksums; }
  uint64_t generation() const;

 private:
  struct Extent {
    SwapExtentRecord record;
    int writes_in_flight = 0;
    // Chunk checksums of the last write by this process (not persisted): they let a mismatch
    // name the chunk. Empty after a reopen.
    std::vector<uint64_t> chunk_sums;
  };

  SwapStore(AioEngine& engine, const SwapStoreOptions& options);
  Status OpenHeaderFiles(bool create);  // on failure none stays open
  // One owner per swap file: locks "<file>.lock" beside each file, before anything is opened or
  // truncated, for the store's life.
  Status LockFiles();
  void ReleaseLocks();
  Status OpenEachHeaderFile(bool create);
  // Closes the files of a store that failed to be created, writing nothing (and removes them when
  // they are scratch: remove_on_close).
  void Abandon();
  // remove_on_close: unlinks the store's files; the error names the first it could not remove.
  Status RemoveScratchFiles() const;
  Status LoadHeaders();
  Status PersistLocked();
  // Grows the files so that `needed` contiguous bytes fit at the end: by what the free range at
  // the end lacks, at least `min_step`, rounded up to whole stripe rows.
  Status GrowLocked(uint64_t needed, uint64_t min_step);
  Status FinishWrite(const std::string& name, uint64_t length, const ChunkedChecksum* checksum,
                     Status io_status);
  SwapExtent ToExtent(const SwapExtentRecord& record) const;
  std::string Describe() const;

  AioEngine& engine_;
  SwapStoreOptions options_;
  std::vector<std::string> file_paths_;
  std::vector<int> header_fds_;
  std::vector<FileLock> locks_;
  AioFileId data_file_ = 0;
  bool open_ = false;

  mutable std::mutex mu_;
  SwapHeader header_;  // identity and geometry; extents live in extents_
  std::map<std::string, Extent, std::less<>> extents_;
  ExtentAllocator allocator_;
};

}  // namespace sluice::offload
