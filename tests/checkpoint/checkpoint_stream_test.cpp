// Training checkpoints streamed from the optimizer (engine/train/checkpointing.h), on 1 and 2
// ranks (mpirun -np 1, 2):
//   - with the optimizer state on NVMe (stages 1-3), in host memory or on the device, and in
//     stage 0, the streamed files hold exactly the bytes the same state gives through the pointer
//     path (SaveCheckpoint over tensors in memory), and the reader returns exactly ReadState's
//     values;
//   - the memory is bounded by the staging ring: the pieces handed over never exceed one tile and
//     come from at most buffer_count buffers, and the heap grows during a save by less than
//     (buffer_count + 2) tiles x 12 bytes, while a save from a whole-shard copy grows it by the
//     3 x shard x 4 bytes it copies (the heap is measured by this binary's operator new);
//   - a byte flipped in the optimizer's swap file fails the save on every rank, naming the tile
//     and the extent, leaves the previous checkpoint and `latest` intact and loadable, and the
//     engine saves again once restored from it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <new>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "engine/checkpoint/checkpoint_dir.h"
#include "engine/checkpoint/checkpoint_reader.h"
#include "engine/checkpoint/checkpoint_writer.h"
#include "engine/checkpoint/comm_agreement.h"
#include "engine/train/checkpointing.h"
#include "runtime/durable_file.h"
#include "tests/offload_engine/offload_engine_test_util.h"
#include "tests/zero/zero_test_util.h"

// ---- Heap accounting: every operator new / delete of this process
// --------------------------------

namespace {

std::atomic<int64_t> g_heap_current{0};
std::atomic<int64_t> g_heap_peak{0};

void HeapAdd(int64_t bytes) {
  const int64_t now = g_heap_current.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  int64_t peak = g_heap_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_heap_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

void* HeapNew(size_t bytes) {
  void* p = std::malloc(bytes == 0 ? 1 : bytes);
  if (p == nullptr) throw std::bad_alloc();
  HeapAdd(static_cast<int64_t>(malloc_usable_size(p)));
  return p;
}

void HeapDelete(void* p) {
  if (p == nullptr) return;
  HeapAdd(-static_cast<int64_t>(malloc_usable_size(p)));
  std::free(p);
}

}  // namespace

void* operator new(size_t bytes) { return HeapNew(bytes); }
void* operator new[](size_t bytes) { return HeapNew(bytes); }
void operator delete(void* p) noexcept { HeapDelete(p); }
void operator delete[](void* p) noexcept { HeapDelete(p); }
void operator delete(void* p, size_t) noexcept { HeapDelete(p); }
void operator delete[](void* p, size_t) noexcept { HeapDelete(p); }

namespace sluice::train {
namespace {

namespace fs = std::filesystem;
using checkpoint::StateKind;
using ::sluice::OffloadDevice;
using zero::ZeroOptions;
using zero::ZeroStateRange;
using zero::testing::MakeZeroRig;
using zero::testing::OffloadTestOptions;
using zero::testing::RunZero;
using zero::testing::ScratchDir;
using zero::testing::TestWorld;
using zero::testing::TrainSettings;
using zero::testing::ZeroRig;

// The heap growth above the level at construction, at its highest, while the scope lasts.
class HeapPeak {
 public:
  HeapPeak() : base_(g_heap_current.load()) { g_heap_peak.store(base_); }
  int64_t growth() const { return g_heap_peak.load() - base_; }

