// Resolution of "auto" and derived values, DeepSpeed's batch-size inference, and the rules that
// involve more than one key. Runs once, after the file and all overrides are applied.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "engine/checkpoint/hf_config.h"
#include "engine/config/config_schema.h"
#include "engine/config/config_stages.h"
#include "engine/model/head_layout.h"
#include "engine/parallel/layer_partition.h"
#include "engine/parallel/process_grid.h"
#include "runtime/logging.h"

namespace sluice {
namespace {

// The Hugging Face Trainer's TrainingArguments defaults, which it writes over "auto".
constexpr int64_t kHfPerDeviceTrainBatchSize = 8;
constexpr double kHfLearningRate = 5e-5;

class Resolver {
 public:
  Resolver(const ResolveContext& context, SettingValues* values, std::vector<std::string>* notes)
      : context_(context), v_(*values), notes_(notes) {}

  Status Run() {
    model_present_ = AnyGivenUnder("model.");
    SLUICE_RETURN_IF_ERROR(Precision());
    SLUICE_RETURN_IF_ERROR(Model());
    SLUICE_RETURN_IF_ERROR(Zero());
    SLUICE_RETURN_IF_ERROR(GradientScaling());
    SLUICE_RETURN_IF_ERROR(Parallel());
    SLUICE_RETURN_IF_ERROR(Batch());
    SLUICE_RETURN_IF_ERROR(Optimizer());
    SLUICE_RETURN_IF_ERROR(Scheduler());
    SLUICE_RETURN_IF_ERROR(Device());
    SLUICE_RETURN_IF_ERROR(Data());
    return RemainingAutos();
  }

 private:
  template <typename... Args>
  Status Error(fmt::format_string<Args...> format, Args&&... args) {
    std::string message = fmt::format(format, std::forward<Args>(args)...);
    if (context_.source_name.empty()) return InvalidArgumentError("{}", message);
    return InvalidArgumentError("{}: {}", context_.source_name, message);
  }

  template <typename... Args>
  Status Unimplemented(fmt::format_string<Args...> format, Args&&... args) {
    std::string message = fmt::format(format, std::forward<Args>(args)...);
    if (context_.source_name.empty()) return UnimplementedError("{}", message);
    return UnimplementedError("{}: {}", context_.source_name, message);
  }

  void Note(LogLevel level, std::string text) {
    if (LogEnabled(level, "config")) LogMessage(level, "config", text);
    notes_->push_back(std::move(text));
  }

  // Where a key was set, for messages: " (set at cfg.yaml:3:5)".
  std::string At(std::string_view path) const {
    const SettingEntry& e = v_.entry(path);
    if (e.origin.empty()) return "";
    return fmt::format(" (set at {})", e.origin);
  }

  bool AnyGivenUnder(std::string_view prefix) const {
    for (const SettingSpec& spec : v_.registry().settings()) {
      if (spec.path.compare(0, prefix.size(), prefix) == 0 &&
          v_.entry(spec.path).source != ValueSource::kDefault) {
        return true;
      }
    }
    return false;
  }

  // Fills a value that is "auto" or was not given (a derived default).
  void Fill(std::string_view path, SettingValue value, std::string note) {
    if (v_.IsAuto(path) || !v_.HasValue(path)) v_.Resolve(path, std::move(value), std::move(note));
  }

  Status Precision() {
    bool dtype_given = v_.IsGiven("model.dtype");
    std::string dtype = dtype_given ? v_.GetString("model.dtype") : "";
    auto enabled_from_dtype = [&](std::string_view path, std::string_view want) {
      if (v_.IsAuto(path)) {
        bool on = dtype_given && dtype == want;
        v_.Resolve(path, on,
                   dtype_given ? fmt::format("model.dtype is {}", dtype)
                               : std::string("nothing enables it"));
      } else if (!v_.IsGiven(path) && dtype_given && dtype == want) {
        v_.Resolve(path, true, fmt::format("model.dtype is {}", dtype));
      }
    };
    if (dtype_given) {
      for (auto [path, want] :
           {std::pair<const char*, const char*>{"fp16.enabled", "f16"}, {"bf16.enabled", "bf16"}}) {
        if (!v_.IsGiven(path) || v_.GetBool(path) == (dtype == want)) continue;
        return Error(
            "model.dtype {}{} disagrees with {} {}{}: model.dtype follows the precision sections, "
            "so set only one of them",
            dtype, At("model.dtype"), path, v_.GetBool(path), At(path));
      }
    }
    enabled_from_dtype("fp16.enabled", "f16");
    enabled_from_dtype("bf16.enabled", "bf16");
    bool fp16 = v_.GetBool("fp16.enabled");
    bool bf16 = v_.GetBool("bf16.enabled");
    if (fp16 && bf16) {
      return Error(
          "bfloat16 and fp16 modes cannot be simultaneously enabled: fp16.enabled{} and "
          "bf16.enabled{} are both true; enable one",
          At("fp16.enabled"), At("bf16.enabled"));
    }
    if (dtype_given) return OkStatus();
    Fill("model.dtype",
         std::string(bf16   ? "bf16"
                     : fp16 ? "f16"
                            : "f32"),
         bf16   ? "bf16.enabled"
         : fp16 ? "fp16.enabled"
                : "neither fp16 nor bf16 is enabled");
    return OkStatus();
  }

