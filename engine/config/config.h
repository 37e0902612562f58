// The resolved training config: YAML or JSON files with DeepSpeed's keys, defaults and meanings
// plus Sluice's model/data/device/run sections, layered in order (a later file wins key by key),
// overridden by SLUICE_CFG_* environment variables and then by --set key=value, with "auto" and
// derived values resolved for a world size. Every setting is declared once in
// config_schema.cpp; docs/config.md describes them.
//
//   ConfigSources sources;
//   sources.paths = {"configs/zero3_offload_nvme.yaml", "aio_tuned.yaml"};
//   sources.set_overrides = {"zero_optimization.stage=3"};
//   sources.world_size = 4;
//   SLUICE_ASSIGN_OR_RETURN(Config config, LoadConfig(sources));
//   config.zero.stage; config.batch.micro_batch_per_gpu; ConfigRecordJson(config);
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/config/config_layers.h"
#include "engine/config/config_schema.h"
#include "engine/config/config_tree.h"
#include "engine/zero/zero_sections.h"
#include "kernels/cpu/gemm.h"
#include "runtime/dtype.h"
#include "runtime/settings.h"
#include "runtime/status.h"

namespace sluice {

// Batch sizes after DeepSpeed's inference (train_batch_size == micro * accumulation * dp world).
struct BatchConfig {
  int64_t train_batch_size{};
  int64_t micro_batch_per_gpu{};
  int64_t gradient_accumulation_steps{};
};

enum class SchedulerType { kNone, kWarmupLR, kWarmupDecayLR, kWarmupCosineLR };
enum class WarmupType { kLog, kLinear };
struct SchedulerConfig {
  SchedulerType type{};
  // Only the fields of `type` are meaningful (see SchedulerParamNames()).
  double warmup_min_lr{};
  double warmup_max_lr{};  // resolved: WarmupLR -> optimizer lr, WarmupDecayLR -> 0.001
  int64_t warmup_num_steps{};
  WarmupType warmup_type{};
  int64_t total_num_steps{};
  double warmup_min_ratio{};
  double cos_min_ratio{};
  int64_t last_batch_iteration{};
};

struct Fp16Config {
  bool enabled{};
  double loss_scale{};  // 0 = dynamic
  int initial_scale_power{};
  int64_t loss_scale_window{};
  int hysteresis{};
  double min_loss_scale{};
};

struct Bf16Config {
  bool enabled{};
};

// Bucket and threshold sizes are element counts, as in DeepSpeed.
struct ZeroConfig {
  int stage{};
  bool overlap_comm{};  // resolved: true iff stage 3 unless given
  bool contiguous_gradients{};
  int64_t reduce_bucket_size{};
  int64_t allgather_bucket_size{};
  int64_t sub_group_size{};
  int64_t stage3_prefetch_bucket_size{};
  int64_t stage3_param_persistence_threshold{};
  int64_t stage3_max_live_parameters{};
  int64_t stage3_max_reuse_distance{};
  bool stage3_gather_16bit_weights_on_model_save{};
  OffloadOptimizerConfig offload_optimizer;
  OffloadParamConfig offload_param;
};

// DeepSpeed's activation_checkpointing section: how checkpointed blocks run, once
// model.activation_checkpointing turns checkpointing on (docs/config.md).
struct ActivationCheckpointingConfig {
  bool partition_activations{};
  bool cpu_checkpointing{};
  bool contiguous_memory_optimization{};
  bool synchronize_checkpoint_boundary{};
  bool profile{};
  std::optional<int64_t> number_checkpoints;
};

enum class TagValidation { kIgnore, kWarn, kFail };
struct CheckpointConfig {
  TagValidation tag_validation{};
  bool load_universal{};
  bool use_node_local_storage{};
  int64_t save_interval{};         // optimizer steps; 0 = never
  int64_t keep_last{};             // 0 keeps all
  bool save_final{};               // also after the last step, without save_interval
  std::optional<std::string> dir;  // unset: RUN_DIR/checkpoints
};

enum class ModelFamily { kGpt2, kLlama };
struct ModelConfig {
  bool present = false;  // the file had a model section (config check accepts configs without)
  ModelFamily family{};
  int64_t n_layer{};
  int64_t n_head{};
  int64_t n_kv_head{};
  int64_t d_model{};
  int64_t d_ff{};
  int64_t vocab_size{};
  int64_t seq_len{};
  // gpt2: rows of the position table, >= seq_len (resolved; 0 in a Config built in code: seq_len)
  int64_t max_position_embeddings{};
  double rope_theta{};
  double norm_eps{};
  bool tie_embeddings{};
  DType dtype{};
  // How the linear layers multiply fp32 matrices: fp32, tf32 or bf16 (ops::ParseMatmulPrecision).
  std::string matmul_precision{};
  std::optional<std::string> init_from;
  double init_std{};
  // Checkpoint decoder blocks; the activation_checkpointing section says how.
  bool activation_checkpointing{};
};

enum class DataFormat { kText, kNanogptU16, kLlmcBin, kAuto };
struct DataConfig {
  std::optional<std::string> train_path;  // files are not opened by config loading
  std::optional<std::string> val_path;
  DataFormat format{};
  double val_fraction{};
  int64_t seed{};
  int64_t eval_batches{};
};

enum class DeviceType { kCpu, kCuda };
struct DeviceConfig {
  DeviceType type{};
  int index{};
  std::optional<int64_t> memory_limit;  // bytes; nullopt = the whole GPU (cuda only)
  int64_t host_memory_limit{};          // bytes, resolved
  int threads{};                        // 0 = all cores
  // The GEMM of the CPU ops (kernels/cpu/gemm.h): OpenBLAS, or the fixed-order GemmFixed whose
  // bits do not depend on the CPU or the thread count. GemmBackendName spells it as the setting.
  kernels::cpu::GemmBackend cpu_gemm{};
  std::string memory_protection{};  // device.memory_protection: off, on, auto
};

struct RunConfig {
  std::string dir{};
  int64_t steps{};
  int64_t seed{};
  int64_t eval_interval{};  // 0 = never
  int64_t log_interval{};
  std::string log_level{};
  double comm_timeout_s{};
  bool trace{};
  bool profile_ops{};  // device time per op of the ops table (runtime/ops/profiled_ops_backend.h)
};

// DeepSpeed's tensorboard and csv_monitor sections (engine/train/monitor.h): rank 0 writes the
// run's scalars into output_path/job_name.
struct MonitorConfig {
  bool enabled{};
  std::string output_path;  // "": the working directory (DeepSpeed's default)
  std::string job_name{};
};

// The model-parallel sizes of the process grid (engine/parallel/process_grid.h).
struct ParallelConfig {
  int tensor{};                    // tensor_parallel.autotp_size (0 given reads 1)
  int pipeline{};                  // pipeline.stages
  bool sequence_parallel{};        // tensor_parallel.sequence_parallel
  std::string schedule{};          // pipeline.schedule: 1f1b, gpipe, interleaved-1f1b, zb-h1
  int chunks{};                    // pipeline.chunks: model chunks per stage
  std::string partition_method{};  // pipeline.partition_method: parameters, uniform
};

// A section's fields hold no defaults of their own: every setting's default is declared once, in
// the settings registry (config_schema.cpp), and a section on its own is blank. Take sections
// from a Config: Config() is the registry's defaults, LoadConfig the layered files.
struct Config {
  // The registry's defaults: what a config file that gives only train_micro_batch_size_per_gpu 1
  // resolves to on one rank (no model section; device.host_memory_limit "auto" read from this
  // machine once per process).
  Config();
  // Blank sections, for the loader to fill from the settings.
  struct Blank {};
  explicit Config(Blank) {}

