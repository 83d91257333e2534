/* model.c - the model object: a finalized graph wrapped with its plans,
 * and what it says about its inputs and outputs. Loading a file is the
 * load pipeline's (pipeline/load.c). */
#include "model.h"
#include "parallel.h" /* slim_num_threads */
#include "plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

slim_status slim_model_from_graph(slim_graph *g, slim_model **out, slim_err *err)
{
    *out = NULL;
    slim_status st = slim_graph_finalize(g, err);
    if (st) {
        slim_graph_free(g);
        return st;
    }
    slim_num_threads(); /* starts the kernel threads, caps BLAS threads */
    slim_model *m = calloc(1, sizeof(*m));
    if (!m) {
        slim_graph_free(g);
        return slim_errf(err, SLIM_ENOMEM, "out of memory creating the model");
    }
    m->graph = g;
    m->account = slim_mem_account_new("model", 0);
    m->plans = slim__plan_cache_new();
    if (!m->account || !m->plans) {
        slim_model_free(m);
        return slim_errf(err, SLIM_ENOMEM, "out of memory creating the model");
    }
    slim_status st2 = slim__model_refresh(m, err);
    if (st2) {
        slim_model_free(m);
        return st2;
    }
    *out = m;
    return SLIM_OK;
}

slim_status slim__model_from_subgraph(slim_graph *g, slim_model **out, slim_err *err)
{
    *out = NULL;
    slim_status st = slim_graph_finalize(g, err);
    if (st)
        return st;
    slim_model *m = calloc(1, sizeof(*m));
    if (!m)
        return slim_errf(err, SLIM_ENOMEM, "out of memory creating a subgraph's model");
    m->graph = g;
    m->nested = true;
    m->plans = slim__plan_cache_new();
    if (!m->plans || (st = slim__model_refresh(m, err))) {
        m->graph = NULL;
        slim_model_free(m);
        return st ? st : slim_errf(err, SLIM_ENOMEM, "out of memory creating a subgraph's model");
    }
    *out = m;
    return SLIM_OK;
}

/* Weights of g and of its subgraphs (If/Loop/Scan bodies hold their own). */
static void count_weights(const slim_graph *g, int64_t *params, size_t *bytes,
                          size_t *by_dtype)
{
    for (int v = 0; v < g->n_values; v++) {
        const slim_value *val = &g->values[v];
        if (val->kind != SLIM_VALUE_INITIALIZER)
            continue;
        /* A weight held on the host and on a GPU counts once per copy in
         * bytes (both are memory) and once in parameters. */
        if (!strchr(val->name, '@'))
            *params += slim_tensor_numel(&val->init);
        *bytes += slim_tensor_nbytes(&val->init);
        if (val->init.dtype > SLIM_DTYPE_UNDEFINED && val->init.dtype < SLIM_DTYPE_COUNT)
            by_dtype[val->init.dtype] += slim_tensor_nbytes(&val->init);
    }
    for (int i = 0; i < g->n_nodes; i++)
        for (int a = 0; a < g->nodes[i].n_attrs; a++)
            if (g->nodes[i].attrs[a].type == SLIM_ATTR_GRAPH && g->nodes[i].attrs[a].g)
                count_weights(g->nodes[i].attrs[a].g, params, bytes, by_dtype);
}

slim_status slim__model_refresh(slim_model *m, slim_err *err)
{
    const slim_graph *g = m->graph;
    free(m->inputs);
    free(m->outputs);
    m->inputs = calloc(g->n_inputs ? g->n_inputs : 1, sizeof(slim_io_info));
    m->outputs = calloc(g->n_outputs ? g->n_outputs : 1, sizeof(slim_io_info));
    if (!m->inputs || !m->outputs)
        return slim_errf(err, SLIM_ENOMEM, "out of memory creating the model");
    for (int i = 0; i < g->n_inputs; i++)
        m->inputs[i] = g->values[g->inputs[i]].info;
    for (int i = 0; i < g->n_outputs; i++)
        m->outputs[i] = g->values[g->outputs[i]].info;
    m->param_count = 0;
    m->weight_bytes = 0;
    memset(m->weight_bytes_by_dtype, 0, sizeof(m->weight_bytes_by_dtype));
    count_weights(g, &m->param_count, &m->weight_bytes, m->weight_bytes_by_dtype);
    return SLIM_OK;
}

void slim_model_free(slim_model *m)
{
    if (!m)
        return;
    slim__plan_cache_free(m->plans);
    bool top = !m->nested;
    if (top)
        slim_graph_free(m->graph);
    slim_mem_account_unref(m->account);
    free(m->inputs);
    free(m->outputs);
    free(m->path);
    free(m);
    /* Its weights' segments (and a .slim file's mapping, unmapped as its
     * last tensor went) are memory nothing else uses: back to the system
     * now. A subgraph's model goes with its parent, which gives back. */
    if (top)
        slim_memory_give_back();
}

int slim_model_num_inputs(const slim_model *m)
{
    return m->graph->n_inputs;
}

int slim_model_num_outputs(const slim_model *m)
{
    return m->graph->n_outputs;
}

const slim_io_info *slim_model_input(const slim_model *m, int i)
{
    return (i >= 0 && i < m->graph->n_inputs) ? &m->inputs[i] : NULL;
}

const slim_io_info *slim_model_output(const slim_model *m, int i)
{
    return (i >= 0 && i < m->graph->n_outputs) ? &m->outputs[i] : NULL;
}

slim_status slim_model_set_memory_limit(slim_model *m, size_t bytes, slim_err *err)
{
    size_t held = atomic_load(&m->account->current);
    if (bytes && held > bytes) {
        char a[32], b[32];
        return slim_errf(err, SLIM_EOOM, "memory limit %s is below the %s the model's weights "
                         "already take", slim_format_bytes(bytes, a, sizeof(a)),
                         slim_format_bytes(held, b, sizeof(b)));
    }
    atomic_store(&m->account->limit, bytes);
    return SLIM_OK;
}

void slim_model_set_batch_invariant(slim_model *m, bool on)
{
    m->batch_invariant = on;
}

void slim_model_set_fp32_strict(slim_model *m, bool on)
{
    m->fp32_strict = on;
}
