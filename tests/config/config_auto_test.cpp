// "auto" (HF Trainer style) is resolved from other keys or to the default, and recorded.
#include <gtest/gtest.h>

#include "config_test_util.h"

namespace sluice {
namespace {

using testing::IsolatedSources;
using testing::LoadYaml;
using testing::MustLoadYaml;

TEST(ConfigAutoTest, BatchAutoFollowsTheGivenKeys) {
  ConfigSources sources = IsolatedSources();
  sources.world_size = 4;
  Config c = MustLoadYaml(
      "train_batch_size: auto\ntrain_micro_batch_size_per_gpu: 2\n"
      "gradient_accumulation_steps: auto\n",
      sources);
  EXPECT_EQ(c.batch.train_batch_size, 8);
  EXPECT_EQ(c.batch.gradient_accumulation_steps, 1);
  const SettingEntry& tbs = c.values.entry("train_batch_size");
  EXPECT_EQ(tbs.source, ValueSource::kFile);
  EXPECT_EQ(tbs.note, "auto -> 8: micro batch * world size 4");
}

// Nothing defines the micro batch: the Hugging Face Trainer's per_device_train_batch_size default.
TEST(ConfigAutoTest, AllBatchKeysAutoFallBackToTheTrainersMicroBatch) {
  ConfigSources sources = IsolatedSources();
  sources.world_size = 2;
  Config c = MustLoadYaml(
      "train_batch_size: auto\ntrain_micro_batch_size_per_gpu: auto\n"
      "gradient_accumulation_steps: 4\n",
      sources);
  EXPECT_EQ(c.batch.micro_batch_per_gpu, 8);
  EXPECT_EQ(c.batch.gradient_accumulation_steps, 4);
  EXPECT_EQ(c.batch.train_batch_size, 64);
}

TEST(ConfigAutoTest, OptimizerAndSchedulerAuto) {
  Config c = MustLoadYaml(
      "train_batch_size: 8\nrun: {steps: 321}\n"
      "optimizer: {type: AdamW, params: {lr: 2e-4, betas: auto, eps: auto, weight_decay: auto}}\n"
      "scheduler: {type: WarmupDecayLR, params: {warmup_min_lr: auto, warmup_max_lr: auto,\n"
      "            warmup_num_steps: auto, total_num_steps: auto}}\n"
      "gradient_clipping: auto\n");
  EXPECT_EQ(c.optimizer.beta1, 0.9);
  EXPECT_EQ(c.optimizer.beta2, 0.999);
  EXPECT_EQ(c.optimizer.eps, 1e-8);
  EXPECT_EQ(c.optimizer.weight_decay, 0.0);
  EXPECT_EQ(c.scheduler.warmup_min_lr, 0.0);
  EXPECT_EQ(c.scheduler.warmup_max_lr, 2e-4);   // the optimizer's lr, as the HF integration does
  EXPECT_EQ(c.scheduler.warmup_num_steps, 0);   // the Trainer's warmup_steps and warmup_ratio
  EXPECT_EQ(c.scheduler.total_num_steps, 321);  // run.steps
  EXPECT_EQ(c.gradient_clipping, 1.0);
  EXPECT_EQ(c.values.entry("scheduler.params.total_num_steps").note, "auto -> 321: run.steps");
  EXPECT_EQ(c.values.entry("optimizer.params.betas").note,
            "auto -> [0.9, 0.999]: the Hugging Face Trainer's adam_beta1, adam_beta2 default");
}

TEST(ConfigAutoTest, ZeroBucketsFollowTheModelHiddenSize) {
  constexpr const char* kZero =
      "train_batch_size: 8\nzero_optimization: {stage: 3, reduce_bucket_size: auto,\n"
      "  stage3_prefetch_bucket_size: auto, stage3_param_persistence_threshold: auto}\n";
  Config with_model = MustLoadYaml(std::string(kZero) + "model: {d_model: 1024, n_head: 16}\n");
  EXPECT_EQ(with_model.zero.reduce_bucket_size, 1024 * 1024);
  EXPECT_EQ(with_model.zero.stage3_prefetch_bucket_size, static_cast<int64_t>(0.9 * 1024 * 1024));
  EXPECT_EQ(with_model.zero.stage3_param_persistence_threshold, 10 * 1024);

  Config without_model = MustLoadYaml(kZero);
  EXPECT_EQ(without_model.zero.reduce_bucket_size, 500000000);
  EXPECT_EQ(without_model.zero.stage3_prefetch_bucket_size, 50000000);
  EXPECT_EQ(without_model.zero.stage3_param_persistence_threshold, 100000);
}

TEST(ConfigAutoTest, PrecisionAutoFollowsModelDtype) {
  Config c = MustLoadYaml(
      "train_batch_size: 8\nfp16: {enabled: auto}\nbf16: {enabled: auto}\nmodel: {dtype: f16}\n");
  EXPECT_TRUE(c.fp16.enabled);
  EXPECT_FALSE(c.bf16.enabled);
  c = MustLoadYaml("train_batch_size: 8\nfp16: {enabled: auto}\n");
  EXPECT_FALSE(c.fp16.enabled);
  EXPECT_EQ(c.values.entry("fp16.enabled").note, "auto -> false: nothing enables it");
  EXPECT_EQ(c.model.dtype, DType::kF32);
}

TEST(ConfigAutoTest, ModelAndDeviceAuto) {
  ConfigSources sources = IsolatedSources();
  sources.available_host_memory = int64_t{20} << 30;
  Config c = MustLoadYaml(
      "train_batch_size: 8\nmodel: {family: llama, n_head: 8, n_kv_head: auto, d_ff: auto,\n"
      "  tie_embeddings: auto, dtype: auto}\n"
      "device: {type: cuda, memory_limit: auto, host_memory_limit: auto}\n",
      sources);
  EXPECT_EQ(c.model.n_kv_head, 8);
  EXPECT_EQ(c.model.d_ff, 256);
  EXPECT_FALSE(c.model.tie_embeddings);
  EXPECT_FALSE(c.device.memory_limit.has_value());  // the whole GPU
  // 20 GiB available minus a margin of max(1 GiB, 10%) = 18 GiB.
  EXPECT_EQ(c.device.host_memory_limit, int64_t{18} << 30);
}

TEST(ConfigAutoTest, AutoWhereNothingDefinesItIsRejected) {
  Result<Config> c = LoadYaml("train_batch_size: 8\noptimizer: {type: auto}\n");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "<config>:2:13: optimizer.type: \"auto\" cannot be resolved: nothing in the config "
            "defines this key; give one of: Adam, AdamW, Lion, Lamb (any case)");
  c = LoadYaml("train_batch_size: 8\ndevice: {type: cpu, memory_limit: auto}\n");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("device.memory_limit \"auto\" (set at <config>:2:21) has no "
                                      "meaning for the cpu device"),
            std::string::npos)
      << c.status().message();
}

TEST(ConfigAutoTest, AutoIsALiteralForStringsAndEnumValues) {
  Config c = MustLoadYaml("train_batch_size: 8\ndata: {format: auto, train_path: auto}\n");
  EXPECT_EQ(c.data.format, DataFormat::kAuto);
  EXPECT_EQ(c.data.train_path, "auto");
}

}  // namespace
}  // namespace sluice
