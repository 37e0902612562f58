// `sluice convert CHECKPOINT --out FILE.safetensors [--dtype bf16|fp32]`: a checkpoint's master
// weights -> one safetensors file with Hugging Face names and layouts, streamed tensor by tensor
// (engine/checkpoint/convert.h). CHECKPOINT is a step directory, a checkpoints directory (its
// `latest`) or a run directory.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/command_registry.h"
#include "engine/checkpoint/convert.h"

namespace sluice::cli {
namespace {

struct ConvertCommandOptions {
  std::string checkpoint;
  std::string out;
  std::string dtype = "bf16";
};

Status RunConvert(const ConvertCommandOptions& options) {
  SLUICE_ASSIGN_OR_RETURN(DType dtype, ParseDType(options.dtype));
  if (dtype != DType::kBF16 && dtype != DType::kF32) {
    return InvalidArgumentError("--dtype {}: use bf16 or fp32", options.dtype);
  }
  SLUICE_ASSIGN_OR_RETURN(
      checkpoint::ConvertSummary summary,
      checkpoint::ConvertCheckpointToSafetensors(options.checkpoint, options.out, dtype));
  std::printf(
      "converted step %lld of %s: %lld tensors, %lld parameters, %s -> %s (%.1f MiB; "
      "largest tensor %lld elements)\n",
      static_cast<long long>(summary.step), summary.checkpoint_dir.c_str(),
      static_cast<long long>(summary.tensors), static_cast<long long>(summary.parameters),
      std::string(DTypeName(dtype)).c_str(), options.out.c_str(),
      static_cast<double>(summary.file_bytes) / (1 << 20),
      static_cast<long long>(summary.largest_tensor));
  return OkStatus();
}

void AddConvertCommand(CLI::App& parent) {
  auto options = std::make_shared<ConvertCommandOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "convert",
      "Convert a checkpoint's master weights to one safetensors file with Hugging Face names");
  cmd->add_option("checkpoint", options->checkpoint,
                  "Step directory, checkpoints directory (uses `latest`) or run directory")
      ->required();
  cmd->add_option("--out,-o", options->out, "Output .safetensors file (written atomically)")
      ->required();
  cmd->add_option("--dtype", options->dtype, "Output dtype: bf16 (default) or fp32")
      ->check(CLI::IsMember({"bf16", "fp32", "f32", "bfloat16", "float32"}));
  cmd->callback([options] { ExitOnError(RunConvert(*options)); });
}

}  // namespace

SLUICE_REGISTER_COMMAND("", AddConvertCommand);

}  // namespace sluice::cli
