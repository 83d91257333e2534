/*
 * config.c - a model's config.json, parsed (config_model.c checks it against
 * the model and shows it back by GET /v2/models/{m}/config; datatype.c has
 * the "TYPE_FP32" names).
 *
 *     {"name": "mlp", "platform": "onnx", "max_batch_size": 32,
 *      "input":  [{"name": "input", "data_type": "TYPE_FP32", "dims": [784]}],
 *      "output": [{"name": "probs", "data_type": "TYPE_FP32", "dims": [10]}],
 *      "instance_count": 1}
 *
 * As in Triton, "dims" leave out the batch dimension when max_batch_size > 0.
 * "dynamic_batching" takes Triton's keys (max_queue_delay_microseconds,
 * preferred_batch_size, default_queue_policy) and oom_probe_after; see
 * batcher.c for what they do. instance_count and max_queue_size default to
 * the server's --workers and --queue-size (filled in by repository.c).
 * "instance_group" is Triton's (config_triton.c): instance_count and device
 * where those keys are not given.
 * "version_policy" is Triton's (version_policy.c). "request_timeout_ms" is
 * slimserve's own: every request's deadline, queue plus run (batcher.c).
 * Unknown keys and wrong types are errors naming the key: a typo that is
 * silently ignored is a setting the user believes in and does not have.
 */
#include "alloc.h"
#include "codec.h"
#include "config.h"
#include "warmup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- parsing ------------------------------------------------------------ */

static bool is_int(const cJSON *v, double lo, double hi)
{
    /* Range first: converting a double beyond int64 is undefined. */
    return cJSON_IsNumber(v) && v->valuedouble >= lo && v->valuedouble <= hi &&
           v->valuedouble == (double)(int64_t)v->valuedouble;
}

/* One {"name", "data_type", "dims"} entry of "input" or "output". */
static slim_status parse_io(const cJSON *obj, const char *where, slim_server_io *io,
                            slim_err *err)
{
    if (!cJSON_IsObject(obj))
        return slim_errf(err, SLIM_EINVAL, "config.json: %s: expected an object", where);
    io->ndim = -1;
    bool have_dims = false;
    for (const cJSON *k = obj->child; k; k = k->next) {
        if (strcmp(k->string, "name") == 0) {
            if (!cJSON_IsString(k) || !k->valuestring[0])
                return slim_errf(err, SLIM_EINVAL, "config.json: %s.name: expected a non-empty string", where);
            if (io->name)
                return slim_errf(err, SLIM_EINVAL, "config.json: %s: \"name\" is given twice", where);
            if (!(io->name = strdup(k->valuestring)))
                return slim_errf(err, SLIM_ENOMEM, "out of memory");
        } else if (strcmp(k->string, "data_type") == 0) {
            io->dtype = cJSON_IsString(k) ? slim_server_dtype_from_triton(k->valuestring)
                                          : SLIM_DTYPE_UNDEFINED;
            if (io->dtype == SLIM_DTYPE_UNDEFINED)
                return slim_errf(err, SLIM_EINVAL,
                                 "config.json: %s.data_type: expected a type such as \"TYPE_FP32\"",
                                 where);
        } else if (strcmp(k->string, "label_filename") == 0 && strncmp(where, "output", 6) == 0) {
            /* relative to the model's folder, and inside it */
            if (!cJSON_IsString(k) || !k->valuestring[0] || k->valuestring[0] == '/' ||
                strstr(k->valuestring, ".."))
                return slim_errf(err, SLIM_EINVAL, "config.json: %s.label_filename: expected a "
                                 "file name inside the model's folder (no leading '/', no '..')",
                                 where);
            free(io->label_filename);
            if (!(io->label_filename = strdup(k->valuestring)))
                return slim_errf(err, SLIM_ENOMEM, "out of memory");
        } else if (strcmp(k->string, "dims") == 0) {
            int n = cJSON_GetArraySize(k);
            if (!cJSON_IsArray(k) || n > SLIM_MAX_DIMS)
                return slim_errf(err, SLIM_EINVAL, "config.json: %s.dims: expected a list of at most %d integers",
                                 where, SLIM_MAX_DIMS);
            io->ndim = 0;
            for (const cJSON *d = k->child; d; d = d->next) {
                if (!is_int(d, -1, 1e15) || d->valuedouble == 0)
                    return slim_errf(err, SLIM_EINVAL,
                                     "config.json: %s.dims: each dim must be a positive integer or -1", where);
                io->dims[io->ndim++] = (int64_t)d->valuedouble;
            }
            have_dims = true;
        } else {
            return slim_errf(err, SLIM_EINVAL, "config.json: %s: unknown key \"%s\"", where, k->string);
        }
    }
    if (!io->name)
        return slim_errf(err, SLIM_EINVAL, "config.json: %s: \"name\" is required", where);
    if (io->dtype == SLIM_DTYPE_UNDEFINED)
        return slim_errf(err, SLIM_EINVAL, "config.json: %s (\"%s\"): \"data_type\" is required", where, io->name);
    if (!have_dims)
        return slim_errf(err, SLIM_EINVAL, "config.json: %s (\"%s\"): \"dims\" is required", where, io->name);
    return SLIM_OK;
}

