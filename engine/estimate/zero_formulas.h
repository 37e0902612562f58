// The ZeRO paper's model-state memory per rank (Rajbhandari et al., "ZeRO: Memory Optimizations
// Toward Training Trillion Parameter Models", section 5): with Ψ parameters on N ranks, stage 1
// shards the optimizer state, stage 2 also the gradients, stage 3 also the parameters. Sharded
// state is cut as runtime/comm.h's ShardRange does: ceil(Ψ/N) elements per rank in rank order,
// the last rank(s) holding fewer, so rank 0 holds the most.
//
//   stage 0: (p + g + K) Ψ        stage 2: p Ψ + (g + K) ceil(Ψ/N)
//   stage 1: (p + g) Ψ + K ceil(Ψ/N)    stage 3: (p + g + K) ceil(Ψ/N)
//
// The paper's mixed-precision Adam has p = g = 2 (fp16) and K = 12 (fp32 master, m, v).
#pragma once

#include <cstdint>

namespace sluice::estimate {

struct BytesPerElement {
  int64_t params = 2;
  int64_t grads = 2;
  int64_t optimizer = 12;  // K
};

struct ModelStateBytes {
  int64_t params = 0;
  int64_t grads = 0;
  int64_t optimizer = 0;
  int64_t total() const { return params + grads + optimizer; }
};

// Elements rank 0 holds of a buffer of `elements` sharded over `world` ranks: ceil(elements/world).
int64_t MaxShardElements(int64_t elements, int world);
// Elements the last rank holds (fewer than MaxShardElements when `world` does not divide).
int64_t LastShardElements(int64_t elements, int world);

// Per-rank bytes (rank 0, the largest shard) of stage 0..3 on `world` ranks.
ModelStateBytes ZeroModelStateBytes(int64_t parameters, int world, int stage,
                                    const BytesPerElement& bytes);

}  // namespace sluice::estimate
