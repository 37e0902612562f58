// Where bytes live (tier) and what they hold (category): the two tags of every accounted
// allocation (runtime/memory_accounting.h) and of tensor views.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace sluice {

enum class MemoryTier : uint8_t { kDevice = 0, kHostPinned, kHost, kNvme };
enum class MemoryCategory : uint8_t { kParams = 0, kGrads, kOptimizer, kActivations, kBuffers };

inline constexpr int kNumMemoryTiers = 4;
inline constexpr int kNumMemoryCategories = 5;

inline constexpr std::array<MemoryTier, kNumMemoryTiers> kAllMemoryTiers = {
    MemoryTier::kDevice, MemoryTier::kHostPinned, MemoryTier::kHost, MemoryTier::kNvme};
inline constexpr std::array<MemoryCategory, kNumMemoryCategories> kAllMemoryCategories = {
    MemoryCategory::kParams, MemoryCategory::kGrads, MemoryCategory::kOptimizer,
    MemoryCategory::kActivations, MemoryCategory::kBuffers};

constexpr std::string_view MemoryTierName(MemoryTier tier) {
  constexpr std::string_view kNames[] = {"device", "host_pinned", "host", "nvme"};
  return kNames[static_cast<int>(tier)];
}

constexpr std::string_view MemoryCategoryName(MemoryCategory category) {
  constexpr std::string_view kNames[] = {"params", "grads", "optimizer", "activations", "buffers"};
  return kNames[static_cast<int>(category)];
}

}  // namespace sluice
