// Microbenchmark: cycles per Sinkhorn half-pass of the gates' fast path on one warp (each lane
// holds one token's 4x4 matrix in registers, as gates4 / gates4_quad do), for variants of the
// sums' association and of the reciprocals (PERF_NOTES attempt 77), and for the scaled form
// (attempt 114): the matrix K kept fixed and only its row and column scales iterated, the result
// formed once at the end. Not part of the library. Build here, run there:
//   scripts/micro/build.sh here, then .gpu/micro/sinkhorn-pass there
#include <cstdio>
#include <cstdlib>
#include <cmath>

__device__ __forceinline__ float rcpa(float x) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
// Newton from a magic-constant seed: 3 steps (rel. error ~1e-8 for normal x).
__device__ __forceinline__ float rcpn(float x) {
  float r = __int_as_float(0x7EF311C3 - __float_as_int(x));
  r = r * fmaf(-x, r, 2.0f);
  r = r * fmaf(-x, r, 2.0f);
  r = r * fmaf(-x, r, 2.0f);
  return r;
}

// V: 0 tree + 4 rcp (main), 1 fold (eps first) + 4 rcp, 2 tree + pair rcp, 3 fold + pair rcp,
// 4 tree + one rcp (attempt 74), 5 fold + 2 rcp + 2 Newton, 6 fold eps last + 4 rcp.
template <int V>
__device__ __forceinline__ float sum4(float c0, float c1, float c2, float c3, float eps) {
  if (V == 0 || V == 2 || V == 4) return (c0 + c1) + ((c2 + c3) + eps);
  if (V == 6) return (((c0 + c1) + c2) + c3) + eps;
  return (((c0 + c1) + eps) + c2) + c3;
}
template <int V>
__device__ __forceinline__ void factors(const float s[4], float f[4]) {
  if (V == 0 || V == 1 || V == 6) {
    for (int a = 0; a < 4; ++a) f[a] = rcpa(s[a]);
  } else if (V == 2 || V == 3) {
    const float r01 = rcpa(s[0] * s[1]), r23 = rcpa(s[2] * s[3]);
    f[0] = r01 * s[1]; f[1] = r01 * s[0]; f[2] = r23 * s[3]; f[3] = r23 * s[2];
  } else if (V == 4) {
    const float p01 = s[0] * s[1], p23 = s[2] * s[3];
    const float r = rcpa(p01 * p23);
    f[0] = r * (s[1] * p23); f[1] = r * (s[0] * p23); f[2] = r * (s[3] * p01); f[3] = r * (s[2] * p01);
  } else {
    f[0] = rcpa(s[0]); f[1] = rcpn(s[1]); f[2] = rcpa(s[2]); f[3] = rcpn(s[3]);
  }
}
template <int V>
__device__ __forceinline__ void pass(float c[16], bool rows, float eps) {
  float s[4], f[4];
  if (rows) {
#pragma unroll
    for (int a = 0; a < 4; ++a) s[a] = sum4<V>(c[4 * a], c[4 * a + 1], c[4 * a + 2], c[4 * a + 3], eps);
    factors<V>(s, f);
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int b = 0; b < 4; ++b) c[4 * a + b] *= f[a];
  }
#pragma unroll
  for (int b = 0; b < 4; ++b) s[b] = sum4<V>(c[b], c[4 + b], c[8 + b], c[12 + b], eps);
  factors<V>(s, f);
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int b = 0; b < 4; ++b) c[4 * a + b] *= f[b];
}

// One Sinkhorn of the matrix form (the first pass column-only).
template <int V>
__device__ __forceinline__ void sinkhorn_matrix(float c[16], float eps) {
  pass<V>(c, false, eps);
#pragma unroll 1
  for (int it = 1; it < 20; ++it) pass<V>(c, true, eps);
}

