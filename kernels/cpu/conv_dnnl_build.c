/*
 * conv_dnnl_build.c - FusedConv's oneDNN primitives: the parts of one
 * input shape (each a slice of the output channels), direct or Winograd,
 * bf16 products or float32, made on first use and cached in the node's
 * state (slim__fconv_find_set). conv_dnnl.c runs them; its opening
 * comment has the design.
 */
#include "conv_dnnl.h"
#include "conv_dnnl_impl.h"
#include "conv_dnnl_set.h"
#include "hgemm.h"

#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void parts_release(part *ps, int n)
{
    for (int i = 0; ps && i < n; i++) {
        dnnl_primitive_destroy(ps[i].to_src);
        dnnl_primitive_destroy(ps[i].conv);
        dnnl_primitive_destroy(ps[i].res_to_dst);
        dnnl_primitive_destroy(ps[i].from_dst);
        dnnl_primitive_destroy(ps[i].w_to_run);
    }
    free(ps);
}

void slim__fconv_set_release(prim_set *ps)
{
    parts_release(ps->in_parts, ps->n_in_parts);
    parts_release(ps->parts, ps->n_parts);
    ps->in_parts = ps->parts = NULL;
}

static void md4t(dnnl_memory_desc_t *md, int64_t c, int64_t h, int64_t w, dnnl_format_tag_t tag,
                 dnnl_data_type_t dt)
{
    dnnl_dims_t d = {1, c, h, w};
    dnnl_memory_desc_init_by_tag(md, 4, d, dt, tag);
}

static void md4(dnnl_memory_desc_t *md, int64_t c, int64_t h, int64_t w, dnnl_format_tag_t tag)
{
    md4t(md, c, h, w, tag, dnnl_f32);
}

/* Whether bf16 W runs as bf16 products: bf16 src (each activation rounded
 * to bf16, as MatMulHalf's avx512bf16 path rounds x) times bf16 W, summed
 * in float32, by oneDNN's AVX512_BF16 kernels -- twice the multiply rate
 * of float32, where widening W to float32 every run made bf16 slower than
 * float32. Blocked W only (not depthwise, not a first layer's, not with a
 * depthwise post-op: those still widen), where MatMulHalf takes its
 * avx512bf16 path (SLIM_HALF_ISA lowers both), and not with
 * SLIM_CONV_BF16=0 (read when the primitives are made). */
bool slim__fconv_bf16_products(const fconv_state *s, const slim_tensor *w)
{
    const char *off = getenv("SLIM_CONV_BF16");
    return w->dtype == SLIM_BF16 && slim_hgemm_get_isa(SLIM_BF16) == SLIM_HGEMM_AVX512BF16 &&
           !(off && strcmp(off, "0") == 0) &&
           s->wfmt == SLIM_FCONV_W_BLOCKED && !s->dw_stride && s->group == 1;
}

/* Cuts count channels into at most n parts of whole blocks of 16 (the
 * last may be short); returns how many parts it made, bounds in lo/hi. */
static int split16(int64_t count, int n, int64_t *lo, int64_t *hi)
{
    int64_t blocks = (count + 15) / 16;
    if (n > blocks)
        n = (int)blocks;
    for (int p = 0; p < n; p++) {
        lo[p] = blocks * p / n * 16;
        hi[p] = blocks * (p + 1) / n * 16;
        if (hi[p] > count)
            hi[p] = count;
    }
    return n;
}

/* Output planes of at least this many pixels take Winograd F(4x4, 3x3).
 * It does a quarter of direct's multiplies on the activation but
 * transforms W on every run (36 values per 9): measured single-threaded
 * on ResNet-18's convs, 56x56 and 28x28 planes ran in 0.55-0.6x direct's
 * time, 14x14 in 1.3x and 7x7 in 3x. */
#define WINO_MIN_PLANE (28 * 28)

/* Whether this conv has Winograd's shape: 3x3, stride 1, no dilation, W
 * blocked (oneDNN's Winograd reads OIhw16i16o), no depthwise post-op;
 * SLIM_CONV_WINOGRAD=0 turns all Winograd off (A/B). */
bool slim__fconv_wino_shape(const fconv_state *s)
{
    const char *off = getenv("SLIM_CONV_WINOGRAD"); /* read when primitives are made */
    return !(off && strcmp(off, "0") == 0) && s->wfmt == SLIM_FCONV_W_BLOCKED && !s->dw_stride &&
           s->kernel[0] == 3 && s->kernel[1] == 3 && s->stride[0] == 1 && s->stride[1] == 1 &&
           s->dilation[0] == 1 && s->dilation[1] == 1;
}

