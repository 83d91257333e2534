/*
 * qinteger.c - exact 8-bit products into int32: the matrix product behind
 * QLinearMatMul and onnxruntime's MatMulIntegerToFloat and
 * DynamicQuantizeMatMul (quantize_ops.c), and the convolution behind
 * ConvInteger and QLinearConv (operators defined here).
 *
 * Zero points are subtracted first, into int16 (an 8-bit value minus an
 * 8-bit zero point fits), and products of two int16 accumulate in int32:
 * with |a|, |b| <= 255 a sum of up to 33025 products cannot overflow,
 * which covers every K a real layer has. Integer sums are exact, so the
 * result does not depend on how rows are split across threads, and an
 * output row depends only on its own input row (the batching guarantee
 * for operators whose parameters are constants).
 *
 * The common case -- u8 activations with one zero point times a 2-D int8
 * weight with none, what quantize_dynamic writes -- goes to the packed
 * kernel of slimserve's own int8 path (qgemm.h, vpdpbusd), the weight
 * packed per call (a copy, small next to the product at any batch).
 *
 * The convolution unrolls each image and group into int16 columns
 * ([C/group x taps] x output positions, the padding already 0 in the
 * shifted domain, as ONNX pads with the zero point) and accumulates each
 * output channel over them with a vectorizable inner loop.
 */
#include "kernel.h"
#include "qgemm.h"
#include "quantize_ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SPATIAL 3

/* ---- matrix product ----------------------------------------------------- */

slim_status slim_qmm_shapes(const slim_tensor *a, const slim_tensor *b, slim_qmm_shape *sh,
                            int *ndim, int64_t *dims, slim_err *err)
{
    if (a->ndim < 1 || b->ndim < 1)
        return slim_errf(err, SLIM_ESHAPE, "matrix product inputs need rank >= 1, got %d and %d",
                         a->ndim, b->ndim);
    sh->m = a->ndim == 1 ? 1 : a->dims[a->ndim - 2];
    sh->k = a->dims[a->ndim - 1];
    int64_t kb = b->ndim == 1 ? b->dims[0] : b->dims[b->ndim - 2];
    sh->n = b->ndim == 1 ? 1 : b->dims[b->ndim - 1];
    if (sh->k != kb)
        return slim_errf(err, SLIM_ESHAPE, "inner dims %lld and %lld differ", (long long)sh->k,
                         (long long)kb);
    if (sh->k > 32768)
        return slim_errf(err, SLIM_EUNSUPPORTED, "inner dim %lld could overflow int32 sums "
                         "(at most 32768)", (long long)sh->k);
    sh->nb_a = a->ndim > 2 ? a->ndim - 2 : 0;
    sh->nb_b = b->ndim > 2 ? b->ndim - 2 : 0;
    slim_status s = slim_broadcast_shape(sh->nb_a, a->dims, sh->nb_b, b->dims, &sh->nb,
                                         sh->batch, err);
    if (s)
        return s;
    if (sh->nb + 2 > SLIM_MAX_DIMS)
        return slim_errf(err, SLIM_EUNSUPPORTED, "too many dims");
    *ndim = sh->nb;
    memcpy(dims, sh->batch, sizeof(int64_t) * (size_t)sh->nb);
    if (a->ndim > 1)
        dims[(*ndim)++] = sh->m;
    if (b->ndim > 1)
        dims[(*ndim)++] = sh->n;
    return SLIM_OK;
}

