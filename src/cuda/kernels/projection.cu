// The compressor projection y[M,N] = a[M,K] . w[N,K]^T with bf16 inputs and f32 output
// (SPEC section 7). At decode M is 1..16 and the op is one pass over w, so the kernel is built to
// keep many bytes of w in flight on every multiprocessor:
//
// - a block owns one n-tile of 8 rows of w and all of K; its NW warps split K into k-blocks of
//   128 (k-block kb goes to warp kb % NW), so a small N still spreads over every multiprocessor.
//   NW is 16 when the n-tiles fit in one wave of two blocks per multiprocessor, else 8 (four
//   blocks per multiprocessor): a second, partial wave would leave most multiprocessors idle;
// - per k-block, lane (g, q) streams 64 contiguous bytes of w row n0+g (four 16-byte loads, all
//   issued before any arithmetic) and the matching 16-byte vectors of a rows g and g+8;
// - the products run on bf16 tensor cores (mma m16n8k16, f32 accumulation): a bf16 x bf16 product
//   is exact in f32, as on CUDA cores, and a warp covers up to 16 rows of a at no extra cost.
//   The k order inside an MMA is a fixed permutation applied to both operands (the four lanes of
//   a quad take 32-element runs, so every load is a whole 16-byte vector);
// - the warps' partial tiles are summed in warp order through shared memory.
//
// Row m's result depends only on row m of a, w and K: the k-blocks, the MMA sequence and the
// warp order are fixed by K, never by M or by m's position, so the result is deterministic and
// batch-invariant. Rows 8..15 of the MMA are loaded only when the row block has more than 8 rows
// (BIG); the arithmetic of rows 0..7 is the same in both variants. M > 16 runs as several row
// blocks of 16 (gridDim.y).

#define PMAX 16  // rows of a per row block (the MMA's M)
#define PKB 128  // k per warp step

// 16 bytes of w, read once: not kept in L1.
__device__ __forceinline__ uint4 ld_stream4(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

template <bool BIG, int NW>
__device__ __forceinline__ void proj_body(const bf16_t* __restrict__ a, const bf16_t* __restrict__ w,
                                          float* __restrict__ y, int M, int N, int K) {
  const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
  const int g = lane >> 2, q = lane & 3;
  const int n0 = blockIdx.x * 8;
  const int m0 = blockIdx.y * PMAX;
  const int mrows = min(PMAX, M - m0);
  const bool nok = n0 + g < N;
  const bool a0ok = g < mrows, a1ok = BIG && g + 8 < mrows;
  const bf16_t* wr = w + (size_t)(nok ? n0 + g : 0) * K;
  const bf16_t* ar0 = a + (size_t)(m0 + (a0ok ? g : 0)) * K;
  const bf16_t* ar1 = a + (size_t)(m0 + (a1ok ? g + 8 : 0)) * K;
  const uint4 z = make_uint4(0, 0, 0, 0);
  const int nkb = (K + PKB - 1) / PKB;

  float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int kb = warp; kb < nkb; kb += NW) {
    uint4 wv[4], av0[4], av1[4];
#pragma unroll
    for (int v = 0; v < 4; ++v) {
      const int k = kb * PKB + 32 * q + 8 * v;
      const bool kok = k < K;
      wv[v] = (kok && nok) ? ld_stream4(wr + k) : z;
      av0[v] = (kok && a0ok) ? __ldg((const uint4*)(ar0 + k)) : z;
      av1[v] = (kok && a1ok) ? __ldg((const uint4*)(ar1 + k)) : z;
    }
#pragma unroll
    for (int v = 0; v < 4; ++v) {
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const u32 af[4] = {word(av0[v], 2 * u), word(av1[v], 2 * u), word(av0[v], 2 * u + 1),
                           word(av1[v], 2 * u + 1)};
        const u32 bf[2] = {word(wv[v], 2 * u), word(wv[v], 2 * u + 1)};
        mma_bf16(d, af, bf);
      }
    }
  }

  // Partial tiles in shared memory, summed in warp order. d[0..1]: row g, columns 2q, 2q+1;
  // d[2..3]: row g + 8.
  __shared__ float part[NW][PMAX][8];
  part[warp][g][2 * q] = d[0];
  part[warp][g][2 * q + 1] = d[1];
  part[warp][g + 8][2 * q] = d[2];
  part[warp][g + 8][2 * q + 1] = d[3];
  __syncthreads();
  if (threadIdx.x < PMAX * 8) {
    const int r = threadIdx.x / 8, c = threadIdx.x % 8;
    const int n = n0 + c;
    if (r < mrows && n < N) {
      float s = part[0][r][c];
#pragma unroll
      for (int i = 1; i < NW; ++i) s += part[i][r][c];
      y[(size_t)(m0 + r) * N + n] = s;
    }
  }
}

// Row blocks of up to 8 rows (decode) and of up to 16; 16 or 8 warps per block.
#define PROJ_KERNEL(name, BIG, NW, MINB)                                                              \
  extern "C" __global__ void __launch_bounds__(NW * WARP, MINB) name(const bf16_t* a, const bf16_t* w, \
                                                                      float* y, int M, int N, int K) { \
    proj_body<BIG, NW>(a, w, y, M, N, K);                                                          \
  }
PROJ_KERNEL(mhc_projection_m8_w16, false, 16, 2)
PROJ_KERNEL(mhc_projection_m16_w16, true, 16, 2)
PROJ_KERNEL(mhc_projection_m8_w8, false, 8, 4)
PROJ_KERNEL(mhc_projection_m16_w8, true, 8, 4)
