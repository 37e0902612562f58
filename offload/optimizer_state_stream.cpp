#include "offload/optimizer_state_stream.h"

#include <cstring>

namespace sluice::offload {

Status CheckStateRange(int64_t begin, int64_t n, int64_t count) {
  if (begin >= 0 && n >= 0 && begin + n <= count) return OkStatus();
  return OutOfRangeError("optimizer state range [{}, {}) is outside the shard of {} elements",
                         begin, begin + n, count);
}

OptimizerStateSink StateArraysSink(int64_t begin, float* master, float* exp_avg,
                                   float* exp_avg_sq) {
  return [begin, master, exp_avg, exp_avg_sq](int64_t at, int64_t n, const float* m, const float* a,
                                              const float* v) -> Status {
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    const int64_t out = at - begin;
    if (master != nullptr) std::memcpy(master + out, m, bytes);
    if (exp_avg != nullptr) std::memcpy(exp_avg + out, a, bytes);
    if (exp_avg_sq != nullptr && v != nullptr) std::memcpy(exp_avg_sq + out, v, bytes);
    return OkStatus();
  };
}

OptimizerStateSource StateArraysSource(const float* master, const float* exp_avg,
                                       const float* exp_avg_sq) {
  return [master, exp_avg, exp_avg_sq](int64_t begin, int64_t n, float* m, float* a,
                                       float* v) -> Status {
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    std::memcpy(m, master + begin, bytes);
    std::memcpy(a, exp_avg + begin, bytes);
    if (v == nullptr) return OkStatus();  // an optimizer without a second moment (Lion)
    if (exp_avg_sq == nullptr) {
      return InvalidArgumentError(
          "the optimizer keeps exp_avg_sq but the restored state has none (it is Lion's)");
    }
    std::memcpy(v, exp_avg_sq + begin, bytes);
    return OkStatus();
  };
}

}  // namespace sluice::offload
