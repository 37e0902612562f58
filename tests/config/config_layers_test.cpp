// Layered configs: several files applied in order (later wins key by key, sections merge, scalars
// and lists replace), YAML and JSON mixed, each value's origin the last file that set it, the
// --model file as one more layer, and errors that name the file at fault.
#include "engine/config/config_layers.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "config_test_util.h"
#include "engine/config/config_snippet.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

class ConfigLayersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("sluice_config_layers_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text) {
    std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }

  static std::string Shipped(const std::string& name) {
    return std::string(SLUICE_SOURCE_DIR) + "/configs/" + name;
  }

  Result<Config> Load(std::vector<std::string> paths, std::string model_path = "",
                      int world_size = 1) {
    ConfigSources sources = testing::IsolatedSources();
    sources.paths = std::move(paths);
    sources.model_path = std::move(model_path);
    sources.world_size = world_size;
    return LoadConfig(sources);
  }

  fs::path dir_;
};

bool StartsWith(const std::string& text, const std::string& prefix) {
  return text.rfind(prefix, 0) == 0;
}

TEST_F(ConfigLayersTest, SectionsMergeKeyByKeyAndScalarsAndListsReplace) {
  const std::string base = Write("base.yaml",
                                 "train_micro_batch_size_per_gpu: 2\n"
                                 "optimizer:\n"
                                 "  type: AdamW\n"
                                 "  params: {lr: 3e-4, betas: [0.9, 0.95], weight_decay: 0.1}\n"
                                 "zero_optimization:\n"
                                 "  stage: 3\n"
                                 "  offload_optimizer: {device: cpu, pin_memory: false}\n");
  const std::string overlay = Write("overlay.yaml",
                                    "optimizer:\n"
                                    "  params: {betas: [0.8, 0.99]}\n"
                                    "zero_optimization:\n"
                                    "  offload_optimizer: {buffer_count: 7}\n"
                                    "gradient_accumulation_steps: 3\n");
  Result<Config> c = Load({base, overlay});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  // Kept from the base: the overlay's sections only add or replace the keys they name.
  EXPECT_EQ(c->optimizer.type, OptimizerType::kAdamW);
  EXPECT_DOUBLE_EQ(c->optimizer.lr, 3e-4);
  EXPECT_DOUBLE_EQ(c->optimizer.weight_decay, 0.1);
  EXPECT_EQ(c->zero.stage, 3);
  EXPECT_EQ(c->zero.offload_optimizer.device, OffloadDevice::kCpu);
  EXPECT_FALSE(c->zero.offload_optimizer.pin_memory);
  // From the overlay: a list replaces the whole list, a new key is added.
  EXPECT_DOUBLE_EQ(c->optimizer.beta1, 0.8);
  EXPECT_DOUBLE_EQ(c->optimizer.beta2, 0.99);
  EXPECT_EQ(c->zero.offload_optimizer.buffer_count, 7);
  EXPECT_EQ(c->batch.gradient_accumulation_steps, 3);
  EXPECT_EQ(c->batch.train_batch_size, 6);

  // Reversed, the base's values win where both give one.
  c = Load({overlay, base});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_DOUBLE_EQ(c->optimizer.beta1, 0.9);
  EXPECT_EQ(c->zero.offload_optimizer.buffer_count, 7);
}

TEST_F(ConfigLayersTest, EachValueRecordsTheLastFileThatSetIt) {
  const std::string base =
      Write("base.yaml", "train_micro_batch_size_per_gpu: 2\nrun:\n  steps: 5\n");
  const std::string overlay = Write("overlay.yaml", "run:\n  steps: 9\n");
  Result<Config> c = Load({base, overlay});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->run.steps, 9);
  EXPECT_EQ(c->values.entry("run.steps").origin, overlay + ":2:3");
  EXPECT_EQ(c->values.entry("train_micro_batch_size_per_gpu").origin, base + ":1:1");
  EXPECT_EQ(c->source_file, base + " + " + overlay);
  EXPECT_EQ(c->source_files, (std::vector<std::string>{base, overlay}));

  nlohmann::ordered_json record = ConfigRecordJson(*c);
  EXPECT_EQ(record["settings"]["run.steps"]["origin"], overlay + ":2:3");
  EXPECT_EQ(record["settings"]["run.steps"]["source"], "file");
  EXPECT_FALSE(record["settings"]["zero_optimization.stage"].contains("origin"));
  EXPECT_EQ(record["source_files"].size(), 2u);
  std::string text = ConfigToText(*c);
  EXPECT_NE(text.find("# file " + overlay + ":2:3"), std::string::npos) << text;
}

