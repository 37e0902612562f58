// DeepSpeed's csv_monitor: one CSV file per scalar in the monitor's directory, named after the
// tag with '/' and ' ' turned into '_' ("Train/Samples/train_loss" ->
// Train_Samples_train_loss.csv), whose first row is "step,<the tag's last segment>" and every later
// row "<step>,<value>" (DeepSpeed's csvMonitor, with "\n" line ends where Python's csv module
// writes "\r\n"). Each row is one write(2) to a file opened with O_APPEND: a killed run keeps every
// row it wrote, and a reader tailing the file never sees half of one.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "engine/train/monitor.h"
#include "runtime/durable_file.h"
#include "runtime/status.h"

namespace sluice::train {

class CsvMonitor final : public Monitor {
 public:
  // Creates `dir` and its parents. The monitor's files already there (the *.csv files whose
  // first row starts with "step,") are those of an earlier run of the job: a fresh run
  // (`resumed_step` nullopt) removes them; a resumed one keeps their rows up to step
  // *resumed_step (in the files' unit, samples) and drops later ones (a run that went on past the
  // checkpoint), so that the continued run appends without repeating a step.
  static Result<std::unique_ptr<CsvMonitor>> Open(const std::string& dir,
                                                  std::optional<int64_t> resumed_step);

  // A tag's file opens (and gets its header) at its first event.
  Status Write(std::span<const MonitorEvent> events) override;

  const std::string& dir() const { return dir_; }
  // "Train_Samples_train_loss.csv" for "Train/Samples/train_loss".
  static std::string FileName(std::string_view tag);
  // A value as Python's str(float) writes it: "0.5", "2.0", "1e-05", "inf", "nan".
  static std::string FormatValue(double value);

 private:
  explicit CsvMonitor(std::string dir) : dir_(std::move(dir)) {}
  Result<int> FileFor(const std::string& tag);

  std::string dir_;
  std::map<std::string, ScopedFd, std::less<>> files_;  // by tag
};

}  // namespace sluice::train
