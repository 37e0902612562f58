#include "engine/checkpoint/training_state_checks.h"

#include <fmt/format.h>

#include <string_view>

#include "engine/data/window_sampler.h"

namespace sluice::checkpoint {
namespace {

// The schedule's starting iteration in the checkpoint's config record; -1 when unset.
int64_t ScheduleStart(const Manifest& manifest) {
  const nlohmann::ordered_json& config = manifest.config;
  auto settings = config.find("settings");
  if (settings == config.end() || !settings->is_object()) return -1;
  auto setting = settings->find("scheduler.params.last_batch_iteration");
  if (setting == settings->end() || !setting->is_object()) return -1;
  auto value = setting->find("value");
  if (value == setting->end() || !value->is_number_integer()) return -1;
  return value->get<int64_t>();
}

}  // namespace

Status CheckRecordedProgress(const RecordedProgress& p, const Manifest& manifest,
                             const std::filesystem::path& step_dir) {
  const std::string path = (step_dir / kManifestFileName).string();
  auto error = [&path](std::string_view field, std::string problem) {
    return DataLossError(
        "{}: field '{}' {}: the manifest was changed or is corrupt; load an earlier checkpoint",
        path, field, problem);
  };
  if (p.step != manifest.step) {
    return error("states.step", fmt::format("is {} but field 'step' is {}", p.step, manifest.step));
  }
  if (p.optimizer_step < 0 || p.optimizer_step > p.step) {
    return error("states.optimizer.step",
                 fmt::format("is {}, outside [0, {}] (the applied steps of {} steps)",
                             p.optimizer_step, p.step, p.step));
  }
  const int64_t start = ScheduleStart(manifest);
  if (p.lr_last_batch_iteration != start + p.optimizer_step) {
    return error(
        "states.lr_schedule.last_batch_iteration",
        fmt::format("is {} but the schedule advances once per applied step: {} from "
                    "its start {} (scheduler.params.last_batch_iteration) after {} "
                    "applied steps (states.optimizer.step)",
                    p.lr_last_batch_iteration, start + p.optimizer_step, start, p.optimizer_step));
  }
  if (p.total_tokens < 0) {
    return error("states.total_tokens", fmt::format("is {}", p.total_tokens));
  }

  // The data loader's position and the tokens trained on.
  const nlohmann::json& loader = p.data_loader;
  auto get = [&loader, &error](const char* key) -> Result<int64_t> {
    auto it = loader.find(key);
    if (it == loader.end() || !it->is_number_integer()) {
      return error(fmt::format("states.data_loader.{}", key), "is missing or not an integer");
    }
    return it->get<int64_t>();
  };
  auto seed = loader.find("seed");
  if (seed == loader.end() || !seed->is_number_unsigned()) {
    return error("states.data_loader.seed", "is missing or not an unsigned integer");
  }
  SLUICE_ASSIGN_OR_RETURN(int64_t epoch, get("epoch"));
  SLUICE_ASSIGN_OR_RETURN(int64_t position, get("position"));
  SLUICE_ASSIGN_OR_RETURN(int64_t train_tokens, get("train_tokens"));
  SLUICE_ASSIGN_OR_RETURN(int64_t seq_len, get("seq_len"));
  if (seq_len < 1) return error("states.data_loader.seq_len", fmt::format("is {}", seq_len));
  if (train_tokens < seq_len + 1) {
    return error(
        "states.data_loader.train_tokens",
        fmt::format("is {}: not one window of seq_len {} + 1 tokens", train_tokens, seq_len));
  }
  if (epoch < 0) return error("states.data_loader.epoch", fmt::format("is {}", epoch));
  const data::WindowSampler sampler(train_tokens, seq_len, seed->get<uint64_t>());
  // Windows drawn in the epochs before `epoch`; more than total_tokens accounts for is already
  // a mismatch, which bounds the loop.
  const int64_t windows_trained = p.total_tokens / seq_len;
  int64_t before = 0;
  for (int64_t e = 0; e < epoch && before <= windows_trained; ++e) {
    before += sampler.WindowsInEpoch(e);
  }
  const int64_t in_epoch = sampler.WindowsInEpoch(epoch);
  if (position < 0 || position > in_epoch) {
    return error("states.data_loader.position",
                 fmt::format("is {}, outside epoch {}'s {} windows", position, epoch, in_epoch));
  }
  if (before > windows_trained || p.total_tokens % seq_len != 0 ||
      before + position != windows_trained) {
    return error("states.total_tokens",
                 fmt::format("is {} but the data loader drew {} windows of {} tokens ({} in the "
                             "epochs before epoch {}, then {} in it: "
                             "states.data_loader.epoch and .position)",
                             p.total_tokens,
                             before > windows_trained ? fmt::format("more than {}", before)
                                                      : fmt::format("{}", before + position),
                             seq_len, before, epoch, position));
  }
  return OkStatus();
}

}  // namespace sluice::checkpoint
