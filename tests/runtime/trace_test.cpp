#include "runtime/trace.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace sluice {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A fresh directory per test, removed afterwards.
class TraceFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           fmt::format("sluice_trace_{}_{}", info->name(), ::getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static json ReadJson(const fs::path& path) {
    std::ifstream in(path);
    return json::parse(in);
  }

  fs::path dir_;
};

std::vector<json> EventsWithPhase(const json& trace, const std::string& phase) {
  std::vector<json> events;
  for (const json& event : trace.at("traceEvents")) {
    if (event.at("ph") == phase) events.push_back(event);
  }
  return events;
}

// tid -> name from the thread_name metadata events.
std::map<int64_t, std::string> ThreadNames(const json& trace) {
  std::map<int64_t, std::string> names;
  for (const json& event : EventsWithPhase(trace, "M")) {
    if (event.at("name") == "thread_name") {
      names[event.at("tid").get<int64_t>()] = event.at("args").at("name").get<std::string>();
    }
  }
  return names;
}

TEST(TraceClockTest, IsMonotonicNanoseconds) {
  int64_t first = TraceClockNs();
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  int64_t second = TraceClockNs();
  EXPECT_GE(second - first, 2'000'000);
  EXPECT_LT(second - first, 2'000'000'000);
}

TEST(TraceRecorderTest, DisabledRecordsNothing) {
  TraceRecorder recorder(/*enabled=*/false);
  EXPECT_FALSE(recorder.enabled());
  recorder.Record("compute", "gemm", 10, 20, 64);
  { ScopedTraceEvent event(recorder, "h2d", "copy", 128); }
  EXPECT_TRUE(recorder.Snapshot().empty());
  recorder.Enable();
  recorder.Record("compute", "gemm", 10, 20, 64);
  EXPECT_EQ(recorder.Snapshot().size(), 1u);
  recorder.Disable();
  recorder.Record("compute", "gemm", 30, 40, 64);
  EXPECT_EQ(recorder.Snapshot().size(), 1u);
}

TEST(TraceRecorderTest, KeepsEveryFieldAndOrdersByStart) {
  TraceRecorder recorder(/*enabled=*/true);
  recorder.Record("nvme", "read swap", 300, 500, 4096);
  recorder.Record("compute", "forward", 100, 250, 0);
  recorder.Record("h2d", "fetch", 100, 180, 1 << 20);
  std::vector<TraceEvent> events = recorder.Snapshot();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].lane, "compute");
  EXPECT_EQ(events[0].name, "forward");
  EXPECT_EQ(events[0].start_ns, 100);
  EXPECT_EQ(events[0].end_ns, 250);
  EXPECT_EQ(events[0].duration_ns(), 150);
  EXPECT_EQ(events[1].lane, "h2d");
  EXPECT_EQ(events[1].bytes, uint64_t{1} << 20);
  EXPECT_EQ(events[2].lane, "nvme");
  EXPECT_EQ(events[2].name, "read swap");
  EXPECT_EQ(events[2].bytes, 4096u);
}

TEST(TraceRecorderTest, RecordsFromManyThreads) {
  TraceRecorder recorder(/*enabled=*/true);
  constexpr int kThreads = 6;
  constexpr int kPerThread = 2000;
  const std::vector<std::string> lanes = {"compute", "h2d", "d2h", "comm", "nvme", "cpu_adam"};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        int64_t start = int64_t{i} * 1000 + t;
        recorder.Record(lanes[t], fmt::format("t{}-{}", t, i), start, start + 500, i);
      }
    });
  }
  // Snapshots while recording must be safe and see a consistent prefix.
  for (int i = 0; i < 20; ++i) EXPECT_LE(recorder.Snapshot().size(), size_t{kThreads * kPerThread});
  for (std::thread& thread : threads) thread.join();

  std::vector<TraceEvent> events = recorder.Snapshot();
  ASSERT_EQ(events.size(), size_t{kThreads * kPerThread});
  std::set<std::string> names;
  for (size_t i = 0; i < events.size(); ++i) {
    if (i > 0) {
      ASSERT_LE(events[i - 1].start_ns, events[i].start_ns);
    }
    const TraceEvent& event = events[i];
    int t = static_cast<int>(event.start_ns % 1000);
    int index = static_cast<int>(event.start_ns / 1000);
    EXPECT_EQ(event.lane, lanes[t]);
    EXPECT_EQ(event.name, fmt::format("t{}-{}", t, index));
    EXPECT_EQ(event.bytes, static_cast<uint64_t>(index));
    EXPECT_EQ(event.duration_ns(), 500);
    names.insert(event.name);
  }
  EXPECT_EQ(names.size(), events.size());
  EXPECT_EQ(recorder.dropped_events(), 0u);
}

