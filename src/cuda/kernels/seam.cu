// The fused seam family: seam (V4.1), seam_v4, pre, pre_delayed, entry, head and final, in one
// launch per call up to T = 256 and two above.
//
// Work split. H is cut into chunks of 32 channels; a warp owns one chunk of one tile of up to 16
// tokens and does everything elementwise there (post_map, the carried collapse, the MXFP8 block
// of its quad) plus that chunk's share of the projection on tensor cores. A block holds W warps
// (W consecutive chunks, a "group"); blockIdx.x is the group, blockIdx.y walks the token tiles
// (persistently when gridDim.y < tiles). Every block stages its group's slice of fn in shared
// memory once, with asynchronous copies issued at kernel start. Each block writes per-token
// partial records; the last block to finish a tile (an
// atomic counter per tile, reset by that block) reduces them and runs the per-token tail: the
// RMS factors, sigmoids, Sinkhorn, and the RMSNorm pass over the layer input.
//
// At large T the tile work and the tails run as two launches of the same kernel (mode 1, then
// mode 2 with one block per tile): a block that finishes a tile falls behind and would become the
// last, and so the finisher, of every following tile, serializing all tails on a few blocks.
//
// Determinism and batch invariance. A chunk's partial dot products are computed from zero by a
// fixed sequence of MMAs, and chunk partials are combined by a pairwise tree over the chunk index
// padded with zeros to a power of two. The levels below W are summed inside the block, the rest
// by the tile's last block; every split gives the same tree, hence the same bits, whatever T, W,
// the tile size or the token's row. Sums of squares are accumulated in f64, where squares of
// bf16 values add exactly, so their order does not matter (and they match the CPU reference).
//
// Programmatic dependent launch. The engine launches these kernels so that they may start while
// the previous kernel of the stream runs: a block stages its fn slice and the gates' weights,
// then waits (pdl_wait) before touching any activation, the workspace or the counters; it lets
// the next kernel start placing its blocks (pdl_trigger) once its last tile's records are
// written, so the next seam's launch and fn fetch overlap this seam's tail.
//
// Accuracy. The projection multiplies bf16 streams by fn split into three bf16 pieces
// (split3), so products and sums are f32-exact up to f32 accumulation: no TF32 anywhere.

#define NS 4        // streams served by the fused path
#define CHUNK 32    // channels per warp
#define MAXTT 16    // tokens per tile (the MMA's M)
#define COEF 24     // per-token carried coefficients staged in shared memory: post 4, comb 16, pre 4

struct FusedParams {
  const bf16_t* x;
  const bf16_t* residual;
  const float* post;
  const float* comb;
  const float* pre_in;
  const float* fn;        // [mixes][NIN*H] (entry: the folded weight [mixes][H])
  const float* scale;
  const float* base;
  const float* norm_w;    // null: no RMSNorm
  bf16_t* residual_out;
  bf16_t* layer_input;    // or `out` for head/final
  float* post_out;
  float* comb_out;
  float* pre_out;
  unsigned char* fp8_q;   // null: no MXFP8 output
  unsigned char* fp8_s;
  float* rec_m;           // [T][nrec][NMIX]
  double* rec_ss;         // [T][nrec][2]: gate and norm sums of squares
  u32* counters;          // [tiles], zero between launches
  int T, H, tt, tiles, W, nrec, rpad, rows_batch, iters;
  int mode;               // 0: last block of a tile finishes it; 1: tiles only; 2: finish only
  float hc_eps, rms_eps, norm_eps, post_mult;
  u64* timeline;          // [blocks][TL_SLOTS][2] stamps (MHC_TIMELINE builds only; else unused)
};

// Dynamic shared memory (sized in plan.rs): [fn slice, when the op has mixes][scratch], where scratch holds
// in turn the tile's staged coefficients, the warps' partials, and the tail's tree buffers.

template <int NIN, int NMIX>
struct Shape {
  static constexpr int NT = NMIX > 0 ? (NMIX + 7) / 8 : 1;  // n-tiles of 8 mixes
  static constexpr int NMIXP = NT * 8;                       // padded mixes (B columns)
  static constexpr int NM = NMIX > 0 ? NMIX : 1;             // record stride (never 0)
};

// Writes 8 layer-input values (bf16, and MXFP8 when asked). All lanes of the warp call it.
__device__ __forceinline__ void emit_li(const FusedParams& p, int tok, int h, const float v[8],
                                        bool valid, bool leader) {
  if (valid) *(uint4*)(p.layer_input + (size_t)tok * p.H + h) = pack8(v);
  if (p.fp8_q) {
    mx_quantize8(v, valid, p.fp8_q + (size_t)tok * p.H + h,
                 p.fp8_s + (size_t)tok * (p.H / 32) + h / 32, leader);
  }
}

