// A cpu device and the two host ops backends the engine's tests run models on: the cpu column
// (kernels/cpu, f32, what training uses) and the fp64 reference (kernels/ref).
#pragma once

#include <cstdint>
#include <memory>
#include <type_traits>

#include "runtime/check.h"
#include "runtime/device/device_factory.h"
#include "runtime/ops/ops_factory.h"

namespace sluice::testing {

class TestOps {
 public:
  TestOps() {
    DeviceOptions options;
    options.kind = DeviceKind::kCpu;
    options.memory_limit_bytes = uint64_t{1} << 30;
    auto device = CreateDevice(options);
    SLUICE_CHECK(device.ok()) << device.status().ToString();
    device_ = std::move(device).value();
    auto cpu = ops::CreateOpsBackend(*device_);
    SLUICE_CHECK(cpu.ok()) << cpu.status().ToString();
    cpu_ = std::move(cpu).value();
    auto ref = ops::CreateReferenceOpsBackend(*device_);
    SLUICE_CHECK(ref.ok()) << ref.status().ToString();
    ref_ = std::move(ref).value();
  }

  ops::OpsBackend& cpu() const { return *cpu_; }
  ops::OpsBackend& ref() const { return *ref_; }
  // The backend that computes in T: cpu for float, the reference for double.
  template <typename T>
  ops::OpsBackend& For() const {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
    return std::is_same_v<T, float> ? cpu() : ref();
  }

 private:
  std::unique_ptr<Device> device_;
  std::unique_ptr<ops::OpsBackend> cpu_;
  std::unique_ptr<ops::OpsBackend> ref_;
};

// The cpu column on a device of the test's own (one whose capacity the test chose).
inline std::unique_ptr<ops::OpsBackend> CpuOpsOn(Device& device) {
  auto ops = ops::CreateOpsBackend(device);
  SLUICE_CHECK(ops.ok()) << ops.status().ToString();
  return std::move(ops).value();
}

// One TestOps for the whole test binary, never destroyed (its stream workers would otherwise race
// the static destructors at exit).
inline TestOps& SharedTestOps() {
  static TestOps* const ops = new TestOps();
  return *ops;
}

// The shared backend that computes in T.
template <typename T>
ops::OpsBackend& OpsFor() {
  return SharedTestOps().For<T>();
}

}  // namespace sluice::testing
