// The GemmFixed driver: argument checks, the choice of variant, packing, blocking and threads.
// Nothing here changes an output bit: packing copies, blocking and threads only decide which
// thread computes which output tile, and every tile runs the whole k loop of the variant's
// micro-kernel (gemm_fixed.h states the numerics).
#include "kernels/cpu/gemm_fixed.h"

#include <omp.h>
#include <xmmintrin.h>

#include <algorithm>
#include <memory>
#include <new>

#include "kernels/cpu/gemm_fixed_internal.h"
#include "kernels/cpu/ops_parallel.h"
#include "kernels/ref/ops_common.h"

namespace sluice::kernels::cpu {
namespace {

using internal::GemmFixedVariant;

// The packed op(B) of one column block stays under this many floats (1 MiB), so it stays in L2
// while every row block sweeps it; the block is as many panels wide as that allows, at least one.
constexpr int64_t kPackedBFloats = int64_t{1} << 18;
// Below this many multiply-adds a product runs on the calling thread: waking a team costs a few
// microseconds, about what half a million multiply-adds take on one core.
constexpr int64_t kMinParallelMacs = 1 << 19;
// Packed buffers start on a cache line (the micro-kernels' aligned loads need a vector's width).
constexpr std::align_val_t kAlignment{64};
constexpr int64_t kAlignmentFloats = 16;

const GemmFixedVariant& VariantFor(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return internal::GemmFixedAvx512Variant();
    case Isa::kAvx2:
      return internal::GemmFixedAvx2Variant();
    case Isa::kScalar:
      break;
  }
  return internal::GemmFixedScalarVariant();
}

struct AlignedDelete {
  void operator()(float* p) const { ::operator delete[](p, kAlignment); }
};

int64_t RoundUp(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

void CheckArgs(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t lda,
               int64_t ldb, int64_t ldc) {
  const char* op = "GemmFixed";
  if (m < 0 || n < 0 || k < 0) {
    sluice::kernels::internal::OpsFail(op, "negative size m %lld, n %lld, k %lld", (long long)m,
                                       (long long)n, (long long)k);
  }
  // A leading dimension must step over a whole row of what it indexes. Unlike cblas, 0 is
  // accepted for an empty row (a linear layer with in == 0 passes lda = 0).
  const int64_t need_lda = trans_a ? m : k;
  const int64_t need_ldb = trans_b ? k : n;
  if (lda < need_lda || ldb < need_ldb || ldc < n) {
    sluice::kernels::internal::OpsFail(
        op,
        "leading dimension too small: lda %lld (needs >= %lld), ldb %lld (needs >= "
        "%lld), ldc %lld (needs >= %lld)",
        (long long)lda, (long long)need_lda, (long long)ldb, (long long)need_ldb, (long long)ldc,
        (long long)n);
  }
}

// dst[p * width + r] = src[r * ld + p] for r < rows, p < k: rows stored along k, turned into
// k-major order. In 4 x 4 blocks with SSE (every x86-64 CPU has it; this file gets no ISA flags),
// about four times the rate of the element loop, which mattered: packing was 15% of a forward
// product at the demo's shapes.
void PackTransposed(const float* src, int64_t ld, int rows, int64_t k, int width, float* dst) {
  const int64_t k4 = k / 4 * 4;
  int r = 0;
  for (; r + 4 <= rows; r += 4) {
    const float* s0 = src + r * ld;
    const float* s1 = s0 + ld;
    const float* s2 = s1 + ld;
    const float* s3 = s2 + ld;
    int64_t p = 0;
    for (; p < k4; p += 4) {
      __m128 v0 = _mm_loadu_ps(s0 + p);
      __m128 v1 = _mm_loadu_ps(s1 + p);
      __m128 v2 = _mm_loadu_ps(s2 + p);
      __m128 v3 = _mm_loadu_ps(s3 + p);
      _MM_TRANSPOSE4_PS(v0, v1, v2, v3);
      float* d = dst + p * width + r;
      _mm_storeu_ps(d, v0);
      _mm_storeu_ps(d + width, v1);
      _mm_storeu_ps(d + 2 * width, v2);
      _mm_storeu_ps(d + 3 * width, v3);
    }
    for (; p < k; ++p) {
      float* d = dst + p * width + r;
      d[0] = s0[p];
      d[1] = s1[p];
      d[2] = s2[p];
      d[3] = s3[p];
    }
  }
  for (; r < rows; ++r) {
    const float* s = src + r * ld;
    for (int64_t p = 0; p < k; ++p) dst[p * width + r] = s[p];
  }
}

// dst[0, n) = src[0, n) for the short runs of packing (a tile's 12 or 32 floats): inline SSE
// moves, where a memcpy call per run took 11% of a dw product.
inline void CopyRun(const float* src, int n, float* dst) {
  int i = 0;
  for (; i + 4 <= n; i += 4) _mm_storeu_ps(dst + i, _mm_loadu_ps(src + i));
  for (; i < n; ++i) dst[i] = src[i];
}

// Columns [j0, j0 + cols) of op(B) as one panel: dst[p * panel_cols + j], zero for j >= cols so
// the padding lanes compute harmless zeros (never stored).
void PackB(bool trans_b, const float* b, int64_t ldb, int64_t k, int64_t j0, int cols,
           int panel_cols, float* dst) {
  if (trans_b) {
    PackTransposed(b + j0 * ldb, ldb, cols, k, panel_cols, dst);
  } else {
    for (int64_t p = 0; p < k; ++p) {
      CopyRun(b + p * ldb + j0, cols, dst + p * panel_cols);
    }
  }
  if (cols == panel_cols) return;
  for (int64_t p = 0; p < k; ++p) {
    std::fill(dst + p * panel_cols + cols, dst + (p + 1) * panel_cols, 0.0f);
  }
}

// Rows [i0, i0 + rows) of op(A): dst[p * block_rows + r].
void PackA(bool trans_a, const float* a, int64_t lda, int64_t k, int64_t i0, int rows,
           int block_rows, float* dst) {
  if (trans_a) {
    for (int64_t p = 0; p < k; ++p) {
      CopyRun(a + p * lda + i0, rows, dst + p * block_rows);
    }
  } else {
    PackTransposed(a + i0 * lda, lda, rows, k, block_rows, dst);
  }
}

}  // namespace

Isa GemmFixedIsa() { return SelectedIsa(); }

void GemmFixed(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
               int64_t ldc, int threads) {
  CheckArgs(trans_a, trans_b, m, n, k, lda, ldb, ldc);
  if (m == 0 || n == 0) return;
  const GemmFixedVariant& variant = VariantFor(GemmFixedIsa());
  const int block_rows = variant.block_rows;
  const int panel_cols = variant.panel_cols;
  // k == 0 runs the same code (an empty sum is +0), on buffers of one step.
  const int64_t depth = std::max<int64_t>(k, 1);
  const int64_t panel_floats = RoundUp(depth * panel_cols, kAlignmentFloats);
  const int64_t all_panels = (n + panel_cols - 1) / panel_cols;
  const int64_t block_panels = std::clamp<int64_t>(kPackedBFloats / panel_floats, 1, all_panels);
  const int64_t row_blocks = (m + block_rows - 1) / block_rows;

  const int requested = internal::OpsThreads(threads, m * n * k, kMinParallelMacs);
  const int team = static_cast<int>(std::clamp<int64_t>(row_blocks * block_panels, 1, requested));

  const int64_t a_floats = RoundUp(depth * block_rows, kAlignmentFloats);
  const int64_t b_floats = block_panels * panel_floats;
  std::unique_ptr<float[], AlignedDelete> buffer(
      new (kAlignment) float[static_cast<size_t>(b_floats + team * a_floats)]);
  float* packed_b = buffer.get();
  float* packed_a = buffer.get() + b_floats;

#pragma omp parallel num_threads(team) if (team > 1)
  {
    float* a_block = packed_a + omp_get_thread_num() * a_floats;
    for (int64_t first = 0; first < all_panels; first += block_panels) {
      const int64_t panels = std::min(block_panels, all_panels - first);
#pragma omp for schedule(static)
      for (int64_t q = 0; q < panels; ++q) {
        const int64_t j0 = (first + q) * panel_cols;
        const int cols = static_cast<int>(std::min<int64_t>(panel_cols, n - j0));
        PackB(trans_b, b, ldb, k, j0, cols, panel_cols, packed_b + q * panel_floats);
      }
      // Tiles in row-major order, so a thread's contiguous share repacks its A block only when
      // it moves to the next row block; the implicit barrier at the end keeps the panels alive
      // until every tile of this column block is done.
      int64_t packed_row_block = -1;
#pragma omp for schedule(static)
      for (int64_t tile = 0; tile < row_blocks * panels; ++tile) {
        const int64_t row_block = tile / panels;
        const int64_t q = tile % panels;
        const int64_t i0 = row_block * block_rows;
        const int rows = static_cast<int>(std::min<int64_t>(block_rows, m - i0));
        if (row_block != packed_row_block) {
          PackA(trans_a, a, lda, k, i0, rows, block_rows, a_block);
          packed_row_block = row_block;
        }
        const int64_t j0 = (first + q) * panel_cols;
        const int cols = static_cast<int>(std::min<int64_t>(panel_cols, n - j0));
        variant.tile(rows, cols, k, a_block, packed_b + q * panel_floats, alpha, beta,
                     c + i0 * ldc + j0, ldc);
      }
    }
  }
}

}  // namespace sluice::kernels::cpu
