// The tensor-core attention kernels: bf16, head_dim 64 or 128, mma.sync.m16n8k16 with fp32
// accumulation, tiles brought in by cp.async (double-buffered) and read by ldmatrix.
//
// Fragment layouts of m16n8k16 (g = lane / 4, t = lane % 4), each register two bf16, the lower
// k (or column) in the low half:
//   A (16 x 16, row-major): a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..)
//   B (16 x 8, k x n):      b0 (k 2t..2t+1, n g), b1 (k 2t+8..2t+9, n g)
//   C (16 x 8, fp32):       c0 (g, 2t), c1 (g, 2t+1), c2 (g+8, 2t), c3 (g+8, 2t+1)
// So the C fragments of two adjacent n-blocks are, packed to bf16, the A fragment of one k-step:
// softmax probabilities go from one product into the next without shared memory.
//
// Each warp owns 16 rows (queries in the forward and dQ kernels, keys in the dK/dV kernel).
// Shared tiles have rows of head_dim + 8 elements: ldmatrix reads 8 rows at one column, and rows
// 16 bytes apart modulo 128 hit distinct banks.
#include <cmath>
#include <cstdint>

#include "kernels/cuda/attention_internal.h"
#include "kernels/cuda/launch_check.h"

namespace sluice::kernels::cuda::internal {
namespace {

using Bf16 = __nv_bfloat16;

constexpr int kThreads = 128;  // 4 warps
constexpr int kWarpRows = 16;
constexpr int kBlockRows = 4 * kWarpRows;  // = kAttentionTile
constexpr float kLog2e = 1.4426950408889634f;
static_assert(kBlockRows == kAttentionTile);

__device__ __forceinline__ uint32_t SmemAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronously; zero-filled (nothing read) where !valid.
__device__ __forceinline__ void CpAsync16(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

__device__ __forceinline__ void Ldmatrix(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}
__device__ __forceinline__ void LdmatrixTrans(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// c += a * b (16 x 8 x 16).
__device__ __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (lo) at the lower address
  uint32_t bits;
  memcpy(&bits, &v, sizeof(bits));
  return bits;
}

// Accumulator fragments (kBlocks n-blocks of C) set to 0.
template <int kBlocks>
__device__ __forceinline__ void ZeroFragments(float (&c)[kBlocks][4]) {
#pragma unroll
  for (int nb = 0; nb < kBlocks; ++nb) {
#pragma unroll
    for (int e = 0; e < 4; ++e) c[nb][e] = 0.f;
  }
}

// The A fragment of k-step kk made of the C fragments of n-blocks 2 kk and 2 kk + 1.
template <int kBlocks>
__device__ __forceinline__ void AFromC(const float (&c)[kBlocks][4], int kk, uint32_t (&a)[4]) {
  a[0] = PackBf16(c[2 * kk][0], c[2 * kk][1]);
  a[1] = PackBf16(c[2 * kk][2], c[2 * kk][3]);
  a[2] = PackBf16(c[2 * kk + 1][0], c[2 * kk + 1][1]);
  a[3] = PackBf16(c[2 * kk + 1][2], c[2 * kk + 1][3]);
}

// Lane addresses for ldmatrix.x4 of the 16 x 16 block at (row0, col0) of a tile.
// "A order" gives matrices (rows 0-7, cols 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15): without
// .trans the A fragment of a row-major operand; with .trans, for an operand stored k-major (rows
// are k), {b0, b1} of n-block col0 then {b0, b1} of n-block col0 + 8.
__device__ __forceinline__ uint32_t AOrder(const Bf16* tile, int stride, int row0, int col0,
                                           int lane) {
  return SmemAddress(tile + (row0 + (lane & 15)) * stride + col0 + ((lane >> 4) << 3));
}
// "B order" gives (rows 0-7, cols 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15): without .trans,
// for an operand stored n-major (rows are n, columns k), {b0, b1} of n-block row0 then of
// n-block row0 + 8.
__device__ __forceinline__ uint32_t BOrder(const Bf16* tile, int stride, int row0, int col0,
                                           int lane) {
  return SmemAddress(tile + (row0 + (lane & 7) + ((lane >> 4) << 3)) * stride + col0 +
                     (((lane >> 3) & 1) << 3));
}

// Rows [row0, row0 + kRows) of one head (rows token_stride elements apart) into a tile of row
// stride kD + 8, asynchronously; rows at or past seq become zeros, so masked tails stay finite.
template <int kRows, int kD>
__device__ __forceinline__ void LoadTileAsync(Bf16* tile, const Bf16* head, int64_t token_stride,
                                              int row0, int seq) {
  constexpr int kChunks = kD / 8;  // 16-byte chunks per row
  for (int idx = threadIdx.x; idx < kRows * kChunks; idx += kThreads) {
    const int r = idx / kChunks;
    const int c = idx % kChunks;
    const int row = row0 + r;
    const bool valid = row < seq;
    const Bf16* src = head + (valid ? row * token_stride : 0) + c * 8;
    CpAsync16(SmemAddress(tile + r * (kD + 8) + c * 8), src, valid);
  }
}

// The double-buffered loop's step: issues the next step's loads into the other buffer (when
// has_next), then waits until this step's have landed, for the whole block.
template <typename LoadNext>
__device__ __forceinline__ void PrefetchNextAndWait(bool has_next, LoadNext load_next) {
  if (has_next) {
    load_next();
    CpAsyncCommit();
    CpAsyncWait<1>();
  } else {
    CpAsyncWait<0>();
  }
  __syncthreads();
}

// ---------------------------------------------------------------------------------------------
// Forward: one block per (64-query tile, q head, batch), query tiles in reverse so the longest
// start first; key tiles of 64 from 0 to the diagonal, K and V double-buffered.

template <int kD>
constexpr size_t ForwardSmemBytes() {
  return static_cast<size_t>(kBlockRows + 4 * kBlockRows) * (kD + 8) * sizeof(Bf16);
}

template <int kD>
__global__ void __launch_bounds__(kThreads)
    ForwardKernel(const Bf16* __restrict__ q, const Bf16* __restrict__ k,
                  const Bf16* __restrict__ v, Bf16* __restrict__ out, float* __restrict__ lse,
                  AttentionShape shape) {
  constexpr int kStride = kD + 8;
  constexpr int kN = kBlockRows;  // keys per tile
  constexpr int kDSteps = kD / 16;
  constexpr int kDBlocks = kD / 8;
  constexpr int kKeyBlocks = kN / 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Bf16* sq = reinterpret_cast<Bf16*>(smem_raw);
  Bf16* sk = sq + kBlockRows * kStride;  // [2][kN][kStride]
  Bf16* sv = sk + 2 * kN * kStride;      // [2][kN][kStride]

  const int seq = shape.seq;
  const auto [qt, h, b, kvh] = DecodeQueryTileBlock(shape);
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2;
  const int t = lane & 3;
  const int64_t q_stride = static_cast<int64_t>(shape.q_heads) * kD;
  const int64_t kv_stride = static_cast<int64_t>(shape.kv_heads) * kD;
  const Bf16* q_head = q + static_cast<int64_t>(b) * seq * q_stride + static_cast<int64_t>(h) * kD;
  const int64_t kv_offset =
      static_cast<int64_t>(b) * seq * kv_stride + static_cast<int64_t>(kvh) * kD;
  const Bf16* k_head = k + kv_offset;
  const Bf16* v_head = v + kv_offset;
  const int q0 = qt * kBlockRows;
  const int n_kt = qt + 1;  // key tiles 0..qt: the diagonal one is the last with visible keys

  LoadTileAsync<kBlockRows, kD>(sq, q_head, q_stride, q0, seq);
  LoadTileAsync<kN, kD>(sk, k_head, kv_stride, 0, seq);
  LoadTileAsync<kN, kD>(sv, v_head, kv_stride, 0, seq);
  CpAsyncCommit();

  uint32_t qf[kDSteps][4];
  float o[kDBlocks][4];
  ZeroFragments(o);
  // Rows g and g + 8 of the warp: running max (in raw score units) and this thread's part of
  // the running sum.
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.f, 0.f};
  const float scale_log2 = shape.scale * kLog2e;

  for (int kt = 0; kt < n_kt; ++kt) {
    const int buf = kt & 1;
    PrefetchNextAndWait(kt + 1 < n_kt, [&] {
      LoadTileAsync<kN, kD>(sk + (buf ^ 1) * kN * kStride, k_head, kv_stride, (kt + 1) * kN, seq);
      LoadTileAsync<kN, kD>(sv + (buf ^ 1) * kN * kStride, v_head, kv_stride, (kt + 1) * kN, seq);
    });
    if (kt == 0) {
#pragma unroll
      for (int kk = 0; kk < kDSteps; ++kk) {
        Ldmatrix(qf[kk], AOrder(sq, kStride, warp * kWarpRows, kk * 16, lane));
      }
    }
    const Bf16* skb = sk + buf * kN * kStride;
    const Bf16* svb = sv + buf * kN * kStride;

    // S = Q K^T for the warp's 16 queries and the tile's 64 keys.
    float s[kKeyBlocks][4];
    ZeroFragments(s);
#pragma unroll
    for (int kk = 0; kk < kDSteps; ++kk) {
#pragma unroll
      for (int nb = 0; nb < kKeyBlocks; nb += 2) {
        uint32_t bk[4];
        Ldmatrix(bk, BOrder(skb, kStride, nb * 8, kk * 16, lane));
        Mma(s[nb], qf[kk], bk[0], bk[1]);
        Mma(s[nb + 1], qf[kk], bk[2], bk[3]);
      }
    }
    if (kt == qt) {  // the diagonal tile: keys after the query are masked (so are keys >= seq)
#pragma unroll
      for (int nb = 0; nb < kKeyBlocks; ++nb) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = nb * 8 + 2 * t + (e & 1);
          const int row = warp * kWarpRows + g + 8 * (e >> 1);
          if (key > row) s[nb][e] = -INFINITY;
        }
      }
    }
    // Online softmax; tile 0 holds key 0, visible to every row, so m is finite from then on.
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      float mx = -INFINITY;
#pragma unroll
      for (int nb = 0; nb < kKeyBlocks; ++nb) {
        mx = fmaxf(mx, fmaxf(s[nb][2 * hi], s[nb][2 * hi + 1]));
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[hi], mx);
      const float alpha = exp2f((m[hi] - m_new) * scale_log2);
      m[hi] = m_new;
      const float offset = m_new * scale_log2;
      float sum = 0.f;
#pragma unroll
      for (int nb = 0; nb < kKeyBlocks; ++nb) {
#pragma unroll
        for (int e = 2 * hi; e < 2 * hi + 2; ++e) {
          const float p = exp2f(fmaf(s[nb][e], scale_log2, -offset));
          s[nb][e] = p;
          sum += p;
        }
      }
      l[hi] = l[hi] * alpha + sum;
#pragma unroll
      for (int nd = 0; nd < kDBlocks; ++nd) {
        o[nd][2 * hi] *= alpha;
        o[nd][2 * hi + 1] *= alpha;
      }
    }
    // O += P V, P in bf16 straight from the score fragments.
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk) {
      uint32_t pa[4];
      AFromC(s, kk, pa);
#pragma unroll
      for (int nd = 0; nd < kDBlocks; nd += 2) {
        uint32_t bv[4];
        LdmatrixTrans(bv, AOrder(svb, kStride, kk * 16, nd * 8, lane));
        Mma(o[nd], pa, bv[0], bv[1]);
        Mma(o[nd + 1], pa, bv[2], bv[3]);
      }
    }
    __syncthreads();  // the next iteration's prefetch overwrites this buffer
  }

