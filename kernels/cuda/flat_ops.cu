#include <cuda_runtime.h>

#include <cstring>
#include <string>
#include <type_traits>

#include "kernels/cuda/flat_ops.h"
#include "kernels/cuda/half_bits.cuh"
#include "kernels/cuda/launch_check.h"

namespace sluice::kernels::cuda {
namespace {

using internal::AfterLaunch;
using internal::Aligned;
using internal::GridFor;

constexpr unsigned kThreads = 256;

// The element types as the kernels see them: 16-bit floats travel as their bits, so conversions
// go through half_bits.cuh and nothing rounds behind our back.
struct F32Tag {
  using Storage = float;
  __device__ static float ToF32(float x) { return x; }
  __device__ static float FromF32(float x) { return x; }
  __device__ static bool NonFinite(float x) {
    return (__float_as_uint(x) & 0x7fffffffu) >= 0x7f800000u;
  }
};
struct Bf16Tag {
  using Storage = uint16_t;
  __device__ static float ToF32(uint16_t x) { return internal::Bf16BitsToF32(x); }
  __device__ static uint16_t FromF32(float x) { return internal::F32ToBf16Bits(x); }
  __device__ static bool NonFinite(uint16_t x) { return (x & 0x7fffu) >= 0x7f80u; }
};
struct F16Tag {
  using Storage = uint16_t;
  __device__ static float ToF32(uint16_t x) { return internal::F16BitsToF32(x); }
  __device__ static uint16_t FromF32(float x) { return internal::F32ToF16Bits(x); }
};

template <typename T>
struct TagOf;
template <>
struct TagOf<float> {
  using type = F32Tag;
};
template <>
struct TagOf<__nv_bfloat16> {
  using type = Bf16Tag;
};
template <>
struct TagOf<__half> {
  using type = F16Tag;
};

template <typename T>
using StorageOf = typename TagOf<T>::type::Storage;

// The public pointer as the kernels' storage type, const kept.
template <typename T>
auto Raw(T* p) {
  using S = StorageOf<std::remove_const_t<T>>;
  if constexpr (std::is_const_v<T>) {
    return reinterpret_cast<const S*>(p);
  } else {
    return reinterpret_cast<S*>(p);
  }
}

// N elements moved by one access (16 B of fp32, 8 or 16 B of 16-bit values).
template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

template <typename T, int N>
__device__ __forceinline__ Vec<T, N> Load(const T* p) {
  return *reinterpret_cast<const Vec<T, N>*>(p);
}
template <typename T, int N>
__device__ __forceinline__ void Store(T* p, const Vec<T, N>& v) {
  *reinterpret_cast<Vec<T, N>*>(p) = v;
}

// Groups of Op::kVec elements per thread and iteration, then the last n % kVec elements by the
// first threads of block 0. With N = 1 the whole buffer goes element by element.
template <int N, typename Op>
__global__ void __launch_bounds__(kThreads) ElementwiseKernel(const Op op, int64_t n) {
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t groups = n / N;
  for (int64_t g = thread; g < groups; g += stride) op.template Apply<N>(g * N);
  const int64_t tail = groups * N + thread;
  if (tail < n) op.template Apply<1>(tail);
}

template <typename Op>
LaunchStatus LaunchElementwise(const Op& op, int64_t n, bool vectorized, const char* what,
                               cudaStream_t stream) {
  constexpr int kVec = Op::kVec;
  if (vectorized) {
    ElementwiseKernel<kVec>
        <<<GridFor((n + kVec - 1) / kVec, kThreads), kThreads, 0, stream>>>(op, n);
  } else {
    ElementwiseKernel<1><<<GridFor(n, kThreads), kThreads, 0, stream>>>(op, n);
  }
  return AfterLaunch(what);
}

template <typename S>
struct FillOp {
  static constexpr int kVec = 16 / sizeof(S);
  S* y;
  S value;
  template <int N>
  __device__ void Apply(int64_t i) const {
    Vec<S, N> v;
#pragma unroll
    for (int j = 0; j < N; ++j) v.v[j] = value;
    Store<S, N>(y + i, v);
  }
};

template <typename In, typename Out>
struct ConvertOp {
  static constexpr int kVec = 4;
  const typename In::Storage* x;
  typename Out::Storage* y;
  template <int N>
  __device__ void Apply(int64_t i) const {
    const Vec<typename In::Storage, N> in = Load<typename In::Storage, N>(x + i);
    Vec<typename Out::Storage, N> out;
#pragma unroll
    for (int j = 0; j < N; ++j) out.v[j] = Out::FromF32(In::ToF32(in.v[j]));
    Store<typename Out::Storage, N>(y + i, out);
  }
};

template <typename In>
struct AccumulateOp {
  static constexpr int kVec = 4;
  const typename In::Storage* x;
  float* y;
  template <int N>
  __device__ void Apply(int64_t i) const {
    const Vec<typename In::Storage, N> in = Load<typename In::Storage, N>(x + i);
    Vec<float, N> acc = Load<float, N>(y + i);
#pragma unroll
    for (int j = 0; j < N; ++j) acc.v[j] = __fadd_rn(acc.v[j], In::ToF32(in.v[j]));
    Store<float, N>(y + i, acc);
  }
};

struct ScaleOp {
  static constexpr int kVec = 4;
  float* y;
  float s;
  template <int N>
  __device__ void Apply(int64_t i) const {
    Vec<float, N> v = Load<float, N>(y + i);
#pragma unroll
    for (int j = 0; j < N; ++j) v.v[j] = __fmul_rn(v.v[j], s);
    Store<float, N>(y + i, v);
  }
};

template <typename In, typename Out>
LaunchStatus Convert(const typename In::Storage* x, typename Out::Storage* y, int64_t n,
                     const char* what, cudaStream_t stream) {
  SLUICE_CUDA_LAUNCH_REQUIRE(n >= 0, std::string(what) + ": n < 0");
  SLUICE_CUDA_LAUNCH_REQUIRE(n == 0 || (x != nullptr && y != nullptr),
                             std::string(what) + ": null pointer with n > 0");
  if (n == 0) return LaunchStatus::Ok();
  const bool vectorized = Aligned(x, 4 * sizeof(*x)) && Aligned(y, 4 * sizeof(*y));
  return LaunchElementwise(ConvertOp<In, Out>{x, y}, n, vectorized, what, stream);
}

// --- Squared sum --------------------------------------------------------------------------------

constexpr unsigned kSumThreads = 256;
constexpr int kSumRounds = static_cast<int>(kSquaredSumChunk / (4 * kSumThreads));
static_assert(kSquaredSumChunk == int64_t{kSumRounds} * 4 * kSumThreads);
// Pass 1 walks the chunks grid-stride with at most this many blocks (about 8 per SM of an H100);
// the value does not change the result.
constexpr int64_t kSumBlocks = 1024;

__host__ __device__ int64_t SumChunks(int64_t n) {
  return (n + kSquaredSumChunk - 1) / kSquaredSumChunk;
}

// Thread 0 gets the block's sum, always added in the same tree.
__device__ double BlockSum(double v) {
  __shared__ double warp_sums[kSumThreads / 32];
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  const unsigned lane = threadIdx.x % 32;
  const unsigned warp = threadIdx.x / 32;
  __syncthreads();  // the previous call's readers are done with warp_sums
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  v = 0.0;
  if (warp == 0) {
    if (lane < kSumThreads / 32) v = warp_sums[lane];
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  }
  return v;
}

// Chunk c covers elements [c * 8192, (c + 1) * 8192). Thread t owns the groups of four at
// 1024 * r + 4 * t, r < 8, and adds their squares in that order whether it loads them as one
// vector or one by one (missing elements count as +0, which adds exactly), so the result does not
// depend on the buffer's alignment.
template <typename Tag, bool kVectorized>
__global__ void __launch_bounds__(kSumThreads)
    SquaredSumPartials(const typename Tag::Storage* x, int64_t n, double* partials) {
  using S = typename Tag::Storage;
  const int64_t chunks = SumChunks(n);
  for (int64_t chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x) {
    double sum = 0.0;
#pragma unroll 2
    for (int r = 0; r < kSumRounds; ++r) {
      const int64_t first =
          chunk * kSquaredSumChunk + int64_t{r} * 4 * kSumThreads + 4 * threadIdx.x;
      float v[4];
      if (kVectorized && first + 4 <= n) {
        const Vec<S, 4> in = Load<S, 4>(x + first);
#pragma unroll
        for (int j = 0; j < 4; ++j) v[j] = Tag::ToF32(in.v[j]);
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) v[j] = first + j < n ? Tag::ToF32(x[first + j]) : 0.0f;
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const double d = v[j];
        sum += d * d;  // exact product: contracting it into an FMA changes nothing
      }
    }
    sum = BlockSum(sum);
    if (threadIdx.x == 0) partials[chunk] = sum;
  }
}

__global__ void __launch_bounds__(kSumThreads)
    SquaredSumFinish(const double* partials, int64_t chunks, double* out) {
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < chunks; i += kSumThreads) sum += partials[i];
  sum = BlockSum(sum);
  if (threadIdx.x == 0) *out = sum;
}

