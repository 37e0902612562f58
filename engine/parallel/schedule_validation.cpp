#include "engine/parallel/schedule_validation.h"

#include <fmt/format.h>

#include <string>
#include <vector>

#include "engine/parallel/schedule_timeline.h"

namespace sluice::parallel {
namespace {

constexpr int kNever = -1;

// Where, in one stage's list, each step of one (micro-batch, chunk) happened.
struct UnitSteps {
  int load = kNever;
  int recv_activation = kNever;
  int forward = kNever;
  int send_activation = kNever;
  int recv_grad = kNever;
  int input_backward = kNever;  // backward or backward-input
  bool split = false;           // input_backward was a backward-input
  int weight_backward = kNever;
  int send_grad = kNever;
};

class StageChecker {
 public:
  StageChecker(const PipelineSchedule& schedule, int stage)
      : s_(schedule),
        stage_(stage),
        units_(static_cast<size_t>(schedule.micro_batches) * schedule.chunks) {}

  Status Run() {
    const std::vector<PipeInstruction>& list = s_.stage_instructions[stage_];
    for (int i = 0; i < static_cast<int>(list.size()); ++i) {
      SLUICE_RETURN_IF_ERROR(Step(i, list[i]));
    }
    return Finish();
  }

 private:
  template <typename... Args>
  Status Error(int index, const PipeInstruction& in, fmt::format_string<Args...> format,
               Args&&... args) const {
    return InvalidArgumentError("{} schedule, stage {}, instruction {} ({}): {}",
                                ScheduleKindName(s_.kind), stage_, index, in.Describe(),
                                fmt::format(format, std::forward<Args>(args)...));
  }

  UnitSteps& At(int micro, int chunk) { return units_[micro * s_.chunks + chunk]; }

  // Records `index` in `slot`; an error when it is there already.
  Status Once(int& slot, int index, const PipeInstruction& in) {
    if (slot != kNever) return Error(index, in, "already done at instruction {}", slot);
    slot = index;
    return OkStatus();
  }

  Status Step(int i, const PipeInstruction& in) {
    const bool step_op = in.op == PipeOp::kReduceTiedGrads || in.op == PipeOp::kReduceGrads ||
                         in.op == PipeOp::kOptimizerStep;
    if (step_op) return Tail(i, in);
    if (tail_ > 0) return Error(i, in, "after the step's reductions began");
    if (in.micro < 0 || in.micro >= s_.micro_batches) {
      return Error(i, in, "micro-batch out of range [0, {})", s_.micro_batches);
    }
    if (in.chunk < 0 || in.chunk >= s_.chunks) {
      return Error(i, in, "chunk out of range [0, {})", s_.chunks);
    }
    const int k = s_.VirtualStage(stage_, in.chunk);
    const int last = s_.virtual_stages() - 1;
    const bool remote = s_.stages > 1;
    UnitSteps& u = At(in.micro, in.chunk);
    switch (in.op) {
      case PipeOp::kLoadMicroBatch:
        if (k != 0 && k != last) {
          return Error(i, in, "virtual stage {} is neither the first nor the last", k);
        }
        return Once(u.load, i, in);
      case PipeOp::kRecvActivation:
        if (k == 0 || !remote) return Error(i, in, "no other stage sends this activation");
        return Once(u.recv_activation, i, in);
      case PipeOp::kForward:
        if ((k == 0 || k == last) && u.load == kNever) return Error(i, in, "not loaded before");
        if (k > 0 && remote && u.recv_activation == kNever) {
          return Error(i, in, "its input activation is not received before");
        }
        if (k > 0 && !remote && At(in.micro, in.chunk - 1).forward == kNever) {
          return Error(i, in, "the previous chunk's forward does not come before");
        }
        return Once(u.forward, i, in);
      case PipeOp::kSendActivation:
        if (k == last || !remote) return Error(i, in, "no other stage receives this activation");
        if (u.forward == kNever) return Error(i, in, "before its forward");
        return Once(u.send_activation, i, in);
      case PipeOp::kRecvGrad:
        if (k == last || !remote) return Error(i, in, "no other stage sends this gradient");
        return Once(u.recv_grad, i, in);
      case PipeOp::kBackward:
      case PipeOp::kBackwardInput:
        if (u.forward == kNever) return Error(i, in, "before its forward");
        if (k < last && remote && u.recv_grad == kNever) {
          return Error(i, in, "its output gradient is not received before");
        }
        if (k < last && !remote && At(in.micro, in.chunk + 1).input_backward == kNever) {
          return Error(i, in, "the next chunk's backward does not come before");
        }
        u.split = in.op == PipeOp::kBackwardInput;
        return Once(u.input_backward, i, in);
      case PipeOp::kBackwardWeight:
        if (u.input_backward == kNever || !u.split) {
          return Error(i, in, "not after a backward-input of the same micro-batch");
        }
        return Once(u.weight_backward, i, in);
      case PipeOp::kSendGrad:
        if (k == 0 || !remote) return Error(i, in, "no other stage receives this gradient");
        if (u.input_backward == kNever) return Error(i, in, "before its backward");
        return Once(u.send_grad, i, in);
      default:
        return Error(i, in, "unexpected instruction");
    }
  }

