// The parameter registry of each family: Hugging Face names in trace order, shapes, the flat
// layout (dense, one contiguous range per unit), the parameter count formulas, and the option
// validation messages.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/model/model.h"
#include "engine/train/run_setup.h"
#include "tests/common/test_ops.h"
#include "tests/model/model_test_util.h"

namespace sluice::model {
namespace {

using testing::TinyOptions;

std::vector<std::string> Names(const ParameterRegistry& registry) {
  std::vector<std::string> names;
  for (const ParameterInfo& info : registry.parameters()) names.push_back(info.name);
  return names;
}

TEST(ModelStructureTest, Gpt2NamesFollowHuggingFace) {
  ModelOptions options = TinyOptions(Family::kGpt2);
  HostAllocator host;
  auto model = Model<float>::Create(options, host, sluice::testing::OpsFor<float>());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  std::vector<std::string> expected = {"transformer.wte.weight", "transformer.wpe.weight"};
  for (int i = 0; i < 2; ++i) {
    const std::string h = "transformer.h." + std::to_string(i) + ".";
    for (const char* suffix :
         {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
          "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight",
          "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"}) {
      expected.push_back(h + suffix);
    }
  }
  expected.insert(expected.end(),
                  {"transformer.ln_f.weight", "transformer.ln_f.bias", "lm_head.weight"});
  const ParameterRegistry& registry = (*model)->registry();
  EXPECT_EQ(Names(registry), expected);

  const auto shape = [&](const char* name) {
    return registry.parameter(*registry.Find(name)).shape;
  };
  EXPECT_EQ(shape("transformer.wte.weight"), Shape({11, 8}));
  EXPECT_EQ(shape("transformer.wpe.weight"), Shape({7, 8}));
  EXPECT_EQ(shape("transformer.h.0.attn.c_attn.weight"), Shape({24, 8}));  // [out, in]
  EXPECT_EQ(shape("transformer.h.0.attn.c_attn.bias"), Shape({24}));
  EXPECT_EQ(shape("transformer.h.1.mlp.c_fc.weight"), Shape({12, 8}));
  EXPECT_EQ(shape("transformer.h.1.mlp.c_proj.weight"), Shape({8, 12}));
  EXPECT_EQ(shape("lm_head.weight"), Shape({11, 8}));
  EXPECT_TRUE(registry.parameter(*registry.Find("lm_head.weight")).is_alias());
}

TEST(ModelStructureTest, LlamaNamesFollowHuggingFace) {
  ModelOptions options = TinyOptions(Family::kLlama);
  HostAllocator host;
  auto model = Model<float>::Create(options, host, sluice::testing::OpsFor<float>());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  std::vector<std::string> expected = {"model.embed_tokens.weight"};
  for (int i = 0; i < 2; ++i) {
    const std::string l = "model.layers." + std::to_string(i) + ".";
    for (const char* suffix :
         {"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
          "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
          "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"}) {
      expected.push_back(l + suffix);
    }
  }
  expected.insert(expected.end(), {"model.norm.weight", "lm_head.weight"});
  const ParameterRegistry& registry = (*model)->registry();
  EXPECT_EQ(Names(registry), expected);
  const auto shape = [&](const char* name) {
    return registry.parameter(*registry.Find(name)).shape;
  };
  EXPECT_EQ(shape("model.layers.0.self_attn.q_proj.weight"), Shape({8, 8}));
  EXPECT_EQ(shape("model.layers.0.self_attn.k_proj.weight"), Shape({4, 8}));  // 1 kv head of 4
  EXPECT_EQ(shape("model.layers.0.self_attn.v_proj.weight"), Shape({4, 8}));
  EXPECT_EQ(shape("model.layers.0.mlp.down_proj.weight"), Shape({8, 12}));
  EXPECT_FALSE(registry.parameter(*registry.Find("lm_head.weight")).is_alias());
}

// Dense layout in trace order, one contiguous range per unit, aliases owning nothing.
TEST(ModelStructureTest, FlatLayoutIsDenseAndUnitContiguous) {
  for (const Family family : {Family::kGpt2, Family::kLlama}) {
    for (const bool tied : {true, false}) {
      ModelOptions options = TinyOptions(family);
      options.tie_embeddings = tied;
      HostAllocator host;
      auto model = Model<float>::Create(options, host, sluice::testing::OpsFor<float>());
      ASSERT_TRUE(model.ok());
      const ParameterRegistry& registry = (*model)->registry();
      int64_t next = 0;
      for (const UnitInfo& unit : registry.units()) {
        EXPECT_EQ(unit.offset, next) << unit.name;
        int64_t owned = 0;
        for (int p : unit.params) {
          const ParameterInfo& info = registry.parameter(p);
          if (info.is_alias()) continue;
          EXPECT_EQ(info.offset, next) << info.name;
          EXPECT_EQ(info.unit, &unit - registry.units().data());
          next += info.numel;
          owned += info.numel;
        }
        EXPECT_EQ(unit.numel, owned) << unit.name;
      }
      EXPECT_EQ(next, registry.total_elements());
      EXPECT_EQ(registry.units().size(), 2u + 2u + 1u);  // embeddings, 2 blocks, norm, head
      EXPECT_EQ(registry.units().back().name, "lm_head");
      EXPECT_EQ(registry.units().back().numel, tied ? 0 : 11 * 8);
      EXPECT_EQ((*model)->units().size(), registry.units().size());
      EXPECT_EQ((*model)->ParameterCount(), CountParameters(options));
    }
  }
}

TEST(ModelStructureTest, ParameterCountFormulas) {
  ModelOptions gpt2;  // GPT-2 small, 124M
  gpt2.family = Family::kGpt2;
  gpt2.n_layer = 12;
  gpt2.n_head = 12;
  gpt2.n_kv_head = 12;
  gpt2.d_model = 768;
  gpt2.d_ff = 3072;
  gpt2.vocab_size = 50257;
  gpt2.seq_len = 1024;
  gpt2.tie_embeddings = true;
  EXPECT_EQ(CountParameters(gpt2), 124'439'808);
  gpt2.tie_embeddings = false;
  EXPECT_EQ(CountParameters(gpt2), 124'439'808 + 50257 * 768);

  ModelOptions llama = train::DefaultModelOptions();  // Llama-2 7B
  llama.family = Family::kLlama;
  llama.n_layer = 32;
  llama.n_head = 32;
  llama.n_kv_head = 32;
  llama.d_model = 4096;
  llama.d_ff = 11008;
  llama.vocab_size = 32000;
  llama.seq_len = 4096;
  llama.tie_embeddings = false;
  EXPECT_EQ(CountParameters(llama), 6'738'415'616);

  // Grouped-query: k_proj and v_proj shrink to n_kv_head heads.
  ModelOptions gqa = TinyOptions(Family::kLlama);
  const int64_t d = 8, ff = 12, v = 11, kv = 4;
  EXPECT_EQ(CountParameters(gqa),
            v * d + 2 * (d + d * d + 2 * kv * d + d * d + d + 3 * ff * d) + d + v * d);
}

TEST(ModelStructureTest, InvalidOptionsNameTheField) {
  const auto error = [](ModelOptions o) { return ValidateModelOptions(o).ToString(); };
  ModelOptions o = TinyOptions(Family::kLlama);
  o.n_kv_head = 3;
  o.n_head = 4;
  EXPECT_NE(error(o).find("model.n_kv_head = 3 does not divide model.n_head = 4"),
            std::string::npos)
      << error(o);
  o = TinyOptions(Family::kGpt2);
  o.n_kv_head = 1;
  EXPECT_NE(error(o).find("gpt2 uses multi-head attention"), std::string::npos) << error(o);
  o = TinyOptions(Family::kGpt2);
  o.d_model = 9;
  EXPECT_NE(error(o).find("model.d_model = 9 is not a multiple of model.n_head = 2"),
            std::string::npos);
  o = TinyOptions(Family::kLlama);
  o.d_model = 6;
  EXPECT_NE(error(o).find("odd"), std::string::npos) << error(o);
  o = TinyOptions(Family::kGpt2);
  o.param_dtype = DType::kF16;
  EXPECT_NE(error(o).find("use f32 or bf16"), std::string::npos) << error(o);
  HostAllocator host;
  o = TinyOptions(Family::kGpt2);
  o.param_dtype = DType::kBF16;
  auto fp64 = Model<double>::Create(o, host, sluice::testing::OpsFor<double>());
  EXPECT_EQ(fp64.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Model<float>::Create(o, host, sluice::testing::OpsFor<float>()).ok());
}

}  // namespace
}  // namespace sluice::model
