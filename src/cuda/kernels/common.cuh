// Shared device helpers for every mhc kernel. NVRTC compiles each kernel family with this text
// prepended, so no CUDA header (and no include path) is needed: bf16 and fp8 values are raw bits
// converted with PTX `cvt` instructions, which round to nearest even like the CPU reference.
//
// Warp width is the named constant WARP and work is split by warp index (threadIdx.x / WARP),
// never by comparing threadIdx.x with 32.

typedef unsigned short bf16_t;
typedef unsigned int u32;
typedef unsigned long long u64;

#define WARP 32
#define FULL_MASK 0xffffffffu

// The lane index (volatile: read where used, never kept in a register across a long phase).
__device__ __forceinline__ int lane_id() {
  int l;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(l));
  return l;
}

// Timeline instrumentation (compiled only with -DMHC_TIMELINE, see `mhc bench --timeline`): a
// stamp is the global timer (ns) and the multiprocessor's cycle counter, written to slot `slot` of
// the block's row of TL_SLOTS pairs. The production kernels contain none of it.
#define TL_SLOTS 24
#ifdef MHC_TIMELINE
// The block's pair `slot` of its row.
__device__ __forceinline__ u64* tl_pair(u64* tl, int slot) {
  return tl + ((size_t)(blockIdx.y * gridDim.x + blockIdx.x) * TL_SLOTS + slot) * 2;
}
__device__ __forceinline__ void tl_stamp(u64* tl, int slot) {
  if (tl != nullptr) {
    u64 g, c;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g));
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(c));
    u64* e = tl_pair(tl, slot);
    e[0] = g;
    e[1] = c;
  }
}
#define STAMP(tl, slot)                       \
  do {                                        \
    if (threadIdx.x == 0) tl_stamp(tl, slot); \
  } while (0)
#define STAMP_BY(tl, slot) tl_stamp(tl, slot)
// Slot TL_SMID holds the multiprocessor's index + 1 (not a time): which SM ran the block.
#define TL_SMID 19
#define STAMP_SMID(tl)                                \
  do {                                                \
    if (threadIdx.x == 0 && (tl) != nullptr) {        \
      u32 sm;                                         \
      asm volatile("mov.u32 %0, %%smid;" : "=r"(sm)); \
      tl_pair(tl, TL_SMID)[0] = sm + 1;               \
    }                                                 \
  } while (0)
#else
#define STAMP(tl, slot) \
  do {                  \
  } while (0)
#define STAMP_BY(tl, slot) \
  do {                     \
  } while (0)
#define STAMP_SMID(tl) \
  do {                 \
  } while (0)
#endif

__device__ __forceinline__ float bf16_to_f32(bf16_t b) { return __uint_as_float(((u32)b) << 16); }
__device__ __forceinline__ float bf16_lo(u32 w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(u32 w) { return __uint_as_float(w & 0xffff0000u); }

__device__ __forceinline__ bf16_t f32_to_bf16(float f) {
  bf16_t r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f));
  return r;
}