  // The step's tail: reduce-tied-grads, reduce-grads, optimizer-step, once each, in order.
  Status Tail(int i, const PipeInstruction& in) {
    const PipeOp expected[] = {PipeOp::kReduceTiedGrads, PipeOp::kReduceGrads,
                               PipeOp::kOptimizerStep};
    if (tail_ >= 3 || in.op != expected[tail_]) {
      return Error(i, in,
                   "the step must end with reduce-tied-grads, reduce-grads, optimizer-step "
                   "once each, in that order");
    }
    ++tail_;
    return OkStatus();
  }

  Status Finish() const {
    const int last = s_.virtual_stages() - 1;
    const bool remote = s_.stages > 1;
    for (int m = 0; m < s_.micro_batches; ++m) {
      for (int c = 0; c < s_.chunks; ++c) {
        const UnitSteps& u = units_[m * s_.chunks + c];
        const int k = s_.VirtualStage(stage_, c);
        auto missing = [&](std::string_view what) {
          return InvalidArgumentError("{} schedule, stage {}: micro-batch {}, chunk {} has no {}",
                                      ScheduleKindName(s_.kind), stage_, m, c, what);
        };
        if ((k == 0 || k == last) && u.load == kNever) return missing("load");
        if (u.forward == kNever) return missing("forward");
        if (u.input_backward == kNever) return missing("backward");
        if (u.split && u.weight_backward == kNever) return missing("backward-weight");
        if (remote && k > 0 && u.recv_activation == kNever) return missing("recv-activation");
        if (remote && k > 0 && u.send_grad == kNever) return missing("send-grad");
        if (remote && k < last && u.send_activation == kNever) return missing("send-activation");
        if (remote && k < last && u.recv_grad == kNever) return missing("recv-grad");
      }
    }
    if (tail_ != 3) {
      return InvalidArgumentError(
          "{} schedule, stage {}: does not end with reduce-tied-grads, reduce-grads, "
          "optimizer-step",
          ScheduleKindName(s_.kind), stage_);
    }
    return OkStatus();
  }

  const PipelineSchedule& s_;
  const int stage_;
  std::vector<UnitSteps> units_;
  int tail_ = 0;  // how many of the step's tail instructions were seen
};

}  // namespace

Status ValidateSchedule(const PipelineSchedule& schedule) {
  const std::string_view name = ScheduleKindName(schedule.kind);
  if (schedule.stages < 1 || schedule.micro_batches < 1 || schedule.chunks < 1) {
    return InvalidArgumentError(
        "{} schedule: stages ({}), micro_batches ({}) and chunks ({}) must all be at least 1", name,
        schedule.stages, schedule.micro_batches, schedule.chunks);
  }
  if (static_cast<int>(schedule.stage_instructions.size()) != schedule.stages) {
    return InvalidArgumentError("{} schedule: {} instruction lists for {} stages", name,
                                schedule.stage_instructions.size(), schedule.stages);
  }
  for (int r = 0; r < schedule.stages; ++r) {
    SLUICE_RETURN_IF_ERROR(StageChecker(schedule, r).Run());
  }
  // Every stage's own order is sound; whether they fit together is what the simulation says.
  Result<ScheduleTimeline> timeline = SimulateSchedule(schedule, PipelineCosts{});
  if (!timeline.ok()) return std::move(timeline).status();
  return OkStatus();
}

}  // namespace sluice::parallel
