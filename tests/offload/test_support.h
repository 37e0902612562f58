// Helpers shared by the offload tests: temporary directories, small mounted filesystems,
// file-size limits, deterministic data, and the engine configurations every suite runs under.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "offload/aio_options.h"
#include "offload/aligned_buffer.h"

namespace sluice::offload::testutil {

// A fresh directory under $SLUICE_TEST_TMPDIR or /tmp, removed with its contents.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }
  std::string Subdir(const std::string& name) const;  // created on demand

 private:
  std::string path_;
};

// Mounts a filesystem (tmpfs with a size limit, or ramfs) on a temporary directory. mount(2)
// needs CAP_SYS_ADMIN: when it is refused, ok() is false and reason() says why (tests skip).
class ScopedMount {
 public:
  ScopedMount(const std::string& fstype, const std::string& options);
  ~ScopedMount();
  bool ok() const { return mounted_; }
  const std::string& reason() const { return reason_; }
  const std::string& path() const { return dir_.path(); }

 private:
  TempDir dir_;
  bool mounted_ = false;
  std::string reason_;
};

// Lowers RLIMIT_FSIZE for the process and ignores SIGXFSZ, so oversized writes fail with EFBIG
// instead of killing the test; restores both on destruction.
class ScopedFileSizeLimit {
 public:
  explicit ScopedFileSizeLimit(uint64_t bytes);
  ~ScopedFileSizeLimit();

 private:
  uint64_t old_soft_ = 0;
  uint64_t old_hard_ = 0;
  void* old_handler_ = nullptr;
};

// Bytes of a seeded xorshift stream: different seeds give different data.
void FillPattern(void* data, uint64_t bytes, uint64_t seed);
AlignedBuffer PatternBuffer(uint64_t bytes, uint64_t seed);
AlignedBuffer ZeroBuffer(uint64_t bytes);

// The I/O paths every engine and store test runs on.
struct IoPath {
  std::string name;
  AioBackendKind backend;
  bool direct_io;
};
std::vector<IoPath> AllIoPaths();
void PrintTo(const IoPath& path, std::ostream* out);  // gtest: name parameters readably
AioOptions OptionsFor(const IoPath& path);
// Why `path` cannot run in `dir` (O_DIRECT requested on a filesystem without it), or "".
std::string SkipReason(const IoPath& path, const std::string& dir);

// CPU seconds (user + system) this process has used.
double ProcessCpuSeconds();

}  // namespace sluice::offload::testutil
