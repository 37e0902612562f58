// Trace recorder: every operation of the four traffic kinds (compute, PCIe, collectives, NVMe)
// and the CPU optimizer is recorded as (lane, name, start, end, bytes), so overlap can be looked
// at in Perfetto (WriteChromeTrace) and asserted in tests and benchmarks (the queries below).
//
//   TraceRecorder::Global().Enable();
//   { ScopedTraceEvent event("h2d", "fetch layer 3", bytes); CopyToDevice(...); }
//   SLUICE_RETURN_IF_ERROR(TraceRecorder::Global().WriteChromeTrace("trace.rank0.json", 0));
//
// A job's ranks go into one file, one Chrome-trace process per rank, through
// GatherChromeTrace (trace_merge.h).
//
// Recording appends to a buffer owned by the calling thread, so threads do not contend; a
// disabled recorder costs one relaxed atomic load per event and reads no clock.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "runtime/status.h"

namespace sluice {

// The lanes the engine records into. Any other name works too; these are registered first in
// every recorder so that they get the same Chrome-trace thread ids on every rank.
inline constexpr std::string_view kTraceLaneCompute = "compute";
inline constexpr std::string_view kTraceLaneH2D = "h2d";
inline constexpr std::string_view kTraceLaneD2H = "d2h";
inline constexpr std::string_view kTraceLaneComm = "comm";
inline constexpr std::string_view kTraceLaneNvme = "nvme";
inline constexpr std::string_view kTraceLaneCpuAdam = "cpu_adam";
// A host thread blocked on device work (Stream/Event/Device::Synchronize called by a thread that
// is not a stream's own worker): what the engine avoids inside a training step.
inline constexpr std::string_view kTraceLaneHostWait = "host_wait";

// Steady clock (CLOCK_MONOTONIC) in nanoseconds. All processes of a node share it, so the traces
// of several ranks line up when opened together.
int64_t TraceClockNs();
// The same clock in seconds, for wall times the host measures (step and phase times).
inline double TraceClockSeconds() { return 1e-9 * static_cast<double>(TraceClockNs()); }

struct TraceEvent {
  std::string lane;
  std::string name;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  uint64_t bytes = 0;

  int64_t duration_ns() const { return end_ns - start_ns; }
};

struct TraceLaneStats {
  int64_t events = 0;
  // Time during which at least one operation of the lane ran (the union of its intervals).
  int64_t busy_ns = 0;
  // Sum of the durations; larger than busy_ns when operations of the lane overlap.
  int64_t summed_ns = 0;
  uint64_t bytes = 0;
};

// Queries over a snapshot; events may come in any order.
std::map<std::string, TraceLaneStats, std::less<>> SummarizeTraceLanes(
    std::span<const TraceEvent> events);
// Busy time of one lane (0 for a lane without events).
int64_t TraceBusyNs(std::span<const TraceEvent> events, std::string_view lane);
// Time during which both lanes were busy: how much of their work overlapped.
int64_t TraceOverlapNs(std::span<const TraceEvent> events, std::string_view lane_a,
                       std::string_view lane_b);
// From the earliest start to the latest end (0 without events).
int64_t TraceWallSpanNs(std::span<const TraceEvent> events);

class TraceRecorder {
 public:
  static constexpr size_t kDefaultMaxEventsPerThread = size_t{1} << 20;

  // A thread that has recorded max_events_per_thread events drops further ones and counts them
  // (dropped_events()), so a long run with tracing left on has bounded memory.
  explicit TraceRecorder(bool enabled = false,
                         size_t max_events_per_thread = kDefaultMaxEventsPerThread);
  // Threads must have stopped recording into this recorder before it is destroyed.
  ~TraceRecorder();
  TraceRecorder(const TraceRecorder&) = delete;
  TraceRecorder& operator=(const TraceRecorder&) = delete;

  // The process-wide recorder the engine records into; disabled until Enable(). Never destroyed,
  // so threads that outlive main() may still record.
  static TraceRecorder& Global();

  void Enable() { enabled_.store(true, std::memory_order_relaxed); }
  void Disable() { enabled_.store(false, std::memory_order_relaxed); }
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }

