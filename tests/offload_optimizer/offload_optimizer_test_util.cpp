#include "tests/offload_optimizer/offload_optimizer_test_util.h"

#include <fmt/format.h>

#include <cstring>
#include <random>

#include "engine/zero/partition_copy.h"
#include "engine/zero/sharded_adam.h"
#include "runtime/check.h"
#include "runtime/device/device_factory.h"
#include "runtime/ops/ops_factory.h"

namespace sluice::zero::testing {

std::unique_ptr<Device> MakeCpuDevice(uint64_t memory_limit) {
  DeviceOptions options;
  options.kind = DeviceKind::kCpu;
  options.memory_limit_bytes = memory_limit;
  auto device = CreateDevice(options);
  SLUICE_CHECK(device.ok()) << device.status().ToString();
  return std::move(device).value();
}

DeviceBuffer ToDevice(Device& device, const void* host, size_t bytes, MemoryCategory category) {
  auto buffer = device.Allocate(bytes, category);
  SLUICE_CHECK(buffer.ok()) << buffer.status().ToString();
  if (bytes > 0) {
    auto stream = device.CreateStream();
    SLUICE_CHECK(stream.ok());
    SLUICE_CHECK(device.CopyAsync(buffer->data(), host, bytes, CopyKind::kH2D, **stream).ok());
    SLUICE_CHECK((*stream)->Synchronize().ok());
  }
  return std::move(buffer).value();
}

std::vector<std::byte> FromDevice(Device& device, const DeviceBuffer& buffer) {
  std::vector<std::byte> out(buffer.size());
  if (!out.empty()) {
    auto stream = device.CreateStream();
    SLUICE_CHECK(stream.ok());
    SLUICE_CHECK(
        device.CopyAsync(out.data(), buffer.data(), out.size(), CopyKind::kD2H, **stream).ok());
    SLUICE_CHECK((*stream)->Synchronize().ok());
  }
  return out;
}

std::vector<std::byte> RandomValues(int64_t n, DType dtype, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> values(static_cast<size_t>(n));
  for (float& v : values) v = dist(rng);
  std::vector<std::byte> out(static_cast<size_t>(n) * DTypeSize(dtype));
  offload::ConvertFromF32(values.data(), out.data(), dtype, n, 1);
  return out;
}

std::vector<float> ToF32(const std::vector<std::byte>& values, DType dtype) {
  const int64_t n = static_cast<int64_t>(values.size() / DTypeSize(dtype));
  std::vector<float> out(static_cast<size_t>(n));
  offload::ConvertToF32(values.data(), dtype, out.data(), n, 1);
  return out;
}

OptimizerConfig TestOptimizer() {
  OptimizerConfig config = Config().optimizer;
  config.lr = 1e-3;
  config.beta1 = 0.9;
  config.beta2 = 0.999;
  config.eps = 1e-8;
  config.weight_decay = 0.01;
  config.adam_w_mode = true;
  return config;
}

NvmeFixture::NvmeFixture(uint64_t capacity_bytes, uint64_t growth_bytes, uint32_t max_extents) {
  auto created = offload::AioEngine::Create(offload::AioOptions());
  SLUICE_CHECK(created.ok()) << created.status().ToString();
  engine = std::move(created).value();
  options.paths = {dir.path()};
  options.capacity_bytes = capacity_bytes;
  options.growth_bytes = growth_bytes;
  options.max_extents = max_extents;
  auto opened = offload::SwapStore::Create(*engine, options);
  SLUICE_CHECK(opened.ok()) << opened.status().ToString();
  store = std::move(opened).value();
}

RunInputs MakeRunInputs(DType param_dtype, DType grad_dtype, int64_t count, int steps,
                        uint64_t seed) {
  RunInputs in;
  in.param_dtype = param_dtype;
  in.grad_dtype = grad_dtype;
  in.count = count;
  in.steps = steps;
  in.params = RandomValues(count, param_dtype, seed, 1.0f);
  for (int s = 0; s < steps; ++s) {
    in.grads.push_back(RandomValues(count, grad_dtype, seed * 1000 + s + 1, 4.0f));
    in.lrs.push_back(1e-3 * (1.0 + 0.25 * s));
    in.scales.push_back(s % 2 == 0 ? 0.5 : 0.125);  // unscale x clip, folded
  }
  return in;
}

StateAfter RunShardedAdam(Device& device, const RunInputs& in, int steps) {
  auto ops = ops::CreateOpsBackend(device, {.cpu_threads = 1});
  SLUICE_CHECK(ops.ok()) << ops.status().ToString();
  auto stream = device.CreateStream();
  SLUICE_CHECK(stream.ok()) << stream.status().ToString();
  DeviceBuffer params =
      ToDevice(device, in.params.data(), in.params.size(), MemoryCategory::kParams);
  auto adam = ShardedAdam::Create(**ops, **stream, TestOptimizer(), in.param_dtype, params.data(),
                                  in.count);
  SLUICE_CHECK(adam.ok()) << adam.status().ToString();
  SLUICE_CHECK((*adam)->LoadMasterFromParams(**stream).ok());
  for (int s = 0; s < steps; ++s) {
    const std::vector<float> grads = ToF32(in.grads[s], in.grad_dtype);
    DeviceBuffer device_grads =
        ToDevice(device, grads.data(), grads.size() * sizeof(float), MemoryCategory::kGrads);
    SLUICE_CHECK(
        (*adam)->Step(**stream, device_grads.data_as<float>(), in.lrs[s], in.scales[s]).ok());
    SLUICE_CHECK((*stream)->Synchronize().ok());  // before device_grads goes
  }
  StateAfter out;
  const size_t n = static_cast<size_t>(in.count);
  out.master.resize(n);
  out.exp_avg.resize(n);
  out.exp_avg_sq.resize(n);
  SLUICE_CHECK((*adam)
                   ->StreamState(**stream, 0, in.count, in.count,
                                 offload::StateArraysSink(0, out.master.data(), out.exp_avg.data(),
                                                          out.exp_avg_sq.data()))
                   .ok());
  out.params = FromDevice(device, params);
  return out;
}

Result<StateAfter> RunOffloadedAdam(Device& device, const RunInputs& in, int steps,
                                    const offload::OffloadedAdamOptions& options, bool prefetch) {
  DeviceBuffer params =
      ToDevice(device, in.params.data(), in.params.size(), MemoryCategory::kParams);
  SLUICE_ASSIGN_OR_RETURN(auto adam, offload::OffloadedAdam::Create(
                                         device, CpuOptimizerOf(TestOptimizer()), in.param_dtype,
                                         params.data(), in.grad_dtype, in.count, 1, options));
  SLUICE_RETURN_IF_ERROR(adam->LoadMasterFromParams());
  for (int s = 0; s < steps; ++s) {
    DeviceBuffer grads =
        ToDevice(device, in.grads[s].data(), in.grads[s].size(), MemoryCategory::kGrads);
    if (prefetch) {
      SLUICE_RETURN_IF_ERROR(adam->PrefetchState(/*wait=*/false));
      SLUICE_RETURN_IF_ERROR(adam->PrefetchState(/*wait=*/true));
    }
    SLUICE_RETURN_IF_ERROR(adam->Step(grads.data(), in.lrs[s], in.scales[s]));
  }
  StateAfter out;
  const size_t n = static_cast<size_t>(in.count);
  out.master.resize(n);
  out.exp_avg.resize(n);
  out.exp_avg_sq.resize(n);
  SLUICE_RETURN_IF_ERROR(
      adam->ReadState(0, in.count, out.master.data(), out.exp_avg.data(), out.exp_avg_sq.data()));
  out.params = FromDevice(device, params);
  return out;
}

namespace {

std::string Compare(const char* what, const void* a, const void* b, size_t n, size_t size) {
  for (size_t i = 0; i < n; ++i) {
    if (std::memcmp(static_cast<const char*>(a) + i * size, static_cast<const char*>(b) + i * size,
                    size) != 0) {
      return fmt::format("{} differs first at element {} of {}", what, i, n);
    }
  }
  return "";
}

}  // namespace

std::string FirstDifference(const StateAfter& e, const StateAfter& a) {
  if (e.master.size() != a.master.size() || e.params.size() != a.params.size()) {
    return "sizes differ";
  }
  const size_t n = e.master.size();
  for (std::string d : {Compare("master", e.master.data(), a.master.data(), n, 4),
                        Compare("exp_avg", e.exp_avg.data(), a.exp_avg.data(), n, 4),
                        Compare("exp_avg_sq", e.exp_avg_sq.data(), a.exp_avg_sq.data(), n, 4),
                        Compare("params", e.params.data(), a.params.data(), e.params.size(), 1)}) {
    if (!d.empty()) return d;
  }
  return "";
}

}  // namespace sluice::zero::testing
