// Pieces of the ZeRO engine that need no second rank: the model's external storage and the
// ZeRO binding, the module trace, the options and their config mapping.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "engine/config/config.h"
#include "engine/model/model.h"
#include "engine/zero/module_trace.h"
#include "engine/zero/shard_layout.h"
#include "engine/zero/zero_binding.h"
#include "engine/zero/zero_options.h"
#include "tests/common/test_ops.h"
#include "zero_test_util.h"

namespace sluice::zero::testing {
namespace {

TEST(ExternalStorage, BindingReproducesTheFlatModelBitwise) {
  const model::ModelOptions options = TinyGpt();
  model::HostAllocator host;
  auto flat = model::Model<float>::Create(options, host, sluice::testing::OpsFor<float>());
  auto external = model::Model<float>::Create(options, host, sluice::testing::OpsFor<float>(),
                                              model::ModelStorage::kExternal);
  ASSERT_TRUE(flat.ok() && external.ok());
  EXPECT_EQ((*external)->params_data(), nullptr);
  EXPECT_EQ((*external)->grads_data(), nullptr);
  (*flat)->InitializeParameters(5);

  const int64_t n = (*flat)->ParameterCount();
  std::vector<float> values(static_cast<const float*>((*flat)->params_data()),
                            static_cast<const float*>((*flat)->params_data()) + n);
  std::vector<float> grads(static_cast<size_t>(n), 0.0f);
  ZeroBinding binding((*external)->registry());
  for (const model::ParameterInfo& info : (*external)->registry().parameters()) {
    if (info.is_alias()) continue;
    const int p = *(*external)->registry().Find(info.name);
    binding.SetValue(p, values.data() + info.offset);
    binding.SetGrad(p, grads.data() + info.offset);
  }
  const Batch b = MakeBatch(options, 0, 0, 2);

  Result<double> unbound =
      (*external)->ForwardBackward(b.inputs.data(), b.targets.data(), b.batch, b.seq);
  EXPECT_EQ(unbound.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(unbound.status().message().find("SetParameterBinding"), std::string::npos);

  (*external)->SetParameterBinding(&binding);
  Result<double> got =
      (*external)->ForwardBackward(b.inputs.data(), b.targets.data(), b.batch, b.seq);
  Result<double> want = (*flat)->ForwardBackward(b.inputs.data(), b.targets.data(), b.batch, b.seq);
  ASSERT_TRUE(got.ok() && want.ok()) << got.status().ToString();
  EXPECT_EQ(*got, *want);
  EXPECT_EQ(std::memcmp(grads.data(), (*flat)->grads_data(), grads.size() * sizeof(float)), 0);

  // The tied head reads and accumulates through its alias into the embedding's storage.
  const int head = *(*external)->registry().Find("lm_head.weight");
  const int wte = *(*external)->registry().Find("transformer.wte.weight");
  EXPECT_EQ(binding.Value(head), binding.Value(wte));
  EXPECT_EQ(binding.Grad(head), binding.Grad(wte));
}

TEST(ExternalStorage, UngatheredParameterIsAProgrammerError) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  model::HostAllocator host;
  auto external = model::Model<float>::Create(TinyGpt(), host, sluice::testing::OpsFor<float>(),
                                              model::ModelStorage::kExternal);
  ASSERT_TRUE(external.ok());
  ZeroBinding binding((*external)->registry());
  EXPECT_DEATH((void)binding.Value(0), "is not gathered");
  EXPECT_EQ(binding.Grad(0), nullptr);
}

TEST(ModuleTrace, HashTellsOrdersApart) {
  ModuleTrace a;
  ModuleTrace b;
  for (int u = 0; u < 4; ++u) a.Append({u, Phase::kForward});
  for (int u = 0; u < 4; ++u) b.Append({u, Phase::kForward});
  EXPECT_EQ(a.Hash(), b.Hash());
  ModuleTrace swapped;
  for (int u : {0, 2, 1, 3}) swapped.Append({u, Phase::kForward});
  EXPECT_NE(a.Hash(), swapped.Hash());
  ModuleTrace phase = b;
  phase.Append({3, Phase::kBackward});
  b.Append({3, Phase::kForward});
  EXPECT_NE(phase.Hash(), b.Hash());
  EXPECT_NE(ModuleTrace().Hash(), a.Hash());

  model::HostAllocator host;
  auto net = model::Model<float>::Create(TinyGpt(), host, sluice::testing::OpsFor<float>(),
                                         model::ModelStorage::kExternal);
  ASSERT_TRUE(net.ok());
  EXPECT_EQ(DescribeAccess({1, Phase::kBackward}, (*net)->registry()),
            "backward of transformer.h.0");
}

TEST(ZeroOptions, FromConfig) {
  ConfigSources sources;
  sources.set_overrides = {"zero_optimization.stage=3",
                           "zero_optimization.reduce_bucket_size=1234",
                           "zero_optimization.stage3_max_live_parameters=99999",
                           "train_micro_batch_size_per_gpu=2",
                           "gradient_accumulation_steps=4",
                           "bf16.enabled=true"};
  sources.world_size = 2;
  Result<Config> config = LoadConfig(sources);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  Result<ZeroOptions> o = ZeroOptionsFromConfig(*config);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->stage, 3);
  EXPECT_TRUE(o->overlap_comm) << "DeepSpeed resolves overlap_comm to true for stage 3";
  EXPECT_EQ(o->reduce_bucket_size, 1234);
  EXPECT_EQ(o->stage3_max_live_parameters, 99999);
  EXPECT_EQ(o->gradient_accumulation_steps, 4);
  EXPECT_EQ(o->param_dtype, DType::kBF16);

  sources.set_overrides.push_back("zero_optimization.offload_optimizer.device=cpu");
  Result<Config> offload = LoadConfig(sources);
  ASSERT_TRUE(offload.ok()) << offload.status().ToString();
  Result<ZeroOptions> offloaded = ZeroOptionsFromConfig(*offload);
  ASSERT_TRUE(offloaded.ok()) << offloaded.status().ToString();
  EXPECT_EQ(offloaded->offload_optimizer.device, OffloadDevice::kCpu);

  sources.set_overrides.push_back("zero_optimization.offload_param.device=nvme");
  sources.set_overrides.push_back("zero_optimization.offload_param.nvme_path=/tmp");
  Result<Config> nvme_params = LoadConfig(sources);
  ASSERT_TRUE(nvme_params.ok()) << nvme_params.status().ToString();
  Result<ZeroOptions> nvme = ZeroOptionsFromConfig(*nvme_params);
  ASSERT_TRUE(nvme.ok()) << nvme.status().ToString();
  EXPECT_EQ(nvme->offload_param.device, OffloadDevice::kNvme);

  // Parameters on NVMe with the optimizer on the device: its master weights would keep the
  // shard there. The config refuses it as it loads (the engine does not check settings again).
  sources.set_overrides.push_back("zero_optimization.offload_optimizer.device=none");
  Result<Config> device_optimizer = LoadConfig(sources);
  EXPECT_EQ(device_optimizer.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(device_optimizer.status().message().find("offload_optimizer.device"), std::string::npos)
      << device_optimizer.status().ToString();
}

}  // namespace
}  // namespace sluice::zero::testing
