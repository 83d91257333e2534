/*
 * config_model.c - a parsed config.json meets its model: the inputs and
 * outputs it declares are checked against the model's and the ones left
 * out filled in (slim_server_config_resolve); the result is shown back by
 * GET /v2/models/{m}/config, and freed. config.c parses the file.
 */
#include "codec.h"
#include "config.h"

#include <stdlib.h>
#include <string.h>

/* ---- resolving against the model ---------------------------------------- */

static const slim_server_io *find_io(const slim_server_io *ios, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(ios[i].name, name) == 0)
            return &ios[i];
    return NULL;
}

/* Builds the resolved entry for one model input/output from its info and,
 * when present, the declaration in config.json. */
static slim_status resolve_one(const slim_server_config *cfg, const char *kind,
                               const slim_io_info *info, const slim_server_io *decl,
                               slim_server_io *out, slim_err *err)
{
    int batch = cfg->max_batch_size > 0;
    if (!(out->name = strdup(info->name)))
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    out->dtype = info->dtype;
    out->ndim = info->ndim < 0 ? -1 : info->ndim - batch;
    if (info->ndim >= 0 && batch) {
        if (info->ndim == 0)
            return slim_errf(err, SLIM_EINVAL,
                             "config.json: max_batch_size is %d but %s \"%s\" is a scalar (no batch dimension)",
                             cfg->max_batch_size, kind, info->name);
        if (info->dims[0] >= 0 && strcmp(kind, "input") == 0)
            return slim_errf(err, SLIM_EINVAL,
                             "config.json: max_batch_size is %d but the first dimension of input \"%s\" "
                             "is fixed at %lld; batching needs a dynamic first dimension (or max_batch_size 0)",
                             cfg->max_batch_size, info->name, (long long)info->dims[0]);
    }
    for (int i = 0; i < out->ndim; i++)
        out->dims[i] = info->dims[i + batch] >= 0 ? info->dims[i + batch] : -1;
    if (!decl)
        return SLIM_OK;
    if (decl->label_filename && !(out->label_filename = strdup(decl->label_filename)))
        return slim_errf(err, SLIM_ENOMEM, "out of memory");

    if (info->dtype != SLIM_DTYPE_UNDEFINED && decl->dtype != info->dtype)
        return slim_errf(err, SLIM_EINVAL, "config.json: %s \"%s\" is declared %s but the model has %s",
                         kind, info->name, slim_server_dtype_triton(decl->dtype),
                         slim_server_dtype_triton(info->dtype) ? slim_server_dtype_triton(info->dtype)
                                                               : slim_dtype_name(info->dtype));
    if (out->ndim >= 0 && decl->ndim != out->ndim)
        return slim_errf(err, SLIM_EINVAL,
                         "config.json: %s \"%s\" is declared with %d dims but the model has %d%s",
                         kind, info->name, decl->ndim, out->ndim,
                         batch ? " (not counting the batch dimension)" : "");
    for (int i = 0; out->ndim >= 0 && i < out->ndim; i++)
        if (out->dims[i] >= 0 && decl->dims[i] >= 0 && out->dims[i] != decl->dims[i])
            return slim_errf(err, SLIM_EINVAL,
                             "config.json: %s \"%s\" dims[%d] is declared %lld but the model has %lld",
                             kind, info->name, i, (long long)decl->dims[i], (long long)out->dims[i]);
    /* The declaration may pin a dimension the model leaves dynamic. */
    out->ndim = decl->ndim;
    memcpy(out->dims, decl->dims, sizeof(out->dims));
    for (int i = 0; info->ndim >= 0 && i < out->ndim; i++)
        if (out->dims[i] < 0 && info->dims[i + batch] >= 0)
            out->dims[i] = info->dims[i + batch];
    return SLIM_OK;
}