  Status Model() {
    // The config.json beside model.init_from's weights decides what the user left unset.
    SLUICE_RETURN_IF_ERROR(checkpoint::ApplyHfModelConfig(context_.source_name, &v_, notes_));
    const std::string& family = v_.GetString("model.family");
    int64_t n_head = v_.GetInt("model.n_head");
    int64_t d_model = v_.GetInt("model.d_model");
    Fill("model.n_kv_head", n_head, "model.n_head");
    if (family == "gpt2") {
      Fill("model.d_ff", 4 * d_model, "gpt2: 4 * d_model");
      Fill("model.tie_embeddings", true, "gpt2 ties its embeddings");
    } else {
      int64_t hidden = (2 * 4 * d_model) / 3;
      int64_t rounded = (hidden + 255) / 256 * 256;
      Fill("model.d_ff", rounded, "llama: 8/3 * d_model rounded up to a multiple of 256");
      Fill("model.tie_embeddings", false, "llama does not tie its embeddings");
    }
    SLUICE_RETURN_IF_ERROR(Positions(family));
    const int64_t n_kv_head = v_.GetInt("model.n_kv_head");
    if (std::string error = model::HeadLayoutError(family == "llama", d_model, n_head, n_kv_head);
        !error.empty()) {
      std::string where;
      for (const char* key : {"model.family", "model.d_model", "model.n_head", "model.n_kv_head"}) {
        const std::string& origin = v_.entry(key).origin;
        if (!origin.empty()) where += fmt::format("; {} set at {}", key, origin);
      }
      return Error("{}{}", error, where.empty() ? "" : fmt::format(" ({})", where.substr(2)));
    }
    return OkStatus();
  }

  // model.max_position_embeddings: GPT-2's position table may be longer than the training
  // windows (a 1024-position model fine-tuned at 128), never shorter.
  Status Positions(const std::string& family) {
    const int64_t seq_len = v_.GetInt("model.seq_len");
    Fill("model.max_position_embeddings", seq_len, "model.seq_len");
    const int64_t positions = v_.GetInt("model.max_position_embeddings");
    if (positions >= seq_len) return OkStatus();
    const std::string where = At("model.max_position_embeddings");
    const std::string note = v_.entry("model.max_position_embeddings").note;
    const std::string from =
        where.empty() && !note.empty() ? fmt::format(" (from {})", note) : where;
    if (family == "gpt2") {
      return Error(
          "model.seq_len {}{} is longer than model.max_position_embeddings {}{}: gpt2 has a "
          "learned "
          "position for each token of a window; train with seq_len at most {}",
          seq_len, At("model.seq_len"), positions, from, positions);
    }
    Note(LogLevel::kWarn,
         fmt::format("model.seq_len {} is longer than model.max_position_embeddings {}{}: the "
                     "rotary embedding goes on, but the model never saw such positions",
                     seq_len, positions, from));
    return OkStatus();
  }

  // zero_optimization.offload_optimizer.ratio: a number in [0, 1] or "auto", which stays
  // unresolved here (the engine measures it, engine/zero/offload_ratio.h) unless nothing is
  // offloaded.
  Status OffloadRatio(int64_t stage, const std::string& opt_device) {
    constexpr const char* kRatio = "zero_optimization.offload_optimizer.ratio";
    const bool is_auto = v_.IsAuto(kRatio);
    if (is_auto && opt_device == "none") {
      v_.Resolve(kRatio, 1.0, "offload_optimizer.device is none: nothing is offloaded");
      return OkStatus();
    }
    const double ratio = is_auto ? 1.0 : v_.GetFloat(kRatio);
    const std::string shown = is_auto ? std::string("\"auto\"") : fmt::format("{}", ratio);
    if (!is_auto && ratio >= 1.0) return OkStatus();
    if (stage != 3) {
      return Error(
          "{} {}{} needs zero_optimization.stage 3 (DeepSpeed: Partial offloading only supported "
          "for ZeRO Stage 3.); stage is {}: set the stage to 3 or the ratio to 1",
          kRatio, shown, At(kRatio), stage);
    }
    if (v_.GetString("zero_optimization.offload_param.device") == "nvme") {
      return Error(
          "{} {}{} cannot be combined with zero_optimization.offload_param.device nvme{}: the "
          "parameter shard then lives in an NVMe store that only the fully offloaded optimizer "
          "writes; set the ratio to 1 or offload_param.device to cpu or none",
          kRatio, shown, At(kRatio), At("zero_optimization.offload_param.device"));
    }
    if (v_.GetString("optimizer.type") == "Lion") {
      // The split's device-budget arithmetic (engine/zero/offload_ratio.h) counts Adam's two
      // moments.
      return Error(
          "optimizer.type Lion{} with {} {}{} (a partial offload) is not supported yet: set the "
          "ratio to 1, or offload_optimizer.device none",
          At("optimizer.type"), kRatio, shown, At(kRatio));
    }
    return OkStatus();
  }

