// A micro-batch of training or validation windows, as the model consumes it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/data/token_region.h"

namespace sluice::data {

struct Batch {
  int64_t batch_size = 0;
  int64_t seq_len = 0;
  std::vector<int32_t> inputs;   // [batch_size, seq_len], row-major
  std::vector<int32_t> targets;  // [batch_size, seq_len]: row r is inputs row r shifted by one
  // For each row, the file index of its first token (logs, debugging, tests).
  std::vector<int64_t> window_starts;
};

// Fills `batch` with one row per window; `starts` are token offsets within `region`. Reuses the
// batch's storage.
void FillBatch(const TokenRegion& region, std::span<const int64_t> starts, int64_t seq_len,
               Batch* batch);

}  // namespace sluice::data