// One block per sum block (grid-stride over them); thread t adds the elements t, t + 256, ... of
// each piece in turn, so the order depends on the pieces only, not on the grid.
__global__ void __launch_bounds__(kSumThreads)
    BlockSquaredSumsKernel(const float* __restrict__ x, const SumPiece* __restrict__ pieces,
                           const int64_t* __restrict__ first, int64_t blocks,
                           double* __restrict__ out) {
  for (int64_t j = blockIdx.x; j < blocks; j += gridDim.x) {
    double sum = 0.0;
    for (int64_t p = first[j]; p < first[j + 1]; ++p) {
      const SumPiece piece = pieces[p];
      for (int64_t i = threadIdx.x; i < piece.count; i += kSumThreads) {
        const double v = x[piece.offset + i];
        sum += v * v;
      }
    }
    sum = BlockSum(sum);
    if (threadIdx.x == 0) out[j] = sum;
  }
}

// --- Inf / NaN flag -----------------------------------------------------------------------------

template <typename Tag, int N>
__global__ void __launch_bounds__(kThreads)
    FlagInfOrNanKernel(const typename Tag::Storage* x, int64_t n, int32_t* flag) {
  using S = typename Tag::Storage;
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t groups = n / N;
  bool found = false;
  for (int64_t g = thread; g < groups; g += stride) {
    const Vec<S, N> in = Load<S, N>(x + g * N);
#pragma unroll
    for (int j = 0; j < N; ++j) found |= Tag::NonFinite(in.v[j]);
  }
  const int64_t tail = groups * N + thread;
  if (tail < n) found |= Tag::NonFinite(x[tail]);
  // Every thread reaches this barrier; one store per block that saw something.
  if (__syncthreads_or(found) && threadIdx.x == 0) atomicOr(flag, 1);
}

