#include "tests/offload/test_support.h"

#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "offload/io_probe.h"
#include "runtime/check.h"
#include "runtime/foreign_call.h"

namespace sluice::offload::testutil {

TempDir::TempDir() {
  const char* base = std::getenv("SLUICE_TEST_TMPDIR");
  std::string pattern = std::string(base != nullptr ? base : "/tmp") + "/sluice_offload_XXXXXX";
  SLUICE_CHECK(mkdtemp(pattern.data()) != nullptr)
      << "mkdtemp " << pattern << ": " << std::strerror(errno);
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::string TempDir::Subdir(const std::string& name) const {
  const std::string dir = path_ + "/" + name;
  std::filesystem::create_directories(dir);
  return dir;
}

ScopedMount::ScopedMount(const std::string& fstype, const std::string& options) {
  if (mount(fstype.c_str(), dir_.path().c_str(), fstype.c_str(), 0, options.c_str()) == 0) {
    mounted_ = true;
  } else {
    reason_ = "cannot mount a " + fstype + " for this test (" + sluice::internal::ErrnoText(errno) +
              "); it needs CAP_SYS_ADMIN";
  }
}

ScopedMount::~ScopedMount() {
  if (mounted_) {
    std::error_code ignored;
    for (const auto& entry : std::filesystem::directory_iterator(dir_.path(), ignored)) {
      std::filesystem::remove_all(entry.path(), ignored);
    }
    umount2(dir_.path().c_str(), MNT_DETACH);
  }
}

ScopedFileSizeLimit::ScopedFileSizeLimit(uint64_t bytes) {
  rlimit old{};
  SLUICE_CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
  old_soft_ = old.rlim_cur;
  old_hard_ = old.rlim_max;
  old_handler_ = reinterpret_cast<void*>(signal(SIGXFSZ, SIG_IGN));
  rlimit limit{bytes, old.rlim_max};
  SLUICE_CHECK(setrlimit(RLIMIT_FSIZE, &limit) == 0) << std::strerror(errno);
}

ScopedFileSizeLimit::~ScopedFileSizeLimit() {
  rlimit old{old_soft_, old_hard_};
  SLUICE_CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0);
  signal(SIGXFSZ, reinterpret_cast<sighandler_t>(old_handler_));
}

void FillPattern(void* data, uint64_t bytes, uint64_t seed) {
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
  auto* out = static_cast<unsigned char*>(data);
  for (uint64_t i = 0; i < bytes; i += 8) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    const uint64_t n = bytes - i < 8 ? bytes - i : 8;
    std::memcpy(out + i, &state, n);
  }
}

AlignedBuffer PatternBuffer(uint64_t bytes, uint64_t seed) {
  AlignedBuffer buffer = std::move(AlignedBuffer::Allocate(bytes).value());
  FillPattern(buffer.data(), buffer.size(), seed);
  return buffer;
}

AlignedBuffer ZeroBuffer(uint64_t bytes) {
  return std::move(AlignedBuffer::Allocate(bytes).value());
}

std::vector<IoPath> AllIoPaths() {
  return {
      {"IoUringDirect", AioBackendKind::kIoUring, true},
      {"ThreadPoolDirect", AioBackendKind::kThreadPool, true},
      {"IoUringBuffered", AioBackendKind::kIoUring, false},
      {"ThreadPoolBuffered", AioBackendKind::kThreadPool, false},
  };
}

void PrintTo(const IoPath& path, std::ostream* out) { *out << path.name; }

AioOptions OptionsFor(const IoPath& path) {
  AioOptions options;
  options.backend = path.backend;
  options.direct_io = path.direct_io;
  return options;
}

std::string SkipReason(const IoPath& path, const std::string& dir) {
  if (!path.direct_io) return "";
  Status direct = ProbeODirect(dir);
  if (direct.ok()) return "";
  return direct.ToString() + "; set SLUICE_TEST_TMPDIR to a directory on ext4 or xfs";
}

double ProcessCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& tv) { return tv.tv_sec + tv.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

}  // namespace sluice::offload::testutil
