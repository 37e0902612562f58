#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/element_access.cuh"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/launch_check.h"

namespace sluice::kernels::cuda {
namespace {

using internal::FromFloat;
using internal::ToFloat;

__device__ __forceinline__ void ReportInvalid(int32_t* flag) {
  if (flag != nullptr) atomicExch(flag, 1);
}

// ---- EmbeddingForward: one block per row, the row copied as opaque words of type W (the widest
// of 16, 8, 4 or 2 bytes that the row size and both pointers allow).

constexpr int kForwardThreads = 128;

template <typename W>
__global__ void __launch_bounds__(kForwardThreads)
    EmbeddingForwardKernel(const int32_t* tokens, const W* table, W* out, int64_t num_tokens,
                           int64_t vocab, int64_t row_words, int32_t* invalid_token) {
  for (int64_t row = blockIdx.x; row < num_tokens; row += gridDim.x) {
    const int32_t token = tokens[row];
    const bool valid = token >= 0 && token < vocab;
    if (!valid && threadIdx.x == 0) ReportInvalid(invalid_token);
    W* dst = out + row * row_words;
    if (valid) {
      const W* src = table + static_cast<int64_t>(token) * row_words;
      for (int64_t w = threadIdx.x; w < row_words; w += blockDim.x) dst[w] = src[w];
    } else {
      for (int64_t w = threadIdx.x; w < row_words; w += blockDim.x) dst[w] = W{};
    }
  }
}

template <typename W>
void LaunchEmbeddingForward(const int32_t* tokens, const void* table, void* out, int64_t num_tokens,
                            int64_t vocab, int64_t row_bytes, int32_t* invalid_token,
                            cudaStream_t stream) {
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(num_tokens, 1 << 20));
  EmbeddingForwardKernel<W><<<grid, kForwardThreads, 0, stream>>>(
      tokens, static_cast<const W*>(table), static_cast<W*>(out), num_tokens, vocab,
      row_bytes / static_cast<int64_t>(sizeof(W)), invalid_token);
}

bool Fits(int64_t row_bytes, const void* a, const void* b, size_t word) {
  return row_bytes % static_cast<int64_t>(word) == 0 && internal::Aligned(a, word) &&
         internal::Aligned(b, word);
}

// ---- EmbeddingBackward: find each id's first and last token, then one block per first
// occurrence (its "leader") sums that id's rows in token order for a tile of columns.
//
// No sort: for ids drawn from a large vocabulary nearly every token is its id's only one, and a
// device radix sort of a few thousand keys costs several launches or one single-block kernel,
// as long as the whole sum. Here the bounds cost one single-block kernel, and the sum kernel
// reads each dout row once, each named dtable row once and writes it once, with 16-byte accesses.

constexpr size_t kWorkspaceAlign = 256;
constexpr int kBoundsThreads = 1024;
constexpr int kSumThreads = 256;  // at most; a multiple of 32
// Rows of a repeated id loaded before any is added, so that a long run is not one load latency
// per row.
constexpr int kSumBatch = 4;

// The workspace holds int2 bounds[vocab] = (first, last token index) of each named id; the entries
// of ids no token names are never read. Carved from its first 256-byte boundary.
size_t BoundsBytes(int64_t vocab) {
  return kWorkspaceAlign + static_cast<size_t>(vocab) * sizeof(int2);
}

int2* CarveBounds(void* workspace) {
  auto base = reinterpret_cast<uintptr_t>(workspace);
  base = (base + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
  return reinterpret_cast<int2*>(base);
}

// One block, so that resetting the named entries and the atomics that fill them need no second
// launch: the barrier orders them. Integer min/max are exact, so the bounds are the same whatever
// order the atomics land in.
__global__ void __launch_bounds__(kBoundsThreads)
    TokenBoundsKernel(const int32_t* tokens, int64_t num_tokens, int64_t vocab, int2* bounds,
                      int32_t* invalid_token) {
  // The sum kernel may start now: until it waits on this grid it only loads dout and the ids.
  asm volatile("griddepcontrol.launch_dependents;");
  for (int64_t i = threadIdx.x; i < num_tokens; i += blockDim.x) {
    const int32_t token = tokens[i];
    if (token >= 0 && token < vocab) {
      bounds[token] = make_int2(INT32_MAX, -1);
    } else {
      ReportInvalid(invalid_token);
    }
  }
  __syncthreads();  // makes the block's stores visible to its own threads' atomics
  for (int64_t i = threadIdx.x; i < num_tokens; i += blockDim.x) {
    const int32_t token = tokens[i];
    if (token >= 0 && token < vocab) {
      atomicMin(&bounds[token].x, static_cast<int>(i));
      atomicMax(&bounds[token].y, static_cast<int>(i));
    }
  }
}

// kVec consecutive columns per thread: 16 bytes of dout when kVec > 1 (then dim % kVec == 0 and
// both pointers are 16-byte aligned), else one element. Loaded raw and unpacked to fp32 only when
// added, so that a batch of rows in flight costs 4 registers per row.
template <typename T, int kVec>
struct DoutVec {
  using Raw = std::conditional_t<kVec == 1, T, uint4>;
  static_assert(kVec == 1 || kVec * sizeof(T) == 16);

  __device__ __forceinline__ static Raw Load(const T* p) {
    if constexpr (kVec == 1) {
      return *p;
    } else {
      return __ldg(reinterpret_cast<const uint4*>(p));
    }
  }

  __device__ __forceinline__ static void Add(const Raw& raw, float (&acc)[kVec]) {
    if constexpr (kVec == 1) {
      acc[0] += ToFloat(raw);
    } else {
      const unsigned w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        if constexpr (sizeof(T) == 2) {
          acc[2 * k] += __uint_as_float(w[k] << 16);  // bf16 is the high half of an fp32
          acc[2 * k + 1] += __uint_as_float(w[k] & 0xffff0000u);
        } else {
          acc[k] += __uint_as_float(w[k]);
        }
      }
    }
  }
};

template <int kVec>
__device__ __forceinline__ void LoadTable(const float* p, float (&x)[kVec]) {
  if constexpr (kVec == 1) {
    x[0] = *p;
  } else {
#pragma unroll
    for (int k = 0; k < kVec; k += 4) {
      const float4 v = *reinterpret_cast<const float4*>(p + k);
      x[k] = v.x;
      x[k + 1] = v.y;
      x[k + 2] = v.z;
      x[k + 3] = v.w;
    }
  }
}

template <int kVec>
__device__ __forceinline__ void StoreTable(float* p, const float (&x)[kVec]) {
  if constexpr (kVec == 1) {
    *p = x[0];
  } else {
#pragma unroll
    for (int k = 0; k < kVec; k += 4) {
      *reinterpret_cast<float4*>(p + k) = make_float4(x[k], x[k + 1], x[k + 2], x[k + 3]);
    }
  }
}

// Block (i, tile): if token i is its id's first, dtable[id, tile] += the sum in fp32 of the id's
// rows in token order (0 + row i + later rows), exactly one writer per dtable element. The later
// rows are found by scanning tokens (i, last] a block-width chunk at a time and compacting the
// matches in order through shared memory. dout is loaded before the wait for TokenBoundsKernel
// and dtable together with the bounds, so the common single-row case makes one round trip after
// the bounds are ready. Loading dtable before the wait as well measured slower on an H100 (53 us
// against 42 us at the 1b shape).
template <typename T, int kVec>
__global__ void __launch_bounds__(kSumThreads, 5)
    SumTokenRowsKernel(const int32_t* tokens, const int2* bounds, const T* dout, float* dtable,
                       int64_t num_tokens, int64_t vocab, int64_t dim) {
  __shared__ int32_t matched[kSumThreads];
  __shared__ int32_t warp_matches[kSumThreads / 32];
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int warps = blockDim.x / 32;
  const int64_t tile_cols = static_cast<int64_t>(blockDim.x) * kVec;
  for (int64_t i = blockIdx.x; i < num_tokens; i += gridDim.x) {
    for (int64_t tile = blockIdx.y; tile * tile_cols < dim; tile += gridDim.y) {
      const int64_t c = tile * tile_cols + static_cast<int64_t>(threadIdx.x) * kVec;
      const bool active = c < dim;
      using Vec = DoutVec<T, kVec>;
      typename Vec::Raw row{};
      if (active) row = Vec::Load(dout + i * dim + c);
      const int32_t token = tokens[i];
      // Launched as a programmatic dependent of TokenBoundsKernel: everything above overlaps it;
      // the bounds are complete and visible after this (a no-op without the dependency).
      asm volatile("griddepcontrol.wait;" ::: "memory");
      if (token < 0 || token >= vocab) continue;  // reported by TokenBoundsKernel
      const int2 b = bounds[token];
      float* table = dtable + static_cast<int64_t>(token) * dim + c;
      float old[kVec] = {};
      if (active) LoadTable<kVec>(table, old);
      if (b.x != i) continue;  // not the id's first token (the same for the whole block)
      float acc[kVec] = {};    // 0 + row i, as a sum from 0 in token order
      Vec::Add(row, acc);
      for (int64_t base = i + 1; base <= b.y; base += blockDim.x) {
        const int64_t j = base + threadIdx.x;
        const bool match = j <= b.y && tokens[j] == token;
        const unsigned mask = __ballot_sync(0xffffffffu, match);
        if (lane == 0) warp_matches[warp] = __popc(mask);
        __syncthreads();
        int before = 0;
        int total = 0;
        for (int w = 0; w < warps; ++w) {
          const int count = warp_matches[w];
          before += w < warp ? count : 0;
          total += count;
        }
        if (match) matched[before + __popc(mask & ((1u << lane) - 1u))] = static_cast<int32_t>(j);
        __syncthreads();
        for (int k0 = 0; k0 < total; k0 += kSumBatch) {
          typename Vec::Raw more[kSumBatch];
#pragma unroll
          for (int u = 0; u < kSumBatch; ++u) {
            if (active && k0 + u < total) {
              more[u] = Vec::Load(dout + static_cast<int64_t>(matched[k0 + u]) * dim + c);
            }
          }
#pragma unroll
          for (int u = 0; u < kSumBatch; ++u) {
            if (active && k0 + u < total) Vec::Add(more[u], acc);
          }
        }
        __syncthreads();  // matched and warp_matches are rewritten by the next chunk
      }
      if (active) {
#pragma unroll
        for (int k = 0; k < kVec; ++k) old[k] += acc[k];
        StoreTable<kVec>(table, old);
      }
    }
  }
}

template <typename T, int kVec>
cudaError_t LaunchSumTokenRows(const int32_t* tokens, const int2* bounds, const T* dout,
                               float* dtable, int64_t num_tokens, int64_t vocab, int64_t dim,
                               cudaStream_t stream) {
  // As many threads as a row needs, up to kSumThreads: the result does not depend on it.
  const int64_t vectors = (dim + kVec - 1) / kVec;
  const int threads = static_cast<int>(std::min<int64_t>(kSumThreads, (vectors + 31) / 32 * 32));
  const int64_t tiles = (dim + static_cast<int64_t>(threads) * kVec - 1) / (threads * kVec);
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(num_tokens, INT32_MAX)),
                  static_cast<unsigned>(std::min<int64_t>(tiles, 65535)));
  internal::DependentLaunch launch(grid, dim3(threads), stream);
  return cudaLaunchKernelEx(&launch.config, SumTokenRowsKernel<T, kVec>, tokens,
                            static_cast<const int2*>(bounds), dout, dtable, num_tokens, vocab, dim);
}