// Two f32 -> one bf16x2 word; `lo` lands in the low half (the lower address).
__device__ __forceinline__ u32 pack_bf16x2(float lo, float hi) {
  u32 r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// 8 consecutive bf16 (one 16-byte vector) <-> 8 floats.
__device__ __forceinline__ void unpack8(const uint4 v, float f[8]) {
  f[0] = bf16_lo(v.x); f[1] = bf16_hi(v.x);
  f[2] = bf16_lo(v.y); f[3] = bf16_hi(v.y);
  f[4] = bf16_lo(v.z); f[5] = bf16_hi(v.z);
  f[6] = bf16_lo(v.w); f[7] = bf16_hi(v.w);
}
__device__ __forceinline__ uint4 pack8(const float f[8]) {
  uint4 v;
  v.x = pack_bf16x2(f[0], f[1]);
  v.y = pack_bf16x2(f[2], f[3]);
  v.z = pack_bf16x2(f[4], f[5]);
  v.w = pack_bf16x2(f[6], f[7]);
  return v;
}
__device__ __forceinline__ u32 word(const uint4 v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// Loads of data written by other blocks of the same launch (after a fence and the tile counter)
// go through L2 only. Not volatile: the compiler may batch them, which the tail relies on.
__device__ __forceinline__ uint4 ld_cg4(const void* p) { return __ldcg((const uint4*)p); }
__device__ __forceinline__ float ld_cg_f32(const float* p) { return __ldcg(p); }
__device__ __forceinline__ double ld_cg_f64(const double* p) { return __ldcg(p); }

// L2 eviction priorities (sm_80+): a policy register from `createpolicy`, used by the accesses
// below. The large-T seam parks its collapse in layer_input for the tails launch's RMSNorm: the
// park is stored evict_last, so that it stays in L2 among the streams of x, r and r' (read or
// written once) until the tails read it back and overwrite it with the layer input (their reads
// with an evict_first hint measured the same as without it: PERF_NOTES.md attempt 117).
// Volatile: created where used, not held in a register across a tile.
__device__ __forceinline__ unsigned long long l2_evict_last() {
  unsigned long long pol;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
  return pol;
}
__device__ __forceinline__ void st_hint4(void* ptr, uint4 v, unsigned long long pol) {
  asm volatile("st.global.L2::cache_hint.v4.u32 [%0], {%1, %2, %3, %4}, %5;" ::"l"(ptr), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w), "l"(pol)
               : "memory");
}

// acc + c * v fused, one rounding (IEEE fma): post_map and the collapse (SPEC sections 3 and 4)
// accumulate this way in every kernel, in the order written, as the CPU reference does
// (`f32::mul_add`), so that the bf16 outputs match it bit for bit.
__device__ __forceinline__ float mul_add_rn(float acc, float c, float v) { return __fmaf_rn(c, v, acc); }

// A lane's part of the canonical sum of squares (reference::tree_sum_squares): its 8 channels'
// squares added to s by f32 fused multiply-adds, in channel order (a stream at a time); the
// caller converts the finished part to f64 once. (Until PERF_NOTES.md attempt 107 every square was
// converted to f64 and added there: 32 conversions a row and lane on a quarter-rate pipe.)
__device__ __forceinline__ float sq_part8(const float f[8], float s) {
#pragma unroll
  for (int e = 0; e < 8; ++e) s = __fmaf_rn(f[e], f[e], s);
  return s;
}

// The RMS factor 1/sqrt(ss/count + eps): the mean rounded to f32 once, then IEEE sqrt and
// division (NVRTC compiles with prec-sqrt and prec-div on), exactly as reference::rms_factor.
__device__ __forceinline__ float rms_factor(double ss, int count, float eps) {
  float ms = (float)(ss / (double)count);
  return 1.0f / sqrtf(__fadd_rn(ms, eps));
}

__device__ __forceinline__ float sigmoidf_(float z) { return 1.0f / (1.0f + expf(-z)); }

// ceil(log2(x)) of a positive finite float, from its bits (as reference::mxfp8::ceil_log2).
__device__ __forceinline__ int ceil_log2_f32(float x) {
  u32 b = __float_as_uint(x);
  int e = (int)((b >> 23) & 0xff) - 127;
  return (b & 0x7fffff) ? e + 1 : e;
}

// E4M3 of two floats (round to nearest even, saturating to +-448); `lo` in the low byte.
__device__ __forceinline__ u32 e4m3x2(float lo, float hi) {
  unsigned short r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  return (u32)r;
}

// The MXFP8 scale of a block with absolute maximum amax: returns the E8M0 byte, sets inv to the
// exact reciprocal of the power-of-two scale.
__device__ __forceinline__ u32 mx_scale(float amax, float* inv) {
  float a = fmaxf(amax, 1e-4f);
  int e = ceil_log2_f32(__fdiv_rn(a, 448.0f));
  e = max(-126, min(e, 127));
  *inv = __uint_as_float((u32)(127 - e) << 23);
  return (u32)(e + 127);
}

// Quantizes 8 values (one thread's 16-byte slice) of a 32-element MXFP8 block shared by the 4
// consecutive lanes lane^1, lane^2 of a quad. All 32 lanes must call this together.
__device__ __forceinline__ void mx_quantize8(const float v[8], bool valid, unsigned char* q8,
                                             unsigned char* scale_byte, bool leader) {
  float amax = 0.0f;
#pragma unroll
  for (int e = 0; e < 8; ++e) amax = fmaxf(amax, fabsf(v[e]));
  if (!valid) amax = 0.0f;
  amax = fmaxf(amax, __shfl_xor_sync(FULL_MASK, amax, 1));
  amax = fmaxf(amax, __shfl_xor_sync(FULL_MASK, amax, 2));
  float inv;
  u32 sb = mx_scale(amax, &inv);
  if (valid) {
    uint2 w;
    w.x = e4m3x2(v[0] * inv, v[1] * inv) | (e4m3x2(v[2] * inv, v[3] * inv) << 16);
    w.y = e4m3x2(v[4] * inv, v[5] * inv) | (e4m3x2(v[6] * inv, v[7] * inv) << 16);
    *(uint2*)q8 = w;
    if (leader) *scale_byte = (unsigned char)sb;
  }
}

// Correctly rounded 1/x and a/b without a branch: the fast path of the IEEE sequences
// (approximate reciprocal + one Newton step; quotient + one FMA correction, Markstein), exact for
// normal x, b with magnitude below 2^126. `slow` is set for any other x, and the caller redoes
// its work with the IEEE functions. (Each IEEE call carries its own slow-path branch, and a
// thread's branches do not overlap: 40 dependent Sinkhorn passes cost ~8 us that way on the H200.)
__device__ __forceinline__ bool rcp_fast_ok(float x) {
  return ((__float_as_uint(x) + 0x1800000u) & 0x7f800000u) > 0x1ffffffu;
}
template <bool FAST>
__device__ __forceinline__ float rcp_rn(float x, bool& slow) {
  if (!FAST) return __frcp_rn(x);
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  slow |= !rcp_fast_ok(x);
  return fmaf(r, fmaf(-x, r, 1.0f), r);
}
template <bool FAST>
__device__ __forceinline__ float div_rn(float a, float b, bool& slow) {
  if (!FAST) return __fdiv_rn(a, b);
  const float y = rcp_rn<true>(b, slow);
  const float q = a * y;
  return fmaf(fmaf(-b, q, a), y, q);
}

// One Sinkhorn iteration after the first row pass in the matrix form of SPEC section 2: rows (when
// `rows`), then columns, each sum in the reference's order and its correctly rounded reciprocal
// (FAST: rcp_rn's fast sequence with its range test; otherwise the IEEE function). The checked
// and IEEE paths; the fast path takes the scaled form (sinkhorn4_scaled).
template <bool FAST>
__device__ __forceinline__ float sk_factor(float c0, float c1, float c2, float c3, float eps, bool& slow) {
  return rcp_rn<FAST>(((c0 + c1) + c2) + c3 + eps, slow);
}

template <bool FAST>
__device__ __forceinline__ void sinkhorn4_pass(float c[16], bool rows, float eps, bool& slow) {
  if (rows) {
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      float r = sk_factor<FAST>(c[4 * a], c[4 * a + 1], c[4 * a + 2], c[4 * a + 3], eps, slow);
#pragma unroll
      for (int b = 0; b < 4; ++b) c[4 * a + b] *= r;
    }
  }
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    float r = sk_factor<FAST>(c[b], c[4 + b], c[8 + b], c[12 + b], eps, slow);
#pragma unroll
    for (int a = 0; a < 4; ++a) c[4 * a + b] *= r;
  }
}

