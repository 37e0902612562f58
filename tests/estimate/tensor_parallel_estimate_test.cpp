// The tensor-parallel estimate against real tensor-parallel models, under mpirun -np N (tensor
// size 2; with 4 ranks also 4, and 2 x 2 data-parallel for the ZeRO engine):
//   - parallel::TensorShardingOf, which the estimator counts with, equals the layout the plan gives
//     every parameter of a model it builds, and DescribeUnits equals that model's registry, unit
//     by unit (this tensor rank's pieces);
//   - EstimateActivations at tensor size t, with and without sequence parallelism, within 10% of
//     the memory ledger's activation and scratch peaks of a real pass;
//   - the ZeroEngine on a tensor-parallel model: device peaks per category within 10% of
//     EstimateMemory for the same config.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/estimate/activation_estimate.h"
#include "engine/estimate/estimate_compare.h"
#include "engine/estimate/memory_estimate.h"
#include "engine/estimate/model_layout.h"
#include "engine/model/buffer.h"
#include "engine/model/model.h"
#include "engine/parallel/process_groups.h"
#include "engine/parallel/tensor_layout.h"
#include "engine/train/precision.h"
#include "engine/train/run_setup.h"
#include "engine/zero/zero_engine.h"
#include "engine/zero/zero_options.h"
#include "runtime/device/device_factory.h"
#include "runtime/memory_accounting.h"
#include "tests/common/test_ops.h"
#include "tests/common/test_world.h"