/* x - zp[(e / div) % mod] as int16 (zp scalar when it has one value). */
static int16_t *shifted16(const slim_tensor *x, const slim_tensor *zp, int64_t div, int64_t mod)
{
    int64_t n = slim_tensor_numel(x), nz = zp ? slim_tensor_numel(zp) : 0;
    int16_t *d = slim_scratch_malloc(sizeof(int16_t) * (size_t)(n > 0 ? n : 1));
    if (!d)
        return NULL;
    int32_t z0 = nz ? (int32_t)slim_load_i64(zp->dtype, zp->data, 0) : 0;
    for (int64_t e = 0; e < n; e++) {
        int32_t z = nz > 1 ? (int32_t)slim_load_i64(zp->dtype, zp->data, (e / div) % mod) : z0;
        int32_t v = x->dtype == SLIM_U8 ? ((const uint8_t *)x->data)[e]
                                        : ((const int8_t *)x->data)[e];
        d[e] = (int16_t)(v - z);
    }
    return d;
}

typedef struct {
    const slim_qmm_shape *sh;
    const int16_t *a, *b;
    const int64_t *off_a, *off_b; /* per output batch: matrix index in a, b */
    int32_t *acc;
} qmm_job;

static void qmm_rows(int64_t begin, int64_t end, void *user)
{
    const qmm_job *j = user;
    int64_t m = j->sh->m, n = j->sh->n, k = j->sh->k;
    for (int64_t r = begin; r < end; r++) {
        int64_t t = r / m, i = r % m;
        const int16_t *ar = j->a + (j->off_a[t] * m + i) * k;
        const int16_t *bm = j->b + j->off_b[t] * k * n;
        int32_t *y = j->acc + r * n;
        memset(y, 0, sizeof(int32_t) * (size_t)n);
        for (int64_t kk = 0; kk < k; kk++) {
            int32_t av = ar[kk];
            const int16_t *br = bm + kk * n;
            for (int64_t c = 0; c < n; c++)
                y[c] += av * br[c];
        }
    }
}

bool slim_qmm_fast_ok(const slim_tensor *a, const slim_tensor *azp, const slim_tensor *b,
                      const slim_tensor *bzp)
{
    if (a->dtype != SLIM_U8 || b->dtype != SLIM_I8 || b->ndim != 2 || a->ndim < 1 ||
        b->dims[0] > SLIM_QGEMM_MAX_K || (azp && slim_tensor_numel(azp) != 1))
        return false;
    for (int64_t i = 0; bzp && i < slim_tensor_numel(bzp); i++)
        if (((const int8_t *)bzp->data)[i] != 0)
            return false;
    return true;
}

static slim_status qmm_fast(const slim_qmm_shape *sh, const slim_tensor *a,
                            const slim_tensor *azp, const slim_tensor *b, int32_t *acc,
                            slim_err *err)
{
    int64_t k = sh->k, n = sh->n, k4 = slim_qgemm_k4(k);
    int64_t rows = slim_tensor_numel(a) / (k ? k : 1);
    if (rows == 0 || n == 0)
        return SLIM_OK;
    if (k == 0) {
        memset(acc, 0, sizeof(int32_t) * (size_t)(rows * n));
        return SLIM_OK;
    }
    uint8_t *qx = NULL;
    int8_t *packed = NULL;
    int32_t *zx = slim_scratch_malloc(sizeof(int32_t) * (size_t)rows), *colsum = slim_scratch_malloc(sizeof(int32_t) * (size_t)n);
    qx = slim_scratch_malloc((size_t)(rows * k4));         /* 64-byte aligned, as the */
    packed = slim_scratch_malloc(slim_qgemm_packed_bytes(n, k)); /* int8 GEMM wants */
    if (!zx || !colsum || !qx || !packed) {
        slim_scratch_free(zx);
        slim_scratch_free(colsum);
        slim_scratch_free(qx);
        slim_scratch_free(packed);
        return slim_scratch_oom(err);
    }
    int32_t z = azp ? ((const uint8_t *)azp->data)[0] : 0;
    for (int64_t r = 0; r < rows; r++) {
        memcpy(qx + r * k4, (const uint8_t *)a->data + r * k, (size_t)k);
        memset(qx + r * k4 + k, 0, (size_t)(k4 - k));
        zx[r] = z;
    }
    slim_qgemm_pack_kn(b->data, k, n, n, packed, colsum);
    slim_qgemm_args args = {.m = rows, .n = n, .k = k, .packed = packed, .colsum = colsum,
                            .y_i32 = acc, .ldy = n};
    slim_qgemm_u8(&args, qx, zx);
    slim_scratch_free(zx);
    slim_scratch_free(colsum);
    slim_scratch_free(qx);
    slim_scratch_free(packed);
    return SLIM_OK;
}

