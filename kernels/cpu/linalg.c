/*
 * linalg.c - matrix products: Gemm, MatMul and MatMulInteger (Einsum: einsum.c).
 *
 * Products run in one of three "calc" types: float32 (float32, and float16
 * / bfloat16 widened once up front) through cblas_sgemm, float64 through
 * cblas_dgemm, and integers through an exact int64 loop. Operands already
 * in the calc type are used in place; others are converted into scratch
 * copies, which costs memory only for the narrow float types.
 *
 * MatMul follows numpy: a 1-D operand is promoted to a matrix and its
 * dim dropped again from the result; batch dims broadcast. When B has no
 * batch (the weight of a linear layer) the batches of A fold into the rows
 * of one large product, which is what BLAS is fastest at.
 */
#include "kernel.h"
#include "quantize_ops.h"

#include <cblas.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* ---- calc types ---------------------------------------------------------- */

typedef enum { CT_F32, CT_F64, CT_I64 } calc_type;

static calc_type calc_for(slim_dtype dt)
{
    return dt == SLIM_F64 ? CT_F64 : slim_dtype_is_float(dt) ? CT_F32 : CT_I64;
}

static size_t calc_size(calc_type ct)
{
    return ct == CT_F32 ? sizeof(float) : 8;
}

static slim_dtype calc_dtype(calc_type ct)
{
    return ct == CT_F32 ? SLIM_F32 : ct == CT_F64 ? SLIM_F64 : SLIM_I64;
}

static void calc_store(calc_type ct, void *p, int64_t i, double v)
{
    if (ct == CT_F32)
        ((float *)p)[i] = (float)v;
    else if (ct == CT_F64)
        ((double *)p)[i] = v;
    else
        ((int64_t *)p)[i] = (int64_t)v;
}

static double calc_load(calc_type ct, const void *p, int64_t i)
{
    return ct == CT_F32 ? ((const float *)p)[i]
           : ct == CT_F64 ? ((const double *)p)[i]
                          : (double)((const int64_t *)p)[i];
}

/* t's data in calc type ct: t's own buffer when it already is, else a
 * converted copy returned in *owned (slim_scratch_free it). NULL when out of memory. */
static const void *calc_view(const slim_tensor *t, calc_type ct, void **owned)
{
    static const int64_t empty; /* stands for the NULL data of 0 elements */
    *owned = NULL;
    int64_t n = slim_tensor_numel(t);
    if (n == 0)
        return &empty;
    if (t->dtype == calc_dtype(ct))
        return t->data;
    void *p = slim_scratch_malloc(calc_size(ct) * (size_t)(n > 0 ? n : 1));
    if (!p)
        return NULL;
    for (int64_t i = 0; i < n; i++) {
        if (ct == CT_I64)
            ((int64_t *)p)[i] = slim_load_i64(t->dtype, t->data, i);
        else
            calc_store(ct, p, i, slim_load_f64(t->dtype, t->data, i));
    }
    *owned = p;
    return p;
}

/* Where to compute y: its own buffer when it is in ct, else scratch that
 * calc_finish converts back. */
static void *calc_out(slim_tensor *y, calc_type ct, void **owned)
{
    *owned = NULL;
    if (y->dtype == calc_dtype(ct))
        return y->data;
    int64_t n = slim_tensor_numel(y);
    *owned = slim_scratch_malloc(calc_size(ct) * (size_t)(n > 0 ? n : 1));
    return *owned;
}

static void calc_finish(slim_tensor *y, calc_type ct, void *owned)
{
    if (!owned)
        return;
    int64_t n = slim_tensor_numel(y);
    for (int64_t i = 0; i < n; i++) {
        if (ct == CT_I64)
            slim_store_i64(y->dtype, y->data, i, ((int64_t *)owned)[i]);
        else if (ct == CT_F32)
            slim_store_f64(y->dtype, y->data, i, ((float *)owned)[i]);
        else
            slim_store_f64(y->dtype, y->data, i, ((double *)owned)[i]);
    }
    slim_scratch_free(owned);
}

/* Y = alpha * op(A) @ op(B) + beta * Y, row-major, all in calc type ct.
 * lda / ldb / ldy are row lengths as stored. beta 0 ignores Y's contents. */
