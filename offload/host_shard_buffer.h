// A page-aligned, zeroed host allocation charged to the memory ledger as host memory: where the
// ZeRO engine keeps a shard that offload moved off the device (the fp32 gradient shard with the
// optimizer offloaded, the parameter shard with the parameters offloaded). Not pinned: only the
// bounded staging rings are.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "runtime/memory_accounting.h"
#include "runtime/memory_kinds.h"
#include "runtime/status.h"

namespace sluice::offload {

class HostShardBuffer {
 public:
  HostShardBuffer() = default;
  // ResourceExhausted (naming `what` and the setting to change) when the host has no room.
  static Result<HostShardBuffer> Allocate(size_t bytes, MemoryCategory category, const char* what);

  void* data() const { return data_.get(); }
  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data());
  }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // Zeroes it on `threads` threads (0: OpenMP's default): one thread zeroing a gigabyte shard
  // spends about a tenth of a second on it every step (measured on an H100 host, issue 19).
  void Zero(int threads);

 private:
  struct Free {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> data_;
  size_t size_ = 0;
  MemoryCharge charge_;
};

}  // namespace sluice::offload