// 8 consecutive fn values of row mrow, stream j, for lane quarter q of the warp's chunk, from the
// block's staged slice: [mrow][j][W*8 float4], float4 columns swizzled by (mrow & 1) against bank
// conflicts. Rows past NMIX and chunks past H were staged as zeros.
template <int NIN, int NMIX>
__device__ __forceinline__ void load_fn8(const FusedParams& p, const float* sfn, int j, int mrow,
                                         int warp, int q, bool chunk_ok, float f[8]) {
  // The branch (warps past W and chunks past H multiply zeros) also keeps the compiler from
  // hoisting every stream's reads to the top of the projection, beyond the register budget.
  if (chunk_ok) {
    const int row4 = p.W * 8;
    const float4* s = (const float4*)sfn + ((size_t)(mrow * NIN + j) * row4);
    const float4 a = s[(warp * 8 + 2 * q) ^ (mrow & 1)], b = s[(warp * 8 + 2 * q + 1) ^ (mrow & 1)];
    f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
    f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) f[e] = 0.0f;
  }
}

// Sums v over each row's tpr consecutive threads (a power of two); the row's first thread gets
// the total. Shuffles inside a warp, then shared memory across the row's warps (f64 sums of bf16
// squares are exact, so the order is free). All threads of the block call it.
__device__ __forceinline__ void row_sum(double& v, int tpr, float* scratch) {
  const int wl = min(tpr, WARP);
  for (int o = wl / 2; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
  if (tpr > WARP) {
    double* red = (double*)scratch;
    const int warp = threadIdx.x / WARP;
    __syncthreads();  // earlier readers of scratch are done
    if (threadIdx.x % WARP == 0) red[warp] = v;
    __syncthreads();
    if (threadIdx.x % tpr == 0) {
      const int per = tpr / WARP;
      double t = 0.0;
      for (int k = 0; k < per; ++k) t += red[warp + k];
      v = t;
    }
  }
}

// The per-tile tail, run by the last block of the tile.
template <int PM, int NIN, int NMIX, int CARRIED>
__device__ void finish_tile(const FusedParams& p, int tile, float* scratch, const float* gw) {
  const int tid = threadIdx.x, nthr = blockDim.x;
  const int row0 = tile * p.tt;
  const int rows = min(p.tt, p.T - row0);
  const bool has_norm = p.norm_w != nullptr;
  constexpr int NM = Shape<NIN, NMIX>::NM;
  // Per-row state in shared memory.
  __shared__ float s_m[MAXTT][NM];
  __shared__ float s_p[MAXTT][NS];
  __shared__ float s_rinv[MAXTT];
  __shared__ double s_ss[MAXTT][2];

  // 1) Upper levels of the chunk tree and the sums of squares, all loads in one pass. Up to 128
  // records (every default plan at H <= 8192): one thread per (row, mix, group of 32 records)
  // loads its records at once and sums them in registers, pairing exactly as the shared-memory
  // tree below does, and the groups' sums are paired the same way after a barrier; one thread
  // per (row, gate or norm) sums that row's f64 sums of squares (exact, so in any order). More
  // records: the tree in shared memory, rows_batch rows at a time.
  const bool reg_tree = NMIX > 0 && p.rpad <= 128;
  {
    const int ngrp = reg_tree ? (p.rpad + 31) / 32 : 0;  // 1, 2 or 4
    const int nm_items = rows * NM * ngrp;
    float* gsum = scratch;  // [rows][NM][ngrp]
    for (int i = tid; i < nm_items + rows * 2; i += nthr) {
      if (i < nm_items) {
        const int r = i / (NM * ngrp), rem = i % (NM * ngrp), mix = rem / ngrp, grp = rem % ngrp;
        const int k0 = grp * 32;
        const float* rec = p.rec_m + ((size_t)(row0 + r) * p.nrec + k0) * NM + mix;
        float v[32];
#pragma unroll
        for (int k = 0; k < 32; ++k) v[k] = k0 + k < p.nrec ? ld_cg_f32(rec + (size_t)k * NM) : 0.0f;
#pragma unroll
        for (int s = 1; s < 32; s <<= 1) {
#pragma unroll
          for (int k = 0; k < 32; k += 2 * s) v[k] += v[k + s];
        }
        gsum[i] = v[0];
      } else {
        const int r = (i - nm_items) / 2, which = (i - nm_items) % 2;
        const double* rec = p.rec_ss + (size_t)(row0 + r) * p.nrec * 2 + which;
        double acc = 0.0;
        if (p.nrec <= 32) {
          // Every load issued before the first add (one round trip).
          double v[32];
#pragma unroll
          for (int k = 0; k < 32; ++k) v[k] = k < p.nrec ? ld_cg_f64(rec + (size_t)k * 2) : 0.0;
#pragma unroll
          for (int k = 0; k < 32; ++k) acc += v[k];
        } else {
          for (int k = 0; k < p.nrec; ++k) acc += ld_cg_f64(rec + (size_t)k * 2);
        }
        s_ss[r][which] = acc;
      }
    }
    __syncthreads();
    STAMP(p.timeline, 9);
    if (reg_tree) {
      for (int i = tid; i < rows * NM; i += nthr) {
        const float* g = gsum + i * ngrp;
        float v = g[0];
        if (ngrp == 2) v = g[0] + g[1];
        if (ngrp == 4) v = (g[0] + g[1]) + (g[2] + g[3]);
        s_m[i / NM][i % NM] = v;
      }
      __syncthreads();
    }
  }
  if (NMIX > 0 && !reg_tree) {
    for (int rb = 0; rb < rows; rb += p.rows_batch) {
      const int nb = min(p.rows_batch, rows - rb);
      const int seg = p.rpad;
#pragma unroll 8
      for (int i = tid; i < nb * NM * seg; i += nthr) {
        const int r = i / (NM * seg), rem = i % (NM * seg), mix = rem / seg, k = rem % seg;
        float v = 0.0f;
        if (k < p.nrec) v = ld_cg_f32(p.rec_m + ((size_t)(row0 + rb + r) * p.nrec + k) * NM + mix);
        scratch[(r * NM + mix) * seg + k] = v;
      }
      __syncthreads();
      for (int s = 1; s < seg; s <<= 1) {
        const int pairs = seg / (2 * s);
        for (int i = tid; i < nb * NM * pairs; i += nthr) {
          const int sg = i / pairs, k = (i % pairs) * 2 * s;
          scratch[sg * seg + k] += scratch[sg * seg + k + s];
        }
        __syncthreads();
      }
      for (int i = tid; i < nb * NM; i += nthr) s_m[rb + i / NM][i % NM] = scratch[i * seg];
      __syncthreads();
    }
  }
  // Threads split evenly over the tile's rows (tpr per row, a multiple of 4, so an MXFP8 block
  // of 4 vectors stays in one quad of one warp). Used for the passes below.
  int rows_pad = 1;
  while (rows_pad < rows) rows_pad <<= 1;
  const int tpr = nthr / rows_pad;
  const int r = tid / tpr, lr = tid % tpr;
  const int tok = row0 + r;
  const bool row_ok = r < rows;
  STAMP(p.timeline, 10);

  // 2) Gates, one thread per token. The carried ops' layer input does not wait for them: there
  // the block's last warp computes them while the other warps start the RMSNorm pass.
  auto gates_row = [&](int i) {
    const int tok = row0 + i;
    if (NMIX == 24) {
      const float rinv = rms_factor(s_ss[i][0], NIN * p.H, p.rms_eps);
      float m[24], pre[4], post[4], comb[16];
#pragma unroll
      for (int c = 0; c < 24; ++c) m[c] = rinv * s_m[i][c];
      if (i == 0) STAMP_BY(p.timeline, 15);
#ifdef MHC_TIMELINE
      gates4(m, gw, gw + 3, p.hc_eps, p.post_mult, p.iters, pre, post, comb, i == 0 ? p.timeline : nullptr);
#else
      gates4(m, gw, gw + 3, p.hc_eps, p.post_mult, p.iters, pre, post, comb);
#endif
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        p.pre_out[tok * 4 + j] = pre[j];
        p.post_out[tok * 4 + j] = post[j];
        s_p[i][j] = pre[j];
      }
#pragma unroll
      for (int a = 0; a < 16; ++a) p.comb_out[tok * 16 + a] = comb[a];
    } else if (NMIX == 4) {
      const float rinv = rms_factor(s_ss[i][0], NIN * p.H, p.rms_eps);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float pj = sigmoidf_(rinv * s_m[i][j] * gw[0] + gw[3 + j]) + p.hc_eps;
        p.pre_out[tok * 4 + j] = pj;
        s_p[i][j] = pj;
      }
    }
  };
  if (CARRIED) {
    if (has_norm) {
      if (tid < rows) s_rinv[tid] = rms_factor(s_ss[tid][1], p.H, p.norm_eps);
      __syncthreads();
    }
    const int gi = tid - (nthr - WARP);  // rows <= MAXTT <= WARP
    if (gi >= 0 && gi < rows) gates_row(gi);
    if (gi == 0) STAMP_BY(p.timeline, 11);
  } else {
    if (tid < rows) gates_row(tid);
    __syncthreads();
    STAMP(p.timeline, 11);
  }

  // 3) Layer-input passes.
  const int H8 = p.H / 8;
  const int iters = (H8 + tpr - 1) / tpr;

  // Both passes load in explicit batches: their loads (layer_input, residual_out) may alias
  // their stores for all the compiler knows, so a plain loop pays one memory round trip per
  // iteration; a batch's loads are all issued before its first store.
  if (!CARRIED) {
    constexpr int NB = 2;  // 4 streams x 16 bytes per iteration
    double ss = 0.0;
    for (int it0 = 0; it0 < iters; it0 += NB) {
      uint4 sv[NB][NS];
#pragma unroll
      for (int b = 0; b < NB; ++b) {
        const int v = lr + (it0 + b) * tpr;
        const bool ok = row_ok && it0 + b < iters && v < H8;
#pragma unroll
        for (int j = 0; j < NS; ++j) {
          const bf16_t* ptr = (PM ? p.residual_out : p.residual) + ((size_t)tok * NS + j) * p.H + 8 * v;
          sv[b][j] = ok ? (PM ? ld_cg4(ptr) : __ldg((const uint4*)ptr)) : make_uint4(0, 0, 0, 0);
        }
      }
#pragma unroll
      for (int b = 0; b < NB; ++b) {
        const int v = lr + (it0 + b) * tpr;
        const bool ok = row_ok && it0 + b < iters && v < H8;
        float c[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) c[e] = 0.0f;
        if (ok) {
          float sf[NS][8];
#pragma unroll
          for (int j = 0; j < NS; ++j) unpack8(sv[b][j], sf[j]);
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            float acc = __fmul_rn(s_p[r][0], sf[0][e]);
#pragma unroll
            for (int j = 1; j < NS; ++j) acc = __fadd_rn(acc, __fmul_rn(s_p[r][j], sf[j][e]));
            c[e] = acc;
          }
        }
        if (has_norm) {
          if (ok) {
            const uint4 cb = pack8(c);
            *(uint4*)(p.layer_input + (size_t)tok * p.H + 8 * v) = cb;
            float cr[8];
            unpack8(cb, cr);
#pragma unroll
            for (int e = 0; e < 8; ++e) ss += (double)(cr[e] * cr[e]);
          }
        } else {
          emit_li(p, tok, 8 * v, c, ok, (v & 3) == 0);
        }
      }
    }
    if (has_norm) {
      row_sum(ss, tpr, scratch);
      if (lr == 0 && row_ok) s_rinv[r] = rms_factor(ss, p.H, p.norm_eps);
      __syncthreads();
    }
  }
  if (has_norm) {
    // For the carried ops with gates, the gate warp (the block's last) stays out of this pass
    // when the other warps still split evenly into quads per row (at least 4 threads a row):
    // its share would otherwise start only after the gates, on the critical path.
    const bool gate_warp_out = CARRIED && NMIX > 0 && nthr - WARP >= 4 * rows_pad &&
                               ((nthr - WARP) / rows_pad) % 4 == 0;
    const int nthr_n = gate_warp_out ? nthr - WARP : nthr;
    const int tpr_n = nthr_n / rows_pad;
    const int rn = tid / tpr_n, lrn = tid % tpr_n;
    const int tokn = row0 + rn;
    const bool rok = tid < nthr_n && rn < rows;
    const int iters_n = tid < nthr_n ? (H8 + tpr_n - 1) / tpr_n : 0;
    const float rinv = rok ? s_rinv[rn] : 0.0f;
    // A batch's loads of the layer input and of norm_w are all issued before its arithmetic
    // (ncu on the tails launch: the pass waited on memory, about a round trip per element).
    constexpr int NB = 4;
    for (int it0 = 0; it0 < iters_n; it0 += NB) {
      uint4 cv[NB];
      float4 wv[NB][2];
#pragma unroll
      for (int b = 0; b < NB; ++b) {
        const int v = lrn + (it0 + b) * tpr_n;
        const bool ok = rok && it0 + b < iters_n && v < H8;
        const size_t off = (size_t)tokn * p.H + 8 * v;
        // The entry seam's layer input before the norm is x itself.
        cv[b] = ok ? (NIN == 1 ? __ldg((const uint4*)(p.x + off)) : ld_cg4(p.layer_input + off))
                   : make_uint4(0, 0, 0, 0);
        const float4* wp = (const float4*)(p.norm_w + 8 * (ok ? v : 0));
        wv[b][0] = __ldg(wp);
        wv[b][1] = __ldg(wp + 1);
      }
#pragma unroll
      for (int b = 0; b < NB; ++b) {
        const int v = lrn + (it0 + b) * tpr_n;
        const bool ok = rok && it0 + b < iters_n && v < H8;
        float val[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) val[e] = 0.0f;
        if (ok) {
          float c[8];
          unpack8(cv[b], c);
          const float w[8] = {wv[b][0].x, wv[b][0].y, wv[b][0].z, wv[b][0].w,
                              wv[b][1].x, wv[b][1].y, wv[b][1].z, wv[b][1].w};
#pragma unroll
          for (int e = 0; e < 8; ++e) val[e] = __fmul_rn(__fmul_rn(c[e], rinv), w[e]);
        }
        emit_li(p, tokn, 8 * v, val, ok, (v & 3) == 0);
      }
    }
  }
  STAMP(p.timeline, 12);
}