/* Whether this conv should try Winograd F(4x4, 3x3) with W transformed
 * per run: its shape and a large enough output. */
static bool use_winograd(const fconv_state *s, const prim_set *set)
{
    return slim__fconv_wino_shape(s) && set->oh1 * set->ow1 >= WINO_MIN_PLANE;
}

/* Winograd's scratchpad is 6-8 MB whatever the plane (oneDNN sizes its
 * blocks by the caches), per part running at once. Next to ResNet's 56x56
 * and 28x28 activations that is 4-10x one image's input and output; next
 * to the example resnet's 32x32x32 (models/gen_models.py) it is 25x, more
 * than a memory limit sized for that model leaves a run (tests/e2e/
 * test_batching.py). Above WINO_MAX_SCRATCH times, direct it is. */
#define WINO_MAX_SCRATCH 16

static bool wino_scratch_fits(const fconv_state *s, const slim_tensor *w, const prim_set *set,
                              int64_t c, const_dnnl_primitive_desc_t pd)
{
    size_t scratch = dnnl_memory_desc_get_size(dnnl_primitive_desc_query_md(
        pd, dnnl_query_scratchpad_md, 0));
    size_t image = sizeof(float) * (size_t)(c * set->h * set->w +
                                            out_channels(s, w) * set->oh1 * set->ow1);
    return scratch <= WINO_MAX_SCRATCH * image;
}

/* Whether a blocked residual may be read in place by a binary-add post-op
 * (SLIM_CONV_RES_BINARY=0: copied into dst for a sum post-op, as before;
 * read when the primitives are made). The copy was a full extra pass over
 * every residual: ~22 MB per image on ResNet-50. */
static bool res_binary_on(void)
{
    const char *v = getenv("SLIM_CONV_RES_BINARY");
    return !(v && strcmp(v, "0") == 0);
}

/* Whether oneDNN chose one of its JIT kernels: a post-op its fast kernel
 * does not take sends it to a reference one, many times slower, which a
 * binary residual must never cost. */
static bool jit_impl(const_dnnl_primitive_desc_t pd)
{
    const char *impl = NULL;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    return impl && strncmp(impl, "jit", 3) == 0;
}

/* The conv's attributes: the residual (a sum over what dst holds, or with
 * binary a binary add of R read in dst_md's layout), the activation, a
 * depthwise post-op and its activation, and a user scratchpad. */
static dnnl_status_t make_attr(const fconv_state *s, const prim_set *set, const part *pt,
                               bool binary, dnnl_primitive_attr_t *out)
{
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_status_t st;
    if ((st = dnnl_primitive_attr_create(&attr)) != dnnl_success ||
        (st = dnnl_post_ops_create(&po)) != dnnl_success)
        goto done;
    if (set->residual && binary)
        st = dnnl_post_ops_append_binary(po, dnnl_binary_add, &pt->dst_md);
    else if (set->residual)
        st = dnnl_post_ops_append_sum(po, 1.0f);
    if (st == dnnl_success && s->act == SLIM_FCONV_ACT_RELU)
        st = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f);
    else if (st == dnnl_success && s->act == SLIM_FCONV_ACT_CLIP)
        st = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_clip_v2, s->alpha, s->beta);
    if (st == dnnl_success && s->dw_stride) {
        st = dnnl_post_ops_append_dw(po, dnnl_f32, dnnl_f32, dnnl_f32, 3, s->dw_stride, 1, 0, 0,
                                     NULL);
        if (st == dnnl_success && s->dw_act == SLIM_FCONV_ACT_RELU)
            st = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f);
        else if (st == dnnl_success && s->dw_act == SLIM_FCONV_ACT_CLIP)
            st = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_clip_v2, s->dw_alpha,
                                              s->dw_beta);
    }
    if (st == dnnl_success)
        st = dnnl_primitive_attr_set_post_ops(attr, po);
    /* The library's own scratchpad is one global buffer in this build
     * (no DNNL_ENABLE_CONCURRENT_EXEC): two threads running convs at once
     * would share it. Each execution brings its own instead. */
    if (st == dnnl_success)
        st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
done:
    dnnl_post_ops_destroy(po);
    if (st != dnnl_success)
        dnnl_primitive_attr_destroy(attr);
    else
        *out = attr;
    return st;
}

