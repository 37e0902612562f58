// How long a step's micro-batches spent in forward and in backward, as the compute stream ran
// them: events recorded on the stream at the start of each pass, after the last unit's forward
// (a UnitHooks callback, which runs while the host enqueues the pass, ahead of the stream) and
// at its end. With the trace enabled, each pass's two phases are recorded on the compute lane.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/model/model.h"
#include "runtime/device.h"
#include "runtime/status.h"

namespace sluice::train {

class PhaseClock final : public model::UnitHooks {
 public:
  // `last_unit`: the index of the model's last unit, whose forward ends the forward phase.
  PhaseClock(Device& device, Stream& stream, int last_unit)
      : device_(&device), stream_(&stream), last_unit_(last_unit) {}

  Status BeginPass();
  // After the pass returned: waits for the stream to finish it and adds its two phases.
  Status EndPass(int64_t step, int64_t micro);
  Status AfterForward(int unit) override;

  double forward_s() const { return forward_s_; }
  double backward_s() const { return backward_s_; }

 private:
  Device* device_;
  Stream* stream_;
  int last_unit_;
  std::unique_ptr<Event> start_;
  std::unique_ptr<Event> split_;
  std::unique_ptr<Event> end_;
  bool split_recorded_ = false;
  double forward_s_ = 0.0;
  double backward_s_ = 0.0;
};

}  // namespace sluice::train
