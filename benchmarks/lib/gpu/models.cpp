// The model shapes the kernel benchmark is sized by (cases.h).
#include <fmt/format.h>

#include "benchmarks/lib/gpu/cases.h"

namespace sluice::bench::gpu {

std::vector<LlamaShape> BenchModels() {
  LlamaShape small{.name = "1b",
                   .hidden = 2048,
                   .intermediate = 8192,
                   .heads = 32,
                   .kv_heads = 8,
                   .head_dim = 64,
                   .vocab = 128256,
                   .rope_theta = 500000.0f};
  LlamaShape large{.name = "7b",
                   .hidden = 4096,
                   .intermediate = 11008,
                   .heads = 32,
                   .kv_heads = 32,
                   .head_dim = 128,
                   .vocab = 32000,
                   .rope_theta = 10000.0f};
  return {small, large};
}

std::string CountLabel(int64_t n) {
  if (n > 0 && (n & (n - 1)) == 0) return fmt::format("2^{}", __builtin_ctzll(n));
  return std::to_string(n);
}

}  // namespace sluice::bench::gpu
