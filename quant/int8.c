/*
 * int8.c - the dynamic int8 pass (see int8.h).
 *
 * Weights are symmetric per output channel: scale = max|w| / 127, codes in
 * [-127, 127]. -128 is left out so that negating a code never overflows and
 * the kernel's int32 bound (qgemm.h) holds; it costs half a level. Symmetric
 * weights need no zero point, so the kernel's only correction term is the
 * activation zero point times each channel's weight sum, computed here once.
 *
 * The pass edits the graph before finalize: a quantized node is rewritten
 * in place (it keeps its name, which is what exclude lists and reports
 * use), fused Add / Relu nodes are removed, and weights nothing reads any
 * more are released and stop being initializers.
 */
#include "int8.h"
#include "int8_impl.h"

#include "kernel.h"
#include "pass.h"
#include "qgemm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const slim_pass slim__pass_fold_bn; /* passes/fold_bn.c */

/* ---- weight quantization -------------------------------------------------- */

/* Codes for one channel of k floats read with stride `step`; returns its
 * scale and adds its squared error and squared norm to *e2 and *w2.
 * Entries with skip[i] set (outlier input channels, quantized on their own)
 * get code 0 and take no part in the scale, the error or the norm. */
static float channel_scale(const float *w, int64_t k, int64_t step, const bool *skip)
{
    float m = 0;
    for (int64_t i = 0; i < k; i++) {
        float a = skip && skip[i] ? 0.0f : fabsf(w[i * step]);
        m = a > m ? a : m;
    }
    return m > 0 ? m / 127.0f : 1.0f;
}

/* The codes of one channel with step s (see slim__int8_quantize_channel). */
static void quantize_with(const float *w, int64_t k, int64_t step, const bool *skip, float s,
                          int8_t *q, double *e2, double *w2)
{
    float inv = 1.0f / s;
    for (int64_t i = 0; i < k; i++) {
        float v = w[i * step];
        if (skip && skip[i]) {
            q[i] = 0; /* the outlier path counts its error and norm */
            continue;
        }
        float r = nearbyintf(v * inv);
        r = r > 127 ? 127 : r < -127 ? -127 : r;
        q[i] = (int8_t)r;
        double d = (double)v - (double)r * s;
        *e2 += d * d;
        *w2 += (double)v * v;
    }
}

float slim__int8_quantize_channel(const float *w, int64_t k, int64_t step, const bool *skip,
                                  int8_t *q, double *e2, double *w2)
{
    float s = channel_scale(w, k, step, skip);
    quantize_with(w, k, step, skip, s, q, e2, w2);
    return s;
}

/* The float16 nearest s from above (so that max|w| still fits in 127
 * codes), or 0 when s is outside float16's normal range, where it would
 * lose bits. */
static uint16_t half_up(float s)
{
    if (!(s >= 6.103515625e-05f && s <= 65504.0f))
        return 0;
    uint16_t h = slim_f32_to_f16(s);
    return slim_f16_to_f32(h) < s ? (uint16_t)(h + 1) : h;
}

/* How many smaller scales mse_scale tries below max|w| / 127: f = 1 - i / 32
 * for i < SLIM__INT8_MSE_STEPS, down to 0.53 of it. */
#define SLIM__INT8_MSE_STEPS 16

/* The scale of one channel (its k floats gathered in c) with the least
 * squared error: max|w| / 127 (m) or a smaller one that clips the largest
 * entries to +-127. Trained-like weights are heavy-tailed (Student-t in
 * bench/gen_encoder.py): the few largest entries of a channel set m, and
 * every other entry pays a step sized for them. Clipping those few costs
 * less than the coarser step costs the rest: on the BERT-sized encoder at
 * sequence 16, whose token outputs are nearly one vector so that no noise
 * averages away, the weights' error (not the activations', per-row u8
 * costs 0.9996 with float weights) took the cosine to fp32 to 0.963;
 * with these scales it is 0.994. From the weight alone, at load: no
 * calibration. Ties keep the larger scale. */
static float mse_scale(const float *c, int64_t k, float m)
{
    float best = m;
    double best_e = INFINITY;
    for (int i = 0; i < SLIM__INT8_MSE_STEPS; i++) {
        float s = m * (1.0f - (float)i / 32.0f), inv = 1.0f / s;
        double e = 0;
        for (int64_t t0 = 0; t0 < k && e < best_e; t0 += 256) {
            /* A candidate stops once its partial error reaches the best
             * one's (the terms are >= 0, so it could not win): the same
             * choice, a few passes' time instead of 16 (load time). */
            int64_t t1 = t0 + 256 < k ? t0 + 256 : k;
            for (int64_t t = t0; t < t1; t++) {
                /* |c[t] * inv| <= 127 * 32 / 17: adding and taking away
                 * 1.5 * 2^23 rounds it half to even, as nearbyintf does,
                 * without the libm call. */
                float r = (c[t] * inv + 0x1.8p23f) - 0x1.8p23f;
                r = r > 127 ? 127 : r < -127 ? -127 : r;
                float d = c[t] - r * s;
                e += (double)(d * d);
            }
        }
        if (e < best_e) {
            best_e = e;
            best = s;
        }
    }
    return best;
}

