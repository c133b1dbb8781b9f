// Microbenchmark: the ceiling of the large-T seam's memory traffic without a park, on a given
// number of multiprocessors. Not part of the library. Build here, run there:
//   scripts/micro/build.sh here, then .gpu/micro/seam-traffic [T] [H] there
// (sm_90a for mode 3's wgmma; modes 0-2 need only sm_90).
//
// The V4.1 seam at large T moves, per token, x (H bf16) and the four streams r (4 H) in, r' (4 H)
// and the layer input (H) out: 20 H bytes, the floor of BENCHMARKS.md. The landed stream launch
// moves 24 H (the collapse parked and read back by the tails launch) and runs on 120 of 132 SMs at
// H = 5120 (PERF_NOTES.md, "What limits each regime"). A design without the park (the RMSNorm
// applied on chip, e.g. thread-block clusters that own a token's whole row) would run on fewer
// SMs (7 clusters of 16 = 112 on the H200). Before building one, this asks what that traffic
// reaches at all, against the protocol's copy kernel in the same run:
//   mode 0: the traffic alone (r' = r, layer input = x);
//   mode 1: the traffic with the seam's elementwise arithmetic per channel and token, in f32 as
//           the kernels do it: post_map (one multiply and four FMAs a stream), r' rounded to
//           bf16, the carried collapse (four FMAs) rounded to bf16, its square summed, and the
//           norm's scaling (a per-token factor, here a constant, and the norm weight); no
//           projection and no reduction across the row.
// Mode 1 also runs with a warp's 16-byte accesses covering 64, 128 or 256 bytes of 8, 4 or 2 rows
// (SEG), and with 64-byte loads and 512-byte stores or the reverse (SEG_ST). Mode 2 (below) runs
// the library's MMA layout with and without the projection; mode 3 (below) the projection by
// warpgroup MMAs in tiles of 64 tokens.
// Persistent grid-stride blocks of 512 threads, one a multiprocessor, on B = 112, 120, 128 and
// 132 SMs (and 4 x 132 blocks of 256 threads); each thread takes two items (a token's 8
// channels) per iteration, all loads of both issued before use. The median of 20 timed calls.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cstring>
#include <cuda_runtime.h>

#define CHECK(x)                                                                  \
  do {                                                                            \
    cudaError_t e_ = (x);                                                         \
    if (e_ != cudaSuccess) {                                                      \
      fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)

typedef unsigned int u32;
typedef unsigned short bf16;  // raw bf16 bits

__device__ __forceinline__ void unpack8(uint4 v, float f[8]) {
  const u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}
__device__ __forceinline__ uint4 pack8(const float f[8]) {
  u32 w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    // Round to nearest even, as every kernel of the library does (cvt.rn.bf16x2.f32: hi, lo).
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w[i]) : "f"(f[2 * i + 1]), "f"(f[2 * i]));
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

__global__ void copy16(const uint4* __restrict__ src, uint4* __restrict__ dst, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = __ldg(src + i);
}

