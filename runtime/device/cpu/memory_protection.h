// Enforcement of "the host never touches device memory" on the CPU backend.
//
// On a GPU a host dereference of a device pointer faults; on the CPU backend device memory is
// ordinary process memory, so nothing would stop host code from reading it, and code that does
// works here and breaks on CUDA. Where the CPU and kernel have memory protection keys (x86-64
// PKU, Linux >= 4.9), the arena of a protected CpuDevice is tagged with one process-wide key
// (pkey_mprotect) whose access is disabled in every thread's PKRU register, except:
// - a stream worker while it runs tasks (copies, memsets, host functions): CpuStreamQueue grants
//   the rights before the first task of a busy period and drops them when its queue runs dry,
//   so the worker holds them whenever a task runs and never while idle;
// - threads created by a worker while it runs a task, since Linux copies PKRU into a new thread:
//   the OpenMP team of a host function (libgomp keeps one pool per master thread, created by the
//   master; OpenBLAS here is the OpenMP build and uses the same pool), and any std::thread a host
//   function starts. Those threads keep the access for their life; they only run the worker's
//   work.
// - any thread inside an MPI call (runtime/device_access.h): MPI's progress engine completes the
//   transfers the comm stream posted into device memory, whichever thread calls it.
// Every other thread faults with SIGSEGV/SEGV_PKUERR on access; the handler installed here writes
// which thread touched which allocation (tag, size, offset) and aborts.
//
// Not covered: threads that exist before a host function uses them and were not created by a
// worker, e.g. oneTBB's global arena workers (created by whoever first uses TBB; no Sluice code
// uses TBB today) or an OpenMP pool shared across masters (libgomp does not share them). Such
// threads fault when a host function hands them device memory. I/O by the kernel into device
// memory (read(2), io_uring) is no supported path either: NVMe swap goes through pinned buffers.
//
// Pinned host memory is not protected: the host may touch it, as with cudaHostAlloc.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runtime/device_access.h"  // ScopedDeviceAccess
#include "runtime/memory_kinds.h"
#include "runtime/status.h"

namespace sluice {

// What a CPU device is asked for (DeviceOptions::memory_protection, SLUICE_DEVICE_PROTECT).
enum class DeviceMemoryProtection : uint8_t {
  kOff = 0,  // no enforcement (today's default: the engine still reads device memory on the host)
  kOn,       // enforce; creating the device fails where protection keys are unavailable
  kAuto,     // enforce where protection keys are available, else off with one log line
};
std::string_view DeviceMemoryProtectionName(DeviceMemoryProtection mode);  // "off", "on", "auto"
// Accepts off/on/auto (any case) and the booleans 0/1/false/true/no/yes.
Result<DeviceMemoryProtection> ParseDeviceMemoryProtection(std::string_view text);

// Overrides the requested mode for every CPU device the process creates: on, off or auto.
inline constexpr const char* kDeviceProtectEnvVar = "SLUICE_DEVICE_PROTECT";

// The mode a CPU device gets, and whether it is enforced.
struct DeviceProtectionDecision {
  DeviceMemoryProtection requested = DeviceMemoryProtection::kOff;  // after the env override
  bool from_env = false;  // `requested` came from SLUICE_DEVICE_PROTECT
  bool active = false;    // device memory will be protected
  int pkey = -1;          // the process's protection key when active
  // Why it is not active ("off: requested (default)", "off: the CPU has no protection keys ..."),
  // or what is protected when it is.
  std::string explanation;
};

// Applies SLUICE_DEVICE_PROTECT to `requested` and probes the CPU/kernel. Errors:
// InvalidArgument for a bad SLUICE_DEVICE_PROTECT value, FailedPrecondition for `on` where
// protection keys are unavailable (the message says why).
Result<DeviceProtectionDecision> DecideDeviceMemoryProtection(DeviceMemoryProtection requested);

// For `sluice env`: one line on what a CPU device created with `configured` would get, e.g.
// "on (SLUICE_DEVICE_PROTECT=on): device memory is protected with pkey 1; only stream workers
// and their thread teams may touch it" or "off (requested off by default): ...; protection keys
// are available (pkey 1)" or "off: the CPU has no protection keys (CPUID PKU=0)". Never fails.
std::string DescribeDeviceMemoryProtection(
    DeviceMemoryProtection configured = DeviceMemoryProtection::kOff);

// The process-wide protection key (allocated on first use and kept for the process's life), or
// why there is none. Allocating it disables access in the calling thread; other threads start
// without access (Linux's initial PKRU denies every key but 0).
Result<int> ProcessProtectionKey();

// True when the calling thread may access memory protected with `pkey` (true for pkey < 0).
bool ThreadMayAccessDeviceMemory(int pkey);

// The protection of one CpuDevice's arena: tags the region with the process key, registers it
// with the fault handler, and keeps the table of live allocations the handler names. Create it
// only where DecideDeviceMemoryProtection said `active`.
class DeviceMemoryGuard {
 public:
  static Result<std::unique_ptr<DeviceMemoryGuard>> Create(int device_index, int pkey, void* base,
                                                           uint64_t length);
  // Unregisters the region from the fault handler; the pages keep their key until unmapped.
  ~DeviceMemoryGuard();
  DeviceMemoryGuard(const DeviceMemoryGuard&) = delete;
  DeviceMemoryGuard& operator=(const DeviceMemoryGuard&) = delete;

