/*
 * pipeline.h - the load pipeline: how slim_model_load (runtime/slim.h,
 * pipeline/load.c) turns a file into a placed model, as named stages.
 *
 *     read      read.c      the file -> a graph (ONNX or .slim, by magic)
 *     compress  compress.c  the precision settings, the int8 check's samples,
 *                           then the registry's COMPRESS passes
 *     optimize  optimize.c  the registry's OPTIMIZE passes, for the device
 *     lower     optimize.c  the registry's LOWER passes (a GPU's half graph)
 *     plan      plan.c      the graph -> a model (finalized, its plans)
 *     place     place.c     the model's nodes onto the device
 *
 * Every rewrite of the graph is an entry of one pass registry
 * (registry.c): its name, its stage, the device kinds it applies to and
 * the condition, over the load's settings, under which it runs. A stage
 * runs its entries in the registry's order. docs/architecture.md
 * says how to add one.
 */
#ifndef SLIM_PIPELINE_H
#define SLIM_PIPELINE_H

#include "device.h"
#include "graph.h"
#include "int8.h"
#include "alloc.h"
#include "pass.h"

/* What one load decided from its options, shared by the stages and read
 * by the registry's conditions. */
typedef struct slim_load_ctx {
    const slim_load_opts *opts;   /* never NULL (zero options for none) */
    const char *path;
    slim_device *dev;             /* NULL: the CPU */
    const char *kind;             /* slim_device_kind(dev) */
    /* The device kind the optimize passes target: kind, or "cuda" when a
     * CUDA model is converted on the host (half.whole_graph with
     * no_passes): the GPU's passes match float32 only, and the GPU load
     * will see a half graph, so they run before the graph goes half. */
    const char *optimize_kind;
    bool int8, fp32_strict;
    slim_dtype half;              /* fp16 / bf16 precision, else UNDEFINED */
    slim_dtype act;               /* activations' type (F32 unless half) */
    slim_dtype fallback;          /* int8's fallback for float layers */
    /* On CUDA with activations unset, fp16 / bf16 keeps meaning the whole
     * graph in half (its kernels take half operands); elsewhere it means
     * half weights with float32 activations, plus the whole-graph pass
     * when activations are half too. */
    bool gpu_half, whole_half;
    slim_dtype weights_half;      /* half weights' type, else UNDEFINED */
    /* The registry's graph passes (passes/) run: optimizing, or converting
     * for a GPU, and SLIM_PASSES=0 not set. */
    bool graph_passes;
    /* FusedAttention has a GPU kernel for half operands only: a graph
     * about to go half takes it when SLIM_CUDA_FUSED_ATTENTION=1. */
    bool gpu_attention;
    /* Between conv_widen and conv_narrow: the half type the convolutions
     * had, UNDEFINED when none. */
    slim_dtype conv_half;
    slim_int8_samples samples;    /* the int8 check's, until int8 ran */
    /* Why the int8 error was not measured (the report's field). */
    char unmeasured[sizeof(((slim_int8_report *)0)->unmeasured)];
} slim_load_ctx;

/* ---- stages ------------------------------------------------------------ */

/* read.c: the model file as a graph, by its magic number. */
slim_status slim_pipeline_read(const char *path, slim_graph **out, slim_err *err);
/* Whether the file at path starts with the .slim magic number. */
bool slim_model_file_is_slim(const char *path);

/* compress.c: fills c from opts (the device too), or says what is wrong. */
slim_status slim_pipeline_settings(const slim_load_opts *opts, slim_load_ctx *c,
                                   slim_err *err);
/* The int8 check's samples (a second read of the file, run in float32 and
 * freed) when int8 measures; before the real read holds any weights. */
slim_status slim_pipeline_samples(slim_load_ctx *c, slim_err *err);
/* The COMPRESS passes. Frees g on failure. */
slim_status slim_pipeline_compress(slim_graph *g, slim_load_ctx *c, slim_err *err);

/* optimize.c: the OPTIMIZE passes for c->optimize_kind, then the LOWER
 * passes. Frees g on failure. */
slim_status slim_pipeline_optimize(slim_graph *g, slim_load_ctx *c, slim_err *err);

/* plan.c: the model of g (taken, also on failure), charged to acct. */
slim_status slim_pipeline_plan(slim_graph *g, const slim_load_ctx *c,
                               slim_mem_account *acct, slim_model **out,
                               slim_err *err);
/* place.c: the device the options name (NULL: the CPU). */
slim_status slim_pipeline_device(const slim_place_opts *o, slim_device **dev, slim_err *err);
/* place.c: the model onto c->dev; frees it on failure. */
slim_status slim_pipeline_place(slim_model **m, const slim_load_ctx *c, slim_err *err);

/* ---- the pass registry (registry.c) ------------------------------------ */

typedef enum slim_pass_stage {
    SLIM_STAGE_COMPRESS,   /* pruning, precision: before any optimization */
    SLIM_STAGE_OPTIMIZE,   /* the device's fusions and layouts */
    SLIM_STAGE_LOWER,      /* last rewrites for the device (a GPU's half graph) */
} slim_pass_stage;

/* Device kinds as bits: "cpu", and any backend's device ("cuda", or the
 * tests' "emul", a GPU in disguise). */
enum {
    SLIM_ON_CPU = 1u << 0,
    SLIM_ON_GPU = 1u << 1,
    SLIM_ON_ANY = SLIM_ON_CPU | SLIM_ON_GPU,
};
unsigned slim_pass_device_bit(const char *kind);

typedef struct slim_pass_entry {
    const char *name;
    slim_pass_stage stage;
    unsigned devices;                         /* SLIM_ON_* */
    bool (*when)(const slim_load_ctx *c);     /* NULL: always */
    /* A graph pass (passes/) run as it is, or else run. */
    const slim_pass *pass;
    slim_status (*run)(slim_graph *g, slim_load_ctx *c, slim_err *err);
} slim_pass_entry;

/* Every pass, in the order the stages run them; ends with a NULL name. */
extern const slim_pass_entry slim_pass_registry[];

/* Runs the entries of stage that apply to kind and whose condition holds,
 * in order; stops at the first error. In the OPTIMIZE stage a load's time
 * bound (cancel.h) is checked before each, and errors say "pass NAME: ". */
slim_status slim_pass_registry_run(slim_graph *g, slim_pass_stage stage, const char *kind,
                                   slim_load_ctx *c, slim_err *err);
/* The i-th graph pass of the registry (entries with .pass), or NULL past
 * the last: for tests that run them one at a time. */
const slim_pass *slim_pipeline_pass(int i);

/* ---- the optimize stage on a bare graph (tests, tools) ------------------ */

/* The graph passes for the CPU; with SLIM_PASSES=0 none (for comparisons
 * and bisecting). */
slim_status slim_passes_run(slim_graph *g, slim_err *err);
/* The same for nodes that run on the host (true) or a GPU: on a GPU the
 * passes making nodes only the CPU runs (fuse_conv, blocked_layout,
 * fuse_attention, fuse_matmul) are left out, and a file's fused or merged
 * products are undone; fold_attention_scale and fuse_matmul_bias run for a
 * GPU only. */
slim_status slim_passes_run_for(slim_graph *g, bool host, slim_err *err);
/* For a GPU, with half true when the graph goes half after the passes:
 * then, with SLIM_CUDA_FUSED_ATTENTION=1, fuse_attention runs too. */
slim_status slim_passes_run_gpu(slim_graph *g, bool half, slim_err *err);

#endif
