// Which settings of a config record (ConfigRecordJson: {"settings": {key: {"value": ...}}}) decide
// where a training run goes from a checkpoint on, and how a resumed run's differ from those the
// checkpoint recorded.
//
// Deciding: the global batch (train_batch_size), gradient_clipping, optimizer.*, scheduler.*,
// fp16.*, bf16.*, the model (model.* but init_from and init_std, which only the first step of a
// fresh run reads), the training data (data.train_path, data.format, data.val_fraction, which
// sets the training split, data.seed) and device.cpu_gemm (the GEMM's rounding). Not deciding:
// the world size and how the batch splits over it (train_micro_batch_size_per_gpu,
// gradient_accumulation_steps: resharding is a feature), the ZeRO stage, offload, buckets, aio,
// the device's capacity and threads, run.steps (extending a run), logging, evaluation,
// checkpointing, and run.seed (which only initializes the weights of a fresh run).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::checkpoint {

bool DecidesTrajectory(std::string_view setting);

struct SettingChange {
  std::string key;
  nlohmann::ordered_json saved;  // the checkpoint's value
  nlohmann::ordered_json now;
};

// The deciding settings whose values differ between the two records, in the order of `now`'s
// settings. A setting one of the records lacks (another Sluice version) is not compared.
std::vector<SettingChange> TrajectoryChanges(const nlohmann::ordered_json& saved_record,
                                             const nlohmann::ordered_json& now_record);

// "optimizer.params.lr 0.003 -> 0.001, data.seed 7 -> 8"
std::string DescribeChanges(const std::vector<SettingChange>& changes);

}  // namespace sluice::checkpoint
