/* The worker pool that runs OpenBLAS's parallel jobs (blas_pool.c). */
#pragma once

#include "cblas.h" /* scipy-openblas32's: openblas_threads_callback */

/* Starts workers so that batches of up to `threads` jobs can run (the caller runs one job);
 * returns the number of jobs a batch can have (less than `threads` if the system refuses
 * threads). Workers are never stopped: they sleep while idle. */
int blas_pool_prepare(int threads);

/* The callback to hand to scipy_openblas_set_threads_callback_function. */
openblas_threads_callback blas_pool_callback(void);

/* Batches of more than one job run so far (tests: proof that OpenBLAS's parallel work runs here). */
unsigned long blas_pool_parallel_batches(void);
