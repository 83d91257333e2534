/*
 * qgemm_res.c - the int8 product with a second int8 weight for the first
 * one's rounding error (qgemm.h, slim_qgemm_res).
 *
 * Why: heavy-tailed weights (trained transformers', the Student-t ones of
 * bench/gen_encoder.py) cost per-channel int8 a relative error of about
 * 0.04 whatever the scale, the channel's few large entries setting the step
 * for all. Where the output is nearly one vector (BERT at sequence 16: its
 * tokens' outputs agree to 0.999999) no noise averages away and that error
 * alone took the cosine to fp32 to 0.976 (docs/int8.md). Quantizing the
 * residual w - s q with its own per-channel scale takes the weight's error
 * to about 0.001 for a second product of the same shape on the same rows,
 * with the same exact int32 sums: the int8 pass gives it to the products
 * where it pays (the down projections, quant/int8.c).
 *
 * Both products are the ordinary slim_qgemm, each row on its own, and the
 * sum and the activation are per element: a row's output still depends on
 * that row alone (the batching guarantee), bitwise alike on every path.
 */
#include "qgemm.h"

#include "kernel.h"

#include <stddef.h>

static size_t res_offset(int64_t m, int64_t k)
{
    return (slim_qgemm_scratch_bytes(m, k) + 63) / 64 * 64;
}

size_t slim_qgemm_res_scratch_bytes(int64_t m, int64_t n, int64_t k)
{
    return res_offset(m, k) + (size_t)m * (size_t)n * sizeof(float);
}

typedef struct {
    const slim_qgemm_args *a;
    const float *t; /* the residual product, m x n, dense */
} res_sum;

/* Rows [begin, end): y = act(y + t). */
static void add_rows(int64_t begin, int64_t end, void *user)
{
    const res_sum *s = user;
    const slim_qgemm_args *a = s->a;
    for (int64_t r = begin; r < end; r++) {
        float *y = a->y + r * a->ldy;
        const float *t = s->t + r * a->n;
        if (a->act == SLIM_QGEMM_ACT_NONE) {
            for (int64_t c = 0; c < a->n; c++)
                y[c] += t[c];
        } else if (a->act == SLIM_QGEMM_ACT_RELU) {
            for (int64_t c = 0; c < a->n; c++) {
                float v = y[c] + t[c];
                y[c] = v > 0 ? v : 0.0f;
            }
        } else {
            for (int64_t c = 0; c < a->n; c++)
                y[c] = slim_qgemm_gelu(y[c] + t[c]);
        }
    }
}

void slim_qgemm_res(const slim_qgemm_args *a, const int8_t *res_packed,
                    const int32_t *res_colsum, const float *res_scale, void *scratch)
{
    if (a->m <= 0 || a->n <= 0)
        return;
    float *t = (float *)((char *)scratch + res_offset(a->m, a->k));
    /* The main product with its bias and outlier channels, no activation
     * yet: it applies to the sum. */
    slim_qgemm_args main = *a;
    main.act = SLIM_QGEMM_ACT_NONE;
    slim_qgemm(&main, scratch);
    /* The residual weight's product alone (the rows are quantized again:
     * k per row against the product's n x k, under 1% of its work). */
    slim_qgemm_args res = *a;
    res.packed = res_packed;
    res.colsum = res_colsum;
    res.w_scale = res_scale;
    res.bias = NULL;
    res.act = SLIM_QGEMM_ACT_NONE;
    res.n_outl = 0;
    res.n_sp = 0;
    res.y = t;
    res.ldy = a->n;
    slim_qgemm(&res, scratch);
    res_sum s = {.a = a, .t = t};
    int64_t grain = 1 + 65536 / (a->n + 1);
    if (a->m <= grain)
        add_rows(0, a->m, &s);
    else
        slim_parallel_for(a->m, grain, add_rows, &s);
}
