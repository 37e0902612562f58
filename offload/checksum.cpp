#include "offload/checksum.h"

#include <xxhash.h>
#if defined(__x86_64__)
#include <xxh_x86dispatch.h>  // maps XXH3_64bits* to the run-time dispatched SIMD variants
#endif

#include "runtime/check.h"

namespace sluice::offload {

struct StreamingChecksum::State {
  XXH3_state_t* xxh = nullptr;
  State() : xxh(XXH3_createState()) {
    SLUICE_CHECK(xxh != nullptr) << "XXH3_createState: out of memory";
    XXH3_64bits_reset(xxh);
  }
  ~State() { XXH3_freeState(xxh); }
};

uint64_t Checksum64(const void* data, size_t bytes) { return XXH3_64bits(data, bytes); }

StreamingChecksum::StreamingChecksum() : state_(std::make_unique<State>()) {}
StreamingChecksum::~StreamingChecksum() = default;
StreamingChecksum::StreamingChecksum(StreamingChecksum&&) noexcept = default;
StreamingChecksum& StreamingChecksum::operator=(StreamingChecksum&&) noexcept = default;

void StreamingChecksum::Update(const void* data, size_t bytes) {
  XXH3_64bits_update(state_->xxh, data, bytes);
}

uint64_t StreamingChecksum::Digest() const { return XXH3_64bits_digest(state_->xxh); }

}  // namespace sluice::offload
