#include "engine/train/summary.h"

#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "engine/train/flops.h"
#include "engine/train/progress.h"
#include "runtime/json_text.h"
#include "runtime/size_format.h"
#include "runtime/stop_signal.h"

namespace sluice::train {
namespace {

nlohmann::ordered_json Optional(const std::optional<double>& value) {
  if (!value.has_value()) return nullptr;
  return FiniteOrNull(*value);
}

std::string Row(std::string_view name, std::string_view value) {
  return fmt::format("  {:<18} {}\n", name, value);
}

// "0.01433 TFLOP/s (model FLOPs, 8.11M a token), MFU 49.5% of 0.02894 TFLOP/s (measured peak,
// cpu (GemmFixed avx512, all cores))"
std::string ComputeRow(const TrainSummary& s) {
  const FlopsSummary& f = s.flops;
  std::string text = fmt::format("{:.4g} TFLOP/s (model FLOPs, {} a token)", f.tflops,
                                 FormatCount(static_cast<double>(f.per_token)));
  if (!f.mfu.has_value()) {
    return text + fmt::format(", MFU unknown: no peak for {}", f.peak.device);
  }
  // "measured" or "table": how the peak was found (summary.json has the whole source).
  const std::string how = f.peak.source.substr(0, f.peak.source.find(':'));
  return text +
         fmt::format(", MFU {:.1f}% of {:.4g} TFLOP/s{} ({} peak, {})", 100.0 * *f.mfu,
                     f.total_peak_flops_per_s * 1e-12,
                     s.world_size > 1 ? fmt::format(" on {} ranks", s.world_size) : std::string(),
                     how, f.peak.device);
}

}  // namespace

// The ops that hold 99% of the profiled device time, then one line for the rest.
std::string FormatOpProfile(const OpProfile& profile) {
  double total = 0.0;
  for (const ops::OpTime& t : profile.ops) total += t.total_ms;
  const double steps = static_cast<double>(std::max<int64_t>(profile.steps, 1));
  std::string out = fmt::format(
      "device time per op (run.profile_ops, {} steps; ops on several streams may overlap):\n"
      "  {:<26} {:>10} {:>12} {:>7}\n",
      profile.steps, "op", "calls/step", "ms/step", "share");
  double shown = 0.0;
  int64_t rest_calls = 0;
  double rest_ms = 0.0;
  for (const ops::OpTime& t : profile.ops) {
    if (total > 0 && shown >= 0.99 * total) {
      rest_calls += t.calls;
      rest_ms += t.total_ms;
      continue;
    }
    shown += t.total_ms;
    out += fmt::format("  {:<26} {:>10.1f} {:>12.3f} {:>6.1f}%\n", t.op,
                       static_cast<double>(t.calls) / steps, t.total_ms / steps,
                       total > 0 ? 100.0 * t.total_ms / total : 0.0);
  }
  if (rest_calls > 0) {
    out += fmt::format("  {:<26} {:>10.1f} {:>12.3f} {:>6.1f}%\n", "(the rest)",
                       static_cast<double>(rest_calls) / steps, rest_ms / steps,
                       100.0 * rest_ms / total);
  }
  out += fmt::format("  {:<26} {:>10} {:>12.3f}\n", "total", "", total / steps);
  return out;
}

std::string FormatSummaryTable(const TrainSummary& s) {
  std::string out = fmt::format("Training summary ({})\n", s.run_dir);
  out += Row("model", fmt::format("{}, {} parameters, {}", s.model,
                                  FormatCount(static_cast<double>(s.parameters)), s.precision));
  out += Row("steps", fmt::format("{} ({} skipped), {} tokens{}", s.steps, s.skipped_steps,
                                  FormatCount(static_cast<double>(s.tokens)),
                                  s.world_size > 1 ? fmt::format(" on {} ranks", s.world_size)
                                                   : std::string()));
  if (s.stop_signal != 0) {
    out += Row("stopped", fmt::format("by {} before run.steps {}", StopSignalName(s.stop_signal),
                                      s.total_steps));
  }
  out += Row("throughput",
             fmt::format("{} tokens/s (training {}, wall {})", FormatCount(s.tokens_per_s),
                         FormatDuration(s.train_s), FormatDuration(s.wall_s)));
  if (s.flops.per_token > 0 && s.train_s > 0) out += Row("compute", ComputeRow(s));
  const std::pair<const char*, double> phases[] = {{"forward", s.phases.forward_s},
                                                   {"backward", s.phases.backward_s},
                                                   {"optimizer", s.phases.optimizer_s},
                                                   {"eval", s.phases.eval_s},
                                                   {"other", s.phases.other_s}};
  std::string phase_text;
  for (const auto& [name, seconds] : phases) {
    const double share = s.wall_s > 0 ? 100.0 * seconds / s.wall_s : 0.0;
    if (!phase_text.empty()) phase_text += ", ";
    phase_text += fmt::format("{} {} ({:.0f}%)", name, FormatDuration(seconds), share);
  }
  out += Row("time per phase", phase_text);
  if (!s.memory.has_value()) {
    std::string memory;
    for (MemoryTier tier : kAllMemoryTiers) {
      if (!memory.empty()) memory += ", ";
      memory += fmt::format("{} {}", MemoryTierName(tier),
                            FormatBytes(s.peak_bytes[static_cast<int>(tier)]));
    }
    out += Row("peak memory", memory);
  }
  out += Row("train loss", fmt::format("{:.4f} (mean of the last {} steps)", s.final_train_loss,
                                       s.final_train_loss_window));
  if (s.final_val_loss.has_value()) {
    std::string val = fmt::format("{:.4f}", *s.final_val_loss);
    if (s.initial_val_loss.has_value()) {
      val = fmt::format("{:.4f} at step 0 -> {}", *s.initial_val_loss, val);
    }
    out += Row("validation loss", val);
  } else {
    out += Row("validation loss", "not evaluated (no validation data or run.eval_interval 0)");
  }
  if (!s.kernels.cpu_gemm.empty()) {
    out += Row("kernels",
               fmt::format("GEMM {} ({}, {} threads), OpenBLAS core {}, ISA {}, other ops {}",
                           s.kernels.cpu_gemm, s.kernels.gemm_kernel, s.kernels.gemm_threads,
                           s.kernels.openblas_core, s.kernels.kernel_isa, s.kernels.ops_path));
  }
  if (s.op_profile.has_value()) out += FormatOpProfile(*s.op_profile);
  if (s.memory.has_value()) out += FormatMemoryReport(*s.memory);
  return out;
}

nlohmann::ordered_json SummaryToJson(const TrainSummary& s) {
  nlohmann::ordered_json json;
  json["run_dir"] = s.run_dir;
  json["model"] = s.model;
  json["parameters"] = s.parameters;
  json["precision"] = s.precision;
  json["world_size"] = s.world_size;
  json["steps"] = s.steps;
  json["skipped_steps"] = s.skipped_steps;
  if (s.stop_signal != 0) json["stopped_by"] = StopSignalName(s.stop_signal);
  json["tokens"] = s.tokens;
  json["wall_s"] = FiniteOrNull(s.wall_s);
  json["train_s"] = FiniteOrNull(s.train_s);
  json["tokens_per_s"] = FiniteOrNull(s.tokens_per_s);
  const FlopsSummary& f = s.flops;
  json["flops"] = {
      {"formula", kModelFlopsFormula},
      {"per_token", f.per_token},
      {"matmul_parameters", f.matmul_parameters},
      {"model_flops", FiniteOrNull(f.model_flops)},
      {"tflops", FiniteOrNull(f.tflops)},
      {"mfu", Optional(f.mfu)},
      {"peak",
       {{"tflops_per_rank", f.peak.known() ? FiniteOrNull(f.peak.flops_per_s * 1e-12) : nullptr},
        {"tflops_total", f.peak.known() ? FiniteOrNull(f.total_peak_flops_per_s * 1e-12) : nullptr},
        {"dtype", f.peak.dtype},
        {"device", f.peak.device},
        {"source", f.peak.source}}}};
  json["phases_s"] = {{"forward", FiniteOrNull(s.phases.forward_s)},
                      {"backward", FiniteOrNull(s.phases.backward_s)},
                      {"optimizer", FiniteOrNull(s.phases.optimizer_s)},
                      {"eval", FiniteOrNull(s.phases.eval_s)},
                      {"other", FiniteOrNull(s.phases.other_s)}};
  nlohmann::ordered_json peaks;
  for (MemoryTier tier : kAllMemoryTiers) {
    peaks[std::string(MemoryTierName(tier))] = s.peak_bytes[static_cast<int>(tier)];
  }
  json["peak_bytes"] = std::move(peaks);
  if (s.memory.has_value()) json["memory"] = MemoryReportJson(*s.memory);
  json["final_train_loss"] = FiniteOrNull(s.final_train_loss);
  json["final_train_loss_window"] = s.final_train_loss_window;
  json["initial_val_loss"] = Optional(s.initial_val_loss);
  json["final_val_loss"] = Optional(s.final_val_loss);
  json["final_loss_scale"] = FiniteOrNull(s.final_loss_scale);
  if (s.op_profile.has_value()) {
    nlohmann::ordered_json ops = nlohmann::ordered_json::array();
    for (const ops::OpTime& t : s.op_profile->ops) {
      ops.push_back({{"op", t.op}, {"calls", t.calls}, {"total_ms", FiniteOrNull(t.total_ms)}});
    }
    json["op_profile"] = {{"steps", s.op_profile->steps}, {"ops", std::move(ops)}};
  }
  json["kernels"] = {{"cpu_gemm", s.kernels.cpu_gemm},
                     {"gemm_kernel", s.kernels.gemm_kernel},
                     {"gemm",
                      {{"library", s.kernels.gemm_library},
                       {"version", s.kernels.gemm_version},
                       {"core", s.kernels.gemm_core},
                       {"threads", s.kernels.gemm_threads}}},
                     {"openblas_core", s.kernels.openblas_core},
                     {"openblas_core_reason", s.kernels.openblas_core_reason},
                     {"openblas_config", s.kernels.openblas_config},
                     {"kernel_isa", s.kernels.kernel_isa},
                     {"ops_path", s.kernels.ops_path}};
  ReplaceInvalidUtf8(&json);  // run_dir is bytes: a Latin-1 --run-dir must not abort the dump
  return json;
}

}  // namespace sluice::train
