// `sluice convert` and loading safetensors into a model: a tiny GPT-2 and Llama are saved as a
// sharded checkpoint (as ZeRO shards them), converted to safetensors with Hugging Face names and
// layouts, and loaded back into fresh models, bit for bit; files for another model are refused
// with the tensor's name.
#include "engine/checkpoint/convert.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "engine/checkpoint/checkpoint_reader.h"
#include "engine/checkpoint/hf_config.h"
#include "engine/checkpoint/hf_layout.h"
#include "engine/checkpoint/safetensors_loader.h"
#include "engine/checkpoint/safetensors_writer.h"
#include "engine/train/run_setup.h"
#include "kernels/ref/half.h"
#include "tests/checkpoint/checkpoint_test_util.h"
#include "tests/common/test_ops.h"

namespace sluice::checkpoint {
namespace {

using testing::TempDir;

model::ModelOptions Gpt2Options() {
  model::ModelOptions o = train::DefaultModelOptions();
  o.family = model::Family::kGpt2;
  o.n_layer = 2;
  o.d_model = 32;
  o.n_head = 4;
  o.n_kv_head = 4;
  o.d_ff = 48;
  o.vocab_size = 50;
  o.seq_len = 16;
  o.tie_embeddings = true;
  return o;
}

model::ModelOptions LlamaOptions() {
  model::ModelOptions o = train::DefaultModelOptions();
  o.family = model::Family::kLlama;
  o.n_layer = 2;
  o.d_model = 32;
  o.n_head = 4;
  o.n_kv_head = 2;
  o.d_ff = 40;
  o.vocab_size = 50;
  o.seq_len = 16;
  o.tie_embeddings = false;
  return o;
}

std::unique_ptr<model::Model<float>> MakeModel(const model::ModelOptions& options,
                                               model::HostAllocator& host, uint64_t seed) {
  auto net = model::Model<float>::Create(options, host, sluice::testing::OpsFor<float>());
  SLUICE_CHECK(net.ok()) << net.status().ToString();
  if (seed != 0) (*net)->InitializeParameters(seed);
  return std::move(net).value();
}

const float* ParamPtr(const model::Model<float>& net, const model::ParameterInfo& p) {
  return static_cast<const float*>(net.params_data()) + p.offset;
}

// Saves the model's parameters as master weights (plus moments) split over `world` ranks the way
// ZeRO splits them: every parameter on its own, ShardRange per rank; aliases own no storage.
void SaveModelCheckpoint(const model::Model<float>& net, const std::filesystem::path& dir,
                         int world,
                         const nlohmann::ordered_json& config = nlohmann::ordered_json::object()) {
  testing::ThreadAgreement agreement(world);
  std::vector<std::thread> threads;
  std::vector<Status> statuses(world);
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank, agree = agreement.ForRank()] {
      std::vector<ShardTensor> tensors;
      std::vector<float> moments;
      moments.reserve(net.ParameterCount());
      for (const model::ParameterInfo& p : net.registry().parameters()) {
        if (p.is_alias()) continue;
        ShardSpan span = ShardRange(static_cast<size_t>(p.numel), world, rank);
        ShardTensor t{
            {StateKind::kMasterWeights, p.name, DType::kF32, p.shape,
             static_cast<int64_t>(span.offset), static_cast<int64_t>(span.offset + span.count)},
            ParamPtr(net, p) + span.offset};
        tensors.push_back(t);
        for (size_t i = 0; i < span.count; ++i) moments.push_back(0.25f);
        t.kind = StateKind::kExpAvg;
        t.data = moments.data() + moments.size() - span.count;
        tensors.push_back(t);
      }
      SaveRequest request;
      request.checkpoints_dir = dir;
      request.step = 20;
      request.rank = rank;
      request.world = world;
      request.attempt_tag = "convert";
      request.config = config;
      statuses[rank] = SaveCheckpoint(request, tensors, agree).status();
    });
  }
  for (auto& t : threads) t.join();
  for (const Status& s : statuses) ASSERT_TRUE(s.ok()) << s.ToString();
}