// ---- Position embeddings.

constexpr int kPositionThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kPositionThreads)
    PositionForwardKernel(const T* wpe, T* x, int64_t total, int64_t seq, int64_t dim) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = i % dim;
    const int64_t t = (i / dim) % seq;
    x[i] = FromFloat<T>(ToFloat(x[i]) + ToFloat(wpe[t * dim + c]));
  }
}

template <typename T>
__global__ void __launch_bounds__(kPositionThreads)
    PositionBackwardKernel(const T* dx, float* dwpe, int64_t batch, int64_t seq, int64_t dim) {
  const int64_t total = seq * dim;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float sum = 0.0f;
    for (int64_t b = 0; b < batch; ++b) sum += ToFloat(dx[b * total + i]);
    dwpe[i] += sum;
  }
}

}  // namespace

template <typename T>
LaunchStatus EmbeddingForward(const int32_t* tokens, const T* table, T* out, int64_t num_tokens,
                              int64_t vocab, int64_t dim, int32_t* invalid_token,
                              cudaStream_t stream) {
  SLUICE_CUDA_LAUNCH_REQUIRE(num_tokens >= 0 && vocab >= 0 && dim >= 0,
                             "EmbeddingForward: negative size");
  if (num_tokens == 0 || dim == 0) return LaunchStatus::Ok();
  SLUICE_CUDA_LAUNCH_REQUIRE(tokens != nullptr && out != nullptr,
                             "EmbeddingForward: null tokens or out");
  SLUICE_CUDA_LAUNCH_REQUIRE(vocab == 0 || table != nullptr, "EmbeddingForward: null table");
  SLUICE_CUDA_LAUNCH_REQUIRE(vocab <= INT32_MAX, "EmbeddingForward: vocab exceeds int32 ids");
  const int64_t row_bytes = dim * static_cast<int64_t>(sizeof(T));
  if (Fits(row_bytes, table, out, 16)) {
    LaunchEmbeddingForward<uint4>(tokens, table, out, num_tokens, vocab, row_bytes, invalid_token,
                                  stream);
  } else if (Fits(row_bytes, table, out, 8)) {
    LaunchEmbeddingForward<uint2>(tokens, table, out, num_tokens, vocab, row_bytes, invalid_token,
                                  stream);
  } else if (Fits(row_bytes, table, out, 4)) {
    LaunchEmbeddingForward<uint32_t>(tokens, table, out, num_tokens, vocab, row_bytes,
                                     invalid_token, stream);
  } else {
    SLUICE_CUDA_LAUNCH_REQUIRE(Fits(row_bytes, table, out, sizeof(T)),
                               "EmbeddingForward: table or out not aligned to its element type");
    LaunchEmbeddingForward<uint16_t>(tokens, table, out, num_tokens, vocab, row_bytes,
                                     invalid_token, stream);
  }
  return internal::AfterLaunch("EmbeddingForward");
}