TEST(TraceRecorderTest, ScopedEventTimesItsScopeAndCopiesNames) {
  TraceRecorder recorder(/*enabled=*/true);
  int64_t before = TraceClockNs();
  {
    // A temporary name: the event must not keep a view of it.
    ScopedTraceEvent event(recorder, "cpu_adam", fmt::format("step {}", 7), 100);
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    event.set_bytes(12345);
  }
  int64_t after = TraceClockNs();
  std::vector<TraceEvent> events = recorder.Snapshot();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].lane, "cpu_adam");
  EXPECT_EQ(events[0].name, "step 7");
  EXPECT_EQ(events[0].bytes, 12345u);
  EXPECT_GE(events[0].start_ns, before);
  EXPECT_LE(events[0].end_ns, after);
  EXPECT_GE(events[0].duration_ns(), 3'000'000);
}

TEST(TraceRecorderTest, ScopedEventStartedWhileEnabledIsKept) {
  TraceRecorder recorder(/*enabled=*/true);
  {
    ScopedTraceEvent event(recorder, "comm", "all_gather");
    recorder.Disable();
  }
  EXPECT_EQ(recorder.Snapshot().size(), 1u);
}

TEST(TraceRecorderTest, GlobalRecorderIsSharedAndStartsDisabled) {
  TraceRecorder& global = TraceRecorder::Global();
  EXPECT_EQ(&global, &TraceRecorder::Global());
  EXPECT_FALSE(global.enabled());
  global.Clear();
  { ScopedTraceEvent event("compute", "ignored"); }
  EXPECT_TRUE(global.Snapshot().empty());
  global.Enable();
  { ScopedTraceEvent event("compute", "kept"); }
  global.Disable();
  std::vector<TraceEvent> events = global.Snapshot();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].name, "kept");
  global.Clear();
}

TEST(TraceRecorderTest, ClearForgetsEventsButKeepsLanes) {
  TraceRecorder recorder(/*enabled=*/true);
  recorder.Record("my_lane", "x", 0, 1);
  recorder.Clear();
  EXPECT_TRUE(recorder.Snapshot().empty());
  std::vector<std::string> lanes = recorder.Lanes();
  EXPECT_EQ(lanes.back(), "my_lane");
  recorder.Record("compute", "y", 2, 3);
  EXPECT_EQ(recorder.Snapshot().size(), 1u);
}

TEST(TraceRecorderTest, StandardLanesComeFirst) {
  TraceRecorder recorder;
  std::vector<std::string> expected = {"compute", "h2d",      "d2h",      "comm",
                                       "nvme",    "cpu_adam", "host_wait"};
  EXPECT_EQ(recorder.Lanes(), expected);
}

TEST(TraceRecorderTest, PerThreadCapDropsAndCounts) {
  TraceRecorder recorder(/*enabled=*/true, /*max_events_per_thread=*/10);
  for (int i = 0; i < 15; ++i) recorder.Record("nvme", "read", i, i + 1);
  std::thread other([&] {
    for (int i = 0; i < 4; ++i) recorder.Record("nvme", "write", i, i + 1);
  });
  other.join();
  EXPECT_EQ(recorder.Snapshot().size(), 14u);
  EXPECT_EQ(recorder.dropped_events(), 5u);
  recorder.Clear();
  EXPECT_EQ(recorder.dropped_events(), 0u);
}

TEST(TraceRecorderTest, RecordersDoNotShareThreadBuffers) {
  auto a = std::make_unique<TraceRecorder>(true);
  a->Record("compute", "a", 0, 1);
  a.reset();
  TraceRecorder b(true);
  b.Record("compute", "b", 0, 1);
  TraceRecorder c(true);
  c.Record("compute", "c", 0, 1);
  b.Record("compute", "b2", 1, 2);
  ASSERT_EQ(b.Snapshot().size(), 2u);
  EXPECT_EQ(b.Snapshot()[1].name, "b2");
  ASSERT_EQ(c.Snapshot().size(), 1u);
  EXPECT_EQ(c.Snapshot()[0].name, "c");
}

