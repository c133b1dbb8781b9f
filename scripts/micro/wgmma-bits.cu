// Microbenchmark (bits, not time): do Hopper's warpgroup MMAs (wgmma, operands read from shared
// memory by the tensor cores) give the same bits as the warp MMAs the seam kernels use
// (mma.sync m16n8k8 TF32), for the seam's projection chains? PERF_NOTES attempt 165. The kernels'
// batch invariance needs every kernel to produce a chunk's partials with the same bits, so a
// projection by wgmma (no fragment loads, no per-thread split) is only open to the large-T stream
// kernel if they match.
//
// Data, as the projection sees it: activations X (64 tokens x K = 128, bf16 values widened to f32:
// exact in TF32) and fn's pieces P (48 rows: the TF32 hi of 24 mixes, then their lo remainders,
// whose low 13 bits the tensor cores ignore; 16 zero rows pad M to 64 where P is A). K runs in 16
// steps of 8, each accumulated onto the last from zero (project_step's chains). Six ways to the
// 48 x 64 accumulators:
//   0. mma.sync, A = X (tokens as rows), B = P: the tile kernels' unswapped step;
//   1. mma.sync, A = P, B = X: the swapped step of the lanes-by-channels kernels (TR);
//   2. wgmma m64n48k8, A = X, B = P, both from shared memory;
//   3. wgmma m64n64k8, A = P, B = X, both from shared memory;
//   4. wgmma m64n48k8, A = X from registers (each warp its 16 tokens in mma.sync's A fragment,
//      as the stream kernel's warps hold them), B = P: the form a stream launch would take, four
//      warps a chunk over a tile of 64 tokens, the hi and lo chains side by side in one thread;
//   5. way 4 with the raw weights as the hi rows: whether fn's own bytes can be the hi piece
//      (the tensor cores then truncate them), which halves the pieces' shared memory.
// Both operands are K-major (TF32 wgmma allows no other), no swizzle: a core matrix is 8 rows x
// 16 bytes, rows 16 bytes apart; a k8 step of R rows is R/8 x 2 of them. The descriptor's two
// byte offsets are tried both ways (which is the K stride and which the M/N stride), so a wrong
// reading of the layout shows as a large error against the f64 reference instead of a false
// verdict. Prints, per way and trial, the largest |acc - f64| / sum |terms|, the count of
// accumulators whose bits differ from way 0, and the count that differ from a third reference
// computed on the host: MMA-Sim's bit-accurate model of a Hopper TF32 k8 step (model_k8 below;
// PERF_NOTES attempt 165), which says both instructions give the same bits.
//
// Not part of the library. Build here, run on the GPU machine:
//   scripts/micro/build.sh here, then .gpu/micro/wgmma-bits there
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

// The library's device helpers (u32, mma_tf32: the kernels' own warp MMA), as NVRTC prepends them.
#include "../../src/cuda/kernels/common.cuh"

constexpr int TOK = 64, KK = 128, STEPS = KK / 8, PR = 64, MIX = 24;

// out[p * TOK + t]: piece row p (0..63), token t. Way 0 (swap = false): A = X rows, B = P rows;
// way 1 (swap): A = P rows, B = X rows. One warp a 16 x 8 output tile, chained over the 16 steps.
__global__ void ways_sync(const float* X, const float* P, float* out, bool swap) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const float* Am = swap ? P : X;
  const float* Bm = swap ? X : P;
  const int mrows = swap ? PR : TOK, ncols = swap ? TOK : PR;
  for (int tile = warp; tile < (mrows / 16) * (ncols / 8); tile += blockDim.x / 32) {
    const int m0 = (tile / (ncols / 8)) * 16, n0 = (tile % (ncols / 8)) * 8;
    float d[4] = {0, 0, 0, 0};
    for (int s = 0; s < STEPS; ++s) {
      const int k = s * 8;
      u32 a[4], b[2];
      a[0] = __float_as_uint(Am[(m0 + g) * KK + k + q]);
      a[1] = __float_as_uint(Am[(m0 + g + 8) * KK + k + q]);
      a[2] = __float_as_uint(Am[(m0 + g) * KK + k + q + 4]);
      a[3] = __float_as_uint(Am[(m0 + g + 8) * KK + k + q + 4]);
      b[0] = __float_as_uint(Bm[(n0 + g) * KK + k + q]);
      b[1] = __float_as_uint(Bm[(n0 + g) * KK + k + q + 4]);
      mma_tf32(d, a, b);
    }
    const int r[4] = {m0 + g, m0 + g, m0 + g + 8, m0 + g + 8};
    const int c[4] = {n0 + 2 * q, n0 + 2 * q + 1, n0 + 2 * q, n0 + 2 * q + 1};
    for (int i = 0; i < 4; ++i) {
      const int p = swap ? r[i] : c[i], t = swap ? c[i] : r[i];
      out[p * TOK + t] = d[i];
    }
  }
}