static slim_status parse_io_list(const cJSON *arr, const char *key, slim_server_io **out,
                                 int *n_out, slim_err *err)
{
    if (!cJSON_IsArray(arr))
        return slim_errf(err, SLIM_EINVAL, "config.json: \"%s\": expected a list", key);
    if (*out)
        return slim_errf(err, SLIM_EINVAL, "config.json: \"%s\" is given twice", key);
    int n = cJSON_GetArraySize(arr);
    if (n == 0)
        return SLIM_OK;
    if (!(*out = calloc((size_t)n, sizeof(**out))))
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    *n_out = n;
    int i = 0;
    for (const cJSON *e = arr->child; e; e = e->next, i++) {
        char where[64];
        snprintf(where, sizeof(where), "%s[%d]", key, i);
        slim_status s = parse_io(e, where, &(*out)[i], err);
        if (s != SLIM_OK)
            return s;
        for (int j = 0; j < i; j++)
            if (strcmp((*out)[j].name, (*out)[i].name) == 0)
                return slim_errf(err, SLIM_EINVAL, "config.json: %s: \"%s\" is declared twice", key,
                                 (*out)[i].name);
    }
    return SLIM_OK;
}

/* A number of bytes, or text such as "512MiB"; 0 means no limit. where
 * names the key in messages. */
static slim_status parse_bytes_value(const cJSON *k, const char *where, size_t *out, slim_err *err)
{
    if (cJSON_IsNumber(k)) {
        if (!is_int(k, 0, 9.0e18))
            return slim_errf(err, SLIM_EINVAL, "config.json: %s: expected a whole number of "
                             "bytes >= 0 or a string such as \"512MiB\"", where);
        *out = (size_t)k->valuedouble;
        return SLIM_OK;
    }
    if (!cJSON_IsString(k))
        return slim_errf(err, SLIM_EINVAL, "config.json: %s: expected a number of bytes or a "
                         "string such as \"512MiB\"", where);
    if (!slim_parse_bytes(k->valuestring, out, err))
        return slim_err_prefix(err, "config.json: %s: ", where);
    return SLIM_OK;
}

/* "memory_limit": what the model may hold in all (a size), or an object
 * of sizes by device ("cpu", "cuda:N") with "total" for the sum. */
static slim_status parse_memory_limit(const cJSON *k, slim_server_config *cfg, slim_err *err)
{
    if (!cJSON_IsObject(k))
        return parse_bytes_value(k, "\"memory_limit\"", &cfg->memory_limit, err);
    const cJSON *d;
    cJSON_ArrayForEach(d, k) {
        char where[96];
        snprintf(where, sizeof(where), "\"memory_limit\": \"%.60s\"", d->string);
        if (strcmp(d->string, "total") == 0) {
            if (parse_bytes_value(d, where, &cfg->memory_limit, err) != SLIM_OK)
                return err->status;
            continue;
        }
        int slot = slim_mem_device_slot(d->string);
        if (slot < 0)
            return slim_errf(err, SLIM_EINVAL, "config.json: %s: not a device; expected \"total\", "
                             "\"cpu\" or \"cuda:N\" (N from 0 to %d)", where,
                             SLIM_MEM_DEVICE_SLOTS - 2);
        if (parse_bytes_value(d, where, &cfg->device_limits[slot], err) != SLIM_OK)
            return err->status;
    }
    return SLIM_OK;
}

/* ---- dynamic_batching -------------------------------------------------- */

/* An integer from lo to hi, or an error naming where it sits. */
static slim_status get_int(const cJSON *k, const char *where, double lo, double hi,
                           int64_t *out, slim_err *err)
{
    if (!is_int(k, lo, hi))
        return slim_errf(err, SLIM_EINVAL, "config.json: %s: expected an integer from %.0f to %.0f",
                         where, lo, hi);
    *out = (int64_t)k->valuedouble;
    return SLIM_OK;
}

