// The activation and scratch formulas against the memory ledger's peaks of a real model's
// forward/backward, across families, shapes, checkpointing and storage dtypes.
#include "engine/estimate/activation_estimate.h"

#include <gtest/gtest.h>

#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "engine/model/buffer.h"
#include "engine/model/model.h"
#include "engine/train/run_setup.h"
#include "runtime/memory_accounting.h"
#include "tests/common/test_ops.h"

namespace sluice::estimate {
namespace {

struct Shape {
  std::string name;
  model::Family family;
  int64_t n_layer, n_head, n_kv_head, d_model, d_ff, vocab, seq, batch;
};

struct Measured {
  int64_t activations = 0;  // ledger peak, category activations
  int64_t buffers = 0;      // ledger peak, category buffers
  int64_t meter = 0;        // the model's own peak of saved + grads + scratch
  int64_t pinned = 0;       // ledger peak, host_pinned activations (cpu_checkpointing)
};

model::ModelOptions OptionsOf(const Shape& s, bool checkpointing, DType dtype) {
  model::ModelOptions o = train::DefaultModelOptions();
  o.family = s.family;
  o.n_layer = s.n_layer;
  o.n_head = s.n_head;
  o.n_kv_head = s.n_kv_head;
  o.d_model = s.d_model;
  o.d_ff = s.d_ff;
  o.vocab_size = s.vocab;
  o.seq_len = s.seq;
  o.activation_checkpointing = checkpointing;
  o.param_dtype = dtype;
  o.num_threads = 1;
  return o;
}

Measured Measure(const model::ModelOptions& options, int64_t batch) {
  // A device and backend of its own: the backend's scratch starts empty, as a run's does.
  auto device = CreateDevice({.memory_limit_bytes = uint64_t{256} << 20});
  EXPECT_TRUE(device.ok()) << device.status().ToString();
  if (!device.ok()) return {};
  const std::unique_ptr<ops::OpsBackend> ops = sluice::testing::CpuOpsOn(**device);
  model::HostAllocator host;
  auto net = model::Model<float>::Create(options, host, *ops);
  EXPECT_TRUE(net.ok()) << net.status().ToString();
  if (!net.ok()) return {};
  (*net)->InitializeParameters(7);
  std::mt19937 engine(11);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(options.vocab_size) - 1);
  std::vector<int32_t> inputs(batch * options.seq_len), targets(batch * options.seq_len);
  for (int32_t& t : inputs) t = token(engine);
  for (int32_t& t : targets) t = token(engine);
  MemoryLedger::Global().ResetPeaks();
  auto loss = (*net)->ForwardBackward(inputs.data(), targets.data(), batch, options.seq_len);
  EXPECT_TRUE(loss.ok()) << loss.status().ToString();
  const MemorySnapshot snapshot = MemoryLedger::Global().Snapshot();
  Measured m;
  m.activations =
      static_cast<int64_t>(snapshot.at(MemoryTier::kDevice, MemoryCategory::kActivations).peak);
  m.buffers = static_cast<int64_t>(snapshot.at(MemoryTier::kDevice, MemoryCategory::kBuffers).peak);
  m.meter = (*net)->last_peak_activation_bytes();
  m.pinned =
      static_cast<int64_t>(snapshot.at(MemoryTier::kHostPinned, MemoryCategory::kActivations).peak);
  return m;
}

// The activation and scratch peaks within 10% of the estimate, the bar.
void ExpectWithinTenPercent(const Measured& measured, const ActivationEstimate& estimate) {
  EXPECT_NEAR(static_cast<double>(measured.activations), static_cast<double>(estimate.peak_bytes),
              0.10 * static_cast<double>(estimate.peak_bytes))
      << estimate.peak_formula;
  EXPECT_NEAR(static_cast<double>(measured.buffers),
              static_cast<double>(estimate.scratch_peak_bytes),
              0.10 * static_cast<double>(estimate.scratch_peak_bytes))
      << estimate.scratch_formula;
}

const std::vector<Shape>& Shapes() {
  static const std::vector<Shape> shapes = {
      // name              family               L  H  kv   d    ff   vocab seq  B
      {"gpt2_tiny", model::Family::kGpt2, 2, 4, 4, 64, 256, 256, 64, 2},
      {"gpt2_wide_vocab", model::Family::kGpt2, 3, 2, 2, 32, 128, 1024, 32, 3},
      {"gpt2_small_vocab", model::Family::kGpt2, 2, 4, 4, 64, 512, 64, 48, 2},
      {"llama_gqa", model::Family::kLlama, 3, 4, 2, 64, 160, 512, 32, 3},
      {"llama_small_vocab", model::Family::kLlama, 2, 8, 2, 64, 384, 64, 64, 1},
  };
  return shapes;
}

class ActivationEstimateTest : public ::testing::TestWithParam<std::tuple<size_t, bool, DType>> {};

TEST_P(ActivationEstimateTest, MatchesTheLedgerPeaksOfARealPass) {
  const auto [index, checkpointing, dtype] = GetParam();
  const Shape& shape = Shapes()[index];
  const model::ModelOptions options = OptionsOf(shape, checkpointing, dtype);
  const Measured measured = Measure(options, shape.batch);
  const ActivationEstimate estimate = EstimateActivations(options, shape.batch, shape.seq);
  SCOPED_TRACE(shape.name + (checkpointing ? " checkpointed" : "") + " " +
               std::string(DTypeName(dtype)));

  // Within 10%, the bar. (The formulas follow the modules' allocations one by one; on
  // every shape here they agree to the byte.)
  ExpectWithinTenPercent(measured, estimate);
  // The model's own meter (saved + grads + scratch at one moment) lies between the activation
  // peak and the sum of both peaks.
  EXPECT_GE(measured.meter, estimate.peak_bytes * 9 / 10);
  EXPECT_LE(measured.meter, (estimate.peak_bytes + estimate.scratch_peak_bytes) * 11 / 10);
}

INSTANTIATE_TEST_SUITE_P(Shapes, ActivationEstimateTest,
                         ::testing::Combine(::testing::Range<size_t>(0, 5), ::testing::Bool(),
                                            ::testing::Values(DType::kF32, DType::kBF16)));

// The activation_checkpointing section's settings: some blocks, inputs in pinned host memory, one
// contiguous buffer; f32, every shape.
struct CheckpointVariant {
  std::string name;
  int64_t blocks;  // number_checkpoints; 0 every block
  bool host;
  bool contiguous;
};

// Test names in failure messages instead of the bytes of the parameter.
void PrintTo(const CheckpointVariant& v, std::ostream* os) { *os << v.name; }

class CheckpointedActivationEstimateTest
    : public ::testing::TestWithParam<std::tuple<size_t, CheckpointVariant>> {};

TEST_P(CheckpointedActivationEstimateTest, MatchesTheLedgerPeaksOfARealPass) {
  const auto& [index, variant] = GetParam();
  const Shape& shape = Shapes()[index];
  model::ModelOptions options = OptionsOf(shape, true, DType::kF32);
  options.checkpointing.blocks = variant.blocks;
  options.checkpointing.host = variant.host;
  options.checkpointing.contiguous = variant.contiguous;
  const Measured measured = Measure(options, shape.batch);
  const ActivationEstimate estimate = EstimateActivations(options, shape.batch, shape.seq);
  SCOPED_TRACE(shape.name + " " + variant.name);
  EXPECT_EQ(estimate.checkpointed_blocks, model::CheckpointedBlocks(options));
  ExpectWithinTenPercent(measured, estimate);
  if (variant.host) {
    // Pinned buffers are page-rounded: within a page per checkpointed block.
    EXPECT_GE(measured.pinned, estimate.host_kept_bytes) << estimate.host_formula;
    EXPECT_LE(measured.pinned, estimate.host_kept_bytes + 4096 * estimate.checkpointed_blocks)
        << estimate.host_formula;
  } else {
    EXPECT_EQ(measured.pinned, 0);
    EXPECT_EQ(estimate.host_kept_bytes, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CheckpointedActivationEstimateTest,
    ::testing::Combine(::testing::Range<size_t>(0, 5),
                       ::testing::Values(CheckpointVariant{"first1", 1, false, false},
                                         CheckpointVariant{"first2", 2, false, false},
                                         CheckpointVariant{"host", 0, true, false},
                                         CheckpointVariant{"host_first1", 1, true, false},
                                         CheckpointVariant{"host_contiguous", 0, true, true},
                                         CheckpointVariant{"contiguous", 0, false, true},
                                         CheckpointVariant{"contiguous_first2", 2, false, true})),
    [](const auto& info) {
      return Shapes()[std::get<0>(info.param)].name + "_" + std::get<1>(info.param).name;
    });

TEST(ActivationEstimateFormulaTest, CheckpointingKeepsOnlyEachBlocksOutput) {
  model::ModelOptions o = train::DefaultModelOptions();
  o.family = model::Family::kLlama;
  o.n_layer = 16;
  o.n_head = 8;
  o.n_kv_head = 8;
  o.d_model = 512;
  o.d_ff = 1408;
  o.vocab_size = 32000;
  o.seq_len = 1024;
  const ActivationEstimate full = EstimateActivations(o, 4, 1024);
  o.activation_checkpointing = true;
  const ActivationEstimate checkpointed = EstimateActivations(o, 4, 1024);
  const int64_t tokens = 4 * 1024;
  EXPECT_EQ(full.tokens, tokens);
  EXPECT_EQ(checkpointed.block_kept_bytes, 4 * tokens * 512);
  EXPECT_EQ(full.block_kept_bytes, full.block_saved_bytes);
  // Fifteen fewer full blocks of saved state, give or take the recomputed one.
  EXPECT_LT(checkpointed.peak_bytes, full.peak_bytes - 14 * full.block_saved_bytes);
  // Activations grow linearly with the micro-batch.
  EXPECT_EQ(EstimateActivations(o, 8, 1024).peak_bytes, 2 * checkpointed.peak_bytes);
  EXPECT_EQ(checkpointed.host_kept_bytes, 0);

  // cpu_checkpointing: the sixteen kept inputs move to pinned host memory. The peak of this shape
  // is at the LM head (32000 logits a token), where the device now holds one block output
  // instead of sixteen.
  o.checkpointing.host = true;
  const ActivationEstimate host = EstimateActivations(o, 4, 1024);
  const int64_t input = 4 * tokens * 512;
  EXPECT_EQ(host.host_kept_bytes, 16 * input);
  EXPECT_EQ(checkpointed.peak_bytes - host.peak_bytes, 15 * input);
  // number_checkpoints: the first 8 blocks, the other 8 keep everything.
  o.checkpointing.host = false;
  o.checkpointing.blocks = 8;
  const ActivationEstimate half = EstimateActivations(o, 4, 1024);
  EXPECT_EQ(half.checkpointed_blocks, 8);
  EXPECT_GT(half.peak_bytes, checkpointed.peak_bytes + 7 * (full.block_saved_bytes - input));
  EXPECT_LT(half.peak_bytes, full.peak_bytes - 7 * full.block_saved_bytes);
}

}  // namespace
}  // namespace sluice::estimate