// Byte offset of (row r, k kk) of step s in the shared layout: core matrix (r / 8, kk / 4) at
// KSTR * (kk / 4) + MSTR * (r / 8), row r % 8 16 bytes in, element kk % 4 4 bytes in.
constexpr u32 KSTR = 128, MSTR = 256, STEP_BYTES = 64 * 8 * 4;
__host__ __device__ inline u32 soff(int s, int r, int kk) {
  return s * STEP_BYTES + (kk / 4) * KSTR + (r / 8) * MSTR + (r % 8) * 16 + (kk % 4) * 4;
}

__device__ __forceinline__ unsigned long long desc(u32 saddr, u32 lbo, u32 sbo) {
  return (unsigned long long)((saddr >> 4) & 0x3fff) | ((unsigned long long)((lbo >> 4) & 0x3fff) << 16) |
         ((unsigned long long)((sbo >> 4) & 0x3fff) << 32);
}

#define WG_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define WG_OUT24 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23}"
#define WG_OUT32 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23," \
                 "%24,%25,%26,%27,%28,%29,%30,%31}"

// D (64 x N) += A . B over one k8 step (acc = 0: D = A . B). A and B from shared memory.
__device__ __forceinline__ void wg_n64_ss(float (&d)[32], unsigned long long da, unsigned long long db, int acc) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 " WG_OUT32 ", %32, %33, p, 1, 1;\n}\n"
               : WG_D8(0), WG_D8(8), WG_D8(16), WG_D8(24)
               : "l"(da), "l"(db), "r"(acc));
}
__device__ __forceinline__ void wg_n48_ss(float (&d)[24], unsigned long long da, unsigned long long db, int acc) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %26, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n48k8.f32.tf32.tf32 " WG_OUT24 ", %24, %25, p, 1, 1;\n}\n"
               : WG_D8(0), WG_D8(8), WG_D8(16)
               : "l"(da), "l"(db), "r"(acc));
}
// A from registers: warp w of the warpgroup gives rows 16 w .. 16 w + 15 in mma.sync's A fragment.
__device__ __forceinline__ void wg_n48_rs(float (&d)[24], const u32 (&a)[4], unsigned long long db, int acc) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %29, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n48k8.f32.tf32.tf32 " WG_OUT24 ", {%24,%25,%26,%27}, %28, p, 1, 1;\n}\n"
               : WG_D8(0), WG_D8(8), WG_D8(16)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}

