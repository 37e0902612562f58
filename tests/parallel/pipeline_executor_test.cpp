// The pipeline executor on real ranks (mpirun -np 1, 2, 4: one pipeline stage per rank): GPT-2
// (untied head) and Llama (grouped-query attention) split into one or two layers per virtual
// stage, run by GPipe, 1F1B, interleaved 1F1B (v = 2) and ZB-H1 over 4 and 8 micro-batches for
// two steps. Every stage's loss and every parameter gradient of its chunks equal a whole model's
// ForwardBackward over the same micro-batches, bit for bit: each stage runs the same ops on the
// same values, the hidden states cross ranks unchanged, and each chunk accumulates its gradients
// over the micro-batches in the order its backwards run, which the reference follows (the same
// order on every stage for these schedules, checked below). ZB-H1 splits each backward into
// backward-input and backward-weight: both run in micro-batch order on every stage, so each
// parameter's gradient is still summed over the micro-batches in that order (the Linears' dW in
// the backward-weights, the rest in the backward-inputs) and equals the fused sum bit for bit.
// The mean loss is the same sum in micro-batch order on both sides. The stage's peak of
// micro-batches in flight is GPipe's M, and min(P - r, M) for 1F1B and ZB-H1 (at most P).
//
// Also: the host enqueues a step without waiting for a stream before its tail; chunks out of
// order are refused, and ZB-H1 over hooks that take no split backward; and a stage that never
// comes makes its neighbour's step fail within the communicator's timeout, naming the instruction
// and the stage.
#include "engine/parallel/pipeline_executor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "engine/model/model.h"
#include "engine/parallel/process_groups.h"
#include "engine/zero/comm_queue.h"
#include "runtime/trace.h"
#include "tests/common/test_ops.h"
#include "tests/common/test_world.h"
#include "tests/model/model_stage_util.h"
#include "tests/model/model_test_util.h"

