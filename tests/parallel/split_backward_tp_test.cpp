// The split backward (Model::BackwardInput then BackwardWeight) on tensor-parallel pieces, on
// real ranks (mpirun -np 2, 4: one tensor group of the whole world): each rank's piece of GPT-2
// (fused q/k/v split per head, row-parallel projections that leave their bias out of the forward,
// the vocabulary-parallel head and loss) and of Llama (grouped-query attention, SwiGLU), with and
// without sequence parallelism (the Linears' inputs re-gathered in the backward), runs ZB-H1's
// order on three micro-batches and gives every rank the same losses and parameter gradients as
// its fused backward, bit for bit. The all-reduces of f and g sit in the backward-input, between
// the Linears' dx and the next module, and run in the same order either way.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/model.h"
#include "engine/parallel/process_groups.h"
#include "tests/common/test_ops.h"
#include "tests/common/test_world.h"
#include "tests/model/model_stage_util.h"
#include "tests/model/model_test_util.h"

namespace sluice::parallel {
namespace {

using model::Family;
using model::HostAllocator;
using model::Model;
using model::ModelOptions;
using model::testing::kStageBatch;
using model::testing::MakeMicroBatches;
using model::testing::MicroBatchData;
using model::testing::Randomize;
using model::testing::SmallOptions;
using sluice::testing::TestWorld;

struct Case {
  std::string name;
  Family family = Family::kGpt2;
  bool sequence_parallel = false;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class SplitBackwardTensorTest : public ::testing::TestWithParam<Case> {};

// One pass of `order` ("F0", "I0", "W0", "B0", ...) over three micro-batches; the losses, and
// the flat gradients.
std::pair<std::map<int, double>, std::vector<float>> RunPass(
    Model<float>& model, const std::vector<std::string>& order,
    const std::vector<MicroBatchData>& data) {
  model.ZeroGrads();
  EXPECT_TRUE(model.BeginPass().ok());
  for (const std::string& op : order) {
    const int m = op[1] - '0';
    Status status;
    switch (op[0]) {
      case 'F':
        status = model.Forward(m, {.batch = kStageBatch,
                                   .seq = model.options().seq_len,
                                   .tokens = data[m].tokens.data(),
                                   .targets = data[m].targets.data()});
        break;
      case 'B':
        status = model.Backward(m, {.loss_grad = 1.0 / 3});
        break;
      case 'I':
        status = model.BackwardInput(m, {.loss_grad = 1.0 / 3});
        break;
      case 'W':
        status = model.BackwardWeight(m);
        break;
    }
    EXPECT_TRUE(status.ok()) << op << ": " << status.ToString();
  }
  Result<std::map<int, double>> losses = model.EndPass();
  EXPECT_TRUE(losses.ok()) << losses.status().ToString();
  std::vector<float> grads(model.grads_data(), model.grads_data() + model.ParameterCount());
  return {losses.ok() ? *losses : std::map<int, double>{}, std::move(grads)};
}

TEST_P(SplitBackwardTensorTest, EqualsTheFusedBackwardOnEveryRank) {
  const Case& c = GetParam();
  Comm& world = TestWorld();
  Result<ProcessGrid> grid = ProcessGrid::Create(world.size(), world.size(), 1);
  ASSERT_TRUE(grid.ok()) << grid.status().ToString();
  auto groups = ProcessGroups::Create(world, *grid);
  ASSERT_TRUE(groups.ok()) << groups.status().ToString();
  ModelOptions options = SmallOptions(c.family, 2, /*num_threads=*/1);
  options.tie_embeddings = c.family == Family::kGpt2;  // the tied head reads the split table
  if (c.family == Family::kLlama) {
    options.n_head = 8;  // two query heads per key/value head on every rank
    options.n_kv_head = 4;
    options.d_model = 64;
    options.d_ff = 128;
  }
  options.tensor_parallel_size = world.size();
  options.tensor_parallel_rank = (*groups)->coords().tensor;
  options.sequence_parallel = c.sequence_parallel;
  HostAllocator host;
  std::vector<std::unique_ptr<Model<float>>> models;
  for (int i = 0; i < 2; ++i) {
    auto made = Model<float>::Create(options, host, sluice::testing::OpsFor<float>(),
                                     model::ModelStorage::kFlat, &(*groups)->tensor());
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    models.push_back(std::move(made).value());
    Randomize(*models.back(), 21 + (*groups)->coords().tensor);
  }
  const std::vector<MicroBatchData> data = MakeMicroBatches(options, 3, 13);
  const auto split =
      RunPass(*models[0], {"F0", "F1", "I0", "W0", "F2", "I1", "W1", "I2", "W2"}, data);
  const auto fused = RunPass(*models[1], {"F0", "F1", "B0", "F2", "B1", "B2"}, data);
  EXPECT_EQ(split.first, fused.first);
  ASSERT_EQ(split.second.size(), fused.second.size());
  EXPECT_EQ(
      std::memcmp(split.second.data(), fused.second.data(), fused.second.size() * sizeof(float)), 0)
      << "tensor rank " << options.tensor_parallel_rank;
  bool any = false;
  for (float g : fused.second) any = any || g != 0.0f;
  EXPECT_TRUE(any);
}

INSTANTIATE_TEST_SUITE_P(Models, SplitBackwardTensorTest,
                         ::testing::Values(Case{"gpt2", Family::kGpt2, false},
                                           Case{"llama", Family::kLlama, false},
                                           Case{"gpt2_sequence_parallel", Family::kGpt2, true},
                                           Case{"llama_sequence_parallel", Family::kLlama, true}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace sluice::parallel
