// `sluice convert`: a checkpoint's fp32 master weights -> one safetensors file with Hugging Face
// names and layouts (hf_layout.h), streamed tensor by tensor: memory is bounded by the largest
// tensor (its fp32 values, a transposed copy for GPT-2's Conv1D weights, the bf16 output). A
// tied LM head owns no storage, so it is not in the checkpoint and is stored once, as the
// embedding, as Hugging Face does.
#pragma once

#include <cstdint>
#include <filesystem>

#include "runtime/dtype.h"
#include "runtime/status.h"

namespace sluice::checkpoint {

struct ConvertSummary {
  std::filesystem::path checkpoint_dir;  // the step directory converted
  int64_t step = 0;
  int64_t tensors = 0;
  int64_t parameters = 0;  // elements
  uint64_t file_bytes = 0;
  int64_t largest_tensor = 0;  // elements: what bounds memory
};

// `checkpoint`: a step, checkpoints or run directory (ResolveCheckpointDir). `dtype`: kF32 or
// kBF16 (round-to-nearest-even). Writes `out` atomically.
Result<ConvertSummary> ConvertCheckpointToSafetensors(const std::filesystem::path& checkpoint,
                                                      const std::filesystem::path& out,
                                                      DType dtype);

}  // namespace sluice::checkpoint