/* Whether MatMul / Gemm weights get mse_scale's scales (the default) or
 * max|w| / 127 (SLIM_INT8_SCALE=max, for before / after benchmarks). */
static bool use_mse_scales(void)
{
    const char *env = getenv("SLIM_INT8_SCALE");
    return !(env && strcmp(env, "max") == 0);
}

/* Per-channel scales of n channels (channel j: k floats from w + j * sj,
 * stride sk) as float16 when every channel's scale * alpha is a normal
 * float16, else float32 (*half says which). The float16 scale is rounded
 * up from the chosen one and the codes made with it, so the smaller scale
 * adds no error beyond its own rounding (at most 2^-11 of a step). With
 * mse, each channel's scale is mse_scale's, else max|w| / 127. Fills codes
 * q (n x k) and returns the tensor through *scale. */
static slim_status quantize_scales(const float *w, int64_t n, int64_t k, int64_t sk, int64_t sj,
                                   const bool *skip, float alpha, bool mse, int8_t *q,
                                   slim_tensor *scale, int64_t nsp, int32_t *sp_idx,
                                   float *sp_val, double *e2, double *w2, slim_err *err)
{
    float *ss = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    bool gather = mse || nsp > 0;
    float *c = gather ? malloc(sizeof(float) * (size_t)(k > 0 ? k : 1)) : NULL;
    if (!ss || (gather && !c)) {
        free(ss);
        free(c);
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    }
    for (int64_t j = 0; j < n; j++) {
        if (nsp > 0) {
            /* The sparse entries first: the scale is the rest's. */
            for (int64_t t = 0; t < k; t++)
                c[t] = skip && skip[t] ? 0.0f : w[j * sj + t * sk];
            slim__int8_take_largest(c, k, nsp, sp_idx + j, sp_val + j, n);
            ss[j] = channel_scale(c, k, 1, NULL);
            if (mse && ss[j] != 1.0f)
                ss[j] = mse_scale(c, k, ss[j]);
            continue;
        }
        ss[j] = channel_scale(w + j * sj, k, sk, skip);
        if (mse && ss[j] != 1.0f) {
            /* The channel gathered once (its stride is n when W is K x N);
             * skipped entries are 0, which every scale codes exactly. */
            for (int64_t t = 0; t < k; t++)
                c[t] = skip && skip[t] ? 0.0f : w[j * sj + t * sk];
            ss[j] = mse_scale(c, k, ss[j]);
        }
    }
    bool half = alpha > 0 && isfinite(alpha);
    for (int64_t j = 0; j < n && half; j++)
        half = half_up(ss[j] * alpha) != 0;
    slim_status st = slim_rewrite_alloc_tensor(scale, half ? SLIM_F16 : SLIM_F32, 1, n, 0, err);
    if (st) {
        free(ss);
        free(c);
        return st;
    }
    for (int64_t j = 0; j < n; j++) {
        float s = ss[j];
        if (half) {
            uint16_t h = half_up(s * alpha);
            ((uint16_t *)scale->data)[j] = h;
            s = slim_f16_to_f32(h) / alpha;
        } else {
            ((float *)scale->data)[j] = s * alpha;
        }
        if (nsp > 0) {
            slim__int8_gather_main(w + j * sj, k, sk, skip, nsp, sp_idx + j, sp_val + j, n, c,
                                   w2);
            quantize_with(c, k, 1, NULL, s, q + j * k, e2, w2);
        } else {
            quantize_with(w + j * sj, k, sk, skip, s, q + j * k, e2, w2);
        }
    }
    /* The values as the kernel adds them: times Gemm's alpha, as the scales. */
    for (int64_t e = 0; e < nsp * n; e++)
        sp_val[e] *= alpha;
    free(ss);
    free(c);
    return SLIM_OK;
}

/* How many products node id is: the parts of the Split that alone reads
 * its output (after a bias Add), as passes/merge_qkv.c leaves Q, K and V
 * merged into one [K, 3 N] MatMul, else 1. The kind of a merged product
 * is its parts' (Q, K and V are square, not "up"). */
