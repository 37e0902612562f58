#include "kernels/cpu/ops_convert.h"

#include <algorithm>
#include <bit>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/ops_convert_internal.h"
#include "kernels/cpu/ops_parallel.h"
#include "kernels/ref/half.h"

namespace sluice::kernels::cpu {
namespace {

// Elements per OpenMP chunk: a multiple of every vector width, large enough to amortize.
constexpr int64_t kChunk = 1 << 14;

// The portable loops: bf16 rounding written without branches so the compiler vectorizes it with
// the baseline ISA; fp16 through half.h element by element.
void F32ToBf16Portable(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t b = std::bit_cast<uint32_t>(src[i]);
    const uint32_t rounded = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
    const uint32_t nan = (b >> 16) | 0x0040u;
    dst[i] = static_cast<uint16_t>((b & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
  }
}

void Bf16ToF32Portable(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    dst[i] = std::bit_cast<float>(static_cast<uint32_t>(src[i]) << 16);
}

void F32ToF16Portable(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = F32ToF16(src[i]);
}

void F16ToF32Portable(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = F16ToF32(src[i]);
}

template <typename Src, typename Dst>
void Chunked(const Src* src, Dst* dst, int64_t n, int num_threads,
             void (*portable)(const Src*, Dst*, int64_t), void (*avx2)(const Src*, Dst*, int64_t)) {
  auto* loop = SelectedIsa() >= Isa::kAvx2 ? avx2 : portable;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  const int threads = internal::OpsThreads(num_threads, n);
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk;
    loop(src + begin, dst + begin, std::min(kChunk, n - begin));
  }
}

}  // namespace

void ConvertF32ToBf16(const float* src, uint16_t* dst, int64_t n, int num_threads) {
  Chunked(src, dst, n, num_threads, F32ToBf16Portable, internal::F32ToBf16Avx2);
}

void ConvertBf16ToF32(const uint16_t* src, float* dst, int64_t n, int num_threads) {
  Chunked(src, dst, n, num_threads, Bf16ToF32Portable, internal::Bf16ToF32Avx2);
}

void ConvertF32ToF16(const float* src, uint16_t* dst, int64_t n, int num_threads) {
  Chunked(src, dst, n, num_threads, F32ToF16Portable, internal::F32ToF16Avx2);
}

void ConvertF16ToF32(const uint16_t* src, float* dst, int64_t n, int num_threads) {
  Chunked(src, dst, n, num_threads, F16ToF32Portable, internal::F16ToF32Avx2);
}

}  // namespace sluice::kernels::cpu
