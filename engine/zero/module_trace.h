// The order in which a pass runs the model's units, as the stage-3 parameter coordinator records
// it on the first pass of each kind and replays it to prefetch (DeepSpeed's
// PartitionedParameterCoordinator trace, partitioned_param_coordinator.py).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model/parameter_registry.h"

namespace sluice::zero {

// Training passes (forward + backward) and evaluation passes (forward only) run different
// sequences, so each kind has a trace of its own.
enum class PassKind : uint8_t { kTrain = 0, kEval = 1 };
inline constexpr int kNumPassKinds = 2;
std::string_view PassKindName(PassKind kind);  // "training", "evaluation"

enum class Phase : uint8_t { kForward = 0, kBackward = 1 };

// One use of a unit's parameters: its forward or its backward.
struct ModuleAccess {
  int unit = -1;
  Phase phase = Phase::kForward;
  bool operator==(const ModuleAccess&) const = default;
};

// "forward of transformer.h.1".
std::string DescribeAccess(const ModuleAccess& access, const model::ParameterRegistry& registry);

class ModuleTrace {
 public:
  void Append(const ModuleAccess& access) { accesses_.push_back(access); }
  size_t size() const { return accesses_.size(); }
  bool empty() const { return accesses_.empty(); }
  const ModuleAccess& operator[](size_t i) const { return accesses_[i]; }
  const std::vector<ModuleAccess>& accesses() const { return accesses_; }
  // A 64-bit digest of the sequence, compared across ranks.
  uint64_t Hash() const;

 private:
  std::vector<ModuleAccess> accesses_;
};

}  // namespace sluice::zero
