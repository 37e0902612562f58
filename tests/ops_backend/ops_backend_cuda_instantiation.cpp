#include "tests/ops_backend/ops_backend_suite_fixture.h"

namespace sluice::ops {

INSTANTIATE_TEST_SUITE_P(Cuda, OpsBackendTest,
                         ::testing::Values(BackendCase{DeviceKind::kCuda, false, DType::kF32},
                                           BackendCase{DeviceKind::kCuda, false, DType::kBF16}),
                         BackendCaseName);

}  // namespace sluice::ops