  int world_size = 1;
  int dp_world_size = 1;  // world_size / (parallel.tensor * parallel.pipeline)
  ParallelConfig parallel;
  BatchConfig batch;
  std::optional<int64_t> steps_per_print;  // nullopt = never
  double gradient_clipping{};              // 0 = off
  // How stages 0 and 1 scale the gradients around their all-reduce
  // (engine/zero/gradient_scaling.h); values other than these defaults are refused at stages 2
  // and 3, as DeepSpeed refuses them.
  bool prescale_gradients{};
  double gradient_predivide_factor{};
  // DeepSpeed's gate for optimizers it has not tested with ZeRO: Lamb at stages 1-3 needs it.
  bool zero_allow_untested_optimizer{};
  bool wall_clock_breakdown{};
  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  Fp16Config fp16;
  Bf16Config bf16;
  ZeroConfig zero;
  AioConfig aio;
  ActivationCheckpointingConfig activation_checkpointing;
  CheckpointConfig checkpoint;
  ModelConfig model;
  DataConfig data;
  DeviceConfig device;
  RunConfig run;
  MonitorConfig tensorboard;
  MonitorConfig csv_monitor;

  std::vector<std::string> source_files;   // the layers in order (config files, then --model)
  std::string source_file;                 // source_files joined by " + " ("" when none)
  std::vector<std::string> notes;          // aliases honoured, deprecated keys mapped, no-op keys
  SettingValues values{ConfigRegistry()};  // every setting with its source, for the record
};

struct ConfigSources {
  // Config files layered in order, a later file winning key by key; none = defaults only.
  std::vector<std::string> paths;
  // Optional: a --model file, the last file layer. A document with a top-level `model:` key is
  // layered as it is (it may carry data/device/run or any other section beside it); any other
  // mapping is the model section itself (`family: gpt2`, `n_layer: 4`, ...) and is read as
  // `model: {...}`.
  std::string model_path;
  // Environment as NAME=VALUE pairs; nullopt reads the process environment (SLUICE_CFG_*).
  std::optional<std::vector<std::pair<std::string, std::string>>> env;
  std::vector<std::string> set_overrides;  // "key=value", applied last, in order
  int world_size = 1;
  // Bytes of available host RAM for device.host_memory_limit "auto"; nullopt reads
  // MemAvailable from /proc/meminfo.
  std::optional<int64_t> available_host_memory;
};

// Reads every layer, merges (defaults < files in order < --model file < env < --set), resolves
// and validates. A value's origin (in messages and ConfigToText) is the layer that set it last.
Result<Config> LoadConfig(const ConfigSources& sources);
// The same for already parsed layers; sources.paths and sources.model_path are not read.
Result<Config> LoadConfigFromLayers(const std::vector<ConfigLayer>& layers,
                                    const ConfigSources& sources);
// One parsed document (tests; `source_name` names it in messages).
Result<Config> LoadConfigFromTree(const ConfigNode& root, std::string_view source_name,
                                  const ConfigSources& sources);
Result<Config> LoadConfigFromText(std::string_view text, ConfigFormat format,
                                  const ConfigSources& sources,
                                  std::string_view source_name = "<config>");

// `sluice config check --all`, for migrating a DeepSpeed config: every key Sluice will not run
// at once. A key that cannot be applied (unknown, an unsupported DeepSpeed key or value, a wrong
// type or range) does not stop the load: its error joins `problems`, in the order given, and the
// other keys are applied. When every key applied, the rules over several keys run too; a failure
// there is the one problem. Fails only when a file cannot be read or parsed.
struct ConfigCheckReport {
  std::vector<Status> problems;
  std::optional<Config> config;  // set iff problems is empty
};
Result<ConfigCheckReport> CheckConfigAll(const ConfigSources& sources);
// The same for already parsed layers (tests).
ConfigCheckReport CheckConfigLayersAll(const std::vector<ConfigLayer>& layers,
                                       const ConfigSources& sources);

// `sluice train --help-config` / `sluice config help`: every setting with type, default, doc.
std::string HelpConfigText();
// The same as a Markdown table (docs/config.md).
std::string HelpConfigMarkdown();
// The record stored in checkpoints and benchmark results: every setting with its value and
// source (default, file, env, --set, derived) and how "auto"/derived values were resolved.
nlohmann::ordered_json ConfigRecordJson(const Config& config);
// Readable YAML-like listing of the resolved config with each value's source as a comment.
std::string ConfigToText(const Config& config);

std::string_view DeviceTypeName(DeviceType type);

}  // namespace sluice