// --- Segment copies -----------------------------------------------------------------------------

enum class SegmentMode { kCopy, kAdd };

// Elements per vector access of a segment: 16 bytes of the wider of the two types (8 bf16 -> bf16,
// 4 for every pair with fp32).
template <typename S, typename D>
constexpr int kSegmentVec = 16 / static_cast<int>(sizeof(S) > sizeof(D) ? sizeof(S) : sizeof(D));

// Vectors per thread the grid is sized for: a few, so that the segment lookup at the start of a
// block is paid for by more than one load, yet the grid stays large enough to hide the tail.
constexpr int64_t kSegmentVectorsPerThread = 2;

// Value that makes WalkSegment go element by element.
constexpr int64_t kNoCommonAlignment = INT64_MAX;

// Elements from p to the next kBytes boundary (p itself aligned to its element).
template <int kBytes, typename S>
__device__ __forceinline__ int64_t HeadToAlign(const S* p) {
  const auto misaligned = static_cast<int64_t>(reinterpret_cast<uintptr_t>(p) % kBytes);
  return misaligned == 0 ? 0 : (kBytes - misaligned) / static_cast<int64_t>(sizeof(S));
}

// The head after which both a[i] and b[i] start N-element vectors, or kNoCommonAlignment when
// their offsets within a vector differ (a segment at an odd offset in one buffer only).
template <int N, typename A, typename B>
__device__ __forceinline__ int64_t CommonHead(const A* a, const B* b) {
  const int64_t head = HeadToAlign<N * sizeof(A)>(a);
  const bool both = reinterpret_cast<uintptr_t>(a + head) % (N * sizeof(A)) == 0 &&
                    reinterpret_cast<uintptr_t>(b + head) % (N * sizeof(B)) == 0;
  return both ? head : kNoCommonAlignment;
}

