// Every file in configs/ is accepted, and the shipped examples mean what they say.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>

#include "config_test_util.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

Result<Config> LoadShipped(const std::string& name, int world_size = 1) {
  ConfigSources sources = testing::IsolatedSources();
  sources.paths = {std::string(SLUICE_SOURCE_DIR) + "/configs/" + name};
  sources.world_size = world_size;
  return LoadConfig(sources);
}

// The --model layers of configs/: each is read over the DeepSpeed file the README pairs it with.
const std::map<std::string, std::string, std::less<>> kModelLayers = {
    {"ds_model_demo.yaml", "ds_config_zero3.json"},
};

TEST(ShippedConfigsTest, EveryFileInConfigsIsAccepted) {
  int checked = 0;
  for (const fs::directory_entry& entry :
       fs::directory_iterator(fs::path(SLUICE_SOURCE_DIR) / "configs")) {
    std::string ext = entry.path().extension().string();
    if (ext != ".yaml" && ext != ".yml" && ext != ".json") continue;
    const std::string name = entry.path().filename().string();
    for (int world_size : {1, 2}) {
      Result<Config> c = LoadShipped(name, world_size);
      if (auto layer = kModelLayers.find(name); layer != kModelLayers.end()) {
        ConfigSources sources = testing::IsolatedSources();
        sources.paths = {std::string(SLUICE_SOURCE_DIR) + "/configs/" + layer->second};
        sources.model_path = entry.path().string();
        sources.world_size = world_size;
        c = LoadConfig(sources);
      }
      EXPECT_TRUE(c.ok()) << entry.path() << " world size " << world_size << ": "
                          << c.status().ToString();
    }
    ++checked;
  }
  EXPECT_GE(checked, 5);
}

TEST(ShippedConfigsTest, DefaultIsATinyGpt2OnTheCpuDevice) {
  Result<Config> c = LoadShipped("default.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->model.present);
  EXPECT_EQ(c->model.family, ModelFamily::kGpt2);
  EXPECT_EQ(c->model.n_layer, 2);
  EXPECT_EQ(c->model.d_model, 64);
  EXPECT_EQ(c->model.seq_len, 64);
  EXPECT_EQ(c->model.vocab_size, 256);
  EXPECT_EQ(c->model.dtype, DType::kBF16);
  EXPECT_EQ(c->zero.stage, 0);
  EXPECT_EQ(c->optimizer.type, OptimizerType::kAdamW);
  EXPECT_EQ(c->scheduler.type, SchedulerType::kWarmupCosineLR);
  EXPECT_EQ(c->scheduler.total_num_steps, c->run.steps);
  EXPECT_EQ(c->device.type, DeviceType::kCpu);
  EXPECT_EQ(c->device.memory_limit, int64_t{256} << 20);
  EXPECT_EQ(c->data.train_path, "data/demo_corpus.txt");
  EXPECT_EQ(c->run.eval_interval, 50);
  EXPECT_EQ(c->run.log_interval, 10);
}

TEST(ShippedConfigsTest, DeepSpeedZero3ConfigIsReadAsIs) {
  Result<Config> c = LoadShipped("ds_config_zero3.json", 8);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->zero.stage, 3);
  EXPECT_EQ(c->zero.offload_optimizer.device, OffloadDevice::kCpu);
  EXPECT_EQ(c->zero.offload_param.device, OffloadDevice::kCpu);
  EXPECT_TRUE(c->zero.stage3_gather_16bit_weights_on_model_save);
  EXPECT_EQ(c->zero.stage3_prefetch_bucket_size, 50000000);  // auto without a model
  // All auto: the Hugging Face Trainer's micro batch 8 x 8 ranks.
  EXPECT_EQ(c->batch.train_batch_size, 64);
  EXPECT_EQ(c->aio.intra_op_parallelism, 1);
  EXPECT_EQ(c->steps_per_print, 2000);
  EXPECT_FALSE(c->fp16.enabled);
  EXPECT_EQ(c->scheduler.type, SchedulerType::kWarmupDecayLR);
  EXPECT_EQ(c->device.type, DeviceType::kCuda);
  bool thread_count_noted = false;
  for (const std::string& note : c->notes) {
    if (note.find("aio.thread_count is read as aio.intra_op_parallelism") != std::string::npos) {
      thread_count_noted = true;
    }
  }
  EXPECT_TRUE(thread_count_noted);
}

TEST(ShippedConfigsTest, NvmeExampleSwapsBothStates) {
  Result<Config> c = LoadShipped("zero3_offload_nvme.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->zero.offload_optimizer.device, OffloadDevice::kNvme);
  EXPECT_EQ(c->zero.offload_optimizer.nvme_path, "runs/zero3_offload_nvme/swap");
  EXPECT_TRUE(c->zero.offload_optimizer.pipeline_read);
  EXPECT_EQ(c->zero.offload_param.device, OffloadDevice::kNvme);
  EXPECT_EQ(c->aio.queue_depth, 32);
  EXPECT_EQ(c->model.family, ModelFamily::kLlama);
  EXPECT_EQ(c->batch.train_batch_size, 16);
}

TEST(ShippedConfigsTest, MissingFileSaysSo) {
  Result<Config> c = LoadShipped("no_such_config.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_NE(c.status().message().find("no_such_config.yaml does not exist"), std::string::npos);
}

}  // namespace
}  // namespace sluice