static dnnl_status_t make_conv(const fconv_state *s, const slim_tensor *w, const prim_set *set,
                               int64_t c, part *pt)
{
    int64_t m = pt->o1 - pt->o0;
    bool dw = s->wfmt == SLIM_FCONV_W_DEPTHWISE, plain = s->wfmt == SLIM_FCONV_W_PLAIN_SRC;
    md4t(&pt->csrc_md, dw ? m : c, set->h, set->w, plain ? dnnl_nchw : dnnl_nChw16c,
         set->bf16 ? dnnl_bf16 : dnnl_f32);
    md4(&pt->dst_md, m, set->oh1, set->ow1, dnnl_nChw16c); /* the 1x1's, with dw */
    md4(&pt->y_md, m, set->oh, set->ow, dnnl_nchw);
    slim__fconv_weights_md(&pt->wei_md, m, dw ? 1 : c, s->kernel[0], s->kernel[1], s->wfmt, true);
    if (set->bf16) {
        /* Stored: the float32 layout in bf16; run: whatever oneDNN's bf16
         * kernel reads (pairs of input channels side by side), asked for
         * with format any and reordered into per run. */
        pt->wst_md = pt->wei_md;
        pt->wst_md.data_type = dnnl_bf16;
        dnnl_dims_t wd = {m, c, s->kernel[0], s->kernel[1]};
        dnnl_memory_desc_init_by_tag(&pt->wei_md, 4, wd, dnnl_bf16, dnnl_format_tag_any);
    }
    dnnl_dims_t bd = {m};
    dnnl_memory_desc_init_by_tag(&pt->bias_md, 1, bd, dnnl_f32, dnnl_a);
    dnnl_dims_t strides = {s->stride[0], s->stride[1]};
    dnnl_dims_t dil = {s->dilation[0] - 1, s->dilation[1] - 1};
    dnnl_dims_t pl = {s->pads[0], s->pads[1]}, pr;
    /* oneDNN wants pr to end at the last window exactly. */
    int64_t in[2] = {set->h, set->w}, out[2] = {set->oh1, set->ow1};
    for (int i = 0; i < 2; i++)
        pr[i] = (out[i] - 1) * s->stride[i] + (s->kernel[i] - 1) * s->dilation[i] + 1 - in[i] -
                pl[i];
    dnnl_convolution_desc_t cd;
    dnnl_status_t st;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd = NULL;
    /* A blocked residual is read where it lies (binary add) by the direct
     * kernels; Winograd takes only a sum post-op, and so does Y written
     * over R (a 1x1 kernel keeps partial sums in Y, over R, before its
     * post-ops: the sum is oneDNN's way to read what Y held). */
    pt->res_binary = set->residual == RES_READ && s->res_blocked && res_binary_on();
    if ((st = make_attr(s, set, pt, pt->res_binary, &attr)) != dnnl_success)
        goto done;
    /* Winograd where it pays, direct where oneDNN turns it down; float32
     * only. For inference oneDNN's Winograd kernels read only their own
     * transformed weight format (16/9 of W's bytes for F(2x2), 4x for
     * F(4x4)). Stored Winograd (2, s->wino_h: conv_wino.c) is F(2x2),
     * whose W was transformed at load into that format, in W's place: it
     * has no other W to fall back on. F(4x4) (1, use_winograd) is asked
     * for as forward_training instead, whose kernel takes W packed as it
     * is and transforms it into the scratchpad each run. The result is
     * the same convolution; a convolution keeps no workspace for
     * training. */
    int wino = set->bf16 ? 0 : s->wino_h ? 2 : use_winograd(s, set) ? 1 : 0;
    for (;;) {
        /* stored: W in whatever layout the kernel picks */
        dnnl_memory_desc_t any_w;
        dnnl_dims_t wd = {m, c, s->kernel[0], s->kernel[1]};
        if (wino == 2)
            dnnl_memory_desc_init_by_tag(&any_w, 4, wd, dnnl_f32, dnnl_format_tag_any);
        st = dnnl_dilated_convolution_forward_desc_init(
            &cd, wino == 1 ? dnnl_forward_training : dnnl_forward_inference,
            wino ? dnnl_convolution_winograd : dnnl_convolution_direct, &pt->csrc_md,
            wino == 2 ? &any_w : &pt->wei_md, &pt->bias_md, &pt->dst_md, strides, dil, pl, pr);
        if (st == dnnl_success)
            st = dnnl_primitive_desc_create(&pd, &cd, attr, slim__fconv_engine(), NULL);
        if (st == dnnl_success && wino == 1 && !wino_scratch_fits(s, w, set, c, pd))
            st = dnnl_unimplemented;
        if (st == dnnl_success && wino == 2)
            pt->wei_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        if (st == dnnl_success && pt->res_binary && !jit_impl(pd))
            st = dnnl_unimplemented;
        if (st == dnnl_success)
            break;
        dnnl_primitive_desc_destroy(pd);
        pd = NULL;
        if (pt->res_binary) { /* the same kernel with the copy and a sum */
            pt->res_binary = false;
            dnnl_primitive_attr_destroy(attr);
            attr = NULL;
            if ((st = make_attr(s, set, pt, false, &attr)) != dnnl_success)
                goto done;
            continue;
        }
        if (wino != 1)
            break;
        wino = 0;
        pt->res_binary = set->residual == RES_READ && s->res_blocked && res_binary_on();
        if (pt->res_binary) {
            dnnl_primitive_attr_destroy(attr);
            attr = NULL;
            if ((st = make_attr(s, set, pt, true, &attr)) != dnnl_success)
                goto done;
        }
    }
    if (st != dnnl_success)
        goto done;
    if (getenv("SLIM_DNNL_VERBOSE")) {
        const char *impl = NULL;
        dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
        static const char *res[] = {"", ", residual binary", ", residual sum (Y over R)"};
        fprintf(stderr, "FusedConv %lldx%lldx%lld -> %lld: %s%s, scratchpad %zu bytes\n",
                (long long)c, (long long)set->h, (long long)set->w, (long long)m, impl,
                set->residual == RES_READ && !pt->res_binary ? ", residual copy + sum"
                                                            : res[set->residual],
                dnnl_memory_desc_get_size(dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md,
                                                                       0)));
    }
    if (s->dw_stride) {
        /* The fused primitive's dst is the depthwise conv's; its W must be
         * the Goihw16g slice the pass packed, */
        pt->dst_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
        pt->dww_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md,
                                                   DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_WEIGHTS);
        pt->dwb_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md,
                                                   DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_BIAS);
        /* and its dst nChw16c at the depthwise conv's size, as the rest
         * of this file (and a blocked reader) takes it */
        dnnl_memory_desc_t want, want_dst;
        slim__fconv_weights_md(&want, m, 1, 3, 3, SLIM_FCONV_W_DEPTHWISE, true);
        md4(&want_dst, m, set->oh, set->ow, dnnl_nChw16c);
        if (!dnnl_memory_desc_equal(&pt->dww_md, &want) ||
            !dnnl_memory_desc_equal(&pt->dst_md, &want_dst)) {
            st = dnnl_unimplemented;
            goto done;
        }
    }
    pt->scratch_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    pt->scratch_bytes = dnnl_memory_desc_get_size(&pt->scratch_md);
    if (set->bf16) {
        pt->wei_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        if ((st = slim__fconv_make_reorder(&pt->w_to_run, &pt->wst_md, &pt->wei_md)) != dnnl_success)
            goto done;
    }
    st = dnnl_primitive_create(&pt->conv, pd);
    if (st == dnnl_success && set->residual && !s->res_blocked)
        st = slim__fconv_make_reorder(&pt->res_to_dst, &pt->y_md, &pt->dst_md);
    if (st == dnnl_success && !s->out_blocked)
        st = slim__fconv_make_reorder(&pt->from_dst, &pt->dst_md, &pt->y_md);