// coef: [T][24] f32 (post 4, comb 16, pre 4); nw: [H] f32.
// SEG: the bytes of a token's row a warp's 16-byte loads cover together (512: 32 lanes along one
// row, coalesced; 64: 4 lanes a row over 8 rows, as a warp of the library's MMA layout reads
// x, r and writes r' and the layer input: tokens g, channels 8q..8q+7 of a 32-channel chunk).
// SEG_ST: the same for the stores (by default SEG); where they differ a thread stores to another
// item than it loaded (the same items overall: every row segment is read and written once).
template <int SEG>
__device__ __forceinline__ void seg_item(size_t ii, int G, size_t& tok, int& hg) {
  if (SEG == 512) {
    tok = ii / G;
    hg = (int)(ii % G);
  } else {
    // Warp wid covers RW rows x LS 16-byte columns: lane l takes row l / LS, column l % LS.
    constexpr int LS = SEG / 16, RW = 32 / LS;
    const size_t wid = ii / 32;
    const int l = (int)(ii % 32), cb = G / LS;
    tok = (wid / cb) * RW + l / LS;
    hg = (int)(wid % cb) * LS + l % LS;
  }
}
template <int MODE, int SEG = 512, int SEG_ST = SEG>
__global__ void __launch_bounds__(512) seam_traffic(const bf16* __restrict__ x,
                                                    const bf16* __restrict__ r,
                                                    const float* __restrict__ coef,
                                                    const float* __restrict__ nw,
                                                    bf16* __restrict__ ro,
                                                    bf16* __restrict__ li, float* __restrict__ sink,
                                                    int T, int H) {
  const int G = H / 8;
  const size_t items = (size_t)T * G;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  float acc = 0.0f;
  for (size_t i0 = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i0 < items; i0 += 2 * stride) {
    uint4 xv[2], rv[2][4];
    size_t tok[2];
    int hg[2];
    bool ok[2];
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const size_t i = i0 + k * stride;
      ok[k] = i < items;
      const size_t ii = ok[k] ? i : 0;
      size_t tl;
      int hl;
      seg_item<SEG>(ii, G, tl, hl);
      seg_item<SEG_ST>(ii, G, tok[k], hg[k]);  // where the stores go (and the coefficients)
      xv[k] = __ldg((const uint4*)(x + tl * H) + hl);
#pragma unroll
      for (int j = 0; j < 4; ++j) rv[k][j] = __ldg((const uint4*)(r + (tl * 4 + j) * H) + hl);
    }
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      if (!ok[k]) continue;
      if (MODE == 0) {
#pragma unroll
        for (int j = 0; j < 4; ++j) *((uint4*)(ro + (tok[k] * 4 + j) * H) + hg[k]) = rv[k][j];
        *((uint4*)(li + tok[k] * H) + hg[k]) = xv[k];
        continue;
      }
      const float4* cf4 = (const float4*)(coef + tok[k] * 24);
      float cf[24];
#pragma unroll
      for (int c = 0; c < 6; ++c) {
        const float4 v = __ldg(cf4 + c);
        cf[4 * c] = v.x; cf[4 * c + 1] = v.y; cf[4 * c + 2] = v.z; cf[4 * c + 3] = v.w;
      }
      float xf[8], rf[4][8];
      unpack8(xv[k], xf);
#pragma unroll
      for (int j = 0; j < 4; ++j) unpack8(rv[k][j], rf[j]);
      float c8[8];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        float o[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) o[e] = __fmul_rn(cf[j], xf[e]);
#pragma unroll
        for (int s = 0; s < 4; ++s)
#pragma unroll
          for (int e = 0; e < 8; ++e) o[e] = __fmaf_rn(cf[4 + s * 4 + j], rf[s][e], o[e]);
        const uint4 pv = pack8(o);
        *((uint4*)(ro + (tok[k] * 4 + j) * H) + hg[k]) = pv;
        float pf[8];
        unpack8(pv, pf);
#pragma unroll
        for (int e = 0; e < 8; ++e) c8[e] = j == 0 ? __fmul_rn(cf[20], pf[e]) : __fmaf_rn(cf[20 + j], pf[e], c8[e]);
      }
      const uint4 cb = pack8(c8);
      float cr[8];
      unpack8(cb, cr);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc = __fmaf_rn(cr[e], cr[e], acc);
      const float4 w0 = __ldg((const float4*)(nw + 8 * hg[k])), w1 = __ldg((const float4*)(nw + 8 * hg[k]) + 1);
      const float wv[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
      const float factor = 0.7071f;  // the row's RMS factor, from the cluster's reduction in a real kernel
#pragma unroll
      for (int e = 0; e < 8; ++e) cr[e] = __fmul_rn(__fmul_rn(cr[e], factor), wv[e]);
      *((uint4*)(li + tok[k] * H) + hg[k]) = pack8(cr);
    }
  }
  if (acc == -1.0f) sink[0] = acc;
}

