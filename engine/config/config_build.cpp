// Resolved setting values -> the typed Config sections the engine reads.
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

#include "engine/config/config.h"
#include "engine/config/config_stages.h"
#include "runtime/logging.h"

namespace sluice {
namespace {

OffloadDevice ToOffloadDevice(const std::string& name) {
  if (name == "cpu") return OffloadDevice::kCpu;
  if (name == "nvme") return OffloadDevice::kNvme;
  return OffloadDevice::kNone;
}

// Settings the engine keeps in an int are narrowed here, and checked here: the schema bounds some
// of them, but a value past INT_MAX would otherwise wrap (device.threads 4294967297 became 1).
// The first failure is kept in `*status`.
int ToInt(const SettingValues& v, std::string_view path, Status* status) {
  const int64_t value = v.GetInt(path);
  if (value >= std::numeric_limits<int>::min() && value <= std::numeric_limits<int>::max()) {
    return static_cast<int>(value);
  }
  if (status->ok()) {
    const std::string& origin = v.entry(path).origin;
    *status = OutOfRangeError("{}{}: {} is out of range: allowed at most {}",
                              origin.empty() ? "" : origin + ": ", path, value,
                              std::numeric_limits<int>::max());
  }
  return 0;
}

void BuildBatchAndTopLevel(const SettingValues& v, Config* c) {
  c->batch.train_batch_size = v.GetInt("train_batch_size");
  c->batch.micro_batch_per_gpu = v.GetInt("train_micro_batch_size_per_gpu");
  c->batch.gradient_accumulation_steps = v.GetInt("gradient_accumulation_steps");
  c->gradient_clipping = v.GetFloat("gradient_clipping");
  c->prescale_gradients = v.GetBool("prescale_gradients");
  c->gradient_predivide_factor = v.GetFloat("gradient_predivide_factor");
  c->zero_allow_untested_optimizer = v.GetBool("zero_allow_untested_optimizer");
  c->steps_per_print = v.FindInt("steps_per_print");
  c->wall_clock_breakdown = v.GetBool("wall_clock_breakdown");
}

void BuildOptimizer(const SettingValues& v, Config* c) {
  OptimizerConfig& o = c->optimizer;
  const std::string& type = v.GetString("optimizer.type");
  o.type = type == "Adam"   ? OptimizerType::kAdam
           : type == "Lion" ? OptimizerType::kLion
           : type == "Lamb" ? OptimizerType::kLamb
                            : OptimizerType::kAdamW;
  bool adam_w_mode = v.GetBool("optimizer.params.adam_w_mode");
  o.adam_w_mode = o.type != OptimizerType::kAdam || adam_w_mode;
  o.lr = v.GetFloat("optimizer.params.lr");
  const std::vector<double>& betas = v.GetFloatList("optimizer.params.betas");
  o.beta1 = betas[0];
  o.beta2 = betas[1];
  o.eps = v.GetFloat("optimizer.params.eps");
  o.weight_decay = v.GetFloat("optimizer.params.weight_decay");
  o.bias_correction = v.GetBool("optimizer.params.bias_correction");
  o.max_coeff = v.GetFloat("optimizer.params.max_coeff");
  o.min_coeff = v.GetFloat("optimizer.params.min_coeff");
  o.eps_inside_sqrt = v.GetBool("optimizer.params.eps_inside_sqrt");
}

void BuildScheduler(const SettingValues& v, Config* c) {
  SchedulerConfig& s = c->scheduler;
  std::optional<std::string> type = v.FindString("scheduler.type");
  s.type = !type                      ? SchedulerType::kNone
           : *type == "WarmupLR"      ? SchedulerType::kWarmupLR
           : *type == "WarmupDecayLR" ? SchedulerType::kWarmupDecayLR
                                      : SchedulerType::kWarmupCosineLR;
  // Parameters that do not apply to the type were cleared during resolution: they read as the
  // registry's default, or 0 where the setting has none.
  auto param = [&v]<typename T>(std::string_view path, T blank) -> T {
    const SettingValue& fallback = v.registry().Get(path).default_value;
    if constexpr (std::is_same_v<T, double>) {
      return v.FindFloat(path).value_or(
          std::holds_alternative<double>(fallback) ? std::get<double>(fallback) : blank);
    } else if constexpr (std::is_same_v<T, int64_t>) {
      return v.FindInt(path).value_or(
          std::holds_alternative<int64_t>(fallback) ? std::get<int64_t>(fallback) : blank);
    } else {
      return v.FindString(path).value_or(
          std::holds_alternative<std::string>(fallback) ? std::get<std::string>(fallback) : blank);
    }
  };
  s.warmup_min_lr = param("scheduler.params.warmup_min_lr", 0.0);
  s.warmup_max_lr = param("scheduler.params.warmup_max_lr", 0.0);
  s.warmup_num_steps = param("scheduler.params.warmup_num_steps", int64_t{0});
  s.warmup_type = param("scheduler.params.warmup_type", std::string()) == "linear"
                      ? WarmupType::kLinear
                      : WarmupType::kLog;
  s.total_num_steps = param("scheduler.params.total_num_steps", int64_t{0});
  s.warmup_min_ratio = param("scheduler.params.warmup_min_ratio", 0.0);
  s.cos_min_ratio = param("scheduler.params.cos_min_ratio", 0.0);
  s.last_batch_iteration = param("scheduler.params.last_batch_iteration", int64_t{0});
}

void BuildPrecision(const SettingValues& v, Config* c, Status* status) {
  c->fp16.enabled = v.GetBool("fp16.enabled");
  c->fp16.loss_scale = v.GetFloat("fp16.loss_scale");
  c->fp16.initial_scale_power = ToInt(v, "fp16.initial_scale_power", status);
  c->fp16.loss_scale_window = v.GetInt("fp16.loss_scale_window");
  c->fp16.hysteresis = ToInt(v, "fp16.hysteresis", status);
  c->fp16.min_loss_scale = v.GetFloat("fp16.min_loss_scale");
  c->bf16.enabled = v.GetBool("bf16.enabled");
}

void BuildZero(const SettingValues& v, Config* c, Status* status) {
  ZeroConfig& z = c->zero;
  z.stage = ToInt(v, "zero_optimization.stage", status);
  z.overlap_comm = v.GetBool("zero_optimization.overlap_comm");
  z.contiguous_gradients = v.GetBool("zero_optimization.contiguous_gradients");
  z.reduce_bucket_size = v.GetInt("zero_optimization.reduce_bucket_size");
  z.allgather_bucket_size = v.GetInt("zero_optimization.allgather_bucket_size");
  z.sub_group_size = v.GetInt("zero_optimization.sub_group_size");
  z.stage3_prefetch_bucket_size = v.GetInt("zero_optimization.stage3_prefetch_bucket_size");
  z.stage3_param_persistence_threshold =
      v.GetInt("zero_optimization.stage3_param_persistence_threshold");
  z.stage3_max_live_parameters = v.GetInt("zero_optimization.stage3_max_live_parameters");
  z.stage3_max_reuse_distance = v.GetInt("zero_optimization.stage3_max_reuse_distance");
  z.stage3_gather_16bit_weights_on_model_save =
      v.GetBool("zero_optimization.stage3_gather_16bit_weights_on_model_save");

  OffloadOptimizerConfig& oo = z.offload_optimizer;
  oo.device = ToOffloadDevice(v.GetString("zero_optimization.offload_optimizer.device"));
  std::optional<std::string> oo_path =
      v.FindString("zero_optimization.offload_optimizer.nvme_path");
  if (oo.device == OffloadDevice::kNvme) oo.nvme_path = oo_path.value_or("");
  oo.pin_memory = v.GetBool("zero_optimization.offload_optimizer.pin_memory");
  oo.buffer_count = ToInt(v, "zero_optimization.offload_optimizer.buffer_count", status);
  // "auto" stays unresolved until the engine measures (config_resolve.cpp): no value yet.
  oo.ratio_auto = v.IsAuto("zero_optimization.offload_optimizer.ratio");
  oo.ratio = v.FindFloat("zero_optimization.offload_optimizer.ratio").value_or(1.0);
  oo.pipeline_read = v.GetBool("zero_optimization.offload_optimizer.pipeline_read");
  oo.pipeline_write = v.GetBool("zero_optimization.offload_optimizer.pipeline_write");

  OffloadParamConfig& op = z.offload_param;
  op.device = ToOffloadDevice(v.GetString("zero_optimization.offload_param.device"));
  std::optional<std::string> op_path = v.FindString("zero_optimization.offload_param.nvme_path");
  if (op.device == OffloadDevice::kNvme) op.nvme_path = op_path.value_or("");
  op.pin_memory = v.GetBool("zero_optimization.offload_param.pin_memory");
  op.buffer_count = ToInt(v, "zero_optimization.offload_param.buffer_count", status);
  op.buffer_size = v.GetInt("zero_optimization.offload_param.buffer_size");
  op.max_in_cpu = v.GetInt("zero_optimization.offload_param.max_in_cpu");
}

void BuildAio(const SettingValues& v, Config* c, Status* status) {
  c->aio.block_size = v.GetInt("aio.block_size");
  c->aio.queue_depth = ToInt(v, "aio.queue_depth", status);
  c->aio.intra_op_parallelism = ToInt(v, "aio.intra_op_parallelism", status);
  c->aio.single_submit = v.GetBool("aio.single_submit");
  c->aio.overlap_events = v.GetBool("aio.overlap_events");
}

void BuildParallel(const SettingValues& v, Config* c, Status* status) {
  c->parallel.tensor = std::max(1, ToInt(v, "tensor_parallel.autotp_size", status));
  c->parallel.pipeline = ToInt(v, "pipeline.stages", status);
  c->parallel.sequence_parallel = v.GetBool("tensor_parallel.sequence_parallel");
  c->parallel.schedule = v.GetString("pipeline.schedule");
  c->parallel.chunks = ToInt(v, "pipeline.chunks", status);
  c->parallel.partition_method = v.GetString("pipeline.partition_method");
}

void Note(Config* c, std::string text) {
  if (LogEnabled(LogLevel::kInfo, "config")) LogMessage(LogLevel::kInfo, "config", text);
  c->notes.push_back(std::move(text));
}

// In DeepSpeed the model code decides which layers to checkpoint and the activation_checkpointing
// section how; in Sluice model.activation_checkpointing decides (the model code is Sluice's) and
// the section says how. Real ds_configs carry the section whether or not the model checkpoints,
// so a section without checkpointing is not an error: one line says it is unused.
void NoteCheckpointing(const SettingValues& v, Config* c) {
  std::string first_given;  // where the section's first given key was set
  for (const SettingSpec& spec : v.registry().settings()) {
    if (spec.path.rfind("activation_checkpointing.", 0) != 0) continue;
    const SettingEntry& entry = v.entry(spec.path);
    if (entry.source == ValueSource::kDefault || entry.source == ValueSource::kDerived) continue;
    first_given = entry.origin.empty() ? spec.path : entry.origin;
    break;
  }
  const ActivationCheckpointingConfig& a = c->activation_checkpointing;
  if (!v.GetBool("model.activation_checkpointing")) {
    if (!first_given.empty()) {
      Note(c, fmt::format("{}: the activation_checkpointing section is unused: it says how "
                          "checkpointed blocks run, and model.activation_checkpointing is false, "
                          "so no block is checkpointed (set model.activation_checkpointing: true "
                          "to use it)",
                          first_given));
    }
    return;
  }
  if (a.partition_activations) {
    Note(c,
         "activation_checkpointing.partition_activations: true is a no-op: it splits checkpointed "
         "inputs across tensor-parallel ranks, and Sluice runs without tensor parallelism (tp = "
         "1)");
  }
  const int64_t n_layer = v.GetInt("model.n_layer");
  if (a.number_checkpoints.has_value() && *a.number_checkpoints > n_layer) {
    Note(c, fmt::format("activation_checkpointing.number_checkpoints = {} is more than "
                        "model.n_layer = {}: every block is checkpointed",
                        *a.number_checkpoints, n_layer));
  }
}

void BuildCheckpointing(const SettingValues& v, Config* c) {
  ActivationCheckpointingConfig& a = c->activation_checkpointing;
  a.partition_activations = v.GetBool("activation_checkpointing.partition_activations");
  a.cpu_checkpointing = v.GetBool("activation_checkpointing.cpu_checkpointing");
  a.contiguous_memory_optimization =
      v.GetBool("activation_checkpointing.contiguous_memory_optimization");
  a.synchronize_checkpoint_boundary =
      v.GetBool("activation_checkpointing.synchronize_checkpoint_boundary");
  a.profile = v.GetBool("activation_checkpointing.profile");
  a.number_checkpoints = v.FindInt("activation_checkpointing.number_checkpoints");
  NoteCheckpointing(v, c);

  const std::string& tag = v.GetString("checkpoint.tag_validation");
  c->checkpoint.tag_validation = tag == "Ignore" ? TagValidation::kIgnore
                                 : tag == "Fail" ? TagValidation::kFail
                                                 : TagValidation::kWarn;
  c->checkpoint.load_universal = v.GetBool("checkpoint.load_universal");
  c->checkpoint.use_node_local_storage = v.GetBool("checkpoint.use_node_local_storage");
  c->checkpoint.save_interval = v.GetInt("checkpoint.save_interval");
  c->checkpoint.keep_last = v.GetInt("checkpoint.keep_last");
  c->checkpoint.save_final = v.GetBool("checkpoint.save_final");
  c->checkpoint.dir = v.FindString("checkpoint.dir");
}

void BuildModel(const SettingValues& v, Config* c) {
  ModelConfig& m = c->model;
  m.present = false;
  for (const SettingSpec& spec : v.registry().settings()) {
    if (spec.path.rfind("model.", 0) == 0) {
      ValueSource source = v.entry(spec.path).source;
      if (source == ValueSource::kFile || source == ValueSource::kEnv ||
          source == ValueSource::kSet) {
        m.present = true;
      }
    }
  }
  m.family = v.GetString("model.family") == "llama" ? ModelFamily::kLlama : ModelFamily::kGpt2;
  m.n_layer = v.GetInt("model.n_layer");
  m.n_head = v.GetInt("model.n_head");
  m.n_kv_head = v.GetInt("model.n_kv_head");
  m.d_model = v.GetInt("model.d_model");
  m.d_ff = v.GetInt("model.d_ff");
  m.vocab_size = v.GetInt("model.vocab_size");
  m.seq_len = v.GetInt("model.seq_len");
  m.max_position_embeddings = v.GetInt("model.max_position_embeddings");
  m.rope_theta = v.GetFloat("model.rope_theta");
  m.norm_eps = v.GetFloat("model.norm_eps");
  m.tie_embeddings = v.GetBool("model.tie_embeddings");
  const std::string& dtype = v.GetString("model.dtype");
  m.dtype = dtype == "bf16" ? DType::kBF16 : dtype == "f16" ? DType::kF16 : DType::kF32;
  m.matmul_precision = v.GetString("model.matmul_precision");
  m.init_from = v.FindString("model.init_from");
  m.init_std = v.GetFloat("model.init_std");
  m.activation_checkpointing = v.GetBool("model.activation_checkpointing");
}

void BuildData(const SettingValues& v, Config* c) {
  DataConfig& d = c->data;
  d.train_path = v.FindString("data.train_path");
  d.val_path = v.FindString("data.val_path");
  const std::string& format = v.GetString("data.format");
  d.format = format == "text"          ? DataFormat::kText
             : format == "nanogpt_u16" ? DataFormat::kNanogptU16
             : format == "llmc_bin"    ? DataFormat::kLlmcBin
                                       : DataFormat::kAuto;
  d.val_fraction = v.GetFloat("data.val_fraction");
  d.seed = v.GetInt("data.seed");
  d.eval_batches = v.GetInt("data.eval_batches");
}

void BuildDeviceAndRun(const SettingValues& v, Config* c, Status* status) {
  c->device.type = v.GetString("device.type") == "cpu" ? DeviceType::kCpu : DeviceType::kCuda;
  c->device.index = ToInt(v, "device.index", status);
  c->device.memory_limit = v.FindInt("device.memory_limit");
  c->device.host_memory_limit = v.GetInt("device.host_memory_limit");
  c->device.threads = ToInt(v, "device.threads", status);
  c->device.cpu_gemm = kernels::cpu::GemmBackendFromName(v.GetString("device.cpu_gemm"))
                           .value_or(kernels::cpu::GemmBackend::kBlas);
  c->device.memory_protection = v.GetString("device.memory_protection");

  c->run.dir = v.GetString("run.dir");
  c->run.steps = v.GetInt("run.steps");
  c->run.seed = v.GetInt("run.seed");
  c->run.eval_interval = v.GetInt("run.eval_interval");
  c->run.log_interval = v.GetInt("run.log_interval");
  c->run.log_level = v.GetString("run.log_level");
  c->run.comm_timeout_s = v.GetFloat("run.comm_timeout");
  c->run.trace = v.GetBool("run.trace");
  c->run.profile_ops = v.GetBool("run.profile_ops");
}

void BuildMonitors(const SettingValues& v, Config* c) {
  for (auto [section, monitor] :
       {std::pair{"tensorboard", &c->tensorboard}, std::pair{"csv_monitor", &c->csv_monitor}}) {
    const std::string prefix(section);
    monitor->enabled = v.GetBool(prefix + ".enabled");
    monitor->output_path = v.GetString(prefix + ".output_path");
    monitor->job_name = v.GetString(prefix + ".job_name");
  }
}

}  // namespace

Status BuildConfigSections(const SettingValues& values, Config* config) {
  Status status;
  BuildBatchAndTopLevel(values, config);
  BuildOptimizer(values, config);
  BuildScheduler(values, config);
  BuildPrecision(values, config, &status);
  BuildZero(values, config, &status);
  BuildAio(values, config, &status);
  BuildParallel(values, config, &status);
  BuildCheckpointing(values, config);
  BuildModel(values, config);
  BuildData(values, config);
  BuildDeviceAndRun(values, config, &status);
  BuildMonitors(values, config);
  return status;
}

}  // namespace sluice
