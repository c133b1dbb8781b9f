// The compressor projection y[M,N] = a[M,K] . w[N,K]^T with bf16 inputs and f32 output
// (SPEC section 7), or bf16 output (every entry point again as `<name>_ybf16`: the same f32 sums,
// rounded once to nearest even at the store). At decode M is 1..16 and the op is one pass over w,
// so the kernel is built to keep the memory system busy from the first cycle of the call to the
// last:
//
// - G = gridDim.x blocks (by default one per multiprocessor, min(SMs, n-tiles); the plan may
//   ask for more, sharing SMs, or fewer); block b owns the contiguous n-tiles
//   [b*NT/G, (b+1)*NT/G) of TH rows of w each (8, or 16 in the W16 variants), and all of K for
//   them. Its work is a sequence of stages (tile, kpw * 1024 columns) that travel through a ring
//   of nst shared-memory slots (nst >= 1), each refilled with the stage nst places later as soon
//   as every warp is done with it, by bulk copies (the TMA unit), one copy per row of w, issued
//   by lane 0 of warp r for row r (and lane 1 for row r + 8 with W16) and completed on the
//   slot's mbarrier. On the H200 the time per copy, not the bytes, bounded the first versions:
//   larger copies (kpw) and one issuing warp per row are what feed the memory system
//   (PERF_NOTES.md);
// - at M <= 8 (RES) the block's rows of a are copied once, whole, after pdl_wait() and stay
//   resident; past that they travel with each stage;
// - w is a weight: a block requests its first nst stages of w *before* pdl_wait(), so under
//   programmatic dependent launch the next call's blocks start streaming w as soon as they land
//   on a multiprocessor this call has left. The block triggers its dependents at once;
// - per stage, warp wp computes k-blocks (of PKB columns) kb = wp mod PNW: lane (g, q) reads four
//   16-byte vectors of w row g (k = 8q + 32v, v = 0..3, within the k-block) and the same vectors
//   of a rows g and g+8, and runs the products on bf16 tensor cores (mma m16n8k16, f32
//   accumulation; a bf16 x bf16 product is exact in f32) into one accumulator per v (chains of
//   two dependent MMAs per k-block, not eight), the four summed as (0 + 1) + (2 + 3) at the
//   tile's end. The k order inside an MMA is a fixed permutation applied to both operands.
//   Staged rows are padded by 64 bytes so that the two rows of a quarter-warp's 16-byte loads
//   fall in different banks. The W16 variants (M <= 8) swap the operands: lane (g, q) reads w
//   rows g and g + 8 (the MMA's 16-row side) and a row g (the tokens are the MMA's 8 columns), so
//   a tile of 16 rows of w takes the MMAs a tile of 8 takes otherwise; an output element is
//   still one MMA element over the same products in the same k order (the GPU test compares the
//   two layouts bit for bit);
// - after a tile's last stage the warps' partial tiles are summed in warp order through shared
//   memory and stored;
// - the register-resident variants (rr, rr2, rrb; further down) skip the ring: each warp loads its
//   k-blocks of a 16-row tile straight into registers before the wait, as a pure read of w does,
//   and runs the W16 MMA sequence from there; the H200 table (plan.rs) takes rr at K = 7168,
//   N = 1024 and 2048 (and without PDL), and rrb (the rows dealt evenly) at every N of K = 4096
//   and 5120 (at 4096 x 1024 and, M <= 4, 5120 x 1024 rrb_c4_as_mc2 and rrb_c5_as_mc2: the rows
//   of a multicast over clusters of two by the last warp, whose share of w the others copy; at
//   N = 2560 rrb_c4, rrb_c4_aw and rrb_c5_aw, whose two tiles end behind one barrier, JE), and
//   at 7168 x 2560 with its compact rows first (rrb_c7_xf);
// - the streaming variant (rs2) keeps only two k-blocks a warp in registers at a time, so
//   that two blocks share an SM (no table entry since attempt 102);
// - the register-resident variant in tiles of 8 rows (rr8; last) holds half RR's registers of w
//   a lane, so two blocks share an SM up to K = 5120 (no table entry since attempt 92; rr2
//   neither).
//
// Row m's result depends only on row m of a, w and K: a warp's k-blocks (kb = wp mod PNW, in
// ascending order), the MMA sequence into each accumulator, the accumulators' sum and the warp
// order are fixed by K, never by M, m's position, N, the tile's block, the stage width or the
// ring depth, so the result is deterministic and batch-invariant. The variants differ only in
// how many rows of a they stage (4, 8 or 16; rows past M are never read and enter the MMA as
// zeros) and where; an MMA row's result does not depend on the other rows. M > 16 runs as
// several row blocks of 16 (gridDim.y). K >= 8: at K = 0 a block has no stage and writes
// nothing, so the engine sends that call to the generic kernel.

#define PMAX 16   // rows of a per row block (the MMA's M)
#define PKB 128   // columns per k-block
#define PNW 8     // warps per block
#define PMAXST 8  // most ring slots

// Timeline stamps (MHC_TIMELINE builds only; `mhc bench --op projection --timeline`).
#define PTL_ENTRY 0    // the block starts
#define PTL_ISSUED 1   // its first stages of w are requested
#define PTL_WAITED 2   // pdl_wait() returned
#define PTL_A 3        // the resident rows of a landed (RES)
#define PTL_FIRST 4    // stage 0 landed
#define PTL_LAST 5     // the last stage landed
#define PTL_STORE 6    // the last tile's sums are about to be stored
#define PTL_EXIT 7     // stored

// One k-block's MMAs, shared by every variant (the one place their order is written): for u = 0,
// 1 and each 16-byte vector v, accumulator d[v] += one m16n8k16 MMA. W16: A is rows g and g + 8
// of w (w0, w1), B token g (a0); otherwise A is tokens g and g + 8 (a0, a1 when BIG), B row g of
// w (w0).
template <bool W16, bool BIG>
__device__ __forceinline__ void proj_kblock_mma(float d[4][4], const uint4 w0[4], const uint4 w1[4],
                                                const uint4 a0[4], const uint4 a1[4]) {
#pragma unroll
  for (int u = 0; u < 2; ++u) {
#pragma unroll
    for (int v = 0; v < 4; ++v) {
      if (W16) {
        const u32 af[4] = {word(w0[v], 2 * u), word(w1[v], 2 * u), word(w0[v], 2 * u + 1), word(w1[v], 2 * u + 1)};
        const u32 bf[2] = {word(a0[v], 2 * u), word(a0[v], 2 * u + 1)};
        mma_bf16(d[v], af, bf);
      } else {
        const u32 af[4] = {word(a0[v], 2 * u), BIG ? word(a1[v], 2 * u) : 0u, word(a0[v], 2 * u + 1),
                           BIG ? word(a1[v], 2 * u + 1) : 0u};
        const u32 bf[2] = {word(w0[v], 2 * u), word(w0[v], 2 * u + 1)};
        mma_bf16(d[v], af, bf);
      }
    }
  }
}