static int cmp_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

static slim_status parse_preferred(const cJSON *k, slim_server_batching *bt, slim_err *err)
{
    const char *where = "dynamic_batching.preferred_batch_size";
    if (!cJSON_IsArray(k) || cJSON_GetArraySize(k) > SLIM_SERVER_MAX_PREFERRED)
        return slim_errf(err, SLIM_EINVAL, "config.json: %s: expected a list of at most %d "
                         "batch sizes", where, SLIM_SERVER_MAX_PREFERRED);
    for (const cJSON *e = k->child; e; e = e->next) {
        int64_t v = 0;
        slim_status s = get_int(e, where, 1, 1 << 30, &v, err);
        if (s != SLIM_OK)
            return s;
        bt->preferred[bt->n_preferred++] = (int)v;
    }
    qsort(bt->preferred, (size_t)bt->n_preferred, sizeof(int), cmp_int);
    return SLIM_OK;
}

static slim_status parse_queue_policy(const cJSON *obj, slim_server_batching *bt, slim_err *err)
{
    if (!cJSON_IsObject(obj))
        return slim_errf(err, SLIM_EINVAL,
                         "config.json: dynamic_batching.default_queue_policy: expected an object");
    for (const cJSON *k = obj->child; k; k = k->next) {
        char where[128];
        snprintf(where, sizeof(where), "dynamic_batching.default_queue_policy.%.40s", k->string);
        int64_t v = 0;
        slim_status s = SLIM_OK;
        if (strcmp(k->string, "max_queue_size") == 0) {
            if ((s = get_int(k, where, 0, 1 << 20, &v, err)) == SLIM_OK)
                bt->max_queue_size = (int)v;
        } else if (strcmp(k->string, "default_timeout_microseconds") == 0) {
            if ((s = get_int(k, where, 0, 3.6e9, &v, err)) == SLIM_OK)
                bt->default_timeout_us = v;
        } else if (strcmp(k->string, "timeout_action") == 0) {
            if (cJSON_IsString(k) && strcmp(k->valuestring, "REJECT") == 0)
                bt->timeout_action = SLIM_SERVER_TIMEOUT_REJECT;
            else if (cJSON_IsString(k) && strcmp(k->valuestring, "DELAY") == 0)
                bt->timeout_action = SLIM_SERVER_TIMEOUT_DELAY;
            else
                return slim_errf(err, SLIM_EINVAL, "config.json: %s: expected \"REJECT\" or \"DELAY\"",
                                 where);
        } else if (strcmp(k->string, "allow_timeout_override") == 0) {
            if (!cJSON_IsBool(k))
                return slim_errf(err, SLIM_EINVAL, "config.json: %s: expected true or false", where);
            bt->allow_timeout_override = cJSON_IsTrue(k);
        } else {
            return slim_errf(err, SLIM_EINVAL, "config.json: dynamic_batching.default_queue_policy: "
                             "unknown key \"%s\"", k->string);
        }
        if (s != SLIM_OK)
            return s;
    }
    return SLIM_OK;
}

/* Triton's keys, plus oom_probe_after. Priorities are not supported: a
 * key that would be silently ignored is an error instead. */
static slim_status parse_dynamic_batching(const cJSON *obj, slim_server_batching *bt,
                                          slim_err *err)
{
    if (!cJSON_IsObject(obj))
        return slim_errf(err, SLIM_EINVAL, "config.json: \"dynamic_batching\": expected an object");
    bt->enabled = true;
    for (const cJSON *k = obj->child; k; k = k->next) {
        char where[96];
        snprintf(where, sizeof(where), "dynamic_batching.%.60s", k->string);
        int64_t v = 0;
        slim_status s = SLIM_OK;
        if (strcmp(k->string, "max_queue_delay_microseconds") == 0) {
            if ((s = get_int(k, where, 0, 6e7, &v, err)) == SLIM_OK)
                bt->max_queue_delay_us = v;
        } else if (strcmp(k->string, "preferred_batch_size") == 0) {
            s = parse_preferred(k, bt, err);
        } else if (strcmp(k->string, "default_queue_policy") == 0) {
            s = parse_queue_policy(k, bt, err);
        } else if (strcmp(k->string, "oom_probe_after") == 0) {
            if ((s = get_int(k, where, 1, 1e6, &v, err)) == SLIM_OK)
                bt->oom_probe_after = (int)v;
        } else if (strcmp(k->string, "priority_levels") == 0 ||
                   strcmp(k->string, "default_priority_level") == 0 ||
                   strcmp(k->string, "priority_queue_policy") == 0 ||
                   strcmp(k->string, "preserve_ordering") == 0) {
            return slim_errf(err, SLIM_EINVAL, "config.json: %s is not supported by slimserve",
                             where);
        } else {
            return slim_errf(err, SLIM_EINVAL, "config.json: dynamic_batching: unknown key \"%s\"",
                             k->string);
        }
        if (s != SLIM_OK)
            return s;
    }
    return SLIM_OK;
}

