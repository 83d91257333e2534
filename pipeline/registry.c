/*
 * registry.c - every rewrite a load may make, as one table: the stage it
 * belongs to, the device kinds it applies to, and when it runs. The order
 * of the table is the order of the rewrites; the comments say why each
 * sits where it does. A new pass adds one entry here (and its file under
 * passes/ or quant/); docs/architecture.md.
 */
#include "pipeline.h"
#include "cancel.h"
#include "fp16.h"
#include "half.h"
#include "prune.h"
#include "rewrite.h"

#include <stdio.h>
#include <string.h>

extern const slim_pass slim__pass_fold_bn;
extern const slim_pass slim__pass_fuse_conv;
extern const slim_pass slim__pass_blocked_layout;
extern const slim_pass slim__pass_fuse_matmul;
extern const slim_pass slim__pass_fold_constants;
extern const slim_pass slim__pass_simplify_shapes;
extern const slim_pass slim__pass_fuse_layernorm;
extern const slim_pass slim__pass_fuse_add_layernorm;
extern const slim_pass slim__pass_fuse_gelu;
extern const slim_pass slim__pass_fold_attention_scale;
extern const slim_pass slim__pass_fuse_attention;
extern const slim_pass slim__pass_attention_qkv;
extern const slim_pass slim__pass_fuse_int8_epilogue;
extern const slim_pass slim__pass_fuse_matmul_bias;
extern const slim_pass slim__pass_prune_expand; /* quant/prune_expand.c */

unsigned slim_pass_device_bit(const char *kind)
{
    return !kind || strcmp(kind, "cpu") == 0 ? SLIM_ON_CPU : SLIM_ON_GPU;
}

/* ---- compress ---------------------------------------------------------- */

static bool want_prune(const slim_load_ctx *c)
{
    return c->opts->compress.prune != NULL;
}

static slim_status run_prune(slim_graph *g, slim_load_ctx *c, slim_err *err)
{
    const slim_prune_opts *p = c->opts->compress.prune;
    return slim_prune(g, p, p->report, err);
}

/* Q, K and V as one product before the precision passes, which then
 * quantize or narrow it whole; on the host only, where FusedAttention
 * reads the merged result in place (a GPU would run the Split), and not
 * for a caller that wants the graph as written (inspect). */
static bool want_merge_qkv(const slim_load_ctx *c)
{
    const slim_optimize_opts *o = &c->opts->optimize;
    return !c->whole_half && !(o->no_passes && !o->pack_matmul);
}

/* A node the int8 or half pass was told to leave float32 (by name or op
 * type): merging it with others would take its name away. */
static bool named_excluded(const slim_node *n, void *user)
{
    const slim_compress_opts *o = user;
    return slim_rewrite_named(o->int8.exclude, o->int8.n_exclude, n) ||
           slim_rewrite_named(o->half.exclude, o->half.n_exclude, n);
}

static bool int8_group_ok(const slim_tensor *const *w, int n, void *user)
{
    (void)user;
    return slim_int8_same_outliers(w, n);
}

static slim_status run_merge_qkv(slim_graph *g, slim_load_ctx *c, slim_err *err)
{
    int merged;
    slim_merge_hooks hooks = {named_excluded, c->int8 ? int8_group_ok : NULL,
                              (void *)&c->opts->compress};
    return slim_pass_merge_qkv(g, &hooks, &merged, err);
}

static bool want_int8(const slim_load_ctx *c)
{
    return c->int8;
}

static slim_status run_int8(slim_graph *g, slim_load_ctx *c, slim_err *err)
{
    const slim_load_int8_opts *o = &c->opts->compress.int8;
    slim_int8_opts io = {o->exclude, o->n_exclude, &c->samples, o->max_error, false};
    slim_status st = slim_quant_int8(g, &io, o->report, err);
    if (!st && o->report)
        snprintf(o->report->unmeasured, sizeof(o->report->unmeasured), "%s", c->unmeasured);
    /* The float32 samples go before the passes after this one. */
    slim_int8_samples_free(&c->samples);
    return st;
}

static bool want_half_weights(const slim_load_ctx *c)
{
    return c->weights_half != SLIM_DTYPE_UNDEFINED;
}

/* After int8, so that with a fallback it converts what int8 left. */
static slim_status run_half_weights(slim_graph *g, slim_load_ctx *c, slim_err *err)
{
    const slim_load_half_opts *o = &c->opts->compress.half;
    slim_half_opts ho = {c->weights_half, o->exclude, o->n_exclude};
    return slim_quant_half_weights(g, &ho, o->report, err);
}

/* On a GPU the whole graph goes half after the optimization passes, which
 * match float32 graphs (GELU's constants, BatchNormalization folded into a
 * convolution's weights): fused first, then narrowed (LOWER). */
