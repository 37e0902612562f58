// YAML and JSON give the same config; DeepSpeed's number forms; syntax errors with positions.
#include <gtest/gtest.h>

#include "config_test_util.h"
#include "engine/config/config_tree.h"

namespace sluice {
namespace {

using testing::LoadJson;
using testing::LoadYaml;

constexpr const char* kYamlText = R"(
train_batch_size: 64
train_micro_batch_size_per_gpu: 8
gradient_clipping: 0.5
optimizer:
  type: AdamW
  params: {lr: 3.0e-4, betas: [0.9, 0.95], weight_decay: 0.1}
zero_optimization:
  stage: 3
  reduce_bucket_size: 5e8
  stage3_max_live_parameters: 1e9
  offload_optimizer: {device: nvme, nvme_path: /nvme, pin_memory: true, ratio: 0.3}
aio: {block_size: 1MiB, thread_count: 2}
bf16: {enabled: true}
model: {family: llama, n_layer: 4, n_head: 8, n_kv_head: 2, d_model: 256}
device: {type: cpu, memory_limit: 256MiB}
)";

constexpr const char* kJsonText = R"({
  "train_batch_size": 64,
  "train_micro_batch_size_per_gpu": 8,
  "gradient_clipping": 0.5,
  "optimizer": {"type": "AdamW",
                "params": {"lr": 3.0e-4, "betas": [0.9, 0.95], "weight_decay": 0.1}},
  "zero_optimization": {
    "stage": 3,
    "reduce_bucket_size": 5e8,
    "stage3_max_live_parameters": 1e9,
    "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme", "pin_memory": true,
                          "ratio": 0.3}
  },
  "aio": {"block_size": "1MiB", "thread_count": 2},
  "bf16": {"enabled": true},
  "model": {"family": "llama", "n_layer": 4, "n_head": 8, "n_kv_head": 2, "d_model": 256},
  "device": {"type": "cpu", "memory_limit": "256MiB"}
})";

TEST(ConfigFormatsTest, YamlAndJsonAreEquivalent) {
  Result<Config> yaml = LoadYaml(kYamlText);
  Result<Config> json = LoadJson(kJsonText);
  ASSERT_TRUE(yaml.ok()) << yaml.status().ToString();
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  nlohmann::ordered_json a = yaml->values.ToNestedJson();
  nlohmann::ordered_json b = json->values.ToNestedJson();
  EXPECT_EQ(a, b) << a.dump(1) << "\n" << b.dump(1);
  EXPECT_EQ(yaml->zero.reduce_bucket_size, 500000000);
  EXPECT_EQ(yaml->zero.stage3_max_live_parameters, 1000000000);
  EXPECT_EQ(yaml->aio.block_size, 1048576);
  EXPECT_EQ(yaml->aio.intra_op_parallelism, 2);
  EXPECT_EQ(yaml->batch.gradient_accumulation_steps, 8);
  EXPECT_EQ(json->zero.offload_optimizer.ratio, 0.3);
}

TEST(ConfigFormatsTest, NestedJsonRecordReadsBackToTheSameConfig) {
  Result<Config> first = LoadYaml(kYamlText);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  std::string dumped = first->values.ToNestedJson().dump(2);
  Result<Config> second = LoadJson(dumped);
  ASSERT_TRUE(second.ok()) << second.status().ToString() << "\n" << dumped;
  EXPECT_EQ(second->values.ToNestedJson(), first->values.ToNestedJson());
}

TEST(ConfigFormatsTest, IntegersAcceptDeepSpeedFloatForms) {
  Result<Config> c = LoadJson(R"({"train_batch_size": 8.0, "zero_optimization":
      {"sub_group_size": 1e12, "stage3_param_persistence_threshold": 1E5}})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->batch.train_batch_size, 8);
  EXPECT_EQ(c->zero.sub_group_size, int64_t{1000000000000});
  EXPECT_EQ(c->zero.stage3_param_persistence_threshold, 100000);
}

