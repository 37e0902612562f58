#include "engine/parallel/schedule_timeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace sluice::parallel {
namespace {

enum class Flow : int { kActivation = 0, kGrad = 1 };

// One posted send, waiting in its stream for the receive.
struct Transfer {
  int micro = 0;
  int from_virtual_stage = 0;
  double arrival = 0;
};

// What one stage knows about one (micro-batch, chunk), as the times things became available.
struct UnitState {
  std::optional<double> input;        // the forward's input activation
  bool loaded = false;                // inputs (first virtual stage) / targets (last)
  std::optional<double> forward_end;  // the forward's output
  std::optional<double> output_grad;  // the backward's incoming gradient
  std::optional<double> input_backward_end;
  bool split = false;  // the input backward was a backward-input, a backward-weight follows
  bool done = false;   // backward complete (weights too)
};

Status CheckCost(double value, std::string_view name) {
  if (!std::isfinite(value) || value < 0) {
    return InvalidArgumentError("pipeline costs: {} must be a finite time >= 0, got {}", name,
                                value);
  }
  return OkStatus();
}

class Simulation {
 public:
  Simulation(const PipelineSchedule& schedule, const PipelineCosts& costs)
      : s_(schedule),
        costs_(costs),
        clock_(schedule.stages, 0.0),
        pc_(schedule.stages, 0),
        in_flight_(schedule.stages, 0) {
    timeline_.chunks = schedule.chunks;
    timeline_.stages.resize(schedule.stages);
    for (int r = 0; r < schedule.stages; ++r) {
      units_.emplace_back(static_cast<size_t>(schedule.micro_batches) * schedule.chunks);
    }
  }

  Result<ScheduleTimeline> Run() {
    if (static_cast<int>(s_.stage_instructions.size()) != s_.stages) {
      return InvalidArgumentError("{}: {} instruction lists for {} stages", Name(),
                                  s_.stage_instructions.size(), s_.stages);
    }
    // Run every stage as far as it can; a pass in which none moves with work left is a deadlock.
    for (;;) {
      bool moved = false;
      bool finished = true;
      for (int r = 0; r < s_.stages; ++r) {
        const auto& list = s_.stage_instructions[r];
        while (pc_[r] < static_cast<int>(list.size())) {
          SLUICE_ASSIGN_OR_RETURN(const bool ran, Execute(r, list[pc_[r]]));
          if (!ran) break;
          ++pc_[r];
          moved = true;
        }
        finished = finished && pc_[r] == static_cast<int>(list.size());
      }
      if (finished) break;
      if (!moved) return Deadlock();
    }
    for (const auto& [key, queue] : streams_) {
      if (queue.empty()) continue;
      const auto [from, to, stream] = key;
      return InvalidArgumentError(
          "{}: stage {} sends {} of micro-batch {} (virtual stage {}) that stage {} never "
          "receives",
          Name(), from,
          stream == static_cast<int>(Flow::kActivation) ? "the activation" : "the gradient",
          queue.front().micro, queue.front().from_virtual_stage, to);
    }
    Summarize();
    return std::move(timeline_);
  }

 private:
  std::string_view Name() const { return ScheduleKindName(s_.kind); }

  template <typename... Args>
  Status Error(int stage, const PipeInstruction& in, fmt::format_string<Args...> format,
               Args&&... args) const {
    return InvalidArgumentError("{} schedule, stage {}, instruction {} ({}): {}", Name(), stage,
                                pc_[stage], in.Describe(),
                                fmt::format(format, std::forward<Args>(args)...));
  }

  UnitState& Unit(int stage, int micro, int chunk) {
    return units_[stage][micro * s_.chunks + chunk];
  }

  std::deque<Transfer>& StreamOf(int from, int to, Flow stream) {
    return streams_[{from, to, static_cast<int>(stream)}];
  }

