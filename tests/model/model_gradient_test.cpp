// Whole tiny GPT-2 and Llama models in fp64: the gradients ForwardBackward accumulates against
// central finite differences of ForwardLoss, on sampled elements of every parameter; and the tied
// LM head, whose gradient must carry both the embedding's and the head's contribution.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "kernels/ref/ops_loss.h"
#include "tests/common/test_ops.h"
#include "tests/model/model_test_util.h"

namespace sluice::model {
namespace {

using testing::ExpectGradientsAgree;
using testing::kStep;
using testing::Randomize;
using testing::RandomTokens;
using testing::TinyOptions;

constexpr int64_t kModelBatch = 2;
constexpr int64_t kModelSeq = 5;

struct Case {
  Family family;
  bool tied;
  bool checkpointing;
};

class ModelGradientTest : public ::testing::TestWithParam<Case> {};

TEST_P(ModelGradientTest, SampledParametersMatchFiniteDifferences) {
  ModelOptions options = TinyOptions(GetParam().family);
  options.tie_embeddings = GetParam().tied;
  options.activation_checkpointing = GetParam().checkpointing;
  HostAllocator host;
  auto model = Model<double>::Create(options, host, sluice::testing::OpsFor<double>());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  Model<double>& net = **model;
  Randomize(net, 40);

  const std::vector<int32_t> inputs = RandomTokens(kModelBatch * kModelSeq, 11, 41);
  std::vector<int32_t> targets = RandomTokens(kModelBatch * kModelSeq, 11, 42);
  targets[7] = kernels::kIgnoreIndex;
  const double loss_grad = 0.5;
  net.ZeroGrads();
  auto loss = net.ForwardBackward(inputs.data(), targets.data(), kModelBatch, kModelSeq, loss_grad);
  ASSERT_TRUE(loss.ok()) << loss.status().ToString();
  auto eval = net.ForwardLoss(inputs.data(), targets.data(), kModelBatch, kModelSeq);
  ASSERT_TRUE(eval.ok());
  EXPECT_EQ(*loss, *eval) << "training and evaluation forwards differ";

  const auto f = [&]() {
    return loss_grad * *net.ForwardLoss(inputs.data(), targets.data(), kModelBatch, kModelSeq);
  };
  const auto& params = net.registry().parameters();
  int checked = 0;
  for (int p = 0; p < static_cast<int>(params.size()); ++p) {
    const ParameterInfo& info = params[p];
    if (info.is_alias()) continue;
    // First, last and a middle element of every parameter.
    for (const int64_t e : {int64_t{0}, info.numel / 2, info.numel - 1}) {
      const double saved = net.ParameterValue(p, e);
      net.SetParameterValue(p, e, saved + kStep);
      const double plus = f();
      net.SetParameterValue(p, e, saved - kStep);
      const double minus = f();
      net.SetParameterValue(p, e, saved);
      ExpectGradientsAgree(net.grads_data()[info.offset + e], (plus - minus) / (2 * kStep),
                           info.name + " element " + std::to_string(e));
      ++checked;
    }
  }
  EXPECT_GT(checked, 30);
}

INSTANTIATE_TEST_SUITE_P(Families, ModelGradientTest,
                         ::testing::Values(Case{Family::kGpt2, true, false},
                                           Case{Family::kGpt2, false, true},
                                           Case{Family::kLlama, false, false},
                                           Case{Family::kLlama, true, true}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(FamilyName(info.param.family)) +
                                  (info.param.tied ? "Tied" : "Untied") +
                                  (info.param.checkpointing ? "Checkpointed" : "");
                         });

// A tied head reads the token table: its gradient is the sum of what the untied model gives the
// embedding and the head separately, when the untied head holds a copy of the table.
TEST(TiedHeadTest, AccumulatesEmbeddingAndHeadGradients) {
  for (const Family family : {Family::kGpt2, Family::kLlama}) {
    ModelOptions tied_options = TinyOptions(family);
    tied_options.tie_embeddings = true;
    ModelOptions untied_options = tied_options;
    untied_options.tie_embeddings = false;
    HostAllocator host;
    auto tied = Model<double>::Create(tied_options, host, sluice::testing::OpsFor<double>());
    auto untied = Model<double>::Create(untied_options, host, sluice::testing::OpsFor<double>());
    ASSERT_TRUE(tied.ok() && untied.ok());
    Randomize(**tied, 50);

    const ParameterRegistry& tr = (*tied)->registry();
    const ParameterRegistry& ur = (*untied)->registry();
    for (const ParameterInfo& info : tr.parameters()) {
      if (info.is_alias()) continue;
      const int target = *ur.Find(info.name);
      for (int64_t e = 0; e < info.numel; ++e) {
        (*untied)->SetParameterValue(target, e, (*tied)->ParameterValue(*tr.Find(info.name), e));
      }
    }
    const std::string table =
        family == Family::kGpt2 ? "transformer.wte.weight" : "model.embed_tokens.weight";
    const int table_index = *ur.Find(table);
    const int head_index = *ur.Find("lm_head.weight");
    ASSERT_FALSE(ur.parameter(head_index).is_alias());
    for (int64_t e = 0; e < ur.parameter(head_index).numel; ++e) {
      (*untied)->SetParameterValue(head_index, e, (*untied)->ParameterValue(table_index, e));
    }

    const std::vector<int32_t> inputs = RandomTokens(kModelBatch * kModelSeq, 11, 51);
    const std::vector<int32_t> targets = RandomTokens(kModelBatch * kModelSeq, 11, 52);
    auto tied_loss =
        (*tied)->ForwardBackward(inputs.data(), targets.data(), kModelBatch, kModelSeq);
    auto untied_loss =
        (*untied)->ForwardBackward(inputs.data(), targets.data(), kModelBatch, kModelSeq);
    ASSERT_TRUE(tied_loss.ok() && untied_loss.ok());
    EXPECT_NEAR(*tied_loss, *untied_loss, 1e-12);

    const ParameterInfo& tied_table = tr.parameter(*tr.Find(table));
    const ParameterInfo& tied_head = tr.parameter(*tr.Find("lm_head.weight"));
    EXPECT_TRUE(tied_head.is_alias());
    EXPECT_EQ(tied_head.offset, tied_table.offset) << "the tied head shares the table's storage";
    const double* tied_grads = (*tied)->grads_data();
    const double* untied_grads = (*untied)->grads_data();
    double head_contribution = 0.0;
    for (int64_t e = 0; e < tied_table.numel; ++e) {
      const double expected = untied_grads[ur.parameter(table_index).offset + e] +
                              untied_grads[ur.parameter(head_index).offset + e];
      EXPECT_NEAR(tied_grads[tied_table.offset + e], expected, 1e-12) << table << " " << e;
      head_contribution += std::abs(untied_grads[ur.parameter(head_index).offset + e]);
    }
    EXPECT_GT(head_contribution, 0.0);
  }
}

}  // namespace
}  // namespace sluice::model
