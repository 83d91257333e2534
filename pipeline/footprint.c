/* footprint.c - a model's memory before loading (slim_model_predict) and
 * after (slim_model_footprint), in the same fields (footprint.h). */
#include "footprint.h"
#include "pipeline.h"
#include "model.h"
#include "plan.h"
#include "slim_init.h"

#include <stdlib.h>
#include <string.h>

/* Weights of g and its subgraphs, and how many of those bytes are a mapped
 * file's (a buffer with its own release and no allocator block). */
static void weight_split(const slim_graph *g, size_t *bytes, size_t *mapped)
{
    for (int v = 0; v < g->n_values; v++) {
        const slim_value *val = &g->values[v];
        if (val->kind != SLIM_VALUE_INITIALIZER)
            continue;
        size_t n = slim_tensor_nbytes(&val->init);
        *bytes += n;
        const slim_buffer *b = val->init.buf;
        if (b && b->release && !b->block)
            *mapped += n;
    }
    for (int i = 0; i < g->n_nodes; i++)
        for (int a = 0; a < g->nodes[i].n_attrs; a++)
            if (g->nodes[i].attrs[a].type == SLIM_ATTR_GRAPH && g->nodes[i].attrs[a].g)
                weight_split(g->nodes[i].attrs[a].g, bytes, mapped);
}

/* The run's signature at batch: a dynamic first dim is the batch, other
 * dynamic dims 1 (as `slim inspect --memory`). False when an input has no
 * known type or rank. */
static bool signature(const slim_model *m, int64_t batch, slim_tensor *sig)
{
    for (int i = 0; i < m->graph->n_inputs; i++) {
        const slim_io_info *info = &m->inputs[i];
        if (info->dtype == SLIM_DTYPE_UNDEFINED || info->ndim < 0 || info->kind)
            return false;
        memset(&sig[i], 0, sizeof(sig[i]));
        sig[i].dtype = info->dtype;
        sig[i].ndim = info->ndim;
        for (int d = 0; d < info->ndim; d++)
            sig[i].dims[d] = info->dims[d] >= 0 ? info->dims[d] : d == 0 ? batch : 1;
    }
    return true;
}

/* Bytes of the graph's inputs and outputs at this signature: they are not
 * in the arena but one run holds them. Outputs of unknown shape count 0. */
static size_t io_bytes(const slim_model *m, const slim_tensor *sig)
{
    size_t n = 0;
    for (int i = 0; i < m->graph->n_inputs; i++)
        n += slim_tensor_nbytes(&sig[i]);
    slim_tensor *shapes = calloc((size_t)m->graph->n_values, sizeof(*shapes));
    slim_err err;
    if (shapes && !slim_model_infer_shapes(m, sig, shapes, &err)) {
        for (int o = 0; o < m->graph->n_outputs; o++) {
            const slim_tensor *t = &shapes[m->graph->outputs[o]];
            if (t->ndim >= 0 && t->dtype != SLIM_DTYPE_UNDEFINED)
                n += slim_tensor_nbytes(t);
        }
    }
    free(shapes);
    return n;
}

size_t slim_model_run_bytes(const slim_model *m, int64_t batch, size_t *io)
{
    if (io)
        *io = 0;
    int n = m->graph->n_inputs;
    slim_tensor *sig = calloc((size_t)(n ? n : 1), sizeof(*sig));
    if (!sig || !signature(m, batch, sig)) {
        free(sig);
        return 0;
    }
    slim_plan *plan = NULL;
    slim_err err;
    size_t bytes = 0;
    if (!slim_plan_build(m, sig, &plan, &err)) {
        size_t extra = io_bytes(m, sig);
        bytes = plan->arena_bytes + extra;
        if (io)
            *io = extra;
        slim_plan_free(plan);
    }
    free(sig);
    return bytes;
}

void slim_model_footprint(const slim_model *m, int64_t max_batch, slim_footprint *out)
{
    memset(out, 0, sizeof(*out));
    if (max_batch < 1)
        max_batch = 1;
    out->max_batch = max_batch;
    weight_split(m->graph, &out->weight_bytes, &out->mapped_bytes);
    out->arena_bytes_1 = slim_model_run_bytes(m, 1, NULL);
    out->arena_bytes_max = max_batch == 1 ? out->arena_bytes_1
                                          : slim_model_run_bytes(m, max_batch, &out->io_bytes_max);
    if (max_batch == 1)
        slim_model_run_bytes(m, 1, &out->io_bytes_max);
    out->unplanned = out->arena_bytes_1 == 0 && m->graph->n_nodes > 0;
    /* CPU kernels take no scratch beyond their arena values; a GPU's cuBLAS
     * workspace is per instance, not per model (docs/memory.md). */
    out->workspace_bytes = 0;
    out->total_bytes = out->weight_bytes + out->arena_bytes_max + out->workspace_bytes;
}

slim_status slim_model_predict(const char *path, const slim_load_opts *opts, int64_t max_batch,
                               slim_footprint *out, slim_err *err)
{
    memset(out, 0, sizeof(*out));
    slim_init();
    /* The stages up to plan, without placing: the figures are the graph's
     * after compression and optimization, whatever device runs it. */
    static const slim_load_opts defaults;
    slim_load_ctx c = {.path = path};
    slim_status st = slim_pipeline_settings(opts ? opts : &defaults, &c, err);
    if (st)
        return st;
    if (!path || !path[0])
        return slim_errf(err, SLIM_EINVAL, "no model path given");
    slim_mem_account *acct = slim_mem_account_new("prediction", 0);
    if (!acct)
        return slim_errf(err, SLIM_ENOMEM, "out of memory predicting %s", path);
    slim_mem_account *prev = slim_mem_account_enter(acct);
    slim_graph *g = NULL;
    slim_model *m = NULL;
    /* int8 with max_error keeps layers by their measured error: the same
     * samples as a load, or the prediction would quantize other layers. */
    st = slim_pipeline_samples(&c, err);
    if (!st)
        st = slim_pipeline_read(path, &g, err);
    if (!st)
        st = slim_pipeline_compress(g, &c, err);
    if (!st)
        st = slim_pipeline_optimize(g, &c, err);
    if (!st)
        st = slim_pipeline_plan(g, &c, acct, &m, err);
    if (!st)
        slim_model_footprint(m, max_batch, out);
    slim_model_free(m);
    slim_int8_samples_free(&c.samples);
    slim_mem_account_enter(prev);
    slim_mem_account_unref(acct);
    return st;
}
