/* common.c - helpers shared by kernels: broadcasting, axes, dtype checks. */
#include "kernel.h"
#include "device.h"

#include <stdarg.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

slim_status slim_broadcast_shape(int na, const int64_t *a, int nb, const int64_t *b,
                                 int *nout, int64_t *out, slim_err *err)
{
    int n = na > nb ? na : nb;
    for (int i = 0; i < n; i++) {
        int64_t da = i < n - na ? 1 : a[i - (n - na)];
        int64_t db = i < n - nb ? 1 : b[i - (n - nb)];
        if (da != db && da != 1 && db != 1) {
            char sa[128], sb[128];
            return slim_errf(err, SLIM_ESHAPE, "shapes %s and %s cannot be broadcast",
                             slim_shape_str(na, a, sa, sizeof(sa)),
                             slim_shape_str(nb, b, sb, sizeof(sb)));
        }
        out[i] = da == 1 ? db : da;
    }
    *nout = n;
    return SLIM_OK;
}

void slim_fill_elems(void *dst, int64_t n, const void *elem, size_t esize)
{
    if (n <= 0)
        return;
    size_t total = (size_t)n * esize, done = esize;
    bool zero = true;
    for (size_t i = 0; i < esize; i++)
        zero = zero && ((const unsigned char *)elem)[i] == 0;
    if (zero) {
        memset(dst, 0, total);
        return;
    }
    memcpy(dst, elem, esize);
    while (done < total) {
        size_t chunk = done < total - done ? done : total - done;
        memcpy((char *)dst + done, dst, chunk);
        done += chunk;
    }
}

void slim_contiguous_strides(int ndim, const int64_t *dims, int64_t *strides)
{
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        s *= dims[i];
    }
}

void slim_broadcast_strides(int nin, const int64_t *in, int nout,
                            const int64_t *out, int64_t *strides)
{
    int64_t own[SLIM_MAX_DIMS];
    slim_contiguous_strides(nin, in, own);
    for (int i = 0; i < nout; i++) {
        int j = i - (nout - nin);
        strides[i] = (j < 0 || in[j] == 1) ? 0 : own[j];
    }
    (void)out;
}

slim_status slim_norm_axis(int64_t axis, int rank, int *out, slim_err *err)
{
    if (axis < -rank || axis >= (rank ? rank : 1) || (rank == 0 && axis != 0 && axis != -1))
        return slim_errf(err, SLIM_EINVAL, "axis %lld is out of range for rank %d",
                         (long long)axis, rank);
    *out = (int)(axis < 0 ? axis + rank : axis);
    if (*out < 0)
        *out = 0;
    return SLIM_OK;
}

slim_status slim_check_dtype(const slim_tensor *t, const char *what, slim_err *err, ...)
{
    va_list ap;
    va_start(ap, err);
    char allowed[256] = "";
    size_t used = 0;
    for (;;) {
        int d = va_arg(ap, int);
        if (d == SLIM_DTYPE_UNDEFINED)
            break;
        if (d == (int)t->dtype) {
            va_end(ap);
            return SLIM_OK;
        }
        used += snprintf(allowed + used, used < sizeof(allowed) ? sizeof(allowed) - used : 0,
                         "%s%s", used ? ", " : "", slim_dtype_name((slim_dtype)d));
    }
    va_end(ap);
    return slim_errf(err, SLIM_EUNSUPPORTED, "%s has data type %s; supported: %s", what,
                     slim_dtype_name(t->dtype), allowed);
}

void slim_tensor_set_shape(slim_tensor *dst, slim_dtype dt, int ndim, const int64_t *dims)
{
    dst->dtype = dt;
    dst->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        dst->dims[i] = dims[i];
}

void slim_tensor_set_like(slim_tensor *dst, const slim_tensor *src)
{
    slim_tensor_set_shape(dst, src->dtype, src->ndim, src->dims);
}

slim_status slim_read_ints(const slim_tensor *t, const char *what, int64_t *out,
                           int cap, int *n, slim_err *err)
{
    if (t->dtype != SLIM_I64 && t->dtype != SLIM_I32)
        return slim_errf(err, SLIM_ETYPE, "%s must be int64 or int32, got %s", what,
                         slim_dtype_name(t->dtype));
    int64_t count = slim_tensor_numel(t);
    if (count > cap)
        return slim_errf(err, SLIM_EINVAL, "%s has %lld elements, at most %d supported", what,
                         (long long)count, cap);
    if (count > 0 && !t->data)
        return slim_errf(err, SLIM_ENEEDVALUE, "%s is not known before run time", what);
    for (int64_t i = 0; i < count; i++)
        out[i] = slim_load_i64(t->dtype, t->data, i);
    *n = (int)count;
    return SLIM_OK;
}

