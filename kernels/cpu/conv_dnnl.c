/*
 * conv_dnnl.c - FusedConv (com.slimserve): a 2-D Conv with its bias, an
 * optional residual sum and an optional activation, on oneDNN.
 *
 * Only the fuse_conv pass (passes/fuse_conv.c) makes these nodes. It packs
 * the weights once at load into the blocked layout oneDNN's AVX-512 direct
 * kernels read (OIhw16i16o; Goihw16g for depthwise; Ohwi16o when the input
 * has few channels, the first layer), in place of the original: same
 * element count when M and C are multiples of 16, so weight memory does
 * not grow. Other counts (a multiple of 8: MobileNetV2's 24-channel
 * stage) have their last block padded with zeros, and W's dims say so
 * (slim_fconv_packed_dims); out_channels keeps M, weights_format the
 * layout. Their activations go through nChw16c scratch padded the same
 * way, reordered on both sides, since a padded value is no longer NCHW's
 * size.
 *
 * Activations stay NCHW between nodes, so that every other kernel, the
 * planner and the callers see what they always did. Each exec reorders its
 * input into nChw16c scratch (not for the first layer, whose kernel reads
 * NCHW), runs the convolution with the residual (reordered into the output
 * scratch first) and activation as oneDNN post-ops, and reorders the result
 * back: two memory passes, against the im2col copy of K times the input
 * that they replace. Between FusedConvs the blocked_layout pass keeps the
 * blocked layout instead (in_blocked, res_blocked, out_blocked), with no
 * reorders; a blocked value whose channels are not a multiple of 16 is
 * padded with zeros to the next 16 and its shape says so (fconv_infer).
 *
 * 3x3 stride-1 convs with outputs above 28x28 run oneDNN's Winograd
 * F(4x4, 3x3) instead (use_winograd): a quarter of the multiplies, W
 * transformed into the scratchpad on each run rather than stored
 * transformed (which would take 4x its bytes). About 0.6x direct's time on
 * ResNet's 56x56 convs. Its scratchpad is 6-8 MB, so small convs keep
 * direct (wino_scratch_fits). With SLIM_CONV_WINO_STORED=1, outputs from
 * 14x14 to 28x28 run oneDNN's F(2x2, 3x3) inference kernel instead, on W
 * transformed at load in place of the packed W (conv_wino.c: 16/9 of
 * those convs' weight bytes, counted in the model's weights): 0.54x
 * direct's time at 28x28, 0.67-0.8x at 14x14, where F(4x4)'s per-run
 * transform lost. Max error against onnxruntime stays below 1e-6 of the
 * output (ResNet-18/50).
 *
 * The residual R: where R is read for the last time (ResNet's every
 * block), the planner puts Y in R's buffer (SLIM_OP_INPLACE3) and the
 * conv's sum post-op adds what Y holds, with no copy; each part reads its
 * own channels of R before writing them. Otherwise a blocked R is read
 * where it lies by a binary-add post-op (direct kernels; Winograd takes
 * only the sum, so R is copied into Y first there), and a plain R is
 * reordered into the blocked output scratch. Copying a blocked R into Y
 * before every such conv was a full pass over ~22 MB per ResNet-50 image
 * (conv_dnnl_build.c, make_attr).
 *
 * Half weights (quant/half.c) keep the packed layout, each element fp16 or
 * bf16. fp16 W is widened to float32 per run (each part its slice, once
 * for all of a batch's images). bf16 W on a CPU with AVX512_BF16 runs as
 * bf16 products instead (bf16_products): the input reordered into bf16
 * (rounded, as MatMulHalf rounds x), W's slice reordered per run into
 * the layout oneDNN's bf16 kernels read, sums in float32: ResNet-50 in
 * 0.60x its float32 time (widened: 1.00x), cosine 0.99999 to it.
 *
 * Engine, streams, reorders and the packing are conv_dnnl_pack.c's; the
 * primitives of one input shape (parts, direct or Winograd) are made in
 * conv_dnnl_build.c, the state they hang on is in conv_dnnl_set.h. The
 * oneDNN memory objects a part runs on are kept per thread and repointed
 * at each run's buffers (dnnl_mem.c), not made and destroyed per run.
 *
 * Threads: slimserve's pool, not oneDNN's. This oneDNN build runs on
 * OpenMP, whose idle threads spin; on cores shared with other work (the
 * server's other requests, other processes) that spinning made ResNet-18
 * 13x slower (530 ms against 39 ms with OMP_WAIT_POLICY=passive, which a
 * library cannot set for its host process). So oneDNN runs single-threaded
 * and each image is split by output channel blocks of 16 across the pool:
 * every part is its own primitive over a contiguous slice of the packed
 * weights (the output-channel block is the outermost dimension of all
 * three layouts) and of the blocked output. One part per thread, or more
 * on 7x7-sized planes, where smaller parts run faster per channel
 * (conv_dnnl_build.c, parts_per_thread). The input reorder is split the
 * same way by input channels, before the convolutions start.
 *
 * Batch invariance: images run one at a time through primitives made for
 * batch 1, and the channel split depends only on the thread count, so an
 * image's result cannot depend on the batch it arrived in. Primitives are
 * made on first use per (height, width, residual) and cached in the node's
 * state under a lock.
 */
