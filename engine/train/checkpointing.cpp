#include "engine/train/checkpointing.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/checkpoint/aio_shard_sink.h"
#include "engine/checkpoint/checkpoint_dir.h"
#include "engine/checkpoint/checkpoint_reader.h"
#include "engine/checkpoint/checkpoint_writer.h"
#include "engine/checkpoint/comm_agreement.h"
#include "engine/checkpoint/convert.h"
#include "engine/checkpoint/file_fingerprint.h"
#include "engine/checkpoint/hf_layout.h"
#include "engine/checkpoint/manifest.h"
#include "engine/checkpoint/safetensors_file.h"
#include "engine/checkpoint/safetensors_loader.h"
#include "engine/checkpoint/shard_stream_writer.h"
#include "engine/checkpoint/training_state_checks.h"
#include "engine/checkpoint/trajectory_config.h"
#include "engine/parallel/global_runs.h"
#include "engine/zero/word_gather.h"
#include "runtime/json_text.h"
#include "runtime/logging.h"

namespace sluice::train {
namespace {

namespace fs = std::filesystem;
using checkpoint::StateKind;

// 2 added "data" (the training data's path and fingerprint); 1 is still read.
constexpr int kStatesVersion = 2;

// The state tensors an optimizer keeps, in file order: the master weights, exp_avg and (Adam)
// exp_avg_sq.
std::span<const StateKind> StateKindsOf(OptimizerType type) {
  return std::span<const StateKind>(checkpoint::kAllStateKinds)
      .first(static_cast<size_t>(1 + OptimizerMoments(type)));
}

// states.optimizer.type: the optimizer whose state the checkpoint holds. Checkpoints from before
// Lion have none: they are Adam's.
std::string_view SavedOptimizerType(const nlohmann::json& optimizer) {
  auto it = optimizer.find("type");
  if (it == optimizer.end() || !it->is_string()) return "Adam";
  return it->get_ref<const std::string&>();
}

// Adam's, AdamW's and Lamb's states are alike (exp_avg and exp_avg_sq, the same averages; their
// difference is a trajectory setting the config check names); Lion's has no exp_avg_sq and its
// exp_avg means something else, so no resume may cross between them, --allow-config-change or not.
Status CheckSameOptimizerState(std::string_view saved, OptimizerType now, const fs::path& dir) {
  const bool saved_lion = saved == OptimizerTypeName(OptimizerType::kLion);
  if (saved_lion == (now == OptimizerType::kLion)) return OkStatus();
  return FailedPreconditionError(
      "checkpoint {} holds the optimizer state of optimizer.type {} ({}) but this run's "
      "optimizer.type is {}: the two optimizers keep different state, so it cannot be resumed "
      "(not even with --allow-config-change). Resume with optimizer.type {}, or start the new "
      "optimizer from the checkpoint's weights alone with model.init_from: {}",
      dir.string(), saved, saved_lion ? "exp_avg only" : "exp_avg and exp_avg_sq",
      OptimizerTypeName(now), saved, dir.string());
}

// Every parameter of the model must be in the checkpoint as an fp32 tensor of its shape: a
// checkpoint of another model must not load half-way. `kinds`: the state tensors wanted.
Status CheckTensorsMatch(const checkpoint::CheckpointReader& reader,
                         const model::ParameterRegistry& registry, std::span<const StateKind> kinds,
                         int64_t model_tensors) {
  int64_t expected = 0;
  for (const model::ParameterInfo& p : registry.parameters()) {
    if (p.is_alias()) continue;
    ++expected;
    for (StateKind kind : kinds) {
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
  if (model_tensors > 0) expected = model_tensors;  // the other pipeline stages' too
  const int64_t stored = static_cast<int64_t>(reader.Tensors(StateKind::kMasterWeights).size());
  if (stored != expected) {
    return InvalidArgumentError(
        "checkpoint {} holds {} master weight tensors but the model has {} parameters: it was "
        "saved from another model",
        reader.dir().string(), stored, expected);
  }
  return OkStatus();
}

// A reader of this tensor rank's elements of its parameters (`registry`: the model's) over
// `global`, a reader of the whole tensors' (global_runs.h). Without tensor parallelism the two
// are the same. Runs spread over a tensor (a row-parallel weight's: one per row) are read as
// the one span covering them, so a source that verifies or transposes whole blocks does so once.
zero::ZeroRangeReader ThroughGlobalRuns(const model::ParameterRegistry& registry,
                                        zero::ZeroRangeReader global) {
  return [&registry, global = std::move(global)](int param, int64_t begin, int64_t end,
                                                 float* dst) -> Status {
    const std::vector<parallel::GlobalRun> runs =
        parallel::GlobalRunsOf(registry.parameter(param).sharding, begin, end);
    if (runs.empty()) return OkStatus();
    if (runs.size() == 1) {
      return global(param, runs[0].global_begin, runs[0].global_begin + runs[0].count, dst);
    }
    const int64_t first = runs.front().global_begin;
    const int64_t last = runs.back().global_begin + runs.back().count;
    std::vector<float> span(static_cast<size_t>(last - first));
    SLUICE_RETURN_IF_ERROR(global(param, first, last, span.data()));
    for (const parallel::GlobalRun& run : runs) {
      std::copy_n(span.data() + (run.global_begin - first), run.count,
                  dst + (run.local_begin - begin));
    }
    return OkStatus();
  };
}

// The whole tensors' elements (wrap it in ThroughGlobalRuns).
zero::ZeroRangeReader CheckpointRangeReader(const checkpoint::CheckpointReader& reader,
                                            const model::ParameterRegistry& registry,
                                            StateKind kind) {
  return [&reader, &registry, kind](int param, int64_t begin, int64_t end, float* dst) {
    return reader.ReadRange(kind, registry.parameter(param).name, begin, end, dst);
  };
}

// Initial weights must be finite: a NaN would only show up as every step being skipped.
zero::ZeroRangeReader FiniteOnly(zero::ZeroRangeReader read,
                                 const model::ParameterRegistry& registry, const fs::path& source) {
  return [read = std::move(read), &registry, source](int param, int64_t begin, int64_t end,
                                                     float* dst) -> Status {
    SLUICE_RETURN_IF_ERROR(read(param, begin, end, dst));
    for (int64_t i = 0; i < end - begin; ++i) {
      if (!std::isfinite(dst[i])) {
        return InvalidArgumentError(
            "{}: tensor '{}' holds {} at element {}: the initial weights must be finite (the "
            "run would skip every step); use another model.init_from",
            source.string(), registry.parameter(param).name, dst[i], begin + i);
      }
    }
    return OkStatus();
  };
}

// The training data's fingerprint, computed once per file version (path, size, mtime, inode).
Result<checkpoint::FileFingerprint> TrainingDataFingerprint(const std::string& path) {
  using Key = std::tuple<std::string, int64_t, int64_t, int64_t, uint64_t>;
  static std::mutex mutex;
  static std::map<Key, checkpoint::FileFingerprint> cache;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return checkpoint::FingerprintFile(path);  // its error
  const Key key{path, static_cast<int64_t>(st.st_size), static_cast<int64_t>(st.st_mtim.tv_sec),
                static_cast<int64_t>(st.st_mtim.tv_nsec), static_cast<uint64_t>(st.st_ino)};
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  SLUICE_ASSIGN_OR_RETURN(checkpoint::FileFingerprint fingerprint,
                          checkpoint::FingerprintFile(path));
  std::lock_guard<std::mutex> lock(mutex);
  cache[key] = fingerprint;
  return fingerprint;
}

// states.data: what the run trains on.
Result<nlohmann::ordered_json> DataState(const Config& config) {
  nlohmann::ordered_json data = nlohmann::ordered_json::object();
  if (!config.data.train_path.has_value()) return data;
  SLUICE_ASSIGN_OR_RETURN(checkpoint::FileFingerprint fingerprint,
                          TrainingDataFingerprint(*config.data.train_path));
  data["train_path"] = ToValidUtf8(*config.data.train_path);  // for the record; JSON is UTF-8
  data["train_fingerprint"] = checkpoint::FingerprintToJson(fingerprint);
  return data;
}

// The trajectory-deciding settings and the training data of the checkpoint against this run's:
// refused naming every difference, or (allowed) logged.
Status CheckSameTrajectory(const checkpoint::Manifest& manifest, const fs::path& dir,
                           const ResumeChecks& checks) {
  const Config& config = *checks.config;
  std::vector<checkpoint::SettingChange> changes =
      checkpoint::TrajectoryChanges(manifest.config, ConfigRecordJson(config));
  auto data = manifest.states.find("data");
  if (data != manifest.states.end() && data->contains("train_fingerprint") &&
      config.data.train_path.has_value()) {
    // The data's content decides, not where it lies.
    std::erase_if(changes, [](const auto& c) { return c.key == "data.train_path"; });
    Result<checkpoint::FileFingerprint> saved =
        checkpoint::FingerprintFromJson(data->at("train_fingerprint"));
    if (!saved.ok()) {
      return DataLossError("checkpoint {}: manifest field states.data.train_fingerprint: {}",
                           dir.string(), saved.status().message());
    }
    SLUICE_ASSIGN_OR_RETURN(checkpoint::FileFingerprint now,
                            TrainingDataFingerprint(*config.data.train_path));
    if (!(now == *saved)) {
      changes.push_back(
          {.key = "training data",
           .saved = fmt::format("{} ({})", data->value("train_path", std::string("?")),
                                saved->ToString()),
           .now = fmt::format("{} ({})", *config.data.train_path, now.ToString())});
    }
  }
  if (changes.empty()) return OkStatus();
  const std::string described = checkpoint::DescribeChanges(changes);
  if (!checks.allow_config_change) {
    return FailedPreconditionError(
        "this run differs from checkpoint {} in what decides the training trajectory: {}; the "
        "continuation would not be the run that was saved. Restore those settings and data, or "
        "pass --allow-config-change to continue with the new ones",
        dir.filename().string(), described);
  }
  if (checks.report) {
    SLUICE_LOG(kWarn, "train",
               "resuming from {} with a changed trajectory (--allow-config-change): {}",
               dir.string(), described);
  }
  return OkStatus();
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

// The ranges a rank saves, as slices of the whole tensors: each cut into runs consecutive in the
// global tensor, `begin` and `end` elements of it (`shard_offset` stays this rank's). A
// checkpoint holds global slices, so it resumes at any tensor-parallel size.
std::vector<zero::ZeroStateRange> GlobalStateRanges(std::span<const zero::ZeroStateRange> ranges,
                                                    const model::ParameterRegistry& registry) {
  std::vector<zero::ZeroStateRange> global;
  global.reserve(ranges.size());
  for (const zero::ZeroStateRange& r : ranges) {
    for (const parallel::GlobalRun& run :
         parallel::GlobalRunsOf(registry.parameter(r.param).sharding, r.begin, r.end)) {
      global.push_back({.param = r.param,
                        .begin = run.global_begin,
                        .end = run.global_begin + run.count,
                        .shard_offset = r.shard_offset + (run.local_begin - r.begin)});
    }
  }
  return global;
}

// This rank's tensors in file order: the master weights of every saved range, then exp_avg of
// each, then (Adam) exp_avg_sq (the order the manifest lists them in). Tensor k x ranges.size() +
// r of the list is kind k of range r. `ranges` are global slices, `global` the whole model's
// registry.
std::vector<checkpoint::ShardTensorInfo> StateTensors(std::span<const zero::ZeroStateRange> ranges,
                                                      const model::ParameterRegistry& global,
                                                      std::span<const StateKind> kinds) {
  std::vector<checkpoint::ShardTensorInfo> tensors;
  tensors.reserve(kinds.size() * ranges.size());
  for (StateKind kind : kinds) {
    for (const zero::ZeroStateRange& r : ranges) {
      const model::ParameterInfo& p = global.parameter(r.param);
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
        // Lion's stream has no exp_avg_sq, and its checkpoint no such tensors.
        if (exp_avg_sq != nullptr) {
          SLUICE_RETURN_IF_ERROR(out.Append(2 * count + r, exp_avg_sq + skip, to - from));
        }
      }
      if (shard_end(ranges[r]) <= piece_end) next = r + 1;
    }
    return OkStatus();
  };
  const int64_t begin = ranges.front().shard_offset;
  return optimizer.StreamState(begin, shard_end(ranges.back()) - begin, sink);
}

// While rank 0 writes the 16-bit model, the other ranks wait in one collective for its result:
// longer than run.comm_timeout allows for a large model. The wait is allowed the time rank 0
// takes to read the fp32 master weights and write the 16-bit copy at this rate (a slow network
// file system), on top of the timeout.
constexpr double kSlowestSaveBytesPerSecond = 32.0 * (1 << 20);

// Raises `comm`'s timeout for its lifetime.
class ScopedLongerTimeout {
 public:
  ScopedLongerTimeout(Comm& comm, double extra_seconds)
      : comm_(comm), saved_(comm.timeout_seconds()) {
    comm_.SetTimeout(std::min(saved_ + extra_seconds, kMaxCommTimeoutSeconds));
  }
  ~ScopedLongerTimeout() { comm_.SetTimeout(saved_); }
  ScopedLongerTimeout(const ScopedLongerTimeout&) = delete;
  ScopedLongerTimeout& operator=(const ScopedLongerTimeout&) = delete;

 private:
  Comm& comm_;
  double saved_;
};

// Rank 0's part of SaveConsolidated16BitModel: ConvertSummary on success (for the log).
Result<checkpoint::ConvertSummary> Write16BitModelFiles(const fs::path& step_dir, DType dtype) {
  checkpoint::ConvertOptions options;
  options.dtype = dtype;
  Result<checkpoint::ConvertSummary> summary =
      checkpoint::ConvertCheckpointToHfFolder(step_dir, step_dir, options);
  if (summary.ok()) return summary;
  // A half set (some shards, no config.json) must not look like a model.
  Status removed = checkpoint::RemoveHfModelFiles(step_dir, /*with_config=*/true);
  if (!removed.ok()) {
    SLUICE_LOG(kWarn, "train", "removing the incomplete 16-bit model from {}: {}",
               step_dir.string(), removed.ToString());
  }
  return summary.status();
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
  const std::vector<zero::ZeroStateRange> ranges =
      GlobalStateRanges(engine.SavedStateRanges(), registry);
  const OptimizerType optimizer_type = engine.options().optimizer.type;
  const std::vector<checkpoint::ShardTensorInfo> tensors =
      StateTensors(ranges, registry.GlobalRegistry(), StateKindsOf(optimizer_type));
  const int64_t optimizer_step = engine.optimizer().step();

  checkpoint::SaveRequest request;
  request.checkpoints_dir = CheckpointsDirOf(config);
  request.step = progress.step;
  request.rank = world.rank();
  request.world = world.size();
  request.zero_stage = engine.options().stage;
  SLUICE_ASSIGN_OR_RETURN(request.attempt_tag, checkpoint::AgreeOnAttemptTag(world));
  request.keep_last = static_cast<int>(config.checkpoint.keep_last);
  // The rank's one I/O engine (made by the first save when nothing else is on NVMe) writes the
  // shard files, its staging counted with the NVMe tiers'.
  request.io = checkpoint::AioShardFileIo(engine.tiers());
  request.config = ConfigRecordJson(config);
  // Only rank 0's states are recorded.
  Result<nlohmann::ordered_json> data = nlohmann::ordered_json::object();
  if (world.rank() == 0) data = DataState(config);
  request.states = {
      {"version", kStatesVersion},
      {"step", progress.step},
      {"total_tokens", progress.total_tokens},
      {"optimizer",
       {{"step", optimizer_step}, {"type", std::string(OptimizerTypeName(optimizer_type))}}},
      {"lr_schedule", {{"last_batch_iteration", progress.lr_last_batch_iteration}}},
      {"loss_scaler", progress.loss_scaler},
      {"data_loader", progress.data_loader},
      {"data", data.ok() ? *data : nlohmann::ordered_json::object()},
  };
  // A failure here (a broken engine, a corrupt NVMe tile, a full disk, the data file gone)
  // abandons the save on every rank.
  auto write_files = [&](const fs::path& staging) -> Status {
    if (!data.ok()) return Status(data.status()).WithContext("fingerprinting the training data");
    SLUICE_RETURN_IF_ERROR(engine.CheckUsable());
    SLUICE_ASSIGN_OR_RETURN(
        checkpoint::RankStreamWriter out,
        checkpoint::RankStreamWriter::Create(staging, request.rank, request.world, tensors,
                                             request.checksum_block_bytes, request.io));
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
  if (config.zero.stage3_gather_16bit_weights_on_model_save) {
    SLUICE_RETURN_IF_ERROR(SaveConsolidated16BitModel(config, registry, *saved, world));
  }
  return saved;
}

DType Consolidated16BitDType(const Config& config) {
  return config.model.dtype == DType::kF16 ? DType::kF16 : DType::kBF16;
}

Status SaveConsolidated16BitModel(const Config& config, const model::ParameterRegistry& registry,
                                  const fs::path& step_dir, Comm& world) {
  const DType dtype = Consolidated16BitDType(config);
  Status written = OkStatus();
  if (world.rank() == 0) {
    Result<checkpoint::ConvertSummary> summary = Write16BitModelFiles(step_dir, dtype);
    if (summary.ok()) {
      std::vector<std::string> names;
      for (const fs::path& file : summary->files) names.push_back(file.filename().string());
      SLUICE_LOG(kInfo, "train", "checkpoint step {}: {} model written into {} ({}; {:.1f} MiB){}",
                 summary->step, DTypeName(dtype), step_dir.string(), fmt::join(names, ", "),
                 static_cast<double>(summary->file_bytes) / (1 << 20),
                 config.model.dtype == DType::kF32 ? "; bf16, as the run trains in fp32" : "");
    } else {
      written = summary.status();
    }
  }
  if (world.size() > 1) {
    int64_t elements = 0;
    for (const model::ParameterInfo& p : registry.parameters()) {
      if (!p.is_alias()) elements += p.sharding.global_shape.numel();
    }
    const double bytes = static_cast<double>(elements) * (4 + DTypeSize(dtype));
    ScopedLongerTimeout longer(world, bytes / kSlowestSaveBytesPerSecond);
    Result<bool> all_ok = checkpoint::CommAgreeFn(world)(written.ok());
    if (!all_ok.ok()) {
      if (written.ok()) written = all_ok.status();  // rank 0 keeps its own error
    } else if (written.ok() && !*all_ok) {
      written = FailedPreconditionError("rank 0 could not write it (its log and error say why)");
    }
  }
  if (written.ok()) return written;
  return Status(written.code(),
                fmt::format("writing the {} model of checkpoint {} "
                            "(zero_optimization.stage3_gather_16bit_weights_on_model_save): {}; "
                            "the checkpoint itself is intact (--resume continues from it): free "
                            "space or make the folder writable, or set the key false",
                            DTypeName(dtype), step_dir.string(), written.message()));
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
                                                const model::ParameterRegistry& registry,
                                                const ResumeChecks& checks) {
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<checkpoint::CheckpointReader> reader,
                          checkpoint::CheckpointReader::Open(step_dir));
  const nlohmann::ordered_json& states = reader->manifest().states;
  SLUICE_ASSIGN_OR_RETURN(int64_t states_version, GetInt(states, "version", step_dir));
  if (states_version != 1 && states_version != kStatesVersion) {
    return DataLossError(
        "checkpoint {}: manifest field states.version is {} but this Sluice reads 1 and {}",
        step_dir.string(), states_version, kStatesVersion);
  }
  const OptimizerType optimizer_type = engine.options().optimizer.type;
  SLUICE_ASSIGN_OR_RETURN(nlohmann::json optimizer, GetObject(states, "optimizer", step_dir));
  SLUICE_RETURN_IF_ERROR(
      CheckSameOptimizerState(SavedOptimizerType(optimizer), optimizer_type, step_dir));
  SLUICE_RETURN_IF_ERROR(CheckTensorsMatch(*reader, registry.GlobalRegistry(),
                                           StateKindsOf(optimizer_type), checks.model_tensors));
  TrainingProgress progress;
  SLUICE_ASSIGN_OR_RETURN(progress.step, GetInt(states, "step", step_dir));
  SLUICE_ASSIGN_OR_RETURN(progress.total_tokens, GetInt(states, "total_tokens", step_dir));
  SLUICE_ASSIGN_OR_RETURN(progress.data_loader, GetObject(states, "data_loader", step_dir));
  SLUICE_ASSIGN_OR_RETURN(progress.loss_scaler, GetObject(states, "loss_scaler", step_dir));
  SLUICE_ASSIGN_OR_RETURN(nlohmann::json schedule, GetObject(states, "lr_schedule", step_dir));
  SLUICE_ASSIGN_OR_RETURN(
      progress.lr_last_batch_iteration,
      GetInt(schedule, "last_batch_iteration", step_dir, "states.lr_schedule."));
  SLUICE_ASSIGN_OR_RETURN(int64_t optimizer_step,
                          GetInt(optimizer, "step", step_dir, "states.optimizer."));
  SLUICE_RETURN_IF_ERROR(checkpoint::CheckRecordedProgress(
      {.step = progress.step,
       .total_tokens = progress.total_tokens,
       .optimizer_step = optimizer_step,
       .lr_last_batch_iteration = progress.lr_last_batch_iteration,
       .data_loader = progress.data_loader},
      reader->manifest(), step_dir));
  if (checks.config != nullptr) {
    SLUICE_RETURN_IF_ERROR(CheckSameTrajectory(reader->manifest(), step_dir, checks));
  }

  zero::ZeroStateReaders readers;
  readers.master = ThroughGlobalRuns(
      registry, CheckpointRangeReader(*reader, registry, StateKind::kMasterWeights));
  readers.exp_avg =
      ThroughGlobalRuns(registry, CheckpointRangeReader(*reader, registry, StateKind::kExpAvg));
  if (OptimizerMoments(optimizer_type) == 2) {
    readers.exp_avg_sq =
        ThroughGlobalRuns(registry, CheckpointRangeReader(*reader, registry, StateKind::kExpAvgSq));
  }
  readers.optimizer_step = optimizer_step;
  SLUICE_RETURN_IF_ERROR(engine.ImportState(readers));
  return progress;
}

Result<int64_t> ModelTensorsOverStages(const model::ParameterRegistry& registry, Comm& pipeline) {
  int64_t mine = 0;
  for (const model::ParameterInfo& p : registry.parameters()) {
    if (!p.is_alias() && !p.mirror) ++mine;  // a mirror is its owner's tensor
  }
  if (pipeline.size() == 1) return mine;
  SLUICE_ASSIGN_OR_RETURN(const double total,
                          zero::SumInRankOrder(pipeline, static_cast<double>(mine)));
  return static_cast<int64_t>(total);
}

Status LoadInitialWeights(const fs::path& path, zero::ZeroEngine& engine,
                          const model::ParameterRegistry& registry, std::string* loaded,
                          int64_t model_tensors) {
  zero::ZeroStateReaders readers;
  std::unique_ptr<checkpoint::CheckpointReader> reader;
  std::unique_ptr<checkpoint::SafetensorsSource> source;
  // The files hold whole tensors: what they are checked against.
  const auto global = std::make_unique<model::ParameterRegistry>(registry.GlobalRegistry());
  if (LooksLikeSluiceCheckpoint(path)) {
    SLUICE_ASSIGN_OR_RETURN(fs::path step_dir, checkpoint::ResolveCheckpointDir(path));
    SLUICE_ASSIGN_OR_RETURN(reader, checkpoint::CheckpointReader::Open(step_dir));
    SLUICE_RETURN_IF_ERROR(CheckTensorsMatch(*reader, registry.GlobalRegistry(),
                                             StateKindsOf(engine.options().optimizer.type).first(1),
                                             model_tensors));
    readers.master = ThroughGlobalRuns(
        registry, FiniteOnly(CheckpointRangeReader(*reader, registry, StateKind::kMasterWeights),
                             registry, step_dir));
    if (loaded != nullptr) {
      *loaded = fmt::format("the master weights of step {} of the Sluice checkpoint {}",
                            reader->manifest().step, step_dir.string());
    }
  } else {
    SLUICE_ASSIGN_OR_RETURN(source, checkpoint::SafetensorsSource::Open(path));
    const checkpoint::SafetensorsSource* src = source.get();
    // Every parameter present with its shape, and no tensor the model would leave out, before a
    // rank reads its range.
    // A pipeline stage takes its own tensors; the stages together must take all of the file's.
    const bool stage = model_tensors > 0;
    SLUICE_ASSIGN_OR_RETURN(
        checkpoint::LoadWeightsReport report,
        checkpoint::CheckSafetensorsMatchModel(*src, *global, {.allow_unexpected = stage}));
    if (stage) {
      int64_t in_file = 0;
      for (const std::string& name : src->Names()) {
        if (!checkpoint::IsHfNonParameterBuffer(name)) ++in_file;
      }
      if (in_file != model_tensors) {
        return InvalidArgumentError(
            "{} holds {} parameter tensors but the model has {}: the file is for another model "
            "(family, n_layer, tie_embeddings)",
            src->path().string(), in_file, model_tensors);
      }
      report.ignored.clear();  // the other stages'
    }
    if (loaded != nullptr) {
      std::string skipped;
      if (!report.ignored.empty()) {
        skipped = fmt::format(" ({} non-parameter tensor(s) skipped: {})", report.ignored.size(),
                              fmt::join(report.ignored, ", "));
      }
      *loaded =
          fmt::format("{} parameters from {}{}", report.loaded, src->path().string(), skipped);
    }
    readers.master = ThroughGlobalRuns(
        registry,
        FiniteOnly(
            [src, global = global.get()](int param, int64_t begin, int64_t end, float* dst) {
              return checkpoint::ReadParameterRange(*src, global->parameter(param), begin, end,
                                                    dst);
            },
            registry, path));
  }
  return engine.ImportState(readers);
}

}  // namespace sluice::train
