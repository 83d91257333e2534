/*
 * pool_blocked.c - MaxPoolBlocked (com.slimserve): a 2-D MaxPool over an
 * activation held in oneDNN's nChw16c layout, written in the same layout.
 *
 * Only the blocked_layout pass (passes/blocked_layout.c) makes these nodes,
 * from a MaxPool between FusedConvs (ResNet's stem: conv 7x7, MaxPool 3x3,
 * then the first block). A plain MaxPool there would need the stem to write
 * NCHW and the block's convs to reorder it back, two full passes over the
 * largest activations of the model; in nChw16c the pool reads its input
 * once and writes its output once, each tap a max over 16 channels at one
 * address.
 *
 * The node takes the MaxPool attributes kernel_shape, strides, pads and
 * dilations (all explicit; the pass leaves ceil_mode, auto_pad, a second
 * output and storage_order to MaxPool) and requires C to be a multiple of
 * 16, so the blocked value has NCHW's byte size and the planner's sizes
 * hold. A window over padding alone gives 0, as MaxPool (pool.c) does.
 *
 * Each output element is the max of its window's taps, in tap order, on its
 * own: nothing depends on the batch or on how the rows are split.
 */
#include "pool_blocked.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define BLK 16

typedef struct mpb_state {
    int64_t kernel[2], stride[2], pads[4], dilation[2];
} mpb_state;

static slim_status mpb_prepare(slim_node *node, void **state, slim_err *err)
{
    /* raw: fixed-size load-time state, freed with the model */
    mpb_state *s = calloc(1, sizeof(*s));
    if (!s)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    bool ok = slim_attr_ints(node, "kernel_shape", s->kernel, 2) == 2 &&
              slim_attr_ints(node, "strides", s->stride, 2) == 2 &&
              slim_attr_ints(node, "pads", s->pads, 4) == 4 &&
              slim_attr_ints(node, "dilations", s->dilation, 2) == 2;
    for (int i = 0; ok && i < 2; i++)
        ok = s->kernel[i] >= 1 && s->stride[i] >= 1 && s->dilation[i] >= 1 && s->pads[i] >= 0 &&
             s->pads[i + 2] >= 0 && s->kernel[i] <= 1 << 16 && s->dilation[i] <= 1 << 16;
    if (!ok) {
        free(s);
        return slim_errf(err, SLIM_EINVAL, "MaxPoolBlocked needs 2-D kernel_shape, strides, "
                         "pads and dilations, all positive (pads >= 0)");
    }
    *state = s;
    return SLIM_OK;
}

static void mpb_release(void *state)
{
    free(state);
}

static int64_t out_extent(const mpb_state *s, int i, int64_t in)
{
    int64_t span = (s->kernel[i] - 1) * s->dilation[i] + 1;
    int64_t room = in + s->pads[i] + s->pads[i + 2] - span;
    return room < 0 ? -1 : room / s->stride[i] + 1;
}

static slim_status mpb_infer(slim_op_ctx *ctx)
{
    const mpb_state *s = ctx->state;
    const slim_tensor *x = ctx->in[0];
    if (x->dtype != SLIM_F32 || x->ndim != 4 || x->dims[1] % BLK)
        return slim_errf(ctx->err, SLIM_ESHAPE, "MaxPoolBlocked takes float32 [N,C,H,W] with C "
                         "a multiple of %d", BLK);
    int64_t dims[4] = {x->dims[0], x->dims[1], out_extent(s, 0, x->dims[2]),
                       out_extent(s, 1, x->dims[3])};
    if (dims[2] < 0 || dims[3] < 0)
        return slim_errf(ctx->err, SLIM_ESHAPE, "input %lldx%lld is smaller than the window",
                         (long long)x->dims[2], (long long)x->dims[3]);
    if (ctx->out[0])
        slim_tensor_set_shape(ctx->out[0], SLIM_F32, 4, dims);
    return SLIM_OK;
}

typedef struct mpb_job {
    const mpb_state *s;
    const float *x;
    float *y;
    int64_t h, w, oh, ow;
} mpb_job;

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define MPB_X86 1


/* mpb_rows with one 16-channel block per register. max_ps(v, acc) is
 * v > acc ? v : acc (it returns its second operand when either is NaN
 * and for equal zeros): the portable loop's comparison, so both paths
 * give the same bits. */
