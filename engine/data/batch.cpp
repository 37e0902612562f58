#include "engine/data/batch.h"

#include "engine/data/mapped_read_guard.h"
#include "runtime/check.h"

namespace sluice::data {

Status FillBatch(const TokenRegion& region, std::span<const int64_t> starts, int64_t seq_len,
                 Batch* batch) {
  const auto rows = static_cast<int64_t>(starts.size());
  batch->batch_size = rows;
  batch->seq_len = seq_len;
  batch->inputs.resize(static_cast<size_t>(rows * seq_len));
  batch->targets.resize(static_cast<size_t>(rows * seq_len));
  batch->window_starts.resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t start = starts[static_cast<size_t>(r)];
    SLUICE_CHECK(start >= 0 && start + seq_len + 1 <= region.size())
        << "window [" << start << ", " << start + seq_len + 1 << ") outside a region of "
        << region.size() << " tokens";
    batch->window_starts[static_cast<size_t>(r)] = region.FileIndex(start);
  }
  // Only plain copies out of the mapping run under the guard (nothing to unwind if it fires).
  return GuardMappedRead(region.file()->mapping(), "assembling a batch", [&] {
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t start = starts[static_cast<size_t>(r)];
      region.CopyToInt32(start, seq_len, batch->inputs.data() + r * seq_len);
      region.CopyToInt32(start + 1, seq_len, batch->targets.data() + r * seq_len);
    }
  });
}

}  // namespace sluice::data
