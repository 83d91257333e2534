/*
 * conv_depthwise.c - Conv with one input channel per group (conv.c sends
 * those here): a direct loop sums each output's taps from a zero-padded
 * copy of its input plane, eight neighbouring outputs at a time, since G
 * GEMMs of a single row would cost more in call overhead than they compute.
 */
#include "conv_impl.h"

#include <stdlib.h>
#include <string.h>

typedef struct depthwise_job {
    const conv_plan *p;
    const float *x, *w, *bias;
    float *y;
    float *scratch;              /* one zero-padded input plane per task */
    int64_t padded[MAX_SPATIAL]; /* its extents */
    const int64_t *tap_offset;   /* K offsets of the taps in a padded plane */
    int64_t per_task;            /* output planes per task */
} depthwise_job;

/* Copies input plane x into the middle of a zeroed padded plane, so that the
 * tap loops below need no bounds checks. */
static const float *pad_plane(const depthwise_job *j, const float *x, float *dst)
{
    const conv_plan *p = j->p;
    const int64_t PH = j->padded[1], PW = j->padded[2];
    memset(dst, 0, sizeof(float) * j->padded[0] * PH * PW);
    for (int64_t d = 0; d < p->in[0]; d++)
        for (int64_t h = 0; h < p->in[1]; h++)
            memcpy(dst + ((d + p->pad_begin[0]) * PH + h + p->pad_begin[1]) * PW + p->pad_begin[2],
                   x + (d * p->in[1] + h) * p->in[2], sizeof(float) * p->in[2]);
    return dst;
}

/* One output row: each output sums its K taps in a register. With stride 1
 * eight neighbours share every tap's weight and read adjacent inputs, a
 * fixed-width block that the compiler turns into vector code even at -O2. */
static void depthwise_row(const float *x, const int64_t *off, const float *w, int64_t K,
                          float bias, int64_t stride, int64_t n, float *restrict y)
{
    int64_t o = 0;
    if (stride == 1)
        for (; o + 8 <= n; o += 8) {
            float acc[8];
            for (int i = 0; i < 8; i++)
                acc[i] = bias;
            for (int64_t t = 0; t < K; t++) {
                const float *restrict src = x + off[t] + o;
                const float wv = w[t];
                for (int i = 0; i < 8; i++)
                    acc[i] += wv * src[i];
            }
            for (int i = 0; i < 8; i++)
                y[o + i] = acc[i];
        }
    for (; o < n; o++) {
        float acc = bias;
        for (int64_t t = 0; t < K; t++)
            acc += w[t] * x[off[t] + o * stride];
        y[o] = acc;
    }
}

/* Each output plane reads a single input channel. */
static void depthwise_tasks(int64_t begin, int64_t end, void *user)
{
    const depthwise_job *j = user;
    const conv_plan *p = j->p;
    const int64_t mg = p->M / p->G, PH = j->padded[1], PW = j->padded[2];
    for (int64_t task = begin; task < end; task++) {
        int64_t plane_end = (task + 1) * j->per_task;
        if (plane_end > p->N * p->M)
            plane_end = p->N * p->M;
        for (int64_t plane = task * j->per_task; plane < plane_end; plane++) {
            int64_t n = plane / p->M, m = plane % p->M;
            const float *x = j->x + (n * p->C + m / mg) * p->in_size;
            if (j->scratch)
                x = pad_plane(j, x, j->scratch + task * j->padded[0] * PH * PW);
            float *y = j->y + plane * p->out_size;
            for (int64_t od = 0; od < p->out[0]; od++)
                for (int64_t oh = 0; oh < p->out[1]; oh++)
                    depthwise_row(x + (od * p->stride[0] * PH + oh * p->stride[1]) * PW,
                                  j->tap_offset, j->w + m * p->K, p->K,
                                  j->bias ? j->bias[m] : 0.0f, p->stride[2], p->out[2],
                                  y + (od * p->out[1] + oh) * p->out[2]);
        }
    }
}

slim_status slim__conv_depthwise(slim_op_ctx *ctx, const conv_plan *p, const float *x,
                                 const float *w, const float *bias, float *y)
{
    depthwise_job j = {p, x, w, bias, y, NULL, {0}, NULL, 1};
    bool padded = false;
    int64_t plane = 1;
    for (int i = 0; i < MAX_SPATIAL; i++) {
        padded = padded || p->pad_begin[i] || p->pad_end[i];
        j.padded[i] = p->in[i] + p->pad_begin[i] + p->pad_end[i];
        plane *= j.padded[i];
    }
    slim_tensor offsets;
    int64_t *offset = slim_scratch_alloc(&offsets, p->K, sizeof(int64_t), false, ctx->err);
    if (!offset)
        return ctx->err->status;
    for (int64_t t = 0; t < p->K; t++) {
        int64_t kw = t % p->kernel[2], kh = t / p->kernel[2] % p->kernel[1],
                kd = t / (p->kernel[2] * p->kernel[1]);
        offset[t] = (kd * p->dilation[0] * j.padded[1] + kh * p->dilation[1]) * j.padded[2] +
                    kw * p->dilation[2];
    }
    j.tap_offset = offset;
    int64_t planes = p->N * p->M, tasks = (int64_t)slim_num_threads() * 4;
    if (tasks > planes)
        tasks = planes;
    j.per_task = (planes + tasks - 1) / tasks;
    tasks = (planes + j.per_task - 1) / j.per_task;
    slim_tensor scratch = {.dtype = SLIM_F32, .ndim = 1, .dims = {tasks * plane}};
    slim_status st = SLIM_OK;
    if (padded && !(st = slim_tensor_alloc(&scratch, ctx->err)))
        j.scratch = scratch.data;
    if (!st)
        slim_parallel_for(tasks, 1, depthwise_tasks, &j);
    slim_tensor_release(&scratch);
    slim_tensor_release(&offsets);
    return st;
}