  Status Zero() {
    int64_t stage = v_.GetInt("zero_optimization.stage");
    constexpr const char* kSubGroup = "zero_optimization.sub_group_size";
    if (v_.HasValue(kSubGroup) && v_.GetInt(kSubGroup) == 0) {
      // DeepSpeed then steps each parameter as a sub-group of its own. Sluice's sub-groups are
      // tiles of the flat shard that do not follow parameters; Adam is elementwise, so the size
      // changes how the work is cut, never the results.
      Note(LogLevel::kWarn,
           fmt::format("{} 0{} (DeepSpeed: one sub-group per parameter) is read as the default "
                       "1e9: Sluice's sub-groups are tiles of the shard, whatever the parameters; "
                       "the results are the same",
                       kSubGroup, At(kSubGroup)));
      const SettingEntry& e = v_.entry(kSubGroup);
      v_.Set(kSubGroup, v_.registry().Get(kSubGroup).default_value, ValueSource::kDerived, e.origin,
             "0 (one sub-group per parameter in DeepSpeed) read as the default");
    }
    Fill("zero_optimization.overlap_comm", stage == 3,
         fmt::format("true iff stage is 3 (stage is {})", stage));
    int64_t d = v_.GetInt("model.d_model");
    auto bucket = [&](std::string_view path, int64_t with_model, std::string_view rule) {
      if (!v_.IsAuto(path)) return;
      if (model_present_) {
        v_.Resolve(path, with_model, fmt::format("{} with model.d_model {}", rule, d));
      } else {
        v_.Resolve(path, v_.registry().Get(path).default_value, "DeepSpeed's default (no model)");
      }
    };
    bucket("zero_optimization.reduce_bucket_size", d * d, "d_model^2");
    bucket("zero_optimization.stage3_prefetch_bucket_size",
           static_cast<int64_t>(0.9 * static_cast<double>(d * d)), "0.9 * d_model^2");
    bucket("zero_optimization.stage3_param_persistence_threshold", 10 * d, "10 * d_model");

    for (const char* section : {"offload_optimizer", "offload_param"}) {
      std::string base = fmt::format("zero_optimization.{}", section);
      const std::string& device = v_.GetString(base + ".device");
      std::optional<std::string> nvme_path = v_.FindString(base + ".nvme_path");
      if (device == "nvme" && !nvme_path) {
        return Error(
            "{}.device is nvme{} but {}.nvme_path is not set: give the directory for the "
            "swap files",
            base, At(base + ".device"), base);
      }
      if (device != "nvme" && nvme_path) {
        Note(LogLevel::kWarn, fmt::format("{}.nvme_path{} is unused: {}.device is {}", base,
                                          At(base + ".nvme_path"), base, device));
      }
      if (device == "none") continue;
      if (std::string_view(section) == "offload_param" && stage != 3) {
        // DeepSpeed hands offload_param to the stage-3 optimizer only: below it, it is ignored.
        Note(
            LogLevel::kWarn,
            fmt::format("{}.device {}{} is ignored, as DeepSpeed ignores it: parameters are "
                        "partitioned and offloaded at zero_optimization.stage 3 only (stage is {})",
                        base, device, At(base + ".device"), stage));
        const SettingEntry& e = v_.entry(base + ".device");
        v_.Set(base + ".device", std::string("none"), ValueSource::kDerived, e.origin,
               fmt::format("{} ignored below stage 3, as in DeepSpeed", device));
        continue;
      }
      if (stage == 0) {
        return Error("{}.device {}{} needs zero_optimization.stage 1, 2 or 3 (stage is 0)", base,
                     device, At(base + ".device"));
      }
    }
    constexpr const char* kParamDevice = "zero_optimization.offload_param.device";
    constexpr const char* kOptimizerDevice = "zero_optimization.offload_optimizer.device";
    if (v_.GetString(kParamDevice) == "nvme" && v_.GetString(kOptimizerDevice) == "none") {
      return Error(
          "{} nvme{} needs {} cpu or nvme: an optimizer on the device keeps fp32 master weights "
          "of the whole shard there, so the parameters would not leave the device",
          kParamDevice, At(kParamDevice), kOptimizerDevice);
    }
    // O_DIRECT needs 4 KiB-aligned requests; the swap engine checks the same bounds.
    int64_t block_size = v_.GetInt("aio.block_size");
    if (block_size % 4096 != 0 || block_size > (int64_t{1} << 30)) {
      return Error(
          "aio.block_size {}{} must be a multiple of 4096 bytes (O_DIRECT alignment) and at "
          "most 1GiB, e.g. 1MiB",
          block_size, At("aio.block_size"));
    }
    const std::string& opt_device = v_.GetString("zero_optimization.offload_optimizer.device");
    SLUICE_RETURN_IF_ERROR(OffloadRatio(stage, opt_device));
    for (const char* key : {"pipeline_read", "pipeline_write"}) {
      std::string path = fmt::format("zero_optimization.offload_optimizer.{}", key);
      // On by default (a deliberate difference from DeepSpeed): only a value the user gave warns.
      if (v_.GetBool(path) && v_.entry(path).source != ValueSource::kDefault &&
          opt_device != "nvme") {
        Note(LogLevel::kWarn, fmt::format("{}{} has no effect: offload_optimizer.device is {}",
                                          path, At(path), opt_device));
      }
    }
    return OkStatus();
  }