static bool want_half_activations(const slim_load_ctx *c)
{
    return c->whole_half && !c->gpu_half;
}

static slim_status run_half_activations(slim_graph *g, slim_load_ctx *c, slim_err *err)
{
    return slim_quant_half_activations(g, c->half, err);
}

/* ---- optimize ---------------------------------------------------------- */

static bool want_pack_matmul(const slim_load_ctx *c)
{
    return c->opts->optimize.no_passes && c->opts->optimize.pack_matmul;
}

static slim_status run_pack_matmul(slim_graph *g, slim_load_ctx *c, slim_err *err)
{
    (void)c;
    return slim_pass_pack_matmul(g, err);
}

/* The optimization passes see half convolutions as float32 ones, made
 * half again after them (conv_narrow). */
static bool want_optimize(const slim_load_ctx *c)
{
    return !c->opts->optimize.no_passes;
}

static slim_status run_conv_widen(slim_graph *g, slim_load_ctx *c, slim_err *err)
{
    return slim_half_conv_widen(g, &c->conv_half, err);
}

static bool want_conv_narrow(const slim_load_ctx *c)
{
    return !c->opts->optimize.no_passes && c->conv_half != SLIM_DTYPE_UNDEFINED;
}

static slim_status run_conv_narrow(slim_graph *g, slim_load_ctx *c, slim_err *err)
{
    const slim_load_half_opts *o = &c->opts->compress.half;
    slim_half_opts cho = {c->conv_half, o->exclude, o->n_exclude};
    return slim_half_conv_narrow(g, c->conv_half, &cho, err);
}

static bool want_graph_passes(const slim_load_ctx *c)
{
    return c->graph_passes;
}

static slim_status run_prune_expand(slim_graph *g, slim_load_ctx *c, slim_err *err)
{
    int changed = 0;
    (void)c;
    return slim__pass_prune_expand.run(g, &changed, err);
}

/* On a GPU FusedAttention runs on half operands only: the graph must be
 * about to go half, and SLIM_CUDA_FUSED_ATTENTION=1 (c->gpu_attention). */
static bool want_gpu_attention(const slim_load_ctx *c)
{
    return c->graph_passes && c->gpu_attention;
}

static slim_status run_fuse_attention(slim_graph *g, slim_load_ctx *c, slim_err *err)
{
    int changed = 0;
    (void)c;
    return slim__pass_fuse_attention.run(g, &changed, err);
}

/* A file's FusedMatMuls and merged projections, undone for a GPU, which
 * has no kernel for FusedMatMul nor Split. */
static slim_status run_defuse_matmul(slim_graph *g, slim_load_ctx *c, slim_err *err)
{
    (void)c;
    return slim_pass_defuse_matmul(g, err);
}

static slim_status run_unmerge_qkv(slim_graph *g, slim_load_ctx *c, slim_err *err)
{
    (void)c;
    return slim_pass_unmerge_qkv(g, err);
}

/* ---- lower ------------------------------------------------------------- */

static bool want_gpu_half(const slim_load_ctx *c)
{
    return c->gpu_half;
}

static slim_status run_gpu_half(slim_graph *g, slim_load_ctx *c, slim_err *err)
{
    return slim_quant_half(g, c->half, NULL, err);
}

/* ---- the table --------------------------------------------------------- */

#define GRAPH_PASS(nm, dev, p) {nm, SLIM_STAGE_OPTIMIZE, dev, want_graph_passes, &p, NULL}