  // Records one operation when enabled; a no-op otherwise. Thread-safe. start_ns <= end_ns.
  void Record(std::string_view lane, std::string_view name, int64_t start_ns, int64_t end_ns,
              uint64_t bytes = 0);

  // Forgets all events and the dropped count; lanes keep their ids.
  void Clear();

  // All events, ordered by start time; among equal starts the longer first, then by lane and
  // name. Safe while other threads record.
  std::vector<TraceEvent> Snapshot() const;
  uint64_t dropped_events() const;
  // Lane names in id order (registration order), including lanes without events.
  std::vector<std::string> Lanes() const;

  // Convenience queries over Snapshot().
  std::map<std::string, TraceLaneStats, std::less<>> LaneSummary() const;
  int64_t BusyNs(std::string_view lane) const;
  int64_t WallSpanNs() const;

  // Writes the events as Chrome trace JSON (opens in Perfetto and chrome://tracing): complete
  // events ("ph":"X", ts/dur in microseconds) with pid = rank and tid = the lane's id, metadata
  // naming the process "rank N" and each lane's thread, args.bytes on every event. Operations of
  // one lane that overlap without nesting (several NVMe requests in flight) go to extra tracks
  // named "lane/2", "lane/3", ... since Chrome-trace slices of one thread must nest. The file is
  // written atomically (temp file, fsync, rename); failures name the path.
  Status WriteChromeTrace(const std::string& path, int rank) const;
  // What WriteChromeTrace puts into traceEvents for process `rank`, with every time shifted by
  // clock_offset_ns: the process and track metadata, then the events, as JSON objects separated
  // by ",\n" (none before the first or after the last). For merging the ranks of a job into one
  // file (trace_merge.h).
  std::string ChromeTraceEvents(int rank, int64_t clock_offset_ns = 0) const;

 private:
  friend class ScopedTraceEvent;
  struct ThreadBuffer;

  void Append(std::string_view lane, std::string name, int64_t start_ns, int64_t end_ns,
              uint64_t bytes);
  ThreadBuffer& LocalBuffer();
  int32_t LaneIdLocked(std::string_view lane);  // registry_mu_ held

  const uint64_t id_;  // unique per recorder in the process: keys the per-thread buffer cache
  const size_t max_events_per_thread_;
  std::atomic<bool> enabled_;
  mutable std::mutex registry_mu_;
  std::vector<std::string> lanes_;  // index = lane id - 1
  std::vector<std::unique_ptr<ThreadBuffer>> buffers_;
  std::unordered_map<std::thread::id, ThreadBuffer*> buffer_by_thread_;
};

// Records the lifetime of a scope as one operation, if the recorder is enabled when the scope
// starts. The names are copied, so temporaries are fine.
class ScopedTraceEvent {
 public:
  ScopedTraceEvent(std::string_view lane, std::string_view name, uint64_t bytes = 0)
      : ScopedTraceEvent(TraceRecorder::Global(), lane, name, bytes) {}
  // The disabled path is inline: one relaxed load, no clock read, no copies.
  ScopedTraceEvent(TraceRecorder& recorder, std::string_view lane, std::string_view name,
                   uint64_t bytes = 0) {
    if (recorder.enabled()) Start(recorder, lane, name, bytes);
  }
  ~ScopedTraceEvent() {
    if (recorder_ != nullptr) Finish();
  }
  ScopedTraceEvent(const ScopedTraceEvent&) = delete;
  ScopedTraceEvent& operator=(const ScopedTraceEvent&) = delete;

  // For operations whose size is known only at the end (a read that may come up short).
  void set_bytes(uint64_t bytes) { bytes_ = bytes; }

 private:
  void Start(TraceRecorder& recorder, std::string_view lane, std::string_view name, uint64_t bytes);
  void Finish();

  TraceRecorder* recorder_ = nullptr;  // null when recording was disabled at the start
  std::string lane_;
  std::string name_;
  uint64_t bytes_ = 0;
  int64_t start_ns_ = 0;
};

}  // namespace sluice
