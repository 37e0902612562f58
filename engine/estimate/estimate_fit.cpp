#include "engine/estimate/estimate_fit.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <filesystem>
#include <utility>

#include "engine/estimate/model_layout.h"
#include "engine/train/precision.h"
#include "engine/train/run_setup.h"
#include "runtime/foreign_call.h"

namespace sluice::estimate {
namespace {

BudgetCheck DeviceCheck(const Config& config, const MemoryEstimate& e) {
  BudgetCheck check;
  check.name = "device";
  check.need = e.tier_bytes(MemoryTier::kDevice);
  if (config.device.memory_limit.has_value()) {
    check.limit = *config.device.memory_limit;
    check.limit_source = "device.memory_limit";
  } else {
    check.limit_source = "not checked: device.memory_limit is not set (cuda: the whole GPU)";
  }
  return check;
}

BudgetCheck HostCheck(const Config& config, const MemoryEstimate& e) {
  BudgetCheck check;
  check.name = "host";
  check.need = e.ranks() * e.host_bytes();
  check.limit = config.device.host_memory_limit;
  check.limit_source =
      fmt::format("device.host_memory_limit, for all {} rank(s) of the node", e.ranks());
  return check;
}

// The file system that holds `path`, or will once the swap store creates it (its nearest
// existing ancestor): its free bytes and its device, or why they are unknown.
struct FileSystemSpace {
  int64_t free_bytes = 0;
  dev_t device = 0;
};

Result<FileSystemSpace> SpaceAt(const std::string& path) {
  std::filesystem::path at = std::filesystem::absolute(path);
  struct statvfs fs {};
  while (::statvfs(at.c_str(), &fs) != 0) {
    const int err = errno;
    if (err != ENOENT || at == at.parent_path()) {
      return NotFoundError("cannot read the free space of {}: {}", path, internal::ErrnoText(err));
    }
    at = at.parent_path();
  }
  struct stat st {};
  if (::stat(at.c_str(), &st) != 0) {
    return NotFoundError("cannot stat {}: {}", at.string(), internal::ErrnoText(errno));
  }
  return FileSystemSpace{static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize),
                         st.st_dev};
}

// Each swap store goes to its own nvme_path: the optimizer's to offload_optimizer.nvme_path, the
// parameters' to offload_param.nvme_path. Directories on one file system are checked together,
// against its free space; a store whose path is not set is counted with the other one.
std::vector<BudgetCheck> NvmeChecks(const Config& config, const MemoryEstimate& e) {
  struct Use {
    std::string path;
    int64_t bytes = 0;
  };
  std::vector<Use> uses;
  const std::string& optimizer_path = config.zero.offload_optimizer.nvme_path;
  const std::string& param_path = config.zero.offload_param.nvme_path;
  if (e.optimizer_swap_bytes > 0) {
    uses.push_back({optimizer_path.empty() ? param_path : optimizer_path, e.optimizer_swap_bytes});
  }
  if (e.param_swap_bytes > 0) {
    uses.push_back({param_path.empty() ? optimizer_path : param_path, e.param_swap_bytes});
  }

  std::vector<BudgetCheck> checks;
  std::vector<std::optional<dev_t>> devices;  // per check; nullopt when unknown
  std::vector<std::string> paths;             // per check
  for (const Use& use : uses) {
    const int64_t need = e.ranks() * use.bytes;
    if (use.path.empty()) {
      checks.push_back({"nvme", need, std::nullopt, "not checked: no nvme_path is set"});
      devices.push_back(std::nullopt);
      paths.push_back(use.path);
      continue;
    }
    Result<FileSystemSpace> space = SpaceAt(use.path);
    if (!space.ok()) {
      checks.push_back(
          {"nvme", need, std::nullopt, fmt::format("not checked: {}", space.status().message())});
      devices.push_back(std::nullopt);
      paths.push_back(use.path);
      continue;
    }
    size_t i = 0;
    while (i < checks.size() && devices[i] != space->device) ++i;
    if (i < checks.size()) {  // the same file system as an earlier store's directory
      checks[i].need += need;
      if (paths[i] != use.path) {
        checks[i].limit_source =
            fmt::format("free space of {} and {} (one file system), for all {} rank(s)", paths[i],
                        use.path, e.ranks());
      }
      continue;
    }
    checks.push_back({"nvme", need, space->free_bytes,
                      fmt::format("free space of {}, for all {} rank(s)", use.path, e.ranks())});
    devices.push_back(space->device);
    paths.push_back(use.path);
  }
  return checks;
}

// Elements of the largest unit's non-persistent parameters at stage 3 (0 without a model).
int64_t LargestGatheredUnit(const Config& config) {
  Result<model::ModelOptions> options =
      train::ModelOptionsFromConfig(config, train::PrecisionOf(config.model.dtype));
  if (!options.ok()) return 0;
  return SummarizeLayout(DescribeUnits(*options, SplitsVocabulary(config)),
                         config.zero.stage3_param_persistence_threshold)
      .largest_unit_gathered;
}

Result<Variant> MakeVariant(std::string change, Config config, int world_size,
                            EstimateOptions options) {
  SLUICE_ASSIGN_OR_RETURN(MemoryEstimate estimate, EstimateMemory(config, world_size, options));
  FitReport fit = CheckFit(config, estimate);
  return Variant{std::move(change), std::move(config), options, std::move(estimate),
                 std::move(fit)};
}

void AddIfValid(std::vector<Variant>& out, std::string change, const Config& config, int world_size,
                const EstimateOptions& options) {
  Result<Variant> variant = MakeVariant(std::move(change), config, world_size, options);
  if (variant.ok()) out.push_back(std::move(variant).value());
}

}  // namespace

