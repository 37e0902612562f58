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
#include "kernels/cpu/gemm.h"
#include "runtime/dtype.h"
#include "runtime/settings.h"
#include "runtime/status.h"

namespace sluice {

// Batch sizes after DeepSpeed's inference (train_batch_size == micro * accumulation * dp world).
struct BatchConfig {
  int64_t train_batch_size = 0;
  int64_t micro_batch_per_gpu = 0;
  int64_t gradient_accumulation_steps = 0;
};

// Lion (kernels/ref/lion_ref.h) keeps one moment (exp_avg), Adam, AdamW and Lamb
// (kernels/ref/lamb_ref.h) two.
enum class OptimizerType { kAdam, kAdamW, kLion, kLamb };
struct OptimizerConfig {
  OptimizerType type = OptimizerType::kAdamW;  // as written ("adam" and "Adam" are kAdam)
  // Effective decoupled weight decay: type AdamW, or Adam with adam_w_mode (DeepSpeed's rule).
  // Adam only: Lion always decouples its weight decay.
  bool adam_w_mode = true;
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;  // Adam and Lamb
  double weight_decay = 0.0;
  bool bias_correction = true;  // Adam and Lamb; off: the moments are used without 1 - beta^t
  // Lamb only (DeepSpeed's FusedLamb): the trust ratio's clamp, and eps under the square root.
  double max_coeff = 10.0;
  double min_coeff = 0.01;
  bool eps_inside_sqrt = false;
};

// "Adam", "AdamW", "Lion", "Lamb": the config's spelling (optimizer.type), for messages and
// checkpoints.
std::string_view OptimizerTypeName(OptimizerType type);
// The moment tensors the optimizer keeps per element besides the fp32 master weights: 2 for Adam,
// AdamW and Lamb (exp_avg, exp_avg_sq), 1 for Lion (exp_avg).
inline int OptimizerMoments(OptimizerType type) { return type == OptimizerType::kLion ? 1 : 2; }

enum class SchedulerType { kNone, kWarmupLR, kWarmupDecayLR, kWarmupCosineLR };
enum class WarmupType { kLog, kLinear };
struct SchedulerConfig {
  SchedulerType type = SchedulerType::kNone;
  // Only the fields of `type` are meaningful (see SchedulerParamNames()).
  double warmup_min_lr = 0.0;
  double warmup_max_lr = 0.0;  // resolved: WarmupLR -> optimizer lr, WarmupDecayLR -> 0.001
  int64_t warmup_num_steps = 1000;
  WarmupType warmup_type = WarmupType::kLog;
  int64_t total_num_steps = 0;
  double warmup_min_ratio = 0.0;
  double cos_min_ratio = 1e-4;
  int64_t last_batch_iteration = -1;
};

struct Fp16Config {
  bool enabled = false;
  double loss_scale = 0.0;  // 0 = dynamic
  int initial_scale_power = 16;
  int64_t loss_scale_window = 1000;
  int hysteresis = 2;
  double min_loss_scale = 1.0;
};

struct Bf16Config {
  bool enabled = false;
};

enum class OffloadDevice { kNone, kCpu, kNvme };
struct OffloadOptimizerConfig {
  OffloadDevice device = OffloadDevice::kNone;
  std::string nvme_path;  // set iff device == kNvme
  bool pin_memory = true;
  int buffer_count = 4;
  // The fraction of the optimizer state that is offloaded (DeepSpeed's Twin-Flow meaning): with
  // the shard cut into N tiles, tiles from floor((1 - ratio) x N) on are offloaded and the first
  // ones stay on the device, stepped there (engine/zero/split_optimizer.h). 1 = all offloaded;
  // below 1 needs stage 3.
  double ratio = 1.0;
  // ratio "auto" (`ratio` then reads 1): chosen when the engine is created, from the measured
  // throughput of device Adam and offloaded Adam and capped by auto_state_budget
  // (engine/zero/offload_ratio.h).
  bool ratio_auto = false;
  // ratio "auto": the device bytes the optimizer's device part may hold on each rank (what the
  // device budget leaves once the memory estimate of the rest of the engine is counted,
  // estimate::ResolveAutoRatioBudget); -1 = not known: half the device memory still free when
  // the optimizer is created.
  int64_t auto_state_budget = -1;
  // On by default, unlike DeepSpeed (docs/config.md: deliberate differences).
  bool pipeline_read = true;
  bool pipeline_write = true;

