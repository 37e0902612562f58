// Several stages of one model in one Model (Model::CreateChunks, model.h "Chunks"): what a rank
// of an interleaved pipeline schedule holds. The chunks' registry is their stages' registries one
// after the other; each chunk computes as a Model of its stage alone, bit for bit; the hooks see
// the model's unit indices and one BeforePassEnd; a failed call of one chunk ends the pass on
// all of them; misuse is refused with the call and the ranges named.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/model.h"
#include "tests/common/test_ops.h"
#include "tests/model/model_stage_util.h"
#include "tests/model/model_test_util.h"

namespace sluice::model {
namespace {

using testing::ChunksOf;
using testing::ExpectError;
using testing::kStageBatch;
using testing::MakeMicroBatches;
using testing::MicroBatchData;
using testing::Randomize;
using testing::SmallOptions;
using testing::StageOf;

const std::vector<ModelStage> kChunks = {{0, 1}, {2, 3}};  // rank 0 of pp 2, two chunks

DeviceBuffer Allocate(size_t bytes) {
  Result<DeviceBuffer> buffer =
      sluice::testing::OpsFor<float>().device().Allocate(bytes, MemoryCategory::kActivations);
  SLUICE_CHECK(buffer.ok()) << buffer.status().ToString();
  return std::move(buffer).value();
}

std::unique_ptr<Model<float>> Whole(const ModelOptions& options, HostAllocator& host) {
  auto whole = Model<float>::Create(options, host, sluice::testing::OpsFor<float>());
  SLUICE_CHECK(whole.ok()) << whole.status().ToString();
  Randomize(**whole, 11);
  return std::move(whole).value();
}

std::vector<std::string> ParameterNames(const ParameterRegistry& registry) {
  std::vector<std::string> names;
  for (const ParameterInfo& p : registry.parameters()) names.push_back(p.name);
  return names;
}

TEST(ModelChunksTest, TheRegistryIsTheChunksStagesOneAfterTheOther) {
  for (const bool tied : {false, true}) {
    ModelOptions options = SmallOptions(Family::kGpt2, 4);
    options.tie_embeddings = tied;
    HostAllocator host;
    const std::unique_ptr<Model<float>> whole = Whole(options, host);
    // Rank 1 of pp 2: layers 1 and 3, the last with the head (a mirror of the table when tied).
    const std::vector<ModelStage> ranges = {{1, 2}, {3, 4}};
    const std::unique_ptr<Model<float>> chunks = ChunksOf(*whole, ranges, host);
    std::vector<std::string> expected =
        ParameterNames(StageOf(*whole, ranges[0], host)->registry());
    const std::vector<std::string> second =
        ParameterNames(StageOf(*whole, ranges[1], host)->registry());
    expected.insert(expected.end(), second.begin(), second.end());
    EXPECT_EQ(ParameterNames(chunks->registry()), expected) << (tied ? "tied" : "untied");
    EXPECT_EQ(chunks->chunk_count(), 2);
    EXPECT_FALSE(chunks->first_stage());
    EXPECT_TRUE(chunks->last_stage());
    EXPECT_FALSE(chunks->chunk(0).last_stage());
    EXPECT_TRUE(chunks->chunk(1).last_stage());
    EXPECT_EQ(chunks->units().size(), 1u + 3u);  // block 1; block 3, final norm, LM head
  }
}

// Chunks [0, 1) and [2, 3) of one Model and stages [1, 2) and [3, 4) of their own carry two
// micro-batches through the 4-layer model (GPipe order, the streams drained between calls):
// the losses and every gradient of the chunks' model are the whole model's.
TEST(ModelChunksTest, ChunksComputeAsTheWholeModel) {
  for (const Family family : {Family::kGpt2, Family::kLlama}) {
    ModelOptions options = SmallOptions(family, 4);
    options.tie_embeddings = false;
    HostAllocator host;
    const std::unique_ptr<Model<float>> whole = Whole(options, host);
    const std::vector<MicroBatchData> data = MakeMicroBatches(options, 2, 5);
    std::vector<double> expected_losses;
    whole->ZeroGrads();
    for (const MicroBatchData& m : data) {
      auto loss = whole->ForwardBackward(m.tokens.data(), m.targets.data(), kStageBatch,
                                         options.seq_len, 0.5);
      ASSERT_TRUE(loss.ok()) << loss.status().ToString();
      expected_losses.push_back(*loss);
    }

    const std::unique_ptr<Model<float>> mine = ChunksOf(*whole, kChunks, host);
    const std::unique_ptr<Model<float>> second = StageOf(*whole, {1, 2}, host);
    const std::unique_ptr<Model<float>> last = StageOf(*whole, {3, 4}, host);
    const size_t bytes = kStageBatch * options.seq_len * options.d_model * sizeof(float);
    // hidden[m][i]: the output of virtual stage i; grads[m][i]: the gradient of its input.
    std::vector<std::vector<DeviceBuffer>> hidden(2), grads(2);
    for (int m = 0; m < 2; ++m) {
      for (int i = 0; i < 4; ++i) {
        hidden[m].push_back(Allocate(bytes));
        grads[m].push_back(Allocate(bytes));
      }
    }
    const auto ok = [](Model<float>& model, const Status& status) {
      ASSERT_TRUE(status.ok()) << status.ToString();
      ASSERT_TRUE(model.stream().Synchronize().ok());
    };
    for (Model<float>* model : {mine.get(), second.get(), last.get()}) {
      model->ZeroGrads();
      ASSERT_TRUE(model->BeginPass().ok());
    }
    const auto h = [&](int m, int i) { return hidden[m][i].data_as<float>(); };
    const auto g = [&](int m, int i) { return grads[m][i].data_as<float>(); };
    for (int m = 0; m < 2; ++m) {
      const StageInput<float> in{.batch = kStageBatch, .seq = options.seq_len};
      StageInput<float> first = in;
      first.tokens = data[m].tokens.data();
      ok(*mine, mine->chunk(0).Forward(m, first, h(m, 0)));
      StageInput<float> mid = in;
      mid.hidden = h(m, 0);
      ok(*second, second->Forward(m, mid, h(m, 1)));
      mid.hidden = h(m, 1);
      ok(*mine, mine->chunk(1).Forward(m, mid, h(m, 2)));
      StageInput<float> tail = in;
      tail.hidden = h(m, 2);
      tail.targets = data[m].targets.data();
      ok(*last, last->Forward(m, tail));
    }
    for (int m = 0; m < 2; ++m) {
      ok(*last, last->Backward(m, {.loss_grad = 0.5}, g(m, 3)));
      ok(*mine, mine->chunk(1).Backward(m, {.hidden = g(m, 3)}, g(m, 2)));
      ok(*second, second->Backward(m, {.hidden = g(m, 2)}, g(m, 1)));
      ok(*mine, mine->chunk(0).Backward(m, {.hidden = g(m, 1)}));
    }
    auto losses = last->EndPass();
    ASSERT_TRUE(losses.ok()) << losses.status().ToString();
    EXPECT_EQ(losses->at(0), expected_losses[0]);
    EXPECT_EQ(losses->at(1), expected_losses[1]);
    auto none = mine->EndPass();
    ASSERT_TRUE(none.ok()) << none.status().ToString();
    EXPECT_TRUE(none->empty());
    ASSERT_TRUE(second->EndPass().ok());

    const ParameterRegistry& registry = mine->registry();
    for (const ParameterInfo& info : registry.parameters()) {
      const ParameterInfo& reference =
          whole->registry().parameter(*whole->registry().Find(info.name));
      EXPECT_EQ(
          std::memcmp(mine->grads_data() + info.offset, whole->grads_data() + reference.offset,
                      static_cast<size_t>(info.numel) * sizeof(float)),
          0)
          << info.name;
    }
  }
}

class Recorder final : public UnitHooks {
 public:
  Status BeforeForward(int unit) override { return Log("F", unit); }
  Status AfterBackward(int unit) override { return Log("B", unit); }
  Status BeforePassEnd() override { return Log("end", -1); }
  std::vector<std::string> events;

