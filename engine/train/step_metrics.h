// What one optimizer step measured: the record behind each line of metrics.jsonl, the progress
// display and the run summary.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>

#include "runtime/memory_kinds.h"

namespace sluice::train {

struct StepMetrics {
  int64_t step = 0;           // 1-based optimizer step (skipped steps count too)
  double loss = 0.0;          // mean unscaled training loss over the step's micro-batches
  double lr = 0.0;            // the rate this step used (or would have used, when skipped)
  double grad_norm = 0.0;     // global L2 norm of the unscaled, unclipped gradient (inf/NaN when
                              // it overflowed)
  double loss_scale = 1.0;    // the loss scale this step's backward used
  bool skipped = false;       // gradients overflowed: no update, no scheduler step
  int64_t tokens = 0;         // tokens trained on in this step
  int64_t total_tokens = 0;   // since the start of the run
  double step_time_s = 0.0;   // wall time of the step (data, forward, backward, optimizer)
  double tokens_per_s = 0.0;  // tokens / step_time_s
  double model_flops = 0.0;   // model FLOPs of the step's tokens, all ranks (flops.h)
  double tflops = 0.0;        // model_flops / step_time_s, in TFLOP/s
  std::optional<double> mfu;  // model_flops / step_time_s / the run's peak (device_peak.h);
                              // unset when the device's peak is unknown
  double forward_s = 0.0;
  double backward_s = 0.0;
  double optimizer_s = 0.0;        // unscale, norm, clip, Adam, parameter write-back
  std::optional<double> val_loss;  // set on evaluation steps
  double eval_s = 0.0;             // time of that evaluation (not part of step_time_s)
  // Peak bytes held in each tier during the step (MemoryLedger peaks, reset at its start).
  std::array<uint64_t, kNumMemoryTiers> peak_bytes{};
};

// One metrics.jsonl object, keys in a fixed order: step, loss, lr, grad_norm, loss_scale,
// skipped, tokens, total_tokens, step_time_s, tokens_per_s, tflops, mfu, forward_s, backward_s,
// optimizer_s, peak_bytes {device, host_pinned, host, nvme}, then val_loss and eval_s on
// evaluation steps. Non-finite numbers, and an unknown mfu, are written as null (JSON has no
// inf).
nlohmann::ordered_json StepMetricsToJson(const StepMetrics& metrics);

// Sets tokens_per_s, tflops and mfu from tokens, model_flops and step_time_s, against
// `peak_flops_per_s` (the whole run's; 0 when unknown: mfu stays unset).
void SetStepThroughput(double peak_flops_per_s, StepMetrics* metrics);

}  // namespace sluice::train