size_t EmbeddingBackwardWorkspaceBytes(int64_t num_tokens, int64_t vocab) {
  if (num_tokens <= 0 || num_tokens > INT32_MAX || vocab <= 0 || vocab > INT32_MAX) return 0;
  return BoundsBytes(vocab);
}

template <typename T>
LaunchStatus EmbeddingBackward(const int32_t* tokens, const T* dout, float* dtable,
                               int64_t num_tokens, int64_t vocab, int64_t dim,
                               int32_t* invalid_token, void* workspace, size_t workspace_bytes,
                               cudaStream_t stream) {
  SLUICE_CUDA_LAUNCH_REQUIRE(num_tokens >= 0 && vocab >= 0 && dim >= 0,
                             "EmbeddingBackward: negative size");
  if (num_tokens == 0 || dim == 0) return LaunchStatus::Ok();
  SLUICE_CUDA_LAUNCH_REQUIRE(tokens != nullptr && dout != nullptr,
                             "EmbeddingBackward: null tokens or dout");
  SLUICE_CUDA_LAUNCH_REQUIRE(vocab >= 1 && dtable != nullptr,
                             "EmbeddingBackward: empty vocabulary or null dtable");
  SLUICE_CUDA_LAUNCH_REQUIRE(num_tokens <= INT32_MAX && vocab <= INT32_MAX,
                             "EmbeddingBackward: num_tokens or vocab exceeds int32");
  SLUICE_CUDA_LAUNCH_REQUIRE(workspace != nullptr, "EmbeddingBackward: null workspace");
  SLUICE_CUDA_LAUNCH_REQUIRE(workspace_bytes >= BoundsBytes(vocab),
                             "EmbeddingBackward: workspace smaller than "
                             "EmbeddingBackwardWorkspaceBytes(num_tokens, vocab)");
  int2* bounds = CarveBounds(workspace);
  TokenBoundsKernel<<<1, kBoundsThreads, 0, stream>>>(tokens, num_tokens, vocab, bounds,
                                                      invalid_token);
  if (LaunchStatus s = internal::AfterLaunch("EmbeddingBackward"); !s.ok()) return s;
  constexpr int kVec = 16 / sizeof(T);
  const bool vector = dim % kVec == 0 && internal::Aligned(dout) && internal::Aligned(dtable);
  const cudaError_t sum_launch =
      vector
          ? LaunchSumTokenRows<T, kVec>(tokens, bounds, dout, dtable, num_tokens, vocab, dim,
                                        stream)
          : LaunchSumTokenRows<T, 1>(tokens, bounds, dout, dtable, num_tokens, vocab, dim, stream);
  SLUICE_CUDA_LAUNCH_TRY(sum_launch);
  return internal::AfterLaunch("EmbeddingBackward");
}

