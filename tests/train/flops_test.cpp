// Model FLOPs per token against hand-computed counts, the device peak table, the CPU GEMM probe,
// and how a step's and a run's TFLOP/s and MFU are reported.
#include "engine/train/flops.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

#include "engine/train/device_peak.h"
#include "engine/train/run_setup.h"
#include "engine/train/step_metrics.h"
#include "engine/train/summary.h"

namespace sluice::train {
namespace {

TEST(ModelFlopsTest, Gpt2ByHand) {
  model::ModelOptions o = train::DefaultModelOptions();
  o.family = model::Family::kGpt2;
  o.n_layer = 2;
  o.n_head = 4;
  o.n_kv_head = 4;
  o.d_model = 64;
  o.d_ff = 256;
  o.vocab_size = 256;
  o.seq_len = 64;
  // Per layer: c_attn 64 x 192 = 12288, c_proj 64 x 64 = 4096, c_fc 64 x 256 = 16384, mlp c_proj
  // 256 x 64 = 16384: 49152; two layers 98304; LM head 64 x 256 = 16384. N = 114688.
  // Attention: 12 x 2 layers x 64 x 64 = 98304. 6N = 688128.
  const ModelFlops f = CountModelFlops(o, 64);
  EXPECT_EQ(f.matmul_parameters, 114688);
  EXPECT_EQ(f.attention_per_token, 98304);
  EXPECT_EQ(f.per_token, 786432);
  // The window enters only the attention term: half the window, half that term.
  EXPECT_EQ(CountModelFlops(o, 32).per_token, 688128 + 49152);
  // A tied head is counted like an untied one: the lookup is free, the projection is not.
  o.tie_embeddings = false;
  EXPECT_EQ(CountModelFlops(o, 64).per_token, 786432);
}

TEST(ModelFlopsTest, LlamaWithGroupedQueryAttentionByHand) {
  model::ModelOptions o = train::DefaultModelOptions();
  o.family = model::Family::kLlama;
  o.n_layer = 2;
  o.n_head = 4;
  o.n_kv_head = 2;  // head_dim 16: k and v are 64 x 32
  o.d_model = 64;
  o.d_ff = 176;
  o.vocab_size = 256;
  o.seq_len = 32;
  // Per layer: q 4096 + k 2048 + v 2048 + o 4096 + gate, up, down 3 x 64 x 176 = 33792: 46080;
  // two layers 92160; head 16384. N = 108544, 6N = 651264; attention 12 x 2 x 64 x 32 = 49152.
  const ModelFlops f = CountModelFlops(o, 32);
  EXPECT_EQ(f.matmul_parameters, 108544);
  EXPECT_EQ(f.attention_per_token, 49152);
  EXPECT_EQ(f.per_token, 700416);
}

TEST(DevicePeakTest, KnownCudaProductsByName) {
  struct Case {
    const char* name;
    Precision precision;
    double tflops;
  };
  for (const Case& c : {Case{"NVIDIA H100 80GB HBM3", Precision::kBF16, 989.5},
                        Case{"NVIDIA H100 80GB HBM3", Precision::kF32, 67.0},
                        Case{"NVIDIA H100 PCIe", Precision::kBF16, 756.5},
                        Case{"NVIDIA H100 PCIe", Precision::kF32, 51.0},
                        Case{"NVIDIA H100 NVL", Precision::kF16, 835.5},
                        Case{"NVIDIA H200", Precision::kBF16, 989.5},
                        Case{"NVIDIA H200 NVL", Precision::kBF16, 835.5},
                        Case{"NVIDIA GH200 480GB", Precision::kBF16, 989.5},
                        Case{"NVIDIA A100-SXM4-80GB", Precision::kBF16, 312.0},
                        Case{"NVIDIA A100 80GB PCIe", Precision::kF32, 19.5}}) {
    std::optional<PeakFlops> peak = CudaPeakFromTable(c.name, c.precision);
    ASSERT_TRUE(peak.has_value()) << c.name;
    EXPECT_DOUBLE_EQ(peak->flops_per_s, c.tflops * 1e12) << c.name;
    EXPECT_EQ(peak->device, c.name);
    EXPECT_EQ(peak->source.rfind("table: ", 0), 0u) << peak->source;
    EXPECT_EQ(peak->dtype, PrecisionName(c.precision));
  }
  EXPECT_FALSE(CudaPeakFromTable("NVIDIA GeForce RTX 4090", Precision::kBF16).has_value());
  EXPECT_FALSE(CudaPeakFromTable("", Precision::kF32).has_value());
}

TEST(DevicePeakTest, CpuProbeIsMeasuredOnceAndQuickly) {
  const auto start = std::chrono::steady_clock::now();
  const PeakFlops first = MeasureCpuGemmPeak(/*threads=*/1);
  const double probe_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GT(first.flops_per_s, 1e8);  // any x86-64 core does 0.1 GFLOP/s in fp32
  EXPECT_LT(first.flops_per_s, 1e13);
  EXPECT_EQ(first.dtype, "f32");
  EXPECT_EQ(first.source.rfind("measured: ", 0), 0u) << first.source;
  EXPECT_LT(probe_s, 1.0);  // budgeted at 0.1 s of products; loose for a loaded CI machine
  const PeakFlops again = MeasureCpuGemmPeak(/*threads=*/1);
  EXPECT_EQ(again.flops_per_s, first.flops_per_s);  // remembered, not measured again
  EXPECT_EQ(again.source, first.source);
}

TEST(ThroughputTest, StepTflopsAndMfu) {
  StepMetrics m;
  m.tokens = 1000;
  m.model_flops = 3e12;
  m.step_time_s = 2.0;
  SetStepThroughput(/*peak_flops_per_s=*/6e12, &m);
  EXPECT_DOUBLE_EQ(m.tokens_per_s, 500.0);
  EXPECT_DOUBLE_EQ(m.tflops, 1.5);
  ASSERT_TRUE(m.mfu.has_value());
  EXPECT_DOUBLE_EQ(*m.mfu, 0.25);
  nlohmann::ordered_json j = StepMetricsToJson(m);
  EXPECT_DOUBLE_EQ(j["tflops"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(j["mfu"].get<double>(), 0.25);

  StepMetrics unknown = m;
  unknown.mfu.reset();
  SetStepThroughput(/*peak_flops_per_s=*/0.0, &unknown);
  EXPECT_FALSE(unknown.mfu.has_value());
  EXPECT_TRUE(StepMetricsToJson(unknown)["mfu"].is_null());
}

TEST(ThroughputTest, SummaryRecordsThePeakAndItsSource) {
  TrainSummary s;
  s.run_dir = "runs/x";
  s.train_s = 4.0;
  s.wall_s = 5.0;
  s.flops.per_token = 786432;
  s.flops.matmul_parameters = 114688;
  s.flops.model_flops = 2e12;
  s.flops.tflops = 0.5;
  s.flops.mfu = 0.125;
  s.flops.peak = *CudaPeakFromTable("NVIDIA H100 PCIe", Precision::kBF16);
  s.flops.total_peak_flops_per_s = 4e12;
  nlohmann::ordered_json j = SummaryToJson(s);
  const nlohmann::ordered_json& f = j["flops"];
  EXPECT_EQ(f["per_token"], 786432);
  EXPECT_DOUBLE_EQ(f["tflops"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(f["mfu"].get<double>(), 0.125);
  EXPECT_DOUBLE_EQ(f["peak"]["tflops_per_rank"].get<double>(), 756.5);
  EXPECT_DOUBLE_EQ(f["peak"]["tflops_total"].get<double>(), 4.0);
  EXPECT_EQ(f["peak"]["device"], "NVIDIA H100 PCIe");
  EXPECT_NE(f["peak"]["source"].get<std::string>().find("H100 PCIe"), std::string::npos);
  EXPECT_NE(f["formula"].get<std::string>().find("6N"), std::string::npos);
  const std::string table = FormatSummaryTable(s);
  EXPECT_NE(table.find("MFU 12.5%"), std::string::npos) << table;
  EXPECT_NE(table.find("0.5 TFLOP/s"), std::string::npos) << table;
}

}  // namespace
}  // namespace sluice::train