// Hands the elements [0, n) of one segment to this block row's threads: whole N-element vectors
// from `head` on through vector(i), the elements before head and after the last vector (fewer
// than 2N in all unless head is kNoCommonAlignment) one by one through scalar(i). Each element is
// visited once, whatever the grid.
template <int N, typename Scalar, typename Vector>
__device__ __forceinline__ void WalkSegment(int64_t n, int64_t head, const Scalar& scalar,
                                            const Vector& vector) {
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  if (head > n) head = n;
  const int64_t vectors = (n - head) / N;
  for (int64_t v = first; v < vectors; v += stride) vector(head + v * N);
  const int64_t body_end = head + vectors * N;
  const int64_t edges = head + (n - body_end);
  for (int64_t e = first; e < edges; e += stride) scalar(e < head ? e : body_end + (e - head));
}

// Blocks per SM the kernel is compiled for: 8 (2048 threads, 32 registers), the most bytes in
// flight, which a copy needs more than registers; 6 (40 registers) where the software widening
// of f16 needs more.
template <typename Src, typename Dst>
constexpr bool kWidensF16 =
    std::conjunction_v<std::is_same<Src, F16Tag>, std::is_same<Dst, F32Tag>>;
template <typename Src, typename Dst>
constexpr int kSegmentMinBlocks = kWidensF16<Src, Dst> ? 6 : 8;

// blockIdx.y walks the segments, blockIdx.x and the threads walk a segment's elements, in 16-byte
// vectors where the segment's source and destination share their offset within a vector (always,
// for the offsets of a ZeRO bucket of an aligned buffer), else element by element.
template <SegmentMode kMode, typename Src, typename Dst>
__global__ void __launch_bounds__(kThreads, kSegmentMinBlocks<Src, Dst>)
    SegmentKernel(const typename Src::Storage* src, typename Dst::Storage* dst,
                  const FlatSegment* segments, int num_segments) {
  using S = typename Src::Storage;
  using D = typename Dst::Storage;
  constexpr int N = kSegmentVec<S, D>;
  for (int s = blockIdx.y; s < num_segments; s += gridDim.y) {
    const FlatSegment seg = segments[s];
    const S* in = src + seg.src_offset;
    D* out = dst + seg.dst_offset;
    const int64_t head = CommonHead<N>(in, out);
    if constexpr (kMode == SegmentMode::kAdd) {
      WalkSegment<N>(
          seg.count, head, [&](int64_t i) { out[i] = __fadd_rn(out[i], in[i]); },
          [&](int64_t i) {
            const Vec<float, N> x = Load<float, N>(in + i);
            Vec<float, N> y = Load<float, N>(out + i);
#pragma unroll
            for (int j = 0; j < N; ++j) y.v[j] = __fadd_rn(y.v[j], x.v[j]);
            Store<float, N>(out + i, y);
          });
    } else {
      // Raw bits between equal types (NaN payloads included), else a rounding conversion.
      const auto convert = [](S x) -> D {
        if constexpr (std::is_same_v<Src, Dst>) {
          return x;
        } else {
          return Dst::FromF32(Src::ToF32(x));
        }
      };
      WalkSegment<N>(
          seg.count, head, [&](int64_t i) { out[i] = convert(in[i]); },
          [&](int64_t i) {
            const Vec<S, N> x = Load<S, N>(in + i);
            Vec<D, N> y;
#pragma unroll
            for (int j = 0; j < N; ++j) y.v[j] = convert(x.v[j]);
            Store<D, N>(out + i, y);
          });
      // The padding: +0 in every format, in 16-byte stores of its own alignment.
      constexpr int Z = 16 / static_cast<int>(sizeof(D));
      D* pad = out + seg.count;
      WalkSegment<Z>(
          seg.zero_fill, HeadToAlign<16>(pad), [&](int64_t i) { pad[i] = D{0}; },
          [&](int64_t i) { Store<D, Z>(pad + i, Vec<D, Z>{}); });
    }
  }
}

// y rows of segments (at most 65535, looping beyond), x blocks per segment for
// max_segment_elements in kSegmentVectorsPerThread vectors of N per thread, at most
// 65535 * 4 blocks in all (as GridFor).
template <int N>
dim3 SegmentGrid(int num_segments, int64_t max_segment_elements) {
  constexpr int64_t kMaxBlocks = int64_t{65535} * 4;
  constexpr int64_t kPerBlock = int64_t{kThreads} * N * kSegmentVectorsPerThread;
  const unsigned y = static_cast<unsigned>(num_segments < 65535 ? num_segments : 65535);
  int64_t x = (max_segment_elements + kPerBlock - 1) / kPerBlock;
  const int64_t x_cap = kMaxBlocks / y > 1 ? kMaxBlocks / y : 1;
  if (x > x_cap) x = x_cap;
  if (x < 1) x = 1;
  return dim3(static_cast<unsigned>(x), y, 1);
}

