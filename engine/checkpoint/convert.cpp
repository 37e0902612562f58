#include "engine/checkpoint/convert.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint_dir.h"
#include "engine/checkpoint/checkpoint_reader.h"
#include "engine/checkpoint/hf_layout.h"
#include "engine/checkpoint/safetensors_writer.h"
#include "kernels/ref/half.h"

namespace sluice::checkpoint {
namespace {

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

}  // namespace

Result<ConvertSummary> ConvertCheckpointToSafetensors(const std::filesystem::path& checkpoint,
                                                      const std::filesystem::path& out,
                                                      DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16) {
    return InvalidArgumentError("convert: output dtype {} is not supported (use bf16 or fp32)",
                                DTypeName(dtype));
  }
  ConvertSummary summary;
  SLUICE_ASSIGN_OR_RETURN(summary.checkpoint_dir, ResolveCheckpointDir(checkpoint));
  SLUICE_ASSIGN_OR_RETURN(auto ckpt, CheckpointReader::Open(summary.checkpoint_dir));
  summary.step = ckpt->manifest().step;
  const std::vector<const ManifestTensor*> tensors = ckpt->Tensors(StateKind::kMasterWeights);
  if (tensors.empty()) {
    return FailedPreconditionError("convert: checkpoint {} holds no master weights",
                                   summary.checkpoint_dir.string());
  }
  std::vector<SafetensorsTensorSpec> specs;
  for (const ManifestTensor* t : tensors) {
    specs.push_back({t->name, ToSafetensorsDType(dtype), HfShape(t->name, t->shape)});
    summary.parameters += t->shape.numel();
    summary.largest_tensor = std::max(summary.largest_tensor, t->shape.numel());
  }
  std::map<std::string, std::string> metadata = {
      {"format", "pt"},  // transformers refuses safetensors files without it
      {"sluice.step", std::to_string(summary.step)},
      {"sluice.source", summary.checkpoint_dir.string()},
  };
  SLUICE_ASSIGN_OR_RETURN(auto writer, SafetensorsWriter::Create(out, specs, metadata));

  std::vector<float> values;
  std::vector<float> transposed;
  std::vector<uint16_t> narrow;
  for (const ManifestTensor* t : tensors) {
    SLUICE_RETURN_IF_ERROR(ReadAsF32(*ckpt, *t, &values, &narrow));
    const float* src = values.data();
    if (IsHfConv1DWeight(t->name) && t->shape.rank() == 2) {
      transposed.resize(values.size());
      Transpose2D(values.data(), t->shape.dim(0), t->shape.dim(1), transposed.data());
      src = transposed.data();
    }
    if (dtype == DType::kF32) {
      SLUICE_RETURN_IF_ERROR(writer->Append(src, values.size() * sizeof(float)));
    } else {
      narrow.resize(values.size());
      for (size_t i = 0; i < values.size(); ++i) narrow[i] = kernels::F32ToBf16(src[i]);
      SLUICE_RETURN_IF_ERROR(writer->Append(narrow.data(), narrow.size() * sizeof(uint16_t)));
    }
    ++summary.tensors;
  }
  SLUICE_RETURN_IF_ERROR(writer->Finish());
  std::error_code ec;
  summary.file_bytes = std::filesystem::file_size(out, ec);
  return summary;
}

}  // namespace sluice::checkpoint
