// `sluice convert` end to end: exit codes, output and the file it writes.
#include <gtest/gtest.h>

#include <cstdio>

#include "engine/checkpoint/safetensors_file.h"
#include "tests/checkpoint/checkpoint_test_util.h"
#include "tests/common/run_command.h"

namespace sluice::checkpoint {
namespace {

using test_cli::CommandResult;
using test_cli::RunSluice;

using testing::TempDir;

TEST(ConvertCliTest, ConvertsLatestCheckpointOfARunDirectory) {
  TempDir tmp;
  const auto model = testing::SmallModel();
  ASSERT_TRUE(testing::SaveWorld(tmp.path() / "run" / "checkpoints", 30, 2, model, 4).all_ok());
  const auto out = tmp.path() / "out.safetensors";
  CommandResult r = RunSluice(
      fmt::format("convert {} --out {} --dtype fp32", (tmp.path() / "run").string(), out.string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("converted step 30"), std::string::npos) << r.output;
  auto file = SafetensorsFile::Open(out);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  ASSERT_EQ((*file)->tensors().size(), model.size());
  // c_attn is a GPT-2 Conv1D weight: [24, 8] in Sluice, [8, 24] in the file.
  EXPECT_EQ((*file)->Find("transformer.h.0.attn.c_attn.weight")->shape,
            (std::vector<int64_t>{8, 24}));
  EXPECT_EQ((*file)->Find("transformer.wte.weight")->dtype, SafetensorsDType::kF32);

  r = RunSluice(
      fmt::format("convert {} --out {} --dtype bf16", (tmp.path() / "run").string(), out.string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ((*SafetensorsFile::Open(out))->Find("transformer.wte.weight")->dtype,
            SafetensorsDType::kBF16);
  // Without --dtype: the master weights' own precision.
  r = RunSluice(fmt::format("convert {} --out {}", (tmp.path() / "run").string(), out.string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ((*SafetensorsFile::Open(out))->Find("transformer.wte.weight")->dtype,
            SafetensorsDType::kF32);
}

TEST(ConvertCliTest, ErrorsExitOneWithTheReason) {
  TempDir tmp;
  CommandResult r = RunSluice(fmt::format("convert {} --out {}", (tmp.path() / "none").string(),
                                          (tmp.path() / "x.safetensors").string()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("does not exist"), std::string::npos) << r.output;
  // Without --out only a run directory has a default (RUN_DIR/hf).
  r = RunSluice(fmt::format("convert {}", tmp.path().string()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--out"), std::string::npos) << r.output;
  r = RunSluice(fmt::format("convert {} --out {} --dtype fp16", tmp.path().string(),
                            (tmp.path() / "x.safetensors").string()));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_FALSE(std::filesystem::exists(tmp.path() / "x.safetensors"));
}

}  // namespace
}  // namespace sluice::checkpoint