LaunchStatus CheckSegments(const void* src, const void* dst, const FlatSegment* segments,
                           int num_segments, int64_t max_segment_elements, const char* what) {
  SLUICE_CUDA_LAUNCH_REQUIRE(num_segments >= 0, std::string(what) + ": num_segments < 0");
  SLUICE_CUDA_LAUNCH_REQUIRE(max_segment_elements >= 0,
                             std::string(what) + ": max_segment_elements < 0");
  SLUICE_CUDA_LAUNCH_REQUIRE(
      num_segments == 0 || (src != nullptr && dst != nullptr && segments != nullptr),
      std::string(what) + ": null pointer with num_segments > 0");
  SLUICE_CUDA_LAUNCH_REQUIRE(Aligned(segments, alignof(FlatSegment)),
                             std::string(what) + ": segments not aligned to 8 bytes");
  return LaunchStatus::Ok();
}

}  // namespace

template <typename T>
LaunchStatus Fill(T* y, T value, int64_t n, cudaStream_t stream) {
  SLUICE_CUDA_LAUNCH_REQUIRE(n >= 0, "Fill: n < 0");
  SLUICE_CUDA_LAUNCH_REQUIRE(n == 0 || y != nullptr, "Fill: y is null with n > 0");
  if (n == 0) return LaunchStatus::Ok();
  const bool vectorized = Aligned(y, 16);
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    uint16_t bits;
    static_assert(sizeof(bits) == sizeof(value));
    std::memcpy(&bits, &value, sizeof(bits));
    return LaunchElementwise(FillOp<uint16_t>{reinterpret_cast<uint16_t*>(y), bits}, n, vectorized,
                             "Fill", stream);
  } else {
    return LaunchElementwise(FillOp<T>{y, value}, n, vectorized, "Fill", stream);
  }
}
template LaunchStatus Fill<float>(float*, float, int64_t, cudaStream_t);
template LaunchStatus Fill<__nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16, int64_t, cudaStream_t);
template LaunchStatus Fill<int32_t>(int32_t*, int32_t, int64_t, cudaStream_t);

LaunchStatus ConvertF32ToBf16(const float* x, __nv_bfloat16* y, int64_t n, cudaStream_t stream) {
  return Convert<F32Tag, Bf16Tag>(x, Raw(y), n, "ConvertF32ToBf16", stream);
}
LaunchStatus ConvertBf16ToF32(const __nv_bfloat16* x, float* y, int64_t n, cudaStream_t stream) {
  return Convert<Bf16Tag, F32Tag>(Raw(x), y, n, "ConvertBf16ToF32", stream);
}
LaunchStatus ConvertF32ToF16(const float* x, __half* y, int64_t n, cudaStream_t stream) {
  return Convert<F32Tag, F16Tag>(x, Raw(y), n, "ConvertF32ToF16", stream);
}
LaunchStatus ConvertF16ToF32(const __half* x, float* y, int64_t n, cudaStream_t stream) {
  return Convert<F16Tag, F32Tag>(Raw(x), y, n, "ConvertF16ToF32", stream);
}

template <typename Tin>
LaunchStatus AccumulateToF32(const Tin* x, float* y, int64_t n, cudaStream_t stream) {
  SLUICE_CUDA_LAUNCH_REQUIRE(n >= 0, "AccumulateToF32: n < 0");
  SLUICE_CUDA_LAUNCH_REQUIRE(n == 0 || (x != nullptr && y != nullptr),
                             "AccumulateToF32: null pointer with n > 0");
  if (n == 0) return LaunchStatus::Ok();
  const bool vectorized = Aligned(x, 4 * sizeof(Tin)) && Aligned(y, 16);
  using Tag = typename TagOf<Tin>::type;
  return LaunchElementwise(AccumulateOp<Tag>{Raw(x), y}, n, vectorized, "AccumulateToF32", stream);
}
template LaunchStatus AccumulateToF32<float>(const float*, float*, int64_t, cudaStream_t);
template LaunchStatus AccumulateToF32<__nv_bfloat16>(const __nv_bfloat16*, float*, int64_t,
                                                     cudaStream_t);

