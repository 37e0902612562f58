// The split backward of zero-bubble schedules (Model::BackwardInput then BackwardWeight,
// engine/model/deferred_weight_grads.h) against the fused Model::Backward on a model with the same
// values: the same losses, input gradients and parameter gradients, bit for bit, for GPT-2 (tied
// and untied head), Llama (separate q/k/v sharing one input, SwiGLU), activation checkpointing
// (the Linears' inputs live in the recomputation's context), bf16 parameter storage, the fp64
// reference model and a middle pipeline stage; with several micro-batches whose weight
// gradients run late and interleaved (ZB-H1's order). Also: what W keeps is freed by W; the
// refusals; the hooks around W; a Linear whose input no context owns (copied at B) and one that
// leaves its bias out of the forward (a row-parallel projection).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/deferred_weight_grads.h"
#include "engine/model/linear.h"
#include "engine/model/model.h"
#include "tests/model/model_stage_util.h"
#include "tests/model/model_test_util.h"

namespace sluice::model {
namespace {

using testing::kStageBatch;
using testing::MakeMicroBatches;
using testing::MicroBatchData;
using testing::Randomize;
using testing::RandomVector;
using testing::SmallOptions;
using testing::StageOf;
using testing::ToDevice;
using testing::ToHost;
using testing::VectorBinding;

// One step of a pass: F (forward), B (fused backward), I (backward-input), W (backward-weight)
// of a micro-batch.
struct Op {
  char kind;
  int micro;
};

// ZB-H1's order on stage 0 of 2 (F F I W F I W I W), and the fused order that gives the same
// gradients (every backward in micro-batch order).
const std::vector<Op> kSplitOrder = {{'F', 0}, {'F', 1}, {'I', 0}, {'W', 0}, {'F', 2},
                                     {'I', 1}, {'W', 1}, {'I', 2}, {'W', 2}};
const std::vector<Op> kFusedOrder = {{'F', 0}, {'F', 1}, {'B', 0}, {'F', 2}, {'B', 1}, {'B', 2}};

struct Outcome {
  std::map<int, double> losses;
  std::map<int, std::vector<float>> input_grads;  // stages after the first
  std::vector<float> grads;
  int64_t peak_bytes = 0;
};

// Runs `ops` in one pass over a whole model or a stage. A stage after the first takes
// random hidden states, one before the last random output gradients (the same for every run).
template <typename T>
Outcome RunPass(Model<T>& model, const std::vector<Op>& ops,
                const std::vector<MicroBatchData>& data) {
  const ModelOptions& o = model.options();
  const int64_t rows = kStageBatch * o.seq_len;
  const int64_t hidden = rows * o.d_model;
  Stream& stream = model.stream();
  std::vector<DeviceBuffer> inputs;
  std::vector<DeviceBuffer> output_grads;
  std::vector<DeviceBuffer> outputs;
  std::vector<DeviceBuffer> input_grads;
  for (int m = 0; m < static_cast<int>(data.size()); ++m) {
    std::vector<T> x(hidden);
    std::vector<T> g(hidden);
    const std::vector<double> rx = RandomVector(hidden, 100 + m);
    const std::vector<double> rg = RandomVector(hidden, 200 + m, -1e-3, 1e-3);
    for (int64_t i = 0; i < hidden; ++i) {
      x[i] = static_cast<T>(rx[i]);
      g[i] = static_cast<T>(rg[i]);
    }
    inputs.push_back(ToDevice(stream, x));
    output_grads.push_back(ToDevice(stream, g));
    outputs.push_back(ToDevice(stream, std::vector<T>(hidden)));
    input_grads.push_back(ToDevice(stream, std::vector<T>(hidden)));
  }
  model.ZeroGrads();
  Outcome outcome;
  EXPECT_TRUE(model.BeginPass().ok());
  for (const Op& op : ops) {
    const int m = op.micro;
    Status status;
    StageOutputGrad<T> grad{.loss_grad = 1.0 / 3};
    if (!model.last_stage()) grad.hidden = output_grads[m].template data_as<T>();
    T* input_grad = model.first_stage() ? nullptr : input_grads[m].template data_as<T>();
    switch (op.kind) {
      case 'F': {
        StageInput<T> input{.batch = kStageBatch, .seq = o.seq_len};
        if (model.first_stage()) {
          input.tokens = data[m].tokens.data();
        } else {
          input.hidden = inputs[m].template data_as<T>();
        }
        if (model.last_stage()) input.targets = data[m].targets.data();
        status = model.Forward(m, input,
                               model.last_stage() ? nullptr : outputs[m].template data_as<T>());
        break;
      }
      case 'B':
        status = model.Backward(m, grad, input_grad);
        break;
      case 'I':
        status = model.BackwardInput(m, grad, input_grad);
        break;
      case 'W':
        status = model.BackwardWeight(m);
        break;
    }
    EXPECT_TRUE(status.ok()) << op.kind << m << ": " << status.ToString();
  }
  EXPECT_EQ(model.micro_batches_awaiting_weight(), 0);
  Result<std::map<int, double>> losses = model.EndPass();
  EXPECT_TRUE(losses.ok()) << losses.status().ToString();
  if (losses.ok()) outcome.losses = *losses;
  if (!model.first_stage()) {
    for (int m = 0; m < static_cast<int>(data.size()); ++m) {
      std::vector<T> g = ToHost(stream, input_grads[m].template data_as<T>(), hidden);
      outcome.input_grads[m].assign(g.begin(), g.end());
    }
  }
  // As bytes: a float view of the flat gradients, whatever T is.
  const auto* bytes = reinterpret_cast<const float*>(model.grads_data());
  outcome.grads.assign(bytes, bytes + model.ParameterCount() * sizeof(T) / sizeof(float));
  outcome.peak_bytes = model.last_peak_activation_bytes();
  return outcome;
}

void ExpectSame(const Outcome& split, const Outcome& fused) {
  EXPECT_EQ(split.losses, fused.losses);
  ASSERT_EQ(split.input_grads.size(), fused.input_grads.size());
  for (const auto& [m, g] : fused.input_grads) {
    EXPECT_EQ(std::memcmp(split.input_grads.at(m).data(), g.data(), g.size() * sizeof(float)), 0)
        << "input gradient of micro-batch " << m;
  }
  ASSERT_EQ(split.grads.size(), fused.grads.size());
  size_t first = 0;
  while (first < fused.grads.size() &&
         std::memcmp(&split.grads[first], &fused.grads[first], sizeof(float)) == 0) {
    ++first;
  }
  EXPECT_EQ(first, fused.grads.size()) << "parameter gradients differ from float " << first << ": "
                                       << split.grads[first] << " against " << fused.grads[first];
  bool any = false;
  for (float g : fused.grads) any = any || g != 0.0f;
  EXPECT_TRUE(any) << "no gradient at all: the comparison proves nothing";
}

struct SplitVariant {
  std::string name;
  Family family = Family::kGpt2;
  bool tied = false;
  bool checkpointing = false;
  bool host_checkpointing = false;
  bool bf16 = false;
  int64_t begin = 0;  // a stage [begin, end) of a 3-layer model; end 0: the whole model
  int64_t end = 0;
};

void PrintTo(const SplitVariant& v, std::ostream* os) { *os << v.name; }

class SplitBackwardTest : public ::testing::TestWithParam<SplitVariant> {};

TEST_P(SplitBackwardTest, EqualsTheFusedBackwardBitForBit) {
  const SplitVariant& v = GetParam();
  ModelOptions options = SmallOptions(v.family, 3, /*num_threads=*/1);
  options.tie_embeddings = v.tied;
  options.activation_checkpointing = v.checkpointing;
  options.checkpointing.host = v.host_checkpointing;
  if (v.bf16) options.param_dtype = DType::kBF16;
  HostAllocator host;
  auto created = Model<float>::Create(options, host, sluice::testing::OpsFor<float>());
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  std::unique_ptr<Model<float>> whole = std::move(created).value();
  Randomize(*whole, 5);
  const ModelStage stage = v.end > 0 ? ModelStage{v.begin, v.end} : WholeModelStage(options);
  std::unique_ptr<Model<float>> split = StageOf(*whole, stage, host);
  std::unique_ptr<Model<float>> fused = StageOf(*whole, stage, host);
  const std::vector<MicroBatchData> data = MakeMicroBatches(options, 3, 9);

  // One micro-batch: BackwardInput then BackwardWeight is Backward.
  const std::vector<MicroBatchData> one(data.begin(), data.begin() + 1);
  ExpectSame(RunPass(*split, {{'F', 0}, {'I', 0}, {'W', 0}}, one),
             RunPass(*fused, {{'F', 0}, {'B', 0}}, one));
  // Three, the weight gradients late and interleaved with the next forwards and backwards.
  ExpectSame(RunPass(*split, kSplitOrder, data), RunPass(*fused, kFusedOrder, data));
}

std::vector<SplitVariant> Variants() {
  return {
      {.name = "gpt2_untied", .family = Family::kGpt2},
      {.name = "gpt2_tied", .family = Family::kGpt2, .tied = true},
      {.name = "llama", .family = Family::kLlama},
      {.name = "llama_checkpointed", .family = Family::kLlama, .checkpointing = true},
      {.name = "gpt2_host_checkpointed",
       .family = Family::kGpt2,
       .checkpointing = true,
       .host_checkpointing = true},
      {.name = "llama_bf16", .family = Family::kLlama, .bf16 = true},
      {.name = "gpt2_first_stage", .family = Family::kGpt2, .begin = 0, .end = 1},
      {.name = "llama_middle_stage", .family = Family::kLlama, .begin = 1, .end = 2},
      {.name = "gpt2_last_stage", .family = Family::kGpt2, .begin = 2, .end = 3},
  };
}

INSTANTIATE_TEST_SUITE_P(Models, SplitBackwardTest, ::testing::ValuesIn(Variants()),
                         [](const ::testing::TestParamInfo<SplitVariant>& info) {
                           return info.param.name;
                         });

// The fp64 reference model, on the reference ops.
TEST(SplitBackwardReferenceTest, EqualsTheFusedBackwardInDouble) {
  ModelOptions options = testing::TinyOptions(Family::kLlama);
  HostAllocator host;
  ops::OpsBackend& ops = sluice::testing::OpsFor<double>();
  auto a = Model<double>::Create(options, host, ops);
  auto b = Model<double>::Create(options, host, ops);
  ASSERT_TRUE(a.ok() && b.ok());
  Randomize(**a, 3);
  Randomize(**b, 3);
  const std::vector<MicroBatchData> data = MakeMicroBatches(options, 3, 4);
  ExpectSame(RunPass(**a, kSplitOrder, data), RunPass(**b, kFusedOrder, data));
}

// The pending weight gradients hold memory (the peak grows when a micro-batch's W waits past
// the next micro-batch's forward and backward-input), and W gives all of it back: two
// micro-batches one after the other peak where one does.
TEST(SplitBackwardMemoryTest, WeightGradientsHoldMemoryUntilTheyRun) {
  ModelOptions options = SmallOptions(Family::kLlama, 2, /*num_threads=*/1);
  options.tie_embeddings = false;
  HostAllocator host;
  auto created = Model<float>::Create(options, host, sluice::testing::OpsFor<float>());
  ASSERT_TRUE(created.ok());
  Model<float>& model = **created;
  Randomize(model, 8);
  const std::vector<MicroBatchData> data = MakeMicroBatches(options, 2, 1);
  const std::vector<MicroBatchData> one(data.begin(), data.begin() + 1);
  const int64_t fused_one = RunPass(model, {{'F', 0}, {'B', 0}}, one).peak_bytes;
  const int64_t fused_two =
      RunPass(model, {{'F', 0}, {'B', 0}, {'F', 1}, {'B', 1}}, data).peak_bytes;
  const int64_t split_one = RunPass(model, {{'F', 0}, {'I', 0}, {'W', 0}}, one).peak_bytes;
  const int64_t split_two =
      RunPass(model, {{'F', 0}, {'I', 0}, {'W', 0}, {'F', 1}, {'I', 1}, {'W', 1}}, data).peak_bytes;
  const int64_t late =
      RunPass(model, {{'F', 0}, {'I', 0}, {'F', 1}, {'I', 1}, {'W', 0}, {'W', 1}}, data).peak_bytes;
  EXPECT_GT(fused_one, 0);
  EXPECT_EQ(fused_two, fused_one);
  EXPECT_EQ(split_two, split_one) << "W left memory of micro-batch 0 behind";
  EXPECT_GE(split_one, fused_one);
  EXPECT_GT(late, split_one) << "micro-batch 0's pending W should hold memory past its B";
  // It holds less than the micro-batch's full activations, which 1F1B would keep in flight.
  const int64_t in_flight_two =
      RunPass(model, {{'F', 0}, {'F', 1}, {'B', 0}, {'B', 1}}, data).peak_bytes;
  EXPECT_LT(late, in_flight_two);
  RecordProperty("fused_one_bytes", std::to_string(fused_one));
  RecordProperty("split_one_bytes", std::to_string(split_one));
  RecordProperty("pending_w_bytes", std::to_string(late));
  RecordProperty("two_in_flight_bytes", std::to_string(in_flight_two));
}

class SplitRecordingHooks : public UnitHooks {
 public:
  explicit SplitRecordingHooks(bool split) : split_(split) {}
  bool SupportsSplitBackward() const override { return split_; }
  Status BeforeBackward(int unit) override { return Note("B<", unit); }
  Status AfterBackward(int unit) override { return Note("B>", unit); }
  Status BeforeBackwardWeight(int unit) override { return Note("W<", unit); }
  Status AfterBackwardWeight(int unit) override { return Note("W>", unit); }
  std::vector<std::string> calls;

