// The data pipeline of one data-parallel rank: seeded shuffled training batches, a fixed set of
// validation batches, and a small serializable position for exact resume.
//
// Sharding rule (ZeRO tests rely on it): every rank computes the same global order of windows
// (WindowSampler). A training step consumes the next batch_size * world_size windows of that
// order; rank r takes the global samples r, r + world_size, r + 2 * world_size, ... of them.
// So the union over ranks of one global batch is the same set of windows for any world size that
// gives the same global batch (micro_batch * world), and every rank's sampler state stays
// identical.
//
// A loader has one consumer: it is not safe to call from several threads at once. Its batches do
// not depend on threads at all: they are a pure function of (data, seed, state).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "engine/data/batch.h"
#include "engine/data/data_options.h"
#include "engine/data/token_dataset.h"
#include "engine/data/validation_iterator.h"
#include "engine/data/window_sampler.h"
#include "runtime/status.h"

namespace sluice::data {

class DataLoader {
 public:
  // Opens and validates the data (TokenDataset::Open) for rank `rank` of `world_size`.
  static Result<DataLoader> Open(const DataOptions& options, int rank = 0, int world_size = 1);

  const TokenDataset& dataset() const { return dataset_; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int64_t seq_len() const { return dataset_.options().seq_len; }

  // This rank's `batch_size` rows of the next global batch (see the sharding rule above).
  // DataLoss when the training file shrank since it was opened (the tokens are read in place:
  // engine/data/mapped_read_guard.h), naming the file; the sampler has moved past that batch
  // then, so the run cannot go on from here: it resumes from its last checkpoint.
  Status NextBatch(int64_t batch_size, Batch* batch);
  Result<Batch> NextBatch(int64_t batch_size);

  // The sampler position: {"version", "seed", "epoch", "position", "train_tokens", "seq_len"}.
  // The same on every rank; a checkpoint stores it once.
  const SamplerState& sampler_state() const { return sampler_.state(); }
  nlohmann::json SaveState() const;
  // Continues exactly after the batch that preceded SaveState(), with the saved seed. Fails when
  // the state is malformed or was saved for a different training split or seq_len.
  Status RestoreState(const nlohmann::json& state);

  // `num_batches` batches of `batch_size` rows from the validation split, the same on every call.
  // FailedPrecondition when the run has no validation data. The iterator must not outlive this
  // loader.
  Result<ValidationIterator> Validation(int64_t batch_size, int64_t num_batches) const;

 private:
  DataLoader(TokenDataset dataset, int rank, int world_size);

  TokenDataset dataset_;
  int rank_;
  int world_size_;
  WindowSampler sampler_;
};

}  // namespace sluice::data