#include "conv_dnnl.h"
#include "conv_dnnl_impl.h"
#include "conv_dnnl_set.h"
#include "dnnl_mem.h"
#include "hgemm.h"

#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* ---- the operator ------------------------------------------------------ */

static slim_status fconv_prepare(slim_node *node, void **state, slim_err *err)
{
    /* raw: fixed-size load-time state, freed with the model */
    fconv_state *s = calloc(1, sizeof(*s));
    if (!s)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    int64_t k[2] = {0, 0}, st[2] = {1, 1}, d[2] = {1, 1}, p[4] = {0, 0, 0, 0};
    bool ok = slim_attr_ints(node, "kernel_shape", k, 2) == 2;
    if (slim_attr_ints(node, "strides", st, 2) != 2 || slim_attr_ints(node, "dilations", d, 2) != 2 ||
        slim_attr_ints(node, "pads", p, 4) != 4)
        ok = false;
    s->group = slim_attr_int(node, "group", 1);
    s->act = (int)slim_attr_int(node, "activation", SLIM_FCONV_ACT_NONE);
    s->alpha = slim_attr_float(node, "alpha", 0.0f);
    s->beta = slim_attr_float(node, "beta", 0.0f);
    s->wfmt = (int)slim_attr_int(node, "weights_format", -1);
    s->m = slim_attr_int(node, "out_channels", 0);
    s->in_blocked = slim_attr_int(node, "in_blocked", 0) != 0;
    s->res_blocked = slim_attr_int(node, "res_blocked", 0) != 0;
    s->out_blocked = slim_attr_int(node, "out_blocked", 0) != 0;
    s->dw_stride = slim_attr_int(node, "dw_stride", 0);
    s->dw_act = (int)slim_attr_int(node, "dw_activation", SLIM_FCONV_ACT_NONE);
    s->dw_alpha = slim_attr_float(node, "dw_alpha", 0.0f);
    s->dw_beta = slim_attr_float(node, "dw_beta", 0.0f);
    if (s->dw_stride < 0 || s->dw_stride > 2 || s->dw_act < 0 || s->dw_act > SLIM_FCONV_ACT_CLIP)
        ok = false;
    if (s->dw_stride && (s->wfmt != SLIM_FCONV_W_BLOCKED || k[0] != 1 || k[1] != 1 ||
                         st[0] != 1 || st[1] != 1 || p[0] || p[1] || p[2] || p[3]))
        ok = false;
    if (s->in_blocked && s->wfmt == SLIM_FCONV_W_PLAIN_SRC)
        ok = false;
    for (int i = 0; i < 2; i++)
        ok = ok && k[i] >= 1 && st[i] >= 1 && d[i] >= 1 && p[i] >= 0 && p[i + 2] >= 0;
    if (!ok || s->group < 1 || s->m < 0 || s->wfmt < 0 || s->wfmt > SLIM_FCONV_W_PLAIN_SRC ||
        s->act < 0 || s->act > SLIM_FCONV_ACT_CLIP) {
        free(s);
        return slim_errf(err, SLIM_EINVAL, "FusedConv attributes are incomplete or out of range");
    }
    memcpy(s->kernel, k, sizeof(k));
    memcpy(s->stride, st, sizeof(st));
    memcpy(s->dilation, d, sizeof(d));
    memcpy(s->pads, p, sizeof(p));
    pthread_mutex_init(&s->mu, NULL);
    *state = s;
    return SLIM_OK;
}