static void gemm_calc(calc_type ct, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                      double alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
                      double beta, void *y, int64_t ldy)
{
    if (m == 0 || n == 0)
        return;
    if (k == 0 || ct == CT_I64) {
        /* Exact integer product; also the k == 0 case, which BLAS's
         * leading-dimension checks reject. */
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                int64_t acc = 0, at = i * ldy + j;
                for (int64_t p = 0; ct == CT_I64 && p < k; p++)
                    acc += ((const int64_t *)a)[ta ? p * lda + i : i * lda + p] *
                           ((const int64_t *)b)[tb ? j * ldb + p : p * ldb + j];
                if (ct == CT_I64 && alpha == 1 && beta == 0) {
                    ((int64_t *)y)[at] = acc;
                } else if (ct == CT_I64 && alpha == 1 && beta == 1) {
                    ((int64_t *)y)[at] += acc;
                } else {
                    double prev = beta == 0 ? 0 : calc_load(ct, y, at);
                    calc_store(ct, y, at, alpha * (double)acc + beta * prev);
                }
            }
        return;
    }
    enum CBLAS_TRANSPOSE tA = ta ? CblasTrans : CblasNoTrans, tB = tb ? CblasTrans : CblasNoTrans;
    if (ct == CT_F32)
        slim_sgemm_rows(ta, tb, m, n, k, (float)alpha, a, lda, b, ldb, (float)beta, y, ldy);
    else
        cblas_dgemm(CblasRowMajor, tA, tB, (blasint)m, (blasint)n, (blasint)k, alpha, a,
                    (blasint)lda, b, (blasint)ldb, beta, y, (blasint)ldy);
}

static slim_status check_blas_dims(int64_t m, int64_t n, int64_t k, slim_err *err)
{
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX)
        return slim_errf(err, SLIM_EUNSUPPORTED, "matrix dims %lldx%lldx%lld exceed BLAS limits",
                         (long long)m, (long long)n, (long long)k);
    return SLIM_OK;
}

static slim_status check_matmul_dtype(const slim_tensor *a, const slim_tensor *b,
                                      const char *na, const char *nb, slim_err *err)
{
    slim_status s = slim_check_dtype(a, na, err, SLIM_F32, SLIM_F64, SLIM_F16, SLIM_BF16,
                                     SLIM_I32, SLIM_I64, SLIM_U32, SLIM_U64,
                                     SLIM_DTYPE_UNDEFINED);
    if (s)
        return s;
    if (b->dtype != a->dtype)
        return slim_errf(err, SLIM_ETYPE, "%s is %s but %s is %s", na,
                         slim_dtype_name(a->dtype), nb, slim_dtype_name(b->dtype));
    return SLIM_OK;
}

/* ---- Gemm ---------------------------------------------------------------- */

typedef struct {
    bool ta, tb;
    double alpha, beta;
} gemm_state;

static slim_status gemm_prepare(slim_node *node, void **state, slim_err *err)
{
    gemm_state *st = calloc(1, sizeof(*st)); /* load-time state, fixed size */
    if (!st)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    st->ta = slim_attr_int(node, "transA", 0) != 0;
    st->tb = slim_attr_int(node, "transB", 0) != 0;
    st->alpha = slim_attr_float(node, "alpha", 1.0f);
    st->beta = slim_attr_float(node, "beta", 1.0f);
    *state = st;
    return SLIM_OK;
}

static const slim_tensor *gemm_c(const slim_op_ctx *ctx)
{
    return ctx->n_in > 2 ? ctx->in[2] : NULL;
}

static slim_status gemm_infer(slim_op_ctx *ctx)
{
    const gemm_state *st = ctx->state;
    const slim_tensor *a = ctx->in[0], *b = ctx->in[1], *c = gemm_c(ctx);
    slim_status s = check_matmul_dtype(a, b, "input A", "input B", ctx->err);
    if (s)
        return s;
    if (a->ndim != 2 || b->ndim != 2)
        return slim_errf(ctx->err, SLIM_ESHAPE, "inputs A and B must be matrices, got %d and %d dims",
                         a->ndim, b->ndim);
    int64_t m = st->ta ? a->dims[1] : a->dims[0], k = st->ta ? a->dims[0] : a->dims[1];
    int64_t kb = st->tb ? b->dims[1] : b->dims[0], n = st->tb ? b->dims[0] : b->dims[1];
    if (k != kb)
        return slim_errf(ctx->err, SLIM_ESHAPE, "A has %lld columns but B has %lld rows%s",
                         (long long)k, (long long)kb, st->ta || st->tb ? " (after transA/transB)" : "");
    if ((s = check_blas_dims(m, n, k, ctx->err)))
        return s;
    int64_t dims[2] = {m, n};
    if (c) {
        if (c->dtype != a->dtype)
            return slim_errf(ctx->err, SLIM_ETYPE, "input C is %s but A is %s",
                             slim_dtype_name(c->dtype), slim_dtype_name(a->dtype));
        bool ok = c->ndim <= 2;
        for (int i = 0; ok && i < c->ndim; i++) {
            int64_t want = dims[i + 2 - c->ndim];
            ok = c->dims[i] == want || c->dims[i] == 1;
        }
        if (!ok) {
            char sc[128];
            return slim_errf(ctx->err, SLIM_ESHAPE, "input C of shape %s does not broadcast to [%lld,%lld]",
                             slim_shape_str(c->ndim, c->dims, sc, sizeof(sc)), (long long)m,
                             (long long)n);
        }
    }
    slim_tensor_set_shape(ctx->out[0], a->dtype, 2, dims);
    return SLIM_OK;
}