static int64_t merged_parts(slim__int8_pass *p, int id)
{
    int v = p->rw.g->nodes[id].out[0];
    slim_node *a = slim_rewrite_sole_reader(&p->rw, v, "Add");
    slim_node *sp = slim_rewrite_sole_reader(&p->rw, a ? a->out[0] : v, "Split");
    return sp && sp->n_out > 1 ? sp->n_out : 1;
}

/* Entry j of a float32 or float16 scale. */
static float scale_at(const slim_tensor *scale, int64_t j)
{
    return scale->dtype == SLIM_F16 ? slim_f16_to_f32(((const uint16_t *)scale->data)[j])
                                    : ((const float *)scale->data)[j];
}

/* The second weight of a product that has one (slim_qgemm_res): channel
 * j's residual, w - s_j q_j, or on an outlier input channel w minus its
 * own int8 weight (oidx, ow, os; their error was what the first weights
 * left most of on FFN out: 0.0264 -> 0.0069 without them), quantized with
 * its own scale max|r| / 127, float32 x alpha. The residual multiplies
 * the u8 activations even on outlier channels: a small weight times their
 * rounding, second order. Packed into *packed with colsums; the residual's
 * rounding error, what the two weights leave, added to *e2. */
static slim_status quantize_residual(const float *w, const slim_rewrite_linear *l, int64_t sk,
                                     int64_t sj, const slim_tensor *scale, const int8_t *q,
                                     const slim_tensor *oidx, const slim_tensor *ow,
                                     const slim_tensor *os, const slim_tensor *si,
                                     slim_tensor *packed, slim_tensor *rscale,
                                     slim_tensor *colsum, double *e2, slim_err *err)
{
    int64_t n = l->n, k = l->k;
    slim_status st = slim_rewrite_alloc_tensor(packed, SLIM_I8, 2, slim_qgemm_n16(n),
                                               slim_qgemm_k4(k), err);
    if (!st)
        st = slim_rewrite_alloc_tensor(rscale, SLIM_F32, 1, n, 0, err);
    if (!st)
        st = slim_rewrite_alloc_tensor(colsum, SLIM_I32, 1, n, 0, err);
    if (st)
        return st;
    int8_t *rq = malloc((size_t)(n * k));
    float *r = malloc(sizeof(float) * (size_t)k);
    int64_t *pos = malloc(sizeof(int64_t) * (size_t)k); /* outlier row o of t, or -1 */
    if (!rq || !r || !pos) {
        free(rq);
        free(r);
        free(pos);
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    }
    for (int64_t t = 0; t < k; t++)
        pos[t] = -1;
    int64_t no = oidx->data ? oidx->dims[0] : 0;
    for (int64_t o = 0; o < no; o++)
        pos[((const int64_t *)oidx->data)[o]] = o;
    for (int64_t j = 0; j < n; j++) {
        /* The steps the codes were made with. */
        float s = scale_at(scale, j) / l->alpha;
        float so = no ? ((const float *)os->data)[j] / l->alpha : 0.0f;
        for (int64_t t = 0; t < k; t++) {
            float v = w[j * sj + t * sk];
            r[t] = pos[t] < 0 ? v - (float)q[j * k + t] * s
                              : v - (float)((const int8_t *)ow->data)[pos[t] * n + j] * so;
        }
        /* The sparse entries are exact: nothing left of them. */
        for (int64_t t = 0; si->data && t < si->dims[0]; t++)
            r[((const int32_t *)si->data)[t * n + j]] = 0.0f;
        double r2 = 0;
        float s2 = slim__int8_quantize_channel(r, k, 1, NULL, rq + j * k, e2, &r2);
        ((float *)rscale->data)[j] = s2 * l->alpha;
    }
    slim_qgemm_pack(rq, n, k, packed->data, colsum->data);
    free(rq);
    free(r);
    free(pos);
    return SLIM_OK;
}

/* scale as float32 (a copy in *tmp when it is float16), for the error
 * measurements, which call the kernel directly. */
static const float *scale_f32(const slim_tensor *scale, float **tmp)
{
    *tmp = NULL;
    if (scale->dtype != SLIM_F16)
        return scale->data;
    int64_t n = slim_tensor_numel(scale);
    if (!(*tmp = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1))))
        return NULL;
    for (int64_t i = 0; i < n; i++)
        (*tmp)[i] = slim_f16_to_f32(((const uint16_t *)scale->data)[i]);
    return *tmp;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Outlier input channels of a k x n weight (element (kk, j) at
 * w[kk * sk + j * sj]): the rows kk whose RMS over the n outputs is over
 * SLIM_INT8_OUTLIER_RATIO times the median row's, at most k / 16 of them
 * (the largest, when more pass). One such row sets max|w| of every output
 * channel, and so the int8 step of all the other rows: 1 row in 64 scaled 8x (what trained
 * transformers grow, and bench/gen_encoder.py mimics) costs the rest 3 of
 * their 8 bits. Known from the weight alone, at load: no calibration.
 * Marks skip[kk], writes the rows' indices in increasing order to idx, and
 * returns how many; -1 when out of memory. */
