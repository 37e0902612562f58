#include "engine/model/init.h"

#include <cmath>
#include <numbers>

namespace sluice::model {
namespace {

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t ParameterInitKey(uint64_t seed, std::string_view name) {
  uint64_t hash = 0xcbf29ce484222325ULL;  // FNV-1a, then mixed with the seed
  for (const char c : name) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ULL;
  }
  return Mix(Mix(seed) ^ hash);
}

double StandardNormal(uint64_t key, int64_t element) {
  const uint64_t counter = static_cast<uint64_t>(element) * 2;
  const uint64_t a = Mix(key ^ Mix(counter));
  const uint64_t b = Mix(key ^ Mix(counter + 1));
  constexpr double kScale = 1.0 / 9007199254740992.0;             // 2^-53
  const double u1 = static_cast<double>((a >> 11) + 1) * kScale;  // (0, 1]
  const double u2 = static_cast<double>(b >> 11) * kScale;        // [0, 1)
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

double InitialValue(InitKind kind, uint64_t key, int64_t element, double std, int64_t n_layer) {
  switch (kind) {
    case InitKind::kNormal:
      return std * StandardNormal(key, element);
    case InitKind::kNormalResidual:
      return std / std::sqrt(2.0 * static_cast<double>(n_layer)) * StandardNormal(key, element);
    case InitKind::kZeros:
      return 0.0;
    case InitKind::kOnes:
      return 1.0;
  }
  return 0.0;
}

template <typename T>
void InitializeRange(const ParameterInfo& info, uint64_t seed, double std, int64_t n_layer,
                     int64_t begin, int64_t end, T* dst) {
  const uint64_t key = ParameterInitKey(seed, info.name);
  if (info.sharding.split()) {
#pragma omp parallel for schedule(static) if (end - begin > (1 << 16))
    for (int64_t e = begin; e < end; ++e) {
      dst[e - begin] =
          static_cast<T>(InitialValue(info.init, key, info.sharding.GlobalIndex(e), std, n_layer));
    }
    return;
  }
#pragma omp parallel for schedule(static) if (end - begin > (1 << 16))
  for (int64_t e = begin; e < end; ++e) {
    dst[e - begin] = static_cast<T>(InitialValue(info.init, key, e, std, n_layer));
  }
}

template void InitializeRange<float>(const ParameterInfo&, uint64_t, double, int64_t, int64_t,
                                     int64_t, float*);
template void InitializeRange<double>(const ParameterInfo&, uint64_t, double, int64_t, int64_t,
                                      int64_t, double*);

}  // namespace sluice::model
