// The trainer on tiny models, one rank: gradient accumulation, fp16 overflow skipping, bf16
// master weights, a Llama-family run, the files of Run() with the memory report, the batch keys
// fitted to a world size, and the errors of bad input (offload included).
#include "engine/train/trainer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/estimate/memory_estimate.h"
#include "engine/train/run_setup.h"
#include "engine/train/train_world.h"
#include "engine/zero/split_optimizer.h"
#include "kernels/ref/half.h"
#include "runtime/device/cpu/memory_protection.h"
#include "tests/train/train_test_util.h"

namespace sluice::train {
namespace {

using test_util::TempPath;
using test_util::TinyGptConfig;

std::unique_ptr<Trainer> MakeTrainer(const Config& config) {
  TrainerOptions options = test_util::QuietTrainerOptions();
  Result<std::unique_ptr<Trainer>> trainer = Trainer::Create(config, options);
  EXPECT_TRUE(trainer.ok()) << trainer.status().ToString();
  return trainer.ok() ? std::move(trainer).value() : nullptr;
}

StepMetrics Step(Trainer& trainer) {
  Result<StepMetrics> m = trainer.TrainStep();
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : StepMetrics{};
}

// The parameters as the model computes with them (the parameter dtype's values), flat layout.
std::vector<float> FullParameters(Trainer& trainer) {
  std::vector<float> full(static_cast<size_t>(trainer.model().ParameterCount()));
  Status status = trainer.zero().GatherFullParameters(full);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return full;
}

// The gradients of the step just taken, flat layout (stage 0: the full buffer, which Step()
// reads and leaves as it is).
std::vector<float> StepGradients(Trainer& trainer) {
  EXPECT_EQ(trainer.config().zero.stage, 0);
  Result<std::vector<float>> grads = trainer.zero().ReadStepGradients();
  EXPECT_TRUE(grads.ok()) << grads.status().ToString();
  return grads.ok() ? std::move(grads).value() : std::vector<float>();
}

double Mean(const std::vector<double>& v, size_t begin, size_t end) {
  double sum = 0;
  for (size_t i = begin; i < end; ++i) sum += v[i];
  return sum / static_cast<double>(end - begin);
}

// GAS = 2 with micro-batch 2 sees the same four windows per step as GAS = 1 with micro-batch 4
// (the loader hands out windows in one global order), and loss_grad = 1 / GAS makes the
// accumulated fp32 gradient the same mean. Only the summation order differs.
TEST(TrainerTest, GradientAccumulationMatchesALargerBatch) {
  auto whole = MakeTrainer(
      TinyGptConfig({"train_micro_batch_size_per_gpu=4", "gradient_accumulation_steps=1"}));
  auto accumulated = MakeTrainer(
      TinyGptConfig({"train_micro_batch_size_per_gpu=2", "gradient_accumulation_steps=2"}));
  ASSERT_TRUE(whole && accumulated);
  StepMetrics a = Step(*whole);
  StepMetrics b = Step(*accumulated);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_NEAR(a.loss, b.loss, 1e-6 * a.loss);
  EXPECT_NEAR(a.grad_norm, b.grad_norm, 1e-5 * a.grad_norm);
  const std::vector<float> ga = StepGradients(*whole);
  const std::vector<float> gb = StepGradients(*accumulated);
  ASSERT_EQ(ga.size(), gb.size());
  float max_abs = 0, max_diff = 0;
  for (size_t i = 0; i < ga.size(); ++i) {
    max_abs = std::max(max_abs, std::fabs(ga[i]));
    max_diff = std::max(max_diff, std::fabs(ga[i] - gb[i]));
  }
  EXPECT_GT(max_abs, 0.0f);
  // Measured: 2.5e-7 of max |g| (the losses agree to 4e-8).
  EXPECT_LE(max_diff, 5e-6f * max_abs) << "max |g| " << max_abs;
  for (int s = 0; s < 5; ++s) {
    a = Step(*whole);
    b = Step(*accumulated);
    EXPECT_NEAR(a.loss, b.loss, 1e-6 * a.loss) << "step " << a.step;
  }
}

// Scale 2^40 makes every gradient overflow fp16: DeepSpeed's sequence is skip (hysteresis 2 ->
// 1, scale kept), then skip and halve on every further overflow until the gradients fit.
TEST(TrainerTest, Fp16OverflowSkipsTheStepAndHalvesTheScale) {
  auto trainer = MakeTrainer(
      TinyGptConfig({"fp16.enabled=true", "fp16.initial_scale_power=40", "fp16.hysteresis=2"}));
  ASSERT_TRUE(trainer);
  ASSERT_EQ(trainer->precision(), Precision::kF16);
  // The model computes with fp16 values.
  const std::vector<float> before = FullParameters(*trainer);
  for (size_t i = 0; i < before.size(); i += 97) {
    ASSERT_EQ(before[i], kernels::F16ToF32(kernels::F32ToF16(before[i]))) << i;
  }

  StepMetrics first = Step(*trainer);
  EXPECT_TRUE(first.skipped);
  EXPECT_FALSE(std::isfinite(first.grad_norm));
  EXPECT_EQ(first.loss_scale, std::ldexp(1.0, 40));
  EXPECT_EQ(trainer->loss_scaler().scale(), std::ldexp(1.0, 40));  // hysteresis used instead
  EXPECT_EQ(trainer->optimizer().step(), 0);
  EXPECT_EQ(trainer->schedule().last_batch_iteration(), -1);  // not stepped on a skip
  EXPECT_TRUE(FullParameters(*trainer) == before) << "skipped step moved";

  double expected_scale = std::ldexp(1.0, 40);
  int skipped = 1;
  StepMetrics m;
  for (int s = 0; s < 45; ++s) {
    m = Step(*trainer);
    EXPECT_EQ(m.loss_scale, expected_scale) << "step " << m.step;
    if (!m.skipped) break;
    ++skipped;
    expected_scale /= 2;
    EXPECT_EQ(trainer->loss_scaler().scale(), expected_scale);
  }
  ASSERT_FALSE(m.skipped) << "no step fitted fp16 after " << skipped << " overflows";
  EXPECT_GE(skipped, 2);
  EXPECT_TRUE(std::isfinite(m.grad_norm));
  EXPECT_EQ(trainer->optimizer().step(), 1);
  EXPECT_EQ(trainer->schedule().last_batch_iteration(), 0);
  // Later steps train normally.
  std::vector<double> losses;
  for (int s = 0; s < 20; ++s) losses.push_back(Step(*trainer).loss);
  for (double l : losses) EXPECT_TRUE(std::isfinite(l));
  EXPECT_LT(Mean(losses, 15, 20), Mean(losses, 0, 5));
}

TEST(TrainerTest, Bf16KeepsFp32MastersAndRoundedModelWeights) {
  auto trainer = MakeTrainer(TinyGptConfig({"bf16.enabled=true"}));
  ASSERT_TRUE(trainer);
  ASSERT_EQ(trainer->precision(), Precision::kBF16);
  ASSERT_EQ(trainer->zero().options().param_dtype, DType::kBF16);
  std::vector<double> losses;
  for (int s = 0; s < 20; ++s) losses.push_back(Step(*trainer).loss);
  const int64_t n = trainer->model().ParameterCount();
  const int64_t shard = trainer->zero().layout().shard_elements();
  std::vector<float> master(static_cast<size_t>(shard));
  ASSERT_TRUE(trainer->optimizer().ReadState(0, shard, master.data(), nullptr, nullptr).ok());
  const std::vector<float> model = FullParameters(*trainer);
  int64_t not_representable = 0;
  for (const zero::PartitionInfo& p : trainer->zero().layout().partitions()) {
    for (int64_t e = 0; e < p.numel; ++e) {
      const float m = master[p.shard_offset + e];
      const float used = model[static_cast<size_t>(p.full_offset + e)];
      ASSERT_EQ(used, kernels::Bf16ToF32(kernels::F32ToBf16(m))) << "parameter " << p.param;
      if (used != m) ++not_representable;
    }
  }
  // The masters keep what bf16 cannot hold (else there would be no point in keeping them).
  EXPECT_GT(not_representable, n / 2);
  EXPECT_LT(Mean(losses, 15, 20), Mean(losses, 0, 5) - 0.3);
}

TEST(TrainerTest, LlamaFamilyTrainsWithFallingLoss) {
  auto trainer = MakeTrainer(TinyGptConfig(
      {"model.family=llama", "model.n_head=4", "model.n_kv_head=2", "model.d_ff=64"}));
  ASSERT_TRUE(trainer);
  EXPECT_EQ(trainer->model().options().family, model::Family::kLlama);
  std::vector<double> losses;
  for (int s = 0; s < 30; ++s) losses.push_back(Step(*trainer).loss);
  EXPECT_NEAR(losses[0], std::log(256.0), 0.3);
  EXPECT_LT(Mean(losses, 25, 30), Mean(losses, 0, 5) - 0.5)
      << "first " << losses.front() << " last " << losses.back();
  Result<double> val = trainer->Evaluate();
  ASSERT_TRUE(val.ok()) << val.status().ToString();
  EXPECT_LT(*val, std::log(256.0) - 0.5);
}

std::vector<nlohmann::json> ReadJsonLines(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

// run.profile_ops: every op of the table timed on its stream, per training step (evaluations
// left out), in the summary; the losses of the unprofiled run bit for bit.
TEST(TrainerTest, ProfilingTheOpsReportsTheirDeviceTimeAndChangesNoBits) {
  const auto run = [](const std::vector<std::string>& overrides) {
    Config config = TinyGptConfig(overrides);
    std::filesystem::remove_all(config.run.dir);
    Result<std::unique_ptr<Trainer>> trainer =
        Trainer::Create(config, test_util::QuietTrainerOptions());
    SLUICE_CHECK(trainer.ok()) << trainer.status().ToString();
    Result<TrainSummary> summary = (*trainer)->Run();
    SLUICE_CHECK(summary.ok()) << summary.status().ToString();
    return *summary;
  };
  const std::vector<std::string> base = {"run.steps=3", "run.eval_interval=2"};
  std::vector<std::string> with_profile = base;
  with_profile.push_back("run.profile_ops=true");
  const TrainSummary plain = run(base);
  const TrainSummary profiled = run(with_profile);
  EXPECT_TRUE(test_util::SameBits(profiled.final_train_loss, plain.final_train_loss));
  ASSERT_TRUE(profiled.final_val_loss.has_value() && plain.final_val_loss.has_value());
  EXPECT_TRUE(test_util::SameBits(*profiled.final_val_loss, *plain.final_val_loss));
  EXPECT_FALSE(plain.op_profile.has_value());
  ASSERT_TRUE(profiled.op_profile.has_value());
  EXPECT_EQ(profiled.op_profile->steps, 3);
  std::map<std::string, ops::OpTime> by_op;
  for (const ops::OpTime& t : profiled.op_profile->ops) {
    EXPECT_GE(t.total_ms, 0.0) << t.op;
    EXPECT_EQ(t.calls % 3, 0) << t.op << ": the same ops every step, evaluations left out";
    by_op[t.op] = t;
  }
  for (const char* op : {"LinearForward", "LinearBackward", "AttentionForward", "AttentionBackward",
                         "LayerNormForward", "CrossEntropyForward", "AdamStep"}) {
    EXPECT_TRUE(by_op.count(op)) << op << " not profiled";
  }
  // Every linear's forward has its backward (no checkpointing); the tiny GPT's forward has four
  // per block (attention in, attention out, MLP in, MLP out) and the head.
  EXPECT_EQ(by_op["LinearBackward"].calls, by_op["LinearForward"].calls);
  EXPECT_EQ(by_op["LinearForward"].calls, 3 * (4 * TinyGptConfig().model.n_layer + 1));
  const std::string table = FormatSummaryTable(profiled);
  EXPECT_NE(table.find("device time per op"), std::string::npos) << table;
  EXPECT_NE(SummaryToJson(profiled).dump().find("\"op_profile\""), std::string::npos);
}

TEST(TrainerTest, RunWritesMetricsConfigAndSummary) {
  Config config = TinyGptConfig({"run.steps=6", "run.eval_interval=3"});
  std::filesystem::remove_all(config.run.dir);  // an earlier run's final checkpoint claims it
  TrainerOptions options;
  options.progress = ProgressMode::kOff;
  options.summary_stream = nullptr;
  Result<std::unique_ptr<Trainer>> trainer = Trainer::Create(config, options);
  ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
  Result<TrainSummary> summary = (*trainer)->Run();
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();

  const std::string dir = config.run.dir;
  std::vector<nlohmann::json> lines = ReadJsonLines(dir + "/metrics.jsonl");
  ASSERT_EQ(lines.size(), 6u);
  for (size_t i = 0; i < lines.size(); ++i) {
    const nlohmann::json& l = lines[i];
    for (const char* key : {"step", "loss", "lr", "grad_norm", "tokens", "step_time_s",
                            "tokens_per_s", "skipped", "peak_bytes"}) {
      EXPECT_TRUE(l.contains(key)) << key << " missing from line " << i + 1;
    }
    EXPECT_EQ(l["step"], static_cast<int>(i + 1));
    EXPECT_EQ(l["tokens"], 4 * 32);
    EXPECT_GT(l["peak_bytes"]["device"].get<uint64_t>(), 0u);
    EXPECT_EQ(l.contains("val_loss"), i == 2 || i == 5) << "line " << i + 1;
  }
  std::ifstream resolved(dir + "/config.resolved.json");
  nlohmann::json record = nlohmann::json::parse(resolved);
  EXPECT_FALSE(record.dump().find("model.d_model") == std::string::npos);

  std::ifstream summary_file(dir + "/summary.json");
  nlohmann::json s = nlohmann::json::parse(summary_file);
  EXPECT_EQ(s["steps"], 6);
  EXPECT_EQ(s["tokens"], 6 * 4 * 32);
  EXPECT_GT(s["tokens_per_s"].get<double>(), 0);
  EXPECT_GT(s["peak_bytes"]["device"].get<uint64_t>(), 0u);
  EXPECT_EQ(s["final_val_loss"].get<double>(), lines[5]["val_loss"].get<double>());
  EXPECT_NEAR(s["initial_val_loss"].get<double>(), std::log(256.0), 0.3);
  EXPECT_TRUE(s["phases_s"].contains("optimizer"));
  // The kernels the run computed with (TinyGptConfig asks for the deterministic GEMM).
  EXPECT_EQ(s["kernels"]["cpu_gemm"], "deterministic");
  EXPECT_EQ(s["kernels"]["gemm_kernel"].get<std::string>().rfind("GemmFixed ", 0), 0u)
      << s["kernels"].dump();
  EXPECT_EQ(s["kernels"]["gemm"]["library"], "GemmFixed") << s["kernels"].dump();
  EXPECT_EQ(s["kernels"]["gemm_kernel"],
            "GemmFixed " + s["kernels"]["gemm"]["core"].get<std::string>());
  EXPECT_GE(s["kernels"]["gemm"]["threads"].get<int>(), 1);
  EXPECT_FALSE(s["kernels"]["openblas_core"].get<std::string>().empty());
  EXPECT_FALSE(s["kernels"]["openblas_core_reason"].get<std::string>().empty());
  EXPECT_FALSE(s["kernels"]["kernel_isa"].get<std::string>().empty());

  // Predicted against measured: the model states of stage 0 on one rank are exact (allocations
  // round up to 256 bytes), activations and buffers within 10%.
  ASSERT_TRUE(summary->memory.has_value());
  const nlohmann::json& memory = s["memory"];
  EXPECT_EQ(memory["world_size"], 1);
  EXPECT_TRUE(memory["estimate_error"].is_null()) << memory.dump();
  int checked = 0;
  for (const nlohmann::json& row : memory["rows"]) {
    if (row["tier"] != "device") continue;
    const double predicted = row["predicted"].get<double>();
    const double measured = row["measured"].get<double>();
    const std::string category = row["category"];
    ASSERT_GT(predicted, 0) << category;
    EXPECT_EQ(row["ratio"].get<double>(), measured / predicted) << category;
    EXPECT_FALSE(row.contains("max_over_ranks"));
    const double tolerance =
        category == "activations" || category == "buffers" || category == "total" ? 0.10 : 0.01;
    EXPECT_NEAR(measured, predicted, tolerance * predicted) << category;
    ++checked;
  }
  EXPECT_GE(checked, 5) << memory.dump();
  const std::string table = FormatSummaryTable(*summary);
  EXPECT_NE(table.find("predicted"), std::string::npos) << table;
  EXPECT_NE(table.find("optimizer"), std::string::npos) << table;
  EXPECT_EQ(table.find("max of"), std::string::npos) << table;
  EXPECT_NE(table.find("GEMM deterministic (GemmFixed "), std::string::npos) << table;
}

// The host never touches device memory in a training step: with device.memory_protection on
// (any host access would abort, naming the allocation) every stage, with and without optimizer
// offload, trains, and its losses and gradient norms are bit for bit those of a run with
// protection off. A protected device really faults on a host read:
// MemoryProtectionDeathTest.HostReadFaultsAndTheReportNamesTheAllocation.
TEST(TrainerTest, TrainsWithDeviceMemoryProtectionOnAndTheSameBits) {
  Result<DeviceProtectionDecision> probe =
      DecideDeviceMemoryProtection(DeviceMemoryProtection::kAuto);
  if (!probe.ok() || !probe->active) {
    GTEST_SKIP() << "no memory protection here: "
                 << (probe.ok() ? probe->explanation : probe.status().ToString());
  }
  unsetenv(kDeviceProtectEnvVar);
  const std::vector<std::vector<std::string>> variants = {
      {"zero_optimization.stage=0"},
      {"zero_optimization.stage=1"},
      {"zero_optimization.stage=2", "bf16.enabled=true"},
      {"zero_optimization.stage=3", "bf16.enabled=true"},
      {"zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=cpu",
       "zero_optimization.offload_param.device=cpu"},
  };
  for (const std::vector<std::string>& variant : variants) {
    std::vector<std::vector<double>> runs;
    for (const char* protection : {"on", "off"}) {
      std::vector<std::string> overrides = variant;
      overrides.push_back(std::string("device.memory_protection=") + protection);
      auto trainer = MakeTrainer(TinyGptConfig(overrides));
      ASSERT_TRUE(trainer) << variant.front();
      std::vector<double> record;
      for (int s = 0; s < 3; ++s) {
        const StepMetrics m = Step(*trainer);
        record.push_back(m.loss);
        record.push_back(m.grad_norm);
      }
      runs.push_back(std::move(record));
    }
    ASSERT_EQ(runs[0].size(), runs[1].size());
    EXPECT_EQ(std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * sizeof(double)), 0)
        << variant.front();
  }
}

// One run per run directory: a second trainer that would write into the directory of a live one
// is refused before it writes or prunes anything, naming the directory and the holder; once the
// first is gone the directory is free again.
TEST(TrainerTest, ARunDirectoryHasOneOwner) {
  const Config config = TinyGptConfig({"run.steps=1"});
  TrainerOptions writing = test_util::QuietTrainerOptions();
  writing.write_files = true;
  Result<std::unique_ptr<Trainer>> first = Trainer::Create(config, writing);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  Result<std::unique_ptr<Trainer>> second = Trainer::Create(config, writing);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition) << second.status().ToString();
  EXPECT_NE(
      second.status().message().find("run directory " + config.run.dir +
                                     " is in use by another run (pid " + std::to_string(getpid())),
      std::string::npos)
      << second.status().ToString();
  EXPECT_NE(second.status().message().find("--run-dir"), std::string::npos);
  first->reset();
  EXPECT_TRUE(Trainer::Create(config, writing).ok());
}

// Offload the engine cannot do is refused before training, naming the key and the stage.
TEST(TrainerTest, OffloadAtTheWrongStageIsRefusedNamingTheKey) {
  const struct {
    const char* stage;
    const char* key;
    const char* name;
  } cases[] = {
      {"zero_optimization.stage=0", "zero_optimization.offload_optimizer.device=cpu",
       "offload_optimizer"},
      {"zero_optimization.stage=0",
       "zero_optimization.offload_optimizer={device: nvme, nvme_path: /tmp}", "offload_optimizer"},
      // offload_param below stage 3 is ignored with a warning, as DeepSpeed ignores it
      // (tests/config/deepspeed_keys_test.cpp).
  };
  for (const auto& c : cases) {
    Result<Config> config = [&]() -> Result<Config> {
      ConfigSources sources;
      sources.env.emplace();
      sources.set_overrides = {c.stage, c.key};
      const std::string corpus =
          test_util::WriteFile(test_util::TempPath("corpus.txt"), test_util::SyntheticCorpus(4096));
      return LoadConfigFromText(test_util::TinyGptYaml(corpus, test_util::TempPath("run")),
                                ConfigFormat::kYaml, sources);
    }();
    // The loader refuses it already; a config built otherwise meets the engine's check.
    const Status status = config.ok() ? Trainer::Create(*config).status() : config.status();
    ASSERT_FALSE(status.ok()) << c.key;
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
    EXPECT_NE(status.message().find(c.name), std::string::npos) << status.ToString();
    EXPECT_NE(status.message().find("zero_optimization.stage"), std::string::npos)
        << status.ToString();
  }
}

// Offloaded state is trained and reported on its tiers (the bitwise checks against the
// on-device run are in trainer_offload_test.cpp).
// offload_optimizer.ratio "auto" gets its device budget from the memory estimate before the
// engine exists: with a device.memory_limit that holds the fully offloaded run but not a split's
// device gradient shard, the trainer offloads everything (ratio 1, gradients in host memory)
// instead of letting the engine guess from the free device memory.
TEST(TrainerTest, AutoOffloadRatioTakesItsDeviceBudgetFromTheEstimate) {
  const std::vector<std::string> base = {
      "zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=cpu",
      "zero_optimization.sub_group_size=2048", "run.steps=1", "run.eval_interval=0"};
  std::vector<std::string> offload_all = base;
  offload_all.push_back("zero_optimization.offload_optimizer.ratio=1");
  Result<estimate::MemoryEstimate> all = estimate::EstimateMemory(TinyGptConfig(offload_all), 1);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  const int64_t limit = all->tier_bytes(MemoryTier::kDevice) + (64 << 10);
  ASSERT_GT(4 * all->shard_elements, 64 << 10) << "a split's gradient shard must not fit";

  std::vector<std::string> auto_ratio = base;
  auto_ratio.insert(auto_ratio.end(), {"zero_optimization.offload_optimizer.ratio=auto",
                                       "device.memory_limit=" + std::to_string(limit)});
  Result<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(TinyGptConfig(auto_ratio), test_util::QuietTrainerOptions());
  ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
  ASSERT_TRUE((*trainer)->TrainStep().ok());
  EXPECT_EQ((*trainer)->zero().optimizer().offload_ratio(), 1.0);
  EXPECT_GT((*trainer)->zero().memory().host_grad_shard, 0u);
}

TEST(TrainerTest, OffloadedStateIsReportedOnItsTiers) {
  Config config = TinyGptConfig(
      {"zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=cpu",
       "zero_optimization.offload_param.device=cpu", "run.steps=2", "run.eval_interval=0"});
  TrainerOptions options = test_util::QuietTrainerOptions();
  Result<std::unique_ptr<Trainer>> trainer = Trainer::Create(config, options);
  ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
  Result<TrainSummary> summary = (*trainer)->Run();
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  ASSERT_TRUE(summary->memory.has_value());
  const auto measured = [&](MemoryTier tier, MemoryCategory category) -> int64_t {
    for (const estimate::PeakRow& row : summary->memory->rows) {
      if (row.tier == tier && row.category == category) return row.measured;
    }
    return -1;
  };
  const int64_t parameters = (*trainer)->model().ParameterCount();
  // The fp32 gradient shard and the bf16-or-f32 parameter shard live in host memory, master
  // weights and moments (12 B a parameter) too; the device keeps no optimizer state.
  EXPECT_GE(measured(MemoryTier::kHost, MemoryCategory::kGrads), 4 * parameters);
  EXPECT_GE(measured(MemoryTier::kHost, MemoryCategory::kParams), 4 * parameters);
  EXPECT_GE(measured(MemoryTier::kHost, MemoryCategory::kOptimizer), 12 * parameters);
  EXPECT_GT(measured(MemoryTier::kHostPinned, MemoryCategory::kOptimizer), 0);
  EXPECT_LE(measured(MemoryTier::kDevice, MemoryCategory::kOptimizer), 0);
  const std::string table = FormatSummaryTable(*summary);
  EXPECT_NE(table.find("host_pinned"), std::string::npos) << table;
  EXPECT_NE(table.find("host "), std::string::npos) << table;
}

TEST(TrainWorldTest, BatchKeysAreFittedToTheWorldSize) {
  Config derived = test_util::LoadTestConfig(
      "train_micro_batch_size_per_gpu: 2\ngradient_accumulation_steps: 3\n", {});
  ASSERT_EQ(derived.batch.train_batch_size, 6);
  ASSERT_TRUE(FitBatchToWorld(derived, 4).ok());
  EXPECT_EQ(derived.batch.train_batch_size, 24);
  EXPECT_EQ(derived.batch.micro_batch_per_gpu, 2);
  EXPECT_EQ(derived.batch.gradient_accumulation_steps, 3);
  EXPECT_EQ(derived.world_size, 4);
  EXPECT_EQ(ConfigRecordJson(derived)["world_size"], 4);

  // train_batch_size given: the accumulation was derived for one rank.
  Config given =
      test_util::LoadTestConfig("train_batch_size: 8\ntrain_micro_batch_size_per_gpu: 2\n", {});
  ASSERT_EQ(given.batch.gradient_accumulation_steps, 4);
  EXPECT_TRUE(FitBatchToWorld(given, 1).ok());
  Status status = FitBatchToWorld(given, 2);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("train_batch_size = 8"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("gradient_accumulation_steps"), std::string::npos);
}

TEST(TrainerTest, MissingDataFileNamesThePath) {
  Config config = TinyGptConfig({"data.train_path=/nonexistent/sluice/corpus.txt"});
  Result<std::unique_ptr<Trainer>> trainer = Trainer::Create(config);
  ASSERT_FALSE(trainer.ok());
  EXPECT_NE(trainer.status().message().find("/nonexistent/sluice/corpus.txt"), std::string::npos)
      << trainer.status().message();
}

TEST(TrainerTest, ModelLargerThanTheDeviceSaysWhatToChange) {
  Config config = TinyGptConfig({"device.memory_limit=256KiB"});
  Result<std::unique_ptr<Trainer>> trainer = Trainer::Create(config);
  ASSERT_FALSE(trainer.ok());
  EXPECT_EQ(trainer.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(trainer.status().message().find("device.memory_limit"), std::string::npos)
      << trainer.status().message();
}

TEST(TrainConfigTest, ModelSectionMissingAndNoModelFile) {
  const std::string config =
      test_util::WriteFile(TempPath("ds_config.json"),
                           R"({"train_micro_batch_size_per_gpu": 2, "data": {"train_path": "x"}})");
  ConfigSources sources;
  sources.paths = {config};
  sources.env.emplace();
  Result<Config> loaded = LoadTrainConfig(sources);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("no model section"), std::string::npos);
  EXPECT_NE(loaded.status().message().find("--model"), std::string::npos);
}

TEST(TrainConfigTest, ModelFromASeparateFile) {
  const std::string config = test_util::WriteFile(
      TempPath("ds_config.json"),
      R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 3,
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
          "data": {"train_path": "corpus.txt"}})");
  const std::string model = test_util::WriteFile(
      TempPath("model.yaml"), "model:\n  family: llama\n  n_layer: 3\n  d_model: 48\n");
  const std::string bare = test_util::WriteFile(TempPath("bare.yaml"), "n_layer: 5\n");
  ConfigSources sources;
  sources.paths = {config};
  sources.model_path = model;
  sources.env.emplace();
  Result<Config> loaded = LoadTrainConfig(sources);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_TRUE(loaded->model.present);
  EXPECT_EQ(loaded->model.family, ModelFamily::kLlama);
  EXPECT_EQ(loaded->model.n_layer, 3);
  EXPECT_EQ(loaded->batch.gradient_accumulation_steps, 3);

