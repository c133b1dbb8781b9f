// Microbenchmark: how long a 64-bit word stored by one SM (st.relaxed.gpu, as attempt 159's x2_put)
// takes to be seen by a poll on another SM (ld.relaxed.gpu, as x2_get), for every partner SM of
// SM-holder block 0. Two blocks ping-pong a counter N times; one way is half the round trip. With
// FENCE=1 the writer issues __threadfence() after each store. Not part of the library.
// Build here, run on the GPU machine:
//   scripts/micro/build.sh here, then .gpu/micro/flag-pingpong there
// Prints, per partner SM, the median one-way ns over the pairs that landed there, and the spread.
#include <algorithm>
#include <cstdio>
#include <vector>

__device__ __forceinline__ void put(unsigned long long* w, unsigned long long v) {
  asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(w), "l"(v) : "memory");
}
__device__ __forceinline__ unsigned long long get(const unsigned long long* w) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(v) : "l"(w) : "memory");
  return v;
}
__device__ __forceinline__ unsigned long long gtimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ unsigned smid() {
  unsigned s;
  asm("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}

// Block 0 and block `partner` play; the others exit. words: [0] to the partner, [1] back.
template <bool FENCE>
__global__ void pingpong(unsigned long long* words, int partner, int n, unsigned long long* out) {
  if (threadIdx.x != 0) return;
  const int b = blockIdx.x;
  if (b != 0 && b != partner) return;
  unsigned long long* mine = words + (b == 0 ? 1 : 0);
  unsigned long long* theirs = words + (b == 0 ? 0 : 1);
  unsigned long long t0 = 0;
  for (int i = 1; i <= n; ++i) {
    if (b == 0) {
      if (i == 2) t0 = gtimer();  // the first round also waits for the partner to start
      put(theirs, i);
      if (FENCE) __threadfence();
      while (get(mine) != (unsigned long long)i) {
      }
    } else {
      while (get(mine) != (unsigned long long)i) {
      }
      put(theirs, i);
      if (FENCE) __threadfence();
    }
  }
  if (b == 0) {
    out[0] = (gtimer() - t0) / (2ull * (n - 1));
    out[1] = smid();
  } else {
    out[2] = smid();
  }
}

int main() {
  const int n = 2000, blocks = 132;
  unsigned long long *words, *out;
  cudaMalloc(&words, 16);
  cudaMalloc(&out, 24);
  for (int fence = 0; fence < 2; ++fence) {
    std::vector<std::vector<unsigned long long>> by_sm(256);
    std::vector<unsigned long long> all;
    unsigned long long home = 0;
    for (int rep = 0; rep < 2; ++rep) {
      for (int partner = 1; partner < blocks; ++partner) {
        cudaMemset(words, 0, 16);
        if (fence)
          pingpong<true><<<blocks, 32>>>(words, partner, n, out);
        else
          pingpong<false><<<blocks, 32>>>(words, partner, n, out);
        unsigned long long h[3];
        cudaMemcpy(h, out, 24, cudaMemcpyDeviceToHost);
        home = h[1];
        by_sm[h[2] % 256].push_back(h[0]);
        all.push_back(h[0]);
      }
    }
    if (cudaGetLastError() != cudaSuccess) {
      printf("CUDA error\n");
      return 1;
    }
    std::sort(all.begin(), all.end());
    printf("fence=%d: one way, ns: min %llu median %llu max %llu over %zu pairs (block 0 on SM %llu)\n", fence,
           all.front(), all[all.size() / 2], all.back(), all.size(), home);
    printf("  per partner SM (median ns):");
    for (int s = 0; s < 256; ++s) {
      auto& v = by_sm[s];
      if (v.empty()) continue;
      std::sort(v.begin(), v.end());
      printf(" %d:%llu", s, v[v.size() / 2]);
    }
    printf("\n");
  }
  return 0;
}
