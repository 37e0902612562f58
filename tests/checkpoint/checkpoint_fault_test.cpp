// Corrupt, truncated, foreign and missing checkpoint files are refused with errors that name the
// file, the tensor, the field and the offset; a save that fails on one rank is abandoned by all.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "engine/checkpoint/checkpoint_dir.h"
#include "engine/checkpoint/checkpoint_reader.h"
#include "engine/checkpoint/shard_reader.h"
#include "runtime/durable_file.h"
#include "tests/checkpoint/checkpoint_test_util.h"

namespace sluice::checkpoint {
namespace {

using testing::SaveWorld;
using testing::SmallModel;
using testing::TempDir;

void FlipBit(const std::filesystem::path& path, uint64_t offset, int bit) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << path;
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ (1 << bit));
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

void WriteU32(const std::filesystem::path& path, uint64_t offset, uint32_t value) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(reinterpret_cast<const char*>(&value), sizeof(value));
}

bool Contains(const Status& s, std::string_view text) {
  return s.message().find(text) != std::string::npos;
}

class CheckpointFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(SaveWorld(tmp_.path(), 3, 3, model_, 11).all_ok());
    dir_ = tmp_.path() / "step_3";
  }
  Status ReadOne(StateKind kind, size_t tensor) {
    auto ckpt = CheckpointReader::Open(dir_);
    if (!ckpt.ok()) return ckpt.status();
    std::vector<float> out(model_[tensor].shape.numel());
    return (*ckpt)->ReadRange(kind, model_[tensor].name, 0, out.size(), out.data());
  }

  TempDir tmp_;
  std::vector<testing::TensorSpec> model_ = SmallModel();
  std::filesystem::path dir_;
};

TEST_F(CheckpointFaultTest, FlippedDataBitNamesFileTensorBlockAndOffset) {
  const auto path = dir_ / "optimizer.rank00001.bin";
  auto file = ShardFileReader::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  const ShardEntry* entry = (*file)->Find(StateKind::kExpAvg, model_[2].name);
  ASSERT_NE(entry, nullptr);
  const uint64_t offset = entry->data_offset + 70;  // block 1 of 64-byte blocks
  file->reset();
  FlipBit(path, offset, 3);

  Status s = ReadOne(StateKind::kExpAvg, 2);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(s, path.string())) << s.message();
  EXPECT_TRUE(Contains(s, "exp_avg/" + model_[2].name)) << s.message();
  EXPECT_TRUE(Contains(s, "block 1")) << s.message();
  EXPECT_TRUE(Contains(s, "checksum mismatch")) << s.message();
  // The other kinds, and the master weights in their own files, still read.
  EXPECT_TRUE(ReadOne(StateKind::kExpAvgSq, 2).ok());
  EXPECT_TRUE(ReadOne(StateKind::kMasterWeights, 2).ok());
  auto ckpt = CheckpointReader::Open(dir_);
  ASSERT_TRUE(ckpt.ok());
  EXPECT_EQ((*ckpt)->VerifyAll().code(), StatusCode::kDataLoss);
}

TEST_F(CheckpointFaultTest, TruncatedFileIsReportedBeforeAnyRead) {
  const auto path = dir_ / "weights.rank00002.bin";
  const auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size - 5);
  Status s = ReadOne(StateKind::kMasterWeights, 0);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(s, path.string())) << s.message();
  EXPECT_TRUE(Contains(s, "truncated")) << s.message();
  EXPECT_TRUE(Contains(s, "world.ranks[2].files.weights.bytes")) << s.message();

  // Without the manifest's help the shard file itself says it is short.
  auto file = ShardFileReader::Open(path);
  ASSERT_FALSE(file.ok());
  EXPECT_TRUE(Contains(file.status(), "truncated")) << file.status().message();
  std::filesystem::resize_file(path, 40);
  file = ShardFileReader::Open(path);
  ASSERT_FALSE(file.ok());
  EXPECT_TRUE(Contains(file.status(), "header")) << file.status().message();
  EXPECT_TRUE(Contains(file.status(), "truncated")) << file.status().message();
}

TEST_F(CheckpointFaultTest, WrongVersionNamesTheField) {
  const auto path = dir_ / "weights.rank00000.bin";
  WriteU32(path, 8, 2);
  Status s = ReadOne(StateKind::kMasterWeights, 1);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(s, "'version' at offset 8")) << s.message();
  EXPECT_TRUE(Contains(s, "format version 2")) << s.message();
  EXPECT_TRUE(Contains(s, path.string())) << s.message();
}

