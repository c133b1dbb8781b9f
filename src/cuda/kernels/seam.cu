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
// The seams' first launch there is the stream variant (`mhc_seam_st`, `mhc_seam_v4_st`, below):
// the same tile work and records, laid out to keep the next tile's loads in flight.
//
// Determinism and batch invariance. A chunk's partial dot products are computed from zero by a
// fixed sequence of MMAs, and chunk partials are combined by a pairwise tree over the chunk index
// padded with zeros to a power of two. The levels below W are summed inside the block, the rest
// by the tile's last block; every split gives the same tree, hence the same bits, whatever T, W,
// the tile size or the token's row. The sums of squares take the same kind of fixed order, the
// canonical one of reference::tree_sum_squares: a lane sums its 8 channels' squares (stream by
// stream) by f32 fused multiply-adds (sq_part8) and converts that part to f64, a quad pairs its
// lanes into the chunk's value, and the chunks are added by the pairwise tree over the chunk
// index, in f64. The order matters: adds in another order round differently (PERF_NOTES.md, "The
// f64 sums of squares" and attempt 107), so every kernel and plan must add in the same order to
// give the same RMS factors.
//
// Programmatic dependent launch. The engine launches these kernels so that they may start while
// the previous kernel of the stream runs: a block stages its fn slice and the gates' weights,
// then waits (pdl_wait) before touching any activation, the workspace or the counters; it lets
// the next kernel start placing its blocks (pdl_trigger) once its last tile's records are
// written (the cluster kernel in tiles of up to 16 tokens: once its fn has landed), so the next
// seam's launch and fn fetch overlap this seam's tail.
//
// Accuracy. The projection multiplies the bf16 streams (exact in TF32) by fn in two TF32 pieces
// (project_step: hi, the weight with its low 13 significand bits cleared, and lo, the exact
// remainder, of which the tensor cores read the top 11 bits), so every product is within 2^-21
// of the exact one and the sums are f32 accumulations: plain TF32 (one piece, 2^-11) would break
// SPEC's 1e-5. The cluster kernels' _clp variants read fn permuted once into the lanes' fragment
// order by mhc_fn_split and split it the same way (same bits).

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
  const uint4* fn_split;  // fn prepared by mhc_fn_split (the cluster kernels' PREP variant only)
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
  u32* counters;          // [tiles], zero between launches: the tile kernel's a tile
  int T, H, tt, tiles, W, nrec, rpad, rows_batch, iters;
  int mode;               // 0: last block of a tile finishes it; 1: tiles only; 2: finish only
  float hc_eps, rms_eps, norm_eps, post_mult;
  u64* timeline;          // [blocks][TL_SLOTS][2] stamps (MHC_TIMELINE builds only; else unused)
  int parts;              // the split tails (seam_tails_body): blocks per tile; else 1
  int presplit;           // the cluster kernels' PS variants: chunk warps a block with fn presplit
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

// fn for one MMA step of a warp's chunk: for every n-tile nt, the 4 consecutive values of row
// mrow = nt * 8 + g, stream j, half u of lane quarter q's 8 channels, from the block's staged
// slice: rows of `rstride` float4 ([mrow][j], the warp's chunk at float4 column warp * 8). SWZ:
// the tile kernel's layout, columns swizzled by (mrow & 1) against bank conflicts; else the
// cluster kernel's, rows padded by one float4. Rows past NMIX and chunks past H were staged as
// zeros.
template <int NIN, int NMIX, bool SWZ>
__device__ __forceinline__ void load_fn_step(const float* sfn, int rstride, int j, int u, int g, int warp,
                                             int q, bool chunk_ok, float f[Shape<NIN, NMIX>::NT][4]) {
  typedef Shape<NIN, NMIX> S;
  // The branch (warps past W and chunks past H multiply zeros) also keeps the compiler from
  // hoisting every step's reads to the top of the projection, beyond the register budget.
  if (chunk_ok) {
#pragma unroll
    for (int nt = 0; nt < S::NT; ++nt) {
      const int mrow = nt * 8 + g;
      const float4* s = (const float4*)sfn + (size_t)(mrow * NIN + j) * rstride;
      const float4 v = s[SWZ ? (warp * 8 + 2 * q + u) ^ (mrow & 1) : warp * 8 + 2 * q + u];
      f[nt][0] = v.x; f[nt][1] = v.y; f[nt][2] = v.z; f[nt][3] = v.w;
    }
  } else {
#pragma unroll
    for (int nt = 0; nt < S::NT; ++nt) f[nt][0] = f[nt][1] = f[nt][2] = f[nt][3] = 0.0f;
  }
}

// The pairwise tree over v[0..N) in place (N a power of two), its levels below `width` only (a
// power of two, N: all): returns v[0], the sum of v[0..width) as (v0 + v1) + (v2 + v3) and so on
// up, the canonical order of every reduction here (header).
template <typename T, int N>
__device__ __forceinline__ T pairwise(T (&v)[N], int width = N) {
#pragma unroll
  for (int s = 1; s < N; s <<= 1) {
    if (s >= width) break;
#pragma unroll
    for (int k = 0; k < N; k += 2 * s) v[k] += v[k + s];
  }
  return v[0];
}

// tree_f64_cg past 32 values (plans with small W): one at a time through a TreeStack. Not
// inlined: its stack would otherwise cost the tile kernel registers (spills).
__device__ __noinline__ double tree_f64_cg_long(const double* p, int stride, int n) {
  TreeStack st;
  for (int k = 0; k < n; ++k) st.push(ld_cg_f64(p + (size_t)k * stride), k);
  return st.finish(n);
}

// The pairwise tree over n f64 values p[k * stride] (records in L2), zeros past n. Up to 32
// values every load is issued before the first add (one round trip).
__device__ __forceinline__ double tree_f64_cg(const double* p, int stride, int n) {
  if (n <= 32) {
    double v[32];
#pragma unroll
    for (int k = 0; k < 32; ++k) v[k] = k < n ? ld_cg_f64(p + (size_t)k * stride) : 0.0;
    return pairwise(v);
  }
  return tree_f64_cg_long(p, stride, n);
}

// The pairwise tree over the f64 values leaves[0..n) (zeros past n, padded to pw, a power of two
// >= n) by one warp; every lane gets the total. Lane l sums the aligned range of cpl = pw / 32
// (at least 1, at most 16) values from l * cpl pairwise, then the lanes are paired by shuffles.
// All lanes of the warp call it.
__device__ __forceinline__ double warp_tree_f64(const double* leaves, int n, int pw) {
  const int lane = threadIdx.x % WARP;
  const int cpl = pw > WARP ? pw / WARP : 1;
  double v[16];
#pragma unroll
  for (int l = 0; l < 16; ++l) {
    const int c = lane * cpl + l;
    v[l] = l < cpl && c < n ? leaves[c] : 0.0;
  }
  double t = pairwise(v);
  for (int o = 1; o < WARP; o <<= 1) t += __shfl_xor_sync(FULL_MASK, t, o);
  return t;
}

// The pairwise tree over up to 8 f64 values v[0..n) (zeros past n), in place; returns the sum.
__device__ __forceinline__ double tree8_f64(double (&v)[8], int n) {
#pragma unroll
  for (int w = 0; w < 8; ++w)
    if (w >= n) v[w] = 0.0;
  return pairwise(v);
}

// A row's total over its warp-rows (per consecutive warps, a power of two <= 8, each holding its
// part in every lane), pairwise in warp order; the row's first thread (tid % tpr == 0) gets it.
// All threads of the block call it.
__device__ __forceinline__ double row_tree(double v, int tpr, float* scratch) {
  if (tpr <= WARP) return v;
  double* red = (double*)scratch;
  const int warp = threadIdx.x / WARP, per = tpr / WARP;
  __syncthreads();  // earlier readers of scratch are done
  if (threadIdx.x % WARP == 0) red[warp] = v;
  __syncthreads();
  if (threadIdx.x % tpr == 0) {
    double t[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) t[k] = k < per ? red[warp + k] : 0.0;
    v = tree8_f64(t, per);
  }
  return v;
}

// The tile's carried coefficients in shared memory, [tt][COEF]: post 4, comb 16, pre 4 (zeros
// where the op reads none, and for rows past T).
template <int PM, int NIN, int CARRIED>
__device__ __forceinline__ void stage_coefs(const FusedParams& p, float* scoef, int row0) {
  for (int i = threadIdx.x; i < p.tt * COEF; i += blockDim.x) {
    const int r = i / COEF, c = i % COEF, tok = row0 + r;
    float v = 0.0f;
    if (tok < p.T) {
      if (PM && c < 4) v = p.post[tok * 4 + c];
      else if (PM && c < 20) v = p.comb[tok * 16 + (c - 4)];
      else if (CARRIED && NIN == NS && c >= 20) v = p.pre_in[tok * 4 + (c - 20)];
    }
    scoef[i] = v;
  }
}

// Stream 0 of token tk's row of a residual [T][NS][H] at channel h: one 64-bit offset a row, so
// that stream i is a 32-bit offset `i * H` from it (PERF_NOTES.md attempt 109: a 64-bit product a
// stream and access was 10 % of the stream launch).
template <typename P>
__device__ __forceinline__ P* row_streams(P* base, size_t tk, int H, int h) {
  return base + (tk * (NS * H) + h);
}

// Phase 1's loads for a lane's two rows (tok[0] = row g, tok[1] = row g + 8 of the tile) and 8
// channels at h: x (post_map, entry) and the residual's streams, every load issued before any is
// used (one memory round trip). Rows that are not ok read nothing and get zeros.
template <int PM, int NIN>
__device__ __forceinline__ void ew_load(const FusedParams& p, const int tok[2], const bool ok[2], int h,
                                        uint4 xv[2], uint4 rv[2][NIN]) {
  const uint4 z = make_uint4(0, 0, 0, 0);
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const size_t tk = ok[rr] ? (size_t)tok[rr] : 0;
    xv[rr] = (ok[rr] && (PM || NIN == 1)) ? __ldg((const uint4*)(p.x + tk * p.H + h)) : z;
    const bf16_t* rs = row_streams(p.residual, tk, p.H, h);
#pragma unroll
    for (int i = 0; i < NIN; ++i) rv[rr][i] = (ok[rr] && NIN == NS) ? __ldg((const uint4*)(rs + i * p.H)) : z;
  }
}

// Phase 1's arithmetic, per row: post_map (writes r'), and av = the streams the projection reads
// as bf16 vectors: r' (post_map), r, or x (entry; r' is x broadcast). Phases are separate loops
// so that few values are live at once (the tile kernel must fit 128 registers to run two blocks
// per multiprocessor).
// Phase 2, per row: the carried collapse cb (bf16; the layer input does not wait for this
// seam's gates). With a norm, ssn gets its f64 sum of squares and the collapse waits for the
// norm's factor: PARK (1, the tile kernel; 2, the stream variant, with an L2 evict_last policy)
// writes it to layer_input for the tails to scale, 0 leaves cb to the caller (the cluster
// kernel). Without a norm it is the layer input, emitted here.
// row1 = false (warp-uniform): the tile has no row in its second half (rows g + 8); av[1] and
// cb[1] are zeros and nothing is computed there. (The tile kernel passes true: with the test,
// mhc_pre_delayed spilled.)
template <int PM, int NIN, int CARRIED, int PARK>
__device__ __forceinline__ void ew_compute(const FusedParams& p, const float* scoef, int g, int q,
                                           const int tok[2], const bool ok[2], int h, bool row1,
                                           const uint4 xv[2], const uint4 rv[2][NIN],
                                           uint4 av[2][NIN], uint4 cb[2], double ssn[2]) {
  const bool has_norm = p.norm_w != nullptr;
  const uint4 z = make_uint4(0, 0, 0, 0);
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    if (rr == 1 && !row1) {
      // No row of the tile's second half exists (warp-uniform): the MMA reads zeros there.
#pragma unroll
      for (int j = 0; j < NIN; ++j) av[1][j] = z;
      cb[1] = z;
      break;
    }
    const size_t tk = ok[rr] ? (size_t)tok[rr] : 0;
    if (PM) {
      const float* cf = scoef + (g + 8 * rr) * COEF;
      // r' (row_streams), each stream stored as soon as it is packed (all four after the loop cost
      // the stream launch 0.5-2 %: attempt 109).
      bf16_t* ro = row_streams(p.residual_out, tk, p.H, h);
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
          for (int e = 0; e < 8; ++e) o[e] = mul_add_rn(o[e], c, rf[e]);
        }
        av[rr][j] = pack8(o);
        if (ok[rr]) *(uint4*)(ro + j * p.H) = av[rr][j];
      }
    } else if (NIN == 1) {
      av[rr][0] = xv[rr];
      if (ok[rr]) {
#pragma unroll
        for (int j = 0; j < NS; ++j) *(uint4*)(row_streams(p.residual_out, tk, p.H, h) + j * p.H) = xv[rr];
      }
    } else {
#pragma unroll
      for (int j = 0; j < NIN; ++j) av[rr][j] = rv[rr][j];
    }
  }
  if (!CARRIED) return;
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    if (rr == 1 && !row1) break;
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
        for (int e = 0; e < 8; ++e) c[e] = mul_add_rn(c[e], cf[j], sj[e]);
      }
    } else {
      unpack8(av[rr][0], c);  // entry: one-hot carried pre-mix, the layer input is x
    }
    if (has_norm) {
      cb[rr] = pack8(c);
      // The entry seam's tail reads x itself: nothing to park. PARK 2 (the stream variant): kept
      // in L2 for the tails launch (l2_evict_last).
      if (PARK && ok[rr] && NIN == NS) {
        bf16_t* at = p.layer_input + (size_t)tok[rr] * p.H + h;
        if (PARK == 2)
          st_hint4(at, cb[rr], l2_evict_last());
        else
          *(uint4*)at = cb[rr];
      }
      float cr[8];
      unpack8(cb[rr], cr);
      ssn[rr] += (double)sq_part8(cr, 0.0f);
    } else {
      emit_li(p, tok[rr], h, c, ok[rr], q == 0);
    }
  }
}