  int pkey() const { return pkey_; }

  // Called by the device as buffers come and go. `size` is what was asked for, `reserved` the
  // aligned block; `stream_id` is the allocation stream of AllocateAsync buffers (0 otherwise).
  void RecordAllocation(const void* data, uint64_t size, uint64_t reserved, MemoryCategory category,
                        uint64_t stream_id);
  void ForgetAllocation(const void* data);

  // What the fault handler finds at `address` (also usable outside it: it takes no lock).
  struct Lookup {
    bool found = false;  // a live allocation covers the address
    uint64_t begin = 0;  // its address
    uint64_t size = 0;
    uint64_t reserved = 0;
    uint64_t stream_id = 0;
    MemoryCategory category = MemoryCategory::kBuffers;
  };
  Lookup Find(uintptr_t address) const;

  int device_index() const { return device_index_; }
  uintptr_t base() const { return base_; }
  uint64_t length() const { return length_; }

 private:
  // One live allocation, readable by the signal handler without a lock: the writer (under mu_)
  // makes `seq` odd, writes, and makes it even again; a reader retries while it sees an odd or
  // changed `seq` (a seqlock per slot).
  struct Slot {
    std::atomic<uint64_t> seq{0};
    std::atomic<uint64_t> begin{0};  // 0: empty
    std::atomic<uint64_t> size{0};
    std::atomic<uint64_t> reserved{0};
    std::atomic<uint64_t> stream_id{0};
    std::atomic<uint8_t> category{0};
  };
  // Slots come in chunks that are published once and never move, so the handler can walk them
  // while the device adds more; 1024 chunks of 1024 slots bound the allocations it can name.
  static constexpr size_t kChunkSlots = 1024;
  static constexpr size_t kMaxChunks = 1024;

  DeviceMemoryGuard(int device_index, int pkey, uintptr_t base, uint64_t length);
  void WriteSlot(Slot& slot, uint64_t begin, uint64_t size, uint64_t reserved,
                 MemoryCategory category, uint64_t stream_id);

  const int device_index_;
  const int pkey_;
  const uintptr_t base_;
  const uint64_t length_;
  int region_index_ = -1;  // the fault handler's registry entry

  std::mutex mu_;  // writers only
  std::unique_ptr<std::atomic<Slot*>[]> chunks_;
  std::atomic<size_t> chunk_count_{0};
  std::vector<std::unique_ptr<Slot[]>> owned_chunks_;
  std::vector<uint32_t> free_slots_;
  std::unordered_map<uintptr_t, uint32_t> slot_of_;  // allocation address -> slot
};

namespace internal {
// Formats the fault report into `buffer` (at most `capacity` bytes, no allocation: it runs in
// the signal handler) and returns its length. Exposed for tests.
size_t FormatDeviceAccessFault(char* buffer, size_t capacity, long tid, bool write,
                               uintptr_t address, int pkey);
}  // namespace internal

}  // namespace sluice