slim_status slim_qmm_int32(const slim_qmm_shape *sh, const slim_tensor *a, const slim_tensor *azp,
                           const slim_tensor *b, const slim_tensor *bzp, int32_t *acc,
                           slim_err *err)
{
    if (slim_qmm_fast_ok(a, azp, b, bzp))
        return qmm_fast(sh, a, azp, b, acc, err);
    int64_t n_batch = slim_shape_numel(sh->nb, sh->batch);
    int16_t *pa = shifted16(a, azp, sh->k, sh->m), *pb = shifted16(b, bzp, 1, sh->n);
    int64_t *off = slim_scratch_malloc(sizeof(int64_t) * 2 * (size_t)(n_batch > 0 ? n_batch : 1));
    if (!pa || !pb || !off) {
        slim_scratch_free(pa);
        slim_scratch_free(pb);
        slim_scratch_free(off);
        return slim_scratch_oom(err);
    }
    int64_t sa[SLIM_MAX_DIMS], sb[SLIM_MAX_DIMS], idx[SLIM_MAX_DIMS] = {0}, oa = 0, ob = 0;
    slim_broadcast_strides(sh->nb_a, a->dims, sh->nb, sh->batch, sa);
    slim_broadcast_strides(sh->nb_b, b->dims, sh->nb, sh->batch, sb);
    for (int64_t t = 0; t < n_batch; t++) {
        off[t] = oa;
        off[n_batch + t] = ob;
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
    qmm_job j = {sh, pa, pb, off, off + n_batch, acc};
    slim_parallel_for(n_batch * sh->m, 1 + (1 << 16) / (sh->n * sh->k + 1), qmm_rows, &j);
    slim_scratch_free(pa);
    slim_scratch_free(pb);
    slim_scratch_free(off);
    return SLIM_OK;
}

/* ---- convolution geometry ------------------------------------------------ */

typedef struct {
    int auto_pad; /* 0 NOTSET, 1 SAME_UPPER, 2 SAME_LOWER, 3 VALID */
    int64_t group;
    int n_kernel, n_strides, n_dilations, n_pads;
    int64_t kernel[SLIM_MAX_DIMS], strides[SLIM_MAX_DIMS], dilations[SLIM_MAX_DIMS];
    int64_t pads[2 * SLIM_MAX_DIMS];
} qconv_attrs;

typedef struct {
    int64_t N, C, M, G, K, in_size, out_size;
    int64_t in[MAX_SPATIAL], out[MAX_SPATIAL], kernel[MAX_SPATIAL];
    int64_t stride[MAX_SPATIAL], dilation[MAX_SPATIAL], pad[MAX_SPATIAL];
} qconv_plan;

static slim_status qconv_prepare(slim_node *node, void **state, slim_err *err)
{
    /* raw: fixed-size load-time state, freed with the model */
    qconv_attrs *a = calloc(1, sizeof(*a));
    if (!a)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    const char *pad = slim_attr_str(node, "auto_pad", "NOTSET");
    static const char *const modes[] = {"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"};
    a->auto_pad = -1;
    for (int i = 0; i < 4; i++)
        if (!strcmp(pad, modes[i]) || (!pad[0] && i == 0))
            a->auto_pad = i;
    a->group = slim_attr_int(node, "group", 1);
    slim_status st = SLIM_OK;
    if (a->auto_pad < 0)
        st = slim_errf(err, SLIM_EINVAL, "auto_pad \"%s\" is not NOTSET, SAME_UPPER, "
                       "SAME_LOWER or VALID", pad);
    else if (a->group < 1)
        st = slim_errf(err, SLIM_EINVAL, "group = %lld, must be >= 1", (long long)a->group);
    if (st ||
        (st = slim_attr_geometry(node, "kernel_shape", a->kernel, SLIM_MAX_DIMS, 1, &a->n_kernel,
                                 err)) ||
        (st = slim_attr_geometry(node, "strides", a->strides, SLIM_MAX_DIMS, 1, &a->n_strides,
                                 err)) ||
        (st = slim_attr_geometry(node, "dilations", a->dilations, SLIM_MAX_DIMS, 1,
                                 &a->n_dilations, err)) ||
        (st = slim_attr_geometry(node, "pads", a->pads, 2 * SLIM_MAX_DIMS, 0, &a->n_pads, err))) {
        free(a);
        return st;
    }
    *state = a;
    return SLIM_OK;
}

/* x [N, C, spatial...] and w [M, C/group, k...]: the output geometry. */
static slim_status qconv_plan_make(const slim_op_ctx *ctx, const slim_tensor *x,
                                   const slim_tensor *w, qconv_plan *p)
{
    const qconv_attrs *a = ctx->state;
    slim_err *err = ctx->err;
    if (x->ndim < 3 || x->ndim - 2 > MAX_SPATIAL || w->ndim != x->ndim)
        return slim_errf(err, SLIM_ESHAPE, "X [N, C, 1 to 3 spatial dims] and W of the same "
                         "rank expected, got ranks %d and %d", x->ndim, w->ndim);
    int n = x->ndim - 2, off = MAX_SPATIAL - n;
    if ((a->n_kernel >= 0 && a->n_kernel != n) || (a->n_strides >= 0 && a->n_strides != n) ||
        (a->n_dilations >= 0 && a->n_dilations != n) || (a->n_pads >= 0 && a->n_pads != 2 * n))
        return slim_errf(err, SLIM_EINVAL, "kernel_shape, strides, dilations or pads does not "
                         "match %d spatial dims", n);
    p->N = x->dims[0];
    p->C = x->dims[1];
    p->M = w->dims[0];
    p->G = a->group;
    if (p->C % p->G || p->M % p->G || w->dims[1] != p->C / p->G)
        return slim_errf(err, SLIM_ESHAPE, "X has %lld channels, W is [%lld, %lld, ...]: "
                         "not consistent with group %lld", (long long)p->C, (long long)p->M,
                         (long long)w->dims[1], (long long)p->G);
    p->K = 1;
    p->in_size = p->out_size = 1;
    for (int i = 0; i < MAX_SPATIAL; i++) {
        int d = i - off;
        p->in[i] = d >= 0 ? x->dims[2 + d] : 1;
        p->kernel[i] = d >= 0 ? w->dims[2 + d] : 1;
        p->stride[i] = d >= 0 && a->n_strides >= 0 ? a->strides[d] : 1;
        p->dilation[i] = d >= 0 && a->n_dilations >= 0 ? a->dilations[d] : 1;
        if (d >= 0 && a->n_kernel >= 0 && a->kernel[d] != p->kernel[i])
            return slim_errf(err, SLIM_ESHAPE, "kernel_shape[%d] = %lld but W has %lld", d,
                             (long long)a->kernel[d], (long long)p->kernel[i]);
        if (p->kernel[i] < 1)
            return slim_errf(err, SLIM_ESHAPE, "W has an empty kernel dim");
        int64_t span = (p->kernel[i] - 1) * p->dilation[i] + 1, s = p->stride[i];
        int64_t pb = 0, pe = 0;
        if (d >= 0 && (a->auto_pad == 1 || a->auto_pad == 2)) {
            p->out[i] = (p->in[i] + s - 1) / s;
            int64_t total = (p->out[i] - 1) * s + span - p->in[i];
            total = total < 0 ? 0 : total;
            pb = a->auto_pad == 1 ? total / 2 : total - total / 2;
        } else {
            if (d >= 0 && a->auto_pad == 0 && a->n_pads >= 0) {
                pb = a->pads[d];
                pe = a->pads[n + d];
            }
            int64_t room = p->in[i] + pb + pe - span;
            if (room < 0)
                return slim_errf(err, SLIM_ESHAPE, "spatial dim %d is smaller than the kernel",
                                 d);
            p->out[i] = room / s + 1;
        }
        p->pad[i] = pb;
        p->K *= p->kernel[i];
        p->in_size *= p->in[i];
        p->out_size *= p->out[i];
    }
    if (p->C / p->G * p->K > 32768)
        return slim_errf(err, SLIM_EUNSUPPORTED, "%lld taps per output could overflow int32 "
                         "sums (at most 32768)", (long long)(p->C / p->G * p->K));
    return SLIM_OK;
}

static void qconv_out_dims(const slim_tensor *x, const qconv_plan *p, int64_t *dims)
{
    dims[0] = p->N;
    dims[1] = p->M;
    for (int i = 2; i < x->ndim; i++)
        dims[i] = p->out[MAX_SPATIAL - (x->ndim - i)];
}

/* ---- the integer convolution -------------------------------------------- */

typedef struct {
    const qconv_plan *p;
    const int16_t *x, *w; /* shifted; w [M, C/G * K] */
    int16_t *col;         /* [C/G * K, out_size] for the current (n, g) */
    const int32_t *bias;  /* [M] or NULL */
    int32_t *y;           /* [N, M, out_size] */
    int64_t n, g;
} qconv_job;

static void im2col_rows(int64_t begin, int64_t end, void *user)
{
    const qconv_job *j = user;
    const qconv_plan *p = j->p;
    int64_t cg = p->C / p->G;
    for (int64_t r = begin; r < end; r++) {
        int64_t c = r / p->K, t = r % p->K;
        int64_t k2 = t % p->kernel[2], k1 = (t / p->kernel[2]) % p->kernel[1];
        int64_t k0 = t / (p->kernel[2] * p->kernel[1]);
        const int16_t *xc = j->x + ((j->n * p->C) + j->g * cg + c) * p->in_size;
        int16_t *dst = j->col + r * p->out_size;
        for (int64_t o0 = 0; o0 < p->out[0]; o0++) {
            int64_t i0 = o0 * p->stride[0] - p->pad[0] + k0 * p->dilation[0];
            for (int64_t o1 = 0; o1 < p->out[1]; o1++) {
                int64_t i1 = o1 * p->stride[1] - p->pad[1] + k1 * p->dilation[1];
                int16_t *d = dst + (o0 * p->out[1] + o1) * p->out[2];
                bool row_ok = i0 >= 0 && i0 < p->in[0] && i1 >= 0 && i1 < p->in[1];
                const int16_t *xr = xc + (i0 * p->in[1] + i1) * p->in[2];
                for (int64_t o2 = 0; o2 < p->out[2]; o2++) {
                    int64_t i2 = o2 * p->stride[2] - p->pad[2] + k2 * p->dilation[2];
                    d[o2] = row_ok && i2 >= 0 && i2 < p->in[2] ? xr[i2] : 0;
                }
            }
        }
    }
}

static void channel_rows(int64_t begin, int64_t end, void *user)
{
    const qconv_job *j = user;
    const qconv_plan *p = j->p;
    int64_t mg = p->M / p->G, rows = p->C / p->G * p->K, P = p->out_size;
    for (int64_t mm = begin; mm < end; mm++) {
        int64_t oc = j->g * mg + mm;
        int32_t *y = j->y + (j->n * p->M + oc) * P;
        int32_t b = j->bias ? j->bias[oc] : 0;
        for (int64_t q = 0; q < P; q++)
            y[q] = b;
        const int16_t *w = j->w + oc * rows;
        for (int64_t r = 0; r < rows; r++) {
            int32_t wv = w[r];
            if (!wv)
                continue;
            const int16_t *c = j->col + r * P;
            for (int64_t q = 0; q < P; q++)
                y[q] += wv * c[q];
        }
    }
}

/*
 * Windows that are mostly padding (a kernel far wider than its input, as
 * conv.c's direct_rows): the unrolled columns would be K x out_size of
 * nearly all zeros, so each output sums only the taps inside the input.
 */
static void direct_rows(int64_t begin, int64_t end, void *user)
{
    const qconv_job *j = user;
    const qconv_plan *p = j->p;
    const int64_t O0 = p->out[0], O1 = p->out[1], O2 = p->out[2];
    const int64_t cg = p->C / p->G, mg = p->M / p->G;
    for (int64_t r = begin; r < end; r++) {
        if (slim_cancel_check())
            return; /* the executor reports it */
        int64_t o1 = r % O1, o0 = r / O1 % O0, m = r / (O1 * O0) % p->M, n = r / (O1 * O0 * p->M);
        int64_t g = m / mg, start[MAX_SPATIAL], lo[MAX_SPATIAL], hi[MAX_SPATIAL];
        start[0] = o0 * p->stride[0] - p->pad[0];
        start[1] = o1 * p->stride[1] - p->pad[1];
        for (int i = 0; i < 2; i++)
            slim_window_range(start[i], p->dilation[i], p->kernel[i], p->in[i], &lo[i], &hi[i]);
        int32_t *y = j->y + ((n * p->M + m) * O0 + o0) * O1 * O2 + o1 * O2;
        for (int64_t o2 = 0; o2 < O2; o2++) {
            start[2] = o2 * p->stride[2] - p->pad[2];
            slim_window_range(start[2], p->dilation[2], p->kernel[2], p->in[2], &lo[2], &hi[2]);
            int32_t acc = j->bias ? j->bias[m] : 0;
            for (int64_t c = 0; c < cg; c++) {
                const int16_t *x = j->x + (n * p->C + g * cg + c) * p->in_size;
                const int16_t *w = j->w + (m * cg + c) * p->K;
                for (int64_t k0 = lo[0]; k0 < hi[0]; k0++)
                    for (int64_t k1 = lo[1]; k1 < hi[1]; k1++) {
                        const int16_t *xr = x + ((start[0] + k0 * p->dilation[0]) * p->in[1] +
                                                 start[1] + k1 * p->dilation[1]) * p->in[2] +
                                            start[2];
                        const int16_t *wr = w + (k0 * p->kernel[1] + k1) * p->kernel[2];
                        for (int64_t k2 = lo[2]; k2 < hi[2]; k2++)
                            acc += (int32_t)wr[k2] * xr[k2 * p->dilation[2]];
                    }
            }
            y[o2] = acc;
        }
    }
}

/* Whether fewer than a quarter of the (tap, output) pairs read the input. */
static bool mostly_padding(const qconv_plan *p)
{
    double meet = 1, all = 1;
    for (int i = 0; i < MAX_SPATIAL; i++) {
        int64_t valid = 0, lo, hi;
        for (int64_t o = 0; o < p->out[i]; o++) {
            slim_window_range(o * p->stride[i] - p->pad[i], p->dilation[i], p->kernel[i],
                              p->in[i], &lo, &hi);
            valid += hi - lo;
        }
        meet *= (double)valid;
        all *= (double)p->kernel[i] * (double)p->out[i];
    }
    return meet * 4 < all;
}

/* y = conv(x - xzp, w - wzp[oc]) + bias, exact, int32 [N, M, out...]. */
static slim_status qconv_run(slim_op_ctx *ctx, const qconv_plan *p, const slim_tensor *x,
                             const slim_tensor *xzp, const slim_tensor *w, const slim_tensor *wzp,
                             const int32_t *bias, int32_t *y)
{
    int64_t rows = p->C / p->G * p->K;
    int16_t *sx = shifted16(x, xzp, 1, 1);
    int16_t *sw = shifted16(w, wzp, rows, p->M);
    bool direct = mostly_padding(p);
    int16_t *col = direct ? NULL
                          : slim_scratch_malloc(sizeof(int16_t) *
                                                (size_t)(rows * p->out_size > 0 ? rows * p->out_size
                                                                                : 1));
    if (!sx || !sw || (!direct && !col)) {
        slim_scratch_free(sx);
        slim_scratch_free(sw);
        slim_scratch_free(col);
        return slim_scratch_oom(ctx->err);
    }
    qconv_job j = {p, sx, sw, col, bias, y, 0, 0};
    if (direct) {
        slim_parallel_for(p->N * p->M * p->out[0] * p->out[1], 1, direct_rows, &j);
        goto done;
    }
    for (j.n = 0; j.n < p->N; j.n++)
        for (j.g = 0; j.g < p->G; j.g++) {
            slim_parallel_for(rows, 1 + 8192 / (p->out_size + 1), im2col_rows, &j);
            slim_parallel_for(p->M / p->G, 1 + (1 << 16) / (rows * p->out_size + 1),
                              channel_rows, &j);
        }
done:
    slim_scratch_free(sx);
    slim_scratch_free(sw);
    slim_scratch_free(col);
    return SLIM_OK;
}

static slim_status check_zp(const slim_tensor *zp, const slim_tensor *x, const char *what,
                            int64_t per, slim_err *err)
{
    if (!zp)
        return SLIM_OK;
    if (zp->dtype != x->dtype)
        return slim_errf(err, SLIM_ETYPE, "%s must have its input's type", what);
    int64_t n = slim_tensor_numel(zp);
    if (!(n == 1 && zp->ndim <= 1) && !(per > 0 && zp->ndim == 1 && n == per))
        return slim_errf(err, SLIM_EUNSUPPORTED, "%s must be a scalar%s", what,
                         per > 0 ? " or one per output channel" : "");
    return SLIM_OK;
}

static slim_status check_8bit(const slim_tensor *t, const char *what, slim_err *err)
{
    return slim_check_dtype(t, what, err, SLIM_U8, SLIM_I8, SLIM_DTYPE_UNDEFINED);
}

/* ---- ConvInteger --------------------------------------------------------- */

static slim_status convint_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0], *w = ctx->in[1];
    const slim_tensor *xzp = ctx->n_in > 2 ? ctx->in[2] : NULL;
    const slim_tensor *wzp = ctx->n_in > 3 ? ctx->in[3] : NULL;
    qconv_plan p;
    slim_status st = check_8bit(x, "input x", ctx->err);
    if (st || (st = check_8bit(w, "input w", ctx->err)) ||
        (st = qconv_plan_make(ctx, x, w, &p)) ||
        (st = check_zp(xzp, x, "x_zero_point", 0, ctx->err)) ||
        (st = check_zp(wzp, w, "w_zero_point", p.M, ctx->err)))
        return st;
    int64_t dims[SLIM_MAX_DIMS];
    qconv_out_dims(x, &p, dims);
    slim_tensor_set_shape(ctx->out[0], SLIM_I32, x->ndim, dims);
    return SLIM_OK;
}

