#include "engine/checkpoint/convert.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint_dir.h"
#include "engine/checkpoint/checkpoint_reader.h"
#include "engine/checkpoint/hf_config.h"
#include "engine/checkpoint/hf_layout.h"
#include "engine/checkpoint/safetensors_file.h"
#include "engine/checkpoint/safetensors_writer.h"
#include "kernels/ref/half.h"
#include "runtime/durable_file.h"

namespace sluice::checkpoint {
namespace {

namespace fs = std::filesystem;

// The stored values of a master-weight tensor, widened to fp32.
Status ReadAsF32(const CheckpointReader& ckpt, const ManifestTensor& t, std::vector<float>* out,
                 std::vector<uint16_t>* scratch) {
  const int64_t numel = t.shape.numel();
  out->resize(numel);
  if (t.dtype == DType::kF32) {
    return ckpt.ReadRange(StateKind::kMasterWeights, t.name, 0, numel, out->data());
  }
  scratch->resize(numel);
  SLUICE_RETURN_IF_ERROR(
      ckpt.ReadRange(StateKind::kMasterWeights, t.name, 0, numel, scratch->data()));
  for (int64_t i = 0; i < numel; ++i) {
    (*out)[i] = t.dtype == DType::kBF16 ? kernels::Bf16ToF32((*scratch)[i])
                                        : kernels::F16ToF32((*scratch)[i]);
  }
  return OkStatus();
}

// An opened checkpoint and the dtype its tensors are written in.
struct Source {
  std::unique_ptr<CheckpointReader> reader;
  std::vector<const ManifestTensor*> tensors;
  DType dtype = DType::kF32;
};

Result<Source> OpenSource(const fs::path& checkpoint, std::optional<DType> dtype,
                          ConvertSummary* summary) {
  if (dtype.has_value() && *dtype != DType::kF32 && *dtype != DType::kBF16 &&
      *dtype != DType::kF16) {
    return InvalidArgumentError(
        "convert: output dtype {} is not supported (use bf16, fp16 or fp32)", DTypeName(*dtype));
  }
  Source source;
  SLUICE_ASSIGN_OR_RETURN(summary->checkpoint_dir, ResolveCheckpointDir(checkpoint));
  SLUICE_ASSIGN_OR_RETURN(source.reader, CheckpointReader::Open(summary->checkpoint_dir));
  summary->step = source.reader->manifest().step;
  source.tensors = source.reader->Tensors(StateKind::kMasterWeights);
  if (source.tensors.empty()) {
    return FailedPreconditionError("convert: checkpoint {} holds no master weights",
                                   summary->checkpoint_dir.string());
  }
  // The master precision: what the checkpoint stores (fp32, also for bf16 and fp16 training).
  source.dtype = dtype.value_or(source.tensors.front()->dtype);
  if (!dtype.has_value() && source.dtype != DType::kBF16) source.dtype = DType::kF32;
  summary->dtype = source.dtype;
  for (const ManifestTensor* t : source.tensors) {
    summary->parameters += t->shape.numel();
    summary->largest_tensor = std::max(summary->largest_tensor, t->shape.numel());
  }
  return source;
}

// Streams `tensors` into one safetensors file at `out`.
Status WriteTensors(const Source& source, const std::vector<const ManifestTensor*>& tensors,
                    const fs::path& out, const std::map<std::string, std::string>& metadata,
                    ConvertSummary* summary) {
  std::vector<SafetensorsTensorSpec> specs;
  for (const ManifestTensor* t : tensors) {
    specs.push_back({t->name, ToSafetensorsDType(source.dtype), HfShape(t->name, t->shape)});
  }
  SLUICE_ASSIGN_OR_RETURN(auto writer, SafetensorsWriter::Create(out, specs, metadata));
  std::vector<float> values;
  std::vector<float> transposed;
  std::vector<uint16_t> narrow;
  for (const ManifestTensor* t : tensors) {
    SLUICE_RETURN_IF_ERROR(ReadAsF32(*source.reader, *t, &values, &narrow));
    const float* src = values.data();
    if (IsHfConv1DWeight(t->name) && t->shape.rank() == 2) {
      transposed.resize(values.size());
      Transpose2D(values.data(), t->shape.dim(0), t->shape.dim(1), transposed.data());
      src = transposed.data();
    }
    if (source.dtype == DType::kF32) {
      SLUICE_RETURN_IF_ERROR(writer->Append(src, values.size() * sizeof(float)));
    } else {
      narrow.resize(values.size());
      if (source.dtype == DType::kBF16) {
        for (size_t i = 0; i < values.size(); ++i) narrow[i] = kernels::F32ToBf16(src[i]);
      } else {
        for (size_t i = 0; i < values.size(); ++i) narrow[i] = kernels::F32ToF16(src[i]);
      }
      SLUICE_RETURN_IF_ERROR(writer->Append(narrow.data(), narrow.size() * sizeof(uint16_t)));
    }
    ++summary->tensors;
  }
  SLUICE_RETURN_IF_ERROR(writer->Finish());
  std::error_code ec;
  summary->file_bytes += fs::file_size(out, ec);
  summary->files.push_back(out);
  return OkStatus();
}

std::map<std::string, std::string> Metadata(const ConvertSummary& summary) {
  return {
      {"format", "pt"},  // transformers refuses safetensors files without it
      {"sluice.step", std::to_string(summary.step)},
      {"sluice.source", summary.checkpoint_dir.string()},
  };
}

// Consecutive runs of tensors of at most `max_bytes` each (a larger tensor alone), in order, as
// save_pretrained splits a state dict.
std::vector<std::vector<const ManifestTensor*>> PlanShards(
    const std::vector<const ManifestTensor*>& tensors, DType dtype, uint64_t max_bytes) {
  std::vector<std::vector<const ManifestTensor*>> shards(1);
  uint64_t bytes = 0;
  for (const ManifestTensor* t : tensors) {
    const uint64_t size = static_cast<uint64_t>(t->shape.numel()) * DTypeSize(dtype);
    if (!shards.back().empty() && bytes + size > max_bytes) {
      shards.emplace_back();
      bytes = 0;
    }
    shards.back().push_back(t);
    bytes += size;
  }
  return shards;
}

const char* TorchDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return "bfloat16";
    case DType::kF16:
      return "float16";
    default:
      return "float32";
  }
}

}  // namespace

