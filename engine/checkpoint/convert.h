// `sluice convert`: a checkpoint's master weights -> Hugging Face's layout, streamed tensor by
// tensor: memory is bounded by the largest tensor (its fp32 values, a transposed copy for GPT-2's
// Conv1D weights, the narrowed output). A tied LM head owns no storage, so it is not in the
// checkpoint and is stored once, as the embedding, as Hugging Face does.
//
// Two outputs:
//   - a folder that transformers' from_pretrained loads (ConvertCheckpointToHfFolder): config.json
//     (hf_config.h, from the checkpoint's resolved config) and model.safetensors, or, past
//     `max_shard_bytes`, model-0000K-of-0000N.safetensors plus model.safetensors.index.json, as
//     save_pretrained shards;
//   - one .safetensors file (ConvertCheckpointToSafetensors).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/status.h"

namespace sluice::checkpoint {

struct ConvertSummary {
  std::filesystem::path checkpoint_dir;  // the step directory converted
  int64_t step = 0;
  DType dtype = DType::kF32;  // of the tensors written
  int64_t tensors = 0;
  int64_t parameters = 0;                    // elements
  uint64_t file_bytes = 0;                   // all safetensors files together
  int64_t largest_tensor = 0;                // elements: what bounds memory
  std::vector<std::filesystem::path> files;  // every file written, config.json and index included
};

struct ConvertOptions {
  // kF32, kBF16 or kF16 (round-to-nearest-even; fp16 past 65504 becomes inf, as the run's fp16
  // parameters do); nullopt: the dtype the checkpoint stores its master weights in (fp32 for
  // every Sluice run, whatever its compute precision).
  std::optional<DType> dtype;
  // A shard holds at most this many bytes of tensor data (a larger tensor gets a shard of its
  // own); transformers' save_pretrained default, 5 GB.
  uint64_t max_shard_bytes = 5'000'000'000;
};

// `checkpoint`: a step, checkpoints or run directory (ResolveCheckpointDir). Creates `out_dir`
// (and its parents), replaces the model files an earlier conversion left there (a stale
// model.safetensors would shadow a new index), and writes every file atomically, config.json
// last.
Result<ConvertSummary> ConvertCheckpointToHfFolder(const std::filesystem::path& checkpoint,
                                                   const std::filesystem::path& out_dir,
                                                   const ConvertOptions& options = {});

// Removes the model files ConvertCheckpointToHfFolder writes into `dir` (model.safetensors, its
// shards and index; config.json with `with_config`), leaving everything else there; missing
// files are fine. IoError naming the file that could not be removed.
Status RemoveHfModelFiles(const std::filesystem::path& dir, bool with_config);

// One safetensors file, written atomically; `dtype` as ConvertOptions::dtype.
Result<ConvertSummary> ConvertCheckpointToSafetensors(const std::filesystem::path& checkpoint,
                                                      const std::filesystem::path& out,
                                                      std::optional<DType> dtype);

}  // namespace sluice::checkpoint
