/* Products split into independent parts over the EP's worker pool, part of
 * libonnxruntime_ep_mlx_blas (blas_split.h).
 *
 * Why not OpenBLAS's own threading: the jobs of one OpenBLAS level-3 call wait for each other's
 * packed panels, spinning. When one of them is held back by the scheduler, the others spin
 * through their time slices: on 2 cores, with ORT's CPU EP in the same process (its intra-op
 * threads spin after each run, one pinned to a core), the crnn model took 15 ms a run instead
 * of 0.9 in one process of five, GEMMs of ~40 us took up to 4-11 ms even with nothing else
 * running, and a second thread bought the whole-model set nothing (docs/performance.md,
 * twenty-fourth session). Here each part is a whole single-threaded OpenBLAS call over a block
 * of C's columns (or rows): no part waits for another, a thread that starts late takes fewer
 * parts, and the caller sleeps until the last part is done. OpenBLAS itself runs on one thread
 * (blas_shim.c), so a part never starts parallel work of its own. */
#include "blas_split.h"

#include <stddef.h>

#include "blas_pool.h"

typedef enum { kSgemm, kDgemm, kSgemv } Kind;

/* One OpenBLAS call. For kSgemv: m, n are A's rows and columns, b/ldb are x/incx, c/ldc y/incy. */
typedef struct {
  Kind kind;
  enum CBLAS_TRANSPOSE trans_a, trans_b;
  blasint m, n, k;
  const void* alpha;
  const void* beta;
  const char* a;
  blasint lda;
  const char* b;
  blasint ldb;
  char* c;
  blasint ldc;
} Part;

enum { kMaxParts = 64, kAlign = 16 /* 64 bytes of float32: parts of a row of C seldom share a cache line */ };

/* Multiply-adds under which a product stays one call (~100 us on one core). Waking a sleeping
 * worker took 16-108 us on average and up to 4.8 ms on the 2-core VM the tests run on here (a
 * futex wake of an idle virtual CPU), so a part split off a smaller product mostly waits for its thread:
 * there, 0.4-1.6 M-MAC products (crnn's, BERT-small's) ran no faster on 2 threads, 3.7-15 M
 * ones 1.0-1.6x, 134 M ones (512x256x1024) 1.85x (docs/performance.md, twenty-fourth session). */
static const double kMinGemmWork = 4194304.0;
/* Matrix entries under which a matrix-vector product stays one call (it reads each entry once:
 * 4 MB of float32, a few hundred microseconds). */
static const double kMinGemvWork = 1048576.0;

static void RunPart(void* data) {
  const Part* p = (const Part*)data;
  switch (p->kind) {
    case kSgemm:
      scipy_cblas_sgemm(CblasRowMajor, p->trans_a, p->trans_b, p->m, p->n, p->k, *(const float*)p->alpha,
                        (const float*)p->a, p->lda, (const float*)p->b, p->ldb, *(const float*)p->beta,
                        (float*)p->c, p->ldc);
      break;
    case kDgemm:
      scipy_cblas_dgemm(CblasRowMajor, p->trans_a, p->trans_b, p->m, p->n, p->k, *(const double*)p->alpha,
                        (const double*)p->a, p->lda, (const double*)p->b, p->ldb, *(const double*)p->beta,
                        (double*)p->c, p->ldc);
      break;
    case kSgemv:
      scipy_cblas_sgemv(CblasRowMajor, p->trans_a, p->m, p->n, *(const float*)p->alpha, (const float*)p->a,
                        p->lda, (const float*)p->b, p->ldb, *(const float*)p->beta, (float*)p->c, p->ldc);
      break;
  }
}

/* The number of parts of `dim` (each `*len` long, a multiple of kAlign, the last shorter), or 1
 * where the product stays one call. Twice as many parts as threads: a thread the scheduler
 * starts late finds fewer left. */
static int PartCount(int threads, double work, double min_work, blasint dim, blasint* len) {
  if (threads < 2 || work < min_work || dim < 2 * kAlign) return 1;
  int parts = 2 * threads < kMaxParts ? 2 * threads : kMaxParts;
  blasint l = (dim + parts - 1) / parts;
  l = (l + kAlign - 1) / kAlign * kAlign;
  *len = l;
  return (int)((dim + l - 1) / l);
}