TEST(TraceQueryTest, BusyTimeIsTheUnionOfALanesIntervals) {
  TraceRecorder recorder(/*enabled=*/true);
  recorder.Record("compute", "a", 0, 100, 10);
  recorder.Record("compute", "b", 50, 150, 20);  // overlaps a
  recorder.Record("compute", "c", 300, 400, 30);
  recorder.Record("h2d", "x", 120, 320, 1000);
  std::map<std::string, TraceLaneStats, std::less<>> summary = recorder.LaneSummary();
  ASSERT_EQ(summary.size(), 2u);
  EXPECT_EQ(summary.at("compute").events, 3);
  EXPECT_EQ(summary.at("compute").busy_ns, 250);
  EXPECT_EQ(summary.at("compute").summed_ns, 300);
  EXPECT_EQ(summary.at("compute").bytes, 60u);
  EXPECT_EQ(summary.at("h2d").busy_ns, 200);
  EXPECT_EQ(summary.at("h2d").bytes, 1000u);
  EXPECT_EQ(recorder.BusyNs("compute"), 250);
  EXPECT_EQ(recorder.BusyNs("nvme"), 0);
  EXPECT_EQ(recorder.WallSpanNs(), 400);

  std::vector<TraceEvent> events = recorder.Snapshot();
  // compute busy [0,150) and [300,400); h2d [120,320): overlap 30 + 20.
  EXPECT_EQ(TraceOverlapNs(events, "compute", "h2d"), 50);
  EXPECT_EQ(TraceOverlapNs(events, "h2d", "compute"), 50);
  EXPECT_EQ(TraceOverlapNs(events, "compute", "nvme"), 0);
  EXPECT_EQ(TraceWallSpanNs({}), 0);
}

TEST_F(TraceFileTest, ChromeTraceFromSeveralThreadsParsesBack) {
  TraceRecorder recorder(/*enabled=*/true);
  const std::vector<std::string> lanes = {"compute", "h2d", "nvme", "my_lane"};
  std::vector<std::thread> threads;
  for (size_t t = 0; t < lanes.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        ScopedTraceEvent event(recorder, lanes[t], fmt::format("{} op {}", lanes[t], i),
                               1000 * t + i);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  std::vector<TraceEvent> recorded = recorder.Snapshot();

  fs::path path = dir_ / "trace.rank3.json";
  Status status = recorder.WriteChromeTrace(path.string(), 3);
  ASSERT_TRUE(status.ok()) << status.ToString();
  json trace = ReadJson(path);

  EXPECT_EQ(trace.at("otherData").at("rank"), 3);
  EXPECT_EQ(trace.at("otherData").at("dropped_events"), 0);
  std::vector<json> complete = EventsWithPhase(trace, "X");
  ASSERT_EQ(complete.size(), recorded.size());
  std::map<int64_t, std::string> thread_names = ThreadNames(trace);
  std::vector<std::string> lane_order = recorder.Lanes();
  std::set<std::string> lanes_seen;
  std::map<std::string, int> name_count;
  for (const json& event : complete) {
    EXPECT_EQ(event.at("pid"), 3);
    std::string lane = event.at("cat").get<std::string>();
    lanes_seen.insert(lane);
    int64_t tid = event.at("tid").get<int64_t>();
    // tid is the lane's id: its 1-based position among the recorder's lanes.
    int64_t lane_id =
        std::find(lane_order.begin(), lane_order.end(), lane) - lane_order.begin() + 1;
    EXPECT_EQ(tid, lane_id) << lane;
    EXPECT_EQ(thread_names.at(tid), lane);
    ASSERT_TRUE(event.at("ts").is_number());
    ASSERT_TRUE(event.at("dur").is_number());
    EXPECT_GE(event.at("dur").get<double>(), 0.0);
    EXPECT_TRUE(event.at("args").at("bytes").is_number_unsigned());
    ++name_count[event.at("name").get<std::string>()];
  }
  EXPECT_EQ(lanes_seen, std::set<std::string>(lanes.begin(), lanes.end()));
  // Lanes without events get no thread.
  EXPECT_EQ(thread_names.size(), lanes.size());
  // Every recorded event appears once, with its bytes and times (us, fractional).
  for (const TraceEvent& event : recorded) {
    EXPECT_EQ(name_count[event.name], 1) << event.name;
  }
  const TraceEvent& first = recorded.front();
  bool found = false;
  for (const json& event : complete) {
    if (event.at("name") != first.name) continue;
    found = true;
    EXPECT_NEAR(event.at("ts").get<double>() * 1000.0, static_cast<double>(first.start_ns), 1.0);
    EXPECT_NEAR(event.at("dur").get<double>() * 1000.0, static_cast<double>(first.duration_ns()),
                1.0);
    EXPECT_EQ(event.at("args").at("bytes").get<uint64_t>(), first.bytes);
  }
  EXPECT_TRUE(found);

  bool process_named = false;
  for (const json& event : EventsWithPhase(trace, "M")) {
    EXPECT_EQ(event.at("pid"), 3);
    if (event.at("name") == "process_name") {
      EXPECT_EQ(event.at("args").at("name"), "rank 3");
      process_named = true;
    }
  }
  EXPECT_TRUE(process_named);
}

TEST_F(TraceFileTest, TimesAreExactMicrosecondsWithFraction) {
  TraceRecorder recorder(/*enabled=*/true);
  recorder.Record("compute", "k", 1'234, 5'678, 7);
  recorder.Record("compute", "big", 1'700'000'000'123'456'789, 1'700'000'000'123'456'790, 0);
  fs::path path = dir_ / "t.json";
  ASSERT_TRUE(recorder.WriteChromeTrace(path.string(), 0).ok());
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"ts\":1.234,\"dur\":4.444"), std::string::npos) << text;
  EXPECT_NE(text.find("\"ts\":1700000000123456.789,\"dur\":0.001"), std::string::npos) << text;
  json trace = json::parse(text);
  std::vector<json> complete = EventsWithPhase(trace, "X");
  ASSERT_EQ(complete.size(), 2u);
  EXPECT_DOUBLE_EQ(complete[0].at("ts").get<double>(), 1.234);
  EXPECT_DOUBLE_EQ(complete[0].at("dur").get<double>(), 4.444);
  EXPECT_EQ(complete[0].at("args").at("bytes"), 7);
}

