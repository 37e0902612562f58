// Shared pieces of the offload engine tests: a scratch directory standing in for an NVMe mount,
// ZeroOptions for one (stage, dtype, optimizer tier, parameter tier) combination, and the
// (stage, dtype, optimizer tier) grid the optimizer offload tests run over.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <tuple>

#include "engine/zero/zero_options.h"
#include "runtime/dtype.h"

namespace sluice::zero::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with its files when destroyed.
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Small buckets (several per pass), optimizer tiles of 4096 elements (several per shard), and
// the given offload tiers; nvme tiers live in `nvme_dir`.
ZeroOptions OffloadTestOptions(int stage, DType dtype, OffloadDevice optimizer_tier,
                               OffloadDevice param_tier, const std::string& nvme_dir);

// Stages 1-3 x f32, bf16 x optimizer offloaded to cpu, nvme; named by OffloadCaseName.
using OffloadCase = std::tuple<int, DType, OffloadDevice>;
inline auto OffloadCases() {
  return ::testing::Combine(::testing::Values(1, 2, 3),
                            ::testing::Values(DType::kF32, DType::kBF16),
                            ::testing::Values(OffloadDevice::kCpu, OffloadDevice::kNvme));
}
std::string OffloadCaseName(const ::testing::TestParamInfo<OffloadCase>& info);

// Names a test instance by its ZeRO stage: "stage2".
std::string StageCaseName(const ::testing::TestParamInfo<int>& info);

}  // namespace sluice::zero::testing
