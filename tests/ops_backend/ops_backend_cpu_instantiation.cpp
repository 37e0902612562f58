#include "tests/ops_backend/ops_backend_suite_fixture.h"

namespace sluice::ops {

INSTANTIATE_TEST_SUITE_P(Host, OpsBackendTest,
                         ::testing::Values(BackendCase{DeviceKind::kCpu, false, DType::kF32},
                                           BackendCase{DeviceKind::kCpu, true, DType::kF64}),
                         BackendCaseName);

}  // namespace sluice::ops
