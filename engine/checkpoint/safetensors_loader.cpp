#include "engine/checkpoint/safetensors_loader.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <set>

#include "engine/checkpoint/hf_layout.h"
#include "kernels/ref/half.h"

namespace sluice::checkpoint {
namespace {

struct Found {
  std::string name;  // as the file spells it
  SafetensorsSource::Located at;
};

std::optional<Found> Locate(const SafetensorsSource& source, std::string_view name) {
  for (const std::string& candidate : HfNameCandidates(name)) {
    SafetensorsSource::Located at = source.Find(candidate);
    if (at.file != nullptr) return Found{candidate, at};
  }
  return std::nullopt;
}

std::string ShapeString(const std::vector<int64_t>& dims) {
  return fmt::format("[{}]", fmt::join(dims, ", "));
}

// Shape and dtype of the file's tensor against the parameter it is loaded into.
Status CheckTensor(const Found& found, const model::ParameterInfo& param) {
  const SafetensorsTensor& t = *found.at.tensor;
  if (!ToSluiceDType(t.dtype).has_value()) {
    return InvalidArgumentError(
        "tensor '{}' in {} has dtype {}: parameter {} needs floating point values (F32, BF16 or "
        "F16)",
        found.name, found.at.file->path().string(), SafetensorsDTypeName(t.dtype), param.name);
  }
  const std::vector<int64_t> want = HfShape(param.name, param.shape);
  if (t.shape != want) {
    std::string hint = "the file is for another model configuration";
    if (param.name.ends_with(".wpe.weight") && t.shape.size() == 2 && want.size() == 2 &&
        t.shape[1] == want[1]) {
      hint = fmt::format(
          "set model.max_position_embeddings: {} (the rows of the file's position "
          "table; training windows stay model.seq_len)",
          t.shape[0]);
    }
    return InvalidArgumentError(
        "tensor '{}' in {} has shape {} but the model's parameter {} needs {}{}: {}", found.name,
        found.at.file->path().string(), t.ShapeString(), param.name, ShapeString(want),
        IsHfConv1DWeight(param.name) ? " (GPT-2 Conv1D layout [in, out])" : "", hint);
  }
  return OkStatus();
}

void Widen(SafetensorsDType dtype, const void* src, int64_t count, float* dst) {
  if (dtype == SafetensorsDType::kF32) {
    std::memcpy(dst, src, static_cast<size_t>(count) * sizeof(float));
    return;
  }
  const uint16_t* bits = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < count; ++i) {
    dst[i] =
        dtype == SafetensorsDType::kBF16 ? kernels::Bf16ToF32(bits[i]) : kernels::F16ToF32(bits[i]);
  }
}

}  // namespace

Status ReadParameterRange(const SafetensorsSource& source, const model::ParameterInfo& param,
                          int64_t begin, int64_t end, float* dst) {
  SLUICE_CHECK(0 <= begin && begin <= end && end <= param.numel)
      << param.name << " [" << begin << ", " << end << ") of " << param.numel;
  std::optional<Found> found = Locate(source, param.name);
  if (!found) {
    return NotFoundError("{} has no tensor for parameter {} (looked for {})",
                         source.path().string(), param.name,
                         fmt::join(HfNameCandidates(param.name), ", "));
  }
  SLUICE_RETURN_IF_ERROR(CheckTensor(*found, param));
  const SafetensorsTensor& t = *found->at.tensor;
  const size_t esize = SafetensorsDTypeSize(t.dtype);
  if (IsHfConv1DWeight(param.name) && param.shape.rank() == 2) {
    // Stored transposed: any range of the Sluice layout gathers from the whole tensor.
    std::vector<char> raw(t.end - t.begin);
    SLUICE_RETURN_IF_ERROR(found->at.file->Read(t, raw.data()));
    std::vector<float> hf(param.numel);
    Widen(t.dtype, raw.data(), param.numel, hf.data());
    std::vector<float> ours(param.numel);
    Transpose2D(hf.data(), param.shape.dim(1), param.shape.dim(0), ours.data());
    std::memcpy(dst, ours.data() + begin, static_cast<size_t>(end - begin) * sizeof(float));
    return OkStatus();
  }
  std::vector<char> raw(static_cast<size_t>(end - begin) * esize);
  SLUICE_RETURN_IF_ERROR(
      found->at.file->ReadBytes(t, static_cast<uint64_t>(begin) * esize, raw.size(), raw.data()));
  Widen(t.dtype, raw.data(), end - begin, dst);
  return OkStatus();
}