slim_status slim_read_scalar_f64(const slim_tensor *t, const char *what, double *v, slim_err *err)
{
    if (slim_tensor_numel(t) < 1)
        return slim_errf(err, SLIM_EINVAL, "%s is empty, expected a scalar", what);
    if (!t->data)
        return slim_errf(err, SLIM_ENEEDVALUE, "%s is not known before run time", what);
    *v = slim_load_f64(t->dtype, t->data, 0);
    return SLIM_OK;
}

slim_status slim_read_scalar_i64(const slim_tensor *t, const char *what, int64_t *v, slim_err *err)
{
    if (slim_tensor_numel(t) < 1)
        return slim_errf(err, SLIM_EINVAL, "%s is empty, expected a scalar", what);
    if (!t->data)
        return slim_errf(err, SLIM_ENEEDVALUE, "%s is not known before run time", what);
    *v = slim_load_i64(t->dtype, t->data, 0);
    return SLIM_OK;
}

/* ---- float32 views and windows (conv, pool) ------------------------------ */

slim_status slim_f32_in(const slim_tensor *t, slim_tensor *tmp, const float **out, slim_err *err)
{
    memset(tmp, 0, sizeof(*tmp));
    *out = NULL;
    if (!t)
        return SLIM_OK;
    if (t->dtype == SLIM_F32) {
        *out = t->data;
        return SLIM_OK;
    }
    slim_tensor_set_shape(tmp, SLIM_F32, t->ndim, t->dims);
    slim_status st = slim_tensor_alloc(tmp, err);
    if (st)
        return st;
    float *f = tmp->data;
    int64_t n = slim_tensor_numel(t);
    for (int64_t i = 0; i < n; i++)
        f[i] = (float)slim_load_f64(t->dtype, t->data, i);
    *out = f;
    return SLIM_OK;
}

slim_status slim_f32_out(slim_tensor *t, slim_tensor *tmp, float **out, slim_err *err)
{
    memset(tmp, 0, sizeof(*tmp));
    if (t->dtype == SLIM_F32) {
        *out = t->data;
        return SLIM_OK;
    }
    slim_tensor_set_shape(tmp, SLIM_F32, t->ndim, t->dims);
    slim_status st = slim_tensor_alloc(tmp, err);
    *out = tmp->data;
    return st;
}

void slim_f32_out_finish(slim_tensor *t, const slim_tensor *tmp)
{
    if (!tmp->data)
        return;
    const float *f = tmp->data;
    int64_t n = slim_tensor_numel(t);
    for (int64_t i = 0; i < n; i++)
        slim_store_f64(t->dtype, t->data, i, f[i]);
}

void slim_window_range(int64_t start, int64_t step, int64_t count, int64_t limit,
                       int64_t *lo, int64_t *hi)
{
    int64_t l = start >= 0 ? 0 : (-start + step - 1) / step;
    int64_t h = start >= limit ? 0 : (limit - 1 - start) / step + 1;
    if (h > count)
        h = count;
    *lo = l < h ? l : h;
    *hi = h;
}

/* ---- GEMM on the kernel threads ----------------------------------------- */

#include <cblas.h>
#include "cpu/sgemm_panel.h"

#ifdef SLIM_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#include "cpu/matmul_dnnl.h"
void omp_set_num_threads(int n); /* libgomp, which oneDNN links */

/* Where oneDNN is there, its sgemm runs the products: its AVX-512 JIT
 * kernels measured 15-50% faster than OpenBLAS 0.3.21's single-threaded
 * sgemm on this project's AVX-512 machine (128x768x768: 116 vs 103 GF/s,
 * 16x768x768: 114 vs 75). Like OpenBLAS it picks its code from the call's
 * shape only, so the same-shape-calls argument below for row invariance
 * holds for it too. It runs single-threaded inside our parts, as OpenBLAS
 * does: oneDNN's OpenMP threads would spin against ours (conv_dnnl.c). */
static _Thread_local bool dnnl_single;

