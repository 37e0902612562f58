// The shipped 32x config shrunk to d_model 128 under a 4 MiB device budget, with the Adam state
// in host memory and on NVMe: still >= 32x the device, a second to run (offload_scale_util.h).
#include "tests/train/offload_scale_util.h"

namespace sluice::train {
namespace {

using test_util::ExpectTrainsAtRatio;
using test_util::ShippedConfig;
using test_util::TrainScaleRun;

TEST(OffloadScaleTest, ShrunkenConfigTrains32xTheDevice) {
  const Config config =
      ShippedConfig("zero3_offload_32x.yaml",
                    {"model.d_model=128", "model.n_head=4", "model.n_layer=40", "model.seq_len=2",
                     "device.memory_limit=4MiB", "zero_optimization.reduce_bucket_size=1e5",
                     "zero_optimization.allgather_bucket_size=1e5",
                     "zero_optimization.stage3_param_persistence_threshold=0",
                     "zero_optimization.stage3_max_live_parameters=1e6",
                     "zero_optimization.sub_group_size=2e5", "run.steps=2"});
  ExpectTrainsAtRatio(TrainScaleRun(config), 32.0);
}

TEST(OffloadScaleTest, ShrunkenConfigTrains32xTheDeviceWithAdamAndParametersOnNvme) {
  const Config config =
      ShippedConfig("zero3_offload_100x.yaml",
                    {"model.d_model=128", "model.n_layer=40", "device.memory_limit=4MiB",
                     "zero_optimization.sub_group_size=2e5", "run.steps=2"});
  ExpectTrainsAtRatio(TrainScaleRun(config), 32.0);
}

}  // namespace
}  // namespace sluice::train
