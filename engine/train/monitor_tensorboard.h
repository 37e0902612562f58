// DeepSpeed's tensorboard monitor without TensorFlow or protobuf: a TensorBoard events file
// written directly. The file is a sequence of TFRecords (uint64 length, masked CRC32C of those 8
// bytes, the payload, masked CRC32C of the payload; little-endian), each payload one Event
// protobuf, encoded by hand:
//
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3;
//             Summary summary = 5; SessionLog session_log = 7; }
//   Summary { repeated Value value = 1; }  Value { string tag = 1; float simple_value = 2; }
//   SessionLog { SessionStatus status = 1; }  (START = 1)
//
// The first record is file_version "brain.Event:2", then a SessionLog START (below), then one
// Event per scalar, as torch's SummaryWriter.add_scalar writes them. Each Write is one write(2):
// a killed run keeps every scalar it logged.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "engine/train/monitor.h"
#include "runtime/durable_file.h"
#include "runtime/status.h"

namespace sluice::train {

class TensorBoardMonitor final : public Monitor {
 public:
  // Creates `dir` and its parents and a new events file in it,
  // events.out.tfevents.<unix seconds>.<host name> (".1", ".2", ... appended if that name is
  // taken). Its SessionLog START is at step 0 for a fresh run and at *resumed_step + 1 (steps in
  // the file's unit, samples) for a resumed one: TensorBoard then drops what the directory's
  // earlier files hold from that step on (an earlier run of the job, or the steps a run made past
  // the checkpoint it is resumed from), as it does for TensorFlow's restarted writers.
  static Result<std::unique_ptr<TensorBoardMonitor>> Open(const std::string& dir,
                                                          std::optional<int64_t> resumed_step);

  Status Write(std::span<const MonitorEvent> events) override;

  const std::string& path() const { return path_; }

 private:
  TensorBoardMonitor(ScopedFd fd, std::string path) : fd_(std::move(fd)), path_(std::move(path)) {}

  ScopedFd fd_;
  std::string path_;
};

// CRC-32C (Castagnoli), as TFRecord uses it.
uint32_t Crc32c(std::string_view data);
// TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t MaskedCrc32c(std::string_view data);
// `payload` framed as one TFRecord.
std::string TfRecord(std::string_view payload);

}  // namespace sluice::train
