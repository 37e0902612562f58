// Activation checkpointing as the activation_checkpointing section configures it
// (ModelOptions::checkpointing, engine/model/checkpointed_inputs.h): every way of keeping the
// block inputs (views, one contiguous device buffer, pinned host memory, one contiguous pinned
// buffer), some or all blocks, against the model without checkpointing, bit for bit; where the
// kept inputs live according to the memory ledger; the profile's trace spans.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "engine/model/model.h"
#include "runtime/memory_accounting.h"
#include "runtime/trace.h"
#include "tests/common/test_ops.h"
#include "tests/model/model_test_util.h"

namespace sluice::model {
namespace {

using testing::RandomTokens;
using testing::SmallOptions;

struct Variant {
  std::string name;
  int64_t blocks = 0;  // number_checkpoints; 0: every block
  bool host = false;
  bool contiguous = false;
  bool synchronize = false;
  bool profile = false;
};

// Test names in failure messages instead of the bytes of the parameter.
void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

ModelOptions BaseOptions(Family family) { return SmallOptions(family, 4, 1); }

ModelOptions WithCheckpointing(ModelOptions o, const Variant& v) {
  o.activation_checkpointing = true;
  o.checkpointing.blocks = v.blocks;
  o.checkpointing.host = v.host;
  o.checkpointing.contiguous = v.contiguous;
  o.checkpointing.synchronize = v.synchronize;
  o.checkpointing.profile = v.profile;
  return o;
}

// A device and backend of its own per model: the ledger's peaks then belong to one model's pass.
struct TestModel {
  std::unique_ptr<Device> device;
  std::unique_ptr<ops::OpsBackend> ops;
  HostAllocator host;
  std::unique_ptr<Model<float>> net;
};

std::unique_ptr<TestModel> Build(const ModelOptions& options) {
  auto m = std::make_unique<TestModel>();
  auto device = CreateDevice({.memory_limit_bytes = uint64_t{64} << 20});
  SLUICE_CHECK(device.ok()) << device.status().ToString();
  m->device = std::move(device).value();
  m->ops = sluice::testing::CpuOpsOn(*m->device);
  auto net = Model<float>::Create(options, m->host, *m->ops);
  SLUICE_CHECK(net.ok()) << net.status().ToString();
  m->net = std::move(net).value();
  m->net->InitializeParameters(9);
  return m;
}

class CheckpointingVariantTest : public ::testing::TestWithParam<std::tuple<Family, Variant>> {};

// Two micro-batches accumulated, the second one larger (the pinned buffers grow), then an
// evaluation pass and the logits: the same bits as without checkpointing.
TEST_P(CheckpointingVariantTest, SameLossesGradientsAndLogitsAsWithout) {
  const auto& [family, variant] = GetParam();
  const ModelOptions options = BaseOptions(family);
  const std::unique_ptr<TestModel> plain = Build(options);
  const std::unique_ptr<TestModel> ckpt = Build(WithCheckpointing(options, variant));
  const int64_t seq = options.seq_len;
  for (int64_t batch : {2, 3}) {
    const std::vector<int32_t> inputs = RandomTokens(batch * seq, 50, 70 + batch);
    const std::vector<int32_t> targets = RandomTokens(batch * seq, 50, 80 + batch);
    auto a = plain->net->ForwardBackward(inputs.data(), targets.data(), batch, seq);
    auto b = ckpt->net->ForwardBackward(inputs.data(), targets.data(), batch, seq);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    EXPECT_EQ(*a, *b) << "batch " << batch;
  }
  const size_t bytes = static_cast<size_t>(plain->net->ParameterCount()) * sizeof(float);
  EXPECT_EQ(std::memcmp(plain->net->grads_data(), ckpt->net->grads_data(), bytes), 0);

  const std::vector<int32_t> inputs = RandomTokens(2 * seq, 50, 90);
  const std::vector<int32_t> targets = RandomTokens(2 * seq, 50, 91);
  auto a = plain->net->ForwardLoss(inputs.data(), targets.data(), 2, seq);
  auto b = ckpt->net->ForwardLoss(inputs.data(), targets.data(), 2, seq);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  std::vector<float> logits_a(2 * seq * 50), logits_b(2 * seq * 50);
  ASSERT_TRUE(plain->net->ForwardLogits(inputs.data(), 2, seq, logits_a.data()).ok());
  ASSERT_TRUE(ckpt->net->ForwardLogits(inputs.data(), 2, seq, logits_b.data()).ok());
  EXPECT_EQ(std::memcmp(logits_a.data(), logits_b.data(), logits_a.size() * sizeof(float)), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Variants, CheckpointingVariantTest,
    ::testing::Combine(::testing::Values(Family::kGpt2, Family::kLlama),
                       ::testing::Values(Variant{"all"}, Variant{"first2", 2}, Variant{"first1", 1},
                                         Variant{"more_than_layers", 9}, Variant{"host", 0, true},
                                         Variant{"host_first3", 3, true},
                                         Variant{"host_contiguous", 0, true, true},
                                         Variant{"contiguous", 0, false, true},
                                         Variant{"contiguous_first2", 2, false, true},
                                         Variant{"synchronized_profiled", 3, true, false, true,
                                                 true})),
    [](const auto& info) {
      return std::string(FamilyName(std::get<0>(info.param))) + "_" + std::get<1>(info.param).name;
    });

struct Peaks {
  int64_t device_activations = 0;
  int64_t pinned_activations = 0;  // current after the pass: the kept inputs stay pinned
  int64_t meter = 0;
};

Peaks MeasurePass(const ModelOptions& options, int64_t batch) {
  const std::unique_ptr<TestModel> m = Build(options);
  const int64_t seq = options.seq_len;
  const std::vector<int32_t> inputs = RandomTokens(batch * seq, 50, 5);
  const std::vector<int32_t> targets = RandomTokens(batch * seq, 50, 6);
  MemoryLedger::Global().ResetPeaks();
  auto loss = m->net->ForwardBackward(inputs.data(), targets.data(), batch, seq);
  SLUICE_CHECK(loss.ok()) << loss.status().ToString();
  const MemorySnapshot snapshot = MemoryLedger::Global().Snapshot();
  Peaks p;
  p.device_activations =
      static_cast<int64_t>(snapshot.at(MemoryTier::kDevice, MemoryCategory::kActivations).peak);
  p.pinned_activations = static_cast<int64_t>(
      snapshot.at(MemoryTier::kHostPinned, MemoryCategory::kActivations).current);
  p.meter = m->net->last_peak_activation_bytes();
  return p;
}

// The device's activation peak falls with checkpointing, and again when the kept inputs go to
// pinned host memory, which then holds one block input per checkpointed block.
TEST(CheckpointingMemoryTest, HostCheckpointingMovesTheKeptInputsOffTheDevice) {
  ModelOptions options = BaseOptions(Family::kGpt2);
  options.n_layer = 6;
  const int64_t batch = 4;
  const Peaks plain = MeasurePass(options, batch);
  const Peaks device = MeasurePass(WithCheckpointing(options, Variant{"all"}), batch);
  const Peaks host = MeasurePass(WithCheckpointing(options, Variant{"host", 0, true}), batch);
  const Peaks host_contiguous =
      MeasurePass(WithCheckpointing(options, Variant{"host_contiguous", 0, true, true}), batch);
  const int64_t input_bytes = batch * options.seq_len * options.d_model * 4;
  EXPECT_LT(device.device_activations, plain.device_activations);
  EXPECT_LT(host.device_activations, device.device_activations);
  // Views keep every block output (6 inputs' worth); the host copies leave one output and the
  // input copied back for the recomputation: 4 fewer block inputs on the device.
  EXPECT_EQ(device.device_activations - host.device_activations, 4 * input_bytes);
  EXPECT_EQ(host_contiguous.device_activations, host.device_activations);
  EXPECT_EQ(plain.pinned_activations, 0);
  EXPECT_EQ(device.pinned_activations, 0);
  // Pinned buffers are page-rounded; these inputs are whole pages.
  ASSERT_EQ(input_bytes % 4096, 0);
  EXPECT_EQ(host.pinned_activations, 6 * input_bytes);
  EXPECT_EQ(host_contiguous.pinned_activations, 6 * input_bytes);
  // The model's own meter sees the same saving.
  EXPECT_LT(host.meter, device.meter);
}

// Each block checkpointed (the first ones) lowers the peak, up to the last block: its
// recomputation comes first in the backward, while everything else is still held, so
// checkpointing it saves nothing.
TEST(CheckpointingMemoryTest, NumberCheckpointsKeepsFullActivationsForTheOtherBlocks) {
  const ModelOptions options = BaseOptions(Family::kLlama);
  const int64_t batch = 2;
  const Peaks plain = MeasurePass(options, batch);
  int64_t previous = plain.device_activations;
  for (int64_t blocks = 1; blocks < options.n_layer; ++blocks) {
    const Peaks p = MeasurePass(WithCheckpointing(options, Variant{"n", blocks}), batch);
    EXPECT_LT(p.device_activations, previous) << blocks << " checkpointed blocks";
    previous = p.device_activations;
  }
  const Peaks all = MeasurePass(WithCheckpointing(options, Variant{"all"}), batch);
  EXPECT_GE(all.device_activations, previous);
  EXPECT_LT(all.device_activations, plain.device_activations);
}

TEST(CheckpointingProfileTest, EachRecomputationIsATraceSpan) {
  const ModelOptions options = WithCheckpointing(BaseOptions(Family::kGpt2),
                                                 Variant{"profiled", 3, false, false, false, true});
  const std::unique_ptr<TestModel> m = Build(options);
  TraceRecorder& trace = TraceRecorder::Global();
  trace.Clear();
  trace.Enable();
  const std::vector<int32_t> inputs = RandomTokens(2 * options.seq_len, 50, 3);
  const std::vector<int32_t> targets = RandomTokens(2 * options.seq_len, 50, 4);
  for (int pass = 0; pass < 2; ++pass) {
    ASSERT_TRUE(m->net->ForwardBackward(inputs.data(), targets.data(), 2, options.seq_len).ok());
  }
  ASSERT_TRUE(m->net->ForwardLoss(inputs.data(), targets.data(), 2, options.seq_len).ok());
  trace.Disable();
  std::vector<std::string> names;
  for (const TraceEvent& event : trace.Snapshot()) {
    if (event.name.rfind("recompute ", 0) != 0) continue;
    EXPECT_EQ(event.lane, kTraceLaneCompute);
    EXPECT_GT(event.duration_ns(), 0);
    names.push_back(event.name);
  }
  trace.Clear();
  // Blocks 0-2 of 4, in each of the two backward passes (none in the evaluation).
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names,
            (std::vector<std::string>{"recompute transformer.h.0", "recompute transformer.h.0",
                                      "recompute transformer.h.1", "recompute transformer.h.1",
                                      "recompute transformer.h.2", "recompute transformer.h.2"}));
}

}  // namespace
}  // namespace sluice::model
