/* model.c - loading models and describing their inputs and outputs. */
#include "kernel.h"
#include "model.h"
#include "plan.h"
#include "device.h"
#include "fp16.h"
#include "half.h"
#include "int8.h"
#include "pass.h"
#include "prune.h"
#include "rewrite.h"
#include "slim_format.h"
#include "file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

bool slim_model_file_is_slim(const char *path)
{
    unsigned char head[SLIM_FORMAT_MAGIC_LEN];
    int fd;
    size_t size;
    /* Not a regular file: the loader that opens it next says so. */
    if (slim_file_open_regular(path, "model", &fd, &size, NULL) != SLIM_OK)
        return false;
    ssize_t n = read(fd, head, sizeof(head));
    close(fd);
    return n > 0 && slim_format_sniff(head, (size_t)n);
}

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

/* A node the int8 or half pass was told to leave float32 (by name or op
 * type): merging it with others would take its name away. */
static bool named_excluded(const slim_node *n, void *user)
{
    const slim_load_opts *o = user;
    return o && (slim_rewrite_named(o->int8_exclude, o->n_int8_exclude, n) ||
                 slim_rewrite_named(o->half_exclude, o->n_half_exclude, n));
}

static bool int8_group_ok(const slim_tensor *const *w, int n, void *user)
{
    (void)user;
    return slim_int8_same_outliers(w, n);
}

