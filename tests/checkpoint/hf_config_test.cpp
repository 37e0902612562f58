// A Hugging Face config.json read for model.init_from (hf_config.h): which model settings it
// decides, transformers' defaults for absent fields, what is refused, and how the config resolver
// fills the model section from it or refuses a setting given with another value.
#include "engine/checkpoint/hf_config.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "engine/config/config.h"
#include "engine/train/run_setup.h"
#include "tests/checkpoint/checkpoint_test_util.h"

namespace sluice::checkpoint {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

void WriteText(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

// A folder with config.json and an (empty) model.safetensors beside it, as init_from names.
fs::path HfFolder(const TempDir& tmp, const std::string& config_json) {
  const fs::path dir = tmp.path() / "hf";
  fs::create_directories(dir);
  WriteText(dir / "config.json", config_json);
  WriteText(dir / "model.safetensors", "");
  return dir;
}

std::map<std::string, HfModelSetting> ByKey(const HfModelConfig& config) {
  std::map<std::string, HfModelSetting> out;
  for (const HfModelSetting& s : config.settings) out[s.key] = s;
  return out;
}

Result<Config> LoadYaml(const std::string& yaml) {
  ConfigSources sources;
  sources.env.emplace();
  return LoadConfigFromText("train_batch_size: 1\n" + yaml, ConfigFormat::kYaml, sources);
}

constexpr const char* kLlamaJson = R"({
  "model_type": "llama", "num_hidden_layers": 3, "num_attention_heads": 4,
  "num_key_value_heads": 2, "hidden_size": 32, "intermediate_size": 80, "vocab_size": 100,
  "max_position_embeddings": 256, "rms_norm_eps": 1e-06, "rope_theta": 500000.0,
  "tie_word_embeddings": false, "hidden_act": "silu", "attention_bias": false
})";

TEST(HfConfigTest, Gpt2FieldsAndTransformersDefaults) {
  TempDir tmp;
  const fs::path dir = HfFolder(tmp, R"({"model_type": "gpt2", "n_layer": 3, "n_head": 2,
      "n_embd": 16, "n_inner": null, "n_positions": 128, "vocab_size": 50})");
  Result<HfModelConfig> config = ReadHfModelConfig(dir / "config.json");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  auto s = ByKey(*config);
  EXPECT_EQ(std::get<std::string>(s["model.family"].value), "gpt2");
  EXPECT_EQ(std::get<int64_t>(s["model.n_layer"].value), 3);
  EXPECT_EQ(std::get<int64_t>(s["model.n_kv_head"].value), 2);
  EXPECT_EQ(std::get<int64_t>(s["model.d_model"].value), 16);
  EXPECT_EQ(std::get<int64_t>(s["model.d_ff"].value), 64);  // n_inner null: 4 * n_embd
  EXPECT_TRUE(s["model.d_ff"].defaulted);
  EXPECT_EQ(std::get<int64_t>(s["model.max_position_embeddings"].value), 128);
  EXPECT_EQ(s["model.max_position_embeddings"].field, "n_positions");
  EXPECT_EQ(std::get<double>(s["model.norm_eps"].value), 1e-5);  // GPT2Config's default
  EXPECT_TRUE(std::get<bool>(s["model.tie_embeddings"].value));
  EXPECT_EQ(s.count("model.rope_theta"), 0u);  // GPT-2 has no rotary embedding
}

TEST(HfConfigTest, LlamaRopeThetaInEitherSpelling) {
  TempDir tmp;
  Result<HfModelConfig> config = ReadHfModelConfig(HfFolder(tmp, kLlamaJson) / "config.json");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  auto s = ByKey(*config);
  EXPECT_EQ(std::get<double>(s["model.rope_theta"].value), 500000.0);
  EXPECT_EQ(std::get<double>(s["model.norm_eps"].value), 1e-6);
  EXPECT_EQ(std::get<int64_t>(s["model.n_kv_head"].value), 2);
  EXPECT_EQ(std::get<int64_t>(s["model.d_ff"].value), 80);
  EXPECT_FALSE(std::get<bool>(s["model.tie_embeddings"].value));

  // transformers 5 writes rope_parameters; an absent rope_theta is LlamaConfig's 10000.
  TempDir v5;
  config = ReadHfModelConfig(
      HfFolder(v5, R"({"model_type": "llama", "hidden_size": 32, "num_attention_heads": 4,
          "rope_parameters": {"rope_theta": 250000.0, "rope_type": "default"}})") /
      "config.json");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  s = ByKey(*config);
  EXPECT_EQ(std::get<double>(s["model.rope_theta"].value), 250000.0);
  EXPECT_EQ(s["model.rope_theta"].field, "rope_parameters.rope_theta");
  EXPECT_EQ(std::get<int64_t>(s["model.n_kv_head"].value), 4);  // null: num_attention_heads
  TempDir plain;
  config = ReadHfModelConfig(HfFolder(plain, R"({"model_type": "llama"})") / "config.json");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(std::get<double>(ByKey(*config)["model.rope_theta"].value), 10000.0);
  EXPECT_TRUE(ByKey(*config)["model.rope_theta"].defaulted);
}

