// DeepSpeed keys that Sluice honours (bias_correction, adam_w_mode, optimizer.type Lion and Lamb,
// zero_allow_untested_optimizer), accepts
// where they describe what Sluice does (fp32 reduction and accumulation, torch_adam), ignores with
// a warning where DeepSpeed ignores them, or refuses naming the key; "auto" as the Hugging Face
// Trainer fills it; and config check --all.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/zero/adam_hyperparams.h"
#include "engine/zero/lamb_step.h"
#include "kernels/cpu/adam.h"
#include "kernels/cpu/lamb.h"
#include "kernels/cpu/lion.h"
#include "tests/config/config_test_util.h"

namespace sluice {
namespace {

using testing::LoadJson;
using testing::LoadYaml;
using testing::MustLoadYaml;

bool HasNote(const Config& config, std::string_view text) {
  return std::any_of(config.notes.begin(), config.notes.end(),
                     [&](const std::string& note) { return note.find(text) != std::string::npos; });
}

std::string Notes(const Config& config) {
  std::string out;
  for (const std::string& note : config.notes) out += note + "\n";
  return out;
}

// The refusal's message, or "" when the config loaded.
std::string Refusal(std::string_view yaml) {
  Result<Config> config = LoadYaml(yaml);
  return config.ok() ? "" : config.status().message();
}

TEST(DeepSpeedKeys, BiasCorrectionOffReachesTheAdamKernel) {
  Config on = MustLoadYaml("train_batch_size: 1\n");
  EXPECT_TRUE(on.optimizer.bias_correction);
  Config off = MustLoadYaml(
      "train_batch_size: 1\noptimizer: {type: Adam, params: {lr: 0.1, bias_correction: false}}\n");
  EXPECT_FALSE(off.optimizer.bias_correction);

  // One step of the engine's Adam arguments on one element: without the correction the update
  // is lr * m / (sqrt(v) + eps) with m = 0.1 g, v = 0.001 g^2; with it, lr * g / (|g| + eps).
  auto step = [](const OptimizerConfig& optimizer) {
    float param = 1.0f, exp_avg = 0.0f, exp_avg_sq = 0.0f;
    const float grad = 0.5f;
    kernels::AdamTensors t;
    t.params = &param;
    t.exp_avg = &exp_avg;
    t.exp_avg_sq = &exp_avg_sq;
    t.grads = &grad;
    t.count = 1;
    kernels::AdamStep(t, zero::AdamHyperparamsFor(optimizer, optimizer.lr, 1), 1.0f);
    return param;
  };
  const double m = 0.1 * 0.5;
  const double v = 0.001 * 0.25;
  // fp32 arithmetic: a few ulps of the update; the two results are 0.2 apart.
  EXPECT_NEAR(step(off.optimizer), 1.0 - 0.1 * m / (std::sqrt(v) + 1e-8), 1e-5);
  OptimizerConfig corrected = off.optimizer;
  corrected.bias_correction = true;
  EXPECT_NEAR(step(corrected), 1.0 - 0.1, 1e-5);
}

TEST(DeepSpeedKeys, AdamWModeAndTorchAdamDescribeSluicesAdam) {
  Config adam = MustLoadYaml(
      "train_batch_size: 1\noptimizer: {type: Adam, params: {adam_w_mode: false, torch_adam: "
      "true}}\n");
  EXPECT_FALSE(adam.optimizer.adam_w_mode);
  EXPECT_TRUE(HasNote(adam,
                      "optimizer.params.torch_adam true is accepted: Sluice runs its own "
                      "Adam kernel"))
      << Notes(adam);
}

// DeepSpeed's {"type": "Lion", "params": {lr, betas, weight_decay}}: its defaults are DeepSpeed's
// (FusedLion and DeepSpeedCPULion both default to betas (0.9, 0.999) and weight_decay 0), and the
// parameters reach the Lion kernel: one step of sign(c) with decoupled decay.
TEST(DeepSpeedKeys, LionIsDeepSpeedsLion) {
  Result<Config> json = LoadJson(
      R"({"train_batch_size": 1, "optimizer": {"type": "Lion", "params": {"lr": 0.1,
          "betas": [0.5, 0.75], "weight_decay": 0.25}}})");
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  EXPECT_EQ(json->optimizer.type, OptimizerType::kLion);
  EXPECT_EQ(json->optimizer.beta1, 0.5);
  EXPECT_EQ(json->optimizer.beta2, 0.75);
  EXPECT_EQ(json->optimizer.weight_decay, 0.25);
  EXPECT_EQ(OptimizerMoments(json->optimizer.type), 1);

  Config lower = MustLoadYaml("train_batch_size: 1\noptimizer: {type: lion}\n");
  EXPECT_EQ(lower.optimizer.type, OptimizerType::kLion) << "any case, as DeepSpeed's lower()";
  EXPECT_EQ(lower.optimizer.beta1, 0.9);
  EXPECT_EQ(lower.optimizer.beta2, 0.999);
  EXPECT_EQ(lower.optimizer.weight_decay, 0.0);

  // p = 2 * (1 - 0.1 * 0.25) - 0.1 * sign(0.5 * 0 + 0.5 * -3) = 1.95 + 0.1; m = 0.25 * -3.
  float param = 2.0f, exp_avg = 0.0f;
  const float grad = -3.0f;
  kernels::LionTensors t{.params = &param, .exp_avg = &exp_avg, .grads = &grad, .count = 1};
  kernels::LionStep(t, zero::LionHyperparamsFor(json->optimizer, json->optimizer.lr), 1.0f);
  EXPECT_NEAR(param, 2.05, 1e-6);
  EXPECT_EQ(exp_avg, -0.75f);
}

