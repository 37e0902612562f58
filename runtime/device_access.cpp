#include "runtime/device_access.h"

#include <sys/mman.h>

#include <atomic>

namespace sluice {
namespace {

std::atomic<int> g_device_pkey{-1};

}  // namespace

int DeviceProtectionKey() { return g_device_pkey.load(std::memory_order_acquire); }

void SetDeviceProtectionKey(int pkey) { g_device_pkey.store(pkey, std::memory_order_release); }

ScopedDeviceAccess::ScopedDeviceAccess(int pkey) : pkey_(pkey) {
  if (pkey_ < 0) return;
  saved_rights_ = pkey_get(pkey_);
  pkey_set(pkey_, 0);
}

ScopedDeviceAccess::~ScopedDeviceAccess() {
  if (pkey_ < 0) return;
  pkey_set(pkey_, static_cast<unsigned>(saved_rights_ < 0 ? PKEY_DISABLE_ACCESS : saved_rights_));
}

}  // namespace sluice
