// Golden loss: tiny models with fixed seeds must reproduce their stored loss curves bit for bit
// (every step's loss and gradient norm, as hex floats, and the final validation loss). Any
// numeric change -- a kernel's summation order, the optimizer, the data order, bucketing,
// prefetch or offload of later stages -- fails here with the first differing step. The curves
// are made with device.cpu_gemm deterministic (train_test_util.h): Sluice's own fixed-order GEMM,
// whose bits, like those of every other CPU kernel, do not depend on the ISA or the thread
// count, so they hold on any x86-64 CPU (ctest also runs this test with OpenBLAS forced to its
// SSE3 kernel, to catch a stored path that reaches OpenBLAS again). A deliberate change
// regenerates the curves:
//
//   SLUICE_REGENERATE_GOLDEN=1 build/tests/train_golden_test
//
// and commits tests/golden/*.json with the change that explains it.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/train/trainer.h"
#include "tests/train/train_test_util.h"

namespace sluice::train {
namespace {

using test_util::SameBits;

struct Curve {
  std::vector<double> losses;
  std::vector<double> grad_norms;
  double final_val_loss = 0.0;
};

struct GoldenCase {
  const char* name;  // tests/golden/<name>.json
  std::vector<std::string> overrides;
};

// gtest names the parameter in failure messages.
void PrintTo(const GoldenCase& c, std::ostream* os) { *os << c.name; }

std::string HexFloat(double value) { return fmt::format("{:a}", value); }

double ParseHexFloat(const std::string& text) { return std::strtod(text.c_str(), nullptr); }

std::string GoldenPath(const char* name) {
  return std::string(SLUICE_SOURCE_DIR) + "/tests/golden/" + name + ".json";
}

std::string RegenerateCommand() {
  return fmt::format("SLUICE_REGENERATE_GOLDEN=1 {} --gtest_filter='*GoldenLossTest.*'",
                     SLUICE_GOLDEN_TEST_BINARY);
}

Curve RunCurve(const std::vector<std::string>& overrides) {
  Config config = test_util::TinyGptConfig(overrides);
  TrainerOptions options = test_util::QuietTrainerOptions();
  Result<std::unique_ptr<Trainer>> trainer = Trainer::Create(config, options);
  EXPECT_TRUE(trainer.ok()) << trainer.status().ToString();
  Curve curve;
  if (!trainer.ok()) return curve;
  for (int64_t s = 0; s < config.run.steps; ++s) {
    Result<StepMetrics> m = (*trainer)->TrainStep();
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    if (!m.ok()) return curve;
    curve.losses.push_back(m->loss);
    curve.grad_norms.push_back(m->grad_norm);
  }
  Result<double> val = (*trainer)->Evaluate();
  EXPECT_TRUE(val.ok()) << val.status().ToString();
  curve.final_val_loss = val.ok() ? *val : 0.0;
  return curve;
}

void WriteGolden(const GoldenCase& c, const Curve& curve) {
  nlohmann::ordered_json json;
  json["what"] =
      "Loss curve of a tiny model trained by Sluice with a fixed seed on a synthetic corpus "
      "(tests/train/train_test_util.h); golden_loss_test.cpp compares every value bit for bit";
  json["regenerate"] = "SLUICE_REGENERATE_GOLDEN=1 build/tests/train_golden_test";
  json["overrides"] = c.overrides;
  nlohmann::ordered_json steps = nlohmann::ordered_json::array();
  for (size_t i = 0; i < curve.losses.size(); ++i) {
    nlohmann::ordered_json step;
    step["step"] = i + 1;
    step["loss"] = HexFloat(curve.losses[i]);
    step["grad_norm"] = HexFloat(curve.grad_norms[i]);
    step["loss_decimal"] = curve.losses[i];  // for people; not compared
    steps.push_back(std::move(step));
  }
  json["steps"] = std::move(steps);
  json["final_val_loss"] = HexFloat(curve.final_val_loss);
  std::ofstream out(GoldenPath(c.name));
  out << json.dump(2) << "\n";
  ASSERT_TRUE(out.good()) << "cannot write " << GoldenPath(c.name);
}

class GoldenLossTest : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(GoldenLossTest, ReproducesTheStoredCurveBitForBit) {
  const GoldenCase& c = GetParam();
  const Curve curve = RunCurve(c.overrides);
  ASSERT_EQ(curve.losses.size(), 20u);
  const char* regenerate = std::getenv("SLUICE_REGENERATE_GOLDEN");
  if (regenerate != nullptr && std::string(regenerate) == "1") {
    WriteGolden(c, curve);
    std::printf("regenerated %s\n", GoldenPath(c.name).c_str());
    return;
  }
  std::ifstream in(GoldenPath(c.name));
  ASSERT_TRUE(in.good()) << "no stored curve " << GoldenPath(c.name)
                         << "; create it with: " << RegenerateCommand();
  const nlohmann::json golden = nlohmann::json::parse(in);
  const nlohmann::json& steps = golden.at("steps");
  ASSERT_EQ(steps.size(), curve.losses.size()) << "rerun with: " << RegenerateCommand();
  for (size_t i = 0; i < steps.size(); ++i) {
    for (const char* field : {"loss", "grad_norm"}) {
      const double stored = ParseHexFloat(steps[i].at(field).get<std::string>());
      const double now = std::string(field) == "loss" ? curve.losses[i] : curve.grad_norms[i];
      ASSERT_TRUE(SameBits(stored, now))
          << c.name << ": the curve changed first at step " << i + 1 << ": " << field << " "
          << HexFloat(now) << " (" << fmt::format("{:.9g}", now) << ") != stored "
          << HexFloat(stored) << " (" << fmt::format("{:.9g}", stored) << ").\n"
          << "If this numeric change is deliberate, regenerate the stored curves with\n  "
          << RegenerateCommand() << "\nand commit tests/golden/ with the change.";
    }
  }
  const double stored_val = ParseHexFloat(golden.at("final_val_loss").get<std::string>());
  EXPECT_TRUE(SameBits(stored_val, curve.final_val_loss))
      << c.name << ": final validation loss " << HexFloat(curve.final_val_loss) << " != stored "
      << HexFloat(stored_val) << "; regenerate with " << RegenerateCommand();
}

INSTANTIATE_TEST_SUITE_P(Curves, GoldenLossTest,
                         ::testing::Values(GoldenCase{"tiny_gpt2_f32", {}},
                                           GoldenCase{"tiny_gpt2_bf16", {"bf16.enabled=true"}},
                                           GoldenCase{"tiny_llama_f32",
                                                      {"model.family=llama", "model.n_head=4",
                                                       "model.n_kv_head=2", "model.d_ff=64"}}),
                         [](const ::testing::TestParamInfo<GoldenCase>& info) {
                           return std::string(info.param.name);
                         });

// The curves above are taken with device.threads 1. Every CPU kernel behind them, the GEMM
// included (device.cpu_gemm deterministic), gives the same bits for any team size. (OpenBLAS
// does not: its multi-threaded SGEMM sums in another order than its single-threaded one, which
// is why the curves no longer go through it.)
TEST(GoldenLossThreadsTest, ThreadCountDoesNotChangeABit) {
  const Curve one = RunCurve({"device.threads=1"});
  const Curve two = RunCurve({"device.threads=2"});
  ASSERT_EQ(one.losses.size(), two.losses.size());
  for (size_t i = 0; i < one.losses.size(); ++i) {
    ASSERT_TRUE(SameBits(one.losses[i], two.losses[i]))
        << "step " << i + 1 << ": 1 thread " << HexFloat(one.losses[i]) << ", 2 threads "
        << HexFloat(two.losses[i]);
    ASSERT_TRUE(SameBits(one.grad_norms[i], two.grad_norms[i])) << "step " << i + 1;
  }
  EXPECT_TRUE(SameBits(one.final_val_loss, two.final_val_loss));
}

}  // namespace
}  // namespace sluice::train