// eps, adam_w_mode and bias_correction are Adam's: DeepSpeed's Lion constructors reject them (a
// TypeError), and so does Sluice, naming the key.
TEST(DeepSpeedKeys, AdamOnlyParametersAreRefusedForLion) {
  for (const char* param : {"eps: 1.0e-8", "adam_w_mode: true", "bias_correction: false"}) {
    const std::string message = Refusal(std::string("train_batch_size: 1\noptimizer: {type: Lion, "
                                                    "params: {lr: 0.001, ") +
                                        param + "}}\n");
    const std::string key = std::string("optimizer.params.") +
                            std::string(param).substr(0, std::string(param).find(':'));
    EXPECT_NE(message.find(key), std::string::npos) << message;
    EXPECT_NE(message.find("is not a parameter of optimizer.type Lion"), std::string::npos)
        << message;
  }
}

// DeepSpeed's {"type": "Lamb", "params": {...}} (FusedLamb's arguments): its defaults are
// FusedLamb's (max_coeff 10, min_coeff 0.01, eps outside the square root, bias correction on),
// and the parameters reach the LAMB kernel.
TEST(DeepSpeedKeys, LambIsDeepSpeedsFusedLamb) {
  Result<Config> json = LoadJson(
      R"({"train_batch_size": 1, "optimizer": {"type": "Lamb", "params": {"lr": 0.1,
          "betas": [0.5, 0.75], "eps": 1e-6, "weight_decay": 0.25, "bias_correction": false,
          "max_coeff": 0.5, "min_coeff": 0.125, "eps_inside_sqrt": true}}})");
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  EXPECT_EQ(json->optimizer.type, OptimizerType::kLamb);
  EXPECT_EQ(OptimizerTypeName(json->optimizer.type), "Lamb");
  EXPECT_EQ(json->optimizer.beta1, 0.5);
  EXPECT_EQ(json->optimizer.beta2, 0.75);
  EXPECT_EQ(json->optimizer.eps, 1e-6);
  EXPECT_EQ(json->optimizer.weight_decay, 0.25);
  EXPECT_FALSE(json->optimizer.bias_correction);
  EXPECT_EQ(json->optimizer.max_coeff, 0.5);
  EXPECT_EQ(json->optimizer.min_coeff, 0.125);
  EXPECT_TRUE(json->optimizer.eps_inside_sqrt);
  EXPECT_EQ(OptimizerMoments(json->optimizer.type), 2);

  Config lower = MustLoadYaml("train_batch_size: 1\noptimizer: {type: lamb}\n");
  EXPECT_EQ(lower.optimizer.type, OptimizerType::kLamb) << "any case, as DeepSpeed's lower()";
  EXPECT_EQ(lower.optimizer.max_coeff, 10.0);
  EXPECT_EQ(lower.optimizer.min_coeff, 0.01);
  EXPECT_FALSE(lower.optimizer.eps_inside_sqrt);
  EXPECT_TRUE(lower.optimizer.bias_correction);

  // One element, one step: m = 0.5 * 2 = 1, v = 0.25 * 4 = 1, u = 1 / sqrt(1 + 1e-6) + 0.25 * 4;
  // ||p|| / ||u|| = 4 / ~2 is clamped to max_coeff 0.5; p = 4 - 0.1 * 0.5 * u.
  float param = 4.0f, exp_avg = 0.0f, exp_avg_sq = 0.0f;
  const float grad = 2.0f;
  kernels::LambTensors t{
      .params = &param, .exp_avg = &exp_avg, .exp_avg_sq = &exp_avg_sq, .grads = &grad, .count = 1};
  const kernels::LambHyperparams hyper =
      zero::LambHyperparamsFor(json->optimizer, json->optimizer.lr, 1);
  const kernels::LambNormSums sums = kernels::LambMoments(t, hyper, 1.0f);
  EXPECT_EQ(kernels::LambTrustRatio(sums, hyper), 0.5f);
  kernels::LambApply(t, hyper, kernels::LambTrustRatio(sums, hyper));
  EXPECT_NEAR(param, 4.0 - 0.05 * (1.0 / std::sqrt(1.0 + 1e-6) + 1.0), 1e-6);
}

