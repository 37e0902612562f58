#include "engine/train/phase_clock.h"

#include <fmt/format.h>

#include "runtime/trace.h"

namespace sluice::train {

Status PhaseClock::BeginPass() {
  if (start_ == nullptr) {
    SLUICE_ASSIGN_OR_RETURN(start_, device_->CreateEvent());
    SLUICE_ASSIGN_OR_RETURN(split_, device_->CreateEvent());
    SLUICE_ASSIGN_OR_RETURN(end_, device_->CreateEvent());
  }
  split_recorded_ = false;
  return start_->Record(*stream_);
}

Status PhaseClock::EndPass(int64_t step, int64_t micro) {
  SLUICE_RETURN_IF_ERROR(end_->Record(*stream_));
  SLUICE_RETURN_IF_ERROR(end_->Synchronize());
  const int64_t end_ns = TraceClockNs();
  SLUICE_ASSIGN_OR_RETURN(const float total_ms, ElapsedMs(*start_, *end_));
  float backward_ms = 0.0f;
  if (split_recorded_) {
    SLUICE_ASSIGN_OR_RETURN(backward_ms, ElapsedMs(*split_, *end_));
  }
  forward_s_ += 1e-3 * static_cast<double>(total_ms - backward_ms);
  backward_s_ += 1e-3 * static_cast<double>(backward_ms);
  TraceRecorder& trace = TraceRecorder::Global();
  if (trace.enabled()) {
    const int64_t start_ns = end_ns - static_cast<int64_t>(1e6 * total_ms);
    const int64_t split_ns = end_ns - static_cast<int64_t>(1e6 * backward_ms);
    trace.Record(kTraceLaneCompute, fmt::format("forward step {} micro {}", step, micro), start_ns,
                 split_ns);
    trace.Record(kTraceLaneCompute, fmt::format("backward step {} micro {}", step, micro), split_ns,
                 end_ns);
  }
  return OkStatus();
}

Status PhaseClock::AfterForward(int unit) {
  if (unit != last_unit_) return OkStatus();
  split_recorded_ = true;
  return split_->Record(*stream_);
}

}  // namespace sluice::train
