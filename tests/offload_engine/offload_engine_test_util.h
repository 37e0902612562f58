// Shared pieces of the offload engine tests: a scratch directory standing in for an NVMe mount,
// and ZeroOptions for one (stage, dtype, optimizer tier, parameter tier) combination.
#pragma once

#include <cstdint>
#include <string>

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

}  // namespace sluice::zero::testing