 private:
  Status Log(const char* what, int unit) {
    events.push_back(unit < 0 ? what : what + std::to_string(unit));
    return OkStatus();
  }
};

// The hooks see the model's unit indices (embeddings 0, block 0 1, block 2 2), in the order the
// chunks ran, and the pass's end once.
TEST(ModelChunksTest, HooksSeeTheModelsUnitsAndOnePassEnd) {
  ModelOptions options = SmallOptions(Family::kLlama, 4);
  options.tie_embeddings = false;
  HostAllocator host;
  const std::unique_ptr<Model<float>> whole = Whole(options, host);
  const std::unique_ptr<Model<float>> mine = ChunksOf(*whole, kChunks, host);
  Recorder hooks;
  mine->SetHooks(&hooks);
  Device& device = sluice::testing::OpsFor<float>().device();
  const size_t bytes = kStageBatch * options.seq_len * options.d_model * sizeof(float);
  DeviceBuffer out = Allocate(bytes);
  DeviceBuffer grad = Allocate(bytes);
  ASSERT_TRUE(device.MemsetAsync(grad.data(), 0, bytes, mine->stream()).ok());
  const std::vector<MicroBatchData> data = MakeMicroBatches(options, 1, 3);
  ASSERT_TRUE(mine->BeginPass().ok());
  const StageInput<float> in{.batch = kStageBatch, .seq = options.seq_len};
  StageInput<float> first = in;
  first.tokens = data[0].tokens.data();
  ASSERT_TRUE(mine->chunk(0).Forward(0, first, out.data_as<float>()).ok());
  StageInput<float> mid = in;
  mid.hidden = out.data_as<float>();
  ASSERT_TRUE(mine->chunk(1).Forward(0, mid, out.data_as<float>()).ok());
  ASSERT_TRUE(
      mine->chunk(1).Backward(0, {.hidden = grad.data_as<float>()}, grad.data_as<float>()).ok());
  ASSERT_TRUE(mine->chunk(0).Backward(0, {.hidden = grad.data_as<float>()}).ok());
  ASSERT_TRUE(mine->EndPass().ok());
  EXPECT_EQ(hooks.events, (std::vector<std::string>{"F0", "F1", "F2", "B2", "B1", "B0", "end"}));
  mine->SetHooks(nullptr);
}

TEST(ModelChunksTest, MisuseIsRefusedAndAFailedCallEndsThePassOnEveryChunk) {
  ModelOptions options = SmallOptions(Family::kLlama, 4);
  options.tie_embeddings = false;
  HostAllocator host;
  ops::OpsBackend& ops = sluice::testing::OpsFor<float>();
  const std::vector<ModelStage> overlapping = {{0, 2}, {1, 3}};
  ExpectError(Model<float>::CreateChunks(options, overlapping, host, ops).status(),
              StatusCode::kInvalidArgument, "begins before chunk 0");
  ExpectError(Model<float>::CreateChunks(options, {}, host, ops).status(),
              StatusCode::kInvalidArgument, "at least one chunk");

  const std::unique_ptr<Model<float>> whole = Whole(options, host);
  const std::unique_ptr<Model<float>> mine = ChunksOf(*whole, kChunks, host);
  const std::vector<MicroBatchData> data = MakeMicroBatches(options, 1, 3);
  ASSERT_TRUE(mine->BeginPass().ok());
  StageInput<float> first{.batch = kStageBatch, .seq = options.seq_len};
  first.tokens = data[0].tokens.data();
  // The Model's own calls are a one-chunk model's.
  ExpectError(mine->Forward(0, first), StatusCode::kFailedPrecondition, "model of 2 chunks");

  const size_t bytes = kStageBatch * options.seq_len * options.d_model * sizeof(float);
  DeviceBuffer out = Allocate(bytes);
  ASSERT_TRUE(mine->BeginPass().code() == StatusCode::kFailedPrecondition);
  ASSERT_TRUE(mine->chunk(0).Forward(0, first, out.data_as<float>()).ok());
  EXPECT_EQ(mine->micro_batches_in_flight(), 1);
  // Chunk 1 never forwarded micro-batch 0: the pass ends on both chunks.
  ExpectError(mine->chunk(1).Backward(0, {.hidden = out.data_as<float>()}, out.data_as<float>()),
              StatusCode::kFailedPrecondition, "was never forwarded");
  EXPECT_EQ(mine->micro_batches_in_flight(), 0);
  ExpectError(mine->EndPass().status(), StatusCode::kFailedPrecondition, "without a pass open");
  // A new pass runs.
  ASSERT_TRUE(mine->BeginPass().ok());
  ASSERT_TRUE(mine->chunk(0).Forward(0, first, out.data_as<float>()).ok());
  ExpectError(mine->EndPass().status(), StatusCode::kFailedPrecondition, "still in flight");
}

}  // namespace
}  // namespace sluice::model