  // prescale_gradients and gradient_predivide_factor (engine/zero/gradient_scaling.h), where
  // DeepSpeed takes them: its stage 2 and 3 optimizers assert that both are at their defaults
  // with reduce_scatter on, which is how Sluice always reduces at those stages.
  Status GradientScaling() {
    constexpr const char* kPrescale = "prescale_gradients";
    constexpr const char* kFactor = "gradient_predivide_factor";
    const bool prescale = v_.GetBool(kPrescale);
    const double factor = v_.GetFloat(kFactor);
    if (!prescale && factor == 1.0) return OkStatus();
    const int64_t stage = v_.GetInt("zero_optimization.stage");
    const std::string given = prescale ? fmt::format("{} true{}", kPrescale, At(kPrescale))
                                       : fmt::format("{} {}{}", kFactor, factor, At(kFactor));
    if (stage >= 2) {
      return Error(
          "{} is refused at zero_optimization.stage {}{}: DeepSpeed refuses it there with "
          "reduce_scatter on (\"{} is not yet supported with ZeRO-{} with reduce scatter "
          "enabled\"), and Sluice always reduce-scatters at stages 2 and 3; use stage 0 or 1, or "
          "set {}",
          given, stage, At("zero_optimization.stage"),
          prescale ? "pre-scale gradients" : "gradient_predivide_factor != 1.0", stage,
          prescale ? "prescale_gradients: false" : "gradient_predivide_factor: 1.0");
    }
    if (prescale && factor != 1.0) {
      Note(LogLevel::kWarn,
           fmt::format("{} {}{} is ignored with prescale_gradients true, as DeepSpeed ignores it: "
                       "the gradients are multiplied by 1/world size before the all-reduce",
                       kFactor, factor, At(kFactor)));
    }
    if (stage == 1) {
      Note(LogLevel::kInfo,
           fmt::format("{} is honoured at zero_optimization.stage 1: Sluice's stage 1 "
                       "all-reduces the full gradients, as DeepSpeed's engine does where it "
                       "honours the key; DeepSpeed's own stage-1 optimizer (reduce_scatter on) "
                       "ignores it and divides by the world size before reducing, the same "
                       "average up to rounding",
                       given));
    }
    return OkStatus();
  }

  // DeepSpeed's _set_batch_related_parameters and _batch_assertion (runtime/config.py).
  // The process grid: the data-parallel size the batch keys count is what the tensor and
  // pipeline sizes leave of the world.
  Status Parallel() {
    if (context_.world_size < 1) {
      return Error("world size {} must be at least 1", context_.world_size);
    }
    if (v_.IsAuto("pipeline.stages")) Fill("pipeline.stages", int64_t{1}, "one stage");
    SLUICE_RETURN_IF_ERROR(PipelineChunks());
    const int64_t tensor = std::max<int64_t>(1, v_.GetInt("tensor_parallel.autotp_size"));
    const int64_t pipeline = v_.GetInt("pipeline.stages");
    if (tensor > 1) SLUICE_RETURN_IF_ERROR(TensorSplit(tensor));
    Result<parallel::ProcessGrid> grid = parallel::ProcessGrid::Create(
        context_.world_size, static_cast<int>(tensor), static_cast<int>(pipeline));
    if (!grid.ok()) return Error("{}", grid.status().message());
    data_parallel_size_ = grid->shape().data;
    return OkStatus();
  }

  // Model chunks per stage: several for the interleaved schedule only. And the partition
  // method's name (a regex's errors too), where it was given.
  Status PipelineChunks() {
    if (Result<parallel::PartitionSpec> spec = parallel::ParsePartitionMethod(
            v_.GetString("pipeline.partition_method"), "pipeline.partition_method");
        !spec.ok()) {
      return Error("{}{}", spec.status().message(), At("pipeline.partition_method"));
    }
    const bool interleaved = v_.GetString("pipeline.schedule") == "interleaved-1f1b";
    Fill("pipeline.chunks", int64_t{interleaved ? 2 : 1},
         interleaved ? "interleaved-1f1b: two chunks per stage" : "one chunk per stage");
    const int64_t chunks = v_.GetInt("pipeline.chunks");
    if (interleaved && chunks < 2) {
      return Error(
          "pipeline.chunks = {}{} with pipeline.schedule interleaved-1f1b: interleaving "
          "needs at least 2 model chunks per stage (with 1 it is 1f1b)",
          chunks, At("pipeline.chunks"));
    }
    if (!interleaved && chunks != 1) {
      return Error(
          "pipeline.chunks = {}{} with pipeline.schedule {}: only interleaved-1f1b runs "
          "several model chunks per stage; set the schedule or pipeline.chunks 1",
          chunks, At("pipeline.chunks"), v_.GetString("pipeline.schedule"));
    }
    return OkStatus();
  }