TEST(HfConfigTest, RefusesWhatSluiceWouldComputeDifferently) {
  struct Case {
    std::string json;
    std::string named;  // the message must name it
  };
  const std::vector<Case> cases = {
      {R"({"model_type": "llama", "attention_bias": true})", "attention_bias"},
      {R"({"model_type": "llama", "mlp_bias": true})", "mlp_bias"},
      {R"({"model_type": "llama", "rope_scaling": {"rope_type": "llama3", "factor": 8.0}})",
       "rope_scaling"},
      {R"({"model_type": "llama", "rope_parameters": {"rope_type": "yarn"}})", "rope_type"},
      {R"({"model_type": "llama", "hidden_act": "gelu"})", "hidden_act"},
      {R"({"model_type": "llama", "hidden_size": 32, "num_attention_heads": 4, "head_dim": 16})",
       "head_dim"},
      {R"({"model_type": "qwen2"})", "q_proj, k_proj and v_proj"},
      {R"({"model_type": "mistral"})", "sliding-window"},
      {R"({"model_type": "gpt2", "activation_function": "gelu"})", "activation_function"},
      {R"({"model_type": "gpt2", "scale_attn_by_inverse_layer_idx": true})",
       "scale_attn_by_inverse_layer_idx"},
      {R"({"model_type": "gpt2", "n_head": "four"})", "field n_head is \"four\""},
      {R"({"n_layer": 2})", "no model_type"},
      {R"([1, 2])", "not a JSON object"},
  };
  for (const Case& c : cases) {
    TempDir tmp;
    Result<HfModelConfig> config = ReadHfModelConfig(HfFolder(tmp, c.json) / "config.json");
    ASSERT_FALSE(config.ok()) << c.json;
    EXPECT_EQ(config.status().code(), StatusCode::kInvalidArgument) << c.json;
    EXPECT_NE(config.status().message().find(c.named), std::string::npos)
        << c.json << ": " << config.status().ToString();
    EXPECT_NE(config.status().message().find("config.json"), std::string::npos);
  }
}

TEST(HfConfigTest, FindsConfigJsonInOrBesideTheWeights) {
  TempDir tmp;
  const fs::path dir = HfFolder(tmp, kLlamaJson);
  EXPECT_EQ(FindHfConfigJson(dir), dir / "config.json");
  EXPECT_EQ(FindHfConfigJson(dir / "model.safetensors"), dir / "config.json");
  EXPECT_FALSE(FindHfConfigJson(tmp.path()).has_value());
  EXPECT_FALSE(FindHfConfigJson(tmp.path() / "missing.safetensors").has_value());
}

TEST(HfConfigTest, InitFromFillsTheModelSettingsLeftUnset) {
  TempDir tmp;
  const fs::path dir = HfFolder(tmp, kLlamaJson);
  Result<Config> config =
      LoadYaml("model: {init_from: " + dir.string() + ", seq_len: 16, d_model: 32}\n");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  const ModelConfig& m = config->model;
  EXPECT_EQ(m.family, ModelFamily::kLlama);
  EXPECT_EQ(m.n_layer, 3);
  EXPECT_EQ(m.n_head, 4);
  EXPECT_EQ(m.n_kv_head, 2);
  EXPECT_EQ(m.d_ff, 80);  // not the llama rule's 8/3 * d_model
  EXPECT_EQ(m.vocab_size, 100);
  EXPECT_EQ(m.max_position_embeddings, 256);
  EXPECT_EQ(m.rope_theta, 500000.0);
  EXPECT_EQ(m.norm_eps, 1e-6);
  EXPECT_FALSE(m.tie_embeddings);
  EXPECT_EQ(m.seq_len, 16);
  const SettingEntry& theta = config->values.entry("model.rope_theta");
  EXPECT_EQ(theta.source, ValueSource::kDerived);
  EXPECT_NE(theta.note.find((dir / "config.json").string() + " rope_theta"), std::string::npos)
      << theta.note;
  // The model the trainer builds.
  Result<model::ModelOptions> options =
      train::ModelOptionsFromConfig(*config, train::Precision::kF32);
  ASSERT_TRUE(options.ok()) << options.status().ToString();
  EXPECT_EQ(options->rope_theta, 500000.0);
  EXPECT_EQ(options->norm_eps, 1e-6f);
  EXPECT_EQ(options->seq_len, 16);
}

