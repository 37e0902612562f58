// The built `sluice estimate` of a pipelined config: the per-stage table, the schedule's timeline
// and bubble, the JSON record's pipeline section, pipeline.stages from the config, and the
// refusals.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tests/common/run_command.h"

namespace sluice::estimate {
namespace {

using test_cli::CommandResult;
using test_cli::RunSluice;
using test_cli::SourcePath;

// llama_tiny.yaml: 4 layers, micro-batch 4, gradient accumulation 4 on one data-parallel rank.
std::string PipelineEstimateCommand(const std::string& args) {
  return "estimate --config " + SourcePath("configs/llama_tiny.yaml") + " " + args;
}

TEST(EstimatePipelineCliTest, PrintsEachStageAndTheScheduleTimeline) {
  const CommandResult r =
      RunSluice(PipelineEstimateCommand("--pipeline-stages 2 --schedule gpipe --micro-batches 4"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* text :
       {"Pipeline: 2 stage(s) x 1 data-parallel rank(s) = 2 ranks; gpipe schedule",
        "pipeline step: makespan", "stage 0   F0 F1 F2 F3", "stage 1   .  F0 F1 F2 F3 B0",
        "bubble 20.0%", "(largest)", "pipeline send buffers", "in detail"}) {
    EXPECT_NE(r.output.find(text), std::string::npos) << text << "\n" << r.output;
  }
}

TEST(EstimatePipelineCliTest, RecordsThePipelineInTheJson) {
  const CommandResult r =
      RunSluice(PipelineEstimateCommand("--pipeline-stages 2 --ranks 4 --json"), "",
                /*merge_stderr=*/false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  const nlohmann::json& p = j["pipeline"];
  EXPECT_EQ(p["stages"], 2);
  EXPECT_EQ(p["data_parallel"], 2);
  EXPECT_EQ(p["schedule"], "1f1b");
  // train_batch_size 16 = micro 4 x accumulation x 2 data-parallel ranks: 2 micro-batches.
  EXPECT_EQ(p["micro_batches"], 2);
  ASSERT_EQ(p["per_stage"].size(), 2u);
  EXPECT_EQ(p["per_stage"][0]["in_flight"], 2);  // 1F1B: min(P - r, M)
  EXPECT_EQ(p["per_stage"][1]["in_flight"], 1);
  EXPECT_GT(p["bubble_fraction"].get<double>(), 0.0);
  const int worst = p["worst_stage"].get<int>();
  EXPECT_EQ(j["per_rank"]["device"]["total"], p["per_stage"][worst]["device"]);
}

TEST(EstimatePipelineCliTest, TakesTheStagesFromTheConfig) {
  const CommandResult r = RunSluice(
      PipelineEstimateCommand("--set pipeline.stages=4 --schedule zb-h1 --micro-batches 8"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Pipeline: 4 stage(s)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("stage 3   .  .  .  F0 B0 F1 B1"), std::string::npos) << r.output;
}

// The config's schedule, chunks and partition method when no flag gives them; the type and
// time methods (FLOPs standing in for the times training measures).
TEST(EstimatePipelineCliTest, TakesTheScheduleAndPartitionFromTheConfig) {
  CommandResult r = RunSluice(
      PipelineEstimateCommand("--set pipeline.stages=2 --set pipeline.schedule=interleaved-1f1b "
                              "--set pipeline.partition_method=type:DecoderBlock"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* text : {"interleaved-1f1b schedule with 2 chunks per stage",
                           "layers partitioned by \"type:DecoderBlock\""}) {
    EXPECT_NE(r.output.find(text), std::string::npos) << text << "\n" << r.output;
  }
  r = RunSluice(PipelineEstimateCommand("--pipeline-stages 2 --partition-method time"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("FLOPs standing in for the times training measures"), std::string::npos)
      << r.output;
  r = RunSluice(PipelineEstimateCommand("--pipeline-stages 2 --partition-method type:attention"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("matches none of the model's layer classes"), std::string::npos)
      << r.output;
}

TEST(EstimatePipelineCliTest, RefusesWhatThePipelineCannotHold) {
  CommandResult r = RunSluice(PipelineEstimateCommand("--pipeline-stages 5"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--pipeline-stages = 5 is more than the model's 4 decoder layers"),
            std::string::npos)
      << r.output;
  r = RunSluice(PipelineEstimateCommand("--pipeline-stages 2 --ranks 3"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--ranks 3 is not a multiple"), std::string::npos) << r.output;
  r = RunSluice(PipelineEstimateCommand("--schedule gpipe"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--pipeline-stages N"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace sluice::estimate