// The elementwise phase with lanes by channels, for tiles of at most CPL rows (CPL = 1, 2 or 4;
// the cluster kernel's _ch variants of the seam, which the engine takes for tiles of up to 4
// tokens: T <= 4, and with PDL up to T = 12 over up to three clusters). In the MMA layout a lane (g, q) owns row
// g and channels 8q..8q+7, so at T = 1 only 4 lanes of 32 work and each runs the whole post_map of
// 8 channels. Here lane (g, q) takes row g / (8 / CPL) and the CPL channels
// 8q + (g % (8 / CPL)) * CPL + [0, CPL) of the warp's chunk: quarter q keeps its 8 channels,
// spread over 8 / CPL lanes, so every lane works. Each element's arithmetic is ew_compute's, in
// the same order (the same bits), and shuffles then move r' and the collapse into the MMA layout,
// where the rest of the kernel takes them as ew_compute leaves them.
template <int CPL>
struct ChanVals {
  static constexpr int NW = (CPL + 1) / 2;  // 32-bit words holding CPL bf16 (CPL = 1: the low half)
  u32 x[NW], r[NS][NW];
};

// CPL bf16 at ptr (aligned to their size), or zeros where !ok.
template <int CPL>
__device__ __forceinline__ void ld_chan(const bf16_t* ptr, bool ok, u32 w[(CPL + 1) / 2]) {
  if constexpr (CPL == 1) {
    w[0] = ok ? (u32)__ldg((const unsigned short*)ptr) : 0u;
  } else if constexpr (CPL == 2) {
    w[0] = ok ? __ldg((const unsigned int*)ptr) : 0u;
  } else {
    const uint2 v = ok ? __ldg((const uint2*)ptr) : make_uint2(0u, 0u);
    w[0] = v.x;
    w[1] = v.y;
  }
}
template <int CPL>
__device__ __forceinline__ void st_chan(bf16_t* ptr, const u32 w[(CPL + 1) / 2]) {
  if constexpr (CPL == 1) *(unsigned short*)ptr = (unsigned short)w[0];
  else if constexpr (CPL == 2) *(u32*)ptr = w[0];
  else *(uint2*)ptr = make_uint2(w[0], w[1]);
}
template <int CPL>
__device__ __forceinline__ float chan_f32(const u32 w[(CPL + 1) / 2], int e) {
  return (e & 1) ? bf16_hi(w[e / 2]) : bf16_lo(w[e / 2]);
}
template <int CPL>
__device__ __forceinline__ void chan_pack(const float f[CPL], u32 w[(CPL + 1) / 2]) {
  if constexpr (CPL == 1) {
    w[0] = (u32)f32_to_bf16(f[0]);
  } else {
#pragma unroll
    for (int i = 0; i < CPL / 2; ++i) w[i] = pack_bf16x2(f[2 * i], f[2 * i + 1]);
  }
}

// The source lane of word k (channels 8q + 2k, +1) of row g in the channel layout is
// 4 * (g * (8 / CPL) + s) + q for the s-th of the row's lanes in quarter q. Lanes of rows past
// CPL get words of other rows (the caller zeros them).
template <int CPL>
__device__ __forceinline__ uint4 chan_to_mma(const u32 w[(CPL + 1) / 2], int g, int q) {
  constexpr int G = 8 / CPL;
  u32 o[4];
  if constexpr (CPL == 1) {
    // Pairs first: a lane with an even s takes its neighbour's channel (lane + 4) as the high half.
    const u32 hi = __shfl_down_sync(FULL_MASK, w[0], 4);
    const u32 pair = (w[0] & 0xffffu) | (hi << 16);
#pragma unroll
    for (int k = 0; k < 4; ++k) o[k] = __shfl_sync(FULL_MASK, pair, 4 * (g * G + 2 * k) + q);
  } else if constexpr (CPL == 2) {
#pragma unroll
    for (int k = 0; k < 4; ++k) o[k] = __shfl_sync(FULL_MASK, w[0], 4 * (g * G + k) + q);
  } else {
#pragma unroll
    for (int k = 0; k < 4; ++k) o[k] = __shfl_sync(FULL_MASK, w[k & 1], 4 * (g * G + k / 2) + q);
  }
  return make_uint4(o[0], o[1], o[2], o[3]);
}

// The loads of a lane's row (token tok) and channels at h: x and the residual's streams, all
// issued before any is used.
template <int CPL>
__device__ __forceinline__ void ewc_load(const FusedParams& p, int tok, bool ok, int h, ChanVals<CPL>& v) {
  const size_t tk = ok ? (size_t)tok : 0;
  ld_chan<CPL>(p.x + tk * p.H + h, ok, v.x);
  const bf16_t* rs = row_streams(p.residual, tk, p.H, h);
#pragma unroll
  for (int i = 0; i < NS; ++i) ld_chan<CPL>(rs + i * p.H, ok, v.r[i]);
}

// The seam's post_map (r' stored) and carried collapse in the channel layout (row rho of the
// tile, token tok, channels h..), then r' and the collapse moved into the MMA layout: av[0], cb[0]
// and ssn[0] of lane (g, q) as ew_compute<1, NS, 1, 0> gives them for row g (ok_g: that row
// exists), the tile's second half (av[1], cb[1], ssn[1]) zeros. Without a norm the layer input is
// emitted from the f32 collapse, moved likewise.
template <int CPL>
__device__ __forceinline__ void ewc_compute(const FusedParams& p, const float* scoef, int rho, int tok, bool ok,
                                            int h, const ChanVals<CPL>& v, int g, int q, int tok_g, bool ok_g,
                                            int h_g, uint4 av[2][NS], uint4 cb[2], double ssn[2]) {
  constexpr int NW = ChanVals<CPL>::NW;
  const uint4 z = make_uint4(0, 0, 0, 0);
  const float* cf = scoef + rho * COEF;
  u32 rw[NS][NW];  // r' (bf16)
#pragma unroll
  for (int j = 0; j < NS; ++j) {
    float o[CPL];
#pragma unroll
    for (int e = 0; e < CPL; ++e) o[e] = __fmul_rn(cf[j], chan_f32<CPL>(v.x, e));
#pragma unroll
    for (int i = 0; i < NS; ++i) {
      const float c = cf[4 + i * 4 + j];
#pragma unroll
      for (int e = 0; e < CPL; ++e) o[e] = mul_add_rn(o[e], c, chan_f32<CPL>(v.r[i], e));
    }
    chan_pack<CPL>(o, rw[j]);
    if (ok) st_chan<CPL>(row_streams(p.residual_out, (size_t)tok, p.H, h) + j * p.H, rw[j]);
  }
  float c[CPL];
#pragma unroll
  for (int e = 0; e < CPL; ++e) c[e] = __fmul_rn(cf[20], chan_f32<CPL>(rw[0], e));
#pragma unroll
  for (int j = 1; j < NS; ++j) {
#pragma unroll
    for (int e = 0; e < CPL; ++e) c[e] = mul_add_rn(c[e], cf[20 + j], chan_f32<CPL>(rw[j], e));
  }
#pragma unroll
  for (int j = 0; j < NS; ++j) {
    const uint4 t = chan_to_mma<CPL>(rw[j], g, q);
    av[0][j] = ok_g ? t : z;
    av[1][j] = z;
  }
  cb[1] = z;
  ssn[1] = 0.0;
  if (p.norm_w != nullptr) {
    u32 cw[NW];
    chan_pack<CPL>(c, cw);
    const uint4 t = chan_to_mma<CPL>(cw, g, q);
    cb[0] = ok_g ? t : z;
    float cr[8];
    unpack8(cb[0], cr);
    ssn[0] = (double)sq_part8(cr, 0.0f);
  } else {
    // Channel k of quarter q: element k % CPL of the row's (k / CPL)-th lane.
    constexpr int G = 8 / CPL;
    float f[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) f[k] = __shfl_sync(FULL_MASK, c[k % CPL], 4 * (g * G + k / CPL) + q);
    cb[0] = z;
    ssn[0] = 0.0;
    emit_li(p, tok_g, h_g, f, ok_g, q == 0);
  }
}

// The activations of step (j, u, st) as the MMA's k8 fragment (rows g and g + 8, channels
// 8q + 4u + 2st and + 1, widened to f32: exact in TF32), and (SS) the gate sums of squares
// continued with them. Shared by project_step and project_chunk_presplit.
template <int NIN, bool SS>
__device__ __forceinline__ void step_acts(const uint4 (&av)[2][NIN], int j, int u, int st, u32 (&a)[4],
                                          float (&ss)[2]) {
  const u32 w0 = word(av[0][j], 2 * u + st), w1 = word(av[1][j], 2 * u + st);
  // Byte permutes, not the shifts and masks of bf16_lo / bf16_hi: the compiler would share those
  // with quad_sums' unpacking after the projection and keep every widened value live until then
  // (the cluster kernels spilled).
  a[0] = __byte_perm(w0, 0u, 0x1044);
  a[1] = __byte_perm(w1, 0u, 0x1044);
  a[2] = __byte_perm(w0, 0u, 0x3244);
  a[3] = __byte_perm(w1, 0u, 0x3244);
#pragma unroll
  for (int rr = 0; rr < 2 && SS; ++rr) {
    const float lo = __uint_as_float(a[rr]), hi = __uint_as_float(a[2 + rr]);
    ss[rr] = __fmaf_rn(hi, hi, __fmaf_rn(lo, lo, ss[rr]));
  }
}

// A weight's two TF32 pieces (project_step): hi, its low 13 significand bits cleared, and lo,
// the exact remainder.
__device__ __forceinline__ void tf32_split(float v, u32& hi, u32& lo) {
  hi = __float_as_uint(v) & 0xffffe000u;
  lo = __float_as_uint(v - __uint_as_float(hi));  // exact
}

// One projection step of a warp (stream j, half u of each lane's 8 channels), accumulated into
// d: the weights of fn[mix nt * 8 + g][stream j, channels 8q + 4u + 0..3] (lane g = lane / 4,
// q = lane % 4), from `pairs`, each weight in two TF32 pieces (hi: its low 13 significand bits
// cleared, one LOP3; lo: the exact remainder, one FADD, of which the tensor cores read the top 11
// bits). Two m16n8k8 steps over channel pairs: step st takes channel 8q + 4u + 2st as k = q and
// the next as k = q + 4, the bf16 activations widened to f32 (exact in TF32).
//
// One group of 16 rows (av, d: the hi chains, e: the lo chains).
//
// TR (tiles of at most 8 tokens, NT = 3): the same products with the operands swapped, so that a
// step takes 3 MMAs instead of 6: the weights' pieces are the rows (16 x 8 A operand: hi of mixes
// 0-23 and lo of mixes 0-23 in three m-tiles), the tokens g the columns (B: the lane's row g of
// the activations). d[0..2] then hold the three m-tiles' accumulators and e is unused;
// project_finish turns them into the mixes. The bits are
// the unswapped chains' where the tensor cores compute an output element from its row of A, its
// column of B and its accumulator alone, the same way at every position: the GPU tests compare
// these variants with the tile kernel bit for bit (lanes_by_channels_give_the_same_bits).
//
// ss: the lane's parts of the gates' sums of squares (reference::tree_sum_squares) of rows g and
// g + 8, continued with the step's four channels from the same widened values (the steps run the
// streams j, the halves u and the pairs st in order: channels 0..7 of stream 0, then stream 1, ...,
// the canonical part's order), so that quad_sums need not widen the activations again.
// (SS = false: not here; the cluster kernels that would spill with it leave the parts to
// quad_sums.)
template <int NT, int NIN, bool TR, bool SS, typename Pairs>
__device__ __forceinline__ void project_step(Pairs pairs, const uint4 (&av)[2][NIN], int j, int u,
                                             float (&d)[NT][4], float (&e)[NT][4], float (&ss)[2]) {
  static_assert(!TR || NT == 3, "the swapped step: 24 mixes");
#pragma unroll
  for (int st = 0; st < 2; ++st) {
    // pairs(st, f): f[nt] = the weights of channels 8q + 4u + 2st and + 1 (loaded a step at a
    // time where registers are short: the cluster kernels).
    float2 f[NT];
    pairs(st, f);
    u32 a[4];
    step_acts<NIN, SS>(av, j, u, st, a, ss);
    u32 bh[NT][2], bl[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int b = 0; b < 2; ++b) tf32_split(b ? f[nt].y : f[nt].x, bh[nt][b], bl[nt][b]);
    }
    if constexpr (TR) {
      // m-tile rows g and g + 8: hi of mixes (0, 8), (16, lo 0), (lo 8, lo 16) + g; k as above.
      const u32 bt[2] = {a[0], a[2]};
      const u32 a0[4] = {bh[0][0], bh[1][0], bh[0][1], bh[1][1]};
      const u32 a1[4] = {bh[2][0], bl[0][0], bh[2][1], bl[0][1]};
      const u32 a2[4] = {bl[1][0], bl[2][0], bl[1][1], bl[2][1]};
      mma_tf32(d[0], a0, bt);
      mma_tf32(d[1], a1, bt);
      mma_tf32(d[2], a2, bt);
      continue;
    }
    // Every n-tile's hi into d, then every n-tile's lo into e (two chains an output, each half
    // as long as one chain of both, added once at the end): the chains are independent, so one's
    // MMA latency overlaps the others'.
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) mma_tf32(d[nt], a, bh[nt]);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) mma_tf32(e[nt], a, bl[nt]);
  }
}

// A group's projection from its chains (project_step): d += e, hi + lo; with TR, the three
// m-tiles of the swapped step as the mixes: d[nt][tt] = mix nt * 8 + g of token 2q + tt, hi + lo as
// the unswapped chains' d + e (d[nt][2..3]: zero).
template <int NT, bool TR>
__device__ __forceinline__ void project_finish(float (&d)[NT][4], const float (&e)[NT][4]) {
  if constexpr (!TR) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) d[nt][i] += e[nt][i];
    }
  } else {
    float r[3][2];
#pragma unroll
    for (int tt = 0; tt < 2; ++tt) {
      r[0][tt] = d[0][tt] + d[1][2 + tt];
      r[1][tt] = d[0][2 + tt] + d[2][tt];
      r[2][tt] = d[1][tt] + d[2][2 + tt];
    }
#pragma unroll
    for (int nt = 0; nt < 3; ++nt) {
      d[nt][0] = r[nt][0];
      d[nt][1] = r[nt][1];
      d[nt][2] = d[nt][3] = 0.0f;
    }
  }
}

// A chunk's projection starts from zero: its accumulators d and its gate sums of squares ss
// (project_chunk, project_chunk_prepared, project_chunk_presplit).
template <int NT>
__device__ __forceinline__ void project_begin(float (&d)[NT][4], float (&ss)[2]) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) d[nt][0] = d[nt][1] = d[nt][2] = d[nt][3] = 0.0f;
  ss[0] = ss[1] = 0.0f;
}