namespace sluice::estimate {
namespace {

using ::sluice::testing::TestWorld;

// The tensor sizes this world runs: 2, and 4 on four ranks.
std::vector<int> TensorSizes() {
  std::vector<int> sizes;
  for (int t = 2; t <= TestWorld().size(); t *= 2) {
    if (TestWorld().size() % t == 0) sizes.push_back(t);
  }
  return sizes;
}

std::unique_ptr<parallel::ProcessGroups> MakeGroups(int tensor) {
  Result<parallel::ProcessGrid> grid = parallel::ProcessGrid::Create(TestWorld().size(), tensor, 1);
  SLUICE_CHECK(grid.ok()) << grid.status().ToString();
  auto groups = parallel::ProcessGroups::Create(TestWorld(), *grid);
  SLUICE_CHECK(groups.ok()) << groups.status().ToString();
  return std::move(groups).value();
}

struct Shape {
  std::string name;
  model::Family family;
  int64_t n_layer, n_head, n_kv_head, d_model, d_ff, vocab, seq, batch;
  bool tied;
};

// Every split is real at tensor sizes 2 and 4; odd vocabularies give balanced pieces; key/value
// heads are split, or shared where there are fewer than ranks.
const std::vector<Shape>& Shapes() {
  static const std::vector<Shape> shapes = {
      // name             family               L  H  kv  d   ff   vocab seq B  tied
      {"gpt2_tiny", model::Family::kGpt2, 2, 4, 4, 64, 256, 256, 64, 2, true},
      {"gpt2_odd_vocab", model::Family::kGpt2, 3, 4, 4, 32, 128, 1001, 32, 3, false},
      {"llama_gqa", model::Family::kLlama, 3, 8, 4, 64, 160, 512, 32, 3, false},
      {"llama_small_vocab", model::Family::kLlama, 2, 8, 4, 64, 384, 66, 64, 1, true},
      // Fewer key/value heads than ranks: one replicated at both sizes; two split at 2, shared
      // by pairs of ranks at 4.
      {"llama_one_kv", model::Family::kLlama, 2, 8, 1, 64, 128, 256, 32, 2, false},
      {"llama_two_kv", model::Family::kLlama, 2, 8, 2, 64, 128, 256, 32, 2, false},
  };
  return shapes;
}

model::ModelOptions OptionsOf(const Shape& s, const parallel::ProcessGroups& groups, int tensor,
                              bool sequence_parallel, bool checkpointing) {
  model::ModelOptions o = train::DefaultModelOptions();
  o.family = s.family;
  o.n_layer = s.n_layer;
  o.n_head = s.n_head;
  o.n_kv_head = s.n_kv_head;
  o.d_model = s.d_model;
  o.d_ff = s.d_ff;
  o.vocab_size = s.vocab;
  o.seq_len = s.seq;
  o.tie_embeddings = s.tied;
  o.num_threads = 1;
  o.activation_checkpointing = checkpointing;
  o.tensor_parallel_size = tensor;
  o.tensor_parallel_rank = groups.coords().tensor;
  o.sequence_parallel = sequence_parallel;
  return o;
}

// A cpu device with the ledger's accounting, and its ops (the backend's scratch starts empty).
struct TestDevice {
  TestDevice() {
    auto made = CreateDevice({.memory_limit_bytes = uint64_t{256} << 20});
    SLUICE_CHECK(made.ok()) << made.status().ToString();
    device = std::move(made).value();
    ops = sluice::testing::CpuOpsOn(*device);
  }
  std::unique_ptr<Device> device;
  std::unique_ptr<ops::OpsBackend> ops;
};

TEST(TensorParallelEstimate, LayoutAndUnitsAreThoseOfTheModelThePlanBuilds) {
  for (const int t : TensorSizes()) {
    const auto groups = MakeGroups(t);
    for (const Shape& shape : Shapes()) {
      for (const bool sp : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << shape.name << " tensor size " << t << (sp ? " sequence parallel" : ""));
        const model::ModelOptions options = OptionsOf(shape, *groups, t, sp, false);
        TestDevice device;
        model::HostAllocator host;
        auto net = model::Model<float>::Create(options, host, *device.ops,
                                               model::ModelStorage::kExternal, &groups->tensor());
        ASSERT_TRUE(net.ok()) << net.status().ToString();
        const model::ParameterRegistry& registry = (*net)->registry();
        const parallel::TensorLayout layout = parallel::TensorLayoutOf(options);
        for (const model::ParameterInfo& info : registry.parameters()) {
          SCOPED_TRACE(info.name + ": " + info.sharding.ToString());
          auto mine = parallel::TensorShardingOf(layout, info.name, info.sharding.global_shape);
          ASSERT_TRUE(mine.ok()) << mine.status().ToString();
          EXPECT_EQ(mine->dim, info.sharding.dim);
          EXPECT_EQ(mine->degree, info.sharding.degree);
          EXPECT_EQ(mine->rank, info.sharding.rank);
          EXPECT_EQ(mine->blocks, info.sharding.blocks);
          EXPECT_EQ(mine->partial_grad, info.sharding.partial_grad);
          EXPECT_EQ(mine->replicas, info.sharding.replicas);
          EXPECT_EQ(mine->replica, info.sharding.replica);
          EXPECT_EQ(mine->LocalShape(), info.shape);
        }
        // The estimator's units: this rank's pieces, unit by unit, in trace order.
        std::vector<const UnitLayout*> expanded;
        const std::vector<UnitLayout> units = DescribeUnits(options);
        for (const UnitLayout& unit : units) {
          for (int64_t i = 0; i < unit.count; ++i) expanded.push_back(&unit);
        }
        ASSERT_EQ(expanded.size(), registry.units().size());
        for (size_t u = 0; u < expanded.size(); ++u) {
          const model::UnitInfo& real = registry.units()[u];
          int64_t read = 0;
          for (int p : real.params) read += registry.parameter(p).numel;
          EXPECT_EQ(expanded[u]->owned_elements(), real.numel) << real.name;
          EXPECT_EQ(expanded[u]->read_elements, read) << real.name;
        }
        EXPECT_EQ(SummarizeLayout(units).parameters, registry.total_elements());
      }
    }
  }
}

struct Measured {
  int64_t activations = 0;
  int64_t buffers = 0;
};

Measured MeasurePass(const model::ModelOptions& options, Comm& tensor, int64_t batch) {
  TestDevice device;
  model::HostAllocator host;
  auto net =
      model::Model<float>::Create(options, host, *device.ops, model::ModelStorage::kFlat, &tensor);
  EXPECT_TRUE(net.ok()) << net.status().ToString();
  if (!net.ok()) return {};
  (*net)->InitializeParameters(7);
  // Every tensor rank of the group sees the same tokens.
  std::mt19937 engine(11);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(options.vocab_size) - 1);
  std::vector<int32_t> inputs(batch * options.seq_len), targets(batch * options.seq_len);
  for (int32_t& t : inputs) t = token(engine);
  for (int32_t& t : targets) t = token(engine);
  MemoryLedger::Global().ResetPeaks();
  auto loss = (*net)->ForwardBackward(inputs.data(), targets.data(), batch, options.seq_len);
  EXPECT_TRUE(loss.ok()) << loss.status().ToString();
  const MemorySnapshot snapshot = MemoryLedger::Global().Snapshot();
  return {static_cast<int64_t>(snapshot.at(MemoryTier::kDevice, MemoryCategory::kActivations).peak),
          static_cast<int64_t>(snapshot.at(MemoryTier::kDevice, MemoryCategory::kBuffers).peak)};
}

