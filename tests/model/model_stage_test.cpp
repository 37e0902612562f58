// Pipeline stages (engine/model/model_stage.h) and the micro-batch passes (model.h, "Passes"):
// GPT-2 and Llama split into 2 and 3 stages, the parameters copied from a whole model, run in one
// process by a 1F1B (or GPipe) schedule with several micro-batches in flight, hidden states and
// their gradients handed from stage to stage in device memory with events between the stages'
// streams. Losses and every parameter gradient equal the whole model's ForwardBackward over the
// same micro-batches bit for bit: each stage runs the same ops on the same values in the same
// order, and the gradients accumulate over the micro-batches in the order their backwards run.
#include "engine/model/model_stage.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "engine/model/model.h"
#include "engine/train/run_setup.h"
#include "runtime/device.h"
#include "tests/common/test_ops.h"
#include "tests/model/model_stage_util.h"
#include "tests/model/model_test_util.h"

namespace sluice::model {
namespace {

using testing::ExpectError;
using testing::kStageBatch;
using testing::MakeMicroBatches;
using testing::MicroBatchData;
using testing::Randomize;
using testing::RandomTokens;
using testing::SmallOptions;
using testing::StageOf;

std::unique_ptr<Model<float>> WholeModel(const ModelOptions& options, HostAllocator& host,
                                         uint64_t seed) {
  auto model = Model<float>::Create(options, host, sluice::testing::OpsFor<float>());
  SLUICE_CHECK(model.ok()) << model.status().ToString();
  Randomize(**model, seed);
  return std::move(model).value();
}

struct Action {
  bool forward = true;
  int micro = 0;
};

// PipeDream-flush 1F1B: stage s of P runs min(P - 1 - s, M) warm-up forwards, then one forward
// and one backward at a time, then the remaining backwards; stage s holds up to P - s
// micro-batches.
std::vector<Action> OneFOneB(int stage, int stages, int micro_batches) {
  std::vector<Action> actions;
  int f = 0;
  int b = 0;
  for (; f < std::min(stages - 1 - stage, micro_batches); ++f) actions.push_back({true, f});
  while (f < micro_batches) {
    actions.push_back({true, f++});
    actions.push_back({false, b++});
  }
  while (b < micro_batches) actions.push_back({false, b++});
  return actions;
}

// GPipe with the backwards in reverse: every forward, then the last micro-batch's backward first.
std::vector<Action> GPipeReversed(int /*stage*/, int /*stages*/, int micro_batches) {
  std::vector<Action> actions;
  for (int m = 0; m < micro_batches; ++m) actions.push_back({true, m});
  for (int m = micro_batches - 1; m >= 0; --m) actions.push_back({false, m});
  return actions;
}

enum class Schedule { kOneFOneB, kGPipeReversed };

// The micro-batches in the order a stage runs their backwards (the same on every stage).
std::vector<int> BackwardOrder(Schedule schedule, int micro_batches) {
  std::vector<int> order;
  for (int m = 0; m < micro_batches; ++m) order.push_back(m);
  if (schedule == Schedule::kGPipeReversed) std::reverse(order.begin(), order.end());
  return order;
}

// Hand-off buffers between the stages, and the events that order the stages' streams around
// them: act[s][m] is stage s's output for micro-batch m, grad[s][m] the gradient of stage s's
// input.
class Pipeline {
 public:
  Pipeline(std::vector<std::unique_ptr<Model<float>>>& stages, int micro_batches)
      : stages_(stages), micro_batches_(micro_batches) {
    Device& device = sluice::testing::OpsFor<float>().device();
    const ModelOptions& o = stages[0]->options();
    const size_t bytes = static_cast<size_t>(kStageBatch * o.seq_len * o.d_model) * sizeof(float);
    const size_t count = stages.size() * static_cast<size_t>(micro_batches);
    for (size_t i = 0; i < count; ++i) {
      act_.push_back(std::move(device.Allocate(bytes, MemoryCategory::kActivations)).value());
      grad_.push_back(std::move(device.Allocate(bytes, MemoryCategory::kActivations)).value());
      act_done_.push_back(std::move(device.CreateEvent()).value());
      grad_done_.push_back(std::move(device.CreateEvent()).value());
    }
    forwarded_.assign(count, false);
    backwarded_.assign(count, false);
    max_in_flight_.assign(stages.size(), 0);
  }