template <int PM, int NIN, int NMIX, int CARRIED>
__device__ void seam_kernel_body(const FusedParams& p) {
  typedef Shape<NIN, NMIX> S;
  extern __shared__ __align__(16) unsigned char smem[];
  const int tid = threadIdx.x;
  const int warp = tid / WARP, lane = tid % WARP;
  const int g = lane >> 2, q = lane & 3;
  const int grp = blockIdx.x;
  const int chunk = grp * p.W + warp;
  const bool has_norm = p.norm_w != nullptr;
  // The tail is needed unless the op is a plain carried collapse without norm.
  const bool need_finish = NMIX > 0 || has_norm || !CARRIED;

  const size_t fn_bytes = NMIX > 0 ? (size_t)NIN * S::NMIXP * p.W * CHUNK * 4 : 0;
  float* sfn = (float*)smem;
  float* scratch = (float*)(smem + fn_bytes);
  float* scoef = scratch;  // dead once the elementwise phase is over (a barrier separates them)
  __shared__ int s_last;
  // The gates' weights (scale, then base), staged before waiting for the previous kernel: the
  // tail reads them from shared memory instead of paying a global round trip on its serial path.
  // Barriers inside the tile loop (or the tails loop) separate these writes from the reads.
  __shared__ float s_gw[3 + (NMIX > 0 ? NMIX : 1)];
  STAMP(p.timeline, 0);
  if (NMIX > 0) {
    constexpr int NSC = NMIX == 24 ? 3 : 1;
    if (tid < NSC) s_gw[tid] = p.scale[tid];
    else if (tid >= 3 && tid < 3 + NMIX) s_gw[tid] = p.base[tid - 3];
  }

  if (p.mode == 2) {
    // Finish only: one tile per block (the tiles were written by the preceding launch). The
    // next kernel may start placing its blocks now; they wait for this grid to complete.
    pdl_trigger();
    pdl_wait();
    STAMP(p.timeline, 2);
    for (int tile = blockIdx.x; tile < p.tiles; tile += gridDim.x) {
      __syncthreads();
      finish_tile<PM, NIN, NMIX, CARRIED>(p, tile, (float*)smem, s_gw);
    }
    STAMP(p.timeline, 13);
    return;
  }

  // Stage the group's slice of fn with asynchronous copies, all in flight at once; they land
  // while the first tile's elementwise phase runs (waited for before its projection).
  if (NMIX > 0) {
    // One fixed float4 column per thread (row4 and the block size are powers of two, the block
    // at least 4 rows wide), rows stepping by the block. Staged row r = mrow * NIN + j is fn row
    // mrow, stream j: fn + r * H in global memory, so the addresses are linear in r.
    const int row4 = p.W * 8;
    const int c4 = tid % row4, rstep = blockDim.x / row4;
    const int h = grp * p.W * CHUNK + c4 * 4;
    const bool hok = h < p.H;
    for (int r = tid / row4; r < NIN * S::NMIXP; r += rstep) {
      const bool ok = hok && r < NIN * NMIX;
      const int swz = (r / NIN) & 1;
      cp_async16((float4*)sfn + (size_t)r * row4 + (c4 ^ swz), ok ? p.fn + (size_t)r * p.H + h : p.fn, ok ? 16 : 0);
    }
  }
  STAMP(p.timeline, 1);
  // fn is a weight: it was read above, possibly while the previous kernel of the stream still
  // runs (programmatic dependent launch). Everything below reads or writes activations.
  pdl_wait();
  STAMP(p.timeline, 2);

  for (int tile = blockIdx.y; tile < p.tiles; tile += gridDim.y) {
    __syncthreads();  // the previous tile's readers of scoef/scratch are done; sfn is staged
    const int row0 = tile * p.tt;
    for (int i = tid; i < p.tt * COEF; i += blockDim.x) {
      const int r = i / COEF, c = i % COEF, tok = row0 + r;
      float v = 0.0f;
      if (tok < p.T) {
        if (PM && c < 4) v = p.post[tok * 4 + c];
        else if (PM && c < 20) v = p.comb[tok * 16 + (c - 4)];
        else if (CARRIED && NIN == NS && c >= 20) v = p.pre_in[tok * 4 + (c - 20)];
      }
      scoef[i] = v;
    }
    __syncthreads();
    STAMP(p.timeline, 3);

    const bool chunk_ok = warp < p.W && chunk * CHUNK < p.H;
    const int h = chunk * CHUNK + 8 * q;
    int tok[2];
    bool ok[2];
    tok[0] = row0 + g;
    tok[1] = row0 + g + 8;
    ok[0] = chunk_ok && g < p.tt && tok[0] < p.T;
    ok[1] = chunk_ok && g + 8 < p.tt && tok[1] < p.T;

    // Phase 1, per row: load, post_map (write r'), keep the streams the projection reads as bf16
    // vectors: r' (post_map), r, or x (entry). Phases are separate loops so that few values are
    // live at once (the kernel must fit 128 registers to run two blocks per multiprocessor).
    uint4 av[2][NIN];
    {
      // Every load of both rows first (one memory round trip), then the arithmetic.
      const uint4 z = make_uint4(0, 0, 0, 0);
      uint4 xv[2], rv[2][NIN];
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const size_t tk = ok[rr] ? (size_t)tok[rr] : 0;
        xv[rr] = (ok[rr] && (PM || NIN == 1)) ? __ldg((const uint4*)(p.x + tk * p.H + h)) : z;
#pragma unroll
        for (int i = 0; i < NIN; ++i)
          rv[rr][i] = (ok[rr] && NIN == NS) ? __ldg((const uint4*)(p.residual + (tk * NS + i) * p.H + h)) : z;
      }
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const size_t tk = ok[rr] ? (size_t)tok[rr] : 0;
        if (PM) {
          const float* cf = scoef + (g + 8 * rr) * COEF;
          float xf[8];
          unpack8(xv[rr], xf);
#pragma unroll
          for (int j = 0; j < NS; ++j) {
            float o[8];
#pragma unroll
            for (int e = 0; e < 8; ++e) o[e] = __fmul_rn(cf[j], xf[e]);
#pragma unroll
            for (int i = 0; i < NS; ++i) {
              float rf[8];
              unpack8(rv[rr][i], rf);
              const float c = cf[4 + i * 4 + j];
#pragma unroll
              for (int e = 0; e < 8; ++e) o[e] = __fadd_rn(o[e], __fmul_rn(c, rf[e]));
            }
            av[rr][j] = pack8(o);
            if (ok[rr]) *(uint4*)(p.residual_out + (tk * NS + j) * p.H + h) = av[rr][j];
          }
        } else if (NIN == 1) {
          av[rr][0] = xv[rr];
          if (ok[rr]) {
#pragma unroll
            for (int j = 0; j < NS; ++j) *(uint4*)(p.residual_out + (tk * NS + j) * p.H + h) = xv[rr];
          }
        } else {
#pragma unroll
          for (int j = 0; j < NIN; ++j) av[rr][j] = rv[rr][j];
        }
      }
    }

    // Phase 2, per row: the carried collapse. The layer input does not wait for this seam's
    // gates; with a norm, the bf16 collapse is parked in layer_input until the tail scales it.
    double ssn[2] = {0.0, 0.0};
    if (CARRIED) {
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        float c[8];
        if (NIN == NS) {
          const float* cf = scoef + (g + 8 * rr) * COEF + 20;
          float s0[8];
          unpack8(av[rr][0], s0);
#pragma unroll
          for (int e = 0; e < 8; ++e) c[e] = __fmul_rn(cf[0], s0[e]);
#pragma unroll
          for (int j = 1; j < NS; ++j) {
            float sj[8];
            unpack8(av[rr][j], sj);
#pragma unroll
            for (int e = 0; e < 8; ++e) c[e] = __fadd_rn(c[e], __fmul_rn(cf[j], sj[e]));
          }
        } else {
          unpack8(av[rr][0], c);  // entry: one-hot carried pre-mix, the layer input is x
        }
        if (has_norm) {
          const uint4 cb = pack8(c);
          if (ok[rr] && NIN == NS) *(uint4*)(p.layer_input + (size_t)tok[rr] * p.H + h) = cb;
          float cr[8];
          unpack8(cb, cr);
#pragma unroll
          for (int e = 0; e < 8; ++e) ssn[rr] += (double)(cr[e] * cr[e]);
        } else {
          emit_li(p, tok[rr], h, c, ok[rr], q == 0);
        }
      }
    }

    STAMP(p.timeline, 4);
    if (!need_finish) continue;

    // This chunk's projection on tensor cores, from zero, in the canonical order.
    float d[S::NT][4];
