/* Products split into independent parts over the EP's worker pool (blas_pool.c), each part a
 * single-threaded OpenBLAS call. Part of libonnxruntime_ep_mlx_blas. */
#pragma once

#include "cblas.h" /* scipy-openblas32's: blasint, CBLAS_TRANSPOSE */

/* Each returns 1 when it computed the product (row-major, the only order libmlx passes) in parts
 * over `threads` threads, 0 (nothing written) when the product is too small to gain from parts,
 * `threads` < 2, or the pool is busy with another thread's product: the caller then makes the
 * one call itself. */
int blas_split_sgemm(int threads, enum CBLAS_TRANSPOSE trans_a, enum CBLAS_TRANSPOSE trans_b, blasint m,
                     blasint n, blasint k, float alpha, const float* a, blasint lda, const float* b, blasint ldb,
                     float beta, float* c, blasint ldc);
int blas_split_dgemm(int threads, enum CBLAS_TRANSPOSE trans_a, enum CBLAS_TRANSPOSE trans_b, blasint m,
                     blasint n, blasint k, double alpha, const double* a, blasint lda, const double* b,
                     blasint ldb, double beta, double* c, blasint ldc);

/* y = alpha op(A) x + beta y, A [rows, cols] row-major, split over y's entries. */
int blas_split_sgemv(int threads, enum CBLAS_TRANSPOSE trans, blasint rows, blasint cols, float alpha,
                     const float* a, blasint lda, const float* x, blasint incx, float beta, float* y,
                     blasint incy);