  // Runs one pass of `schedule`; the losses of the last stage. Every stage runs its next action
  // as soon as its input is there, stage by stage, round after round.
  std::map<int, double> Run(Schedule schedule, const std::vector<MicroBatchData>& data,
                            double loss_grad) {
    const int stages = static_cast<int>(stages_.size());
    std::vector<std::vector<Action>> plans;
    for (int s = 0; s < stages; ++s) {
      plans.push_back(schedule == Schedule::kOneFOneB ? OneFOneB(s, stages, micro_batches_)
                                                      : GPipeReversed(s, stages, micro_batches_));
      SLUICE_CHECK(stages_[s]->BeginPass().ok());
    }
    std::vector<size_t> next(stages, 0);
    for (bool progress = true; progress;) {
      progress = false;
      for (int s = 0; s < stages; ++s) {
        if (next[s] == plans[s].size()) continue;
        const Action action = plans[s][next[s]];
        if (!Ready(s, action)) continue;
        Execute(s, action, data, loss_grad);
        ++next[s];
        progress = true;
        max_in_flight_[s] = std::max(max_in_flight_[s], stages_[s]->micro_batches_in_flight());
      }
    }
    for (int s = 0; s < stages; ++s) {
      SLUICE_CHECK_EQ(next[s], plans[s].size()) << "the schedule deadlocked at stage " << s;
    }
    // Nothing of the hand-off buffers is read after this.
    for (auto& stage : stages_) SLUICE_CHECK(stage->stream().Synchronize().ok());
    std::map<int, double> losses;
    for (int s = 0; s < stages; ++s) {
      auto ended = stages_[s]->EndPass();
      SLUICE_CHECK(ended.ok()) << ended.status().ToString();
      if (s + 1 < stages) {
        EXPECT_TRUE(ended->empty()) << "stage " << s << " reports losses";
      } else {
        losses = *ended;
      }
    }
    return losses;
  }

  int max_in_flight(int stage) const { return max_in_flight_[stage]; }

 private:
  size_t At(int s, int m) const { return static_cast<size_t>(s * micro_batches_ + m); }

  bool Ready(int s, const Action& a) const {
    const int last = static_cast<int>(stages_.size()) - 1;
    if (a.forward) return s == 0 || forwarded_[At(s - 1, a.micro)];
    return s == last || backwarded_[At(s + 1, a.micro)];
  }

  void Execute(int s, const Action& a, const std::vector<MicroBatchData>& data, double loss_grad) {
    Model<float>& stage = *stages_[s];
    const int m = a.micro;
    const ModelOptions& o = stage.options();
    if (a.forward) {
      StageInput<float> input{.batch = kStageBatch, .seq = o.seq_len};
      if (stage.first_stage()) {
        input.tokens = data[m].tokens.data();
      } else {
        SLUICE_CHECK(stage.stream().WaitEvent(*act_done_[At(s - 1, m)]).ok());
        input.hidden = act_[At(s - 1, m)].data_as<float>();
      }
      if (stage.last_stage()) input.targets = data[m].targets.data();
      float* output = stage.last_stage() ? nullptr : act_[At(s, m)].data_as<float>();
      const Status status = stage.Forward(m, input, output);
      SLUICE_CHECK(status.ok()) << status.ToString();
      SLUICE_CHECK(act_done_[At(s, m)]->Record(stage.stream()).ok());
      forwarded_[At(s, m)] = true;
      return;
    }
    StageOutputGrad<float> grad{.loss_grad = loss_grad};
    if (!stage.last_stage()) {
      SLUICE_CHECK(stage.stream().WaitEvent(*grad_done_[At(s + 1, m)]).ok());
      grad.hidden = grad_[At(s + 1, m)].data_as<float>();
    }
    float* input_grad = stage.first_stage() ? nullptr : grad_[At(s, m)].data_as<float>();
    const Status status = stage.Backward(m, grad, input_grad);
    SLUICE_CHECK(status.ok()) << status.ToString();
    SLUICE_CHECK(grad_done_[At(s, m)]->Record(stage.stream()).ok());
    backwarded_[At(s, m)] = true;
  }