 private:
  Status Note(const char* what, int unit) {
    calls.push_back(what + std::to_string(unit));
    return OkStatus();
  }
  bool split_;
};

TEST(SplitBackwardApiTest, RefusalsAndHooks) {
  ModelOptions options = SmallOptions(Family::kGpt2, 1, /*num_threads=*/1);
  options.tie_embeddings = true;
  HostAllocator host;
  auto created = Model<float>::Create(options, host, sluice::testing::OpsFor<float>());
  ASSERT_TRUE(created.ok());
  Model<float>& model = **created;
  Randomize(model, 2);
  const std::vector<MicroBatchData> data = MakeMicroBatches(options, 2, 3);
  const auto forward = [&](int m) {
    return model.Forward(m, {.batch = kStageBatch,
                             .seq = options.seq_len,
                             .tokens = data[m].tokens.data(),
                             .targets = data[m].targets.data()});
  };

  // EndPass while a W is pending drops the pass.
  ASSERT_TRUE(model.BeginPass().ok());
  ASSERT_TRUE(forward(0).ok());
  ASSERT_TRUE(model.BackwardInput(0, {.loss_grad = 1.0}).ok());
  EXPECT_EQ(model.micro_batches_in_flight(), 0);
  EXPECT_EQ(model.micro_batches_awaiting_weight(), 1);
  Result<std::map<int, double>> ended = model.EndPass();
  ASSERT_FALSE(ended.ok());
  EXPECT_EQ(ended.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(ended.status().message().find("weight gradients of micro-batches 0 pending"),
            std::string::npos)
      << ended.status().ToString();
  EXPECT_EQ(model.micro_batches_awaiting_weight(), 0);

  // W before its B; W of a fused backward; W twice.
  ASSERT_TRUE(model.BeginPass().ok());
  ASSERT_TRUE(forward(0).ok());
  Status early = model.BackwardWeight(0);
  EXPECT_EQ(early.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(early.message().find("has not run BackwardInput"), std::string::npos)
      << early.ToString();
  ASSERT_TRUE(model.BeginPass().ok());
  ASSERT_TRUE(forward(0).ok());
  ASSERT_TRUE(model.Backward(0, {.loss_grad = 1.0}).ok());
  Status fused_w = model.BackwardWeight(0);
  EXPECT_NE(fused_w.message().find("no weight gradients pending"), std::string::npos)
      << fused_w.ToString();
  ASSERT_TRUE(model.BeginPass().ok());
  ASSERT_TRUE(forward(0).ok());
  ASSERT_TRUE(model.BackwardInput(0, {.loss_grad = 1.0}).ok());
  ASSERT_TRUE(model.BackwardWeight(0).ok());
  EXPECT_EQ(model.BackwardWeight(0).code(), StatusCode::kFailedPrecondition);

  // Hooks that take a unit's gradients as final after its backward refuse the split.
  SplitRecordingHooks fused_only(false);
  model.SetHooks(&fused_only);
  ASSERT_TRUE(model.BeginPass().ok());
  ASSERT_TRUE(forward(0).ok());
  Status refused = model.BackwardInput(0, {.loss_grad = 1.0});
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("SupportsSplitBackward"), std::string::npos)
      << refused.ToString();

  // Hooks that accept it see each unit's backward-input, then the W of the units that deferred
  // a weight gradient: the block (unit 1) only; the tied head (unit 3) keeps its dW in B, the
  // embeddings (0) and the final norm (2) have no Linear.
  SplitRecordingHooks split(true);
  model.SetHooks(&split);
  ASSERT_TRUE(model.BeginPass().ok());
  ASSERT_TRUE(forward(0).ok());
  ASSERT_TRUE(model.BackwardInput(0, {.loss_grad = 1.0}).ok());
  ASSERT_TRUE(model.BackwardWeight(0).ok());
  ASSERT_TRUE(model.EndPass().ok());
  EXPECT_EQ(split.calls, (std::vector<std::string>{"B<3", "B>3", "B<2", "B>2", "B<1", "B>1", "B<0",
                                                   "B>0", "W<1", "W>1"}));
  model.SetHooks(nullptr);
}

// A Linear alone, fp64 reference ops: its input in memory no context owns (copied at B), and a
// bias left out of the forward (a row-parallel projection's: its gradient still comes in B).
TEST(SplitBackwardLinearTest, InputNotOwnedAndBiasOmittedInForward) {
  for (bool omit_bias : {false, true}) {
    SCOPED_TRACE(omit_bias ? "bias omitted in forward" : "bias in forward");
    ParameterRegistry registry;
    ModuleBuilder builder(registry);
    registry.BeginUnit("layer");
    Linear<double> layer(builder, "fc", 6, 5, /*bias=*/true);
    if (omit_bias) layer.OmitBiasInForward();
    ops::OpsBackend& ops = sluice::testing::OpsFor<double>();
    std::unique_ptr<Stream> stream = std::move(ops.device().CreateStream()).value();
    constexpr int64_t kRows = 7;
    VectorBinding<double> binding(registry);
    binding.values = RandomVector(registry.total_elements(), 1);
    const std::vector<double> x = RandomVector(kRows * 6, 2);
    const std::vector<double> dy = RandomVector(kRows * 5, 3);
    std::vector<std::vector<double>> grads;
    std::vector<std::vector<double>> dxs;
    for (bool defer : {false, true}) {
      std::fill(binding.grads.begin(), binding.grads.end(), 0.0);
      auto store =
          std::make_shared<DeferredWeightGrads<double>>(std::make_shared<ActivationMeter>());
      {
        ForwardContext<double> ctx(ops, *stream, binding, 1, kRows, nullptr);
        if (defer) ctx.DeferWeightGradsTo(store);
        DeviceBuffer device_x = ToDevice(*stream, x);
        auto y = layer.Forward(ctx, Act<double>{device_x.data_as<double>(), kRows, 6});
        ASSERT_TRUE(y.ok());
        const DeviceBuffer device_dy = ToDevice(*stream, dy);
        auto dx = layer.Backward(ctx, Act<double>{device_dy.data_as<double>(), kRows, 5});
        ASSERT_TRUE(dx.ok()) << dx.status().ToString();
        dxs.push_back(ToHost(*stream, dx->data, dx->numel()));
        ReleaseGradsOf(ctx, layer);
        // The input's memory is overwritten and freed before the weight gradient: B copied it.
        ASSERT_TRUE(ops.device().MemsetAsync(device_x.data(), 0, device_x.size(), *stream).ok());
        device_x.Reset();
        if (defer) {
          ASSERT_TRUE(stream->Synchronize().ok());
          const std::vector<double> before_w = binding.grads;
          EXPECT_EQ(store->pending(), 1);
          EXPECT_EQ(store->Units(), std::vector<int>{-1});
          ASSERT_TRUE(store->RunUnit(-1, ctx).ok());
          ASSERT_TRUE(stream->Synchronize().ok());
          // B gave the bias gradient (the last 5 elements), W the weight's.
          const ParameterInfo& w = registry.parameter(layer.weight_param());
          for (int64_t e = 0; e < w.numel; ++e) {
            EXPECT_EQ(before_w[w.offset + e], 0.0) << "weight element " << e << " before W";
          }
        }
      }
      ASSERT_TRUE(stream->Synchronize().ok());
      grads.push_back(binding.grads);
    }
    EXPECT_EQ(dxs[0], dxs[1]);
    EXPECT_EQ(grads[0], grads[1]);
  }
}

}  // namespace
}  // namespace sluice::model