bool FitReport::fits() const {
  for (const BudgetCheck& check : checks) {
    if (!check.fits()) return false;
  }
  return true;
}

FitReport CheckFit(const Config& config, const MemoryEstimate& estimate) {
  FitReport report;
  report.checks.push_back(DeviceCheck(config, estimate));
  report.checks.push_back(HostCheck(config, estimate));
  for (BudgetCheck& check : NvmeChecks(config, estimate)) report.checks.push_back(std::move(check));
  return report;
}

std::vector<Variant> FindAlternatives(const Config& config, int world_size,
                                      const EstimateOptions& options, const FitReport& fit) {
  std::vector<Variant> out;
  const bool device_short = !fit.checks[0].fits();
  const bool host_short = !fit.checks[1].fits();
  const ZeroConfig& z = config.zero;
  if (device_short) {
    for (int stage = z.stage + 1; stage <= 3; ++stage) {
      Config c = config;
      c.zero.stage = stage;
      AddIfValid(out, fmt::format("zero_optimization.stage: {}", stage), c, world_size, options);
    }
    // Stage 3 holds less than the whole model only when units are gathered (not persistent),
    // released between their forward and backward, and prefetched no further than the next.
    {
      Config c = config;
      c.zero.stage = 3;
      c.zero.stage3_param_persistence_threshold =
          std::min(z.stage3_param_persistence_threshold, 10 * config.model.d_model);
      c.zero.stage3_max_reuse_distance = 0;
      const int64_t unit = LargestGatheredUnit(c);
      c.zero.stage3_prefetch_bucket_size = std::min(unit, z.stage3_prefetch_bucket_size);
      AddIfValid(out,
                 fmt::format("zero_optimization.stage: 3, stage3_param_persistence_threshold: "
                             "{}, stage3_max_reuse_distance: 0, stage3_prefetch_bucket_size: {}",
                             c.zero.stage3_param_persistence_threshold,
                             c.zero.stage3_prefetch_bucket_size),
                 c, world_size, options);
    }
    if (z.offload_optimizer.device == OffloadDevice::kNone) {
      Config c = config;
      c.zero.stage = std::max(1, z.stage);
      c.zero.offload_optimizer.device = OffloadDevice::kCpu;
      AddIfValid(out,
                 z.stage >= 1 ? "zero_optimization.offload_optimizer.device: cpu"
                              : "zero_optimization.stage: 1, offload_optimizer.device: cpu",
                 c, world_size, options);
    }
    if (z.offload_param.device == OffloadDevice::kNone) {
      Config c = config;
      c.zero.stage = 3;
      if (c.zero.offload_optimizer.device == OffloadDevice::kNone) {
        c.zero.offload_optimizer.device = OffloadDevice::kCpu;
      }
      c.zero.offload_param.device = OffloadDevice::kCpu;
      AddIfValid(out,
                 "zero_optimization.stage: 3, offload_optimizer.device: cpu, "
                 "offload_param.device: cpu",
                 c, world_size, options);
    }
    if (!options.activation_checkpointing && !config.model.activation_checkpointing) {
      EstimateOptions o = options;
      o.activation_checkpointing = true;
      AddIfValid(out, "model.activation_checkpointing: true", config, world_size, o);
    }
    // The largest smaller micro-batch that fits the device, if one does.
    for (int64_t micro = config.batch.micro_batch_per_gpu - 1; micro >= 1; --micro) {
      Config c = config;
      c.batch.micro_batch_per_gpu = micro;
      Result<Variant> variant = MakeVariant(
          fmt::format("train_micro_batch_size_per_gpu: {} (raise gradient_accumulation_steps "
                      "to keep the batch)",
                      micro),
          c, world_size, options);
      if (!variant.ok()) break;
      if (variant->fit.checks[0].fits() || micro == 1) {
        out.push_back(std::move(variant).value());
        break;
      }
    }
  }
  if (host_short) {
    if (z.offload_optimizer.device == OffloadDevice::kCpu) {
      Config c = config;
      c.zero.offload_optimizer.device = OffloadDevice::kNvme;
      AddIfValid(out, "zero_optimization.offload_optimizer.device: nvme (with nvme_path)", c,
                 world_size, options);
    }
    if (z.offload_param.device == OffloadDevice::kCpu) {
      Config c = config;
      c.zero.offload_param.device = OffloadDevice::kNvme;
      if (c.zero.offload_optimizer.device == OffloadDevice::kCpu) {
        c.zero.offload_optimizer.device = OffloadDevice::kNvme;
      }
      AddIfValid(out,
                 "zero_optimization.offload_optimizer.device: nvme, offload_param.device: nvme", c,
                 world_size, options);
    }
    if (z.offload_param.device == OffloadDevice::kNvme && z.offload_param.max_in_cpu > 0) {
      Config c = config;
      c.zero.offload_param.max_in_cpu = 0;
      AddIfValid(out, "zero_optimization.offload_param.max_in_cpu: 0", c, world_size, options);
    }
    if (z.offload_optimizer.device == OffloadDevice::kNvme) {
      // The pinned swap buffers hold buffer_count sub-groups: smaller sub-groups, smaller
      // buffers. The largest power-of-two fraction of sub_group_size that fits the host.
      constexpr int64_t kSmallestSubGroup = 1 << 20;
      for (int64_t group = z.sub_group_size / 2; group >= kSmallestSubGroup; group /= 2) {
        Config c = config;
        c.zero.sub_group_size = group;
        Result<Variant> variant = MakeVariant(
            fmt::format("zero_optimization.sub_group_size: {}", group), c, world_size, options);
        if (!variant.ok()) break;
        if (variant->fit.checks[1].fits() || group / 2 < kSmallestSubGroup) {
          out.push_back(std::move(variant).value());
          break;
        }
      }
    }
  }
  return out;
}

