#include "runtime/device/cpu/pinned_host_memory.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "runtime/device.h"
#include "runtime/foreign_call.h"
#include "runtime/logging.h"
#include "runtime/size_format.h"

namespace sluice {
namespace {

std::string MemlockLimitText() {
  rlimit limit{};
  if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0) return "unknown";
  if (limit.rlim_cur == RLIM_INFINITY) return "unlimited";
  return FormatBytes(limit.rlim_cur);
}

}  // namespace

Result<PinnedRegion> MapPinnedHostMemory(size_t bytes) {
  SLUICE_CHECK(bytes > 0);
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  PinnedRegion region;
  region.length = AlignUp(bytes, page);
  void* data =
      mmap(nullptr, region.length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data == MAP_FAILED) {
    return ResourceExhaustedError("cannot map {} of pinned host memory: mmap failed: {}",
                                  FormatBytes(region.length), internal::ErrnoText(errno));
  }
  region.data = data;
  if (mlock(data, region.length) == 0) {
    region.locked = true;
  } else {
    const int err = errno;
    SLUICE_LOG_ONCE(kWarn, "device",
                    "cannot lock pinned host memory in RAM (mlock of {}: {}; RLIMIT_MEMLOCK is "
                    "{}): pinned buffers stay pageable, copies from them may be slower; raise the "
                    "limit with `ulimit -l unlimited`",
                    FormatBytes(region.length), internal::ErrnoText(err), MemlockLimitText());
  }
  return region;
}

void UnmapPinnedHostMemory(void* data, size_t length) { munmap(data, length); }

}  // namespace sluice
