#include "runtime/trace.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <tuple>
#include <utility>

#include "runtime/check.h"
#include "runtime/foreign_call.h"
#include "runtime/json_text.h"

namespace sluice {

struct TraceRecorder::ThreadBuffer {
  struct Event {
    int32_t lane;
    std::string name;
    int64_t start_ns;
    int64_t end_ns;
    uint64_t bytes;
  };

  // Taken by the owning thread for every event and by snapshots; contended only while a
  // snapshot copies this buffer.
  std::mutex mu;
  std::deque<Event> events;
  uint64_t dropped = 0;
  // Lane ids this thread has resolved, so recording does not touch the shared registry. Only
  // the owning thread uses it, without a lock.
  std::vector<std::pair<std::string, int32_t>> lane_ids;
};

namespace {

std::atomic<uint64_t> next_recorder_id{1};

// Merged, sorted busy intervals of one lane.
std::vector<std::pair<int64_t, int64_t>> BusyIntervals(std::span<const TraceEvent> events,
                                                       std::string_view lane) {
  std::vector<std::pair<int64_t, int64_t>> intervals;
  for (const TraceEvent& event : events) {
    if (event.lane == lane) intervals.emplace_back(event.start_ns, event.end_ns);
  }
  std::sort(intervals.begin(), intervals.end());
  std::vector<std::pair<int64_t, int64_t>> merged;
  for (const auto& interval : intervals) {
    if (!merged.empty() && interval.first <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, interval.second);
    } else {
      merged.push_back(interval);
    }
  }
  return merged;
}

int64_t TotalLength(const std::vector<std::pair<int64_t, int64_t>>& intervals) {
  int64_t total = 0;
  for (const auto& [start, end] : intervals) total += end - start;
  return total;
}

// Chrome traces count in microseconds; printing the nanoseconds as an exact decimal keeps full
// precision for absolute monotonic times (about 1e12 us), which a double printout would not.
void AppendMicros(std::string& out, int64_t ns) {
  if (ns < 0) {
    out.push_back('-');
    ns = -ns;
  }
  fmt::format_to(std::back_inserter(out), "{}.{:03}", ns / 1000, ns % 1000);
}

// A JSON string literal. Names are ASCII in practice and escaped here directly (the writer's hot
// path); text with other bytes goes through nlohmann, which also repairs invalid UTF-8.
void AppendJsonString(std::string& out, std::string_view text) {
  bool ascii = std::all_of(text.begin(), text.end(),
                           [](char c) { return static_cast<unsigned char>(c) < 0x80; });
  if (!ascii) {
    out += JsonText(nlohmann::json(std::string(text)));
    return;
  }
  out.push_back('"');
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      fmt::format_to(std::back_inserter(out), "\\u{:04x}", static_cast<int>(c));
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
}

// Writes a file so that readers see either the old file or the complete new one: a temp file
// beside the target, fsync, rename, fsync of the directory.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path) : path_(std::move(path)) {
    static std::atomic<uint64_t> counter{0};
    temp_path_ = fmt::format("{}.tmp.{}.{}", path_, ::getpid(), counter.fetch_add(1));
  }
  ~AtomicFileWriter() {
    if (fd_ >= 0) ::close(fd_);
    if (created_ && !committed_) ::unlink(temp_path_.c_str());
  }
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  Status Open() {
    Status status = OpenTemp();
    return status.ok()
               ? status
               : std::move(status).WithContext("creating " + temp_path_ +
                                               " (the directory must exist and be writable)");
  }

  // Text appended here is written out in large chunks.
  std::string& buffer() { return buffer_; }

  Status FlushIfLarge() { return buffer_.size() >= kChunkBytes ? Flush() : OkStatus(); }

  Status Commit() {
    SLUICE_RETURN_IF_ERROR(Flush());
    Status status = SyncAndClose();
    if (!status.ok()) return std::move(status).WithContext("finishing " + temp_path_);
    status = Rename();
    if (!status.ok()) return std::move(status).WithContext("renaming " + temp_path_);
    committed_ = true;
    status = SyncDirectory();
    if (!status.ok()) return std::move(status).WithContext("syncing the directory of " + path_);
    return OkStatus();
  }

 private:
  static constexpr size_t kChunkBytes = size_t{1} << 20;

  Status OpenTemp() {
    SLUICE_TRY_SYS(fd_ =
                       ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    created_ = true;
    return OkStatus();
  }

  Status Flush() {
    size_t done = 0;
    while (done < buffer_.size()) {
      ssize_t written = 0;
      SLUICE_TRY_SYS(written = ::write(fd_, buffer_.data() + done, buffer_.size() - done));
      done += static_cast<size_t>(written);
    }
    buffer_.clear();
    return OkStatus();
  }

  Status SyncAndClose() {
    SLUICE_TRY_SYS(::fsync(fd_));
    int fd = std::exchange(fd_, -1);
    SLUICE_TRY_SYS(::close(fd));
    return OkStatus();
  }

  Status Rename() {
    SLUICE_TRY_SYS(::rename(temp_path_.c_str(), path_.c_str()));
    return OkStatus();
  }

  Status SyncDirectory() {
    size_t slash = path_.rfind('/');
    std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path_.substr(0, slash);
    int dir_fd = -1;
    SLUICE_TRY_SYS(dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    struct Closer {
      int fd;
      ~Closer() { ::close(fd); }
    } closer{dir_fd};
    SLUICE_TRY_SYS(::fsync(dir_fd));
    return OkStatus();
  }

  std::string path_;
  std::string temp_path_;
  std::string buffer_;
  int fd_ = -1;
  bool created_ = false;
  bool committed_ = false;
};

// Chrome-trace slices of one thread must nest. Each event gets the first track of its lane
// whose open slices it nests inside (or which is idle); events must come ordered by start, and
// for equal starts the longer first.
class TrackAssigner {
 public:
  int Assign(const TraceEvent& event) {
    for (size_t track = 0; track < open_ends_.size(); ++track) {
      std::vector<int64_t>& stack = open_ends_[track];
      while (!stack.empty() && stack.back() <= event.start_ns) stack.pop_back();
      if (stack.empty() || event.end_ns <= stack.back()) {
        stack.push_back(event.end_ns);
        return static_cast<int>(track);
      }
    }
    open_ends_.push_back({event.end_ns});
    return static_cast<int>(open_ends_.size() - 1);
  }

 private:
  std::vector<std::vector<int64_t>> open_ends_;  // per track: ends of the slices still open
};

// Track k > 0 of lane id L gets tid L + k * kTrackTidStride.
constexpr int64_t kTrackTidStride = 1 << 16;

}  // namespace