// A warp's chunk of the projection on tensor cores, from zero, in the canonical order (the same
// MMA sequence whatever the plan or kernel, so a chunk's partials have the same bits everywhere):
// d[nt] = rows g, g + 8 of one group of 16 rows x mixes nt*8 + 2q, +1; the steps run over the
// streams j and the halves u of the lane's 8 channels (project_step). The n-tiles' chains are
// independent: each step issues them side by side, so one chain's MMA latency overlaps the
// others'. The cluster kernel's tiles of 32 tokens call it once a group: a group's lo chains then
// live through its own pass only (they would spill otherwise), and its bits are the same whatever
// the tile. SWZ and rstride: fn's layout, as in load_fn_step. TR: the swapped step (project_step),
// the result as project_finish gives it.
template <int NIN, int NMIX, bool SWZ, bool TR = false, bool SS = true>
__device__ __forceinline__ void project_chunk(const float* sfn, int rstride, int warp, int g, int q,
                                              bool chunk_ok, const uint4 (&av)[2][NIN],
                                              float (&d)[Shape<NIN, NMIX>::NT][4], float (&ss)[2]) {
  typedef Shape<NIN, NMIX> S;
  project_begin(d, ss);
  if (NMIX == 0) return;
  float e[S::NT][4] = {};
#pragma unroll
  for (int j = 0; j < NIN; ++j) {
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      if (SWZ) {
        // The tile and stream kernels: a step's weights in one 16-byte load an n-tile.
        float f[S::NT][4];
        load_fn_step<NIN, NMIX, SWZ>(sfn, rstride, j, u, g, warp, q, chunk_ok, f);
        project_step<S::NT, NIN, TR, SS>(
            [&](int st, float2 (&fp)[S::NT]) {
#pragma unroll
              for (int nt = 0; nt < S::NT; ++nt) fp[nt] = make_float2(f[nt][2 * st], f[nt][2 * st + 1]);
            },
            av, j, u, d, e, ss);
      } else {
        // The cluster kernels (rows padded by one float4): 8 bytes a pair, loaded as used.
        project_step<S::NT, NIN, TR, SS>(
            [&](int st, float2 (&fp)[S::NT]) {
#pragma unroll
              for (int nt = 0; nt < S::NT; ++nt) {
                const int mrow = nt * 8 + g;
                const float2* r = (const float2*)((const float4*)sfn + (size_t)(mrow * NIN + j) * rstride);
                fp[nt] = chunk_ok ? r[2 * (warp * 8 + 2 * q + u) + st] : make_float2(0.0f, 0.0f);
              }
            },
            av, j, u, d, e, ss);
      }
    }
  }
  project_finish<S::NT, TR>(d, e);
}

// fn prepared once, at weight upload (mhc_fn_split below): for every chunk c, stream j and half
// u of a lane's 8 channels, the weights of that projection step in the lanes' fragment order, so
// that a warp loads each pair with one conflict-free 8-byte load and runs project_step on the
// same values as project_chunk. Per (c, j, u), 1536 bytes: [st < 2][nt < 3][lane] float2, element
// b = fn[nt * 8 + g][j * H + 32 c + 8 q + 4 u + 2 st + b], g = lane / 4, q = lane % 4 (zeros past
// H). For 24 mixes (3 n-tiles). The same bytes as fn.
#define FNP_WORDS 12                         // words per (chunk, stream, half, lane)
#define FNP_STEP_BYTES (FNP_WORDS * WARP * 4)  // 1536
#define FNP_STREAM_BYTES (2 * FNP_STEP_BYTES)  // 3072 bytes per (chunk, stream)

// project_chunk over prepared fn (one group of 16 rows, as there). GUARD = false: every load
// unguarded (no zeroing of each pair before its load: 3 instructions a step fewer). A warp whose
// chunk lies past H then reads its own slot of the block's fn, which no copy wrote, and its
// partials are garbage; the caller never sends them. (The tiles of 32 keep the guard: without
// it their kernel spilled.)
template <int NIN, bool TR, bool GUARD, bool SS = true>
__device__ __forceinline__ void project_chunk_prepared(const unsigned char* sfp, int lane, bool chunk_ok,
                                                       const uint4 (&av)[2][NIN], float (&d)[3][4],
                                                       float (&ss)[2]) {
  project_begin(d, ss);
  float e[3][4] = {};
#pragma unroll
  for (int j = 0; j < NIN; ++j) {
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const u32 base = smem_u32(sfp + (j * 2 + u) * FNP_STEP_BYTES);
      project_step<3, NIN, TR, SS>(
          [&](int st, float2 (&fp)[3]) {
#pragma unroll
            for (int nt = 0; nt < 3; ++nt) {
              if (GUARD && !chunk_ok) {
                fp[nt] = make_float2(0.0f, 0.0f);  // warps past H multiply zeros
              } else {
                // Volatile loads stay behind the previous step's MMAs (volatile too): the
                // compiler would otherwise hoist steps' loads ahead, beyond the register budget.
                asm volatile("ld.shared.v2.f32 {%0,%1}, [%2];"
                             : "=f"(fp[nt].x), "=f"(fp[nt].y)
                             : "r"(base + ((st * 3 + nt) * WARP + lane) * 8));
              }
            }
          },
          av, j, u, d, e, ss);
    }
  }
  project_finish<3, TR>(d, e);
}

// fn's TF32 split done once a seam, in shared memory, for the first `presplit` chunk warps of a
// block (the cluster kernels' PS variants, PERF_NOTES.md attempt 158). Such a warp's slot of the
// block's prepared fn is twice the size of a chunk's: its bulk copy lands in the upper half, and
// before the PDL wait (off the path while the previous seam runs) the warp rewrites it into the
// whole slot as the MMA's B fragments of hi and lo pieces (tf32_split), three 16-byte words a lane
// and a step (j, u, st): {bh[0], bh[1]}, {bh[2], bl[0]}, {bl[1], bl[2]}, each bh[nt] the pair of
// channels b = 0, 1. (Only the unswapped projection: the swapped one, of the lanes-by-channels
// kernels, measured slower with it, attempt 162.)
// Word k of step s = 2j + u, st, lane at ((s * 2 + st) * 3 + k) * 512 + lane * 16 bytes of the slot:
// a warp's load of a word is 512 contiguous bytes (no bank conflict). The projection then loads
// the fragments and issues the MMAs of project_step with nothing in between: the same pieces,
// the same MMAs in the same order, so the same bits.
//
// In place: raw step s (FNP_STEP_BYTES) lies at (2 NIN + s) x FNP_STEP_BYTES of the slot and is
// rewritten into [2 s, 2 s + 2) x FNP_STEP_BYTES. Steps go in order, in batches read whole into
// registers before a __syncwarp and their stores, so the stores only reach raw steps already
// read (below).
template <int NIN>
__device__ __forceinline__ void presplit_expand(unsigned char* slot, int lane) {
  const unsigned char* raw = slot + NIN * FNP_STREAM_BYTES;
  // PSB steps at a time, all read before any is written: the stores of steps s .. s + PSB - 1
  // reach [2 s, 2 (s + PSB)), which stays below the next unread raw step, 2 NIN + s + PSB, since
  // s + PSB <= 2 NIN. The loads of a batch then overlap each other's latency.
  constexpr int PSB = 2;
  static_assert((2 * NIN) % PSB == 0, "presplit batches");
#pragma unroll 1
  for (int s0 = 0; s0 < 2 * NIN; s0 += PSB) {
    float2 f[PSB][2][3];
#pragma unroll
    for (int b = 0; b < PSB; ++b) {
#pragma unroll
      for (int st = 0; st < 2; ++st) {
#pragma unroll
        for (int nt = 0; nt < 3; ++nt)
          f[b][st][nt] = *(const float2*)(raw + (s0 + b) * FNP_STEP_BYTES + ((st * 3 + nt) * WARP + lane) * 8);
      }
    }
    __syncwarp();
#pragma unroll
    for (int b = 0; b < PSB; ++b) {
      const int s = s0 + b;
#pragma unroll
      for (int st = 0; st < 2; ++st) {
        u32 bh[3][2], bl[3][2];
#pragma unroll
        for (int nt = 0; nt < 3; ++nt) {
          tf32_split(f[b][st][nt].x, bh[nt][0], bl[nt][0]);
          tf32_split(f[b][st][nt].y, bh[nt][1], bl[nt][1]);
        }
        const uint4 w[3] = {make_uint4(bh[0][0], bh[0][1], bh[1][0], bh[1][1]),
                            make_uint4(bh[2][0], bh[2][1], bl[0][0], bl[0][1]),
                            make_uint4(bl[1][0], bl[1][1], bl[2][0], bl[2][1])};
#pragma unroll
        for (int k = 0; k < 3; ++k) *(uint4*)(slot + ((s * 2 + st) * 3 + k) * (WARP * 16) + lane * 16) = w[k];
      }
    }
    __syncwarp();
  }
}

// project_chunk_prepared over a warp's slot of presplit fragments (presplit_expand): the same
// MMAs on the same pieces, loaded 16 bytes at a time straight into the operands' registers.
template <int NIN, bool SS>
__device__ __forceinline__ void project_chunk_presplit(const unsigned char* slot, int lane,
                                                       const uint4 (&av)[2][NIN], float (&d)[3][4],
                                                       float (&ss)[2]) {
  project_begin(d, ss);
  float e[3][4] = {};
  const u32 base = smem_u32(slot) + lane * 16;
#pragma unroll
  for (int j = 0; j < NIN; ++j) {
#pragma unroll
    for (int u = 0; u < 2; ++u) {
#pragma unroll
      for (int st = 0; st < 2; ++st) {
        u32 w[3][4];
#pragma unroll
        for (int k = 0; k < 3; ++k) {
          // Volatile, as project_chunk_prepared's: the loads stay behind the previous MMAs.
          asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];"
                       : "=r"(w[k][0]), "=r"(w[k][1]), "=r"(w[k][2]), "=r"(w[k][3])
                       : "r"(base + (((j * 2 + u) * 2 + st) * 3 + k) * (WARP * 16)));
        }
        u32 a[4];
        step_acts<NIN, SS>(av, j, u, st, a, ss);
        // project_step's order: the hi n-tiles into d, then the lo ones into e.
        const u32 b[6][2] = {{w[0][0], w[0][1]}, {w[0][2], w[0][3]}, {w[1][0], w[1][1]},
                             {w[1][2], w[1][3]}, {w[2][0], w[2][1]}, {w[2][2], w[2][3]}};
#pragma unroll
        for (int nt = 0; nt < 3; ++nt) mma_tf32(d[nt], a, b[nt]);
#pragma unroll
        for (int nt = 0; nt < 3; ++nt) mma_tf32(e[nt], a, b[3 + nt]);
      }
    }
  }
  project_finish<3, false>(d, e);
}

// Prepares fn [24][nin * H] for the cluster kernels' PREP variant (layout above): one thread per
// output word. Launched once per seam's weights (CudaEngine::split_fn_weight).
extern "C" __global__ void mhc_fn_split(const float* __restrict__ fn, float* __restrict__ out, int nin, int H) {
  const int chunks = (H + CHUNK - 1) / CHUNK;
  constexpr int STEP = FNP_WORDS * WARP;  // words per (chunk, stream, half)
  const size_t total = (size_t)chunks * nin * 2 * STEP;
  const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= total) return;
  const int rem = (int)(idx % STEP);
  const size_t cju = idx / STEP;
  const int u = (int)(cju % 2), j = (int)(cju / 2 % nin), c = (int)(cju / 2 / nin);
  const int sn = rem / (2 * WARP), lane = rem % (2 * WARP) / 2, b = rem % 2;
  const int st = sn / 3, nt = sn % 3;
  const int g = lane >> 2, q = lane & 3;
  const int ch = c * CHUNK + 8 * q + 4 * u + 2 * st + b;
  out[idx] = ch < H ? fn[(size_t)(nt * 8 + g) * nin * H + (size_t)j * H + ch] : 0.0f;
}

// The gates' sums of squares of the projected streams (ssg) per row, from the lane's f32 parts
// (SS: ssp, project_chunk's; otherwise from the activations av, sq_part8 stream by stream: the
// same adds in the same order), and the quad sums of ssg and (NORM) ssn (f64, see the header).
// row1 = false (warp-uniform): the tile has no row in its second half, whose sums stay zero.
template <int NIN, int NMIX, bool NORM = true, bool SS = true>
__device__ __forceinline__ void quad_sums(const uint4 (&av)[2][NIN], const float ssp[2], double ssg[2],
                                          double ssn[2], bool row1) {
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    ssg[rr] = 0.0;
    if (rr == 1 && !row1) break;  // warp-uniform: no row in the tile's second half (zeros)
    if (NMIX > 0 && SS) {
      ssg[rr] = (double)ssp[rr];
    } else if (NMIX > 0) {
      float s = 0.0f;
#pragma unroll
      for (int j = 0; j < NIN; ++j) {
        float f[8];
        unpack8(av[rr][j], f);
        s = sq_part8(f, s);
      }
      ssg[rr] = (double)s;
    }
    ssg[rr] += __shfl_xor_sync(FULL_MASK, ssg[rr], 1);
    ssg[rr] += __shfl_xor_sync(FULL_MASK, ssg[rr], 2);
    if (NORM) {
      ssn[rr] += __shfl_xor_sync(FULL_MASK, ssn[rr], 1);
      ssn[rr] += __shfl_xor_sync(FULL_MASK, ssn[rr], 2);
    }
  }
}

