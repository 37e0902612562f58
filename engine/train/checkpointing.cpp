#include "engine/train/checkpointing.h"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <span>
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
#include "engine/checkpoint/shard_stream_writer.h"
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

// This rank's tensors in file order: the master weights of every saved range, then exp_avg of
// each, then exp_avg_sq (the order the manifest lists them in). Tensor k x ranges.size() + r of
// the list is kind k of range r.
std::vector<checkpoint::ShardTensorInfo> StateTensors(std::span<const zero::ZeroStateRange> ranges,
                                                      const model::ParameterRegistry& registry) {
  std::vector<checkpoint::ShardTensorInfo> tensors;
  tensors.reserve(3 * ranges.size());
  for (StateKind kind : checkpoint::kAllStateKinds) {
    for (const zero::ZeroStateRange& r : ranges) {
      const model::ParameterInfo& p = registry.parameter(r.param);
      tensors.push_back({.kind = kind,
                         .name = p.name,
                         .dtype = DType::kF32,
                         .shape = p.shape,
                         .begin = r.begin,
                         .end = r.end});
    }
  }
  return tensors;
}

// Hands every range's state to `out` in one pass of the optimizer over the part of the shard the
// ranges span (in shard order; the padding between them is read and skipped): on NVMe, tile by
// tile through the staging ring, so the memory is a few tiles, whatever the shard's size.
Status StreamRankState(const zero::ZeroOptimizer& optimizer,
                       std::span<const zero::ZeroStateRange> ranges,
                       checkpoint::RankStreamWriter& out) {
  if (ranges.empty()) return OkStatus();
  auto shard_end = [](const zero::ZeroStateRange& r) { return r.shard_offset + (r.end - r.begin); };
  for (size_t r = 1; r < ranges.size(); ++r) {
    SLUICE_CHECK_LE(shard_end(ranges[r - 1]), ranges[r].shard_offset) << "ranges out of order";
  }
  const size_t count = ranges.size();
  size_t next = 0;  // ranges before it are complete
  auto sink = [&](int64_t at, int64_t n, const float* master, const float* exp_avg,
                  const float* exp_avg_sq) -> Status {
    const int64_t piece_end = at + n;
    for (size_t r = next; r < count && ranges[r].shard_offset < piece_end; ++r) {
      const int64_t from = std::max(at, ranges[r].shard_offset);
      const int64_t to = std::min(piece_end, shard_end(ranges[r]));
      if (from < to) {
        const int64_t skip = from - at;
        SLUICE_RETURN_IF_ERROR(out.Append(r, master + skip, to - from));
        SLUICE_RETURN_IF_ERROR(out.Append(count + r, exp_avg + skip, to - from));
        SLUICE_RETURN_IF_ERROR(out.Append(2 * count + r, exp_avg_sq + skip, to - from));
      }
      if (shard_end(ranges[r]) <= piece_end) next = r + 1;
    }
    return OkStatus();
  };
  const int64_t begin = ranges.front().shard_offset;
  return optimizer.StreamState(begin, shard_end(ranges.back()) - begin, sink);
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
  const std::vector<zero::ZeroStateRange> ranges = engine.SavedStateRanges();
  const std::vector<checkpoint::ShardTensorInfo> tensors = StateTensors(ranges, registry);
  const int64_t optimizer_step = engine.optimizer().step();

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
  // A failure here (a broken engine, a corrupt NVMe tile, a full disk) abandons the save on
  // every rank.
  auto write_files = [&](const fs::path& staging) -> Status {
    SLUICE_RETURN_IF_ERROR(engine.CheckUsable());
    SLUICE_ASSIGN_OR_RETURN(
        checkpoint::RankStreamWriter out,
        checkpoint::RankStreamWriter::Create(staging, request.rank, request.world, tensors,
                                             request.checksum_block_bytes));
    SLUICE_RETURN_IF_ERROR(StreamRankState(engine.optimizer(), ranges, out));
    return out.Finish();
  };
  Result<fs::path> saved =
      checkpoint::SaveCheckpointStreamed(request, write_files, checkpoint::CommAgreeFn(world));
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
