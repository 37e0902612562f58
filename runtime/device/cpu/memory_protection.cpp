#include "runtime/device/cpu/memory_protection.h"

#include <errno.h>
#include <execinfo.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <string>

#include "runtime/foreign_call.h"

namespace sluice {

std::string_view DeviceMemoryProtectionName(DeviceMemoryProtection mode) {
  switch (mode) {
    case DeviceMemoryProtection::kOff:
      return "off";
    case DeviceMemoryProtection::kOn:
      return "on";
    case DeviceMemoryProtection::kAuto:
      return "auto";
  }
  return "unknown";
}

Result<DeviceMemoryProtection> ParseDeviceMemoryProtection(std::string_view text) {
  std::string lower(text);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "off" || lower == "0" || lower == "false" || lower == "no") {
    return DeviceMemoryProtection::kOff;
  }
  if (lower == "on" || lower == "1" || lower == "true" || lower == "yes") {
    return DeviceMemoryProtection::kOn;
  }
  if (lower == "auto") return DeviceMemoryProtection::kAuto;
  return InvalidArgumentError("device memory protection \"{}\": expected on, off or auto", text);
}

namespace {

// ---- The fault handler's view of the world: plain atomics, no locks, no allocation. ----

constexpr int kMaxRegions = 256;
std::atomic<const DeviceMemoryGuard*> g_regions[kMaxRegions];
std::atomic<int> g_pkey{-1};
struct sigaction g_previous_action;

// A bounded string builder that neither allocates nor calls into stdio, for the signal handler.
class FixedWriter {
 public:
  FixedWriter(char* buffer, size_t capacity) : buffer_(buffer), capacity_(capacity) {}
  void Char(char c) {
    if (size_ < capacity_) buffer_[size_++] = c;
  }
  void Str(std::string_view text) {
    for (char c : text) Char(c);
  }
  void Dec(uint64_t value) {
    char digits[24];
    int n = 0;
    do {
      digits[n++] = static_cast<char>('0' + value % 10);
      value /= 10;
    } while (value != 0);
    while (n > 0) Char(digits[--n]);
  }
  void SignedDec(long value) {
    if (value < 0) {
      Char('-');
      Dec(static_cast<uint64_t>(-(value + 1)) + 1);
    } else {
      Dec(static_cast<uint64_t>(value));
    }
  }
  void Hex(uint64_t value) {
    Str("0x");
    char digits[16];
    int n = 0;
    do {
      digits[n++] = "0123456789abcdef"[value & 15];
      value >>= 4;
    } while (value != 0);
    while (n > 0) Char(digits[--n]);
  }
  size_t size() const { return size_; }

 private:
  char* buffer_;
  size_t capacity_;
  size_t size_ = 0;
};

void WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data += n;
    size -= static_cast<size_t>(n);
  }
}

// Faults that are not ours go where they would have gone without this handler.
void ChainToPreviousHandler(int sig, siginfo_t* info, void* context) {
  const struct sigaction& previous = g_previous_action;
  if ((previous.sa_flags & SA_SIGINFO) != 0) {
    if (previous.sa_sigaction != nullptr) previous.sa_sigaction(sig, info, context);
    return;
  }
  if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
    previous.sa_handler(sig);
    return;
  }
  // Default action: reinstall it. A real fault re-executes the instruction on return and dies
  // the usual way (core dump included); a SIGSEGV sent with kill() is raised again.
  struct sigaction default_action;
  std::memset(&default_action, 0, sizeof(default_action));
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  sigaction(sig, &default_action, nullptr);
  if (info == nullptr || info->si_code <= 0) raise(sig);
}

void OnSegv(int sig, siginfo_t* info, void* context) {
  const int key = g_pkey.load(std::memory_order_relaxed);
#if defined(__x86_64__) && defined(SEGV_PKUERR)
  if (info != nullptr && info->si_code == SEGV_PKUERR && key >= 0 &&
      static_cast<int>(info->si_pkey) == key) {
    // Bit 1 of the page-fault error code the kernel saves in REG_ERR: the access was a write.
    const auto* uc = static_cast<const ucontext_t*>(context);
    const bool write = (uc->uc_mcontext.gregs[REG_ERR] & 0x2) != 0;
    char report[1536];
    const size_t n = internal::FormatDeviceAccessFault(
        report, sizeof(report), static_cast<long>(syscall(SYS_gettid)), write,
        reinterpret_cast<uintptr_t>(info->si_addr), key);
    WriteAll(STDERR_FILENO, report, n);
    // backtrace() was called once at installation, so libgcc is loaded and this does not
    // allocate; the frames after the signal trampoline are the host code that touched the memory.
    void* frames[48];
    const int depth = backtrace(frames, 48);
    backtrace_symbols_fd(frames, depth, STDERR_FILENO);
    abort();
  }
#endif
  (void)key;
  ChainToPreviousHandler(sig, info, context);
}

