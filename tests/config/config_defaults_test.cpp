// Defaults are DeepSpeed's code defaults (deepspeed-study.md §1), not its docs.
#include <gtest/gtest.h>

#include "config_test_util.h"
#include "engine/config/config.h"

namespace sluice {
namespace {

using testing::MustLoadYaml;

TEST(ConfigDefaultsTest, TopLevelMatchesDeepSpeedCode) {
  Config c = MustLoadYaml("train_batch_size: 8\n");
  EXPECT_EQ(c.gradient_clipping, 1.0);          // #8068 changed 0.0 -> 1.0
  EXPECT_FALSE(c.steps_per_print.has_value());  // None: never (the docs say 10)
  EXPECT_FALSE(c.wall_clock_breakdown);
  EXPECT_FALSE(c.fp16.enabled);
  EXPECT_FALSE(c.bf16.enabled);
}

TEST(ConfigDefaultsTest, ZeroMatchesDeepSpeedCode) {
  Config c = MustLoadYaml("train_batch_size: 8\n");
  const ZeroConfig& z = c.zero;
  EXPECT_EQ(z.stage, 0);
  EXPECT_FALSE(z.overlap_comm);  // true only at stage 3
  EXPECT_TRUE(z.contiguous_gradients);
  EXPECT_EQ(z.reduce_bucket_size, 500000000);
  EXPECT_EQ(z.allgather_bucket_size, 500000000);
  EXPECT_EQ(z.sub_group_size, 1000000000);                  // docs sample says 1e12
  EXPECT_EQ(z.stage3_prefetch_bucket_size, 50000000);       // docs say 5e8
  EXPECT_EQ(z.stage3_param_persistence_threshold, 100000);  // docs sample 1e6
  EXPECT_EQ(z.stage3_max_live_parameters, 1000000000);
  EXPECT_EQ(z.stage3_max_reuse_distance, 1000000000);
  EXPECT_FALSE(z.stage3_gather_16bit_weights_on_model_save);
  EXPECT_EQ(z.offload_optimizer.device, OffloadDevice::kNone);  // docs say cpu
  EXPECT_TRUE(z.offload_optimizer.pin_memory);                  // true since #8207
  EXPECT_EQ(z.offload_optimizer.buffer_count, 4);
  EXPECT_EQ(z.offload_optimizer.ratio, 1.0);
  EXPECT_TRUE(z.offload_optimizer.pipeline_read);  // deliberate difference (docs/config.md)
  EXPECT_TRUE(z.offload_optimizer.pipeline_write);
  EXPECT_EQ(z.offload_param.device, OffloadDevice::kNone);
  EXPECT_TRUE(z.offload_param.pin_memory);
  EXPECT_EQ(z.offload_param.buffer_count, 5);
  EXPECT_EQ(z.offload_param.buffer_size, 100000000);  // elements
  EXPECT_EQ(z.offload_param.max_in_cpu, 1000000000);
}

TEST(ConfigDefaultsTest, OverlapCommDefaultsToTrueAtStageThree) {
  Config c = MustLoadYaml("train_batch_size: 8\nzero_optimization: {stage: 3}\n");
  EXPECT_TRUE(c.zero.overlap_comm);
  EXPECT_EQ(c.values.entry("zero_optimization.overlap_comm").source, ValueSource::kDerived);
  c = MustLoadYaml("train_batch_size: 8\nzero_optimization: {stage: 3, overlap_comm: false}\n");
  EXPECT_FALSE(c.zero.overlap_comm);
  for (int stage : {1, 2}) {
    c = MustLoadYaml(fmt::format("train_batch_size: 8\nzero_optimization: {{stage: {}}}\n", stage));
    EXPECT_FALSE(c.zero.overlap_comm) << "stage " << stage;
  }
}

TEST(ConfigDefaultsTest, AioMatchesDeepSpeed) {
  Config c = MustLoadYaml("train_batch_size: 8\n");
  EXPECT_EQ(c.aio.block_size, 1048576);
  EXPECT_EQ(c.aio.queue_depth, 8);
  EXPECT_EQ(c.aio.intra_op_parallelism, 1);
  EXPECT_FALSE(c.aio.single_submit);
  EXPECT_TRUE(c.aio.overlap_events);
}

TEST(ConfigDefaultsTest, Fp16MatchesDeepSpeed) {
  Config c = MustLoadYaml("train_batch_size: 8\nfp16: {enabled: true}\n");
  EXPECT_TRUE(c.fp16.enabled);
  EXPECT_EQ(c.fp16.loss_scale, 0.0);  // dynamic
  EXPECT_EQ(c.fp16.initial_scale_power, 16);
  EXPECT_EQ(c.fp16.loss_scale_window, 1000);
  EXPECT_EQ(c.fp16.hysteresis, 2);
  EXPECT_EQ(c.fp16.min_loss_scale, 1.0);
  EXPECT_EQ(c.model.dtype, DType::kF16);  // follows the section
}

TEST(ConfigDefaultsTest, OptimizerAndSchedulerMatchDeepSpeed) {
  Config c = MustLoadYaml("train_batch_size: 8\noptimizer: {type: Adam}\n");
  EXPECT_EQ(c.optimizer.type, OptimizerType::kAdam);
  EXPECT_TRUE(c.optimizer.adam_w_mode);  // DeepSpeed's Adam defaults to adam_w_mode true
  EXPECT_EQ(c.optimizer.lr, 1e-3);
  EXPECT_EQ(c.optimizer.beta1, 0.9);
  EXPECT_EQ(c.optimizer.beta2, 0.999);
  EXPECT_EQ(c.optimizer.eps, 1e-8);
  EXPECT_EQ(c.optimizer.weight_decay, 0.0);
  EXPECT_EQ(c.scheduler.type, SchedulerType::kNone);

  c = MustLoadYaml(
      "train_batch_size: 8\noptimizer: {type: Adam, params: {adam_w_mode: false, lr: 0.01}}\n"
      "scheduler: {type: WarmupLR}\n");
  EXPECT_FALSE(c.optimizer.adam_w_mode);
  EXPECT_EQ(c.scheduler.type, SchedulerType::kWarmupLR);
  EXPECT_EQ(c.scheduler.warmup_min_lr, 0.0);
  EXPECT_EQ(c.scheduler.warmup_max_lr, 0.01);  // None -> the optimizer's lr
  EXPECT_EQ(c.scheduler.warmup_num_steps, 1000);
  EXPECT_EQ(c.scheduler.warmup_type, WarmupType::kLog);
  EXPECT_EQ(c.scheduler.last_batch_iteration, -1);

  c = MustLoadYaml(
      "train_batch_size: 8\nscheduler: {type: WarmupDecayLR, params: {total_num_steps: 500}}\n");
  EXPECT_EQ(c.scheduler.warmup_max_lr, 0.001);  // WarmupDecayLR's own default
  EXPECT_EQ(c.scheduler.total_num_steps, 500);

  c = MustLoadYaml(
      "train_batch_size: 8\nscheduler: {type: WarmupCosineLR, params: {total_num_steps: 500}}\n");
  EXPECT_EQ(c.scheduler.warmup_min_ratio, 0.0);
  EXPECT_EQ(c.scheduler.cos_min_ratio, 1e-4);
  EXPECT_EQ(c.scheduler.warmup_num_steps, 1000);
}

TEST(ConfigDefaultsTest, AdamWForcesDecoupledWeightDecay) {
  Config c =
      MustLoadYaml("train_batch_size: 8\noptimizer: {type: adamw, params: {adam_w_mode: false}}\n");
  EXPECT_EQ(c.optimizer.type, OptimizerType::kAdamW);
  EXPECT_TRUE(c.optimizer.adam_w_mode);
  ASSERT_FALSE(c.notes.empty());
  EXPECT_NE(c.notes.back().find("type AdamW always decouples weight decay"), std::string::npos);
}

TEST(ConfigDefaultsTest, SluiceSectionsDefaults) {
  Config c = MustLoadYaml("train_batch_size: 8\n");
  EXPECT_FALSE(c.model.present);
  EXPECT_EQ(c.device.type, DeviceType::kCuda);  // DeepSpeed configs mean a GPU
  EXPECT_FALSE(c.device.memory_limit.has_value());
  EXPECT_EQ(c.run.dir, "runs/default");
  EXPECT_EQ(c.run.comm_timeout_s, 300.0);
  EXPECT_FALSE(c.run.trace);
  EXPECT_EQ(c.model.init_std, 0.02);
  EXPECT_FALSE(c.data.train_path.has_value());
  EXPECT_EQ(c.data.format, DataFormat::kAuto);
  EXPECT_EQ(c.checkpoint.tag_validation, TagValidation::kWarn);
}

TEST(ConfigDefaultsTest, ModelDerivedValues) {
  Config c = MustLoadYaml("train_batch_size: 8\nmodel: {d_model: 96, n_head: 6}\n");
  EXPECT_TRUE(c.model.present);
  EXPECT_EQ(c.model.n_kv_head, 6);
  EXPECT_EQ(c.model.d_ff, 384);
  EXPECT_TRUE(c.model.tie_embeddings);
  EXPECT_EQ(c.model.dtype, DType::kF32);

  c = MustLoadYaml(
      "train_batch_size: 8\nbf16: {enabled: true}\n"
      "model: {family: llama, d_model: 4096, n_head: 32, n_kv_head: 8}\n");
  EXPECT_EQ(c.model.d_ff, 11008);  // LLaMA-7B's feed-forward size
  EXPECT_FALSE(c.model.tie_embeddings);
  EXPECT_EQ(c.model.dtype, DType::kBF16);
  EXPECT_EQ(c.model.n_kv_head, 8);
}

TEST(ConfigDefaultsTest, ModelDtypeEnablesItsSection) {
  Config c = MustLoadYaml("train_batch_size: 8\nmodel: {dtype: bf16}\n");
  EXPECT_TRUE(c.bf16.enabled);
  EXPECT_EQ(c.values.entry("bf16.enabled").source, ValueSource::kDerived);
  EXPECT_FALSE(c.fp16.enabled);
}

TEST(ConfigDefaultsTest, EveryDefaultIsValidAndEverySettingReachesTheStruct) {
  const SettingsRegistry& registry = ConfigRegistry();
  for (const SettingSpec& spec : registry.settings()) {
    EXPECT_TRUE(registry.Validate(spec, spec.default_value).ok()) << spec.path;
    EXPECT_FALSE(spec.doc.empty()) << spec.path;
    EXPECT_EQ(spec.doc.find('\n'), std::string::npos) << spec.path << ": one-line doc";
  }
  Config c = MustLoadYaml("train_batch_size: 8\nscheduler: {type: WarmupLR}\n");
  EXPECT_EQ(c.values.UnreadPaths(), std::vector<std::string>{})
      << "a setting that BuildConfigSections never reads";
}

}  // namespace
}  // namespace sluice