LaunchStatus Scale(float* y, float s, int64_t n, cudaStream_t stream) {
  SLUICE_CUDA_LAUNCH_REQUIRE(n >= 0, "Scale: n < 0");
  SLUICE_CUDA_LAUNCH_REQUIRE(n == 0 || y != nullptr, "Scale: y is null with n > 0");
  if (n == 0) return LaunchStatus::Ok();
  return LaunchElementwise(ScaleOp{y, s}, n, Aligned(y, 16), "Scale", stream);
}

size_t SquaredSumWorkspaceBytes(int64_t n) {
  const int64_t chunks = SumChunks(n);
  return chunks > 1 ? static_cast<size_t>(chunks) * sizeof(double) : 0;
}

template <typename T>
LaunchStatus SquaredSum(const T* x, int64_t n, double* out, void* workspace, size_t workspace_bytes,
                        cudaStream_t stream) {
  SLUICE_CUDA_LAUNCH_REQUIRE(n >= 0, "SquaredSum: n < 0");
  SLUICE_CUDA_LAUNCH_REQUIRE(out != nullptr, "SquaredSum: out is null");
  SLUICE_CUDA_LAUNCH_REQUIRE(Aligned(out, sizeof(double)), "SquaredSum: out is not 8-byte aligned");
  SLUICE_CUDA_LAUNCH_REQUIRE(n == 0 || x != nullptr, "SquaredSum: x is null with n > 0");
  const size_t needed = SquaredSumWorkspaceBytes(n);
  SLUICE_CUDA_LAUNCH_REQUIRE(
      needed == 0 ||
          (workspace != nullptr && workspace_bytes >= needed && Aligned(workspace, sizeof(double))),
      "SquaredSum: workspace must be 8-byte aligned and hold SquaredSumWorkspaceBytes(n) = " +
          std::to_string(needed) + " bytes, got " + std::to_string(workspace_bytes));
  if (n == 0) {
    SLUICE_CUDA_LAUNCH_TRY(cudaMemsetAsync(out, 0, sizeof(double), stream));  // +0.0
    return LaunchStatus::Ok();
  }
  using Tag = typename TagOf<T>::type;
  const int64_t chunks = SumChunks(n);
  double* partials = chunks > 1 ? static_cast<double*>(workspace) : out;
  const unsigned blocks = static_cast<unsigned>(chunks < kSumBlocks ? chunks : kSumBlocks);
  if (Aligned(x, 4 * sizeof(T))) {
    SquaredSumPartials<Tag, true><<<blocks, kSumThreads, 0, stream>>>(Raw(x), n, partials);
  } else {
    SquaredSumPartials<Tag, false><<<blocks, kSumThreads, 0, stream>>>(Raw(x), n, partials);
  }
  if (chunks > 1) SquaredSumFinish<<<1, kSumThreads, 0, stream>>>(partials, chunks, out);
  return AfterLaunch("SquaredSum");
}
template LaunchStatus SquaredSum<float>(const float*, int64_t, double*, void*, size_t,
                                        cudaStream_t);
template LaunchStatus SquaredSum<__nv_bfloat16>(const __nv_bfloat16*, int64_t, double*, void*,
                                                size_t, cudaStream_t);

LaunchStatus BlockSquaredSums(const float* x, const SumPiece* pieces, const int64_t* first,
                              int64_t blocks, double* out, cudaStream_t stream) {
  SLUICE_CUDA_LAUNCH_REQUIRE(blocks >= 0, "BlockSquaredSums: blocks < 0");
  if (blocks == 0) return LaunchStatus::Ok();
  SLUICE_CUDA_LAUNCH_REQUIRE(
      x != nullptr && pieces != nullptr && first != nullptr && out != nullptr,
      "BlockSquaredSums: null pointer with blocks > 0");
  SLUICE_CUDA_LAUNCH_REQUIRE(Aligned(out, sizeof(double)),
                             "BlockSquaredSums: out is not 8-byte aligned");
  // About 60 blocks per SM of an H100; the value does not change the result.
  constexpr int64_t kMaxGrid = 8192;
  const unsigned grid = static_cast<unsigned>(blocks < kMaxGrid ? blocks : kMaxGrid);
  BlockSquaredSumsKernel<<<grid, kSumThreads, 0, stream>>>(x, pieces, first, blocks, out);
  return AfterLaunch("BlockSquaredSums");
}