Status InstallFaultHandler() {
  void* warm[2];
  backtrace(warm, 2);  // loads the unwinder now rather than inside the handler
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_sigaction = OnSegv;
  // SA_ONSTACK: a thread that set up an alternate signal stack (for stack overflows) keeps using
  // it for faults that are chained on.
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  if (sigaction(SIGSEGV, &action, &g_previous_action) != 0) {
    return InternalError("installing the SIGSEGV handler for device memory protection: {}",
                         internal::ErrnoText(errno));
  }
  return OkStatus();
}

#if defined(__x86_64__)
// CPUID.(EAX=7,ECX=0):ECX bit 3 = PKU (the CPU has protection keys), bit 4 = OSPKE (the kernel
// enabled them in CR4).
std::string WhyNoProtectionKeysOnThisCpu() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) {
    return "the CPU has no protection keys (no CPUID leaf 7)";
  }
  if ((ecx & (1u << 3)) == 0) {
    return "the CPU has no protection keys (CPUID PKU=0; no \"pku\" flag in /proc/cpuinfo)";
  }
  if ((ecx & (1u << 4)) == 0) {
    return "the kernel has not enabled protection keys (CPUID OSPKE=0; kernel built without "
           "CONFIG_X86_INTEL_MEMORY_PROTECTION_KEYS or booted with nopku)";
  }
  return "";
}
#endif

Result<int> AllocateProcessKey() {
#if defined(__x86_64__)
  if (std::string why = WhyNoProtectionKeysOnThisCpu(); !why.empty()) {
    return UnavailableError("{}", why);
  }
  // Disabled in this thread from the start; threads that exist already or start later get
  // Linux's initial PKRU, which denies every key but 0.
  const int key = pkey_alloc(0, PKEY_DISABLE_ACCESS);
  if (key < 0) {
    const int err = errno;
    if (err == ENOSYS) {
      return UnavailableError(
          "the kernel has no pkey_alloc system call (protection keys need Linux >= 4.9)");
    }
    if (err == ENOSPC) {
      return UnavailableError(
          "pkey_alloc: every protection key of the process is in use (another library took them)");
    }
    return UnavailableError("pkey_alloc failed: {}", internal::ErrnoText(err));
  }
  if (Status status = InstallFaultHandler(); !status.ok()) {
    pkey_free(key);
    return status;
  }
  g_pkey.store(key, std::memory_order_relaxed);
  return key;
#else
  return UnavailableError("memory protection keys are only used on x86-64");
#endif
}

}  // namespace

Result<int> ProcessProtectionKey() {
  // One key for every device of the process: access is granted per thread, not per device, and
  // a process has only 15 keys. Never freed, since pages may carry it until they are unmapped.
  static const Result<int>* const key = new Result<int>(AllocateProcessKey());
  return *key;
}

Result<DeviceProtectionDecision> DecideDeviceMemoryProtection(DeviceMemoryProtection requested) {
  DeviceProtectionDecision decision;
  decision.requested = requested;
  if (const char* env = std::getenv(kDeviceProtectEnvVar); env != nullptr && *env != '\0') {
    Result<DeviceMemoryProtection> parsed = ParseDeviceMemoryProtection(env);
    if (!parsed.ok()) {
      return Status(parsed.status()).WithContext(fmt::format("{}={}", kDeviceProtectEnvVar, env));
    }
    decision.requested = *parsed;
    decision.from_env = true;
  }
  const std::string source =
      decision.from_env
          ? fmt::format("{}={}", kDeviceProtectEnvVar,
                        DeviceMemoryProtectionName(decision.requested))
          : fmt::format("requested {}", DeviceMemoryProtectionName(decision.requested));
  if (decision.requested == DeviceMemoryProtection::kOff) {
    decision.explanation = fmt::format("off ({})", source);
    return decision;
  }
  Result<int> key = ProcessProtectionKey();
  if (!key.ok()) {
    if (decision.requested == DeviceMemoryProtection::kOn) {
      return FailedPreconditionError(
          "device memory protection is on ({}) but unavailable: {}; use auto (or off) where the "
          "CPU or kernel has no protection keys",
          source, key.status().message());
    }
    decision.explanation = fmt::format("off ({}): {}", source, key.status().message());
    return decision;
  }
  decision.active = true;
  decision.pkey = *key;
  decision.explanation = fmt::format(
      "on ({}): device memory carries protection key {}; only stream workers and the threads "
      "they start may touch it, other threads fault",
      source, *key);
  return decision;
}

