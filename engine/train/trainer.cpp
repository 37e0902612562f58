#include "engine/train/trainer.h"

#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <string_view>

#include "engine/checkpoint/checkpoint_dir.h"
#include "engine/train/checkpointing.h"
#include "engine/train/device_peak.h"
#include "engine/train/flops.h"
#include "engine/train/loss_plot.h"
#include "engine/train/memory_report.h"
#include "engine/train/metrics_writer.h"
#include "engine/train/monitor.h"
#include "engine/train/progress.h"
#include "engine/train/run_files.h"
#include "engine/train/run_setup.h"
#include "engine/train/train_world.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/ops_path.h"
#include "runtime/logging.h"
#include "runtime/memory_accounting.h"
#include "runtime/size_format.h"
#include "runtime/stop_signal.h"
#include "runtime/trace.h"
#include "runtime/trace_merge.h"

namespace sluice::train {
namespace {

// Where this rank's training state lives, e.g. "per rank: cpu:0 12.5 MiB (parameters 4.0 MiB,
// gradients 8.5 MiB, optimizer 0 B), host 2.1 GiB, NVMe 1.2 GiB, pinned staging 17.2 MiB".
std::string DescribeStatePlacement(const zero::ZeroMemory& m, double offloaded_fraction,
                                   std::string_view device) {
  const uint64_t device_params = m.param_shard + m.full_params;
  const uint64_t device_grads = m.grad_shard + m.full_grads;
  std::string text = fmt::format(
      "per rank: {} {} (parameters {}, gradients {}, optimizer {})", device,
      FormatBytes(device_params + device_grads + m.optimizer_state), FormatBytes(device_params),
      FormatBytes(device_grads), FormatBytes(m.optimizer_state));
  const uint64_t host = m.host_param_shard + m.param_cache + m.host_grad_shard + m.optimizer_host;
  if (host > 0) text += fmt::format(", host {}", FormatBytes(host));
  const uint64_t nvme = m.param_nvme + m.optimizer_nvme;
  if (nvme > 0) text += fmt::format(", NVMe {}", FormatBytes(nvme));
  const uint64_t pinned = m.param_pinned + m.optimizer_pinned;
  if (pinned > 0) text += fmt::format(", pinned staging {}", FormatBytes(pinned));
  if (offloaded_fraction > 0 && offloaded_fraction < 1) {
    text += fmt::format(", optimizer offload ratio {:.3f}", offloaded_fraction);
  }
  return text;
}

// OpenBLAS keeps its own thread pool; device.threads caps it as it caps the OpenMP kernels.
void ApplyThreadCount(int threads) {
  if (threads > 0) openblas_set_num_threads(threads);
}

ComputeKernels DescribeComputeKernels(kernels::cpu::GemmBackend gemm) {
  const kernels::cpu::BlasInfo blas = kernels::cpu::DescribeBlas();
  const kernels::cpu::GemmKernel kernel = kernels::cpu::DescribeGemmKernel(gemm);
  return {.cpu_gemm = std::string(kernels::cpu::GemmBackendName(gemm)),
          .gemm_kernel = kernel.name,
          .gemm_library = kernel.library,
          .gemm_version = kernel.version,
          .gemm_core = kernel.core,
          .gemm_threads = kernel.threads,
          .openblas_core = blas.core,
          .openblas_core_reason = blas.reason,
          .openblas_config = blas.config,
          .kernel_isa = std::string(kernels::IsaName(kernels::SelectedIsa())),
          .ops_path = kernels::cpu::OpsPathName(gemm == kernels::cpu::GemmBackend::kBlas
                                                    ? kernels::cpu::OpsPath::kVector
                                                    : kernels::cpu::OpsPath::kFixed)};
}

}  // namespace

TrainIntervals IntervalsFromConfig(const Config& config) {
  TrainIntervals intervals;
  intervals.eval_interval = config.run.eval_interval;
  intervals.log_interval = std::max<int64_t>(1, config.run.log_interval);
  // A DeepSpeed config says how often to log with steps_per_print; run.log_interval wins when
  // both are given.
  const bool log_interval_given =
      config.values.entry("run.log_interval").source != ValueSource::kDefault;
  if (!log_interval_given && config.steps_per_print.has_value()) {
    intervals.log_interval = std::max<int64_t>(1, *config.steps_per_print);
  }
  return intervals;
}

Result<std::unique_ptr<Trainer>> Trainer::Create(const Config& config,
                                                 const TrainerOptions& options) {
  SLUICE_ASSIGN_OR_RETURN(LrSchedule schedule,
                          LrSchedule::Create(config.scheduler, config.optimizer.lr));
  const Precision precision = PrecisionOf(config.model.dtype);
  LossScaler scaler =
      precision == Precision::kF16 ? LossScaler::FromConfig(config.fp16) : LossScaler::Disabled();
  std::unique_ptr<Trainer> trainer(
      new Trainer(config, options, std::move(schedule), std::move(scaler), precision));
  SLUICE_RETURN_IF_ERROR(trainer->Build());
  return trainer;
}

Trainer::Trainer(const Config& config, const TrainerOptions& options, LrSchedule schedule,
                 LossScaler scaler, Precision precision)
    : config_(config),
      options_(options),
      schedule_(std::move(schedule)),
      scaler_(std::move(scaler)),
      precision_(precision),
      num_threads_(config.device.threads) {}

Trainer::~Trainer() = default;

Status Trainer::Build() {
  MemoryLedger::Global().ResetPeaks();
  if (options_.world == nullptr) {
    SLUICE_ASSIGN_OR_RETURN(owned_world_, CreateTrainWorld(config_));
    world_ = owned_world_.get();
  } else {
    world_ = options_.world;
  }
  // checkpoint.save_final is for runs that write their run directory (not a library caller's
  // with write_files off); decided before ranks > 0 stop writing files, as the save is collective.
  if (!options_.write_files) config_.checkpoint.save_final = false;
  if (world_->rank() != 0) {
    options_.progress = ProgressMode::kOff;
    options_.write_files = false;
    options_.summary_stream = nullptr;
  }
  // The same outcome on every rank (the config is), before anything is allocated or written.
  SLUICE_ASSIGN_OR_RETURN(const parallel::ProcessGrid grid, PlanEngine(&config_, world_->size()));
  ApplyThreadCount(num_threads_);
  // device.cpu_gemm is process-wide in the kernels (kernels/cpu/gemm.h), like OpenBLAS's thread
  // count: each trainer sets it for the model it builds.
  kernels::cpu::SetGemmBackend(config_.device.cpu_gemm);
  // The other ops follow the same choice (kernels/cpu/ops_path.h): blas runs their vector
  // kernels, deterministic the fixed loops whose bits the golden curves hold.
  kernels::cpu::SetOpsPath(config_.device.cpu_gemm == kernels::cpu::GemmBackend::kBlas
                               ? kernels::cpu::OpsPath::kVector
                               : kernels::cpu::OpsPath::kFixed);
  // Each phase ends with every rank agreeing that it succeeded: a rank that failed alone would
  // otherwise leave the others waiting in the next collective until run.comm_timeout.
  SLUICE_RETURN_IF_ERROR(AgreeAcrossRanks(*world_, LockRunDirectory(), "taking the run directory"));
  SLUICE_RETURN_IF_ERROR(AgreeAcrossRanks(
      *world_,
      world_->rank() == 0 ? ClaimRunDirectory(config_, {.write_files = options_.write_files,
                                                        .resume = options_.resume,
                                                        .overwrite = options_.overwrite})
                          : OkStatus(),
      "checking the run directory"));
  SLUICE_ASSIGN_OR_RETURN(engine_, Engine::Create(config_, *world_, grid));
  // What MFU is measured against: the GEMM this run computes with, on its threads.
  SLUICE_ASSIGN_OR_RETURN(
      peak_, MeasureRunPeak(*world_, engine_->device(), num_threads_, engine_->matmul_precision()));
  SLUICE_RETURN_IF_ERROR(AgreeAcrossRanks(*world_, OpenData(), "opening the data"));
  SLUICE_RETURN_IF_ERROR(LoadStartingState());
  TakePeaks(nullptr);
  if (world_->rank() == 0) {
    const int64_t whole = model::CountParameters(model().options());
    SLUICE_LOG(kInfo, "train",
               "model {}: {} parameters{}, {}; ZeRO stage {} on {} rank(s) ({}); {}",
               DescribeModel(model().options()), whole,
               whole == model().ParameterCount()
                   ? ""
                   : fmt::format(" (this rank holds {})", model().ParameterCount()),
               PrecisionName(precision_), config_.zero.stage, world_->size(),
               engine_->groups().grid().shape().ToString(),
               DescribeStatePlacement(zero().memory(), optimizer().offload_ratio(),
                                      engine_->device().name()));
    SLUICE_LOG(
        kInfo, "train", "CPU GEMM: device.cpu_gemm {} runs {} (OpenBLAS core {}); other ops: {}",
        kernels::cpu::GemmBackendName(config_.device.cpu_gemm), kernels::cpu::GemmKernelName(),
        kernels::cpu::DescribeBlas().core, kernels::cpu::OpsPathName());
  }
  return OkStatus();
}

// One run per run directory: the rank that writes the run's files holds the lock for the
// trainer's life, before anything in the directory is written or pruned.
Status Trainer::LockRunDirectory() {
  if (!options_.write_files) return OkStatus();
  const std::string& run_dir = config_.run.dir;
  SLUICE_RETURN_IF_ERROR(CreateRunDirectory(run_dir));
  SLUICE_ASSIGN_OR_RETURN(
      run_lock_, FileLock::Acquire((std::filesystem::path(run_dir) / ".sluice.lock").string(),
                                   "run directory", run_dir,
                                   "give this run another run.dir (--run-dir), or stop the other "
                                   "run first"));
  return OkStatus();
}

Status Trainer::LoadStartingState() {
  // A pipeline stage holds its own layers: a checkpoint or file holds the stages' together.
  int64_t model_tensors = 0;
  if (engine_->groups().grid().shape().pipeline > 1 &&
      (options_.resume.has_value() || config_.model.init_from.has_value())) {
    SLUICE_ASSIGN_OR_RETURN(
        model_tensors, ModelTensorsOverStages(model().registry(), engine_->groups().pipeline()));
  }
  std::string what;
  Status loaded;
  if (options_.resume.has_value()) {
    what = "resuming from a checkpoint";
    loaded = ResumeFromCheckpoint(model_tensors);
  } else if (config_.model.init_from.has_value()) {
    what = "loading model.init_from";
    std::string source;
    loaded = LoadInitialWeights(*config_.model.init_from, zero(), model().registry(), &source,
                                model_tensors);
    if (!loaded.ok()) {
      loaded.WithContext(fmt::format("model.init_from = {}", *config_.model.init_from));
    } else if (world_->rank() == 0) {
      SLUICE_LOG(kInfo, "train", "model.init_from: loaded {}", source);
    }
  } else {
    Status initialized = zero().InitializeParameters(static_cast<uint64_t>(config_.run.seed));
    if (!initialized.ok()) return std::move(initialized).WithContext("initializing the parameters");
    return OkStatus();
  }
  // Reads are local and may fail on one rank only (a corrupt block of its range): all ranks learn
  // of it before the collective publish.
  SLUICE_RETURN_IF_ERROR(AgreeAcrossRanks(*world_, loaded, what));
  Status published = zero().PublishParameters();
  if (!published.ok()) return std::move(published).WithContext(what);
  return OkStatus();
}

Status Trainer::ResumeFromCheckpoint(int64_t model_tensors) {
  SLUICE_ASSIGN_OR_RETURN(std::filesystem::path dir, ResolveResumeDir(config_, *options_.resume));
  Result<TrainingProgress> progress =
      LoadTrainingCheckpoint(dir, zero(), model().registry(),
                             {.config = &config_,
                              .allow_config_change = options_.allow_config_change,
                              .report = world_->rank() == 0,
                              .model_tensors = model_tensors});
  if (!progress.ok()) {
    return Status(progress.status()).WithContext(fmt::format("resuming from {}", dir.string()));
  }
  Status status = loader_->RestoreState(progress->data_loader);
  if (!status.ok()) {
    return std::move(status).WithContext(
        fmt::format("restoring the data loader's position from {}", dir.string()));
  }
  // A static scale (or none: bf16, f32) comes from this run's config alone.
  if (scaler_.dynamic()) {
    status = scaler_.RestoreState(progress->loss_scaler);
    if (!status.ok())
      return std::move(status).WithContext(fmt::format("resuming {}", dir.string()));
  }
  schedule_.RestorePosition(progress->lr_last_batch_iteration);
  steps_done_ = progress->step;
  total_tokens_ = progress->total_tokens;
  resumed_from_ = dir;
  if (world_->rank() == 0) {
    SLUICE_LOG(kInfo, "train", "resumed from {} at step {}", dir.string(), steps_done_);
  }
  return OkStatus();
}

Result<std::filesystem::path> Trainer::SaveCheckpoint() {
  ScopedTraceEvent event(kTraceLaneCompute, fmt::format("checkpoint step {}", steps_done_));
  TrainingProgress progress;
  progress.step = steps_done_;
  progress.total_tokens = total_tokens_;
  progress.data_loader = loader_->SaveState();
  progress.loss_scaler = scaler_.SaveState();
  progress.lr_last_batch_iteration = schedule_.last_batch_iteration();
  return SaveTrainingCheckpoint(config_, zero(), model().registry(), *world_, progress);
}

Status Trainer::OpenData() {
  Result<data::DataLoader> loader =
      data::DataLoader::Open(DataOptionsFromConfig(config_), engine_->groups().data().rank(),
                             engine_->groups().data().size());
  if (!loader.ok()) return Status(loader.status()).WithContext("opening the training data");
  loader_.emplace(std::move(loader).value());
  Result<data::ValidationIterator> validation =
      loader_->Validation(config_.batch.micro_batch_per_gpu, config_.data.eval_batches);
  if (validation.ok()) {
    validation_.emplace(std::move(validation).value());
  } else if (validation.status().code() != StatusCode::kFailedPrecondition) {
    return Status(validation.status()).WithContext("preparing the validation batches");
  }
  return OkStatus();
}

void Trainer::TakePeaks(std::array<uint64_t, kNumMemoryTiers>* step_peaks) {
  const MemorySnapshot snapshot = MemoryLedger::Global().Snapshot();
  MergePeaks(run_peaks_, snapshot);
  if (step_peaks == nullptr) return;
  for (MemoryTier tier : kAllMemoryTiers) {
    const int t = static_cast<int>(tier);
    (*step_peaks)[t] = std::max((*step_peaks)[t], snapshot.tier(tier).peak);
  }
}

Result<StepMetrics> Trainer::TrainStep() {
  const double start = TraceClockSeconds();
  MemoryLedger::Global().ResetPeaks();
  StepMetrics m;
  m.step = steps_done_ + 1;
  m.loss_scale = scaler_.scale();
  m.lr = schedule_.current_lr();
  const int64_t micro_batch = config_.batch.micro_batch_per_gpu;
  SLUICE_ASSIGN_OR_RETURN(
      const EngineStep step,
      engine_->TrainStep(
          {.step = m.step, .lr = m.lr, .loss_scale = m.loss_scale},
          [&](data::Batch* batch) { return loader_->NextBatch(micro_batch, batch); }));
  m.loss = step.loss;
  m.tokens = step.tokens;
  m.model_flops = step.model_flops;
  m.grad_norm = step.grad_norm;
  m.forward_s = step.forward_s;
  m.backward_s = step.backward_s;
  m.optimizer_s = step.optimizer_s;
  if (step.overflow) {
    m.skipped = true;
    SLUICE_LOG(kDebug, "train", "step {}: non-finite gradient, step skipped", m.step);
  } else {
    schedule_.Step();
  }
  SLUICE_RETURN_IF_ERROR(scaler_.Update(/*overflow=*/step.overflow));
  m.step_time_s = TraceClockSeconds() - start;
  // After the step's time is taken: the profile's waits are not the step's.
  if (ops::ProfiledOpsBackend* profile = engine_->op_profile(); profile != nullptr) {
    SLUICE_RETURN_IF_ERROR(profile->Collect().WithContext("run.profile_ops"));
    ++profiled_steps_;
  }
  SetStepThroughput(peak_.total_flops_per_s, &m);
  total_tokens_ += m.tokens;
  m.total_tokens = total_tokens_;
  ++steps_done_;
  TakePeaks(&m.peak_bytes);
  return m;
}

Result<double> Trainer::Evaluate() {
  if (!validation_.has_value()) {
    return FailedPreconditionError(
        "the run has no validation data: set data.val_path or a data.val_fraction > 0");
  }
  validation_->Reset();
  Result<double> loss =
      engine_->Evaluate([&](data::Batch* batch) { return validation_->Next(batch); });
  if (!loss.ok()) return Status(loss.status()).WithContext("evaluating");
  if (ops::ProfiledOpsBackend* profile = engine_->op_profile(); profile != nullptr) {
    // The profile is of training steps: an evaluation's ops are waited for and left out.
    SLUICE_RETURN_IF_ERROR(profile->Collect(/*count=*/false).WithContext("run.profile_ops"));
  }
  TakePeaks(nullptr);
  return loss;
}

Status Trainer::PrepareRunFiles(std::optional<MetricsWriter>* metrics) {
  const std::string& run_dir = config_.run.dir;
  SLUICE_RETURN_IF_ERROR(CreateRunDirectory(run_dir));
  const std::filesystem::path dir(run_dir);
  const bool resumed = options_.resume.has_value();
  for (const char* name : {"summary.json", "config.resolved.json", "metrics.jsonl", "trace.json",
                           "trace.rank0.json", "loss.png"}) {
    // A resumed run continues the curve so far.
    if (resumed && std::string_view(name) == "metrics.jsonl") continue;
    SLUICE_RETURN_IF_ERROR(RemoveStaleFile((dir / name).string()));
  }
  SLUICE_RETURN_IF_ERROR(WriteFileAtomically((dir / "config.resolved.json").string(),
                                             ConfigRecordJson(config_).dump(2) + "\n",
                                             Durability::kUnsynced));
  const std::string path = (dir / "metrics.jsonl").string();
  SLUICE_ASSIGN_OR_RETURN(
      MetricsWriter writer,
      resumed ? MetricsWriter::OpenForResume(path, steps_done_) : MetricsWriter::Open(path));
  metrics->emplace(std::move(writer));
  return OkStatus();
}

Status Trainer::FinishRunFiles(const TrainSummary& summary) {
  const std::filesystem::path dir(config_.run.dir);
  SLUICE_RETURN_IF_ERROR(WriteFileAtomically((dir / "summary.json").string(),
                                             SummaryToJson(summary).dump(2) + "\n",
                                             Durability::kUnsynced));
  // The whole curve, resumed parts included: metrics.jsonl has every step so far.
  std::optional<LossPoint> validation_before;
  if (summary.initial_val_loss.has_value()) {
    validation_before = LossPoint{steps_done_ - summary.steps, *summary.initial_val_loss};
  }
  SLUICE_RETURN_IF_ERROR(
      WriteLossPlot((dir / "metrics.jsonl").string(), (dir / "loss.png").string(),
                    fmt::format("{}: {}", config_.run.dir, summary.model), validation_before));
  return OkStatus();
}

// Every rank's events in one file, one Perfetto process per rank. Collective.
Status Trainer::WriteTrace() {
  const std::string path =
      options_.write_files ? (std::filesystem::path(config_.run.dir) / "trace.json").string() : "";
  SLUICE_RETURN_IF_ERROR(GatherChromeTrace(*world_, TraceRecorder::Global(), path));
  if (!path.empty()) {
    SLUICE_LOG(kInfo, "train", "trace of {} rank(s) written to {} (open it in Perfetto)",
               world_->size(), path);
  }
  return OkStatus();
}

Result<TrainSummary> Trainer::Run() {
  const double start = TraceClockSeconds();
  std::optional<MetricsWriter> metrics;
  MonitorFanOut monitors;  // tensorboard, csv_monitor: rank 0's, beside metrics.jsonl
  auto prepare = [&]() -> Status {
    SLUICE_RETURN_IF_ERROR(PrepareRunFiles(&metrics));
    SLUICE_ASSIGN_OR_RETURN(
        monitors,
        OpenMonitors(config_, options_.resume.has_value() ? std::optional<int64_t>(steps_done_)
                                                          : std::nullopt));
    return OkStatus();
  };
  SLUICE_RETURN_IF_ERROR(AgreeAcrossRanks(*world_, options_.write_files ? prepare() : OkStatus(),
                                          "preparing the run directory"));
  if (config_.run.trace) TraceRecorder::Global().Enable();
  const TrainIntervals intervals = IntervalsFromConfig(config_);
  const bool evaluate = validation_.has_value() && intervals.eval_interval > 0;
  const int64_t total_steps = config_.run.steps;

  std::optional<double> initial_val_loss;
  double initial_eval_s = 0.0;
  if (evaluate) {
    const double eval_start = TraceClockSeconds();
    SLUICE_ASSIGN_OR_RETURN(initial_val_loss, Evaluate());
    initial_eval_s = TraceClockSeconds() - eval_start;
    // The curve's start (a resumed run's previous run logged its own at this step).
    if (steps_done_ == 0) {
      const MonitorEvent event{"Train/Samples/val_loss", *initial_val_loss, 0};
      SLUICE_RETURN_IF_ERROR(monitors.Write(std::span(&event, 1)));
    }
  }

  const bool interactive = options_.progress == ProgressMode::kBar ||
                           (options_.progress == ProgressMode::kAuto &&
                            ProgressReporter::IsTerminal(options_.progress_stream));
  std::optional<ProgressReporter> progress;
  if (options_.progress != ProgressMode::kOff) {
    progress.emplace(options_.progress_stream, interactive, total_steps, intervals.log_interval);
    progress->Start();
  }

  std::vector<StepMetrics> steps;
  steps.reserve(static_cast<size_t>(std::max<int64_t>(0, total_steps - steps_done_)));
  while (steps_done_ < total_steps) {
    SLUICE_ASSIGN_OR_RETURN(StepMetrics m, TrainStep());
    if (evaluate && (m.step % intervals.eval_interval == 0 || m.step == total_steps)) {
      const double eval_start = TraceClockSeconds();
      SLUICE_ASSIGN_OR_RETURN(m.val_loss, Evaluate());
      m.eval_s = TraceClockSeconds() - eval_start;
      TakePeaks(&m.peak_bytes);
    }
    if (metrics.has_value()) SLUICE_RETURN_IF_ERROR(metrics->Write(StepMetricsToJson(m)));
    SLUICE_RETURN_IF_ERROR(monitors.Write(
        StepMonitorEvents(m, SamplesAfter(config_, m.step), precision_ == Precision::kF16)));
    const int64_t save_interval = config_.checkpoint.save_interval;
    const bool last = m.step == total_steps;
    if ((save_interval > 0 && (m.step % save_interval == 0 || last)) ||
        (config_.checkpoint.save_final && last)) {
      SLUICE_RETURN_IF_ERROR(SaveCheckpoint().status());
    }
    if (progress.has_value()) progress->Update(m);
    steps.push_back(m);
    if (steps_done_ < total_steps && options_.stop_on_signal) {
      SLUICE_ASSIGN_OR_RETURN(stop_signal_, AgreedStopSignal());
      if (stop_signal_ != 0) {
        SLUICE_RETURN_IF_ERROR(StopEarly(m.step, save_interval > 0 && m.step % save_interval == 0));
        break;
      }
    }
  }
  if (progress.has_value()) progress->Finish();

  TrainSummary summary = Summarize(steps);
  summary.initial_val_loss = initial_val_loss;
  summary.phases.eval_s += initial_eval_s;
  SLUICE_ASSIGN_OR_RETURN(summary.memory, BuildMemoryReport(config_, *world_, run_peaks_));
  summary.wall_s = TraceClockSeconds() - start;
  if (const ops::ProfiledOpsBackend* profile = engine_->op_profile(); profile != nullptr) {
    summary.op_profile = OpProfile{profiled_steps_, profile->Times()};
  }
  const PhaseTimes& p = summary.phases;
  summary.phases.other_s =
      std::max(0.0, summary.wall_s - p.forward_s - p.backward_s - p.optimizer_s - p.eval_s);
  if (config_.run.trace) SLUICE_RETURN_IF_ERROR(WriteTrace());
  if (options_.write_files) SLUICE_RETURN_IF_ERROR(FinishRunFiles(summary));
  if (options_.summary_stream != nullptr) {
    std::fprintf(options_.summary_stream, "%s", FormatSummaryTable(summary).c_str());
    std::fflush(options_.summary_stream);
  }
  return summary;
}

Result<int> Trainer::AgreedStopSignal() {
  const uint64_t mine = static_cast<uint64_t>(StopSignal());
  if (world_->size() == 1) return static_cast<int>(mine);
  // Ranks may get the signal in different steps (or only one of them gets it): they stop
  // together, after the step in which the first one saw it.
  SLUICE_ASSIGN_OR_RETURN(std::vector<uint64_t> any, MaxAcrossRanks(*world_, std::span(&mine, 1)));
  return static_cast<int>(any[0]);
}

Status Trainer::StopEarly(int64_t step, bool saved) {
  std::string saved_to =
      "no checkpoint configured (checkpoint.save_interval, checkpoint.save_final, checkpoint.dir)";
  if (config_.checkpoint.save_interval > 0 || config_.checkpoint.save_final ||
      config_.checkpoint.dir.has_value()) {
    std::filesystem::path dir = CheckpointsDirOf(config_) / checkpoint::StepDirName(step);
    if (!saved) {
      SLUICE_ASSIGN_OR_RETURN(dir, SaveCheckpoint());
    }
    saved_to = fmt::format("checkpoint {}; continue with --resume", dir.string());
  }
  SLUICE_LOG(kWarn, "train", "stopped by {} after step {} of {}: {}", StopSignalName(stop_signal_),
             step, config_.run.steps, saved_to);
  return OkStatus();
}

TrainSummary Trainer::Summarize(const std::vector<StepMetrics>& steps) const {
  TrainSummary s;
  s.total_steps = config_.run.steps;
  s.stop_signal = stop_signal_;
  s.run_dir = config_.run.dir;
  s.model = DescribeModel(model().options());
  s.parameters = model::CountParameters(model().options());
  s.precision = std::string(PrecisionName(precision_));
  s.world_size = world_->size();
  s.kernels = DescribeComputeKernels(config_.device.cpu_gemm);
  const ModelFlops flops = CountModelFlops(model().options(), config_.model.seq_len);
  s.flops.per_token = flops.per_token;
  s.flops.matmul_parameters = flops.matmul_parameters;
  s.flops.peak = peak_.rank;
  s.flops.total_peak_flops_per_s = peak_.total_flops_per_s;
  s.steps = static_cast<int64_t>(steps.size());
  for (const StepMetrics& m : steps) {
    if (m.skipped) ++s.skipped_steps;
    s.tokens += m.tokens;
    s.train_s += m.step_time_s;
    s.phases.forward_s += m.forward_s;
    s.phases.backward_s += m.backward_s;
    s.phases.optimizer_s += m.optimizer_s;
    s.phases.eval_s += m.eval_s;
    s.flops.model_flops += m.model_flops;
    if (m.val_loss.has_value()) s.final_val_loss = m.val_loss;
  }
  s.tokens_per_s = s.train_s > 0 ? static_cast<double>(s.tokens) / s.train_s : 0.0;
  if (s.train_s > 0) {
    s.flops.tflops = s.flops.model_flops / s.train_s * 1e-12;
    if (peak_.total_flops_per_s > 0) {
      s.flops.mfu = s.flops.model_flops / s.train_s / peak_.total_flops_per_s;
    }
  }
  for (MemoryTier tier : kAllMemoryTiers) {
    s.peak_bytes[static_cast<int>(tier)] = run_peaks_.tier(tier).peak;
  }
  double loss_sum = 0.0;
  for (auto it = steps.rbegin(); it != steps.rend() && s.final_train_loss_window < kFinalLossWindow;
       ++it) {
    if (it->skipped) continue;
    loss_sum += it->loss;
    ++s.final_train_loss_window;
  }
  s.final_train_loss = s.final_train_loss_window > 0
                           ? loss_sum / static_cast<double>(s.final_train_loss_window)
                           : std::nan("");
  s.final_loss_scale = scaler_.scale();
  return s;
}

}  // namespace sluice::train