Result<LoadWeightsReport> CheckSafetensorsMatchModel(const SafetensorsSource& source,
                                                     const model::ParameterRegistry& registry,
                                                     const LoadWeightsOptions& options) {
  LoadWeightsReport report;
  std::set<std::string> used;
  for (const model::ParameterInfo& p : registry.parameters()) {
    std::optional<Found> found = Locate(source, p.name);
    if (p.is_alias()) {
      if (found) {
        SLUICE_RETURN_IF_ERROR(CheckTensor(*found, p));
        used.insert(found->name);
        report.ignored.push_back(found->name);  // tied: the target's values are used
      }
      continue;
    }
    if (!found) {
      std::string hint;
      if (p.name == "lm_head.weight") {
        hint = ": the file has tied embeddings; set model.tie_embeddings: true";
      }
      return NotFoundError("{} has no tensor for parameter {} (looked for {}){}",
                           source.path().string(), p.name,
                           fmt::join(HfNameCandidates(p.name), ", "), hint);
    }
    SLUICE_RETURN_IF_ERROR(CheckTensor(*found, p));
    used.insert(found->name);
  }
  std::vector<std::string> unexpected;
  for (const std::string& name : source.Names()) {
    if (used.count(name) > 0) continue;
    if (IsHfNonParameterBuffer(name) || options.allow_unexpected) {
      report.ignored.push_back(name);
    } else {
      unexpected.push_back(name);
    }
  }
  if (!unexpected.empty()) {
    const size_t shown = std::min<size_t>(unexpected.size(), 5);
    const bool biases = std::any_of(unexpected.begin(), unexpected.end(),
                                    [](const auto& name) { return name.ends_with("_proj.bias"); });
    return InvalidArgumentError(
        "{} has {} tensor(s) the model has no parameter for ({}{}): the file is for another "
        "model ({})",
        source.path().string(), unexpected.size(),
        fmt::join(unexpected.begin(), unexpected.begin() + shown, ", "),
        unexpected.size() > shown ? ", ..." : "",
        biases ? "projection biases, as Qwen's q/k/v biases, which Sluice's llama does not have"
               : "family, n_layer, tie_embeddings");
  }
  for (const model::ParameterInfo& p : registry.parameters()) {
    if (!p.is_alias()) ++report.loaded;
  }
  return report;
}

Result<LoadWeightsReport> LoadSafetensorsIntoParameters(const SafetensorsSource& source,
                                                        const model::ParameterRegistry& registry,
                                                        void* flat_params,
                                                        const LoadWeightsOptions& options) {
  // Everything is checked before anything is written.
  SLUICE_ASSIGN_OR_RETURN(LoadWeightsReport report,
                          CheckSafetensorsMatchModel(source, registry, options));

  std::vector<float> values;
  char* flat = static_cast<char*>(flat_params);
  const size_t esize = DTypeSize(registry.dtype());
  for (const model::ParameterInfo& p : registry.parameters()) {
    if (p.is_alias()) continue;
    values.resize(p.numel);
    SLUICE_RETURN_IF_ERROR(ReadParameterRange(source, p, 0, p.numel, values.data()));
    char* out = flat + static_cast<size_t>(p.offset) * esize;
    if (registry.dtype() == DType::kF32) {
      std::memcpy(out, values.data(), values.size() * sizeof(float));
    } else {
      uint16_t* bits = reinterpret_cast<uint16_t*>(out);
      for (int64_t i = 0; i < p.numel; ++i) {
        bits[i] = registry.dtype() == DType::kBF16 ? kernels::F32ToBf16(values[i])
                                                   : kernels::F32ToF16(values[i]);
      }
    }
  }
  return report;
}

Result<LoadWeightsReport> LoadSafetensorsIntoModel(const std::filesystem::path& path,
                                                   model::Model<float>& model,
                                                   const LoadWeightsOptions& options) {
  if (model.params_data() == nullptr) {
    return FailedPreconditionError(
        "loading {}: the model has no flat parameter buffer (ModelStorage::kExternal); load each "
        "rank's shard with ReadParameterRange",
        path.string());
  }
  SLUICE_ASSIGN_OR_RETURN(auto source, SafetensorsSource::Open(path));
  return std::move(
             LoadSafetensorsIntoParameters(*source, model.registry(), model.params_data(), options))
      .WithContext(fmt::format("loading initial weights from {}", path.string()));
}

}  // namespace sluice::checkpoint
