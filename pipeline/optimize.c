/* optimize.c - the optimize stage (the registry's OPTIMIZE passes for the
 * device the graph targets) and the lower stage after it; and the same
 * passes on a bare graph, for tests and tools. */
#include "pipeline.h"

#include <stdlib.h>
#include <string.h>

slim_status slim_pipeline_optimize(slim_graph *g, slim_load_ctx *c, slim_err *err)
{
    slim_status st = slim_pass_registry_run(g, SLIM_STAGE_OPTIMIZE, c->optimize_kind, c, err);
    if (!st)
        st = slim_pass_registry_run(g, SLIM_STAGE_LOWER, c->kind, c, err);
    if (st)
        slim_graph_free(g);
    return st;
}

/* The graph passes alone: with no_passes set the registry's other
 * OPTIMIZE entries (conv widening, packing) stay off, and graph_passes
 * turns on the passes themselves, as a conversion for a GPU does. */
static slim_status graph_passes(slim_graph *g, const char *kind, bool half, slim_err *err)
{
    static const slim_load_opts opts = {.optimize = {.no_passes = true}};
    slim_load_ctx c = {.opts = &opts, .kind = kind, .optimize_kind = kind,
                       .conv_half = SLIM_DTYPE_UNDEFINED};
    const char *off = getenv("SLIM_PASSES");
    c.graph_passes = !(off && strcmp(off, "0") == 0);
    const char *att = getenv("SLIM_CUDA_FUSED_ATTENTION");
    c.gpu_attention = half && att && att[0] == '1';
    return slim_pass_registry_run(g, SLIM_STAGE_OPTIMIZE, kind, &c, err);
}

slim_status slim_passes_run(slim_graph *g, slim_err *err)
{
    return graph_passes(g, "cpu", false, err);
}

slim_status slim_passes_run_for(slim_graph *g, bool host, slim_err *err)
{
    return graph_passes(g, host ? "cpu" : "cuda", false, err);
}

slim_status slim_passes_run_gpu(slim_graph *g, bool half, slim_err *err)
{
    return graph_passes(g, "cuda", half, err);
}