// The scaled form: C = diag(r) K diag(c). A row pass C /= rowsum(C) + eps is, on the scales,
// q_i = sum_j K_ij c_j + eps q_i (q_i = 1 / r_i before the pass), r_i = 1 / q_i; a column pass
// the same on the columns. The eps terms (eps q) are formed off the chain. V = 0: each sum an FFMA
// chain from the eps term; V = 1: two FFMA pairs and an add.
template <int V>
__device__ __forceinline__ void scaled_half(const float k[16], bool rows, const float in[4], float out[4],
                                            float e[4], float eps) {
#pragma unroll
  for (int a = 0; a < 4; ++a) {  // element (a, b) of the sum: rows: k[4a + b]; columns: k[4b + a]
    float q;
    if (V != 1) {
      q = e[a];
#pragma unroll
      for (int b = 0; b < 4; ++b) q = fmaf(rows ? k[4 * a + b] : k[4 * b + a], in[b], q);
    } else {
      const float t0 = fmaf(rows ? k[4 * a + 1] : k[4 + a], in[1], fmaf(rows ? k[4 * a] : k[a], in[0], e[a]));
      const float t1 = fmaf(rows ? k[4 * a + 3] : k[12 + a], in[3], (rows ? k[4 * a + 2] : k[8 + a]) * in[2]);
      q = t0 + t1;
    }
    if (V < 2) out[a] = rcpa(q);
    else if (V == 4 || V == 5) out[a] = a < (V == 4 ? 2 : 3) ? rcpa(q) : rcpn(q);  // some by Newton
    else out[a] = q;  // V = 2, 3: the reciprocals below
    e[a] = eps * q;
  }
  if (V == 2) {  // one reciprocal of the four sums' product; its range tracked in e[] slots below
    const float q01 = out[0] * out[1], q23 = out[2] * out[3], r = rcpa(q01 * q23);
    const float q0 = out[0], q1 = out[1], q2 = out[2], q3 = out[3];
    out[0] = r * (q1 * q23); out[1] = r * (q0 * q23); out[2] = r * (q3 * q01); out[3] = r * (q2 * q01);
  } else if (V == 3) {  // one reciprocal a pair of sums
    const float r01 = rcpa(out[0] * out[1]), r23 = rcpa(out[2] * out[3]);
    const float q0 = out[0], q1 = out[1], q2 = out[2], q3 = out[3];
    out[0] = r01 * q1; out[1] = r01 * q0; out[2] = r23 * q3; out[3] = r23 * q2;
  }
}
// The range of the sums tracked (min and max of the four, two FMNMX trees a half-pass).
__device__ __forceinline__ void track(const float q[4], float& lo, float& hi) {
  lo = fminf(lo, fminf(fminf(q[0], q[1]), fminf(q[2], q[3])));
  hi = fmaxf(hi, fmaxf(fmaxf(q[0], q[1]), fmaxf(q[2], q[3])));
}
// One Sinkhorn of the scaled form, C formed at the end.
template <int V>
__device__ __forceinline__ void sinkhorn_scaled(float c[16], float eps) {
  float rs[4] = {1.0f, 1.0f, 1.0f, 1.0f}, cs[4], er[4] = {eps, eps, eps, eps}, ec[4] = {eps, eps, eps, eps};
  scaled_half<V>(c, false, rs, cs, ec, eps);
  float lo = 1.0f, hi = 1.0f;
#pragma unroll 1
  for (int it = 1; it < 20; ++it) {
    scaled_half<V>(c, true, cs, rs, er, eps);
    if (V == 2 || V == 3) track(er, lo, hi);
    scaled_half<V>(c, false, rs, cs, ec, eps);
    if (V == 2 || V == 3) track(ec, lo, hi);
  }
  if ((V == 2 || V == 3) && !(lo > 0x1p-60f && hi < 0x1p40f)) c[0] = -1.0f;
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int b = 0; b < 4; ++b) c[4 * a + b] = c[4 * a + b] * (rs[a] * cs[b]);
}