  // Runs `in` on `stage`: true when it ran, false when it waits for a transfer not yet sent.
  Result<bool> Execute(int stage, const PipeInstruction& in) {
    double cost = 0;
    double start = clock_[stage];
    double end = start;
    if (in.micro >= 0) {
      if (in.micro >= s_.micro_batches || in.chunk < 0 || in.chunk >= s_.chunks) {
        return Error(stage, in, "micro-batch or chunk out of range ({} micro-batches, {} chunks)",
                     s_.micro_batches, s_.chunks);
      }
    } else if (in.op != PipeOp::kReduceTiedGrads && in.op != PipeOp::kReduceGrads &&
               in.op != PipeOp::kOptimizerStep) {
      return Error(stage, in, "has no micro-batch");
    }
    const int k = in.micro >= 0 ? s_.VirtualStage(stage, in.chunk) : -1;
    const int last = s_.virtual_stages() - 1;
    const double chunk_share = 1.0 / s_.chunks;
    switch (in.op) {
      case PipeOp::kLoadMicroBatch: {
        UnitState& u = Unit(stage, in.micro, in.chunk);
        u.loaded = true;
        if (k == 0) u.input = end;
        break;
      }
      case PipeOp::kRecvActivation:
      case PipeOp::kRecvGrad: {
        const bool activation = in.op == PipeOp::kRecvActivation;
        const int from_k = activation ? k - 1 : k + 1;
        if (from_k < 0 || from_k > last) return Error(stage, in, "no virtual stage sends it");
        std::deque<Transfer>& queue =
            StreamOf(s_.StageOf(from_k), stage, activation ? Flow::kActivation : Flow::kGrad);
        if (queue.empty()) return false;
        const Transfer t = queue.front();
        if (t.micro != in.micro || t.from_virtual_stage != from_k) {
          return Error(stage, in,
                       "stage {} sent micro-batch {} of virtual stage {} first on this stream; "
                       "receives must take transfers in the order they were sent",
                       s_.StageOf(from_k), t.micro, t.from_virtual_stage);
        }
        queue.pop_front();
        end = std::max(start, t.arrival);
        UnitState& u = Unit(stage, in.micro, in.chunk);
        (activation ? u.input : u.output_grad) = end;
        break;
      }
      case PipeOp::kSendActivation:
      case PipeOp::kSendGrad: {
        const bool activation = in.op == PipeOp::kSendActivation;
        const UnitState& u = Unit(stage, in.micro, in.chunk);
        const std::optional<double>& ready = activation ? u.forward_end : u.input_backward_end;
        if (!ready) return Error(stage, in, "sends what is not computed yet");
        const int to_k = activation ? k + 1 : k - 1;
        if (to_k < 0 || to_k > last) return Error(stage, in, "no virtual stage receives it");
        StreamOf(stage, s_.StageOf(to_k), activation ? Flow::kActivation : Flow::kGrad)
            .push_back({.micro = in.micro,
                        .from_virtual_stage = k,
                        .arrival = start + costs_.p2p_latency});
        break;
      }
      case PipeOp::kForward: {
        UnitState& u = Unit(stage, in.micro, in.chunk);
        if (u.forward_end) return Error(stage, in, "forwarded twice");
        if (!u.input) return Error(stage, in, "its input is not there (not loaded or received)");
        if (k == last && !u.loaded) return Error(stage, in, "its targets are not loaded");
        cost = costs_.forward * chunk_share;
        start = std::max(start, *u.input);
        end = start + cost;
        u.forward_end = end;
        if (k == last) u.output_grad = end;  // the loss's gradient is made here
        // A local hand-off (one stage holding consecutive virtual stages): no transfer.
        if (k < last && s_.StageOf(k + 1) == stage) Unit(stage, in.micro, in.chunk + 1).input = end;
        ++in_flight_[stage];
        StageTimeline& st = timeline_.stages[stage];
        st.peak_in_flight = std::max(st.peak_in_flight, in_flight_[stage]);
        break;
      }
      case PipeOp::kBackward:
      case PipeOp::kBackwardInput: {
        UnitState& u = Unit(stage, in.micro, in.chunk);
        if (!u.forward_end) return Error(stage, in, "comes before its forward");
        if (u.input_backward_end) return Error(stage, in, "backwarded twice");
        if (!u.output_grad) return Error(stage, in, "its output gradient is not there");
        u.split = in.op == PipeOp::kBackwardInput;
        cost = (u.split ? costs_.backward_input : costs_.backward) * chunk_share;
        start = std::max(start, *u.output_grad);
        end = start + cost;
        u.input_backward_end = end;
        if (k > 0 && s_.StageOf(k - 1) == stage) {
          Unit(stage, in.micro, in.chunk - 1).output_grad = end;
        }
        if (!u.split) Complete(stage, u);
        break;
      }
      case PipeOp::kBackwardWeight: {
        UnitState& u = Unit(stage, in.micro, in.chunk);
        if (!u.input_backward_end || !u.split) {
          return Error(stage, in, "comes before its backward-input");
        }
        if (u.done) return Error(stage, in, "backwarded twice");
        cost = costs_.backward_weight * chunk_share;
        end = start + cost;
        Complete(stage, u);
        break;
      }
      case PipeOp::kReduceTiedGrads:
      case PipeOp::kReduceGrads:
      case PipeOp::kOptimizerStep:
        break;
    }
    StageTimeline& st = timeline_.stages[stage];
    st.instructions.push_back({.instruction = in, .start = start, .end = end});
    st.busy += cost;
    clock_[stage] = end;
    return true;
  }

