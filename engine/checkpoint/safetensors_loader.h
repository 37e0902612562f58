// Initial weights from safetensors (`model.init_from`): every parameter of a model, by its
// Hugging Face name, from a single file or a sharded model.safetensors.index.json, converted to
// the model's storage dtype (round-to-nearest-even) and laid out as Sluice stores it
// (hf_layout.h).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "engine/checkpoint/safetensors_file.h"
#include "engine/model/model.h"
#include "engine/model/parameter_registry.h"
#include "runtime/status.h"

namespace sluice::checkpoint {

struct LoadWeightsOptions {
  // Tensors the model has no parameter for are an error unless this is set (Hugging Face's own
  // non-parameter buffers are always skipped).
  bool allow_unexpected = false;
};

struct LoadWeightsReport {
  int64_t loaded = 0;                // parameters loaded
  std::vector<std::string> ignored;  // file tensors skipped: buffers, a tied head, unexpected
};

// Elements [begin, end) of parameter `param` (Sluice layout, flattened) as fp32: what a ZeRO rank
// loads into its shard. InvalidArgument naming the tensor and the file for a shape other than
// the model's (in Hugging Face's layout) or a dtype other than F32/BF16/F16; NotFound naming the
// parameter when no candidate name is in the source.
Status ReadParameterRange(const SafetensorsSource& source, const model::ParameterInfo& param,
                          int64_t begin, int64_t end, float* dst);

// Checks that `source` holds every parameter of `registry` with its shape (in Hugging Face's
// layout) and a floating-point dtype, and no tensor the model has no parameter for (Hugging Face's
// non-parameter buffers aside): NotFound naming a missing parameter, InvalidArgument naming the
// tensor, the file and what differs. Reads no tensor data. The report counts the parameters.
Result<LoadWeightsReport> CheckSafetensorsMatchModel(const SafetensorsSource& source,
                                                     const model::ParameterRegistry& registry,
                                                     const LoadWeightsOptions& options = {});

// Fills `flat_params` (registry.total_elements() elements of registry.dtype(), parameters at
// their offsets) with every parameter of `registry`. All parameters are checked (shape, dtype,
// presence) before any is written, so a refused file leaves the buffer untouched.
Result<LoadWeightsReport> LoadSafetensorsIntoParameters(const SafetensorsSource& source,
                                                        const model::ParameterRegistry& registry,
                                                        void* flat_params,
                                                        const LoadWeightsOptions& options = {});

// The same into a model's own flat parameter buffer (ModelStorage::kFlat).
Result<LoadWeightsReport> LoadSafetensorsIntoModel(const std::filesystem::path& path,
                                                   model::Model<float>& model,
                                                   const LoadWeightsOptions& options = {});

}  // namespace sluice::checkpoint
