#include "benchmarks/lib/pipeline_bench.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <utility>

#include "benchmarks/lib/bench_record.h"
#include "engine/model/model.h"
#include "engine/parallel/measured_timeline.h"
#include "engine/parallel/pipeline_executor.h"
#include "engine/parallel/pipeline_schedule.h"
#include "engine/parallel/schedule_timeline.h"
#include "engine/train/run_setup.h"
#include "engine/zero/comm_queue.h"
#include "runtime/comm.h"
#include "runtime/comm/comm_factory.h"
#include "runtime/device/device_factory.h"
#include "runtime/ops/ops_factory.h"
#include "runtime/trace.h"

namespace sluice::bench {
namespace {

using model::Model;
using parallel::PipeInstruction;
using parallel::PipelineCosts;
using parallel::PipelineSchedule;
using parallel::PipeOp;
using parallel::ScheduleKind;
using parallel::ScheduleTimeline;
using parallel::TimedInstruction;

constexpr double kNsPerMs = 1e6;

// The compute kinds a chunk's unit hooks tell apart: Backward and BackwardInput run the same
// Before/AfterBackward hooks.
enum class Compute : uint8_t { kForward, kBackward, kWeight };

Compute ComputeOf(PipeOp op) {
  if (op == PipeOp::kForward) return Compute::kForward;
  if (op == PipeOp::kBackwardWeight) return Compute::kWeight;
  return Compute::kBackward;
}

struct Span {
  Compute kind = Compute::kForward;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  double ms() const { return static_cast<double>(end_ns - start_ns) / kNsPerMs; }
};

// Unit hooks that stamp the time on the chunk's stream: a host function enqueued at each hook
// runs when the stream reaches that point, so the stamps are when the units' work ran, not when
// the host enqueued it. Take() groups them into one span per compute call: from the first unit's
// Before to the last unit's After (the loss and the hidden-state copies outside the units are
// left out: small beside the units' matmuls).
class StreamClock final : public model::UnitHooks {
 public:
  explicit StreamClock(Model<float>& chunk)
      : chunk_(chunk), units_(static_cast<int>(chunk.units().size())) {}

  bool SupportsSplitBackward() const override { return true; }
  Status BeforeForward(int unit) override { return Stamp(Compute::kForward, unit, true); }
  Status AfterForward(int unit) override { return Stamp(Compute::kForward, unit, false); }
  Status BeforeBackward(int unit) override { return Stamp(Compute::kBackward, unit, true); }
  Status AfterBackward(int unit) override { return Stamp(Compute::kBackward, unit, false); }
  Status BeforeBackwardWeight(int unit) override { return Stamp(Compute::kWeight, unit, true); }
  Status AfterBackwardWeight(int unit) override { return Stamp(Compute::kWeight, unit, false); }

  // The spans since the last Take, in the order the stream ran them. Call after the stream
  // synchronized (EndPass does).
  std::vector<Span> Take() {
    std::vector<Span> spans;
    int last_unit = -1;
    for (const Mark& m : marks_) {
      if (m.before) {
        // A compute starts at its first unit: forward at unit 0, backward at the last unit,
        // backward-weight where the units stop descending (it runs them as the backward did).
        const bool starts = spans.empty() || spans.back().kind != m.kind ||
                            (m.kind == Compute::kForward && m.unit == 0) ||
                            (m.kind == Compute::kBackward && m.unit == units_ - 1) ||
                            (m.kind == Compute::kWeight && m.unit >= last_unit);
        if (starts) spans.push_back({m.kind, m.ns, m.ns});
        last_unit = m.unit;
      } else {
        spans.back().end_ns = m.ns;
      }
    }
    marks_.clear();
    return spans;
  }

 private:
  struct Mark {
    Compute kind;
    int unit;
    bool before;
    int64_t ns;
  };

  Status Stamp(Compute kind, int unit, bool before) {
    return chunk_.ops().device().LaunchHostFunc(
        chunk_.stream(),
        [this, kind, unit, before] {
          marks_.push_back({kind, unit, before, TraceClockNs()});
          return OkStatus();
        },
        "bench_pipeline clock");
  }