// A tile's end, shared by every variant (the one place the sum's order is written): each warp
// puts its four accumulators summed as (0 + 1) + (2 + 3); e[0..1] are the MMA's row g, columns
// 2q, 2q + 1, e[2..3] its row g + 8. After a barrier, proj_store_tile sums the warps' partials in
// warp order: part[.][i][c] is the MMA's row i, column c (token i and row c of the tile, or with
// W16 row i of the tile and token c; consecutive threads take consecutive n either way).
__device__ __forceinline__ void proj_put_partials(float (*part)[PMAX][8], const float d[4][4], int warp, int g,
                                                  int q) {
  float e[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) e[i] = (d[0][i] + d[1][i]) + (d[2][i] + d[3][i]);
  part[warp][g][2 * q] = e[0];
  part[warp][g][2 * q + 1] = e[1];
  part[warp][g + 8][2 * q] = e[2];
  part[warp][g + 8][2 * q + 1] = e[3];
}
// One output element: f32 as summed, or (the _ybf16 kernels) rounded once to bf16, to nearest even.
__device__ __forceinline__ void proj_put_y(float* __restrict__ y, size_t i, float s) { y[i] = s; }
__device__ __forceinline__ void proj_put_y(bf16_t* __restrict__ y, size_t i, float s) { y[i] = f32_to_bf16(s); }
// Rows n of y at and past nend (N, or the end of a block's rows) are not stored.
template <bool W16, typename YT>
__device__ __forceinline__ void proj_store_tile(const float (*part)[PMAX][8], YT* __restrict__ y, int m0,
                                                int mrows, int n0, int N, int nend) {
  if (threadIdx.x < PMAX * 8) {
    const int i = W16 ? threadIdx.x % 16 : threadIdx.x / 8;
    const int c = W16 ? threadIdx.x / 16 : threadIdx.x % 8;
    const int r = W16 ? c : i, n = n0 + (W16 ? i : c);
    if (r < mrows && n < nend) {
      float s = part[0][i][c];
#pragma unroll
      for (int k = 1; k < PNW; ++k) s += part[k][i][c];
      proj_put_y(y, (size_t)(m0 + r) * N + n, s);
    }
  }
}

// Two W16 tiles at once (JE, below): part's warps [0, PNW) hold the first tile's partials (rows
// from n00), [PNW, 2 PNW) the second's (from n01); each half of the block stores one tile, its
// thread j as proj_store_tile's thread j, so every element is the same sum. (Its own function:
// giving proj_store_tile a thread index changed the machine code of every kernel that calls it.)
template <typename YT>
__device__ __forceinline__ void proj_store_two_tiles(const float (*part)[PMAX][8], YT* __restrict__ y, int m0,
                                                     int mrows, int n00, int n01, int N, int nend) {
  static_assert(PNW * WARP / 2 >= PMAX * 8, "a half of the block stores a whole tile");
  const int half = threadIdx.x / (PNW * WARP / 2), j = threadIdx.x % (PNW * WARP / 2);
  const float(*p)[PMAX][8] = part + half * PNW;
  if (j < PMAX * 8) {
    const int i = j % 16, r = j / 16, n = (half ? n01 : n00) + i;
    if (r < mrows && n < nend) {
      float s = p[0][i][r];
#pragma unroll
      for (int k = 1; k < PNW; ++k) s += p[k][i][r];
      proj_put_y(y, (size_t)(m0 + r) * N + n, s);
    }
  }
}

