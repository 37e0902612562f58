#include "engine/train/run_setup.h"

#include <fmt/format.h>

#include <algorithm>

#include "runtime/check.h"

namespace sluice::train {

Status CheckTrainable(const Config& config) {
  if (!config.model.present) {
    return InvalidArgumentError(
        "{} has no model section and no --model file was given: sluice train needs a model; add "
        "a `model:` section (family, n_layer, n_head, d_model, seq_len, ...) or pass --model "
        "FILE (see sluice train --help-config)",
        config.source_file.empty() ? std::string("the config") : config.source_file);
  }
  if (!config.data.train_path.has_value() || config.data.train_path->empty()) {
    return InvalidArgumentError(
        "data.train_path is not set: sluice train needs a training file (text or tokens); add "
        "`data: {{train_path: FILE}}` or --set data.train_path=FILE");
  }
  return OkStatus();
}

Result<Config> LoadTrainConfig(const ConfigSources& sources) {
  SLUICE_ASSIGN_OR_RETURN(Config config, LoadConfig(sources));
  SLUICE_RETURN_IF_ERROR(CheckTrainable(config));
  return config;
}

Result<model::ModelOptions> ModelOptionsFromConfig(const Config& config, Precision precision) {
  const ModelConfig& m = config.model;
  model::ModelOptions options;
  options.family = m.family == ModelFamily::kLlama ? model::Family::kLlama : model::Family::kGpt2;
  options.n_layer = m.n_layer;
  options.n_head = m.n_head;
  options.n_kv_head = m.n_kv_head;
  options.d_model = m.d_model;
  options.d_ff = m.d_ff;
  options.vocab_size = m.vocab_size;
  // The model's longest sequence: for gpt2 the rows of its position table, which may exceed the
  // training windows (data use model.seq_len).
  options.seq_len = options.family == model::Family::kGpt2
                        ? std::max(m.seq_len, m.max_position_embeddings)
                        : m.seq_len;
  options.rope_theta = m.rope_theta;
  options.norm_eps = static_cast<float>(m.norm_eps);
  options.tie_embeddings = m.tie_embeddings;
  options.init_std = m.init_std;
  options.param_dtype = ModelParamDType(precision);
  options.num_threads = config.device.threads;
  // This rank's piece is the process grid's to say (the engine sets it).
  options.tensor_parallel_size = config.parallel.tensor;
  options.tensor_parallel_rank = 0;
  options.sequence_parallel = config.parallel.sequence_parallel;
  // model.activation_checkpointing turns checkpointing on; DeepSpeed's section says how
  // (partition_activations has nothing to split with one tensor-parallel rank).
  options.activation_checkpointing = m.activation_checkpointing;
  const ActivationCheckpointingConfig& a = config.activation_checkpointing;
  options.checkpointing.blocks = a.number_checkpoints.value_or(0);
  options.checkpointing.host = a.cpu_checkpointing;
  options.checkpointing.contiguous = a.contiguous_memory_optimization;
  options.checkpointing.synchronize = a.synchronize_checkpoint_boundary;
  options.checkpointing.profile = a.profile;
  SLUICE_RETURN_IF_ERROR(model::ValidateModelOptions(options));
  return options;
}

data::DataOptions DataOptionsFromConfig(const Config& config) {
  data::DataOptions options;
  options.train_path = config.data.train_path.value_or("");
  options.val_path = config.data.val_path.value_or("");
  switch (config.data.format) {
    case DataFormat::kText:
      options.format = data::TokenFormat::kText;
      break;
    case DataFormat::kNanogptU16:
      options.format = data::TokenFormat::kNanogptU16;
      break;
    case DataFormat::kLlmcBin:
      options.format = data::TokenFormat::kLlmcBin;
      break;
    case DataFormat::kAuto:
      options.format = data::TokenFormat::kAuto;
      break;
  }
  options.seq_len = config.model.seq_len;
  options.val_fraction = config.data.val_fraction;
  options.seed = static_cast<uint64_t>(config.data.seed);
  options.vocab_size = config.model.vocab_size;
  return options;
}

model::ModelOptions DefaultModelOptions() {
  const Config defaults;
  Result<model::ModelOptions> options =
      ModelOptionsFromConfig(defaults, PrecisionOf(defaults.model.dtype));
  SLUICE_CHECK(options.ok()) << "the registry's defaults give invalid model options: "
                             << options.status().ToString();
  return std::move(options).value();
}

data::DataOptions DefaultDataOptions() { return DataOptionsFromConfig(Config()); }

std::string DescribeModel(const model::ModelOptions& o) {
  std::string text =
      fmt::format("{}, n_layer {}, n_head {}", model::FamilyName(o.family), o.n_layer, o.n_head);
  if (o.n_kv_head != o.n_head) text += fmt::format(", n_kv_head {}", o.n_kv_head);
  // gpt2's longest sequence is its position table, which may be longer than the windows.
  text += fmt::format(", d_model {}, d_ff {}, {} {}", o.d_model, o.d_ff,
                      o.family == model::Family::kGpt2 ? "positions" : "seq_len", o.seq_len);
  if (const int64_t checkpointed = model::CheckpointedBlocks(o); checkpointed > 0) {
    text += fmt::format(
        ", activation checkpointing of {} blocks (inputs in {} memory{})",
        checkpointed == o.n_layer ? std::string("all")
                                  : fmt::format("{} of {}", checkpointed, o.n_layer),
        o.checkpointing.host ? "host" : "device", o.checkpointing.contiguous ? ", contiguous" : "");
  }
  return text;
}

}  // namespace sluice::train