std::string DescribeDeviceMemoryProtection(DeviceMemoryProtection configured) {
  Result<DeviceProtectionDecision> decision = DecideDeviceMemoryProtection(configured);
  if (!decision.ok()) return fmt::format("error: {}", decision.status().message());
  if (decision->active || decision->requested != DeviceMemoryProtection::kOff) {
    return decision->explanation;
  }
  // Off by request: say whether turning it on would work, without allocating a key for it.
#if defined(__x86_64__)
  if (std::string why = WhyNoProtectionKeysOnThisCpu(); !why.empty()) {
    return fmt::format("{}; unavailable here: {}", decision->explanation, why);
  }
  return fmt::format("{}; available (the CPU and kernel have protection keys)",
                     decision->explanation);
#else
  return fmt::format("{}; unavailable here: protection keys are only used on x86-64",
                     decision->explanation);
#endif
}

bool ThreadMayAccessDeviceMemory(int pkey) {
  if (pkey < 0) return true;
  const int rights = pkey_get(pkey);
  return rights == 0;
}

// ---- DeviceMemoryGuard ----

Result<std::unique_ptr<DeviceMemoryGuard>> DeviceMemoryGuard::Create(int device_index, int pkey,
                                                                     void* base, uint64_t length) {
  SLUICE_CHECK(pkey >= 0 && base != nullptr && length > 0);
  if (pkey_mprotect(base, length, PROT_READ | PROT_WRITE, pkey) != 0) {
    return InternalError("pkey_mprotect of device cpu:{}'s {} bytes at {} with key {}: {}",
                         device_index, length, base, pkey, internal::ErrnoText(errno));
  }
  std::unique_ptr<DeviceMemoryGuard> guard(
      new DeviceMemoryGuard(device_index, pkey, reinterpret_cast<uintptr_t>(base), length));
  SetDeviceProtectionKey(pkey);
  for (int i = 0; i < kMaxRegions; ++i) {
    const DeviceMemoryGuard* expected = nullptr;
    if (g_regions[i].compare_exchange_strong(expected, guard.get(), std::memory_order_release)) {
      guard->region_index_ = i;
      break;
    }
  }
  // With every entry taken (256 protected devices alive) the memory is still protected; only the
  // fault report cannot name the allocation.
  return guard;
}

DeviceMemoryGuard::DeviceMemoryGuard(int device_index, int pkey, uintptr_t base, uint64_t length)
    : device_index_(device_index),
      pkey_(pkey),
      base_(base),
      length_(length),
      chunks_(new std::atomic<Slot*>[kMaxChunks]) {
  for (size_t i = 0; i < kMaxChunks; ++i) chunks_[i].store(nullptr, std::memory_order_relaxed);
}

DeviceMemoryGuard::~DeviceMemoryGuard() {
  // A fault being reported by another thread at this very moment may still read this guard; the
  // device is being destroyed, so such a thread is touching memory about to be unmapped anyway.
  if (region_index_ >= 0) g_regions[region_index_].store(nullptr, std::memory_order_release);
}

void DeviceMemoryGuard::WriteSlot(Slot& slot, uint64_t begin, uint64_t size, uint64_t reserved,
                                  MemoryCategory category, uint64_t stream_id) {
  const uint64_t seq = slot.seq.load(std::memory_order_relaxed);
  slot.seq.store(seq + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  slot.begin.store(begin, std::memory_order_relaxed);
  slot.size.store(size, std::memory_order_relaxed);
  slot.reserved.store(reserved, std::memory_order_relaxed);
  slot.stream_id.store(stream_id, std::memory_order_relaxed);
  slot.category.store(static_cast<uint8_t>(category), std::memory_order_relaxed);
  slot.seq.store(seq + 2, std::memory_order_release);
}

void DeviceMemoryGuard::RecordAllocation(const void* data, uint64_t size, uint64_t reserved,
                                         MemoryCategory category, uint64_t stream_id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (free_slots_.empty()) {
    const size_t count = chunk_count_.load(std::memory_order_relaxed);
    if (count == kMaxChunks) return;  // over a million live buffers: left unnamed
    owned_chunks_.push_back(std::make_unique<Slot[]>(kChunkSlots));
    chunks_[count].store(owned_chunks_.back().get(), std::memory_order_release);
    chunk_count_.store(count + 1, std::memory_order_release);
    for (size_t i = kChunkSlots; i > 0; --i) {
      free_slots_.push_back(static_cast<uint32_t>(count * kChunkSlots + i - 1));
    }
  }
  const uint32_t index = free_slots_.back();
  free_slots_.pop_back();
  slot_of_[reinterpret_cast<uintptr_t>(data)] = index;
  Slot& slot = chunks_[index / kChunkSlots].load(std::memory_order_relaxed)[index % kChunkSlots];
  WriteSlot(slot, reinterpret_cast<uintptr_t>(data), size, reserved, category, stream_id);
}

void DeviceMemoryGuard::ForgetAllocation(const void* data) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = slot_of_.find(reinterpret_cast<uintptr_t>(data));
  if (it == slot_of_.end()) return;  // was never recorded (the table was full)
  const uint32_t index = it->second;
  slot_of_.erase(it);
  Slot& slot = chunks_[index / kChunkSlots].load(std::memory_order_relaxed)[index % kChunkSlots];
  WriteSlot(slot, 0, 0, 0, MemoryCategory::kBuffers, 0);
  free_slots_.push_back(index);
}