TEST_F(ConfigLayersTest, NullAndEmptyLayersKeepTheLowerValue) {
  const std::string base =
      Write("base.yaml", "train_batch_size: 4\nrun: {steps: 5}\naio: {queue_depth: 16}\n");
  const std::string empty = Write("empty.yaml", "");
  const std::string nulls = Write("nulls.yaml", "run:\n  steps:\naio:\n");
  Result<Config> c = Load({base, empty, nulls});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->run.steps, 5);
  EXPECT_EQ(c->aio.queue_depth, 16);
}

TEST_F(ConfigLayersTest, AutoAndConcreteValuesReplaceEachOther) {
  const std::string concrete =
      Write("concrete.json", R"({"gradient_clipping": 0.5, "train_batch_size": 4})");
  const std::string automatic = Write("auto.yaml", "gradient_clipping: auto\n");
  Result<Config> c = Load({automatic, concrete});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_DOUBLE_EQ(c->gradient_clipping, 0.5);
  c = Load({concrete, automatic});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_DOUBLE_EQ(c->gradient_clipping, 1.0);  // auto resolves to DeepSpeed's default
  EXPECT_EQ(c->values.entry("gradient_clipping").origin, automatic + ":1:1");
}

TEST_F(ConfigLayersTest, JsonAndYamlMixWithTheAliasInTheBase) {
  // The DeepSpeed file spells intra_op_parallelism as thread_count; a later layer's canonical
  // key replaces it rather than counting as the same key given twice.
  AioConfig tuned = Config().aio;
  tuned.block_size = int64_t{4} << 20;
  tuned.queue_depth = 32;
  tuned.intra_op_parallelism = 2;
  const std::string snippet =
      Write("aio_tuned.yaml", AioTunedSnippetYaml(tuned, {"tuned in a test"}, "aio_tuned.yaml"));
  for (const std::string& base :
       {Shipped("ds_config_zero3.json"), Shipped("zero3_offload_nvme.yaml")}) {
    Result<Config> c = Load({base, snippet}, "", 2);
    ASSERT_TRUE(c.ok()) << base << ": " << c.status().ToString();
    EXPECT_EQ(c->aio.block_size, tuned.block_size) << base;
    EXPECT_EQ(c->aio.queue_depth, 32) << base;
    EXPECT_EQ(c->aio.intra_op_parallelism, 2) << base;
    EXPECT_TRUE(StartsWith(c->values.entry("aio.queue_depth").origin, snippet + ":")) << base;
    // What the snippet does not name stays the base's.
    EXPECT_TRUE(c->aio.overlap_events) << base;
    EXPECT_TRUE(StartsWith(c->values.entry("aio.overlap_events").origin, base + ":")) << base;
    EXPECT_EQ(c->zero.stage, 3) << base;
  }
  // The snippet says how to use it.
  std::string text = AioTunedSnippetYaml(tuned, {"tuned in a test"}, "aio_tuned.yaml");
  EXPECT_TRUE(StartsWith(text, "# tuned in a test\n")) << text;
  EXPECT_NE(text.find("sluice train --config base.yaml --config aio_tuned.yaml"), std::string::npos)
      << text;
  EXPECT_NE(text.find("aio:\n  block_size: 4MiB\n  queue_depth: 32\n  intra_op_parallelism: 2\n"),
            std::string::npos)
      << text;
}

TEST_F(ConfigLayersTest, ErrorsNameTheFileThatGaveTheValue) {
  const std::string base = Write("base.yaml", "train_micro_batch_size_per_gpu: 2\n");
  const std::string bad = Write("bad.json", "{\n  \"zero_optimization\": {\"stage\": 4}\n}\n");
  Result<Config> c = Load({base, bad});
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(StartsWith(std::string(c.status().message()), bad + ":2:25: zero_optimization.stage"))
      << c.status().message();

  // A rule over several keys names the file of the offending value.
  const std::string block = Write("block.yaml", "aio:\n  block_size: 5000\n");
  c = Load({base, block});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("aio.block_size 5000 (set at " + block + ":2:3)"),
            std::string::npos)
      << c.status().message();

  // The same key twice in one file is an error; in two files it is layering.
  const std::string twice =
      Write("twice.yaml", "aio: {thread_count: 2, intra_op_parallelism: 3}\n");
  c = Load({twice});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("given twice"), std::string::npos) << c.status().message();
}