// One half-pass of the scaled form (sinkhorn4_scaled): for each a, q = sum_b K(a, b) x[b] + e[a]
// as an FFMA chain (K(a, b) = k[4a + b] for the rows, k[4b + a] for the columns), y[a] = 1 / q
// (approximate reciprocal), and e[a] = eps q for the same half-pass of the next iteration.
__device__ __forceinline__ void sinkhorn4_scaled_half(const float k[16], bool rows, const float x[4], float y[4],
                                                      float e[4], float eps) {
#pragma unroll
  for (int a = 0; a < 4; ++a) {
    float q = e[a];
#pragma unroll
    for (int b = 0; b < 4; ++b) q = fmaf(rows ? k[4 * a + b] : k[4 * b + a], x[b], q);
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y[a]) : "f"(q));
    e[a] = eps * q;
  }
}

// The fast path's passes (iters >= 1, finite logits, 2^-30 <= eps <= 1) in the scaled form:
// C = diag(r) K diag(c) with K, the softmax + eps, kept fixed. A row pass C /= rowsum(C) + eps is
// r_a <- r_a / (r_a sum_b K_ab c_b + eps) = 1 / (sum_b K_ab c_b + eps / r_a), so with q_a = 1 / r_a
// it is q_a <- sum_b K_ab c_b + eps q_a and r_a = 1 / q_a; a column pass the same on c. A
// half-pass is then four FFMA chains of four and four reciprocals (24 instructions, against 36
// for the matrix form), and C is formed once at the end. The same quantities as the matrix form
// up to f32 rounding, which the normalization corrects from pass to pass as it does there.
// The matrix form's entries stay in [0, 1 + eps]; the scales are bounded only by eps: r_a c_b =
// C_ab / K_ab <= (1 + eps) / eps. The CPU model of this loop (reference::gates::
// sinkhorn_scaled_model) keeps every scale within [2^-18, 2^28] at eps = 2^-30 and within
// [2^-12, 2^18] at eps = 1e-6 for random and adversarial logits (its unit test asserts [2^-40,
// 2^40] and 1e-6 from the f64 passes), but near [2^-32, 2^98] at eps = 1e-30. Hence the bound on
// eps (sinkhorn_eps_ok), far from the edges of f32's normal range, and a test of the result as a
// backstop: a sum that overflows to infinity leaves its scale at 0 from then on (its eps term
// stays infinite), one that underflows makes its scale infinite and the next sums infinite or NaN,
// so `slow` is set unless every final scale is positive, normal and finite, and the caller then
// recomputes with the IEEE functions.
__device__ __forceinline__ void sinkhorn4_scaled(float c[16], int iters, float eps, bool& slow) {
  float rs[4] = {1.0f, 1.0f, 1.0f, 1.0f}, cs[4];
  float er[4] = {eps, eps, eps, eps}, ec[4] = {eps, eps, eps, eps};
  sinkhorn4_scaled_half(c, false, rs, cs, ec, eps);
#pragma unroll 1
  for (int it = 1; it < iters; ++it) {
    sinkhorn4_scaled_half(c, true, cs, rs, er, eps);
    sinkhorn4_scaled_half(c, false, rs, cs, ec, eps);
  }
  bool ok = true;
#pragma unroll
  for (int a = 0; a < 4; ++a) {
    ok = ok && (__float_as_uint(rs[a]) - 0x00800000u) < 0x7f000000u;
    ok = ok && (__float_as_uint(cs[a]) - 0x00800000u) < 0x7f000000u;
  }
  slow |= !ok;
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int b = 0; b < 4; ++b) c[4 * a + b] *= rs[a] * cs[b];
}

