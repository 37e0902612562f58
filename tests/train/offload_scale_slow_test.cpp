// configs/zero3_offload_32x.yaml and zero3_offload_100x.yaml as shipped, a few steps each
// (30-60 s each on two cores: label slow; offload_scale_util.h says what is checked).
#include "tests/train/offload_scale_util.h"

namespace sluice::train {
namespace {

using test_util::ExpectTrainsAtRatio;
using test_util::ShippedConfig;
using test_util::TrainScaleRun;

TEST(OffloadScaleSlowTest, Config32xTrainsWithinTheDevice) {
  ExpectTrainsAtRatio(TrainScaleRun(ShippedConfig("zero3_offload_32x.yaml", {"run.steps=3"})),
                      32.0);
}

TEST(OffloadScaleSlowTest, Config100xTrainsWithinTheDevice) {
  ExpectTrainsAtRatio(TrainScaleRun(ShippedConfig("zero3_offload_100x.yaml", {"run.steps=2"})),
                      100.0);
}

}  // namespace
}  // namespace sluice::train