done:
    dnnl_primitive_desc_destroy(pd);
    dnnl_primitive_attr_destroy(attr);
    return st;
}

/* How many output-channel parts each thread gets. On small planes (7x7:
 * ResNet's last stage) a part of fewer output channels runs faster per
 * channel, down to parts of about 64: measured single-threaded (CPU time,
 * oneDNN 2.6.3, Xeon with AVX-512, bench_dnnl_conv_parts), 512x7x7->512
 * 3x3 as 2 parts of 256 took 0.72-0.88x the whole conv's time, as 8
 * parts of 64 0.65-0.77x (its slice of W, 1.2 MB, stays in the core's L2
 * across the 49 pixels); 1x1s at 7x7 (2048->512, 512->2048) 0.85-0.89x as
 * 2 parts, 0.70-0.83x as 4; but 960x7x7->160 1.00x as 2 parts, 1.22x as
 * 4 (parts of 40). At 14x14 and above more parts gained nothing (3x3
 * 256->256: 0.85-0.95x as 2, 4, 8 or 16 parts alike; 1x1 1024->256:
 * 0.89-0.97x as 2, up to 1.20x as 16, each part reading the whole input).
 * Depends only on the shape and the thread count, so an image's parts
 * are the same whatever the batch. SLIM_CONV_PARTS_PER_THREAD overrides
 * it (1: one part per thread, as before), read when the primitives are
 * made. */
