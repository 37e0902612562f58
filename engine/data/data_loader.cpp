#include "engine/data/data_loader.h"

#include <fmt/format.h>

#include <string_view>
#include <utility>
#include <vector>

namespace sluice::data {
namespace {

constexpr int64_t kStateVersion = 1;

Result<int64_t> GetInt(const nlohmann::json& state, std::string_view key) {
  const auto it = state.find(key);
  if (it == state.end() || !it->is_number_integer()) {
    return InvalidArgumentError("data sampler state: key '{}' is missing or not an integer in {}",
                                key, state.dump());
  }
  return it->get<int64_t>();
}

}  // namespace

DataLoader::DataLoader(TokenDataset dataset, int rank, int world_size)
    : dataset_(std::move(dataset)),
      rank_(rank),
      world_size_(world_size),
      sampler_(dataset_.train().size(), dataset_.options().seq_len, dataset_.options().seed) {}

Result<DataLoader> DataLoader::Open(const DataOptions& options, int rank, int world_size) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return InvalidArgumentError("data loader for rank {} of world size {}: rank out of range", rank,
                                world_size);
  }
  SLUICE_ASSIGN_OR_RETURN(TokenDataset dataset, TokenDataset::Open(options));
  return DataLoader(std::move(dataset), rank, world_size);
}

Status DataLoader::NextBatch(int64_t batch_size, Batch* batch) {
  SLUICE_CHECK_GE(batch_size, 1);
  const std::vector<int64_t> global = sampler_.Take(batch_size * world_size_);
  std::vector<int64_t> mine(static_cast<size_t>(batch_size));
  for (int64_t j = 0; j < batch_size; ++j) {
    mine[static_cast<size_t>(j)] = global[static_cast<size_t>(rank_ + j * world_size_)];
  }
  Status filled = FillBatch(dataset_.train(), mine, seq_len(), batch);
  if (!filled.ok()) {
    return std::move(filled).WithContext(
        fmt::format("reading rank {}'s next training batch (data.train_path)", rank_));
  }
  return OkStatus();
}

Result<Batch> DataLoader::NextBatch(int64_t batch_size) {
  Batch batch;
  SLUICE_RETURN_IF_ERROR(NextBatch(batch_size, &batch));
  return batch;
}

nlohmann::json DataLoader::SaveState() const {
  const SamplerState& s = sampler_.state();
  return nlohmann::json{{"version", kStateVersion},
                        {"seed", s.seed},
                        {"epoch", s.epoch},
                        {"position", s.position},
                        {"train_tokens", dataset_.train().size()},
                        {"seq_len", seq_len()}};
}

Status DataLoader::RestoreState(const nlohmann::json& state) {
  if (!state.is_object()) {
    return InvalidArgumentError("data sampler state must be a JSON object, got {}", state.dump());
  }
  SLUICE_ASSIGN_OR_RETURN(int64_t version, GetInt(state, "version"));
  if (version != kStateVersion) {
    return InvalidArgumentError("data sampler state version {} is not supported (expected {})",
                                version, kStateVersion);
  }
  const auto seed_it = state.find("seed");
  if (seed_it == state.end() || !seed_it->is_number_unsigned()) {
    return InvalidArgumentError(
        "data sampler state: key 'seed' is missing or not an unsigned "
        "integer in {}",
        state.dump());
  }
  SLUICE_ASSIGN_OR_RETURN(int64_t epoch, GetInt(state, "epoch"));
  SLUICE_ASSIGN_OR_RETURN(int64_t position, GetInt(state, "position"));
  SLUICE_ASSIGN_OR_RETURN(int64_t train_tokens, GetInt(state, "train_tokens"));
  SLUICE_ASSIGN_OR_RETURN(int64_t saved_seq_len, GetInt(state, "seq_len"));
  if (train_tokens != dataset_.train().size() || saved_seq_len != seq_len()) {
    return FailedPreconditionError(
        "data sampler state was saved for {} training tokens at seq_len {}, but '{}' now gives {} "
        "training tokens at seq_len {}; the data file, data.val_fraction or model.seq_len changed "
        "since the checkpoint",
        train_tokens, saved_seq_len, dataset_.train().file()->path(), dataset_.train().size(),
        seq_len());
  }
  return sampler_.Restore(SamplerState{seed_it->get<uint64_t>(), epoch, position});
}

Result<ValidationIterator> DataLoader::Validation(int64_t batch_size, int64_t num_batches) const {
  if (!dataset_.has_val()) {
    return FailedPreconditionError(
        "no validation data: set data.val_path or a data.val_fraction above 0");
  }
  if (batch_size < 1 || num_batches < 1) {
    return InvalidArgumentError(
        "validation needs at least one batch of one row, got {} batches of {} (data.eval_batches)",
        num_batches, batch_size);
  }
  return ValidationIterator(dataset_.val(), seq_len(), batch_size, num_batches, rank_, world_size_);
}

}  // namespace sluice::data