static slim_status fconv_infer(slim_op_ctx *ctx)
{
    const fconv_state *s = ctx->state;
    const slim_tensor *x = ctx->in[0], *w = ctx->in[1], *b = ctx->in[2];
    const slim_tensor *r = ctx->n_in > 3 ? ctx->in[3] : NULL;
    /* W may be half (quant/half.c): converted per run, see part_weights. */
    if (x->dtype != SLIM_F32 || b->dtype != SLIM_F32 ||
        (w->dtype != SLIM_F32 && w->dtype != SLIM_F16 && w->dtype != SLIM_BF16))
        return slim_errf(ctx->err, SLIM_ETYPE, "FusedConv takes float32 X and B, and float32, "
                         "float16 or bfloat16 W");
    /* W transformed at load (conv_wino.c) lives only in that load's
     * model: written out (slim convert under the switch), nothing says
     * which plane or kernel it was made for. */
    if (!s->wino_h && w->ndim == 1 && w->dtype == SLIM_F32)
        return slim_errf(ctx->err, SLIM_EINVAL, "FusedConv's W is one-dimensional: weights "
                         "transformed for Winograd at load (SLIM_CONV_WINO_STORED=1) cannot be "
                         "saved and read back; convert the model without that switch");
    if (x->ndim != 4 || w->ndim != (s->wino_h ? 1 : 4) || b->ndim != 1 ||
        b->dims[0] != out_channels(s, w))
        return slim_errf(ctx->err, SLIM_ESHAPE, "FusedConv takes X [N,C,H,W], W [M,C/g,kh,kw] "
                         "(packed), B [M] with M = out_channels (%lld)",
                         (long long)out_channels(s, w));
    int64_t want[4], m = out_channels(s, w);
    slim_fconv_packed_dims(s->wfmt, m, x->dims[1] / s->group, s->kernel[0], s->kernel[1], want);
    /* Stored Winograd: W was transformed at load for one input plane (and
     * the packed W given up), so that plane is the only one it takes. */
    if (s->wino_h && (x->dims[2] != s->wino_h || x->dims[3] != s->wino_w))
        return slim_errf(ctx->err, SLIM_ESHAPE, "this FusedConv's weights were transformed at "
                         "load for Winograd on a %lldx%lld input; this input is %lldx%lld "
                         "(SLIM_CONV_WINO_STORED=0 keeps them packed)", (long long)s->wino_h,
                         (long long)s->wino_w, (long long)x->dims[2], (long long)x->dims[3]);
    if (x->dims[1] % s->group ||
        (s->wino_h ? w->dtype != SLIM_F32 || w->ndim != 1 : memcmp(want, w->dims, sizeof(want)) != 0))
        return slim_errf(ctx->err, SLIM_ESHAPE, "X has %lld channels, which W (packed "
                         "%lldx%lldx%lldx%lld) does not take", (long long)x->dims[1],
                         (long long)w->dims[0], (long long)w->dims[1], (long long)w->dims[2],
                         (long long)w->dims[3]);
    if (s->wfmt == SLIM_FCONV_W_DEPTHWISE && (s->group != x->dims[1] || m != x->dims[1]))
        return slim_errf(ctx->err, SLIM_ESHAPE, "a depthwise FusedConv needs group = C = M");
    int64_t dims[4] = {x->dims[0], m, out_extent(s, 0, x->dims[2]),
                       out_extent(s, 1, x->dims[3])};
    if (dims[2] < 0 || dims[3] < 0)
        return slim_errf(ctx->err, SLIM_ESHAPE, "input %lldx%lld is smaller than the kernel",
                         (long long)x->dims[2], (long long)x->dims[3]);
    if (s->dw_stride) {
        const slim_tensor *dw = ctx->n_in > 5 ? ctx->in[4] : NULL;
        const slim_tensor *db = ctx->n_in > 5 ? ctx->in[5] : NULL;
        if (!dw || !db || dw->dtype != SLIM_F32 || db->dtype != SLIM_F32 || dw->ndim != 4 ||
            dw->dims[0] != m || dw->dims[1] != 1 || dw->dims[2] != 3 || dw->dims[3] != 3 ||
            db->ndim != 1 || db->dims[0] != m || m % 16 || (ctx->n_in > 3 && ctx->in[3]))
            return slim_errf(ctx->err, SLIM_ESHAPE, "a FusedConv with dw_stride takes float32 "
                             "depthwise W [%lld,1,3,3] and B [%lld] as inputs 5 and 6, and no "
                             "residual", (long long)m, (long long)m);
        /* 3x3, pad 1: ceil(extent / stride) */
        dims[2] = (dims[2] - 1) / s->dw_stride + 1;
        dims[3] = (dims[3] - 1) / s->dw_stride + 1;
    }
    /* R's channels: padded like Y's when it comes blocked */
    int64_t rdims[4] = {dims[0], s->res_blocked ? slim__fconv_round16(m) : m, dims[2], dims[3]};
    if (r && (r->dtype != SLIM_F32 || r->ndim != 4 || memcmp(r->dims, rdims, sizeof(rdims))))
        return slim_errf(ctx->err, SLIM_ESHAPE, "the residual input must match the output");
    /* A blocked Y of M channels, M not a multiple of 16, is stored padded
     * to the next 16 (zeros there, oneDNN keeps them so), and says so: only
     * FusedConv reads it (blocked_layout.c), taking C as the padded count,
     * which W's packed input channels are padded to already. */
    if (s->out_blocked)
        dims[1] = slim__fconv_round16(m);
    if (ctx->out[0])
        slim_tensor_set_shape(ctx->out[0], SLIM_F32, 4, dims);
    return SLIM_OK;
}