DeviceMemoryGuard::Lookup DeviceMemoryGuard::Find(uintptr_t address) const {
  const size_t count = chunk_count_.load(std::memory_order_acquire);
  for (size_t c = 0; c < count; ++c) {
    const Slot* chunk = chunks_[c].load(std::memory_order_acquire);
    if (chunk == nullptr) continue;
    for (size_t i = 0; i < kChunkSlots; ++i) {
      const Slot& slot = chunk[i];
      // A bounded number of tries: a writer holds a slot odd for a few stores only, and a fault
      // report must not hang if it interrupted that very writer.
      for (int attempt = 0; attempt < 64; ++attempt) {
        const uint64_t seq = slot.seq.load(std::memory_order_acquire);
        if ((seq & 1) != 0) continue;
        Lookup snapshot;
        snapshot.begin = slot.begin.load(std::memory_order_relaxed);
        snapshot.size = slot.size.load(std::memory_order_relaxed);
        snapshot.reserved = slot.reserved.load(std::memory_order_relaxed);
        snapshot.stream_id = slot.stream_id.load(std::memory_order_relaxed);
        snapshot.category =
            static_cast<MemoryCategory>(slot.category.load(std::memory_order_relaxed));
        std::atomic_thread_fence(std::memory_order_acquire);
        if (slot.seq.load(std::memory_order_relaxed) != seq) continue;
        const uint64_t extent =
            snapshot.reserved > snapshot.size ? snapshot.reserved : snapshot.size;
        if (snapshot.begin != 0 && address >= snapshot.begin && address - snapshot.begin < extent) {
          snapshot.found = true;
          return snapshot;
        }
        break;
      }
    }
  }
  return Lookup{};
}

namespace internal {

size_t FormatDeviceAccessFault(char* buffer, size_t capacity, long tid, bool write,
                               uintptr_t address, int pkey) {
  const DeviceMemoryGuard* guard = nullptr;
  for (int i = 0; i < kMaxRegions && guard == nullptr; ++i) {
    const DeviceMemoryGuard* candidate = g_regions[i].load(std::memory_order_acquire);
    if (candidate != nullptr && address >= candidate->base() &&
        address - candidate->base() < candidate->length()) {
      guard = candidate;
    }
  }
  FixedWriter out(buffer, capacity);
  out.Str("host thread ");
  out.SignedDec(tid);
  out.Str(write ? " wrote" : " read");
  out.Str(" device memory at ");
  out.Hex(address);
  DeviceMemoryGuard::Lookup lookup;
  if (guard != nullptr) {
    lookup = guard->Find(address);
    if (lookup.found) {
      const uint64_t offset = address - lookup.begin;
      out.Str(": allocation '");
      out.Str(MemoryCategoryName(lookup.category));
      out.Str("' of ");
      out.Dec(lookup.size);
      out.Str(" bytes, offset ");
      out.Dec(offset);
      if (offset >= lookup.size) out.Str(" (past its end, in its alignment padding)");
    } else {
      out.Str(": no live allocation there (freed or never allocated; arena offset ");
      out.Dec(address - guard->base());
      out.Str(")");
    }
    out.Str(", on device cpu:");
    out.Dec(static_cast<uint64_t>(guard->device_index()));
  } else {
    out.Str(" (protection key ");
    out.Dec(static_cast<uint64_t>(pkey));
    out.Str(", no registered device)");
  }
  out.Str("; device memory may only be touched by ops enqueued on a stream\n");
  // Details after the one-line verdict: who the thread is, where the buffer came from.
  char name[17] = {};
  prctl(PR_GET_NAME, name, 0, 0, 0);
  out.Str("  the thread is named '");
  out.Str(name);
  out.Str("'");
  if (lookup.found) {
    out.Str("; the DeviceBuffer starts at ");
    out.Hex(lookup.begin);
    if (lookup.stream_id != 0) {
      out.Str(", made by AllocateAsync on stream cpu:");
      out.Dec(static_cast<uint64_t>(guard->device_index()));
      out.Str("/stream");
      out.Dec(lookup.stream_id);
    }
  }
  out.Str(
      "\n  enqueue the access (CopyAsync to pinned memory and an event, or LaunchHostFunc) "
      "instead; backtrace of the access (addr2line -fCe <binary> <+offset> names a frame):\n");
  return out.size();
}

}  // namespace internal

}  // namespace sluice