// The scaled form folded (attempt 157): the loop carries only the row and column sums. A half-pass
// takes the other vector's sums v, p = (v0 v1)(v2 v3), r = 1 / p, P_b = p / v_b as a product of
// the other three, and w_a <- r sum_b K_ab P_b + eps w_a: one reciprocal, in flight while the sums
// over b are formed. Each p is tested against [2^-80, 2^48) (`win`); C from the last half-pass's
// r P (the row scales) and four reciprocals (the column scales).
__device__ __forceinline__ void fold_half(const float k[16], bool rows, const float v[4], float w[4], float eps,
                                          unsigned& win, float& r, float pp[4]) {
  const float v01 = v[0] * v[1], v23 = v[2] * v[3], p = v01 * v23;
  r = rcpa(p);
  pp[0] = v[1] * v23;
  pp[1] = v[0] * v23;
  pp[2] = v01 * v[3];
  pp[3] = v01 * v[2];
#pragma unroll
  for (int a = 0; a < 4; ++a) {
    const float e = eps * w[a];
    float s = (rows ? k[4 * a] : k[a]) * pp[0];
#pragma unroll
    for (int b = 1; b < 4; ++b) s = fmaf(rows ? k[4 * a + b] : k[4 * b + a], pp[b], s);
    w[a] = fmaf(r, s, e);
  }
  win |= __float_as_uint(p) - 0x17800000u;
}
__device__ __forceinline__ void sinkhorn_fold(float c[16], float eps) {
  float x[4] = {1.0f, 1.0f, 1.0f, 1.0f}, y[4];
  float rx = 1.0f, px[4] = {1.0f, 1.0f, 1.0f, 1.0f}, ry, py[4];
  unsigned win = 0;
#pragma unroll
  for (int b = 0; b < 4; ++b) y[b] = (((c[b] + c[4 + b]) + c[8 + b]) + c[12 + b]) + eps;
#pragma unroll 1
  for (int it = 1; it < 20; ++it) {
    fold_half(c, true, y, x, eps, win, ry, py);
    fold_half(c, false, x, y, eps, win, rx, px);
  }
  if (win >= 0x40000000u) c[0] = -1.0f;
  float rs[4], cs[4];
#pragma unroll
  for (int a = 0; a < 4; ++a) {
    rs[a] = rx * px[a];
    cs[a] = rcpa(y[a]);
  }
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int b = 0; b < 4; ++b) c[4 * a + b] = c[4 * a + b] * (rs[a] * cs[b]);
}

// reps dependent Sinkhorns of one lane's matrix, timed by clock64.
template <int V, bool SCALED, bool FOLD = false>
__global__ void bench(const float* in, float* out, int reps, long long* cyc, float eps, int active = 32) {
  float c[16];
  for (int i = 0; i < 16; ++i) c[i] = in[threadIdx.x * 16 + i];
  __syncwarp();
  long long t0 = clock64();
  // Lanes past `active` skip the work (does the multi-function unit's time follow the active lanes?)
  for (int r = 0; r < (threadIdx.x < active ? reps : 0); ++r) {
    if (FOLD) sinkhorn_fold(c, eps);
    else if (SCALED) sinkhorn_scaled<V>(c, eps);
    else sinkhorn_matrix<V>(c, eps);
    // Perturb so the next repetition starts away from the fixed point (a dependent chain).
    if (r + 1 < reps)
#pragma unroll
      for (int i = 0; i < 16; ++i) c[i] = c[i] + (float)(i + 1) * 0.0625f;
  }
  long long t1 = clock64();
  for (int i = 0; i < 16; ++i) out[threadIdx.x * 16 + i] = c[i];
  if (threadIdx.x == 0) *cyc = t1 - t0;
}

// f64 Sinkhorn in the reference's order, for the error of each variant after one call.
static void ref(double c[16], double eps) {
  for (int it = 0; it < 20; ++it) {
    if (it > 0)
      for (int a = 0; a < 4; ++a) {
        double s = c[4 * a] + c[4 * a + 1] + c[4 * a + 2] + c[4 * a + 3] + eps;
        for (int b = 0; b < 4; ++b) c[4 * a + b] /= s;
      }
    for (int b = 0; b < 4; ++b) {
      double s = c[b] + c[4 + b] + c[8 + b] + c[12 + b] + eps;
      for (int a = 0; a < 4; ++a) c[4 * a + b] /= s;
    }
  }
}