const slim_pass_entry slim_pass_registry[] = {
    /* Pruning first: the precision passes then see the pruned layers as
     * com.slimserve operators (left sparse float) and the rest as before. */
    {"prune", SLIM_STAGE_COMPRESS, SLIM_ON_ANY, want_prune, NULL, run_prune},
    {"merge_qkv", SLIM_STAGE_COMPRESS, SLIM_ON_CPU, want_merge_qkv, NULL, run_merge_qkv},
    {"int8", SLIM_STAGE_COMPRESS, SLIM_ON_ANY, want_int8, NULL, run_int8},
    {"half_weights", SLIM_STAGE_COMPRESS, SLIM_ON_ANY, want_half_weights, NULL,
     run_half_weights},
    {"half_activations", SLIM_STAGE_COMPRESS, SLIM_ON_ANY, want_half_activations, NULL,
     run_half_activations},

    /* What a .slim file stores packed, without the other passes. */
    {"pack_matmul", SLIM_STAGE_OPTIMIZE, SLIM_ON_ANY, want_pack_matmul, NULL, run_pack_matmul},
    {"conv_widen", SLIM_STAGE_OPTIMIZE, SLIM_ON_ANY, want_optimize, NULL, run_conv_widen},
    /* 2:4 convs of a file run dense, faster here (before fuse_conv, which
     * then fuses and packs them as any conv). */
    {"prune_expand", SLIM_STAGE_OPTIMIZE, SLIM_ON_CPU, want_graph_passes, NULL, run_prune_expand},
    /* Folding BatchNormalization first gives fuse_conv a Conv whose only
     * reader is the activation or the residual Add; blocked_layout then
     * links the FusedConvs fuse_conv made. On a GPU: no passes whose
     * operators only the CPU runs (FusedConv, the blocked layout,
     * FusedMatMul, FusedAttention in float32); they would pull those nodes,
     * and the copies around them, back to the host. */
    GRAPH_PASS("fold_bn", SLIM_ON_ANY, slim__pass_fold_bn),
    GRAPH_PASS("fuse_conv", SLIM_ON_CPU, slim__pass_fuse_conv),
    GRAPH_PASS("blocked_layout", SLIM_ON_CPU, slim__pass_blocked_layout),
    GRAPH_PASS("fuse_matmul", SLIM_ON_CPU, slim__pass_fuse_matmul),
    {"defuse_matmul", SLIM_STAGE_OPTIMIZE, SLIM_ON_GPU, want_graph_passes, NULL,
     run_defuse_matmul},
    /* After fuse_matmul, which takes the GELUs it can fuse into a product;
     * fuse_layernorm, fuse_gelu and fuse_attention read the scalars (and
     * the Reshape shapes) fold_constants made initializers. */
    GRAPH_PASS("fold_constants", SLIM_ON_ANY, slim__pass_fold_constants),
    GRAPH_PASS("simplify_shapes", SLIM_ON_ANY, slim__pass_simplify_shapes),
    GRAPH_PASS("fuse_layernorm", SLIM_ON_ANY, slim__pass_fuse_layernorm),
    /* After fuse_layernorm. AddLayerNorm has a CUDA kernel too
     * (kernels/cuda/norm.cu). */
    GRAPH_PASS("fuse_add_layernorm", SLIM_ON_ANY, slim__pass_fuse_add_layernorm),
    GRAPH_PASS("fuse_gelu", SLIM_ON_ANY, slim__pass_fuse_gelu),
    /* On the host FusedAttention applies the scale in its kernel. */
    GRAPH_PASS("fold_attention_scale", SLIM_ON_GPU, slim__pass_fold_attention_scale),
    GRAPH_PASS("fuse_attention", SLIM_ON_CPU, slim__pass_fuse_attention),
    {"fuse_attention", SLIM_STAGE_OPTIMIZE, SLIM_ON_GPU, want_gpu_attention, NULL,
     run_fuse_attention},
    /* After fuse_attention. */
    GRAPH_PASS("attention_qkv", SLIM_ON_CPU, slim__pass_attention_qkv),
    {"unmerge_qkv", SLIM_STAGE_OPTIMIZE, SLIM_ON_GPU, want_graph_passes, NULL, run_unmerge_qkv},
    /* After fuse_gelu. */
    GRAPH_PASS("fuse_int8_epilogue", SLIM_ON_ANY, slim__pass_fuse_int8_epilogue),
    /* On the host FusedMatMul (fuse_matmul) takes the bias; last. */
    GRAPH_PASS("fuse_matmul_bias", SLIM_ON_GPU, slim__pass_fuse_matmul_bias),
    {"conv_narrow", SLIM_STAGE_OPTIMIZE, SLIM_ON_ANY, want_conv_narrow, NULL, run_conv_narrow},

    /* The whole graph half for a GPU, after its (float32) passes. */
    {"gpu_half", SLIM_STAGE_LOWER, SLIM_ON_ANY, want_gpu_half, NULL, run_gpu_half},
    {NULL, SLIM_STAGE_COMPRESS, 0, NULL, NULL, NULL},
};

slim_status slim_pass_registry_run(slim_graph *g, slim_pass_stage stage, const char *kind,
                                   slim_load_ctx *c, slim_err *err)
{
    unsigned bit = slim_pass_device_bit(kind);
    for (const slim_pass_entry *e = slim_pass_registry; e->name; e++) {
        if (e->stage != stage || !(e->devices & bit) || (e->when && !e->when(c)))
            continue;
        /* A load's time bound is checked between optimization passes, as
         * before the registry (the compress passes never checked it). */
        bool optimizing = stage == SLIM_STAGE_OPTIMIZE;
        slim_status st = optimizing ? slim_cancel_status(err) : SLIM_OK;
        if (st)
            return st;
        int changed = 0;
        st = e->pass ? e->pass->run(g, &changed, err) : e->run(g, c, err);
        if (st)
            return optimizing ? slim_err_prefix(err, "pass %s: ", e->name) : st;
    }
    return SLIM_OK;
}

const slim_pass *slim_pipeline_pass(int i)
{
    for (const slim_pass_entry *e = slim_pass_registry; e->name; e++)
        if (e->pass && i-- == 0)
            return e->pass;
    return NULL;
}