// A warp's partials to shared memory: part[warp][row][mix] (the chunk's leaf of the tree) and
// sss[warp][row][2] (its gate and norm sums of squares).
template <int NMIX>
__device__ __forceinline__ void put_partials(float* part, double* sss, int warp, int g,
                                             const float d[][4], const double ssg[2], const double ssn[2]) {
  constexpr int NT = NMIX > 0 ? (NMIX + 7) / 8 : 1, NM = NMIX > 0 ? NMIX : 1;
  // The lane's quad position, re-read rather than kept live through the projection.
  const int q = lane_id() & 3;
  if (NMIX > 0) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int c0 = nt * 8 + 2 * q;
      if (c0 < NMIX) {
        part[(warp * MAXTT + g) * NM + c0] = d[nt][0];
        part[(warp * MAXTT + g) * NM + c0 + 1] = d[nt][1];
        part[(warp * MAXTT + g + 8) * NM + c0] = d[nt][2];
        part[(warp * MAXTT + g + 8) * NM + c0 + 1] = d[nt][3];
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

// One token's gates (SPEC section 2, steps 2-7) from its 24 mixes' dot products (sm, before the
// RMS factor) and its f64 sum of squares: writes pre_out, post_out and comb_out, and returns pre.
// `stamp`: the thread whose gates the instrumented build times.
template <int NIN>
__device__ __forceinline__ void gates24_store(const FusedParams& p, int tok, double ss, const float* sm,
                                              const float* gw, bool stamp, float pre[4]) {
  const float rinv = rms_factor(ss, NIN * p.H, p.rms_eps);
  float m[24], post[4], comb[16];
#pragma unroll
  for (int c = 0; c < 24; ++c) m[c] = rinv * sm[c];
  if (stamp) STAMP_BY(p.timeline, 15);
#ifdef MHC_TIMELINE
  gates4(m, gw, gw + 3, p.hc_eps, p.post_mult, p.iters, pre, post, comb, stamp ? p.timeline : nullptr);
#else
  gates4(m, gw, gw + 3, p.hc_eps, p.post_mult, p.iters, pre, post, comb);
#endif
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    p.pre_out[tok * 4 + j] = pre[j];
    p.post_out[tok * 4 + j] = post[j];
  }
#pragma unroll
  for (int a = 0; a < 16; ++a) p.comb_out[tok * 16 + a] = comb[a];
}

// The per-tile tail, run by the last block of the tile.
// SPLIT (the split tails, seam_tails_body; carried ops with a norm): the block is `part` of
// `parts` and runs the layer-input pass over its slice of H only, part 0 alone the gates; every
// part sums the norm's records itself (the same tree, so the same factors). Without SPLIT the
// whole tile (the code as it was before the split: its schedule is what the tile kernel runs).
template <int PM, int NIN, int NMIX, int CARRIED, bool SPLIT = false>
__device__ void finish_tile(const FusedParams& p, int tile, int part, int parts, float* scratch, const float* gw) {
  const int tid = threadIdx.x, nthr = blockDim.x;
  const bool gates_here = !SPLIT || part == 0;
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
  // per (row, gate or norm) sums that row's f64 sums of squares in record order. More
  // records: the tree in shared memory, rows_batch rows at a time.
  const bool reg_tree = NMIX > 0 && p.rpad <= 128;
  {
    const int ngrp = reg_tree ? (p.rpad + 31) / 32 : 0;  // 1, 2 or 4
    const int nm_items = gates_here ? rows * NM * ngrp : 0;
    float* gsum = scratch;  // [rows][NM][ngrp]
    // One item's records (row, mix, group of 32), all its loads issued at once.
    auto mix_load = [&](int i, float (&v)[32]) {
      const int r = i / (NM * ngrp), rem = i % (NM * ngrp), mix = rem / ngrp, grp = rem % ngrp;
      const int k0 = grp * 32;
      const float* rec = p.rec_m + ((size_t)(row0 + r) * p.nrec + k0) * NM + mix;
#pragma unroll
      for (int k = 0; k < 32; ++k) v[k] = k0 + k < p.nrec ? ld_cg_f32(rec + (size_t)k * NM) : 0.0f;
    };
    // A sums-of-squares item (row r, which: gate 0 or norm 1): the upper levels of its tree
    // (pairwise over the records).
    auto ss_item = [&](int r, int which) {
      s_ss[r][which] = tree_f64_cg(p.rec_ss + (size_t)(row0 + r) * p.nrec * 2 + which, 2, p.nrec);
    };
    // The split tails, where every item fits two a thread with the sums of squares' items on the
    // threads that have one mix item (part 0 at H <= 8192: 384 + 32 items over 256 threads): a
    // thread's loads all in flight together, one round trip before the barrier instead of two.
    const bool one_trip = SPLIT && nm_items + rows * 2 <= 2 * nthr;
    if (one_trip) {
      const int ia = tid, ib = tid + nthr, js = nthr - 1 - tid;
      float va[32];
      if (ia < nm_items) mix_load(ia, va);
      if (ib < nm_items) {
        float vb[32];
        mix_load(ib, vb);
        gsum[ib] = pairwise(vb);
      } else if (js < rows * 2) {
        ss_item(js / 2, js % 2);
      }
      if (ia < nm_items) gsum[ia] = pairwise(va);
    }
    // Otherwise (the tile kernel's tails, wider plans) the items in turns of the block's threads;
    // after one_trip the loop starts past the last item and runs nothing.
    for (int i = one_trip ? nm_items + rows * 2 : tid; i < nm_items + rows * 2; i += nthr) {
      if (i < nm_items) {
        float v[32];
        mix_load(i, v);
        gsum[i] = pairwise(v);
      } else {
        ss_item((i - nm_items) / 2, (i - nm_items) % 2);
      }
    }
    __syncthreads();
    STAMP(p.timeline, 9);
    if (reg_tree && gates_here) {
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
  if (NMIX > 0 && !reg_tree && gates_here) {
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
      float pre[4];
      gates24_store<NIN>(p, tok, s_ss[i][0], s_m[i], gw, i == 0, pre);
#pragma unroll
      for (int j = 0; j < 4; ++j) s_p[i][j] = pre[j];
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
    const int gi = gates_here ? tid - (nthr - WARP) : -1;  // rows <= MAXTT <= WARP
    if (gi >= 0 && gi < rows) gates_row(gi);
    if (gi == 0) STAMP_BY(p.timeline, 11);
  } else {
    if (tid < rows) gates_row(tid);
    __syncthreads();
    STAMP(p.timeline, 11);
  }

  // 3) Layer-input passes.
  const int H8 = p.H / 8;

  // Both passes load in explicit batches: their loads (layer_input, residual_out) may alias
  // their stores for all the compiler knows, so a plain loop pays one memory round trip per
  // iteration; a batch's loads are all issued before its first store.
  if (!CARRIED) {
    // The collapse with this tile's pre, and its norm's sum of squares in the canonical order.
    // A row's tpr threads form warp-rows (lw lanes of one warp; per of them a row); warp-row wr
    // takes the aligned range of span consecutive chunks from wr * span, its qw quads qw
    // consecutive chunks a step (a step's loads coalesced): the chunks' values (lane sums, then
    // quad pairs) are summed over the quads by shuffles (the tree's lowest levels), the steps'
    // sums by a TreeStack, and the warp-rows' by row_tree. Chunks past H are zeros.
    constexpr int NB = 2;  // steps whose loads are in flight together (4 streams x 16 bytes each)
    const int lw = min(tpr, WARP), qw = lw / 4, per = tpr / lw;
    const int chunks = (H8 + 3) / 4;
    int cpad = 1;
    while (cpad < chunks) cpad <<= 1;
    const int span = max(qw, cpad / per);  // a power of two
    const int c0 = (lr / lw) * span;        // the warp-row's first chunk
    // Steps with a chunk inside H (warp-uniform; the rest of the range adds zeros).
    const int inside = min(span, max(0, chunks - c0));  // the warp-row's chunks inside H
    const int steps = inside / qw + (inside % qw != 0);
    const int vbase = 4 * (c0 + (lr % lw) / 4) + (lr % 4);  // step 0's vector
    TreeStack tree;
    for (int s0 = 0; s0 < steps; s0 += NB) {
      uint4 sv[NB][NS];
#pragma unroll
      for (int b = 0; b < NB; ++b) {
        const int v = vbase + 4 * qw * (s0 + b);
        const bool ok = row_ok && s0 + b < steps && v < H8;
#pragma unroll
        for (int j = 0; j < NS; ++j) {
          const bf16_t* ptr = (PM ? p.residual_out : p.residual) + ((size_t)tok * NS + j) * p.H + 8 * v;
          sv[b][j] = ok ? (PM ? ld_cg4(ptr) : __ldg((const uint4*)ptr)) : make_uint4(0, 0, 0, 0);
        }
      }
#pragma unroll
      for (int b = 0; b < NB; ++b) {
        if (s0 + b >= steps) break;  // block-uniform
        const int v = vbase + 4 * qw * (s0 + b);
        const bool ok = row_ok && v < H8;
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
            for (int j = 1; j < NS; ++j) acc = mul_add_rn(acc, s_p[r][j], sf[j][e]);
            c[e] = acc;
          }
        }
        if (has_norm) {
          double sq = 0.0;
          if (ok) {
            const uint4 cb = pack8(c);
            *(uint4*)(p.layer_input + (size_t)tok * p.H + 8 * v) = cb;
            float cr[8];
            unpack8(cb, cr);
            sq = (double)sq_part8(cr, 0.0f);
          }
          // The chunk's value (the quad's pairs), then the step's chunks pairwise over the quads.
          for (int o = 1; o < lw; o <<= 1) sq += __shfl_xor_sync(FULL_MASK, sq, o);
          tree.push(sq, s0 + b);
        } else {
          emit_li(p, tok, 8 * v, c, ok, (v & 3) == 0);
        }
      }
    }
    if (has_norm) {
      const double ss = row_tree(steps > 0 ? tree.finish(steps) : 0.0, tpr, scratch);
      if (lr == 0 && row_ok) s_rinv[r] = rms_factor(ss, p.H, p.norm_eps);
      __syncthreads();
    }
  }
  if (has_norm) {
    // For the carried ops with gates, the gate warp (the block's last) stays out of this pass:
    // its share would otherwise start only after the gates, on the critical path. Each lane
    // takes one vector of 8 channels (consecutive lanes, consecutive vectors: an MXFP8 block of
    // 4 vectors stays in one quad) for every row of the tile: its norm weight loaded once, and
    // every row's load issued before the first is used, so the pass costs a few memory round
    // trips however many rows (one block reads and writes the tile's whole layer input here).
    const int nthr_n = CARRIED && NMIX > 0 && nthr > WARP && gates_here ? nthr - WARP : nthr;
    const int warp = tid / WARP, lane = tid % WARP;
    if (SPLIT) STAMP(p.timeline, 20);  // the split tails: the norm's factors published
    // The part's slice of the row's vectors [v0, v1): whole MXFP8 blocks of 4 vectors.
    int v0 = 0, v1 = H8;
    if (SPLIT) {
      const int per = ((H8 + parts - 1) / parts + 3) & ~3;
      v0 = min(H8, part * per);
      v1 = min(H8, v0 + per);
    }
    if (tid < nthr_n) {
      for (int base = v0 + warp * WARP; base < v1; base += nthr_n) {
        const int v = base + lane;
        const bool vok = v < v1;
        const float4* wp = (const float4*)(p.norm_w + 8 * (vok ? v : 0));
        const float4 w0 = __ldg(wp), w1 = __ldg(wp + 1);
        const float w[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
        // Rows whose loads are in flight together: 8. In the split tails, on the H200 with
        // today's code, 8 beat 4 (attempt 65's choice) by 0.5-2.5 % at 13 of 19 points and lost
        // 1.0-1.4 % at H = 5120, T = 512; 16 lost 1-14 % (PERF_NOTES.md attempt 117); every
        // thread of the block taking (row, vector) pairs lost too (attempt 66).
        constexpr int RB = 8;
        for (int rb = 0; rb < rows; rb += RB) {
          uint4 cv[RB];
          // The entry seam's layer input before the norm is x itself.
          const bf16_t* src = (NIN == 1 ? p.x : p.layer_input) + (size_t)(row0 + rb) * p.H + 8 * v;
#pragma unroll
          for (int r = 0; r < RB; ++r) {
            const bool ok = vok && rb + r < rows;
            const bf16_t* at = src + (size_t)r * p.H;
            cv[r] = !ok ? make_uint4(0, 0, 0, 0) : NIN == 1 ? __ldg((const uint4*)at) : ld_cg4(at);
          }
#pragma unroll
          for (int r = 0; r < RB; ++r) {
            if (rb + r >= rows) break;  // block-uniform
            const float rinv = s_rinv[rb + r];
            float c[8], val[8];
            unpack8(cv[r], c);
#pragma unroll
            for (int e = 0; e < 8; ++e) val[e] = vok ? __fmul_rn(__fmul_rn(c[e], rinv), w[e]) : 0.0f;
            // The split tails (thread 0): a batch's first row used, i.e. its loads landed.
            if (SPLIT && r == 0) STAMP(p.timeline, rb == 0 ? 21 : 23);
            emit_li(p, row0 + rb + r, 8 * v, val, vok, (v & 3) == 0);
          }
          if (SPLIT && rb == 0) STAMP(p.timeline, 22);  // the first batch's stores issued
        }
      }
    }
  }
  STAMP(p.timeline, 12);
}

// Stages the group's slice of fn in shared memory by asynchronous copies (not waited for here):
// one fixed float4 column per thread (row4 and the block size are powers of two, the block at
// least 4 rows wide), rows stepping by the block. Staged row r = mrow * NIN + j is fn row mrow,
// stream j: fn + r * H in global memory, so the addresses are linear in r. Columns swizzled by
// (mrow & 1) (load_fn_step's SWZ layout); rows past NMIX and channels past H are zeros.
template <int NIN, int NMIX>
__device__ __forceinline__ void stage_fn_slice(const FusedParams& p, float* sfn, int grp) {
  typedef Shape<NIN, NMIX> S;
  const int tid = threadIdx.x;
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

// A tile's records from its warps' partials (put_partials): the tree over the block's W chunks
// (the levels below W), one record per token and mix, and the same for the two sums of squares.
// Threads tid = 0..nthr-1 share the work.
template <int NMIX>
__device__ __forceinline__ void write_records(const FusedParams& p, const float* part, const double* sss, int row0,
                                              int grp, int tid, int nthr) {
  constexpr int NM = NMIX > 0 ? NMIX : 1;
  const int rows = min(p.tt, p.T - row0);
  if (NMIX > 0) {
    for (int i = tid; i < rows * NM; i += nthr) {
      const int r = i / NM, mix = i % NM;
      float v[8];
#pragma unroll
      for (int w = 0; w < 8; ++w) v[w] = w < p.W ? part[(w * MAXTT + r) * NM + mix] : 0.0f;
      if (p.W > 1) { v[0] += v[1]; v[2] += v[3]; v[4] += v[5]; v[6] += v[7]; }
      if (p.W > 2) { v[0] += v[2]; v[4] += v[6]; }
      if (p.W > 4) { v[0] += v[4]; }
      p.rec_m[((size_t)(row0 + r) * p.nrec + grp) * NM + mix] = v[0];
    }
  }
  // The sums of squares' tree over the block's W chunks, as the mixes' above: one thread per
  // (row, gate or norm).
  for (int i = tid; i < rows * 2; i += nthr) {
    double v[8];
#pragma unroll
    for (int w = 0; w < 8; ++w) v[w] = w < p.W ? sss[(w * MAXTT + i / 2) * 2 + i % 2] : 0.0;
    p.rec_ss[((size_t)(row0 + i / 2) * p.nrec + grp) * 2 + i % 2] = tree8_f64(v, p.W);
  }
}

// The gates' weights (scale, then base) into shared memory `gw` (3 + NMIX floats), one thread
// each; the caller's barriers order them before the tail reads them.
template <int NMIX>
__device__ __forceinline__ void stage_gate_weights(const FusedParams& p, float* gw, int tid) {
  if (NMIX > 0) {
    constexpr int NSC = NMIX == 24 ? 3 : 1;
    if (tid < NSC) gw[tid] = p.scale[tid];
    else if (tid >= 3 && tid < 3 + NMIX) gw[tid] = p.base[tid - 3];
  }
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
  stage_gate_weights<NMIX>(p, s_gw, tid);

  if (p.mode == 2) {
    // Finish only: one tile per block (the tiles were written by the preceding launch). The
    // next kernel may start placing its blocks now; they wait for this grid to complete.
    pdl_trigger();
    pdl_wait();
    STAMP(p.timeline, 2);
    for (int tile = blockIdx.x; tile < p.tiles; tile += gridDim.x) {
      __syncthreads();
      finish_tile<PM, NIN, NMIX, CARRIED>(p, tile, 0, 1, (float*)smem, s_gw);
    }
    STAMP(p.timeline, 13);
    return;
  }

  // Stage the group's slice of fn with asynchronous copies, all in flight at once; they land
  // while the first tile's elementwise phase runs (waited for before its projection).
  if (NMIX > 0) stage_fn_slice<NIN, NMIX>(p, sfn, grp);
  STAMP(p.timeline, 1);
  // fn is a weight: it was read above, possibly while the previous kernel of the stream still
  // runs (programmatic dependent launch). Everything below reads or writes activations.
  pdl_wait();
  STAMP(p.timeline, 2);

  for (int tile = blockIdx.y; tile < p.tiles; tile += gridDim.y) {
    __syncthreads();  // the previous tile's readers of scoef/scratch are done; sfn is staged
    const int row0 = tile * p.tt;
    stage_coefs<PM, NIN, CARRIED>(p, scoef, row0);
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
    // vectors: r' (post_map), r, or x (entry). Phase 2: the carried collapse, parked in
    // layer_input (bf16) for the tail's RMSNorm when there is a norm.
    uint4 av[2][NIN], cb[2];
    double ssn[2] = {0.0, 0.0};
    {
      uint4 xv[2], rv[2][NIN];
      ew_load<PM, NIN>(p, tok, ok, h, xv, rv);
      ew_compute<PM, NIN, CARRIED, 1>(p, scoef, g, q, tok, ok, h, true, xv, rv, av, cb, ssn);
    }

    STAMP(p.timeline, 4);
    if (!need_finish) continue;

    // This chunk's projection on tensor cores, from zero, in the canonical order.
    float d[S::NT][4];
    if (NMIX > 0) {
      // fn has landed (a no-op after the first tile).
      cp_async_wait_all();
      __syncthreads();
      STAMP(p.timeline, 5);
    }
    float ssp[2];
    project_chunk<NIN, NMIX, true>(sfn, p.W * 8, warp, g, q, chunk_ok, av, d, ssp);
    STAMP(p.timeline, 14);
    // Sums of squares for the gates' RMS factor, then quad sums (f64, see the header).
    double ssg[2];
    quad_sums<NIN, NMIX>(av, ssp, ssg, ssn, true);
    STAMP(p.timeline, 6);
    // Partials to shared memory: part[warp][row][mix] then ss[warp][row][2]. They overwrite the
    // staged coefficients, so every warp must be past its elementwise phase.
    __syncthreads();
    const int nw = blockDim.x / WARP;
    float* part = scratch;
    double* sss = (double*)(scratch + nw * MAXTT * S::NM);
    if (warp < p.W) put_partials<NMIX>(part, sss, warp, g, d, ssg, ssn);
    __syncthreads();
    write_records<NMIX>(p, part, sss, row0, grp, tid, blockDim.x);
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
      finish_tile<PM, NIN, NMIX, CARRIED>(p, tile, 0, 1, scratch, s_gw);
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

// The tails launch split over `p.parts` blocks a tile (mode 2 of a two-launch plan, carried ops
// with a norm: the RMSNorm pass does not wait for the gates): block b runs part b % parts of tile
// b / parts (finish_tile: its slice of H, part 0 also the gates). Its own kernel, so that the tile
// kernel's code (and its one-block-a-tile tails) stays as it was: that code's schedule moved the
// tails by 1-3 us when the split lived in it (PERF_NOTES.md, attempt 62).
template <int PM, int NIN, int NMIX, int CARRIED>
__device__ void seam_tails_body(const FusedParams& p) {
  static_assert(CARRIED, "the split tails: carried ops only");
  extern __shared__ __align__(16) unsigned char smem[];
  const int tid = threadIdx.x;
  __shared__ float s_gw[3 + (NMIX > 0 ? NMIX : 1)];
  STAMP(p.timeline, 0);
  stage_gate_weights<NMIX>(p, s_gw, tid);
  pdl_trigger();
  pdl_wait();
  STAMP(p.timeline, 2);
  const int parts = p.parts > 1 ? p.parts : 1;
  for (int b = blockIdx.x; b < p.tiles * parts; b += gridDim.x) {
    __syncthreads();
    finish_tile<PM, NIN, NMIX, CARRIED, true>(p, b / parts, b % parts, parts, (float*)smem, s_gw);
  }
  STAMP(p.timeline, 13);
}

#define SEAM_TAILS_KERNEL(name, PM, NIN, NMIX)                                     \
  extern "C" __global__ void __launch_bounds__(256, 2) name(const FusedParams p) { \
    seam_tails_body<PM, NIN, NMIX, 1>(p);                                          \
  }

SEAM_TAILS_KERNEL(mhc_seam_tails, 1, 4, 24)
SEAM_TAILS_KERNEL(mhc_pre_delayed_tails, 0, 4, 24)
SEAM_TAILS_KERNEL(mhc_entry_tails, 0, 1, 24)
SEAM_TAILS_KERNEL(mhc_final_tails, 0, 4, 0)

// ---- The stream variant of the tile launch (large T, mode 1) ----
//
// The tile kernel at large T runs two blocks of 8 warps a multiprocessor, each with its own slice
// of fn in shared memory, and every tile starts with two dependent global round trips (the
// coefficients, then x and r) and four block barriers (PERF_NOTES.md, attempt 6 and the ncu of
// abd435c). Here one block of two halves (8 warps each, 256 threads) shares one slice: half hf
// walks the tiles blockIdx.y * 2 + hf + k * 2 * gridDim.y (round-robin: halves that run ahead
// claiming the last round's tiles from a counter lost 1.8-3.3 % to it once it copied whole rows,
// PERF_NOTES.md attempt 126). The slice's freed shared memory holds each half's next tile: its
// warps copy x and r (16 rows, x and four streams) by whole rows (st_issue_rows) and a few threads
// the tile's coefficients, by cp.async, while the current tile computes. A tile then waits for its
// copies (issued a tile earlier) and syncs its half three times (named barriers): once so that
// the copies and the coefficients have landed and the previous tile's record reads are done,
// once before the next tile's copies overwrite the stage, once between the warps' partials and
// the records. The arithmetic and
// the records are the tile kernel's (ew_compute, project_chunk, quad_sums, put_partials,
// write_records), so are the bits; the tails launch (mode 2 of the tile kernel) finishes them.
// W = 8 and tiles of 16 tokens (the plan's stream shape); mode 1 only. The seam (carried pre:
// the collapse parked for the tails' norm) and the V4 seam (no collapse here: its tails form it
// from r' once the gates are known).
#define ST_NV 10                                   // stage blocks a tile: 2 row halves x (x, 4 streams)
#define ST_THREADS 256                             // threads of a half
// The stage (st_issue_rows): a block (one row half rr of one
// tensor: 8 rows x 32 columns of 16 bytes) keeps its rows 36 slots apart, so that the copies write
// a row's 32 columns side by side and the computing lanes (rows g, g + 1 in one phase) read 576
// bytes apart, in different banks (copied into the computing threads' own slots instead, 8-way bank
// conflicts on the copies, the A/B lost 5-12 %).
#define ST_ROW 36                                   // 16-byte slots a staged row
#define ST_BLK (8 * ST_ROW)                         // slots a stage block (rr, tensor)
#define ST_STAGE_BYTES (ST_NV * ST_BLK * 16)        // 46080
#define ST_COEF_BYTES (MAXTT * COEF * 4)           // 1536, two of them (tile parity)
#define ST_PART_BYTES (8 * MAXTT * 24 * 4 + 8 * MAXTT * 2 * 8)  // 14336: partials, sums of squares
#define ST_HALF_BYTES (ST_STAGE_BYTES + 2 * ST_COEF_BYTES + ST_PART_BYTES)

// A named barrier of `count` threads (barrier 0 is __syncthreads').
__device__ __forceinline__ void bar_named(int id, int count) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}

// The tile's coefficients for st_issue_rows: with htid < 96 one 16-byte piece
// ([row][post 4, comb 16, pre 4], zeros past T) into `scoef`.
template <int CARRIED>
__device__ __forceinline__ void st_issue_coefs(const FusedParams& p, int row0, float* scoef, int htid) {
  if (htid < MAXTT * 6) {
    const int r = htid / 6, c = htid % 6, tok = row0 + r;
    const bool ok = tok < p.T && (CARRIED || c < 5);  // the V4 seam has no carried pre
    const float* src = c == 0 ? p.post + (size_t)tok * 4 : c < 5 ? p.comb + (size_t)tok * 16 + (c - 1) * 4
                                                                 : p.pre_in + (size_t)tok * 4;
    cp_async16(scoef + r * COEF + c * 4, ok ? (const void*)src : (const void*)p.post, ok ? 16 : 0);
  }
}

// This thread's share of the copies of tile `tile` (nothing past the last tile), dealt so that
// each warp instruction reads one tensor's whole row of the group (32 lanes x 16 bytes: the
// group's 256 channels), not 8 rows x 64 bytes as the computing lanes (g, q) own them.
// Warp w of the half copies rows 2w and 2w + 1 (adjacent tokens); its lane (g, q) the 16 bytes of
// those rows that lane (row % 8, q) of warp g computes. They land in the half's stage blocks
// (rr * 5 + (0 for x, 1 + i for stream i) for row half rr; row g of a block at g * ST_ROW slots,
// its 32 columns side by side), the coefficients by st_issue_coefs. A thread thus writes other
// threads' slots: the caller separates a tile's reads of the stage from the next tile's copies by
// the half's barrier. Why: the seam's traffic with 64-byte row segments a warp reached 79-89 % of
// the copy bandwidth at T = 16384, with 128 bytes or more 99-102 %, and 64-byte loads cost more
// than 64-byte stores (scripts/micro/seam-traffic.cu, PERF_NOTES.md attempts 121 and 124). Rows 2w
// and 2w + 1 measured 0.4-1.6 % faster than rows w and w + 8 at T >= 2048 (attempt 124).
template <int NIN, int CARRIED>
__device__ __forceinline__ void st_issue_rows(const FusedParams& p, int tile, uint4* stage, float* scoef, int htid,
                                              int warp, int g, int q, int h) {
  if (tile >= p.tiles) return;
  const int row0 = tile * MAXTT;
  const int H = p.H;
  // Copying lane (g, q) of warp `warp` takes the 16-byte column of computing lane (g', q) = (warp,
  // q) of warp g: its channels are those of chunk grp * 8 + g, i.e. h moved by g - warp chunks.
  const int hc = h + (g - warp) * CHUNK;
  const bool chunk_ok = hc - 8 * q < H;
  // Rows 2 warp and 2 warp + 1, adjacent tokens in the same row half (rr = warp / 4). Where a row
  // reads nothing (past T, or a chunk past H) its copies read 0 bytes from a valid address: the
  // first row's, or row 0's channel 0. One address a row and tensor (row_streams).
  const int tok = row0 + 2 * warp;
  const bool ok0 = chunk_ok && tok < p.T, ok1 = ok0 && tok + 1 < p.T;
  const size_t tk = ok0 ? (size_t)tok : 0;
  const int hh = ok0 ? hc : 0;
  const bf16_t* xs = p.x + (tk * H + hh);
  const bf16_t* rs = row_streams(p.residual, tk, H, hh);
  // The first row's slot of this column in the stage block of its row half.
  uint4* dst = stage + (warp / 4) * 5 * ST_BLK + (2 * warp % 8) * ST_ROW + 4 * g + q;
#pragma unroll
  for (int r2 = 0; r2 < 2; ++r2) {
    const bool ok = r2 ? ok1 : ok0;
    const int bytes = ok ? 16 : 0;
    const int dx = ok1 ? r2 * H : 0, dr = ok1 ? r2 * NS * H : 0;  // the second row: the next token
    cp_async16(dst + r2 * ST_ROW, xs + dx, bytes);
#pragma unroll
    for (int i = 0; i < NIN; ++i) cp_async16(dst + r2 * ST_ROW + (1 + i) * ST_BLK, rs + dr + i * H, bytes);
  }
  st_issue_coefs<CARRIED>(p, row0, scoef, htid);
  cp_async_commit();
}

template <int NIN, int NMIX, int CARRIED>
__device__ void seam_stream_body(const FusedParams& p) {
  static_assert(NIN == NS && NMIX == 24, "the seams with post_map and gates");
  typedef Shape<NIN, NMIX> S;
  // Dynamic shared memory only: a static `__shared__` variable here moves this area to 16 mod
  // 128 bytes, which cost the launch 10-16 % at every T and H on the H200 (PERF_NOTES.md attempt
  // 119); with static data, align this area to 128 bytes (every extern declaration of `smem`).
  // tests/kernels_compile.rs checks that the stream kernels' static part is whole 128-byte lines.
  extern __shared__ __align__(16) unsigned char smem[];
  const int tid = threadIdx.x;
  const int hf = tid / ST_THREADS, htid = tid % ST_THREADS;
  const int warp = htid / WARP, lane = tid % WARP;
  const int g = lane >> 2, q = lane & 3;
  const int grp = blockIdx.x;
  const int chunk = grp * p.W + warp;
  float* sfn = (float*)smem;
  // The half's area (W = 8: fn's slice is a fixed size), addressed afresh where used: few
  // registers stay live through the projection (the kernel must fit 128).
  constexpr int FNB = NIN * S::NMIXP * 8 * CHUNK * 4;
  auto hb = [&]() { return smem + FNB + (threadIdx.x / ST_THREADS) * ST_HALF_BYTES; };
  auto stage = [&]() { return (uint4*)hb(); };
  auto scoef_at = [&](int par) { return (float*)(hb() + ST_STAGE_BYTES + par * ST_COEF_BYTES); };
  auto part = [&]() { return (float*)(hb() + ST_STAGE_BYTES + 2 * ST_COEF_BYTES); };
  auto sss = [&]() { return (double*)(hb() + ST_STAGE_BYTES + 2 * ST_COEF_BYTES + 8 * MAXTT * S::NM * 4); };
  const bool chunk_ok = chunk * CHUNK < p.H;
  const int h = chunk * CHUNK + 8 * q;
  const int stride = 2 * gridDim.y;
  STAMP(p.timeline, 0);
  STAMP_SMID(p.timeline);

  stage_fn_slice<NIN, NMIX>(p, sfn, grp);
  cp_async_commit();
  STAMP(p.timeline, 1);
  pdl_wait();  // everything below reads or writes activations
  STAMP(p.timeline, 2);
  // Tiles: half hf takes 2 y + hf, then every stride-th tile.
  int tile = blockIdx.y * 2 + hf;
  st_issue_rows<NIN, CARRIED>(p, tile, stage(), scoef_at(0), htid, warp, g, q, h);
  cp_async_wait_all();
  __syncthreads();  // the whole slice of fn (copied by both halves) has landed
  for (int it = 0; tile < p.tiles; ++it) {
    cp_async_wait_all();        // this thread's copies of the tile
    // The half's: every copy into this half's stage and its coefficients landed; the last tile's
    // records read.
    bar_named(1 + hf, ST_THREADS);
    STAMP(p.timeline, 3);
    const int row0 = tile * MAXTT;
    int tok[2];
    bool ok[2];
    tok[0] = row0 + g;
    tok[1] = row0 + g + 8;
    ok[0] = chunk_ok && tok[0] < p.T;
    ok[1] = chunk_ok && tok[1] < p.T;
    uint4 av[2][NIN], cb[2];
    double ssn[2] = {0.0, 0.0};
    {
      uint4 xv[2], rv[2][NIN];
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        xv[rr] = stage()[(rr * 5) * ST_BLK + g * ST_ROW + 4 * warp + q];
#pragma unroll
        for (int i = 0; i < NIN; ++i) rv[rr][i] = stage()[(rr * 5 + 1 + i) * ST_BLK + g * ST_ROW + 4 * warp + q];
      }
      ew_compute<1, NIN, CARRIED, 2>(p, scoef_at(it & 1), g, q, tok, ok, h, true, xv, rv, av, cb, ssn);
    }
    // The next tile's copies, once every thread of the half has read its slots of this tile
    // (st_issue_rows writes other threads'); the other coefficient buffer was last read before
    // this tile's first barrier.
    bar_named(1 + hf, ST_THREADS);
    st_issue_rows<NIN, CARRIED>(p, tile + stride, stage(), scoef_at((it + 1) & 1), htid, warp, g, q, h);
    STAMP(p.timeline, 4);
    float d[S::NT][4];
    float ssp[2];
    project_chunk<NIN, NMIX, true>(sfn, 8 * 8 /* W = 8: a constant stride */, warp, g, q, chunk_ok, av, d, ssp);
    double ssg[2];
    quad_sums<NIN, NMIX>(av, ssp, ssg, ssn, true);
    STAMP(p.timeline, 6);
    put_partials<NMIX>(part(), sss(), warp, g, d, ssg, ssn);
    bar_named(1 + hf, ST_THREADS);
    write_records<NMIX>(p, part(), sss(), row0, grp, htid, ST_THREADS);
    STAMP(p.timeline, 7);
    if (it < 3) STAMP(p.timeline, 20 + it);  // the first three tiles' records (raw timeline)
    if (tile + stride >= p.tiles) pdl_trigger();
    tile += stride;
  }
  STAMP(p.timeline, 13);
}

// One block of two halves per multiprocessor: at most 128 registers per thread.
#define SEAM_STREAM_KERNEL(name, CARRIED)                                                      \
  extern "C" __global__ void __launch_bounds__(2 * ST_THREADS, 1) name(const FusedParams p) { \
    seam_stream_body<4, 24, CARRIED>(p);                                                      \
  }
SEAM_STREAM_KERNEL(mhc_seam_st, 1)
SEAM_STREAM_KERNEL(mhc_seam_v4_st, 0)

// ---- The cluster kernel: small T, carried ops with gates ----
//
// One cluster of CL blocks per tile of up to 16 tokens. Block `rank` owns W consecutive chunks
// (one warp each, every phase as in the tile kernel: the same loads, post_map, collapse and MMA
// sequence, so the same partials) and has one more warp, the gate warp. Block rank finishes the
// tile's rows rank, rank + CL, ...: every warp stores its chunk's partials of a row (the tree's
// leaf) and its two sums of squares straight into the shared memory of the row's block, by
// st.async counted on the receiving block's mbarrier; each block waits on its own mbarrier, and
// then has what it needs in its own shared memory. The row's block sums the norm's leaves by the
// canonical tree and sends the norm's factor back to every block (a second mbarrier), which
// scales its chunks of the row with it. No records in global memory, no fence and atomic, no
// finisher loading them back from L2, and no cluster-wide barrier after the one that publishes
// the mbarriers at the start (a release arrive there would wait for every global store:
// MEMBAR.GPU). The tree over chunks is the tile kernel's (pairwise over the chunk index padded to
// a power of two: groups of CL_GROUP leaves, then the groups), for the mixes and both sums of
// squares, so the two kernels give the same bits and a plan may pick either by T. The collapse
// never leaves registers before its RMSNorm: each block scales its own chunks while the gate
// warps run the Sinkhorn. The seam, seam_v4, pre_delayed and entry ops.

#define CL_GROUP 16  // leaves one thread sums (the plan needs more than CL_GROUP / 2 chunks)
#define CL_MAXGRP 32 // groups of leaves at most (the plan needs at most 512 chunks)
#define CL_MAX 16    // blocks per cluster at most (the non-portable limit of sm_90)
#define CL_WARPS 16  // warps per block at most (plan.rs: CL_WARPS)
#define CL_WARPS2 11 // the same for tiles of 32 tokens (MT = 2: more registers a thread)

// The slot of chunk c's gate sum of squares in its row's lss (the row padded to whole groups):
// chunk CL_GROUP g + l at CL_GROUP g + (l ^ (g mod CL_GROUP)), so that the lanes that each sum
// one group in the leaf pass read in different bank pairs (PERF_NOTES attempt 153: unswizzled,
// the 10 lanes at H = 5120 met in one, and that item finished the pass last).
static_assert((CL_GROUP & (CL_GROUP - 1)) == 0, "lss_slot: CL_GROUP a power of two");
__device__ __forceinline__ int lss_slot(int c) { return c ^ ((int)((unsigned)c / CL_GROUP) & (CL_GROUP - 1)); }

// MT: groups of 16 rows (the MMA's M) a tile has, 1 or 2. With MT = 2 (the _cl2 variants) a
// cluster takes a tile of 32 tokens: every chunk warp runs both groups' elementwise work and
// projection (each step's fn serves both), and each block finishes up to 2 rows (the plan takes
// clusters of 16 blocks), so twice the tokens fit one wave of clusters (T <= 224 on the H200).
//
// CPL > 0 (the _ch variants, the seam in tiles of at most CPL = 1, 2 or 4 tokens): the
// elementwise phase with lanes by channels (ewc_compute), the same bits.
//
// CARRIED = 0 (the V4 seam, the _v4 kernels): the collapse takes this seam's own pre, so it
// waits for the gates' sigmoids. The rows' blocks send their rows' pre to every block as soon as
// it is final, before the Sinkhorn (a cluster round on s_pbar); each chunk warp then forms the
// collapse from r' (or r) still in registers, in the tile kernel finisher's order (the same
// bits), and sends its norm leaves to the rows' blocks (s_lbar), whose factors come back on
// s_nbar as for the carried ops.
template <int PM, int NIN, bool PREP, int MT, int CPL = 0, int CARRIED = 1>
__device__ void seam_cluster_body(const FusedParams& p) {
  constexpr int NMIX = 24;
  static_assert(CPL == 0 || (MT == 1 && PM == 1 && NIN == NS && (CPL == 1 || CPL == 2 || CPL == 4)),
                "lanes by channels: the seam in tiles of at most 4 tokens");
  static_assert(CARRIED || (MT == 1 && CPL == 0 && NIN == NS), "the V4 seam: tiles of 16 tokens, four streams");
  typedef Shape<NIN, NMIX> S;
  constexpr int NM = S::NM;
  // The gates' sums of squares in the projection's steps (project_step's SS) in the lanes-by-
  // channels kernels only (T <= 4, one row a lane); the others take them in quad_sums, the same
  // adds in the same order (PERF_NOTES.md attempt 108: with it the tiles of 16 ran 1 % slower at
  // T = 64, and the unprepared and pre_delayed kernels spilled).
  constexpr bool SSI = CPL > 0;
  constexpr int TT = MT * MAXTT;              // tokens per tile at most
  constexpr int MAXOWN = MT == 1 ? MAXTT : 2;  // rows a block finishes at most (plan.rs)
  // PS: fn's TF32 split done before the PDL wait for the block's first p.presplit chunk warps
  // (presplit_expand; plan.rs sets it where the doubled slots fit). Kernels whose projection is
  // swapped or not by a runtime branch (the V4 seam's TR_RT) are left out, and so are the
  // lanes-by-channels variants (CPL > 0): there it measured slower at every H, its code alone
  // +0.1 us with nothing presplit (PERF_NOTES.md attempt 162).
  constexpr bool PS = PREP && MT == 1 && CPL == 0 && CARRIED;
  const int NPS = PS ? p.presplit : 0;
  extern __shared__ __align__(16) unsigned char smem[];
  const int tid = threadIdx.x;
  const int warp = tid / WARP, lane = tid % WARP;
  const int g = lane >> 2, q = lane & 3;
  const int W = p.W, CL = (int)gridDim.x;
  const int rank = (int)cluster_rank();
  const int chunks = (p.H + CHUNK - 1) / CHUNK;
  int pw = 1;
  while (pw < chunks) pw <<= 1;
  const int ngrp = pw / CL_GROUP;
  // Groups that hold a chunk (the rest are padding, zeros: the upper tree adds literal zeros).
  const int ngrp_used = (chunks + CL_GROUP - 1) / CL_GROUP;
  const int chunk = rank * W + warp;
  const bool chunk_ok = warp < W && chunk * CHUNK < p.H;
  const bool has_norm = p.norm_w != nullptr;
  const int row0 = blockIdx.y * p.tt;
  const int rows = min(p.tt, p.T - row0);
  // Rows this block finishes: rank, rank + CL, ... (at most OWN).
  const int own = rows > rank ? (rows - 1 - rank) / CL + 1 : 0;
  const int OWN = (p.tt + CL - 1) / CL;

  // Dynamic shared memory (sized in plan.rs): [fn slice: NIN * NMIX rows of rstride float4, or
  // with PREP the block's chunks of the prepared fn][leaves: OWN x chunks x NM f32][lss: OWN x
  // lssrow f64, swizzled][wss: W x TT f64][lnss: OWN x chunks f64]. The upper tree's buffers
  // reuse fn's space once every warp of the block is past its projection: [gss: OWN x ngrp
  // f64][gsum: OWN x ngrp x NM f32].
  const int rstride = W * 8 + 1;  // the block's W chunks, padded by one float4 (bank offset)
  // PREP: the block's chunks of the prepared fn, [W][NIN][2 halves][FNP_STEP_BYTES].
  // PS: the first NPS chunks' slots twice a chunk's size (chunk c's at (c + min(c, NPS)) chunks).
  const size_t fn_bytes = PREP ? (size_t)(W + NPS) * NIN * FNP_STREAM_BYTES : (size_t)NIN * NMIX * rstride * 16;
  const size_t up_bytes = (size_t)OWN * ngrp * (8 + NM * 4);
  float* sfn = (float*)smem;
  float* leaves = (float*)(smem + (fn_bytes > up_bytes ? fn_bytes : up_bytes));
  const int lssrow = ngrp_used * CL_GROUP;  // a row of lss: whole groups (lss_slot)
  double* lss = (double*)(leaves + (size_t)OWN * chunks * NM);
  double* wss = lss + OWN * lssrow;  // a warp's norm sums of squares of its rows (tiles of 32)
  double* lnss = wss + W * TT;       // the norm's leaves of the rows finished here
  double* gss = (double*)smem;
  float* gsum = (float*)(gss + OWN * ngrp);
  __shared__ float s_gw[3 + NMIX];
  __shared__ float s_coef[TT * COEF];
  __shared__ float s_rinv[TT];          // the norm's factor per row, from the row's block
  __shared__ float s_m[MAXOWN][NM];     // per row finished here (index o)
  __shared__ float4 s_nw[CL_WARPS * CHUNK / 4];  // the norm weight of the block's chunks
  __shared__ float s_grinv[MAXOWN];     // the gates' RMS factor per row finished here (MT = 1)
  __shared__ double s_ssg[MAXOWN];      // the gates' sum of squares per row finished here (MT = 2)
  __shared__ unsigned long long s_fnbar;   // fn's bulk copies (PS: but the presplit chunks')
  __shared__ unsigned long long s_psbar[PS ? CL_WARPS : 1];  // PS: presplit chunk c's bulk copy
  __shared__ unsigned long long s_redbar;  // the other blocks' stores of leaves and sums
  __shared__ unsigned long long s_nbar;    // the norm's factors from the rows' blocks
  __shared__ float s_pre[CARRIED ? 1 : MAXTT][4];  // V4: this seam's pre of the tile's rows
  __shared__ unsigned long long s_pbar;    // V4: the rows' pre from their blocks
  __shared__ unsigned long long s_lbar;    // V4: the norm's leaves of the rows finished here

  STAMP(p.timeline, 0);
  if (tid < 3) s_gw[tid] = p.scale[tid];
  else if (tid < 3 + NMIX) s_gw[tid] = p.base[tid - 3];
  // The block's slice of fn: one bulk copy per row r = mix * NIN + stream (its channels of the
  // block's chunks that exist; warps past H never read theirs), or with PREP one per chunk of
  // the prepared fn; issued by the first warp.
  {
    const int h0 = rank * W * CHUNK;
    const int cols = max(0, min(W * CHUNK, p.H - h0));  // a multiple of CHUNK
    // PS: the presplit chunks that exist here, each on its own mbarrier, so that its warp's
    // rewrite starts when its own chunk has landed rather than the block's whole fn.
    const int nps = PS ? min(NPS, cols / CHUNK) : 0;
    const u32 fn_tx = PREP ? (u32)((cols / CHUNK - nps) * NIN * FNP_STREAM_BYTES) : (u32)(NIN * NMIX * cols * 4);
    if (warp == 0) {
      if (lane == 0) {
        mbar_init(&s_fnbar, 1);
        for (int c = 0; c < nps; ++c) mbar_init(&s_psbar[c], 1);
        mbar_init(&s_redbar, 1);
        mbar_init(&s_nbar, 1);
        if (!CARRIED) {
          mbar_init(&s_pbar, 1);
          mbar_init(&s_lbar, 1);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        mbar_expect_tx(&s_fnbar, fn_tx);
        for (int c = 0; c < nps; ++c) mbar_expect_tx(&s_psbar[c], (u32)(NIN * FNP_STREAM_BYTES));
        // What the other blocks will store here: every chunk's leaf (NM f32), gate sum of squares
        // (f64) and norm sum of squares (f64) of each row finished here; and every row's norm
        // factor (f32) from the row's block. V4: the norm's leaves on their own mbarrier, and
        // every row's pre (4 f32) from the row's block.
        mbar_expect_tx(&s_redbar, (u32)(own * chunks * (NM * 4 + 8 + (CARRIED && has_norm ? 8 : 0))));
        if (has_norm) mbar_expect_tx(&s_nbar, (u32)(rows * 4));
        if (!CARRIED) {
          mbar_expect_tx(&s_pbar, (u32)(rows * 16));
          if (has_norm) mbar_expect_tx(&s_lbar, (u32)(own * chunks * 8));
        }
      }
      __syncwarp();
      if (PREP) {
        const u32 cb = NIN * FNP_STREAM_BYTES;
        // (PS: the first NPS chunks into the upper half of their doubled slots.)
        if (lane < cols / CHUNK)
          bulk_copy(smem + (size_t)(lane + (PS ? min(lane + 1, NPS) : 0)) * cb,
                    (const unsigned char*)p.fn_split + (size_t)(rank * W + lane) * cb, cb,
                    lane < nps ? &s_psbar[lane] : &s_fnbar);
      } else if (cols > 0) {
        for (int r = lane; r < NIN * NMIX; r += WARP)
          bulk_copy((float4*)sfn + (size_t)r * rstride, p.fn + (size_t)r * p.H + h0, (u32)cols * 4, &s_fnbar);
      }
    }
  }
  // The mbarriers are initialized: the other blocks may store into this one once the cluster
  // barrier's wait returns (below, before the first such store).
  cluster_arrive_relaxed();
  // The norm weight of the block's channels (a weight too: read before the wait), in shared
  // memory rather than registers held through the projection.
  const int h = chunk * CHUNK + 8 * q;
  if (has_norm) {
    const int h0 = rank * W * CHUNK;
    for (int i = tid; i < W * CHUNK / 4; i += blockDim.x)
      s_nw[i] = h0 + 4 * i < p.H ? __ldg((const float4*)(p.norm_w + h0) + i) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  // The parameters that the reduction, the gates and the norm read first, read here once (before
  // the wait, off the path): their first reads there stalled on constant-cache misses (ncu at
  // T = 1; PERF_NOTES attempt 148: -1 to -3 % at T <= 12). Every warp's first lane reads them
  // (in case the multiprocessor's quarters cache constants apart) and folds them into a volatile
  // store of its own, which keeps the reads. Only in the lanes-by-channels kernels (T <= 12): in
  // the others the same code measured -3 to +7.5 % by T and H, its loss at T = 112 staying even
  // with the reads turned off there (not explained yet).
  if constexpr (CPL > 0) {
    __shared__ volatile u32 s_warm[CL_WARPS];
    if (lane == 0)
      s_warm[warp] = blockDim.x ^ __float_as_uint(p.rms_eps) ^ __float_as_uint(p.hc_eps) ^
                     __float_as_uint(p.norm_eps) ^ __float_as_uint(p.post_mult) ^ (u32)p.iters ^
                     (u32)(size_t)p.pre_out ^ (u32)(size_t)p.post_out ^ (u32)(size_t)p.comb_out ^
                     (u32)(size_t)p.layer_input ^ (u32)(size_t)p.fp8_q;
  }
  // PS: the first NPS chunk warps wait for their fn (in the PDL chain it lands while the previous
  // seam still runs) and rewrite it as the MMA's hi and lo fragments. The barrier makes warp 0's
  // initialization of s_psbar visible to the others first.
  if (PS && NPS > 0) {
    __syncthreads();
    if (warp < NPS && chunk_ok) {
      mbar_wait(&s_psbar[warp], 0);
      presplit_expand<NIN>(smem + (size_t)2 * warp * NIN * FNP_STREAM_BYTES, lane);
    }
  }
  STAMP(p.timeline, 1);
  pdl_wait();
  STAMP(p.timeline, 2);

  // A lane's rows: g + 8 * rr + 16 * m of the tile.
  int tok[MT][2];
  bool ok[MT][2];
#pragma unroll
  for (int m = 0; m < MT; ++m) {
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const int r = g + 8 * rr + MAXTT * m;
      tok[m][rr] = row0 + r;
      ok[m][rr] = chunk_ok && r < p.tt && tok[m][rr] < p.T;
    }
  }
  uint4 av[MT][2][NIN], cb[MT][2];
  // The warps' norm sums of squares of their rows: kept in registers through the projection and
  // sent after it, or (EARLY, tiles of 32, short of registers) stored before it.
  constexpr bool EARLY = MT == 2;
  // Tiles of at most 4 tokens (lanes by channels), and the V4 seam's tiles of 16 tokens whose
  // rows are 8 or fewer (TR_RT: a block-uniform branch): the projection with its operands swapped
  // (project_step, TR), 3 MMAs a step instead of 6, the same products and chains. The V4.1 seam's
  // tiles of 16 (T > 28 with PDL) do without: the branch measured +1 % at T = 32-100 there
  // (PERF_NOTES attempt 70), against -0.7 to -2 % for the V4 seam at T = 1-8.
  constexpr bool TR = CPL > 0;
  constexpr bool TR_RT = CPL == 0 && MT == 1 && !CARRIED;
  constexpr bool TRIGGER_EARLY = MT == 1;  // where this block lets the next kernel launch
  double ssn[MT][2];
  if constexpr (CPL > 0) {
    // Lanes by channels (the plan keeps p.tt <= CPL): lane (g, q) takes row g / (8 / CPL).
    const int rho = g / (8 / CPL);
    const int hc = chunk * CHUNK + 8 * q + (g % (8 / CPL)) * CPL;
    const bool okc = chunk_ok && rho < rows;
    ChanVals<CPL> v;
    ewc_load<CPL>(p, row0 + rho, okc, hc, v);
    stage_coefs<PM, NIN, CARRIED>(p, s_coef, row0);
    __syncthreads();
    STAMP(p.timeline, 3);
    ewc_compute<CPL>(p, s_coef, rho, row0 + rho, okc, hc, v, g, q, tok[0][0], ok[0][0], h, av[0], cb[0], ssn[0]);
  } else {
    // The activations' loads first, then the coefficients': the two round trips overlap.
    uint4 xv[MT][2], rv[MT][2][NIN];
#pragma unroll
    for (int m = 0; m < MT; ++m) ew_load<PM, NIN>(p, tok[m], ok[m], h, xv[m], rv[m]);
    stage_coefs<PM, NIN, CARRIED>(p, s_coef, row0);
    __syncthreads();
    STAMP(p.timeline, 3);
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      ssn[m][0] = ssn[m][1] = 0.0;
      ew_compute<PM, NIN, CARRIED, 0>(p, s_coef + m * MAXTT * COEF, g, q, tok[m], ok[m], h,
                                          rows > MAXTT * m + 8, xv[m], rv[m], av[m], cb[m], ssn[m]);
      if (EARLY) {
        // Quad sums (the chunk's value, header).
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
          ssn[m][rr] += __shfl_xor_sync(FULL_MASK, ssn[m][rr], 1);
          ssn[m][rr] += __shfl_xor_sync(FULL_MASK, ssn[m][rr], 2);
          if (warp < W && q == 0) wss[warp * TT + g + 8 * rr + MAXTT * m] = ssn[m][rr];
        }
      }
    }
  }
  STAMP(p.timeline, 4);
  // fn has landed (the barrier's init is visible: a __syncthreads separates it from here).
  mbar_wait(&s_fnbar, 0);
  STAMP(p.timeline, 5);
  // Tiles of up to 16 tokens: this block needs no more weights from memory, so the next kernel
  // may start placing its blocks (they stage their weights, then wait for this grid). Its fn
  // copies then overlap this seam's projection and reduction instead of following them
  // (PERF_NOTES attempt 50: -3 % at T = 1, up to -14 % at T = 12, against triggering below).
  if (TRIGGER_EARLY) pdl_trigger();
  if (warp < W) {
    float d[MT][S::NT][4];
    double ssg[MT][2];
    const bool tr = TR || (TR_RT && rows <= 8);
    // One group of 16 rows at a time, its gate sums of squares right after its projection, so
    // that the first group's activations are dead during the second's (tiles of 32: registers).
    // A group's projection is the same whatever the tile (project_chunk), so are its bits.
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      const unsigned char* sfp = smem + (size_t)(warp + (PS ? min(warp, NPS) : 0)) * NIN * FNP_STREAM_BYTES;
      float ssp[2];
      if (PS && warp < NPS)
        project_chunk_presplit<NIN, SSI>(sfp, lane, av[m], d[m], ssp);
      else if (PREP && tr)
        project_chunk_prepared<NIN, TR || TR_RT, MT == 2, SSI>(sfp, lane, chunk_ok, av[m], d[m], ssp);
      else if (PREP)
        project_chunk_prepared<NIN, false, MT == 2, SSI>(sfp, lane, chunk_ok, av[m], d[m], ssp);
      else if (tr)
        project_chunk<NIN, NMIX, false, TR || TR_RT, SSI>(sfn, rstride, warp, g, q, chunk_ok, av[m], d[m], ssp);
      else
        project_chunk<NIN, NMIX, false, false, SSI>(sfn, rstride, warp, g, q, chunk_ok, av[m], d[m], ssp);
      quad_sums<NIN, NMIX, !EARLY, SSI>(av[m], ssp, ssg[m], ssn[m], rows > MAXTT * m + 8);
    }
    STAMP(p.timeline, 14);
    // Every block's mbarriers are initialized.
    cluster_wait();
    // The chunk's leaves and gate sums of squares into the shared memory of the rows' blocks.
    if (tr) {
      // Swapped (project_finish): lane (g, q) holds mixes nt * 8 + g of rows 2q and 2q + 1.
#pragma unroll
      for (int tt = 0; tt < 2; ++tt) {
        const int r = 2 * q + tt;
        if (chunk_ok && r < rows) {
          const u32 a = cluster_map(leaves + ((size_t)(r / CL) * chunks + chunk) * NM, (u32)(r % CL));
          const u32 bar = cluster_map(&s_redbar, (u32)(r % CL));
#pragma unroll
          for (int nt = 0; nt < S::NT; ++nt) st_async_f32(a + (nt * 8 + g) * 4, d[0][nt][tt], bar);
        }
      }
    }
#pragma unroll
    for (int m = 0; m < MT; ++m) {
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const int r = g + 8 * rr + MAXTT * m;
        if (chunk_ok && r < rows) {
          const int o = r / CL;
          const u32 owner = (u32)(r % CL);
          const u32 a = cluster_map(leaves + ((size_t)o * chunks + chunk) * NM, owner);
          const u32 bar = cluster_map(&s_redbar, owner);
#pragma unroll
          for (int nt = 0; nt < S::NT && !tr; ++nt) {
            const int c0 = nt * 8 + 2 * q;
            if (c0 < NMIX) st_async_f32x2(a + c0 * 4, d[m][nt][2 * rr], d[m][nt][2 * rr + 1], bar);
          }
          if (q == 0) {
            st_async_f64(cluster_map(lss + o * lssrow + lss_slot(chunk), owner), ssg[m][rr], bar);
            if (CARRIED && has_norm)
              st_async_f64(cluster_map(lnss + o * chunks + chunk, owner), EARLY ? wss[warp * TT + r] : ssn[m][rr],
                           bar);
          }
        }
      }
    }
  } else {
    cluster_wait();
  }
  __syncthreads();
  STAMP(p.timeline, 7);
  // Tiles of 32 tokens (T = 113-224) trigger here, after their leaves are sent: triggering once
  // fn has landed measured 0.8 % slower at T = 128 (attempt 50).
  if (!TRIGGER_EARLY) pdl_trigger();
  // Every store into this block has landed: its rows' leaves and every norm sum are in its own
  // shared memory. No block touches another's shared memory after its stores, and each block
  // waits here for all the stores it receives, so each may leave when done.
  mbar_wait_cluster(&s_redbar, 0);
  if (rank == 0) STAMP(p.timeline, 8);

  // Per row finished here: its leaves in groups of CL_GROUP (the lower levels of the tree; the
  // gate sums of squares, f64, in leaf order), then the upper levels over the groups (pairwise,
  // ngrp a power of two; the padding groups' sums are zeros, as their leaves'). Loads before adds.
  // Consecutive threads take consecutive mixes of a group: their loads hit consecutive banks.
  // gss and gsum overwrite fn: every warp of the block passed the __syncthreads above after its
  // projection.
  // Tiles of up to 16 tokens (MT = 1): the f32 items from the block's first thread up, the f64
  // items from its last down, so no warp runs both branches where they fit one pass, and the
  // thread that sums a row's gate sums of squares also forms the gates' RMS factor (off the gate
  // warp's path after the barrier). Tiles of 32 keep the items interleaved (the f64 item last of
  // each row's group) and the factor in the gate warp: both changes measured 2-5 % slower there
  // (PERF_NOTES attempt 76).
  // A full group's leaves load from one base address with constant offsets (no per-leaf index
  // arithmetic); only a last group cut short by H needs the clamp and the zeros.
  auto leaf_f32 = [&](int o, int gi, int mix) {
    const float* src = leaves + ((size_t)o * chunks + gi * CL_GROUP) * NM + mix;
    const int n = chunks - gi * CL_GROUP;
    float v[CL_GROUP];
    if (n >= CL_GROUP) {
#pragma unroll
      for (int l = 0; l < CL_GROUP; ++l) v[l] = src[l * NM];
    } else {
#pragma unroll
      for (int l = 0; l < CL_GROUP; ++l) {
        const float x = src[min(l, n - 1) * NM];
        v[l] = l < n ? x : 0.0f;
      }
    }
    gsum[(o * ngrp + gi) * NM + mix] = pairwise(v);
  };
  auto leaf_f64 = [&](int o, int gi) {
    const double* src = lss + o * lssrow + gi * CL_GROUP;
    const int n = chunks - gi * CL_GROUP, sw = gi & (CL_GROUP - 1);  // (lss_slot, within the group)
    double v[CL_GROUP];
    if (n >= CL_GROUP) {
#pragma unroll
      for (int l = 0; l < CL_GROUP; ++l) v[l] = src[l ^ sw];
    } else {
#pragma unroll
      for (int l = 0; l < CL_GROUP; ++l) {
        const double x = src[min(l, n - 1) ^ sw];
        v[l] = l < n ? x : 0.0;
      }
    }
    gss[o * ngrp + gi] = pairwise(v);
  };
  // The upper levels over ng groups (ngrp): called with the literal 8 or 16 where ngrp is that
  // (H = 4096, 5120, 7168), so that once inlined an item loads and adds only ng values instead of
  // CL_MAXGRP loads and the adds of a tree cut at run time; the same tree, so the same bits.
  auto upper_f32 = [&](int o, int mix, int ng) {
    const float* gs = gsum + o * ngrp * NM + mix;
    float v[CL_MAXGRP];
#pragma unroll
    for (int l = 0; l < CL_MAXGRP; ++l) v[l] = l < ng && l < ngrp_used ? gs[l * NM] : 0.0f;
    s_m[o][mix] = pairwise(v, ng);
  };
  auto upper_f64 = [&](int o, int ng) {
    double v[CL_MAXGRP];
#pragma unroll
    for (int l = 0; l < CL_MAXGRP; ++l) v[l] = l < ng && l < ngrp_used ? gss[o * ngrp + l] : 0.0;
    const double ss = pairwise(v, ng);
    if (MT == 1) s_grinv[o] = rms_factor(ss, NIN * p.H, p.rms_eps);
    else s_ssg[o] = ss;
  };
  // Item i of `per` items a row: its row (a block finishes few rows: subtraction, not division).
  auto row_of = [](int i, int per, int& j) {
    int o = 0;
    for (j = i; j >= per; j -= per) ++o;
    return o;
  };
  const int nthr = (int)blockDim.x;
  if (MT == 1) {
    for (int i = tid; i < own * ngrp_used * NM; i += nthr) {
      int j;
      const int o = row_of(i, ngrp_used * NM, j);
      leaf_f32(o, j / NM, j % NM);
    }
    for (int i = nthr - 1 - tid; i < own * ngrp_used; i += nthr) {
      int j;
      const int o = row_of(i, ngrp_used, j);
      leaf_f64(o, j);
    }
  } else {
    for (int i = tid; i < own * (NM + 1) * ngrp_used; i += nthr) {
      int j;
      const int o = row_of(i, (NM + 1) * ngrp_used, j);
      const int gi = j / (NM + 1), mix = j % (NM + 1);
      if (mix < NM) leaf_f32(o, gi, mix);
      else leaf_f64(o, gi);
    }
  }
  __syncthreads();
  if (rank == 0) STAMP(p.timeline, 9);
  auto upper = [&](int ng) {
    if (MT == 1) {
      for (int i = tid; i < own * NM; i += nthr) upper_f32(i / NM, i % NM, ng);  // (NM constant)
      for (int o = nthr - 1 - tid; o < own; o += nthr) upper_f64(o, ng);
    } else {
      for (int i = tid; i < own * (NM + 1); i += nthr) {
        const int o = i / (NM + 1), mix = i % (NM + 1);
        if (mix < NM) upper_f32(o, mix, ng);
        else upper_f64(o, ng);
      }
    }
  };
  if (ngrp == 16) upper(16);
  else if (ngrp == 8) upper(8);
  else upper(ngrp);
  __syncthreads();
  if (rank == 0) STAMP(p.timeline, 10);
  if (warp == W) {
    // The gate warp: a quad of lanes per row finished here (gates4_quad; at most 2 rows a block
    // in the plans, 8 a pass). Quads without a row repeat row o0's work (no divergence) and store
    // nothing.
    for (int o0 = 0; o0 < own; o0 += WARP / 4) {
      const int o = o0 + lane / 4;
      const int oo = o < own ? o : o0;
      const int tok = row0 + rank + oo * CL;
      const bool stamp = rank == 0 && lane == 0 && o0 == 0;
      float pre_a, post_a, comb_a[4];
      if (stamp) STAMP_BY(p.timeline, 15);
      // V4: this seam's pre of the row, to every block of the cluster (their collapse waits for
      // it), sent as soon as it is final: before the Sinkhorn, which the collapse and its norm
      // round then overlap (PERF_NOTES attempt 79).
      auto send_pre = [&](float pre) {
        if (!CARRIED && o < own) {
          const int r = rank + oo * CL;
          for (int b = 0; b < CL; ++b)
            st_async_f32(cluster_map(&s_pre[r][lane & 3], (u32)b), pre, cluster_map(&s_pbar, (u32)b));
        }
      };
      gates4_quad(MT == 1 ? s_grinv[oo] : rms_factor(s_ssg[oo], NIN * p.H, p.rms_eps), s_m[oo], s_gw, p.hc_eps,
                  p.post_mult, p.iters, pre_a, post_a, comb_a, stamp ? p.timeline : nullptr, send_pre);
      if (o < own) {
        const int a = lane & 3;
        p.pre_out[tok * 4 + a] = pre_a;
        p.post_out[tok * 4 + a] = post_a;
#pragma unroll
        for (int b = 0; b < 4; ++b) p.comb_out[tok * 16 + 4 * a + b] = comb_a[b];
      }
      if (stamp) STAMP_BY(p.timeline, 11);
    }
  } else {
    if (!CARRIED) {
      // V4: the collapse with this seam's pre, from r' (or r) in registers, in the order of the
      // tile kernel's finisher; with a norm, the chunk's norm leaf of each row to the row's
      // block, which sums the canonical tree and sends the factor back (s_nbar) for the RMSNorm
      // pass below; without, the collapse is the layer input.
      mbar_wait_cluster(&s_pbar, 0);
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const int r = g + 8 * rr;
        if (rows <= 8 * rr) break;  // warp-uniform: no row here or after
        float sf[NS][8], c[8];
#pragma unroll
        for (int j = 0; j < NS; ++j) unpack8(av[0][rr][j], sf[j]);
        const float* pr = s_pre[r < rows ? r : 0];
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          float acc = __fmul_rn(pr[0], sf[0][e]);
#pragma unroll
          for (int j = 1; j < NS; ++j) acc = mul_add_rn(acc, pr[j], sf[j][e]);
          c[e] = ok[0][rr] ? acc : 0.0f;
        }
        if (has_norm) {
          cb[0][rr] = pack8(c);
          float cr[8];
          unpack8(cb[0][rr], cr);
          double sq = (double)sq_part8(cr, 0.0f);
          sq += __shfl_xor_sync(FULL_MASK, sq, 1);
          sq += __shfl_xor_sync(FULL_MASK, sq, 2);
          if (chunk_ok && r < rows && q == 0) {
            const u32 owner = (u32)(r % CL);
            st_async_f64(cluster_map(lnss + (r / CL) * chunks + chunk, owner), sq, cluster_map(&s_lbar, owner));
          }
        } else {
          emit_li(p, tok[0][rr], h, c, ok[0][rr], q == 0);
        }
      }
      // The norm's factor of each row finished here: warp W - 1 - o takes row o, once every
      // chunk's leaf has landed.
      if (has_norm && warp < W) {
        for (int o = W - 1 - warp; o < own; o += W) {
          mbar_wait_cluster(&s_lbar, 0);
          const double sn = warp_tree_f64(lnss + o * chunks, chunks, pw);
          if (lane < CL) {
            const int r = rank + o * CL;
            st_async_f32(cluster_map(&s_rinv[r], (u32)lane), rms_factor(sn, p.H, p.norm_eps),
                         cluster_map(&s_nbar, (u32)lane));
          }
        }
      }
    }
    if (CARRIED && has_norm && warp < W) {
      // The norm's factor of each row finished here, by the canonical tree over its chunks'
      // leaves (landed with the gate leaves), sent to every block. Warp W - 1 - o takes row o.
      // Here, beside the gate warp's gates rather than before the tree's barriers, it stays off
      // the gates' path (PERF_NOTES attempt 72).
      for (int o = W - 1 - warp; o < own; o += W) {
        const double sn = warp_tree_f64(lnss + o * chunks, chunks, pw);
        if (lane < CL) {
          const int r = rank + o * CL;
          st_async_f32(cluster_map(&s_rinv[r], (u32)lane), rms_factor(sn, p.H, p.norm_eps),
                       cluster_map(&s_nbar, (u32)lane));
        }
      }
    }
    if (has_norm) {
      // The RMSNorm of the block's chunks of the layer input, from the collapse kept in
      // registers, with the rows' factors from their blocks (off the gates' path).
      mbar_wait_cluster(&s_nbar, 0);
      const float4 nw0 = s_nw[(warp * CHUNK + 8 * q) / 4], nw1 = s_nw[(warp * CHUNK + 8 * q) / 4 + 1];
      const float w8[8] = {nw0.x, nw0.y, nw0.z, nw0.w, nw1.x, nw1.y, nw1.z, nw1.w};
#pragma unroll
      for (int m = 0; m < MT; ++m) {
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
          const int r = g + 8 * rr + MAXTT * m;
          if (rows <= MAXTT * m + 8 * rr) break;  // warp-uniform: no row here or after
          const float rinv = ok[m][rr] ? s_rinv[r] : 0.0f;
          float c[8], val[8];
          unpack8(cb[m][rr], c);
#pragma unroll
          for (int e = 0; e < 8; ++e) val[e] = __fmul_rn(__fmul_rn(c[e], rinv), w8[e]);
          emit_li(p, tok[m][rr], h, val, ok[m][rr], q == 0);
        }
      }
    }
  }
  if (rank == 0) STAMP(p.timeline, 12);
  if (rank == 0) STAMP(p.timeline, 13);
}

