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
  int threads = 0;            ///< for "openblas": OpenBLAS's thread count
  std::string note;           ///< what to do when kind is not "openblas" (empty otherwise)
};

/** Applies the BLAS thread policy once per process: ONNXRUNTIME_EP_MLX_BLAS_THREADS, else
 *  kDefaultBlasThreads. No-op without the shim. */
void ConfigureBlasThreads();

/** OpenBLAS threads unless ONNXRUNTIME_EP_MLX_BLAS_THREADS says otherwise. One, measured on a
 *  2-core machine (docs/performance.md) with OpenBLAS's own thread server: a second thread made
 *  MLX's GEMMs up to 2x faster, but spun after each GEMM and doubled the time of ORT CPU EP work
 *  running next in the same process. Parallel GEMMs now run on the EP's sleeping pool
 *  (blas_pool.c); the default is to be re-measured with it. */
constexpr int kDefaultBlasThreads = 1;

/** Reads libmlx's binding of cblas_sgemm (its GOT slot); when the slot is still unresolved
 *  (lazy binding), first runs a 2x2 matmul on MLX's CPU stream to resolve it. */
BlasBinding InspectBlasBinding();

/** Sets OpenBLAS's thread count (process-wide); false without the shim. */
bool SetBlasThreads(int threads);

/** Parallel OpenBLAS calls run so far on the EP's worker pool (blas_pool.c), -1 without the shim. */
int64_t BlasPoolBatches();

/** One line for the verbose log. */
std::string DescribeBlasBinding(const BlasBinding& b);

}  // namespace mlx_ep
