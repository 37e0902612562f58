#include "engine/config/config_schema.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <map>

#include "runtime/comm.h"

namespace sluice {
namespace {

using T = SettingType;

constexpr int64_t I(double v) { return static_cast<int64_t>(v); }

void AddBatchAndTopLevel(SettingsRegistry& r) {
  r.Add("train_batch_size", T::kInt,
        "Global batch per optimizer step = micro batch x gradient accumulation x data-parallel "
        "world size")
      .Derived("from the other two batch keys and the world size (DeepSpeed's rule)")
      .Min(1)
      .Auto("derived from the other batch keys");
  r.Add("train_micro_batch_size_per_gpu", T::kInt, "Batch each rank processes per forward/backward")
      .Derived("from the other two batch keys and the world size (DeepSpeed's rule)")
      .Min(1)
      .Auto(
          "derived from the other batch keys; 8 (the Hugging Face Trainer's "
          "per_device_train_batch_size default) when nothing defines it");
  r.Add("gradient_accumulation_steps", T::kInt, "Micro-batches accumulated per optimizer step")
      .Derived("from the other two batch keys; 1 when only one batch key is given")
      .Min(1)
      .Auto("derived from the other batch keys; 1 when nothing defines it");
  r.Add("gradient_clipping", T::kFloat, "Clip the global gradient norm to this value; 0 disables")
      .Default(1.0)
      .Min(0)
      .Auto("1.0 (the Hugging Face Trainer's max_grad_norm default)");
  r.Add("prescale_gradients", T::kBool,
        "Multiply the gradients by 1/world size before the all-reduce, which then sums instead of "
        "averaging; stages 0 and 1 only (DeepSpeed refuses true at stages 2 and 3, with "
        "reduce_scatter)")
      .Default(false);
  r.Add("gradient_predivide_factor", T::kFloat,
        "Multiply the gradients by 1/factor before the all-reduce and by factor/world size after "
        "it (ignored with prescale_gradients); stages 0 and 1 only (DeepSpeed refuses a factor "
        "other than 1 at stages 2 and 3, with reduce_scatter)")
      .Default(1.0)
      .Min(0, /*exclusive=*/true);
  r.Add("zero_allow_untested_optimizer", T::kBool,
        "Let ZeRO (stage 1-3) run an optimizer DeepSpeed has not tested with it; DeepSpeed and "
        "Sluice require true for optimizer.type Lamb at stages 1-3")
      .Default(false);
  r.Add("steps_per_print", T::kInt, "Log training progress every N optimizer steps")
      .Unset("never (DeepSpeed's code default is None)")
      .Min(1);
  r.Add("wall_clock_breakdown", T::kBool,
        "Time forward, backward, reduction and optimizer phases separately")
      .Default(false);
}

void AddOptimizer(SettingsRegistry& r) {
  r.AddSection("optimizer", "Optimizer (DeepSpeed's optimizer.type and optimizer.params)");
  r.Add("optimizer.type", T::kEnum,
        "Adam, AdamW, Lion or Lamb (any case); Adam with adam_w_mode true is AdamW, as in "
        "DeepSpeed; Lion keeps one moment instead of two; Lamb (DeepSpeed's FusedLamb) scales "
        "each parameter's Adam update by a trust ratio")
      .Default(std::string("AdamW"))
      .Allowed({"Adam", "AdamW", "Lion", "Lamb"}, /*case_insensitive=*/true);
  r.AddSection("optimizer.params", "Optimizer constructor arguments");
  r.Add("optimizer.params.lr", T::kFloat, "Learning rate (peak rate when a scheduler warms up)")
      .Default(1e-3)
      .Min(0)
      .Auto("5e-5 (the Hugging Face Trainer's learning_rate default)");
  r.Add("optimizer.params.betas", T::kFloatList,
        "Coefficients for the moment averages (Lion: the update's interpolation, then the "
        "momentum's; DeepSpeed's Lion default is also [0.9, 0.999])")
      .Default(std::vector<double>{0.9, 0.999})
      .ListSize(2)
      .Min(0)
      .Max(1, /*exclusive=*/true)
      .Auto("[0.9, 0.999] (the Trainer's adam_beta1, adam_beta2 defaults)");
  r.Add("optimizer.params.eps", T::kFloat,
        "Term added to the denominator for stability (Adam and Lamb)")
      .Default(1e-8)
      .Min(0, /*exclusive=*/true)
      .Auto("1e-8 (the Trainer's adam_epsilon default)");
  r.Add("optimizer.params.weight_decay", T::kFloat,
        "Weight decay coefficient (Lion: always decoupled, p *= 1 - lr * weight_decay)")
      .Default(0.0)
      .Min(0)
      .Auto("0.0 (the Trainer's weight_decay default)");
  r.Add("optimizer.params.adam_w_mode", T::kBool,
        "Decoupled weight decay (AdamW); type AdamW forces it on, as in DeepSpeed (Adam only)")
      .Default(true);
  r.Add("optimizer.params.bias_correction", T::kBool,
        "Divide the moments by 1 - beta^t (Adam's bias correction); false uses them as they are, "
        "as DeepSpeed's FusedAdam and CPU Adam do (Adam and Lamb; Lamb folds it into the step "
        "size, as DeepSpeed's FusedLamb does)")
      .Default(true);
  r.Add("optimizer.params.max_coeff", T::kFloat,
        "Upper clamp of Lamb's trust ratio ||p|| / ||update|| (Lamb only)")
      .Default(10.0)
      .Min(0);
  r.Add("optimizer.params.min_coeff", T::kFloat,
        "Lower clamp of Lamb's trust ratio (Lamb only; at most max_coeff)")
      .Default(0.01)
      .Min(0);
  r.Add("optimizer.params.eps_inside_sqrt", T::kBool,
        "Lamb's denominator sqrt(v + eps) instead of sqrt(v) + eps (Lamb only)")
      .Default(false);
}

void AddScheduler(SettingsRegistry& r) {
  r.AddSection("scheduler", "Learning-rate schedule (DeepSpeed's lr_schedules)");
  r.Add("scheduler.type", T::kEnum, "Schedule; unset keeps the learning rate constant")
      .Unset("no scheduler: constant learning rate")
      .Allowed({"WarmupLR", "WarmupDecayLR", "WarmupCosineLR"});
  r.AddSection("scheduler.params", "Scheduler constructor arguments (each type takes its own)");
  r.Add("scheduler.params.warmup_min_lr", T::kFloat, "WarmupLR/WarmupDecayLR: rate at step 0")
      .Default(0.0)
      .Min(0)
      .Auto("0");
  r.Add("scheduler.params.warmup_max_lr", T::kFloat,
        "WarmupLR/WarmupDecayLR: rate reached at the end of warm-up")
      .Derived("WarmupLR: optimizer.params.lr; WarmupDecayLR: 0.001 (DeepSpeed's defaults)")
      .Min(0)
      .Auto("optimizer.params.lr");
  r.Add("scheduler.params.warmup_num_steps", T::kInt, "Optimizer steps of warm-up")
      .Default(int64_t{1000})
      .Min(0)
      .Auto(
          "0 (the Trainer's warmup_steps and warmup_ratio defaults; the schedules warm up for "
          "at least 2 steps, as DeepSpeed's do)");
  r.Add("scheduler.params.warmup_type", T::kEnum, "Warm-up curve: log or linear")
      .Default(std::string("log"))
      .Allowed({"log", "linear"});
  r.Add("scheduler.params.total_num_steps", T::kInt,
        "WarmupDecayLR/WarmupCosineLR: step at which the decay ends")
      .Required("for WarmupDecayLR and WarmupCosineLR (DeepSpeed has no default)")
      .Min(1)
      .Auto("run.steps");
  r.Add("scheduler.params.warmup_min_ratio", T::kFloat,
        "WarmupCosineLR: starting fraction of the optimizer's rate")
      .Default(0.0)
      .Range(0, 1);
  r.Add("scheduler.params.cos_min_ratio", T::kFloat,
        "WarmupCosineLR: final fraction of the optimizer's rate")
      .Default(1e-4)
      .Range(0, 1);
  r.Add("scheduler.params.last_batch_iteration", T::kInt,
        "Index of the last step taken when resuming; -1 starts fresh")
      .Default(int64_t{-1})
      .Min(-1);
}

void AddPrecision(SettingsRegistry& r) {
  r.AddSection("fp16", "fp16 mixed precision with dynamic loss scaling");
  r.Add("fp16.enabled", T::kBool, "Train in fp16 with fp32 master weights")
      .Default(false)
      .Auto("true when model.dtype is f16, else false");
  r.Add("fp16.loss_scale", T::kFloat, "Static loss scale; 0 selects dynamic loss scaling")
      .Default(0.0)
      .Min(0);
  r.Add("fp16.initial_scale_power", T::kInt, "Dynamic scaling starts at 2^initial_scale_power")
      .Default(int64_t{16})
      .Range(0, 62);
  r.Add("fp16.loss_scale_window", T::kInt, "Overflow-free steps before the scale doubles")
      .Default(int64_t{1000})
      .Min(1);
  r.Add("fp16.hysteresis", T::kInt, "Overflows tolerated before the scale is halved")
      .Default(int64_t{2})
      .Min(1);
  r.Add("fp16.min_loss_scale", T::kFloat, "Floor of the dynamic loss scale")
      .Default(1.0)
      .Min(0, /*exclusive=*/true);
  r.AddSection("bf16", "bf16 mixed precision (alias: bfloat16)");
  r.Add("bf16.enabled", T::kBool, "Train in bf16 with fp32 master weights")
      .Default(false)
      .Auto("true when model.dtype is bf16, else false");
  // No settings of its own: DeepSpeed's data_types keys are matched against what Sluice does
  // (UnsupportedKeys below).
  r.AddSection("data_types",
               "DeepSpeed's gradient accumulation dtype; Sluice accumulates gradients in fp32");
}

void AddZero(SettingsRegistry& r) {
  r.AddSection("zero_optimization", "ZeRO partitioning of optimizer state, gradients, parameters");
  r.Add("zero_optimization.stage", T::kInt,
        "0 off, 1 optimizer states, 2 + gradients, 3 + parameters")
      .Default(int64_t{0})
      .Range(0, 3);
  r.Add("zero_optimization.overlap_comm", T::kBool,
        "Run collectives on their own stream, overlapping compute")
      .Derived("true iff stage is 3 (DeepSpeed's code default)");
  r.Add("zero_optimization.contiguous_gradients", T::kBool,
        "Copy gradients into one contiguous buffer as they are produced")
      .Default(true);
  r.Add("zero_optimization.reduce_bucket_size", T::kInt, "Elements reduced per gradient bucket")
      .Default(I(5e8))
      .Min(1)
      .Auto("model.d_model^2 when a model is given, else 5e8");
  r.Add("zero_optimization.allgather_bucket_size", T::kInt,
        "Elements all-gathered per bucket after the step (stages 1-2)")
      .Default(I(5e8))
      .Min(1)
      .Auto("5e8");
  r.Add("zero_optimization.sub_group_size", T::kInt,
        "Elements per optimizer sub-group: the unit of CPU Adam calls and NVMe swaps; 0 "
        "(DeepSpeed: one sub-group per parameter) reads as the default")
      .Default(I(1e9))
      .Min(0)
      .Auto("1e9");
  r.Add("zero_optimization.stage3_prefetch_bucket_size", T::kInt,
        "Elements of parameters fetched ahead of use (stage 3)")
      .Default(I(5e7))
      .Min(0)
      .Auto("0.9 * model.d_model^2 when a model is given, else 5e7");
  r.Add("zero_optimization.stage3_param_persistence_threshold", T::kInt,
        "Parameters with at most this many elements stay gathered (stage 3)")
      .Default(I(1e5))
      .Min(0)
      .Auto("10 * model.d_model when a model is given, else 1e5");
  r.Add("zero_optimization.stage3_max_live_parameters", T::kInt,
        "Cap on gathered parameter elements; limits prefetch (stage 3)")
      .Default(I(1e9))
      .Min(0)
      .Auto("1e9");
  r.Add("zero_optimization.stage3_max_reuse_distance", T::kInt,
        "Keep a parameter gathered if it is reused within this many elements (stage 3)")
      .Default(I(1e9))
      .Min(0)
      .Auto("1e9");
  r.Add("zero_optimization.stage3_gather_16bit_weights_on_model_save", T::kBool,
        "Every checkpoint save also writes the consolidated 16-bit model into the step "
        "directory (config.json + model.safetensors, as sluice convert; bf16, or fp16 in an "
        "fp16 run), at any stage")
      .Default(false)
      .Auto("false (accelerate's zero3_save_16bit_model default)");

  r.AddSection("zero_optimization.offload_optimizer",
               "Optimizer state offload (ZeRO-Offload / ZeRO-Infinity); Adam runs on the CPU");
  r.Add("zero_optimization.offload_optimizer.device", T::kEnum,
        "Where fp32 master weights and Adam moments live")
      .Default(std::string("none"))
      .Allowed({"none", "cpu", "nvme"});
  r.Add("zero_optimization.offload_optimizer.nvme_path", T::kString,
        "Directory for optimizer swap files (device nvme)")
      .Unset("required when device is nvme");
  r.Add("zero_optimization.offload_optimizer.pin_memory", T::kBool, "Use page-locked host buffers")
      .Default(true);
  r.Add("zero_optimization.offload_optimizer.buffer_count", T::kInt,
        "Pinned swap buffers, each one sub-group in size (device nvme)")
      .Default(int64_t{4})
      .Min(1);
  r.Add("zero_optimization.offload_optimizer.ratio", T::kFloat,
        "Fraction of the optimizer state offloaded (the last sub-groups; the first stay on the "
        "device); below 1 needs stage 3")
      .Default(1.0)
      .Range(0, 1)
      .AutoAtRunTime(
          "chosen when the engine is created: the device share that balances measured device "
          "Adam and offloaded Adam throughput, capped by what the device budget leaves (stage 3)");
  r.Add("zero_optimization.offload_optimizer.pipeline_read", T::kBool,
        "Read the next sub-group's state while stepping the current one")
      .Default(true);
  r.Add("zero_optimization.offload_optimizer.pipeline_write", T::kBool,
        "Write back the previous sub-group's state while stepping the current one")
      .Default(true);

  r.AddSection("zero_optimization.offload_param", "Parameter offload between uses (stage 3 only)");
  r.Add("zero_optimization.offload_param.device", T::kEnum,
        "Where 16-bit parameter partitions live between uses")
      .Default(std::string("none"))
      .Allowed({"none", "cpu", "nvme"});
  r.Add("zero_optimization.offload_param.nvme_path", T::kString,
        "Directory for parameter swap files (device nvme)")
      .Unset("required when device is nvme");
  r.Add("zero_optimization.offload_param.pin_memory", T::kBool, "Use page-locked host buffers")
      .Default(true);
  r.Add("zero_optimization.offload_param.buffer_count", T::kInt,
        "Host buffers for NVMe parameter swaps")
      .Default(int64_t{5})
      .Min(1);
  r.Add("zero_optimization.offload_param.buffer_size", T::kInt,
        "Elements per parameter swap buffer; every swapped partition must fit")
      .Default(I(1e8))
      .Min(1);
  r.Add("zero_optimization.offload_param.max_in_cpu", T::kInt,
        "Parameter elements kept in host memory when device is nvme")
      .Default(I(1e9))
      .Min(0);
}

void AddAio(SettingsRegistry& r) {
  r.AddSection("aio", "Asynchronous NVMe I/O (io_uring in Sluice)");
  r.Add("aio.block_size", T::kSize, "Bytes per I/O request; a multiple of 4096")
      .Default(int64_t{1048576})
      .Min(4096);
  r.Add("aio.queue_depth", T::kInt, "Requests in flight per worker thread")
      .Default(int64_t{8})
      .Min(1)
      .Max(4096);
  r.Add("aio.intra_op_parallelism", T::kInt,
        "Worker threads per swap; each request is split into this many slices (alias "
        "thread_count)")
      .Default(int64_t{1})
      .Min(1)
      .Max(64);
  r.Add("aio.single_submit", T::kBool, "Submit requests one at a time instead of in batches")
      .Default(false);
  r.Add("aio.overlap_events", T::kBool,
        "Refill the queue as requests complete instead of waiting for the whole batch")
      .Default(true);
}

// The process grid's model-parallel sizes (engine/parallel/process_grid.h): the data-parallel
// size is what is left of the world.
void AddParallel(SettingsRegistry& r) {
  r.AddSection("tensor_parallel", "Tensor parallelism (DeepSpeed AutoTP's section)");
  r.Add("tensor_parallel.autotp_size", T::kInt,
        "Ranks each layer is split across by tensor (Megatron: attention heads, MLP columns and "
        "the vocabulary); 0 or 1 is off. "
        "The data-parallel size is the world size / (this x pipeline.stages)")
      .Default(int64_t{0})
      .Range(0, 65536);
  // Sluice's own key: DeepSpeed's AutoTP has no sequence parallelism.
  r.Add("tensor_parallel.sequence_parallel", T::kBool,
        "Megatron sequence parallelism (Sluice's own key): between the tensor-parallel regions "
        "each tensor rank keeps only its slice of the tokens (norms, residual adds), and an "
        "all-gather and a reduce-scatter replace each all-reduce; needs autotp_size above 1 and "
        "a micro-batch token count (batch x seq) that divides by it")
      .Default(false);
  r.AddSection("pipeline", "Pipeline parallelism");
  r.Add("pipeline.stages", T::kInt,
        "Pipeline stages the model's layers are divided into, each a group of ranks; the "
        "micro-batches of a step (gradient_accumulation_steps) flow through them")
      .Default(int64_t{1})
      .Range(1, 65536)
      .Auto("1 (DeepSpeed takes the stage count from its PipelineModule, which a config has not)");
  // DeepSpeed gives these to PipelineModule and PipelineEngine in code, not in its config.
  r.Add("pipeline.schedule", T::kEnum,
        "Order of the micro-batches' forwards and backwards on each stage: 1f1b (DeepSpeed's "
        "TrainSchedule), gpipe (all forwards, then all backwards), interleaved-1f1b (Megatron's "
        "virtual pipeline: pipeline.chunks model chunks per stage, the bubble divided by about "
        "their number; gradient_accumulation_steps a multiple of the stages) or zb-h1 (zero "
        "bubble: 1f1b with each backward split into input and weight gradients, the weight "
        "gradients filling the bubble, with 1f1b's activation memory)")
      .Default(std::string("1f1b"))
      .Allowed({"1f1b", "gpipe", "interleaved-1f1b", "zb-h1"});
  r.Add("pipeline.chunks", T::kInt,
        "Model chunks per stage (Megatron's virtual pipeline stages): stage r of P holds the "
        "layer ranges of virtual stages r, P + r, ...; above 1 with interleaved-1f1b only")
      .Derived("2 with pipeline.schedule interleaved-1f1b, else 1")
      .Range(1, 1024)
      .Auto("2 with pipeline.schedule interleaved-1f1b, else 1");
  r.Add("pipeline.partition_method", T::kString,
        "How the decoder layers are divided among the stages (DeepSpeed's PipelineModule "
        "partition_method): parameters (balanced parameter counts), uniform (layer counts), "
        "type:<regex> (balanced counts of the layer classes the regex matches, ignoring case: "
        "Embeddings, DecoderBlock, LayerNorm or RmsNorm, LMHead) or time (balanced compute "
        "times, measured on the device when training starts)")
      .Default(std::string("parameters"));
}

// How checkpointed blocks are run; model.activation_checkpointing turns checkpointing on.
void AddCheckpointing(SettingsRegistry& r) {
  r.AddSection("activation_checkpointing",
               "How checkpointed blocks run (model.activation_checkpointing turns it on)");
  r.Add("activation_checkpointing.partition_activations", T::kBool,
        "Partition checkpointed inputs across tensor-parallel ranks; a no-op without tensor "
        "parallelism (Sluice runs tp = 1)")
      .Default(false);
  r.Add("activation_checkpointing.cpu_checkpointing", T::kBool,
        "Keep the checkpointed block inputs in pinned host memory (stream-ordered copies)")
      .Default(false);
  r.Add("activation_checkpointing.contiguous_memory_optimization", T::kBool,
        "Keep the checkpointed block inputs in one buffer with a slot per checkpointed block")
      .Default(false);
  r.Add("activation_checkpointing.synchronize_checkpoint_boundary", T::kBool,
        "Synchronize the compute stream at each checkpointed block's forward and backward")
      .Default(false);
  r.Add("activation_checkpointing.profile", T::kBool,
        "Time each block's recomputation in the backward (trace span, log line per pass)")
      .Default(false);
  r.Add("activation_checkpointing.number_checkpoints", T::kInt,
        "Checkpoint only the first N decoder blocks (more than model.n_layer: all)")
      .Unset("every block")
      .Min(1);

  r.AddSection("checkpoint", "Checkpoint saving and loading");
  r.Add("checkpoint.tag_validation", T::kEnum, "Check that the tag is identical on all ranks")
      .Default(std::string("Warn"))
      .Allowed({"Ignore", "Warn", "Fail"}, /*case_insensitive=*/true);
  r.Add("checkpoint.load_universal", T::kBool, "Load a checkpoint saved with another world size")
      .Default(false);
  r.Add("checkpoint.use_node_local_storage", T::kBool,
        "Save by local rank, for nodes without a shared file system")
      .Default(false);
  // Sluice's own keys (DeepSpeed saves when the training script calls save_checkpoint).
  r.Add("checkpoint.save_interval", T::kInt,
        "Save a checkpoint every N optimizer steps and at the end of the run; 0 never")
      .Default(int64_t{0})
      .Min(0);
  r.Add("checkpoint.keep_last", T::kInt, "Committed checkpoints kept (the newest N); 0 keeps all")
      .Default(int64_t{0})
      .Min(0);
  r.Add("checkpoint.save_final", T::kBool,
        "Save a checkpoint after the last step (for sluice convert RUN_DIR), also without "
        "save_interval")
      .Default(true);
  r.Add("checkpoint.dir", T::kString, "Folder of the step_N checkpoints and the latest pointer")
      .Unset("RUN_DIR/checkpoints");
}

// Far past any real model (the deepest have a few hundred layers), small enough that the products
// the estimator and the model builder form (layers x width^2, vocabulary x width, heads x
// sequence^2) stay far inside int64, and that the estimator's replay of the stage-3 coordinator
// (quadratic in the layers, as the coordinator's own look-ahead) takes seconds at most.
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxWidth = int64_t{1} << 20;  // d_model, d_ff, seq_len
constexpr int64_t kMaxHeads = int64_t{1} << 16;
constexpr int64_t kMaxVocabulary = int64_t{1} << 24;

void AddModel(SettingsRegistry& r) {
  r.AddSection("model", "Model architecture (Sluice)");
  r.Add("model.family", T::kEnum, "Architecture: gpt2 or llama")
      .Default(std::string("gpt2"))
      .Allowed({"gpt2", "llama"});
  r.Add("model.n_layer", T::kInt, "Transformer blocks").Default(int64_t{2}).Min(1).Max(kMaxLayers);
  r.Add("model.n_head", T::kInt, "Attention heads").Default(int64_t{4}).Min(1).Max(kMaxHeads);
  r.Add("model.n_kv_head", T::kInt, "Key/value heads (grouped-query attention)")
      .Derived("n_head")
      .Min(1)
      .Max(kMaxHeads)
      .Auto("n_head");
  r.Add("model.d_model", T::kInt, "Hidden size").Default(int64_t{64}).Min(1).Max(kMaxWidth);
  r.Add("model.d_ff", T::kInt, "Feed-forward inner size")
      .Derived("gpt2: 4*d_model; llama: 8/3*d_model rounded up to a multiple of 256")
      .Min(1)
      .Max(kMaxWidth)
      .Auto("the family's rule");
  r.Add("model.vocab_size", T::kInt, "Vocabulary size (256 = bytes)")
      .Default(int64_t{256})
      .Min(1)
      .Max(kMaxVocabulary);
  r.Add("model.seq_len", T::kInt, "Context length in tokens")
      .Default(int64_t{64})
      .Min(1)
      .Max(kMaxWidth);
  r.Add("model.max_position_embeddings", T::kInt,
        "Positions the model has (gpt2: rows of its position table, at least seq_len; llama: "
        "recorded for sluice convert); Hugging Face's name")
      .Derived("model.seq_len, or config.json's n_positions / max_position_embeddings")
      .Min(1)
      .Max(kMaxWidth);
  r.Add("model.rope_theta", T::kFloat, "Base of the rotary embedding's frequencies (llama)")
      .Default(10000.0)
      .Min(0, /*exclusive=*/true);
  r.Add("model.norm_eps", T::kFloat, "Epsilon of LayerNorm (gpt2) and RMSNorm (llama)")
      .Default(1e-5)
      .Min(0, /*exclusive=*/true);
  r.Add("model.tie_embeddings", T::kBool, "Share the input embedding with the output projection")
      .Derived("gpt2: true; llama: false")
      .Auto("the family's rule");
  r.Add("model.dtype", T::kEnum, "Compute dtype of weights and activations: bf16, f16 or f32")
      .Derived("bf16 if bf16.enabled, f16 if fp16.enabled, else f32")
      .Allowed({"bf16", "f16", "f32"})
      .Auto("from the bf16/fp16 sections");
  r.Add("model.matmul_precision", T::kEnum,
        "How the linear layers multiply fp32 matrices, as PyTorch's float32_matmul_precision: "
        "fp32 exactly; tf32 or bf16 with the inputs rounded to that type and fp32 accumulation, "
        "on a GPU's tensor cores (cuda only)")
      .Default(std::string("fp32"))
      .Allowed({"fp32", "tf32", "bf16"});
  r.Add("model.init_from", T::kString,
        "Initial weights: a safetensors file, index or folder (its config.json fills the model "
        "settings left unset), or a Sluice checkpoint (weights only, fresh optimizer)")
      .Unset("random initialization");
  r.Add("model.init_std", T::kFloat, "Standard deviation of the random initialization")
      .Default(0.02)
      .Min(0);
  r.Add("model.activation_checkpointing", T::kBool,
        "Checkpoint decoder blocks: keep each block's input, recompute the block in the "
        "backward (the activation_checkpointing section says how)")
      .Default(false);
}

void AddData(SettingsRegistry& r) {
  r.AddSection("data", "Training data (Sluice)");
  r.Add("data.train_path", T::kString, "Training token or text file")
      .Unset("training needs it; config check does not");
  r.Add("data.val_path", T::kString, "Validation file")
      .Unset("hold out val_fraction of the training file");
  r.Add("data.format", T::kEnum,
        "text (bytes), nanogpt_u16 (nanoGPT .bin), llmc_bin (llm.c header), auto (by content)")
      .Default(std::string("auto"))
      .Allowed({"text", "nanogpt_u16", "llmc_bin", "auto"});
  r.Add("data.val_fraction", T::kFloat,
        "Share of the training file held out, in evenly spaced blocks, when val_path is unset")
      .Default(0.1)
      .Min(0)
      .Max(1, /*exclusive=*/true);
  r.Add("data.seed", T::kInt, "Seed of batch sampling").Default(int64_t{1234});
  r.Add("data.eval_batches", T::kInt, "Micro-batches per evaluation").Default(int64_t{8}).Min(1);
}

void AddDevice(SettingsRegistry& r) {
  r.AddSection("device", "Compute device (Sluice)");
  r.Add("device.type", T::kEnum,
        "cpu (an arena with a hard capacity) or cuda; DeepSpeed configs mean a GPU")
      .Default(std::string("cuda"))
      .Allowed({"cpu", "cuda"});
  r.Add("device.index", T::kInt, "Device ordinal (cuda: GPU index)").Default(int64_t{0}).Min(0);
  r.Add("device.memory_limit", T::kSize, "Device memory budget, e.g. 256MiB")
      .Derived("required for cpu; cuda: the GPU's memory")
      .Min(1)
      .Auto("cuda: the GPU's memory (cpu: no meaning)");
  r.Add("device.host_memory_limit", T::kSize, "Host memory budget for offloaded state")
      .Derived("available RAM minus a margin of max(1GiB, 10%)")
      .Min(1)
      .Auto("available RAM minus a margin of max(1GiB, 10%)");
  r.Add("device.threads", T::kInt, "CPU threads for kernels and CPU Adam; 0 = all cores")
      .Default(int64_t{0})
      .Min(0);
  r.Add("device.cpu_gemm", T::kEnum,
        "Kernels of the CPU ops: deterministic (Sluice's fixed-order GEMM and loops: the same "
        "bits on any x86-64 CPU and thread count) or blas (the fastest library GEMM built: "
        "oneDNN, else OpenBLAS on the core Sluice sets for the CPU; SLUICE_CPU_BLAS=onednn or "
        "openblas chooses; and the other ops' AVX-512 / AVX2 vector kernels; the bits depend on "
        "the library, the CPU and the threads)")
      .Default(std::string("deterministic"))
      .Allowed({"blas", "deterministic"});
  r.Add("device.memory_protection", T::kEnum,
        "Fault on host access to cpu device memory (protection keys): off, on (fails where the "
        "CPU or kernel has none) or auto (on where available); SLUICE_DEVICE_PROTECT overrides it")
      .Default(std::string("auto"))
      .Allowed({"off", "on", "auto"});
}

void AddRun(SettingsRegistry& r) {
  r.AddSection("run", "The run (Sluice)");
  r.Add("run.dir", T::kString, "Output folder: checkpoints, logs, records, traces")
      .Default(std::string("runs/default"));
  r.Add("run.steps", T::kInt, "Optimizer steps to train").Default(int64_t{100}).Min(1);
  r.Add("run.seed", T::kInt, "Seed of parameter initialization").Default(int64_t{1234});
  r.Add("run.eval_interval", T::kInt, "Validation loss every N optimizer steps; 0 never")
      .Default(int64_t{100})
      .Min(0);
  r.Add("run.log_interval", T::kInt, "Log a progress line every N optimizer steps")
      .Default(int64_t{10})
      .Min(1);
  r.Add("run.log_level", T::kEnum, "Log level: trace, debug, info, warn, error")
      .Default(std::string("info"))
      .Allowed({"trace", "debug", "info", "warn", "error"});
  r.Add("run.comm_timeout", T::kFloat, "Seconds before a collective is declared hung")
      .Default(300.0)
      .Min(0, /*exclusive=*/true)
      .Max(kMaxCommTimeoutSeconds);
  r.Add("run.trace", T::kBool, "Write a Perfetto trace of every operation to run.dir")
      .Default(false);
  r.Add("run.profile_ops", T::kBool,
        "Time every op of the ops table on the device (two events per op) and report the device "
        "time per op per training step in the summary (summary.json op_profile); slows the run")
      .Default(false);
}

// DeepSpeed's monitors that write local files (engine/train/monitor.h); its defaults.
void AddMonitors(SettingsRegistry& r) {
  r.AddSection("tensorboard",
               "TensorBoard events file of the run's scalars (rank 0), as DeepSpeed's monitor");
  r.Add("tensorboard.enabled", T::kBool, "Write the scalars to a TensorBoard events file")
      .Default(false);
  r.Add("tensorboard.output_path", T::kString,
        "Folder of the job folder; empty: the working directory")
      .Default(std::string(""));
  r.Add("tensorboard.job_name", T::kString, "Job folder inside output_path")
      .Default(std::string("DeepSpeedJobName"));
  r.AddSection("csv_monitor",
               "One CSV file per scalar of the run (rank 0), as DeepSpeed's monitor");
  r.Add("csv_monitor.enabled", T::kBool, "Write the scalars to CSV files").Default(false);
  r.Add("csv_monitor.output_path", T::kString,
        "Folder of the job folder; empty: the working directory")
      .Default(std::string(""));
  r.Add("csv_monitor.job_name", T::kString, "Job folder inside output_path")
      .Default(std::string("DeepSpeedJobName"));
}

const SettingsRegistry& BuildRegistry() {
  static SettingsRegistry* registry = [] {
    auto* r = new SettingsRegistry("SLUICE_CFG_");
    AddBatchAndTopLevel(*r);
    AddOptimizer(*r);
    AddScheduler(*r);
    AddPrecision(*r);
    AddZero(*r);
    AddAio(*r);
    AddParallel(*r);
    AddCheckpointing(*r);
    AddModel(*r);
    AddData(*r);
    AddDevice(*r);
    AddRun(*r);
    AddMonitors(*r);
    return r;
  }();
  return *registry;
}

const std::vector<ConfigKeyAlias>& Aliases() {
  static const std::vector<ConfigKeyAlias> aliases = {
      {"bfloat16", "bf16", LogLevel::kDebug, "DeepSpeed's older name of the bf16 section"},
      {"aio.thread_count", "aio.intra_op_parallelism", LogLevel::kInfo,
       "DeepSpeed silently ignores thread_count since it was renamed; Sluice honours it"},
      {"aio.num_threads", "aio.intra_op_parallelism", LogLevel::kInfo,
       "ds_nvme_tune writes num_threads, which DeepSpeed ignores; Sluice honours it"},
      // DeepSpeed's pydantic field names, accepted beside their stage3_ aliases.
      {"zero_optimization.prefetch_bucket_size", "zero_optimization.stage3_prefetch_bucket_size",
       LogLevel::kDebug, "DeepSpeed's field name"},
      {"zero_optimization.param_persistence_threshold",
       "zero_optimization.stage3_param_persistence_threshold", LogLevel::kDebug,
       "DeepSpeed's field name"},
      {"zero_optimization.max_live_parameters", "zero_optimization.stage3_max_live_parameters",
       LogLevel::kDebug, "DeepSpeed's field name"},
      {"zero_optimization.max_reuse_distance", "zero_optimization.stage3_max_reuse_distance",
       LogLevel::kDebug, "DeepSpeed's field name"},
      {"zero_optimization.gather_16bit_weights_on_model_save",
       "zero_optimization.stage3_gather_16bit_weights_on_model_save", LogLevel::kDebug,
       "DeepSpeed's field name"},
      {"zero_optimization.stage3_gather_fp16_weights_on_model_save",
       "zero_optimization.stage3_gather_16bit_weights_on_model_save", LogLevel::kWarn,
       "deprecated in DeepSpeed; use stage3_gather_16bit_weights_on_model_save"},
  };
  return aliases;
}

const std::vector<UnsupportedConfigKey>& UnsupportedKeys() {
  // Sources: deepspeed-study.md §1 tables (DeepSpeed 0.19.6).
  static const std::vector<UnsupportedConfigKey> keys = {
      // Top level.
      {"managed_gradient_accumulation", false, {"true"}, ""},
      {"zero_force_ds_cpu_optimizer", false, {"true", "false"}, "Sluice has no client optimizers"},
      {"memory_breakdown", false, {"false"}, ""},
      {"dump_state", false, {"false"}, ""},
      {"communication_data_type",
       false,
       {"fp32"},
       "Sluice reduces gradients in fp32 only",
       "Sluice reduces gradients in fp32"},
      {"gradient_allreduce_op", false, {"mean"}, ""},
      {"sparse_gradients", false, {"false"}, ""},
      {"allgather_size", false, {}, "use zero_optimization.allgather_bucket_size"},
      {"dataloader_drop_last", false, {"false"}, ""},
      {"vocabulary_size", false, {}, "use model.vocab_size"},
      {"sequence_parallel_size", false, {"1"}, ""},
      {"use_data_before_expert_parallelism", false, {"false"}, ""},
      {"graph_harvesting", false, {"false"}, ""},
      {"data_types.grad_accum_dtype",
       false,
       {"fp32"},
       "Sluice accumulates gradients in fp32 only",
       "Sluice accumulates gradients in fp32"},
      {"data_types.param_dtype", false, {}, "the parameter dtype follows fp16/bf16 (model.dtype)"},
      {"data_types.buffer_dtype", false, {}, ""},
      {"tensor_parallel.tp_overlap_comm", false, {"false"}, ""},
      {"tensor_parallel.tp", true, {}, "use tensor_parallel.autotp_size"},
      {"tensor_parallel.partition_config", true, {}, ""},
      {"tensor_parallel.preset_model", false, {}, ""},
      {"tensor_parallel.keep_module_on_host", false, {"false"}, ""},
      {"tensor_parallel.dtype", false, {}, "the compute dtype follows fp16/bf16 (model.dtype)"},
      {"tensor_parallel.kernel_inject", false, {"false"}, ""},
      {"pipeline.partition", false, {}, ""},
      {"pipeline.seed_layers", false, {"false"}, ""},
      {"pipeline.activation_checkpoint_interval", false, {"0"}, ""},
      {"pipeline.pipe_partitioned", false, {}, ""},
      {"pipeline.grad_partitioned", false, {}, ""},
      {"pipeline.use_reentrant", false, {}, ""},
      {"compile", true, {}, ""},
      {"timers", true, {}, ""},
      {"weight_quantization", true, {}, ""},
      {"compression_training", true, {}, ""},
      {"sparse_attention", true, {}, ""},
      {"quantize_training", true, {"enabled=false"}, ""},
      {"progressive_layer_drop", true, {"enabled=false"}, ""},
      {"eigenvalue", true, {"enabled=false"}, ""},
      {"flops_profiler", true, {"enabled=false"}, ""},
      {"wandb",
       true,
       {"enabled=false"},
       "Weights & Biases logs to a network service, which Sluice does not reach; tensorboard and "
       "csv_monitor write the same scalars to local files"},
      {"comet",
       true,
       {"enabled=false"},
       "Comet logs to a network service, which Sluice does not reach; tensorboard and "
       "csv_monitor write the same scalars to local files"},
      {"comms_logger", true, {"enabled=false"}, ""},
      {"autotuning", true, {"enabled=false"}, ""},
      {"elasticity", true, {"enabled=false"}, ""},
      {"nebula", true, {"enabled=false"}, ""},
      {"data_efficiency", true, {"enabled=false"}, ""},
      {"curriculum_learning", true, {"enabled=false"}, ""},
      {"hybrid_engine", true, {"enabled=false"}, ""},
      {"amp", true, {"enabled=false"}, ""},
      {"torch_autocast", true, {"enabled=false"}, ""},
      {"optimizer.legacy_fusion", false, {"false"}, ""},
      // optimizer.params
      {"optimizer.params.torch_adam",
       false,
       {"false", "true"},
       "",
       "Sluice runs its own Adam kernel, the update of torch.optim.Adam/AdamW (the type and "
       "adam_w_mode choose which)"},
      {"optimizer.params.fp32_optimizer_states", false, {"true"}, "Adam moments are fp32"},
      {"optimizer.params.amsgrad", false, {"false"}, ""},
      {"optimizer.params.set_grad_none", false, {"true", "false"}, "no effect in Sluice"},
      // fp16 / bf16
      {"fp16.auto_cast", false, {"false"}, ""},
      {"fp16.consecutive_hysteresis", false, {"false"}, ""},
      {"fp16.fp16_master_weights_and_grads", false, {"false"}, ""},
      {"bf16.immediate_grad_update", false, {"false"}, ""},
      {"bf16.check_grad_overflow", false, {}, ""},
      {"bf16.bf16_master_weights_and_grads", false, {"false"}, ""},
      {"bf16.bf16_optimizer_states", false, {"false"}, ""},
      // zero_optimization
      {"zero_optimization.reduce_scatter", false, {"true"}, "Sluice always reduce-scatters"},
      {"zero_optimization.use_multi_rank_bucket_allreduce",
       false,
       {"true", "false"},
       "no effect in Sluice"},
      {"zero_optimization.allgather_partitions", false, {"true"}, ""},
      {"zero_optimization.load_from_fp32_weights", false, {"true"}, ""},
      {"zero_optimization.elastic_checkpoint", false, {"false"}, ""},
      {"zero_optimization.zenflow", true, {}, ""},
      {"zero_optimization.stage3_model_persistence_threshold", false, {"9223372036854775807"}, ""},
      {"zero_optimization.model_persistence_threshold", false, {"9223372036854775807"}, ""},
      {"zero_optimization.stage3_module_granularity_threshold", false, {"0"}, ""},
      {"zero_optimization.module_granularity_threshold", false, {"0"}, ""},
      {"zero_optimization.stage3_use_all_reduce_for_fetch_params", false, {"false"}, ""},
      {"zero_optimization.use_all_reduce_for_fetch_params", false, {"false"}, ""},
      {"zero_optimization.stage3_allgather_sequential", false, {"false"}, ""},
      {"zero_optimization.allgather_sequential", false, {"false"}, ""},
      {"zero_optimization.stage3_partition_stream_chunk_size", false, {"0"}, ""},
      {"zero_optimization.partition_stream_chunk_size", false, {"0"}, ""},
      {"zero_optimization.ignore_unused_parameters", false, {"true"}, ""},
      {"zero_optimization.legacy_stage1", false, {"false"}, ""},
      {"zero_optimization.round_robin_gradients",
       false,
       {"false", "true"},
       "",
       "it orders DeepSpeed's gradient copies to the host (ZeRO-Offload, stages 1 and 2) and does "
       "not change results; Sluice schedules its own copies"},
      {"zero_optimization.zero_hpz_partition_size", false, {"1"}, ""},
      {"zero_optimization.zero_quantized_weights", false, {"false"}, ""},
      {"zero_optimization.zero_quantized_nontrainable_weights", false, {"false"}, ""},
      {"zero_optimization.zero_quantized_gradients", false, {"false"}, ""},
      {"zero_optimization.zeropp_loco_param", true, {}, ""},
      {"zero_optimization.mics_shard_size", false, {"-1"}, ""},
      {"zero_optimization.mics_hierarchical_params_gather", false, {"false"}, ""},
      {"zero_optimization.memory_efficient_linear",
       false,
       {"true", "false"},
       "no effect in Sluice"},
      {"zero_optimization.pipeline_loading_checkpoint", false, {"false"}, ""},
      {"zero_optimization.override_module_apply", false, {"true", "false"}, "no effect in Sluice"},
      {"zero_optimization.log_trace_cache_warnings", false, {"false"}, ""},
      {"zero_optimization.enable_sanity_checks", false, {"false"}, ""},
      {"zero_optimization.save_muon_momentum_buffer_in_memory", false, {"false"}, ""},
      {"zero_optimization.leaf_module", true, {}, ""},
      {"zero_optimization.offload_optimizer.fast_init", false, {"false"}, ""},
      {"zero_optimization.offload_optimizer.super_offload", false, {"false"}, ""},
      {"zero_optimization.offload_optimizer.cpuadam_cores_perc", false, {}, "use device.threads"},
      {"zero_optimization.offload_optimizer.convert_grad_on_cpu", false, {"true"}, ""},
      // aio
      {"aio.use_gds", false, {"false"}, ""},
      // checkpoint
      {"checkpoint.parallel_write", true, {}, ""},
      {"checkpoint.checkpoint_serialization", false, {"true"}, ""},
      {"checkpoint.writer", true, {}, ""},
  };
  return keys;
}

const std::vector<IgnoredConfigKey>& IgnoredKeys() {
  // Each checked in DeepSpeed's source (deepspeed/runtime/config.py, engine.py, zero/).
  static const std::vector<IgnoredConfigKey> keys = {
      {"cuda_visible_devices",
       "DeepSpeed never reads it: the launcher's --include or CUDA_VISIBLE_DEVICES choose the "
       "GPUs (Sluice: device.index)"},
      {"disable_allgather", "DeepSpeed reads it but never uses it"},
      {"fp32_allreduce",
       "DeepSpeed has no such key and never reads it; Sluice reduces gradients in fp32 whatever "
       "it says",
       {"true"}},
      {"seq_parallel_communication_data_type",
       "it applies to sequence parallelism only (sequence_parallel_size > 1), which Sluice does "
       "not have"},
      {"monitor_config",
       "not a DeepSpeed key: DeepSpeed reads its monitors from the top-level tensorboard, wandb, "
       "csv_monitor and comet sections"},
      {"comms_config", "not a DeepSpeed key: DeepSpeed's communication logging is comms_logger"},
  };
  return keys;
}

}  // namespace

const SettingsRegistry& ConfigRegistry() { return BuildRegistry(); }

const IgnoredConfigKey* FindIgnoredConfigKey(std::string_view path) {
  for (const IgnoredConfigKey& key : IgnoredKeys()) {
    if (key.path == path) return &key;
  }
  return nullptr;
}

const ConfigKeyAlias* FindConfigAlias(std::string_view path) {
  for (const ConfigKeyAlias& alias : Aliases()) {
    if (alias.path == path) return &alias;
  }
  return nullptr;
}

const UnsupportedConfigKey* FindUnsupportedConfigKey(std::string_view path) {
  for (const UnsupportedConfigKey& key : UnsupportedKeys()) {
    if (key.path == path) return &key;
  }
  return nullptr;
}

const char* UnsupportedConfigValue(std::string_view path, std::string_view value) {
  std::string lower(value);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (path == "optimizer.type") {
    static const char* kDeepSpeed[] = {"onebitadam", "zerooneadam", "onebitlamb",
                                       "adagrad",    "muadam",      "muadamw",
                                       "musgd",      "muon",        "sgd"};
    for (const char* name : kDeepSpeed) {
      if (lower == name) return "a DeepSpeed optimizer";
    }
  }
  if (path == "scheduler.type" && (value == "OneCycle" || value == "LRRangeTest")) {
    return "a DeepSpeed scheduler";
  }
  return nullptr;
}

std::vector<std::string> KnownConfigChildNames(std::string_view section) {
  std::vector<std::string> names = ConfigRegistry().ChildNames(section);
  auto add = [&](std::string_view path) {
    if (SettingParentPath(path) == section) names.emplace_back(SettingLeafName(path));
  };
  for (const ConfigKeyAlias& alias : Aliases()) add(alias.path);
  for (const UnsupportedConfigKey& key : UnsupportedKeys()) add(key.path);
  for (const IgnoredConfigKey& key : IgnoredKeys()) add(key.path);
  return names;
}

std::vector<std::string> KnownConfigPathsNamed(std::string_view name) {
  std::vector<std::string> paths;
  for (const SettingSpec& spec : ConfigRegistry().settings()) {
    if (SettingLeafName(spec.path) == name) paths.push_back(spec.path);
  }
  for (const ConfigKeyAlias& alias : Aliases()) {
    if (SettingLeafName(alias.path) == name) paths.emplace_back(alias.path);
  }
  for (const UnsupportedConfigKey& key : UnsupportedKeys()) {
    if (SettingLeafName(key.path) == name) paths.emplace_back(key.path);
  }
  for (const IgnoredConfigKey& key : IgnoredKeys()) {
    if (SettingLeafName(key.path) == name) paths.emplace_back(key.path);
  }
  return paths;
}

const std::vector<std::string>& SchedulerParamNames(std::string_view scheduler_type) {
  static const std::map<std::string, std::vector<std::string>, std::less<>> params = {
      {"WarmupLR",
       {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type",
        "last_batch_iteration"}},
      {"WarmupDecayLR",
       {"total_num_steps", "warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type",
        "last_batch_iteration"}},
      {"WarmupCosineLR",
       {"total_num_steps", "warmup_min_ratio", "warmup_num_steps", "cos_min_ratio", "warmup_type",
        "last_batch_iteration"}},
  };
  static const std::vector<std::string> none;
  auto it = params.find(scheduler_type);
  return it == params.end() ? none : it->second;
}

}  // namespace sluice
