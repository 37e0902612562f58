// XXH3-64 checksums of swap extents and headers. The library picks the widest SIMD path
// (SSE2/AVX2/AVX-512) at run time, so hashing stays well above NVMe bandwidth.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace sluice::offload {

uint64_t Checksum64(const void* data, size_t bytes);

// Incremental form: Update() over consecutive pieces gives the same value as Checksum64() over
// their concatenation (the swap header's fixed part and records are hashed this way). Extent data
// uses ChunkedChecksum (chunked_checksum.h), whose chunks can be hashed in any order.
class StreamingChecksum {
 public:
  StreamingChecksum();
  ~StreamingChecksum();
  StreamingChecksum(StreamingChecksum&&) noexcept;
  StreamingChecksum& operator=(StreamingChecksum&&) noexcept;

  void Update(const void* data, size_t bytes);
  uint64_t Digest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace sluice::offload