TEST(DeepSpeedKeys, LambIsRefusedWhereDeepSpeedRefusesIt) {
  // ZeRO: DeepSpeed asks for zero_allow_untested_optimizer (FusedLamb is not in its
  // ZERO_SUPPORTED_OPTIMIZERS).
  std::string message =
      Refusal("train_batch_size: 1\noptimizer: {type: Lamb}\nzero_optimization: {stage: 2}\n");
  EXPECT_NE(message.find("optimizer.type Lamb"), std::string::npos) << message;
  EXPECT_NE(message.find("zero_allow_untested_optimizer"), std::string::npos) << message;
  for (int stage = 1; stage <= 3; ++stage) {
    Result<Config> allowed = LoadYaml(
        "train_batch_size: 1\nzero_allow_untested_optimizer: true\noptimizer: "
        "{type: Lamb}\nzero_optimization: {stage: " +
        std::to_string(stage) + "}\n");
    EXPECT_TRUE(allowed.ok()) << "stage " << stage << ": " << allowed.status().ToString();
  }
  // A static loss scale: "DeepSpeed lamb optimizer requires dynamic loss scaling".
  message = Refusal(
      "train_batch_size: 1\noptimizer: {type: Lamb}\nfp16: {enabled: true, loss_scale: 128}\n");
  EXPECT_NE(message.find("fp16.loss_scale"), std::string::npos) << message;
  EXPECT_NE(message.find("dynamic loss scaling"), std::string::npos) << message;
  EXPECT_EQ(Refusal("train_batch_size: 1\noptimizer: {type: Lamb}\nfp16: {enabled: true}\n"), "");
  // Offloaded state: FusedLamb is a device kernel; Sluice's LAMB keeps the state beside the
  // parameters.
  for (const char* device : {"cpu", "nvme"}) {
    message = Refusal(std::string("train_batch_size: 1\nzero_allow_untested_optimizer: true\n"
                                  "optimizer: {type: Lamb}\nzero_optimization: {stage: 2, "
                                  "offload_optimizer: {device: ") +
                      device + ", nvme_path: /tmp}}\n");
    EXPECT_NE(message.find("optimizer.type Lamb"), std::string::npos) << message;
    EXPECT_NE(message.find("zero_optimization.offload_optimizer.device"), std::string::npos)
        << message;
  }
  // FusedLamb has no adam_w_mode (a TypeError there); the others have no Lamb parameters.
  message = Refusal("train_batch_size: 1\noptimizer: {type: Lamb, params: {adam_w_mode: true}}\n");
  EXPECT_NE(message.find("optimizer.params.adam_w_mode"), std::string::npos) << message;
  EXPECT_NE(message.find("not a parameter of optimizer.type Lamb"), std::string::npos) << message;
  for (const char* param : {"max_coeff: 5", "min_coeff: 0.1", "eps_inside_sqrt: true"}) {
    for (const char* type : {"AdamW", "Lion"}) {
      message = Refusal(std::string("train_batch_size: 1\noptimizer: {type: ") + type +
                        ", params: {" + param + "}}\n");
      const std::string key = std::string("optimizer.params.") +
                              std::string(param).substr(0, std::string(param).find(':'));
      EXPECT_NE(message.find(key), std::string::npos) << message;
      EXPECT_NE(message.find("Lamb only"), std::string::npos) << message;
    }
  }
  message = Refusal(
      "train_batch_size: 1\noptimizer: {type: Lamb, params: {max_coeff: 0.5, min_coeff: 1}}\n");
  EXPECT_NE(message.find("min_coeff"), std::string::npos) << message;
  EXPECT_NE(message.find("max_coeff"), std::string::npos) << message;
  message = Refusal("train_batch_size: 1\noptimizer: {type: Lamb, params: {max_grad_norm: 1.0}}\n");
  EXPECT_NE(message.find("gradient_clipping"), std::string::npos) << message;
}