#define SMALL_PLANE 64
#define MIN_PART_CHANNELS 64
/* Stored Winograd's parts (conv_wino.c): 64 output channels each, the
 * size that measured best on 14x14 and 28x28 planes (parts of 32 lost at
 * 28x28: 1.4x; 256x14x14 as 4 parts of 64 took 0.78-0.81x the time of 2
 * of 128; one thread, CPU time, median of 31 trials), and fixed, so that
 * W cut at load fits the parts whatever the thread count. */
#define WINO_PART 64

static int parts_per_thread(const fconv_state *s, const prim_set *set, int64_t m, int threads)
{
    const char *env = getenv("SLIM_CONV_PARTS_PER_THREAD");
    if (env && atoi(env) >= 1)
        return atoi(env) > 16 ? 16 : atoi(env);
    int64_t most = m / (MIN_PART_CHANNELS * threads);
    if (s->wfmt != SLIM_FCONV_W_BLOCKED || s->dw_stride || set->oh1 * set->ow1 > SMALL_PLANE)
        return 1;
    int64_t want = s->kernel[0] * s->kernel[1] > 1 ? 4 : 2;
    return most < 1 ? 1 : (int)(most < want ? most : want);
}

dnnl_status_t slim__fconv_build_set(const fconv_state *s, const slim_tensor *w,
                                    const slim_tensor *x, int residual, prim_set *set)
{
    memset(set, 0, sizeof(*set));
    set->h = x->dims[2];
    set->w = x->dims[3];
    set->oh = set->oh1 = out_extent(s, 0, set->h);
    set->ow = set->ow1 = out_extent(s, 1, set->w);
    if (s->dw_stride) {
        set->oh = (set->oh1 - 1) / s->dw_stride + 1;
        set->ow = (set->ow1 - 1) / s->dw_stride + 1;
    }
    set->residual = residual;
    set->bf16 = slim__fconv_bf16_products(s, w);
    int threads = slim_num_threads();
    int64_t lo[64], hi[64];
    if (threads > 64)
        threads = 64;
    int64_t c = x->dims[1], m = out_channels(s, w);
    /* Stored Winograd: parts of 64 output channels whatever the threads,
     * as W was cut at load (conv_wino.c). */
    int n_split = s->wino_h ? (int)((m + WINO_PART - 1) / WINO_PART)
                            : threads * parts_per_thread(s, set, m, threads);
    if (n_split > 64)
        n_split = 64;
    /* raw (these): parts_per_thread parts per kernel thread, one input
     * part per kernel thread */
    set->parts = calloc((size_t)n_split, sizeof(part));
    set->in_parts = calloc((size_t)threads, sizeof(part));
    if (!set->parts || !set->in_parts) {
        slim__fconv_set_release(set);
        return dnnl_out_of_memory;
    }
    dnnl_status_t st = dnnl_success;
    /* The input into blocked scratch, split by input channels: from NCHW,
     * or (bf16 products) into bf16 from NCHW or from a blocked input. */
    if (s->wfmt != SLIM_FCONV_W_PLAIN_SRC && (!s->in_blocked || set->bf16)) {
        set->n_in_parts = split16(c, threads, lo, hi);
        for (int p = 0; p < set->n_in_parts && st == dnnl_success; p++) {
            part *pt = &set->in_parts[p];
            pt->c0 = lo[p];
            pt->c1 = hi[p];
            md4(&pt->x_md, hi[p] - lo[p], set->h, set->w,
                s->in_blocked ? dnnl_nChw16c : dnnl_nchw);
            md4t(&pt->src_md, hi[p] - lo[p], set->h, set->w, dnnl_nChw16c,
                 set->bf16 ? dnnl_bf16 : dnnl_f32);
            st = slim__fconv_make_reorder(&pt->to_src, &pt->x_md, &pt->src_md);
        }
        /* in floats; bf16 takes half */
        size_t elems = (size_t)(slim__fconv_round16(c) * set->h * set->w);
        set->src_floats = set->bf16 ? (elems + 1) / 2 : elems;
    }
    set->n_parts = split16(m, n_split, lo, hi);
    for (int p = 0; p < set->n_parts && st == dnnl_success; p++) {
        set->parts[p].o0 = lo[p];
        set->parts[p].o1 = hi[p];
        st = make_conv(s, w, set, c, &set->parts[p]);
        set->parts[p].w_off = set->wino_floats;
        if (s->wino_h)
            set->wino_floats += (int64_t)(dnnl_memory_desc_get_size(&set->parts[p].wei_md) /
                                          sizeof(float));
    }
    set->dst_floats = s->out_blocked ? 0 : (size_t)(slim__fconv_round16(m) * set->oh * set->ow);
    if (st != dnnl_success)
        slim__fconv_set_release(set);
    return st;
}