Result<std::vector<Variant>> CompareStages(const Config& config, int world_size,
                                           const EstimateOptions& options) {
  struct Row {
    int stage;
    OffloadDevice optimizer;
    OffloadDevice param;
  };
  constexpr OffloadDevice kNone = OffloadDevice::kNone;
  constexpr OffloadDevice kCpu = OffloadDevice::kCpu;
  const Row rows[] = {{0, kNone, kNone}, {1, kNone, kNone}, {2, kNone, kNone}, {3, kNone, kNone},
                      {2, kCpu, kNone},  {3, kCpu, kNone},  {3, kCpu, kCpu}};
  std::vector<Variant> out;
  for (const Row& row : rows) {
    Config c = config;
    c.zero.stage = row.stage;
    c.zero.offload_optimizer.device = row.optimizer;
    c.zero.offload_optimizer.ratio = 1.0;
    c.zero.offload_optimizer.ratio_auto = false;
    c.zero.offload_param.device = row.param;
    std::string change = fmt::format("stage {}", row.stage);
    if (row.optimizer == kCpu) change += ", optimizer on cpu";
    if (row.param == kCpu) change += ", params on cpu";
    SLUICE_ASSIGN_OR_RETURN(Variant variant,
                            MakeVariant(std::move(change), std::move(c), world_size, options));
    out.push_back(std::move(variant));
  }
  return out;
}

}  // namespace sluice::estimate
