// The tensor-parallel estimate without ranks: the pure layout (parallel::TensorShardingOf) over
// every parameter of a real whole model covers it exactly once (split pieces summed over the
// tensor ranks, replicated parameters once), the estimate's parameters, gradients and optimizer
// state are tensor rank 0's pieces sharded by ZeRO, the activations fall by the amounts the
// split gives, and pipeline and tensor sizes compose. tensor_parallel_estimate_test checks the
// same layout and activations against real tensor-parallel models under mpirun.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/estimate/activation_estimate.h"
#include "engine/estimate/budget_guard.h"
#include "engine/estimate/memory_estimate.h"
#include "engine/estimate/model_layout.h"
#include "engine/estimate/pipeline_estimate.h"
#include "engine/model/buffer.h"
#include "engine/model/model.h"
#include "engine/parallel/tensor_layout.h"
#include "engine/train/run_setup.h"
#include "tests/common/test_ops.h"
#include "tests/estimate/estimate_test_util.h"

namespace sluice::estimate {
namespace {

using testing::BaseYaml;
using testing::LoadYaml;

model::ModelOptions TensorOptions(model::Family family, bool tied) {
  model::ModelOptions o = train::DefaultModelOptions();
  o.family = family;
  o.n_layer = 3;
  o.n_head = 8;
  o.n_kv_head = family == model::Family::kLlama ? 4 : 8;
  o.d_model = 32;
  o.d_ff = 80;
  o.vocab_size = 50;  // over 4 ranks: 13, 13, 12, 12
  o.seq_len = 16;
  o.tie_embeddings = tied;
  return o;
}

parallel::TensorLayout LayoutOf(model::ModelOptions o, int64_t size, int64_t rank,
                                bool vocab_parallel = true) {
  o.tensor_parallel_size = size;
  o.tensor_parallel_rank = rank;
  return parallel::TensorLayoutOf(o, vocab_parallel);
}

class TensorLayoutCoverage
    : public ::testing::TestWithParam<std::tuple<model::Family, bool, int64_t, bool>> {};

TEST_P(TensorLayoutCoverage, PiecesOverTheTensorRanksAndReplicasOnceAreTheWholeModel) {
  const auto [family, tied, size, vocab_parallel] = GetParam();
  const model::ModelOptions options = TensorOptions(family, tied);
  model::HostAllocator host;
  auto whole = model::Model<float>::Create(options, host, sluice::testing::OpsFor<float>(),
                                           model::ModelStorage::kExternal);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  const model::ParameterRegistry& registry = (*whole)->registry();

  int64_t covered = 0;                  // split pieces over the ranks + replicated once
  std::vector<int64_t> per_rank(size);  // each rank's elements
  for (const model::ParameterInfo& info : registry.parameters()) {
    if (info.is_alias()) continue;  // a tied head: the token table's
    SCOPED_TRACE(info.name);
    const std::string& n = info.name;
    int64_t split_sum = 0;
    int64_t next_start = 0;
    for (int64_t r = 0; r < size; ++r) {
      auto s =
          parallel::TensorShardingOf(LayoutOf(options, size, r, vocab_parallel), n, info.shape);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      EXPECT_EQ(s->global_shape, info.shape);
      const int64_t local = s->LocalShape().numel();
      per_rank[r] += local;
      if (s->split()) {
        split_sum += local;
        if (s->blocks.empty()) {  // pieces follow each other along the dimension
          EXPECT_EQ(s->PieceStart(), next_start);
          next_start += s->PieceSize();
        }
      } else {
        EXPECT_TRUE(s->replicated());
        EXPECT_EQ(local, info.numel);
      }
      // The plan's rules, by name.
      const bool vocab =
          n.ends_with("wte.weight") || n.ends_with("embed_tokens.weight") || n == "lm_head.weight";
      const bool row = n.ends_with("c_proj.weight") || n.ends_with("o_proj.weight") ||
                       n.ends_with("down_proj.weight");
      const bool column = n.ends_with("c_attn.weight") || n.ends_with("c_attn.bias") ||
                          n.ends_with("c_fc.weight") || n.ends_with("c_fc.bias") ||
                          n.ends_with("q_proj.weight") || n.ends_with("k_proj.weight") ||
                          n.ends_with("v_proj.weight") || n.ends_with("gate_proj.weight") ||
                          n.ends_with("up_proj.weight");
      if (vocab) {
        EXPECT_EQ(s->split(), vocab_parallel);
        if (vocab_parallel) {
          EXPECT_EQ(s->dim, 0);
          EXPECT_EQ(s->PieceSize(), options.vocab_size / size + (r < options.vocab_size % size));
        }
      } else if (row) {
        EXPECT_EQ(s->dim, 1);
      } else if (column) {
        EXPECT_EQ(s->dim, 0);
      } else {
        EXPECT_TRUE(s->replicated());  // norms, positions, row-parallel biases
      }
    }
    covered += split_sum > 0 ? split_sum : info.numel;
    if (split_sum > 0) {
      EXPECT_EQ(split_sum, info.numel);
    }
  }
  EXPECT_EQ(covered, model::CountParameters(options));
  EXPECT_EQ(covered, registry.total_elements());

  // DescribeUnits at each rank holds that rank's elements.
  for (int64_t r = 0; r < size; ++r) {
    model::ModelOptions o = options;
    o.tensor_parallel_size = size;
    o.tensor_parallel_rank = r;
    EXPECT_EQ(SummarizeLayout(DescribeUnits(o, vocab_parallel)).parameters, per_rank[r])
        << "rank " << r;
  }
  // Rank 0, the estimate's, holds the most (its vocabulary piece is the longest).
  for (int64_t r = 1; r < size; ++r) EXPECT_GE(per_rank[0], per_rank[r]);
}

INSTANTIATE_TEST_SUITE_P(
    FamiliesAndSizes, TensorLayoutCoverage,
    ::testing::Combine(::testing::Values(model::Family::kGpt2, model::Family::kLlama),
                       ::testing::Bool(), ::testing::Values(2, 4), ::testing::Bool()));

// BaseYaml's GPT-2 at tensor size t, as `sluice estimate --tensor-parallel t` loads it.
Config TensorConfig(const std::string& zero, int tensor, int data, const std::string& extra = "") {
  Config config = LoadYaml(BaseYaml(zero, extra), data);
  config.parallel.tensor = tensor;
  config.world_size = data * tensor;
  config.dp_world_size = data;
  return config;
}

// Σ over the whole model's parameters of tensor rank 0's piece, each cut into ceil(./n).
struct RankZero {
  int64_t elements = 0;
  int64_t shard = 0;
};

RankZero RankZeroPieces(const Config& config, int tensor, int n) {
  auto options = train::ModelOptionsFromConfig(config, train::Precision::kF32);
  SLUICE_CHECK(options.ok()) << options.status().ToString();
  options->tensor_parallel_size = 1;
  options->param_dtype = DType::kF32;
  model::HostAllocator host;
  auto whole = model::Model<float>::Create(*options, host, sluice::testing::OpsFor<float>(),
                                           model::ModelStorage::kExternal);
  SLUICE_CHECK(whole.ok()) << whole.status().ToString();
  RankZero z;
  for (const model::ParameterInfo& info : (*whole)->registry().parameters()) {
    if (info.is_alias()) continue;
    auto s = parallel::TensorShardingOf(LayoutOf(*options, tensor, 0), info.name, info.shape);
    SLUICE_CHECK(s.ok());
    const int64_t local = s->LocalShape().numel();
    z.elements += local;
    z.shard += (local + n - 1) / n;
  }
  return z;
}

TEST(TensorEstimate, ModelStatesAreTensorRankZerosPiecesShardedOverTheDataRanks) {
  for (const int stage : {0, 1, 2, 3}) {
    for (const int data : {1, 3}) {
      SCOPED_TRACE(::testing::Message() << "stage " << stage << ", " << data << " data ranks");
      const Config config = TensorConfig(fmt::format("stage: {}", stage), 2, data);
      auto e = EstimateMemory(config, data);
      ASSERT_TRUE(e.ok()) << e.status().ToString();
      auto whole_config = config;
      whole_config.parallel.tensor = 1;
      auto w = EstimateMemory(whole_config, data);
      ASSERT_TRUE(w.ok()) << w.status().ToString();

      const RankZero z = RankZeroPieces(config, 2, stage == 0 ? 1 : data);
      EXPECT_EQ(e->tensor_parallel, 2);
      EXPECT_EQ(e->ranks(), 2 * data);
      EXPECT_EQ(e->parameters, z.elements);
      EXPECT_EQ(e->model_parameters, w->parameters);
      EXPECT_EQ(e->shard_elements, z.shard);
      // bf16: master, exp_avg, exp_avg_sq in fp32 over the optimizer's elements.
      EXPECT_EQ(e->bytes(MemoryTier::kDevice, MemoryCategory::kOptimizer),
                12 * (stage == 0 ? z.elements : z.shard));
      // Each model state at most the whole's, and above half of it only by what stays whole
      // (norms, positions, row-parallel biases: small here).
      for (MemoryCategory category :
           {MemoryCategory::kParams, MemoryCategory::kGrads, MemoryCategory::kOptimizer}) {
        const int64_t split = e->bytes(MemoryTier::kDevice, category);
        const int64_t full = w->bytes(MemoryTier::kDevice, category);
        EXPECT_LT(split, full) << MemoryCategoryName(category);
        EXPECT_LT(split, full / 2 + full / 10) << MemoryCategoryName(category);
      }
    }
  }
}

// The budget check before training: a model whose rank fits the device only when split is
// refused whole and accepted at tensor size 2.
TEST(TensorEstimate, TheBudgetCheckBeforeTrainingAcceptsAModelThatFitsOnlyWhenSplit) {
  Config whole = TensorConfig("stage: 0", /*tensor=*/1, /*data=*/1);
  Config split = TensorConfig("stage: 0", /*tensor=*/2, /*data=*/1);
  auto w = EstimateMemory(whole, 1);
  auto s = EstimateMemory(split, 1);
  ASSERT_TRUE(w.ok() && s.ok());
  const int64_t between =
      (w->tier_bytes(MemoryTier::kDevice) + s->tier_bytes(MemoryTier::kDevice)) / 2;
  whole.device.memory_limit = between;
  split.device.memory_limit = between;
  const Status refused = CheckBudgetsBeforeAllocating(whole, 1);
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted) << refused.ToString();
  EXPECT_TRUE(CheckBudgetsBeforeAllocating(split, 1).ok());
  // Below the split's need too: refused, naming the grid.
  split.device.memory_limit = s->tier_bytes(MemoryTier::kDevice) - 1;
  const Status short_split = CheckBudgetsBeforeAllocating(split, 1);
  EXPECT_EQ(short_split.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(short_split.message().find("1 data-parallel x 2 tensor-parallel rank(s)"),
            std::string::npos)
      << short_split.ToString();
}

TEST(TensorEstimate, TheHostBudgetCountsEveryTensorRank) {
  const Config config =
      TensorConfig("stage: 2, offload_optimizer: {device: cpu}", /*tensor=*/2, /*data=*/2);
  auto e = EstimateMemory(config, 2);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  const FitReport fit = CheckFit(config, *e);
  ASSERT_GE(fit.checks.size(), 2u);
  EXPECT_EQ(fit.checks[1].need, 4 * e->host_bytes());
  EXPECT_NE(fit.checks[1].limit_source.find("all 4 rank(s)"), std::string::npos)
      << fit.checks[1].limit_source;
}

// BaseYaml's GPT-2 (L 4, d 128, 4 heads, d_ff 512, vocab 1000) at micro-batch 2 x seq 128: R =
// 256 rows. Inside the regions (per block: c_attn out and q, k, v 2R(3d), attention out R*d, lse
// R*h, c_fc out and GELU 2R*d_ff) and the logits (R*V) halve at t = 2; with sequence parallelism
// also the norms (2 per block, R*d + 2R each) and the residual sums (2R*d), while the head's
// gathered input adds R*d and its final norm halves.
TEST(TensorEstimate, ActivationsFallByTheSplitsShare) {
  auto base = train::ModelOptionsFromConfig(LoadYaml(BaseYaml()), train::Precision::kF32);
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  base->param_dtype = DType::kF32;
  const int64_t r = 256, d = 128, f = 512, h = 4, v = 1000, layers = 4;
  const ActivationEstimate whole = EstimateActivations(*base, 2, 128);
  model::ModelOptions tp = *base;
  tp.tensor_parallel_size = 2;
  const ActivationEstimate split = EstimateActivations(tp, 2, 128);
  tp.sequence_parallel = true;
  const ActivationEstimate sequence = EstimateActivations(tp, 2, 128);

  const int64_t inside = 2 * r * 3 * d + r * d + r * h + 2 * r * f;
  // The logits (R x V) outweigh an MLP gradient (R x d_ff) at the head: the peak is there.
  EXPECT_EQ(whole.peak_bytes - split.peak_bytes, 4 * (layers * inside / 2 + r * v / 2));
  const int64_t norm = r * d + 2 * r;
  EXPECT_EQ(split.peak_bytes - sequence.peak_bytes,
            4 * (layers * (norm + r * d) + norm / 2 - r * d));
  EXPECT_LT(sequence.peak_bytes, split.peak_bytes);
  // The scratch: the attention workspace of half the heads, the block backward's temporaries.
  EXPECT_LT(split.scratch_peak_bytes, whole.scratch_peak_bytes);
  // Without splitting the vocabulary (the cuda backend) the logits stay whole.
  const ActivationEstimate whole_vocab = EstimateActivations(tp, 2, 128, false);
  EXPECT_EQ(whole_vocab.head_saved_bytes - sequence.head_saved_bytes, 4 * (r * v - r * v / 2));
}

TEST(TensorEstimate, TensorAndPipelineSizesCompose) {
  const Config config = TensorConfig("stage: 1", /*tensor=*/2, /*data=*/2);
  PipelineEstimateOptions pipeline;
  pipeline.stages = 2;
  pipeline.micro_batches = 2;
  auto p = EstimatePipeline(config, 2, pipeline);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->tensor_parallel, 2);
  EXPECT_EQ(p->world_size(), 8);
  Config whole_config = config;
  whole_config.parallel.tensor = 1;
  auto w = EstimatePipeline(whole_config, 2, pipeline);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  // The same layers per stage (partitioned by the whole model's counts), each stage's pieces
  // below the whole stage's.
  EXPECT_EQ(p->bounds, w->bounds);
  for (size_t s = 0; s < p->stages.size(); ++s) {
    EXPECT_EQ(p->stages[s].estimate.tensor_parallel, 2);
    EXPECT_LT(p->stages[s].parameters, w->stages[s].parameters);
    EXPECT_EQ(p->stages[s].estimate.model_parameters, w->stages[s].parameters);
  }
  const FitReport fit = CheckPipelineFit(config, *p);
  EXPECT_NE(fit.checks[1].limit_source.find("for all 8 rank(s) (every stage)"), std::string::npos)
      << fit.checks[1].limit_source;
}

TEST(TensorEstimate, RefusesWhatTheSplitCannotTake) {
  // d_ff 512 and 4 heads do not split 3 ways.
  auto e = EstimateMemory(TensorConfig("stage: 0", 3, 1), 1);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("tensor_parallel.autotp_size = 3"), std::string::npos)
      << e.status().ToString();
  // Sequence parallelism: micro-batch 1 x seq 127 tokens do not divide by 2.
  Config odd = TensorConfig("stage: 0", 2, 1, "tensor_parallel: {sequence_parallel: true}\n");
  odd.batch.micro_batch_per_gpu = 1;
  odd.model.seq_len = 127;
  e = EstimateMemory(odd, 1);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("127 tokens"), std::string::npos) << e.status().ToString();
}

}  // namespace
}  // namespace sluice::estimate