template <typename YT, int AR, bool RES, bool W16>
__device__ __forceinline__ void proj_body(const bf16_t* __restrict__ a, const bf16_t* __restrict__ w,
                                          YT* __restrict__ y, int M, int N, int K, int kpw, int nst,
                                          u64* tl) {
  constexpr bool BIG = AR > 8;
  constexpr int TH = W16 ? 16 : 8;  // rows of w per n-tile
  extern __shared__ __align__(128) unsigned char psm[];
  __shared__ float part[PNW][PMAX][8];
  __shared__ unsigned long long bars[PMAXST + 1];  // ring slots, then the resident a
  STAMP(tl, PTL_ENTRY);
  pdl_trigger();
  const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
  const int g = lane >> 2, q = lane & 3;
  const int pkc = kpw * PNW * PKB;              // columns per stage
  const int wrow = 2 * pkc + 64;                // a staged row of w (bytes, padded)
  const int arow = RES ? 2 * K + 64 : wrow;     // a staged row of a
  const int sw = TH * wrow;                     // w part of a slot
  const int ss = sw + (RES ? 0 : AR * arow);    // a slot
  unsigned char* const ares = psm + nst * ss;   // the resident a (RES)
  const int nt = (N + TH - 1) / TH;
  const int t0 = (int)((long long)blockIdx.x * nt / gridDim.x);
  const int t1 = (int)((long long)(blockIdx.x + 1) * nt / gridDim.x);
  const int nch = (K + pkc - 1) / pkc;  // stages per tile
  const int nkb = (K + PKB - 1) / PKB;
  const int nq = (t1 - t0) * nch;       // stages of this block
  if (nq == 0) return;
  const int m0 = blockIdx.y * PMAX;
  const int mrows = min(AR, M - m0);
  if (threadIdx.x == 0) {
    // A slot's phase completes on the w copies' arrival (and the a copies' one, !RES).
    for (int s = 0; s < nst; ++s) mbar_init(&bars[s], RES ? 1 : 2);
    mbar_init(&bars[PMAXST], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  // Stage j: tile t0 + j / nch, columns (j % nch) * pkc ..., in slot j % nst. Rows of w past N
  // and of a past M are not copied; columns past K are not copied either, and the compute masks
  // them, so no stale value enters an MMA.
  auto issue_w = [&](int j) {
    if (j >= nq) return;
    const int n0 = (t0 + j / nch) * TH, k0 = (j % nch) * pkc;
    const int rows = min(TH, N - n0);
    const u32 bytes = 2u * (u32)min(pkc, K - k0);
    unsigned long long* bar = &bars[j % nst];
    if (threadIdx.x == 0) mbar_expect_tx(bar, bytes * rows);
    const int r = warp + 8 * lane;  // lane 0: row warp; with W16 lane 1: row warp + 8
    if (lane < TH / 8 && r < rows)
      bulk_copy(psm + (j % nst) * ss + r * wrow, w + (size_t)(n0 + r) * K + k0, bytes, bar);
  };
  auto issue_a = [&](int j) {  // !RES
    if (j >= nq) return;
    const int k0 = (j % nch) * pkc;
    const u32 bytes = 2u * (u32)min(pkc, K - k0);
    unsigned long long* bar = &bars[j % nst];
    if (threadIdx.x == 0) mbar_expect_tx(bar, bytes * mrows);
    if (lane == 1)
      for (int r = warp; r < mrows; r += PNW)
        bulk_copy(psm + (j % nst) * ss + sw + r * arow, a + (size_t)(m0 + r) * K + k0, bytes, bar);
  };
#pragma unroll 1
  for (int j = 0; j < nst; ++j) issue_w(j);
  STAMP(tl, PTL_ISSUED);

  pdl_wait();  // a may be the previous kernel's output; y may still be read by it
  STAMP(tl, PTL_WAITED);

  if (RES) {
    if (threadIdx.x == 0) mbar_expect_tx(&bars[PMAXST], 2u * (u32)K * mrows);
    if (lane == 1)
      for (int r = warp; r < mrows; r += PNW)
        bulk_copy(ares + r * arow, a + (size_t)(m0 + r) * K, 2u * (u32)K, &bars[PMAXST]);
    mbar_wait(&bars[PMAXST], 0);
    STAMP(tl, PTL_A);
  } else {
#pragma unroll 1
    for (int j = 0; j < nst; ++j) issue_a(j);
  }

  const bool a0ok = g < mrows, a1ok = BIG && g + 8 < mrows;
  const uint4 z = make_uint4(0, 0, 0, 0);
  float d[4][4] = {};  // d[v]: the accumulator of vector v (the header)
#pragma unroll 1
  for (int j = 0; j < nq; ++j) {
    mbar_wait(&bars[j % nst], (u32)(j / nst) & 1u);
    if (j == 0) STAMP(tl, PTL_FIRST);
    if (j == nq - 1) STAMP(tl, PTL_LAST);
    const int c = j % nch;
    const unsigned char* slot = psm + (j % nst) * ss;
#pragma unroll 1
    for (int h = 0; h < kpw; ++h) {
      const int kb = (c * kpw + h) * PNW + warp;
      if (kb >= nkb) break;
      const unsigned char* sw_ = slot + g * wrow + (h * PNW + warp) * (2 * PKB) + 16 * q;
      const unsigned char* sa_ =
          RES ? ares + g * arow + kb * (2 * PKB) + 16 * q : slot + sw + g * arow + (h * PNW + warp) * (2 * PKB) + 16 * q;
      uint4 wv[4], wv1[4], av0[4], av1[4];
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const bool kok = kb * PKB + 8 * q + 32 * v < K;
        wv[v] = kok ? *(const uint4*)(sw_ + 64 * v) : z;
        if (W16) wv1[v] = kok ? *(const uint4*)(sw_ + 8 * wrow + 64 * v) : z;
        av0[v] = kok && a0ok ? *(const uint4*)(sa_ + 64 * v) : z;
        if (BIG) av1[v] = kok && a1ok ? *(const uint4*)(sa_ + 8 * arow + 64 * v) : z;
      }
      proj_kblock_mma<W16, BIG>(d, wv, wv1, av0, av1);
    }
    if (c == nch - 1) {
      // The tile's end; the next write to `part` follows this stage's closing barrier.
      proj_put_partials(part, d, warp, g, q);
      __syncthreads();
      if (j == nq - 1) STAMP(tl, PTL_STORE);
      proj_store_tile<W16>(part, y, m0, mrows, (t0 + j / nch) * TH, N, N);
#pragma unroll
      for (int v = 0; v < 4; ++v) d[v][0] = d[v][1] = d[v][2] = d[v][3] = 0.0f;
    }
    __syncthreads();  // every thread is done with stage j: its slot takes stage j + nst
    issue_w(j + nst);
    if (!RES) issue_a(j + nst);
  }
  STAMP(tl, PTL_EXIT);
}

// A 16-byte load of a weight that is read once: not kept in L1.
__device__ __forceinline__ uint4 ld_stream16(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// The register-resident variant (RR; M <= 8, tiles of 16 rows of w, K <= (CR + CS) * 1024): no
// ring. A block's tile of w goes straight from memory into registers, like a pure read of w:
// before pdl_wait() every lane issues all of its loads (warp wp holds the k-blocks kb = wp mod
// PNW of rows g and g + 8: the first CR of them in registers (32 * CR registers), the next CS in
// a lane-private area of shared memory by 16-byte cp.async, where K is too long for the register
// file), so under programmatic dependent launch the whole tile streams during the previous call.
// After the wait the rows of a land in shared memory (one bulk copy) and the MMAs read w
// from registers: no block-wide shared-memory pass over w after the last byte arrives. Every warp
// runs exactly the W16 ring kernel's MMA sequence (same k-blocks in the same order into the same
// four accumulators, the same warp-order sum), so the bits are those of every other plan. A block
// with several tiles loads the next one after computing the current one.
//
// BAL (the rrb variants): the rows of w are dealt evenly, block b owning rows [b*N/G, (b+1)*N/G)
// (at most PBAL_MAX = 20, which the plan ensures), so that at N = 2560 each of the 132 SMs takes
// 19 or 20 rows instead of 16 or 32 in whole tiles: the first 16 as the register tile above, the
// rest (at most 4) in a compact area of shared memory (row g < 4 of the tile, lanes 0-15), a
// second MMA tile whose rows g + 8 and g >= 4 are zeros. An output element is the same MMA element
// over the same products wherever its row sits in a tile, so the bits are every other plan's.
#define PBAL_MAX 20
// This block's 1/MC of `bytes` at src (16-byte pieces) multicast into the same offset of every
// block of its cluster (the _mc2 variants: each block then expects all `bytes` on its `bar`).
template <int MC>
__device__ __forceinline__ void bulk_multicast_part(unsigned char* dst, const bf16_t* src, u32 bytes,
                                                    unsigned long long* bar) {
  const u32 part = bytes / MC, r = cluster_rank();
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], "
      "%4;" ::"r"(smem_u32(dst + r * part)),
      "l"((const unsigned char*)src + r * part), "r"(part), "r"(smem_u32(bar)), "h"((unsigned short)((1u << MC) - 1))
      : "memory");
}

template <typename YT, int CR, int CS, bool TWO, bool BAL, bool ONE = false, int MC = 1, bool XF = false, int AW = 0,
          bool JE = false>
