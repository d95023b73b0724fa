/* The threads OpenBLAS runs its parallel GEMMs on, part of libonnxruntime_ep_mlx_blas.
 *
 * OpenBLAS's own thread server spins after each parallel call for 2^28 cycles (~0.1 s,
 * OPENBLAS_THREAD_TIMEOUT, read once when the library loads) before its threads sleep. In a host
 * process that also runs ORT's CPU EP (the nodes of a model the EP leaves to ORT), those spinning
 * threads take the cores ORT's next kernels need: measured on 2 cores, an ORT session running
 * right after a 2-thread MLX GEMM took 9.7 ms instead of 5.0 (docs/performance.md). OpenBLAS
 * lets the caller manage its threads instead (openblas_set_threads_callback_function): it hands
 * over a batch of jobs that must run concurrently (the jobs of one level-3 call wait for each
 * other's packed panels), and this pool runs them on workers that sleep on a condition variable
 * as soon as a batch is done.
 *
 * Every job of an OpenBLAS batch gets a thread: the caller runs jobs too, and the pool keeps at
 * least numjobs - 1 workers, so a job that waits for another never waits for a thread.
 *
 * The shim's own batches (blas_split.c) are independent jobs, any number of them: the caller and
 * whichever workers wake claim them one at a time, so a worker that the scheduler holds back
 * (a core taken by another process's thread, or by ORT's intra-op threads spinning after a run)
 * costs at most the one part it claimed, never a wait spun through time slices. */
#include <pthread.h>
#include <stddef.h>

#include "blas_pool.h"

typedef struct {
  openblas_dojob_callback dojob;
  char* data;
  size_t elsize;
  int numjobs;
  int dojob_data;
} Batch;

static pthread_mutex_t dispatch_mu = PTHREAD_MUTEX_INITIALIZER; /* one batch at a time */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;          /* guards everything below */
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;          /* a batch was posted */
static pthread_cond_t done = PTHREAD_COND_INITIALIZER;          /* a batch finished */
static Batch batch;
static unsigned long generation; /* batches posted */
static int next_job;             /* next unclaimed job of `batch` */
static int unfinished;           /* jobs of `batch` not yet finished */
static int workers;
static unsigned long parallel_batches; /* batches of more than one job, for tests */

/* Claims and runs jobs of the current batch until none is left unclaimed. */
static void RunJobs(void) {
  for (;;) {
    pthread_mutex_lock(&mu);
    const int job = next_job < batch.numjobs ? next_job++ : -1;
    const Batch b = batch;
    pthread_mutex_unlock(&mu);
    if (job < 0) return;
    /* The job index doubles as OpenBLAS's thread number: unique among the batch's jobs, which
     * is what OpenBLAS uses it for (per-thread buffers). */
    b.dojob(job, b.data + (size_t)job * b.elsize, b.dojob_data);
    pthread_mutex_lock(&mu);
    if (--unfinished == 0) pthread_cond_broadcast(&done);
    pthread_mutex_unlock(&mu);
  }
}

static void* Worker(void* arg) {
  (void)arg;
  unsigned long seen = 0;
  for (;;) {
    pthread_mutex_lock(&mu);
    while (generation == seen) pthread_cond_wait(&wake, &mu);
    seen = generation;
    pthread_mutex_unlock(&mu);
    RunJobs();
  }
  return NULL;
}

/* Starts workers until there are `count`; returns how many there are (fewer if the system
 * refuses threads). Called with dispatch_mu held. */
static int EnsureWorkers(int count) {
  while (workers < count) {
    pthread_t thread;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    const int failed = pthread_create(&thread, &attr, Worker, NULL);
    pthread_attr_destroy(&attr);
    if (failed) break;
    ++workers;
  }
  return workers;
}

/* Posts a batch and runs it with the workers; returns once every job has finished. Called with
 * dispatch_mu held. The caller runs jobs too, then sleeps until the workers' jobs are done. */
static void PostAndRun(openblas_dojob_callback dojob, int numjobs, size_t elsize, void* jobdata, int dojob_data) {
  pthread_mutex_lock(&mu);
  batch = (Batch){dojob, (char*)jobdata, elsize, numjobs, dojob_data};
  next_job = 0;
  unfinished = numjobs;
  ++generation;
  if (numjobs > 1) {
    ++parallel_batches;
    if (workers > 0) pthread_cond_broadcast(&wake);
  }
  pthread_mutex_unlock(&mu);
  RunJobs();
  pthread_mutex_lock(&mu);
  while (unfinished > 0) pthread_cond_wait(&done, &mu);
  pthread_mutex_unlock(&mu);
}

static void RunBatch(int sync, openblas_dojob_callback dojob, int numjobs, size_t elsize, void* jobdata,
                     int dojob_data) {
  (void)sync; /* OpenBLAS always waits for the batch (sync = 1); so do we */
  if (numjobs <= 0) return;
  pthread_mutex_lock(&dispatch_mu);
  if (numjobs > 1 && EnsureWorkers(numjobs - 1) < numjobs - 1) {
    /* Without enough threads the jobs cannot all run at once and would wait for each other
     * forever. OpenBLAS asked for numjobs <= its thread count, which we started; this is only
     * reached when the system refuses threads, and then there is no safe way to run the batch. */
    pthread_mutex_unlock(&dispatch_mu);
    __builtin_trap();
  }
  PostAndRun(dojob, numjobs, elsize, jobdata, dojob_data);
  pthread_mutex_unlock(&dispatch_mu);
}

int blas_pool_try_run_independent(openblas_dojob_callback dojob, int numjobs, size_t elsize, void* jobdata) {
  if (numjobs <= 0) return 1;
  /* Busy (another thread's product): the caller computes its product alone rather than queue. */
  if (pthread_mutex_trylock(&dispatch_mu) != 0) return 0;
  PostAndRun(dojob, numjobs, elsize, jobdata, 0);
  pthread_mutex_unlock(&dispatch_mu);
  return 1;
}

int blas_pool_prepare(int threads) {
  pthread_mutex_lock(&dispatch_mu);
  const int want = threads > 1 ? threads - 1 : 0;
  const int started = EnsureWorkers(want);
  pthread_mutex_unlock(&dispatch_mu);
  /* Workers started for an earlier, larger count stay (asleep): not more than asked for. */
  return (started < want ? started : want) + 1;
}

openblas_threads_callback blas_pool_callback(void) { return RunBatch; }

unsigned long blas_pool_parallel_batches(void) {
  pthread_mutex_lock(&mu);
  const unsigned long n = parallel_batches;
  pthread_mutex_unlock(&mu);
  return n;
}
