// Shard files written through the rank's I/O engine (engine/checkpoint/aio_shard_sink.h), on
// io_uring with O_DIRECT, on the thread pool with O_DIRECT and buffered (aio.direct_io false):
//   - whole tensors and tensors streamed in random interleaved pieces give byte for byte the
//     file the buffered path writes, with the default staging windows and with windows so few
//     and small that they are written part-way and read back (the engine's reads show it);
//   - the staging is counted in the tiers' pinned budget while the files are open, and released;
//   - a whole SaveCheckpoint through the engine commits the buffered save's files and manifest;
//   - a write that fails part-way (a file size limit: EFBIG, as a full disk) fails the save with
//     an error naming the shard file, and leaves the previous checkpoint and `latest` intact.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "checkpoint_test_util.h"
#include "engine/checkpoint/aio_shard_sink.h"
#include "engine/checkpoint/checkpoint_dir.h"
#include "engine/checkpoint/checkpoint_reader.h"
#include "engine/checkpoint/checkpoint_writer.h"
#include "engine/checkpoint/manifest.h"
#include "engine/checkpoint/shard_stream_writer.h"
#include "engine/checkpoint/shard_writer.h"
#include "offload/rank_tiers.h"
#include "runtime/durable_file.h"

namespace sluice::checkpoint {
namespace {

namespace fs = std::filesystem;
using testing::FullValues;
using testing::TempDir;

constexpr int kRank = 0;
constexpr int kWorld = 1;
constexpr uint64_t kBlockBytes = 4096;

struct IoPath {
  std::string name;
  offload::AioBackendKind backend;
  bool direct_io;
};

const IoPath kIoPaths[] = {{"IoUringDirect", offload::AioBackendKind::kIoUring, true},
                           {"ThreadPoolDirect", offload::AioBackendKind::kThreadPool, true},
                           {"ThreadPoolBuffered", offload::AioBackendKind::kThreadPool, false}};

void PrintTo(const IoPath& path, std::ostream* out) { *out << path.name; }

offload::RankTiersOptions TiersOptions(const IoPath& path) {
  offload::RankTiersOptions options;
  options.aio.backend = path.backend;
  options.aio.direct_io = path.direct_io;
  return options;
}

struct Tensors {
  std::vector<ShardTensorInfo> infos;
  std::vector<std::vector<float>> values;

  std::vector<ShardTensor> Whole() const {
    std::vector<ShardTensor> out;
    for (size_t i = 0; i < infos.size(); ++i) out.push_back({infos[i], values[i].data()});
    return out;
  }
};

// Every kind of tensors of awkward sizes: a few over 1 MiB (several windows), a few under a
// page, an empty one, ends that fall anywhere in a page. `partition`: a range of each (a rank of
// several), else the whole of each (what a save of world 1 must hold).
Tensors MakeTensors(bool partition = true) {
  const std::vector<std::pair<std::string, Shape>> specs = {{"wte.weight", Shape{509, 601}},
                                                            {"ln.bias", Shape{3}},
                                                            {"empty", Shape{0}},
                                                            {"attn.weight", Shape{97, 1031}},
                                                            {"ln_f.weight", Shape{1000}},
                                                            {"head.weight", Shape{263, 300}}};
  Tensors t;
  for (StateKind kind : kAllStateKinds) {
    for (size_t i = 0; i < specs.size(); ++i) {
      const int64_t numel = specs[i].second.numel();
      const int64_t begin = partition ? numel / 7 : 0;
      t.infos.push_back({.kind = kind,
                         .name = specs[i].first,
                         .dtype = DType::kF32,
                         .shape = specs[i].second,
                         .begin = begin,
                         .end = numel});
      std::vector<float> all = FullValues(3, kind, i, numel);
      t.values.emplace_back(all.begin() + begin, all.end());
    }
  }
  return t;
}

// Every tensor in random pieces (1 to 20000 elements), a random tensor with data left at each
// turn, so the files and the positions in them interleave.
Status WriteStreamed(const fs::path& dir, const Tensors& t, const ShardFileIo& io, uint32_t seed) {
  SLUICE_ASSIGN_OR_RETURN(RankStreamWriter out,
                          RankStreamWriter::Create(dir, kRank, kWorld, t.infos, kBlockBytes, io));
  std::mt19937 random(seed);
  std::vector<int64_t> done(t.infos.size(), 0);
  std::vector<size_t> open;
  for (size_t i = 0; i < t.infos.size(); ++i) {
    if (t.infos[i].elements() > 0) open.push_back(i);
  }
  while (!open.empty()) {
    const size_t pick = random() % open.size();
    const size_t i = open[pick];
    const int64_t take = std::min<int64_t>(t.infos[i].elements() - done[i], 1 + random() % 20000);
    SLUICE_RETURN_IF_ERROR(out.Append(i, t.values[i].data() + done[i], take));
    done[i] += take;
    if (done[i] == t.infos[i].elements()) open.erase(open.begin() + pick);
  }
  return out.Finish();
}

std::string Bytes(const fs::path& path) {
  Result<std::string> bytes = ReadWholeFile(path);
  SLUICE_CHECK(bytes.ok()) << bytes.status().ToString();
  return *bytes;
}

void ExpectSameFiles(const fs::path& a, const fs::path& b, const std::string& what) {
  for (ShardGroup group : kAllShardGroups) {
    const std::string name = ShardFileName(group, kRank);
    const std::string x = Bytes(a / name);
    const std::string y = Bytes(b / name);
    EXPECT_GT(x.size(), uint64_t{1} << 20) << what << ": " << name;
    EXPECT_TRUE(x == y) << what << ": " << name << " differs from the buffered path's (" << x.size()
                        << " vs " << y.size() << " bytes)";
  }
}

struct Windows {
  const char* name;
  uint64_t window_bytes;
  int windows;
};

class AioShardWriterTest : public ::testing::TestWithParam<IoPath> {
 protected:
  void SetUp() override {
    tiers_ = std::make_unique<offload::RankTiers>(TiersOptions(GetParam()));
    Result<offload::AioEngine*> aio = tiers_->Aio("the test");
    if (!aio.ok()) GTEST_SKIP() << GetParam().name << ": " << aio.status().ToString();
    aio_ = *aio;
  }