TEST(ConvertTest, Gpt2ToSafetensorsHasHuggingFaceNamesAndConv1DLayout) {
  TempDir tmp;
  model::HostAllocator host;
  auto net = MakeModel(Gpt2Options(), host, 7);
  SaveModelCheckpoint(*net, tmp.path() / "checkpoints", 3);
  const auto out = tmp.path() / "model.safetensors";
  auto summary = ConvertCheckpointToSafetensors(tmp.path(), out, DType::kF32);
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_EQ(summary->step, 20);
  EXPECT_EQ(summary->parameters, net->ParameterCount());

  auto file = SafetensorsFile::Open(out);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ((*file)->metadata().at("format"), "pt");
  int non_alias = 0;
  for (const auto& p : net->registry().parameters()) non_alias += p.is_alias() ? 0 : 1;
  EXPECT_EQ((*file)->tensors().size(), static_cast<size_t>(non_alias));
  EXPECT_EQ((*file)->Find("lm_head.weight"), nullptr) << "a tied head is stored once";
  ASSERT_NE((*file)->Find("transformer.wte.weight"), nullptr);
  ASSERT_NE((*file)->Find("transformer.wpe.weight"), nullptr);

  // c_attn: Sluice [3d, d] (nn.Linear), Hugging Face Conv1D [d, 3d].
  const auto index = net->registry().Find("transformer.h.1.attn.c_attn.weight");
  ASSERT_TRUE(index.has_value());
  const model::ParameterInfo& p = net->registry().parameter(*index);
  const SafetensorsTensor* t = (*file)->Find(p.name);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{32, 96}));
  std::vector<float> hf(p.numel);
  ASSERT_TRUE((*file)->Read(*t, hf.data()).ok());
  const float* ours = ParamPtr(*net, p);
  for (int64_t out_row = 0; out_row < 96; ++out_row) {
    for (int64_t in_col = 0; in_col < 32; ++in_col) {
      ASSERT_EQ(hf[in_col * 96 + out_row], ours[out_row * 32 + in_col]);
    }
  }
  // Non-Conv1D tensors keep their layout.
  const model::ParameterInfo& wte =
      net->registry().parameter(*net->registry().Find("transformer.wte.weight"));
  EXPECT_EQ((*file)->Find(wte.name)->shape, (std::vector<int64_t>{50, 32}));
}

TEST(ConvertTest, ConvertThenLoadRestoresEveryParameterBitForBit) {
  for (const auto& options : {Gpt2Options(), LlamaOptions()}) {
    TempDir tmp;
    model::HostAllocator host;
    auto net = MakeModel(options, host, 11);
    SaveModelCheckpoint(*net, tmp.path() / "checkpoints", 2);
    const auto out = tmp.path() / "m.safetensors";
    ASSERT_TRUE(ConvertCheckpointToSafetensors(tmp.path() / "checkpoints", out, DType::kF32).ok());
    auto fresh = MakeModel(options, host, 0);
    auto report = LoadSafetensorsIntoModel(out, *fresh);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    EXPECT_EQ(0, std::memcmp(fresh->params_data(), net->params_data(),
                             net->ParameterCount() * sizeof(float)))
        << model::FamilyName(options.family);
    if (options.family == model::Family::kLlama) {
      auto file = SafetensorsFile::Open(out);
      ASSERT_NE((*file)->Find("model.layers.0.self_attn.q_proj.weight"), nullptr);
      ASSERT_NE((*file)->Find("lm_head.weight"), nullptr) << "untied heads are stored";
    }
  }
}