static void gemm_call(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha,
                      const float *a, int lda, const float *b, int ldb, float beta, float *c,
                      int ldc)
{
    if (!dnnl_single) {
        omp_set_num_threads(1);
        dnnl_single = true;
        /* sgemm alone pages in oneDNN's code too: give it back when idle. */
        slim__dnnl_on_idle();
    }
    if (dnnl_sgemm(ta == CblasTrans ? 'T' : 'N', tb == CblasTrans ? 'T' : 'N', m, n, k, alpha, a,
                   lda, b, ldb, beta, c, ldc) != dnnl_success)
        cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
#else
static void gemm_call(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha,
                      const float *a, int lda, const float *b, int ldb, float beta, float *c,
                      int ldc)
{
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
#endif

/* The attention core's products come here. They go to the project's own
 * panel kernel (cpu/sgemm_panel.c) rather than to oneDNN's sgemm, whose
 * JIT kernels (3.4 MiB) would stay for the life of the process once any
 * model ran attention on them: for an int8 model these are the only float32
 * products, so after its unload nothing of oneDNN's sgemm is left.
 * SLIM_SGEMM_SERIAL=blas sends them back to gemm_call (bench/bench_int8.py
 * --ab SLIM_SGEMM_SERIAL=blas measures what the panel costs). */
static _Atomic int serial_blas = -1; /* SLIM_SGEMM_SERIAL=blas: the A/B of the panel */

static bool serial_on_blas(void)
{
    int v = atomic_load(&serial_blas);
    if (v < 0) {
        const char *e = getenv("SLIM_SGEMM_SERIAL");
        v = e && strcmp(e, "blas") == 0;
        atomic_store(&serial_blas, v);
    }
    return v == 1;
}

void slim_sgemm_serial(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                       const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                       float *c, int64_t ldc)
{
    if (!trans_a && !serial_on_blas() && slim__sgemm_panel(trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc))
        return;
    gemm_call(trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, (int)m,
              (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
}

typedef struct sgemm_job {
    bool trans_a, trans_b, by_rows;
    int64_t m, n, k, lda, ldb, ldc, block;
    float alpha, beta;
    const float *a, *b;
    float *c;
} sgemm_job;

/* One BLAS call per block, never one call over a run of blocks: OpenBLAS
 * picks its code path from the call's shape, so merging blocks when the
 * pool runs them inline (it is busy with another request) would round
 * differently from the same product run in parallel. */
static void sgemm_block(const sgemm_job *j, int64_t blk)
{
    int64_t lo = blk * j->block;
    int64_t hi = lo + j->block;
    if (j->by_rows) {
        if (hi > j->m)
            hi = j->m;
        const float *a = j->trans_a ? j->a + lo : j->a + lo * j->lda;
        gemm_call(j->trans_a ? CblasTrans : CblasNoTrans,
                    j->trans_b ? CblasTrans : CblasNoTrans, (int)(hi - lo), (int)j->n, (int)j->k,
                    j->alpha, a, (int)j->lda, j->b, (int)j->ldb, j->beta, j->c + lo * j->ldc,
                    (int)j->ldc);
    } else {
        if (hi > j->n)
            hi = j->n;
        const float *b = j->trans_b ? j->b + lo * j->ldb : j->b + lo;
        gemm_call(j->trans_a ? CblasTrans : CblasNoTrans,
                    j->trans_b ? CblasTrans : CblasNoTrans, (int)j->m, (int)(hi - lo), (int)j->k,
                    j->alpha, j->a, (int)j->lda, b, (int)j->ldb, j->beta, j->c + lo, (int)j->ldc);
    }
}

static void sgemm_part(int64_t begin, int64_t end, void *user)
{
    for (int64_t blk = begin; blk < end; blk++)
        sgemm_block(user, blk);
}

void slim_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                float *c, int64_t ldc)
{
    if (m <= 0 || n <= 0)
        return;
    int threads = slim_num_threads();
    sgemm_job j = {trans_a, trans_b, m >= n || m >= 64, m, n, k, lda, ldb, ldc, 0,
                   alpha, beta, a, b, c};
    int64_t span = j.by_rows ? m : n;
    /* Blocks of >= 16 rows/cols keep each BLAS call efficient; small
     * products (under ~64k multiply-adds) are not worth waking threads. */
    int64_t parts = threads > 1 && m * n * k >= (1 << 16) ? threads * 2 : 1;
    j.block = (span + parts - 1) / parts;
    if (j.block < 16)
        j.block = 16;
    int64_t blocks = (span + j.block - 1) / j.block;
    slim_parallel_for(blocks, 1, sgemm_part, &j);
}

/* ---- GEMM whose rows do not depend on each other's company --------------- */

/* OpenBLAS picks its code path from the whole call's shape (a small-matrix
 * kernel under about a million multiply-adds, tail code for rows that do
 * not fill a register tile), so one row of A times B can round differently
 * at M = 1 than inside M = 32. When a batch is split or merged that would
 * change a request's answer. In row-invariant mode every BLAS call has the
 * same shape, ROW_TILE rows, the last tile padded with zero rows, so a row
 * is computed by the same code wherever it sits. */
#define ROW_TILE 4

static _Thread_local bool row_invariant;

bool slim_gemm_row_invariant(void)
{
    return row_invariant;
}

bool slim_gemm_set_row_invariant(bool on)
{
    bool prev = row_invariant;
    row_invariant = on;
    return prev;
}

static void rows_tile(const sgemm_job *j, int64_t r0)
{
    int64_t rows = j->m - r0 < ROW_TILE ? j->m - r0 : ROW_TILE;
    CBLAS_TRANSPOSE tb = j->trans_b ? CblasTrans : CblasNoTrans;
    if (rows == ROW_TILE && !j->trans_a) {
        gemm_call(CblasNoTrans, tb, ROW_TILE, (int)j->n, (int)j->k, j->alpha,
                    j->a + r0 * j->lda, (int)j->lda, j->b, (int)j->ldb, j->beta,
                    j->c + r0 * j->ldc, (int)j->ldc);
        return;
    }
    /* A short tile (or a transposed A) is gathered into a zero-padded
     * row-major copy, and so is C when beta reads it. */
    /* raw: per chunk on a kernel thread, which has no account to charge (parallel.c carries only the cancel token); ROW_TILE rows of the operands */
    float *pa = calloc((size_t)(ROW_TILE * j->k + ROW_TILE * j->n), sizeof(float));
    if (!pa) { /* still a right answer, only not row-invariant */
        sgemm_job part = *j;
        part.by_rows = true;
        part.block = rows;
        part.a = j->trans_a ? j->a + r0 : j->a + r0 * j->lda;
        part.c = j->c + r0 * j->ldc;
        part.m = rows;
        sgemm_part(0, 1, &part);
        return;
    }
    float *pc = pa + ROW_TILE * j->k;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t kk = 0; kk < j->k; kk++)
            pa[i * j->k + kk] = j->trans_a ? j->a[kk * j->lda + r0 + i] : j->a[(r0 + i) * j->lda + kk];
    if (j->beta != 0)
        for (int64_t i = 0; i < rows; i++)
            memcpy(pc + i * j->n, j->c + (r0 + i) * j->ldc, sizeof(float) * (size_t)j->n);
    gemm_call(CblasNoTrans, tb, ROW_TILE, (int)j->n, (int)j->k, j->alpha, pa,
                (int)j->k, j->b, (int)j->ldb, j->beta, pc, (int)j->n);
    for (int64_t i = 0; i < rows; i++)
        memcpy(j->c + (r0 + i) * j->ldc, pc + i * j->n, sizeof(float) * (size_t)j->n);
    free(pa);
}

static void rows_part(int64_t begin, int64_t end, void *user)
{
    for (int64_t t = begin; t < end; t++)
        rows_tile(user, t * ROW_TILE);
}

void slim_sgemm_rows(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                     const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                     float *c, int64_t ldc)
{
    if (!row_invariant) {
        slim_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    if (m <= 0 || n <= 0)
        return;
    sgemm_job j = {trans_a, trans_b, true, m, n, k, lda, ldb, ldc, ROW_TILE,
                   alpha, beta, a, b, c};
    int64_t tiles = (m + ROW_TILE - 1) / ROW_TILE;
    /* A tile is ~ROW_TILE * n * k multiply-adds: wake threads only for enough of them. */
    int64_t grain = 1 + (1 << 16) / (ROW_TILE * n * (k ? k : 1));
    slim_parallel_for(tiles, grain, rows_part, &j);
}

slim_status slim_attr_geometry(const slim_node *node, const char *name, int64_t *out, int cap,
                               int64_t min, int *count, slim_err *err)
{
    int n = slim_attr_ints(node, name, out, cap);
    if (n > cap)
        return slim_errf(err, SLIM_EUNSUPPORTED, "attribute %s has %d values, at most %d supported",
                         name, n, cap);
    for (int i = 0; i < n; i++)
        if (out[i] < min || out[i] > INT32_MAX)
            return slim_errf(err, SLIM_EINVAL, "attribute %s[%d] = %lld, must be from %lld to %d",
                             name, i, (long long)out[i], (long long)min, INT32_MAX);
    *count = n;
    return SLIM_OK;
}

bool slim_cpu_has_avx512f(void)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    static _Atomic int known = -1;
    int k = atomic_load(&known);
    if (k < 0) {
        k = __builtin_cpu_supports("avx512f") ? 1 : 0;
        atomic_store(&known, k);
    }
    return k == 1;
#else
    return false;
#endif
}

bool slim_cpu_has_f16c(void)
{
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
#else
    return false;
#endif
}

/* ---- accounted scratch -------------------------------------------------- */

/* A U8 tensor is the holder: its buffer comes from the CPU's allocator and
 * is charged to the calling thread's account like every tensor. */
void *slim_scratch_alloc(slim_tensor *holder, int64_t count, size_t size, bool zero,
                         slim_err *err)
{
    memset(holder, 0, sizeof(*holder));
    size_t bytes;
    if (count < 0 || __builtin_mul_overflow((size_t)count, size, &bytes) ||
        bytes > (size_t)INT64_MAX) {
        slim_errf(err, SLIM_EOOM, "scratch of %lld x %zu bytes is more than memory can hold",
                  (long long)count, size);
        return NULL;
    }
    holder->dtype = SLIM_U8;
    holder->ndim = 1;
    holder->dims[0] = bytes ? (int64_t)bytes : 1; /* a real pointer even for nothing */
    if (slim_tensor_alloc(holder, err))
        return NULL;
    if (zero)
        memset(holder->data, 0, (size_t)holder->dims[0]);
    return holder->data;
}

slim_status slim_scratch_grow(slim_tensor *holder, void **data, int64_t count, size_t size,
                              slim_err *err)
{
    size_t have = holder->data ? (size_t)holder->dims[0] : 0, need;
    if (count < 0 || __builtin_mul_overflow((size_t)count, size, &need))
        need = SIZE_MAX;
    if (holder->data && need <= have)
        return SLIM_OK;
    /* Doubling keeps appends linear overall. */
    int64_t want = count < 16 ? 16 : count;
    if (have / size * 2 > (size_t)want)
        want = (int64_t)(have / size * 2);
    slim_tensor bigger;
    void *p = slim_scratch_alloc(&bigger, want, size, false, err);
    if (!p)
        return err ? err->status : SLIM_ENOMEM;
    if (have)
        memcpy(p, holder->data, have);
    slim_tensor_release(holder);
    *holder = bigger;
    *data = p;
    return SLIM_OK;
}

/* The buffer sits in a header of one cache line before the memory, so
 * that the pointer alone frees it and the memory keeps the buffer's
 * 64-byte alignment. */
#define SCRATCH_HEADER 64
static _Thread_local slim_err scratch_err;

void *slim_scratch_malloc(size_t bytes)
{
    slim_buffer *b;
    if (bytes > SIZE_MAX - SCRATCH_HEADER) {
        slim_errf(&scratch_err, SLIM_EOOM, "scratch of %zu bytes is more than memory can hold",
                  bytes);
        return NULL;
    }
    if (slim_buffer_new(slim_device_cpu(), bytes + SCRATCH_HEADER, &b, &scratch_err))
        return NULL;
    memcpy(b->ptr, &b, sizeof(b));
    return (char *)b->ptr + SCRATCH_HEADER;
}

void *slim_scratch_calloc(size_t count, size_t size)
{
    size_t bytes;
    if (__builtin_mul_overflow(count, size, &bytes)) {
        slim_errf(&scratch_err, SLIM_EOOM, "scratch of %zu x %zu bytes is more than memory can "
                  "hold", count, size);
        return NULL;
    }
    void *p = slim_scratch_malloc(bytes);
    if (p)
        memset(p, 0, bytes);
    return p;
}

void slim_scratch_free(void *p)
{
    if (!p)
        return;
    slim_buffer *b;
    memcpy(&b, (char *)p - SCRATCH_HEADER, sizeof(b));
    slim_buffer_unref(b);
}

slim_status slim_scratch_oom(slim_err *err)
{
    slim_status st = scratch_err.status ? scratch_err.status : SLIM_ENOMEM;
    return slim_errf(err, st, "%s", scratch_err.status ? scratch_err.msg : "out of memory");
}