Status RemoveHfModelFiles(const fs::path& dir, bool with_config) {
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const bool shard = name.starts_with("model-") && name.ends_with(".safetensors");
    if (name == kSafetensorsSingleName || name == kSafetensorsIndexName || shard ||
        (with_config && name == "config.json")) {
      SLUICE_RETURN_IF_ERROR(RemoveTree(entry.path()));
    }
  }
  if (ec) return IoError("cannot list {}: {}", dir.string(), ec.message());
  return OkStatus();
}

Result<ConvertSummary> ConvertCheckpointToHfFolder(const fs::path& checkpoint,
                                                   const fs::path& out_dir,
                                                   const ConvertOptions& options) {
  if (options.max_shard_bytes == 0) {
    return InvalidArgumentError("convert: the shard size must be positive");
  }
  ConvertSummary summary;
  SLUICE_ASSIGN_OR_RETURN(Source source, OpenSource(checkpoint, options.dtype, &summary));
  SLUICE_ASSIGN_OR_RETURN(
      HfExportModel model,
      HfExportModelFromRecord(source.reader->manifest().config,
                              fmt::format("checkpoint {}", summary.checkpoint_dir.string())));
  model.torch_dtype = TorchDTypeName(source.dtype);

  SLUICE_RETURN_IF_ERROR(CreateDirectories(out_dir, "give sluice convert another --out"));
  // Model files an earlier conversion may have left: with both a model.safetensors and an index,
  // from_pretrained would load the stale single file.
  SLUICE_RETURN_IF_ERROR(RemoveHfModelFiles(out_dir, /*with_config=*/false));
  const auto shards = PlanShards(source.tensors, source.dtype, options.max_shard_bytes);
  const std::map<std::string, std::string> metadata = Metadata(summary);
  if (shards.size() == 1) {
    SLUICE_RETURN_IF_ERROR(
        WriteTensors(source, shards[0], out_dir / kSafetensorsSingleName, metadata, &summary));
  } else {
    nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
    uint64_t total = 0;
    for (size_t i = 0; i < shards.size(); ++i) {
      const std::string name =
          fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards.size());
      SLUICE_RETURN_IF_ERROR(WriteTensors(source, shards[i], out_dir / name, metadata, &summary));
      for (const ManifestTensor* t : shards[i]) {
        weight_map[t->name] = name;
        total += static_cast<uint64_t>(t->shape.numel()) * DTypeSize(source.dtype);
      }
    }
    nlohmann::ordered_json index;
    index["metadata"] = {{"total_size", total}};
    index["weight_map"] = std::move(weight_map);
    const fs::path index_path = out_dir / kSafetensorsIndexName;
    SLUICE_RETURN_IF_ERROR(WriteFileAtomically(index_path, index.dump(2) + "\n"));
    summary.files.push_back(index_path);
  }
  const fs::path config_path = out_dir / "config.json";
  SLUICE_RETURN_IF_ERROR(WriteFileAtomically(config_path, HfConfigJson(model).dump(2) + "\n"));
  summary.files.push_back(config_path);
  return summary;
}

Result<ConvertSummary> ConvertCheckpointToSafetensors(const fs::path& checkpoint,
                                                      const fs::path& out,
                                                      std::optional<DType> dtype) {
  ConvertSummary summary;
  SLUICE_ASSIGN_OR_RETURN(Source source, OpenSource(checkpoint, dtype, &summary));
  SLUICE_RETURN_IF_ERROR(WriteTensors(source, source.tensors, out, Metadata(summary), &summary));
  return summary;
}

}  // namespace sluice::checkpoint
