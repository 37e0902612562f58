// The Device contract suite (device_contract_test.cpp), instantiated once per backend:
// device_cpu_instantiation.cpp and device_cuda_instantiation.cpp.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "runtime/device.h"

namespace sluice {

class DeviceContractTest : public ::testing::TestWithParam<DeviceKind> {
 protected:
  static constexpr uint64_t kMemoryLimit = 64ull * 1024 * 1024;

  void SetUp() override;

  std::unique_ptr<Device> device_;
};

std::string DeviceKindParamName(const ::testing::TestParamInfo<DeviceKind>& info);

}  // namespace sluice
