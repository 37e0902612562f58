// Files behind the I/O engine: opening with O_DIRECT (or buffered where the filesystem refuses
// it), preallocation, and the striping that lays one logical space over several directories.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/status.h"

namespace sluice::offload {

// How to open one logical file. With several paths (one per directory of `nvme_path`), logical
// bytes are laid out round-robin in `stripe_size` chunks: stripe s lives in paths[s % n] at
// base_offset + (s / n) * stripe_size.
struct AioFileOptions {
  std::vector<std::string> paths;
  uint64_t stripe_size = 1ull << 20;  // multiple of 4096; ignored with one path
  uint64_t base_offset = 0;           // where logical offset 0 lies in every file (4096-aligned)
  bool create = true;
  bool truncate = false;
  bool read_only = false;
  uint64_t preallocate_bytes = 0;  // logical bytes to fallocate at open (0: none)
};

namespace internal {

struct FilePart {
  std::string path;
  int fd = -1;
  bool direct = false;
  int fixed_index = -1;  // io_uring registered-file slot, or -1
};

struct FileEntry {
  std::vector<FilePart> parts;
  uint64_t stripe_size = 0;
  uint64_t base_offset = 0;
  bool any_direct = false;
  std::atomic<int64_t> inflight{0};  // chunks submitted and not yet completed

  ~FileEntry();  // closes the descriptors
};

struct StripeLocation {
  size_t part = 0;
  uint64_t offset = 0;      // in the part's file
  uint64_t contiguous = 0;  // bytes from there until the stripe ends
};

StripeLocation Locate(const FileEntry& file, uint64_t logical_offset);

// Physical size each part needs so that logical bytes [0, logical_bytes) exist.
uint64_t PartBytesFor(const FileEntry& file, uint64_t logical_bytes);

// Opens one part. With want_direct, a filesystem that rejects O_DIRECT (EINVAL) is reopened
// buffered and logged once per directory.
Result<FilePart> OpenPart(const std::string& path, const AioFileOptions& options, bool want_direct);

// fallocate() the part to at least `bytes` (never shrinks). ENOSPC, EDQUOT and EFBIG become
// ResourceExhausted naming the file and size; a filesystem without fallocate gets ftruncate.
Status PreallocatePart(const FilePart& part, uint64_t bytes);

}  // namespace internal
}  // namespace sluice::offload