// CHECK = false: the caller has shown every operand is in the fast path's range (see sinkhorn4):
// the 39 dependent half-passes are the gates' critical path, so they take the scaled form, with
// the approximate reciprocal (at most 1 ulp off) and no range test a reciprocal. Otherwise the
// matrix form with the correctly rounded reciprocal (and its range test).
template <bool FAST, bool CHECK>
__device__ __forceinline__ void sinkhorn4_passes(float c[16], int iters, float eps, bool& slow) {
  if (FAST && !CHECK && iters >= 1) {
    sinkhorn4_scaled(c, iters, eps, slow);
    return;
  }
  // The model's 20 iterations with the first (column-only) pass peeled; any other count in a
  // plain loop. (Fully unrolled, the kernels spill.)
  if (FAST && iters == 20) {
    sinkhorn4_pass<FAST>(c, false, eps, slow);
#pragma unroll 1
    for (int it = 1; it < 20; it += 1) sinkhorn4_pass<FAST>(c, true, eps, slow);
  } else {
    for (int it = 0; it < iters; ++it) sinkhorn4_pass<FAST>(c, it > 0, eps, slow);
  }
}

// One row of the Sinkhorn's start: softmax, then + eps (SPEC section 2).
template <bool FAST>
__device__ __forceinline__ void softmax4_eps(float c[4], float eps, bool& slow) {
  float mx = fmaxf(fmaxf(c[0], c[1]), fmaxf(c[2], c[3]));
  float s = 0.0f;
#pragma unroll
  for (int b = 0; b < 4; ++b) { c[b] = expf(c[b] - mx); s += c[b]; }
#pragma unroll
  for (int b = 0; b < 4; ++b) c[b] = __fadd_rn(div_rn<FAST>(c[b], s, slow), eps);
}
// Whether eps allows the fast path's passes (with finite logits): the softmax's reciprocals stay
// in range for any normal eps <= 1, the scaled form's scales for eps >= 2^-30 (sinkhorn4_scaled).
__device__ __forceinline__ bool sinkhorn_eps_ok(float eps) { return eps >= 0x1p-30f && eps <= 1.0f; }