TEST(ConvertTest, Bf16OutputIsRoundToNearestEvenAndLoadsIntoBf16Models) {
  TempDir tmp;
  model::HostAllocator host;
  auto net = MakeModel(Gpt2Options(), host, 3);
  SaveModelCheckpoint(*net, tmp.path() / "checkpoints", 1);
  const auto out = tmp.path() / "bf16.safetensors";
  auto summary = ConvertCheckpointToSafetensors(tmp.path(), out, DType::kBF16);
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  auto file = SafetensorsFile::Open(out);
  ASSERT_TRUE(file.ok());
  const model::ParameterInfo& ln =
      net->registry().parameter(*net->registry().Find("transformer.h.0.mlp.c_fc.bias"));
  const SafetensorsTensor* t = (*file)->Find(ln.name);
  ASSERT_EQ(t->dtype, SafetensorsDType::kBF16);
  std::vector<uint16_t> bits(ln.numel);
  ASSERT_TRUE((*file)->Read(*t, bits.data()).ok());
  for (int64_t i = 0; i < ln.numel; ++i) {
    ASSERT_EQ(bits[i], kernels::F32ToBf16(ParamPtr(*net, ln)[i]));
  }
  // Into a bf16-storage model: the stored bits are exactly the file's.
  model::ModelOptions bf16_options = Gpt2Options();
  bf16_options.param_dtype = DType::kBF16;
  auto bf16_net = MakeModel(bf16_options, host, 0);
  ASSERT_TRUE(LoadSafetensorsIntoModel(out, *bf16_net).ok());
  const uint16_t* stored = static_cast<const uint16_t*>(bf16_net->params_data()) + ln.offset;
  for (int64_t i = 0; i < ln.numel; ++i) ASSERT_EQ(stored[i], bits[i]);
  // Into an fp32 model: the bf16 values widened.
  auto f32_net = MakeModel(Gpt2Options(), host, 0);
  ASSERT_TRUE(LoadSafetensorsIntoModel(out, *f32_net).ok());
  EXPECT_EQ(ParamPtr(*f32_net, ln)[3], kernels::Bf16ToF32(bits[3]));
}

// The model section of a resolved config record, as a training run's manifest holds it.
nlohmann::ordered_json ConfigRecord(const model::ModelOptions& o, double rope_theta) {
  nlohmann::ordered_json settings;
  auto set = [&](const char* key, nlohmann::ordered_json value) {
    settings[key] = {{"value", std::move(value)}, {"source", "file"}};
  };
  set("model.family", std::string(model::FamilyName(o.family)));
  set("model.n_layer", o.n_layer);
  set("model.n_head", o.n_head);
  set("model.n_kv_head", o.n_kv_head);
  set("model.d_model", o.d_model);
  set("model.d_ff", o.d_ff);
  set("model.vocab_size", o.vocab_size);
  set("model.seq_len", o.seq_len);
  set("model.max_position_embeddings", o.seq_len);
  set("model.tie_embeddings", o.tie_embeddings);
  set("model.rope_theta", rope_theta);
  set("model.norm_eps", 1e-6);
  return {{"settings", settings}};
}