static slim_status resolve_list(const slim_server_config *cfg, const char *kind, int n_model,
                                const slim_io_info *(*get)(const slim_model *, int),
                                const slim_model *m, slim_server_io **ios, int *n_ios,
                                slim_err *err)
{
    for (int d = 0; d < *n_ios; d++) {
        bool found = false;
        for (int i = 0; i < n_model && !found; i++)
            found = strcmp(get(m, i)->name, (*ios)[d].name) == 0;
        if (!found)
            return slim_errf(err, SLIM_EINVAL, "config.json: %s \"%s\" is not an %s of the model",
                             kind, (*ios)[d].name, kind);
    }
    slim_server_io *res = calloc((size_t)(n_model ? n_model : 1), sizeof(*res));
    if (!res)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    slim_status s = SLIM_OK;
    for (int i = 0; i < n_model && s == SLIM_OK; i++)
        s = resolve_one(cfg, kind, get(m, i), find_io(*ios, *n_ios, get(m, i)->name), &res[i], err);
    for (int i = 0; i < *n_ios; i++)
        slim_server_io_free(&(*ios)[i]);
    free(*ios);
    *ios = res;
    *n_ios = n_model;
    return s;
}

slim_status slim_server_config_resolve(slim_server_config *cfg, const slim_model *m,
                                       slim_err *err)
{
    slim_status s = resolve_list(cfg, "input", slim_model_num_inputs(m), slim_model_input, m,
                                 &cfg->inputs, &cfg->n_inputs, err);
    if (s == SLIM_OK)
        s = resolve_list(cfg, "output", slim_model_num_outputs(m), slim_model_output, m,
                         &cfg->outputs, &cfg->n_outputs, err);
    return s;
}

/* ---- showing it back ---------------------------------------------------- */

static cJSON *io_list_json(const slim_server_io *ios, int n)
{
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; arr && i < n; i++) {
        cJSON *o = cJSON_CreateObject(), *dims = cJSON_CreateArray();
        if (!o || !dims) {
            cJSON_Delete(o);
            cJSON_Delete(dims);
            cJSON_Delete(arr);
            return NULL;
        }
        cJSON_AddItemToArray(arr, o);
        cJSON_AddStringToObject(o, "name", ios[i].name);
        const char *t = slim_server_dtype_triton(ios[i].dtype);
        cJSON_AddStringToObject(o, "data_type", t ? t : "TYPE_INVALID");
        cJSON_AddItemToObject(o, "dims", dims);
        if (ios[i].ndim < 0)
            cJSON_AddItemToArray(dims, cJSON_CreateNumber(-1));
        for (int d = 0; d < ios[i].ndim; d++)
            cJSON_AddItemToArray(dims, cJSON_CreateNumber((double)ios[i].dims[d]));
        if (ios[i].label_filename)
            cJSON_AddStringToObject(o, "label_filename", ios[i].label_filename);
    }
    return arr;
}

/* As written: a size, or an object by device when any device has one. */
static void add_memory_limit_json(cJSON *o, const slim_server_config *cfg)
{
    bool by_device = false;
    for (int i = 0; i < SLIM_MEM_DEVICE_SLOTS; i++)
        by_device |= cfg->device_limits[i] != 0;
    if (!by_device) {
        if (cfg->memory_limit)
            cJSON_AddNumberToObject(o, "memory_limit", (double)cfg->memory_limit);
        return;
    }
    cJSON *l = cJSON_AddObjectToObject(o, "memory_limit");
    if (!l)
        return;
    if (cfg->memory_limit)
        cJSON_AddNumberToObject(l, "total", (double)cfg->memory_limit);
    for (int i = 0; i < SLIM_MEM_DEVICE_SLOTS; i++) {
        char name[16];
        if (cfg->device_limits[i])
            cJSON_AddNumberToObject(l, slim_mem_device_slot_name(i, name, sizeof(name)),
                                    (double)cfg->device_limits[i]);
    }
}