  void Complete(int stage, UnitState& u) {
    u.done = true;
    --in_flight_[stage];
  }

  Status Deadlock() const {
    std::string waits;
    for (int r = 0; r < s_.stages; ++r) {
      const auto& list = s_.stage_instructions[r];
      if (pc_[r] >= static_cast<int>(list.size())) continue;
      const PipeInstruction& in = list[pc_[r]];
      const int k = s_.VirtualStage(r, in.chunk);
      const int from_k = in.op == PipeOp::kRecvActivation ? k - 1 : k + 1;
      waits += fmt::format("; stage {} waits at instruction {} ({}) for stage {}", r, pc_[r],
                           in.Describe(), s_.StageOf(from_k));
    }
    return InvalidArgumentError("{} schedule deadlocks: no stage can go on{}", Name(), waits);
  }

  void Summarize() {
    double makespan = 0;
    for (const StageTimeline& st : timeline_.stages) {
      if (!st.instructions.empty()) makespan = std::max(makespan, st.instructions.back().end);
    }
    timeline_.makespan = makespan;
    double busy = 0;
    for (StageTimeline& st : timeline_.stages) {
      busy += st.busy;
      st.bubble_fraction = makespan > 0 ? 1.0 - st.busy / makespan : 0.0;
    }
    timeline_.bubble_fraction = makespan > 0 ? 1.0 - busy / (makespan * s_.stages) : 0.0;
  }

  const PipelineSchedule& s_;
  const PipelineCosts& costs_;
  std::vector<double> clock_;
  std::vector<int> pc_;
  std::vector<int> in_flight_;
  std::vector<std::vector<UnitState>> units_;
  std::map<std::tuple<int, int, int>, std::deque<Transfer>> streams_;
  ScheduleTimeline timeline_;
};

}  // namespace

Result<ScheduleTimeline> SimulateSchedule(const PipelineSchedule& schedule,
                                          const PipelineCosts& costs) {
  SLUICE_RETURN_IF_ERROR(CheckCost(costs.forward, "forward"));
  SLUICE_RETURN_IF_ERROR(CheckCost(costs.backward, "backward"));
  SLUICE_RETURN_IF_ERROR(CheckCost(costs.backward_input, "backward_input"));
  SLUICE_RETURN_IF_ERROR(CheckCost(costs.backward_weight, "backward_weight"));
  SLUICE_RETURN_IF_ERROR(CheckCost(costs.p2p_latency, "p2p_latency"));
  if (schedule.stages < 1 || schedule.micro_batches < 1 || schedule.chunks < 1) {
    return InvalidArgumentError(
        "{} schedule: stages ({}), micro_batches ({}) and chunks ({}) must all be at least 1",
        ScheduleKindName(schedule.kind), schedule.stages, schedule.micro_batches, schedule.chunks);
  }
  return Simulation(schedule, costs).Run();
}

}  // namespace sluice::parallel