#pragma unroll
    for (int nt = 0; nt < S::NT; ++nt) d[nt][0] = d[nt][1] = d[nt][2] = d[nt][3] = 0.0f;
    if (NMIX > 0) {
      // fn has landed (a no-op after the first tile).
      cp_async_wait_all();
      __syncthreads();
      STAMP(p.timeline, 5);
#pragma unroll
      for (int j = 0; j < NIN; ++j) {
#pragma unroll
        for (int nt = 0; nt < S::NT; ++nt) {
          float f[8];
          load_fn8<NIN, NMIX>(p, sfn, j, nt * 8 + g, warp, q, chunk_ok, f);
#pragma unroll
          for (int u = 0; u < 2; ++u) {
            float h0, m0, l0, h1, m1, l1, h2, m2, l2, h3, m3, l3;
            split3(f[4 * u + 0], h0, m0, l0);
            split3(f[4 * u + 1], h1, m1, l1);
            split3(f[4 * u + 2], h2, m2, l2);
            split3(f[4 * u + 3], h3, m3, l3);
            const u32 a[4] = {word(av[0][j], 2 * u), word(av[1][j], 2 * u), word(av[0][j], 2 * u + 1),
                              word(av[1][j], 2 * u + 1)};
            const u32 bh[2] = {pack_exact_bf16x2(h0, h1), pack_exact_bf16x2(h2, h3)};
            const u32 bm[2] = {pack_exact_bf16x2(m0, m1), pack_exact_bf16x2(m2, m3)};
            const u32 bl[2] = {pack_exact_bf16x2(l0, l1), pack_exact_bf16x2(l2, l3)};
            mma_bf16(d[nt], a, bh);
            mma_bf16(d[nt], a, bm);
            mma_bf16(d[nt], a, bl);
          }
        }
      }
    }
    STAMP(p.timeline, 14);
    // Sums of squares for the gates' RMS factor, then quad sums (exact in f64, so any order).
    double ssg[2] = {0.0, 0.0};
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      if (NMIX > 0) {
#pragma unroll
        for (int j = 0; j < NIN; ++j) {
          float f[8];
          unpack8(av[rr][j], f);
#pragma unroll
          for (int e = 0; e < 8; ++e) ssg[rr] += (double)(f[e] * f[e]);
        }
      }
      ssg[rr] += __shfl_xor_sync(FULL_MASK, ssg[rr], 1);
      ssg[rr] += __shfl_xor_sync(FULL_MASK, ssg[rr], 2);
      ssn[rr] += __shfl_xor_sync(FULL_MASK, ssn[rr], 1);
      ssn[rr] += __shfl_xor_sync(FULL_MASK, ssn[rr], 2);
    }
    STAMP(p.timeline, 6);
    // Partials to shared memory: part[warp][row][mix] then ss[warp][row][2]. They overwrite the
    // staged coefficients, so every warp must be past its elementwise phase.
    __syncthreads();
    const int nw = blockDim.x / WARP;
    float* part = scratch;
    double* sss = (double*)(scratch + nw * MAXTT * S::NM);
    if (warp < p.W) {
      // The lane's quad position, re-read rather than kept live through the projection.
      const int q = lane_id() & 3;
      if (NMIX > 0) {
#pragma unroll
        for (int nt = 0; nt < S::NT; ++nt) {
          const int c0 = nt * 8 + 2 * q;
          if (c0 < NMIX) {
            part[(warp * MAXTT + g) * S::NM + c0] = d[nt][0];
            part[(warp * MAXTT + g) * S::NM + c0 + 1] = d[nt][1];
            part[(warp * MAXTT + g + 8) * S::NM + c0] = d[nt][2];
            part[(warp * MAXTT + g + 8) * S::NM + c0 + 1] = d[nt][3];
          }
        }
      }
      if (q == 0) {
        sss[(warp * MAXTT + g) * 2] = ssg[0];
        sss[(warp * MAXTT + g) * 2 + 1] = ssn[0];
        sss[(warp * MAXTT + g + 8) * 2] = ssg[1];
        sss[(warp * MAXTT + g + 8) * 2 + 1] = ssn[1];
      }
    }
    __syncthreads();
    // Tree over the block's W chunks (levels below W), then one record per token.
    const int rows = min(p.tt, p.T - row0);
    if (NMIX > 0) {
      for (int i = tid; i < rows * S::NM; i += blockDim.x) {
        const int r = i / S::NM, mix = i % S::NM;
        float v[8];
#pragma unroll
        for (int w = 0; w < 8; ++w) v[w] = w < p.W ? part[(w * MAXTT + r) * S::NM + mix] : 0.0f;
        if (p.W > 1) { v[0] += v[1]; v[2] += v[3]; v[4] += v[5]; v[6] += v[7]; }
        if (p.W > 2) { v[0] += v[2]; v[4] += v[6]; }
        if (p.W > 4) { v[0] += v[4]; }
        p.rec_m[((size_t)(row0 + r) * p.nrec + grp) * S::NM + mix] = v[0];
      }
    }
    for (int r = tid; r < rows; r += blockDim.x) {
      double sg = 0.0, sn = 0.0;
      for (int w = 0; w < p.W; ++w) {
        sg += sss[(w * MAXTT + r) * 2];
        sn += sss[(w * MAXTT + r) * 2 + 1];
      }
      double* rec = p.rec_ss + ((size_t)(row0 + r) * p.nrec + grp) * 2;
      rec[0] = sg;
      rec[1] = sn;
    }
    STAMP(p.timeline, 7);
    // After its last tile's records the block lets the next kernel start placing blocks (they
    // stage their weights, then wait for this grid): this overlaps the next launch and its fn
    // fetch with the tile's tail. Triggering here rather than at kernel start keeps at most one
    // kernel waiting behind this one.
    if (tile + (int)gridDim.y >= p.tiles) pdl_trigger();
    if (p.mode == 1) continue;  // a second launch finishes the tiles
    // Publish, then let the last block of this tile finish it. The barrier orders the block's
    // record writes before thread 0's fence and atomic (release); thread 0's fence after the
    // atomic and the barrier order the finisher's reads after every block's writes (acquire).
    __syncthreads();
    if (tid == 0) {
      __threadfence();
      const bool last = atomicAdd(p.counters + tile, 1u) == (u32)(gridDim.x - 1);
      if (last) __threadfence();
      s_last = last;
    }
    __syncthreads();
    STAMP(p.timeline, 8);
    if (s_last) {
      finish_tile<PM, NIN, NMIX, CARRIED>(p, tile, scratch, s_gw);
      if (tid == 0) p.counters[tile] = 0;
    }
  }
  STAMP(p.timeline, 13);
}