int64_t TraceClockNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::map<std::string, TraceLaneStats, std::less<>> SummarizeTraceLanes(
    std::span<const TraceEvent> events) {
  std::map<std::string, TraceLaneStats, std::less<>> summary;
  for (const TraceEvent& event : events) {
    TraceLaneStats& stats = summary[event.lane];
    ++stats.events;
    stats.summed_ns += event.duration_ns();
    stats.bytes += event.bytes;
  }
  for (auto& [lane, stats] : summary) stats.busy_ns = TotalLength(BusyIntervals(events, lane));
  return summary;
}

int64_t TraceBusyNs(std::span<const TraceEvent> events, std::string_view lane) {
  return TotalLength(BusyIntervals(events, lane));
}

int64_t TraceOverlapNs(std::span<const TraceEvent> events, std::string_view lane_a,
                       std::string_view lane_b) {
  std::vector<std::pair<int64_t, int64_t>> a = BusyIntervals(events, lane_a);
  std::vector<std::pair<int64_t, int64_t>> b = BusyIntervals(events, lane_b);
  int64_t overlap = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    int64_t start = std::max(a[i].first, b[j].first);
    int64_t end = std::min(a[i].second, b[j].second);
    if (start < end) overlap += end - start;
    if (a[i].second < b[j].second) {
      ++i;
    } else {
      ++j;
    }
  }
  return overlap;
}

int64_t TraceWallSpanNs(std::span<const TraceEvent> events) {
  if (events.empty()) return 0;
  int64_t first = events.front().start_ns;
  int64_t last = events.front().end_ns;
  for (const TraceEvent& event : events) {
    first = std::min(first, event.start_ns);
    last = std::max(last, event.end_ns);
  }
  return last - first;
}

TraceRecorder::TraceRecorder(bool enabled, size_t max_events_per_thread)
    : id_(next_recorder_id.fetch_add(1)),
      max_events_per_thread_(max_events_per_thread),
      enabled_(enabled) {
  std::lock_guard lock(registry_mu_);
  for (std::string_view lane : {kTraceLaneCompute, kTraceLaneH2D, kTraceLaneD2H, kTraceLaneComm,
                                kTraceLaneNvme, kTraceLaneCpuAdam, kTraceLaneHostWait}) {
    LaneIdLocked(lane);
  }
}

TraceRecorder::~TraceRecorder() = default;

TraceRecorder& TraceRecorder::Global() {
  static TraceRecorder* const recorder = new TraceRecorder(/*enabled=*/false);
  return *recorder;
}

void TraceRecorder::Record(std::string_view lane, std::string_view name, int64_t start_ns,
                           int64_t end_ns, uint64_t bytes) {
  if (!enabled()) return;
  Append(lane, std::string(name), start_ns, end_ns, bytes);
}