static int64_t find_outliers(const float *w, int64_t k, int64_t n, int64_t sk, int64_t sj,
                             bool *skip, int64_t *idx)
{
    memset(skip, 0, (size_t)k * sizeof(bool));
    int64_t cap = k / 16;
    if (cap < 1)
        return 0;
    double *rms = malloc(sizeof(double) * (size_t)k);
    double *sorted = malloc(sizeof(double) * (size_t)k);
    if (!rms || !sorted) {
        free(rms);
        free(sorted);
        return -1;
    }
    for (int64_t kk = 0; kk < k; kk++) {
        double s = 0;
        for (int64_t j = 0; j < n; j++) {
            double v = w[kk * sk + j * sj];
            s += v * v;
        }
        rms[kk] = sorted[kk] = sqrt(s / (double)n);
    }
    qsort(sorted, (size_t)k, sizeof(double), cmp_double);
    double median = sorted[k / 2];
    /* Over the ratio, and not under the cap-th largest (ties at it are
     * taken in index order until the cap). */
    double over = SLIM_INT8_OUTLIER_RATIO * median, least = sorted[k - cap];
    int64_t no = 0;
    for (int64_t kk = 0; kk < k && no < cap; kk++)
        if (isfinite(rms[kk]) && median > 0 && rms[kk] > over && rms[kk] >= least) {
            skip[kk] = true;
            idx[no++] = kk;
        }
    free(rms);
    free(sorted);
    return no;
}

bool slim_int8_same_outliers(const slim_tensor *const *w, int n)
{
    const char *env = getenv("SLIM_INT8_OUTLIERS");
    if ((env && strcmp(env, "off") == 0) || n < 2)
        return true;
    int64_t k = w[0]->dims[0];
    bool *skip = malloc(sizeof(bool) * (size_t)k);
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)(k / 16 + 1) * 2);
    bool same = skip && idx;
    int64_t n0 = -1;
    for (int i = 0; same && i < n; i++) {
        int64_t *mine = idx + (i == 0 ? 0 : k / 16 + 1);
        int64_t no = w[i]->ndim == 2 && w[i]->dims[0] == k
                         ? find_outliers(w[i]->data, k, w[i]->dims[1], w[i]->dims[1], 1, skip, mine)
                         : -1;
        if (i == 0)
            n0 = no;
        same = no >= 0 && no == n0 && (i == 0 || memcmp(idx, mine, sizeof(int64_t) * (size_t)no) == 0);
    }
    free(skip);
    free(idx);
    return same;
}

/* ---- the graph ------------------------------------------------------------- */

typedef slim__int8_pass pass;

slim_status slim__int8_add_layer(pass *p, const slim_node *n, int weight,
                                 slim_int8_layer **out, slim_err *err)
{
    slim_int8_report *r = p->rep;
    slim_int8_layer *ls = realloc(r->layers, sizeof(*ls) * (size_t)(r->n_layers + 1));
    if (!ls)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    r->layers = ls;
    slim_int8_layer *l = &ls[r->n_layers++];
    memset(l, 0, sizeof(*l));
    l->name = strdup(n->name);
    l->op_type = strdup(n->op_type);
    l->error = -1;
    l->weight = weight;
    l->bytes_before = slim_tensor_nbytes(&p->rw.g->values[weight].init);
    *out = l;
    return l->name && l->op_type ? SLIM_OK : slim_errf(err, SLIM_ENOMEM, "out of memory");
}

typedef slim_rewrite_linear linear;

/* The layer's relative output error on its sample input: y32 from the
 * float weight as the float model computes it (alpha, bias, Relu), y8 from
 * the int8 kernel. -1 when there is no usable sample. */