TEST(DeepSpeedKeys, Fp32ReductionAndAccumulationAreAccepted) {
  Config c = MustLoadYaml(
      "train_batch_size: 1\ncommunication_data_type: FP32\n"
      "data_types: {grad_accum_dtype: fp32}\nfp32_allreduce: true\n");
  EXPECT_TRUE(HasNote(c,
                      "communication_data_type FP32 is accepted: Sluice reduces gradients in "
                      "fp32"))
      << Notes(c);
  EXPECT_TRUE(HasNote(c, "grad_accum_dtype fp32 is accepted: Sluice accumulates gradients in fp32"))
      << Notes(c);
  EXPECT_TRUE(HasNote(c, "fp32_allreduce is ignored, as DeepSpeed ignores it")) << Notes(c);
}

TEST(DeepSpeedKeys, HalfPrecisionReductionIsRefusedTruthfully) {
  std::string message = Refusal("train_batch_size: 1\ncommunication_data_type: bf16\n");
  EXPECT_NE(message.find("communication_data_type"), std::string::npos) << message;
  EXPECT_NE(message.find("Sluice reduces gradients in fp32 only"), std::string::npos) << message;
  message = Refusal("train_batch_size: 1\ndata_types: {grad_accum_dtype: bf16}\n");
  EXPECT_NE(message.find("data_types.grad_accum_dtype"), std::string::npos) << message;
  EXPECT_NE(message.find("fp32"), std::string::npos) << message;
  // No message may say that gradients travel or add up in the model's dtype.
  for (const char* yaml : {"train_batch_size: 1\ncommunication_data_type: fp16\n",
                           "train_batch_size: 1\ndata_types: {grad_accum_dtype: fp16}\n"}) {
    EXPECT_EQ(Refusal(yaml).find("model dtype"), std::string::npos) << yaml;
  }
}

