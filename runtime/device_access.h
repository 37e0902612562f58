// Who may touch the memory of a CPU device that enforces the host-never-touches-device rule
// (runtime/device/cpu/memory_protection.h): its pages carry a protection key, and a thread may
// access them only inside a ScopedDeviceAccess. Stream workers hold one around each task. So
// does MPI: its progress engine is the communicator's device-side agent, and any MPI call, on
// any thread, may deliver a message into a receive buffer that a collective on a comm stream
// posted in device memory (Open MPI progresses every pending request in every call).
#pragma once

namespace sluice {

// The key device memory carries, once a CPU device turned protection on; -1 otherwise.
int DeviceProtectionKey();
// Called by the CPU device when it protects its memory with `pkey`.
void SetDeviceProtectionKey(int pkey);

// Grants the calling thread read/write access to protected device memory for its scope and
// restores the previous rights after; nests. pkey < 0 does nothing. Engine code must not use it
// to reach device memory from the host (enqueue the work on a stream instead).
class ScopedDeviceAccess {
 public:
  explicit ScopedDeviceAccess(int pkey = DeviceProtectionKey());
  ~ScopedDeviceAccess();
  ScopedDeviceAccess(const ScopedDeviceAccess&) = delete;
  ScopedDeviceAccess& operator=(const ScopedDeviceAccess&) = delete;

 private:
  int pkey_;
  int saved_rights_ = 0;
};

}  // namespace sluice
