/* compress.c - the compress stage: what the precision options mean for
 * this load, the int8 check's samples, then the registry's COMPRESS passes
 * (pruning, QKV merge, int8, half weights, half activations). */
#include "pipeline.h"

#include <stdlib.h>
#include <string.h>

/* SLIM_F32, SLIM_F16 or SLIM_BF16 for a float type's name; UNDEFINED if not. */
static slim_dtype float_type(const char *s)
{
    if (strcmp(s, "fp32") == 0 || strcmp(s, "float32") == 0)
        return SLIM_F32;
    if (strcmp(s, "fp16") == 0 || strcmp(s, "float16") == 0)
        return SLIM_F16;
    if (strcmp(s, "bf16") == 0 || strcmp(s, "bfloat16") == 0)
        return SLIM_BF16;
    return SLIM_DTYPE_UNDEFINED;
}

/* The precision options as types. */
static slim_status precision_settings(const slim_compress_opts *o, slim_load_ctx *c,
                                      slim_err *err)
{
    const char *prec = o->precision ? o->precision : "fp32";
    /* fp32-strict is fp32 to every pass; only a GPU's products read it. */
    c->fp32_strict = strcmp(prec, "fp32-strict") == 0;
    slim_dtype pt = c->fp32_strict ? SLIM_F32 : float_type(prec);
    c->half = pt == SLIM_F16 || pt == SLIM_BF16 ? pt : SLIM_DTYPE_UNDEFINED;
    c->int8 = strcmp(prec, "int8") == 0;
    if (!c->int8 && pt == SLIM_DTYPE_UNDEFINED)
        return slim_errf(err, SLIM_EINVAL, "unknown precision \"%s\" (expected fp32, fp32-strict, "
                         "fp16, bf16 or int8)", prec);
    /* Half activations ride on half weights of the same type. */
    const char *acts = o->half.activations;
    c->act = acts ? float_type(acts) : SLIM_F32;
    if (c->act == SLIM_DTYPE_UNDEFINED)
        return slim_errf(err, SLIM_EINVAL, "unknown activations \"%s\" (expected fp32, fp16 "
                         "or bf16)", acts);
    if (c->act != SLIM_F32 && c->act != c->half)
        return slim_errf(err, SLIM_EINVAL, "activations \"%s\" need precision \"%s\" (the "
                         "weights' half type), not \"%s\"", acts,
                         c->act == SLIM_F16 ? "fp16" : "bf16", prec);
    c->fallback = SLIM_F32;
    if (o->int8.fallback && o->int8.fallback[0]) {
        c->fallback = float_type(o->int8.fallback);
        if (c->fallback == SLIM_DTYPE_UNDEFINED)
            return slim_errf(err, SLIM_EINVAL, "unknown int8 fallback \"%s\" (expected fp32, "
                             "fp16 or bf16)", o->int8.fallback);
    }
    return SLIM_OK;
}

slim_status slim_pipeline_settings(const slim_load_opts *opts, slim_load_ctx *c, slim_err *err)
{
    c->opts = opts;
    const slim_compress_opts *co = &opts->compress;
    slim_status st = precision_settings(co, c, err);
    if (!st)
        st = slim_pipeline_device(&opts->place, &c->dev, err);
    if (st)
        return st;
    c->kind = slim_device_kind(c->dev);
    bool on_gpu = strcmp(c->kind, "cpu") != 0;
    c->gpu_half = c->half != SLIM_DTYPE_UNDEFINED && !co->half.activations &&
                  (on_gpu || co->half.whole_graph);
    c->whole_half = c->half != SLIM_DTYPE_UNDEFINED && (c->act != SLIM_F32 || c->gpu_half);
    c->weights_half = c->half != SLIM_DTYPE_UNDEFINED && !c->gpu_half ? c->half
                      : c->int8 && c->fallback != SLIM_F32        ? c->fallback
                                                                    : SLIM_DTYPE_UNDEFINED;
    const slim_optimize_opts *oo = &opts->optimize;
    bool converting_for_gpu = c->gpu_half && strcmp(c->kind, "cpu") == 0 && oo->no_passes;
    c->optimize_kind = converting_for_gpu ? "cuda" : c->kind;
    const char *off = getenv("SLIM_PASSES");
    c->graph_passes = (!oo->no_passes || converting_for_gpu) && !(off && strcmp(off, "0") == 0);
    /* Off by default: on an H200 (2026-11-27, fp16 BERT-base) it was
     * faster at batch 1 and slower at batch 32 (docs/cuda.md). */
    const char *att = getenv("SLIM_CUDA_FUSED_ATTENTION");
    c->gpu_attention = c->gpu_half && att && att[0] == '1';
    c->conv_half = SLIM_DTYPE_UNDEFINED;
    return SLIM_OK;
}

slim_status slim_pipeline_samples(slim_load_ctx *c, slim_err *err)
{
    const slim_load_int8_opts *o = &c->opts->compress.int8;
    c->unmeasured[0] = '\0';
    if (!c->int8 || !(o->measure || o->max_error > 0))
        return SLIM_OK;
    slim_graph *g;
    slim_status st = slim_pipeline_read(c->path, &g, err);
    if (!st)
        st = slim_int8_capture(g, o->n_samples, o->sample_names, o->samples, &c->samples, err);
    /* A budget needs the measurements; a report (inspect) does without and
     * says why. */
    if (st && o->max_error > 0) {
        slim_err_prefix(err, "int8 max_error: measuring the layers' error: ");
    } else if (st && st != SLIM_ENOMEM) {
        size_t n = strnlen(err->msg, sizeof(c->unmeasured) - 1);
        memcpy(c->unmeasured, err->msg, n);
        c->unmeasured[n] = '\0';
        st = SLIM_OK;
    }
    return st;
}

slim_status slim_pipeline_compress(slim_graph *g, slim_load_ctx *c, slim_err *err)
{
    slim_status st = slim_pass_registry_run(g, SLIM_STAGE_COMPRESS, c->kind, c, err);
    /* The samples served the int8 pass (or a failure before it). */
    slim_int8_samples_free(&c->samples);
    if (st)
        slim_graph_free(g);
    return st;
}