/* Triton's shape of instance_count and device, for its clients: one
 * group (KIND_AUTO: the server's --device). */
static void add_instance_group_json(cJSON *o, const slim_server_config *cfg)
{
    cJSON *groups = cJSON_AddArrayToObject(o, "instance_group");
    cJSON *g = cJSON_CreateObject();
    if (!groups || !g || !cJSON_AddItemToArray(groups, g)) {
        cJSON_Delete(g);
        return;
    }
    const char *dev = cfg->device;
    cJSON_AddStringToObject(g, "name", cfg->name);
    cJSON_AddStringToObject(g, "kind", !dev ? "KIND_AUTO"
                                       : strcmp(dev, "cpu") == 0 ? "KIND_CPU" : "KIND_GPU");
    cJSON_AddNumberToObject(g, "count", cfg->instance_count);
    cJSON *gpus = cJSON_AddArrayToObject(g, "gpus");
    if (gpus && dev && strncmp(dev, "cuda:", 5) == 0)
        cJSON_AddItemToArray(gpus, cJSON_CreateNumber(atoi(dev + 5)));
}

cJSON *slim_server_config_to_json(const slim_server_config *cfg)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "name", cfg->name);
    cJSON_AddStringToObject(o, "platform", cfg->platform);
    cJSON_AddStringToObject(o, "backend", "onnxruntime");
    cJSON_AddNumberToObject(o, "max_batch_size", cfg->max_batch_size);
    cJSON_AddItemToObject(o, "input", io_list_json(cfg->inputs, cfg->n_inputs));
    cJSON_AddItemToObject(o, "output", io_list_json(cfg->outputs, cfg->n_outputs));
    cJSON_AddNumberToObject(o, "instance_count", cfg->instance_count);
    add_instance_group_json(o, cfg);
    add_memory_limit_json(o, cfg);
    if (cfg->request_timeout_ms)
        cJSON_AddNumberToObject(o, "request_timeout_ms", (double)cfg->request_timeout_ms);
    if (cfg->device)
        cJSON_AddStringToObject(o, "device", cfg->device);
    if (cfg->precision)
        cJSON_AddStringToObject(o, "precision", cfg->precision);
    if (cfg->activations)
        cJSON_AddStringToObject(o, "activations", cfg->activations);
    if (cfg->convert)
        cJSON_AddBoolToObject(o, "convert", cfg->convert > 0);
    cJSON_AddItemToObject(o, "version_policy", slim_server_version_policy_to_json(&cfg->versions));
    for (const cJSON *k = cfg->reserved ? cfg->reserved->child : NULL; k; k = k->next)
        cJSON_AddItemToObject(o, k->string, cJSON_Duplicate(k, true));
    return o;
}

void slim_server_config_free(slim_server_config *cfg)
{
    for (int i = 0; i < cfg->n_inputs; i++)
        slim_server_io_free(&cfg->inputs[i]);
    for (int i = 0; i < cfg->n_outputs; i++)
        slim_server_io_free(&cfg->outputs[i]);
    free(cfg->inputs);
    free(cfg->outputs);
    free(cfg->name);
    free(cfg->device);
    free(cfg->precision);
    for (int i = 0; i < cfg->n_int8_exclude; i++)
        free(cfg->int8_exclude[i]);
    free(cfg->int8_exclude);
    free(cfg->prune_method);
    free(cfg->prune_masks);
    free(cfg->prune_storage);
    for (int i = 0; i < cfg->n_prune_ops; i++)
        free(cfg->prune_ops[i]);
    free(cfg->prune_ops);
    free(cfg->int8_fallback);
    for (int i = 0; i < cfg->n_half_exclude; i++)
        free(cfg->half_exclude[i]);
    free(cfg->half_exclude);
    free(cfg->activations);
    free(cfg->platform);
    cJSON_Delete(cfg->reserved);
    free(cfg->versions.versions);
    memset(cfg, 0, sizeof(*cfg));
}
