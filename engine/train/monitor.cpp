#include "engine/train/monitor.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "engine/train/monitor_csv.h"
#include "engine/train/monitor_tensorboard.h"
#include "runtime/foreign_call.h"
#include "runtime/logging.h"

namespace sluice::train {

Status MonitorFanOut::Write(std::span<const MonitorEvent> events) {
  for (const std::unique_ptr<Monitor>& monitor : monitors_) {
    SLUICE_RETURN_IF_ERROR(monitor->Write(events));
  }
  return OkStatus();
}

std::string MonitorDirectory(const MonitorConfig& monitor) {
  // os.path.join: an empty output_path leaves job_name relative to the working directory.
  const std::filesystem::path dir = std::filesystem::path(monitor.output_path) / monitor.job_name;
  return dir.empty() ? std::string(".") : dir.string();
}

Result<MonitorFanOut> OpenMonitors(const Config& config, std::optional<int64_t> resumed_step) {
  std::optional<int64_t> resumed_samples;
  if (resumed_step.has_value()) resumed_samples = SamplesAfter(config, *resumed_step);
  // Names the keys that chose the directory, for an error opening it.
  auto context = [](std::string_view section, const MonitorConfig& monitor) {
    return fmt::format(
        "{}.output_path \"{}\" + job_name \"{}\" (set an output_path this process can create "
        "and write)",
        section, monitor.output_path, monitor.job_name);
  };
  MonitorFanOut monitors;
  if (config.tensorboard.enabled) {
    Result<std::unique_ptr<TensorBoardMonitor>> tensorboard =
        TensorBoardMonitor::Open(MonitorDirectory(config.tensorboard), resumed_samples);
    if (!tensorboard.ok()) {
      return Status(tensorboard.status()).WithContext(context("tensorboard", config.tensorboard));
    }
    SLUICE_LOG(kInfo, "train", "tensorboard: scalars to {}", (*tensorboard)->path());
    monitors.Add(std::move(tensorboard).value());
  }
  if (config.csv_monitor.enabled) {
    Result<std::unique_ptr<CsvMonitor>> csv =
        CsvMonitor::Open(MonitorDirectory(config.csv_monitor), resumed_samples);
    if (!csv.ok()) {
      return Status(csv.status()).WithContext(context("csv_monitor", config.csv_monitor));
    }
    SLUICE_LOG(kInfo, "train", "csv_monitor: one CSV file per scalar in {}", (*csv)->dir());
    monitors.Add(std::move(csv).value());
  }
  return monitors;
}

int64_t SamplesAfter(const Config& config, int64_t steps) {
  return steps * config.batch.train_batch_size;
}

std::vector<MonitorEvent> StepMonitorEvents(const StepMetrics& m, int64_t samples, bool fp16) {
  std::vector<MonitorEvent> events = {
      {"Train/Samples/train_loss", m.loss, samples},
      {"Train/Samples/lr", m.lr, samples},
  };
  if (fp16) events.push_back({"Train/Samples/loss_scale", m.loss_scale, samples});
  events.push_back({"Train/Samples/grad_norm", m.grad_norm, samples});
  events.push_back({"Train/Samples/tokens_per_s", m.tokens_per_s, samples});
  if (m.val_loss.has_value()) events.push_back({"Train/Samples/val_loss", *m.val_loss, samples});
  return events;
}

Status AppendToFile(int fd, std::string_view bytes, const std::string& path) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError("writing {}: {}", path, internal::ErrnoText(errno));
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return OkStatus();
}

}  // namespace sluice::train