TEST(TensorParallelEstimate, ActivationsMatchTheLedgerPeaksOfATensorParallelPass) {
  const bool verbose = std::getenv("SLUICE_ESTIMATE_VERBOSE") != nullptr;
  for (const int t : TensorSizes()) {
    const auto groups = MakeGroups(t);
    for (const Shape& shape : Shapes()) {
      for (const bool sp : {false, true}) {
        for (const bool checkpointing : {false, true}) {
          const model::ModelOptions options = OptionsOf(shape, *groups, t, sp, checkpointing);
          SCOPED_TRACE(::testing::Message()
                       << shape.name << " tensor size " << t << (sp ? " sequence parallel" : "")
                       << (checkpointing ? " checkpointed" : "") << ", tensor rank "
                       << options.tensor_parallel_rank);
          const Measured measured = MeasurePass(options, groups->tensor(), shape.batch);
          const ActivationEstimate estimate = EstimateActivations(options, shape.batch, shape.seq);
          if (verbose) {
            std::printf("[%d] %s t%d%s%s activations %lld est %lld, buffers %lld est %lld\n",
                        TestWorld().rank(), shape.name.c_str(), t, sp ? " sp" : "",
                        checkpointing ? " ckpt" : "", static_cast<long long>(measured.activations),
                        static_cast<long long>(estimate.peak_bytes),
                        static_cast<long long>(measured.buffers),
                        static_cast<long long>(estimate.scratch_peak_bytes));
          }
          EXPECT_NEAR(static_cast<double>(measured.activations),
                      static_cast<double>(estimate.peak_bytes), 0.10 * estimate.peak_bytes)
              << estimate.peak_formula;
          EXPECT_NEAR(static_cast<double>(measured.buffers),
                      static_cast<double>(estimate.scratch_peak_bytes),
                      0.10 * estimate.scratch_peak_bytes)
              << estimate.scratch_formula;
        }
      }
    }
  }
}

// The ZeroEngine on a tensor-parallel model (tensor size 2, the rest of the world data-parallel):
// each rank's device peaks per category within 10% of the estimate of the same config.
struct EngineCase {
  int stage;
  std::string precision;
  bool sequence_parallel;
};

class TensorParallelZeroEngineTest : public ::testing::TestWithParam<EngineCase> {};

