#include "cli/env_probes.h"

namespace sluice::cli {

nlohmann::json ProbeGpus() {
  return {{"error", "this sluice binary was built without CUDA (no nvcc when configured)"}};
}

}  // namespace sluice::cli