TEST(ConfigFormatsTest, JsonAcceptsComments) {
  Result<Config> c = LoadJson("{\n  // global batch\n  \"train_batch_size\": 4 /* four */\n}");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->batch.train_batch_size, 4);
}

TEST(ConfigFormatsTest, JsonKeyPositionsAreReported) {
  Result<Config> c = LoadJson(
      "{\n  \"train_batch_size\": 4,\n  \"zero_optimization\": {\n"
      "    \"stage\": 1,\n    \"stagee\": 2\n  }\n}");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "<config>:5:5: unknown key zero_optimization.stagee (did you mean "
            "zero_optimization.stage?)");
}

TEST(ConfigFormatsTest, JsonSyntaxErrorPositionMatchesTheOffendingCharacter) {
  Result<ConfigNode> r = ParseConfigText("{\n  \"a\": 1,\n}", ConfigFormat::kJson, "f.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "f.json:3:1: JSON syntax error: syntax error while parsing object key - unexpected "
            "'}'; expected string literal");
  r = ParseConfigText("{\"a\": [1, 2}", ConfigFormat::kJson, "f.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("f.json:1:12: JSON syntax error"), std::string::npos)
      << r.status().message();
}

TEST(ConfigFormatsTest, EmptyDocumentGivesDefaults) {
  Result<Config> c = LoadYaml("# nothing\ntrain_micro_batch_size_per_gpu: 1\n");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  Result<ConfigNode> empty = ParseConfigText("", ConfigFormat::kYaml, "e.yaml");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->kind, ConfigNode::Kind::kNull);
}

TEST(ConfigFormatsTest, NullKeepsTheDefault) {
  Result<Config> c = LoadJson(R"({"train_batch_size": 8, "steps_per_print": null,
      "zero_optimization": {"overlap_comm": null, "offload_param": null}})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->steps_per_print.has_value());
  EXPECT_FALSE(c->zero.overlap_comm);
}

TEST(ConfigFormatsTest, DeprecatedDeepSpeedFormsAreMapped) {
  Result<Config> c = LoadJson(R"({"train_batch_size": 8, "zero_optimization": true})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->zero.stage, 1);
  c = LoadJson(R"({"train_batch_size": 8, "zero_optimization": {"stage": 2, "cpu_offload": true,
      "cpu_offload_use_pin_memory": true, "stage3_gather_fp16_weights_on_model_save": true},
      "bfloat16": {"enabled": true}})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->zero.offload_optimizer.device, OffloadDevice::kCpu);
  EXPECT_TRUE(c->zero.stage3_gather_16bit_weights_on_model_save);
  EXPECT_TRUE(c->bf16.enabled);
  ASSERT_GE(c->notes.size(), 3u);
}

TEST(ConfigFormatsTest, UnsupportedKeysWithSluiceBehaviourAreAccepted) {
  Result<Config> c = LoadJson(R"({"train_batch_size": 8, "zero_force_ds_cpu_optimizer": true,
      "zero_optimization": {"stage": 2, "reduce_scatter": true, "allgather_partitions": true,
        "round_robin_gradients": false, "zero_quantized_weights": false},
      "comet": {"enabled": false, "project": "x"},
      "optimizer": {"type": "Adam", "params": {"torch_adam": false}}})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->zero.stage, 2);
  // Each says why: DeepSpeed's default, or what the value means for Sluice (torch_adam,
  // round_robin_gradients).
  int accepted = 0;
  int always = 0;
  for (const std::string& note : c->notes) {
    if (note.find(" is accepted: ") != std::string::npos) ++accepted;
    if (note.find("is accepted: its value is what Sluice always does") != std::string::npos) {
      ++always;
    }
  }
  EXPECT_EQ(accepted, 7);
  EXPECT_EQ(always, 5);
}

}  // namespace
}  // namespace sluice
