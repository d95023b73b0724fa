// Single-thread timing of the MatMulNBits CPU kernels (src/ops/quantized_cpu*.cc) without ORT or
// MLX: PrepareX, PrepareInt8A (accuracy_level 4) and RunColumns over all N columns on this thread,
// int4 with random bytes, scales and packed zero points. Prints min / p25 / median microseconds
// and a checksum (compare kernel variants: ONNXRUNTIME_EP_MLX_NBITS_ISA=avx2|scalar narrows).
//
//   g++ -O3 -DNDEBUG -std=gnu++20 -Isrc -isystem .deps/prefix/usr/include \
//       -isystem .venv/lib/python3.11/site-packages/mlx/include bench/nbits_kernel_bench.cc \
//       src/ops/quantized_cpu_kernels.cc src/ops/quantized_cpu_int8.cc src/ops/quantized_cpu_vnni.cc \
//       -o build/nbits_kernel_bench
//   build/nbits_kernel_bench K N block_size accuracy_level [rows=1] [reps=200]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>
#include "ops/quantized_cpu.h"
using namespace mlx_ep::nbits_cpu;
int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s K N block_size accuracy_level [rows=1] [reps=200]\n", argv[0]);
    return 2;
  }
  int K = atoi(argv[1]), N = atoi(argv[2]), bs = atoi(argv[3]), level = atoi(argv[4]);
  int M = argc > 5 ? atoi(argv[5]) : 1;
  int reps = argc > 6 ? atoi(argv[6]) : 200;
  NBitsShape s;
  s.K = K;
  s.N = N;
  s.bits = 4;
  s.block_size = bs;
  s.k_blocks = (K + bs - 1) / bs;
  s.int8_a = level == 4;
  std::mt19937 rng(1);
  std::vector<uint8_t> b((size_t)N * s.k_blocks * bs / 2);
  for (auto& v : b) v = rng() & 255;
  std::vector<float> sc((size_t)N * s.k_blocks);
  for (auto& v : sc) v = std::uniform_real_distribution<float>(0.01f, 0.1f)(rng);
  int zrb = (s.k_blocks * 4 + 7) / 8;
  std::vector<uint8_t> zp((size_t)N * zrb);
  for (auto& v : zp) v = rng() & 255;
  std::vector<float> x((size_t)M * K);
  for (auto& v : x) v = std::uniform_real_distribution<float>(-1, 1)(rng);
  std::vector<float> y((size_t)M * N);
  Problem p;
  p.shape = s;
  p.M = M;
  p.padded_k = s.k_blocks * bs;
  p.x = x.data();
  p.b = b.data();
  p.scales = sc.data();
  p.zp_packed = zp.data();
  p.zp_row_bytes = zrb;
  p.y = y.data();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    Problem q = p;
    std::vector<float> xb;
    PrepareX(q, xb);
    Int8A a;
    if (s.int8_a) PrepareInt8A(q, a);
    RunColumns(q, 0, N);
    auto t1 = std::chrono::steady_clock::now();
    t.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  std::sort(t.begin(), t.end());
  double cs = 0;
  for (float v : y) cs += v;
  printf("%s K=%d N=%d bs=%d lvl=%d M=%d: min %.1f us  p25 %.1f us  median %.1f us  checksum %.6f y0 %.6f\n",
         KernelIsa(), K, N, bs, level, M, t[0], t[t.size() / 4], t[t.size() / 2], cs, y[0]);
}
