#include "zero_test_util.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "engine/train/grad_clip.h"
#include "engine/train/precision.h"
#include "engine/train/run_setup.h"
#include "engine/zero/lamb_step.h"
#include "engine/zero/shard_grad_norm.h"
#include "engine/zero/shard_layout.h"
#include "kernels/cpu/ops_convert.h"
#include "runtime/check.h"
#include "runtime/comm/comm_factory.h"
#include "runtime/device/device_factory.h"
#include "tests/common/test_ops.h"

namespace sluice::zero::testing {
namespace {

constexpr uint64_t kDeviceBytes = uint64_t{64} << 20;

uint64_t Hash(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

model::ModelOptions TinyGpt() {
  model::ModelOptions o = train::DefaultModelOptions();
  o.family = model::Family::kGpt2;
  o.n_layer = 2;
  o.n_head = 4;
  o.n_kv_head = 4;
  o.d_model = 32;
  o.d_ff = 64;
  o.vocab_size = 64;
  o.seq_len = 16;
  o.tie_embeddings = true;
  o.num_threads = 1;
  return o;
}

model::ModelOptions SlowerGpt() {
  model::ModelOptions o = TinyGpt();
  o.d_model = 128;
  o.d_ff = 512;
  o.seq_len = 64;
  o.n_layer = 3;
  return o;
}

Batch MakeBatch(const model::ModelOptions& model, int64_t step, int64_t micro, int64_t sequences) {
  Batch b;
  b.batch = sequences;
  b.seq = model.seq_len;
  const int64_t vocab = model.vocab_size;
  for (int64_t row = 0; row < sequences; ++row) {
    const uint64_t h = Hash((static_cast<uint64_t>(step) << 32) ^
                            (static_cast<uint64_t>(micro) << 16) ^ static_cast<uint64_t>(row));
    const int64_t start = static_cast<int64_t>(h % static_cast<uint64_t>(vocab));
    const int64_t stride = 1 + static_cast<int64_t>((h >> 20) % 3);
    for (int64_t t = 0; t <= b.seq; ++t) {
      const int32_t token = static_cast<int32_t>((start + t * stride) % vocab);
      if (t < b.seq) b.inputs.push_back(token);
      if (t > 0) b.targets.push_back(token);
    }
  }
  return b;
}

Batch SliceBatch(const Batch& global, int rank, int world) {
  SLUICE_CHECK_EQ(global.batch % world, 0);
  Batch b;
  b.batch = global.batch / world;
  b.seq = global.seq;
  const auto begin = static_cast<ptrdiff_t>(rank * b.batch * b.seq);
  const auto end = begin + static_cast<ptrdiff_t>(b.batch * b.seq);
  b.inputs.assign(global.inputs.begin() + begin, global.inputs.begin() + end);
  b.targets.assign(global.targets.begin() + begin, global.targets.begin() + end);
  return b;
}

RunResult RunReference(const model::ModelOptions& options, const TrainSettings& settings,
                       const OptimizerConfig& optimizer) {
  RunResult result;
  const double start = Now();
  Result<std::unique_ptr<Device>> device = CreateDevice({.memory_limit_bytes = kDeviceBytes});
  SLUICE_CHECK(device.ok()) << device.status().ToString();
  model::DeviceAllocator allocator(**device);
  const std::unique_ptr<ops::OpsBackend> ops = sluice::testing::CpuOpsOn(**device);
  const train::Precision precision = train::PrecisionOf(settings.param_dtype);
  model::ModelOptions flat_options = options;
  flat_options.param_dtype = train::ModelParamDType(precision);
  auto created = model::Model<float>::Create(flat_options, allocator, *ops);
  SLUICE_CHECK(created.ok()) << created.status().ToString();
  model::Model<float>& net = **created;
  net.InitializeParameters(settings.seed);
  if (precision == train::Precision::kF16) {
    train::RoundToF16InPlace(static_cast<float*>(net.params_data()), net.ParameterCount(), 1);
  }
  // The optimizer over the whole flat buffer. In f16 the model holds fp16 values in fp32
  // storage: Adam writes its fp16 copy into `half`, which is widened into the model.
  const int64_t count = net.ParameterCount();
  std::vector<uint16_t> half(precision == train::Precision::kF16 ? count : 0);
  if (!half.empty()) {
    kernels::cpu::ConvertF32ToF16(static_cast<const float*>(net.params_data()), half.data(), count,
                                  1);
  }
  // On the model's stream, synchronized before the host reads what it wrote.
  Stream& stream = net.stream();
  auto adam = ShardedAdam::Create(*ops, stream, optimizer, settings.param_dtype,
                                  half.empty() ? net.params_data() : half.data(), count);
  SLUICE_CHECK(adam.ok()) << adam.status().ToString();
  if (optimizer.type == OptimizerType::kLamb) {
    // One piece per parameter, whole: the layout of a world of one is the flat order.
    LambPlan plan;
    const ShardLayout flat = ShardLayout::Build(net.registry(), 1, 0, -1);
    for (const PartitionInfo& p : flat.partitions()) {
      SLUICE_CHECK_EQ(p.shard_offset, p.full_offset);
      plan.segments.push_back({.offset = p.shard_offset, .count = p.partition});
    }
    (*adam)->SetLambPlan(std::move(plan));
  }
  SLUICE_CHECK((*adam)->LoadMasterFromParams(stream).ok());

  const int64_t gas = settings.gradient_accumulation_steps;
  const int64_t sequences = settings.sequences_per_rank * settings.world;
  for (int64_t step = 0; step < settings.steps; ++step) {
    net.ZeroGrads();
    double loss_sum = 0.0;
    for (int64_t micro = 0; micro < gas; ++micro) {
      const Batch b = MakeBatch(options, step, micro, sequences);
      Result<double> loss = net.ForwardBackward(b.inputs.data(), b.targets.data(), b.batch, b.seq,
                                                1.0 / static_cast<double>(gas));
      SLUICE_CHECK(loss.ok()) << loss.status().ToString();
      loss_sum += *loss;
    }
    result.losses.push_back(loss_sum / static_cast<double>(gas));
    if (precision == train::Precision::kF16) {
      train::RoundToF16InPlace(net.grads_data(), net.ParameterCount(), 1);
    }
    const train::GradNorm norm =
        train::GlobalGradNorm(net.grads_data(), net.ParameterCount(), 1.0, 1);
    result.grad_norms.push_back(norm.norm);
    SLUICE_CHECK(norm.finite);
    const double clip = ClipCoefficient(norm.norm, settings.max_grad_norm);
    SLUICE_CHECK((*adam)->Step(stream, net.grads_data(), settings.lr, clip).ok());
    SLUICE_CHECK(stream.Synchronize().ok());
    if (!half.empty()) {
      kernels::cpu::ConvertF16ToF32(half.data(), static_cast<float*>(net.params_data()), count, 1);
    }
  }
  result.params.resize(static_cast<size_t>(net.ParameterCount()));
  for (const model::ParameterInfo& info : net.registry().parameters()) {
    if (info.is_alias()) continue;
    const int p = *net.registry().Find(info.name);
    for (int64_t e = 0; e < info.numel; ++e) {
      result.params[static_cast<size_t>(info.offset + e)] = net.ParameterValue(p, e);
    }
  }
  result.seconds = Now() - start;
  return result;
}

ZeroOptions SmallBucketOptions(int stage, const TrainSettings& settings) {
  ZeroOptions o = DefaultZeroOptions();
  o.stage = stage;
  o.overlap_comm = true;
  o.gradient_accumulation_steps = settings.gradient_accumulation_steps;
  o.param_dtype = settings.param_dtype;
  o.num_threads = 1;
  o.reduce_bucket_size = 5000;
  o.allgather_bucket_size = 8000;
  o.stage3_prefetch_bucket_size = 6000;
  o.stage3_param_persistence_threshold = 64;
  return o;
}

namespace {

// `ranks` is the world communicator or the process groups the engine is created over.
template <typename Ranks>
Result<ZeroRig> MakeRig(const ZeroOptions& options, const model::ModelOptions& model_options,
                        Ranks& ranks, uint64_t seed) {
  ZeroRig rig;
  SLUICE_ASSIGN_OR_RETURN(rig.device, CreateDevice({.memory_limit_bytes = kDeviceBytes}));
  rig.allocator = std::make_unique<model::DeviceAllocator>(*rig.device);
  rig.ops = sluice::testing::CpuOpsOn(*rig.device);
  SLUICE_ASSIGN_OR_RETURN(rig.model,
                          model::Model<float>::Create(model_options, *rig.allocator, *rig.ops,
                                                      model::ModelStorage::kExternal));
  SLUICE_ASSIGN_OR_RETURN(rig.engine, ZeroEngine::Create(options, *rig.model, ranks, *rig.device));
  SLUICE_RETURN_IF_ERROR(rig.engine->InitializeParameters(seed));
  return rig;
}

}  // namespace

Result<ZeroRig> MakeZeroRig(const ZeroOptions& options, const model::ModelOptions& model_options,
                            Comm& world, uint64_t seed) {
  return MakeRig(options, model_options, world, seed);
}

Result<ZeroRig> MakeZeroRig(const ZeroOptions& options, const model::ModelOptions& model_options,
                            const parallel::ProcessGroups& groups, uint64_t seed) {
  return MakeRig(options, model_options, groups, seed);
}

Result<RunResult> RunZero(ZeroRig& rig, const TrainSettings& settings,
                          const std::function<void(int64_t step)>& on_step) {
  RunResult result;
  const double start = Now();
  ZeroEngine& engine = *rig.engine;
  const model::ModelOptions& options = rig.model->options();
  const int64_t gas = settings.gradient_accumulation_steps;
  const int world = engine.world_size();
  for (int64_t step = 0; step < settings.steps; ++step) {
    double loss_sum = 0.0;
    for (int64_t micro = 0; micro < gas; ++micro) {
      const Batch local =
          SliceBatch(MakeBatch(options, step, micro, settings.sequences_per_rank * world),
                     engine.rank(), world);
      SLUICE_ASSIGN_OR_RETURN(
          double loss,
          engine.ForwardBackward(local.inputs.data(), local.targets.data(), local.batch, local.seq,
                                 1.0 / static_cast<double>(gas)));
      loss_sum += loss;
    }
    SLUICE_ASSIGN_OR_RETURN(
        ZeroStepResult stepped,
        engine.Step({.lr = settings.lr, .max_grad_norm = settings.max_grad_norm}));
    if (stepped.overflow) return InternalError("step {}: unexpected overflow", step + 1);
    SLUICE_ASSIGN_OR_RETURN(double mean,
                            engine.MeanAcrossRanks(loss_sum / static_cast<double>(gas)));
    result.losses.push_back(mean);
    result.grad_norms.push_back(stepped.grad_norm);
    if (on_step) on_step(step);
  }
  result.params.resize(static_cast<size_t>(engine.layout().total_elements()));
  SLUICE_RETURN_IF_ERROR(engine.GatherFullParameters(result.params));
  result.seconds = Now() - start;
  return result;
}

double MaxRelativeDifference(const std::vector<double>& a, const std::vector<double>& b) {
  SLUICE_CHECK_EQ(a.size(), b.size());
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(a[i] - b[i]) / std::max(std::abs(b[i]), 1e-30));
  }
  return worst;
}

}  // namespace sluice::zero::testing
