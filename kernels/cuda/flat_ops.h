// Operations over flat device buffers, the GPU side of what the ZeRO engine does to its shards:
// fill, dtype conversion, gradient accumulation into fp32, scaling, the squared sum of the global
// gradient norm, the inf/NaN check of loss scaling, and the segment copies that pack parameter
// partitions into collective buckets and back (engine/zero/partition_copy.h).
//
// Every launcher takes n of any size (0 is a no-op), walks the buffer with a grid-stride loop and
// uses 128-bit (fp32) or 64-bit (16-bit) accesses where every pointer is aligned for them, an
// element-wise kernel with the same result where not. Results are bitwise independent of the grid.
// 16-bit conversions round as kernels/ref/half.h does, bit for bit (NaN stays a quiet NaN with its
// sign and top payload bits; f16 overflow becomes infinity).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/launch_status.h"

namespace sluice::kernels::cuda {

// y[i] = value for i < n. T: float, __nv_bfloat16, int32_t.
template <typename T>
LaunchStatus Fill(T* y, T value, int64_t n, cudaStream_t stream);

// y[i] = x[i] converted, round to nearest even. x and y must not overlap.
LaunchStatus ConvertF32ToBf16(const float* x, __nv_bfloat16* y, int64_t n, cudaStream_t stream);
LaunchStatus ConvertBf16ToF32(const __nv_bfloat16* x, float* y, int64_t n, cudaStream_t stream);
LaunchStatus ConvertF32ToF16(const float* x, __half* y, int64_t n, cudaStream_t stream);
LaunchStatus ConvertF16ToF32(const __half* x, float* y, int64_t n, cudaStream_t stream);

// y[i] += float(x[i]): gradient accumulation into an fp32 buffer. Tin: float, __nv_bfloat16. x may
// equal y (doubles it) but must not otherwise overlap it. (Named apart from the elementwise
// family's Accumulate(const T*, T*, ...), whose fp32 overload has the same signature.)
template <typename Tin>
LaunchStatus AccumulateToF32(const Tin* x, float* y, int64_t n, cudaStream_t stream);

// y[i] *= s.
LaunchStatus Scale(float* y, float s, int64_t n, cudaStream_t stream);

// *out = sum over i < n of double(x[i])^2: the local part of the global gradient norm, in double as
// engine/zero/shard_grad_norm.cpp sums it (each square is exact in double). Fixed-order two-pass
// reduction: chunks of kSquaredSumChunk elements, each summed by one block in a fixed tree into a
// double partial in `workspace`, then one block sums the partials in a fixed order. The result
// depends on n and the values only: bitwise the same run to run, for any alignment of x, on any
// GPU. Not the CPU's bits (the CPU adds sequentially): equal within the double rounding of the
// two orders, ~1e-15 relative. An inf or NaN in x makes *out non-finite. Several buffers' sums go
// to out + k, for k of their own, and may share one workspace only when run on one stream.
// T: float, __nv_bfloat16. `out` is device memory (8-byte aligned); n == 0 writes 0.
inline constexpr int64_t kSquaredSumChunk = 8192;
size_t SquaredSumWorkspaceBytes(int64_t n);  // 0 when n <= kSquaredSumChunk
template <typename T>
LaunchStatus SquaredSum(const T* x, int64_t n, double* out, void* workspace, size_t workspace_bytes,
                        cudaStream_t stream);

// The squared sums of blocks of x, each block made of pieces: out[j] = sum of double(x[i])^2 over
// the elements of pieces[first[j]] .. pieces[first[j + 1] - 1] (first: blocks + 1 entries, device
// memory like pieces, built once per layout). The blocked gradient norm of a ZeRO shard
// (engine/zero/shard_grad_norm.h), whose blocks of the model's flat index are split between
// partitions and ranks. One thread block per sum block, threads striding each piece, then a fixed
// tree: deterministic, the CPU's bits within double rounding. An empty block writes +0.
struct SumPiece {
  int64_t offset = 0;
  int64_t count = 0;
};
LaunchStatus BlockSquaredSums(const float* x, const SumPiece* pieces, const int64_t* first,
                              int64_t blocks, double* out, cudaStream_t stream);

// Sets *flag = 1 if any x[i] (i < n) is +-inf or NaN, and leaves it as it is otherwise: zero the
// flag once, then several buffers may OR into it. T: float, __nv_bfloat16. `flag` is device memory.
template <typename T>
LaunchStatus FlagInfOrNan(const T* x, int64_t n, int32_t* flag, cudaStream_t stream);

// One piece of a segment copy, in elements of the respective buffers: dst[dst_offset + i] =
// src[src_offset + i] for i < count, then dst[dst_offset + count + j] = 0 for j < zero_fill (the
// padding of a ZeRO partition, see PackForReduceScatter in engine/zero/partition_copy.h).
struct FlatSegment {
  int64_t src_offset = 0;
  int64_t dst_offset = 0;
  int64_t count = 0;
  int64_t zero_fill = 0;
};

// Moves num_segments segments (a device array, built once per layout) in one launch: pack the
// partitions of a run into a collective bucket (with zero padding), unpack a gathered bucket into
// the full parameters, or extract owned ranges into a shard. Segments run in parallel, so the
// ranges they write must not overlap each other or src. Pairs (TSrc -> TDst): float -> float,
// __nv_bfloat16 -> __nv_bfloat16, __half -> __half (raw bits), __nv_bfloat16 / __half -> float
// (exact), float -> __nv_bfloat16 / __half (round to nearest even).
// max_segment_elements (the largest count + zero_fill, or an estimate) only sizes the grid: every
// element is moved whatever its value.
template <typename TSrc, typename TDst>
LaunchStatus CopySegments(const TSrc* src, TDst* dst, const FlatSegment* segments, int num_segments,
                          int64_t max_segment_elements, cudaStream_t stream);

// dst[dst_offset + i] += src[src_offset + i] for i < count of each segment; zero_fill is ignored
// (padding left as it is): AccumulateIntoShard of engine/zero/partition_copy.h in one launch.
LaunchStatus AccumulateSegments(const float* src, float* dst, const FlatSegment* segments,
                                int num_segments, int64_t max_segment_elements,
                                cudaStream_t stream);

}  // namespace sluice::kernels::cuda
