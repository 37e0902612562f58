#include "offload_engine_test_util.h"

#include <fmt/format.h>
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>

#include "runtime/check.h"

namespace sluice::zero::testing {

ScratchDir::ScratchDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern =
      std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/sluice_offload_test.XXXXXX";
  SLUICE_CHECK(mkdtemp(pattern.data()) != nullptr) << "mkdtemp " << pattern;
  path_ = pattern;
}

ScratchDir::~ScratchDir() {
  std::error_code error;
  std::filesystem::remove_all(path_, error);
}

ZeroOptions OffloadTestOptions(int stage, DType dtype, OffloadDevice optimizer_tier,
                               OffloadDevice param_tier, const std::string& nvme_dir) {
  ZeroOptions o = DefaultZeroOptions();
  o.stage = stage;
  o.overlap_comm = true;
  o.param_dtype = dtype;
  o.num_threads = 1;
  o.reduce_bucket_size = 5000;
  o.allgather_bucket_size = 8000;
  o.stage3_prefetch_bucket_size = 6000;
  o.stage3_param_persistence_threshold = 64;
  o.sub_group_size = 4096;
  o.optimizer.lr = 1e-3;
  o.optimizer.weight_decay = 0.01;
  o.offload_optimizer.device = optimizer_tier;
  o.offload_optimizer.buffer_count = 3;
  o.offload_optimizer.pipeline_read = true;
  o.offload_optimizer.pipeline_write = true;
  if (optimizer_tier == OffloadDevice::kNvme) o.offload_optimizer.nvme_path = nvme_dir;
  o.offload_param.device = param_tier;
  if (param_tier == OffloadDevice::kNvme) {
    o.offload_param.nvme_path = nvme_dir;
    // Every gather reads NVMe (no host cache), through few staging slots.
    o.offload_param.buffer_count = 3;
    o.offload_param.max_in_cpu = 0;
  }
  return o;
}

std::string OffloadCaseName(const ::testing::TestParamInfo<OffloadCase>& info) {
  return fmt::format("Stage{}_{}_{}", std::get<0>(info.param), DTypeName(std::get<1>(info.param)),
                     OffloadDeviceName(std::get<2>(info.param)));
}

std::string StageCaseName(const ::testing::TestParamInfo<int>& info) {
  return "stage" + std::to_string(info.param);
}

}  // namespace sluice::zero::testing
