// Tensor parallelism through the trainer (engine/parallel/tensor_plan.h under the ZeRO engine),
// under mpirun -np 2, 4 and 8: every data x tensor grid the world holds, GPT-2 and Llama with
// grouped-query attention (key/value heads split, and shared by groups of ranks when there are
// fewer than ranks), ZeRO stages 0 and 3, the optimizer on the device and offloaded to the
// CPU, 20 steps each against the single-rank run of the same global batches (built by each rank
// on a world of its own, as trainer_mpi_test does). None of these is bitwise: a row-parallel
// projection adds its tensor ranks' partial products in another order than the whole GEMM, and
// Adam carries the last bits on; all stay within 1e-6 relative.
//
// Checkpoints hold global slices (engine/parallel/global_runs.h): a run saved on one grid resumes
// on another and goes on as the single-rank run does.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/train/trainer.h"
#include "runtime/check.h"
#include "runtime/trace.h"
#include "tests/common/test_world.h"
#include "tests/train/train_test_util.h"

namespace sluice::train {
namespace {

using ::sluice::testing::TestWorld;
using Curve = test_util::TrainedCurve;

constexpr double kTolerance = 1e-6;
// The gradient norm adds its squares per tensor piece, stage and data shard, in another order than
// the single rank, from gradients whose last bits differ: it wanders further than the losses
// (up to 1.2e-6 seen over these 20 steps).
constexpr double kNormTolerance = 1e-5;
constexpr int kSteps = 20;
// The global batch: sequences per optimizer step on every grid.
constexpr int kGlobalBatch = 8;

struct Grid {
  int tensor = 1;
  int data() const { return TestWorld().size() / tensor; }
  std::string ToString() const {
    return "tp " + std::to_string(tensor) + " x dp " + std::to_string(data());
  }
};

// The grids of this world with 2 or 4 tensor ranks (the tiny model's 4 heads split 4 ways at
// most).
std::vector<Grid> TensorGrids() {
  std::vector<Grid> grids;
  for (int tensor = 2; tensor <= std::min(4, TestWorld().size()); tensor *= 2) {
    grids.push_back({tensor});
  }
  return grids;
}

// One corpus for every rank (a checkpoint records the training data's path and fingerprint),
// written by rank 0 as the first test starts.
const std::string& Corpus() {
  static const std::string path = [] {
    const std::string file = ::testing::TempDir() + "sluice_tensor_parallel_train_corpus.txt";
    if (TestWorld().rank() == 0) {
      test_util::WriteFile(file, test_util::SyntheticCorpus(64 * 1024));
    }
    SLUICE_CHECK(TestWorld().Barrier().ok());
    return file;
  }();
  return path;
}

// The tiny GPT of train_test_util.h with four heads, so that it splits four ways; llama: grouped
// key/value heads where the tensor size allows (two shared by four query heads), else four.
std::vector<std::string> ModelOverrides(const std::string& family, int tensor) {
  std::vector<std::string> sets = {"model.n_head=4"};
  if (family == "llama") {
    sets.push_back("model.family=llama");
    sets.push_back(std::string("model.n_kv_head=") + (tensor <= 2 ? "2" : "4"));
  }
  return sets;
}

// train_test_util.h's LoadTestConfig for a world of `world_size` ranks.
Config LoadConfig(const std::string& yaml, const std::vector<std::string>& overrides,
                  int world_size) {
  ConfigSources sources;
  sources.env.emplace();
  sources.set_overrides = overrides;
  sources.world_size = world_size;
  Result<Config> config = LoadConfigFromText(yaml, ConfigFormat::kYaml, sources);
  SLUICE_CHECK(config.ok()) << config.status().ToString();
  return std::move(config).value();
}

// Llama with 8 query heads and `kv` key/value heads, fewer than the tensor ranks it is shared over
// (tensor_layout.h): 2 at tp 4, 1 at tp 2 (a rank holds 2 or 4 query heads and one key/value
// head; head_dim 4).
std::vector<std::string> SharedKvOverrides(int kv) {
  return {"model.n_head=8", "model.family=llama", "model.n_kv_head=" + std::to_string(kv)};
}

// The config of `grid` for the model of `model_sets` (micro-batches sized for the global batch)
// plus `more` (--set items).
Config GridConfigOf(const Grid& grid, const std::vector<std::string>& model_sets,
                    const std::string& run_dir, std::vector<std::string> more = {},
                    int accumulation = 1) {
  const int data = grid.data();
  const std::string& corpus = Corpus();
  std::vector<std::string> sets = model_sets;
  sets.push_back("train_micro_batch_size_per_gpu=" +
                 std::to_string(kGlobalBatch / data / accumulation));
  sets.push_back("gradient_accumulation_steps=" + std::to_string(accumulation));
  sets.push_back("tensor_parallel.autotp_size=" + std::to_string(grid.tensor));
  // Several buckets and gathers per pass, persistent norms and biases at stage 3.
  for (const char* s :
       {"zero_optimization.reduce_bucket_size=5000", "zero_optimization.allgather_bucket_size=8000",
        "zero_optimization.stage3_prefetch_bucket_size=6000",
        "zero_optimization.stage3_param_persistence_threshold=64"}) {
    sets.push_back(s);
  }
  sets.insert(sets.end(), more.begin(), more.end());
  return LoadConfig(test_util::TinyGptYaml(corpus, run_dir), sets, TestWorld().size());
}

Config GridConfig(const Grid& grid, const std::string& family, const std::string& run_dir,
                  std::vector<std::string> more = {}, int accumulation = 1) {
  return GridConfigOf(grid, ModelOverrides(family, grid.tensor), run_dir, std::move(more),
                      accumulation);
}

std::unique_ptr<Trainer> MakeTrainer(const Config& config, Comm& world,
                                     std::optional<std::string> resume = std::nullopt) {
  TrainerOptions options = test_util::QuietTrainerOptions(&world);
  options.resume = std::move(resume);
  Result<std::unique_ptr<Trainer>> trainer = Trainer::Create(config, options);
  SLUICE_CHECK(trainer.ok()) << trainer.status().ToString();
  return std::move(trainer).value();
}

// The single-rank tensor-parallel-free run of the model of `model_sets` (stage 0, the optimizer
// on the device), on this rank alone; once per model.
const Curve& ReferenceOf(const std::vector<std::string>& model_sets,
                         const std::vector<std::string>& more = {}) {
  static std::map<std::vector<std::string>, Curve> curves;
  std::vector<std::string> key = model_sets;
  key.insert(key.end(), more.begin(), more.end());
  auto it = curves.find(key);
  if (it != curves.end()) return it->second;
  Result<std::unique_ptr<Comm>> self = TestWorld().Split(TestWorld().rank(), 0);
  SLUICE_CHECK(self.ok()) << self.status().ToString();
  std::vector<std::string> sets = key;
  sets.push_back("train_micro_batch_size_per_gpu=" + std::to_string(kGlobalBatch));
  const std::string& corpus = Corpus();
  const Config config = LoadConfig(
      test_util::TinyGptYaml(
          corpus, test_util::TempPath("reference_rank" + std::to_string(TestWorld().rank()))),
      sets, 1);
  std::unique_ptr<Trainer> trainer = MakeTrainer(config, **self);
  return curves.emplace(key, test_util::TrainCurve(*trainer, kSteps)).first->second;
}

// The same for `family`, with its key/value head count at `tensor` (ModelOverrides).
const Curve& Reference(const std::string& family, int tensor,
                       const std::vector<std::string>& more = {}) {
  return ReferenceOf(ModelOverrides(family, tensor), more);
}

double RelativeDifference(double a, double b) { return std::abs(a - b) / std::abs(b); }

// Each step within `tolerance`; rank 0 prints the largest difference (the figure the docs quote).
void ExpectNear(const std::vector<double>& run, const std::vector<double>& reference, size_t offset,
                const std::string& what, double tolerance = kTolerance) {
  double largest = 0.0;
  for (size_t i = 0; i < run.size(); ++i) {
    const double difference = RelativeDifference(run[i], reference[offset + i]);
    largest = std::max(largest, difference);
    EXPECT_LE(difference, tolerance)
        << what << ", step " << offset + i + 1 << ": " << run[i] << " vs " << reference[offset + i];
  }
  if (TestWorld().rank() == 0) {
    std::printf("%s: largest relative difference %.2e over %zu steps\n", what.c_str(), largest,
                run.size());
  }
}

struct Case {
  std::string family;
  int stage;
  bool offload;
  bool sequence_parallel = false;
  int accumulation = 1;  // gradient_accumulation_steps
};

class TensorParallelTrainTest : public ::testing::TestWithParam<Case> {};

TEST_P(TensorParallelTrainTest, LossesMatchTheSingleRankRun) {
  const Case& c = GetParam();
  for (const Grid& grid : TensorGrids()) {
    std::vector<std::string> sets = {"zero_optimization.stage=" + std::to_string(c.stage)};
    if (c.offload) sets.push_back("zero_optimization.offload_optimizer.device=cpu");
    if (c.sequence_parallel) sets.push_back("tensor_parallel.sequence_parallel=true");
    const Config config =
        GridConfig(grid, c.family, test_util::TempPath("run"), sets, c.accumulation);
    std::unique_ptr<Trainer> trainer = MakeTrainer(config, TestWorld());
    EXPECT_EQ(trainer->model().options().tensor_parallel_size, grid.tensor);
    const Curve run = test_util::TrainCurve(*trainer, kSteps);
    const Curve& reference = Reference(c.family, grid.tensor);
    const std::string what =
        c.family + ", stage " + std::to_string(c.stage) + (c.offload ? ", cpu offload" : "") +
        (c.sequence_parallel ? ", sequence parallel" : "") +
        (c.accumulation > 1 ? ", accumulation " + std::to_string(c.accumulation) : "") + ", " +
        grid.ToString();
    ExpectNear(run.losses, reference.losses, 0, what + " loss");
    ExpectNear(run.grad_norms, reference.grad_norms, 0, what + " gradient norm", kNormTolerance);
    // The evaluation reads data.eval_batches micro-batches: the same rows only when the micro-batch
    // is the reference's.
    if (c.accumulation == 1) {
      EXPECT_LE(RelativeDifference(run.val_loss, reference.val_loss), kTolerance) << what;
    }
    EXPECT_EQ(run.tokens, reference.tokens) << what << ": tokens are the global batch's";
    EXPECT_LT(run.losses.back(), run.losses.front()) << what << ": the tiny model should learn";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Grids, TensorParallelTrainTest,
    ::testing::Values(Case{"gpt2", 0, false}, Case{"gpt2", 3, false}, Case{"gpt2", 3, true},
                      Case{"llama", 0, false}, Case{"llama", 3, false}, Case{"llama", 3, true},
                      // Sequence parallelism: the norms' partial gradients are summed before the
                      // data reduction, once per step at stages 0-1, per micro-batch at 2-3.
                      Case{"gpt2", 0, false, true, 2}, Case{"llama", 1, false, true, 2},
                      Case{"gpt2", 2, true, true, 2}, Case{"llama", 3, false, true, 1}),
    [](const auto& info) {
      const Case& c = info.param;
      return c.family + "_stage" + std::to_string(c.stage) + (c.offload ? "_offload" : "") +
             (c.sequence_parallel ? "_sp" : "") +
             (c.accumulation > 1 ? "_gas" + std::to_string(c.accumulation) : "");
    });

// The 3D grid: tensor 2 x pipeline 2 x the data size the world leaves (np 4: 1, np 8: 2). ZeRO 3
// with the optimizer offloaded to the CPU, with and without sequence parallelism, under 1f1b,
// zb-h1 and interleaved-1f1b (two chunks per stage of a 4-layer model), the GPT-2's head untied;
// and ZeRO 1 and 3 with the head tied across the stages (the last stage's copy of the table, its
// gradient summed with the first stage's).
TEST(TensorParallelGridTest, TensorPipelineDataGridMatchesTheSingleRankRun) {
  if (TestWorld().size() < 4) GTEST_SKIP() << "needs tensor 2 x pipeline 2 ranks";
  const int data = TestWorld().size() / 4;
  struct GridCase {
    std::string what;
    std::vector<std::string> sets;
    bool tied;
    std::vector<std::string> model = {};  // for the reference run too
  };
  const std::vector<std::string> zero3 = {"zero_optimization.stage=3",
                                          "zero_optimization.offload_optimizer.device=cpu"};
  std::vector<GridCase> cases = {
      {"ZeRO 3, cpu offload", zero3, false},
      {"ZeRO 3, cpu offload, sequence parallel", zero3, false},
      {"ZeRO 3, cpu offload, sequence parallel, zb-h1", zero3, false},
      {"ZeRO 1, tied head", {"zero_optimization.stage=1"}, true},
      {"ZeRO 3, tied head", {"zero_optimization.stage=3"}, true},
      {"ZeRO 3, cpu offload, interleaved-1f1b", zero3, false, {"model.n_layer=4"}}};
  cases[5].sets.push_back("pipeline.schedule=interleaved-1f1b");
  for (int i : {1, 2}) cases[i].sets.push_back("tensor_parallel.sequence_parallel=true");
  cases[2].sets.push_back("pipeline.schedule=zb-h1");
  for (const GridCase& c : cases) {
    const std::string tie = std::string("model.tie_embeddings=") + (c.tied ? "true" : "false");
    std::vector<std::string> sets = ModelOverrides("gpt2", 2);
    // Two micro-batches per step through the two stages.
    for (const std::string& set :
         {std::string("tensor_parallel.autotp_size=2"), std::string("pipeline.stages=2"), tie,
          "train_micro_batch_size_per_gpu=" + std::to_string(kGlobalBatch / data / 2),
          std::string("gradient_accumulation_steps=2")}) {
      sets.push_back(set);
    }
    sets.insert(sets.end(), c.sets.begin(), c.sets.end());
    sets.insert(sets.end(), c.model.begin(), c.model.end());
    const Config config = LoadConfig(
        test_util::TinyGptYaml(Corpus(), test_util::TempPath("grid3d")), sets, TestWorld().size());
    std::unique_ptr<Trainer> trainer = MakeTrainer(config, TestWorld());
    const Curve run = test_util::TrainCurve(*trainer, kSteps);
    std::vector<std::string> reference_sets = {tie};
    reference_sets.insert(reference_sets.end(), c.model.begin(), c.model.end());
    const Curve& reference = Reference("gpt2", 2, reference_sets);
    const std::string what = "tp 2 x pp 2 x dp " + std::to_string(data) + ", " + c.what;
    ExpectNear(run.losses, reference.losses, 0, what + " loss");
    ExpectNear(run.grad_norms, reference.grad_norms, 0, what + " gradient norm", kNormTolerance);
  }
}

// Grouped-query attention with fewer key/value heads than tensor ranks: each rank holds its query
// heads and a copy of the one key/value head they use, whose gradient is summed over the ranks
// sharing it before the data-parallel reduction and counted once in the norm. Every grid of this
// world (tp 4 with 2 key/value heads, tp 2 with 1), ZeRO 0 and 3, ZeRO 3 with the optimizer
// offloaded to the CPU, and ZeRO 1 offloaded with sequence parallelism and two micro-batches (the
// norms' partial gradients summed over the tensor group beside the key/value heads' over their
// share groups).
TEST(TensorParallelSharedKvTest, LossesMatchTheSingleRankRun) {
  struct SharedCase {
    std::string what;
    std::vector<std::string> sets;
    int accumulation = 1;
  };
  const std::vector<SharedCase> cases = {
      {"stage 0", {"zero_optimization.stage=0"}},
      {"stage 3", {"zero_optimization.stage=3"}},
      {"stage 3, cpu offload",
       {"zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=cpu"}},
      {"stage 1, cpu offload, sequence parallel, accumulation 2",
       {"zero_optimization.stage=1", "zero_optimization.offload_optimizer.device=cpu",
        "tensor_parallel.sequence_parallel=true"},
       2}};
  for (const Grid& grid : TensorGrids()) {
    const std::vector<std::string> model = SharedKvOverrides(grid.tensor / 2);
    for (const SharedCase& c : cases) {
      const Config config =
          GridConfigOf(grid, model, test_util::TempPath("shared_kv"), c.sets, c.accumulation);
      std::unique_ptr<Trainer> trainer = MakeTrainer(config, TestWorld());
      EXPECT_EQ(trainer->model().options().tensor_parallel_size, grid.tensor);
      const Curve run = test_util::TrainCurve(*trainer, kSteps);
      const Curve& reference = ReferenceOf(model);
      const std::string what = "llama 8 heads, " + std::to_string(grid.tensor / 2) +
                               " key/value, " + c.what + ", " + grid.ToString();
      ExpectNear(run.losses, reference.losses, 0, what + " loss");
      ExpectNear(run.grad_norms, reference.grad_norms, 0, what + " gradient norm", kNormTolerance);
      if (c.accumulation == 1) {
        EXPECT_LE(RelativeDifference(run.val_loss, reference.val_loss), kTolerance) << what;
      }
      EXPECT_LT(run.losses.back(), run.losses.front()) << what << ": the tiny model should learn";
    }
  }
}

// Every rank sees the same fresh run directory.
std::string FreshRunDir(const std::string& name) {
  const std::string dir = test_util::TempPath(name);
  if (TestWorld().rank() == 0) std::filesystem::remove_all(dir);
  SLUICE_CHECK(TestWorld().Barrier().ok());
  return dir;
}

// The tensor collectives a trainer's steps put on the comm lane of its trace: name -> (events,
// bytes).
std::map<std::string, std::pair<int, uint64_t>> TensorCollectives() {
  std::map<std::string, std::pair<int, uint64_t>> by_name;
  for (const TraceEvent& event : TraceRecorder::Global().Snapshot()) {
    if (event.lane != kTraceLaneComm || !event.name.starts_with("tp.")) continue;
    by_name[event.name].first += 1;
    by_name[event.name].second += event.bytes;
  }
  return by_name;
}

// Issue 20's communication check, counted from the trace of a trainer's steps at tp 2: without
// sequence parallelism one all-reduce per block (attention, MLP) in each direction, the
// embedding's and the head's, and the vocabulary-parallel loss's two, none of the logits; with
// it an all-gather and a reduce-scatter in the place of each all-reduce (the same bytes on the
// wire), the backward's re-gather of each region's input, and one all-reduce per norm of its
// partial gradients.
TEST(TensorParallelTraceTest, ATrainingStepsTensorCollectivesAreTheTheorys) {
  const Grid grid{2};
  constexpr int kTracedSteps = 2;
  std::map<std::string, std::pair<int, uint64_t>> plain;
  for (const bool sequence : {false, true}) {
    SCOPED_TRACE(sequence ? "sequence parallel" : "tensor parallel");
    std::vector<std::string> more;
    if (sequence) more.push_back("tensor_parallel.sequence_parallel=true");
    const Config config =
        GridConfig(grid, "gpt2", FreshRunDir(sequence ? "trace_sp" : "trace_tp"), more);
    std::unique_ptr<Trainer> trainer = MakeTrainer(config, TestWorld());
    TraceRecorder::Global().Clear();
    TraceRecorder::Global().Enable();
    for (int s = 0; s < kTracedSteps; ++s) ASSERT_TRUE(trainer->TrainStep().ok());
    TraceRecorder::Global().Disable();
    const std::map<std::string, std::pair<int, uint64_t>> events = TensorCollectives();
    TraceRecorder::Global().Clear();

    const int64_t rows = config.batch.micro_batch_per_gpu * config.model.seq_len;
    const uint64_t whole = static_cast<uint64_t>(rows * config.model.d_model) * sizeof(float);
    const auto times = [&](int per_step, uint64_t bytes) {
      return std::pair<int, uint64_t>{kTracedSteps * per_step,
                                      kTracedSteps * static_cast<uint64_t>(per_step) * bytes};
    };
    std::map<std::string, std::pair<int, uint64_t>> expected;
    for (int64_t layer = 0; layer < config.model.n_layer; ++layer) {
      for (const char* sublayer : {".attn", ".mlp"}) {
        const std::string block = "transformer.h." + std::to_string(layer) + sublayer;
        if (sequence) {
          expected["tp.ag " + block] = times(2, whole);
          expected["tp.rs " + block] = times(2, whole);
          expected["tp.regather " + block] = times(1, whole);
          // The same wire bytes: an all-reduce moves 2(t-1)/t of its buffer, an all-gather and
          // a reduce-scatter (t-1)/t of the whole rows each.
          EXPECT_EQ(2 * plain.at("tp.g " + block).second + 2 * plain.at("tp.f " + block).second,
                    expected["tp.ag " + block].second + expected["tp.rs " + block].second)
              << block;
        } else {
          expected["tp.g " + block] = times(1, whole);
          expected["tp.f " + block] = times(1, whole);
        }
      }
    }
    expected["tp.g transformer.wte"] = times(1, whole);
    if (sequence) {
      expected["tp.ag transformer"] = times(1, whole);
      expected["tp.ag lm_head"] = times(1, whole);
      expected["tp.rs lm_head"] = times(1, whole);
    } else {
      expected["tp.f lm_head"] = times(1, whole);
    }
    // The loss: every rank's [rows] log-sum-exps gathered, the [rows] target logits summed.
    expected["tp.ce.lse lm_head"] = times(1, grid.tensor * rows * sizeof(float));
    expected["tp.ce.target lm_head"] = times(1, rows * sizeof(float));
    std::map<std::string, std::pair<int, uint64_t>> partial_sums;
    for (const auto& [name, count_bytes] : events) {
      if (name.starts_with("tp.sp.grads ")) partial_sums.insert({name, count_bytes});
    }
    for (const auto& [name, count_bytes] : partial_sums) {
      EXPECT_EQ(count_bytes.first, kTracedSteps) << name;
      EXPECT_EQ(count_bytes.second, kTracedSteps * 2 * config.model.d_model * sizeof(float))
          << name << ": a LayerNorm's weight and bias";
    }
    EXPECT_EQ(static_cast<int64_t>(partial_sums.size()),
              sequence ? 2 * config.model.n_layer + 1 : 0);
    std::map<std::string, std::pair<int, uint64_t>> tensor_events = events;
    for (const auto& [name, count_bytes] : partial_sums) tensor_events.erase(name);
    EXPECT_EQ(tensor_events, expected);
    if (!sequence) plain = events;
  }
}

// Saved on the widest tensor grid at stage 3 after half the steps, resumed on every other grid
// this world holds (each tensor size, its data size filling the world): the second half goes on
// as the single-rank run does.
TEST(TensorParallelCheckpointTest, ASavedGridResumesOnEveryOtherGrid) {
  const int half = kSteps / 2;
  const Grid saved_grid = TensorGrids().front();
  const std::string run_dir = FreshRunDir("resharded");
  std::string step_dir;
  {
    const Config config = GridConfig(saved_grid, "gpt2", run_dir, {"zero_optimization.stage=3"});
    std::unique_ptr<Trainer> trainer = MakeTrainer(config, TestWorld());
    const Curve first = test_util::TrainCurve(*trainer, half);
    ExpectNear(first.losses, Reference("gpt2", 2).losses, 0, "before saving");
    Result<std::filesystem::path> saved = trainer->SaveCheckpoint();
    ASSERT_TRUE(saved.ok()) << saved.status().ToString();
    step_dir = saved->string();
  }
  std::vector<Grid> resumed_on = {{1}};
  for (const Grid& g : TensorGrids()) {
    if (g.tensor != saved_grid.tensor) resumed_on.push_back(g);
  }
  for (const Grid& grid : resumed_on) {
    for (const int stage : {0, 3}) {
      const Config config =
          GridConfig(grid, "gpt2", run_dir, {"zero_optimization.stage=" + std::to_string(stage)});
      std::unique_ptr<Trainer> trainer = MakeTrainer(config, TestWorld(), step_dir);
      ASSERT_EQ(trainer->steps_done(), half);
      const Curve rest = test_util::TrainCurve(*trainer, kSteps - half);
      ExpectNear(rest.losses, Reference("gpt2", 2).losses, half,
                 "saved on " + saved_grid.ToString() + ", resumed on " + grid.ToString() +
                     " at stage " + std::to_string(stage));
    }
  }
}

// A pipelined checkpoint: saved on tensor 2 x pipeline 2 (x the data size the world leaves) at
// ZeRO 1 after half the steps, each stage's tensor ranks saving their layers' global slices; it
// resumes on tp 1 x pp 1, tp 1 x pp 2 (interleaved, the ranks' chunks holding other layers) and
// tp 2 x pp 1, each with the same global batch, and the second half goes on as the single-rank
// run does.
TEST(TensorParallelCheckpointTest, APipelinedGridResumesAtOtherTensorAndPipelineSizes) {
  if (TestWorld().size() < 4) GTEST_SKIP() << "needs tensor 2 x pipeline 2 ranks";
  const int half = kSteps / 2;
  const std::string run_dir = FreshRunDir("pipelined_grid");
  // The 4-layer GPT-2 (two chunks per stage at pp 2), untied.
  const std::vector<std::string> model = {"model.n_layer=4", "model.tie_embeddings=false"};
  const auto config = [&](int tensor, int pipeline, const std::string& schedule) {
    const int data = TestWorld().size() / (tensor * pipeline);
    const int accumulation = pipeline;  // a micro-batch per stage in flight
    std::vector<std::string> sets = ModelOverrides("gpt2", tensor);
    sets.insert(sets.end(), model.begin(), model.end());
    for (const std::string& set :
         {"tensor_parallel.autotp_size=" + std::to_string(tensor),
          "pipeline.stages=" + std::to_string(pipeline), "pipeline.schedule=" + schedule,
          "train_micro_batch_size_per_gpu=" + std::to_string(kGlobalBatch / data / accumulation),
          "gradient_accumulation_steps=" + std::to_string(accumulation),
          std::string("zero_optimization.stage=1")}) {
      sets.push_back(set);
    }
    return LoadConfig(test_util::TinyGptYaml(Corpus(), run_dir), sets, TestWorld().size());
  };
  const Curve& reference = Reference("gpt2", 2, model);
  std::string step_dir;
  {
    std::unique_ptr<Trainer> trainer = MakeTrainer(config(2, 2, "1f1b"), TestWorld());
    const Curve first = test_util::TrainCurve(*trainer, half);
    ExpectNear(first.losses, reference.losses, 0, "tp 2 x pp 2 before saving");
    Result<std::filesystem::path> saved = trainer->SaveCheckpoint();
    ASSERT_TRUE(saved.ok()) << saved.status().ToString();
    step_dir = saved->string();
  }
  struct Resume {
    int tensor;
    int pipeline;
    std::string schedule;
  };
  for (const Resume& r :
       {Resume{1, 1, "1f1b"}, Resume{1, 2, "interleaved-1f1b"}, Resume{2, 1, "1f1b"}}) {
    std::unique_ptr<Trainer> trainer =
        MakeTrainer(config(r.tensor, r.pipeline, r.schedule), TestWorld(), step_dir);
    ASSERT_EQ(trainer->steps_done(), half);
    const Curve rest = test_util::TrainCurve(*trainer, kSteps - half);
    ExpectNear(rest.losses, reference.losses, half,
               "saved on tp 2 x pp 2, resumed on tp " + std::to_string(r.tensor) + " x pp " +
                   std::to_string(r.pipeline) + " " + r.schedule);
  }
}

// Saved with shared key/value heads on the widest tensor grid (tp 4 with 2 key/value heads, or tp 2
// with 1) at stage 3 after half the steps, each piece once by its share group's first rank;
// resumed at tp 1 and on every other grid (tp 2 with 2 key/value heads: split, not shared), at
// stages 0 and 3: the second half goes on as the single-rank run does.
TEST(TensorParallelCheckpointTest, SharedKeyValueHeadsResumeOnEveryOtherGrid) {
  const int half = kSteps / 2;
  const Grid saved_grid = TensorGrids().back();
  const std::vector<std::string> model = SharedKvOverrides(saved_grid.tensor / 2);
  const std::string run_dir = FreshRunDir("shared_kv_resharded");
  std::string step_dir;
  {
    const Config config = GridConfigOf(saved_grid, model, run_dir, {"zero_optimization.stage=3"});
    std::unique_ptr<Trainer> trainer = MakeTrainer(config, TestWorld());
    const Curve first = test_util::TrainCurve(*trainer, half);
    ExpectNear(first.losses, ReferenceOf(model).losses, 0, "shared key/value, before saving");
    Result<std::filesystem::path> saved = trainer->SaveCheckpoint();
    ASSERT_TRUE(saved.ok()) << saved.status().ToString();
    step_dir = saved->string();
  }
  std::vector<Grid> resumed_on = {{1}};
  for (const Grid& g : TensorGrids()) {
    if (g.tensor != saved_grid.tensor) resumed_on.push_back(g);
  }
  for (const Grid& grid : resumed_on) {
    for (const int stage : {0, 3}) {
      const Config config =
          GridConfigOf(grid, model, run_dir, {"zero_optimization.stage=" + std::to_string(stage)});
      std::unique_ptr<Trainer> trainer = MakeTrainer(config, TestWorld(), step_dir);
      ASSERT_EQ(trainer->steps_done(), half);
      const Curve rest = test_util::TrainCurve(*trainer, kSteps - half);
      ExpectNear(rest.losses, ReferenceOf(model).losses, half,
                 "shared key/value, saved on " + saved_grid.ToString() + ", resumed on " +
                     grid.ToString() + " at stage " + std::to_string(stage));
    }
  }
}

}  // namespace
}  // namespace sluice::train
