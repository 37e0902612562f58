// The tile schedule on its own (offload/tile_pipeline.h): order, overlap, the bound on slots in
// use, and how an error drains the transfers in flight.
#include "offload/tile_pipeline.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace sluice::zero {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Records every hook call as "F3" (begin fetch of tile 3), "f3", "C3", "S3", "s3", checking that
// a slot is never fetched into while it is in use and counting slots in use.
struct Recorder {
  explicit Recorder(int slots) : owner(static_cast<size_t>(slots), -1) {}

  offload::TilePipelineHooks Hooks() {
    offload::TilePipelineHooks h;
    h.begin_fetch = [this](int64_t t, int s) { return Log('F', t, s); };
    h.finish_fetch = [this](int64_t t, int s) { return Log('f', t, s); };
    h.compute = [this](int64_t t, int s) { return Log('C', t, s); };
    h.begin_store = [this](int64_t t, int s) { return Log('S', t, s); };
    h.finish_store = [this](int64_t t, int s) { return Log('s', t, s); };
    return h;
  }

  Status Log(char what, int64_t tile, int slot) {
    log.push_back(std::string(1, what) + std::to_string(tile));
    if (what == 'F') {
      if (owner[slot] != -1) violations.push_back("slot reused while busy at " + log.back());
      owner[slot] = tile;
      ++in_use;
      max_in_use = std::max(max_in_use, in_use);
    } else if (owner[slot] != tile) {
      violations.push_back("wrong slot for " + log.back());
    }
    if (what == 's') {
      owner[slot] = -1;
      --in_use;
    }
    if (what == fail_at_what && tile == fail_at_tile) return IoError("injected at {}", log.back());
    return OkStatus();
  }

  int Position(const std::string& entry) const {
    for (size_t i = 0; i < log.size(); ++i) {
      if (log[i] == entry) return static_cast<int>(i);
    }
    return -1;
  }

  std::vector<int64_t> owner;
  std::vector<std::string> log;
  std::vector<std::string> violations;
  int in_use = 0;
  int max_in_use = 0;
  char fail_at_what = 0;
  int64_t fail_at_tile = -1;
};

TEST(TileGridTest, CutsTheRangeIntoTilesWithAShortLastOne) {
  const offload::TileGrid grid{5000, 2048};
  EXPECT_EQ(grid.num_tiles(), 3);
  EXPECT_EQ(grid.begin(2), 4096);
  EXPECT_EQ(grid.length(0), 2048);
  EXPECT_EQ(grid.length(2), 904);
  EXPECT_EQ(grid.max_length(), 2048);
  EXPECT_EQ((offload::TileGrid{7, 2048}).max_length(), 7);
  EXPECT_EQ((offload::TileGrid{0, 2048}).num_tiles(), 0);
}

TEST(TilePipelineTest, ReadAheadFollowsTheSwitchesAndTheRing) {
  EXPECT_EQ(offload::TileReadAhead({4, true, true}), 2);
  EXPECT_EQ(offload::TileReadAhead({4, true, false}), 3);
  EXPECT_EQ(offload::TileReadAhead({3, true, true}), 1);
  EXPECT_EQ(offload::TileReadAhead({2, true, true}), 1);
  EXPECT_EQ(offload::TileReadAhead({1, true, true}), 0);
  EXPECT_EQ(offload::TileReadAhead({4, false, true}), 0);
}

TEST(TilePipelineTest, WithoutPipeliningEachTileIsReadUpdatedAndWrittenAlone) {
  Recorder r(4);
  ASSERT_TRUE(offload::RunTilePipeline(3, {4, false, false}, r.Hooks()).ok());
  EXPECT_THAT(r.log, ElementsAre("F0", "f0", "C0", "S0", "s0", "F1", "f1", "C1", "S1", "s1", "F2",
                                 "f2", "C2", "S2", "s2"));
  EXPECT_TRUE(r.violations.empty()) << r.violations.front();
}