__device__ __forceinline__ void mma_tf32(float d[4], const u32 a[4], const u32 b[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Modes 2 and 3: mode 1's arithmetic in the library's MMA layout for lane (g, q)'s tokens tok[0],
// tok[1] (ok: inside T) and channels h..h+7: r' stored and kept as the projection's activations
// av, the collapse's square summed into acc, the layer input stored.
__device__ __forceinline__ void mma_layout_elementwise(const uint4 (&xv)[2], const uint4 (&rv)[2][4], const int (&tok)[2],
                                                       const bool (&ok)[2], int h, int H,
                                                       const float* __restrict__ coef, const float* __restrict__ nw,
                                                       bf16* __restrict__ ro, bf16* __restrict__ li,
                                                       uint4 (&av)[2][4], float& acc) {
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const float4* cf4 = (const float4*)(coef + (size_t)(ok[k] ? tok[k] : 0) * 24);
    float cf[24];
#pragma unroll
    for (int c = 0; c < 6; ++c) {
      const float4 v = __ldg(cf4 + c);
      cf[4 * c] = v.x; cf[4 * c + 1] = v.y; cf[4 * c + 2] = v.z; cf[4 * c + 3] = v.w;
    }
    float xf[8];
    unpack8(xv[k], xf);
    float c8[8];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      float o[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) o[e] = __fmul_rn(cf[j], xf[e]);
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        float rf[8];
        unpack8(rv[k][s], rf);
#pragma unroll
        for (int e = 0; e < 8; ++e) o[e] = __fmaf_rn(cf[4 + s * 4 + j], rf[e], o[e]);
      }
      av[k][j] = pack8(o);
      if (ok[k]) *(uint4*)(ro + ((size_t)tok[k] * 4 + j) * H + h) = av[k][j];
      float pf[8];
      unpack8(av[k][j], pf);
#pragma unroll
      for (int e = 0; e < 8; ++e) c8[e] = j == 0 ? __fmul_rn(cf[20], pf[e]) : __fmaf_rn(cf[20 + j], pf[e], c8[e]);
    }
    const uint4 cb = pack8(c8);
    float cr[8];
    unpack8(cb, cr);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc = __fmaf_rn(cr[e], cr[e], acc);
    const float4 w0 = __ldg((const float4*)(nw + h)), w1 = __ldg((const float4*)(nw + h) + 1);
    const float wv[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
    const float factor = 0.7071f;
#pragma unroll
    for (int e = 0; e < 8; ++e) cr[e] = __fmul_rn(__fmul_rn(cr[e], factor), wv[e]);
    if (ok[k]) *(uint4*)(li + (size_t)tok[k] * H + h) = pack8(cr);
  }
}

// Modes 2 and 3: lane (g, q)'s item, tokens row and row + 8 (all loads issued first), then
// mma_layout_elementwise.
__device__ __forceinline__ void mma_layout_item(const bf16* __restrict__ x, const bf16* __restrict__ r,
                                                const float* __restrict__ coef, const float* __restrict__ nw,
                                                bf16* __restrict__ ro, bf16* __restrict__ li, int row, int h, int T,
                                                int H, uint4 (&av)[2][4], float& acc) {
  uint4 xv[2], rv[2][4];
  int tok[2];
  bool ok[2];
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    tok[k] = row + 8 * k;
    ok[k] = tok[k] < T;
    const size_t tk = ok[k] ? tok[k] : 0;
    xv[k] = __ldg((const uint4*)(x + tk * H + h));
#pragma unroll
    for (int j = 0; j < 4; ++j) rv[k][j] = __ldg((const uint4*)(r + (tk * 4 + j) * H + h));
  }
  mma_layout_elementwise(xv, rv, tok, ok, h, H, coef, nw, ro, li, av, acc);
}