  std::vector<std::unique_ptr<Model<float>>>& stages_;
  int micro_batches_;
  std::vector<DeviceBuffer> act_;
  std::vector<DeviceBuffer> grad_;
  std::vector<std::unique_ptr<Event>> act_done_;
  std::vector<std::unique_ptr<Event>> grad_done_;
  std::vector<bool> forwarded_;
  std::vector<bool> backwarded_;
  std::vector<int> max_in_flight_;
};

struct SplitCase {
  std::string name;
  Family family = Family::kGpt2;
  std::vector<int64_t> bounds;  // stage s holds layers [bounds[s], bounds[s + 1])
  Schedule schedule = Schedule::kOneFOneB;
  bool checkpointing = false;  // on the stages only: the whole model runs without
  int64_t checkpoint_blocks = 0;
  bool host = false;
  bool contiguous = false;
  DType dtype = DType::kF32;
};

void PrintTo(const SplitCase& c, std::ostream* os) { *os << c.name; }

class StageSplitTest : public ::testing::TestWithParam<SplitCase> {};

TEST_P(StageSplitTest, LossesAndGradientsEqualTheWholeModel) {
  const SplitCase& c = GetParam();
  ModelOptions options = SmallOptions(c.family, c.bounds.back());
  options.tie_embeddings = false;  // a tied head cannot be split from the embeddings
  options.param_dtype = c.dtype;
  constexpr int kMicroBatches = 4;
  const double loss_grad = 1.0 / kMicroBatches;
  HostAllocator host;
  const std::unique_ptr<Model<float>> whole = WholeModel(options, host, 17);
  const std::vector<MicroBatchData> data = MakeMicroBatches(options, kMicroBatches, 40);

  std::vector<double> expected_losses(kMicroBatches);
  whole->ZeroGrads();
  for (int m : BackwardOrder(c.schedule, kMicroBatches)) {
    auto loss = whole->ForwardBackward(data[m].tokens.data(), data[m].targets.data(), kStageBatch,
                                       options.seq_len, loss_grad);
    ASSERT_TRUE(loss.ok()) << loss.status().ToString();
    expected_losses[m] = *loss;
  }

  // The stages' options differ from the whole model's in checkpointing only.
  std::unique_ptr<Model<float>> source;
  ModelOptions stage_options = options;
  if (c.checkpointing) {
    stage_options.activation_checkpointing = true;
    stage_options.checkpointing.blocks = c.checkpoint_blocks;
    stage_options.checkpointing.host = c.host;
    stage_options.checkpointing.contiguous = c.contiguous;
    source = WholeModel(stage_options, host, 17);  // the same values: Randomize's seed
  }
  const Model<float>& values = source != nullptr ? *source : *whole;
  std::vector<std::unique_ptr<Model<float>>> stages;
  for (size_t s = 0; s + 1 < c.bounds.size(); ++s) {
    stages.push_back(StageOf(values, {c.bounds[s], c.bounds[s + 1]}, host));
    stages.back()->ZeroGrads();
  }

  // The stages partition the whole model's units and parameters, in order.
  std::vector<std::string> units;
  std::vector<std::string> names;
  for (const auto& stage : stages) {
    for (const UnitInfo& unit : stage->registry().units()) units.push_back(unit.name);
    for (const ParameterInfo& p : stage->registry().parameters()) names.push_back(p.name);
  }
  std::vector<std::string> whole_units;
  std::vector<std::string> whole_names;
  for (const UnitInfo& unit : whole->registry().units()) whole_units.push_back(unit.name);
  for (const ParameterInfo& p : whole->registry().parameters()) whole_names.push_back(p.name);
  EXPECT_EQ(units, whole_units);
  EXPECT_EQ(names, whole_names);

  Pipeline pipeline(stages, kMicroBatches);
  // Two passes: the second accumulates onto the first's gradients, as gradient accumulation
  // over steps would, and reuses what the first left (pinned checkpoint slots).
  for (int pass = 0; pass < 2; ++pass) {
    const std::map<int, double> losses = pipeline.Run(c.schedule, data, loss_grad);
    ASSERT_EQ(losses.size(), static_cast<size_t>(kMicroBatches));
    for (int m = 0; m < kMicroBatches; ++m) {
      EXPECT_EQ(losses.at(m), expected_losses[m]) << "pass " << pass << ", micro-batch " << m;
    }
    if (pass == 0) {
      for (size_t s = 0; s < stages.size(); ++s) {
        const int stages_count = static_cast<int>(stages.size());
        const int expected_in_flight =
            c.schedule == Schedule::kOneFOneB
                ? std::min(stages_count - static_cast<int>(s), kMicroBatches)
                : kMicroBatches;
        EXPECT_EQ(pipeline.max_in_flight(static_cast<int>(s)), expected_in_flight) << "stage " << s;
      }
      for (const auto& stage : stages) {
        const ParameterRegistry& registry = stage->registry();
        for (int p = 0; p < static_cast<int>(registry.parameters().size()); ++p) {
          const ParameterInfo& info = registry.parameter(p);
          const ParameterInfo& expected =
              whole->registry().parameter(*whole->registry().Find(info.name));
          EXPECT_EQ(
              std::memcmp(stage->grads_data() + info.offset, whole->grads_data() + expected.offset,
                          static_cast<size_t>(info.numel) * sizeof(float)),
              0)
              << info.name;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Splits, StageSplitTest,
    ::testing::Values(
        SplitCase{.name = "gpt2_2stages", .family = Family::kGpt2, .bounds = {0, 2, 4}},
        SplitCase{.name = "gpt2_3stages", .family = Family::kGpt2, .bounds = {0, 1, 3, 4}},
        SplitCase{.name = "llama_2stages", .family = Family::kLlama, .bounds = {0, 2, 4}},
        SplitCase{.name = "llama_3stages", .family = Family::kLlama, .bounds = {0, 2, 3, 4}},
        SplitCase{.name = "gpt2_3stages_gpipe_reversed",
                  .family = Family::kGpt2,
                  .bounds = {0, 1, 3, 4},
                  .schedule = Schedule::kGPipeReversed},
        SplitCase{.name = "llama_3stages_bf16",
                  .family = Family::kLlama,
                  .bounds = {0, 1, 3, 4},
                  .dtype = DType::kBF16},
        SplitCase{.name = "gpt2_3stages_checkpoint_views",
                  .family = Family::kGpt2,
                  .bounds = {0, 1, 3, 4},
                  .checkpointing = true},
        SplitCase{.name = "llama_3stages_checkpoint_first2_host_contiguous",
                  .family = Family::kLlama,
                  .bounds = {0, 1, 3, 4},
                  .checkpointing = true,
                  .checkpoint_blocks = 2,
                  .host = true,
                  .contiguous = true},
        SplitCase{.name = "gpt2_2stages_checkpoint_host",
                  .family = Family::kGpt2,
                  .bounds = {0, 2, 4},
                  .checkpointing = true,
                  .host = true},
        SplitCase{.name = "llama_2stages_checkpoint_contiguous",
                  .family = Family::kLlama,
                  .bounds = {0, 2, 4},
                  .checkpointing = true,
                  .contiguous = true}),
    [](const auto& info) { return info.param.name; });

// The pass calls on the whole model (both roles, a tied head): several micro-batches in flight
// give what one ForwardBackward each gives; an evaluation pass what ForwardLoss and ForwardLogits
// give.
TEST(StagePassTest, WholeModelPassEqualsForwardBackwardPerMicroBatch) {
  const ModelOptions options = SmallOptions(Family::kGpt2, 2);
  ASSERT_TRUE(options.tie_embeddings);
  HostAllocator host;
  const std::unique_ptr<Model<float>> a = WholeModel(options, host, 5);
  const std::unique_ptr<Model<float>> b = WholeModel(options, host, 5);
  const std::vector<MicroBatchData> data = MakeMicroBatches(options, 3, 70);
  a->ZeroGrads();
  b->ZeroGrads();
  std::vector<double> expected;
  for (const MicroBatchData& d : data) {
    auto loss =
        a->ForwardBackward(d.tokens.data(), d.targets.data(), kStageBatch, options.seq_len, 0.5);
    ASSERT_TRUE(loss.ok());
    expected.push_back(*loss);
  }
  ASSERT_TRUE(b->BeginPass().ok());
  for (int m = 0; m < 3; ++m) {
    ASSERT_TRUE(b->Forward(m, {.batch = kStageBatch,
                               .seq = options.seq_len,
                               .tokens = data[m].tokens.data(),
                               .targets = data[m].targets.data()})
                    .ok());
  }
  EXPECT_EQ(b->micro_batches_in_flight(), 3);
  for (int m = 0; m < 3; ++m) ASSERT_TRUE(b->Backward(m, {.loss_grad = 0.5}).ok());
  auto losses = b->EndPass();
  ASSERT_TRUE(losses.ok()) << losses.status().ToString();
  ASSERT_EQ(losses->size(), 3u);
  for (int m = 0; m < 3; ++m) EXPECT_EQ(losses->at(m), expected[m]) << m;
  const size_t bytes = static_cast<size_t>(a->ParameterCount()) * sizeof(float);
  EXPECT_EQ(std::memcmp(a->grads_data(), b->grads_data(), bytes), 0);

  // Evaluation: losses of two micro-batches and the logits of a third in one pass.
  ASSERT_TRUE(b->BeginPass(/*gradients=*/false).ok());
  std::vector<float> logits(
      static_cast<size_t>(kStageBatch * options.seq_len * options.vocab_size));
  for (int m = 0; m < 2; ++m) {
    ASSERT_TRUE(b->Forward(m, {.batch = kStageBatch,
                               .seq = options.seq_len,
                               .tokens = data[m].tokens.data(),
                               .targets = data[m].targets.data()})
                    .ok());
  }
  ASSERT_TRUE(b->Forward(2, {.batch = kStageBatch,
                             .seq = options.seq_len,
                             .tokens = data[2].tokens.data(),
                             .logits = logits.data()})
                  .ok());
  EXPECT_EQ(b->micro_batches_in_flight(), 0);
  auto eval = b->EndPass();
  ASSERT_TRUE(eval.ok()) << eval.status().ToString();
  ASSERT_EQ(eval->size(), 2u);
  for (int m = 0; m < 2; ++m) {
    auto loss =
        a->ForwardLoss(data[m].tokens.data(), data[m].targets.data(), kStageBatch, options.seq_len);
    ASSERT_TRUE(loss.ok());
    EXPECT_EQ(eval->at(m), *loss) << m;
  }
  std::vector<float> expected_logits(logits.size());
  ASSERT_TRUE(
      a->ForwardLogits(data[2].tokens.data(), kStageBatch, options.seq_len, expected_logits.data())
          .ok());
  EXPECT_EQ(std::memcmp(logits.data(), expected_logits.data(), logits.size() * sizeof(float)), 0);
}

class StageRecordingHooks final : public UnitHooks {
 public:
  Status BeforeForward(int unit) override { return Log("F+", unit); }
  Status AfterForward(int unit) override { return Log("F-", unit); }
  Status BeforeBackward(int unit) override { return Log("B+", unit); }
  Status AfterBackward(int unit) override { return Log("B-", unit); }
  Status BeforePassEnd() override {
    events.push_back("end");
    return OkStatus();
  }
  std::vector<std::string> events;

 private:
  Status Log(const char* what, int unit) {
    events.push_back(std::string(what) + std::to_string(unit));
    return OkStatus();
  }
};

// The hooks of a stage run per micro-batch over the stage's own units (indices of its registry),
// forward in trace order and backward in reverse, and BeforePassEnd once.
TEST(StagePassTest, HooksRunPerMicroBatchOverTheStagesUnits) {
  ModelOptions options = SmallOptions(Family::kLlama, 4);
  HostAllocator host;
  auto stage = Model<float>::CreateStage(options, {2, 4}, host, sluice::testing::OpsFor<float>());
  ASSERT_TRUE(stage.ok()) << stage.status().ToString();
  Model<float>& net = **stage;
  ASSERT_EQ(net.units().size(), 4u);  // blocks 2 and 3, final norm, LM head
  StageRecordingHooks hooks;
  net.SetHooks(&hooks);
  Device& device = sluice::testing::OpsFor<float>().device();
  const int64_t rows = kStageBatch * options.seq_len;
  const std::vector<double> hidden = testing::RandomVector(rows * options.d_model, 3);
  const std::vector<float> hidden_f(hidden.begin(), hidden.end());
  const DeviceBuffer input = testing::ToDevice(net.stream(), hidden_f);
  auto input_grad = device.Allocate(hidden_f.size() * sizeof(float), MemoryCategory::kActivations);
  ASSERT_TRUE(input_grad.ok());
  const std::vector<int32_t> targets = RandomTokens(rows, 50, 4);
  ASSERT_TRUE(net.BeginPass().ok());
  for (int m = 0; m < 2; ++m) {
    ASSERT_TRUE(net.Forward(m, {.batch = kStageBatch,
                                .seq = options.seq_len,
                                .hidden = input.data_as<float>(),
                                .targets = targets.data()})
                    .ok());
  }
  for (int m = 0; m < 2; ++m) {
    ASSERT_TRUE(net.Backward(m, {}, input_grad->data_as<float>()).ok());
  }
  ASSERT_TRUE(net.EndPass().ok());
  std::vector<std::string> expected;
  const int units = static_cast<int>(net.units().size());
  for (int m = 0; m < 2; ++m) {
    for (int u = 0; u < units; ++u) {
      expected.push_back("F+" + std::to_string(u));
      expected.push_back("F-" + std::to_string(u));
    }
  }
  for (int m = 0; m < 2; ++m) {
    for (int u = units - 1; u >= 0; --u) {
      expected.push_back("B+" + std::to_string(u));
      expected.push_back("B-" + std::to_string(u));
    }
  }
  expected.push_back("end");
  EXPECT_EQ(hooks.events, expected);
  net.SetHooks(nullptr);
}

TEST(ModelStageSpecTest, BadRangesAreRefused) {
  ModelOptions options = SmallOptions(Family::kLlama, 4);
  options.tie_embeddings = false;
  HostAllocator host;
  const auto create = [&](const ModelOptions& o, ModelStage stage) {
    return Model<float>::CreateStage(o, stage, host, sluice::testing::OpsFor<float>()).status();
  };
  ExpectError(create(options, {3, 2}), StatusCode::kInvalidArgument, "ends before it begins");
  ExpectError(create(options, {2, 5}), StatusCode::kInvalidArgument, "ends past the last layer");
  ExpectError(create(options, {2, 2}), StatusCode::kInvalidArgument, "is empty");
  ExpectError(create(options, {-1, 2}), StatusCode::kInvalidArgument, "begins before layer 0");
  EXPECT_NE(create(options, {3, 2}).message().find("model.n_layer = 4"), std::string::npos);
  for (ModelStage ok : {ModelStage{0, 4}, ModelStage{0, 1}, ModelStage{1, 3}, ModelStage{3, 4}}) {
    EXPECT_TRUE(create(options, ok).ok()) << ok.begin_layer << ", " << ok.end_layer;
  }
}

// A tied head away from the embeddings reads a mirror of the token table: the table's name and
// shape, in the head's unit, initialized as the whole model's table.
TEST(ModelStageSpecTest, ATiedHeadAwayFromTheEmbeddingsReadsAMirrorOfTheTable) {
  ModelOptions options = SmallOptions(Family::kLlama, 4);
  options.tie_embeddings = true;
  HostAllocator host;
  Result<std::unique_ptr<Model<float>>> whole =
      Model<float>::Create(options, host, sluice::testing::OpsFor<float>());
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  (*whole)->InitializeParameters(3);
  Result<std::unique_ptr<Model<float>>> last =
      Model<float>::CreateStage(options, {2, 4}, host, sluice::testing::OpsFor<float>());
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  (*last)->InitializeParameters(3);
  const ParameterRegistry& registry = (*last)->registry();
  const std::optional<int> mirror = registry.Find("model.embed_tokens.weight");
  ASSERT_TRUE(mirror.has_value());
  const ParameterInfo& info = registry.parameter(*mirror);
  EXPECT_TRUE(info.mirror);
  EXPECT_FALSE(info.is_alias());
  EXPECT_EQ(registry.units()[static_cast<size_t>(info.unit)].name, "lm_head");
  const std::optional<int> head = registry.Find("lm_head.weight");
  ASSERT_TRUE(head.has_value());
  EXPECT_EQ(registry.parameter(*head).tied_to, *mirror) << "the head reads the mirror";
  const int table = *(*whole)->registry().Find("model.embed_tokens.weight");
  for (int64_t e = 0; e < info.numel; e += 37) {
    ASSERT_EQ((*last)->ParameterValue(*mirror, e), (*whole)->ParameterValue(table, e)) << e;
  }
  // The first stage holds the table itself, and a stage with neither holds nothing of it.
  Result<std::unique_ptr<Model<float>>> first =
      Model<float>::CreateStage(options, {0, 2}, host, sluice::testing::OpsFor<float>());
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_FALSE((*first)
                   ->registry()
                   .parameter(*(*first)->registry().Find("model.embed_tokens.weight"))
                   .mirror);
  Result<std::unique_ptr<Model<float>>> middle =
      Model<float>::CreateStage(options, {1, 3}, host, sluice::testing::OpsFor<float>());
  ASSERT_TRUE(middle.ok());
  EXPECT_FALSE((*middle)->registry().Find("model.embed_tokens.weight").has_value());
}

// A stage of layers [0, 2) and one of [2, 4) of a 4-layer Llama, and buffers to run them.
struct TwoStages {
  TwoStages() {
    options = SmallOptions(Family::kLlama, 4);
    first = StageOf(*WholeModel(options, host, 3), {0, 2}, host);
    last = StageOf(*WholeModel(options, host, 3), {2, 4}, host);
    Device& device = sluice::testing::OpsFor<float>().device();
    const size_t bytes = static_cast<size_t>(rows() * options.d_model) * sizeof(float);
    hidden = std::move(device.Allocate(bytes, MemoryCategory::kActivations)).value();
    grad = std::move(device.Allocate(bytes, MemoryCategory::kActivations)).value();
    tokens = RandomTokens(rows(), 50, 8);
  }
  int64_t rows() const { return kStageBatch * options.seq_len; }
  StageInput<float> FirstInput() const {
    return {.batch = kStageBatch, .seq = options.seq_len, .tokens = tokens.data()};
  }
  StageInput<float> LastInput() const {
    return {.batch = kStageBatch,
            .seq = options.seq_len,
            .hidden = hidden.data_as<float>(),
            .targets = tokens.data()};
  }

  ModelOptions options = train::DefaultModelOptions();
  HostAllocator host;
  std::unique_ptr<Model<float>> first;
  std::unique_ptr<Model<float>> last;
  DeviceBuffer hidden;
  DeviceBuffer grad;
  std::vector<int32_t> tokens;
};

// Evaluation across two stages (with checkpointed blocks keeping host copies, which a pass
// without backward never takes back itself): each micro-batch's loss is the whole model's
// ForwardLoss.
TEST(StagePassTest, EvaluationPassAcrossStagesEqualsForwardLoss) {
  ModelOptions options = SmallOptions(Family::kGpt2, 4);
  options.tie_embeddings = false;
  HostAllocator host;
  const std::unique_ptr<Model<float>> whole = WholeModel(options, host, 11);
  ModelOptions checkpointed = options;
  checkpointed.activation_checkpointing = true;
  checkpointed.checkpointing.host = true;
  const std::unique_ptr<Model<float>> values = WholeModel(checkpointed, host, 11);
  const std::unique_ptr<Model<float>> first = StageOf(*values, {0, 3}, host);
  const std::unique_ptr<Model<float>> last = StageOf(*values, {3, 4}, host);
  const std::vector<MicroBatchData> data = MakeMicroBatches(options, 3, 90);
  Device& device = sluice::testing::OpsFor<float>().device();
  std::vector<DeviceBuffer> hidden;
  for (int pass = 0; pass < 2; ++pass) {
    ASSERT_TRUE(first->BeginPass(/*gradients=*/false).ok());
    ASSERT_TRUE(last->BeginPass(/*gradients=*/false).ok());
    for (int m = 0; m < 3; ++m) {
      const size_t bytes =
          static_cast<size_t>(kStageBatch * options.seq_len * options.d_model) * sizeof(float);
      hidden.push_back(std::move(device.Allocate(bytes, MemoryCategory::kActivations)).value());
      float* h = hidden.back().data_as<float>();
      ASSERT_TRUE(
          first
              ->Forward(
                  m,
                  {.batch = kStageBatch, .seq = options.seq_len, .tokens = data[m].tokens.data()},
                  h)
              .ok());
      ASSERT_TRUE(first->stream().Synchronize().ok());  // orders the last stage's read after it
      ASSERT_TRUE(last->Forward(m, {.batch = kStageBatch,
                                    .seq = options.seq_len,
                                    .hidden = h,
                                    .targets = data[m].targets.data()})
                      .ok());
    }
    ASSERT_TRUE(last->stream().Synchronize().ok());
    auto none = first->EndPass();
    auto losses = last->EndPass();
    ASSERT_TRUE(none.ok() && losses.ok());
    EXPECT_TRUE(none->empty());
    ASSERT_EQ(losses->size(), 3u);
    for (int m = 0; m < 3; ++m) {
      auto expected = whole->ForwardLoss(data[m].tokens.data(), data[m].targets.data(), kStageBatch,
                                         options.seq_len);
      ASSERT_TRUE(expected.ok());
      EXPECT_EQ(losses->at(m), *expected) << "pass " << pass << ", micro-batch " << m;
    }
  }
}

TEST(StagePassTest, OutOfOrderCallsAreClearErrorsAndEndThePass) {
  TwoStages t;
  Model<float>& first = *t.first;
  float* hidden = t.hidden.data_as<float>();
  ExpectError(first.Forward(0, t.FirstInput(), hidden), StatusCode::kFailedPrecondition,
              "outside a pass");
  ExpectError(first.EndPass().status(), StatusCode::kFailedPrecondition, "without a pass open");

  ASSERT_TRUE(first.BeginPass().ok());
  ExpectError(first.BeginPass(), StatusCode::kFailedPrecondition, "while a pass is open");
  ASSERT_TRUE(first.Forward(0, t.FirstInput(), hidden).ok());
  // Backward of a micro-batch never forwarded: an error that ends the pass.
  ExpectError(first.Backward(7, {.hidden = hidden}), StatusCode::kFailedPrecondition,
              "micro-batch 7 on layers [0, 2) of 4 (first stage): it was never forwarded");
  EXPECT_EQ(first.micro_batches_in_flight(), 0);
  ExpectError(first.EndPass().status(), StatusCode::kFailedPrecondition, "without a pass open");

  // EndPass with micro-batches in flight names them.
  ASSERT_TRUE(first.BeginPass().ok());
  ASSERT_TRUE(first.Forward(3, t.FirstInput(), hidden).ok());
  ASSERT_TRUE(first.Forward(5, t.FirstInput(), hidden).ok());
  ASSERT_TRUE(first.Backward(3, {.hidden = hidden}).ok());
  ExpectError(first.EndPass().status(), StatusCode::kFailedPrecondition,
              "micro-batches 5 still in flight");

  // The same micro-batch twice, forward or backward.
  ASSERT_TRUE(first.BeginPass().ok());
  ASSERT_TRUE(first.Forward(1, t.FirstInput(), hidden).ok());
  ExpectError(first.Forward(1, t.FirstInput(), hidden), StatusCode::kFailedPrecondition,
              "already forwarded");
  ASSERT_TRUE(first.BeginPass().ok());
  ASSERT_TRUE(first.Forward(1, t.FirstInput(), hidden).ok());
  ASSERT_TRUE(first.Backward(1, {.hidden = hidden}).ok());
  ExpectError(first.Backward(1, {.hidden = hidden}), StatusCode::kFailedPrecondition,
              "already went backward");

  // No backward in an evaluation pass.
  ASSERT_TRUE(first.BeginPass(/*gradients=*/false).ok());
  ASSERT_TRUE(first.Forward(0, t.FirstInput(), hidden).ok());
  ExpectError(first.Backward(0, {.hidden = hidden}), StatusCode::kFailedPrecondition,
              "without gradients");

  // The whole-batch calls are for a whole model.
  ExpectError(
      first.ForwardBackward(t.tokens.data(), t.tokens.data(), kStageBatch, t.options.seq_len)
          .status(),
      StatusCode::kFailedPrecondition, "BeginPass, Forward, Backward and EndPass");

  // After all that, a pass runs and ends cleanly.
  ASSERT_TRUE(first.BeginPass().ok());
  ASSERT_TRUE(first.Forward(0, t.FirstInput(), hidden).ok());
  ASSERT_TRUE(first.Backward(0, {.hidden = hidden}).ok());
  auto ended = first.EndPass();
  ASSERT_TRUE(ended.ok()) << ended.status().ToString();
  EXPECT_TRUE(ended->empty());
}

TEST(StagePassTest, InputsThatDoNotMatchTheStageRolesAreRefused) {
  TwoStages t;
  Model<float>& first = *t.first;
  Model<float>& last = *t.last;
  float* hidden = t.hidden.data_as<float>();
  float* grad = t.grad.data_as<float>();
  const auto forward_first = [&](StageInput<float> input, float* output) {
    EXPECT_TRUE(first.BeginPass().ok());
    return first.Forward(0, input, output);  // a failure ends the pass
  };
  StageInput<float> with_hidden = t.FirstInput();
  with_hidden.hidden = hidden;
  ExpectError(forward_first(with_hidden, hidden), StatusCode::kInvalidArgument,
              "the first stage takes token ids");
  ExpectError(forward_first(t.FirstInput(), nullptr), StatusCode::kInvalidArgument,
              "pass device memory [batch * seq, d_model]");
  StageInput<float> with_targets = t.FirstInput();
  with_targets.targets = t.tokens.data();
  ExpectError(forward_first(with_targets, hidden), StatusCode::kInvalidArgument,
              "no targets or logits");
  StageInput<float> too_long = t.FirstInput();
  too_long.seq = t.options.seq_len + 1;
  ExpectError(forward_first(too_long, hidden), StatusCode::kInvalidArgument, "model.seq_len");

  const auto forward_last = [&](StageInput<float> input, float* output) {
    EXPECT_TRUE(last.BeginPass().ok());
    return last.Forward(0, input, output);
  };
  StageInput<float> with_tokens = t.LastInput();
  with_tokens.tokens = t.tokens.data();
  ExpectError(forward_last(with_tokens, nullptr), StatusCode::kInvalidArgument,
              "takes the previous stage's output");
  StageInput<float> without_targets = t.LastInput();
  without_targets.targets = nullptr;
  ExpectError(forward_last(without_targets, nullptr), StatusCode::kInvalidArgument,
              "needs the targets");
  ExpectError(forward_last(t.LastInput(), hidden), StatusCode::kInvalidArgument, "pass no output");
  std::vector<int32_t> bad_targets = t.tokens;
  bad_targets[3] = 50;
  StageInput<float> out_of_range = t.LastInput();
  out_of_range.targets = bad_targets.data();
  ExpectError(forward_last(out_of_range, nullptr), StatusCode::kInvalidArgument,
              "target 50 at row 0, position 3");

  // Backward: the last stage starts from the loss, a later stage gives its input's gradient.
  ASSERT_TRUE(last.BeginPass().ok());
  ASSERT_TRUE(last.Forward(0, t.LastInput()).ok());
  ExpectError(last.Backward(0, {.hidden = grad}, grad), StatusCode::kInvalidArgument,
              "starts from the loss");
  ASSERT_TRUE(last.BeginPass().ok());
  ASSERT_TRUE(last.Forward(0, t.LastInput()).ok());
  ExpectError(last.Backward(0, {}), StatusCode::kInvalidArgument, "input_grad");
  ASSERT_TRUE(first.BeginPass().ok());
  ASSERT_TRUE(first.Forward(0, t.FirstInput(), hidden).ok());
  ExpectError(first.Backward(0, {.hidden = grad}, grad), StatusCode::kInvalidArgument,
              "pass no input_grad");
  ASSERT_TRUE(first.BeginPass().ok());
  ASSERT_TRUE(first.Forward(0, t.FirstInput(), hidden).ok());
  ExpectError(first.Backward(0, {}), StatusCode::kInvalidArgument, "StageOutputGrad::hidden");
}

}  // namespace
}  // namespace sluice::model