static slim_status convint_exec(slim_op_ctx *ctx)
{
    qconv_plan p;
    slim_status st = qconv_plan_make(ctx, ctx->in[0], ctx->in[1], &p);
    if (st || slim_tensor_numel(ctx->out[0]) == 0)
        return st;
    return qconv_run(ctx, &p, ctx->in[0], ctx->n_in > 2 ? ctx->in[2] : NULL, ctx->in[1],
                     ctx->n_in > 3 ? ctx->in[3] : NULL, NULL, ctx->out[0]->data);
}

/* ---- QLinearConv --------------------------------------------------------- */

static slim_status qlconv_infer(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0], *w = ctx->in[3], *yzp = ctx->in[7];
    const slim_tensor *b = ctx->n_in > 8 ? ctx->in[8] : NULL;
    qconv_plan p;
    slim_status st = check_8bit(x, "input x", ctx->err);
    if (st || (st = check_8bit(w, "input w", ctx->err)) ||
        (st = check_8bit(yzp, "y_zero_point", ctx->err)) ||
        (st = qconv_plan_make(ctx, x, w, &p)) ||
        (st = check_zp(ctx->in[2], x, "x_zero_point", 0, ctx->err)) ||
        (st = check_zp(ctx->in[5], w, "w_zero_point", p.M, ctx->err)) ||
        (st = check_zp(yzp, yzp, "y_zero_point", 0, ctx->err)))
        return st;
    for (int i = 1; i < 8; i += i == 1 ? 3 : 2) { /* the scales: inputs 1, 4, 6 */
        const slim_tensor *s = ctx->in[i];
        int64_t n = slim_tensor_numel(s);
        if ((st = slim_check_dtype(s, "a scale", ctx->err, SLIM_F32, SLIM_DTYPE_UNDEFINED)))
            return st;
        if (!(n == 1 && s->ndim <= 1) && !(i == 4 && s->ndim == 1 && n == p.M))
            return slim_errf(ctx->err, SLIM_EUNSUPPORTED, "scale %d must be a scalar%s", i,
                             i == 4 ? " or one per output channel" : "");
    }
    if (b && (b->dtype != SLIM_I32 || b->ndim != 1 || b->dims[0] != p.M))
        return slim_errf(ctx->err, SLIM_ESHAPE, "bias B must be int32 [%lld]", (long long)p.M);
    int64_t dims[SLIM_MAX_DIMS];
    qconv_out_dims(x, &p, dims);
    slim_tensor_set_shape(ctx->out[0], yzp->dtype, x->ndim, dims);
    return SLIM_OK;
}