static double measure_linear(const pass *p, const linear *l, const slim_tensor *packed,
                             const slim_tensor *scale, const slim_tensor *colsum,
                             const float *bias, bool relu, const slim_tensor *oidx,
                             const slim_tensor *ow, const slim_tensor *os,
                             const slim_tensor *rw, const slim_tensor *rs,
                             const slim_tensor *rc, const slim_tensor *si,
                             const slim_tensor *sv)
{
    const slim_tensor *x = slim_int8_sample(p->opts ? p->opts->samples : NULL,
                                            p->rw.g->values[l->x].name);
    int64_t nx = x ? slim_tensor_numel(x) : 0;
    if (!x || x->dtype != SLIM_F32 || nx == 0 || nx % l->k)
        return -1;
    int64_t m = nx / l->k, n = l->n;
    float *y32 = malloc(sizeof(float) * (size_t)(m * n)), *y8 = malloc(sizeof(float) * (size_t)(m * n));
    void *scratch = NULL;
    float *tmp = NULL;
    const float *w_scale = scale_f32(scale, &tmp);
    if (!y32 || !y8 || !w_scale ||
        posix_memalign(&scratch, 64, rw->data ? slim_qgemm_res_scratch_bytes(m, n, l->k)
                                              : slim_qgemm_scratch_bytes(m, l->k)) != 0) {
        free(y32);
        free(y8);
        free(tmp);
        return -1;
    }
    const float *w = p->rw.g->values[l->w].init.data;
    slim_sgemm(false, l->w_nk, m, n, l->k, l->alpha, x->data, l->k, w, l->w_nk ? l->k : n, 0.0f,
               y32, n);
    for (int64_t i = 0; i < m * n; i++) {
        float v = y32[i] + (bias ? bias[i % n] : 0.0f);
        y32[i] = relu && !(v > 0) ? 0.0f : v;
    }
    slim_qgemm_args a = {
        .m = m, .n = n, .k = l->k, .x = x->data, .ldx = l->k, .packed = packed->data,
        .colsum = colsum->data, .w_scale = w_scale, .bias = bias,
        .act = relu ? SLIM_QGEMM_ACT_RELU : SLIM_QGEMM_ACT_NONE, .y = y8, .ldy = n,
        .n_outl = oidx->data ? oidx->dims[0] : 0, .outl_idx = oidx->data, .outl_q = ow->data,
        .outl_scale = os->data, .n_sp = si->data ? si->dims[0] : 0, .sp_idx = si->data,
        .sp_val = sv->data,
    };
    if (rw->data)
        slim_qgemm_res(&a, rw->data, rc->data, rs->data, scratch);
    else
        slim_qgemm(&a, scratch);
    double e = slim_int8_rel_error(y32, y8, m * n);
    free(tmp);
    free(scratch);
    free(y32);
    free(y8);
    return e;
}

/* Whether a measured layer error is over the budget. */
bool slim__int8_over_budget(const pass *p, double error)
{
    return p->opts && p->opts->max_error > 0 && !(error <= p->opts->max_error) && error != -1;
}