  std::unique_ptr<offload::RankTiers> tiers_;
  offload::AioEngine* aio_ = nullptr;
};

TEST_P(AioShardWriterTest, SameBytesAsTheBufferedPathWholeAndStreamed) {
  const Tensors t = MakeTensors();
  TempDir buffered;
  ASSERT_TRUE(WriteRankShardFiles(buffered.path(), kRank, kWorld, t.Whole(), kBlockBytes).ok());

  const Windows windows[] = {
      {"default windows", AioShardWindows{}.window_bytes, AioShardWindows{}.windows},
      {"2 windows of a page", 4096, 2},
      {"3 windows of 3 pages", 3 * 4096, 3}};
  for (const Windows& w : windows) {
    const ShardFileIo io = AioShardFileIo(*tiers_, {w.window_bytes, w.windows});
    const offload::AioEngineStats before = aio_->stats();
    TempDir whole;
    Status status = WriteRankShardFiles(whole.path(), kRank, kWorld, t.Whole(), kBlockBytes, io);
    ASSERT_TRUE(status.ok()) << w.name << ": " << status.ToString();
    ExpectSameFiles(whole.path(), buffered.path(), std::string(w.name) + ", whole tensors");
    const offload::AioEngineStats after_whole = aio_->stats();
    // Written by the engine: every byte of both files (the last page of each rounded up).
    uint64_t file_bytes = 0;
    for (ShardGroup group : kAllShardGroups) {
      file_bytes += fs::file_size(whole.path() / ShardFileName(group, kRank));
    }
    EXPECT_GE(after_whole.bytes_written - before.bytes_written, file_bytes) << w.name;

    for (uint32_t seed : {1u, 2u}) {
      TempDir streamed;
      status = WriteStreamed(streamed.path(), t, io, seed);
      ASSERT_TRUE(status.ok()) << w.name << ", seed " << seed << ": " << status.ToString();
      ExpectSameFiles(streamed.path(), buffered.path(),
                      fmt::format("{}, streamed with seed {}", w.name, seed));
    }
    if (w.windows < 8) {
      // Pieces of many tensors in turn hold more windows than these buffers: some were written
      // part-way and read back.
      EXPECT_GT(aio_->stats().bytes_read, after_whole.bytes_read) << w.name;
    }
    EXPECT_EQ(tiers_->staging_budget().reserved(), 0u) << w.name << ": staging not released";
  }
  // Counted while the files were open: at most the windows of both files of the rank.
  EXPECT_GT(tiers_->staging_budget().peak(), 0u);
  EXPECT_LE(tiers_->staging_budget().peak(),
            2 * AioShardWindows{}.windows * AioShardWindows{}.window_bytes);
}

TEST_P(AioShardWriterTest, StagingOverTheBudgetIsRefusedNamingTheFile) {
  offload::RankTiersOptions options = TiersOptions(GetParam());
  options.pinned_staging_limit = 3 * 4096;
  offload::RankTiers tiers(options);
  const Tensors t = MakeTensors();
  TempDir dir;
  const Status status = WriteRankShardFiles(dir.path(), kRank, kWorld, t.Whole(), kBlockBytes,
                                            AioShardFileIo(tiers, {4096, 4}));
  ASSERT_EQ(status.code(), StatusCode::kResourceExhausted) << status.ToString();
  EXPECT_NE(status.message().find(ShardFileName(ShardGroup::kWeights, kRank)), std::string::npos)
      << status.message();
  EXPECT_EQ(tiers.staging_budget().reserved(), 0u);
}

SaveRequest Request(const fs::path& dir, int64_t step, offload::RankTiers* tiers) {
  SaveRequest request;
  request.checkpoints_dir = dir;
  request.step = step;
  request.rank = kRank;
  request.world = kWorld;
  request.attempt_tag = fmt::format("s{}", step);
  request.checksum_block_bytes = kBlockBytes;
  request.config = {{"model", {{"family", "gpt2"}}}};
  request.states = {{"step", step}};
  if (tiers != nullptr) request.io = AioShardFileIo(*tiers);
  return request;
}

TEST_P(AioShardWriterTest, SaveCheckpointThroughTheEngineCommitsTheBufferedBytes) {
  const Tensors t = MakeTensors(/*partition=*/false);
  const std::vector<ShardTensor> tensors = t.Whole();
  TempDir via_engine, buffered;
  Result<fs::path> a = SaveCheckpoint(Request(via_engine.path(), 4, tiers_.get()), tensors, {});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  Result<fs::path> b = SaveCheckpoint(Request(buffered.path(), 4, nullptr), tensors, {});
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ExpectSameFiles(*a, *b, "SaveCheckpoint");
  EXPECT_EQ(Bytes(*a / kManifestFileName), Bytes(*b / kManifestFileName));
  Result<std::unique_ptr<CheckpointReader>> reader = CheckpointReader::Open(*a);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  Status verified = (*reader)->VerifyAll();
  EXPECT_TRUE(verified.ok()) << verified.ToString();
}

// Lowers RLIMIT_FSIZE for the process and ignores SIGXFSZ, so writes past it fail with EFBIG
// (what a full disk does, without one); restores both.
class ScopedFileSizeLimit {
 public:
  explicit ScopedFileSizeLimit(uint64_t bytes) {
    SLUICE_CHECK(getrlimit(RLIMIT_FSIZE, &saved_) == 0);
    previous_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit limit = saved_;
    limit.rlim_cur = bytes;
    SLUICE_CHECK(setrlimit(RLIMIT_FSIZE, &limit) == 0);
  }
  ~ScopedFileSizeLimit() {
    SLUICE_CHECK(setrlimit(RLIMIT_FSIZE, &saved_) == 0);
    std::signal(SIGXFSZ, previous_);
  }