  // The layers split over `tensor` ranks (engine/parallel/tensor_plan.h).
  Status TensorSplit(int64_t tensor) {
    if (std::string error =
            model::TensorSplitError(v_.GetInt("model.n_head"), v_.GetInt("model.n_kv_head"),
                                    v_.GetInt("model.d_ff"), tensor);
        !error.empty()) {
      return Error("{}{}", error, At("tensor_parallel.autotp_size"));
    }
    if (v_.GetString("optimizer.type") == "Lamb") {
      // Its trust ratio is each parameter's norm: a split one's would need its tensor peers'.
      return Unimplemented(
          "optimizer.type Lamb{} with tensor_parallel.autotp_size = {}{}: LAMB's per-parameter "
          "trust ratio is not computed over tensor-parallel pieces yet; use Adam, AdamW or Lion, "
          "or autotp_size 1",
          At("optimizer.type"), tensor, At("tensor_parallel.autotp_size"));
    }
    return OkStatus();
  }

  Status Batch() {
    const int64_t ws = data_parallel_size_;
    constexpr const char* kTbs = "train_batch_size";
    constexpr const char* kMbs = "train_micro_batch_size_per_gpu";
    constexpr const char* kGas = "gradient_accumulation_steps";
    const bool has_tbs = v_.HasValue(kTbs);
    const bool has_mbs = v_.HasValue(kMbs);
    const bool has_gas = v_.HasValue(kGas);
    int64_t tbs = has_tbs ? v_.GetInt(kTbs) : 0;
    int64_t mbs = has_mbs ? v_.GetInt(kMbs) : 0;
    int64_t gas = has_gas ? v_.GetInt(kGas) : 0;
    std::string world = ws == context_.world_size
                            ? fmt::format("world size {}", ws)
                            : fmt::format(
                                  "data-parallel size {} (world size {} / tensor x "
                                  "pipeline)",
                                  ws, context_.world_size);
    // micro batch * accumulation * world size, refused where it overflows (the values are
    // checked one by one, not their product).
    bool overflow = false;
    auto product = [&](int64_t micro, int64_t accumulation) {
      int64_t result = 0;
      if (__builtin_mul_overflow(micro, accumulation, &result) ||
          __builtin_mul_overflow(result, ws, &result)) {
        overflow = true;
      }
      return result;
    };

    if (has_tbs && has_mbs && has_gas) {
      // All given: only the assertion below.
    } else if (has_tbs && has_mbs) {
      gas = tbs / mbs / ws;
      v_.Resolve(kGas, gas, fmt::format("train_batch_size // micro batch // {}", world));
    } else if (has_tbs && has_gas) {
      mbs = tbs / ws / gas;
      v_.Resolve(kMbs, mbs, fmt::format("train_batch_size // {} // accumulation", world));
    } else if (has_mbs && has_gas) {
      tbs = product(mbs, gas);
      v_.Resolve(kTbs, tbs, fmt::format("micro batch * accumulation * {}", world));
    } else if (has_tbs) {
      gas = 1;
      mbs = tbs / ws;
      v_.Resolve(kGas, gas, "1 when only train_batch_size is given");
      v_.Resolve(kMbs, mbs, fmt::format("train_batch_size // {}", world));
    } else if (has_mbs) {
      gas = 1;
      tbs = product(mbs, 1);
      v_.Resolve(kGas, gas, "1 when only the micro batch is given");
      v_.Resolve(kTbs, tbs, fmt::format("micro batch * {}", world));
    } else if (v_.IsAuto(kTbs) || v_.IsAuto(kMbs)) {
      // HF-style configs leave every batch key "auto": nothing defines them, so the micro batch
      // is what the Hugging Face Trainer fills in by default, and the rest follows.
      mbs = kHfPerDeviceTrainBatchSize;
      v_.Resolve(kMbs, mbs,
                 "the Hugging Face Trainer's per_device_train_batch_size default (nothing in the "
                 "config defines the micro batch)");
      if (!has_gas) {
        gas = 1;
        v_.Resolve(kGas, gas, "the Trainer's gradient_accumulation_steps default");
      }
      tbs = product(mbs, gas);
      v_.Resolve(kTbs, tbs, fmt::format("micro batch * accumulation * {}", world));
    } else {
      return Error(
          "Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided "
          "(DeepSpeed's rule; gradient_accumulation_steps alone does not define a batch)");
    }
    const int64_t expected_tbs = product(mbs, gas);
    if (overflow) {
      return Error(
          "train_micro_batch_size_per_gpu {}{} * gradient_accumulation_steps {}{} * {} overflows "
          "a 64-bit integer: give batch sizes that a step can hold",
          mbs, At(kMbs), gas, At(kGas), world);
    }
    if (tbs <= 0) return Error("Train batch size: {} has to be greater than 0", tbs);
    if (mbs <= 0) {
      return Error(
          "Micro batch size per gpu: {} has to be greater than 0 (train_batch_size {} // "
          "{} // accumulation {})",
          mbs, tbs, world, gas);
    }
    if (gas <= 0) {
      return Error(
          "Gradient accumulation steps: {} has to be greater than 0 (train_batch_size {} "
          "// micro batch {} // {})",
          gas, tbs, mbs, world);
    }
    if (tbs != expected_tbs) {
      return Error(
          "Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * "
          "gradient_acc_step * world_size {} != {} * {} * {}",
          tbs, mbs, gas, ws);
    }
    return OkStatus();
  }