static slim_status quantize_linear(pass *p, int id, slim_int8_layer *layer, const linear *l,
                                   slim_err *err)
{
    slim_graph *g = p->rw.g;
    slim_tensor wq = {0}, packed = {0}, scale = {0}, colsum = {0}, bias = {0}, oidx = {0},
                ow = {0}, os = {0}, rw = {0}, rs = {0}, rc = {0}, si = {0}, sv = {0};
    bool *skip = NULL;
    slim_status st = slim_rewrite_alloc_tensor(&wq, SLIM_I8, 2, l->n, l->k, err);
    if (!st)
        st = slim_rewrite_alloc_tensor(&packed, SLIM_I8, 2, slim_qgemm_n16(l->n),
                                     slim_qgemm_k4(l->k), err);
    if (!st)
        st = slim_rewrite_alloc_tensor(&colsum, SLIM_I32, 1, l->n, 0, err);
    if (st)
        goto fail;
    const float *w = g->values[l->w].init.data;
    int64_t sk = l->w_nk ? 1 : l->n, sj = l->w_nk ? l->k : 1, no = 0;
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)(l->k / 16 + 1));
    if (!(skip = malloc(sizeof(bool) * (size_t)l->k)) || !idx) {
        free(idx);
        st = slim_errf(err, SLIM_ENOMEM, "out of memory");
        goto fail;
    }
    if (!p->opts || !p->opts->no_outlier_split)
        no = find_outliers(w, l->k, l->n, sk, sj, skip, idx);
    else
        memset(skip, 0, sizeof(bool) * (size_t)l->k);
    double e2 = 0, w2 = 0;
    if (no > 0 && !(st = slim_rewrite_alloc_tensor(&oidx, SLIM_I64, 1, no, 0, err)) &&
        !(st = slim_rewrite_alloc_tensor(&ow, SLIM_I8, 2, no, l->n, err)) &&
        !(st = slim_rewrite_alloc_tensor(&os, SLIM_F32, 1, l->n, 0, err))) {
        /* The outlier rows' own int8 weights: per output channel j, the
         * codes of its no entries (stride n in ow) with their own scale. */
        memcpy(oidx.data, idx, sizeof(int64_t) * (size_t)no);
        float col[SLIM_QGEMM_MAX_K / 16];
        int8_t q[SLIM_QGEMM_MAX_K / 16];
        for (int64_t j = 0; j < l->n; j++) {
            for (int64_t o = 0; o < no; o++)
                col[o] = w[idx[o] * sk + j * sj];
            ((float *)os.data)[j] =
                slim__int8_quantize_channel(col, no, 1, NULL, q, &e2, &w2) * l->alpha;
            for (int64_t o = 0; o < no; o++)
                ((int8_t *)ow.data)[o * l->n + j] = q[o];
        }
    }
    free(idx);
    if (no < 0)
        st = slim_errf(err, SLIM_ENOMEM, "out of memory");
    if (st)
        goto fail;
    const char *kind = slim__int8_kind(l->k, l->n / merged_parts(p, id));
    int64_t nsp = slim__int8_sparse_count(l->k, kind);
    if (nsp < 0)
        st = slim_errf(err, SLIM_EINVAL, "SLIM_INT8_SPARSE: not a list of V or kind:V "
                       "(kinds down, up, square), e.g. 1,down:2");
    if (nsp > 0 && !(st = slim_rewrite_alloc_tensor(&si, SLIM_I32, 2, nsp, l->n, err)))
        st = slim_rewrite_alloc_tensor(&sv, SLIM_F32, 2, nsp, l->n, err);
    if (!st)
        st = quantize_scales(w, l->n, l->k, sk, sj, skip, l->alpha, use_mse_scales(), wq.data,
                             &scale, nsp, si.data, sv.data, &e2, &w2, err);
    if (!st && slim__int8_use_residual(kind)) {
        e2 = 0; /* what the two weights leave */
        st = quantize_residual(w, l, sk, sj, &scale, wq.data, &oidx, &ow, &os, &si, &rw, &rs,
                               &rc, &e2, err);
    }
    if (st)
        goto fail;
    free(skip);
    skip = NULL;
    layer->weight_error = w2 > 0 ? sqrt(e2 / w2) : 0;
    slim_qgemm_pack(wq.data, l->n, l->k, packed.data, colsum.data);
    slim_tensor_release(&wq);

    /* The bias: Gemm's beta * C, or a constant Add right after. */
    slim_node *n = &g->nodes[id];
    int out = n->out[0], add = -1;
    if ((st = slim_rewrite_linear_bias(&p->rw, n, l, &bias, &add, &layer->bytes_before, err)))
        goto fail;
    slim_node *r = slim_rewrite_sole_reader(&p->rw, add >= 0 ? g->nodes[add].out[0] : out, "Relu");
    layer->error = measure_linear(p, l, &packed, &scale, &colsum, bias.data, r != NULL, &oidx,
                                  &ow, &os, &rw, &rs, &rc, &si, &sv);
    if (slim__int8_over_budget(p, layer->error)) {
        layer->why = "over max_error";
        goto fail; /* st is SLIM_OK: the layer stays float32 */
    }
    if (add >= 0) {
        p->rw.dead[add] = true;
        out = g->nodes[add].out[0];
    }
    bool relu = false;
    if (r) {
        p->rw.dead[r - g->nodes] = true;
        out = r->out[0];
        relu = true;
    }
    layer->bytes_after = slim_tensor_nbytes(&packed) + slim_tensor_nbytes(&scale) +
                         slim_tensor_nbytes(&colsum) + slim_tensor_nbytes(&bias) +
                         slim_tensor_nbytes(&oidx) + slim_tensor_nbytes(&ow) +
                         slim_tensor_nbytes(&os) + slim_tensor_nbytes(&rw) +
                         slim_tensor_nbytes(&rs) + slim_tensor_nbytes(&rc) +
                         slim_tensor_nbytes(&si) + slim_tensor_nbytes(&sv);
    layer->n_outliers = oidx.data ? (int)oidx.dims[0] : 0;
    char base[300];
    snprintf(base, sizeof(base), "%s", g->nodes[id].name);
    int in[13] = {l->x, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
    int n_in = si.data ? 13 : rw.data ? 11 : oidx.data ? 8 : bias.data ? 5 : 4;
    if ((in[1] = slim_graph_add_initializer(g, base, ".int8_weight", &packed, err)) < 0 ||
        (in[2] = slim_graph_add_initializer(g, base, ".int8_scale", &scale, err)) < 0 ||
        (in[3] = slim_graph_add_initializer(g, base, ".int8_colsum", &colsum, err)) < 0 ||
        (bias.data && (in[4] = slim_graph_add_initializer(g, base, ".int8_bias", &bias, err)) < 0) ||
        (oidx.data &&
         ((in[5] = slim_graph_add_initializer(g, base, ".int8_outlier_index", &oidx, err)) < 0 ||
          (in[6] = slim_graph_add_initializer(g, base, ".int8_outlier_weight", &ow, err)) < 0 ||
          (in[7] = slim_graph_add_initializer(g, base, ".int8_outlier_scale", &os, err)) < 0)) ||
        (rw.data &&
         ((in[8] = slim_graph_add_initializer(g, base, ".int8_residual_weight", &rw, err)) < 0 ||
          (in[9] = slim_graph_add_initializer(g, base, ".int8_residual_scale", &rs, err)) < 0 ||
          (in[10] = slim_graph_add_initializer(g, base, ".int8_residual_colsum", &rc, err)) < 0)) ||
        (si.data &&
         ((in[11] = slim_graph_add_initializer(g, base, ".int8_sparse_index", &si, err)) < 0 ||
          (in[12] = slim_graph_add_initializer(g, base, ".int8_sparse_value", &sv, err)) < 0))) {
        st = SLIM_ENOMEM;
        goto fail;
    }
    return slim_rewrite_matmul_node(&g->nodes[id], "MatMulInt8", n_in, in, out, l->k, 0, relu,
                                    p->rw.what, err);
fail:
    free(skip);
    slim_tensor_release(&si);
    slim_tensor_release(&sv);
    slim_tensor_release(&rw);
    slim_tensor_release(&rs);
    slim_tensor_release(&rc);
    slim_tensor_release(&oidx);
    slim_tensor_release(&ow);
    slim_tensor_release(&os);
    slim_tensor_release(&wq);
    slim_tensor_release(&packed);
    slim_tensor_release(&scale);
    slim_tensor_release(&colsum);
    slim_tensor_release(&bias);
    return st;
}

