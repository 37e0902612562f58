#include "engine/train/checkpointing.h"

#include <fmt/format.h>

#include <memory>
#include <system_error>
#include <utility>
#include <vector>

#include "engine/checkpoint/checkpoint_dir.h"
#include "engine/checkpoint/checkpoint_reader.h"
#include "engine/checkpoint/checkpoint_writer.h"
#include "engine/checkpoint/comm_agreement.h"
#include "engine/checkpoint/manifest.h"
#include "engine/checkpoint/safetensors_file.h"
#include "engine/checkpoint/safetensors_loader.h"
#include "runtime/logging.h"

namespace sluice::train {
namespace {

namespace fs = std::filesystem;
using checkpoint::StateKind;

constexpr int kStatesVersion = 1;

// Every parameter of the model must be in the checkpoint as an fp32 tensor of its shape: a
// checkpoint of another model must not load half-way.
Status CheckTensorsMatch(const checkpoint::CheckpointReader& reader,
                         const model::ParameterRegistry& registry, bool with_moments) {
  int64_t expected = 0;
  for (const model::ParameterInfo& p : registry.parameters()) {
    if (p.is_alias()) continue;
    ++expected;
    for (StateKind kind : checkpoint::kAllStateKinds) {
      if (!with_moments && kind != StateKind::kMasterWeights) continue;
      const checkpoint::ManifestTensor* t = reader.Find(kind, p.name);
      if (t == nullptr) {
        return InvalidArgumentError(
            "checkpoint {} has no {} tensor '{}' that the model needs: it was saved from "
            "another model (compare its manifest.json config with this run's model section)",
            reader.dir().string(), checkpoint::StateKindName(kind), p.name);
      }
      if (!(t->shape == p.shape) || t->dtype != DType::kF32) {
        return InvalidArgumentError(
            "checkpoint {}: tensor '{}/{}' is {} {} but the model's parameter is f32 {}: it was "
            "saved from another model",
            reader.dir().string(), checkpoint::StateKindName(kind), p.name, DTypeName(t->dtype),
            t->shape.ToString(), p.shape.ToString());
      }
    }
  }
  const int64_t stored = static_cast<int64_t>(reader.Tensors(StateKind::kMasterWeights).size());
  if (stored != expected) {
    return InvalidArgumentError(
        "checkpoint {} holds {} master weight tensors but the model has {} parameters: it was "
        "saved from another model",
        reader.dir().string(), stored, expected);
  }
  return OkStatus();
}

zero::ZeroRangeReader CheckpointRangeReader(const checkpoint::CheckpointReader& reader,
                                            const model::ParameterRegistry& registry,
                                            StateKind kind) {
  return [&reader, &registry, kind](int param, int64_t begin, int64_t end, float* dst) {
    return reader.ReadRange(kind, registry.parameter(param).name, begin, end, dst);
  };
}

// `prefix` names the enclosing object in errors ("states.", "states.optimizer.").
template <typename Json>
Result<int64_t> GetInt(const Json& states, const char* key, const fs::path& dir,
                       const char* prefix = "states.") {
  auto it = states.find(key);
  if (it == states.end() || !it->is_number_integer()) {
    return DataLossError("checkpoint {}: manifest field {}{} is missing or not an integer",
                         dir.string(), prefix, key);
  }
  return it->template get<int64_t>();
}

Result<nlohmann::json> GetObject(const nlohmann::ordered_json& states, const char* key,
                                 const fs::path& dir) {
  auto it = states.find(key);
  if (it == states.end() || !it->is_object()) {
    return DataLossError("checkpoint {}: manifest field states.{} is missing or not an object",
                         dir.string(), key);
  }
  // The loaders take plain json; the dump round trip keeps doubles exact.
  return nlohmann::json::parse(it->dump());
}

// A Sluice checkpoint (a step, checkpoints or run directory) rather than safetensors.
bool LooksLikeSluiceCheckpoint(const fs::path& path) {
  std::error_code error;
  if (!fs::is_directory(path, error)) return false;
  return fs::exists(path / checkpoint::kManifestFileName, error) ||
         fs::exists(path / checkpoint::kLatestFileName, error) ||
         fs::exists(path / "checkpoints" / checkpoint::kLatestFileName, error);
}

}  // namespace

fs::path CheckpointsDirOf(const Config& config) {
  if (config.checkpoint.dir.has_value()) return fs::path(*config.checkpoint.dir);
  return fs::path(config.run.dir) / "checkpoints";
}

Result<fs::path> SaveTrainingCheckpoint(const Config& config, const zero::ZeroEngine& engine,
                                        const model::ParameterRegistry& registry, Comm& world,
                                        const TrainingProgress& progress) {
  std::vector<float> master;
  std::vector<float> exp_avg;
  std::vector<float> exp_avg_sq;
  int64_t optimizer_step = 0;
  // Every rank reaches the collectives below whatever happened here: SaveCheckpoint's agreement
  // tells all of them about a local failure.
  Status exported = engine.ExportState(&master, &exp_avg, &exp_avg_sq, &optimizer_step);
  std::vector<checkpoint::ShardTensor> tensors;
  if (exported.ok()) {
    const std::vector<zero::ZeroStateRange> ranges = engine.SavedStateRanges();
    const std::pair<StateKind, const std::vector<float>*> kinds[] = {
        {StateKind::kMasterWeights, &master},
        {StateKind::kExpAvg, &exp_avg},
        {StateKind::kExpAvgSq, &exp_avg_sq}};
    for (const auto& [kind, values] : kinds) {
      for (const zero::ZeroStateRange& r : ranges) {
        const model::ParameterInfo& p = registry.parameter(r.param);
        tensors.push_back({.kind = kind,
                           .name = p.name,
                           .dtype = DType::kF32,
                           .shape = p.shape,
                           .begin = r.begin,
                           .end = r.end,
                           .data = values->data() + r.shard_offset});
      }
    }
  }

  checkpoint::SaveRequest request;
  request.checkpoints_dir = CheckpointsDirOf(config);
  request.step = progress.step;
  request.rank = world.rank();
  request.world = world.size();
  request.zero_stage = engine.options().stage;
  SLUICE_ASSIGN_OR_RETURN(request.attempt_tag, checkpoint::AgreeOnAttemptTag(world));
  request.keep_last = static_cast<int>(config.checkpoint.keep_last);
  request.config = ConfigRecordJson(config);
  request.states = {
      {"version", kStatesVersion},
      {"step", progress.step},
      {"total_tokens", progress.total_tokens},
      {"optimizer", {{"step", optimizer_step}}},
      {"lr_schedule", {{"last_batch_iteration", progress.lr_last_batch_iteration}}},
      {"loss_scaler", progress.loss_scaler},
      {"data_loader", progress.data_loader},
  };
  const checkpoint::AgreeFn agree = checkpoint::CommAgreeFn(world);
  if (!exported.ok()) {
    // Abandon the save on every rank: SaveCheckpoint's first agreement comes after rank 0 made
    // the staging directory, so say no there.
    (void)agree(false);
    return std::move(exported).WithContext(fmt::format("saving checkpoint step {}", progress.step));
  }
  Result<fs::path> saved = checkpoint::SaveCheckpoint(request, tensors, agree);
  if (!saved.ok()) {
    return Status(saved.status())
        .WithContext(fmt::format("saving checkpoint step {} into {}", progress.step,
                                 request.checkpoints_dir.string()));
  }
  if (world.rank() == 0) {
    SLUICE_LOG(kInfo, "train", "checkpoint step {} saved to {}", progress.step, saved->string());
  }
  return saved;
}

Result<fs::path> ResolveResumeDir(const Config& config, const std::string& resume) {
  if (resume.empty() || resume == "latest") {
    const fs::path dir = CheckpointsDirOf(config);
    SLUICE_ASSIGN_OR_RETURN(std::optional<int64_t> step, checkpoint::ReadLatestStep(dir));
    if (!step.has_value()) {
      return NotFoundError(
          "--resume latest: {} has no committed checkpoint (no `latest` file); set "
          "checkpoint.save_interval to save some, or name a checkpoint directory",
          dir.string());
    }
    return dir / checkpoint::StepDirName(*step);
  }
  return checkpoint::ResolveCheckpointDir(resume);
}

Result<TrainingProgress> LoadTrainingCheckpoint(const fs::path& step_dir, zero::ZeroEngine& engine,
                                                const model::ParameterRegistry& registry) {
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<checkpoint::CheckpointReader> reader,
                          checkpoint::CheckpointReader::Open(step_dir));
  SLUICE_RETURN_IF_ERROR(CheckTensorsMatch(*reader, registry, /*with_moments=*/true));
  const nlohmann::ordered_json& states = reader->manifest().states;
  TrainingProgress progress;
  SLUICE_ASSIGN_OR_RETURN(progress.step, GetInt(states, "step", step_dir));
  SLUICE_ASSIGN_OR_RETURN(progress.total_tokens, GetInt(states, "total_tokens", step_dir));
  SLUICE_ASSIGN_OR_RETURN(progress.data_loader, GetObject(states, "data_loader", step_dir));
  SLUICE_ASSIGN_OR_RETURN(progress.loss_scaler, GetObject(states, "loss_scaler", step_dir));
  SLUICE_ASSIGN_OR_RETURN(nlohmann::json schedule, GetObject(states, "lr_schedule", step_dir));
  SLUICE_ASSIGN_OR_RETURN(
      progress.lr_last_batch_iteration,
      GetInt(schedule, "last_batch_iteration", step_dir, "states.lr_schedule."));
  SLUICE_ASSIGN_OR_RETURN(nlohmann::json optimizer, GetObject(states, "optimizer", step_dir));
  SLUICE_ASSIGN_OR_RETURN(int64_t optimizer_step,
                          GetInt(optimizer, "step", step_dir, "states.optimizer."));