TEST(ConvertTest, HfFolderHasConfigJsonAndLoadsBackBitForBit) {
  TempDir tmp;
  model::HostAllocator host;
  const model::ModelOptions options = LlamaOptions();
  auto net = MakeModel(options, host, 5);
  SaveModelCheckpoint(*net, tmp.path() / "checkpoints", 2, ConfigRecord(options, 500000.0));
  const auto out = tmp.path() / "deep" / "hf";  // created, parents too
  auto summary = ConvertCheckpointToHfFolder(tmp.path(), out);
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_EQ(summary->dtype, DType::kF32) << "the master weights' precision by default";
  ASSERT_TRUE(std::filesystem::exists(out / "model.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(out / "model.safetensors.index.json"));

  auto hf = ReadHfModelConfig(out / "config.json");
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();
  std::map<std::string, SettingValue> read;
  for (const HfModelSetting& s : hf->settings) read[s.key] = s.value;
  EXPECT_EQ(std::get<std::string>(read["model.family"]), "llama");
  EXPECT_EQ(std::get<int64_t>(read["model.n_kv_head"]), 2);
  EXPECT_EQ(std::get<int64_t>(read["model.d_ff"]), 40);
  EXPECT_EQ(std::get<double>(read["model.rope_theta"]), 500000.0);
  EXPECT_EQ(std::get<double>(read["model.norm_eps"]), 1e-6);
  EXPECT_FALSE(std::get<bool>(read["model.tie_embeddings"]));

  auto fresh = MakeModel(options, host, 0);
  auto report = LoadSafetensorsIntoModel(out, *fresh);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(0, std::memcmp(fresh->params_data(), net->params_data(),
                           net->ParameterCount() * sizeof(float)));

  // Past the shard size: shards and an index, which replace the single file (a stale one would
  // shadow the index in from_pretrained), in bf16 when asked.
  auto sharded = ConvertCheckpointToHfFolder(tmp.path(), out,
                                             {.dtype = DType::kBF16, .max_shard_bytes = 4096});
  ASSERT_TRUE(sharded.ok()) << sharded.status().ToString();
  EXPECT_FALSE(std::filesystem::exists(out / "model.safetensors"));
  ASSERT_TRUE(std::filesystem::exists(out / "model.safetensors.index.json"));
  const size_t shards = sharded->files.size() - 2;  // less the index and config.json
  EXPECT_GT(shards, 2u);
  EXPECT_TRUE(std::filesystem::exists(
      out / fmt::format("model-{:05d}-of-{:05d}.safetensors", shards, shards)));
  std::ifstream index_file(out / "model.safetensors.index.json");
  const auto index = nlohmann::json::parse(index_file);
  EXPECT_EQ(index["metadata"]["total_size"].get<int64_t>(), net->ParameterCount() * 2);
  EXPECT_EQ(index["weight_map"]["model.embed_tokens.weight"],
            "model-00001-of-" + fmt::format("{:05d}", shards) + ".safetensors");
  std::ifstream config_file(out / "config.json");
  EXPECT_EQ(nlohmann::json::parse(config_file)["torch_dtype"], "bfloat16");
  auto bf16 = MakeModel(options, host, 0);
  ASSERT_TRUE(LoadSafetensorsIntoModel(out, *bf16).ok());
  const model::ParameterInfo& q =
      net->registry().parameter(*net->registry().Find("model.layers.1.self_attn.q_proj.weight"));
  for (int64_t i = 0; i < q.numel; ++i) {
    ASSERT_EQ(ParamPtr(*bf16, q)[i], kernels::Bf16ToF32(kernels::F32ToBf16(ParamPtr(*net, q)[i])));
  }
}

TEST(ConvertTest, HfFolderNeedsTheRecordedModel) {
  TempDir tmp;
  model::HostAllocator host;
  auto net = MakeModel(Gpt2Options(), host, 5);
  SaveModelCheckpoint(*net, tmp.path() / "checkpoints", 1);  // no config record
  auto summary = ConvertCheckpointToHfFolder(tmp.path(), tmp.path() / "hf");
  ASSERT_FALSE(summary.ok());
  EXPECT_NE(summary.status().message().find("no resolved config"), std::string::npos)
      << summary.status().ToString();
  // One safetensors file needs no config.
  EXPECT_TRUE(ConvertCheckpointToSafetensors(tmp.path(), tmp.path() / "m.safetensors", {}).ok());
}

// Writes the model's parameters as a Hugging Face file, with `edit` changing the tensor list.
template <typename Edit>
void WriteHfFile(const model::Model<float>& net, const std::filesystem::path& path, Edit edit) {
  std::vector<SafetensorsTensorSpec> specs;
  std::vector<std::vector<float>> data;
  for (const auto& p : net.registry().parameters()) {
    if (p.is_alias()) continue;
    std::vector<float> values(ParamPtr(net, p), ParamPtr(net, p) + p.numel);
    std::vector<int64_t> shape = HfShape(p.name, p.shape);
    if (IsHfConv1DWeight(p.name)) {
      Transpose2D(ParamPtr(net, p), p.shape.dim(0), p.shape.dim(1), values.data());
    }
    specs.push_back({p.name, SafetensorsDType::kF32, shape});
    data.push_back(std::move(values));
  }
  edit(specs, data);
  auto w = SafetensorsWriter::Create(path, specs, {{"format", "pt"}});
  SLUICE_CHECK(w.ok()) << w.status().ToString();
  for (size_t i = 0; i < specs.size(); ++i) {
    SLUICE_CHECK(
        (*w)->Append(data[i].data(), data[i].size() * SafetensorsDTypeSize(specs[i].dtype)).ok());
  }
  SLUICE_CHECK((*w)->Finish().ok());
}

TEST(ConvertTest, LoadAcceptsBaseModelNamesAndSkipsHfBuffers) {
  TempDir tmp;
  model::HostAllocator host;
  auto net = MakeModel(Gpt2Options(), host, 5);
  const auto path = tmp.path() / "hf.safetensors";
  WriteHfFile(*net, path, [](auto& specs, auto& data) {
    for (auto& s : specs) s.name = s.name.substr(std::string("transformer.").size());
    specs.push_back({"h.0.attn.bias", SafetensorsDType::kF32, {1, 1, 16, 16}});
    data.emplace_back(256, 1.0f);
  });
  auto fresh = MakeModel(Gpt2Options(), host, 0);
  auto report = LoadSafetensorsIntoModel(path, *fresh);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->ignored, std::vector<std::string>{"h.0.attn.bias"});
  EXPECT_EQ(0, std::memcmp(fresh->params_data(), net->params_data(),
                           net->ParameterCount() * sizeof(float)));
}

TEST(ConvertTest, WrongShapeDtypeMissingOrExtraTensorsAreRefusedByName) {
  TempDir tmp;
  model::HostAllocator host;
  auto net = MakeModel(Gpt2Options(), host, 5);
  auto fresh = MakeModel(Gpt2Options(), host, 0);
  const auto path = tmp.path() / "bad.safetensors";
  const std::string target = "transformer.h.1.mlp.c_fc.weight";

  WriteHfFile(*net, path, [&](auto& specs, auto&) {
    for (auto& s : specs) {
      if (s.name == target) std::swap(s.shape[0], s.shape[1]);  // Sluice's layout, not HF's
    }
  });
  auto r = LoadSafetensorsIntoModel(path, *fresh);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("tensor '" + target + "'"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("[48, 32]"), std::string::npos) << r.status().message();

  WriteHfFile(*net, path, [&](auto& specs, auto&) {
    for (auto& s : specs) {
      if (s.name == target) s.dtype = SafetensorsDType::kI32;
    }
  });
  r = LoadSafetensorsIntoModel(path, *fresh);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("tensor '" + target + "'"), std::string::npos);
  EXPECT_NE(r.status().message().find("dtype I32"), std::string::npos) << r.status().message();

  WriteHfFile(*net, path, [&](auto& specs, auto& data) {
    specs.erase(specs.begin() + 3);
    data.erase(data.begin() + 3);
  });
  r = LoadSafetensorsIntoModel(path, *fresh);
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find(net->registry().parameter(3).name), std::string::npos)
      << r.status().message();

  WriteHfFile(*net, path, [&](auto& specs, auto& data) {
    specs.push_back({"transformer.h.7.ln_1.weight", SafetensorsDType::kF32, {32}});
    data.emplace_back(32, 1.0f);
  });
  r = LoadSafetensorsIntoModel(path, *fresh);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("transformer.h.7.ln_1.weight"), std::string::npos);
  LoadWeightsOptions lenient;
  lenient.allow_unexpected = true;
  EXPECT_TRUE(LoadSafetensorsIntoModel(path, *fresh, lenient).ok());

  // A refused file leaves the model untouched.
  auto untouched = MakeModel(Gpt2Options(), host, 9);
  std::vector<float> before(
      static_cast<float*>(untouched->params_data()),
      static_cast<float*>(untouched->params_data()) + untouched->ParameterCount());
  WriteHfFile(*net, path, [&](auto& specs, auto&) { specs.back().shape = {1, 32}; });
  EXPECT_FALSE(LoadSafetensorsIntoModel(path, *untouched).ok());
  EXPECT_EQ(0, std::memcmp(before.data(), untouched->params_data(), before.size() * sizeof(float)));
}

