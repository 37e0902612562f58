#include "engine/train/train_world.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine/parallel/process_grid.h"
#include "engine/zero/word_gather.h"
#include "runtime/comm/comm_factory.h"

namespace sluice::train {

Result<std::unique_ptr<Comm>> CreateTrainWorld(const Config& config) {
  Result<std::unique_ptr<Comm>> world =
      CreateWorldComm({.backend = CommBackend::kMpi, .timeout_seconds = config.run.comm_timeout_s});
  if (!world.ok()) {
    return Status(world.status()).WithContext("joining the ranks of the run (MPI world)");
  }
  return world;
}

Status FitBatchToWorld(Config& config, int world_size) {
  if (config.world_size == world_size) return OkStatus();
  SLUICE_ASSIGN_OR_RETURN(
      parallel::ProcessGrid grid,
      parallel::ProcessGrid::Create(world_size, config.parallel.tensor, config.parallel.pipeline));
  const int data_size = grid.shape().data;
  const BatchConfig& batch = config.batch;
  const ValueSource tbs_source = config.values.entry("train_batch_size").source;
  const bool tbs_given = tbs_source != ValueSource::kDefault && tbs_source != ValueSource::kDerived;
  if (tbs_given) {
    return InvalidArgumentError(
        "train_batch_size = {} was resolved for {} rank(s), but this run has {}: the micro batch "
        "{} and gradient_accumulation_steps {} came from the wrong world size. Give "
        "train_micro_batch_size_per_gpu and gradient_accumulation_steps instead (the global "
        "batch is their product times the ranks)",
        batch.train_batch_size, config.world_size, world_size, batch.micro_batch_per_gpu,
        batch.gradient_accumulation_steps);
  }
  const int64_t global =
      batch.micro_batch_per_gpu * batch.gradient_accumulation_steps * int64_t{data_size};
  config.batch.train_batch_size = global;
  config.values.Resolve(
      "train_batch_size", global,
      fmt::format("micro batch * accumulation * data-parallel size {}", data_size));
  config.world_size = world_size;
  config.dp_world_size = data_size;
  return OkStatus();
}

Status AgreeAcrossRanks(Comm& world, const Status& mine, std::string_view phase) {
  const uint64_t word = static_cast<uint64_t>(mine.code());
  Result<std::vector<uint64_t>> words = zero::AllGatherWords(world, std::span(&word, 1));
  if (!mine.ok()) return mine;
  if (!words.ok()) {
    return Status(words.status())
        .WithContext(fmt::format("checking that every rank got past {}", phase));
  }
  std::vector<int> failed;
  for (size_t r = 0; r < words->size(); ++r) {
    if ((*words)[r] != static_cast<uint64_t>(StatusCode::kOk))
      failed.push_back(static_cast<int>(r));
  }
  if (failed.empty()) return OkStatus();
  return FailedPreconditionError("rank(s) {} failed {} (their error is printed above); stopping",
                                 FormatRankList(failed), phase);
}

Result<std::vector<uint64_t>> MaxAcrossRanks(Comm& world, std::span<const uint64_t> mine) {
  SLUICE_ASSIGN_OR_RETURN(std::vector<uint64_t> all, zero::AllGatherWords(world, mine));
  std::vector<uint64_t> max(mine.begin(), mine.end());
  for (size_t i = 0; i < all.size(); ++i) {
    uint64_t& m = max[i % mine.size()];
    m = std::max(m, all[i]);
  }
  return max;
}

}  // namespace sluice::train