/* What can only be checked once every key is read. */
static slim_status check_batching(const slim_server_config *cfg, slim_err *err)
{
    const slim_server_batching *bt = &cfg->batching;
    if (!bt->enabled)
        return SLIM_OK;
    if (cfg->max_batch_size == 0)
        return slim_errf(err, SLIM_EINVAL, "config.json: \"dynamic_batching\" needs "
                         "\"max_batch_size\" > 0 (requests are merged along the batch dimension)");
    for (int i = 0; i < bt->n_preferred; i++)
        if (bt->preferred[i] > cfg->max_batch_size)
            return slim_errf(err, SLIM_EINVAL, "config.json: dynamic_batching.preferred_batch_size: "
                             "%d is larger than max_batch_size %d", bt->preferred[i],
                             cfg->max_batch_size);
    return SLIM_OK;
}

/* "device": "cpu" | "cuda" | "cuda:N"; "precision": "fp32" |
 * "fp32-strict" (no TF32 on a GPU) | "fp16" | "bf16" | "int8". Whether the device exists is known only when the model loads. */
static slim_status parse_placement(const cJSON *k, slim_server_config *cfg, slim_err *err)
{
    bool device = strcmp(k->string, "device") == 0;
    const char *v = cJSON_IsString(k) ? k->valuestring : NULL;
    bool ok = false;
    if (v && device) {
        char *end = NULL;
        ok = strcmp(v, "cpu") == 0 || strcmp(v, "cuda") == 0 ||
             (strncmp(v, "cuda:", 5) == 0 && v[5] >= '0' && v[5] <= '9' &&
              strtol(v + 5, &end, 10) < 1024 && end && !*end);
    } else if (v) {
        ok = strcmp(v, "fp32") == 0 || strcmp(v, "fp32-strict") == 0 ||
             strcmp(v, "fp16") == 0 || strcmp(v, "bf16") == 0 || strcmp(v, "int8") == 0;
    }
    if (!ok)
        return slim_errf(err, SLIM_EINVAL, "config.json: \"%s\": expected %s", k->string,
                         device ? "\"cpu\", \"cuda\" or \"cuda:N\""
                                : "\"fp32\", \"fp32-strict\", \"fp16\", \"bf16\" or \"int8\"");
    char *copy = strdup(v);
    if (!copy)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    char **dst = device ? &cfg->device : &cfg->precision;
    free(*dst);
    *dst = copy;
    return SLIM_OK;
}

/* "section": {"exclude": [names]}: a list of node names or op types,
 * replacing *names. */
static slim_status parse_name_list(const cJSON *e, const char *section, char ***names_out,
                                   int *n_out, slim_err *err)
{
    if (!cJSON_IsArray(e))
        return slim_errf(err, SLIM_EINVAL, "config.json: \"%s\": \"exclude\": expected an "
                         "array of node names or op types", section);
    int n = cJSON_GetArraySize(e);
    if (n > 4096)
        return slim_errf(err, SLIM_EINVAL, "config.json: \"%s\": \"exclude\": at most 4096 "
                         "names", section);
    char **names = calloc((size_t)(n ? n : 1), sizeof(char *));
    if (!names)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    int i = 0;
    for (const cJSON *s = e->child; s; s = s->next, i++)
        if (!cJSON_IsString(s) || !s->valuestring[0] || !(names[i] = strdup(s->valuestring))) {
            for (int j = 0; j < i; j++)
                free(names[j]);
            free(names);
            return cJSON_IsString(s) && s->valuestring[0]
                       ? slim_errf(err, SLIM_ENOMEM, "out of memory")
                       : slim_errf(err, SLIM_EINVAL, "config.json: \"%s\": \"exclude\"[%d]: "
                                   "expected a non-empty string", section, i);
        }
    for (int j = 0; j < *n_out; j++)
        free((*names_out)[j]);
    free(*names_out);
    *names_out = names;
    *n_out = n;
    return SLIM_OK;
}