  Model<float>& chunk_;
  int units_;
  std::vector<Mark> marks_;  // written by the stream's host functions only
};

struct ScheduleCase {
  std::string name;  // as the option spells it
  ScheduleKind kind;
  int chunks;
};

Result<ScheduleCase> ParseSchedule(const std::string& name, int v) {
  if (name == "gpipe") return ScheduleCase{name, ScheduleKind::kGPipe, 1};
  if (name == "1f1b") return ScheduleCase{name, ScheduleKind::kOneFOneB, 1};
  if (name == "interleaved") {
    return ScheduleCase{fmt::format("interleaved v={}", v), ScheduleKind::kInterleaved1F1B, v};
  }
  if (name == "zb-h1") return ScheduleCase{name, ScheduleKind::kZeroBubbleH1, 1};
  return InvalidArgumentError(
      "--schedules: unknown schedule '{}' (gpipe, 1f1b, interleaved, zb-h1)", name);
}

// The op costs of one stage, in ms: a micro-batch through all of the stage's chunks.
struct StageCosts {
  double forward = 0;
  double backward = 0;
  double backward_input = 0;
  double backward_weight = 0;
};

std::vector<int32_t> RandomIds(int64_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 engine(seed);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> out(static_cast<size_t>(n));
  for (int32_t& v : out) v = dist(engine);
  return out;
}

// What one rank builds: its chunks for a layout of v chunks per stage, each with a clock.
class Stage {
 public:
  static Result<std::unique_ptr<Stage>> Create(const model::ModelOptions& options, int stages,
                                               int stage, int v, model::HostAllocator& host,
                                               ops::OpsBackend& ops) {
    auto out = std::unique_ptr<Stage>(new Stage());
    const int64_t virtual_stages = static_cast<int64_t>(stages) * v;
    const int64_t per = options.n_layer / virtual_stages;
    for (int c = 0; c < v; ++c) {
      const int64_t k = static_cast<int64_t>(c) * stages + stage;
      SLUICE_ASSIGN_OR_RETURN(
          std::unique_ptr<Model<float>> chunk,
          Model<float>::CreateStage(options, {k * per, (k + 1) * per}, host, ops));
      chunk->InitializeParameters(1234);
      out->clocks_.push_back(std::make_unique<StreamClock>(*chunk));
      chunk->SetHooks(out->clocks_.back().get());
      out->chunks_.push_back(std::move(chunk));
    }
    return out;
  }

  std::vector<model::ModelChunk<float>*> chunk_ptrs() const {
    std::vector<model::ModelChunk<float>*> out;
    for (const auto& c : chunks_) out.push_back(&c->chunk(0));
    return out;
  }
  Model<float>& chunk(int c) const { return *chunks_[c]; }
  StreamClock& clock(int c) const { return *clocks_[c]; }
  int chunks() const { return static_cast<int>(chunks_.size()); }

