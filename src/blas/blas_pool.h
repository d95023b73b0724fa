/* The worker pool that runs OpenBLAS's parallel jobs (blas_pool.c). */
#pragma once

#include "cblas.h" /* scipy-openblas32's: openblas_threads_callback */

/* Starts workers so that batches of up to `threads` jobs can run (the caller runs one job);
 * returns the number of jobs a batch can have (less than `threads` if the system refuses
 * threads). Workers are never stopped: they sleep while idle. */
int blas_pool_prepare(int threads);

/* Runs `numjobs` jobs that do not wait for each other: dojob(i, jobdata + i * elsize, 0) for
 * each i, on the calling thread and the pool's workers, and returns 1 once all have finished.
 * Returns 0, running nothing, when the pool is running another batch (the caller then does the
 * work itself instead of waiting for it). */
int blas_pool_try_run_independent(openblas_dojob_callback dojob, int numjobs, size_t elsize, void* jobdata);

/* The callback to hand to scipy_openblas_set_threads_callback_function. */
openblas_threads_callback blas_pool_callback(void);

/* Batches of more than one job run so far (tests: proof that OpenBLAS's parallel work runs here). */
unsigned long blas_pool_parallel_batches(void);