/* A float type's name ("fp32", "fp16", "bf16") into *dst, or an error
 * naming the key. */
static slim_status parse_float_type(const cJSON *v, const char *key, char **dst, slim_err *err)
{
    const char *s = cJSON_IsString(v) ? v->valuestring : NULL;
    if (!s || (strcmp(s, "fp32") != 0 && strcmp(s, "fp16") != 0 && strcmp(s, "bf16") != 0))
        return slim_errf(err, SLIM_EINVAL, "config.json: %s: expected \"fp32\", \"fp16\" or "
                         "\"bf16\"", key);
    char *copy = strdup(s);
    if (!copy)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    free(*dst);
    *dst = copy;
    return SLIM_OK;
}

/* "half": {"exclude": [node names or op types]}: layers the half-weights
 * pass (quant/half.h) keeps in float32. */
static slim_status parse_half(const cJSON *k, slim_server_config *cfg, slim_err *err)
{
    if (!cJSON_IsObject(k))
        return slim_errf(err, SLIM_EINVAL, "config.json: \"half\": expected an object");
    for (const cJSON *e = k->child; e; e = e->next) {
        if (strcmp(e->string, "exclude") != 0)
            return slim_errf(err, SLIM_EINVAL, "config.json: \"half\": \"%s\" is not supported "
                             "(only \"exclude\")", e->string);
        slim_status s = parse_name_list(e, "half", &cfg->half_exclude, &cfg->n_half_exclude, err);
        if (s)
            return s;
    }
    return SLIM_OK;
}

/* "int8": {"exclude": [node names or op types], "max_error": x,
 * "fallback": "bf16"}: layers the int8 pass (quant/int8.h) keeps in
 * float32, by name or because their output error measured at load on
 * samples drawn from the input specs is over x (relative L2); with a
 * fallback those layers get half weights instead. */
static slim_status parse_int8(const cJSON *k, slim_server_config *cfg, slim_err *err)
{
    if (!cJSON_IsObject(k))
        return slim_errf(err, SLIM_EINVAL, "config.json: \"int8\": expected an object");
    for (const cJSON *e = k->child; e; e = e->next) {
        if (strcmp(e->string, "fallback") == 0) {
            slim_status s = parse_float_type(e, "\"int8\": \"fallback\"", &cfg->int8_fallback,
                                             err);
            if (s)
                return s;
            continue;
        }
        if (strcmp(e->string, "max_error") == 0) {
            if (!cJSON_IsNumber(e) || !(e->valuedouble > 0) || e->valuedouble > 1e30)
                return slim_errf(err, SLIM_EINVAL, "config.json: \"int8\": \"max_error\": "
                                 "expected a positive number (relative L2 error per layer)");
            cfg->int8_max_error = e->valuedouble;
            continue;
        }
        if (strcmp(e->string, "exclude") != 0)
            return slim_errf(err, SLIM_EINVAL, "config.json: \"int8\": \"%s\" is not supported "
                             "(only \"exclude\", \"max_error\" and \"fallback\")", e->string);
        slim_status s = parse_name_list(e, "int8", &cfg->int8_exclude, &cfg->n_int8_exclude, err);
        if (s)
            return s;
    }
    return SLIM_OK;
}

/* A list of non-empty strings (at most 4096) into *out / *n. */
static slim_status parse_names(const cJSON *e, const char *what, char ***out, int *n_out,
                               slim_err *err)
{
    if (!cJSON_IsArray(e))
        return slim_errf(err, SLIM_EINVAL, "config.json: %s: expected an array of strings", what);
    int n = cJSON_GetArraySize(e);
    if (n > 4096)
        return slim_errf(err, SLIM_EINVAL, "config.json: %s: at most 4096 names", what);
    char **names = calloc((size_t)(n ? n : 1), sizeof(char *));
    if (!names)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    int i = 0;
    for (const cJSON *s = e->child; s; s = s->next, i++)
        if (!cJSON_IsString(s) || !s->valuestring[0] || !(names[i] = strdup(s->valuestring))) {
            for (int j = 0; j < i; j++)
                free(names[j]);
            free(names);
            return cJSON_IsString(s) && s->valuestring[0]
                       ? slim_errf(err, SLIM_ENOMEM, "out of memory")
                       : slim_errf(err, SLIM_EINVAL, "config.json: %s[%d]: expected a non-empty "
                                   "string", what, i);
        }
    *out = names;
    *n_out = n;
    return SLIM_OK;
}

