/* The worker pool that runs the shim's products in parts (blas_pool.c). */
#pragma once

#include <stddef.h>

/* One part of a batch: its data. */
typedef void (*blas_pool_job)(void* data);

/* Starts workers so that batches can run on up to `threads` threads (the caller is one); returns
 * that count (less than `threads` if the system refuses threads). Workers are never stopped:
 * they sleep while idle. */
int blas_pool_prepare(int threads);

/* Runs `numjobs` jobs that do not wait for each other, job(jobdata + i * elsize) for each i, on
 * the calling thread and the pool's workers, and returns 1 once all have finished. Returns 0,
 * running nothing, when the pool is running another thread's batch (the caller then does the
 * work itself instead of waiting for it). */
int blas_pool_try_run(blas_pool_job job, int numjobs, size_t elsize, void* jobdata);

/* Batches of more than one job run so far (tests: proof that products ran in parts). */
unsigned long blas_pool_parallel_batches(void);