// One block of up to 16 warps per multiprocessor (its fn slice fills most of the shared memory).
// The _clp variants read fn prepared by mhc_fn_split (PREP); the _cl2 and _clp2 variants take
// tiles of 32 tokens (MT = 2), in blocks of at most CL_WARPS2 warps: 168 registers a thread, in
// which the seam fits and pre_delayed does not (it spilled 50-200 bytes), so only the seam has them.
// The _ch1, _ch2 and _ch4 variants: the seam in tiles of at most 1, 2 or 4 tokens, lanes by
// channels in the elementwise phase (CPL).
#define SEAM_CLUSTER_KERNEL(name, PM, NIN, PREP, MT, CPL)                                                   \
  extern "C" __global__ void __launch_bounds__((MT == 1 ? CL_WARPS : CL_WARPS2) * WARP, 1) name(const FusedParams p) { \
    seam_cluster_body<PM, NIN, PREP, MT, CPL>(p);                                                           \
  }

SEAM_CLUSTER_KERNEL(mhc_seam_cl, 1, 4, false, 1, 0)
SEAM_CLUSTER_KERNEL(mhc_pre_delayed_cl, 0, 4, false, 1, 0)
SEAM_CLUSTER_KERNEL(mhc_entry_cl, 0, 1, false, 1, 0)
SEAM_CLUSTER_KERNEL(mhc_seam_clp, 1, 4, true, 1, 0)
SEAM_CLUSTER_KERNEL(mhc_pre_delayed_clp, 0, 4, true, 1, 0)
SEAM_CLUSTER_KERNEL(mhc_seam_cl2, 1, 4, false, 2, 0)
SEAM_CLUSTER_KERNEL(mhc_seam_clp2, 1, 4, true, 2, 0)
SEAM_CLUSTER_KERNEL(mhc_seam_cl_ch1, 1, 4, false, 1, 1)
SEAM_CLUSTER_KERNEL(mhc_seam_cl_ch2, 1, 4, false, 1, 2)
SEAM_CLUSTER_KERNEL(mhc_seam_cl_ch4, 1, 4, false, 1, 4)
SEAM_CLUSTER_KERNEL(mhc_seam_clp_ch1, 1, 4, true, 1, 1)
SEAM_CLUSTER_KERNEL(mhc_seam_clp_ch2, 1, 4, true, 1, 2)
SEAM_CLUSTER_KERNEL(mhc_seam_clp_ch4, 1, 4, true, 1, 4)

// The V4 seam (this seam's own pre-mix) in clusters, tiles of up to 16 tokens. (The V4 pre op,
// PM = 0, spilled 36-44 bytes at 128 registers here: it stays on the tile kernel.)
#define V4_CLUSTER_KERNEL(name, PM, PREP)                                                          \
  extern "C" __global__ void __launch_bounds__(CL_WARPS * WARP, 1) name(const FusedParams p) {   \
    seam_cluster_body<PM, NS, PREP, 1, 0, 0>(p);                                                   \
  }

V4_CLUSTER_KERNEL(mhc_seam_v4_cl, 1, false)
V4_CLUSTER_KERNEL(mhc_seam_v4_clp, 1, true)

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
      for (int s = 0; s < NS; ++s) acc = mul_add_rn(acc, comb[t * 16 + s * 4 + j], rf[s][e]);
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