slim_status slim_model_load(const char *path, const slim_load_opts *opts,
                            slim_model **out, slim_err *err)
{
    *out = NULL;
    slim_dtype half = SLIM_DTYPE_UNDEFINED;
    const char *prec = opts && opts->precision ? opts->precision : "fp32";
    /* fp32-strict is fp32 to every pass; only a GPU's products read it. */
    bool fp32_strict = strcmp(prec, "fp32-strict") == 0;
    slim_dtype pt = fp32_strict ? SLIM_F32 : float_type(prec);
    if (pt == SLIM_F16 || pt == SLIM_BF16)
        half = pt;
    bool int8 = strcmp(prec, "int8") == 0;
    if (!int8 && pt == SLIM_DTYPE_UNDEFINED)
        return slim_errf(err, SLIM_EINVAL, "unknown precision \"%s\" (expected fp32, fp32-strict, "
                         "fp16, bf16 or int8)", prec);
    /* Half activations ride on half weights of the same type. */
    slim_dtype act = opts && opts->activations ? float_type(opts->activations) : SLIM_F32;
    if (act == SLIM_DTYPE_UNDEFINED)
        return slim_errf(err, SLIM_EINVAL, "unknown activations \"%s\" (expected fp32, fp16 "
                         "or bf16)", opts->activations);
    if (act != SLIM_F32 && act != half)
        return slim_errf(err, SLIM_EINVAL, "activations \"%s\" need precision \"%s\" (the "
                         "weights' half type), not \"%s\"", opts->activations,
                         act == SLIM_F16 ? "fp16" : "bf16", prec);
    slim_dtype fallback = SLIM_F32;
    if (opts && opts->int8_fallback && opts->int8_fallback[0]) {
        fallback = float_type(opts->int8_fallback);
        if (fallback == SLIM_DTYPE_UNDEFINED)
            return slim_errf(err, SLIM_EINVAL, "unknown int8 fallback \"%s\" (expected fp32, "
                             "fp16 or bf16)", opts->int8_fallback);
    }
    slim_device *dev = NULL;
    if (opts && opts->device) {
        slim_status st = slim_device_get(opts->device, &dev, err);
        if (st)
            return st;
    }
    /* On CUDA with activations unset, fp16 / bf16 keeps meaning the whole
     * graph in half (its kernels take half operands); elsewhere it means
     * half weights with float32 activations, plus the whole-graph pass when
     * activations are half too. */
    bool gpu_half = half != SLIM_DTYPE_UNDEFINED && !opts->activations &&
                    (!slim_device_is_host(dev) || opts->half_whole_graph);
    bool whole_half = half != SLIM_DTYPE_UNDEFINED && (act != SLIM_F32 || gpu_half);
    slim_dtype weights_half = half != SLIM_DTYPE_UNDEFINED && !gpu_half
                                  ? half
                                  : int8 && fallback != SLIM_F32 ? fallback
                                                                  : SLIM_DTYPE_UNDEFINED;
    if (!path || !path[0])
        return slim_errf(err, SLIM_EINVAL, "no model path given");
    /* The weights are charged to the model's account as they are read. */
    const char *base = strrchr(path, '/');
    char label[128];
    snprintf(label, sizeof(label), "model \"%s\"", base ? base + 1 : path);
    slim_mem_account *acct = slim_mem_account_new(label, 0);
    if (!acct)
        return slim_errf(err, SLIM_ENOMEM, "out of memory loading %s", path);
    slim_mem_account *prev = slim_mem_account_enter(acct);
    slim_graph *g = NULL;
    /* The error check's samples come from a float32 run of its own copy of
     * the model, done and freed before this load holds any weights. */
    slim_int8_samples samples = {0};
    slim_status st = SLIM_OK;
    char unmeasured[sizeof(((slim_int8_report *)0)->unmeasured)] = "";
    if (int8 && (opts->int8_measure || opts->int8_max_error > 0)) {
        st = slim_int8_capture(path, opts->n_int8_samples, opts->int8_sample_names,
                               opts->int8_samples, &samples, err);
        /* A budget needs the measurements; a report (inspect) does without
         * and says why. */
        if (st && opts->int8_max_error > 0)
            slim_err_prefix(err, "int8 max_error: measuring the layers' error: ");
        else if (st && st != SLIM_ENOMEM) {
            size_t n = strnlen(err->msg, sizeof(unmeasured) - 1);
            memcpy(unmeasured, err->msg, n);
            unmeasured[n] = '\0';
            st = SLIM_OK;
        }
    }
    /* The format is told by its magic number, not the file's name. */
    if (!st)
        st = slim_model_file_is_slim(path) ? slim_format_load_file(path, &g, err)
                                           : slim_onnx_load_file(path, &g, err);
    /* Pruning first: the precision passes then see the pruned layers as
     * com.slimserve operators (left sparse float) and the rest as before. */
    if (!st && opts && opts->prune) {
        st = slim_prune(g, opts->prune, opts->prune->report, err);
        if (st) {
            slim_graph_free(g);
            g = NULL;
        }
    }
    /* Q, K and V as one product before the precision passes, which then
     * quantize or narrow it whole; on the host only, where FusedAttention
     * reads the merged result in place (a GPU would run the Split), and
     * not for a caller that wants the graph as written (inspect). */
    if (!st && slim_device_is_host(dev) && !whole_half &&
        !(opts && opts->no_passes && !opts->pack_matmul)) {
        int merged;
        slim_merge_hooks hooks = {named_excluded, int8 ? int8_group_ok : NULL, (void *)opts};
        st = slim_pass_merge_qkv(g, &hooks, &merged, err);
        if (st) {
            slim_graph_free(g);
            g = NULL;
        }
    }
    if (!st && int8) {
        slim_int8_opts io = {opts->int8_exclude, opts->n_int8_exclude, &samples,
                             opts->int8_max_error, false};
        st = slim_quant_int8(g, &io, opts->int8_report, err);
        if (!st && opts->int8_report)
            snprintf(opts->int8_report->unmeasured, sizeof(opts->int8_report->unmeasured), "%s",
                     unmeasured);
        if (st) {
            slim_graph_free(g);
            g = NULL;
        }
    }
    slim_int8_samples_free(&samples);
    /* After int8, so that with a fallback it converts what int8 left. */
    if (!st && weights_half != SLIM_DTYPE_UNDEFINED) {
        slim_half_opts ho = {weights_half, opts->half_exclude, opts->n_half_exclude};
        st = slim_quant_half_weights(g, &ho, opts->half_report, err);
        if (st) {
            slim_graph_free(g);
            g = NULL;
        }
    }
    /* On a GPU the whole graph goes half after the optimization passes,
     * which match float32 graphs (GELU's constants, BatchNormalization
     * folded into a convolution's weights): fused first, then narrowed. */
    if (!st && whole_half && !gpu_half) {
        st = slim_quant_half_activations(g, half, err);
        if (st) {
            slim_graph_free(g);
            g = NULL;
        }
    }
    /* The optimization passes see what int8 / half left in float32, and
     * half convolutions as float32 ones, made half again after. */
    if (!st && opts && opts->no_passes && opts->pack_matmul) {
        st = slim_pass_pack_matmul(g, err);
        if (st) {
            slim_graph_free(g);
            g = NULL;
        }
    }
    if (!st && !(opts && opts->no_passes)) {
        slim_dtype conv_half = SLIM_DTYPE_UNDEFINED;
        slim_half_opts cho = {SLIM_DTYPE_UNDEFINED, opts ? opts->half_exclude : NULL,
                              opts ? opts->n_half_exclude : 0};
        st = slim_half_conv_widen(g, &conv_half, err);
        if (!st)
            st = slim_device_is_host(dev) ? slim_passes_run_for(g, true, err)
                                          : slim_passes_run_gpu(g, gpu_half, err);
        if (!st && conv_half != SLIM_DTYPE_UNDEFINED) {
            cho.half = conv_half;
            st = slim_half_conv_narrow(g, conv_half, &cho, err);
        }
        if (st) {
            slim_graph_free(g);
            g = NULL;
        }
    }
    /* Converting on the host for a GPU (the server's conversion cache,
     * which asks for no passes: the file should not hold this CPU's
     * layouts): the GPU's passes match float32 only, and the GPU load will
     * see a half graph, so they run here, before the graph goes half. */
    if (!st && gpu_half) {
        if (slim_device_is_host(dev) && opts->no_passes)
            st = slim_passes_run_gpu(g, true, err);
        if (!st)
            st = slim_quant_half(g, half, NULL, err);
        if (st) {
            slim_graph_free(g);
            g = NULL;
        }
    }
    if (!st)
        st = slim_model_from_graph(g, out, err);
    if (!st) {
        slim_mem_account_unref((*out)->account);
        (*out)->account = acct;
        slim_mem_account_ref(acct);
        (*out)->fp32_strict = fp32_strict;
        st = slim_model_place(*out, dev, err);
        if (st) {
            slim_model_free(*out);
            *out = NULL;
        }
    }
    slim_mem_account_enter(prev);
    if (st) {
        slim_mem_account_unref(acct);
        return st;
    }
    slim_mem_account_unref(acct); /* the model holds its own reference */
    (*out)->path = strdup(path);
    if (!(*out)->path) {
        slim_model_free(*out);
        *out = NULL;
        return slim_errf(err, SLIM_ENOMEM, "out of memory loading %s", path);
    }
    return SLIM_OK;
}

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
    if (!m->nested)
        slim_graph_free(m->graph);
    slim_mem_account_unref(m->account);
    free(m->inputs);
    free(m->outputs);
    free(m->path);
    free(m);
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