template <int V, bool SCALED = false, bool FOLD = false>
static void run(const char* name, float* d_in, float* d_out, long long* d_cyc, const float* h_in, int active = 32) {
  const int reps = 2000;
  const float eps = 1e-6f;
  bench<V, SCALED, FOLD><<<1, 32>>>(d_in, d_out, 10, d_cyc, eps, active);  // warm-up
  long long best = -1;
  for (int k = 0; k < 5; ++k) {
    bench<V, SCALED, FOLD><<<1, 32>>>(d_in, d_out, reps, d_cyc, eps, active);
    long long cyc;
    cudaMemcpy(&cyc, d_cyc, sizeof cyc, cudaMemcpyDeviceToHost);
    if (best < 0 || cyc < best) best = cyc;
  }
  // Accuracy: one call (reps = 1: no perturbation).
  bench<V, SCALED, FOLD><<<1, 32>>>(d_in, d_out, 1, d_cyc, eps, active);
  float h_out[32 * 16];
  cudaMemcpy(h_out, d_out, sizeof h_out, cudaMemcpyDeviceToHost);
  double maxerr = 0;
  for (int l = 0; l < active; ++l) {
    double c[16];
    for (int i = 0; i < 16; ++i) c[i] = h_in[l * 16 + i];
    ref(c, eps);
    for (int i = 0; i < 16; ++i) maxerr = fmax(maxerr, fabs(h_out[l * 16 + i] - c[i]));
  }
  printf("%-34s %7.1f cycles/half-pass   max |err| after one call %.2e\n", name, (double)best / (reps * 39.0),
         maxerr);
}

int main() {
  float h_in[32 * 16];
  srand(7);
  for (int l = 0; l < 32; ++l)
    for (int a = 0; a < 4; ++a) {
      float e[4], s = 0;
      for (int b = 0; b < 4; ++b) { e[b] = expf(4.0f * ((float)rand() / RAND_MAX - 0.5f)); s += e[b]; }
      for (int b = 0; b < 4; ++b) h_in[l * 16 + 4 * a + b] = e[b] / s + 1e-6f;
    }
  float *d_in, *d_out;
  long long* d_cyc;
  cudaMalloc(&d_in, sizeof h_in);
  cudaMalloc(&d_out, sizeof h_in);
  cudaMalloc(&d_cyc, sizeof(long long));
  cudaMemcpy(d_in, h_in, sizeof h_in, cudaMemcpyHostToDevice);
  run<0>("tree sums, 4 rcp (main)", d_in, d_out, d_cyc, h_in);
  run<1>("sums in order, eps first, 4 rcp", d_in, d_out, d_cyc, h_in);
  run<6>("sums in order, eps last, 4 rcp", d_in, d_out, d_cyc, h_in);
  run<2>("tree sums, rcp of pairs", d_in, d_out, d_cyc, h_in);
  run<3>("in order eps first, rcp of pairs", d_in, d_out, d_cyc, h_in);
  run<4>("tree sums, one rcp (attempt 74)", d_in, d_out, d_cyc, h_in);
  run<5>("in order eps first, 2 rcp + 2 Newton", d_in, d_out, d_cyc, h_in);
  run<0, true>("scaled, FFMA chains (incl. end)", d_in, d_out, d_cyc, h_in);
  run<1, true>("scaled, FFMA pairs (incl. end)", d_in, d_out, d_cyc, h_in);
  run<2, true>("scaled, one rcp + range (incl. end)", d_in, d_out, d_cyc, h_in);
  run<3, true>("scaled, rcp of pairs + range", d_in, d_out, d_cyc, h_in);
  run<4, true>("scaled, 2 rcp + 2 Newton", d_in, d_out, d_cyc, h_in);
  run<5, true>("scaled, 3 rcp + 1 Newton", d_in, d_out, d_cyc, h_in);
  run<0, true, true>("scaled folded, 1 rcp + p window", d_in, d_out, d_cyc, h_in);
  // The scaled form with only some lanes of the warp active (the others skip the loop).
  run<0, true>("scaled, 16 lanes active", d_in, d_out, d_cyc, h_in, 16);
  run<0, true>("scaled, 8 lanes active", d_in, d_out, d_cyc, h_in, 8);
  run<0, true>("scaled, 4 lanes active", d_in, d_out, d_cyc, h_in, 4);
  run<0, true>("scaled, 1 lane active", d_in, d_out, d_cyc, h_in, 1);
  return 0;
}