static slim_status qlconv_exec(slim_op_ctx *ctx)
{
    const slim_tensor *b = ctx->n_in > 8 ? ctx->in[8] : NULL;
    slim_tensor *y = ctx->out[0];
    qconv_plan p;
    slim_status st = qconv_plan_make(ctx, ctx->in[0], ctx->in[3], &p);
    int64_t ny = slim_tensor_numel(y);
    if (st || ny == 0)
        return st;
    int32_t *acc = slim_scratch_malloc(sizeof(int32_t) * (size_t)ny);
    float *ws = slim_q_load_f32(ctx->in[4]);
    if (!acc || !ws) {
        slim_scratch_free(acc);
        slim_scratch_free(ws);
        return slim_scratch_oom(ctx->err);
    }
    if (!(st = qconv_run(ctx, &p, ctx->in[0], ctx->in[2], ctx->in[3], ctx->in[5],
                         b ? b->data : NULL, acc))) {
        float xs = *(const float *)ctx->in[1]->data, ys = *(const float *)ctx->in[6]->data;
        int32_t lo = 0, hi = 0, yzp = (int32_t)slim_load_i64(ctx->in[7]->dtype, ctx->in[7]->data, 0);
        slim_q_range(y->dtype, &lo, &hi);
        bool per = slim_tensor_numel(ctx->in[4]) > 1;
        for (int64_t e = 0; e < ny; e++) {
            int64_t oc = (e / p.out_size) % p.M;
            float mult = xs * ws[per ? oc : 0] / ys; /* float32, as the reference */
            slim_q_store(y->dtype, y->data, e, slim_q_round((double)acc[e] * mult, yzp, lo, hi));
        }
    }
    slim_scratch_free(acc);
    slim_scratch_free(ws);
    return st;
}

const slim_op_def slim__ops_qinteger[] = {
    {"ConvInteger", 10, qconv_prepare, free, convint_infer, convint_exec, 0},
    {"QLinearConv", 10, qconv_prepare, free, qlconv_infer, qlconv_exec, 0},
    {0},
};