namespace sluice::parallel {
namespace {

using model::Family;
using model::HostAllocator;
using model::Model;
using model::ModelOptions;
using model::ModelStage;
using model::testing::ChunksOf;
using model::testing::kStageBatch;
using model::testing::MakeMicroBatches;
using model::testing::MicroBatchData;
using model::testing::Randomize;
using model::testing::RandomTokens;
using model::testing::SmallOptions;
using model::testing::StageOf;
using sluice::testing::TestWorld;

Device& TestDevice() { return sluice::testing::OpsFor<float>().device(); }

// The pipeline group of a world that is one pipeline (data = tensor = 1), made once.
ProcessGroups& Groups() {
  static std::unique_ptr<ProcessGroups> groups = [] {
    Comm& world = TestWorld();
    Result<ProcessGrid> grid = ProcessGrid::Create(world.size(), 1, world.size());
    SLUICE_CHECK(grid.ok()) << grid.status().ToString();
    auto made = ProcessGroups::Create(world, *grid);
    SLUICE_CHECK(made.ok()) << made.status().ToString();
    return std::move(made).value();
  }();
  return *groups;
}

// A comm queue of its own over the pipeline group (collective).
std::unique_ptr<zero::CommQueue> PipelineQueue() {
  Comm& pipeline = Groups().pipeline();
  auto comm = pipeline.Split(0, pipeline.rank());
  SLUICE_CHECK(comm.ok()) << comm.status().ToString();
  auto queue = zero::CommQueue::Create(TestDevice(), std::move(comm).value(), /*overlap=*/true);
  SLUICE_CHECK(queue.ok()) << queue.status().ToString();
  return std::move(queue).value();
}

// The micro-batches in the order stage `stage`'s chunk `chunk` runs their backwards (or
// backward-inputs, or with `op`, backward-weights).
std::vector<int> BackwardOrder(const PipelineSchedule& schedule, int stage, int chunk,
                               PipeOp op = PipeOp::kBackward) {
  std::vector<int> order;
  for (const PipeInstruction& in : schedule.stage_instructions[stage]) {
    const bool match = op == PipeOp::kBackwardWeight ? in.op == op : IsInputBackward(in.op);
    if (match && in.chunk == chunk) order.push_back(in.micro);
  }
  return order;
}

struct Case {
  std::string name;
  Family family = Family::kGpt2;
  ScheduleKind kind = ScheduleKind::kOneFOneB;
  int micro_batches = 4;
  int chunks = 1;
  // The stage's chunks in one Model (Model::CreateChunks) instead of a Model each.
  bool one_model = false;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class PipelineExecutorTest : public ::testing::TestWithParam<Case> {};

TEST_P(PipelineExecutorTest, LossAndGradientsEqualTheWholeModel) {
  const Case& c = GetParam();
  const int stages = TestWorld().size();
  const int stage = Groups().pipeline().rank();
  // One layer per virtual stage with two chunks, two with one; one thread per rank, since the
  // ranks share the machine's cores.
  ModelOptions options = SmallOptions(c.family, 2 * stages, /*num_threads=*/1);
  options.tie_embeddings = false;  // a tied head cannot be split from the embeddings
  HostAllocator host;
  auto created = Model<float>::Create(options, host, sluice::testing::OpsFor<float>());
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  const std::unique_ptr<Model<float>> whole = std::move(created).value();
  Randomize(*whole, 17);

  Result<PipelineSchedule> schedule =
      MakePipelineSchedule(c.kind, stages, c.micro_batches, c.chunks);
  ASSERT_TRUE(schedule.ok()) << schedule.status().ToString();
  const std::vector<int> order = BackwardOrder(*schedule, 0, 0);
  ASSERT_EQ(order.size(), static_cast<size_t>(c.micro_batches));
  for (int r = 0; r < stages; ++r) {
    for (int chunk = 0; chunk < c.chunks; ++chunk) {
      ASSERT_EQ(BackwardOrder(*schedule, r, chunk), order) << "stage " << r << " chunk " << chunk;
      if (c.kind == ScheduleKind::kZeroBubbleH1) {
        // The weight gradients too: each Linear's dW is summed in the same order.
        ASSERT_EQ(BackwardOrder(*schedule, r, chunk, PipeOp::kBackwardWeight), order)
            << "stage " << r << " chunk " << chunk;
      }
    }
  }

  // This stage's chunks: virtual stage k = chunk * P + stage holds layers
  // [k * L / V, (k + 1) * L / V).
  const int64_t layers_per_virtual = options.n_layer / schedule->virtual_stages();
  std::vector<ModelStage> ranges;
  for (int chunk = 0; chunk < c.chunks; ++chunk) {
    const int64_t k = schedule->VirtualStage(stage, chunk);
    ranges.push_back({k * layers_per_virtual, (k + 1) * layers_per_virtual});
  }
  std::vector<std::unique_ptr<Model<float>>> chunks;  // the models holding them
  std::vector<model::ModelChunk<float>*> chunk_ptrs;
  if (c.one_model) {
    chunks.push_back(ChunksOf(*whole, ranges, host));
    for (int chunk = 0; chunk < c.chunks; ++chunk) chunk_ptrs.push_back(&chunks[0]->chunk(chunk));
  } else {
    for (const ModelStage& range : ranges) {
      chunks.push_back(StageOf(*whole, range, host));
      chunk_ptrs.push_back(&chunks.back()->chunk(0));
    }
  }
  const std::unique_ptr<zero::CommQueue> queue = PipelineQueue();
  auto made = PipelineExecutor<float>::Create(*schedule, chunk_ptrs, *queue,
                                              {.batch = kStageBatch, .seq = options.seq_len});
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  PipelineExecutor<float>& executor = **made;
  const int last_virtual = schedule->virtual_stages() - 1;

  const double loss_grad = 1.0 / c.micro_batches;
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    const std::vector<MicroBatchData> data =
        MakeMicroBatches(options, c.micro_batches, 40 + 100 * step);
    std::vector<double> expected_losses(c.micro_batches);
    whole->ZeroGrads();
    for (int m : order) {
      auto loss = whole->ForwardBackward(data[m].tokens.data(), data[m].targets.data(), kStageBatch,
                                         options.seq_len, loss_grad);
      ASSERT_TRUE(loss.ok()) << loss.status().ToString();
      expected_losses[m] = *loss;
    }
    double expected_mean = 0;
    for (double loss : expected_losses) expected_mean += loss;
    expected_mean /= c.micro_batches;

    for (auto& chunk : chunks) chunk->ZeroGrads();
    std::vector<std::string> calls;
    std::vector<std::pair<int, int>> loads;
    PipelineStepHooks hooks;
    hooks.load = [&](int micro, int chunk) -> Result<PipelineMicroBatch> {
      loads.emplace_back(micro, chunk);
      const int k = schedule->VirtualStage(stage, chunk);
      PipelineMicroBatch batch;
      if (k == 0) batch.tokens = data[micro].tokens.data();
      if (k == last_virtual) batch.targets = data[micro].targets.data();
      return batch;
    };
    hooks.reduce_tied_grads = [&] {
      calls.push_back("tied");
      return OkStatus();
    };
    hooks.reduce_grads = [&] {
      calls.push_back("reduce");
      return OkStatus();
    };
    hooks.optimizer_step = [&] {
      calls.push_back("step");
      return OkStatus();
    };
    Result<PipelineStepResult> result = executor.RunStep(hooks);
    ASSERT_TRUE(result.ok()) << result.status().ToString();

    EXPECT_EQ(result->loss, expected_mean);
    EXPECT_EQ(calls, (std::vector<std::string>{"tied", "reduce", "step"}));
    // Micro-batches holding their activations at once (the model's own count, after each
    // compute): GPipe all, 1F1B and ZB-H1 those of their warm-up and one more.
    const int m = c.micro_batches;
    if (c.kind == ScheduleKind::kGPipe) {
      EXPECT_EQ(result->peak_in_flight, m);
    } else if (c.kind != ScheduleKind::kInterleaved1F1B) {
      EXPECT_EQ(result->peak_in_flight, std::min(stages - stage, m));
      EXPECT_LE(result->peak_in_flight, stages);
    }
    if (c.kind == ScheduleKind::kZeroBubbleH1) {
      // Stage r defers its first W until r forward / backward-input pairs are done: r + 1
      // micro-batches wait for their W at the peak (parallelism-study.md §5.9).
      EXPECT_EQ(result->peak_awaiting_weight, std::min(stage + 1, m));
    } else {
      EXPECT_EQ(result->peak_awaiting_weight, 0);
    }
    if (step == 0) {  // the activation bytes at the peak, for the record (--gtest_output=xml)
      int64_t bytes = 0;
      for (const auto& chunk : chunks) bytes += chunk->last_peak_activation_bytes();
      RecordProperty("stage" + std::to_string(stage) + "_peak_activation_bytes",
                     std::to_string(bytes));
    }
    const bool holds_first = stage == 0;
    const bool holds_last = schedule->StageOf(last_virtual) == stage;
    // One load per micro-batch for each of the first and last virtual stages held here (one if
    // they are the same).
    const int loading = last_virtual == 0 ? 1 : holds_first + holds_last;
    EXPECT_EQ(loads.size(), static_cast<size_t>(loading * c.micro_batches));
    if (holds_last) {
      ASSERT_EQ(result->micro_losses.size(), static_cast<size_t>(c.micro_batches));
      for (int m = 0; m < c.micro_batches; ++m) {
        EXPECT_EQ(result->micro_losses.at(m), expected_losses[m]) << "micro-batch " << m;
      }
    } else {
      EXPECT_TRUE(result->micro_losses.empty());
    }
    for (const auto& chunk : chunks) {
      const model::ParameterRegistry& registry = chunk->registry();
      for (int p = 0; p < static_cast<int>(registry.parameters().size()); ++p) {
        const model::ParameterInfo& info = registry.parameter(p);
        if (info.is_alias()) continue;
        const model::ParameterInfo& expected =
            whole->registry().parameter(*whole->registry().Find(info.name));
        EXPECT_EQ(
            std::memcmp(chunk->grads_data() + info.offset, whole->grads_data() + expected.offset,
                        static_cast<size_t>(info.numel) * sizeof(float)),
            0)
            << info.name << " on stage " << stage;
      }
    }
  }
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (Family family : {Family::kGpt2, Family::kLlama}) {
    const std::string f = family == Family::kGpt2 ? "gpt2" : "llama";
    for (int m : {4, 8}) {
      const std::string suffix = "_m" + std::to_string(m);
      cases.push_back({f + "_gpipe" + suffix, family, ScheduleKind::kGPipe, m, 1});
      cases.push_back({f + "_1f1b" + suffix, family, ScheduleKind::kOneFOneB, m, 1});
      cases.push_back(
          {f + "_interleaved_v2" + suffix, family, ScheduleKind::kInterleaved1F1B, m, 2});
      cases.push_back({f + "_interleaved_v2_one_model" + suffix, family,
                       ScheduleKind::kInterleaved1F1B, m, 2, /*one_model=*/true});
      cases.push_back({f + "_zb_h1" + suffix, family, ScheduleKind::kZeroBubbleH1, m, 1});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Schedules, PipelineExecutorTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name;
                         });

// Host times of the first and the last unit hook a stage's passes run: the first forward's and
// the last backward's (or backward-weight's), as the host enqueues them.
class HookClock final : public model::UnitHooks {
 public:
  bool SupportsSplitBackward() const override { return true; }
  Status BeforeForward(int) override {
    if (first_ns == 0) first_ns = TraceClockNs();
    return OkStatus();
  }
  Status AfterBackward(int) override {
    last_ns = TraceClockNs();
    return OkStatus();
  }
  Status AfterBackwardWeight(int) override {
    last_ns = TraceClockNs();
    return OkStatus();
  }
  int64_t first_ns = 0;
  int64_t last_ns = 0;
};

class PipelineExecutorStreams : public ::testing::TestWithParam<ScheduleKind> {};

// The host enqueues a whole 1F1B (or ZB-H1) step, receives included, without waiting for a
// stream (the trace lane host_wait records every Stream/Event/Device::Synchronize of a host
// thread): its waits come after the last backward is enqueued, at the tail, and there are some
// (the sends, the passes' ends, the loss).
TEST_P(PipelineExecutorStreams, TheHostWaitsOnlyAtTheTail) {
  const int stages = TestWorld().size();
  const int stage = Groups().pipeline().rank();
  ModelOptions options = SmallOptions(Family::kGpt2, stages, /*num_threads=*/1);
  options.tie_embeddings = false;
  HostAllocator host;
  auto created = Model<float>::Create(options, host, sluice::testing::OpsFor<float>());
  ASSERT_TRUE(created.ok());
  Randomize(**created, 7);
  std::unique_ptr<Model<float>> mine = StageOf(**created, {stage, stage + 1}, host);
  HookClock clock;
  mine->SetHooks(&clock);
  Result<PipelineSchedule> schedule = MakePipelineSchedule(GetParam(), stages, 4);
  ASSERT_TRUE(schedule.ok());
  const std::unique_ptr<zero::CommQueue> queue = PipelineQueue();
  auto made = PipelineExecutor<float>::Create(*schedule, {&mine->chunk(0)}, *queue,
                                              {.batch = kStageBatch, .seq = options.seq_len});
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  const std::vector<MicroBatchData> data = MakeMicroBatches(options, 4, 70);
  PipelineStepHooks hooks;
  hooks.load = [&](int micro, int) -> Result<PipelineMicroBatch> {
    PipelineMicroBatch batch;
    if (stage == 0) batch.tokens = data[micro].tokens.data();
    if (stage == stages - 1) batch.targets = data[micro].targets.data();
    return batch;
  };
  TraceRecorder& recorder = TraceRecorder::Global();
  recorder.Clear();
  recorder.Enable();
  Result<PipelineStepResult> step = (*made)->RunStep(hooks);
  recorder.Disable();
  ASSERT_TRUE(step.ok()) << step.status().ToString();
  ASSERT_GT(clock.last_ns, clock.first_ns);
  int waits = 0;
  for (const TraceEvent& e : recorder.Snapshot()) {
    if (e.lane != kTraceLaneHostWait) continue;
    ++waits;
    EXPECT_FALSE(e.start_ns > clock.first_ns && e.start_ns < clock.last_ns)
        << "stage " << stage << ": the host waited (" << e.name << ") "
        << (e.start_ns - clock.first_ns) / 1000 << " us into the step, before it enqueued the "
        << "last backward";
  }
  EXPECT_GT(waits, 0) << "the tail's waits must show in the trace";
  recorder.Clear();
  mine->SetHooks(nullptr);
}

INSTANTIATE_TEST_SUITE_P(Schedules, PipelineExecutorStreams,
                         ::testing::Values(ScheduleKind::kOneFOneB, ScheduleKind::kZeroBubbleH1),
                         [](const ::testing::TestParamInfo<ScheduleKind>& info) {
                           return info.param == ScheduleKind::kOneFOneB ? "one_f_one_b" : "zb_h1";
                         });

// Hooks that take a unit's gradients as final after its backward (ZeRO's) cannot run ZB-H1: the
// step fails at the first backward-input, naming it. Each rank alone, a one-stage pipeline, so
// that no neighbour waits for the failed stage.
TEST(PipelineExecutorRefusals, ZeroBubbleOverHooksWithoutSplitBackward) {
  Comm& pipeline = Groups().pipeline();
  auto alone = pipeline.Split(pipeline.rank(), 0);
  ASSERT_TRUE(alone.ok()) << alone.status().ToString();
  auto made_queue = zero::CommQueue::Create(TestDevice(), std::move(alone).value(), true);
  ASSERT_TRUE(made_queue.ok());
  ModelOptions options = SmallOptions(Family::kGpt2, 1, /*num_threads=*/1);
  options.tie_embeddings = false;
  HostAllocator host;
  auto created = Model<float>::Create(options, host, sluice::testing::OpsFor<float>());
  ASSERT_TRUE(created.ok());
  Model<float>& model = **created;
  model::UnitHooks fused_only;  // the defaults: no split backward
  model.SetHooks(&fused_only);
  Result<PipelineSchedule> zb = MakePipelineSchedule(ScheduleKind::kZeroBubbleH1, 1, 2);
  ASSERT_TRUE(zb.ok());
  auto made = PipelineExecutor<float>::Create(*zb, {&model.chunk(0)}, **made_queue,
                                              {.batch = kStageBatch, .seq = options.seq_len});
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  const std::vector<MicroBatchData> data = MakeMicroBatches(options, 2, 11);
  PipelineStepHooks hooks;
  hooks.load = [&](int micro, int) -> Result<PipelineMicroBatch> {
    return PipelineMicroBatch{.tokens = data[micro].tokens.data(),
                              .targets = data[micro].targets.data()};
  };
  Result<PipelineStepResult> step = (*made)->RunStep(hooks);
  ASSERT_FALSE(step.ok());
  EXPECT_EQ(step.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(step.status().message().find("backward-input of micro-batch 0, chunk 0"),
            std::string::npos)
      << step.status().ToString();
  EXPECT_NE(step.status().message().find("SupportsSplitBackward"), std::string::npos)
      << step.status().ToString();
  model.SetHooks(nullptr);
}

// Two chunks of a 4-virtual-stage model per stage, built the way the executor expects them.
struct TwoChunks {
  explicit TwoChunks(int stages) {
    options = SmallOptions(Family::kLlama, 2 * stages, /*num_threads=*/1);
    options.tie_embeddings = false;
    auto created = Model<float>::Create(options, host, sluice::testing::OpsFor<float>());
    SLUICE_CHECK(created.ok());
    whole = std::move(created).value();
    const int stage = Groups().pipeline().rank();
    for (int chunk = 0; chunk < 2; ++chunk) {
      const int64_t k = chunk * stages + stage;
      chunks.push_back(StageOf(*whole, {k, k + 1}, host));
    }
  }
  ModelOptions options;
  HostAllocator host;
  std::unique_ptr<Model<float>> whole;
  std::vector<std::unique_ptr<Model<float>>> chunks;
};

TEST(PipelineExecutorRefusals, ChunksOutOfOrder) {
  const int stages = TestWorld().size();
  const std::unique_ptr<zero::CommQueue> queue = PipelineQueue();
  TwoChunks t(stages);

  // Interleaved, the chunks swapped: each is another virtual stage than its place says.
  Result<PipelineSchedule> interleaved =
      MakePipelineSchedule(ScheduleKind::kInterleaved1F1B, stages, 2 * stages, 2);
  ASSERT_TRUE(interleaved.ok());
  auto swapped = PipelineExecutor<float>::Create(
      *interleaved, {&t.chunks[1]->chunk(0), &t.chunks[0]->chunk(0)}, *queue,
      {.batch = kStageBatch, .seq = t.options.seq_len});
  ASSERT_FALSE(swapped.ok());
  EXPECT_EQ(swapped.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(swapped.status().message().find("pass each stage's chunks in chunk order"),
            std::string::npos)
      << swapped.status().ToString();
  // A sequence longer than the model's.
  auto too_long = PipelineExecutor<float>::Create(
      *interleaved, {&t.chunks[0]->chunk(0), &t.chunks[1]->chunk(0)}, *queue,
      {.batch = kStageBatch, .seq = t.options.seq_len + 1});
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("model.seq_len"), std::string::npos);
}

// World ranks 0 and 1 form a 2-stage pipeline; stage 1 never runs its step. Stage 0 forwards
// micro-batch 0, sends it, and waits for its gradient: after the 1 s timeout its step fails
// naming the receive and stage 1, and later steps are refused. Stage 1 then takes the activation
// stage 0 left posted, so that stage 0's communicator drains and everything is freed cleanly.
TEST(PipelineExecutorFailure, AStageThatNeverComesIsNamed) {
  Comm& world = TestWorld();
  if (world.size() < 2) GTEST_SKIP() << "needs two ranks";
  const int rank = world.rank();
  auto split = world.Split(rank < 2 ? 0 : -1, rank);
  ASSERT_TRUE(split.ok()) << split.status().ToString();
  std::unique_ptr<Comm> pair = std::move(split).value();
  ModelOptions options = SmallOptions(Family::kGpt2, 2, /*num_threads=*/1);
  options.tie_embeddings = false;
  HostAllocator host;
  std::unique_ptr<Model<float>> whole;
  std::unique_ptr<Model<float>> mine;
  std::unique_ptr<zero::CommQueue> queue;
  std::unique_ptr<PipelineExecutor<float>> executor;
  const std::vector<MicroBatchData> data = MakeMicroBatches(options, 1, 5);
  const size_t hidden = static_cast<size_t>(kStageBatch * options.seq_len * options.d_model);
  if (pair != nullptr) {
    pair->SetTimeout(1.0);
    auto created = Model<float>::Create(options, host, sluice::testing::OpsFor<float>());
    ASSERT_TRUE(created.ok());
    whole = std::move(created).value();
    Randomize(*whole, 3);
    mine = StageOf(*whole, {rank, rank + 1}, host);
    auto made_queue = zero::CommQueue::Create(TestDevice(), std::move(pair), true);
    ASSERT_TRUE(made_queue.ok());
    queue = std::move(made_queue).value();
    Result<PipelineSchedule> schedule = MakePipelineSchedule(ScheduleKind::kGPipe, 2, 1);
    ASSERT_TRUE(schedule.ok());
    auto made = PipelineExecutor<float>::Create(*schedule, {&mine->chunk(0)}, *queue,
                                                {.batch = kStageBatch, .seq = options.seq_len});
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    executor = std::move(made).value();
  }
  if (rank == 0) {
    PipelineStepHooks hooks;
    hooks.load = [&](int micro, int) -> Result<PipelineMicroBatch> {
      return PipelineMicroBatch{.tokens = data[micro].tokens.data()};
    };
    Result<PipelineStepResult> step = executor->RunStep(hooks);
    ASSERT_FALSE(step.ok());
    EXPECT_EQ(step.status().code(), StatusCode::kDeadlineExceeded) << step.status().ToString();
    EXPECT_NE(step.status().message().find(
                  "pipeline stage 0 of 2: recv-grad of micro-batch 0, chunk 0 from stage 1"),
              std::string::npos)
        << step.status().ToString();
    Result<PipelineStepResult> again = executor->RunStep(hooks);
    ASSERT_FALSE(again.ok());
    EXPECT_EQ(again.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(again.status().message().find("an earlier step failed"), std::string::npos)
        << again.status().ToString();
  }
  // The clean-up below is not what is tested: give it the tests' usual time.
  if (queue != nullptr) queue->comm().SetTimeout(sluice::testing::kTestTimeoutSeconds);
  ASSERT_TRUE(world.Barrier().ok());
  if (rank == 1) {
    // Stage 0's activation: its send was given up and left posted (its timed-out receive was
    // cancelled).
    std::vector<float> buffer(hidden, 0.0f);
    EXPECT_TRUE(queue->comm()
                    .Recv(buffer.data(), hidden, DType::kF32, 0,
                          TransferTag(TransferKind::kActivation, 0, 0, 1))
                    .ok());
  }
  if (rank == 0) {
    const Status drained = queue->comm().Drain();
    EXPECT_TRUE(drained.ok()) << drained.ToString();
  }
  ASSERT_TRUE(world.Barrier().ok());
  executor.reset();
  queue.reset();
}

}  // namespace
}  // namespace sluice::parallel