static void fconv_release(void *state)
{
    fconv_state *s = state;
    for (int i = 0; i < s->n_sets; i++)
        slim__fconv_set_release(&s->sets[i]);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* Below this much work (multiply-adds x 2) per chunk, waking a second
 * thread costs more than it saves. */
#define MIN_CHUNK_FLOPS 1000000

static int64_t flops_per_image(const fconv_state *s, const prim_set *set, int64_t c, int64_t m)
{
    return 2 * m * (c / s->group) * s->kernel[0] * s->kernel[1] * set->oh1 * set->ow1 +
           (s->dw_stride ? 2 * m * 9 * set->oh * set->ow : 0);
}

/* One image's work, shared by the pool's threads. */
typedef struct image_job {
    const prim_set *set;
    const fconv_state *s;
    const float *x, *w, *b, *r; /* r: NULL without a residual */
    const float *dww, *dwb;     /* the depthwise post-op's, or NULL */
    float *y, *src, *dst;       /* src: NULL when the conv reads x */
    const uint16_t *hw;         /* half W, widened per part; w is NULL then */
    slim_dtype hw_type;
    int64_t w_numel, batch;
    int64_t plane_in, plane_out, w_per_oc;
    int64_t in_image, out_image, r_image; /* floats per image of x, y, r */
    int64_t src_image, dst_image; /* of src, dst: channels padded to 16 */
    bool bf16;                    /* src holds bf16 (bf16_products) */
    atomic_int failed;
} image_job;

/* Element off of the blocked input scratch, of its type. */
static void *src_at(const image_job *j, size_t off)
{
    return j->bf16 ? (void *)((uint16_t *)(void *)j->src + off) : (void *)(j->src + off);
}

static void reorder_in_parts(int64_t begin, int64_t end, void *user)
{
    image_job *j = user;
    dnnl_stream_t strm = slim__fconv_stream();
    for (int64_t t = begin; t < end; t++) {
        const part *pt = &j->set->in_parts[t % j->set->n_in_parts];
        int64_t n = t / j->set->n_in_parts;
        size_t off = (size_t)(n * j->in_image + pt->c0 * j->plane_in);
        size_t soff = (size_t)(n * j->src_image + pt->c0 * j->plane_in);
        if (!strm || slim__fconv_run_reorder(pt->to_src, &pt->x_md, (void *)(j->x + off), &pt->src_md,
                                 src_at(j, soff), strm) != dnnl_success)
            atomic_store(&j->failed, 1);
    }
}

/* res: the blocked residual's slice a binary-add post-op reads
 * (pt->res_binary), else NULL. */
static dnnl_status_t run_conv(const part *pt, void *src, const float *w, const float *b,
                              const float *dww, const float *dwb, const float *res, void *dst,
                              dnnl_stream_t s)
{
    dnnl_memory_t m[8] = {NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    slim_tensor scratch = {.dtype = SLIM_U8, .ndim = 1, .dims = {(int64_t)pt->scratch_bytes}};
    slim_err ignored;
    if (pt->scratch_bytes && slim_tensor_alloc(&scratch, &ignored))
        return dnnl_out_of_memory;
    /* kept per thread and repointed, not made per run (dnnl_mem.c) */
    slim__dnnl_mem_begin();
    dnnl_status_t st = slim__dnnl_mem_bind(&pt->csrc_md, src, &m[0]);
    if (st == dnnl_success)
        st = slim__dnnl_mem_bind(&pt->wei_md, (void *)w, &m[1]);
    if (st == dnnl_success)
        st = slim__dnnl_mem_bind(&pt->bias_md, (void *)b, &m[2]);
    if (st == dnnl_success)
        st = slim__dnnl_mem_bind(&pt->dst_md, dst, &m[3]);
    if (st == dnnl_success && dww)
        st = slim__dnnl_mem_bind(&pt->dww_md, (void *)dww, &m[4]);
    if (st == dnnl_success && dww)
        st = slim__dnnl_mem_bind(&pt->dwb_md, (void *)dwb, &m[5]);
    if (st == dnnl_success && pt->scratch_bytes)
        st = slim__dnnl_mem_bind(&pt->scratch_md, scratch.data, &m[6]);
    if (st == dnnl_success && res) /* same layout as dst */
        st = slim__dnnl_mem_bind(&pt->dst_md, (void *)res, &m[7]);
    if (st == dnnl_success) {
        dnnl_exec_arg_t args[8] = {{DNNL_ARG_SRC, m[0]}, {DNNL_ARG_WEIGHTS, m[1]},
                                   {DNNL_ARG_BIAS, m[2]}, {DNNL_ARG_DST, m[3]}};
        int n = 4;
        if (dww) {
            args[n++] = (dnnl_exec_arg_t){DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_WEIGHTS, m[4]};
            args[n++] = (dnnl_exec_arg_t){DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_BIAS, m[5]};
        }
        if (pt->scratch_bytes)
            args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, m[6]};
        if (res) /* the binary add is the first post-op */
            args[n++] = (dnnl_exec_arg_t){DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, m[7]};
        st = dnnl_primitive_execute(pt->conv, s, n, args);
        if (st == dnnl_success)
            st = dnnl_stream_wait(s);
    }
    slim_tensor_release(&scratch);
    return st;
}

/* This part's weights for the run: W's own slice when float32; for half W
 * a float32 copy (fp16, widened) or the bf16 kernels' layout (bf16
 * products, reordered), made into *wpart. One pass over the slice either
 * way, by the thread that runs the part, right before: it stays in this
 * core's cache for the conv, and the parts convert side by side. */
static dnnl_status_t part_weights(const image_job *j, const part *pt, dnnl_stream_t strm,
                                  slim_tensor *wpart, const float **w)
{
    slim_err ignored;
    if (j->s->wino_h) { /* transformed at load, each part's slice in turn */
        *w = j->w + pt->w_off;
        return dnnl_success;
    }
    *w = j->w ? j->w + pt->o0 * j->w_per_oc : NULL;
    if (j->bf16) {
        wpart->dtype = SLIM_U8;
        wpart->ndim = 1;
        wpart->dims[0] = (int64_t)dnnl_memory_desc_get_size(&pt->wei_md);
        if (slim_tensor_alloc(wpart, &ignored))
            return dnnl_out_of_memory;
        *w = wpart->data;
        return slim__fconv_run_reorder(pt->w_to_run, &pt->wst_md,
                                       (void *)(j->hw + pt->o0 * j->w_per_oc), &pt->wei_md,
                                       wpart->data, strm);
    }
    if (!j->hw)
        return dnnl_success;
    int64_t first = pt->o0 * j->w_per_oc;
    int64_t n = (int64_t)(dnnl_memory_desc_get_size(&pt->wei_md) / sizeof(float));
    if (n > j->w_numel - first)
        n = j->w_numel - first;
    wpart->dtype = SLIM_F32;
    wpart->ndim = 1;
    wpart->dims[0] = n;
    if (slim_tensor_alloc(wpart, &ignored))
        return dnnl_out_of_memory;
    slim_half_widen(j->hw + first, j->hw_type, wpart->data, n);
    *w = wpart->data;
    return dnnl_success;
}

/* Tasks t in [begin, end). Float32 W: image-major (t = image x parts +
 * part), so an image's parts run side by side. Half W: part-major (t = part
 * x batch + image), so a run of tasks shares one part and converts its
 * slice of W once for all of its images, not once per image (at batch 8
 * that was 8 conversions a part, or one serial widening of all of W before
 * the parts started). Either order runs the same primitive on the same
 * data for each (image, part), so no result changes. */
static void conv_parts(int64_t begin, int64_t end, void *user)
{
    image_job *j = user;
    dnnl_stream_t strm = slim__fconv_stream();
    bool part_major = j->hw != NULL;
    int64_t have = -1; /* the part whose converted W wpart holds */
    slim_tensor wpart = {0};
    const float *w = NULL;
    dnnl_status_t wst = dnnl_success;
    for (int64_t t = begin; t < end; t++) {
        int64_t ip = part_major ? t / j->batch : t % j->set->n_parts;
        int64_t n = part_major ? t % j->batch : t / j->set->n_parts;
        const part *pt = &j->set->parts[ip];
        size_t off = (size_t)(n * j->out_image + pt->o0 * j->plane_out);
        size_t roff = (size_t)(n * j->r_image + pt->o0 * j->plane_out);
        bool dw = j->s->wfmt == SLIM_FCONV_W_DEPTHWISE;
        void *src = j->src ? src_at(j, (size_t)(n * j->src_image + (dw ? pt->o0 * j->plane_in : 0)))
                           : (void *)(j->x + n * j->in_image + (dw ? pt->o0 * j->plane_in : 0));
        /* y itself when it is blocked (padded to 16 channels) */
        float *dst = j->dst ? j->dst + n * j->dst_image + pt->o0 * j->plane_out : j->y + off;
        dnnl_status_t st = strm ? dnnl_success : dnnl_runtime_error;
        if (st == dnnl_success && j->r && pt->res_to_dst)
            st = slim__fconv_run_reorder(pt->res_to_dst, &pt->y_md, (void *)(j->r + roff), &pt->dst_md, dst,
                             strm);
        else if (j->r && !pt->res_binary && j->r + roff != dst) /* blocked: the sum reads dst */
            memcpy(dst, j->r + roff,
                   sizeof(float) * (size_t)((slim__fconv_round16(pt->o1) - pt->o0) * j->plane_out));
        if (st == dnnl_success && ip != have) {
            slim_tensor_release(&wpart);
            wst = part_weights(j, pt, strm, &wpart, &w);
            have = ip;
        }
        if (st == dnnl_success)
            st = wst;
        if (st == dnnl_success)
            st = run_conv(pt, src, w, j->b + pt->o0, j->dww ? j->dww + pt->o0 * 9 : NULL,
                          j->dww ? j->dwb + pt->o0 : NULL,
                          j->r && pt->res_binary ? j->r + roff : NULL, dst, strm);
        if (st == dnnl_success && pt->from_dst)
            st = slim__fconv_run_reorder(pt->from_dst, &pt->dst_md, dst, &pt->y_md, j->y + off, strm);
        if (st == dnnl_success)
            st = dnnl_stream_wait(strm);
        if (st != dnnl_success) /* 2: a scratchpad the allocator refused */
            atomic_store(&j->failed, st == dnnl_out_of_memory ? 2 : 1);
    }
    slim_tensor_release(&wpart);
}

static slim_status fconv_exec(slim_op_ctx *ctx)
{
    fconv_state *s = (fconv_state *)ctx->state;
    const slim_tensor *x = ctx->in[0], *w = ctx->in[1], *b = ctx->in[2];
    const slim_tensor *r = ctx->n_in > 3 ? ctx->in[3] : NULL;
    slim_tensor *y = ctx->out[0];
    if (!y || slim_tensor_numel(y) == 0)
        return SLIM_OK;
    /* Half weights stay half at rest: each part converts its slice for the
     * run, once for all the batch's images (conv_parts, part_weights), and
     * the copy goes when the part is done. */
    const slim_tensor *half = w->dtype != SLIM_F32 ? w : NULL;
    bool bf16 = slim__fconv_bf16_products(s, w); /* then W is reordered per part, never widened */
    slim_status st0;
    /* Y written over R (the planner's SLIM_OP_INPLACE3): each part reads
     * its own channels of R before writing them in Y, so that needs no
     * copy, except a plain R under a blocked Y, which a reorder cannot
     * turn into Y where it lies: that R is copied aside first. */
    slim_tensor r_aside = {0};
    int residual = !r ? RES_NONE : r->data != y->data ? RES_READ : RES_INPLACE;
    if (residual == RES_INPLACE && !s->res_blocked && s->out_blocked) {
        r_aside = (slim_tensor){.dtype = SLIM_F32, .ndim = r->ndim};
        memcpy(r_aside.dims, r->dims, sizeof(r->dims));
        if ((st0 = slim_tensor_alloc(&r_aside, ctx->err)))
            return st0;
        memcpy(r_aside.data, r->data, slim_tensor_nbytes(r));
        r = &r_aside;
        residual = RES_READ;
    }
    prim_set set;
    bool owned;
    slim_status st = slim__fconv_find_set(s, w, x, residual, &set, &owned, ctx->err);
    if (!st && set.bf16 != bf16) /* SLIM_CONV_BF16 changed since the set was made */
        st = slim_errf(ctx->err, SLIM_EINTERNAL, "FusedConv: bf16 products switched mid-run");
    if (!st && s->wino_h && set.wino_floats != slim_tensor_numel(w))
        st = slim_errf(ctx->err, SLIM_EINTERNAL, "FusedConv: the Winograd weights (%lld floats) "
                       "are not what its kernel reads here (%lld)",
                       (long long)slim_tensor_numel(w), (long long)set.wino_floats);
    if (st) {
        if (owned)
            slim__fconv_set_release(&set);
        slim_tensor_release(&r_aside);
        return st;
    }
    int64_t batch = x->dims[0];
    slim_tensor src = {.dtype = SLIM_F32, .ndim = 1, .dims = {(int64_t)set.src_floats * batch}};
    slim_tensor dst = {.dtype = SLIM_F32, .ndim = 1, .dims = {(int64_t)set.dst_floats * batch}};
    if ((set.src_floats && (st = slim_tensor_alloc(&src, ctx->err))) ||
        (set.dst_floats && (st = slim_tensor_alloc(&dst, ctx->err))))
        goto done;
    image_job j = {.set = &set, .s = s, .w = half ? NULL : w->data, .b = b->data,
                   .hw = half ? half->data : NULL, .hw_type = w->dtype,
                   .w_numel = slim_tensor_numel(w), .batch = batch, .src = src.data,
                   .bf16 = bf16,
                   .dst = dst.data, .plane_in = set.h * set.w, .plane_out = set.oh * set.ow,
                   .w_per_oc = slim_tensor_numel(w) / w->dims[0]};
    j.in_image = x->dims[1] * j.plane_in;
    j.out_image = y->dims[1] * j.plane_out; /* padded to 16 when blocked */
    j.r_image = r ? r->dims[1] * j.plane_out : 0;
    j.src_image = slim__fconv_round16(x->dims[1]) * j.plane_in;
    j.dst_image = slim__fconv_round16(out_channels(s, w)) * j.plane_out;
    j.x = x->data;
    j.y = y->data;
    j.r = r ? r->data : NULL;
    if (s->dw_stride) {
        j.dww = ctx->in[4]->data;
        j.dwb = ctx->in[5]->data;
    }
    /* Tasks are (image, part) pairs: every image goes through the same
     * batch-1 primitives whatever the batch, and a batch wakes the pool
     * twice per conv rather than twice per image. Waking the pool costs
     * tens of microseconds, as much as a small conv's part (MobileNetV2's
     * late depthwise convs), so parts run in chunks of at least
     * MIN_CHUNK_FLOPS, inline when all fit one: the same primitives on the
     * same data, only on fewer threads. */
    int64_t per_part = flops_per_image(s, &set, x->dims[1], out_channels(s, w)) / set.n_parts;
    int64_t grain = MIN_CHUNK_FLOPS / (per_part > 0 ? per_part : 1) + 1;
    if (set.n_in_parts)
        slim_parallel_for(batch * set.n_in_parts, grain, reorder_in_parts, &j);
    if (!atomic_load(&j.failed))
        slim_parallel_for(batch * set.n_parts, grain, conv_parts, &j);
    if (atomic_load(&j.failed) == 2) /* the batcher halves the batch on this */
        st = slim_errf(ctx->err, SLIM_EOOM, "out of memory on cpu: a convolution's scratchpad");
    else if (atomic_load(&j.failed))
        st = slim_errf(ctx->err, SLIM_EINTERNAL, "oneDNN convolution failed");
done:
    slim_tensor_release(&src);
    slim_tensor_release(&dst);
    slim_tensor_release(&r_aside);
    if (owned)
        slim__fconv_set_release(&set);
    return st;
}

const slim_op_def slim__ops_fconv[] = {
    {"FusedConv", 1, fconv_prepare, fconv_release, fconv_infer, fconv_exec, SLIM_OP_INPLACE3},
    {0},
};