TEST(ConvertTest, UntiedModelFromTiedFileSaysHowToFixIt) {
  TempDir tmp;
  model::HostAllocator host;
  auto tied = MakeModel(Gpt2Options(), host, 5);
  const auto path = tmp.path() / "tied.safetensors";
  WriteHfFile(*tied, path, [](auto&, auto&) {});
  model::ModelOptions untied_options = Gpt2Options();
  untied_options.tie_embeddings = false;
  auto untied = MakeModel(untied_options, host, 0);
  auto r = LoadSafetensorsIntoModel(path, *untied);
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("tie_embeddings"), std::string::npos) << r.status().message();
}

TEST(ConvertTest, ShardRangesReadFromASafetensorsFileInSluiceLayout) {
  TempDir tmp;
  model::HostAllocator host;
  auto net = MakeModel(Gpt2Options(), host, 8);
  const auto dir = tmp.path() / "sharded";
  std::filesystem::create_directories(dir);
  // Split over two files with an index, as Hugging Face shards large models.
  std::vector<const model::ParameterInfo*> params;
  for (const auto& p : net->registry().parameters()) {
    if (!p.is_alias()) params.push_back(&p);
  }
  nlohmann::json index = {{"metadata", nlohmann::json::object()},
                          {"weight_map", nlohmann::json::object()}};
  for (int part = 0; part < 2; ++part) {
    const std::string file = fmt::format("model-0000{}-of-00002.safetensors", part + 1);
    std::vector<SafetensorsTensorSpec> specs;
    std::vector<std::vector<float>> data;
    for (size_t i = part; i < params.size(); i += 2) {
      const auto& p = *params[i];
      std::vector<float> values(ParamPtr(*net, p), ParamPtr(*net, p) + p.numel);
      if (IsHfConv1DWeight(p.name)) {
        Transpose2D(ParamPtr(*net, p), p.shape.dim(0), p.shape.dim(1), values.data());
      }
      specs.push_back({p.name, SafetensorsDType::kF32, HfShape(p.name, p.shape)});
      data.push_back(std::move(values));
      index["weight_map"][p.name] = file;
    }
    auto w = SafetensorsWriter::Create(dir / file, specs, {{"format", "pt"}});
    ASSERT_TRUE(w.ok());
    for (auto& d : data) ASSERT_TRUE((*w)->Append(d.data(), d.size() * 4).ok());
    ASSERT_TRUE((*w)->Finish().ok());
  }
  std::ofstream(dir / "model.safetensors.index.json") << index.dump(2);
  auto source = SafetensorsSource::Open(dir);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  for (const model::ParameterInfo* p : params) {
    for (int world = 1; world <= 3; ++world) {
      for (int rank = 0; rank < world; ++rank) {
        ShardSpan span = ShardRange(static_cast<size_t>(p->numel), world, rank);
        std::vector<float> got(span.count);
        ASSERT_TRUE(
            ReadParameterRange(**source, *p, span.offset, span.offset + span.count, got.data())
                .ok());
        ASSERT_EQ(0, std::memcmp(got.data(), ParamPtr(*net, *p) + span.offset,
                                 span.count * sizeof(float)))
            << p->name << " world " << world << " rank " << rank;
      }
    }
  }
}

}  // namespace
}  // namespace sluice::checkpoint
