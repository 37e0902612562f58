#include <algorithm>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/embedding.h"
#include "kernels/cuda/launch_check.h"

namespace sluice::kernels::cuda {
namespace {

__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T FromFloat(float x);
template <>
__device__ __forceinline__ float FromFloat<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

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
  return row_bytes % static_cast<int64_t>(word) == 0 &&
         reinterpret_cast<uintptr_t>(a) % word == 0 && reinterpret_cast<uintptr_t>(b) % word == 0;
}

// ---- EmbeddingBackward: sort (token, row) pairs by token, then sum each token's run of rows.

constexpr size_t kWorkspaceAlign = 256;
constexpr int kPrepareThreads = 256;
constexpr int kSumThreads = 256;
// Sorted positions a block scans for run starts. A run is summed whole by the block whose range
// holds its first position, so the result does not depend on this or on the grid size.
constexpr int64_t kPositionsPerBlock = 32;

size_t AlignUp(size_t bytes) {
  return (bytes + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
}

// Key bits to sort: enough for every id in [0, vocab) and for the sentinel `vocab` that invalid
// ids are mapped to, so that they sort after all valid ones.
int KeyBits(int64_t vocab) {
  int bits = 0;
  while (bits < 32 && (uint64_t{1} << bits) <= static_cast<uint64_t>(vocab)) ++bits;
  return bits;
}

cudaError_t SortTempBytes(int64_t num_tokens, int64_t vocab, size_t* bytes) {
  *bytes = 0;
  return cub::DeviceRadixSort::SortPairs(
      nullptr, *bytes, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
      static_cast<int>(num_tokens), 0, KeyBits(vocab));
}

struct BackwardLayout {
  uint32_t* keys_in;
  uint32_t* keys_out;
  int32_t* rows_in;
  int32_t* rows_out;
  void* sort_temp;
  size_t sort_temp_bytes;
};

// The workspace is carved from its first 256-byte boundary, hence the slack of one alignment.
size_t LayoutBytes(int64_t num_tokens, size_t sort_temp_bytes) {
  const size_t array = AlignUp(static_cast<size_t>(num_tokens) * sizeof(uint32_t));
  return kWorkspaceAlign + 4 * array + AlignUp(sort_temp_bytes);
}

BackwardLayout Carve(void* workspace, int64_t num_tokens, size_t sort_temp_bytes) {
  const size_t array = AlignUp(static_cast<size_t>(num_tokens) * sizeof(uint32_t));
  auto base = reinterpret_cast<uintptr_t>(workspace);
  base = (base + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
  char* p = reinterpret_cast<char*>(base);
  BackwardLayout layout;
  layout.keys_in = reinterpret_cast<uint32_t*>(p);
  layout.keys_out = reinterpret_cast<uint32_t*>(p + array);
  layout.rows_in = reinterpret_cast<int32_t*>(p + 2 * array);
  layout.rows_out = reinterpret_cast<int32_t*>(p + 3 * array);
  layout.sort_temp = p + 4 * array;
  layout.sort_temp_bytes = AlignUp(sort_temp_bytes);
  return layout;
}

__global__ void __launch_bounds__(kPrepareThreads)
    PrepareSortKernel(const int32_t* tokens, int64_t num_tokens, int64_t vocab, uint32_t* keys,
                      int32_t* rows, int32_t* invalid_token) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < num_tokens;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t token = tokens[i];
    const bool valid = token >= 0 && token < vocab;
    if (!valid) ReportInvalid(invalid_token);
    keys[i] = valid ? static_cast<uint32_t>(token) : static_cast<uint32_t>(vocab);
    rows[i] = static_cast<int32_t>(i);
  }
}

// blockIdx.y strides over column tiles; within a run the rows are in token order (the sort is
// stable), so each dtable element gets one fp32 sum in a fixed order.
template <typename T>
__global__ void __launch_bounds__(kSumThreads)
    SumRunsKernel(const uint32_t* keys, const int32_t* rows, const T* dout, float* dtable,
                  int64_t num_tokens, int64_t vocab, int64_t dim) {
  const int64_t chunks = (num_tokens + kPositionsPerBlock - 1) / kPositionsPerBlock;
  for (int64_t chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x) {
    const int64_t chunk_end = (chunk + 1) * kPositionsPerBlock;
    const int64_t end = chunk_end < num_tokens ? chunk_end : num_tokens;
    for (int64_t pos = chunk * kPositionsPerBlock; pos < end; ++pos) {
      const uint32_t key = keys[pos];
      if (static_cast<int64_t>(key) >= vocab) break;  // invalid ids sort last: nothing follows
      if (pos > 0 && keys[pos - 1] == key) continue;  // not the start of a run
      for (int64_t c = blockIdx.y * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < dim;
           c += static_cast<int64_t>(gridDim.y) * blockDim.x) {
        float sum = 0.0f;
        for (int64_t j = pos; j < num_tokens && keys[j] == key; ++j) {
          sum += ToFloat(dout[static_cast<int64_t>(rows[j]) * dim + c]);
        }
        dtable[static_cast<int64_t>(key) * dim + c] += sum;
      }
    }
  }
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
  size_t sort_temp_bytes = 0;
  if (SortTempBytes(num_tokens, vocab, &sort_temp_bytes) != cudaSuccess) {
    cudaGetLastError();  // a failed query must not surface at the caller's next launch
    return 0;
  }
  return LayoutBytes(num_tokens, sort_temp_bytes);
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
  size_t sort_temp_bytes = 0;
  SLUICE_CUDA_LAUNCH_TRY(SortTempBytes(num_tokens, vocab, &sort_temp_bytes));
  SLUICE_CUDA_LAUNCH_REQUIRE(workspace_bytes >= LayoutBytes(num_tokens, sort_temp_bytes),
                             "EmbeddingBackward: workspace smaller than "
                             "EmbeddingBackwardWorkspaceBytes(num_tokens, vocab)");
  const BackwardLayout ws = Carve(workspace, num_tokens, sort_temp_bytes);

  PrepareSortKernel<<<internal::GridFor(num_tokens, kPrepareThreads), kPrepareThreads, 0, stream>>>(
      tokens, num_tokens, vocab, ws.keys_in, ws.rows_in, invalid_token);
  SLUICE_CUDA_LAUNCH_TRY(cudaGetLastError());
  size_t temp_bytes = ws.sort_temp_bytes;
  SLUICE_CUDA_LAUNCH_TRY(cub::DeviceRadixSort::SortPairs(
      ws.sort_temp, temp_bytes, ws.keys_in, ws.keys_out, ws.rows_in, ws.rows_out,
      static_cast<int>(num_tokens), 0, KeyBits(vocab), stream));

  const int64_t chunks = (num_tokens + kPositionsPerBlock - 1) / kPositionsPerBlock;
  const int64_t tiles = (dim + kSumThreads - 1) / kSumThreads;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(chunks, 1 << 20)),
                  static_cast<unsigned>(std::min<int64_t>(tiles, 65535)));
  SumRunsKernel<T><<<grid, kSumThreads, 0, stream>>>(ws.keys_out, ws.rows_out, dout, dtable,
                                                     num_tokens, vocab, dim);
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