// Chrome-trace slices of one thread must nest; overlapping operations of one lane go to extra
// tracks "lane/2", ...
TEST_F(TraceFileTest, OverlappingEventsOfALaneGoToExtraTracks) {
  TraceRecorder recorder(/*enabled=*/true);
  recorder.Record("nvme", "read a", 0, 100);
  recorder.Record("nvme", "nested in a", 10, 20);
  recorder.Record("nvme", "read b", 50, 150);   // overlaps a without nesting
  recorder.Record("nvme", "read c", 60, 70);    // nests in a and b: the first track wins
  recorder.Record("nvme", "read e", 90, 160);   // overlaps a and b
  recorder.Record("nvme", "read d", 100, 200);  // starts as a ends: the first track again
  fs::path path = dir_ / "overlap.json";
  ASSERT_TRUE(recorder.WriteChromeTrace(path.string(), 1).ok());
  json trace = ReadJson(path);
  std::map<int64_t, std::string> thread_names = ThreadNames(trace);
  std::map<std::string, std::string> track_of;
  std::map<int64_t, std::vector<std::pair<double, double>>> slices;
  for (const json& event : EventsWithPhase(trace, "X")) {
    int64_t tid = event.at("tid").get<int64_t>();
    track_of[event.at("name").get<std::string>()] = thread_names.at(tid);
    double ts = event.at("ts").get<double>();
    slices[tid].emplace_back(ts, ts + event.at("dur").get<double>());
  }
  EXPECT_EQ(track_of.at("read a"), "nvme");
  EXPECT_EQ(track_of.at("nested in a"), "nvme");
  EXPECT_EQ(track_of.at("read b"), "nvme/2");
  EXPECT_EQ(track_of.at("read c"), "nvme");
  EXPECT_EQ(track_of.at("read e"), "nvme/3");
  EXPECT_EQ(track_of.at("read d"), "nvme");
  // Within every track, any two slices are disjoint or nested.
  for (const auto& [tid, intervals] : slices) {
    for (const auto& a : intervals) {
      for (const auto& b : intervals) {
        bool disjoint = a.second <= b.first || b.second <= a.first;
        bool nested = (a.first <= b.first && b.second <= a.second) ||
                      (b.first <= a.first && a.second <= b.second);
        EXPECT_TRUE(disjoint || nested) << thread_names.at(tid);
      }
    }
  }
}

