// model.init_from through the trainer, on Hugging Face folders the test writes (config.json plus
// model.safetensors in transformers' names and layouts): the first step's loss equals the fp64
// reference model's on the same weights, so rope_theta and norm_eps from config.json reach the
// ops; a GPT-2 position table longer than the windows loads; a file with a tensor the model has no
// parameter for is refused before training.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <random>

#include "engine/checkpoint/hf_config.h"
#include "engine/checkpoint/hf_layout.h"
#include "engine/checkpoint/safetensors_writer.h"
#include "engine/model/buffer.h"
#include "engine/model/model.h"
#include "engine/train/run_setup.h"
#include "engine/train/trainer.h"
#include "tests/checkpoint/checkpoint_test_util.h"
#include "tests/common/test_ops.h"

namespace sluice::checkpoint {
namespace {

namespace fs = std::filesystem;
using model::Model;
using model::ModelOptions;
using testing::TempDir;

constexpr int64_t kSeq = 16;
constexpr int64_t kVocab = 40;

ModelOptions LlamaOptions(double rope_theta, float norm_eps = 0.25f) {
  ModelOptions o = train::DefaultModelOptions();
  o.family = model::Family::kLlama;
  o.n_layer = 2;
  o.n_head = 4;
  o.n_kv_head = 2;
  o.d_model = 32;
  o.d_ff = 48;
  o.vocab_size = kVocab;
  o.seq_len = kSeq;
  o.tie_embeddings = false;
  o.rope_theta = rope_theta;
  o.norm_eps = norm_eps;
  return o;
}

ModelOptions Gpt2Options(int64_t positions) {
  ModelOptions o = train::DefaultModelOptions();
  o.n_layer = 2;
  o.n_head = 2;
  o.n_kv_head = 2;
  o.d_model = 16;
  o.d_ff = 64;
  o.vocab_size = kVocab;
  o.seq_len = positions;
  return o;
}

// Random weights large enough that attention is far from uniform (so the positions, and
// rope_theta, show in the loss), norm gains around 1.
std::unique_ptr<Model<float>> RandomModel(const ModelOptions& options, model::HostAllocator& host,
                                          uint32_t seed) {
  auto net = Model<float>::Create(options, host, sluice::testing::OpsFor<float>());
  SLUICE_CHECK(net.ok()) << net.status().ToString();
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> weight(-0.4f, 0.4f);
  std::uniform_real_distribution<float> gain(0.5f, 1.5f);
  const auto& params = (*net)->registry().parameters();
  for (int p = 0; p < static_cast<int>(params.size()); ++p) {
    if (params[p].is_alias()) continue;
    const bool norm = params[p].name.find("norm") != std::string::npos ||
                      params[p].name.find(".ln_") != std::string::npos;
    for (int64_t e = 0; e < params[p].numel; ++e) {
      (*net)->SetParameterValue(p, e, norm ? gain(rng) : weight(rng));
    }
  }
  return std::move(net).value();
}

// model.safetensors in Hugging Face's layout (GPT-2's Conv1D weights transposed), plus `extra`
// tensors of `extra_numel` values; config.json from `hf`.
void WriteHfFolder(const Model<float>& net, const HfExportModel& hf, const fs::path& dir,
                   const std::vector<std::string>& extra = {}, int64_t extra_numel = 4) {
  fs::create_directories(dir);
  std::vector<SafetensorsTensorSpec> specs;
  std::vector<std::vector<float>> data;
  const auto& params = net.registry().parameters();
  for (int p = 0; p < static_cast<int>(params.size()); ++p) {
    const model::ParameterInfo& info = params[p];
    if (info.is_alias()) continue;
    specs.push_back({info.name, SafetensorsDType::kF32, HfShape(info.name, info.shape)});
    std::vector<float> values(info.numel);
    for (int64_t e = 0; e < info.numel; ++e) values[e] = net.ParameterValue(p, e);
    if (IsHfConv1DWeight(info.name)) {
      std::vector<float> transposed(values.size());
      Transpose2D(values.data(), info.shape.dim(0), info.shape.dim(1), transposed.data());
      values = std::move(transposed);
    }
    data.push_back(std::move(values));
  }
  for (const std::string& name : extra) {
    specs.push_back({name, SafetensorsDType::kF32, {extra_numel}});
    data.emplace_back(extra_numel, 0.5f);
  }
  auto writer = SafetensorsWriter::Create(dir / "model.safetensors", specs, {{"format", "pt"}});
  SLUICE_CHECK(writer.ok()) << writer.status().ToString();
  for (const auto& values : data) {
    SLUICE_CHECK((*writer)->Append(values.data(), values.size() * sizeof(float)).ok());
  }
  SLUICE_CHECK((*writer)->Finish().ok());
  std::ofstream(dir / "config.json") << HfConfigJson(hf).dump(2);
}

HfExportModel Describe(const ModelOptions& o, int64_t positions) {
  HfExportModel hf;
  hf.family = std::string(model::FamilyName(o.family));
  hf.n_layer = o.n_layer;
  hf.n_head = o.n_head;
  hf.n_kv_head = o.n_kv_head;
  hf.d_model = o.d_model;
  hf.d_ff = o.d_ff;
  hf.vocab_size = o.vocab_size;
  hf.max_position_embeddings = positions;
  hf.rope_theta = o.rope_theta;
  hf.norm_eps = o.norm_eps;
  hf.tie_embeddings = o.tie_embeddings;
  return hf;
}

// One training window of kSeq + 1 tokens (nanogpt_u16), also the validation file.
std::vector<int32_t> WriteWindow(const fs::path& path) {
  std::vector<int32_t> tokens(kSeq + 1);
  std::vector<uint16_t> raw(kSeq + 1);
  for (int64_t i = 0; i <= kSeq; ++i) {
    tokens[i] = static_cast<int32_t>((i * 7 + 3) % kVocab);
    raw[i] = static_cast<uint16_t>(tokens[i]);
  }
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(raw.data()), raw.size() * sizeof(uint16_t));
  return tokens;
}

Result<Config> InitFromConfig(const fs::path& init_from, const fs::path& data,
                              const fs::path& run_dir) {
  ConfigSources sources;
  sources.env.emplace();
  const std::string yaml =
      "train_micro_batch_size_per_gpu: 1\n"
      "gradient_accumulation_steps: 1\n"
      "optimizer: {type: AdamW, params: {lr: 0.0}}\n"
      "model: {init_from: " +
      init_from.string() + ", seq_len: " + std::to_string(kSeq) +
      "}\n"
      "data: {train_path: " +
      data.string() + ", val_path: " + data.string() +
      ", format: nanogpt_u16}\n"
      "device: {type: cpu, memory_limit: 64MiB, threads: 1, cpu_gemm: deterministic}\n"
      "run: {dir: " +
      run_dir.string() + ", steps: 1, seed: 1, eval_interval: 0}\n";
  return LoadConfigFromText(yaml, ConfigFormat::kYaml, sources);
}

train::TrainerOptions Quiet() {
  train::TrainerOptions options;
  options.progress = train::ProgressMode::kOff;
  options.summary_stream = nullptr;
  options.write_files = false;
  return options;
}

// The first step's loss of a trainer whose weights come from `folder`.
Result<double> FirstLoss(const fs::path& folder, const TempDir& tmp) {
  const fs::path data = tmp.path() / "window.bin";
  WriteWindow(data);
  SLUICE_ASSIGN_OR_RETURN(Config config, InitFromConfig(folder, data, tmp.path() / "run"));
  SLUICE_ASSIGN_OR_RETURN(auto trainer, train::Trainer::Create(config, Quiet()));
  SLUICE_ASSIGN_OR_RETURN(train::StepMetrics m, trainer->TrainStep());
  return m.loss;
}

// The same weights in the fp64 reference model (kernels/ref) built from `options`.
double ReferenceLoss(const Model<float>& net, const ModelOptions& options,
                     const std::vector<int32_t>& window, int64_t seq) {
  model::HostAllocator host;
  auto reference = Model<double>::Create(options, host, sluice::testing::OpsFor<double>());
  SLUICE_CHECK(reference.ok()) << reference.status().ToString();
  const auto& params = net.registry().parameters();
  for (int p = 0; p < static_cast<int>(params.size()); ++p) {
    if (params[p].is_alias()) continue;
    for (int64_t e = 0; e < params[p].numel; ++e) {
      (*reference)->SetParameterValue(p, e, net.ParameterValue(p, e));
    }
  }
  auto loss = (*reference)->ForwardLoss(window.data(), window.data() + 1, 1, seq);
  SLUICE_CHECK(loss.ok()) << loss.status().ToString();
  return *loss;
}

TEST(HfInitFromTest, RopeThetaFromConfigJsonMatchesTheFp64Reference) {
  TempDir tmp;
  model::HostAllocator host;
  const ModelOptions options = LlamaOptions(500000.0);
  auto net = RandomModel(options, host, 11);
  WriteHfFolder(*net, Describe(options, 64), tmp.path() / "llama");
  const std::vector<int32_t> window = WriteWindow(tmp.path() / "window.bin");

  Result<double> loss = FirstLoss(tmp.path() / "llama", tmp);
  ASSERT_TRUE(loss.ok()) << loss.status().ToString();
  const double want = ReferenceLoss(*net, options, window, kSeq);
  // fp32 against fp64: a few ulps of the loss. The other theta, or the default norm epsilon
  // instead of config.json's rms_norm_eps 0.25, are far outside that.
  EXPECT_NEAR(*loss, want, 1e-5 * want);
  const double other_theta = ReferenceLoss(*net, LlamaOptions(10000.0), window, kSeq);
  EXPECT_GT(std::abs(other_theta - want), 100 * 1e-5 * want) << "rope_theta must matter here";
  const double other_eps = ReferenceLoss(*net, LlamaOptions(500000.0, 1e-5f), window, kSeq);
  EXPECT_GT(std::abs(other_eps - want), 100 * 1e-5 * want) << "norm_eps must matter here";
}

TEST(HfInitFromTest, Gpt2PositionTableLongerThanTheWindowsLoads) {
  TempDir tmp;
  model::HostAllocator host;
  const ModelOptions options = Gpt2Options(/*positions=*/64);
  auto net = RandomModel(options, host, 12);
  WriteHfFolder(*net, Describe(options, 64), tmp.path() / "gpt2");
  const std::vector<int32_t> window = WriteWindow(tmp.path() / "window.bin");
  Result<double> loss = FirstLoss(tmp.path() / "gpt2", tmp);
  ASSERT_TRUE(loss.ok()) << loss.status().ToString();
  const double want = ReferenceLoss(*net, options, window, kSeq);
  EXPECT_NEAR(*loss, want, 1e-5 * want);
}

TEST(HfInitFromTest, ATensorTheModelLacksIsRefusedNamingIt) {
  TempDir tmp;
  model::HostAllocator host;
  const ModelOptions options = LlamaOptions(10000.0);
  auto net = RandomModel(options, host, 13);
  // Qwen's q/k/v biases under a Llama config.json: weights of another model.
  WriteHfFolder(*net, Describe(options, 64), tmp.path() / "qwen_like",
                {"model.layers.0.self_attn.q_proj.bias", "model.layers.0.self_attn.k_proj.bias"},
                /*extra_numel=*/16);
  Result<double> loss = FirstLoss(tmp.path() / "qwen_like", tmp);
  ASSERT_FALSE(loss.ok());
  EXPECT_EQ(loss.status().code(), StatusCode::kInvalidArgument) << loss.status().ToString();
  EXPECT_NE(loss.status().message().find("model.layers.0.self_attn.q_proj.bias"), std::string::npos)
      << loss.status().ToString();
  EXPECT_NE(loss.status().message().find("q/k/v biases"), std::string::npos)
      << loss.status().ToString();

  // The same weights without the extra tensors load.
  TempDir clean;
  WriteHfFolder(*net, Describe(options, 64), clean.path() / "llama");
  EXPECT_TRUE(FirstLoss(clean.path() / "llama", clean).ok());
}

}  // namespace
}  // namespace sluice::checkpoint
