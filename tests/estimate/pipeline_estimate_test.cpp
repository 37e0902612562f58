// The estimate of a pipelined config: each stage's units against the registry of a real
// Model::CreateStage, parameters over the stages against the whole model's, the activations the
// schedules keep in flight per stage against the closed forms (GPipe M, 1F1B min(P - r, M),
// interleaved per Megatron's warm-up), ZeRO over the stage's
// data-parallel group, and the node budgets over every stage.
#include "engine/estimate/pipeline_estimate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>

#include "engine/estimate/model_layout.h"
#include "engine/model/buffer.h"
#include "engine/model/model.h"
#include "engine/train/precision.h"
#include "engine/train/run_setup.h"
#include "tests/common/test_ops.h"
#include "tests/estimate/estimate_test_util.h"

namespace sluice::estimate {
namespace {

using parallel::PartitionMethod;
using parallel::ScheduleKind;
using testing::BaseYaml;
using testing::LoadYaml;

// BaseYaml's GPT-2 with `n_layer` layers, its head untied unless `tied`.
std::string Yaml(int n_layer, const std::string& zero = "stage: 0", bool tied = false) {
  std::string yaml = BaseYaml(zero);
  for (auto [from, to] :
       {std::pair<std::string, std::string>{"n_layer: 4", "n_layer: " + std::to_string(n_layer)},
        {"seq_len: 128}",
         std::string("seq_len: 128, tie_embeddings: ") + (tied ? "true" : "false") + "}"}}) {
    const size_t at = yaml.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) yaml.replace(at, from.size(), to);
  }
  return yaml;
}

PipelineEstimate EstimateStages(const Config& config, int data_parallel,
                                const PipelineEstimateOptions& pipeline,
                                const EstimateOptions& options = {}) {
  Result<PipelineEstimate> p = EstimatePipeline(config, data_parallel, pipeline, options);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? *std::move(p) : PipelineEstimate{};
}

model::ModelOptions ModelOf(const Config& config) {
  Result<model::ModelOptions> o =
      train::ModelOptionsFromConfig(config, train::PrecisionOf(config.model.dtype));
  EXPECT_TRUE(o.ok()) << o.status().ToString();
  return o.ok() ? *o : model::ModelOptions{};
}

TEST(PipelineEstimateTest, StagesOwnTheRegistryOfARealStageAndSumToTheModel) {
  const Config config = LoadYaml(Yaml(7));
  model::ModelOptions options = ModelOf(config);
  options.param_dtype = DType::kF32;  // the registry of a float model; counts do not change
  for (const char* method : {"uniform", "parameters", "type:block", "time"}) {
    for (int stages : {1, 2, 3, 4, 7}) {
      for (int chunks : {1, 2}) {
        if (stages * chunks > 7 || (chunks > 1 && stages == 1)) continue;
        SCOPED_TRACE(::testing::Message() << method << ", " << stages << " x " << chunks);
        PipelineEstimateOptions pipeline{
            .stages = stages,
            .schedule = chunks > 1 ? ScheduleKind::kInterleaved1F1B : ScheduleKind::kOneFOneB,
            .micro_batches = 4 * stages,
            .chunks = chunks,
            .partition = *parallel::ParsePartitionMethod(method, "k")};
        const PipelineEstimate p = EstimateStages(config, 1, pipeline);
        ASSERT_EQ(p.stages.size(), static_cast<size_t>(stages));
        int64_t sum = 0;
        for (const StageEstimate& s : p.stages) {
          // A rank's chunks are one model (Model::CreateChunks), as the trainer builds them.
          ASSERT_EQ(s.shape.chunks.size(), static_cast<size_t>(chunks));
          model::HostAllocator host;
          auto net = model::Model<float>::CreateChunks(options, s.shape.chunks, host,
                                                       sluice::testing::OpsFor<float>());
          ASSERT_TRUE(net.ok()) << net.status().ToString();
          EXPECT_EQ(s.parameters, (*net)->registry().total_elements()) << "stage " << s.shape.stage;
          sum += s.parameters;
        }
        EXPECT_EQ(sum, p.parameters);
        EXPECT_EQ(sum, model::CountParameters(options));
      }
    }
  }
}

TEST(PipelineEstimateTest, ATiedHeadAwayFromTheEmbeddingsCountsACopy) {
  const Config config = LoadYaml(Yaml(4, "stage: 0", /*tied=*/true));
  const model::ModelOptions options = ModelOf(config);
  const PipelineEstimate p = EstimateStages(config, 1, {.stages = 2, .micro_batches = 2});
  int64_t sum = 0;
  for (const StageEstimate& s : p.stages) sum += s.parameters;
  EXPECT_EQ(sum, model::CountParameters(options) + options.vocab_size * options.d_model);
  const std::vector<std::string>& notes = p.stages.back().estimate.notes;
  EXPECT_TRUE(std::any_of(notes.begin(), notes.end(), [](const std::string& note) {
    return note.find("copy of the token table") != std::string::npos;
  }));
}

TEST(PipelineEstimateTest, InFlightMicroBatchesFollowTheSchedule) {
  const Config config = LoadYaml(Yaml(8));
  for (int stages : {2, 4}) {
    for (int m : {2, 4, 8}) {
      SCOPED_TRACE(::testing::Message() << "P " << stages << ", M " << m);
      const PipelineEstimate gpipe = EstimateStages(
          config, 1, {.stages = stages, .schedule = ScheduleKind::kGPipe, .micro_batches = m});
      const PipelineEstimate one_f_one_b =
          EstimateStages(config, 1, {.stages = stages, .micro_batches = m});
      const PipelineEstimate zb = EstimateStages(
          config, 1,
          {.stages = stages, .schedule = ScheduleKind::kZeroBubbleH1, .micro_batches = m});
      for (int r = 0; r < stages; ++r) {
        EXPECT_EQ(gpipe.stages[r].shape.in_flight, m) << "stage " << r;
        EXPECT_EQ(one_f_one_b.stages[r].shape.in_flight, std::min(stages - r, m)) << "stage " << r;
        EXPECT_LE(zb.stages[r].shape.in_flight, std::min(stages, m)) << "stage " << r;
        // Same layers, more held micro-batches: GPipe's activations are at least 1F1B's.
        EXPECT_GE(gpipe.stages[r].estimate.bytes(MemoryTier::kDevice, MemoryCategory::kActivations),
                  one_f_one_b.stages[r].estimate.bytes(MemoryTier::kDevice,
                                                       MemoryCategory::kActivations));
      }
      if (m % stages == 0) {
        // Megatron's interleaved warm-up: stage r runs (P - r - 1) x 2 + (v - 1) x P forwards
        // before its first backward, with one more in flight; all M x v when M = P.
        for (int v : {2, 4}) {
          if (stages * v > 8) continue;
          const PipelineEstimate interleaved =
              EstimateStages(config, 1,
                             {.stages = stages,
                              .schedule = ScheduleKind::kInterleaved1F1B,
                              .micro_batches = m,
                              .chunks = v});
          for (int r = 0; r < stages; ++r) {
            EXPECT_EQ(interleaved.stages[r].shape.chunks.size(), static_cast<size_t>(v));
            const int warmup = m == stages ? m * v : (stages - r - 1) * 2 + (v - 1) * stages;
            EXPECT_EQ(interleaved.stages[r].shape.in_flight, std::min(warmup + 1, m * v))
                << "stage " << r << ", v " << v;
          }
        }
      }
    }
  }
}

TEST(PipelineEstimateTest, ActivationsGrowByOneMicroBatchPerInFlight) {
  const Config config = LoadYaml(Yaml(4));
  const model::ModelOptions options = ModelOf(config);
  const int64_t tokens = config.batch.micro_batch_per_gpu * config.model.seq_len;
  auto activations = [&](int m, int r) {
    const PipelineEstimate p = EstimateStages(
        config, 1, {.stages = 2, .schedule = ScheduleKind::kGPipe, .micro_batches = m});
    return p.stages[r].estimate.bytes(MemoryTier::kDevice, MemoryCategory::kActivations);
  };
  // Each GPipe micro-batch more on the last stage keeps its two blocks, its input and the head.
  const ActivationEstimate one =
      EstimateActivations(options, config.batch.micro_batch_per_gpu, config.model.seq_len);
  const int64_t held_last =
      4 * tokens * options.d_model + 2 * one.block_saved_bytes + one.head_saved_bytes;
  EXPECT_EQ(activations(5, 1) - activations(4, 1), held_last);
  const int64_t held_first = one.embeddings_saved_bytes + 2 * one.block_saved_bytes;
  EXPECT_EQ(activations(5, 0) - activations(4, 0), held_first);

  // The whole model as one stage with one micro-batch in flight is the whole-model estimate.
  StageShape whole{.chunks = {model::WholeModelStage(options)}, .in_flight = 1};
  const ActivationEstimate stage = EstimateStageActivations(
      options, whole, config.batch.micro_batch_per_gpu, config.model.seq_len);
  EXPECT_EQ(stage.peak_bytes, one.peak_bytes);
  model::ModelOptions checkpointed = options;
  checkpointed.activation_checkpointing = true;
  EXPECT_EQ(
      EstimateStageActivations(checkpointed, whole, config.batch.micro_batch_per_gpu,
                               config.model.seq_len)
          .peak_bytes,
      EstimateActivations(checkpointed, config.batch.micro_batch_per_gpu, config.model.seq_len)
          .peak_bytes);
}

TEST(PipelineEstimateTest, ZeroShardsEachStageOverItsDataParallelGroup) {
  const Config config = LoadYaml(Yaml(4, "stage: 3"), /*world_size=*/2);
  const PipelineEstimate one = EstimateStages(config, 1, {.stages = 2, .micro_batches = 2});
  const PipelineEstimate two = EstimateStages(config, 2, {.stages = 2, .micro_batches = 2});
  EXPECT_EQ(two.world_size(), 4);
  for (int r = 0; r < 2; ++r) {
    const MemoryEstimate& e = two.stages[r].estimate;
    EXPECT_EQ(e.world_size, 2);
    EXPECT_EQ(one.stages[r].estimate.shard_elements, one.stages[r].parameters);
    EXPECT_GE(2 * e.shard_elements, two.stages[r].parameters);
    EXPECT_LT(e.shard_elements, one.stages[r].estimate.shard_elements);
  }
}

TEST(PipelineEstimateTest, TheLargestStageDecidesTheDeviceAndEveryStageTheHost) {
  const Config config =
      LoadYaml(Yaml(4, "stage: 2, offload_optimizer: {device: cpu}"), /*world_size=*/3);
  const PipelineEstimate p = EstimateStages(config, 3, {.stages = 2, .micro_batches = 4});
  int64_t device = 0;
  int64_t host = 0;
  for (const StageEstimate& s : p.stages) {
    device = std::max(device, s.estimate.tier_bytes(MemoryTier::kDevice));
    host += s.estimate.host_bytes();
  }
  EXPECT_EQ(p.stages[p.worst_stage].estimate.tier_bytes(MemoryTier::kDevice), device);
  const FitReport fit = CheckPipelineFit(config, p);
  ASSERT_GE(fit.checks.size(), 2u);
  EXPECT_EQ(fit.checks[0].name, "device");
  EXPECT_EQ(fit.checks[0].need, device);
  EXPECT_EQ(fit.checks[1].name, "host");
  EXPECT_GT(host, 0);
  EXPECT_EQ(fit.checks[1].need, 3 * host);
  EXPECT_NE(fit.checks[1].limit_source.find("6 rank(s)"), std::string::npos)
      << fit.checks[1].limit_source;
}

TEST(PipelineEstimateTest, RefusesWhatThePipelineCannotHold) {
  const Config config = LoadYaml(Yaml(4));
  Result<PipelineEstimate> r = EstimatePipeline(config, 1, {.stages = 5, .micro_batches = 4});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("pipeline.stages = 5"), std::string::npos)
      << r.status().message();
  r = EstimatePipeline(config, 1,
                       {.stages = 2,
                        .schedule = ScheduleKind::kInterleaved1F1B,
                        .micro_batches = 4,
                        .chunks = 4});  // 8 virtual stages, 4 layers
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("2 x 4 chunks = 8"), std::string::npos)
      << r.status().message();
  r = EstimatePipeline(config, 1,
                       {.stages = 2,
                        .schedule = ScheduleKind::kInterleaved1F1B,
                        .micro_batches = 3});  // not a multiple of the stages
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("interleaved"), std::string::npos) << r.status().message();
  EXPECT_FALSE(ParseScheduleKind("pipedream", "--schedule").ok());
  EXPECT_EQ(*ParseScheduleKind("interleaved", "--schedule"), ScheduleKind::kInterleaved1F1B);
}

}  // namespace
}  // namespace sluice::estimate