  Status Optimizer() {
    const std::string& type = v_.GetString("optimizer.type");
    if (type == "Lion") {
      // DeepSpeed's FusedLion and DeepSpeedCPULion take no such arguments (a TypeError there).
      for (const char* path : {"optimizer.params.eps", "optimizer.params.adam_w_mode",
                               "optimizer.params.bias_correction"}) {
        if (!v_.IsGiven(path)) continue;
        return Error(
            "{}{} is not a parameter of optimizer.type Lion (its parameters: lr, betas, "
            "weight_decay; Lion has no denominator, always decouples weight decay and has no bias "
            "correction): remove it",
            path, At(path));
      }
    }
    if (type != "Lamb") {
      // At their defaults they change nothing (a config record lists every setting).
      const std::pair<const char*, bool> lamb_only[] = {
          {"optimizer.params.max_coeff", v_.GetFloat("optimizer.params.max_coeff") == 10.0},
          {"optimizer.params.min_coeff", v_.GetFloat("optimizer.params.min_coeff") == 0.01},
          {"optimizer.params.eps_inside_sqrt", !v_.GetBool("optimizer.params.eps_inside_sqrt")}};
      for (const auto& [path, at_default] : lamb_only) {
        if (!v_.IsGiven(path) || at_default) continue;
        return Error(
            "{}{} is a parameter of optimizer.type Lamb only (DeepSpeed's FusedLamb), not of {}: "
            "remove it, or set optimizer.type Lamb",
            path, At(path), type);
      }
    }
    if (type == "Lamb") SLUICE_RETURN_IF_ERROR(Lamb());
    if (type == "AdamW" && v_.IsGiven("optimizer.params.adam_w_mode") &&
        !v_.GetBool("optimizer.params.adam_w_mode")) {
      v_.Set("optimizer.params.adam_w_mode", true, ValueSource::kDerived,
             v_.entry("optimizer.params.adam_w_mode").origin,
             "type AdamW forces decoupled weight decay, as in DeepSpeed");
      Note(LogLevel::kWarn,
           fmt::format("optimizer.params.adam_w_mode false{} is overridden: type AdamW always "
                       "decouples weight decay (as in DeepSpeed)",
                       At("optimizer.params.adam_w_mode")));
    }
    // "auto": what the Hugging Face Trainer fills in from its TrainingArguments
    // (trainer_config_process), at their defaults: Sluice has no Trainer arguments.
    struct TrainerDefault {
      const char* path;
      SettingValue value;
      const char* argument;
    };
    const TrainerDefault defaults[] = {
        {"optimizer.params.lr", kHfLearningRate, "learning_rate"},
        {"optimizer.params.betas", std::vector<double>{0.9, 0.999}, "adam_beta1, adam_beta2"},
        {"optimizer.params.eps", 1e-8, "adam_epsilon"},
        {"optimizer.params.weight_decay", 0.0, "weight_decay"},
        {"gradient_clipping", 1.0, "max_grad_norm"},
    };
    for (const TrainerDefault& d : defaults) {
      if (!v_.IsAuto(d.path)) continue;
      v_.Resolve(d.path, d.value, fmt::format("the Hugging Face Trainer's {} default", d.argument));
    }
    return OkStatus();
  }