 private:
  int64_t base_;
};

// A fresh directory with the same path on every rank, removed by rank 0 once every rank is done
// with it.
class SharedDir {
 public:
  explicit SharedDir(const std::string& name) {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string leaf = std::string("sluice_stream_") + info->test_suite_name() + "_" +
                       info->name() + "_" + name + "_np" + std::to_string(TestWorld().size());
    std::replace(leaf.begin(), leaf.end(), '/', '_');
    path_ = fs::path(::testing::TempDir()) / leaf;
    if (TestWorld().rank() == 0) {
      fs::remove_all(path_);
      fs::create_directories(path_);
    }
    SLUICE_CHECK(TestWorld().Barrier().ok());
  }
  ~SharedDir() {
    // A failed barrier (a rank that left the test early) only leaves the directory behind.
    if (TestWorld().Barrier().ok() && TestWorld().rank() == 0) {
      std::error_code error;
      fs::remove_all(path_, error);
    }
  }
  SharedDir(const SharedDir&) = delete;
  SharedDir& operator=(const SharedDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

Config CheckpointConfig(const fs::path& dir) {
  Config config;
  config.checkpoint.dir = dir.string();
  return config;
}

struct Rig {
  ScratchDir nvme;
  ZeroRig zero;
};

// An engine of `model` trained `steps` steps with the optimizer on `tier`, tiles of
// `tile_elements` (several per shard) and a ring of 3.
std::unique_ptr<Rig> Train(int stage, OffloadDevice tier, const model::ModelOptions& model,
                           int64_t tile_elements, int64_t steps) {
  auto rig = std::make_unique<Rig>();
  ZeroOptions options =
      OffloadTestOptions(stage, DType::kBF16, tier, OffloadDevice::kNone, rig->nvme.path());
  options.sub_group_size = tile_elements;
  Result<ZeroRig> zero = MakeZeroRig(options, model, TestWorld(), /*seed=*/5);
  SLUICE_CHECK(zero.ok()) << zero.status().ToString();
  rig->zero = std::move(zero).value();
  TrainSettings settings;
  settings.steps = steps;
  settings.world = TestWorld().size();
  settings.param_dtype = options.param_dtype;
  Result<zero::testing::RunResult> run = RunZero(rig->zero, settings);
  SLUICE_CHECK(run.ok()) << run.status().ToString();
  return rig;
}

struct ShardState {
  std::vector<float> master, exp_avg, exp_avg_sq;
};

// The whole shard through the serial copy (OffloadedAdam::ReadState: the reference).
ShardState ReadWholeState(const zero::ZeroOptimizer& optimizer) {
  ShardState s;
  const size_t n = static_cast<size_t>(optimizer.count());
  s.master.resize(n);
  s.exp_avg.resize(n);
  s.exp_avg_sq.resize(n);
  Status status = optimizer.ReadState(0, optimizer.count(), s.master.data(), s.exp_avg.data(),
                                      s.exp_avg_sq.data());
  SLUICE_CHECK(status.ok()) << status.ToString();
  return s;
}

Result<fs::path> Save(const Rig& rig, const fs::path& dir, int64_t step) {
  // Consistent, as a resume checks it: the schedule at the applied steps, no data drawn yet.
  TrainingProgress progress;
  progress.step = step;
  progress.lr_last_batch_iteration = rig.zero.engine->optimizer().step() - 1;
  progress.data_loader = {{"version", 1},  {"seed", 7u},           {"epoch", 0},
                          {"position", 0}, {"train_tokens", 1000}, {"seq_len", 8}};
  return SaveTrainingCheckpoint(CheckpointConfig(dir), *rig.zero.engine, rig.zero.model->registry(),
                                TestWorld(), progress);
}

// The same state through the pointer path: tensors pointing into whole-shard copies, as the
// save worked before it streamed.
Result<fs::path> SaveFromMemory(const Rig& rig, const ShardState& state, const fs::path& dir,
                                int64_t step) {
  const zero::ZeroEngine& engine = *rig.zero.engine;
  const model::ParameterRegistry& registry = rig.zero.model->registry();
  std::vector<checkpoint::ShardTensor> tensors;
  const std::pair<StateKind, const std::vector<float>*> kinds[] = {
      {StateKind::kMasterWeights, &state.master},
      {StateKind::kExpAvg, &state.exp_avg},
      {StateKind::kExpAvgSq, &state.exp_avg_sq}};
  for (const auto& [kind, values] : kinds) {
    for (const ZeroStateRange& r : engine.SavedStateRanges()) {
      const model::ParameterInfo& p = registry.parameter(r.param);
      tensors.push_back({{.kind = kind,
                          .name = p.name,
                          .dtype = DType::kF32,
                          .shape = p.shape,
                          .begin = r.begin,
                          .end = r.end},
                         values->data() + r.shard_offset});
    }
  }
  checkpoint::SaveRequest request;
  request.checkpoints_dir = dir;
  request.step = step;
  request.rank = TestWorld().rank();
  request.world = TestWorld().size();
  request.zero_stage = engine.options().stage;
  SLUICE_ASSIGN_OR_RETURN(request.attempt_tag, checkpoint::AgreeOnAttemptTag(TestWorld()));
  return checkpoint::SaveCheckpoint(request, tensors, checkpoint::CommAgreeFn(TestWorld()));
}

std::string FileBytes(const fs::path& path) {
  Result<std::string> bytes = ReadWholeFile(path);
  SLUICE_CHECK(bytes.ok()) << bytes.status().ToString();
  return *bytes;
}

// Every saved range of this rank reads back from `step_dir` as exactly `state`'s elements.
void ExpectReadsBack(const fs::path& step_dir, const Rig& rig, const ShardState& state,
                     const std::string& what) {
  Result<std::unique_ptr<checkpoint::CheckpointReader>> reader =
      checkpoint::CheckpointReader::Open(step_dir);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  const model::ParameterRegistry& registry = rig.zero.model->registry();
  const std::pair<StateKind, const std::vector<float>*> kinds[] = {
      {StateKind::kMasterWeights, &state.master},
      {StateKind::kExpAvg, &state.exp_avg},
      {StateKind::kExpAvgSq, &state.exp_avg_sq}};
  for (const ZeroStateRange& r : rig.zero.engine->SavedStateRanges()) {
    const std::string& name = registry.parameter(r.param).name;
    std::vector<float> read(static_cast<size_t>(r.end - r.begin));
    for (const auto& [kind, values] : kinds) {
      Status status = (*reader)->ReadRange(kind, name, r.begin, r.end, read.data());
      ASSERT_TRUE(status.ok()) << status.ToString();
      EXPECT_EQ(
          std::memcmp(read.data(), values->data() + r.shard_offset, read.size() * sizeof(float)), 0)
          << what << ": " << checkpoint::StateKindName(kind) << "/" << name;
    }
  }
}

// ---- The streamed files hold the pointer path's bytes ------------------------------------------

class StreamedCheckpointTest : public ::testing::TestWithParam<std::tuple<int, OffloadDevice>> {};

TEST_P(StreamedCheckpointTest, SameBytesAsThePointerPathAndReadsBackAsReadState) {
  const auto [stage, tier] = GetParam();
  const std::string what = fmt::format("stage {} optimizer {} on {} rank(s)", stage,
                                       OffloadDeviceName(tier), TestWorld().size());
  std::unique_ptr<Rig> rig = Train(stage, tier, zero::testing::TinyGpt(), 4096, /*steps=*/2);
  const ShardState state = ReadWholeState(rig->zero.engine->optimizer());
  // Moments that are not all zero: the comparison below sees real values.
  ASSERT_TRUE(std::any_of(state.exp_avg_sq.begin(), state.exp_avg_sq.end(),
                          [](float v) { return v != 0.0f; }));

  const SharedDir streamed_dir("streamed");
  const SharedDir memory_dir("memory");
  Result<fs::path> streamed = Save(*rig, streamed_dir.path(), 2);
  ASSERT_TRUE(streamed.ok()) << streamed.status().ToString();
  Result<fs::path> memory = SaveFromMemory(*rig, state, memory_dir.path(), 2);
  ASSERT_TRUE(memory.ok()) << memory.status().ToString();

  for (checkpoint::ShardGroup group : checkpoint::kAllShardGroups) {
    const std::string name = checkpoint::ShardFileName(group, TestWorld().rank());
    const std::string a = FileBytes(*streamed / name);
    const std::string b = FileBytes(*memory / name);
    if (!rig->zero.engine->SavedStateRanges().empty()) {
      EXPECT_GT(a.size(), 96u) << what;
    }
    EXPECT_TRUE(a == b) << what << ": " << name << " differs from the pointer path's (" << a.size()
                        << " vs " << b.size() << " bytes)";
  }
  ExpectReadsBack(*streamed, *rig, state, what);
}

INSTANTIATE_TEST_SUITE_P(Tiers, StreamedCheckpointTest,
                         ::testing::Values(std::make_tuple(1, OffloadDevice::kNvme),
                                           std::make_tuple(2, OffloadDevice::kNvme),
                                           std::make_tuple(3, OffloadDevice::kNvme),
                                           std::make_tuple(3, OffloadDevice::kCpu),
                                           std::make_tuple(3, OffloadDevice::kNone),
                                           std::make_tuple(0, OffloadDevice::kNone)),
                         [](const auto& info) {
                           return fmt::format("Stage{}_{}", std::get<0>(info.param),
                                              OffloadDeviceName(std::get<1>(info.param)));
                         });

// ---- Bounded memory ---------------------------------------------------------------------------

// ~1.9 M parameters: with tiles of 16384 elements, dozens of tiles per rank.
model::ModelOptions WideGpt() {
  model::ModelOptions o = zero::testing::TinyGpt();
  o.n_layer = 4;
  o.d_model = 192;
  o.d_ff = 768;
  o.vocab_size = 512;
  return o;
}

constexpr int64_t kWideTile = 16384;

TEST(StreamedCheckpointMemory, PiecesOfOneTileFromTheRingOnly) {
  constexpr int64_t kTile = kWideTile;
  std::unique_ptr<Rig> rig = Train(3, OffloadDevice::kNvme, WideGpt(), kTile, /*steps=*/1);
  const zero::ZeroOptimizer& optimizer = rig->zero.engine->optimizer();
  const ShardState state = ReadWholeState(optimizer);
  const int64_t tiles = (optimizer.count() + kTile - 1) / kTile;
  ASSERT_GE(tiles, 20) << "the shard should span many tiles";
  const int buffer_count = rig->zero.engine->options().offload_optimizer.buffer_count;

  // From the middle of tile 1 to the middle of the last tile.
  const int64_t begin = kTile + 100;
  const int64_t end = optimizer.count() - 100;
  int64_t next = begin;
  int64_t pieces = 0;
  std::set<const float*> buffers;  // the start of the tile each piece lies in
  Status status = optimizer.StreamState(
      begin, end - begin,
      [&](int64_t at, int64_t n, const float* master, const float* exp_avg,
          const float* exp_avg_sq) -> Status {
        EXPECT_EQ(at, next) << "pieces in increasing order, without gaps";
        EXPECT_GT(n, 0);
        EXPECT_LE(n, kTile);
        EXPECT_EQ(at / kTile, (at + n - 1) / kTile) << "a piece lies inside one tile";
        const size_t bytes = static_cast<size_t>(n) * sizeof(float);
        EXPECT_EQ(std::memcmp(master, state.master.data() + at, bytes), 0) << "piece at " << at;
        EXPECT_EQ(std::memcmp(exp_avg, state.exp_avg.data() + at, bytes), 0) << "piece at " << at;
        EXPECT_EQ(std::memcmp(exp_avg_sq, state.exp_avg_sq.data() + at, bytes), 0)
            << "piece at " << at;
        buffers.insert(master - at % kTile);
        next = at + n;
        ++pieces;
        return OkStatus();
      });
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(next, end);
  EXPECT_EQ(pieces, (end - 1) / kTile - begin / kTile + 1);
  // The tiles rotate through the staging ring's slots, and nothing else holds them.
  EXPECT_EQ(static_cast<int>(buffers.size()), buffer_count);
}

TEST(StreamedCheckpointMemory, HeapGrowsByAFewTilesNotTheShard) {
  constexpr int64_t kTile = kWideTile;
  std::unique_ptr<Rig> rig = Train(3, OffloadDevice::kNvme, WideGpt(), kTile, /*steps=*/1);
  const zero::ZeroEngine& engine = *rig->zero.engine;
  const int64_t count = engine.optimizer().count();
  const int buffer_count = engine.options().offload_optimizer.buffer_count;
  const int64_t bound = (buffer_count + 2) * kTile * 12;
  const int64_t whole_shard = 3 * count * 4;
  ASSERT_GE(whole_shard, 8 * bound) << "the shard should be far larger than the bound";

  // The stream itself allocates nothing per tile: the tiles live in the staging ring the
  // optimizer allocated when it was created.
  int64_t stream_growth = 0;
  {
    HeapPeak peak;
    Status streamed = engine.optimizer().StreamState(
        0, count,
        [](int64_t, int64_t, const float*, const float*, const float*) { return OkStatus(); });
    stream_growth = peak.growth();
    ASSERT_TRUE(streamed.ok()) << streamed.ToString();
  }
  EXPECT_LT(stream_growth, kTile * 12) << "the stream holds more than the ring";

  // The whole save: the ring's tiles plus what the files' tables, the manifest and the config
  // record take, whatever the shard's size.
  const SharedDir shared("ckpt");
  const fs::path& dir = shared.path();
  int64_t streamed_growth = 0;
  {
    HeapPeak peak;
    Result<fs::path> saved = Save(*rig, dir, 1);
    streamed_growth = peak.growth();
    ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  }
  // The old path, measured the same way, for contrast: the whole shard copied to host memory
  // (what saves did before they streamed), then written from there.
  int64_t export_growth = 0;
  {
    HeapPeak peak;
    const ShardState state = ReadWholeState(engine.optimizer());
    const SharedDir memory_dir("memory");
    Result<fs::path> saved = SaveFromMemory(*rig, state, memory_dir.path(), 1);
    export_growth = peak.growth();
    ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  }
  std::printf(
      "[rank %d] shard %lld elements: the stream grew the heap by %lld bytes, the save "
      "by %lld (bound %lld), a save from a whole-shard copy by %lld\n",
      TestWorld().rank(), static_cast<long long>(count), static_cast<long long>(stream_growth),
      static_cast<long long>(streamed_growth), static_cast<long long>(bound),
      static_cast<long long>(export_growth));
  EXPECT_LT(streamed_growth, bound);
  EXPECT_GE(export_growth, whole_shard);
  EXPECT_LT(8 * streamed_growth, export_growth);
}

// ---- A corrupt swap file ----------------------------------------------------------------------

// Flips one bit of the first data byte + 100 of this rank's optimizer swap file: tile 0's extent
// (the first the store allocated).
void CorruptSwapFile(const std::string& nvme_dir) {
  const fs::path path =
      fs::path(nvme_dir) / fmt::format("sluice_optimizer.rank{}.swp", TestWorld().rank());
  const int fd = ::open(path.c_str(), O_RDWR);
  SLUICE_CHECK(fd >= 0) << path.string();
  uint64_t data_offset = 0;  // header field at offset 64 (docs/swap_format.md)
  SLUICE_CHECK(::pread(fd, &data_offset, 8, 64) == 8);
  unsigned char byte = 0;
  SLUICE_CHECK(::pread(fd, &byte, 1, static_cast<off_t>(data_offset + 100)) == 1);
  byte ^= 0x10;
  SLUICE_CHECK(::pwrite(fd, &byte, 1, static_cast<off_t>(data_offset + 100)) == 1);
  SLUICE_CHECK(::fsync(fd) == 0);
  ::close(fd);
}

TEST(StreamedCheckpointFault, CorruptTileFailsTheSaveAndKeepsThePreviousCheckpoint) {
  std::unique_ptr<Rig> rig = Train(3, OffloadDevice::kNvme, zero::testing::TinyGpt(), 4096,
                                   /*steps=*/1);
  const SharedDir shared("ckpt");
  const fs::path& dir = shared.path();
  Result<fs::path> first = Save(*rig, dir, 1);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const std::string manifest_before = FileBytes(*first / checkpoint::kManifestFileName);

  if (TestWorld().rank() == 0) CorruptSwapFile(rig->nvme.path());
  ASSERT_TRUE(TestWorld().Barrier().ok());
  Result<fs::path> second = Save(*rig, dir, 2);
  ASSERT_FALSE(second.ok()) << "a corrupt tile must fail the save on every rank";
  const std::string error = second.status().ToString();
  if (TestWorld().rank() == 0) {
    EXPECT_EQ(second.status().code(), StatusCode::kDataLoss) << error;
    EXPECT_NE(error.find("tile 0 of"), std::string::npos) << error;
    EXPECT_NE(error.find("subgroup0.adam_state"), std::string::npos) << error;
  } else {
    EXPECT_NE(error.find("another rank failed"), std::string::npos) << error;
  }
  ASSERT_TRUE(TestWorld().Barrier().ok());

  // Nothing of the failed save remains; `latest` and step 1 are as they were.
  Result<std::optional<int64_t>> latest = checkpoint::ReadLatestStep(dir);
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_EQ(latest->value_or(-1), 1);
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    EXPECT_TRUE(name == "latest" || name == "step_1") << "left behind: " << name;
  }
  EXPECT_EQ(FileBytes(*first / checkpoint::kManifestFileName), manifest_before);
  Result<std::unique_ptr<checkpoint::CheckpointReader>> reader =
      checkpoint::CheckpointReader::Open(*first);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  Status verified = (*reader)->VerifyAll();
  EXPECT_TRUE(verified.ok()) << verified.ToString();

  // Loading step 1 rewrites every tile; the engine then saves again, the same state.
  zero::ZeroEngine& engine = *rig->zero.engine;
  Result<TrainingProgress> loaded =
      LoadTrainingCheckpoint(*first, engine, rig->zero.model->registry());
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ASSERT_TRUE(engine.PublishParameters().ok());
  Result<fs::path> again = Save(*rig, dir, 2);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  const std::string weights =
      checkpoint::ShardFileName(checkpoint::ShardGroup::kWeights, TestWorld().rank());
  EXPECT_EQ(FileBytes(*again / weights), FileBytes(*first / weights));
}

}  // namespace
}  // namespace sluice::train
