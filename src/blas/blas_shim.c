/* libonnxruntime_ep_mlx_blas (Linux): gives libmlx.so a real BLAS.
 *
 * The mlx-cpu wheel's libmlx.so imports cblas_sgemm, cblas_dgemm and cblas_cgemm by name and NEEDs
 * the netlib reference BLAS that the wheel bundles (single-threaded, unblocked: ~3 GFLOP/s).
 * PyPI's scipy-openblas32 exports only scipy_-prefixed names, so it cannot stand in for it by
 * itself. This library defines the three unprefixed names and forwards them to OpenBLAS. The EP
 * library lists it in its NEEDED entries before libmlx.so, so that when the EP loads libmlx.so
 * the dynamic linker, searching the EP's dependencies breadth-first, finds these definitions
 * before the bundled BLAS (which is a dependency of libmlx, one level further down).
 *
 * libmlx's LAPACK imports (sgetrf_, ssyevd_, ... used only by mlx::linalg, which no op of the EP
 * uses) are left to the wheel's liblapack.
 *
 * The other functions are the EP's controls and diagnostics; they are not part of any BLAS ABI. */
#define _GNU_SOURCE /* dladdr, sched_getaffinity */
#include <dlfcn.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "blas_pool.h"
#include "blas_split.h"
#include "cblas.h" /* scipy-openblas32's: declares scipy_cblas_* with blasint == int */

#define SHIM_EXPORT __attribute__((visibility("default")))

/* Fitting the thread count to the machine's load (the default policy only; an explicit count is
 * kept). It dates from OpenBLAS's own threading, whose jobs spin waiting for each other: a GEMM
 * of under 1 ms took 30-900 ms with 2 threads on 2 cores at a load average of 9 (1 thread: 0.6 ms
 * to a few ms). Parts (blas_split.c) do not spin, but on oversubscribed cores a part claimed by a
 * descheduled worker still holds its product back for a time slice, for no gain: so while the
 * 1-minute load average exceeds the CPUs this process may use by more than half a CPU, products
 * stay one call; checked at most every 100 ms, before a product. */
static int fit_to_load = 0;        /* the default policy is in force */
static int configured_threads = 1; /* what the policy chose for an idle machine */
/* The threads products are split over now (blas_split.c): read by every product, on any thread. */
static atomic_int active_threads = 1;
static int process_cpus = 1;
static atomic_llong next_check_ns;

static long long MonotonicNs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts); /* vDSO: no system call */
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The thread count for a 1-minute load average of `load`. */
SHIM_EXPORT int onnxruntime_ep_mlx_blas_threads_for_load(double load) {
  return load > process_cpus + 0.5 ? 1 : configured_threads;
}

static void FitThreadsToLoad(void) {
  if (!fit_to_load || configured_threads <= 1) return;
  long long next = atomic_load_explicit(&next_check_ns, memory_order_relaxed);
  const long long now = MonotonicNs();
  if (now < next) return;
  /* one caller checks; the others go on with the current count */
  if (!atomic_compare_exchange_strong(&next_check_ns, &next, now + 100000000LL)) return;
  double load = 0;
  if (getloadavg(&load, 1) != 1) return;
  atomic_store_explicit(&active_threads, onnxruntime_ep_mlx_blas_threads_for_load(load), memory_order_relaxed);
}

static int ActiveThreads(void) { return atomic_load_explicit(&active_threads, memory_order_relaxed); }

/* y = alpha op(A) x + beta y (row-major A [rows, cols]), in parts over the pool where it pays. */
static void Sgemv(const enum CBLAS_TRANSPOSE trans, const blasint rows, const blasint cols, const float alpha,
                  const float* a, const blasint lda, const float* x, const blasint incx, const float beta, float* y,
                  const blasint incy) {
  if (blas_split_sgemv(ActiveThreads(), trans, rows, cols, alpha, a, lda, x, incx, beta, y, incy)) return;
  scipy_cblas_sgemv(CblasRowMajor, trans, rows, cols, alpha, a, lda, x, incx, beta, y, incy);
}

/* A product with one row or one column, run as the matrix-vector product it is. OpenBLAS's sgemm
 * packs B for a single row of A: a decoder's vocabulary projection, [1, 896] x [896, 151936],
 * took 443 ms through sgemm against 17 ms as sgemv (ORT's CPU EP: 16 ms). Row-major only (what
 * libmlx passes); false when the product is not of that form. */
