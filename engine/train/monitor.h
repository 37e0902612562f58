// DeepSpeed's monitors (its `csv_monitor` and `tensorboard` config sections): scalars such as the
// training loss, keyed by the samples trained on so far, written as the run goes into
// output_path/job_name by each configured writer (monitor_csv.h, monitor_tensorboard.h). Rank 0
// alone writes, once per optimizer step; every write reaches the file system before it returns,
// so a killed run keeps what it logged.
//
//   SLUICE_ASSIGN_OR_RETURN(MonitorFanOut monitors, OpenMonitors(config, resumed_step));
//   SLUICE_RETURN_IF_ERROR(monitors.Write(StepMonitorEvents(metrics, samples, fp16)));
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/config/config.h"
#include "engine/train/step_metrics.h"
#include "runtime/status.h"

namespace sluice::train {

// DeepSpeed's event tuple (log_name, value, step).
struct MonitorEvent {
  std::string tag;  // "Train/Samples/train_loss"
  double value = 0.0;
  int64_t step = 0;  // DeepSpeed's global_samples: samples trained on, all ranks
};

class Monitor {
 public:
  virtual ~Monitor() = default;
  // Appends `events` in order; they are in the file system (not yet on disk) when it returns.
  virtual Status Write(std::span<const MonitorEvent> events) = 0;
};

// Every configured monitor, written in turn (DeepSpeed's MonitorMaster). Empty: writes nothing.
class MonitorFanOut final : public Monitor {
 public:
  void Add(std::unique_ptr<Monitor> monitor) { monitors_.push_back(std::move(monitor)); }
  bool empty() const { return monitors_.empty(); }
  Status Write(std::span<const MonitorEvent> events) override;

 private:
  std::vector<std::unique_ptr<Monitor>> monitors_;
};

// output_path/job_name, as DeepSpeed joins them ("" output_path: the working directory).
std::string MonitorDirectory(const MonitorConfig& monitor);

// Opens the monitors the config enables, creating their directories. `resumed_step`: the
// optimizer step a resumed run continues after (nullopt: a fresh run); what the monitors hold
// beyond its samples is dropped (monitor_csv.h, monitor_tensorboard.h). A directory that cannot
// be made is an IoError naming the key (tensorboard.output_path or csv_monitor.output_path), the
// path and the reason.
Result<MonitorFanOut> OpenMonitors(const Config& config, std::optional<int64_t> resumed_step);

// The samples trained on after `steps` optimizer steps (DeepSpeed adds train_batch_size per step).
int64_t SamplesAfter(const Config& config, int64_t steps);

// One step's scalars at `samples`: DeepSpeed's Train/Samples/train_loss, Train/Samples/lr and
// (`fp16`) Train/Samples/loss_scale, then Sluice's Train/Samples/grad_norm and
// Train/Samples/tokens_per_s, and Train/Samples/val_loss on an evaluation step.
std::vector<MonitorEvent> StepMonitorEvents(const StepMetrics& metrics, int64_t samples, bool fp16);

// For the monitors: writes all of `bytes` to `fd` (opened with O_APPEND), retrying EINTR and
// short writes; an error names `path`.
Status AppendToFile(int fd, std::string_view bytes, const std::string& path);

}  // namespace sluice::train