#pragma unroll
  for (int hi = 0; hi < 2; ++hi) {
    float sum = l[hi];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int row = q0 + warp * kWarpRows + g + 8 * hi;
    if (row >= seq) continue;
    const float inv = 1.f / sum;
    Bf16* dst =
        out + (static_cast<int64_t>(b) * seq + row) * q_stride + static_cast<int64_t>(h) * kD;
#pragma unroll
    for (int nd = 0; nd < kDBlocks; ++nd) {
      *reinterpret_cast<__nv_bfloat162*>(dst + nd * 8 + 2 * t) =
          __floats2bfloat162_rn(o[nd][2 * hi] * inv, o[nd][2 * hi + 1] * inv);
    }
    if (t == 0) {
      lse[(static_cast<int64_t>(b) * shape.q_heads + h) * seq + row] =
          m[hi] * shape.scale + logf(sum);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// dK, dV: one block per (64-key tile, kv head, batch); each warp owns 16 keys. Steps over the
// group's query heads in order and, for each, over query sub-tiles of kM rows from the diagonal
// on (Q, dO, lse and D double-buffered). Works on transposed scores: S^T = K Q^T, so that P^T
// and dS^T are A fragments for dV += P^T dO and dK += dS^T Q.

template <int kD>
constexpr int KvQueryRows() {
  return kD == 128 ? 32 : 64;  // keeps S^T, dP^T and the dK, dV sums within 255 registers
}

template <int kD>
constexpr size_t BackwardKvSmemBytes() {
  constexpr int kM = KvQueryRows<kD>();
  return static_cast<size_t>(2 * kBlockRows + 4 * kM) * (kD + 8) * sizeof(Bf16) +
         4 * kM * sizeof(float);
}

template <int kD>
__global__ void __launch_bounds__(kThreads)
    BackwardKvKernel(const Bf16* __restrict__ q, const Bf16* __restrict__ k,
                     const Bf16* __restrict__ v, const float* __restrict__ lse,
                     const float* __restrict__ delta, const Bf16* __restrict__ dout,
                     Bf16* __restrict__ dk, Bf16* __restrict__ dv, AttentionShape shape) {
  constexpr int kStride = kD + 8;
  constexpr int kM = KvQueryRows<kD>();  // queries per step
  constexpr int kDSteps = kD / 16;
  constexpr int kDBlocks = kD / 8;
  constexpr int kQueryBlocks = kM / 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Bf16* sk = reinterpret_cast<Bf16*>(smem_raw);                    // [kBlockRows][kStride]
  Bf16* sv = sk + kBlockRows * kStride;                            // [kBlockRows][kStride]
  Bf16* sq = sv + kBlockRows * kStride;                            // [2][kM][kStride]
  Bf16* sdo = sq + 2 * kM * kStride;                               // [2][kM][kStride]
  float* slse = reinterpret_cast<float*>(sdo + 2 * kM * kStride);  // [2][kM]
  float* sdelta = slse + 2 * kM;                                   // [2][kM]

  const int seq = shape.seq;
  const AttentionBlock block = DecodeAttentionBlock(shape.kv_heads, shape.batch);
  const int kt = block.tile_rank;
  const int kvh = block.head;
  const int b = block.batch;
  const int group = shape.q_heads / shape.kv_heads;
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2;
  const int t = lane & 3;
  const int64_t q_stride = static_cast<int64_t>(shape.q_heads) * kD;
  const int64_t kv_stride = static_cast<int64_t>(shape.kv_heads) * kD;
  const int64_t kv_offset =
      static_cast<int64_t>(b) * seq * kv_stride + static_cast<int64_t>(kvh) * kD;
  const int k0 = kt * kBlockRows;
  const int first_qt = k0 / kM;  // the first query sub-tile with a query >= k0
  const int per_head = (seq + kM - 1) / kM - first_qt;
  const int n_steps = group * per_head;
  const float scale_log2 = shape.scale * kLog2e;

  // Step i: query head kvh * group + i / per_head, sub-tile first_qt + i % per_head.
  auto load_step = [&](int step, int buf) {
    const int h = kvh * group + step / per_head;
    const int row0 = (first_qt + step % per_head) * kM;
    const int64_t q_offset =
        static_cast<int64_t>(b) * seq * q_stride + static_cast<int64_t>(h) * kD;
    LoadTileAsync<kM, kD>(sq + buf * kM * kStride, q + q_offset, q_stride, row0, seq);
    LoadTileAsync<kM, kD>(sdo + buf * kM * kStride, dout + q_offset, q_stride, row0, seq);
    const int64_t stats = (static_cast<int64_t>(b) * shape.q_heads + h) * seq;
    for (int i = threadIdx.x; i < kM; i += kThreads) {
      const int row = row0 + i;
      slse[buf * kM + i] = row < seq ? lse[stats + row] * kLog2e : 0.f;
      sdelta[buf * kM + i] = row < seq ? delta[stats + row] : 0.f;
    }
  };

  LoadTileAsync<kBlockRows, kD>(sk, k + kv_offset, kv_stride, k0, seq);
  LoadTileAsync<kBlockRows, kD>(sv, v + kv_offset, kv_stride, k0, seq);
  load_step(0, 0);
  CpAsyncCommit();

  float dk_acc[kDBlocks][4];
  float dv_acc[kDBlocks][4];
  ZeroFragments(dk_acc);
  ZeroFragments(dv_acc);

  for (int step = 0; step < n_steps; ++step) {
    const int buf = step & 1;
    PrefetchNextAndWait(step + 1 < n_steps, [&] { load_step(step + 1, buf ^ 1); });
    const Bf16* sqb = sq + buf * kM * kStride;
    const Bf16* sdob = sdo + buf * kM * kStride;
    const float* slse_b = slse + buf * kM;
    const float* sdelta_b = sdelta + buf * kM;
    const int q0 = (first_qt + step % per_head) * kM;

    // S^T = K Q^T and dP^T = V dO^T for the warp's 16 keys and the step's kM queries.
    float st[kQueryBlocks][4];
    float dpt[kQueryBlocks][4];
    ZeroFragments(st);
    ZeroFragments(dpt);
#pragma unroll
    for (int kk = 0; kk < kDSteps; ++kk) {
      uint32_t ka[4];
      uint32_t va[4];
      Ldmatrix(ka, AOrder(sk, kStride, warp * kWarpRows, kk * 16, lane));
      Ldmatrix(va, AOrder(sv, kStride, warp * kWarpRows, kk * 16, lane));
#pragma unroll
      for (int nb = 0; nb < kQueryBlocks; nb += 2) {
        uint32_t bq[4];
        uint32_t bo[4];
        Ldmatrix(bq, BOrder(sqb, kStride, nb * 8, kk * 16, lane));
        Ldmatrix(bo, BOrder(sdob, kStride, nb * 8, kk * 16, lane));
        Mma(st[nb], ka, bq[0], bq[1]);
        Mma(st[nb + 1], ka, bq[2], bq[3]);
        Mma(dpt[nb], va, bo[0], bo[1]);
        Mma(dpt[nb + 1], va, bo[2], bo[3]);
      }
    }
    // P^T = exp(scale S^T - lse) where key <= query < seq, else 0; dS^T = P^T (dP^T - D).
#pragma unroll
    for (int nb = 0; nb < kQueryBlocks; ++nb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = nb * 8 + 2 * t + (e & 1);
        const int query = q0 + col;
        const int key = k0 + warp * kWarpRows + g + 8 * (e >> 1);
        const float p =
            key <= query && query < seq ? exp2f(fmaf(st[nb][e], scale_log2, -slse_b[col])) : 0.f;
        st[nb][e] = p;
        dpt[nb][e] = p * (dpt[nb][e] - sdelta_b[col]);
      }
    }
    // dV += P^T dO and dK += dS^T Q, k running over the step's queries.
#pragma unroll
    for (int kk = 0; kk < kM / 16; ++kk) {
      uint32_t pa[4];
      uint32_t dsa[4];
      AFromC(st, kk, pa);
      AFromC(dpt, kk, dsa);
#pragma unroll
      for (int nd = 0; nd < kDBlocks; nd += 2) {
        uint32_t bo[4];
        uint32_t bq[4];
        LdmatrixTrans(bo, AOrder(sdob, kStride, kk * 16, nd * 8, lane));
        LdmatrixTrans(bq, AOrder(sqb, kStride, kk * 16, nd * 8, lane));
        Mma(dv_acc[nd], pa, bo[0], bo[1]);
        Mma(dv_acc[nd + 1], pa, bo[2], bo[3]);
        Mma(dk_acc[nd], dsa, bq[0], bq[1]);
        Mma(dk_acc[nd + 1], dsa, bq[2], bq[3]);
      }
    }
    __syncthreads();
  }

#pragma unroll
  for (int hi = 0; hi < 2; ++hi) {
    const int key = k0 + warp * kWarpRows + g + 8 * hi;
    if (key >= seq) continue;
    const int64_t offset = kv_offset + key * kv_stride;
#pragma unroll
    for (int nd = 0; nd < kDBlocks; ++nd) {
      const int col = nd * 8 + 2 * t;
      *reinterpret_cast<__nv_bfloat162*>(dk + offset + col) = __floats2bfloat162_rn(
          dk_acc[nd][2 * hi] * shape.scale, dk_acc[nd][2 * hi + 1] * shape.scale);
      *reinterpret_cast<__nv_bfloat162*>(dv + offset + col) =
          __floats2bfloat162_rn(dv_acc[nd][2 * hi], dv_acc[nd][2 * hi + 1]);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// dQ: one block per (64-query tile, q head, batch), query tiles in reverse; recomputes S, P, dP
// and dS over key sub-tiles of kN keys up to the diagonal (K and V double-buffered).

template <int kD>
constexpr int QKeyRows() {
  return kD == 128 ? 32 : 64;
}

template <int kD>
constexpr size_t BackwardQSmemBytes() {
  return static_cast<size_t>(2 * kBlockRows + 4 * QKeyRows<kD>()) * (kD + 8) * sizeof(Bf16);
}

template <int kD>
__global__ void __launch_bounds__(kThreads)
    BackwardQKernel(const Bf16* __restrict__ q, const Bf16* __restrict__ k,
                    const Bf16* __restrict__ v, const float* __restrict__ lse,
                    const float* __restrict__ delta, const Bf16* __restrict__ dout,
                    Bf16* __restrict__ dq, AttentionShape shape) {
  constexpr int kStride = kD + 8;
  constexpr int kN = QKeyRows<kD>();  // keys per step
  constexpr int kDSteps = kD / 16;
  constexpr int kDBlocks = kD / 8;
  constexpr int kKeyBlocks = kN / 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Bf16* sq = reinterpret_cast<Bf16*>(smem_raw);  // [kBlockRows][kStride]
  Bf16* sdo = sq + kBlockRows * kStride;         // [kBlockRows][kStride]
  Bf16* sk = sdo + kBlockRows * kStride;         // [2][kN][kStride]
  Bf16* sv = sk + 2 * kN * kStride;              // [2][kN][kStride]

  const int seq = shape.seq;
  const auto [qt, h, b, kvh] = DecodeQueryTileBlock(shape);
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2;
  const int t = lane & 3;
  const int64_t q_stride = static_cast<int64_t>(shape.q_heads) * kD;
  const int64_t kv_stride = static_cast<int64_t>(shape.kv_heads) * kD;
  const int64_t q_offset = static_cast<int64_t>(b) * seq * q_stride + static_cast<int64_t>(h) * kD;
  const int64_t kv_offset =
      static_cast<int64_t>(b) * seq * kv_stride + static_cast<int64_t>(kvh) * kD;
  const int q0 = qt * kBlockRows;
  const int last_key = min(seq, q0 + kBlockRows) - 1;
  const int n_kt = last_key / kN + 1;
  const float scale_log2 = shape.scale * kLog2e;

  LoadTileAsync<kBlockRows, kD>(sq, q + q_offset, q_stride, q0, seq);
  LoadTileAsync<kBlockRows, kD>(sdo, dout + q_offset, q_stride, q0, seq);
  LoadTileAsync<kN, kD>(sk, k + kv_offset, kv_stride, 0, seq);
  LoadTileAsync<kN, kD>(sv, v + kv_offset, kv_stride, 0, seq);
  CpAsyncCommit();

  // Rows g and g + 8 of the warp.
  float row_lse[2];
  float row_delta[2];
#pragma unroll
  for (int hi = 0; hi < 2; ++hi) {
    const int row = q0 + warp * kWarpRows + g + 8 * hi;
    const int64_t index = (static_cast<int64_t>(b) * shape.q_heads + h) * seq + row;
    row_lse[hi] = row < seq ? lse[index] * kLog2e : 0.f;
    row_delta[hi] = row < seq ? delta[index] : 0.f;
  }
  uint32_t qf[kDSteps][4];
  uint32_t dof[kDSteps][4];
  float dq_acc[kDBlocks][4];
  ZeroFragments(dq_acc);

  for (int kt = 0; kt < n_kt; ++kt) {
    const int buf = kt & 1;
    PrefetchNextAndWait(kt + 1 < n_kt, [&] {
      LoadTileAsync<kN, kD>(sk + (buf ^ 1) * kN * kStride, k + kv_offset, kv_stride, (kt + 1) * kN,
                            seq);
      LoadTileAsync<kN, kD>(sv + (buf ^ 1) * kN * kStride, v + kv_offset, kv_stride, (kt + 1) * kN,
                            seq);
    });
    if (kt == 0) {
#pragma unroll
      for (int kk = 0; kk < kDSteps; ++kk) {
        Ldmatrix(qf[kk], AOrder(sq, kStride, warp * kWarpRows, kk * 16, lane));
        Ldmatrix(dof[kk], AOrder(sdo, kStride, warp * kWarpRows, kk * 16, lane));
      }
    }
    const Bf16* skb = sk + buf * kN * kStride;
    const Bf16* svb = sv + buf * kN * kStride;
    const int k0 = kt * kN;

    float s[kKeyBlocks][4];
    float dp[kKeyBlocks][4];
    ZeroFragments(s);
    ZeroFragments(dp);
#pragma unroll
    for (int kk = 0; kk < kDSteps; ++kk) {
#pragma unroll
      for (int nb = 0; nb < kKeyBlocks; nb += 2) {
        uint32_t bk[4];
        uint32_t bv[4];
        Ldmatrix(bk, BOrder(skb, kStride, nb * 8, kk * 16, lane));
        Ldmatrix(bv, BOrder(svb, kStride, nb * 8, kk * 16, lane));
        Mma(s[nb], qf[kk], bk[0], bk[1]);
        Mma(s[nb + 1], qf[kk], bk[2], bk[3]);
        Mma(dp[nb], dof[kk], bv[0], bv[1]);
        Mma(dp[nb + 1], dof[kk], bv[2], bv[3]);
      }
    }
    // dS = P (dP - D), P = exp(scale S - lse) where key <= query. Rows past seq are never stored
    // and their keys past seq are zeros, so they stay finite.
#pragma unroll
    for (int nb = 0; nb < kKeyBlocks; ++nb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int hi = e >> 1;
        const int key = k0 + nb * 8 + 2 * t + (e & 1);
        const int query = q0 + warp * kWarpRows + g + 8 * hi;
        const float p = key <= query ? exp2f(fmaf(s[nb][e], scale_log2, -row_lse[hi])) : 0.f;
        s[nb][e] = p * (dp[nb][e] - row_delta[hi]);
      }
    }
    // dQ += dS K, k running over the step's keys.
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk) {
      uint32_t dsa[4];
      AFromC(s, kk, dsa);
#pragma unroll
      for (int nd = 0; nd < kDBlocks; nd += 2) {
        uint32_t bk[4];
        LdmatrixTrans(bk, AOrder(skb, kStride, kk * 16, nd * 8, lane));
        Mma(dq_acc[nd], dsa, bk[0], bk[1]);
        Mma(dq_acc[nd + 1], dsa, bk[2], bk[3]);
      }
    }
    __syncthreads();
  }

#pragma unroll
  for (int hi = 0; hi < 2; ++hi) {
    const int row = q0 + warp * kWarpRows + g + 8 * hi;
    if (row >= seq) continue;
    const int64_t offset = q_offset + row * q_stride;
#pragma unroll
    for (int nd = 0; nd < kDBlocks; ++nd) {
      *reinterpret_cast<__nv_bfloat162*>(dq + offset + nd * 8 + 2 * t) = __floats2bfloat162_rn(
          dq_acc[nd][2 * hi] * shape.scale, dq_acc[nd][2 * hi + 1] * shape.scale);
    }
  }
}

// ---------------------------------------------------------------------------------------------

template <int kD>
LaunchStatus Forward(const Bf16* q, const Bf16* k, const Bf16* v, Bf16* out, float* lse,
                     const AttentionDims& dims, cudaStream_t stream) {
  const dim3 grid = AttentionGrid(dims, dims.q_heads);
  return LaunchAttentionKernel(ForwardKernel<kD>, grid, kThreads, ForwardSmemBytes<kD>(), stream,
                               "AttentionForward", q, k, v, out, lse, MakeAttentionShape(dims));
}

template <int kD>
LaunchStatus Backward(const Bf16* q, const Bf16* k, const Bf16* v, const float* lse,
                      const float* delta, const Bf16* dout, Bf16* dq, Bf16* dk, Bf16* dv,
                      const AttentionDims& dims, cudaStream_t stream) {
  const AttentionShape shape = MakeAttentionShape(dims);
  const dim3 kv_grid = AttentionGrid(dims, dims.kv_heads);
  if (LaunchStatus status = LaunchAttentionKernel(
          BackwardKvKernel<kD>, kv_grid, kThreads, BackwardKvSmemBytes<kD>(), stream,
          "AttentionBackward (dk, dv)", q, k, v, lse, delta, dout, dk, dv, shape);
      !status.ok()) {
    return status;
  }
  const dim3 q_grid = AttentionGrid(dims, dims.q_heads);
  return LaunchAttentionKernel(BackwardQKernel<kD>, q_grid, kThreads, BackwardQSmemBytes<kD>(),
                               stream, "AttentionBackward (dq)", q, k, v, lse, delta, dout, dq,
                               shape);
}

}  // namespace

LaunchStatus MmaAttentionForward(const Bf16* q, const Bf16* k, const Bf16* v, Bf16* out, float* lse,
                                 const AttentionDims& dims, cudaStream_t stream) {
  if (dims.head_dim == 64) return Forward<64>(q, k, v, out, lse, dims, stream);
  return Forward<128>(q, k, v, out, lse, dims, stream);
}

LaunchStatus MmaAttentionBackward(const Bf16* q, const Bf16* k, const Bf16* v, const float* lse,
                                  const float* delta, const Bf16* dout, Bf16* dq, Bf16* dk,
                                  Bf16* dv, const AttentionDims& dims, cudaStream_t stream) {
  if (dims.head_dim == 64) return Backward<64>(q, k, v, lse, delta, dout, dq, dk, dv, dims, stream);
  return Backward<128>(q, k, v, lse, delta, dout, dq, dk, dv, dims, stream);
}

}  // namespace sluice::kernels::cuda::internal
