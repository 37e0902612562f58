#include "engine/zero/module_trace.h"

#include <fmt/format.h>

namespace sluice::zero {
namespace {

uint64_t Mix(uint64_t x) {  // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

}  // namespace

std::string_view PassKindName(PassKind kind) {
  return kind == PassKind::kTrain ? "training" : "evaluation";
}

std::string DescribeAccess(const ModuleAccess& access, const model::ParameterRegistry& registry) {
  const bool known = access.unit >= 0 && static_cast<size_t>(access.unit) < registry.units().size();
  return fmt::format("{} of {}", access.phase == Phase::kForward ? "forward" : "backward",
                     known ? registry.units()[static_cast<size_t>(access.unit)].name
                           : fmt::format("unit {}", access.unit));
}

uint64_t ModuleTrace::Hash() const {
  uint64_t hash = Mix(accesses_.size() + 0x9e3779b97f4a7c15ULL);
  for (const ModuleAccess& a : accesses_) {
    const uint64_t word = (static_cast<uint64_t>(static_cast<uint32_t>(a.unit)) << 1) |
                          static_cast<uint64_t>(a.phase);
    hash = Mix(hash ^ Mix(word));
  }
  return hash;
}

}  // namespace sluice::zero
