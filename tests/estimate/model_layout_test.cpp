// The layout computed from options against the registry a real model builds.
#include "engine/estimate/model_layout.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "engine/model/buffer.h"
#include "engine/model/model.h"
#include "engine/train/run_setup.h"
#include "tests/common/test_ops.h"

namespace sluice::estimate {
namespace {

model::ModelOptions Options(model::Family family, bool tied) {
  model::ModelOptions o = train::DefaultModelOptions();
  o.family = family;
  o.n_layer = 3;
  o.n_head = 4;
  o.n_kv_head = family == model::Family::kLlama ? 2 : 4;
  o.d_model = 32;
  o.d_ff = 80;
  o.vocab_size = 50;
  o.seq_len = 16;
  o.tie_embeddings = tied;
  return o;
}

class ModelLayoutTest : public ::testing::TestWithParam<std::tuple<model::Family, bool>> {};

TEST_P(ModelLayoutTest, MatchesTheRegistryOfARealModel) {
  const auto [family, tied] = GetParam();
  const model::ModelOptions options = Options(family, tied);
  model::HostAllocator host;
  auto net = model::Model<float>::Create(options, host, sluice::testing::OpsFor<float>());
  ASSERT_TRUE(net.ok()) << net.status().ToString();
  const model::ParameterRegistry& registry = (*net)->registry();

  const std::vector<UnitLayout> units = DescribeUnits(options);
  const LayoutSummary summary = SummarizeLayout(units);
  EXPECT_EQ(summary.parameters, model::CountParameters(options));
  EXPECT_EQ(summary.parameters, registry.total_elements());

  // Expand the block entry into n_layer units and compare unit by unit, in trace order.
  std::vector<const UnitLayout*> expanded;
  for (const UnitLayout& unit : units) {
    for (int64_t i = 0; i < unit.count; ++i) expanded.push_back(&unit);
  }
  ASSERT_EQ(expanded.size(), registry.units().size());
  for (size_t u = 0; u < expanded.size(); ++u) {
    const model::UnitInfo& real = registry.units()[u];
    SCOPED_TRACE(real.name);
    EXPECT_EQ(expanded[u]->owned_elements(), real.numel);
    int64_t read = 0;
    std::vector<int64_t> owned;
    for (int p : real.params) {
      const model::ParameterInfo& info = registry.parameter(p);
      read += info.numel;
      if (!info.is_alias()) owned.push_back(info.numel);
    }
    EXPECT_EQ(expanded[u]->read_elements, read);
    std::vector<int64_t> expected = expanded[u]->param_numels;
    std::sort(expected.begin(), expected.end());
    std::sort(owned.begin(), owned.end());
    EXPECT_EQ(expected, owned);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, ModelLayoutTest,
                         ::testing::Combine(::testing::Values(model::Family::kGpt2,
                                                              model::Family::kLlama),
                                            ::testing::Bool()));

TEST(ModelLayoutSummaryTest, Gpt2SmallHasTheKnownCountAndPersistentParameters) {
  model::ModelOptions o = train::DefaultModelOptions();  // GPT-2 124M
  o.n_layer = 12;
  o.n_head = 12;
  o.n_kv_head = 12;
  o.d_model = 768;
  o.d_ff = 3072;
  o.vocab_size = 50257;
  o.seq_len = 1024;
  const LayoutSummary s = SummarizeLayout(DescribeUnits(o), /*persistence_threshold=*/100000);
  EXPECT_EQ(s.parameters, 124'439'808);
  // Largest unit: the embeddings, wte 50257 x 768 + wpe 1024 x 768.
  EXPECT_EQ(s.largest_unit_owned, 50257 * 768 + 1024 * 768);
  // Persistent: per block the norms (4 x 768), biases 2304 + 768 + 3072 + 768; ln_f 2 x 768.
  EXPECT_EQ(s.persistent_elements, 12 * (4 * 768 + 2304 + 768 + 3072 + 768) + 2 * 768);
  EXPECT_EQ(s.largest_unit_gathered, 50257 * 768 + 1024 * 768);
}

}  // namespace
}  // namespace sluice::estimate