TEST_F(ConfigLayersTest, AMissingLaterFileIsNamedWithItsPlace) {
  const std::string base = Write("base.yaml", "train_micro_batch_size_per_gpu: 2\n");
  const std::string missing = (dir_ / "not_there.yaml").string();
  Result<Config> c = Load({base, missing});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_NE(c.status().message().find("--config #2 of 2"), std::string::npos)
      << c.status().message();
  EXPECT_NE(c.status().message().find(missing + " does not exist"), std::string::npos)
      << c.status().message();

  c = Load({base}, (dir_ / "no_model.yaml").string());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("--model"), std::string::npos) << c.status().message();
}

TEST_F(ConfigLayersTest, TheModelFileIsTheLastLayer) {
  const std::string base = Write("base.yaml",
                                 "train_batch_size: 4\n"
                                 "model: {family: llama, n_layer: 4, n_head: 4, n_kv_head: 2}\n"
                                 "device: {type: cpu, memory_limit: 32MiB}\n");
  // A bare model map is read as `model:`; its keys merge over the base's model section.
  const std::string bare = Write("bare.yaml", "n_layer: 2\nd_model: 32\n");
  Result<Config> c = Load({base}, bare);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->model.family, ModelFamily::kLlama);
  EXPECT_EQ(c->model.n_kv_head, 2);
  EXPECT_EQ(c->model.n_layer, 2);
  EXPECT_EQ(c->model.d_model, 32);
  EXPECT_EQ(c->values.entry("model.n_layer").origin, bare + ":1:1");
  EXPECT_EQ(c->source_file, base + " + " + bare);

  // A document with `model:` is layered as it is, other sections included.
  const std::string document =
      Write("model_doc.yaml", "model: {n_layer: 3}\ndevice: {memory_limit: 64MiB}\n");
  c = Load({base}, document);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->model.n_layer, 3);
  EXPECT_EQ(c->model.family, ModelFamily::kLlama);
  EXPECT_EQ(c->device.memory_limit, int64_t{64} << 20);
  EXPECT_EQ(c->device.type, DeviceType::kCpu);

  // It alone gives a config its model (a DeepSpeed file has none).
  c = Load({Shipped("ds_config_zero3.json")}, bare);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->model.present);

  // A wrong key in a bare map is reported in the model file, under model.
  const std::string typo = Write("typo.yaml", "family: gpt2\nn_layers: 5\n");
  c = Load({base}, typo);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(StartsWith(std::string(c.status().message()),
                         typo + ":2:1: unknown key model.n_layers (did you mean model.n_layer?)"))
      << c.status().message();

  const std::string list = Write("list.yaml", "- gpt2\n");
  c = Load({base}, list);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("a --model file holds the model section"), std::string::npos)
      << c.status().message();
}

TEST_F(ConfigLayersTest, ReadModelLayerWrapsOnlyABareMap) {
  const std::string bare = Write("bare.json", R"({"family": "gpt2", "n_layer": 1})");
  Result<ConfigLayer> layer = ReadModelLayer(bare);
  ASSERT_TRUE(layer.ok()) << layer.status().ToString();
  ASSERT_EQ(layer->root.entries.size(), 1u);
  EXPECT_EQ(layer->root.entries[0].key, "model");
  EXPECT_EQ(layer->root.entries[0].value.entries.size(), 2u);
  EXPECT_EQ(layer->name, bare);

  const std::string document = Write("doc.yaml", "model: {n_layer: 1}\nrun: {steps: 3}\n");
  layer = ReadModelLayer(document);
  ASSERT_TRUE(layer.ok()) << layer.status().ToString();
  ASSERT_EQ(layer->root.entries.size(), 2u);
  EXPECT_EQ(layer->root.entries[1].key, "run");
}

}  // namespace
}  // namespace sluice