TEST_P(TensorParallelZeroEngineTest, DevicePeaksPerCategoryMatchTheEstimate) {
  const EngineCase& c = GetParam();
  constexpr int kTensor = 2;
  const auto groups = MakeGroups(kTensor);
  const int data = TestWorld().size() / kTensor;
  std::string text = fmt::format(R"(
train_micro_batch_size_per_gpu: 2
gradient_accumulation_steps: 2
optimizer: {{type: adamw, params: {{lr: 1e-3}}}}
model: {{family: gpt2, n_layer: 3, n_head: 4, d_model: 64, d_ff: 256, vocab_size: 511,
        seq_len: 32}}
device: {{type: cpu, memory_limit: 512MiB, host_memory_limit: 1GiB, threads: 1}}
zero_optimization: {{stage: {}, reduce_bucket_size: 30000, allgather_bucket_size: 40000}}
tensor_parallel: {{sequence_parallel: {}}}
)",
                                 c.stage, c.sequence_parallel);
  if (c.precision == "bf16") text += "bf16: {enabled: true}\n";
  ConfigSources sources;
  sources.env.emplace();
  sources.world_size = data;  // the batch keys count the data-parallel ranks
  auto config = LoadConfigFromText(text, ConfigFormat::kYaml, sources);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  // As `sluice estimate --tensor-parallel 2` does.
  config->parallel.tensor = kTensor;
  config->world_size = TestWorld().size();
  config->dp_world_size = data;
  auto estimate = EstimateMemory(*config, data);
  ASSERT_TRUE(estimate.ok()) << estimate.status().ToString();
  EXPECT_EQ(estimate->tensor_parallel, kTensor);

  auto zero_options = zero::ZeroOptionsFromConfig(*config);
  ASSERT_TRUE(zero_options.ok()) << zero_options.status().ToString();
  auto model_options =
      train::ModelOptionsFromConfig(*config, train::PrecisionOf(config->model.dtype));
  ASSERT_TRUE(model_options.ok()) << model_options.status().ToString();
  model_options->param_dtype = DType::kF32;  // the engine binds fp32 copies
  model_options->tensor_parallel_rank = groups->coords().tensor;

  MemoryLedger::Global().ResetPeaks();
  {
    auto device = CreateDevice({.memory_limit_bytes = uint64_t{512} << 20});
    ASSERT_TRUE(device.ok());
    model::DeviceAllocator allocator(**device);
    const std::unique_ptr<ops::OpsBackend> ops = sluice::testing::CpuOpsOn(**device);
    auto net = model::Model<float>::Create(*model_options, allocator, *ops,
                                           model::ModelStorage::kExternal, &groups->tensor());
    ASSERT_TRUE(net.ok()) << net.status().ToString();
    // Tensor rank 0 is the estimate's rank: its registry holds what the estimate counts.
    if (groups->coords().tensor == 0) {
      EXPECT_EQ((*net)->registry().total_elements(), estimate->parameters);
    }
    auto engine = zero::ZeroEngine::Create(*zero_options, **net, *groups, **device);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    ASSERT_TRUE((*engine)->InitializeParameters(7).ok());
    MemoryLedger::Global().ResetPeaks();
    const int64_t batch = config->batch.micro_batch_per_gpu;
    const int64_t seq = config->model.seq_len;
    std::mt19937 random(100 + groups->coords().data);  // the same tokens on the tensor ranks
    std::uniform_int_distribution<int32_t> token(0, 510);
    std::vector<int32_t> inputs(batch * seq), targets(batch * seq);
    for (int step = 0; step < 2; ++step) {
      for (int micro = 0; micro < 2; ++micro) {
        for (int32_t& t : inputs) t = token(random);
        for (int32_t& t : targets) t = token(random);
        auto loss = (*engine)->ForwardBackward(inputs.data(), targets.data(), batch, seq, 0.5);
        ASSERT_TRUE(loss.ok()) << loss.status().ToString();
      }
      auto stepped = (*engine)->Step({.lr = 1e-3, .loss_scale = 1.0, .max_grad_norm = 1.0});
      ASSERT_TRUE(stepped.ok()) << stepped.status().ToString();
    }
  }
  const std::vector<PeakRow> rows = ComparePeaks(*estimate, MemoryLedger::Global().Snapshot());
  SCOPED_TRACE(fmt::format("stage {} {}{} at tensor 2 x data {}, rank {}\n{}", c.stage, c.precision,
                           c.sequence_parallel ? " sequence parallel" : "", data,
                           TestWorld().rank(), FormatPeakComparison(rows)));
  if (std::getenv("SLUICE_ESTIMATE_VERBOSE") != nullptr && TestWorld().rank() == 0) {
    std::printf("stage %d %s%s tp 2 x dp %d\n%s", c.stage, c.precision.c_str(),
                c.sequence_parallel ? " sp" : "", data, FormatPeakComparison(rows).c_str());
  }
  for (const PeakRow& row : rows) {
    if (row.tier != MemoryTier::kDevice) continue;
    const double measured = static_cast<double>(row.measured);
    const double predicted = static_cast<double>(row.predicted);
    if (!row.category.has_value()) {
      EXPECT_LE(measured, 1.10 * predicted) << "device total";
      EXPECT_GE(measured, 0.80 * predicted) << "device total";
    } else {
      EXPECT_NEAR(measured, predicted, 0.10 * predicted) << MemoryCategoryName(*row.category);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Stages, TensorParallelZeroEngineTest,
                         ::testing::Values(EngineCase{0, "f32", false}, EngineCase{2, "f32", false},
                                           EngineCase{3, "bf16", false}, EngineCase{1, "f32", true},
                                           EngineCase{3, "f32", true}),
                         [](const ::testing::TestParamInfo<EngineCase>& info) {
                           return fmt::format("stage{}_{}{}", info.param.stage,
                                              info.param.precision,
                                              info.param.sequence_parallel ? "_sp" : "");
                         });

}  // namespace
}  // namespace sluice::estimate
