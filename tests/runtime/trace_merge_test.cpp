// GatherChromeTrace under mpirun -np 1 and 2: one valid JSON file with one Perfetto process per
// rank (pid = rank, named "rank N"), every rank's events in it, written by rank 0 alone.
#include "runtime/trace_merge.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "runtime/trace.h"
#include "tests/common/test_world.h"

namespace sluice {
namespace {

using ::sluice::testing::TestWorld;

// The same path on every rank of one mpirun (they share TempDir), another for each world size
// (ctest runs the -np 1 and -np 2 tests side by side).
std::string SharedPath(const std::string& name) {
  return ::testing::TempDir() + "sluice_trace_merge_np" + std::to_string(TestWorld().size()) + "_" +
         name;
}

TEST(TraceMergeTest, EveryRankIsAProcessOfOneFile) {
  Comm& world = TestWorld();
  const int rank = world.rank();
  TraceRecorder recorder(/*enabled=*/true);
  // Rank r records r + 2 events on its compute lane and one with a name that needs escaping.
  const int64_t base = TraceClockNs();
  for (int i = 0; i < rank + 2; ++i) {
    recorder.Record(kTraceLaneCompute,
                    "forward rank " + std::to_string(rank) + " #" + std::to_string(i),
                    base + 1000 * i, base + 1000 * i + 500, 64);
  }
  recorder.Record(kTraceLaneComm, "all_gather \"quoted\"", base, base + 2000, 128);

  const std::string path = SharedPath("trace.json");
  if (rank == 0) std::filesystem::remove(path);
  ASSERT_TRUE(world.Barrier().ok());
  Status status = GatherChromeTrace(world, recorder, rank == 0 ? path : "");
  ASSERT_TRUE(status.ok()) << status.ToString();
  ASSERT_TRUE(world.Barrier().ok());
  if (rank != 0) return;

  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << path;
  const nlohmann::json trace = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(trace.is_discarded()) << "not valid JSON: " << path;
  const int n = world.size();
  EXPECT_EQ(trace["otherData"]["ranks"], n);
  ASSERT_EQ(trace["otherData"]["events"].size(), static_cast<size_t>(n));
  std::map<int, std::string> process_names;
  std::map<int, int> forward_events;
  std::map<int, int> comm_events;
  for (const nlohmann::json& event : trace["traceEvents"]) {
    const int pid = event["pid"].get<int>();
    EXPECT_GE(pid, 0);
    EXPECT_LT(pid, n);
    if (event["ph"] == "M" && event["name"] == "process_name") {
      process_names[pid] = event["args"]["name"].get<std::string>();
    }
    if (event["ph"] != "X") continue;
    const std::string name = event["name"].get<std::string>();
    if (event["cat"] == "compute") {
      EXPECT_EQ(name.rfind("forward rank " + std::to_string(pid) + " #", 0), 0u) << name;
      ++forward_events[pid];
    } else {
      EXPECT_EQ(name, "all_gather \"quoted\"");
      EXPECT_EQ(event["args"]["bytes"], 128);
      ++comm_events[pid];
    }
  }
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(process_names[r], "rank " + std::to_string(r));
    EXPECT_EQ(forward_events[r], r + 2) << "rank " << r;
    EXPECT_EQ(comm_events[r], 1) << "rank " << r;
    EXPECT_EQ(trace["otherData"]["events"][r], r + 3);
    // Same host: the shared monotonic clock is kept, unshifted.
    EXPECT_EQ(trace["otherData"]["clock_offsets_ns"][r], 0);
  }
  std::filesystem::remove(path);
}

// An empty recorder still contributes its process, and rank 0 can skip writing.
TEST(TraceMergeTest, EmptyRecordersAndNoPath) {
  Comm& world = TestWorld();
  TraceRecorder recorder(/*enabled=*/true);
  const std::string path = SharedPath("empty.json");
  Status status = GatherChromeTrace(world, recorder, world.rank() == 0 ? path : "");
  ASSERT_TRUE(status.ok()) << status.ToString();
  if (world.rank() == 0) {
    std::ifstream in(path);
    const nlohmann::json trace = nlohmann::json::parse(in, nullptr, false);
    ASSERT_FALSE(trace.is_discarded());
    std::set<int> pids;
    for (const nlohmann::json& event : trace["traceEvents"]) pids.insert(event["pid"].get<int>());
    EXPECT_EQ(pids.size(), static_cast<size_t>(world.size()));
    std::filesystem::remove(path);
  }
  status = GatherChromeTrace(world, recorder, "");
  ASSERT_TRUE(status.ok()) << status.ToString();
}

}  // namespace
}  // namespace sluice