/* The length of the part of `len` values that starts at `start` of `dim` (the last is shorter). */
static blasint PartLength(blasint dim, size_t start, blasint len) {
  return dim - (blasint)start < len ? dim - (blasint)start : len;
}

static int Transposed(enum CBLAS_TRANSPOSE t) { return t == CblasTrans || t == CblasConjTrans; }

/* op(A) [m, k] times op(B) [k, n] into C [m, n], in parts of C's columns (n >= m) or rows. */
static int SplitGemm(const Part* whole, size_t elem, int threads) {
  const int by_columns = whole->n >= whole->m;
  const blasint dim = by_columns ? whole->n : whole->m;
  const double work = (double)whole->m * whole->n * whole->k;
  blasint len = 0;
  const int parts = PartCount(threads, work, kMinGemmWork, dim, &len);
  if (parts < 2) return 0;
  Part p[kMaxParts];
  for (int i = 0; i < parts; ++i) {
    const size_t start = (size_t)i * len;
    p[i] = *whole;
    if (by_columns) {
      p[i].n = PartLength(dim, start, len);
      p[i].b += elem * (Transposed(whole->trans_b) ? start * whole->ldb : start);
      p[i].c += elem * start;
    } else {
      p[i].m = PartLength(dim, start, len);
      p[i].a += elem * (Transposed(whole->trans_a) ? start : start * whole->lda);
      p[i].c += elem * start * whole->ldc;
    }
  }
  return blas_pool_try_run(RunPart, parts, sizeof(Part), p);
}

int blas_split_sgemm(int threads, enum CBLAS_TRANSPOSE trans_a, enum CBLAS_TRANSPOSE trans_b, blasint m,
                     blasint n, blasint k, float alpha, const float* a, blasint lda, const float* b, blasint ldb,
                     float beta, float* c, blasint ldc) {
  const Part whole = {kSgemm, trans_a, trans_b, m, n, k, &alpha, &beta, (const char*)a, lda, (const char*)b, ldb,
                      (char*)c, ldc};
  return SplitGemm(&whole, sizeof(float), threads);
}

int blas_split_dgemm(int threads, enum CBLAS_TRANSPOSE trans_a, enum CBLAS_TRANSPOSE trans_b, blasint m,
                     blasint n, blasint k, double alpha, const double* a, blasint lda, const double* b,
                     blasint ldb, double beta, double* c, blasint ldc) {
  const Part whole = {kDgemm, trans_a, trans_b, m, n, k, &alpha, &beta, (const char*)a, lda, (const char*)b, ldb,
                      (char*)c, ldc};
  return SplitGemm(&whole, sizeof(double), threads);
}

int blas_split_sgemv(int threads, enum CBLAS_TRANSPOSE trans, blasint rows, blasint cols, float alpha,
                     const float* a, blasint lda, const float* x, blasint incx, float beta, float* y,
                     blasint incy) {
  if (incx <= 0 || incy <= 0) return 0; /* a negative stride walks from the end: keep it whole */
  const int transposed = Transposed(trans);
  const blasint dim = transposed ? cols : rows; /* y's length */
  blasint len = 0;
  const int parts = PartCount(threads, (double)rows * cols, kMinGemvWork, dim, &len);
  if (parts < 2) return 0;
  Part p[kMaxParts];
  for (int i = 0; i < parts; ++i) {
    const size_t start = (size_t)i * len;
    const blasint size = PartLength(dim, start, len);
    p[i] = (Part){kSgemv, trans, CblasNoTrans, rows, cols, 0, &alpha, &beta, (const char*)a, lda,
                  (const char*)x, incx, (char*)(y + start * incy), incy};
    if (transposed) {
      p[i].n = size;
      p[i].a += sizeof(float) * start;
    } else {
      p[i].m = size;
      p[i].a += sizeof(float) * start * lda;
    }
  }
  return blas_pool_try_run(RunPart, parts, sizeof(Part), p);
}