TEST_F(TraceFileTest, NamesAreEscaped) {
  TraceRecorder recorder(/*enabled=*/true);
  std::string name = "quote \" backslash \\ newline \n tab \t";
  recorder.Record("lane \"x\"", name, 0, 1);
  fs::path path = dir_ / "escaped.json";
  ASSERT_TRUE(recorder.WriteChromeTrace(path.string(), 0).ok());
  json trace = ReadJson(path);
  std::vector<json> complete = EventsWithPhase(trace, "X");
  ASSERT_EQ(complete.size(), 1u);
  EXPECT_EQ(complete[0].at("name"), name);
  EXPECT_EQ(complete[0].at("cat"), "lane \"x\"");
}

TEST_F(TraceFileTest, NonAsciiNamesStayValidJson) {
  TraceRecorder recorder(/*enabled=*/true);
  recorder.Record("compute", "softmax \u03a9", 0, 1);  // valid UTF-8 is kept
  recorder.Record("compute", "bad \xff byte", 2, 3);   // invalid UTF-8 is replaced
  fs::path path = dir_ / "utf8.json";
  ASSERT_TRUE(recorder.WriteChromeTrace(path.string(), 0).ok());
  json trace = ReadJson(path);  // throws on invalid JSON or UTF-8
  std::vector<json> complete = EventsWithPhase(trace, "X");
  ASSERT_EQ(complete.size(), 2u);
  EXPECT_EQ(complete[0].at("name"), "softmax \u03a9");
  EXPECT_EQ(complete[1].at("name").get<std::string>().substr(0, 4), "bad ");
}

TEST_F(TraceFileTest, EmptyTraceIsValidJson) {
  TraceRecorder recorder;
  fs::path path = dir_ / "empty.json";
  ASSERT_TRUE(recorder.WriteChromeTrace(path.string(), 0).ok());
  json trace = ReadJson(path);
  EXPECT_TRUE(EventsWithPhase(trace, "X").empty());
  EXPECT_TRUE(ThreadNames(trace).empty());
}

TEST_F(TraceFileTest, WriteReplacesTheFileAndLeavesNoTempFiles) {
  TraceRecorder recorder(/*enabled=*/true);
  fs::path path = dir_ / "trace.json";
  {
    std::ofstream old(path);
    old << "old contents";
  }
  recorder.Record("comm", "all_reduce", 5, 9, 256);
  ASSERT_TRUE(recorder.WriteChromeTrace(path.string(), 0).ok());
  json trace = ReadJson(path);
  EXPECT_EQ(EventsWithPhase(trace, "X").size(), 1u);
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    files.push_back(entry.path().filename().string());
  }
  EXPECT_EQ(files, std::vector<std::string>{"trace.json"});
}

TEST_F(TraceFileTest, WriteIntoMissingDirectoryNamesThePath) {
  TraceRecorder recorder(/*enabled=*/true);
  recorder.Record("compute", "k", 0, 1);
  std::string path = (dir_ / "no_such_dir" / "trace.json").string();
  Status status = recorder.WriteChromeTrace(path, 0);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kIoError);
  EXPECT_NE(status.message().find(path), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("ENOENT"), std::string::npos) << status.message();
  EXPECT_FALSE(fs::exists(dir_ / "no_such_dir"));
}

TEST_F(TraceFileTest, LargeTraceIsWrittenInChunks) {
  TraceRecorder recorder(/*enabled=*/true);
  constexpr int kEvents = 30'000;  // a few MiB of JSON: several flushes
  for (int i = 0; i < kEvents; ++i) {
    recorder.Record(i % 2 == 0 ? "h2d" : "d2h", fmt::format("copy {:06}", i), int64_t{i} * 10,
                    int64_t{i} * 10 + 5, 1 << 16);
  }
  fs::path path = dir_ / "large.json";
  ASSERT_TRUE(recorder.WriteChromeTrace(path.string(), 0).ok());
  EXPECT_GT(fs::file_size(path), size_t{2} << 20);
  json trace = ReadJson(path);
  EXPECT_EQ(EventsWithPhase(trace, "X").size(), size_t{kEvents});
}

}  // namespace
}  // namespace sluice