TEST(TilePipelineTest, PipelinedReadsAheadAndWritesBehindWithinTheRing) {
  for (int slots : {2, 3, 4, 6}) {
    SCOPED_TRACE(slots);
    Recorder r(slots);
    ASSERT_TRUE(offload::RunTilePipeline(10, {slots, true, true}, r.Hooks()).ok());
    EXPECT_TRUE(r.violations.empty()) << r.violations.front();
    EXPECT_LE(r.max_in_use, slots);
    for (int t = 0; t < 10; ++t) {
      // Updates in order, each after its fetch finished.
      EXPECT_LT(r.Position("f" + std::to_string(t)), r.Position("C" + std::to_string(t)));
      if (t > 0) {
        EXPECT_LT(r.Position("C" + std::to_string(t - 1)), r.Position("C" + std::to_string(t)));
      }
      // Tile t+1's read is in flight while t is updated.
      if (t + 1 < 10) {
        EXPECT_LT(r.Position("F" + std::to_string(t + 1)), r.Position("C" + std::to_string(t)));
      }
    }
    if (slots >= 3) {
      // Read of g+1, update of g and write of g-1 at once: g-1's store is not waited for before
      // g is updated.
      for (int t = 1; t < 10; ++t) {
        EXPECT_GT(r.Position("s" + std::to_string(t - 1)), r.Position("C" + std::to_string(t)))
            << "tile " << t;
      }
    }
    EXPECT_EQ(r.in_use, 0);  // every store finished
  }
}

TEST(TilePipelineTest, PipelineWriteAloneOverlapsTheWriteWithTheNextTile) {
  Recorder r(2);
  ASSERT_TRUE(offload::RunTilePipeline(4, {2, false, true}, r.Hooks()).ok());
  EXPECT_TRUE(r.violations.empty()) << r.violations.front();
  for (int t = 1; t < 4; ++t) {
    // Not read ahead: tile t is fetched after t-1 was updated...
    EXPECT_GT(r.Position("F" + std::to_string(t)), r.Position("C" + std::to_string(t - 1)));
    // ...but t-1's write is still in flight while t is updated.
    EXPECT_GT(r.Position("s" + std::to_string(t - 1)), r.Position("C" + std::to_string(t)));
  }
}

// detach_store, where given, takes the stores the run would otherwise wait for at its end (one
// per slot, in tile order); the stores that free a slot for a later tile still finish.
TEST(TilePipelineTest, TheLastStoresAreDetachedWhereTheCallerTakesThem) {
  Recorder r(3);
  offload::TilePipelineHooks hooks = r.Hooks();
  hooks.detach_store = [&r](int64_t t, int s) { return r.Log('d', t, s); };
  ASSERT_TRUE(offload::RunTilePipeline(5, {3, true, true}, hooks).ok());
  EXPECT_TRUE(r.violations.empty()) << r.violations.front();
  for (const char* finished : {"s0", "s1"}) EXPECT_GE(r.Position(finished), 0) << finished;
  for (const char* detached : {"d2", "d3", "d4"}) EXPECT_GE(r.Position(detached), 0) << detached;
  for (const char* never : {"s2", "s3", "s4", "d0", "d1"}) EXPECT_EQ(r.Position(never), -1);
  EXPECT_LT(r.Position("d2"), r.Position("d3"));
  EXPECT_LT(r.Position("d3"), r.Position("d4"));
  EXPECT_EQ(r.log.back(), "d4");
}

TEST(TilePipelineTest, ASingleSlotSerializesEverything) {
  Recorder r(1);
  ASSERT_TRUE(offload::RunTilePipeline(3, {1, true, true}, r.Hooks()).ok());
  EXPECT_TRUE(r.violations.empty()) << r.violations.front();
  EXPECT_EQ(r.max_in_use, 1);
}

TEST(TilePipelineTest, AnUpdateErrorStopsTheStepAndDrainsEveryTransfer) {
  Recorder r(4);
  r.fail_at_what = 'C';
  r.fail_at_tile = 3;
  Status status = offload::RunTilePipeline(10, {4, true, true}, r.Hooks());
  ASSERT_EQ(status.code(), StatusCode::kIoError);
  EXPECT_THAT(status.message(), HasSubstr("injected at C3"));
  EXPECT_EQ(r.Position("C4"), -1);  // nothing updated after the failure
  EXPECT_EQ(r.Position("S3"), -1);
  for (const std::string begun : {"F4", "F5"}) {
    ASSERT_NE(r.Position(begun), -1) << begun;
    EXPECT_NE(r.Position("f" + begun.substr(1)), -1) << "fetch not settled: " << begun;
  }
  for (int t = 0; t < 3; ++t) EXPECT_NE(r.Position("s" + std::to_string(t)), -1) << t;
}

TEST(TilePipelineTest, AStoreErrorIsReportedForTheFirstFailingTile) {
  Recorder r(4);
  r.fail_at_what = 's';
  r.fail_at_tile = 8;  // among the last stores, which finish at the end of the step
  Status status = offload::RunTilePipeline(10, {4, true, true}, r.Hooks());
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("s8"));
  EXPECT_NE(r.Position("s9"), -1);  // the rest still settled
  EXPECT_TRUE(r.violations.empty());
}

}  // namespace
}  // namespace sluice::zero