template <typename T>
LaunchStatus FlagInfOrNan(const T* x, int64_t n, int32_t* flag, cudaStream_t stream) {
  SLUICE_CUDA_LAUNCH_REQUIRE(n >= 0, "FlagInfOrNan: n < 0");
  SLUICE_CUDA_LAUNCH_REQUIRE(n == 0 || (x != nullptr && flag != nullptr),
                             "FlagInfOrNan: null pointer with n > 0");
  if (n == 0) return LaunchStatus::Ok();
  using Tag = typename TagOf<T>::type;
  constexpr int kVec = 16 / sizeof(T);
  if (Aligned(x, 16)) {
    FlagInfOrNanKernel<Tag, kVec>
        <<<GridFor((n + kVec - 1) / kVec, kThreads), kThreads, 0, stream>>>(Raw(x), n, flag);
  } else {
    FlagInfOrNanKernel<Tag, 1><<<GridFor(n, kThreads), kThreads, 0, stream>>>(Raw(x), n, flag);
  }
  return AfterLaunch("FlagInfOrNan");
}
template LaunchStatus FlagInfOrNan<float>(const float*, int64_t, int32_t*, cudaStream_t);
template LaunchStatus FlagInfOrNan<__nv_bfloat16>(const __nv_bfloat16*, int64_t, int32_t*,
                                                  cudaStream_t);

template <typename TSrc, typename TDst>
LaunchStatus CopySegments(const TSrc* src, TDst* dst, const FlatSegment* segments, int num_segments,
                          int64_t max_segment_elements, cudaStream_t stream) {
  LaunchStatus status =
      CheckSegments(src, dst, segments, num_segments, max_segment_elements, "CopySegments");
  if (!status.ok() || num_segments == 0) return status;
  using Src = typename TagOf<TSrc>::type;
  using Dst = typename TagOf<TDst>::type;
  constexpr int N = kSegmentVec<typename Src::Storage, typename Dst::Storage>;
  SegmentKernel<SegmentMode::kCopy, Src, Dst>
      <<<SegmentGrid<N>(num_segments, max_segment_elements), kThreads, 0, stream>>>(
          Raw(src), Raw(dst), segments, num_segments);
  return AfterLaunch("CopySegments");
}
template LaunchStatus CopySegments<float, float>(const float*, float*, const FlatSegment*, int,
                                                 int64_t, cudaStream_t);
template LaunchStatus CopySegments<__nv_bfloat16, __nv_bfloat16>(const __nv_bfloat16*,
                                                                 __nv_bfloat16*, const FlatSegment*,
                                                                 int, int64_t, cudaStream_t);
template LaunchStatus CopySegments<__half, __half>(const __half*, __half*, const FlatSegment*, int,
                                                   int64_t, cudaStream_t);
template LaunchStatus CopySegments<__nv_bfloat16, float>(const __nv_bfloat16*, float*,
                                                         const FlatSegment*, int, int64_t,
                                                         cudaStream_t);
template LaunchStatus CopySegments<__half, float>(const __half*, float*, const FlatSegment*, int,
                                                  int64_t, cudaStream_t);
template LaunchStatus CopySegments<float, __nv_bfloat16>(const float*, __nv_bfloat16*,
                                                         const FlatSegment*, int, int64_t,
                                                         cudaStream_t);
template LaunchStatus CopySegments<float, __half>(const float*, __half*, const FlatSegment*, int,
                                                  int64_t, cudaStream_t);

LaunchStatus AccumulateSegments(const float* src, float* dst, const FlatSegment* segments,
                                int num_segments, int64_t max_segment_elements,
                                cudaStream_t stream) {
  LaunchStatus status =
      CheckSegments(src, dst, segments, num_segments, max_segment_elements, "AccumulateSegments");
  if (!status.ok() || num_segments == 0) return status;
  constexpr int N = kSegmentVec<float, float>;
  SegmentKernel<SegmentMode::kAdd, F32Tag, F32Tag>
      <<<SegmentGrid<N>(num_segments, max_segment_elements), kThreads, 0, stream>>>(
          src, dst, segments, num_segments);
  return AfterLaunch("AccumulateSegments");
}

}  // namespace sluice::kernels::cuda
