#include "engine/zero/gradient_scaling.h"

#include "runtime/check.h"

namespace sluice::zero {

GradientScaling GradientScalingFor(bool prescale_gradients, double predivide_factor, int world) {
  SLUICE_CHECK_GE(world, 1);
  SLUICE_CHECK(predivide_factor > 0.0) << "gradient_predivide_factor " << predivide_factor;
  const double n = static_cast<double>(world);
  if (prescale_gradients) {
    return {.before = static_cast<float>(1.0 / n), .op = ReduceOp::kSum};
  }
  if (predivide_factor == 1.0) return {};
  return {.before = static_cast<float>(1.0 / predivide_factor),
          .op = ReduceOp::kSum,
          .after = predivide_factor == n ? 1.0f : static_cast<float>(predivide_factor / n)};
}

}  // namespace sluice::zero