  sources.model_path = bare;
  loaded = LoadTrainConfig(sources);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->model.n_layer, 5);

  const std::string bad = test_util::WriteFile(TempPath("bad_model.yaml"), "n_layers: 5\n");
  sources.model_path = bad;
  loaded = LoadTrainConfig(sources);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find(bad), std::string::npos) << loaded.status().message();
}

TEST(TrainConfigTest, TrainingNeedsData) {
  const std::string config = test_util::WriteFile(
      TempPath("config.yaml"),
      "train_micro_batch_size_per_gpu: 2\nmodel: {family: gpt2, n_layer: 1}\n");
  ConfigSources sources;
  sources.paths = {config};
  sources.env.emplace();
  Result<Config> loaded = LoadTrainConfig(sources);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("data.train_path"), std::string::npos);
}

}  // namespace
}  // namespace sluice::train

namespace sluice::train {
namespace {

TEST(TrainIntervalsTest, StepsPerPrintActsAsTheLogIntervalUnlessRunSaysOtherwise) {
  const std::string base = "train_micro_batch_size_per_gpu: 1\nsteps_per_print: 7\n";
  Config deepspeed = test_util::LoadTestConfig(base, {});
  EXPECT_EQ(IntervalsFromConfig(deepspeed).log_interval, 7);
  Config both = test_util::LoadTestConfig(base + "run: {log_interval: 3, eval_interval: 9}\n", {});
  EXPECT_EQ(IntervalsFromConfig(both).log_interval, 3);
  EXPECT_EQ(IntervalsFromConfig(both).eval_interval, 9);
  Config neither = test_util::LoadTestConfig("train_micro_batch_size_per_gpu: 1\n", {});
  EXPECT_EQ(IntervalsFromConfig(neither).log_interval, neither.run.log_interval);
}

}  // namespace
}  // namespace sluice::train