// Sinkhorn of SPEC section 2 on one token's 4x4 logits held in registers: row softmax + eps,
// a column pass, then (iters - 1) row and column passes. Division by a row or column sum is a
// multiplication by its reciprocal (sk_factor: correctly rounded, within one f32 ulp of the
// division), or where every operand is in range the scaled form (sinkhorn4_scaled).
template <bool FAST>
__device__ __forceinline__ void sinkhorn4(float c[16], int iters, float eps, bool& slow) {
  // With finite logits the softmax denominators lie in [1, 4], and for eps in sinkhorn_eps_ok's
  // range the scaled form's scales stay far inside f32's (its own test is the backstop): the
  // passes skip the per-reciprocal test.
  bool safe = FAST && sinkhorn_eps_ok(eps);
#pragma unroll
  for (int i = 0; i < 16; ++i) safe = safe && isfinite(c[i]);
#pragma unroll
  for (int a = 0; a < 4; ++a) softmax4_eps<FAST>(c + 4 * a, eps, slow);
  if (safe) sinkhorn4_passes<FAST, false>(c, iters, eps, slow);
  else sinkhorn4_passes<FAST, true>(c, iters, eps, slow);
}

template <bool FAST>
__device__ __forceinline__ float sigmoid_rn(float z, bool& slow) {
  return rcp_rn<FAST>(1.0f + expf(-z), slow);
}

template <bool FAST>
__device__ __forceinline__ void gates4_impl(const float m[24], const float* scale, const float* base,
                                            float hc_eps, float post_mult, int iters, float pre[4],
                                            float post[4], float comb[16], bool& slow, u64* tl) {
  const float s0 = scale[0], s1 = scale[1], s2 = scale[2];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    pre[j] = sigmoid_rn<FAST>(m[j] * s0 + base[j], slow) + hc_eps;
    post[j] = sigmoid_rn<FAST>(m[4 + j] * s1 + base[4 + j], slow) * post_mult;
  }
#pragma unroll
  for (int a = 0; a < 16; ++a) comb[a] = m[8 + a] * s2 + base[8 + a];
  if (FAST) STAMP_BY(tl, 16);
  sinkhorn4<FAST>(comb, iters, hc_eps, slow);
  if (FAST) STAMP_BY(tl, 17);
}

// Steps 4-7 of SPEC section 2 for n = 4: mixes m[24] -> pre[4], post[4], comb[16]. Branch-free
// arithmetic first; where an operand left the fast path's range, the IEEE version (same bits in
// range) recomputes everything.
// `tl`: timeline stamps of the instrumented build (16: sigmoids done, 17: Sinkhorn done, 18: the
// IEEE recomputation done, when it ran).
__device__ __forceinline__ void gates4(const float m[24], const float* scale, const float* base,
                                       float hc_eps, float post_mult, int iters, float pre[4],
                                       float post[4], float comb[16], u64* tl = nullptr) {
  bool slow = false;
  gates4_impl<true>(m, scale, base, hc_eps, post_mult, iters, pre, post, comb, slow, tl);
  if (slow) {
    gates4_impl<false>(m, scale, base, hc_eps, post_mult, iters, pre, post, comb, slow, tl);
    STAMP_BY(tl, 18);
  }
}