// prescale_gradients and gradient_predivide_factor are honoured at stages 0 and 1 (the
// all-reduce, as DeepSpeed's engine honours them) and refused at stages 2 and 3, as DeepSpeed's
// ZeRO optimizers refuse them with reduce_scatter on, which Sluice always is there.
TEST(DeepSpeedKeys, GradientScalingKeysAreHonouredWhereDeepSpeedHonoursThem) {
  Config defaults = MustLoadYaml(
      "train_batch_size: 1\nprescale_gradients: false\ngradient_predivide_factor: 1.0\n"
      "zero_optimization: {stage: 3}\n");
  EXPECT_FALSE(defaults.prescale_gradients);
  EXPECT_EQ(defaults.gradient_predivide_factor, 1.0);
  EXPECT_FALSE(HasNote(defaults, "prescale_gradients")) << Notes(defaults);

  Config prescale = MustLoadYaml("train_batch_size: 1\nprescale_gradients: true\n");
  EXPECT_TRUE(prescale.prescale_gradients);
  EXPECT_EQ(prescale.values.entry("prescale_gradients").source, ValueSource::kFile);
  Config factor = MustLoadYaml(
      "train_batch_size: 1\ngradient_predivide_factor: 8\nzero_optimization: {stage: 1}\n");
  EXPECT_EQ(factor.gradient_predivide_factor, 8.0);
  EXPECT_TRUE(HasNote(factor,
                      "gradient_predivide_factor 8 (set at <config>:2:1) is honoured at "
                      "zero_optimization.stage 1"))
      << Notes(factor);
  // With prescale the factor has no part, in DeepSpeed as here.
  Config both =
      MustLoadYaml("train_batch_size: 1\nprescale_gradients: true\ngradient_predivide_factor: 4\n");
  EXPECT_TRUE(HasNote(both,
                      "gradient_predivide_factor 4 (set at <config>:3:1) is ignored with "
                      "prescale_gradients true, as DeepSpeed ignores it"))
      << Notes(both);

  for (int stage : {2, 3}) {
    const std::string zero = "zero_optimization: {stage: " + std::to_string(stage) + "}\n";
    std::string message = Refusal("train_batch_size: 1\nprescale_gradients: true\n" + zero);
    EXPECT_NE(message.find("prescale_gradients true (set at <config>:2:1) is refused at "
                           "zero_optimization.stage " +
                           std::to_string(stage)),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("pre-scale gradients is not yet supported with ZeRO-" +
                           std::to_string(stage) + " with reduce scatter enabled"),
              std::string::npos)
        << message;
    message = Refusal("train_batch_size: 1\ngradient_predivide_factor: 8\n" + zero);
    EXPECT_NE(message.find("gradient_predivide_factor 8 (set at <config>:2:1) is refused at "
                           "zero_optimization.stage " +
                           std::to_string(stage)),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("set gradient_predivide_factor: 1.0"), std::string::npos) << message;
  }
  EXPECT_NE(Refusal("train_batch_size: 1\ngradient_predivide_factor: 0\n")
                .find("gradient_predivide_factor"),
            std::string::npos);
}

TEST(DeepSpeedKeys, KeysDeepSpeedIgnoresWarn) {
  Config c = MustLoadYaml(
      "train_batch_size: 1\ncuda_visible_devices: 0\ndisable_allgather: true\n"
      "fp32_allreduce: false\nseq_parallel_communication_data_type: bf16\n"
      "_comment: written for 8 GPUs\n"
      "zero_optimization: {stage: 2, offload_param: {device: cpu, pin_memory: true}}\n");
  for (const char* key : {"cuda_visible_devices", "disable_allgather", "fp32_allreduce",
                          "seq_parallel_communication_data_type"}) {
    EXPECT_TRUE(HasNote(c, std::string(key) + " is ignored, as DeepSpeed ignores it")) << Notes(c);
  }
  EXPECT_TRUE(HasNote(c, "_comment is read as a comment")) << Notes(c);
  // offload_param below stage 3: ignored as DeepSpeed ignores it, so nothing is offloaded.
  EXPECT_EQ(c.zero.offload_param.device, OffloadDevice::kNone);
  EXPECT_TRUE(HasNote(c, "offload_param.device cpu")) << Notes(c);
  EXPECT_EQ(c.values.entry("zero_optimization.offload_param.device").source, ValueSource::kDerived);
  // A comment key is a top-level convention only: inside a section it is an unknown key.
  EXPECT_NE(Refusal("train_batch_size: 1\nzero_optimization: {_comment: x}\n").find("unknown key"),
            std::string::npos);
}

