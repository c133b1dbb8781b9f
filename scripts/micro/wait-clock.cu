// Microbenchmark: does an SM's clock64 keep counting at the SM clock while every warp of its block
// sits in `griddepcontrol.wait`? The seam's timelines (`mhc bench --timeline`) report the "SM
// clock" as a block's clock64 over globaltimer from its start stamp to its last, and blocks that
// land early under programmatic dependent launch spend much of that span waiting (PERF_NOTES
// attempts 63 and 116 read a lower clock there). Not part of the library. Build here, run on the
// GPU machine:
//   scripts/micro/build.sh here, then .gpu/micro/wait-clock there
//
// Kernel `primary` (one block a multiprocessor on half of them) triggers its dependents at once,
// then keeps its SMs busy for `ns` of globaltimer. Kernel `secondary` (launched with the
// programmatic-stream-serialization attribute, one block on each of the other SMs) stamps
// (globaltimer, clock64) at its start, after `griddepcontrol.wait`, and after a busy loop of the
// same length; the ratio of clock64 to globaltimer over the wait and over the busy loop is
// printed (median over blocks), three pairs for each of ns = 5, 20 and 50 us.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>

#define CHECK(x)                                                              \
  do {                                                                        \
    cudaError_t e_ = (x);                                                     \
    if (e_ != cudaSuccess) {                                                  \
      fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      exit(1);                                                                \
    }                                                                         \
  } while (0)

typedef unsigned long long u64;
__device__ __forceinline__ u64 gtime() {
  u64 g;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g));
  return g;
}
__device__ __forceinline__ u64 clk() {
  u64 c;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(c));
  return c;
}
// Busy for ns of globaltimer; returns a value so that the loop is not removed.
__device__ float busy(u64 ns) {
  const u64 t0 = gtime();
  float x = threadIdx.x;
  while (gtime() - t0 < ns) {
#pragma unroll 16
    for (int i = 0; i < 64; ++i) x = fmaf(x, 1.0000001f, 0.5f);
  }
  return x;
}

__global__ void primary(u64 ns, float* sink) {
  asm volatile("griddepcontrol.launch_dependents;" :::);
  const float x = busy(ns);
  if (x == -1.0f) sink[0] = x;
}

// out[block][6]: g0, c0 (start), g1, c1 (waited), g2, c2 (after the busy loop).
__global__ void secondary(u64 ns, u64* out, float* sink) {
  u64 g0 = 0, c0 = 0;
  if (threadIdx.x == 0) { g0 = gtime(); c0 = clk(); }
  asm volatile("griddepcontrol.wait;" ::: "memory");
  u64 g1 = 0, c1 = 0;
  if (threadIdx.x == 0) { g1 = gtime(); c1 = clk(); }
  const float x = busy(ns);
  if (x == -1.0f) sink[0] = x;
  if (threadIdx.x == 0) {
    const u64 g2 = gtime(), c2 = clk();
    u64* o = out + blockIdx.x * 6;
    o[0] = g0; o[1] = c0; o[2] = g1; o[3] = c1; o[4] = g2; o[5] = c2;
  }
}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

int main() {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  // 120 KB of shared memory a block and 1024 threads: one block a multiprocessor for each kernel,
  // so the secondary's blocks land on the SMs the primary leaves free.
  const int smem = 120 * 1024;
  CHECK(cudaFuncSetAttribute(primary, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  CHECK(cudaFuncSetAttribute(secondary, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const int half = sms / 2;
  u64* out;
  float* sink;
  CHECK(cudaMalloc(&out, sizeof(u64) * 6 * sms));
  CHECK(cudaMalloc(&sink, 4));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  printf("SMs %d; primary on %d blocks, secondary on %d blocks (1024 threads, 120 KB each)\n", sms, half,
         sms - half);
  printf("%10s %14s %14s %14s\n", "spin (us)", "wait (us)", "GHz waiting", "GHz busy");
  for (u64 ns : {5000ull, 20000ull, 50000ull}) {
    for (int rep = 0; rep < 3; ++rep) {
      primary<<<half, 1024, smem, s>>>(ns, sink);
      CHECK(cudaGetLastError());
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(sms - half);
      cfg.blockDim = dim3(1024);
      cfg.dynamicSmemBytes = smem;
      cfg.stream = s;
      cfg.attrs = attr;
      cfg.numAttrs = 1;
      CHECK(cudaLaunchKernelEx(&cfg, secondary, ns, out, sink));
      CHECK(cudaStreamSynchronize(s));
      std::vector<u64> h(6 * (sms - half));
      CHECK(cudaMemcpy(h.data(), out, sizeof(u64) * h.size(), cudaMemcpyDeviceToHost));
      std::vector<double> wait_us, ghz_wait, ghz_busy;
      for (int b = 0; b < sms - half; ++b) {
        const u64* o = &h[6 * b];
        if (o[2] > o[0]) {
          wait_us.push_back((o[2] - o[0]) / 1e3);
          ghz_wait.push_back((double)(o[3] - o[1]) / (double)(o[2] - o[0]));
        }
        if (o[4] > o[2]) ghz_busy.push_back((double)(o[5] - o[3]) / (double)(o[4] - o[2]));
      }
      printf("%10.1f %14.2f %14.3f %14.3f\n", ns / 1e3, median(wait_us), median(ghz_wait), median(ghz_busy));
    }
  }
  return 0;
}