  // A partial offload (engine/zero/split_optimizer.h): offloaded, with a ratio below 1 or "auto".
  bool partial() const { return device != OffloadDevice::kNone && (ratio < 1.0 || ratio_auto); }
};

struct OffloadParamConfig {
  OffloadDevice device = OffloadDevice::kNone;
  std::string nvme_path;  // set iff device == kNvme
  bool pin_memory = true;
  int buffer_count = 5;
  int64_t buffer_size = 100000000;  // elements, not bytes (as in DeepSpeed)
  int64_t max_in_cpu = 1000000000;  // elements
};

// Bucket and threshold sizes are element counts, as in DeepSpeed.
struct ZeroConfig {
  int stage = 0;
  bool overlap_comm = false;  // resolved: true iff stage 3 unless given
  bool contiguous_gradients = true;
  int64_t reduce_bucket_size = 500000000;
  int64_t allgather_bucket_size = 500000000;
  int64_t sub_group_size = 1000000000;
  int64_t stage3_prefetch_bucket_size = 50000000;
  int64_t stage3_param_persistence_threshold = 100000;
  int64_t stage3_max_live_parameters = 1000000000;
  int64_t stage3_max_reuse_distance = 1000000000;
  bool stage3_gather_16bit_weights_on_model_save = false;
  OffloadOptimizerConfig offload_optimizer;
  OffloadParamConfig offload_param;
};

struct AioConfig {
  int64_t block_size = 1048576;  // bytes
  int queue_depth = 8;
  int intra_op_parallelism = 1;
  bool single_submit = false;
  bool overlap_events = true;
};

// DeepSpeed's activation_checkpointing section: how checkpointed blocks run, once
// model.activation_checkpointing turns checkpointing on (docs/config.md).
struct ActivationCheckpointingConfig {
  bool partition_activations = false;
  bool cpu_checkpointing = false;
  bool contiguous_memory_optimization = false;
  bool synchronize_checkpoint_boundary = false;
  bool profile = false;
  std::optional<int64_t> number_checkpoints;
};

enum class TagValidation { kIgnore, kWarn, kFail };
struct CheckpointConfig {
  TagValidation tag_validation = TagValidation::kWarn;
  bool load_universal = false;
  bool use_node_local_storage = false;
  int64_t save_interval = 0;       // optimizer steps; 0 = never
  int64_t keep_last = 0;           // 0 keeps all
  bool save_final = true;          // also after the last step, without save_interval
  std::optional<std::string> dir;  // unset: RUN_DIR/checkpoints
};

enum class ModelFamily { kGpt2, kLlama };
struct ModelConfig {
  bool present = false;  // the file had a model section (config check accepts configs without)
  ModelFamily family = ModelFamily::kGpt2;
  int64_t n_layer = 2;
  int64_t n_head = 4;
  int64_t n_kv_head = 4;
  int64_t d_model = 64;
  int64_t d_ff = 256;
  int64_t vocab_size = 256;
  int64_t seq_len = 64;
  // gpt2: rows of the position table, >= seq_len (resolved; 0 in a Config built in code: seq_len)
  int64_t max_position_embeddings = 0;
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;
  bool tie_embeddings = true;
  DType dtype = DType::kF32;
  std::optional<std::string> init_from;
  double init_std = 0.02;
  // Checkpoint decoder blocks; the activation_checkpointing section says how.
  bool activation_checkpointing = false;
};

enum class DataFormat { kText, kNanogptU16, kLlmcBin, kAuto };
struct DataConfig {
  std::optional<std::string> train_path;  // files are not opened by config loading
  std::optional<std::string> val_path;
  DataFormat format = DataFormat::kAuto;
  double val_fraction = 0.1;
  int64_t seed = 1234;
  int64_t eval_batches = 8;
};

enum class DeviceType { kCpu, kCuda };
struct DeviceConfig {
  DeviceType type = DeviceType::kCuda;
  int index = 0;
  std::optional<int64_t> memory_limit;  // bytes; nullopt = the whole GPU (cuda only)
  int64_t host_memory_limit = 0;        // bytes, resolved
  int threads = 0;                      // 0 = all cores
  // The GEMM of the CPU ops (kernels/cpu/gemm.h): OpenBLAS, or the fixed-order GemmFixed whose
  // bits do not depend on the CPU or the thread count. GemmBackendName spells it as the setting.
  kernels::cpu::GemmBackend cpu_gemm = kernels::cpu::GemmBackend::kDeterministic;
  std::string memory_protection = "auto";  // device.memory_protection: off, on, auto
};

struct RunConfig {
  std::string dir = "runs/default";
  int64_t steps = 100;
  int64_t seed = 1234;
  int64_t eval_interval = 100;  // 0 = never
  int64_t log_interval = 10;
  std::string log_level = "info";
  double comm_timeout_s = 300.0;
  bool trace = false;
};

// DeepSpeed's tensorboard and csv_monitor sections (engine/train/monitor.h): rank 0 writes the
// run's scalars into output_path/job_name.
struct MonitorConfig {
  bool enabled = false;
  std::string output_path;  // "": the working directory (DeepSpeed's default)
  std::string job_name = "DeepSpeedJobName";
};

// The model-parallel sizes of the process grid (engine/parallel/process_grid.h).
struct ParallelConfig {
  int tensor = 1;    // tensor_parallel.autotp_size (0 given reads 1)
  int pipeline = 1;  // pipeline.stages
};

struct Config {
  int world_size = 1;
  int dp_world_size = 1;  // world_size / (parallel.tensor * parallel.pipeline)
  ParallelConfig parallel;
  BatchConfig batch;
  std::optional<int64_t> steps_per_print;  // nullopt = never
  double gradient_clipping = 1.0;          // 0 = off
  // How stages 0 and 1 scale the gradients around their all-reduce
  // (engine/zero/gradient_scaling.h); values other than these defaults are refused at stages 2
  // and 3, as DeepSpeed refuses them.
  bool prescale_gradients = false;
  double gradient_predivide_factor = 1.0;
  // DeepSpeed's gate for optimizers it has not tested with ZeRO: Lamb at stages 1-3 needs it.
  bool zero_allow_untested_optimizer = false;
  bool wall_clock_breakdown = false;
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

std::string_view OffloadDeviceName(OffloadDevice device);
std::string_view DeviceTypeName(DeviceType type);

}  // namespace sluice