TEST(DeepSpeedKeys, KnobsThatDoNotChangeResultsAreAccepted) {
  Config c = MustLoadYaml(
      "train_batch_size: 1\nmonitor_config: {enabled: true}\n"
      "zero_optimization: {stage: 3, sub_group_size: 0, round_robin_gradients: true}\n");
  EXPECT_EQ(c.zero.sub_group_size, 1000000000);
  EXPECT_TRUE(HasNote(c, "sub_group_size 0")) << Notes(c);
  EXPECT_TRUE(HasNote(c, "round_robin_gradients true is accepted")) << Notes(c);
  EXPECT_TRUE(HasNote(c, "monitor_config is ignored")) << Notes(c);
  EXPECT_NE(Refusal("train_batch_size: 1\nzero_optimization: {sub_group_size: -1}\n")
                .find("sub_group_size"),
            std::string::npos);
}

// The parameters of a refused DeepSpeed optimizer are its own, not typos: the refusal names the
// optimizer even when they come first.
TEST(DeepSpeedKeys, RefusedOptimizerIsNamedBeforeItsParameters) {
  std::string message = Refusal(
      "train_batch_size: 1\noptimizer: {params: {max_coeff: 0.3, lr: 0.1}, type: OneBitLamb}\n");
  EXPECT_NE(message.find("optimizer.type: \"OneBitLamb\" is a DeepSpeed optimizer"),
            std::string::npos)
      << message;
  // A typo under a supported optimizer stays an error.
  message = Refusal("train_batch_size: 1\noptimizer: {type: Adam, params: {max_coef: 0.3}}\n");
  EXPECT_NE(message.find("unknown key optimizer.params.max_coef"), std::string::npos) << message;
}

TEST(DeepSpeedKeys, AutoIsFilledAsTheHuggingFaceTrainerFillsIt) {
  Config c = MustLoadYaml(R"(
train_batch_size: auto
train_micro_batch_size_per_gpu: auto
gradient_accumulation_steps: auto
gradient_clipping: auto
optimizer: {type: AdamW, params: {lr: auto, betas: auto, eps: auto, weight_decay: auto}}
scheduler:
  type: WarmupDecayLR
  params: {warmup_min_lr: auto, warmup_max_lr: auto, warmup_num_steps: auto, total_num_steps: auto}
zero_optimization: {stage: 3, stage3_gather_16bit_weights_on_model_save: auto}
run: {steps: 40}
)");
  EXPECT_EQ(c.batch.micro_batch_per_gpu, 8);  // per_device_train_batch_size
  EXPECT_EQ(c.batch.gradient_accumulation_steps, 1);
  EXPECT_EQ(c.batch.train_batch_size, 8);
  EXPECT_DOUBLE_EQ(c.gradient_clipping, 1.0);  // max_grad_norm
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 5e-5);      // learning_rate
  EXPECT_DOUBLE_EQ(c.optimizer.beta1, 0.9);
  EXPECT_DOUBLE_EQ(c.optimizer.beta2, 0.999);
  EXPECT_DOUBLE_EQ(c.optimizer.eps, 1e-8);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.0);
  EXPECT_DOUBLE_EQ(c.scheduler.warmup_max_lr, 5e-5);  // learning_rate
  EXPECT_DOUBLE_EQ(c.scheduler.warmup_min_lr, 0.0);
  EXPECT_EQ(c.scheduler.warmup_num_steps, 0);  // warmup_steps / warmup_ratio
  EXPECT_EQ(c.scheduler.total_num_steps, 40);  // run.steps: the Trainer's num_training_steps
  EXPECT_FALSE(c.zero.stage3_gather_16bit_weights_on_model_save);
  EXPECT_NE(c.values.entry("optimizer.params.lr").note.find("learning_rate"), std::string::npos);

  // Given batch keys win over the Trainer's default, by DeepSpeed's rule.
  Config given = MustLoadYaml(
      "train_batch_size: 64\ntrain_micro_batch_size_per_gpu: auto\n"
      "gradient_accumulation_steps: 4\n");
  EXPECT_EQ(given.batch.micro_batch_per_gpu, 16);
}