static slim_status quantize_gather(pass *p, int id, slim_int8_layer *layer, slim_err *err)
{
    slim_graph *g = p->rw.g;
    const slim_tensor *t = &g->values[g->nodes[id].in[0]].init;
    int64_t rows = t->dims[0], d = t->dims[1];
    slim_tensor q = {0}, scale = {0};
    double e2 = 0, w2 = 0;
    slim_status st = slim_rewrite_alloc_tensor(&q, SLIM_I8, 2, rows, d, err);
    if (!st)
        st = quantize_scales(t->data, rows, d, 1, d, NULL, 1.0f, false, q.data, &scale, 0, NULL,
                             NULL, &e2, &w2, err);
    if (st) {
        slim_tensor_release(&q);
        return st;
    }
    layer->weight_error = w2 > 0 ? sqrt(e2 / w2) : 0;
    /* The output error on the sample's rows: the gathered rows against
     * their dequantized codes. */
    const slim_tensor *ix = slim_int8_sample(p->opts ? p->opts->samples : NULL,
                                             g->values[g->nodes[id].in[1]].name);
    if (ix && (ix->dtype == SLIM_I64 || ix->dtype == SLIM_I32)) {
        double ge2 = 0, gr2 = 0;
        for (int64_t i = 0; i < slim_tensor_numel(ix); i++) {
            int64_t r = slim_load_i64(ix->dtype, ix->data, i);
            r = r < 0 ? r + rows : r;
            if (r < 0 || r >= rows)
                continue;
            const float *w = (const float *)t->data + r * d;
            const int8_t *c = (const int8_t *)q.data + r * d;
            float sr = scale.dtype == SLIM_F16
                           ? slim_f16_to_f32(((const uint16_t *)scale.data)[r])
                           : ((const float *)scale.data)[r];
            for (int64_t j = 0; j < d; j++) {
                double e = (double)w[j] - (double)((float)c[j] * sr);
                ge2 += e * e;
                gr2 += (double)w[j] * w[j];
            }
        }
        layer->error = gr2 > 0 ? sqrt(ge2 / gr2) : 0;
        if (slim__int8_over_budget(p, layer->error)) {
            layer->why = "over max_error";
            slim_tensor_release(&q);
            slim_tensor_release(&scale);
            return SLIM_OK;
        }
    }
    layer->bytes_after = slim_tensor_nbytes(&q) + slim_tensor_nbytes(&scale);
    char base[300];
    snprintf(base, sizeof(base), "%s", g->nodes[id].name);
    int in[3] = {-1, -1, g->nodes[id].in[1]};
    if ((in[0] = slim_graph_add_initializer(g, base, ".int8_table", &q, err)) < 0 ||
        (in[1] = slim_graph_add_initializer(g, base, ".int8_scale", &scale, err)) < 0) {
        slim_tensor_release(&q);
        slim_tensor_release(&scale);
        return SLIM_ENOMEM;
    }
    return slim_rewrite_matmul_node(&g->nodes[id], "GatherInt8", 3, in, g->nodes[id].out[0], 0, 0,
                                    false, p->rw.what, err);
}