__attribute__((target("avx512f"))) static void mpb_rows_avx512(const mpb_job *j, int64_t begin,
                                                               int64_t end)
{
    const mpb_state *s = j->s;
    for (int64_t r = begin; r < end; r++) {
        int64_t plane = r / j->oh, oh = r % j->oh;
        const float *x = j->x + plane * j->h * j->w * BLK;
        float *y = j->y + (plane * j->oh + oh) * j->ow * BLK;
        int64_t hlo, hhi;
        slim_window_range(oh * s->stride[0] - s->pads[0], s->dilation[0], s->kernel[0], j->h,
                          &hlo, &hhi);
        for (int64_t ow = 0; ow < j->ow; ow++) {
            int64_t wlo, whi, w0 = ow * s->stride[1] - s->pads[1];
            slim_window_range(w0, s->dilation[1], s->kernel[1], j->w, &wlo, &whi);
            __m512 acc = _mm512_set1_ps(hhi > hlo && whi > wlo ? -INFINITY : 0.0f);
            for (int64_t kh = hlo; kh < hhi; kh++) {
                int64_t ih = oh * s->stride[0] - s->pads[0] + kh * s->dilation[0];
                for (int64_t kw = wlo; kw < whi; kw++)
                    acc = _mm512_max_ps(
                        _mm512_loadu_ps(x + (ih * j->w + w0 + kw * s->dilation[1]) * BLK), acc);
            }
            _mm512_storeu_ps(y + ow * BLK, acc);
        }
    }
}
#endif

static _Atomic int force_portable;

bool slim__mpb_force_portable(bool on)
{
    atomic_store(&force_portable, on ? 1 : 0);
#ifdef MPB_X86
    return slim_cpu_has_avx512f();
#else
    return false;
#endif
}

/* Rows are (image, channel block, output row). */
static void mpb_rows(int64_t begin, int64_t end, void *user)
{
    const mpb_job *j = user;
    const mpb_state *s = j->s;
#ifdef MPB_X86
    if (!atomic_load(&force_portable) && slim_cpu_has_avx512f()) {
        mpb_rows_avx512(j, begin, end);
        return;
    }
#endif
    for (int64_t r = begin; r < end; r++) {
        int64_t plane = r / j->oh, oh = r % j->oh;
        const float *x = j->x + plane * j->h * j->w * BLK;
        float *y = j->y + (plane * j->oh + oh) * j->ow * BLK;
        int64_t hlo, hhi;
        slim_window_range(oh * s->stride[0] - s->pads[0], s->dilation[0], s->kernel[0], j->h,
                          &hlo, &hhi);
        for (int64_t ow = 0; ow < j->ow; ow++) {
            int64_t wlo, whi, w0 = ow * s->stride[1] - s->pads[1];
            slim_window_range(w0, s->dilation[1], s->kernel[1], j->w, &wlo, &whi);
            float acc[BLK];
            for (int c = 0; c < BLK; c++)
                acc[c] = hhi > hlo && whi > wlo ? -INFINITY : 0.0f;
            for (int64_t kh = hlo; kh < hhi; kh++) {
                int64_t ih = oh * s->stride[0] - s->pads[0] + kh * s->dilation[0];
                for (int64_t kw = wlo; kw < whi; kw++) {
                    const float *v = x + (ih * j->w + w0 + kw * s->dilation[1]) * BLK;
                    /* pool.c's comparison, so both give the same bits */
                    for (int c = 0; c < BLK; c++)
                        acc[c] = v[c] > acc[c] ? v[c] : acc[c];
                }
            }
            memcpy(y + ow * BLK, acc, sizeof(acc));
        }
    }
}

static slim_status mpb_exec(slim_op_ctx *ctx)
{
    const slim_tensor *x = ctx->in[0];
    slim_tensor *y = ctx->out[0];
    if (!y || slim_tensor_numel(y) == 0)
        return SLIM_OK;
    mpb_job j = {.s = ctx->state, .x = x->data, .y = y->data, .h = x->dims[2], .w = x->dims[3],
                 .oh = y->dims[2], .ow = y->dims[3]};
    int64_t rows = x->dims[0] * (x->dims[1] / BLK) * j.oh;
    slim_parallel_for(rows, 4, mpb_rows, &j);
    return SLIM_OK;
}

const slim_op_def slim__ops_pool_blocked[] = {
    {"MaxPoolBlocked", 1, mpb_prepare, mpb_release, mpb_infer, mpb_exec, 0},
    {0},
};