// Two blocks of 256 threads per multiprocessor: at most 128 registers per thread.
#define SEAM_KERNEL(name, PM, NIN, NMIX, CARRIED)                                    \
  extern "C" __global__ void __launch_bounds__(256, 2) name(const FusedParams p) {   \
    seam_kernel_body<PM, NIN, NMIX, CARRIED>(p);                                     \
  }

SEAM_KERNEL(mhc_seam, 1, 4, 24, 1)
SEAM_KERNEL(mhc_seam_v4, 1, 4, 24, 0)
SEAM_KERNEL(mhc_pre_delayed, 0, 4, 24, 1)
SEAM_KERNEL(mhc_pre, 0, 4, 24, 0)
SEAM_KERNEL(mhc_entry, 0, 1, 24, 1)
SEAM_KERNEL(mhc_head, 0, 4, 4, 0)
SEAM_KERNEL(mhc_final, 0, 4, 0, 1)

// post_map alone, vectorized: one thread per (token, 8 channels), all four streams.
extern "C" __global__ void mhc_post(const bf16_t* __restrict__ x, const bf16_t* __restrict__ r,
                                    const float* __restrict__ post, const float* __restrict__ comb,
                                    bf16_t* __restrict__ out, int T, int H) {
  const int H8 = H / 8;
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (size_t)T * H8) return;
  const size_t t = i / H8;
  const int h = (int)(i % H8) * 8;
  float xf[8], rf[NS][8];
  unpack8(__ldg((const uint4*)(x + t * H + h)), xf);
#pragma unroll
  for (int s = 0; s < NS; ++s) unpack8(__ldg((const uint4*)(r + (t * NS + s) * H + h)), rf[s]);
#pragma unroll
  for (int j = 0; j < NS; ++j) {
    float o[8];
    const float pj = post[t * NS + j];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      float acc = __fmul_rn(pj, xf[e]);
#pragma unroll
      for (int s = 0; s < NS; ++s) acc = __fadd_rn(acc, __fmul_rn(comb[t * 16 + s * 4 + j], rf[s][e]));
      o[e] = acc;
    }
    *(uint4*)(out + (t * NS + j) * H + h) = pack8(o);
  }
}

// expand, vectorized: one thread per (token, 8 channels).
extern "C" __global__ void mhc_expand(const bf16_t* __restrict__ x, bf16_t* __restrict__ out, int T, int n, int H) {
  const int H8 = H / 8;
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (size_t)T * H8) return;
  const size_t t = i / H8;
  const int h = (int)(i % H8) * 8;
  const uint4 v = __ldg((const uint4*)(x + t * H + h));
  for (int s = 0; s < n; ++s) *(uint4*)(out + (t * n + s) * H + h) = v;
}