// One warpgroup, ways 2-5 (see the top); P is the pieces' buffer the way reads (way 5: hi rows
// raw). trial 0: LBO = KSTR, SBO = MSTR; trial 1: the other way round.
__global__ void ways_wg(const float* X, const float* P, float* out, int way, int trial) {
  extern __shared__ __align__(1024) unsigned char sm[];
  unsigned char* sx = sm;
  unsigned char* sp = sm + STEPS * STEP_BYTES;
  for (int i = threadIdx.x; i < TOK * KK; i += blockDim.x) {
    const int r = i / KK, k = i % KK;
    *(float*)(sx + soff(k / 8, r, k % 8)) = X[i];
    *(float*)(sp + soff(k / 8, r, k % 8)) = P[i];
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  const u32 xs = (u32)__cvta_generic_to_shared(sx), ps = (u32)__cvta_generic_to_shared(sp);
  const u32 lbo = trial ? MSTR : KSTR, sbo = trial ? KSTR : MSTR;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  float d[32];  // way 3: 64 tokens; otherwise the first 24: 48 piece columns
  for (int i = 0; i < 32; ++i) d[i] = 0.0f;
  float (&d24)[24] = *reinterpret_cast<float (*)[24]>(d);
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  for (int s = 0; s < STEPS; ++s) {
    const unsigned long long dx = desc(xs + s * STEP_BYTES, lbo, sbo), dp = desc(ps + s * STEP_BYTES, lbo, sbo);
    if (way == 3) {
      wg_n64_ss(d, dp, dx, s > 0);
    } else if (way == 2) {
      wg_n48_ss(d24, dx, dp, s > 0);
    } else {
      const int r0 = 16 * warp + g, k = 8 * s + q;
      const u32 a[4] = {__float_as_uint(X[r0 * KK + k]), __float_as_uint(X[(r0 + 8) * KK + k]),
                        __float_as_uint(X[r0 * KK + k + 4]), __float_as_uint(X[(r0 + 8) * KK + k + 4])};
      wg_n48_rs(d24, a, dp, s > 0);
    }
  }
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  const int ntiles = way == 3 ? 8 : 6;
  for (int i = 0; i < ntiles; ++i) {
    for (int e = 0; e < 4; ++e) {
      const int r = 16 * warp + g + (e >= 2 ? 8 : 0), c = 8 * i + 2 * q + (e & 1);
      const int p = way == 3 ? r : c, t = way == 3 ? c : r;
      if (p < 2 * MIX) out[p * TOK + t] = d[4 * i + e];
    }
  }
}

static float bf16_round(float v) {
  u32 u;
  memcpy(&u, &v, 4);
  u = (u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000u;
  memcpy(&v, &u, 4);
  return v;
}
static double normal() {
  const double u1 = (rand() + 1.0) / (RAND_MAX + 2.0), u2 = (rand() + 1.0) / (RAND_MAX + 2.0);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
// What the tensor cores read of a TF32 operand: the top 19 bits.
static double tf32_of(float v) {
  u32 u;
  memcpy(&u, &v, 4);
  u &= 0xffffe000u;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// MMA-Sim's model of one Hopper TF32 k8 step (mma.sync m16n8k8 and wgmma m64nNk8 alike): the 8
// products of the TF32-truncated operands, exact, and c, each as a significand and an exponent;
// every term truncated to 25 fractional bits below the largest exponent among them; the terms
// summed exactly; the sum rounded toward zero to f32. Finite inputs only.
static void sig_exp(double x, double& s, int& e) {  // 1 <= |s| < 2 (f32's subnormal range kept)
  int ex;
  s = 2.0 * frexp(x, &ex);
  e = ex - 1;
  if (e < -126) {
    s = ldexp(s, e + 126);
    e = -126;
  }
  if (s == 0.0) e = -126;
}
static float model_k8(const float* a, const float* b, float c) {
  double s[9];
  int e[9];
  sig_exp(c, s[0], e[0]);
  for (int i = 0; i < 8; ++i) {
    double sa, sb;
    int ea, eb;
    sig_exp(tf32_of(a[i]), sa, ea);
    sig_exp(tf32_of(b[i]), sb, eb);
    s[1 + i] = sa * sb;
    e[1 + i] = ea + eb;
  }
  int emax = e[0];
  for (int i = 1; i < 9; ++i) emax = e[i] > emax ? e[i] : emax;
  double sum = 0.0;
  for (int i = 0; i < 9; ++i) sum += ldexp(trunc(ldexp(s[i], 25 + e[i] - emax)), -25);
  double so;
  int eo;
  sig_exp(ldexp(sum, emax), so, eo);
  return (float)ldexp(ldexp(trunc(ldexp(so, 23)), -23), eo);
}

int main() {
  constexpr int WAYS = 6;
  const int rounds = 20;
  std::vector<float> X(TOK * KK), P(PR * KK, 0.0f), Praw(PR * KK, 0.0f), out(WAYS * PR * TOK);
  float *dX, *dP, *dPraw, *dout;
  cudaMalloc(&dX, X.size() * 4);
  cudaMalloc(&dP, P.size() * 4);
  cudaMalloc(&dPraw, Praw.size() * 4);
  cudaMalloc(&dout, out.size() * 4);
  const int smem = 2 * STEPS * STEP_BYTES;
  cudaFuncSetAttribute(ways_wg, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  double worst[2][WAYS] = {};
  long diff[2][WAYS] = {}, off_model[2][WAYS] = {};
  std::vector<float> model(PR * TOK);
  for (int round = 0; round < rounds; ++round) {
    srand(1234 + round);
    for (auto& v : X) v = bf16_round((float)normal());
    for (int m = 0; m < MIX; ++m) {
      for (int k = 0; k < KK; ++k) {
        const float v = (float)(0.01 * normal());
        u32 u;
        memcpy(&u, &v, 4);
        u &= 0xffffe000u;
        float hi;
        memcpy(&hi, &u, 4);
        P[m * KK + k] = hi;
        Praw[m * KK + k] = v;  // way 5: the raw weight as its own hi piece
        P[(MIX + m) * KK + k] = Praw[(MIX + m) * KK + k] = v - hi;  // exact; its low bits the tensor cores' to ignore
      }
    }
    // The model's chains: 16 steps, each accumulated onto the last from zero.
    for (int p = 0; p < 2 * MIX; ++p) {
      for (int t = 0; t < TOK; ++t) {
        float acc = 0.0f;
        for (int st = 0; st < STEPS; ++st) acc = model_k8(&X[t * KK + 8 * st], &P[p * KK + 8 * st], acc);
        model[p * TOK + t] = acc;
      }
    }
    cudaMemcpy(dX, X.data(), X.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dP, P.data(), P.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dPraw, Praw.data(), Praw.size() * 4, cudaMemcpyHostToDevice);
    for (int trial = 0; trial < 2; ++trial) {
      cudaMemset(dout, 0xff, out.size() * 4);  // NaN: an unwritten accumulator fails
      ways_sync<<<1, 256>>>(dX, dP, dout, false);
      ways_sync<<<1, 256>>>(dX, dP, dout + PR * TOK, true);
      for (int w = 2; w < WAYS; ++w) ways_wg<<<1, 128, smem>>>(dX, w == 5 ? dPraw : dP, dout + w * PR * TOK, w, trial);
      const cudaError_t err = cudaDeviceSynchronize();
      if (err != cudaSuccess) {
        printf("CUDA error: %s\n", cudaGetErrorString(err));
        return 1;
      }
      cudaMemcpy(out.data(), dout, out.size() * 4, cudaMemcpyDeviceToHost);
      for (int w = 0; w < WAYS; ++w) {
        for (int p = 0; p < 2 * MIX; ++p) {
          for (int t = 0; t < TOK; ++t) {
            double ref = 0.0, mag = 0.0;
            for (int k = 0; k < KK; ++k) {
              const double term = (double)X[t * KK + k] * tf32_of(P[p * KK + k]);
              ref += term;
              mag += fabs(term);
            }
            const float got = out[w * PR * TOK + p * TOK + t];
            const double e = std::isfinite(got) ? fabs(got - ref) / (mag > 0 ? mag : 1.0) : INFINITY;
            if (e > worst[trial][w]) worst[trial][w] = e;
            u32 a, b;
            memcpy(&a, &got, 4);
            memcpy(&b, &out[p * TOK + t], 4);
            diff[trial][w] += a != b;
            memcpy(&b, &model[p * TOK + t], 4);
            off_model[trial][w] += a != b;
          }
        }
      }
    }
  }
  const char* names[WAYS] = {"mma.sync A=X B=P (tile kernels)", "mma.sync A=P B=X (swapped, TR)",
                             "wgmma n48 A=X B=P (smem)",        "wgmma n64 A=P B=X (smem)",
                             "wgmma n48 A=X (registers) B=P",   "way 4, hi = the raw weight"};
  int right = 0, bad = 0;
  printf("%d rounds, %d accumulators a way and round (48 piece rows x 64 tokens, K = %d)\n", rounds, 2 * MIX * TOK, KK);
  for (int trial = 0; trial < 2; ++trial) {
    printf("descriptor trial %d (LBO = %u, SBO = %u):\n", trial, trial ? MSTR : KSTR, trial ? KSTR : MSTR);
    for (int w = 0; w < WAYS; ++w) {
      printf("  way %d %-32s max |acc - f64| / sum|terms| %.3e   bits differing from way 0: %ld, from the model: %ld\n",
             w, names[w], worst[trial][w], diff[trial][w], off_model[trial][w]);
      if (w >= 2 && worst[trial][w] < 1e-5) {
        ++right;
        bad += diff[trial][w] != 0;
      }
    }
  }
  printf("verdict: %d wgmma (way, trial) pairs with the right layout; %s\n", right,
         bad ? "some of them differ in bits from mma.sync" : "every one gives mma.sync's bits");
  return 0;
}
