// The BLAS under MLX's CPU backend: which library libmlx's cblas_sgemm calls land in, and the
// BLAS thread policy. On Linux the EP ships libonnxruntime_ep_mlx_blas (blas_shim.c), which
// routes libmlx's cblas_*gemm to OpenBLAS (PyPI's scipy-openblas32) when it is loaded before
// libmlx; on macOS MLX uses Accelerate and there is nothing to do.
#pragma once

#include <cstdint>
#include <string>

namespace mlx_ep {

/** Where libmlx.so's calls to cblas_sgemm go in this process. */
struct BlasBinding {
  /** "openblas" (through the EP's shim), "bundled" (the reference BLAS of the mlx-cpu wheel),
   *  "other" (another library, e.g. one the user preloaded), or "unknown" (not an ELF platform,
   *  or libmlx's import could not be read). */
  std::string kind;
  std::string sgemm_library;  ///< the file that libmlx's cblas_sgemm is bound to ("" if unknown)
  std::string backend;        ///< for "openblas": the OpenBLAS library the shim forwards to
  std::string corename;       ///< for "openblas": the CPU kernel set OpenBLAS picked
  int threads = 0;            ///< for "openblas": the threads products are split over (blas_split.c)
  std::string note;           ///< what to do when kind is not "openblas" (empty otherwise)
};

/** Applies the BLAS thread policy once per process: ONNXRUNTIME_EP_MLX_BLAS_THREADS, else
 *  kDefaultBlasThreads. No-op without the shim. */
void ConfigureBlasThreads();

/** BLAS threads unless ONNXRUNTIME_EP_MLX_BLAS_THREADS says otherwise: the CPUs this process may
 *  run on (its affinity mask), as OpenBLAS and ORT's intra-op pool choose. Products of at least
 *  ~4 M multiply-adds run in independent parts over that many threads (blas_split.c): on a
 *  2-core machine 2 threads make a 512x256x1024 MatMul 1.85x faster than 1 (docs/performance.md),
 *  and no thread spins waiting for another, so a core taken by another thread (ORT's spinning
 *  intra-op pool) costs at most the parts a late thread claimed. Larger machines are not measured
 *  on the CPU backend. */
int DefaultBlasThreads();

/** The BLAS threads the default policy uses at a 1-minute load average of `load`: one while the
 *  load exceeds the process's CPUs by more than half a CPU (parts wait for a thread to be
 *  scheduled on oversubscribed cores), else the configured count; -1 without the shim. */
int BlasThreadsForLoad(double load);

/** Sets the thread count as ConfigureBlasThreads would, `fit_to_load` as the default policy
 *  does (tests); false without the shim. */
bool ConfigureBlasThreadsForTest(int threads, bool fit_to_load);

/** Reads libmlx's binding of cblas_sgemm (its GOT slot); when the slot is still unresolved
 *  (lazy binding), first runs a 2x2 matmul on MLX's CPU stream to resolve it. */
BlasBinding InspectBlasBinding();

/** Sets the BLAS thread count (process-wide); false without the shim. */
bool SetBlasThreads(int threads);

/** Whether SgemmRowsByColumns computes (the EP was built with the OpenBLAS shim). */
bool HaveSgemm();

/** c [m, n] (row stride ldc) = a [m, k] (row stride lda) @ b^T, b [n, k] (row stride ldb), float32,
 *  through the shim's OpenBLAS (the BLAS that libmlx's matmuls use), its threads and thread policy;
 *  false (nothing written) without the shim. For kernels inside MLX primitives (nbits_cpu). */
bool SgemmRowsByColumns(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
                        int ldc);

/** c [m, n] (row stride ldc) = a [m, k] (row stride lda) @ b [k, n] (row stride ldb) + beta * c,
 *  float32, as SgemmRowsByColumns; false (nothing written) without the shim. */
bool SgemmRowMajor(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float beta,
                   float* c, int ldc);

/** Products run in parts so far on the EP's worker pool (blas_pool.c), -1 without the shim. */
int64_t BlasPoolBatches();

/** One line for the verbose log. */
std::string DescribeBlasBinding(const BlasBinding& b);

}  // namespace mlx_ep