__device__ __forceinline__ void proj_rr_body(const bf16_t* __restrict__ a, const bf16_t* __restrict__ w,
                                             YT* __restrict__ y, int M, int N, int K, u64* tl) {
  static_assert(!(TWO && BAL), "one or the other");
  static_assert(!JE || (BAL && !XF), "JE: the balanced tiles in their default order");
  // Dynamic shared memory: the lane-private vectors (thread-minor, 16 bytes each: CS * 8 of the
  // first tile, then with TWO CR * 8 of the second), with BAL the compact rows ((CR + CS) * 4
  // vectors of lanes 0-15 of each warp), with AW == 2 the last warp's share of the register tile
  // ((CR + CS) * 8 vectors of each of its lanes), then the resident rows of a.
  constexpr int NLP = CS * 8 + (TWO ? CR * 8 : 0);
  constexpr int NXB = BAL ? (CR + CS) * 4 * (PNW * 16) : 0;  // compact vectors
  constexpr int NAW = AW == 2 ? (CR + CS) * 8 * WARP : 0;    // the last warp's vectors
  static_assert(AW != 2 || (BAL && CR + CS < PNW), "AW == 2: the balanced tile, a helper warp per k-block");
  extern __shared__ __align__(128) unsigned char psm[];
  uint4* const wsm = (uint4*)psm;
  uint4* const xsm = wsm + NLP * (PNW * WARP);
  uint4* const awsm = xsm + NXB;
  unsigned char* const asm_ = psm + (NLP * (PNW * WARP) + NXB + NAW) * 16;
  __shared__ float part[JE ? 2 * PNW : PNW][PMAX][8];  // (JE: the compact tile's from PNW on)
  __shared__ unsigned long long abar;
  __shared__ unsigned long long wbar;  // AW == 2: the last warp's share of w landed
  STAMP(tl, PTL_ENTRY);
  pdl_trigger();
  const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
  const int g = lane >> 2, q = lane & 3;
  const int arow = 2 * K;  // a's rows unpadded: one bulk copy brings them all
  // The block's tiles: [t0, t1) of 16 rows, or with BAL its rows [r0, r1) as tile t0 = 0 (16 rows
  // from r0) and tile 1 (the rest, from r0 + 16).
  const int nt = (N + 15) / 16;
  const int r0 = BAL ? (int)((long long)blockIdx.x * N / gridDim.x) : 0;
  const int r1 = BAL ? (int)((long long)(blockIdx.x + 1) * N / gridDim.x) : N;
  const int t0 = BAL ? 0 : (int)((long long)blockIdx.x * nt / gridDim.x);
  const int t1 = BAL ? (r1 - r0 + 15) / 16 : (int)((long long)(blockIdx.x + 1) * nt / gridDim.x);
  const int nkb = (K + PKB - 1) / PKB;
  if (t0 >= t1 || K <= 0) return;
  const int m0 = blockIdx.y * PMAX;
  const int mrows = min(8, M - m0);
  if (threadIdx.x == 0) {
    mbar_init(&abar, 1);
    if (AW == 2) mbar_init(&wbar, WARP * (CR + CS));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if constexpr (MC > 1) cluster_arrive_relaxed();  // this block's barrier is ready for the others

  const uint4 z = make_uint4(0, 0, 0, 0);
  uint4 w0[CR][4], w1[CR][4];  // rows g and g + 8, k-block c * PNW + warp, vector v
  // This thread's lane-private vector i: vector v of row g + 8r of k-block c is, for the first
  // tile (c >= CR), i = (c - CR) * 8 + v * 2 + r; with TWO, for the second, CS * 8 + c * 8 + v * 2 + r.
  auto wsl = [&](int i) { return wsm + i * (PNW * WARP) + threadIdx.x; };
  // BAL's compact rows: vector v of row g (< 4) of k-block c, lanes 0-15 of each warp.
  // (xslw: the same vector of warp wp's lane, for the _as variants' helpers.)
  auto xslw = [&](int c, int v, int wp) { return xsm + (c * 4 + v) * (PNW * 16) + wp * 16 + lane; };
  auto xsl = [&](int c, int v) { return xslw(c, v, warp); };
  // Tile t's first row of w (the block's rows end at r1: N, or with BAL the block's share).
  auto tile_n0 = [&](int t) { return BAL ? r0 + 16 * t : t * 16; };
  // Tile t's k-blocks c of rows g and g + 8: those below `creg` into registers, the others by
  // cp.async into the lane-private vectors from `base` on. Rows past the block's (N, or r1 with
  // BAL) and columns past K are not loaded: zeros enter the MMA (rows past them are never stored,
  // and columns past K never run: the k-block loop stops where the ring kernel's does).
  // A whole tile with K a multiple of PNW * PKB (every decode shape) needs no per-load test: a
  // k-block c is in range for every lane or for none, so the loads issue as their addresses are
  // ready (with a test per load, ptxas computed all of them first). Measured (PERF_NOTES.md
  // attempt 93): RR, rr2 and rrb_c7 gain from it; rrb_c4 and rrb_c5 (whose loads issued early
  // already) lose 2-3 %, so they keep the one path, and so does rr1_c4 (ONE: RR's code before
  // attempt 93, byte for byte, which the H200 table takes at 4096 x 1024 from M = 3: attempt 97).
  // The two loops are written out: folding them into one routine with the test as a parameter
  // changed the machine code of every register variant (rrb_c4 and rrb_c5 too), whose
  // measurements are of this code.
  auto load_tile = [&](int t, int creg, int base) {
    const int n0 = tile_n0(t);
    const bf16_t* p0 = w + (size_t)(n0 + g) * K;
    const bf16_t* p1 = p0 + (size_t)8 * K;
    if ((!BAL || CS > 0) && !ONE && n0 + 16 <= r1 && K % (PNW * PKB) == 0) {
      const int kc = K / (PNW * PKB);
#pragma unroll
      for (int c = 0; c < CR + CS; ++c) {
#pragma unroll
        for (int v = 0; v < 4; ++v) {
          const int col = (c * PNW + warp) * PKB + 8 * q + 32 * v;
          if (c < creg) {
            w0[c < CR ? c : 0][v] = c < kc ? ld_stream16(p0 + col) : z;
            w1[c < CR ? c : 0][v] = c < kc ? ld_stream16(p1 + col) : z;
          } else {
            const int i = base + (c - creg) * 8 + v * 2;
            cp_async16(wsl(i), c < kc ? p0 + col : w, c < kc ? 16 : 0);
            cp_async16(wsl(i + 1), c < kc ? p1 + col : w, c < kc ? 16 : 0);
          }
        }
      }
      return;
    }
    const bool r0ok = n0 + g < r1, r1ok = n0 + g + 8 < r1;
#pragma unroll
    for (int c = 0; c < CR + CS; ++c) {
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const int col = (c * PNW + warp) * PKB + 8 * q + 32 * v;
        if (c < creg) {
          w0[c < CR ? c : 0][v] = r0ok && col < K ? ld_stream16(p0 + col) : z;
          w1[c < CR ? c : 0][v] = r1ok && col < K ? ld_stream16(p1 + col) : z;
        } else {
          const int i = base + (c - creg) * 8 + v * 2;
          cp_async16(wsl(i), r0ok && col < K ? p0 + col : w, r0ok && col < K ? 16 : 0);
          cp_async16(wsl(i + 1), r1ok && col < K ? p1 + col : w, r1ok && col < K ? 16 : 0);
        }
      }
    }
  };
  // With BAL the block's rows past its first 16 (at most 4) go to the compact area.
  auto load_compact = [&]() {
    if (BAL && t1 > 1 && lane < 16) {
      const int n = r0 + 16 + g;
      const bool ok = n < r1;
      const bf16_t* p0 = w + (size_t)n * K;
#pragma unroll
      for (int c = 0; c < CR + CS; ++c) {
#pragma unroll
        for (int v = 0; v < 4; ++v) {
          const int col = (c * PNW + warp) * PKB + 8 * q + 32 * v;
          cp_async16(xsl(c, v), ok && col < K ? p0 + col : w, ok && col < K ? 16 : 0);
        }
      }
    }
  };
  // AW (the _aw and _as variants; PERF_NOTES.md attempts 103 and 104): the last warp waits for
  // the previous kernel first and issues a's copy at once, instead of after every warp has issued
  // its loads of w (that issue stalls on the loads in flight: with one block an SM the wait, and
  // a's copy, came 1.5-4 us after the block landed). The other warps do not wait themselves:
  // their reads of a and their stores of y follow a's landing, which follows the last warp's wait
  // (`griddepcontrol.wait` makes the previous grid's memory visible to the whole grid). AW == 1
  // (_aw): the last warp then issues its own loads of w, after the wait. AW == 2 (_as): it loads
  // none; warp h < CR + CS copies the last warp's k-block c = h of the register tile (rows g and
  // g + 8) and of the compact rows into shared memory, each lane the vectors the last warp's same
  // lane would load, and arrives on wbar once they have landed; the last warp reads them there.
  // The same values enter the same MMAs in the same order: the bits are every other plan's.
  auto awsl = [&](int c, int v, int r) { return awsm + ((c * 4 + v) * 2 + r) * WARP + lane; };
  auto load_last_share = [&]() {
    if (warp < CR + CS) {
      const int c = warp;
      const bool r0ok = r0 + g < r1, r1ok = r0 + g + 8 < r1;
      const bf16_t* p0 = w + (size_t)(r0 + g) * K;
      const bf16_t* p1 = p0 + (size_t)8 * K;
      const int n = r0 + 16 + g;
      const bool xok = t1 > 1 && lane < 16 && n < r1;
      const bf16_t* px = w + (size_t)n * K;
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const int col = (c * PNW + PNW - 1) * PKB + 8 * q + 32 * v;
        cp_async16(awsl(c, v, 0), r0ok && col < K ? p0 + col : w, r0ok && col < K ? 16 : 0);
        cp_async16(awsl(c, v, 1), r1ok && col < K ? p1 + col : w, r1ok && col < K ? 16 : 0);
        if (t1 > 1 && lane < 16)
          cp_async16(xslw(c, v, PNW - 1), xok && col < K ? px + col : w, xok && col < K ? 16 : 0);
      }
      asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_u32(&wbar)) : "memory");
    }
  };
  const bool aw = AW && warp == PNW - 1;
  // With MC as well (rrb_c4_as_mc2, rrb_c5_as_mc2), the last warp multicasts its block's part of
  // a's rows into both blocks of the cluster once both blocks' barriers are ready (the other
  // warps join that cluster barrier after their loads of w).
  if (aw) {
    pdl_wait();
    if constexpr (MC > 1) cluster_wait();
    if (lane == 0) {
      mbar_expect_tx(&abar, 2u * (u32)K * mrows);
      if constexpr (MC == 1) {
        bulk_copy(asm_, a + (size_t)m0 * K, 2u * (u32)K * mrows, &abar);
      } else {
        bulk_multicast_part<MC>(asm_, a + (size_t)m0 * K, 2u * (u32)K * mrows, &abar);
      }
    }
  }
  if (!(AW == 2 && aw)) {  // (the _as variants' last warp loads no w)
    // XF (rrb_c7_xf): the compact rows first, as their own cp.async group, then the register tile
    // (its shared-memory k-blocks a second group); after a lands the compact tile runs first, on
    // rows that landed first, and the register tile's MMAs follow its loads (PERF_NOTES.md attempt
    // 102: -3 to -5 % at 7168 x 2560; the same order lost 6-9 % for rrb_c4 and rrb_c5, and the
    // register tile first with only the wait split into groups gained under 1 %).
    if (XF) {
      load_compact();
      cp_async_commit();
    }
    load_tile(t0, CR, 0);
    if (XF) cp_async_commit();
    // With TWO the block's second tile goes whole to shared memory, also ahead of the wait.
    if (TWO && t0 + 1 < t1) load_tile(t0 + 1, 0, CS * 8);
    if (!XF) load_compact();
    // (not committed: XF's group waits below stay those of its own copies)
    if (AW == 2) load_last_share();
  }
  STAMP(tl, PTL_ISSUED);

  // a may be the previous kernel's output; y may still be read by it. rrb_c4's loads of w were
  // sunk below a plain wait (and below a's landing); the other variants keep theirs ahead
  // without the pinned wait (the pinned wait on all of them measured -0.5 to +1.4 %, noise:
  // PERF_NOTES.md attempt 90), and their code is left as measured.
  if constexpr (AW) {
    // (the last warp waited before its loads)
  } else if constexpr ((BAL && CR + CS <= 4) || MC > 1 || XF) {
    pdl_wait_after_loads(K < 0);
  } else {
    pdl_wait();
  }
  STAMP(tl, PTL_WAITED);
  // The rows of a are contiguous: one copy (per-row copies cost 5-7 % at M = 2 and 4; the
  // unpadded rows put two tokens of a quarter-warp's 16-byte reads in one bank).
  if constexpr (AW) {
    if (MC > 1 && !aw) cluster_wait();  // (the last warp's was before its copy)
    mbar_wait(&abar, 0);
    if (AW == 2 && aw) mbar_wait(&wbar, 0);
    if constexpr (MC > 1) cluster_arrive_relaxed();  // all of a landed here: the matching wait is before the exit
  } else if constexpr (MC == 1) {
    if (threadIdx.x == 0) mbar_expect_tx(&abar, 2u * (u32)K * mrows);
    if (threadIdx.x == 1) bulk_copy(asm_, a + (size_t)m0 * K, 2u * (u32)K * mrows, &abar);
    mbar_wait(&abar, 0);
  } else {
    // MC (the _mc2 variant): the MC blocks of a cluster each read 1/MC of the rows of a from L2
    // and multicast it into all of them (every block's barrier expects all of a). The engine
    // launches it in clusters of MC only where K is a multiple of 8 * MC (16-byte pieces) and
    // every block has rows (no block leaves before the cluster barriers).
    cluster_wait();  // every block's barrier is initialized
    const u32 bytes = 2u * (u32)K * mrows;
    if (threadIdx.x == 0) mbar_expect_tx(&abar, bytes);
    if (threadIdx.x == 1) bulk_multicast_part<MC>(asm_, a + (size_t)m0 * K, bytes, &abar);
    mbar_wait(&abar, 0);
    cluster_arrive_relaxed();  // all of a landed here: the matching wait is before the exit
  }
  STAMP(tl, PTL_A);

  const bool a0ok = g < mrows;
  // Tile t, from registers (and CS k-blocks from lane-private vector 0 on), or (insm, TWO's
  // second tile) wholly from shared memory from vector CS * 8 on, or (inx, BAL's second) from the
  // compact area.
  // END = 0: the tile's own end. JE (BAL's two tiles; PERF_NOTES.md attempt 139): the register
  // tile's partials are put (END = 1) and the compact tile's beside them (END = 2), then one
  // barrier and both tiles stored at once, each by half the block: one barrier, store pass and
  // barrier fewer in the call's tail. The same partials summed in the same warp order: the bits
  // of END = 0.
  auto run_tile = [&](int t, bool insm, bool inx, int END) {
    if (t == t1 - 1) STAMP(tl, PTL_LAST);
    // This thread's own vectors, where the tile reads any: the register tile of rr and rrb
    // starts as its registers land, without waiting for the second tile's or the compact rows'
    // copies (PERF_NOTES.md attempt 94).
    if (XF) {
      if (inx) cp_async_wait_group<1>();  // the compact rows (the register tile's copies may fly on)
    } else if (CS > 0 || insm || inx) {
      cp_async_wait_all();
    }
    float d[4][4] = {};
#pragma unroll
    for (int c = 0; c < CR + CS; ++c) {
      const int kb = c * PNW + warp;
      if (kb >= nkb) break;
      if (XF && CS > 0 && !inx && c == CR) cp_async_wait_group<0>();  // its shared-memory k-blocks
      const unsigned char* sa_ = asm_ + g * arow + kb * (2 * PKB) + 16 * q;
      uint4 av[4], x0[4], x1[4];
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const bool kok = kb * PKB + 8 * q + 32 * v < K;
        av[v] = kok && a0ok ? *(const uint4*)(sa_ + 64 * v) : z;
        const int i = insm ? CS * 8 + c * 8 + v * 2 : (c - CR) * 8 + v * 2;
        if (inx) {
          x0[v] = lane < 16 ? *xsl(c, v) : z;
          x1[v] = z;
        } else if (AW == 2 && aw) {
          x0[v] = *awsl(c, v, 0);
          x1[v] = *awsl(c, v, 1);
        } else {
          x0[v] = !insm && c < CR ? w0[c < CR ? c : 0][v] : *wsl(i);
          x1[v] = !insm && c < CR ? w1[c < CR ? c : 0][v] : *wsl(i + 1);
        }
      }
      proj_kblock_mma<true, false>(d, x0, x1, av, av);
    }
    // The ring kernel's tile end (W16 layout).
    proj_put_partials(END == 2 ? part + PNW : part, d, warp, g, q);
    if (END == 1) return;
    __syncthreads();
    if (t == t1 - 1) STAMP(tl, PTL_STORE);
    if (END == 2) {
      proj_store_two_tiles(part, y, m0, mrows, tile_n0(0), tile_n0(1), N, r1);
      return;
    }
    proj_store_tile<true>(part, y, m0, mrows, tile_n0(t), N, r1);
    __syncthreads();  // part is rewritten by the next tile
  };
  if constexpr (BAL && XF) {
    // The compact rows (landed first), then the register tile as its loads land.
    if (t1 > 1) run_tile(1, false, true, 0);
    run_tile(0, false, false, 0);
  } else if constexpr (BAL && JE) {
    // The register tile, then (the registers free) the compact rows, their ends together.
    if (t1 > 1) {
      run_tile(0, false, false, 1);
      run_tile(1, false, true, 2);
    } else {
      run_tile(0, false, false, 0);
    }
  } else if constexpr (BAL) {
    // The register tile, then (the registers free) the compact rows.
    run_tile(0, false, false, 0);
    if (t1 > 1) run_tile(1, false, true, 0);
  } else {
#pragma unroll 1
    for (int t = t0; t < t1; ++t) {
      const bool insm = TWO && t == t0 + 1;
      if (t > t0 && !insm) load_tile(t, CR, 0);
      run_tile(t, insm, false, 0);
    }
  }
  // No block leaves while another block's multicast may still write into it.
  if constexpr (MC > 1) cluster_wait();
  STAMP(tl, PTL_EXIT);
}