// gates4 for one token with its work spread over the four lanes of a quad (all 32 lanes call it;
// a = lane & 3): lane a computes pre[a], post[a] and comb's row a up to its softmax, the quad
// shares the 16 values and each of its lanes runs the Sinkhorn passes (the same instructions, no
// divergence). Every value is computed as gates4 computes it, so the bits are gates4's. The mixes
// are rinv * sm[c] (sm: the token's 24 dot products, in shared memory); gw: scale[3], base[24].
// Returns this lane's share: pre[a], post[a] and comb's row a. Where any lane of the quad left the
// fast path's range, every lane of the quad redoes the token with the IEEE functions.
//
// `pre_sink(pre_a)` is called once per lane with its final pre[a]: right after the sigmoid where
// that was in the fast path's range (the IEEE recomputation gives the same bits there), so a
// caller can send pre before the Sinkhorn; otherwise after the recomputation.
struct NoPreSink {
  __device__ void operator()(float) const {}
};
template <typename PreSink = NoPreSink>
__device__ __forceinline__ void gates4_quad(float rinv, const float* sm, const float* gw, float hc_eps,
                                            float post_mult, int iters, float& pre_a, float& post_a,
                                            float comb_a[4], u64* tl = nullptr,
                                            const PreSink& pre_sink = PreSink()) {
  const int lane = lane_id(), a = lane & 3, q0 = lane & ~3;
  const float s0 = gw[0], s1 = gw[1], s2 = gw[2];
  const float* base = gw + 3;
  bool slow = false;
  const float mp = rinv * sm[a], mq = rinv * sm[4 + a];
  pre_a = sigmoid_rn<true>(mp * s0 + base[a], slow) + hc_eps;
  const bool pre_final = !slow;
  if (pre_final) pre_sink(pre_a);
  post_a = sigmoid_rn<true>(mq * s1 + base[4 + a], slow) * post_mult;
  float c[4];
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    const float mc = rinv * sm[8 + 4 * a + b];
    c[b] = mc * s2 + base[8 + 4 * a + b];
  }
  if (tl) STAMP_BY(tl, 16);
  int fin = isfinite(c[0]) && isfinite(c[1]) && isfinite(c[2]) && isfinite(c[3]);
  fin &= __shfl_xor_sync(FULL_MASK, fin, 1);
  fin &= __shfl_xor_sync(FULL_MASK, fin, 2);
  softmax4_eps<true>(c, hc_eps, slow);
  float cc[16];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
#pragma unroll
    for (int b = 0; b < 4; ++b) cc[4 * r + b] = __shfl_sync(FULL_MASK, c[b], q0 + r);
  }
  if (fin && sinkhorn_eps_ok(hc_eps)) sinkhorn4_passes<true, false>(cc, iters, hc_eps, slow);
  else sinkhorn4_passes<true, true>(cc, iters, hc_eps, slow);
  if (tl) STAMP_BY(tl, 17);
  int sl = slow;
  sl |= __shfl_xor_sync(FULL_MASK, sl, 1);
  sl |= __shfl_xor_sync(FULL_MASK, sl, 2);
  if (sl) {
    float m[24], pre[4], post[4];
#pragma unroll
    for (int i = 0; i < 24; ++i) m[i] = rinv * sm[i];
    gates4_impl<false>(m, gw, gw + 3, hc_eps, post_mult, iters, pre, post, cc, slow, nullptr);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (j == a) {
        pre_a = pre[j];
        post_a = post[j];
      }
    }
    if (tl) STAMP_BY(tl, 18);
  }
  if (!pre_final) pre_sink(pre_a);
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    if (r == a) {
#pragma unroll
      for (int b = 0; b < 4; ++b) comb_a[b] = cc[4 * r + b];
    }
  }
}