  zero::ZeroStateReaders readers;
  readers.master = CheckpointRangeReader(*reader, registry, StateKind::kMasterWeights);
  readers.exp_avg = CheckpointRangeReader(*reader, registry, StateKind::kExpAvg);
  readers.exp_avg_sq = CheckpointRangeReader(*reader, registry, StateKind::kExpAvgSq);
  readers.optimizer_step = optimizer_step;
  SLUICE_RETURN_IF_ERROR(engine.ImportState(readers));
  return progress;
}

Status LoadInitialWeights(const fs::path& path, zero::ZeroEngine& engine,
                          const model::ParameterRegistry& registry) {
  zero::ZeroStateReaders readers;
  std::unique_ptr<checkpoint::CheckpointReader> reader;
  std::unique_ptr<checkpoint::SafetensorsSource> source;
  if (LooksLikeSluiceCheckpoint(path)) {
    SLUICE_ASSIGN_OR_RETURN(fs::path step_dir, checkpoint::ResolveCheckpointDir(path));
    SLUICE_ASSIGN_OR_RETURN(reader, checkpoint::CheckpointReader::Open(step_dir));
    SLUICE_RETURN_IF_ERROR(CheckTensorsMatch(*reader, registry, /*with_moments=*/false));
    readers.master = CheckpointRangeReader(*reader, registry, StateKind::kMasterWeights);
  } else {
    SLUICE_ASSIGN_OR_RETURN(source, checkpoint::SafetensorsSource::Open(path));
    const checkpoint::SafetensorsSource* src = source.get();
    readers.master = [src, &registry](int param, int64_t begin, int64_t end, float* dst) {
      return checkpoint::ReadParameterRange(*src, registry.parameter(param), begin, end, dst);
    };
  }
  return engine.ImportState(readers);
}

}  // namespace sluice::train