  // What DeepSpeed's engine and FusedLamb accept with optimizer.type Lamb; FusedLamb runs on the
  // device only, so Sluice refuses what has no host LAMB there (offload_optimizer).
  Status Lamb() {
    constexpr const char* kAdamWMode = "optimizer.params.adam_w_mode";
    if (v_.IsGiven(kAdamWMode)) {
      return Error(
          "{}{} is not a parameter of optimizer.type Lamb (its parameters: lr, betas, eps, "
          "weight_decay, bias_correction, eps_inside_sqrt, max_coeff, min_coeff; its weight decay "
          "is L2 inside the update, scaled by the trust ratio): remove it",
          kAdamWMode, At(kAdamWMode));
    }
    const double max_coeff = v_.GetFloat("optimizer.params.max_coeff");
    const double min_coeff = v_.GetFloat("optimizer.params.min_coeff");
    if (min_coeff > max_coeff) {
      return Error(
          "optimizer.params.min_coeff {}{} exceeds optimizer.params.max_coeff {}{}: Lamb clamps "
          "its trust ratio to [min_coeff, max_coeff]",
          min_coeff, At("optimizer.params.min_coeff"), max_coeff, At("optimizer.params.max_coeff"));
    }
    if (v_.GetBool("fp16.enabled") && v_.GetFloat("fp16.loss_scale") != 0.0) {
      return Error(
          "optimizer.type Lamb with fp16.loss_scale {}{} (a static loss scale) is refused, as "
          "DeepSpeed refuses it (\"DeepSpeed lamb optimizer requires dynamic loss scaling\"): set "
          "fp16.loss_scale 0",
          v_.GetFloat("fp16.loss_scale"), At("fp16.loss_scale"));
    }
    const int64_t stage = v_.GetInt("zero_optimization.stage");
    if (stage >= 1 && !v_.GetBool("zero_allow_untested_optimizer")) {
      return Error(
          "optimizer.type Lamb at zero_optimization.stage {}{} needs zero_allow_untested_optimizer "
          "true, as DeepSpeed requires (\"You are using an untested ZeRO Optimizer. Please add "
          "<\"zero_allow_untested_optimizer\": true> in the configuration file to use it.\"); "
          "Sluice's trust ratio is per parameter at every stage, the norms summed over the shards",
          stage, At("zero_optimization.stage"));
    }
    constexpr const char* kOffload = "zero_optimization.offload_optimizer.device";
    if (const std::string& device = v_.GetString(kOffload); device != "none") {
      return Error(
          "optimizer.type Lamb with {} {}{} is not supported: DeepSpeed's FusedLamb has no CPU "
          "kernel for offloaded state, and Sluice's LAMB runs with the optimizer state beside the "
          "parameters only; set {} none, or use optimizer.type AdamW or Lion",
          kOffload, device, At(kOffload), kOffload);
    }
    return OkStatus();
  }

  Status Scheduler() {
    std::optional<std::string> type = v_.FindString("scheduler.type");
    if (v_.IsAuto("scheduler.type")) type.reset();
    constexpr std::string_view kPrefix = "scheduler.params.";
    const std::vector<std::string>& names = SchedulerParamNames(type ? *type : "");
    for (const SettingSpec& spec : v_.registry().settings()) {
      if (spec.path.compare(0, kPrefix.size(), kPrefix) != 0) continue;
      std::string name = spec.path.substr(kPrefix.size());
      bool applies = std::find(names.begin(), names.end(), name) != names.end();
      if (applies) continue;
      const SettingEntry& e = v_.entry(spec.path);
      if (e.source != ValueSource::kDefault) {
        if (!type) {
          return Error(
              "{}{} is set but scheduler.type is not: give scheduler.type (WarmupLR, "
              "WarmupDecayLR or WarmupCosineLR)",
              spec.path, At(spec.path));
        }
        return Error("{}{} is not a parameter of {} (its parameters: {})", spec.path, At(spec.path),
                     *type, fmt::join(names, ", "));
      }
      v_.Set(spec.path, std::monostate(), ValueSource::kDefault, "",
             type ? fmt::format("not a parameter of {}", *type) : std::string("no scheduler"));
    }
    if (!type) return OkStatus();
    double lr = v_.GetFloat("optimizer.params.lr");
    if (*type == "WarmupLR" || *type == "WarmupDecayLR") {
      constexpr const char* kMax = "scheduler.params.warmup_max_lr";
      if (v_.IsAuto(kMax) || *type == "WarmupLR") {
        Fill(kMax, lr, "optimizer.params.lr");
      } else {
        Fill(kMax, 0.001, "WarmupDecayLR's default");
      }
      if (v_.IsAuto("scheduler.params.warmup_min_lr")) {
        v_.Resolve("scheduler.params.warmup_min_lr", 0.0,
                   "0, as the Hugging Face Trainer writes it (no Trainer argument)");
      }
    }
    if (v_.IsAuto("scheduler.params.warmup_num_steps")) {
      v_.Resolve("scheduler.params.warmup_num_steps", int64_t{0},
                 "the Hugging Face Trainer's warmup_steps and warmup_ratio defaults");
    }
    if (*type != "WarmupLR") {
      constexpr const char* kTotal = "scheduler.params.total_num_steps";
      if (v_.IsAuto(kTotal)) {
        v_.Resolve(kTotal, v_.GetInt("run.steps"), "run.steps");
      } else if (!v_.HasValue(kTotal)) {
        return Error(
            "scheduler.params.total_num_steps is required for {} (DeepSpeed has no "
            "default): give it, or \"auto\" to use run.steps",
            *type);
      }
    }
    WarnAboutWarmUp(*type);
    return OkStatus();
  }

