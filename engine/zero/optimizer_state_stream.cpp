#include "engine/zero/optimizer_state_stream.h"

#include <cstring>

namespace sluice::zero {

OptimizerStateSource StateArraysSource(const float* master, const float* exp_avg,
                                       const float* exp_avg_sq) {
  return [master, exp_avg, exp_avg_sq](int64_t begin, int64_t n, float* m, float* a,
                                       float* v) -> Status {
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    std::memcpy(m, master + begin, bytes);
    std::memcpy(a, exp_avg + begin, bytes);
    std::memcpy(v, exp_avg_sq + begin, bytes);
    return OkStatus();
  };
}

}  // namespace sluice::zero
