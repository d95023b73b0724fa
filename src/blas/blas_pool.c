/* The threads the shim's products run their parts on (blas_split.c), part of
 * libonnxruntime_ep_mlx_blas.
 *
 * Workers sleep on a condition variable as soon as a batch is done. OpenBLAS's own thread server
 * spins after each parallel call for 2^28 cycles (~0.1 s) before its threads sleep, and the jobs
 * of one of its level-3 calls spin waiting for each other's panels: in a host process that also
 * runs ORT's CPU EP, those spinning threads took the cores ORT's next kernels needed (an ORT
 * session right after a 2-thread GEMM: 9.7 ms instead of 5.0), and a job whose peer the scheduler
 * held back spun through whole time slices (docs/performance.md). So OpenBLAS runs on one thread
 * (blas_shim.c) and this pool runs independent parts, any number of them: the caller and
 * whichever workers wake claim them one at a time, so a worker that the scheduler holds back
 * costs at most the one part it claimed. */
#include <pthread.h>
#include <stddef.h>

#include "blas_pool.h"

typedef struct {
  blas_pool_job job;
  char* data;
  size_t elsize;
  int numjobs;
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
    b.job(b.data + (size_t)job * b.elsize);
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

int blas_pool_try_run(blas_pool_job job, int numjobs, size_t elsize, void* jobdata) {
  if (numjobs <= 0) return 1;
  /* Busy (another thread's product): the caller computes its product alone rather than queue. */
  if (pthread_mutex_trylock(&dispatch_mu) != 0) return 0;
  pthread_mutex_lock(&mu);
  batch = (Batch){job, (char*)jobdata, elsize, numjobs};
  next_job = 0;
  unfinished = numjobs;
  ++generation;
  if (numjobs > 1) {
    ++parallel_batches;
    if (workers > 0) pthread_cond_broadcast(&wake);
  }
  pthread_mutex_unlock(&mu);
  RunJobs(); /* the caller takes jobs too, then sleeps until the workers' are done */
  pthread_mutex_lock(&mu);
  while (unfinished > 0) pthread_cond_wait(&done, &mu);
  pthread_mutex_unlock(&mu);
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

unsigned long blas_pool_parallel_batches(void) {
  pthread_mutex_lock(&mu);
  const unsigned long n = parallel_batches;
  pthread_mutex_unlock(&mu);
  return n;
}
