#include "engine/train/step_metrics.h"

#include <cmath>

#include "runtime/json_text.h"

namespace sluice::train {
nlohmann::ordered_json StepMetricsToJson(const StepMetrics& m) {
  nlohmann::ordered_json json;
  json["step"] = m.step;
  json["loss"] = FiniteOrNull(m.loss);
  json["lr"] = FiniteOrNull(m.lr);
  json["grad_norm"] = FiniteOrNull(m.grad_norm);
  json["loss_scale"] = FiniteOrNull(m.loss_scale);
  json["skipped"] = m.skipped;
  json["tokens"] = m.tokens;
  json["total_tokens"] = m.total_tokens;
  json["step_time_s"] = FiniteOrNull(m.step_time_s);
  json["tokens_per_s"] = FiniteOrNull(m.tokens_per_s);
  json["tflops"] = FiniteOrNull(m.tflops);
  json["mfu"] = m.mfu.has_value() ? FiniteOrNull(*m.mfu) : nullptr;
  json["forward_s"] = FiniteOrNull(m.forward_s);
  json["backward_s"] = FiniteOrNull(m.backward_s);
  json["optimizer_s"] = FiniteOrNull(m.optimizer_s);
  nlohmann::ordered_json peaks;
  for (MemoryTier tier : kAllMemoryTiers) {
    peaks[std::string(MemoryTierName(tier))] = m.peak_bytes[static_cast<int>(tier)];
  }
  json["peak_bytes"] = std::move(peaks);
  if (m.val_loss.has_value()) {
    json["val_loss"] = FiniteOrNull(*m.val_loss);
    json["eval_s"] = FiniteOrNull(m.eval_s);
  }
  return json;
}

void SetStepThroughput(double peak_flops_per_s, StepMetrics* m) {
  if (!(m->step_time_s > 0)) return;
  m->tokens_per_s = static_cast<double>(m->tokens) / m->step_time_s;
  const double flops_per_s = m->model_flops / m->step_time_s;
  m->tflops = flops_per_s * 1e-12;
  if (peak_flops_per_s > 0) m->mfu = flops_per_s / peak_flops_per_s;
}

}  // namespace sluice::train