/* The primitives for this shape, made on first use and cached; once the
 * cache is full (a server sees few shapes), made for this call only and
 * *owned, since a cached set may be in use by another run. */
slim_status slim__fconv_find_set(fconv_state *s, const slim_tensor *w, const slim_tensor *x,
                                 int residual, prim_set *out, bool *owned, slim_err *err)
{
    pthread_mutex_lock(&s->mu);
    *owned = false;
    for (int i = 0; i < s->n_sets; i++)
        if (s->sets[i].h == x->dims[2] && s->sets[i].w == x->dims[3] &&
            s->sets[i].residual == residual) {
            *out = s->sets[i];
            pthread_mutex_unlock(&s->mu);
            return SLIM_OK;
        }
    /* get_stream keeps oneDNN to this thread first: a primitive sizes its
     * work split (Winograd's, at least) by the thread count it sees when
     * made. */
    dnnl_status_t ds = slim__fconv_stream() ? slim__fconv_build_set(s, w, x, residual, out)
                                            : dnnl_runtime_error;
    if (ds == dnnl_success) {
        if (s->n_sets < CACHE_SLOTS)
            s->sets[s->n_sets++] = *out;
        else
            *owned = true;
    }
    pthread_mutex_unlock(&s->mu);
    if (ds != dnnl_success)
        return slim_errf(err, SLIM_EINTERNAL, "oneDNN could not make the convolution (status %d)",
                         (int)ds);
    return SLIM_OK;
}

/* Whether oneDNN runs a 1x1 conv c->m with a depthwise 3x3 post-op of
 * this stride as one jit kernel. Its other choice, ref_fused_convolution,
 * runs the 1x1 into a scratchpad of all its output channels (2.4 MB per
 * part for MobileNetV2's first expand) and the depthwise conv after it;
 * oneDNN 2.6 on AVX-512 gives that for every f32 pair of MobileNetV2
 * (SLIM_DNNL_VERBOSE=1 shows it). The plane does not enter oneDNN's
 * choice of kernel there, so a 14x14 probe stands for all (only the
 * primitive descriptor is made, at load). */
bool slim_fconv_dw_post_op_is_jit(int64_t c, int64_t m, int stride)
{
    dnnl_memory_desc_t src, wei, bias, dst;
    md4(&src, c, 14, 14, dnnl_nChw16c);
    md4(&dst, m, 14, 14, dnnl_nChw16c);
    slim__fconv_weights_md(&wei, m, c, 1, 1, SLIM_FCONV_W_BLOCKED, true);
    dnnl_dims_t bd = {m}, one = {1, 1}, zero = {0, 0};
    dnnl_memory_desc_init_by_tag(&bias, 1, bd, dnnl_f32, dnnl_a);
    dnnl_convolution_desc_t cd;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    const char *impl = NULL;
    bool jit = false;
    if (slim__fconv_engine() && dnnl_primitive_attr_create(&attr) == dnnl_success &&
        dnnl_post_ops_create(&po) == dnnl_success &&
        dnnl_post_ops_append_dw(po, dnnl_f32, dnnl_f32, dnnl_f32, 3, stride, 1, 0, 0, NULL) ==
            dnnl_success &&
        dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success &&
        dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) ==
            dnnl_success &&
        dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference,
                                                   dnnl_convolution_direct, &src, &wei, &bias,
                                                   &dst, one, zero, zero, zero) == dnnl_success &&
        dnnl_primitive_desc_create(&pd, &cd, attr, slim__fconv_engine(), NULL) == dnnl_success &&
        dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success)
        jit = impl && strncmp(impl, "ref", 3) != 0;
    dnnl_primitive_desc_destroy(pd);
    dnnl_post_ops_destroy(po);
    dnnl_primitive_attr_destroy(attr);
    return jit;
}
