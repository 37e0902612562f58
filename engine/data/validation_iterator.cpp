#include "engine/data/validation_iterator.h"

#include <fmt/format.h>

#include <utility>
#include <vector>

#include "runtime/check.h"

namespace sluice::data {

ValidationIterator::ValidationIterator(const TokenRegion& region, int64_t seq_len,
                                       int64_t batch_size, int64_t num_batches, int rank,
                                       int world_size)
    : region_(region),
      seq_len_(seq_len),
      batch_size_(batch_size),
      num_batches_(num_batches),
      rank_(rank),
      world_size_(world_size),
      num_windows_(region.NumWindows(seq_len)) {
  SLUICE_CHECK_GE(num_windows_, 1);
  SLUICE_CHECK_GE(batch_size, 1);
  SLUICE_CHECK_GE(num_batches, 1);
  SLUICE_CHECK(rank >= 0 && rank < world_size) << "rank " << rank << " of " << world_size;
}

int64_t ValidationIterator::WindowOfSample(int64_t i) const {
  const auto total = static_cast<unsigned __int128>(num_batches_ * batch_size_ * world_size_);
  if (total > static_cast<unsigned __int128>(num_windows_)) return i % num_windows_;
  return static_cast<int64_t>(static_cast<unsigned __int128>(i) * num_windows_ / total);
}

Result<bool> ValidationIterator::Next(Batch* batch) {
  if (next_batch_ >= num_batches_) return false;
  const int64_t global_batch = batch_size_ * world_size_;
  std::vector<int64_t> starts(static_cast<size_t>(batch_size_));
  for (int64_t j = 0; j < batch_size_; ++j) {
    const int64_t sample = next_batch_ * global_batch + rank_ + j * world_size_;
    starts[static_cast<size_t>(j)] = WindowOfSample(sample) * seq_len_;
  }
  Status filled = FillBatch(region_, starts, seq_len_, batch);
  if (!filled.ok()) {
    return std::move(filled).WithContext(fmt::format("reading validation batch {} of {} of rank {}",
                                                     next_batch_ + 1, num_batches_, rank_));
  }
  ++next_batch_;
  return true;
}

}  // namespace sluice::data