// Mode 2: mode 1's work in the library's MMA layout, plus the projection. Block b (of 7 x 16,
// as 7 clusters of 16 blocks would be) owns CPB = H / 512 consecutive chunks of 32 channels
// (chunk group b % 16) and the token tiles of 16 congruent to b / 16 mod 7; its slice of fn
// (24 mixes x 4 streams x CPB x 32 channels, f32, rows padded) sits in shared memory, staged once. Its 16 warps
// take the (tile, chunk) items in turn: lane (g, q) loads tokens g and g + 8, channels 8q..8q+7 of
// the chunk (10 vectors, as the stream kernel), runs mode 1's arithmetic on both, and then the
// chunk's projection as project_chunk does it: per stream j and half u, three 16-byte loads of
// fn from shared memory, each weight split into TF32 hi and lo (a LOP3 and an FADD), and six
// m16n8k8 MMAs a pair step (96 a tile). The partials are summed into a value kept live
// instead of reduced over the row (a cluster's reduction is not modelled).
//
// VAR (what each variant leaves out or changes, to cost the parts of the projection):
//   0: as above;
//   1: no projection (the MMA layout's loads, arithmetic and stores only);
//   2: fn's hi piece only (the raw weights into the MMAs: no split, no lo MMAs; wrong numbers);
//   3: fn staged split (hi and lo in shared memory, twice the bytes: H <= 4096): no LOP3/FADD;
//   4: fn's step values loaded once a item and reused for every step (no per-step shared loads;
//      wrong numbers), with the split and all 96 MMAs.
template <int VAR>
__global__ void __launch_bounds__(512, 1) seam_traffic_mma(const bf16* __restrict__ x, const bf16* __restrict__ r,
                                                           const float* __restrict__ coef,
                                                           const float* __restrict__ nw,
                                                           const float* __restrict__ fn, bf16* __restrict__ ro,
                                                           bf16* __restrict__ li, float* __restrict__ sink, int T,
                                                           int H) {
  // [mix 24][stream 4][CPB * 32 + 4]: rows padded by one float4, so that the 8 lanes of a
  // quarter-warp (two rows g, four columns q) read distinct banks.
  extern __shared__ __align__(128) float sfn[];
  const int CPB = H / 512, cg = blockIdx.x % 16, tg = blockIdx.x / 16, ntg = gridDim.x / 16;
  const int W = CPB * 32, RS = W / 4 + 1;  // row stride in float4
  float4* sfn_lo = (float4*)sfn + 24 * 4 * RS;  // VAR 3: the lo pieces after the hi
  for (int i = threadIdx.x; i < 24 * 4 * W / 4; i += blockDim.x) {
    const int row = i / (W / 4), c4 = i % (W / 4);  // row = mix * 4 + stream
    const float4 v = __ldg((const float4*)(fn + (size_t)row * H + cg * W) + c4);
    if (VAR == 3) {
      const float vv[4] = {v.x, v.y, v.z, v.w};
      float hi[4], lo[4];
      for (int t = 0; t < 4; ++t) {
        hi[t] = __uint_as_float(__float_as_uint(vv[t]) & 0xffffe000u);
        lo[t] = vv[t] - hi[t];
      }
      ((float4*)sfn)[row * RS + c4] = make_float4(hi[0], hi[1], hi[2], hi[3]);
      sfn_lo[row * RS + c4] = make_float4(lo[0], lo[1], lo[2], lo[3]);
    } else {
      ((float4*)sfn)[row * RS + c4] = v;
    }
  }
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, q = lane & 3;
  const int tiles = (T + 15) / 16;
  float acc = 0.0f;
  const int my_tiles = tiles > tg ? (tiles - 1 - tg) / ntg + 1 : 0;
  for (int item = warp; item < my_tiles * CPB; item += 16) {
    const int tile = tg + (item / CPB) * ntg, chunk = cg * CPB + item % CPB;
    const int h = chunk * 32 + 8 * q;
    uint4 av[2][4];
    mma_layout_item(x, r, coef, nw, ro, li, tile * 16 + g, h, T, H, av, acc);
    // The projection (project_chunk with the stream kernel's swizzle-free layout).
    if (VAR == 1) continue;
    float d[3][4] = {}, e[3][4] = {};
    const int col = (chunk - cg * CPB) * 8 + 2 * q;  // float4 column of channels 8q + 4u
    float f4[3][4];  // VAR 4: one step's weights for every step
    if (VAR == 4) {
#pragma unroll
      for (int nt = 0; nt < 3; ++nt) {
        const float4 v = ((const float4*)sfn)[((nt * 8 + g) * 4) * RS + col];
        f4[nt][0] = v.x; f4[nt][1] = v.y; f4[nt][2] = v.z; f4[nt][3] = v.w;
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        float f[3][4], fl[3][4];
#pragma unroll
        for (int nt = 0; nt < 3; ++nt) {
          if (VAR == 4) {
#pragma unroll
            for (int t = 0; t < 4; ++t) f[nt][t] = f4[nt][t];
            continue;
          }
          const float4 v = ((const float4*)sfn)[((nt * 8 + g) * 4 + j) * RS + col + u];
          f[nt][0] = v.x; f[nt][1] = v.y; f[nt][2] = v.z; f[nt][3] = v.w;
          if (VAR == 3) {
            const float4 w = sfn_lo[((nt * 8 + g) * 4 + j) * RS + col + u];
            fl[nt][0] = w.x; fl[nt][1] = w.y; fl[nt][2] = w.z; fl[nt][3] = w.w;
          }
        }
#pragma unroll
        for (int st = 0; st < 2; ++st) {
          const u32 w0 = (&av[0][j].x)[2 * u + st], w1 = (&av[1][j].x)[2 * u + st];
          const u32 a[4] = {__byte_perm(w0, 0u, 0x1044), __byte_perm(w1, 0u, 0x1044), __byte_perm(w0, 0u, 0x3244),
                            __byte_perm(w1, 0u, 0x3244)};
          u32 bh[3][2], bl[3][2];
#pragma unroll
          for (int nt = 0; nt < 3; ++nt) {
#pragma unroll
            for (int b = 0; b < 2; ++b) {
              const float v = f[nt][2 * st + b];
              if (VAR == 2 || VAR == 3) {
                bh[nt][b] = __float_as_uint(v);
                bl[nt][b] = VAR == 3 ? __float_as_uint(fl[nt][2 * st + b]) : 0u;
              } else {
                const u32 hi = __float_as_uint(v) & 0xffffe000u;
                bh[nt][b] = hi;
                bl[nt][b] = __float_as_uint(v - __uint_as_float(hi));
              }
            }
          }
#pragma unroll
          for (int nt = 0; nt < 3; ++nt) mma_tf32(d[nt], a, bh[nt]);
#pragma unroll
          for (int nt = 0; nt < 3 && VAR != 2; ++nt) mma_tf32(e[nt], a, bl[nt]);
        }
      }
    }
#pragma unroll
    for (int nt = 0; nt < 3; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc += d[nt][i] + e[nt][i];
  }
  if (acc == -1.0f) sink[0] = acc;
}

// Mode 3 (PERF_NOTES attempt 165): mode 2's work with the projection by warpgroup MMAs, in the
// form a stream launch would take. Needs sm_90a. Block b owns a group of 4 chunks (cg = b % (H /
// 128)) and the tiles of 64 tokens congruent to b / (H / 128); warpgroup wg takes chunk cg * 4 +
// wg, and its warp wq tokens 16 wq .. 16 wq + 15 of each tile, lane (g, q) tokens g and g + 8 and
// channels 8q..8q+7 as in mode 2 (the same loads, arithmetic and stores). The projection: per k8
// step (stream j, half u, pair st, project_step's order) one wgmma m64n48k8 with A = the warps'
// activations from registers (mma.sync's A fragment, as in mode 2) and B = the chunk's 48 piece
// columns from shared memory (the raw weights as hi, then lo = v - hi; 24 KB a chunk, staged
// once, no swizzle, K-major core matrices): 16 wgmma a warpgroup and tile against mode 2's 96
// mma.sync, 48 shared loads and 96 split instructions a warp. The descriptor's byte offsets are
// one of the two readings wgmma-bits.cu tries; the time does not depend on which is right (the
// same bytes are read), the numbers may. VAR 0: with the projection; 1: without.
__device__ __forceinline__ void wg_n48_rs(float (&d)[24], const u32 (&a)[4], unsigned long long db) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n48k8.f32.tf32.tf32 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23}, "
      "{%24,%25,%26,%27}, %28, 1, 1, 1;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