void TraceRecorder::Append(std::string_view lane, std::string name, int64_t start_ns,
                           int64_t end_ns, uint64_t bytes) {
  SLUICE_CHECK_LE(start_ns, end_ns)
      << "trace event '" << name << "' on lane '" << lane << "' ends before it starts";
  ThreadBuffer& buffer = LocalBuffer();
  int32_t lane_id = -1;
  for (const auto& [known, id] : buffer.lane_ids) {
    if (known == lane) {
      lane_id = id;
      break;
    }
  }
  if (lane_id < 0) {
    {
      std::lock_guard lock(registry_mu_);
      lane_id = LaneIdLocked(lane);
    }
    buffer.lane_ids.emplace_back(std::string(lane), lane_id);
  }
  std::lock_guard lock(buffer.mu);
  if (buffer.events.size() >= max_events_per_thread_) {
    ++buffer.dropped;
    return;
  }
  buffer.events.push_back({lane_id, std::move(name), start_ns, end_ns, bytes});
}

TraceRecorder::ThreadBuffer& TraceRecorder::LocalBuffer() {
  // Recorder ids are never reused, so a cached entry of a destroyed recorder never matches.
  struct Cache {
    uint64_t recorder_id = 0;
    ThreadBuffer* buffer = nullptr;
  };
  thread_local Cache cache;
  if (cache.recorder_id == id_) return *cache.buffer;
  std::lock_guard lock(registry_mu_);
  ThreadBuffer*& buffer = buffer_by_thread_[std::this_thread::get_id()];
  if (buffer == nullptr) {
    buffers_.push_back(std::make_unique<ThreadBuffer>());
    buffer = buffers_.back().get();
  }
  cache = {id_, buffer};
  return *buffer;
}

int32_t TraceRecorder::LaneIdLocked(std::string_view lane) {
  for (size_t i = 0; i < lanes_.size(); ++i) {
    if (lanes_[i] == lane) return static_cast<int32_t>(i + 1);
  }
  lanes_.emplace_back(lane);
  return static_cast<int32_t>(lanes_.size());
}

void TraceRecorder::Clear() {
  std::lock_guard lock(registry_mu_);
  for (const auto& buffer : buffers_) {
    std::lock_guard buffer_lock(buffer->mu);
    buffer->events.clear();
    buffer->dropped = 0;
  }
}

std::vector<TraceEvent> TraceRecorder::Snapshot() const {
  std::vector<TraceEvent> events;
  {
    std::lock_guard lock(registry_mu_);
    for (const auto& buffer : buffers_) {
      std::lock_guard buffer_lock(buffer->mu);
      for (const ThreadBuffer::Event& event : buffer->events) {
        events.push_back(
            {lanes_[event.lane - 1], event.name, event.start_ns, event.end_ns, event.bytes});
      }
    }
  }
  // Longer first among equal starts, so an enclosing operation precedes what it encloses.
  std::sort(events.begin(), events.end(), [](const TraceEvent& a, const TraceEvent& b) {
    return std::tie(a.start_ns, b.end_ns, a.lane, a.name) <
           std::tie(b.start_ns, a.end_ns, b.lane, b.name);
  });
  return events;
}

uint64_t TraceRecorder::dropped_events() const {
  std::lock_guard lock(registry_mu_);
  uint64_t dropped = 0;
  for (const auto& buffer : buffers_) {
    std::lock_guard buffer_lock(buffer->mu);
    dropped += buffer->dropped;
  }
  return dropped;
}

std::vector<std::string> TraceRecorder::Lanes() const {
  std::lock_guard lock(registry_mu_);
  return lanes_;
}

std::map<std::string, TraceLaneStats, std::less<>> TraceRecorder::LaneSummary() const {
  return SummarizeTraceLanes(Snapshot());
}

int64_t TraceRecorder::BusyNs(std::string_view lane) const { return TraceBusyNs(Snapshot(), lane); }

int64_t TraceRecorder::WallSpanNs() const { return TraceWallSpanNs(Snapshot()); }

