#include "tests/device/device_contract_test.h"

namespace sluice {

INSTANTIATE_TEST_SUITE_P(Backend, DeviceContractTest, ::testing::Values(DeviceKind::kCuda),
                         DeviceKindParamName);

}  // namespace sluice
