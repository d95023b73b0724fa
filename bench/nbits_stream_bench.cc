// Decode-like streaming of the MatMulNBits CPU kernels (src/ops/quantized_cpu*.cc) without ORT or
// MLX: copies of one K x N int4 matrix (no zero points, genai's layout) over about 400 MB, so every
// weight comes from memory as in a decode step, one row of A each. Prints GB/s of weights and
// scales read for: a plain read of the same bytes on one thread, the kernel on one thread, and
// the kernel on two threads (each half the columns, a spinning hand-off per matrix: the best a
// pool can do). This is what showed the level-4 kernel waiting on memory (6.6 GB/s per core, 12
// on two) and what NextColumns' prefetch gains (17-18 GB/s on two; quantized_cpu_simd.h).
//
//   g++ -O3 -DNDEBUG -std=gnu++20 -Isrc -isystem .deps/prefix/usr/include \
//       -isystem .venv/lib/python3.11/site-packages/mlx/include bench/nbits_stream_bench.cc \
//       src/ops/quantized_cpu_kernels.cc src/ops/quantized_cpu_int8.cc src/ops/quantized_cpu_vnni.cc \
//       -o build/nbits_stream_bench -lpthread
//   build/nbits_stream_bench K N block_size accuracy_level     (e.g. 896 4864 32 4)
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "ops/quantized_cpu.h"

using namespace mlx_ep::nbits_cpu;

namespace {

void* HugeZeroed(size_t bytes) {  // 2 MB pages where the kernel gives them (THP on madvise)
  const size_t rounded = (bytes + (2u << 20) - 1) / (2u << 20) * (2u << 20);
  void* p = std::aligned_alloc(2u << 20, rounded);
  madvise(p, rounded, MADV_HUGEPAGE);
  std::memset(p, 1, rounded);
  return p;
}

double MedianSeconds(const std::function<void()>& fn, int reps = 7) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s K N block_size accuracy_level\n", argv[0]);
    return 2;
  }
  NBitsShape s;
  s.K = std::atoi(argv[1]);
  s.N = std::atoi(argv[2]);
  s.bits = 4;
  s.block_size = std::atoi(argv[3]);
  s.k_blocks = (s.K + s.block_size - 1) / s.block_size;
  s.int8_a = std::atoi(argv[4]) == 4;
  const size_t b_bytes = static_cast<size_t>(s.N) * s.k_blocks * s.block_size / 2;
  const size_t s_bytes = static_cast<size_t>(s.N) * s.k_blocks * sizeof(float);
  const int copies = static_cast<int>(std::max<size_t>(1, (400u << 20) / (b_bytes + s_bytes)));
  std::vector<uint8_t*> weights(copies);
  std::vector<float*> scales(copies);
  for (int g = 0; g < copies; ++g) {
    weights[g] = static_cast<uint8_t*>(HugeZeroed(b_bytes));
    scales[g] = static_cast<float*>(HugeZeroed(s_bytes));
    std::fill(scales[g], scales[g] + s_bytes / sizeof(float), 0.01f);
  }
  std::vector<float> x(s.K, 0.5f), y(s.N);
  // Columns [n0, n1) of copy g, A prepared as the primitive does.
  auto columns = [&](int g, int n0, int n1) {
    Problem p;
    p.shape = s;
    p.M = 1;
    p.padded_k = s.k_blocks * s.block_size;
    p.x = x.data();
    p.b = weights[g];
    p.scales = scales[g];
    p.y = y.data();
    std::vector<float> xb;
    PrepareX(p, xb);
    Int8A a;
    if (s.int8_a) PrepareInt8A(p, a);
    RunColumns(p, n0, n1);
  };
  volatile int sink = 0;
  auto plain_read = [&] {
    __m128i acc = _mm_setzero_si128();
    for (int g = 0; g < copies; ++g) {
      for (size_t i = 0; i < b_bytes; i += 16) acc = _mm_add_epi32(acc, _mm_load_si128((const __m128i*)(weights[g] + i)));
      for (size_t i = 0; i < s_bytes; i += 16) acc = _mm_add_epi32(acc, _mm_load_si128((const __m128i*)(scales[g]) + i / 16));
    }
    sink = _mm_cvtsi128_si32(acc);
  };
  auto one_thread = [&] {
    for (int g = 0; g < copies; ++g) columns(g, 0, s.N);
  };
  const int mid = s.N / 2 / 16 * 16;
  std::atomic<int> published{0}, finished{0};
  std::atomic<bool> stop{false};
  std::thread helper([&] {
    for (int seen = 0; !stop.load();) {
      const int g = published.load();
      if (g == seen) continue;
      seen = g;
      columns((g - 1) % copies, mid, s.N);
      finished.fetch_add(1);
    }
  });
  auto two_threads = [&] {
    for (int g = 0; g < copies; ++g) {
      const int before = finished.load();
      published.fetch_add(1);
      columns(g, 0, mid);
      while (finished.load() == before) {
      }
    }
  };
  const double total = static_cast<double>(copies) * (b_bytes + s_bytes);
  std::printf("%s K=%d N=%d block=%d level=%s, %d copies, %.0f MB:\n", KernelIsa(), s.K, s.N, s.block_size,
              s.int8_a ? "4" : "0", copies, total / 1e6);
  std::printf("  plain read, 1 thread: %.1f GB/s\n", total / MedianSeconds(plain_read) / 1e9);
  std::printf("  kernel, 1 thread:     %.1f GB/s\n", total / MedianSeconds(one_thread) / 1e9);
  std::printf("  kernel, 2 threads:    %.1f GB/s\n", total / MedianSeconds(two_threads) / 1e9);
  stop = true;
  helper.join();
}