TEST(HfConfigTest, AModelSectionThatDisagreesIsRefusedNamingBothValues) {
  TempDir tmp;
  const fs::path dir = HfFolder(tmp, kLlamaJson);
  Result<Config> config =
      LoadYaml("model: {init_from: " + dir.string() + ", n_head: 8, rope_theta: 10000}\n");
  ASSERT_FALSE(config.ok());
  const std::string& message = config.status().message();
  EXPECT_NE(message.find("model.n_head 8 (set at"), std::string::npos) << message;
  EXPECT_NE(message.find("num_attention_heads 4"), std::string::npos) << message;
  EXPECT_NE(message.find("model.rope_theta 10000"), std::string::npos) << message;
  EXPECT_NE(message.find("rope_theta 500000"), std::string::npos) << message;
  EXPECT_NE(message.find((dir / "config.json").string()), std::string::npos) << message;
  // The same values are fine: 500000 as an integer is config.json's 500000.0.
  config = LoadYaml("model: {init_from: " + dir.string() +
                    ", n_head: 4, rope_theta: 500000, family: llama}\n");
  EXPECT_TRUE(config.ok()) << config.status().ToString();
  // A config.json that Sluice cannot honour fails the config, naming init_from.
  TempDir bias;
  const fs::path biased = HfFolder(bias, R"({"model_type": "llama", "attention_bias": true})");
  config = LoadYaml("model: {init_from: " + biased.string() + "}\n");
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().ToString().find("model.init_from"), std::string::npos);
  EXPECT_NE(config.status().ToString().find("attention_bias"), std::string::npos);
}

TEST(HfConfigTest, WithoutConfigJsonTheModelSectionIsTakenAsWritten) {
  TempDir tmp;
  WriteText(tmp.path() / "weights.safetensors", "");
  Result<Config> config = LoadYaml(
      "model: {init_from: " + (tmp.path() / "weights.safetensors").string() + ", n_layer: 3}\n");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->model.family, ModelFamily::kGpt2);
  EXPECT_EQ(config->model.n_layer, 3);
  EXPECT_EQ(config->model.rope_theta, 10000.0);
  EXPECT_EQ(config->model.norm_eps, 1e-5);
}

TEST(HfConfigTest, Gpt2PositionTableMayBeLongerThanTheWindows) {
  TempDir tmp;
  const fs::path dir = HfFolder(tmp, R"({"model_type": "gpt2", "n_layer": 1, "n_head": 2,
      "n_embd": 16, "n_positions": 1024, "vocab_size": 50})");
  Result<Config> config = LoadYaml("model: {init_from: " + dir.string() + ", seq_len: 128}\n");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->model.seq_len, 128);
  EXPECT_EQ(config->model.max_position_embeddings, 1024);
  Result<model::ModelOptions> options =
      train::ModelOptionsFromConfig(*config, train::Precision::kF32);
  ASSERT_TRUE(options.ok());
  EXPECT_EQ(options->seq_len, 1024);                              // rows of wpe
  EXPECT_EQ(train::DataOptionsFromConfig(*config).seq_len, 128);  // the windows trained on
  EXPECT_EQ(model::CountParameters(*options), 50 * 16 + 1024 * 16 +
                                                  (2 * 16 + 3 * 16 * 16 + 3 * 16 + 16 * 16 + 16 +
                                                   2 * 16 + 16 * 64 + 64 + 64 * 16 + 16) +
                                                  2 * 16);

  // Longer windows than positions have no position to look up.
  Result<Config> too_long = LoadYaml("model: {init_from: " + dir.string() + ", seq_len: 2048}\n");
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("model.seq_len 2048"), std::string::npos);
  EXPECT_NE(too_long.status().message().find("model.max_position_embeddings 1024"),
            std::string::npos)
      << too_long.status().message();
  EXPECT_NE(too_long.status().message().find("n_positions"), std::string::npos)
      << too_long.status().message();
  // Without init_from the setting defaults to seq_len, so existing models are unchanged.
  config = LoadYaml("model: {seq_len: 32}\n");
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->model.max_position_embeddings, 32);
}

TEST(HfConfigTest, ExportedConfigJsonReadsBackToTheSameSettings) {
  for (const char* family : {"gpt2", "llama"}) {
    HfExportModel m;
    m.family = family;
    m.n_layer = 2;
    m.n_head = 4;
    m.n_kv_head = m.family == "gpt2" ? 4 : 2;
    m.d_model = 32;
    m.d_ff = 96;
    m.vocab_size = 77;
    m.max_position_embeddings = 48;
    m.rope_theta = 500000.0;
    m.norm_eps = 1e-6;
    m.tie_embeddings = m.family == "gpt2";
    TempDir tmp;
    const fs::path dir = HfFolder(tmp, HfConfigJson(m).dump());
    Result<HfModelConfig> read = ReadHfModelConfig(dir / "config.json");
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    auto s = ByKey(*read);
    EXPECT_EQ(std::get<std::string>(s["model.family"].value), m.family);
    EXPECT_EQ(std::get<int64_t>(s["model.n_kv_head"].value), m.n_kv_head) << family;
    EXPECT_EQ(std::get<int64_t>(s["model.d_ff"].value), 96) << family;
    EXPECT_EQ(std::get<int64_t>(s["model.vocab_size"].value), 77) << family;
    EXPECT_EQ(std::get<int64_t>(s["model.max_position_embeddings"].value), 48) << family;
    EXPECT_EQ(std::get<double>(s["model.norm_eps"].value), 1e-6) << family;
    EXPECT_EQ(std::get<bool>(s["model.tie_embeddings"].value), m.tie_embeddings) << family;
    if (m.family == "llama") {
      EXPECT_EQ(std::get<double>(s["model.rope_theta"].value), 500000.0);
    }
  }
}

}  // namespace
}  // namespace sluice::checkpoint