constexpr int WG_STEP_BYTES = 6 * 256;            // 48 rows (6 row groups of 256 bytes) a k8 step
constexpr int WG_CHUNK_BYTES = 16 * WG_STEP_BYTES;  // 24 KB
template <int VAR>
__global__ void __launch_bounds__(512, 1) seam_traffic_wg(const bf16* __restrict__ x, const bf16* __restrict__ r,
                                                          const float* __restrict__ coef,
                                                          const float* __restrict__ nw,
                                                          const float* __restrict__ fn, bf16* __restrict__ ro,
                                                          bf16* __restrict__ li, float* __restrict__ sink, int T,
                                                          int H) {
  extern __shared__ __align__(1024) unsigned char sfp[];
  const int groups = H / 128, cg = blockIdx.x % groups, tg = blockIdx.x / groups, ntg = gridDim.x / groups;
  if (VAR == 0) {
    // (chunk c, step s, piece row p, k kk): row p % 8 of core matrix (p / 8, kk / 4).
    for (int i = threadIdx.x; i < 4 * 16 * 48 * 8; i += blockDim.x) {
      const int kk = i % 8, p = (i / 8) % 48, s = (i / 384) % 16, c = i / 6144;
      const int j = s / 4, u = (s / 2) % 2, st = s % 2, q = kk % 4;
      const int ch = (cg * 4 + c) * 32 + 8 * q + 4 * u + 2 * st + kk / 4;
      const float v = fn[(size_t)((p % 24) * 4 + j) * H + ch];
      const float hi = __uint_as_float(__float_as_uint(v) & 0xffffe000u);
      *(float*)(sfp + c * WG_CHUNK_BYTES + s * WG_STEP_BYTES + (p / 8) * 256 + (kk / 4) * 128 + (p % 8) * 16 +
                q * 4) = p < 24 ? v : v - hi;
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, q = lane & 3;
  const int wg = warp / 4, wq = warp % 4, chunk = cg * 4 + wg, h = chunk * 32 + 8 * q;
  const u32 fbase = (u32)__cvta_generic_to_shared(sfp + wg * WG_CHUNK_BYTES);
  const int tiles = (T + 63) / 64;
  float acc = 0.0f;
  for (int tile = tg; tile < tiles; tile += ntg) {
    uint4 av[2][4];
    mma_layout_item(x, r, coef, nw, ro, li, tile * 64 + wq * 16 + g, h, T, H, av, acc);
    if (VAR == 1) continue;
    float d[24];
#pragma unroll
    for (int i = 0; i < 24; ++i) d[i] = 0.0f;
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
      for (int u = 0; u < 2; ++u) {
#pragma unroll
        for (int st = 0; st < 2; ++st) {
          const u32 w0 = (&av[0][j].x)[2 * u + st], w1 = (&av[1][j].x)[2 * u + st];
          const u32 a[4] = {__byte_perm(w0, 0u, 0x1044), __byte_perm(w1, 0u, 0x1044), __byte_perm(w0, 0u, 0x3244),
                            __byte_perm(w1, 0u, 0x3244)};
          const u32 sa = fbase + (j * 4 + u * 2 + st) * WG_STEP_BYTES;
          const unsigned long long db = (unsigned long long)((sa >> 4) & 0x3fff) | (8ull << 16) | (16ull << 32);
          wg_n48_rs(d, a, db);
        }
      }
    }
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
#pragma unroll
    for (int i = 0; i < 24; ++i) acc += d[i];
  }
  if (acc == -1.0f) sink[0] = acc;
}

static float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename F>
static float time_it(F f) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  f();
  CHECK(cudaDeviceSynchronize());
  std::vector<float> ms;
  for (int i = 0; i < 20; ++i) {
    CHECK(cudaEventRecord(a));
    f();
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float t;
    CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  CHECK(cudaGetLastError());
  return median(ms);
}

int main(int argc, char** argv) {
  const int T = argc > 1 ? atoi(argv[1]) : 16384;
  const int H = argc > 2 ? atoi(argv[2]) : 5120;
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t nx = (size_t)T * H, nr = 4 * nx;
  bf16 *x, *r, *ro, *li;
  float *coef, *nw, *sink, *fn;
  CHECK(cudaMalloc(&x, nx * 2));
  CHECK(cudaMalloc(&r, nr * 2));
  CHECK(cudaMalloc(&ro, nr * 2));
  CHECK(cudaMalloc(&li, nx * 2));
  CHECK(cudaMalloc(&coef, (size_t)T * 24 * 4));
  CHECK(cudaMalloc(&nw, (size_t)H * 4));
  CHECK(cudaMalloc(&sink, 4));
  CHECK(cudaMalloc(&fn, (size_t)24 * 4 * H * 4));
  {
    std::vector<float> hf((size_t)24 * 4 * H);
    for (size_t i = 0; i < hf.size(); ++i) hf[i] = 0.01f * (float)((int)(i % 17) - 8);
    CHECK(cudaMemcpy(fn, hf.data(), hf.size() * 4, cudaMemcpyHostToDevice));
  }
  std::vector<bf16> hx(nr);
  unsigned s = 12345;
  for (auto& v : hx) {  // bf16 of uniform values in [-0.5, 0.5) (the top half of the f32 bits)
    s = s * 1664525u + 1013904223u;
    const float f = ((s >> 8) * (1.0f / 16777216.0f)) - 0.5f;
    u32 b;
    memcpy(&b, &f, 4);
    v = (bf16)(b >> 16);
  }
  CHECK(cudaMemcpy(r, hx.data(), nr * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(x, hx.data(), nx * 2, cudaMemcpyHostToDevice));
  std::vector<float> hc((size_t)T * 24, 0.25f), hw(H, 1.0f);
  CHECK(cudaMemcpy(coef, hc.data(), hc.size() * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(nw, hw.data(), hw.size() * 4, cudaMemcpyHostToDevice));
  const double bytes = 20.0 * H * T;  // read x + r, write r' + layer input

  // The protocol's copy: 1 GiB+ with SMs x 8 blocks of 256 threads (src/bench/gpu.rs).
  const size_t n16 = nr * 2 / 16;
  const float cms = time_it([&] { copy16<<<sms * 8, 256>>>((const uint4*)r, (uint4*)ro, n16); });
  const double copy_gbps = 2.0 * n16 * 16 / (cms * 1e-3) / 1e9;
  printf("T = %d, H = %d, %.1f MB a call; copy %.0f GB/s (%.3f ms for %.2f GB)\n", T, H, bytes / 1e6, copy_gbps,
         cms, 2.0 * n16 * 16 / 1e9);
  for (int mode = 0; mode < 2; ++mode) {
    for (int b : {112, 120, 128, sms, -1}) {
      const int blocks = b < 0 ? 4 * sms : b, threads = b < 0 ? 256 : 512;
      auto k = mode == 0 ? seam_traffic<0> : seam_traffic<1>;
      const float ms = time_it([&] { k<<<blocks, threads>>>(x, r, coef, nw, ro, li, sink, T, H); });
      const double gbps = bytes / (ms * 1e-3) / 1e9;
      printf("mode %d (%s), %4d blocks x %3d: %8.1f us, %6.0f GB/s, %5.1f %% of copy\n", mode,
             mode ? "with the elementwise arithmetic" : "traffic only", blocks, threads, ms * 1e3, gbps,
             100.0 * gbps / copy_gbps);
    }
  }
  // Mode 1 with narrower row segments a warp (loads / stores), on every SM.
  {
    void (*ks[5])(const bf16*, const bf16*, const float*, const float*, bf16*, bf16*, float*, int, int) = {
        seam_traffic<1, 64>, seam_traffic<1, 128>, seam_traffic<1, 256>, seam_traffic<1, 64, 512>,
        seam_traffic<1, 512, 64>};
    const int segs[5][2] = {{64, 64}, {128, 128}, {256, 256}, {64, 512}, {512, 64}};
    for (int v = 0; v < 5; ++v) {
      const float ms = time_it([&] { ks[v]<<<sms, 512>>>(x, r, coef, nw, ro, li, sink, T, H); });
      const double gbps = bytes / (ms * 1e-3) / 1e9;
      printf("mode 1, %3d / %3d-byte row segments a warp (loads / stores), %4d blocks x 512: %8.1f us, %6.0f GB/s, "
             "%5.1f %% of copy\n",
             segs[v][0], segs[v][1], sms, ms * 1e3, gbps, 100.0 * gbps / copy_gbps);
    }
  }
  // Mode 2 (the MMA layout and the projection): 7 x 16 blocks, as 7 clusters of 16, where H is a
  // multiple of 512 (whole chunks a block).
  if (H % 512 == 0) {
    const char* what[5] = {"as the library", "no projection", "hi only, no split", "fn staged split",
                           "fn loaded once a item"};
    void (*ks[5])(const bf16*, const bf16*, const float*, const float*, const float*, bf16*, bf16*, float*, int,
                  int) = {seam_traffic_mma<0>, seam_traffic_mma<1>, seam_traffic_mma<2>, seam_traffic_mma<3>,
                          seam_traffic_mma<4>};
    for (int var = 0; var < 5; ++var) {
      const int smem = (var == 3 ? 2 : 1) * 24 * 4 * (H / 64 + 1) * 16;
      if (smem > 227 * 1024) continue;
      CHECK(cudaFuncSetAttribute(ks[var], cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      for (int b : {112, 128}) {
        const float ms = time_it([&] { ks[var]<<<b, 512, smem>>>(x, r, coef, nw, fn, ro, li, sink, T, H); });
        const double gbps = bytes / (ms * 1e-3) / 1e9;
        printf("mode 2.%d (MMA layout, %s), %4d blocks x 512, fn %d KB: %8.1f us, %6.0f GB/s, %5.1f %% of copy\n",
               var, what[var], b, smem / 1024, ms * 1e3, gbps, 100.0 * gbps / copy_gbps);
      }
    }
  }
  // Mode 3 (wgmma projection, tiles of 64 tokens, groups of 4 chunks), as many blocks as whole
  // multiples of the H / 128 groups fit the SMs.
  if (H % 128 == 0 && sms >= H / 128) {
    const int blocks = (sms / (H / 128)) * (H / 128);
    const char* what[2] = {"wgmma projection", "no projection"};
    void (*ks[2])(const bf16*, const bf16*, const float*, const float*, const float*, bf16*, bf16*, float*, int,
                  int) = {seam_traffic_wg<0>, seam_traffic_wg<1>};
    for (int var = 0; var < 2; ++var) {
      const int smem = var == 0 ? 4 * WG_CHUNK_BYTES : 0;
      CHECK(cudaFuncSetAttribute(ks[var], cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      const float ms = time_it([&] { ks[var]<<<blocks, 512, smem>>>(x, r, coef, nw, fn, ro, li, sink, T, H); });
      const double gbps = bytes / (ms * 1e-3) / 1e9;
      printf("mode 3.%d (tiles of 64, %s), %4d blocks x 512, fn %d KB: %8.1f us, %6.0f GB/s, %5.1f %% of copy\n", var,
             what[var], blocks, smem / 1024, ms * 1e3, gbps, 100.0 * gbps / copy_gbps);
    }
  }
  return 0;
}
