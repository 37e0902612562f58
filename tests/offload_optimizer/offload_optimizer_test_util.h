// Shared pieces of the offloaded-optimizer tests: a cpu device, device shards filled from host
// values, an NVMe swap store in a temporary directory, seeded inputs, and the ShardedAdam run the
// offloaded optimizer must reproduce bit for bit.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/zero/offload_options.h"
#include "offload/aio_engine.h"
#include "offload/offloaded_adam.h"
#include "offload/swap_store.h"
#include "runtime/device.h"
#include "runtime/dtype.h"
#include "tests/offload/test_support.h"

namespace sluice::zero::testing {

std::unique_ptr<Device> MakeCpuDevice(uint64_t memory_limit = 256ull << 20);

// Device memory holding `bytes` copied from `host`.
DeviceBuffer ToDevice(Device& device, const void* host, size_t bytes, MemoryCategory category);
std::vector<std::byte> FromDevice(Device& device, const DeviceBuffer& buffer);

// `n` values in `dtype` (seeded, within +-scale), as raw bytes.
std::vector<std::byte> RandomValues(int64_t n, DType dtype, uint64_t seed, float scale);
// Widened to fp32.
std::vector<float> ToF32(const std::vector<std::byte>& values, DType dtype);

OptimizerConfig TestOptimizer();

// An io_uring (or fallback) engine and a swap store in a fresh temporary directory.
struct NvmeFixture {
  explicit NvmeFixture(uint64_t capacity_bytes = 64ull << 20, uint64_t growth_bytes = 256ull << 20,
                       uint32_t max_extents = 256);
  offload::testutil::TempDir dir;
  std::unique_ptr<offload::AioEngine> engine;
  std::unique_ptr<offload::SwapStore> store;
  offload::SwapStoreOptions options;
};

// The state and parameters after some steps.
struct StateAfter {
  std::vector<float> master, exp_avg, exp_avg_sq;
  std::vector<std::byte> params;  // the parameter shard, param dtype
};

// Inputs of a multi-step run: initial parameters, per-step gradients (grad dtype), lr, scale.
struct RunInputs {
  DType param_dtype = DType::kF32;
  DType grad_dtype = DType::kF32;
  int64_t count = 0;
  int steps = 3;
  std::vector<std::byte> params;
  std::vector<std::vector<std::byte>> grads;
  std::vector<double> lrs;
  std::vector<double> scales;
};
RunInputs MakeRunInputs(DType param_dtype, DType grad_dtype, int64_t count, int steps,
                        uint64_t seed);

// ShardedAdam over the same inputs (gradients widened to fp32), `steps` steps.
StateAfter RunShardedAdam(Device& device, const RunInputs& inputs, int steps);
// OffloadedAdam over the same inputs; the state read back with ReadState. With `prefetch`,
// PrefetchState(false) then PrefetchState(true) before each step, as the engine calls them.
Result<StateAfter> RunOffloadedAdam(Device& device, const RunInputs& inputs, int steps,
                                    const offload::OffloadedAdamOptions& options,
                                    bool prefetch = false);

// "" when equal bit for bit, else where they first differ.
std::string FirstDifference(const StateAfter& expected, const StateAfter& actual);

}  // namespace sluice::zero::testing
