// Shared pieces of the ZeRO tests: the world communicator, a tiny GPT, deterministic batches,
// the single-rank reference run (the model's own flat buffers, GlobalGradNorm and ShardedAdam over
// the whole flat buffer) and the same run through a ZeroEngine.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "engine/model/model.h"
#include "engine/zero/zero_engine.h"
#include "runtime/comm.h"
#include "runtime/device.h"
#include "tests/common/test_world.h"

namespace sluice::zero::testing {

using ::sluice::testing::kTestTimeoutSeconds;
using ::sluice::testing::TestWorld;

// 2 layers, d_model 32, 4 heads, d_ff 64, vocab 64, seq 16, tied embeddings, one thread.
model::ModelOptions TinyGpt();
// TinyGpt at d_model 128, d_ff 512, seq 64, 3 layers: units take milliseconds, long enough for
// a gather to run visibly beside them and for the host to run ahead of the stream.
model::ModelOptions SlowerGpt();

struct Batch {
  std::vector<int32_t> inputs;
  std::vector<int32_t> targets;
  int64_t batch = 0;
  int64_t seq = 0;
};

// `sequences` rows of a learnable pattern (each row counts up from a seeded start with a seeded
// stride), different for each (step, micro).
Batch MakeBatch(const model::ModelOptions& model, int64_t step, int64_t micro, int64_t sequences);
// Rows [rank * batch / world, (rank + 1) * batch / world).
Batch SliceBatch(const Batch& global, int rank, int world);

struct TrainSettings {
  int64_t steps = 20;
  int64_t gradient_accumulation_steps = 1;
  int64_t sequences_per_rank = 2;  // per micro-batch
  int world = 1;                   // ranks the global batch is cut for
  double lr = 1e-3;
  double max_grad_norm = 1.0;
  uint64_t seed = 7;
  // The run's precision, as the trainer's (engine/train/precision.h): kF32, kBF16 or kF16.
  DType param_dtype = DType::kF32;
};

struct RunResult {
  std::vector<double> losses;      // mean over the global batch, per step
  std::vector<double> grad_norms;  // per step
  std::vector<float> params;       // after the last step, flat layout
  double seconds = 0.0;
};

// One rank, the whole global batch per micro-batch, flat model buffers.
RunResult RunReference(const model::ModelOptions& model, const TrainSettings& settings,
                       const OptimizerConfig& optimizer);

// `stage` over `settings`' accumulation and precision, overlapping, one thread, with buckets
// small enough for several reductions and gathers per pass and persistent norms and biases.
ZeroOptions SmallBucketOptions(int stage, const TrainSettings& settings);

// Everything a ZeroEngine needs, kept alive together.
struct ZeroRig {
  std::unique_ptr<Device> device;
  std::unique_ptr<model::DeviceAllocator> allocator;
  std::unique_ptr<ops::OpsBackend> ops;
  std::unique_ptr<model::Model<float>> model;
  std::unique_ptr<ZeroEngine> engine;
};
Result<ZeroRig> MakeZeroRig(const ZeroOptions& options, const model::ModelOptions& model,
                            Comm& world, uint64_t seed);
// The same over the data-parallel group of a process grid.
Result<ZeroRig> MakeZeroRig(const ZeroOptions& options, const model::ModelOptions& model,
                            const parallel::ProcessGroups& groups, uint64_t seed);

// This rank's slice of the same global batches through the engine; losses averaged over ranks.
// `on_step` (optional) runs after each step.
Result<RunResult> RunZero(ZeroRig& rig, const TrainSettings& settings,
                          const std::function<void(int64_t step)>& on_step = {});

// The same values bit for bit.
template <typename T>
bool Bitwise(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// max |a - b| / max(|b|, floor) over the elements.
double MaxRelativeDifference(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace sluice::zero::testing