  // DeepSpeed's warning (lr_schedules.py), and one for a warm-up that outlasts the run.
  void WarnAboutWarmUp(const std::string& type) {
    constexpr const char* kWarmup = "scheduler.params.warmup_num_steps";
    constexpr const char* kTotal = "scheduler.params.total_num_steps";
    const int64_t warmup = v_.GetInt(kWarmup);
    if (type != "WarmupLR" && v_.GetInt(kTotal) < warmup) {
      Note(LogLevel::kWarn,
           fmt::format("total_num_steps {} is less than warmup_num_steps {} ({}{} and {}{}; "
                       "DeepSpeed's warning)",
                       v_.GetInt(kTotal), warmup, kTotal, At(kTotal), kWarmup, At(kWarmup)));
    }
    const int64_t steps = v_.GetInt("run.steps");
    if (warmup > steps) {
      const std::string steps_at = v_.IsGiven("run.steps") ? At("run.steps") : " (the default)";
      Note(LogLevel::kWarn,
           fmt::format("{} {}{} is longer than the run (run.steps {}{}): the learning rate never "
                       "reaches its peak",
                       kWarmup, warmup, At(kWarmup), steps, steps_at));
    }
  }

  Result<int64_t> AvailableHostMemory() {
    if (context_.available_host_memory) return *context_.available_host_memory;
    std::ifstream in("/proc/meminfo");
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string key;
      int64_t kib = 0;
      if (fields >> key >> kib && key == "MemAvailable:") return kib * 1024;
    }
    return UnavailableError(
        "device.host_memory_limit \"auto\": MemAvailable is not in /proc/meminfo; give a size, "
        "e.g. device.host_memory_limit: 8GiB");
  }

  Status Device() {
    const std::string& type = v_.GetString("device.type");
    constexpr const char* kLimit = "device.memory_limit";
    if (type == "cpu") {
      if (v_.IsAuto(kLimit)) {
        return Error(
            "device.memory_limit \"auto\"{} has no meaning for the cpu device: give the "
            "arena size, e.g. device.memory_limit: 256MiB",
            At(kLimit));
      }
      if (!v_.HasValue(kLimit)) {
        return Error(
            "device.memory_limit is required for the cpu device: give the arena size, "
            "e.g. device.memory_limit: 256MiB");
      }
    } else if (!v_.HasValue(kLimit)) {
      const SettingEntry& e = v_.entry(kLimit);
      v_.Set(kLimit, std::monostate(), e.is_auto ? e.source : ValueSource::kDerived, e.origin,
             "the GPU's memory, measured when the device opens");
    }
    constexpr const char* kHost = "device.host_memory_limit";
    if (v_.IsAuto(kHost) || !v_.HasValue(kHost)) {
      SLUICE_ASSIGN_OR_RETURN(int64_t available, AvailableHostMemory());
      int64_t margin = std::max<int64_t>(int64_t{1} << 30, available / 10);
      if (available <= margin) {
        return Error(
            "device.host_memory_limit \"auto\": only {} bytes of RAM are available, not "
            "more than the margin of {} bytes; give a size, e.g. "
            "device.host_memory_limit: 512MiB",
            available, margin);
      }
      constexpr int64_t kMiB = int64_t{1} << 20;
      v_.Resolve(kHost, (available - margin) / kMiB * kMiB,
                 fmt::format("available RAM {:.1f}GiB minus a margin of {:.1f}GiB",
                             static_cast<double>(available) / (kMiB * 1024),
                             static_cast<double>(margin) / (kMiB * 1024)));
    }
    return OkStatus();
  }

  Status Data() {
    if (v_.HasValue("data.val_path") && v_.IsGiven("data.val_fraction")) {
      Note(LogLevel::kWarn, fmt::format("data.val_fraction{} is unused: data.val_path is set",
                                        At("data.val_fraction")));
    }
    return OkStatus();
  }

  Status RemainingAutos() {
    for (const SettingSpec& spec : v_.registry().settings()) {
      if (!v_.IsAuto(spec.path)) continue;
      if (spec.auto_at_run_time) continue;  // the engine measures it when it is created
      if (spec.default_kind != DefaultKind::kValue) {
        return Error("{}: \"auto\"{} cannot be resolved: nothing in the config defines it; give {}",
                     spec.path, At(spec.path), DescribeAllowed(spec));
      }
      v_.Resolve(spec.path, spec.default_value, "default");
    }
    return OkStatus();
  }

  const ResolveContext& context_;
  SettingValues& v_;
  std::vector<std::string>* notes_;
  bool model_present_ = false;
  int64_t data_parallel_size_ = 1;
};

}  // namespace

Status ResolveConfigValues(const ResolveContext& context, SettingValues* values,
                           std::vector<std::string>* notes) {
  return Resolver(context, values, notes).Run();
}

}  // namespace sluice
