// Malformed configs: each case asserts the message a user sees (key path, value, what is
// allowed, file:line:col). The same strings are what `sluice config check` prints.
#include <gtest/gtest.h>

#include <vector>

#include "config_test_util.h"

namespace sluice {
namespace {

using testing::IsolatedSources;

struct ErrorCase {
  const char* name;
  ConfigFormat format;
  const char* text;
  std::vector<const char*> expected;  // substrings of the error message
  std::vector<std::string> sets = {};
  std::vector<std::pair<std::string, std::string>> env = {};
  int world_size = 1;
  StatusCode code = StatusCode::kInvalidArgument;
};

constexpr ConfigFormat kYaml = ConfigFormat::kYaml;
constexpr ConfigFormat kJson = ConfigFormat::kJson;

class MalformedConfigTest : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(MalformedConfigTest, IsRejectedWithItsMessage) {
  const ErrorCase& c = GetParam();
  ConfigSources sources = IsolatedSources();
  sources.set_overrides = c.sets;
  sources.env = c.env;
  sources.world_size = c.world_size;
  Result<Config> config =
      LoadConfigFromText(c.text, c.format, sources, c.format == kJson ? "bad.json" : "bad.yaml");
  ASSERT_FALSE(config.ok()) << "accepted:\n" << c.text;
  EXPECT_EQ(config.status().code(), c.code) << config.status().ToString();
  for (const char* want : c.expected) {
    EXPECT_NE(config.status().message().find(want), std::string::npos)
        << "want: " << want << "\ngot:  " << config.status().message();
  }
}

const ErrorCase kCases[] = {
    // Unknown keys: full path and the nearest known key.
    {"UnknownTopLevelKey",
     kYaml,
     "train_batch_size: 8\ntrain_batch_sise: 8\n",
     {"bad.yaml:2:1: unknown key train_batch_sise (did you mean train_batch_size?)"}},
    {"UnknownNestedKey",
     kYaml,
     "train_batch_size: 8\nzero_optimization:\n  stage: 3\n  offload_optimizer:\n"
     "    device: cpu\n    pin_memry: true\n",
     {"bad.yaml:6:5: unknown key zero_optimization.offload_optimizer.pin_memry (did you mean "
      "zero_optimization.offload_optimizer.pin_memory?)"}},
    {"UnknownKeyInJson",
     kJson,
     "{\"train_batch_size\": 8,\n \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1,"
     " \"wieght_decay\": 0.1}}}",
     {"bad.json:2:53: unknown key optimizer.params.wieght_decay (did you mean "
      "optimizer.params.weight_decay?)"}},
    {"KeyInTheWrongSection",
     kYaml,
     "train_batch_size: 8\nzero_optimization:\n  pin_memory: true\n",
     {"unknown key zero_optimization.pin_memory (pin_memory is a key of "
      "zero_optimization.offload_optimizer.pin_memory and "
      "zero_optimization.offload_param.pin_memory)"}},
    {"UnknownKeyWithoutNeighbour",
     kYaml,
     "train_batch_size: 8\nfrobnicate_everything: 1\n",
     {"unknown key frobnicate_everything; the keys of the top level are: ", "zero_optimization"}},
    {"UnknownSectionCase",
     kYaml,
     "train_batch_size: 8\nOptimizer: {type: AdamW}\n",
     {"unknown key Optimizer (did you mean optimizer?)"}},
    // Known DeepSpeed keys Sluice does not support yet.
    {"UnsupportedZeroKey",
     kYaml,
     "train_batch_size: 8\nzero_optimization: {stage: 3, zero_quantized_weights: true}\n",
     {"bad.yaml:2:31: known DeepSpeed key zero_optimization.zero_quantized_weights is not "
      "supported by Sluice yet (Sluice always behaves as zero_optimization.zero_quantized_weights: "
      "false"},
     {},
     {},
     1,
     StatusCode::kUnimplemented},
    {"UnsupportedMicsShardSize",
     kJson,
     "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 3, \"mics_shard_size\": 8}}",
     {"known DeepSpeed key zero_optimization.mics_shard_size is not supported by Sluice yet"},
     {},
     {},
     1,
     StatusCode::kUnimplemented},
    {"TensorParallelHeadsDoNotSplit",
     kYaml,
     "train_batch_size: 8\nmodel: {d_model: 96, n_head: 3}\ntensor_parallel: {autotp_size: 2}\n",
     {"model.n_head = 3 does not split over tensor_parallel.autotp_size = 2", "(set at"},
     {},
     {},
     2},
    {"TensorParallelLambNotYet",
     kYaml,
     "train_batch_size: 8\noptimizer: {type: Lamb}\ntensor_parallel: {autotp_size: 2}\n",
     {"optimizer.type Lamb (set at", "tensor_parallel.autotp_size = 2 (set at", "trust ratio"},
     {},
     {},
     2,
     StatusCode::kUnimplemented},
    {"PipelineStagesMustDivideTheWorld",
     kYaml,
     "train_batch_size: 8\npipeline: {stages: 2}\n",
     {"the 1 rank(s) of this run do not divide", "pipeline.stages 2"},
     {},
     {},
     1,
     StatusCode::kInvalidArgument},
    {"UnsupportedTensorParallelKey",
     kYaml,
     "train_batch_size: 8\ntensor_parallel: {autotp_size: 1, tp_overlap_comm: true}\n",
     {"known DeepSpeed key tensor_parallel.tp_overlap_comm is not supported by Sluice yet"},
     {},
     {},
     1,
     StatusCode::kUnimplemented},
    {"UnsupportedZenflow",
     kYaml,
     "train_batch_size: 8\nzero_optimization: {stage: 3, zenflow: {topk_ratio: 0.1}}\n",
     {"known DeepSpeed key zero_optimization.zenflow is not supported by Sluice yet"},
     {},
     {},
     1,
     StatusCode::kUnimplemented},
    {"UnsupportedSuperOffload",
     kYaml,
     "train_batch_size: 8\nzero_optimization:\n  stage: 3\n  offload_optimizer: {device: cpu, "
     "super_offload: true}\n",
     {"known DeepSpeed key zero_optimization.offload_optimizer.super_offload is not supported"},
     {},
     {},
     1,
     StatusCode::kUnimplemented},
    {"UnsupportedFp16AutoCast",
     kYaml,
     "train_batch_size: 8\nfp16: {enabled: true, auto_cast: true}\n",
     {"known DeepSpeed key fp16.auto_cast is not supported by Sluice yet"},
     {},
     {},
     1,
     StatusCode::kUnimplemented},
    {"UnsupportedCommunicationDataType",
     kJson,
     "{\"train_batch_size\": 8, \"communication_data_type\": \"bf16\"}",
     {"known DeepSpeed key communication_data_type is not supported by Sluice yet (Sluice always "
      "behaves as communication_data_type: fp32; remove the key or set it to that; Sluice reduces "
      "gradients in fp32 only)"},
     {},
     {},
     1,
     StatusCode::kUnimplemented},
    {"UnsupportedMonitorEnabled",
     kYaml,
     "train_batch_size: 8\nwandb: {enabled: true, project: x}\n",
     {"known DeepSpeed key wandb is not supported by Sluice yet (remove the section or set "
      "enabled: false; Weights & Biases logs to a network service, which Sluice does not reach; "
      "tensorboard and csv_monitor write the same scalars to local files)"},
     {},
     {},
     1,
     StatusCode::kUnimplemented},
    {"UnsupportedOptimizerType",
     kYaml,
     "train_batch_size: 8\noptimizer: {type: Adagrad}\n",
     {"optimizer.type: \"Adagrad\" is a DeepSpeed optimizer that Sluice does not support yet (one "
      "of: Adam, AdamW, Lion, Lamb (any case))"},
     {},
     {},
     1,
     StatusCode::kUnimplemented},
    {"UnsupportedAmsgrad",
     kYaml,
     "train_batch_size: 8\noptimizer: {type: Adam, params: {amsgrad: true}}\n",
     {"known DeepSpeed key optimizer.params.amsgrad is not supported by Sluice yet"},
     {},
     {},
     1,
     StatusCode::kUnimplemented},
    {"MaxGradNorm",
     kYaml,
     "train_batch_size: 8\noptimizer: {type: AdamW, params: {max_grad_norm: 1.0}}\n",
     {"'max_grad_norm' is not supported as an optimizer parameter, please switch to using the "
      "deepspeed parameter 'gradient_clipping'"}},
    // Wrong types and out-of-range values: key, value, what is allowed.
    {"StageNotANumber",
     kYaml,
     "train_batch_size: 8\nzero_optimization: {stage: three}\n",
     {"zero_optimization.stage: expected an integer 0 to 3, got \"three\""}},
    {"StageQuotedInJson",
     kJson,
     "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": \"3\"}}",
     {"zero_optimization.stage: expected an integer 0 to 3, got the string \"3\""}},
    {"StageOutOfRange",
     kYaml,
     "train_batch_size: 8\nzero_optimization:\n  stage: 4\n",
     {"bad.yaml:3:3: zero_optimization.stage: 4 is out of range: allowed an integer 0 to 3"},
     {},
     {},
     1,
     StatusCode::kOutOfRange},
    // The pipeline's chunks go with the interleaved schedule only; the partition method's name
    // and regex are checked where they are read.
    {"InterleavedWithOneChunk",
     kYaml,
     "train_batch_size: 8\npipeline:\n  schedule: interleaved-1f1b\n  chunks: 1\n",
     {"pipeline.chunks = 1", "interleaving needs at least 2 model chunks per stage"}},
    {"ChunksWithoutInterleaving",
     kYaml,
     "train_batch_size: 8\npipeline:\n  chunks: 3\n",
     {"pipeline.chunks = 3", "with pipeline.schedule 1f1b: only interleaved-1f1b runs several"}},
    {"UnknownPartitionMethod",
     kYaml,
     "train_batch_size: 8\npipeline:\n  partition_method: layers\n",
     {"pipeline.partition_method \"layers\" is not a partition method", "type:<regex>"}},
    {"PartitionRegexThatDoesNotCompile",
     kYaml,
     "train_batch_size: 8\npipeline:\n  partition_method: \"type:(\"\n",
     {"pipeline.partition_method \"type:(\"", "is not a valid regex"}},
    // Past 10^7 s the collectives' deadline would overflow its clock (every one timing out at
    // once): refused where it is read.
    {"CommTimeoutPastTheClock",
     kYaml,
     "train_batch_size: 8\nrun:\n  comm_timeout: 1.0e10\n",
     {"bad.yaml:3:3: run.comm_timeout: 10000000000 is out of range: allowed a number > 0 and <= "
      "10000000"},
     {},
     {},
     1,
     StatusCode::kOutOfRange},
    {"BoolGivenNumber",
     kJson,
     "{\"train_batch_size\": 8, \"zero_optimization\": {\"overlap_comm\": 1}}",
     {"zero_optimization.overlap_comm: expected true or false, got the number 1"}},
    {"NonIntegralBatch",
     kYaml,
     "train_batch_size: 2.5\n",
     {"train_batch_size: expected an integer >= 1, got \"2.5\""}},
    {"NegativeSize",
     kYaml,
     "train_batch_size: 8\ndevice: {type: cpu, memory_limit: -5MiB}\n",
     {"device.memory_limit: byte size \"-5MiB\" is negative"}},
    {"BadSizeUnit",
     kYaml,
     "train_batch_size: 8\ndevice: {type: cpu, memory_limit: 64XB}\n",
     {"device.memory_limit: unknown unit \"XB\" in byte size \"64XB\"; use B, KiB, MiB, GiB, TiB"}},
    {"BadEnum",
     kYaml,
     "train_batch_size: 8\nzero_optimization: {stage: 2, offload_optimizer: {device: disk}}\n",
     {"zero_optimization.offload_optimizer.device: \"disk\" is not allowed: one of: none, cpu, "
      "nvme"}},
    {"BadSchedulerType",
     kYaml,
     "train_batch_size: 8\nscheduler: {type: Cosine}\n",
     {"scheduler.type: \"Cosine\" is not allowed: one of: WarmupLR, WarmupDecayLR, "
      "WarmupCosineLR"}},
    {"BetasWrongLength",
     kYaml,
     "train_batch_size: 8\noptimizer: {params: {betas: [0.9, 0.99, 0.999]}}\n",
     {"optimizer.params.betas: [0.9, 0.99, 0.999] has 3 elements: expected a list of 2 numbers"}},
    {"NegativeLossScale",
     kYaml,
     "train_batch_size: 8\nfp16: {enabled: true, loss_scale: -1}\n",
     {"fp16.loss_scale: -1 is out of range: allowed a number >= 0"},
     {},
     {},
     1,
     StatusCode::kOutOfRange},
    {"SectionGivenScalar",
     kYaml,
     "train_batch_size: 8\noptimizer: adam\n",
     {"bad.yaml:2:1: optimizer is a section: expected a mapping, got \"adam\""}},
    {"RootIsAList",
     kYaml,
     "- train_batch_size: 8\n",
     {"a config is a mapping of keys, got a list"}},
    // Cross-key rules.
    {"Fp16AndBf16",
     kYaml,
     "train_batch_size: 8\nfp16: {enabled: true}\nbf16: {enabled: true}\n",
     {"bfloat16 and fp16 modes cannot be simultaneously enabled"}},
    {"DtypeDisagreesWithSections",
     kYaml,
     "train_batch_size: 8\nbf16: {enabled: true}\nmodel: {dtype: f16}\n",
     {"model.dtype f16 (set at bad.yaml:3:9) disagrees with bf16.enabled true (set at "
      "bad.yaml:2:8): model.dtype follows the precision sections"}},
    {"BatchMismatch",
     kYaml,
     "train_batch_size: 10\ntrain_micro_batch_size_per_gpu: 3\ngradient_accumulation_steps: 1\n",
     {"bad.yaml: Check batch related parameters. train_batch_size is not equal to "
      "micro_batch_per_gpu * gradient_acc_step * world_size 10 != 3 * 1 * 2"},
     {},
     {},
     2},
    {"NoBatchSize",
     kYaml,
     "gradient_accumulation_steps: 4\n",
     {"Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided"}},
    {"PartialOffloadNeedsStage3",
     kYaml,
     "train_batch_size: 8\nzero_optimization: {stage: 2, offload_optimizer: {device: cpu, "
     "ratio: 0.5}}\n",
     {"zero_optimization.offload_optimizer.ratio 0.5", "needs zero_optimization.stage 3",
      "Partial offloading only supported for ZeRO Stage 3."}},
    {"NvmeWithoutPath",
     kYaml,
     "train_batch_size: 8\nzero_optimization: {stage: 3, offload_param: {device: nvme}}\n",
     {"zero_optimization.offload_param.device is nvme (set at bad.yaml:2:47) but "
      "zero_optimization.offload_param.nvme_path is not set"}},
    {"AioBlockSizeNotAligned",
     kYaml,
     "train_batch_size: 8\naio: {block_size: 6000}\n",
     {"aio.block_size 6000 (set at bad.yaml:2:7) must be a multiple of 4096 bytes"}},
    {"AioQueueDepthTooDeep",
     kYaml,
     "train_batch_size: 8\naio: {queue_depth: 5000}\n",
     {"aio.queue_depth: 5000 is out of range: allowed an integer 1 to 4096"},
     {},
     {},
     1,
     StatusCode::kOutOfRange},
    // The ZeRO engine's settings are validated here only (the engine trusts a loaded config).
    {"ReduceBucketSizeZero",
     kYaml,
     "train_batch_size: 8\nzero_optimization: {reduce_bucket_size: 0}\n",
     {"zero_optimization.reduce_bucket_size: 0 is out of range"},
     {},
     {},
     1,
     StatusCode::kOutOfRange},
    {"PrescaleAtStage2",
     kYaml,
     "train_batch_size: 8\nprescale_gradients: true\nzero_optimization: {stage: 2}\n",
     {"prescale_gradients true (set at bad.yaml:2:1) is refused at zero_optimization.stage 2"}},
    {"PredivideFactorAtStage3",
     kYaml,
     "train_batch_size: 8\ngradient_predivide_factor: 8\nzero_optimization: {stage: 3}\n",
     {"gradient_predivide_factor 8", "is refused at zero_optimization.stage 3"}},
    {"NvmeParametersNeedAnOffloadedOptimizer",
     kYaml,
     "train_batch_size: 8\nzero_optimization: {stage: 3, offload_param: {device: nvme, "
     "nvme_path: /tmp}}\n",
     {"zero_optimization.offload_param.device nvme (set at bad.yaml:2:",
      "needs zero_optimization.offload_optimizer.device cpu or nvme"}},
    {"PartialOffloadWithNvmeParameters",
     kYaml,
     "train_batch_size: 8\nzero_optimization: {stage: 3, offload_optimizer: {device: cpu, ratio: "
     "0.5}, offload_param: {device: nvme, nvme_path: /tmp}}\n",
     {"zero_optimization.offload_optimizer.ratio 0.5",
      "cannot be combined with zero_optimization.offload_param.device nvme"}},
    {"LionPartialOffload",
     kYaml,
     "train_batch_size: 8\noptimizer: {type: Lion}\nzero_optimization: {stage: 3, "
     "offload_optimizer: {device: cpu, ratio: 0.5}}\n",
     {"optimizer.type Lion", "zero_optimization.offload_optimizer.ratio 0.5",
      "(a partial offload) is not supported yet"}},
    {"LambWithOffloadedState",
     kYaml,
     "train_batch_size: 8\nzero_allow_untested_optimizer: true\noptimizer: {type: Lamb}\n"
     "zero_optimization: {stage: 2, offload_optimizer: {device: cpu}}\n",
     {"optimizer.type Lamb with zero_optimization.offload_optimizer.device cpu",
      "DeepSpeed's FusedLamb has no CPU kernel"}},
    {"OffloadRatioAboveOne",
     kYaml,
     "train_batch_size: 8\nzero_optimization: {stage: 3, offload_optimizer: {device: cpu, ratio: "
     "1.5}}\n",
     {"zero_optimization.offload_optimizer.ratio: 1.5 is out of range"},
     {},
     {},
     1,
     StatusCode::kOutOfRange},
    {"OptimizerOffloadNeedsZero",
     kYaml,
     "train_batch_size: 8\nzero_optimization: {offload_optimizer: {device: cpu}}\n",
     {"zero_optimization.offload_optimizer.device cpu", "needs zero_optimization.stage 1, 2 or 3"}},
    {"CpuDeviceNeedsMemoryLimit",
     kYaml,
     "train_batch_size: 8\ndevice: {type: cpu}\n",
     {"device.memory_limit is required for the cpu device", "256MiB"}},
    {"SchedulerParamOfAnotherType",
     kYaml,
     "train_batch_size: 8\nscheduler: {type: WarmupLR, params: {cos_min_ratio: 0.1}}\n",
     {"scheduler.params.cos_min_ratio (set at bad.yaml:2:38) is not a parameter of WarmupLR (its "
      "parameters: warmup_min_lr, warmup_max_lr, warmup_num_steps, warmup_type, "
      "last_batch_iteration)"}},
    {"SchedulerParamsWithoutType",
     kYaml,
     "train_batch_size: 8\nscheduler: {params: {warmup_num_steps: 10}}\n",
     {"scheduler.params.warmup_num_steps (set at bad.yaml:2:22) is set but scheduler.type is not"}},
    {"TotalStepsRequired",
     kYaml,
     "train_batch_size: 8\nscheduler: {type: WarmupCosineLR}\n",
     {"scheduler.params.total_num_steps is required for WarmupCosineLR",
      "\"auto\" to use run.steps"}},
    {"Gpt2WithGroupedQueryAttention",
     kYaml,
     "train_batch_size: 8\nmodel: {family: gpt2, n_head: 4, n_kv_head: 2}\n",
     {"model.n_kv_head = 2 differs from model.n_head = 4, but gpt2 uses multi-head attention",
      "(model.family set at bad.yaml:2:9; model.n_head set at bad.yaml:2:23; model.n_kv_head set "
      "at bad.yaml:2:34)"}},
    {"HeadsDoNotDivideWidth",
     kYaml,
     "train_batch_size: 8\nmodel: {d_model: 100, n_head: 3}\n",
     {"model.d_model = 100 is not a multiple of model.n_head = 3"}},
    {"AliasAndNameBothGiven",
     kYaml,
     "train_batch_size: 8\naio:\n  thread_count: 2\n  intra_op_parallelism: 4\n",
     {"bad.yaml:4:3: aio.intra_op_parallelism is given twice (also as aio.thread_count at "
      "bad.yaml:3:3)"}},
    {"AutoUnresolvable",
     kYaml,
     "train_batch_size: 8\nzero_optimization: {stage: auto}\n",
     {"zero_optimization.stage: \"auto\" cannot be resolved: nothing in the config defines this "
      "key; give an integer 0 to 3"}},
    // Syntax errors: file, line and column.
    {"YamlSyntaxError",
     kYaml,
     "train_batch_size: 8\nmodel:\n  n_layer: 2\n   d_model: 3\n",
     {"bad.yaml:4:11: YAML syntax error: illegal map value"}},
    {"JsonSyntaxError",
     kJson,
     "{\n  \"train_batch_size\": 8,\n}",
     {"bad.json:3:1: JSON syntax error: syntax error while parsing object key - unexpected '}'"}},
    {"JsonMissingComma",
     kJson,
     "{\n  \"train_batch_size\": 8\n  \"steps_per_print\": 1\n}",
     {"bad.json:3:3: JSON syntax error: syntax error while parsing object - unexpected string "
      "literal; expected '}'"}},
    {"YamlDuplicateKey",
     kYaml,
     "train_batch_size: 8\nzero_optimization:\n  stage: 1\n  stage: 2\n",
     {"bad.yaml:4:3: duplicate key zero_optimization.stage"}},
    {"JsonDuplicateKey",
     kJson,
     "{\n  \"train_batch_size\": 8,\n  \"train_batch_size\": 16\n}",
     {"bad.json:3:3: duplicate key train_batch_size (DeepSpeed rejects duplicate keys too)"}},
    // Overrides.
    {"SetWithoutEquals",
     kYaml,
     "train_batch_size: 8\n",
     {"--set zero_optimization.stage: expected key=value"},
     {"zero_optimization.stage"}},
    {"SetUnknownKey",
     kYaml,
     "train_batch_size: 8\n",
     {"--set zero_optimizaton.stage=3: unknown key zero_optimizaton (did you mean "
      "zero_optimization?)"},
     {"zero_optimizaton.stage=3"}},
    {"SetBadValueSyntax",
     kYaml,
     "train_batch_size: 8\n",
     {"--set optimizer.params.betas=[0.9,: YAML syntax error: end of sequence flow not found"},
     {"optimizer.params.betas=[0.9,"}},
    {"JsonInvalidLiteral",
     kJson,
     "{\n  \"train_batch_size\": tru\n}",
     {"bad.json:2:23: JSON syntax error: syntax error while parsing value - invalid literal"}},
    {"EnvWrongType",
     kYaml,
     "train_batch_size: 8\n",
     {"environment variable SLUICE_CFG_BF16__ENABLED=yes please: bf16.enabled: expected true or "
      "false, got \"yes please\""},
     {},
     {{"SLUICE_CFG_BF16__ENABLED", "yes please"}}},
};

INSTANTIATE_TEST_SUITE_P(Cases, MalformedConfigTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<ErrorCase>& info) {
                           return std::string(info.param.name);
                         });

TEST(MalformedConfigCountTest, AtLeastThirtyCases) { EXPECT_GE(std::size(kCases), 30u); }

}  // namespace
}  // namespace sluice