template <typename T>
LaunchStatus PositionEmbeddingForward(const T* wpe, T* x, int64_t batch, int64_t seq,
                                      int64_t positions, int64_t dim, cudaStream_t stream) {
  SLUICE_CUDA_LAUNCH_REQUIRE(batch >= 0 && seq >= 0 && positions >= 0 && dim >= 0,
                             "PositionEmbeddingForward: negative size");
  SLUICE_CUDA_LAUNCH_REQUIRE(seq <= positions,
                             "PositionEmbeddingForward: seq exceeds the learned positions");
  const int64_t total = batch * seq * dim;
  if (total == 0) return LaunchStatus::Ok();
  SLUICE_CUDA_LAUNCH_REQUIRE(wpe != nullptr && x != nullptr,
                             "PositionEmbeddingForward: null wpe or x");
  PositionForwardKernel<T>
      <<<internal::GridFor(total, kPositionThreads), kPositionThreads, 0, stream>>>(wpe, x, total,
                                                                                    seq, dim);
  return internal::AfterLaunch("PositionEmbeddingForward");
}

template <typename T>
LaunchStatus PositionEmbeddingBackward(const T* dx, float* dwpe, int64_t batch, int64_t seq,
                                       int64_t positions, int64_t dim, cudaStream_t stream) {
  SLUICE_CUDA_LAUNCH_REQUIRE(batch >= 0 && seq >= 0 && positions >= 0 && dim >= 0,
                             "PositionEmbeddingBackward: negative size");
  SLUICE_CUDA_LAUNCH_REQUIRE(seq <= positions,
                             "PositionEmbeddingBackward: seq exceeds the learned positions");
  if (batch * seq * dim == 0) return LaunchStatus::Ok();
  SLUICE_CUDA_LAUNCH_REQUIRE(dx != nullptr && dwpe != nullptr,
                             "PositionEmbeddingBackward: null dx or dwpe");
  PositionBackwardKernel<T>
      <<<internal::GridFor(seq * dim, kPositionThreads), kPositionThreads, 0, stream>>>(
          dx, dwpe, batch, seq, dim);
  return internal::AfterLaunch("PositionEmbeddingBackward");
}

#define SLUICE_INSTANTIATE(T)                                                                     \
  template LaunchStatus EmbeddingForward<T>(const int32_t*, const T*, T*, int64_t, int64_t,       \
                                            int64_t, int32_t*, cudaStream_t);                     \
  template LaunchStatus EmbeddingBackward<T>(const int32_t*, const T*, float*, int64_t, int64_t,  \
                                             int64_t, int32_t*, void*, size_t, cudaStream_t);     \
  template LaunchStatus PositionEmbeddingForward<T>(const T*, T*, int64_t, int64_t, int64_t,      \
                                                    int64_t, cudaStream_t);                       \
  template LaunchStatus PositionEmbeddingBackward<T>(const T*, float*, int64_t, int64_t, int64_t, \
                                                     int64_t, cudaStream_t);
SLUICE_INSTANTIATE(float)
SLUICE_INSTANTIATE(__nv_bfloat16)
#undef SLUICE_INSTANTIATE

}  // namespace sluice::kernels::cuda
