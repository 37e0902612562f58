// The pieces of training state a checkpoint carries besides the ZeRO state: the loss scaler's
// position and the metrics file a resumed run continues.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "engine/train/loss_scaler.h"
#include "engine/train/metrics_writer.h"
#include "tests/train/train_test_util.h"

namespace sluice::train {
namespace {

TEST(LossScalerStateTest, RestoredScalerFollowsTheSameSequence) {
  Fp16Config config = Config().fp16;
  config.loss_scale = 0;
  config.initial_scale_power = 10;
  config.loss_scale_window = 3;
  config.hysteresis = 2;
  config.min_loss_scale = 1;
  LossScaler original = LossScaler::FromConfig(config);
  const bool pattern[] = {true, false, false, true, true, false, false, false, false, true};
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(original.Update(pattern[i]).ok());
  // Through text, as a manifest stores it.
  const nlohmann::json saved = nlohmann::json::parse(original.SaveState().dump());
  LossScaler restored = LossScaler::FromConfig(config);
  ASSERT_TRUE(restored.RestoreState(saved).ok());
  EXPECT_EQ(restored.scale(), original.scale());
  for (int i = 5; i < 10; ++i) {
    ASSERT_TRUE(original.Update(pattern[i]).ok());
    ASSERT_TRUE(restored.Update(pattern[i]).ok());
    EXPECT_EQ(restored.scale(), original.scale()) << "update " << i;
    EXPECT_EQ(restored.hysteresis_left(), original.hysteresis_left()) << "update " << i;
    EXPECT_EQ(restored.iteration(), original.iteration()) << "update " << i;
  }
}

TEST(LossScalerStateTest, MalformedStateNamesTheField) {
  LossScaler scaler = LossScaler::Disabled();
  nlohmann::json state = nlohmann::json::parse(scaler.SaveState().dump());
  state.erase("hysteresis_left");
  Status status = scaler.RestoreState(state);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.ToString().find("hysteresis_left"), std::string::npos) << status.ToString();
  state = nlohmann::json::parse(scaler.SaveState().dump());
  state["scale"] = -1.0;
  EXPECT_FALSE(scaler.RestoreState(state).ok());
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(MetricsResumeTest, KeepsStepsUpToTheCheckpointAndAppends) {
  const std::string path = test_util::TempPath("metrics.jsonl");
  // Steps 1-5 of a run that was checkpointed at 3, and a torn last line of a crash.
  test_util::WriteFile(path,
                       "{\"step\":1,\"loss\":3.5}\n{\"step\":2,\"loss\":3.25}\n"
                       "{\"step\":3,\"loss\":3.0}\n{\"step\":4,\"loss\":2.75}\n"
                       "{\"step\":5,\"loss\":2.5}\n{\"step\":6,\"lo");
  Result<MetricsWriter> writer = MetricsWriter::OpenForResume(path, 3);
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  ASSERT_TRUE(writer->Write({{"step", 4}, {"loss", 2.0}}).ok());
  EXPECT_EQ(ReadAll(path),
            "{\"step\":1,\"loss\":3.5}\n{\"step\":2,\"loss\":3.25}\n{\"step\":3,\"loss\":3.0}\n"
            "{\"step\":4,\"loss\":2.0}\n");
}

TEST(MetricsResumeTest, StartsTheFileWhenThereIsNone) {
  const std::string path = test_util::TempPath("new_metrics.jsonl");
  std::remove(path.c_str());
  ::testing::internal::CaptureStderr();
  Result<MetricsWriter> writer = MetricsWriter::OpenForResume(path, 7);
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  ASSERT_TRUE(writer->Write({{"step", 8}}).ok());
  EXPECT_EQ(ReadAll(path), "{\"step\":8}\n");
  // Not silently: the curve before the checkpoint is gone, and the warning says so.
  EXPECT_EQ(writer->missing_records(), 7);
  EXPECT_NE(log.find(path + " is missing"), std::string::npos) << log;
  EXPECT_NE(log.find("lacks steps 1-7"), std::string::npos) << log;
}

TEST(MetricsResumeTest, NamesTheStepsAShortenedFileLacks) {
  const std::string path = test_util::TempPath("metrics.jsonl");
  test_util::WriteFile(path, "{\"step\":1}\n{\"step\":2}\n{\"step\":5}\n{\"step\":6}\n");
  ::testing::internal::CaptureStderr();
  Result<MetricsWriter> writer = MetricsWriter::OpenForResume(path, 8);
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  EXPECT_EQ(writer->missing_records(), 4);
  EXPECT_NE(log.find("has records of 4 of the 8 steps before the checkpoint"), std::string::npos)
      << log;
  EXPECT_NE(log.find("lacks steps 3-4, 7-8"), std::string::npos) << log;
  // A complete file: nothing to say.
  ::testing::internal::CaptureStderr();
  writer = MetricsWriter::OpenForResume(path, 2);
  EXPECT_TRUE(::testing::internal::GetCapturedStderr().empty());
  ASSERT_TRUE(writer.ok());
  EXPECT_EQ(writer->missing_records(), 0);
}

}  // namespace
}  // namespace sluice::train
