// The streaming shard writer (engine/checkpoint/shard_stream_writer.h): tensors fed in pieces of
// every size, interleaved across tensors and kinds, give the very bytes of a file written from
// whole tensors; each block's checksum is XXH3-64 of exactly its bytes whatever pieces it arrived
// in; data past a tensor's range and a file finished with a tensor short are refused, naming the
// tensor, and an unfinished file is not a readable shard.
#include "engine/checkpoint/shard_stream_writer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "checkpoint_test_util.h"
#include "engine/checkpoint/shard_reader.h"
#include "engine/checkpoint/shard_writer.h"
#include "offload/checksum.h"
#include "runtime/durable_file.h"

namespace sluice::checkpoint {
namespace {

using testing::FullValues;
using testing::TempDir;

constexpr uint64_t kBlockBytes = 256;  // 64 floats: pieces cross block boundaries often

struct Tensors {
  std::vector<ShardTensorInfo> infos;
  std::vector<std::vector<float>> values;  // each info's elements
};

// The three kinds of a few tensors of awkward sizes (an empty one, one under a block, several
// blocks with a short last one), in file order: master of each, exp_avg of each, exp_avg_sq.
Tensors MakeTensors() {
  const std::vector<std::pair<std::string, Shape>> specs = {{"a.weight", Shape{37, 11}},
                                                            {"b.bias", Shape{3}},
                                                            {"c.empty", Shape{0}},
                                                            {"d.weight", Shape{64, 4}}};
  Tensors t;
  for (StateKind kind : kAllStateKinds) {
    for (size_t i = 0; i < specs.size(); ++i) {
      const int64_t numel = specs[i].second.numel();
      const int64_t begin = numel / 5;  // a partition, not the whole tensor
      t.infos.push_back({.kind = kind,
                         .name = specs[i].first,
                         .dtype = DType::kF32,
                         .shape = specs[i].second,
                         .begin = begin,
                         .end = numel});
      std::vector<float> all = FullValues(11, kind, i, numel);
      t.values.emplace_back(all.begin() + begin, all.end());
    }
  }
  return t;
}

Status WriteWhole(const std::filesystem::path& dir, const Tensors& t) {
  std::vector<ShardTensor> tensors;
  for (size_t i = 0; i < t.infos.size(); ++i) {
    const ShardTensorInfo& info = t.infos[i];
    tensors.push_back({info, t.values[i].data()});
  }
  return WriteRankShardFiles(dir, /*rank=*/1, /*world=*/3, tensors, kBlockBytes);
}

// Streams every tensor in random pieces (1 to 100 elements), picking at each turn a random
// tensor among those with data left, so the kinds and files interleave.
Status WriteStreamed(const std::filesystem::path& dir, const Tensors& t, uint32_t seed) {
  SLUICE_ASSIGN_OR_RETURN(RankStreamWriter out,
                          RankStreamWriter::Create(dir, 1, 3, t.infos, kBlockBytes));
  std::mt19937 random(seed);
  std::vector<int64_t> done(t.infos.size(), 0);
  std::vector<size_t> open;
  for (size_t i = 0; i < t.infos.size(); ++i) {
    if (t.infos[i].elements() > 0) open.push_back(i);
  }
  while (!open.empty()) {
    const size_t pick = random() % open.size();
    const size_t i = open[pick];
    const int64_t left = t.infos[i].elements() - done[i];
    const int64_t take = std::min<int64_t>(left, 1 + random() % 100);
    SLUICE_RETURN_IF_ERROR(out.Append(i, t.values[i].data() + done[i], take));
    done[i] += take;
    if (done[i] == t.infos[i].elements()) open.erase(open.begin() + pick);
  }
  return out.Finish();
}

std::string Bytes(const std::filesystem::path& path) {
  Result<std::string> bytes = ReadWholeFile(path);
  SLUICE_CHECK(bytes.ok()) << bytes.status().ToString();
  return *bytes;
}

TEST(ShardStreamWriter, PiecesInAnyOrderGiveTheBytesOfWholeTensors) {
  const Tensors t = MakeTensors();
  TempDir whole;
  ASSERT_TRUE(WriteWhole(whole.path(), t).ok());
  for (uint32_t seed : {1u, 2u, 3u}) {
    TempDir streamed;
    Status status = WriteStreamed(streamed.path(), t, seed);
    ASSERT_TRUE(status.ok()) << status.ToString();
    for (ShardGroup group : kAllShardGroups) {
      const std::string name = ShardFileName(group, 1);
      EXPECT_EQ(Bytes(streamed.path() / name), Bytes(whole.path() / name))
          << name << ", seed " << seed;
    }
  }
}

TEST(ShardStreamWriter, BlockChecksumsAreXxh3OfEachBlock) {
  const Tensors t = MakeTensors();
  TempDir dir;
  ASSERT_TRUE(WriteStreamed(dir.path(), t, 7).ok());
  Result<std::unique_ptr<ShardFileReader>> file = ShardFileReader::Open(
      dir.path() / ShardFileName(ShardGroup::kOptimizer, 1), ShardGroup::kOptimizer, 1, 3);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  const std::string bytes = Bytes(dir.path() / ShardFileName(ShardGroup::kOptimizer, 1));
  size_t checked = 0;
  for (const ShardEntry& e : (*file)->entries()) {
    // Find the values this entry was written from.
    size_t i = 0;
    while (t.infos[i].kind != e.kind || t.infos[i].name != e.name) ++i;
    const char* data = reinterpret_cast<const char*>(t.values[i].data());
    ASSERT_EQ(e.data_bytes, t.values[i].size() * sizeof(float));
    ASSERT_EQ(e.block_checksums.size(), BlockCount(e.data_bytes, kBlockBytes)) << e.Label();
    // An empty tensor's data() may be null, which memcmp must not be given even for 0 bytes.
    EXPECT_TRUE(e.data_bytes == 0 ||
                std::memcmp(bytes.data() + e.data_offset, data, e.data_bytes) == 0)
        << e.Label();
    for (size_t b = 0; b < e.block_checksums.size(); ++b) {
      const uint64_t at = b * kBlockBytes;
      EXPECT_EQ(e.block_checksums[b],
                offload::Checksum64(data + at, std::min(kBlockBytes, e.data_bytes - at)))
          << e.Label() << " block " << b;
      ++checked;
    }
  }
  EXPECT_GT(checked, 8u);
}

TEST(ShardStreamWriter, DataPastTheRangeIsRefusedNamingTheTensor) {
  const Tensors t = MakeTensors();
  TempDir dir;
  Result<RankStreamWriter> out = RankStreamWriter::Create(dir.path(), 1, 3, t.infos, kBlockBytes);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  const size_t b = 1;  // master/b.bias: 3 elements, [0, 3)
  ASSERT_TRUE(out->Append(b, t.values[b].data(), 2).ok());
  Status status = out->Append(b, t.values[b].data(), 2);
  EXPECT_EQ(status.code(), StatusCode::kOutOfRange);
  EXPECT_NE(status.message().find("master/b.bias"), std::string::npos) << status.ToString();
}

TEST(ShardStreamWriter, FinishWithATensorShortIsRefusedAndLeavesNoReadableShard) {
  const Tensors t = MakeTensors();
  TempDir dir;
  {
    Result<RankStreamWriter> out = RankStreamWriter::Create(dir.path(), 1, 3, t.infos, kBlockBytes);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    for (size_t i = 0; i < t.infos.size(); ++i) {
      // exp_avg_sq/d.weight stops one element short.
      const bool short_one =
          t.infos[i].kind == StateKind::kExpAvgSq && t.infos[i].name == "d.weight";
      ASSERT_TRUE(
          out->Append(i, t.values[i].data(), t.infos[i].elements() - (short_one ? 1 : 0)).ok());
    }
    Status status = out->Finish();
    EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(status.message().find("exp_avg_sq/d.weight"), std::string::npos) << status.ToString();
  }
  // The weights file was finished; the optimizer file never got its header.
  EXPECT_TRUE(ShardFileReader::Open(dir.path() / ShardFileName(ShardGroup::kWeights, 1),
                                    ShardGroup::kWeights, 1, 3)
                  .ok());
  Result<std::unique_ptr<ShardFileReader>> broken = ShardFileReader::Open(
      dir.path() / ShardFileName(ShardGroup::kOptimizer, 1), ShardGroup::kOptimizer, 1, 3);
  EXPECT_FALSE(broken.ok());
}

TEST(ShardStreamWriter, RepeatedTensorIsRefused) {
  Tensors t = MakeTensors();
  t.infos.push_back(t.infos[0]);
  TempDir dir;
  Result<RankStreamWriter> out = RankStreamWriter::Create(dir.path(), 0, 1, t.infos, kBlockBytes);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("master/a.weight"), std::string::npos)
      << out.status().ToString();
}

}  // namespace
}  // namespace sluice::checkpoint