static slim_status gemm_exec(slim_op_ctx *ctx)
{
    const gemm_state *st = ctx->state;
    const slim_tensor *a = ctx->in[0], *b = ctx->in[1], *c = gemm_c(ctx);
    slim_tensor *y = ctx->out[0];
    int64_t m = y->dims[0], n = y->dims[1], k = st->ta ? a->dims[0] : a->dims[1];
    if (m * n == 0)
        return SLIM_OK;
    calc_type ct = calc_for(a->dtype);
    void *own_a, *own_b, *own_y;
    const void *pa = calc_view(a, ct, &own_a), *pb = calc_view(b, ct, &own_b);
    void *py = calc_out(y, ct, &own_y);
    slim_status s = SLIM_OK;
    if (!pa || !pb || !py) {
        s = slim_scratch_oom(ctx->err);
        goto done;
    }
    double beta = c && st->beta != 0 ? st->beta : 0;
    if (beta != 0) {
        /* Y starts as C broadcast to [m, n]; the product adds onto it. */
        int64_t cs0 = c->ndim == 2 && c->dims[0] != 1 ? c->dims[1] : 0;
        int64_t cs1 = c->ndim >= 1 && c->dims[c->ndim - 1] != 1 ? 1 : 0;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                int64_t at = i * cs0 + j * cs1;
                if (ct == CT_I64)
                    ((int64_t *)py)[i * n + j] = slim_load_i64(c->dtype, c->data, at);
                else
                    calc_store(ct, py, i * n + j, slim_load_f64(c->dtype, c->data, at));
            }
    }
    gemm_calc(ct, st->ta, st->tb, m, n, k, st->alpha, pa, a->dims[1], pb, b->dims[1], beta, py, n);
done:
    if (s == SLIM_OK)
        calc_finish(y, ct, own_y);
    else
        slim_scratch_free(own_y);
    slim_scratch_free(own_a);
    slim_scratch_free(own_b);
    return s;
}

/* ---- MatMul -------------------------------------------------------------- */

/* Shapes of a MatMul: a viewed as [batch_a..., m, k], b as [batch_b..., k, n]. */
typedef struct {
    int64_t m, n, k;
    int nb_a, nb_b, nb;         /* batch ranks of a, b, output */
    int64_t batch[SLIM_MAX_DIMS];
} mm_shape;

static slim_status mm_shapes(const slim_tensor *a, const slim_tensor *b, mm_shape *sh,
                             int *ndim, int64_t *dims, slim_err *err)
{
    if (a->ndim < 1 || b->ndim < 1)
        return slim_errf(err, SLIM_ESHAPE, "MatMul needs inputs of rank >= 1, got %d and %d",
                         a->ndim, b->ndim);
    sh->m = a->ndim == 1 ? 1 : a->dims[a->ndim - 2];
    sh->k = a->dims[a->ndim - 1];
    int64_t kb = b->ndim == 1 ? b->dims[0] : b->dims[b->ndim - 2];
    sh->n = b->ndim == 1 ? 1 : b->dims[b->ndim - 1];
    if (sh->k != kb) {
        char sa[128], sb[128];
        return slim_errf(err, SLIM_ESHAPE, "shapes %s and %s: inner dims %lld and %lld differ",
                         slim_shape_str(a->ndim, a->dims, sa, sizeof(sa)),
                         slim_shape_str(b->ndim, b->dims, sb, sizeof(sb)), (long long)sh->k,
                         (long long)kb);
    }
    sh->nb_a = a->ndim > 2 ? a->ndim - 2 : 0;
    sh->nb_b = b->ndim > 2 ? b->ndim - 2 : 0;
    slim_status s = slim_broadcast_shape(sh->nb_a, a->dims, sh->nb_b, b->dims, &sh->nb,
                                         sh->batch, err);
    if (s)
        return s;
    if (sh->nb + 2 > SLIM_MAX_DIMS)
        return slim_errf(err, SLIM_EUNSUPPORTED, "too many dims");
    *ndim = sh->nb;
    memcpy(dims, sh->batch, sizeof(int64_t) * sh->nb);
    if (a->ndim > 1)
        dims[(*ndim)++] = sh->m;
    if (b->ndim > 1)
        dims[(*ndim)++] = sh->n;
    return check_blas_dims(sh->m, sh->n, sh->k, err);
}

