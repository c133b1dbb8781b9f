// The compressor projection y[M,N] = a[M,K] . w[N,K]^T with bf16 inputs and f32 output
// (SPEC section 7). At decode M is 1..16 and the op is one pass over w: each block owns ROWS rows
// of w, its 8 warps split them ROWS ways and split K into 8/ROWS slices; every lane streams 16-byte
// vectors of w and keeps one f32 accumulator per row of a. Products of bf16 values are exact in
// f32. The order of every sum is fixed (lane-strided partial sums, a fixed shuffle tree, slices
// in order), and row m's arithmetic does not depend on M: deterministic and batch-invariant.
// M > 16 runs as several row blocks of 16 (gridDim.y).

#define PMAX 16

template <int ROWS>
__device__ void proj_body(const bf16_t* __restrict__ a, const bf16_t* __restrict__ w, float* __restrict__ y,
                          int M, int N, int K) {
  constexpr int SLICES = 8 / ROWS;
  const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
  const int rl = warp / SLICES, s = warp % SLICES;
  const int n = blockIdx.x * ROWS + rl;
  const int m0 = blockIdx.y * PMAX;
  const int mrows = min(PMAX, M - m0);
  const int K8 = K / 8;
  __shared__ float part[ROWS][SLICES][PMAX];
  float acc[PMAX];
#pragma unroll
  for (int m = 0; m < PMAX; ++m) acc[m] = 0.0f;
  if (n < N) {
    const uint4* wr = (const uint4*)(w + (size_t)n * K);
#pragma unroll 4
    for (int c = s * WARP + lane; c < K8; c += SLICES * WARP) {
      float wf[8];
      unpack8(__ldcs(wr + c), wf);
#pragma unroll
      for (int m = 0; m < PMAX; ++m) {
        if (m < mrows) {
          float af[8];
          unpack8(__ldg((const uint4*)(a + (size_t)(m0 + m) * K) + c), af);
          float t = acc[m];
#pragma unroll
          for (int e = 0; e < 8; ++e) t = fmaf(af[e], wf[e], t);
          acc[m] = t;
        }
      }
    }
  }
#pragma unroll
  for (int m = 0; m < PMAX; ++m) {
    float v = acc[m];
#pragma unroll
    for (int o = WARP / 2; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    acc[m] = v;
  }
  if (lane == 0) {
#pragma unroll
    for (int m = 0; m < PMAX; ++m) part[rl][s][m] = acc[m];
  }
  __syncthreads();
  if (threadIdx.x < ROWS * PMAX) {
    const int r = threadIdx.x / PMAX, m = threadIdx.x % PMAX;
    const int nn = blockIdx.x * ROWS + r;
    if (nn < N && m < mrows) {
      float v = part[r][0][m];
      for (int q = 1; q < SLICES; ++q) v += part[r][q][m];
      y[(size_t)(m0 + m) * N + nn] = v;
    }
  }
}

extern "C" __global__ void __launch_bounds__(256) mhc_projection(const bf16_t* a, const bf16_t* w, float* y, int M, int N, int K) {
  proj_body<2>(a, w, y, M, N, K);
}