 private:
  Stage() = default;
  std::vector<std::unique_ptr<Model<float>>> chunks_;
  std::vector<std::unique_ptr<StreamClock>> clocks_;
};

// Medians over `reps` micro-batches of each op on each chunk of `stage` alone, summed over its
// chunks: the stage's costs.
Result<StageCosts> MeasureCosts(Stage& stage, Device& device, int64_t batch, int64_t seq,
                                int64_t vocab, int reps) {
  StageCosts costs;
  const int64_t rows = batch * seq;
  for (int c = 0; c < stage.chunks(); ++c) {
    Model<float>& chunk = stage.chunk(c);
    const int64_t width = chunk.options().d_model;
    const size_t bytes = static_cast<size_t>(rows * width) * sizeof(float);
    std::vector<float> host(static_cast<size_t>(rows * width));
    std::mt19937_64 engine(99 + c);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (float& x : host) x = dist(engine);
    SLUICE_ASSIGN_OR_RETURN(DeviceBuffer hidden,
                            device.Allocate(bytes, MemoryCategory::kActivations));
    SLUICE_ASSIGN_OR_RETURN(DeviceBuffer grad,
                            device.Allocate(bytes, MemoryCategory::kActivations));
    SLUICE_ASSIGN_OR_RETURN(DeviceBuffer output,
                            device.Allocate(bytes, MemoryCategory::kActivations));
    SLUICE_ASSIGN_OR_RETURN(DeviceBuffer input_grad,
                            device.Allocate(bytes, MemoryCategory::kActivations));
    SLUICE_RETURN_IF_ERROR(
        device.CopyAsync(hidden.data(), host.data(), bytes, CopyKind::kH2D, chunk.stream()));
    SLUICE_RETURN_IF_ERROR(
        device.CopyAsync(grad.data(), host.data(), bytes, CopyKind::kH2D, chunk.stream()));
    SLUICE_RETURN_IF_ERROR(chunk.stream().Synchronize());
    const std::vector<int32_t> tokens = RandomIds(rows, vocab, 5);
    const std::vector<int32_t> targets = RandomIds(rows, vocab, 6);
    model::StageInput<float> input{.batch = batch, .seq = seq};
    if (chunk.first_stage()) input.tokens = tokens.data();
    if (!chunk.first_stage()) input.hidden = hidden.data_as<float>();
    if (chunk.last_stage()) input.targets = targets.data();
    model::StageOutputGrad<float> out_grad{.loss_grad = 1.0};
    if (!chunk.last_stage()) out_grad.hidden = grad.data_as<float>();
    float* out = chunk.last_stage() ? nullptr : output.data_as<float>();
    float* in_grad = chunk.first_stage() ? nullptr : input_grad.data_as<float>();

    std::map<Compute, std::vector<double>> fused;
    std::map<Compute, std::vector<double>> split;
    for (const bool is_split : {false, true}) {
      SLUICE_RETURN_IF_ERROR(chunk.BeginPass(true));
      for (int m = 0; m < reps; ++m) {
        SLUICE_RETURN_IF_ERROR(chunk.Forward(m, input, out));
        if (is_split) {
          SLUICE_RETURN_IF_ERROR(chunk.BackwardInput(m, out_grad, in_grad));
          SLUICE_RETURN_IF_ERROR(chunk.BackwardWeight(m));
        } else {
          SLUICE_RETURN_IF_ERROR(chunk.Backward(m, out_grad, in_grad));
        }
      }
      SLUICE_RETURN_IF_ERROR(chunk.EndPass().status());
      for (const Span& s : stage.clock(c).Take()) {
        (is_split ? split : fused)[s.kind].push_back(s.ms());
      }
    }
    costs.forward += Median(fused[Compute::kForward]);
    costs.backward += Median(fused[Compute::kBackward]);
    costs.backward_input += Median(split[Compute::kBackward]);
    costs.backward_weight += Median(split[Compute::kWeight]);
    chunk.ZeroGrads();
  }
  return costs;
}

// Half the median round trip of one hidden state between ranks 0 and 1, in ms (others idle).
Result<double> MeasureLatency(Comm& world, size_t elements, int reps) {
  std::vector<float> buffer(elements, 1.0f);
  std::vector<double> round_trips;
  SLUICE_RETURN_IF_ERROR(world.Barrier());
  for (int i = 0; i < reps + 5; ++i) {
    const int64_t start = TraceClockNs();
    if (world.rank() == 0) {
      SLUICE_RETURN_IF_ERROR(world.Send(buffer.data(), elements, DType::kF32, 1, 7));
      SLUICE_RETURN_IF_ERROR(world.Recv(buffer.data(), elements, DType::kF32, 1, 8));
    } else if (world.rank() == 1) {
      SLUICE_RETURN_IF_ERROR(world.Recv(buffer.data(), elements, DType::kF32, 0, 7));
      SLUICE_RETURN_IF_ERROR(world.Send(buffer.data(), elements, DType::kF32, 0, 8));
    }
    if (i >= 5) round_trips.push_back(static_cast<double>(TraceClockNs() - start) / kNsPerMs);
  }
  double half = Median(round_trips) / 2;
  SLUICE_RETURN_IF_ERROR(world.Broadcast(&half, 1, DType::kF64, 0));
  return half;
}

// Every rank's `mine` (the same count on each), rank by rank.
Result<std::vector<double>> GatherDoubles(Comm& world, const std::vector<double>& mine) {
  std::vector<double> all(mine.size() * static_cast<size_t>(world.size()));
  SLUICE_RETURN_IF_ERROR(world.AllGather(mine.data(), all.data(), all.size(), DType::kF64));
  return all;
}

PipelineCosts MeanCosts(const std::vector<StageCosts>& stages, double latency) {
  PipelineCosts out;
  out.forward = out.backward = out.backward_input = out.backward_weight = 0;
  for (const StageCosts& s : stages) {
    out.forward += s.forward / static_cast<double>(stages.size());
    out.backward += s.backward / static_cast<double>(stages.size());
    out.backward_input += s.backward_input / static_cast<double>(stages.size());
    out.backward_weight += s.backward_weight / static_cast<double>(stages.size());
  }
  out.p2p_latency = latency;
  return out;
}

double Theory(const ScheduleCase& c, int p, int m, const PipelineCosts& costs) {
  if (c.kind == ScheduleKind::kInterleaved1F1B) {
    return (p - 1.0) / (static_cast<double>(c.chunks) * m + p - 1.0);
  }
  if (c.kind == ScheduleKind::kZeroBubbleH1) {
    const double f = costs.forward;
    const double b = costs.backward_input;
    const double w = costs.backward_weight;
    const double bubble = std::max(0.0, (p - 1.0) * (f + b - w));
    return bubble / (bubble + m * (f + b + w));
  }
  return (p - 1.0) / (m + p - 1.0);
}

// One timed step's figures (rank 0).
struct StepFigures {
  double wall_ms = 0;  // the slowest rank's RunStep
  double makespan_ms = 0;
  double bubble = 0;
  std::vector<double> stage_bubbles;
  double simulated_in_step = 0;  // with this step's own op durations and transfer delay
  std::vector<StageCosts> in_step_costs;
  double exposed_delay_ms = 0;
};

struct CaseResult {
  ScheduleCase schedule;
  int micro_batches = 0;
  std::vector<StepFigures> steps;
  StepFigures median;
  double simulated = 0;  // with the costs measured alone
  double simulated_makespan = 0;
  double theory = 0;
};

// The op durations of a measured timeline, by stage: medians per chunk, summed over chunks.
std::vector<StageCosts> InStepCosts(const PipelineSchedule& schedule,
                                    const ScheduleTimeline& timeline) {
  std::vector<StageCosts> out(timeline.stages.size());
  for (size_t r = 0; r < timeline.stages.size(); ++r) {
    std::map<std::pair<PipeOp, int>, std::vector<double>> by_op;
    for (const TimedInstruction& t : timeline.stages[r].instructions) {
      by_op[{t.instruction.op, t.instruction.chunk}].push_back(t.end - t.start);
    }
    for (int c = 0; c < schedule.chunks; ++c) {
      const auto median = [&](PipeOp op) {
        auto it = by_op.find({op, c});
        return it == by_op.end() ? 0.0 : Median(it->second);
      };
      out[r].forward += median(PipeOp::kForward);
      out[r].backward += median(PipeOp::kBackward);
      out[r].backward_input += median(PipeOp::kBackwardInput);
      out[r].backward_weight += median(PipeOp::kBackwardWeight);
    }
    // A fused backward's share, for the simulator's split costs (and the other way round), so
    // that every schedule's in-step costs are complete.
    if (out[r].backward == 0) out[r].backward = out[r].backward_input + out[r].backward_weight;
    if (out[r].backward_input == 0) out[r].backward_input = out[r].backward / 2;
    if (out[r].backward_weight == 0) out[r].backward_weight = out[r].backward / 2;
  }
  return out;
}

struct Environment {
  Comm& world;
  Device& device;
  ops::OpsBackend& ops;
  zero::CommQueue& queue;
  model::HostAllocator& host;
  model::ModelOptions model;
};

// One schedule and M, ready to step: its chunks, executor and micro-batches.
struct CaseRun {
  PipelineSchedule schedule;
  std::unique_ptr<Stage> stage;
  std::unique_ptr<parallel::PipelineExecutor<float>> executor;
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<int32_t>> targets;
  parallel::PipelineStepHooks hooks;
  std::vector<PipeInstruction> mine;  // this rank's compute instructions, in order
  size_t most = 0;                    // the longest compute list of any stage
  CaseResult result;
};

Result<std::unique_ptr<CaseRun>> PrepareCase(const PipelineBenchOptions& options, Environment& env,
                                             const ScheduleCase& sc, int m,
                                             const PipelineCosts& isolated) {
  const int p = env.world.size();
  const int rank = env.world.rank();
  auto run = std::make_unique<CaseRun>();
  SLUICE_ASSIGN_OR_RETURN(run->schedule, parallel::MakePipelineSchedule(sc.kind, p, m, sc.chunks));
  const PipelineSchedule& schedule = run->schedule;
  SLUICE_ASSIGN_OR_RETURN(run->stage,
                          Stage::Create(env.model, p, rank, sc.chunks, env.host, env.ops));
  SLUICE_ASSIGN_OR_RETURN(run->executor, parallel::PipelineExecutor<float>::Create(
                                             schedule, run->stage->chunk_ptrs(), env.queue,
                                             {.batch = options.batch, .seq = options.seq}));
  const int64_t rows = options.batch * options.seq;
  auto& tokens = run->tokens;
  auto& targets = run->targets;
  for (int i = 0; i < m; ++i) {
    tokens.push_back(RandomIds(rows, options.vocab, 100 + 2 * i));
    targets.push_back(RandomIds(rows, options.vocab, 101 + 2 * i));
  }
  const int last = schedule.virtual_stages() - 1;
  CaseRun* self = run.get();
  run->hooks.load = [self, rank, last](int micro,
                                       int chunk) -> Result<parallel::PipelineMicroBatch> {
    const int k = self->schedule.VirtualStage(rank, chunk);
    parallel::PipelineMicroBatch batch;
    if (k == 0) batch.tokens = self->tokens[micro].data();
    if (k == last) batch.targets = self->targets[micro].data();
    return batch;
  };
  // Each rank's compute instructions in its list's order, and which chunk's spans they take.
  std::vector<PipeInstruction>& mine = run->mine;
  for (const PipeInstruction& in : schedule.stage_instructions[rank]) {
    if (parallel::IsCompute(in.op)) mine.push_back(in);
  }
  size_t& most = run->most;
  for (const auto& list : schedule.stage_instructions) {
    most = std::max<size_t>(most, std::count_if(list.begin(), list.end(), [](const auto& in) {
                              return parallel::IsCompute(in.op);
                            }));
  }

  CaseResult& result = run->result;
  result.schedule = sc;
  result.micro_batches = m;
  SLUICE_ASSIGN_OR_RETURN(ScheduleTimeline sim, parallel::SimulateSchedule(schedule, isolated));
  result.simulated = sim.bubble_fraction;
  result.simulated_makespan = sim.makespan;
  result.theory = Theory(sc, p, m, isolated);
  return run;
}

// Step `step` of a case (warm-up steps first): collective; rank 0 keeps the timed steps' figures.
Status StepCase(const PipelineBenchOptions& options, Environment& env, CaseRun& run, int step) {
  const int p = env.world.size();
  const int rank = env.world.rank();
  const PipelineSchedule& schedule = run.schedule;
  const ScheduleCase& sc = run.result.schedule;
  const int m = run.result.micro_batches;
  const std::vector<PipeInstruction>& mine = run.mine;
  const size_t most = run.most;
  Stage* stage = run.stage.get();
  CaseResult& result = run.result;
  SLUICE_RETURN_IF_ERROR(env.world.Barrier());
  const int64_t begin = TraceClockNs();
  SLUICE_ASSIGN_OR_RETURN(parallel::PipelineStepResult ran, run.executor->RunStep(run.hooks));
  const double wall_ms = static_cast<double>(TraceClockNs() - begin) / kNsPerMs;
  if (!std::isfinite(ran.loss)) {
    return DataLossError("{} M={} step {}: the loss is {}", sc.name, m, step, ran.loss);
  }
  // This rank's spans, matched to its compute instructions: 5 doubles each (op, micro, chunk,
  // start, end), padded to the longest list, then the step's wall time.
  std::vector<std::vector<Span>> spans;
  std::vector<size_t> next(stage->chunks(), 0);
  for (int c = 0; c < stage->chunks(); ++c) spans.push_back(stage->clock(c).Take());
  std::vector<double> record(most * 5 + 1, -1.0);
  for (size_t i = 0; i < mine.size(); ++i) {
    const PipeInstruction& in = mine[i];
    const size_t j = next[in.chunk]++;
    if (j >= spans[in.chunk].size() || spans[in.chunk][j].kind != ComputeOf(in.op)) {
      return InternalError(
          "{} M={}: stage {} chunk {}: its clock saw {} computes, which do not match the "
          "schedule's {} at compute {}",
          sc.name, m, rank, in.chunk, spans[in.chunk].size(), in.Describe(), i);
    }
    const Span& s = spans[in.chunk][j];
    record[5 * i] = static_cast<double>(in.op);
    record[5 * i + 1] = in.micro;
    record[5 * i + 2] = in.chunk;
    record[5 * i + 3] = static_cast<double>(s.start_ns) / kNsPerMs;
    record[5 * i + 4] = static_cast<double>(s.end_ns) / kNsPerMs;
  }
  record.back() = wall_ms;
  for (auto& chunk : stage->chunk_ptrs()) chunk->model().ZeroGrads();
  SLUICE_ASSIGN_OR_RETURN(std::vector<double> all, GatherDoubles(env.world, record));
  if (step < options.warmup || rank != 0) return OkStatus();

  StepFigures f;
  std::vector<std::vector<TimedInstruction>> compute(p);
  for (int r = 0; r < p; ++r) {
    const double* base = all.data() + static_cast<size_t>(r) * record.size();
    for (size_t i = 0; i < most && base[5 * i] >= 0; ++i) {
      TimedInstruction t;
      t.instruction = {static_cast<PipeOp>(static_cast<int>(base[5 * i])),
                       static_cast<int>(base[5 * i + 1]), static_cast<int>(base[5 * i + 2])};
      t.start = base[5 * i + 3];
      t.end = base[5 * i + 4];
      compute[r].push_back(t);
    }
    f.wall_ms = std::max(f.wall_ms, base[record.size() - 1]);
  }
  SLUICE_ASSIGN_OR_RETURN(ScheduleTimeline measured,
                          parallel::MeasuredTimeline(schedule, std::move(compute)));
  f.makespan_ms = measured.makespan;
  f.bubble = measured.bubble_fraction;
  for (const auto& st : measured.stages) f.stage_bubbles.push_back(st.bubble_fraction);
  const std::vector<double> delays = parallel::ExposedTransferDelays(schedule, measured);
  f.exposed_delay_ms = Median(delays);
  f.in_step_costs = InStepCosts(schedule, measured);
  SLUICE_ASSIGN_OR_RETURN(
      ScheduleTimeline in_step,
      parallel::SimulateSchedule(schedule,
                                 MeanCosts(f.in_step_costs, std::max(0.0, f.exposed_delay_ms))));
  f.simulated_in_step = in_step.bubble_fraction;
  result.steps.push_back(std::move(f));
  return OkStatus();
}

// The medians over the timed steps (rank 0).
void FinishCase(CaseRun& run, int p) {
  CaseResult& result = run.result;
  const auto median_of = [&](auto field) {
    std::vector<double> values;
    for (const StepFigures& f : result.steps) values.push_back(field(f));
    return Median(values);
  };
  StepFigures& med = result.median;
  med.wall_ms = median_of([](const StepFigures& f) { return f.wall_ms; });
  med.makespan_ms = median_of([](const StepFigures& f) { return f.makespan_ms; });
  med.bubble = median_of([](const StepFigures& f) { return f.bubble; });
  med.simulated_in_step = median_of([](const StepFigures& f) { return f.simulated_in_step; });
  med.exposed_delay_ms = median_of([](const StepFigures& f) { return f.exposed_delay_ms; });
  for (int r = 0; r < p; ++r) {
    med.stage_bubbles.push_back(
        median_of([r](const StepFigures& f) { return f.stage_bubbles[r]; }));
    StageCosts c;
    c.forward = median_of([r](const StepFigures& f) { return f.in_step_costs[r].forward; });
    c.backward = median_of([r](const StepFigures& f) { return f.in_step_costs[r].backward; });
    c.backward_input =
        median_of([r](const StepFigures& f) { return f.in_step_costs[r].backward_input; });
    c.backward_weight =
        median_of([r](const StepFigures& f) { return f.in_step_costs[r].backward_weight; });
    med.in_step_costs.push_back(c);
  }
}

nlohmann::json CostsJson(const StageCosts& c) {
  return {{"forward_ms", c.forward},
          {"backward_ms", c.backward},
          {"backward_input_ms", c.backward_input},
          {"backward_weight_ms", c.backward_weight}};
}

std::string CostsRow(const std::string& what, const StageCosts& c) {
  return fmt::format("  {:<34} {:>8.3f} {:>8.3f} {:>8.3f} {:>8.3f}\n", what, c.forward, c.backward,
                     c.backward_input, c.backward_weight);
}

const CaseResult* Find(const std::vector<CaseResult>& results, ScheduleKind kind, int m) {
  for (const CaseResult& r : results) {
    if (r.schedule.kind == kind && r.micro_batches == m) return &r;
  }
  return nullptr;
}

}  // namespace

void AddPipelineBenchOptions(CLI::App& app, PipelineBenchOptions& options) {
  app.add_option("--layers", options.layers, "Decoder layers (a multiple of ranks x --chunks)")
      ->check(CLI::PositiveNumber);
  app.add_option("--d-model", options.d_model, "Hidden width")->check(CLI::PositiveNumber);
  app.add_option("--heads", options.heads, "Attention heads")->check(CLI::PositiveNumber);
  app.add_option("--d-ff", options.d_ff, "MLP width")->check(CLI::PositiveNumber);
  app.add_option("--vocab", options.vocab, "Vocabulary size")->check(CLI::PositiveNumber);
  app.add_option("--seq", options.seq, "Tokens per sequence")->check(CLI::PositiveNumber);
  app.add_option("--batch", options.batch, "Sequences per micro-batch")->check(CLI::PositiveNumber);
  app.add_option("--micro-batches", options.micro_batches, "M values (multiples of the ranks)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  app.add_option("--schedules", options.schedules, "gpipe, 1f1b, interleaved, zb-h1")
      ->delimiter(',')
      ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved", "zb-h1"}));
  app.add_option("--chunks", options.chunks, "v of the interleaved schedule")
      ->check(CLI::Range(2, 64));
  app.add_option("--steps", options.steps, "Timed steps per schedule and M")
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", options.warmup, "Untimed steps first")->check(CLI::NonNegativeNumber);
  app.add_option("--cost-reps", options.cost_reps, "Micro-batches timed per op for the costs")
      ->check(CLI::PositiveNumber);
  app.add_option("--latency-reps", options.latency_reps, "Round trips timed for the p2p latency")
      ->check(CLI::PositiveNumber);
  app.add_option("--json", options.json_path, "Write the JSON record here ('-': stdout)");
}

Status RunPipelineBenchCommand(const PipelineBenchOptions& options) {
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<Comm> world, CreateWorldComm());
  const int p = world->size();
  const int rank = world->rank();
  if (p < 2) {
    return InvalidArgumentError(
        "bench_pipeline: run it on at least 2 ranks (mpirun -np 2), one "
        "pipeline stage each; got {}",
        p);
  }
  std::vector<ScheduleCase> cases;
  for (const std::string& name : options.schedules) {
    SLUICE_ASSIGN_OR_RETURN(ScheduleCase c, ParseSchedule(name, options.chunks));
    cases.push_back(c);
  }
  if (options.layers % (static_cast<int64_t>(p) * options.chunks) != 0) {
    return InvalidArgumentError(
        "--layers {}: must split evenly into {} ranks x {} chunks (interleaved), so that every "
        "chunk holds as many layers",
        options.layers, p, options.chunks);
  }
  const double load_at_start = LoadAverage();
  SLUICE_ASSIGN_OR_RETURN(
      std::unique_ptr<Device> device,
      CreateDevice({.kind = DeviceKind::kCpu, .memory_limit_bytes = uint64_t{4} << 30}));
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<ops::OpsBackend> ops, ops::CreateOpsBackend(*device));
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<Comm> p2p, world->Split(0, rank));
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<zero::CommQueue> queue,
                          zero::CommQueue::Create(*device, std::move(p2p), /*overlap=*/true));
  model::ModelOptions mo = train::DefaultModelOptions();
  mo.family = model::Family::kGpt2;
  mo.n_layer = options.layers;
  mo.n_head = mo.n_kv_head = options.heads;
  mo.d_model = options.d_model;
  mo.d_ff = options.d_ff;
  mo.vocab_size = options.vocab;
  mo.seq_len = options.seq;
  mo.tie_embeddings = false;  // a tied head cannot leave the first stage
  mo.num_threads = 1;         // one core per rank
  model::HostAllocator host;
  Environment env{*world, *device, *ops, *queue, host, mo};

  // The costs, per layout (v = 1, and v = --chunks when interleaving is asked for).
  std::map<int, std::vector<StageCosts>> costs;  // v -> by stage
  std::vector<int> layouts = {1};
  for (const ScheduleCase& c : cases) {
    if (c.chunks > 1 && std::find(layouts.begin(), layouts.end(), c.chunks) == layouts.end()) {
      layouts.push_back(c.chunks);
    }
  }
  for (int v : layouts) {
    SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<Stage> stage,
                            Stage::Create(mo, p, rank, v, host, *ops));
    SLUICE_RETURN_IF_ERROR(world->Barrier());
    // One untimed round first (allocations, caches), then the timed one.
    SLUICE_RETURN_IF_ERROR(
        MeasureCosts(*stage, *device, options.batch, options.seq, options.vocab, 2).status());
    SLUICE_RETURN_IF_ERROR(world->Barrier());
    SLUICE_ASSIGN_OR_RETURN(StageCosts mine,
                            MeasureCosts(*stage, *device, options.batch, options.seq, options.vocab,
                                         options.cost_reps));
    SLUICE_ASSIGN_OR_RETURN(std::vector<double> all,
                            GatherDoubles(*world, {mine.forward, mine.backward, mine.backward_input,
                                                   mine.backward_weight}));
    for (int r = 0; r < p; ++r) {
      costs[v].push_back({all[4 * r], all[4 * r + 1], all[4 * r + 2], all[4 * r + 3]});
    }
  }
  const size_t hidden = static_cast<size_t>(options.batch * options.seq * options.d_model);
  SLUICE_ASSIGN_OR_RETURN(double latency, MeasureLatency(*world, hidden, options.latency_reps));

  // Every case's steps in turn, step by step, so that the load other work puts on the machine
  // falls on all schedules alike and their ratios compare steps of the same moments.
  std::vector<std::unique_ptr<CaseRun>> runs;
  for (int m : options.micro_batches) {
    for (const ScheduleCase& c : cases) {
      SLUICE_ASSIGN_OR_RETURN(runs.emplace_back(),
                              PrepareCase(options, env, c, m, MeanCosts(costs[c.chunks], latency)));
    }
  }
  for (int step = 0; step < options.warmup + options.steps; ++step) {
    for (auto& run : runs) SLUICE_RETURN_IF_ERROR(StepCase(options, env, *run, step));
  }
  std::vector<CaseResult> results;
  for (auto& run : runs) {
    if (rank == 0) FinishCase(*run, p);
    results.push_back(std::move(run->result));
  }
  if (rank != 0) return OkStatus();

  // The table.
  std::string text = fmt::format(
      "# bench_pipeline: {} ranks (P = {}), {}, load average {:.2f} at start\n"
      "# GPT-2 {} layers, d_model {}, {} heads, d_ff {}, vocab {}, micro-batch {} x {} tokens, "
      "1 thread per rank\n",
      p, p, HostName(), load_at_start, options.layers, options.d_model, options.heads, options.d_ff,
      options.vocab, options.batch, options.seq);
  text += "#\n# costs (ms per micro-batch through a whole stage; medians)\n";
  text += fmt::format("  {:<34} {:>8} {:>8} {:>8} {:>8}\n", "", "F", "B", "B-input", "W");
  for (const auto& [v, by_stage] : costs) {
    for (int r = 0; r < p; ++r) {
      text += CostsRow(fmt::format("alone, v={}, stage {}", v, r), by_stage[r]);
    }
  }
  text += fmt::format("  p2p latency (half a round trip, {} KiB): {:.3f} ms\n",
                      hidden * sizeof(float) / 1024, latency);
  for (const CaseResult& r : results) {
    for (int s = 0; s < p; ++s) {
      text +=
          CostsRow(fmt::format("in steps, {} M={}, stage {}", r.schedule.name, r.micro_batches, s),
                   r.median.in_step_costs[s]);
    }
  }
  text += "#\n# bubbles (medians over the timed steps)\n";
  std::string stage_head;
  for (int s = 0; s < p; ++s) stage_head += fmt::format(" {:>6}", fmt::format("s{}", s));
  text += fmt::format("  {:<15} {:>3} {:>8} {:>9} {:>8}{} {:>8} {:>8} {:>8} {:>8} {:>7}\n",
                      "schedule", "M", "step ms", "makespan", "measured", stage_head, "sim",
                      "sim-step", "theory", "delay ms", "m/theo");
  for (const CaseResult& r : results) {
    std::string stages;
    for (double b : r.median.stage_bubbles) stages += fmt::format(" {:>6.3f}", b);
    text += fmt::format(
        "  {:<15} {:>3} {:>8.1f} {:>9.1f} {:>8.4f}{} {:>8.4f} {:>8.4f} {:>8.4f} {:>8.3f} "
        "{:>7.2f}\n",
        r.schedule.name, r.micro_batches, r.median.wall_ms, r.median.makespan_ms, r.median.bubble,
        stages, r.simulated, r.median.simulated_in_step, r.theory, r.median.exposed_delay_ms,
        r.theory > 0 ? r.median.bubble / r.theory : 0.0);
  }
  text +=
      "#\n# the issue's ratios (measured / simulated with costs alone / simulated in-step / "
      "theory)\n";
  nlohmann::json ratios = nlohmann::json::array();
  for (int m : options.micro_batches) {
    const CaseResult* one = Find(results, ScheduleKind::kOneFOneB, m);
    if (one == nullptr) continue;
    const auto line = [&](const CaseResult* other, const std::string& what, double target,
                          const std::string& target_text) {
      if (other == nullptr || one->median.bubble <= 0) return;
      const double measured = other->median.bubble / one->median.bubble;
      const double sim = other->simulated / one->simulated;
      const double sim_step = other->median.simulated_in_step / one->median.simulated_in_step;
      const double theory = other->theory / one->theory;
      text += fmt::format("  M={} {:<26} {:>6.3f} {:>6.3f} {:>6.3f} {:>6.3f}   target {}\n", m,
                          what, measured, sim, sim_step, theory, target_text);
      ratios.push_back({{"micro_batches", m},
                        {"ratio", what},
                        {"measured", measured},
                        {"simulated", sim},
                        {"simulated_in_step", sim_step},
                        {"theory", theory},
                        {"target", target}});
    };
    text +=
        fmt::format("  M={} {:<26} {:>6.3f} {:>6.3f} {:>6.3f} {:>6.3f}   target 0.9-1.1\n", m,
                    "1f1b / (P-1)/(M+P-1)", one->median.bubble / one->theory,
                    one->simulated / one->theory, one->median.simulated_in_step / one->theory, 1.0);
    ratios.push_back({{"micro_batches", m},
                      {"ratio", "1f1b / theory"},
                      {"measured", one->median.bubble / one->theory},
                      {"simulated", one->simulated / one->theory},
                      {"simulated_in_step", one->median.simulated_in_step / one->theory},
                      {"theory", 1.0},
                      {"target", 1.0}});
    line(Find(results, ScheduleKind::kInterleaved1F1B, m),
         fmt::format("interleaved v={} / 1f1b", options.chunks), 1.0 / options.chunks,
         fmt::format("about 1/v = {:.3f}", 1.0 / options.chunks));
    line(Find(results, ScheduleKind::kZeroBubbleH1, m), "zb-h1 / 1f1b", 0.5, "<= 0.5");
  }

  nlohmann::json cost_record = nlohmann::json::object();
  for (const auto& [v, by_stage] : costs) {
    nlohmann::json stages = nlohmann::json::array();
    for (const StageCosts& c : by_stage) stages.push_back(CostsJson(c));
    cost_record[fmt::format("v{}", v)] = stages;
  }
  nlohmann::json rows = nlohmann::json::array();
  for (const CaseResult& r : results) {
    nlohmann::json in_step = nlohmann::json::array();
    for (const StageCosts& c : r.median.in_step_costs) in_step.push_back(CostsJson(c));
    nlohmann::json per_step = nlohmann::json::array();
    for (const StepFigures& f : r.steps) {
      per_step.push_back({{"wall_ms", f.wall_ms},
                          {"makespan_ms", f.makespan_ms},
                          {"bubble", f.bubble},
                          {"stage_bubbles", f.stage_bubbles},
                          {"simulated_in_step", f.simulated_in_step},
                          {"exposed_delay_ms", f.exposed_delay_ms}});
    }
    rows.push_back({{"schedule", r.schedule.name},
                    {"kind", std::string(parallel::ScheduleKindName(r.schedule.kind))},
                    {"chunks", r.schedule.chunks},
                    {"micro_batches", r.micro_batches},
                    {"step_wall_ms", r.median.wall_ms},
                    {"makespan_ms", r.median.makespan_ms},
                    {"bubble_measured", r.median.bubble},
                    {"stage_bubbles_measured", r.median.stage_bubbles},
                    {"bubble_simulated", r.simulated},
                    {"makespan_simulated_ms", r.simulated_makespan},
                    {"bubble_simulated_in_step", r.median.simulated_in_step},
                    {"bubble_theory", r.theory},
                    {"exposed_delay_ms", r.median.exposed_delay_ms},
                    {"in_step_costs", in_step},
                    {"steps", per_step}});
  }
  nlohmann::json machine = MachineJson();
  machine["load_average_1m_at_end"] = LoadAverage();
  const nlohmann::json record = {{"benchmark", "pipeline"},
                                 {"schema_version", 1},
                                 {"date", UtcTimestamp()},
                                 {"machine", machine},
                                 {"settings",
                                  {{"ranks", p},
                                   {"layers", options.layers},
                                   {"d_model", options.d_model},
                                   {"heads", options.heads},
                                   {"d_ff", options.d_ff},
                                   {"vocab", options.vocab},
                                   {"seq", options.seq},
                                   {"batch", options.batch},
                                   {"micro_batches", options.micro_batches},
                                   {"schedules", options.schedules},
                                   {"chunks", options.chunks},
                                   {"steps", options.steps},
                                   {"warmup", options.warmup},
                                   {"cost_reps", options.cost_reps},
                                   {"latency_reps", options.latency_reps},
                                   {"threads_per_rank", 1}}},
                                 {"costs_alone", cost_record},
                                 {"p2p_latency_ms", latency},
                                 {"results", rows},
                                 {"ratios", ratios}};
  return PrintTableAndWriteRecord(text, record, options.json_path);
}

}  // namespace sluice::bench
