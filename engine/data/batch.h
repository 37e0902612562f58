// A micro-batch of training or validation windows, as the model consumes it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/data/token_region.h"
#include "runtime/status.h"

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
// batch's storage. The tokens are read from the mapped file under a SIGBUS guard: a file that
// shrank since it was opened is DataLoss naming it (mapped_read_guard.h), and the batch's
// contents are then unspecified.
Status FillBatch(const TokenRegion& region, std::span<const int64_t> starts, int64_t seq_len,
                 Batch* batch);

}  // namespace sluice::data
