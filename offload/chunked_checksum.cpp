#include "offload/chunked_checksum.h"

#include <algorithm>
#include <bit>

#include "offload/checksum.h"
#include "runtime/check.h"

namespace sluice::offload {

uint64_t CombineChunkChecksums(std::span<const uint64_t> chunk_sums) {
  static_assert(std::endian::native == std::endian::little,
                "chunk checksums are combined as little-endian u64s");
  return Checksum64(chunk_sums.data(), chunk_sums.size_bytes());
}

uint64_t ChunkedChecksum64(const void* data, uint64_t length, uint32_t chunk_shift) {
  const uint64_t chunk = uint64_t{1} << chunk_shift;
  const auto* bytes = static_cast<const std::byte*>(data);
  std::vector<uint64_t> sums;
  for (uint64_t at = 0; at < length; at += chunk) {
    sums.push_back(Checksum64(bytes + at, std::min(chunk, length - at)));
  }
  return CombineChunkChecksums(sums);
}

ChunkedChecksum::ChunkedChecksum(const std::byte* data, uint64_t length, uint64_t transfer,
                                 uint32_t chunk_shift)
    : data_(data), length_(length), transfer_(transfer), shift_(chunk_shift) {
  SLUICE_CHECK(chunk_shift >= kMinChecksumChunkShift && chunk_shift <= kMaxChecksumChunkShift)
      << "checksum chunk shift " << chunk_shift << " out of range";
  SLUICE_CHECK_GE(transfer, length);
  const uint64_t chunk = chunk_bytes();
  const size_t count = static_cast<size_t>((length + chunk - 1) / chunk);
  // The padding after `length` lies in the last chunk (it is less than 4096 bytes).
  SLUICE_CHECK(count == 0 ? transfer == 0 : transfer <= count * chunk)
      << "transfer " << transfer << " exceeds the chunks of " << length << " bytes";
  sums_.assign(count, 0);
  pending_.resize(count);
  for (size_t k = 0; k < count; ++k) {
    const uint64_t begin = k * chunk;
    pending_[k] = (k + 1 == count ? transfer : begin + chunk) - begin;
  }
}

void ChunkedChecksum::ChunkFinished(const char* data, uint64_t bytes, bool ok) {
  const auto begin = static_cast<uint64_t>(reinterpret_cast<const std::byte*>(data) - data_);
  const uint64_t end = begin + bytes;
  SLUICE_CHECK_LE(end, transfer_) << "a piece outside the checksummed request";
  std::lock_guard<std::mutex> lock(mu_);
  finished_bytes_ += bytes;
  if (!ok) {
    // The request failed: its checksum is moot, stop hashing.
    failed_ = true;
    ready_.clear();
  } else if (!failed_) {
    const uint64_t chunk = chunk_bytes();
    for (uint64_t k = begin >> shift_; k < sums_.size() && (k << shift_) < end; ++k) {
      const uint64_t chunk_end = k + 1 == sums_.size() ? transfer_ : (k + 1) * chunk;
      pending_[k] -= std::min(end, chunk_end) - std::max(begin, k * chunk);
      if (pending_[k] == 0) ready_.push_back(static_cast<size_t>(k));
    }
  }
  cv_.notify_all();
}

void ChunkedChecksum::Work(uint64_t bytes) {
  std::unique_lock<std::mutex> lock(mu_);
  HashReady(lock, static_cast<size_t>((bytes + chunk_bytes() - 1) >> shift_));
}

void ChunkedChecksum::Abandon() {
  std::lock_guard<std::mutex> lock(mu_);
  failed_ = true;
  ready_.clear();
  finished_bytes_ = transfer_;
  cv_.notify_all();
}

void ChunkedChecksum::Hash(size_t chunk) {
  const uint64_t begin = uint64_t{chunk} << shift_;
  sums_[chunk] = Checksum64(data_ + begin, std::min(chunk_bytes(), length_ - begin));
}

void ChunkedChecksum::HashReady(std::unique_lock<std::mutex>& lock, size_t max_chunks) {
  for (size_t done = 0; done < max_chunks && !ready_.empty(); ++done) {
    const size_t chunk = ready_.back();
    ready_.pop_back();
    ++hashing_;
    lock.unlock();
    Hash(chunk);
    lock.lock();
    --hashing_;
  }
  cv_.notify_all();
}

void ChunkedChecksum::HelpUntilFinished() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock,
             [&] { return !ready_.empty() || (finished_bytes_ == transfer_ && hashing_ == 0); });
    if (ready_.empty()) return;
    HashReady(lock, 1);
  }
}

bool ChunkedChecksum::ok() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !failed_ && finished_bytes_ == transfer_;
}

}  // namespace sluice::offload