/* "pruning": {"method": "magnitude" | "2:4" | "mask", "amount": x in [0, 1)
 * (magnitude), "scope": "layer" | "global", "masks": "FILE.npz" (mask;
 * relative to the model's folder, inside it), "ops": [op types or node
 * names], "storage": "auto" | "sparse" | "dense"} (quant/prune.h). */
static slim_status parse_pruning(const cJSON *k, slim_server_config *cfg, slim_err *err)
{
    if (!cJSON_IsObject(k))
        return slim_errf(err, SLIM_EINVAL, "config.json: \"pruning\": expected an object");
    const cJSON *method = NULL, *amount = NULL, *masks = NULL;
    for (const cJSON *e = k->child; e; e = e->next) {
        const char *key = e->string;
        char **dst = NULL;
        if (strcmp(key, "method") == 0) {
            method = e;
            if (!cJSON_IsString(e) || (strcmp(e->valuestring, "magnitude") &&
                                       strcmp(e->valuestring, "2:4") &&
                                       strcmp(e->valuestring, "mask")))
                return slim_errf(err, SLIM_EINVAL, "config.json: \"pruning\": \"method\": "
                                 "expected \"magnitude\", \"2:4\" or \"mask\"");
            dst = &cfg->prune_method;
        } else if (strcmp(key, "amount") == 0) {
            amount = e;
            if (!cJSON_IsNumber(e) || !(e->valuedouble >= 0 && e->valuedouble < 1))
                return slim_errf(err, SLIM_EINVAL, "config.json: \"pruning\": \"amount\": "
                                 "expected a number from 0 to below 1 (the fraction zeroed)");
            cfg->prune_amount = e->valuedouble;
        } else if (strcmp(key, "scope") == 0) {
            if (!cJSON_IsString(e) || (strcmp(e->valuestring, "layer") &&
                                       strcmp(e->valuestring, "global")))
                return slim_errf(err, SLIM_EINVAL, "config.json: \"pruning\": \"scope\": "
                                 "expected \"layer\" or \"global\"");
            cfg->prune_global = strcmp(e->valuestring, "global") == 0;
        } else if (strcmp(key, "masks") == 0) {
            masks = e;
            const char *v = cJSON_IsString(e) ? e->valuestring : NULL;
            /* Inside the model's folder: a config may not point the server
             * at other files. */
            if (!v || !v[0] || v[0] == '/' || strcmp(v, "..") == 0 || strncmp(v, "../", 3) == 0 ||
                strstr(v, "/../") || (strlen(v) >= 3 && strcmp(v + strlen(v) - 3, "/..") == 0))
                return slim_errf(err, SLIM_EINVAL, "config.json: \"pruning\": \"masks\": "
                                 "expected a .npz path relative to the model's folder, inside it");
            dst = &cfg->prune_masks;
        } else if (strcmp(key, "storage") == 0) {
            if (!cJSON_IsString(e) || (strcmp(e->valuestring, "auto") &&
                                       strcmp(e->valuestring, "sparse") &&
                                       strcmp(e->valuestring, "dense")))
                return slim_errf(err, SLIM_EINVAL, "config.json: \"pruning\": \"storage\": "
                                 "expected \"auto\", \"sparse\" or \"dense\"");
            dst = &cfg->prune_storage;
        } else if (strcmp(key, "ops") == 0) {
            char **names = NULL;
            int n = 0;
            slim_status s = parse_names(e, "\"pruning\": \"ops\"", &names, &n, err);
            if (s)
                return s;
            for (int j = 0; j < cfg->n_prune_ops; j++)
                free(cfg->prune_ops[j]);
            free(cfg->prune_ops);
            cfg->prune_ops = names;
            cfg->n_prune_ops = n;
        } else {
            return slim_errf(err, SLIM_EINVAL, "config.json: \"pruning\": \"%s\" is not "
                             "supported (method, amount, scope, masks, ops, storage)", key);
        }
        if (dst) {
            char *copy = strdup(e->valuestring);
            if (!copy)
                return slim_errf(err, SLIM_ENOMEM, "out of memory");
            free(*dst);
            *dst = copy;
        }
    }
    if (!method)
        return slim_errf(err, SLIM_EINVAL, "config.json: \"pruning\": \"method\" is required");
    bool mag = strcmp(method->valuestring, "magnitude") == 0;
    bool mask = strcmp(method->valuestring, "mask") == 0;
    if (mag != (amount != NULL))
        return slim_errf(err, SLIM_EINVAL, "config.json: \"pruning\": \"amount\" %s",
                         mag ? "is required with method \"magnitude\""
                             : "applies to method \"magnitude\" only");
    if (mask != (masks != NULL))
        return slim_errf(err, SLIM_EINVAL, "config.json: \"pruning\": \"masks\" %s",
                         mask ? "is required with method \"mask\""
                              : "applies to method \"mask\" only");
    if (cfg->prune_global && !mag)
        return slim_errf(err, SLIM_EINVAL, "config.json: \"pruning\": scope \"global\" "
                         "applies to method \"magnitude\" only");
    return SLIM_OK;
}