// One tensor-core step: d += a (16x16 bf16, row) * b (16x8 bf16, col), f32 accumulation.
__device__ __forceinline__ void mma_bf16(float d[4], const u32 a[4], const u32 b[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// D += A . B on tensor cores, TF32 operands held in f32 registers (the hardware reads the top 19
// bits), f32 accumulation. m16n8k8: a = A[g][q], A[g+8][q], A[g][q+4], A[g+8][q+4]; b = B[q][g],
// B[q+4][g]; d as mma_bf16's.
__device__ __forceinline__ void mma_tf32(float d[4], const u32 a[4], const u32 b[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Asynchronous 16-byte copies global -> shared (sm_80+): many in flight per thread without
// holding registers. `bytes` < 16 zero-fills the rest (0: a zero vector, nothing is read).
__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gmem_src, int bytes) {
  const u32 d = (u32)__cvta_generic_to_shared(smem_dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(gmem_src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }
// cp.async groups: the copies a thread issued since its last commit form one group;
// cp_async_wait_group<N> returns once at most N of its most recent groups are still in flight.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// Programmatic dependent launch (sm_90). A kernel launched with the programmatic-serialization
// attribute may start while the previous kernel of its stream still runs; it must call pdl_wait()
// before it reads anything that kernel may write, or writes anything it may read. pdl_wait()
// returns once the previous grid has completed and its memory is visible (at once when the
// launch had no such dependency). pdl_trigger() lets the next kernel start launching: its blocks
// are placed as resources free up, and its pdl_wait() still waits for this whole grid. Only
// weights (never written by a preceding kernel of the stream) are read before pdl_wait().
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;" :::); }
// pdl_wait() for a kernel that issues register loads of a weight (`ld.global.nc`) before it and
// must keep them there: such loads may cross the wait, and short of registers ptxas sinks them to
// their first use, after it, so nothing streams during the previous kernel (PERF_NOTES.md
// attempt 89; scripts/pdl-order.sh checks the projection kernels' SASS). The wait sits in a loop
// that runs once (`never` is a runtime value that is false, which the compiler cannot know), and
// ptxas does not move the loads across a loop.
__device__ __forceinline__ void pdl_wait_after_loads(bool never) {
  int once = 0;
  do {
    pdl_wait();
  } while (++once < 1 + (int)never);
}


// Bulk copies global -> shared completed on an mbarrier (sm_90).
__device__ __forceinline__ u32 smem_u32(const void* p) { return (u32)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(unsigned long long* bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
// One arrival that also announces `bytes` of bulk copies for the barrier's current phase.
__device__ __forceinline__ void mbar_expect_tx(unsigned long long* bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned long long* bar, u32 parity) {
  u32 done;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(smem_u32(bar)), "r"(parity)
        : "memory");
  } while (!done);
}
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, u32 bytes, unsigned long long* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_u32(dst)),
               "l"(src), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
}

// Thread-block clusters (sm_90). A block's rank in its cluster; the wait half of the cluster
// barrier (acquire semantics; its arrive half is below); and the shared::cluster address of the
// same shared-memory location in block `rank` of the cluster (distributed shared memory). A block
// must not exit while another may still access its shared memory. (A release arrive would order
// every earlier global store too: it compiles to MEMBAR.ALL.GPU, PERF_NOTES.md attempt 30.)
__device__ __forceinline__ u32 cluster_rank() {
  u32 r;
  asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire;" ::: "memory"); }
__device__ __forceinline__ u32 cluster_map(const void* p, u32 rank) {
  u32 r;
  asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(smem_u32(p)), "r"(rank));
  return r;
}
// The first half of a cluster barrier without memory ordering (after fence.mbarrier_init: the
// other blocks may use this block's mbarriers once the barrier's wait returns).
__device__ __forceinline__ void cluster_arrive_relaxed() { asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory"); }
// Asynchronous stores into another block's shared memory (addresses from cluster_map) that count
// their bytes on that block's mbarrier `bar` (also from cluster_map): the receiver waits on its
// mbarrier (mbar_wait_cluster), with no fence and no cluster barrier on either side.
__device__ __forceinline__ void st_async_f32x2(u32 a, float x, float y, u32 bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];" ::"r"(a),
               "f"(x), "f"(y), "r"(bar)
               : "memory");
}
__device__ __forceinline__ void st_async_f32(u32 a, float x, u32 bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(a),
               "r"(__float_as_uint(x)), "r"(bar)
               : "memory");
}
__device__ __forceinline__ void st_async_f64(u32 a, double x, u32 bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b64 [%0], %1, [%2];" ::"r"(a),
               "l"(__double_as_longlong(x)), "r"(bar)
               : "memory");
}
// mbar_wait with cluster-scope acquire: the stores of other blocks counted on it are visible.
__device__ __forceinline__ void mbar_wait_cluster(unsigned long long* bar, u32 parity) {
  u32 done;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, "
        "1, 0, p;\n}"
        : "=r"(done)
        : "r"(smem_u32(bar)), "r"(parity)
        : "memory");
  } while (!done);
}

// Pairwise tree over a sequence of f64 values pushed in order (push k is leaf k; the canonical
// order of the sums of squares, reference::tree_sum_squares): after n pushes lev[l] holds, for
// each set bit l of n, a whole subtree of 2^l leaves. finish(n) adds them smallest first, which is the tree over n
// leaves padded with zeros to a power of two (x + 0 = x). Up to 2^16 leaves.
struct TreeStack {
  double lev[16];
  __device__ __forceinline__ void push(double v, int k) {
#pragma unroll
    for (int l = 0; l < 16; ++l) {
      if (!((k >> l) & 1)) {
        lev[l] = v;
        break;
      }
      v = lev[l] + v;
    }
  }
  __device__ __forceinline__ double finish(int n) {
    double acc = 0.0;
    bool any = false;
#pragma unroll
    for (int l = 0; l < 16; ++l) {
      if ((n >> l) & 1) {
        acc = any ? lev[l] + acc : lev[l];
        any = true;
      }
    }
    return acc;
  }
};