/* y = a @ b over all batches, operands already in calc type ct. */
static void mm_batched(calc_type ct, const mm_shape *sh, const slim_tensor *a,
                       const slim_tensor *b, const void *pa, const void *pb, void *py)
{
    size_t es = calc_size(ct);
    int64_t m = sh->m, n = sh->n, k = sh->k;
    int64_t n_batch = slim_shape_numel(sh->nb, sh->batch);
    int64_t batch_a = slim_shape_numel(sh->nb_a, a->dims), batch_b = slim_shape_numel(sh->nb_b, b->dims);
    if (batch_b == 1 && batch_a == n_batch) {
        /* b is one matrix: all of a's rows go through one product. */
        gemm_calc(ct, false, false, n_batch * m, n, k, 1.0, pa, k, pb, n, 0.0, py, n);
        return;
    }
    int64_t sa[SLIM_MAX_DIMS], sb[SLIM_MAX_DIMS], idx[SLIM_MAX_DIMS] = {0};
    slim_broadcast_strides(sh->nb_a, a->dims, sh->nb, sh->batch, sa);
    slim_broadcast_strides(sh->nb_b, b->dims, sh->nb, sh->batch, sb);
    int64_t oa = 0, ob = 0;
    for (int64_t t = 0; t < n_batch; t++) {
        gemm_calc(ct, false, false, m, n, k, 1.0, (const char *)pa + oa * m * k * es, k,
                  (const char *)pb + ob * k * n * es, n, 0.0, (char *)py + t * m * n * es, n);
        for (int d = sh->nb - 1; d >= 0; d--) {
            oa += sa[d];
            ob += sb[d];
            if (++idx[d] < sh->batch[d])
                break;
            oa -= sa[d] * sh->batch[d];
            ob -= sb[d] * sh->batch[d];
            idx[d] = 0;
        }
    }
}

static slim_status matmul_infer(slim_op_ctx *ctx)
{
    const slim_tensor *a = ctx->in[0], *b = ctx->in[1];
    slim_status s = check_matmul_dtype(a, b, "input A", "input B", ctx->err);
    if (s)
        return s;
    mm_shape sh;
    int nd;
    int64_t dims[SLIM_MAX_DIMS];
    if ((s = mm_shapes(a, b, &sh, &nd, dims, ctx->err)))
        return s;
    slim_tensor_set_shape(ctx->out[0], a->dtype, nd, dims);
    return SLIM_OK;
}

static slim_status matmul_exec(slim_op_ctx *ctx)
{
    const slim_tensor *a = ctx->in[0], *b = ctx->in[1];
    slim_tensor *y = ctx->out[0];
    mm_shape sh;
    int nd;
    int64_t dims[SLIM_MAX_DIMS];
    slim_status s = mm_shapes(a, b, &sh, &nd, dims, ctx->err);
    if (s || slim_tensor_numel(y) == 0)
        return s;
    calc_type ct = calc_for(a->dtype);
    void *own_a, *own_b, *own_y;
    const void *pa = calc_view(a, ct, &own_a), *pb = calc_view(b, ct, &own_b);
    void *py = calc_out(y, ct, &own_y);
    if (!pa || !pb || !py) {
        slim_scratch_free(own_a);
        slim_scratch_free(own_b);
        slim_scratch_free(own_y);
        return slim_scratch_oom(ctx->err);
    }
    mm_batched(ct, &sh, a, b, pa, pb, py);
    calc_finish(y, ct, own_y);
    slim_scratch_free(own_a);
    slim_scratch_free(own_b);
    return SLIM_OK;
}

/* ---- MatMulInteger ------------------------------------------------------- */

/* (a - a_zero_point) @ (b - b_zero_point) into int32. The 8-bit operands,
 * zero points removed, go through dgemm: every product and sum of them is
 * an integer far below 2^53, so double arithmetic is exact and BLAS-fast. */