static int SgemmAsGemv(const enum CBLAS_ORDER order, const enum CBLAS_TRANSPOSE trans_a,
                       const enum CBLAS_TRANSPOSE trans_b, const blasint m, const blasint n, const blasint k,
                       const float alpha, const float* a, const blasint lda, const float* b, const blasint ldb,
                       const float beta, float* c, const blasint ldc) {
  if (order != CblasRowMajor || k <= 0) return 0;
  if (m == 1 && n > 1) {
    /* c[0, :] = alpha * a[0, :] op(B) + beta * c[0, :]: y = op(B)^T x, x the row of op(A) */
    const blasint incx = trans_a == CblasNoTrans ? 1 : lda;
    if (trans_b == CblasNoTrans)
      Sgemv(CblasTrans, k, n, alpha, b, ldb, a, incx, beta, c, 1);
    else
      Sgemv(CblasNoTrans, n, k, alpha, b, ldb, a, incx, beta, c, 1);
    return 1;
  }
  if (n == 1 && m > 1) {
    /* c[:, 0] = alpha * op(A) b[:, 0] + beta * c[:, 0]: y = op(A) x, x the column of op(B) */
    const blasint incx = trans_b == CblasNoTrans ? ldb : 1;
    if (trans_a == CblasNoTrans)
      Sgemv(CblasNoTrans, m, k, alpha, a, lda, b, incx, beta, c, ldc);
    else
      Sgemv(CblasTrans, k, m, alpha, a, lda, b, incx, beta, c, ldc);
    return 1;
  }
  return 0;
}

SHIM_EXPORT void cblas_sgemm(const enum CBLAS_ORDER order, const enum CBLAS_TRANSPOSE trans_a,
                             const enum CBLAS_TRANSPOSE trans_b, const blasint m, const blasint n,
                             const blasint k, const float alpha, const float* a, const blasint lda,
                             const float* b, const blasint ldb, const float beta, float* c,
                             const blasint ldc) {
  FitThreadsToLoad();
  if (SgemmAsGemv(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)) return;
  if (order == CblasRowMajor &&
      blas_split_sgemm(ActiveThreads(), trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc))
    return;
  scipy_cblas_sgemm(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

SHIM_EXPORT void cblas_dgemm(const enum CBLAS_ORDER order, const enum CBLAS_TRANSPOSE trans_a,
                             const enum CBLAS_TRANSPOSE trans_b, const blasint m, const blasint n,
                             const blasint k, const double alpha, const double* a, const blasint lda,
                             const double* b, const blasint ldb, const double beta, double* c,
                             const blasint ldc) {
  FitThreadsToLoad();
  if (order == CblasRowMajor &&
      blas_split_dgemm(ActiveThreads(), trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc))
    return;
  scipy_cblas_dgemm(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

SHIM_EXPORT void cblas_cgemm(const enum CBLAS_ORDER order, const enum CBLAS_TRANSPOSE trans_a,
                             const enum CBLAS_TRANSPOSE trans_b, const blasint m, const blasint n,
                             const blasint k, const void* alpha, const void* a, const blasint lda,
                             const void* b, const blasint ldb, const void* beta, void* c, const blasint ldc) {
  /* One call, single-threaded (OpenBLAS runs on one thread): no op of the EP makes complex
   * products, so a split of them would be code no test reaches. */
  scipy_cblas_cgemm(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* Sets the thread count products are split over (process-wide, blas_split.c); `fit` (the default
 * policy) lets it drop to one thread while the machine is overloaded (above). OpenBLAS itself
 * runs on one thread: each part is a single-threaded call (blas_pool.c says why). */
SHIM_EXPORT void onnxruntime_ep_mlx_blas_configure_threads(int num_threads, int fit) {
  cpu_set_t cpus;
  if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0 && CPU_COUNT(&cpus) > 0) process_cpus = CPU_COUNT(&cpus);
  configured_threads = blas_pool_prepare(num_threads);
  atomic_store(&active_threads, configured_threads);
  fit_to_load = fit;
  atomic_store(&next_check_ns, 0);
  scipy_openblas_set_num_threads(1);
}

SHIM_EXPORT void onnxruntime_ep_mlx_blas_set_num_threads(int num_threads) {
  onnxruntime_ep_mlx_blas_configure_threads(num_threads, 0);
}

SHIM_EXPORT int onnxruntime_ep_mlx_blas_num_threads(void) { return configured_threads; }

/* Products that ran in parts on the EP's pool (blas_pool.c). */
SHIM_EXPORT unsigned long onnxruntime_ep_mlx_blas_pool_batches(void) { return blas_pool_parallel_batches(); }

/* OpenBLAS's build configuration and the CPU kernel it picked, e.g. "OpenBLAS 0.3.34 ... Haswell". */
SHIM_EXPORT const char* onnxruntime_ep_mlx_blas_config(void) { return scipy_openblas_get_config(); }
SHIM_EXPORT const char* onnxruntime_ep_mlx_blas_corename(void) { return scipy_openblas_get_corename(); }

/* The file that this library's calls land in (libscipy_openblas.so), or "" if unknown. */
SHIM_EXPORT const char* onnxruntime_ep_mlx_blas_target(void) {
  Dl_info info;
  if (dladdr((void*)&scipy_cblas_sgemm, &info) && info.dli_fname) return info.dli_fname;
  return "";
}
