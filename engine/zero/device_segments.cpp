#include "engine/zero/device_segments.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine/zero/partition_copy.h"

namespace sluice::zero {

std::vector<ops::CopySegment> ExtractOwnedSegments(const ShardLayout& layout) {
  std::vector<ops::CopySegment> segments;
  for (const PartitionInfo& p : layout.partitions()) {
    const ShardSpan owned = layout.Owned(p);
    if (owned.count == 0) continue;
    segments.push_back({.src_offset = p.full_offset + static_cast<int64_t>(owned.offset),
                        .dst_offset = p.shard_offset,
                        .count = static_cast<int64_t>(owned.count)});
  }
  return segments;
}

std::vector<ops::CopySegment> UnpackGatheredSegments(const ShardLayout& layout,
                                                     std::span<const int> run, int64_t header,
                                                     std::span<const int64_t> param_offset) {
  const int64_t piece = header + RunElements(layout, run);
  std::vector<ops::CopySegment> segments;
  for (int r = 0; r < layout.world(); ++r) {
    int64_t at = r * piece + header;
    for (int index : run) {
      const PartitionInfo& p = layout.partitions()[static_cast<size_t>(index)];
      const ShardSpan owned = layout.Owned(p, r);
      if (owned.count > 0) {
        segments.push_back(
            {.src_offset = at,
             .dst_offset = (param_offset.empty() ? p.full_offset
                                                 : param_offset[static_cast<size_t>(p.param)]) +
                           static_cast<int64_t>(owned.offset),
             .count = static_cast<int64_t>(owned.count)});
      }
      at += p.partition;
    }
  }
  return segments;
}

std::vector<std::vector<ops::CopySegment>> PackSegments(const ShardLayout& layout,
                                                        std::span<const int> run) {
  int64_t piece = 0;
  for (int index : run) piece += layout.partitions()[static_cast<size_t>(index)].partition;
  std::vector<std::vector<ops::CopySegment>> lists;
  int64_t at = 0;  // the partition's place in each rank's piece
  for (int index : run) {
    const PartitionInfo& p = layout.partitions()[static_cast<size_t>(index)];
    std::vector<ops::CopySegment>& list = lists.emplace_back();
    for (int r = 0; r < layout.world(); ++r) {
      const ShardSpan owned = layout.Owned(p, r);
      list.push_back({.src_offset = static_cast<int64_t>(owned.offset),
                      .dst_offset = r * piece + at,
                      .count = static_cast<int64_t>(owned.count),
                      .zero_fill = p.partition - static_cast<int64_t>(owned.count)});
    }
    at += p.partition;
  }
  return lists;
}

std::vector<ops::CopySegment> AccumulateIntoShardSegments(const ShardLayout& layout,
                                                          std::span<const int> run) {
  std::vector<ops::CopySegment> segments;
  int64_t at = 0;
  for (int index : run) {
    const PartitionInfo& p = layout.partitions()[static_cast<size_t>(index)];
    if (p.partition > 0) {
      segments.push_back({.src_offset = at, .dst_offset = p.shard_offset, .count = p.partition});
    }
    at += p.partition;
  }
  return segments;
}

template <typename V>
Result<DeviceBuffer> UploadArray(Stream& stream, std::span<const V> values, std::string_view what) {
  Device& device = stream.device();
  Result<DeviceBuffer> buffer =
      device.Allocate(std::max<size_t>(values.size_bytes(), 1), MemoryCategory::kBuffers);
  if (!buffer.ok()) return Status(buffer.status()).WithContext(fmt::format("allocating {}", what));
  if (!values.empty()) {
    SLUICE_RETURN_IF_ERROR(device.CopyAsync(buffer->data(), values.data(), values.size_bytes(),
                                            CopyKind::kH2D, stream));
  }
  // The caller's host array may go as soon as this returns.
  SLUICE_RETURN_IF_ERROR(stream.Synchronize());
  return buffer;
}
template Result<DeviceBuffer> UploadArray<ops::CopySegment>(Stream&,
                                                            std::span<const ops::CopySegment>,
                                                            std::string_view);
template Result<DeviceBuffer> UploadArray<ops::SumPiece>(Stream&, std::span<const ops::SumPiece>,
                                                         std::string_view);
template Result<DeviceBuffer> UploadArray<int64_t>(Stream&, std::span<const int64_t>,
                                                   std::string_view);
template Result<DeviceBuffer> UploadArray<double>(Stream&, std::span<const double>,
                                                  std::string_view);

Result<std::unique_ptr<DeviceSegments>> DeviceSegments::Create(
    Stream& stream, const std::vector<ops::CopySegment>& segments, std::string_view what) {
  std::unique_ptr<DeviceSegments> out(new DeviceSegments());
  SLUICE_ASSIGN_OR_RETURN(out->buffer_, UploadArray<ops::CopySegment>(stream, segments, what));
  int64_t largest = 0;
  for (const ops::CopySegment& s : segments) largest = std::max(largest, s.count + s.zero_fill);
  out->list_ = {.data = out->buffer_.data_as<ops::CopySegment>(),
                .count = static_cast<int>(segments.size()),
                .max_segment_elements = largest};
  return out;
}

}  // namespace sluice::zero