TEST(DeepSpeedKeys, WarmUpLongerThanTheRunWarns) {
  Config c = MustLoadYaml(
      "train_batch_size: 1\nrun: {steps: 50}\nscheduler: {type: WarmupDecayLR, params: "
      "{warmup_num_steps: 100, total_num_steps: 80}}\n");
  EXPECT_TRUE(HasNote(c, "total_num_steps 80 is less than warmup_num_steps 100")) << Notes(c);
  EXPECT_TRUE(HasNote(c, "warmup_num_steps 100")) << Notes(c);
  EXPECT_TRUE(HasNote(c, "is longer than the run (run.steps 50")) << Notes(c);
  Config fits = MustLoadYaml(
      "train_batch_size: 1\nrun: {steps: 500}\nscheduler: {type: WarmupLR, params: "
      "{warmup_num_steps: 100}}\n");
  EXPECT_FALSE(HasNote(fits, "warmup_num_steps")) << Notes(fits);
}

TEST(DeepSpeedKeys, CheckAllListsEveryKeySluiceWillNotRun) {
  std::vector<ConfigLayer> layers;
  Result<ConfigNode> root = ParseConfigText(R"({
  "train_batch_size": 8,
  "optimizer": {"type": "Adagrad", "params": {"lr": 0.001}},
  "sparse_gradients": true,
  "zero_optimization": {"stage": 2, "zero_quantized_weights": true, "reduce_bucket_sise": 5},
  "communication_data_type": "fp16",
  "fp16": {"enabled": true}
})",
                                            ConfigFormat::kJson, "ds.json");
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  layers.push_back({*root, "ds.json"});
  ConfigSources sources = testing::IsolatedSources();
  sources.set_overrides = {"zero_optimization.stage=9"};
  ConfigCheckReport report = CheckConfigLayersAll(layers, sources);
  EXPECT_FALSE(report.config.has_value());
  std::vector<std::string> messages;
  for (const Status& s : report.problems) messages.push_back(s.message());
  ASSERT_EQ(messages.size(), 6u) << ::testing::PrintToString(messages);
  EXPECT_NE(messages[0].find("optimizer.type: \"Adagrad\""), std::string::npos) << messages[0];
  EXPECT_NE(messages[1].find("sparse_gradients"), std::string::npos) << messages[1];
  EXPECT_NE(messages[2].find("zero_quantized_weights"), std::string::npos) << messages[2];
  EXPECT_NE(messages[3].find("did you mean zero_optimization.reduce_bucket_size"),
            std::string::npos)
      << messages[3];
  EXPECT_NE(messages[4].find("communication_data_type"), std::string::npos) << messages[4];
  EXPECT_NE(messages[5].find("--set zero_optimization.stage=9"), std::string::npos) << messages[5];

  // A clean config: no problem, and the config LoadConfig gives.
  Result<ConfigNode> good = ParseConfigText("train_batch_size: 4\n", ConfigFormat::kYaml, "g.yaml");
  ASSERT_TRUE(good.ok());
  ConfigCheckReport clean = CheckConfigLayersAll({{*good, "g.yaml"}}, testing::IsolatedSources());
  EXPECT_TRUE(clean.problems.empty()) << clean.problems.front().ToString();
  ASSERT_TRUE(clean.config.has_value());
  EXPECT_EQ(clean.config->batch.train_batch_size, 4);
  // Keys that all apply but break a rule over several keys: that rule is the one problem.
  Result<ConfigNode> batch = ParseConfigText(
      "{\"train_batch_size\": 10, \"train_micro_batch_size_per_gpu\": 3, "
      "\"gradient_accumulation_steps\": 1}",
      ConfigFormat::kJson, "b.json");
  ASSERT_TRUE(batch.ok());
  ConfigCheckReport rule = CheckConfigLayersAll({{*batch, "b.json"}}, testing::IsolatedSources());
  ASSERT_EQ(rule.problems.size(), 1u);
  EXPECT_NE(rule.problems[0].message().find("Check batch related parameters"), std::string::npos);
}

}  // namespace
}  // namespace sluice