/* Keys whose meaning later issues define: checked for type, kept as given.
 * None at the moment. */
static bool reserved_key_ok(const cJSON *k, const char **expect)
{
    *expect = NULL;
    /* Residency under a memory budget (residency.c reads them back). */
    if (strcmp(k->string, "pinned") == 0) {
        *expect = "true or false";
        return cJSON_IsBool(k);
    }
    if (strcmp(k->string, "priority") == 0) {
        *expect = "an integer";
        return cJSON_IsNumber(k) && k->valuedouble == (double)(int)k->valuedouble;
    }
    return false;
}

static slim_status parse_keys(const cJSON *root, const char *dir_name, slim_server_config *cfg,
                              slim_err *err)
{
    if (!cJSON_IsObject(root))
        return slim_errf(err, SLIM_EINVAL, "config.json: expected a JSON object");
    for (const cJSON *k = root->child; k; k = k->next) {
        const char *key = k->string, *expect;
        slim_status s = SLIM_OK;
        /* JSON allows a key twice; which one would win is a guess. */
        for (const cJSON *e = root->child; e != k; e = e->next)
            if (strcmp(e->string, key) == 0)
                return slim_errf(err, SLIM_EINVAL, "config.json: \"%s\" is given twice", key);
        if (strcmp(key, "name") == 0) {
            if (!cJSON_IsString(k))
                return slim_errf(err, SLIM_EINVAL, "config.json: \"name\": expected a string");
            if (strcmp(k->valuestring, dir_name) != 0)
                return slim_errf(err, SLIM_EINVAL,
                                 "config.json: \"name\" is \"%s\" but the model's folder is \"%s\"",
                                 k->valuestring, dir_name);
        } else if (strcmp(key, "platform") == 0) {
            if (!cJSON_IsString(k) || (strcmp(k->valuestring, "onnx") != 0 &&
                                       strcmp(k->valuestring, "onnxruntime_onnx") != 0))
                return slim_errf(err, SLIM_EINVAL,
                                 "config.json: \"platform\": expected \"onnx\" or \"onnxruntime_onnx\"");
            free(cfg->platform);
            if (!(cfg->platform = strdup(k->valuestring)))
                return slim_errf(err, SLIM_ENOMEM, "out of memory");
        } else if (strcmp(key, "backend") == 0) {
            if (!cJSON_IsString(k) || strcmp(k->valuestring, "onnxruntime") != 0)
                return slim_errf(err, SLIM_EINVAL, "config.json: \"backend\": expected \"onnxruntime\"");
        } else if (strcmp(key, "max_batch_size") == 0) {
            if (!is_int(k, 0, 1 << 30))
                return slim_errf(err, SLIM_EINVAL, "config.json: \"max_batch_size\": expected an integer >= 0");
            cfg->max_batch_size = (int)k->valuedouble;
        } else if (strcmp(key, "instance_count") == 0) {
            if (!is_int(k, 1, 1024))
                return slim_errf(err, SLIM_EINVAL, "config.json: \"instance_count\": expected an integer from 1 to 1024");
            cfg->instance_count = (int)k->valuedouble;
        } else if (strcmp(key, "instance_group") == 0) {
            /* Triton's form of instance_count and device (config_triton.c) */
            s = slim__config_instance_group(k, dir_name, cfg, err);
        } else if (strcmp(key, "memory_limit") == 0) {
            s = parse_memory_limit(k, cfg, err);
        } else if (strcmp(key, "request_timeout_ms") == 0) {
            /* a day at most: longer is a typo, or no timeout (0) */
            if (!is_int(k, 0, 86400000))
                return slim_errf(err, SLIM_EINVAL, "config.json: \"request_timeout_ms\": expected "
                                 "an integer from 0 (no timeout) to 86400000 (a day)");
            cfg->request_timeout_ms = (int64_t)k->valuedouble;
        } else if (strcmp(key, "input") == 0) {
            s = parse_io_list(k, "input", &cfg->inputs, &cfg->n_inputs, err);
        } else if (strcmp(key, "output") == 0) {
            s = parse_io_list(k, "output", &cfg->outputs, &cfg->n_outputs, err);
        } else if (strcmp(key, "dynamic_batching") == 0) {
            /* parsed, and kept as written for /config */
            if ((s = parse_dynamic_batching(k, &cfg->batching, err)) != SLIM_OK)
                return s;
            cJSON *copy = cJSON_Duplicate(k, true);
            if (!copy || !cJSON_AddItemToObject(cfg->reserved, key, copy)) {
                cJSON_Delete(copy);
                return slim_errf(err, SLIM_ENOMEM, "out of memory");
            }
        } else if (strcmp(key, "version_policy") == 0) {
            s = slim_server_version_policy_parse(k, &cfg->versions, err);
        } else if (strcmp(key, "device") == 0 || strcmp(key, "precision") == 0) {
            s = parse_placement(k, cfg, err);
        } else if (strcmp(key, "convert") == 0) {
            if (!cJSON_IsBool(k))
                return slim_errf(err, SLIM_EINVAL, "config.json: \"convert\": expected true or false");
            cfg->convert = cJSON_IsTrue(k) ? 1 : -1;
        } else if (strcmp(key, "activations") == 0) {
            s = parse_float_type(k, "\"activations\"", &cfg->activations, err);
        } else if (strcmp(key, "int8") == 0 || strcmp(key, "half") == 0 ||
                   strcmp(key, "pruning") == 0) {
            /* parsed, and kept as written for /config */
            s = key[0] == 'i' ? parse_int8(k, cfg, err)
                : key[0] == 'h' ? parse_half(k, cfg, err) : parse_pruning(k, cfg, err);
            if (s != SLIM_OK)
                return s;
            cJSON *copy = cJSON_Duplicate(k, true);
            if (!copy || !cJSON_AddItemToObject(cfg->reserved, key, copy)) {
                cJSON_Delete(copy);
                return slim_errf(err, SLIM_ENOMEM, "out of memory");
            }
        } else if (strcmp(key, "model_warmup") == 0) {
            /* Triton's (warmup.c): checked here, run after the load */
            if ((s = slim__config_warmup(k, err)) != SLIM_OK)
                return s;
            cJSON *copy = cJSON_Duplicate(k, true);
            if (!copy || !cJSON_AddItemToObject(cfg->reserved, key, copy)) {
                cJSON_Delete(copy);
                return slim_errf(err, SLIM_ENOMEM, "out of memory");
            }
        } else if (reserved_key_ok(k, &expect)) {
            cJSON *copy = cJSON_Duplicate(k, true);
            if (!copy || !cJSON_AddItemToObject(cfg->reserved, key, copy)) {
                cJSON_Delete(copy);
                return slim_errf(err, SLIM_ENOMEM, "out of memory");
            }
        } else if (expect) {
            return slim_errf(err, SLIM_EINVAL, "config.json: \"%s\": expected %s", key, expect);
        } else {
            return slim_errf(err, SLIM_EINVAL, "config.json: unknown key \"%s\"", key);
        }
        if (s != SLIM_OK)
            return s;
    }
    return SLIM_OK;
}

slim_status slim_server_config_parse(const char *text, const char *dir_name,
                                     slim_server_config *cfg, slim_err *err)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->batching.oom_probe_after = 8;
    slim_server_version_policy_free(&cfg->versions); /* Triton's default: latest 1 */
    cfg->name = strdup(dir_name);
    cfg->platform = strdup("onnxruntime_onnx");
    cfg->reserved = cJSON_CreateObject();
    if (!cfg->name || !cfg->platform || !cfg->reserved) {
        slim_server_config_free(cfg);
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    }
    if (!text)
        return SLIM_OK;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, true);
    if (!root) {
        slim_server_config_free(cfg);
        return slim_errf(err, SLIM_EPARSE, "config.json: malformed JSON at byte %ld",
                         end ? (long)(end - text) : 0L);
    }
    slim_status s = parse_keys(root, dir_name, cfg, err);
    if (s == SLIM_OK)
        s = check_batching(cfg, err);
    cJSON_Delete(root);
    if (s != SLIM_OK)
        slim_server_config_free(cfg);
    return s;
}