static slim_status run_pass(pass *p, const slim_int8_opts *opts, slim_err *err)
{
    slim_graph *g = p->rw.g;
    int n_nodes = g->n_nodes;
    slim_rewrite_begin(&p->rw);
    for (int i = 0; i < n_nodes; i++) {
        if (p->rw.dead[i])
            continue;
        slim_node *n = &g->nodes[i];
        if (strcmp(n->domain, "com.slimserve") == 0 &&
            (strcmp(n->op_type, "SparseConv") == 0 || strcmp(n->op_type, "SparseMatMul") == 0)) {
            slim_status st = slim__int8_quantize_sparse(p, i, err);
            if (st)
                return slim_err_prefix(err, SLIM_NODE_FMT ": ", SLIM_NODE_ARGS(&g->nodes[i]));
            continue;
        }
        int wv = -1;
        slim_rewrite_kind kind = slim_rewrite_layer_kind(g, n, 4, 4, &wv);
        if (kind == SLIM_REWRITE_NONE)
            continue;
        bool conv = kind == SLIM_REWRITE_CONV, gather = kind == SLIM_REWRITE_GATHER;
        slim_int8_layer *layer = NULL;
        slim_status st = slim__int8_add_layer(p, n, wv, &layer, err);
        if (st)
            return st;
        linear l;
        if (opts && slim_rewrite_named(opts->exclude, opts->n_exclude, n))
            layer->why = "excluded";
        else if (conv) {
            layer->why = slim__int8_conv_why(p, n);
        } else if (gather) {
            layer->why = slim_rewrite_gather_why(n);
        } else {
            layer->why = slim_rewrite_linear_of(g, n, SLIM_QGEMM_MAX_K, INT64_MAX,
                                                "K is over 32768", &l);
        }
        if (layer->why) {
            layer->bytes_after = layer->bytes_before;
            continue;
        }
        st = conv     ? slim__int8_quantize_conv(p, i, layer, err)
             : gather ? quantize_gather(p, i, layer, err)
                      : quantize_linear(p, i, layer, &l, err);
        if (st)
            return slim_err_prefix(err, SLIM_NODE_FMT ": ", SLIM_NODE_ARGS(&g->nodes[i]));
        if (layer->why) { /* over the error budget */
            layer->bytes_after = layer->bytes_before;
            continue;
        }
        layer->quantized = true;
        p->rep->bytes_before += layer->bytes_before;
        p->rep->bytes_after += layer->bytes_after;
        /* Fused nodes no longer read anything; float weights nothing reads
         * now go at once, so that the peak is the float model plus one
         * layer, not plus the whole int8 model. */
        slim_rewrite_drop_unread(&p->rw, true);
    }
    return SLIM_OK;
}

slim_status slim_quant_int8(slim_graph *g, const slim_int8_opts *opts, slim_int8_report *rep,
                            slim_err *err)
{
    slim_int8_report local = {0};
    if (!rep)
        rep = &local;
    /* SLIM_INT8_OUTLIERS=off: the split off, for before / after benchmarks. */
    slim_int8_opts o = opts ? *opts : (slim_int8_opts){0};
    const char *env = getenv("SLIM_INT8_OUTLIERS");
    if (env && strcmp(env, "off") == 0)
        o.no_outlier_split = true;
    opts = &o;
    memset(rep, 0, sizeof(*rep));
    /* A Conv followed by BatchNormalization is folded first (the
     * optimization pass that would fold it later only sees float32 Convs):
     * the int8 weights are then those of the folded conv, and a Relu after
     * the BN is fusable. */
    bool convs = false;
    for (int i = 0; i < g->n_nodes && !convs; i++)
        convs = !g->nodes[i].domain[0] && strcmp(g->nodes[i].op_type, "Conv") == 0;
    if (convs) {
        int changed = 0;
        slim_status st = slim__pass_fold_bn.run(g, &changed, err);
        if (st)
            return st;
    }
    /* New values are added as layers are quantized: room for 12 per node
     * (7, a second weight's codes, scales and column sums, the sparse
     * entries' indices and values). */
    pass p = {.rep = rep, .opts = opts};
    slim_status st = slim_rewrite_init(&p.rw, g, 12, "quantizing to int8", err);
    if (!st)
        st = slim_rewrite_finish(&p.rw, run_pass(&p, opts, err));
    if (rep == &local)
        slim_int8_report_free(&local);
    return st;
}

void slim_int8_report_free(slim_int8_report *rep)
{
    if (!rep)
        return;
    for (int i = 0; i < rep->n_layers; i++) {
        free(rep->layers[i].name);
        free(rep->layers[i].op_type);
    }
    free(rep->layers);
    memset(rep, 0, sizeof(*rep));
}