namespace {

// Process `rank`'s Chrome-trace objects: its name and sort index, each track's name and sort
// index, then the events (in Snapshot order, shifted by offset_ns), separated by ",\n" with none
// before the first. after_event runs after each event, so a writer can flush a large buffer.
Status AppendChromeTraceProcess(std::string& out, int rank, int64_t offset_ns,
                                const std::vector<TraceEvent>& events,
                                const std::vector<std::string>& lanes,
                                const std::function<Status()>& after_event) {
  std::map<std::string_view, int64_t> lane_ids;
  for (size_t i = 0; i < lanes.size(); ++i) lane_ids[lanes[i]] = static_cast<int64_t>(i + 1);

  // Snapshot's order (by start, longer first) is what the track assignment needs.
  std::map<std::string_view, TrackAssigner> assigners;
  std::vector<int64_t> tids(events.size());
  std::map<int64_t, std::pair<std::string, int64_t>> tracks;  // tid -> (name, sort index)
  for (size_t i = 0; i < events.size(); ++i) {
    const TraceEvent& event = events[i];
    int track = assigners[event.lane].Assign(event);
    int64_t lane_id = lane_ids.at(event.lane);
    tids[i] = lane_id + track * kTrackTidStride;
    if (!tracks.contains(tids[i])) {
      std::string name = track == 0 ? event.lane : fmt::format("{}/{}", event.lane, track + 1);
      tracks[tids[i]] = {std::move(name), lane_id * 1000 + track};
    }
  }

  fmt::format_to(std::back_inserter(out),
                 "{{\"ph\":\"M\",\"pid\":{0},\"tid\":0,\"name\":\"process_name\","
                 "\"args\":{{\"name\":\"rank {0}\"}}}},\n"
                 "{{\"ph\":\"M\",\"pid\":{0},\"tid\":0,\"name\":\"process_sort_index\","
                 "\"args\":{{\"sort_index\":{0}}}}}",
                 rank);
  for (const auto& [tid, track] : tracks) {
    fmt::format_to(std::back_inserter(out),
                   ",\n{{\"ph\":\"M\",\"pid\":{},\"tid\":{},\"name\":\"thread_name\","
                   "\"args\":{{\"name\":",
                   rank, tid);
    AppendJsonString(out, track.first);
    fmt::format_to(std::back_inserter(out),
                   "}}}},\n{{\"ph\":\"M\",\"pid\":{},\"tid\":{},"
                   "\"name\":\"thread_sort_index\",\"args\":{{\"sort_index\":{}}}}}",
                   rank, tid, track.second);
  }
  for (size_t i = 0; i < events.size(); ++i) {
    const TraceEvent& event = events[i];
    fmt::format_to(std::back_inserter(out),
                   ",\n{{\"ph\":\"X\",\"pid\":{},\"tid\":{},\"name\":", rank, tids[i]);
    AppendJsonString(out, event.name);
    out += ",\"cat\":";
    AppendJsonString(out, event.lane);
    out += ",\"ts\":";
    AppendMicros(out, event.start_ns + offset_ns);
    out += ",\"dur\":";
    AppendMicros(out, event.duration_ns());
    fmt::format_to(std::back_inserter(out), ",\"args\":{{\"bytes\":{}}}}}", event.bytes);
    if (after_event) SLUICE_RETURN_IF_ERROR(after_event());
  }
  return OkStatus();
}

}  // namespace

Status TraceRecorder::WriteChromeTrace(const std::string& path, int rank) const {
  std::vector<TraceEvent> events = Snapshot();
  // Lanes only grow, so every lane of the snapshot is listed.
  std::vector<std::string> lanes = Lanes();
  uint64_t dropped = dropped_events();

  AtomicFileWriter writer(path);
  auto with_path = [&path](Status status) {
    return status.ok() ? status : std::move(status).WithContext("writing Chrome trace " + path);
  };
  SLUICE_RETURN_IF_ERROR(with_path(writer.Open()));
  std::string& out = writer.buffer();
  fmt::format_to(std::back_inserter(out),
                 "{{\"displayTimeUnit\":\"ms\",\"otherData\":{{\"rank\":{},\"events\":{},"
                 "\"dropped_events\":{},\"clock\":\"CLOCK_MONOTONIC\"}},\"traceEvents\":[\n",
                 rank, events.size(), dropped);
  SLUICE_RETURN_IF_ERROR(
      AppendChromeTraceProcess(out, rank, /*offset_ns=*/0, events, lanes,
                               [&writer, &with_path] { return with_path(writer.FlushIfLarge()); }));
  out += "\n]}\n";
  return with_path(writer.Commit());
}

std::string TraceRecorder::ChromeTraceEvents(int rank, int64_t clock_offset_ns) const {
  std::vector<TraceEvent> events = Snapshot();
  std::vector<std::string> lanes = Lanes();
  std::string out;
  Status status = AppendChromeTraceProcess(out, rank, clock_offset_ns, events, lanes, nullptr);
  SLUICE_CHECK(status.ok()) << status.ToString();  // nothing fails without a writer
  return out;
}

void ScopedTraceEvent::Start(TraceRecorder& recorder, std::string_view lane, std::string_view name,
                             uint64_t bytes) {
  recorder_ = &recorder;
  lane_ = lane;
  name_ = name;
  bytes_ = bytes;
  start_ns_ = TraceClockNs();
}

void ScopedTraceEvent::Finish() {
  recorder_->Append(lane_, std::move(name_), start_ns_, TraceClockNs(), bytes_);
}

}  // namespace sluice
