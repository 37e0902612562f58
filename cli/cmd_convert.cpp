// `sluice convert CHECKPOINT [--out DIR] [--dtype bf16|fp32] [--max-shard-size 5GB]`: a
// checkpoint's master weights -> a folder that transformers' from_pretrained loads (config.json
// and model.safetensors, sharded with an index past --max-shard-size), or, with --out
// FILE.safetensors, one safetensors file (engine/checkpoint/convert.h). CHECKPOINT is a step
// directory, a checkpoints directory (its `latest`) or a run directory; a run directory converts
// into RUN_DIR/hf unless --out says otherwise.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "cli/command_registry.h"
#include "engine/checkpoint/convert.h"
#include "runtime/size_format.h"

namespace sluice::cli {
namespace {

namespace fs = std::filesystem;

struct ConvertCommandOptions {
  std::string checkpoint;
  std::string out;
  std::string dtype;  // empty: the checkpoint's master precision
  std::string max_shard_size = "5GB";
};

// --out when not given: RUN_DIR/hf for a run directory; a step or checkpoints directory has no
// place of its own for it.
Result<fs::path> DefaultOut(const fs::path& checkpoint) {
  std::error_code ec;
  if (fs::is_directory(checkpoint / "checkpoints", ec)) return checkpoint / "hf";
  return InvalidArgumentError(
      "convert {}: name the output with --out DIR (a folder for from_pretrained) or --out "
      "FILE.safetensors; without it only a run directory converts (into RUN_DIR/hf)",
      checkpoint.string());
}

Status RunConvert(const ConvertCommandOptions& options) {
  std::optional<DType> dtype;
  if (!options.dtype.empty()) {
    SLUICE_ASSIGN_OR_RETURN(dtype, ParseDType(options.dtype));
    if (*dtype != DType::kBF16 && *dtype != DType::kF32) {
      return InvalidArgumentError("--dtype {}: use bf16 or fp32", options.dtype);
    }
  }
  fs::path out = options.out;
  if (out.empty()) {
    SLUICE_ASSIGN_OR_RETURN(out, DefaultOut(options.checkpoint));
  }
  checkpoint::ConvertSummary summary;
  if (out.extension() == ".safetensors") {
    SLUICE_ASSIGN_OR_RETURN(
        summary, checkpoint::ConvertCheckpointToSafetensors(options.checkpoint, out, dtype));
  } else {
    checkpoint::ConvertOptions convert;
    convert.dtype = dtype;
    Result<uint64_t> shard = ParseByteSize(options.max_shard_size);
    if (!shard.ok()) return Status(shard.status()).WithContext("--max-shard-size");
    convert.max_shard_bytes = *shard;
    SLUICE_ASSIGN_OR_RETURN(
        summary, checkpoint::ConvertCheckpointToHfFolder(options.checkpoint, out, convert));
  }
  size_t weight_files = 0;
  for (const fs::path& file : summary.files) weight_files += file.extension() == ".safetensors";
  std::printf(
      "converted step %lld of %s: %lld tensors, %lld parameters, %s -> %s (%.1f MiB of weights "
      "in %zu safetensors file(s); largest tensor %lld elements)\n",
      static_cast<long long>(summary.step), summary.checkpoint_dir.c_str(),
      static_cast<long long>(summary.tensors), static_cast<long long>(summary.parameters),
      std::string(DTypeName(summary.dtype)).c_str(), out.c_str(),
      static_cast<double>(summary.file_bytes) / (1 << 20), weight_files,
      static_cast<long long>(summary.largest_tensor));
  return OkStatus();
}

void AddConvertCommand(CLI::App& parent) {
  auto options = std::make_shared<ConvertCommandOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "convert",
      "Convert a checkpoint's master weights to a Hugging Face folder (config.json + safetensors) "
      "that transformers' from_pretrained loads");
  cmd->add_option("checkpoint", options->checkpoint,
                  "Step directory, checkpoints directory (uses `latest`) or run directory")
      ->required();
  cmd->add_option("--out,-o", options->out,
                  "Output folder (created; default RUN_DIR/hf for a run directory), or one "
                  "FILE.safetensors");
  cmd->add_option("--dtype", options->dtype,
                  "Output dtype: bf16 or fp32 (default: the checkpoint's master weights, fp32)")
      ->check(CLI::IsMember({"bf16", "fp32", "f32", "bfloat16", "float32"}));
  cmd->add_option("--max-shard-size", options->max_shard_size,
                  "Split the weights into shards of at most this size, with an index (default "
                  "5GB, as save_pretrained)");
  cmd->callback([options] { ExitOnError(RunConvert(*options)); });
}

}  // namespace

SLUICE_REGISTER_COMMAND("", AddConvertCommand);

}  // namespace sluice::cli