// The streaming register variant (RS; M <= 8, tiles of 16 rows of w, any K): w through registers
// as in RR, but each warp holds only D k-blocks at a time (32 * D registers), so that two blocks
// share an SM and a call of N = 2560 (160 tiles) fits one wave with room for the next call's
// blocks. A block's work is the sequence of (tile, k-block c) items of its tiles, tile by tile
// and c ascending; item j lives in register slot j mod D. Before pdl_wait() every lane issues the
// loads of its first D items; after a lands, each item's MMAs are followed by the loads of item
// j + D into the slot they freed (asm volatile keeps that order), so D k-blocks a warp stay in
// flight and the stream crosses tile boundaries. Warp wp still runs the k-blocks kb = wp mod PNW
// of each tile in ascending order into the same four accumulators, and the tile's end is RR's:
// the bits are every other plan's.
template <typename YT, int D>
__device__ __forceinline__ void proj_rs_body(const bf16_t* __restrict__ a, const bf16_t* __restrict__ w,
                                             YT* __restrict__ y, int M, int N, int K, u64* tl) {
  extern __shared__ __align__(128) unsigned char psm[];  // the resident rows of a, unpadded
  __shared__ float part[PNW][PMAX][8];
  __shared__ unsigned long long abar;
  STAMP(tl, PTL_ENTRY);
  pdl_trigger();
  const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
  const int g = lane >> 2, q = lane & 3;
  const int arow = 2 * K;
  const int nt = (N + 15) / 16;
  const int t0 = (int)((long long)blockIdx.x * nt / gridDim.x);
  const int t1 = (int)((long long)(blockIdx.x + 1) * nt / gridDim.x);
  const int nkb = (K + PKB - 1) / PKB;
  const int nc = (nkb + PNW - 1) / PNW;  // k-blocks per warp and tile (warps past nkb skip theirs)
  if (t0 >= t1 || K <= 0) return;
  const int nj = (t1 - t0) * nc;  // the block's items
  const int m0 = blockIdx.y * PMAX;
  const int mrows = min(8, M - m0);
  if (threadIdx.x == 0) {
    mbar_init(&abar, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  const uint4 z = make_uint4(0, 0, 0, 0);
  uint4 w0[D][4], w1[D][4];  // slot s: rows g and g + 8 of an item's k-block, vector v
  // Item j's vectors into one slot. Rows past N and columns past K are not loaded (zeros; such
  // rows are never stored, and k-blocks past K never run).
  auto load = [&](int j, uint4 (&x0)[4], uint4 (&x1)[4]) {
    const int n0 = (t0 + j / nc) * 16, c = j % nc;
    const bool r0ok = n0 + g < N, r1ok = n0 + g + 8 < N;
    const bf16_t* p0 = w + (size_t)(n0 + g) * K;
    const bf16_t* p1 = p0 + (size_t)8 * K;
#pragma unroll
    for (int v = 0; v < 4; ++v) {
      const int col = (c * PNW + warp) * PKB + 8 * q + 32 * v;
      x0[v] = r0ok && col < K ? ld_stream16(p0 + col) : z;
      x1[v] = r1ok && col < K ? ld_stream16(p1 + col) : z;
    }
  };
#pragma unroll
  for (int s = 0; s < D; ++s)
    if (s < nj) load(s, w0[s], w1[s]);
  STAMP(tl, PTL_ISSUED);

  pdl_wait();  // a may be the previous kernel's output; y may still be read by it
  STAMP(tl, PTL_WAITED);
  if (threadIdx.x == 0) mbar_expect_tx(&abar, 2u * (u32)K * mrows);
  if (threadIdx.x == 1) bulk_copy(psm, a + (size_t)m0 * K, 2u * (u32)K * mrows, &abar);
  mbar_wait(&abar, 0);
  STAMP(tl, PTL_A);

  const bool a0ok = g < mrows;
  float d[4][4] = {};
#pragma unroll 1
  for (int j0 = 0; j0 < nj; j0 += D) {
#pragma unroll
    for (int s = 0; s < D; ++s) {
      const int j = j0 + s;
      if (j >= nj) break;  // block-uniform
      const int c = j % nc, kb = c * PNW + warp;
      if (kb < nkb) {
        const unsigned char* sa_ = psm + g * arow + kb * (2 * PKB) + 16 * q;
        uint4 av[4];
#pragma unroll
        for (int v = 0; v < 4; ++v)
          av[v] = kb * PKB + 8 * q + 32 * v < K && a0ok ? *(const uint4*)(sa_ + 64 * v) : z;
        proj_kblock_mma<true, false>(d, w0[s], w1[s], av, av);
      }
      if (j + D < nj) load(j + D, w0[s], w1[s]);
      if (c == nc - 1) {
        // The tile's end (RR's, W16 layout).
        const int t = t0 + j / nc;
        proj_put_partials(part, d, warp, g, q);
        __syncthreads();
        if (t == t1 - 1) STAMP(tl, PTL_STORE);
        proj_store_tile<true>(part, y, m0, mrows, t * 16, N, N);
        __syncthreads();  // part is rewritten by the next tile
#pragma unroll
        for (int v = 0; v < 4; ++v) d[v][0] = d[v][1] = d[v][2] = d[v][3] = 0.0f;
      }
    }
  }
  STAMP(tl, PTL_EXIT);
}

// The register-resident variant in tiles of 8 rows (RR8; M <= 8, K <= CR * 1024): RR with the
// operands as the ring kernel's m4/m8 have them (the tokens are the MMA's 16-row side, rows g of
// a; w row g is the MMA's 8 columns), so a lane holds 16 registers of w a k-block, not 32, and a
// block's tile is half RR's: two blocks share an SM at K <= 5120, and a call of 128 tiles (N = 1024)
// covers 128 SMs instead of RR's 64. Block b owns the tiles [b*NT/G, (b+1)*NT/G) of 8 rows; every
// warp loads its k-blocks (kb = c * PNW + warp, as every plan) of each tile into registers before
// pdl_wait() (the first tile; the next after computing the current one), the rows of a land in
// one bulk copy after the wait, and the tile end is the ring kernel's (non-W16 layout). Same
// products, MMA sequence, accumulators and warp order as every plan: the same bits.
template <typename YT, int CR>
__device__ __forceinline__ void proj_rr8_body(const bf16_t* __restrict__ a, const bf16_t* __restrict__ w,
                                              YT* __restrict__ y, int M, int N, int K, u64* tl) {
  extern __shared__ __align__(128) unsigned char psm[];  // the resident rows of a, unpadded
  __shared__ float part[PNW][PMAX][8];
  __shared__ unsigned long long abar;
  STAMP(tl, PTL_ENTRY);
  pdl_trigger();
  const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
  const int g = lane >> 2, q = lane & 3;
  const int arow = 2 * K;
  const int nt = (N + 7) / 8;
  const int t0 = (int)((long long)blockIdx.x * nt / gridDim.x);
  const int t1 = (int)((long long)(blockIdx.x + 1) * nt / gridDim.x);
  const int nkb = (K + PKB - 1) / PKB;
  if (t0 >= t1 || K <= 0) return;
  const int m0 = blockIdx.y * PMAX;
  const int mrows = min(8, M - m0);
  if (threadIdx.x == 0) {
    mbar_init(&abar, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  const uint4 z = make_uint4(0, 0, 0, 0);
  uint4 w0[CR][4];  // row g of the tile, k-block c * PNW + warp, vector v
  // Rows past N and columns past K are not loaded (zeros; such rows are never stored, and
  // k-blocks past K never run).
  auto load_tile = [&](int t) {
    const int n0 = t * 8;
    const bool rok = n0 + g < N;
    const bf16_t* p0 = w + (size_t)(n0 + g) * K;
#pragma unroll
    for (int c = 0; c < CR; ++c) {
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const int col = (c * PNW + warp) * PKB + 8 * q + 32 * v;
        w0[c][v] = rok && col < K ? ld_stream16(p0 + col) : z;
      }
    }
  };
  load_tile(t0);
  STAMP(tl, PTL_ISSUED);

  pdl_wait();  // a may be the previous kernel's output; y may still be read by it
  STAMP(tl, PTL_WAITED);
  if (threadIdx.x == 0) mbar_expect_tx(&abar, 2u * (u32)K * mrows);
  if (threadIdx.x == 1) bulk_copy(psm, a + (size_t)m0 * K, 2u * (u32)K * mrows, &abar);
  mbar_wait(&abar, 0);
  STAMP(tl, PTL_A);

  const bool a0ok = g < mrows;
#pragma unroll 1
  for (int t = t0; t < t1; ++t) {
    if (t > t0) load_tile(t);
    if (t == t1 - 1) STAMP(tl, PTL_LAST);
    float d[4][4] = {};
#pragma unroll
    for (int c = 0; c < CR; ++c) {
      const int kb = c * PNW + warp;
      if (kb >= nkb) break;
      const unsigned char* sa_ = psm + g * arow + kb * (2 * PKB) + 16 * q;
      uint4 av[4];
#pragma unroll
      for (int v = 0; v < 4; ++v)
        av[v] = kb * PKB + 8 * q + 32 * v < K && a0ok ? *(const uint4*)(sa_ + 64 * v) : z;
      proj_kblock_mma<false, false>(d, w0[c], w0[c], av, av);
    }
    // The ring kernel's tile end (tokens as the MMA's rows).
    proj_put_partials(part, d, warp, g, q);
    __syncthreads();
    if (t == t1 - 1) STAMP(tl, PTL_STORE);
    proj_store_tile<false>(part, y, m0, mrows, t * 8, N, N);
    __syncthreads();  // part is rewritten by the next tile
  }
  STAMP(tl, PTL_EXIT);
}

// (rows of a, resident a, tiles of 16 rows of w). The launch gives the stage width (kpw k-blocks per warp) and the ring
// depth (nst <= PMAXST) with the dynamic shared memory they need (engine.rs, `projection_plan`).
// `tl` is the timeline's stamp rows in MHC_TIMELINE builds (else unused; the engine passes null).
#define PROJ_KERNEL_Y(name, YT, AR, RES, W16)                                                 \
  extern "C" __global__ void __launch_bounds__(PNW * WARP, 1)                                 \
      name(const bf16_t* a, const bf16_t* w, YT* y, int M, int N, int K, int kpw, int nst,    \
           u64* tl) {                                                                         \
    proj_body<YT, AR, RES, W16>(a, w, y, M, N, K, kpw, nst, tl);                              \
  }
// Each variant twice: f32 output, and bf16 output (`name`_ybf16; the same sums, rounded once).
#define PROJ_KERNEL(name, AR, RES, W16)                                                       \
  PROJ_KERNEL_Y(name, float, AR, RES, W16)                                                    \
  PROJ_KERNEL_Y(name##_ybf16, bf16_t, AR, RES, W16)
PROJ_KERNEL(mhc_projection_m4, 4, true, false)
PROJ_KERNEL(mhc_projection_m8, 8, true, false)
PROJ_KERNEL(mhc_projection_m16, 16, false, false)
PROJ_KERNEL(mhc_projection_w16_m4, 4, true, true)
PROJ_KERNEL(mhc_projection_w16_m8, 8, true, true)

// The register-resident variants: CR k-blocks per warp in registers and CS in shared memory
// (K <= (CR + CS) * 1024), with TWO (rr2) a block's second tile wholly in shared memory, with BAL
// (rrb) the rows dealt evenly over the blocks (at most 20 a block), with JE a block's two tiles
// ending behind one barrier (only where the table runs two tiles a block: the option changes the
// kernel's machine code, attempt 139); same parameters as the ring kernels (kpw and nst unused).
#define PROJ_RR_KERNEL_Y(name, YT, CR, CS, TWO, BAL, ONE, MC, XF, JE)                         \
  extern "C" __global__ void __launch_bounds__(PNW * WARP, 1)                                 \
      name(const bf16_t* a, const bf16_t* w, YT* y, int M, int N, int K, int kpw, int nst,    \
           u64* tl) {                                                                         \
    proj_rr_body<YT, CR, CS, TWO, BAL, ONE, MC, XF, 0, JE>(a, w, y, M, N, K, tl);             \
  }
#define PROJ_RR_KERNEL(name, CR, CS, TWO, BAL, ONE, MC, XF, JE)                               \
  PROJ_RR_KERNEL_Y(name, float, CR, CS, TWO, BAL, ONE, MC, XF, JE)                            \
  PROJ_RR_KERNEL_Y(name##_ybf16, bf16_t, CR, CS, TWO, BAL, ONE, MC, XF, JE)
PROJ_RR_KERNEL(mhc_projection_rr_c4, 4, 0, false, false, false, 1, false, false)
PROJ_RR_KERNEL(mhc_projection_rr1_c4, 4, 0, false, false, true, 1, false, false)
PROJ_RR_KERNEL(mhc_projection_rr_c5, 5, 0, false, false, false, 1, false, false)
PROJ_RR_KERNEL(mhc_projection_rr_c7, 5, 2, false, false, false, 1, false, false)
PROJ_RR_KERNEL(mhc_projection_rr2_c4, 4, 0, true, false, false, 1, false, false)
PROJ_RR_KERNEL(mhc_projection_rr2_c5, 5, 0, true, false, false, 1, false, false)
PROJ_RR_KERNEL(mhc_projection_rrb_c4, 4, 0, false, true, false, 1, false, true)
PROJ_RR_KERNEL(mhc_projection_rrb_c5, 5, 0, false, true, false, 1, false, false)
PROJ_RR_KERNEL(mhc_projection_rrb_c7, 5, 2, false, true, false, 1, false, false)
PROJ_RR_KERNEL(mhc_projection_rrb_c5_mc2, 5, 0, false, true, false, 2, false, false)
PROJ_RR_KERNEL(mhc_projection_rrb_c7_xf, 5, 2, false, true, false, 1, true, false)
// The last warp waits and copies a first (AW = 1: then loads its own share of w; AW = 2: the
// other warps copy its share into shared memory).
// MC = 2: a multicast over clusters of two as in rrb_c5_mc2, its copy issued by the last warp.
#define PROJ_RR_KERNEL_AW_Y(name, YT, CR, CS, BAL, XF, AW, MC, JE)                            \
  extern "C" __global__ void __launch_bounds__(PNW * WARP, 1)                                 \
      name(const bf16_t* a, const bf16_t* w, YT* y, int M, int N, int K, int kpw, int nst,    \
           u64* tl) {                                                                         \
    proj_rr_body<YT, CR, CS, false, BAL, false, MC, XF, AW, JE>(a, w, y, M, N, K, tl);        \
  }
#define PROJ_RR_KERNEL_AW(name, CR, CS, BAL, XF, AW, MC, JE)                                  \
  PROJ_RR_KERNEL_AW_Y(name, float, CR, CS, BAL, XF, AW, MC, JE)                               \
  PROJ_RR_KERNEL_AW_Y(name##_ybf16, bf16_t, CR, CS, BAL, XF, AW, MC, JE)
PROJ_RR_KERNEL_AW(mhc_projection_rrb_c4_aw, 4, 0, true, false, 1, 1, true)
PROJ_RR_KERNEL_AW(mhc_projection_rrb_c5_aw, 5, 0, true, false, 1, 1, true)
PROJ_RR_KERNEL_AW(mhc_projection_rrb_c7_xf_aw, 5, 2, true, true, 1, 1, false)
PROJ_RR_KERNEL_AW(mhc_projection_rrb_c4_as, 4, 0, true, false, 2, 1, false)
PROJ_RR_KERNEL_AW(mhc_projection_rrb_c5_as, 5, 0, true, false, 2, 1, false)
PROJ_RR_KERNEL_AW(mhc_projection_rrb_c4_as_mc2, 4, 0, true, false, 2, 2, false)
PROJ_RR_KERNEL_AW(mhc_projection_rrb_c5_as_mc2, 5, 0, true, false, 2, 2, false)

// The streaming variant: D = 2 k-blocks a warp in flight, two blocks an SM (122 registers; D = 3
// spilled at the 128 that two blocks allow).
#define PROJ_RS_KERNEL_Y(name, YT, D)                                                         \
  extern "C" __global__ void __launch_bounds__(PNW * WARP, 2)                                 \
      name(const bf16_t* a, const bf16_t* w, YT* y, int M, int N, int K, int kpw, int nst,    \
           u64* tl) {                                                                         \
    proj_rs_body<YT, D>(a, w, y, M, N, K, tl);                                                \
  }
#define PROJ_RS_KERNEL(name, D)                                                               \
  PROJ_RS_KERNEL_Y(name, float, D)                                                            \
  PROJ_RS_KERNEL_Y(name##_ybf16, bf16_t, D)
PROJ_RS_KERNEL(mhc_projection_rs2, 2)

// The register-resident variant in tiles of 8 rows: CR k-blocks a warp (K <= CR * 1024), MINB
// blocks an SM (two where the registers allow).
#define PROJ_RR8_KERNEL_Y(name, YT, CR, MINB)                                                 \
  extern "C" __global__ void __launch_bounds__(PNW * WARP, MINB)                              \
      name(const bf16_t* a, const bf16_t* w, YT* y, int M, int N, int K, int kpw, int nst,    \
           u64* tl) {                                                                         \
    proj_rr8_body<YT, CR>(a, w, y, M, N, K, tl);                                              \
  }
#define PROJ_RR8_KERNEL(name, CR, MINB)                                                       \
  PROJ_RR8_KERNEL_Y(name, float, CR, MINB)                                                    \
  PROJ_RR8_KERNEL_Y(name##_ybf16, bf16_t, CR, MINB)
PROJ_RR8_KERNEL(mhc_projection_rr8_c4, 4, 2)
PROJ_RR8_KERNEL(mhc_projection_rr8_c5, 5, 2)
PROJ_RR8_KERNEL(mhc_projection_rr8_c7, 7, 1)