 private:
  rlimit saved_{};
  void (*previous_)(int) = nullptr;
};

TEST_P(AioShardWriterTest, AFailedWriteNamesTheFileAndKeepsThePreviousCheckpoint) {
  const Tensors t = MakeTensors(/*partition=*/false);
  TempDir dir;
  auto save = [&](int64_t step) {
    SaveRequest request = Request(dir.path(), step, tiers_.get());
    return SaveCheckpointStreamed(request,
                                  [&](const fs::path& staging) {
                                    return WriteStreamed(staging, t, request.io,
                                                         static_cast<uint32_t>(step));
                                  },
                                  {});
  };
  Result<fs::path> first = save(1);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const std::string manifest = Bytes(*first / kManifestFileName);

  const Result<fs::path> second = [&] {
    // The files are over 1 MiB: their first window's write crosses the limit.
    ScopedFileSizeLimit limit(256 << 10);
    return save(2);
  }();
  ASSERT_FALSE(second.ok());
  const std::string error = second.status().ToString();
  std::printf("%s: %s\n", GetParam().name.c_str(), error.c_str());
  EXPECT_EQ(second.status().code(), StatusCode::kResourceExhausted) << error;
  EXPECT_NE(error.find("EFBIG"), std::string::npos) << error;
  EXPECT_NE(error.find("step_2.tmp-s2/"), std::string::npos) << error;
  EXPECT_NE(error.find(".rank00000.bin"), std::string::npos) << error;
  EXPECT_EQ(tiers_->staging_budget().reserved(), 0u);

  // Nothing of the failed save remains; `latest` and step 1 are as they were.
  Result<std::optional<int64_t>> latest = ReadLatestStep(dir.path());
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_EQ(latest->value_or(-1), 1);
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    const std::string name = entry.path().filename().string();
    EXPECT_TRUE(name == "latest" || name == "step_1") << "left behind: " << name;
  }
  EXPECT_EQ(Bytes(*first / kManifestFileName), manifest);
  Result<std::unique_ptr<CheckpointReader>> reader = CheckpointReader::Open(*first);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  Status verified = (*reader)->VerifyAll();
  EXPECT_TRUE(verified.ok()) << verified.ToString();

  // The engine still works: the next save commits.
  Result<fs::path> again = save(2);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ExpectSameFiles(*again, *first, "the save after the failure");
}

INSTANTIATE_TEST_SUITE_P(IoPaths, AioShardWriterTest, ::testing::ValuesIn(kIoPaths),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace sluice::checkpoint
