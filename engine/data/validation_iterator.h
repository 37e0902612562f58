// Walks the same validation batches on every evaluation, so successive validation losses are
// comparable. The split's windows (stride seq_len from its start, no shuffling) are sampled at
// evenly spaced indices so that the evaluated set spans the whole split; when more samples are
// asked for than there are windows, the windows repeat in order.
//
// Like training batches, global evaluation sample i belongs to rank i % world_size: batch b of
// rank r holds the global samples b * B * world + r + j * world, j < B. The union of one batch
// over the ranks depends only on the global batch size B * world.
#pragma once

#include <cstdint>

#include "engine/data/batch.h"
#include "engine/data/token_dataset.h"
#include "runtime/status.h"

namespace sluice::data {

class ValidationIterator {
 public:
  // `region` must outlive the iterator (it points into the DataLoader's dataset).
  ValidationIterator(const TokenRegion& region, int64_t seq_len, int64_t batch_size,
                     int64_t num_batches, int rank, int world_size);

  int64_t num_batches() const { return num_batches_; }
  int64_t num_windows() const { return num_windows_; }
  // Fills the next batch; false once num_batches() batches were returned. DataLoss when the
  // file shrank since it was opened (see DataLoader::NextBatch).
  Result<bool> Next(Batch* batch);
  // Starts over with the same batches.
  void Reset() { next_batch_ = 0; }

  // The window index (within the split) of global evaluation sample `i`.
  int64_t WindowOfSample(int64_t i) const;

 private:
  TokenRegion region_;
  int64_t seq_len_;
  int64_t batch_size_;
  int64_t num_batches_;
  int rank_;
  int world_size_;
  int64_t num_windows_;
  int64_t next_batch_ = 0;
};

}  // namespace sluice::data