static slim_status mmi_zero_point(const slim_op_ctx *ctx, int i, int64_t want)
{
    const slim_tensor *zp = i < ctx->n_in ? ctx->in[i] : NULL;
    if (!zp)
        return SLIM_OK;
    const slim_tensor *x = ctx->in[i - 2];
    if (zp->dtype != x->dtype)
        return slim_errf(ctx->err, SLIM_ETYPE, "zero point %d is %s but its input is %s", i,
                         slim_dtype_name(zp->dtype), slim_dtype_name(x->dtype));
    int64_t n = slim_tensor_numel(zp);
    if (n != 1 && !(zp->ndim == 1 && n == want))
        return slim_errf(ctx->err, SLIM_EUNSUPPORTED,
                         "zero point %d must be a scalar or hold %lld values (per %s)", i,
                         (long long)want, i == 2 ? "row" : "column");
    return SLIM_OK;
}

static slim_status mmi_infer(slim_op_ctx *ctx)
{
    const slim_tensor *a = ctx->in[0], *b = ctx->in[1];
    slim_status s = slim_check_dtype(a, "input A", ctx->err, SLIM_U8, SLIM_I8, SLIM_DTYPE_UNDEFINED);
    if (s || (s = slim_check_dtype(b, "input B", ctx->err, SLIM_U8, SLIM_I8, SLIM_DTYPE_UNDEFINED)))
        return s;
    mm_shape sh;
    int nd;
    int64_t dims[SLIM_MAX_DIMS];
    if ((s = mm_shapes(a, b, &sh, &nd, dims, ctx->err)) || (s = mmi_zero_point(ctx, 2, sh.m)) ||
        (s = mmi_zero_point(ctx, 3, sh.n)))
        return s;
    slim_tensor_set_shape(ctx->out[0], SLIM_I32, nd, dims);
    return SLIM_OK;
}

/* x minus its zero point as doubles; the zero point of element e is
 * zp[(e / div) % mod] (per row of a: div k, mod m; per column of b: 1, n). */
static double *mmi_shifted(const slim_tensor *x, const slim_tensor *zp, int64_t div, int64_t mod)
{
    int64_t n = slim_tensor_numel(x), nz = zp ? slim_tensor_numel(zp) : 0;
    double *d = slim_scratch_malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    for (int64_t e = 0; d && e < n; e++)
        d[e] = slim_load_f64(x->dtype, x->data, e) -
               (nz == 0 ? 0 : slim_load_f64(zp->dtype, zp->data, nz == 1 ? 0 : (e / div) % mod));
    return d;
}

static slim_status mmi_exec(slim_op_ctx *ctx)
{
    const slim_tensor *a = ctx->in[0], *b = ctx->in[1];
    slim_tensor *y = ctx->out[0];
    mm_shape sh;
    int nd;
    int64_t dims[SLIM_MAX_DIMS];
    slim_status s = mm_shapes(a, b, &sh, &nd, dims, ctx->err);
    if (s || slim_tensor_numel(y) == 0)
        return s;
    const slim_tensor *azp = ctx->n_in > 2 ? ctx->in[2] : NULL;
    const slim_tensor *bzp = ctx->n_in > 3 ? ctx->in[3] : NULL;
    if (slim_qmm_fast_ok(a, azp, b, bzp)) { /* u8 x int8 weights: the int8 kernel */
        slim_qmm_shape qs;
        if (!(s = slim_qmm_shapes(a, b, &qs, &nd, dims, ctx->err)))
            s = slim_qmm_int32(&qs, a, azp, b, bzp, y->data, ctx->err);
        return s;
    }
    double *pa = mmi_shifted(a, ctx->n_in > 2 ? ctx->in[2] : NULL, sh.k, sh.m);
    double *pb = mmi_shifted(b, ctx->n_in > 3 ? ctx->in[3] : NULL, 1, sh.n);
    void *own_y, *py = calc_out(y, CT_F64, &own_y);
    if (pa && pb && py) {
        mm_batched(CT_F64, &sh, a, b, pa, pb, py);
        calc_finish(y, CT_F64, own_y);
    } else {
        slim_scratch_free(own_y);
        s = slim_scratch_oom(ctx->err);
    }
    slim_scratch_free(pa);
    slim_scratch_free(pb);
    return s;
}

/* ---- table --------------------------------------------------------------- */

const slim_op_def slim__ops_linalg[] = {
    {"Gemm", 1, gemm_prepare, free, gemm_infer, gemm_exec, 0},
    {"MatMul", 1, NULL, NULL, matmul_infer, matmul_exec, 0},
    {"MatMulInteger", 10, NULL, NULL, mmi_infer, mmi_exec, 0},
    {0},
};