TEST_F(CheckpointFaultTest, BadMagicAndCorruptHeaderAndTable) {
  const auto path = dir_ / "weights.rank00001.bin";
  FlipBit(path, 2, 0);
  auto file = ShardFileReader::Open(path);
  ASSERT_FALSE(file.ok());
  EXPECT_TRUE(Contains(file.status(), "'magic' at offset 0")) << file.status().message();
  FlipBit(path, 2, 0);

  FlipBit(path, 30, 1);  // tensor_count: covered by the header checksum
  file = ShardFileReader::Open(path);
  ASSERT_FALSE(file.ok());
  EXPECT_TRUE(Contains(file.status(), "header_checksum")) << file.status().message();
  FlipBit(path, 30, 1);

  FlipBit(path, 96 + 20, 4);  // inside the first table entry's name
  file = ShardFileReader::Open(path);
  ASSERT_FALSE(file.ok());
  EXPECT_TRUE(Contains(file.status(), "table_checksum")) << file.status().message();
  FlipBit(path, 96 + 20, 4);
  EXPECT_TRUE(ShardFileReader::Open(path).ok());
}

TEST_F(CheckpointFaultTest, MissingRankFileNamesRankAndFile) {
  std::filesystem::remove(dir_ / "optimizer.rank00002.bin");
  Status s = ReadOne(StateKind::kExpAvgSq, 0);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(s, "rank 2's optimizer file")) << s.message();
  EXPECT_TRUE(Contains(s, "optimizer.rank00002.bin")) << s.message();
  // Master weights never touch the optimizer files.
  EXPECT_TRUE(ReadOne(StateKind::kMasterWeights, 0).ok());
}

TEST_F(CheckpointFaultTest, ManifestFieldErrorsNameTheField) {
  const auto path = dir_ / "manifest.json";
  auto text = ReadWholeFile(path);
  ASSERT_TRUE(text.ok());
  std::string edited = *text;
  const auto at = edited.find("\"format_version\": 2");
  ASSERT_NE(at, std::string::npos);
  edited.replace(at, 19, "\"format_version\": 7");
  { std::ofstream(path) << edited; }
  auto ckpt = CheckpointReader::Open(dir_);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_TRUE(Contains(ckpt.status(), "field 'format_version'")) << ckpt.status().message();
  { std::ofstream(path) << "{\"format\": \"sluice.checkpoint\""; }
  ckpt = CheckpointReader::Open(dir_);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_TRUE(Contains(ckpt.status(), "not valid JSON")) << ckpt.status().message();
}

TEST_F(CheckpointFaultTest, ARanksBadTensorAbandonsTheSaveOnEveryRank) {
  auto result =
      SaveWorld(tmp_.path(), 4, 3, model_, 12, 0, [](int rank, std::vector<ShardTensor>& tensors) {
        if (rank == 1) tensors[0].end = tensors[0].shape.numel() + 1;
      });
  ASSERT_EQ(result.statuses.size(), 3u);
  EXPECT_EQ(result.statuses[1].code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(result.statuses[1], model_[0].name)) << result.statuses[1].message();
  EXPECT_EQ(result.statuses[0].code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(result.statuses[2].code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(std::filesystem::exists(tmp_.path() / "step_4"));
  auto latest = ReadLatestStep(tmp_.path());
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(**latest, 3);
}

TEST_F(CheckpointFaultTest, RanksDisagreeingOnAShapeAreNotCommitted) {
  auto result =
      SaveWorld(tmp_.path(), 5, 2, model_, 13, 0, [](int rank, std::vector<ShardTensor>& tensors) {
        if (rank == 1) tensors[3].shape = Shape{4, 16};  // same numel
      });
  EXPECT_EQ(result.statuses[0].code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(result.statuses[0], "disagree")) << result.statuses[0].message();
  EXPECT_TRUE(Contains(result.statuses[0], model_[3].name)) << result.statuses[0].message();
  EXPECT_FALSE(result.statuses[1].ok());
  EXPECT_FALSE(std::filesystem::exists(tmp_.path() / "step_5"));
  EXPECT_EQ(**ReadLatestStep(tmp_.path()), 3);
}

TEST_F(CheckpointFaultTest, UncoveredElementsAreNotCommitted) {
  auto result =
      SaveWorld(tmp_.path(), 6, 2, model_, 14, 0, [](int rank, std::vector<ShardTensor>& tensors) {
        if (rank == 1) tensors[0].end -= 1;
      });
  EXPECT_EQ(result.statuses[0].code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(result.statuses[0], "held by no rank")) << result.statuses[0].message();
  EXPECT_FALSE(std::filesystem::exists(tmp_.path() / "step_6"));
}

}  // namespace
}  // namespace sluice::checkpoint
