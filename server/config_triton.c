/*
 * config_triton.c - Triton's model configuration (model_config.proto), as
 * a config.pbtxt file or as the JSON "config" parameter of a load request,
 * mapped onto config.json's keys; config.c then parses the result like any
 * config.json, so both forms get the same checks and the same messages.
 *
 *   name, platform, backend,
 *   max_batch_size                      as they are
 *   input/output: name, data_type, dims as they are; reshape: the model's
 *                                       shape is reshape.shape (warned)
 *   dynamic_batching                    preferred_batch_size,
 *                                       max_queue_delay_microseconds,
 *                                       default_queue_policy
 *   instance_group [{count, kind, gpus}] instance_count (summed over
 *                                       the groups on the first group's
 *                                       device, count per listed GPU as
 *                                       in Triton) and device: KIND_CPU
 *                                       "cpu", KIND_GPU "cuda:G" (the
 *                                       first of gpus) or "cuda", KIND_AUTO
 *                                       the server's --device
 *   version_policy                      latest/all/specific
 *   model_warmup [{name, batch_size,    as they are, the inputs map as a
 *     inputs, count}]                   JSON object (warmup.c runs them)
 *
 * Every other field, and every part of a field slimserve does not act on
 * (priority levels, optimization, parameters...), is logged
 * as a warning naming it and left out: a Triton repository should load,
 * and its owner should see what is not honoured. In JSON, keys that are
 * not Triton's (slimserve's own: memory_limit, precision...) pass through
 * to config.c, which refuses the unknown ones.
 *
 * Both forms are turned into pbtxt.c's tree shape first (every field an
 * array of its values), so one mapping serves both.
 */
#include "config.h"
#include "file.h"
#include "log.h"
#include "pbtxt.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Warnings one config may log; past it they are counted, and the count
 * logged at the end (a hostile file of 60000 unknown fields must not
 * flood the log at every load). */
#define MAX_WARNINGS 32

typedef struct tctx {
    const char *model, *source;     /* for warnings: "config.pbtxt" */
    slim_err *err;
    bool failed;
    int warnings;
} tctx;

static void warn(tctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void warn(tctx *c, const char *fmt, ...)
{
    if (c->warnings++ >= MAX_WARNINGS)
        return;
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    slim_server_log(SLIM_LOG_WARN, NULL, "model \"%s\": %s: %s", c->model, c->source, what);
}

static void warn_summary(const tctx *c)
{
    if (c->warnings > MAX_WARNINGS)
        slim_server_log(SLIM_LOG_WARN, NULL, "model \"%s\": %s: %d more fields not acted on "
                        "(only the first %d are named)", c->model, c->source,
                        c->warnings - MAX_WARNINGS, MAX_WARNINGS);
}

static bool fail(tctx *c, slim_status s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static bool fail(tctx *c, slim_status s, const char *fmt, ...)
{
    if (c->failed)
        return false;
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    c->failed = true;
    slim_errf(c->err, s, "%s: %s", c->source, what);
    return false;
}

/* ---- reading the tree --------------------------------------------------- */

/* The single value of a non-repeated field; NULL when absent. Given twice
 * it is an error, as in protobuf. */
static const cJSON *one(tctx *c, const cJSON *msg, const char *field, const char *where)
{
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(msg, field);
    if (!arr)
        return NULL;
    if (cJSON_GetArraySize(arr) != 1) {
        fail(c, SLIM_EINVAL, "%s%s is not a repeated field but is given %d times", where, field,
             cJSON_GetArraySize(arr));
        return NULL;
    }
    return arr->child;
}

/* A number, or a string holding one (JSON writes int64 fields as strings). */
static bool number(tctx *c, const cJSON *v, const char *where, double *out)
{
    if (cJSON_IsNumber(v)) {
        *out = v->valuedouble;
        return true;
    }
    char *end = NULL;
    if (cJSON_IsString(v) && v->valuestring[0]) {
        *out = strtod(v->valuestring, &end);
        if (end && !*end)
            return true;
    }
    return fail(c, SLIM_EINVAL, "%s: expected a number", where);
}

static bool add(tctx *c, cJSON *obj, const char *key, cJSON *v)
{
    if (!v || !cJSON_AddItemToObject(obj, key, v)) {
        cJSON_Delete(v);
        return fail(c, SLIM_ENOMEM, "out of memory");
    }
    return true;
}

/* Copies a scalar field as it is (number, string, bool). */
static bool copy_scalar(tctx *c, const cJSON *msg, const char *field, const char *where,
                        cJSON *out, const char *key)
{
    const cJSON *v = one(c, msg, field, where);
    if (!v)
        return !c->failed;
    if (cJSON_IsObject(v))
        return fail(c, SLIM_EINVAL, "%s%s: expected a value, not a message", where, field);
    return add(c, out, key ? key : field, cJSON_Duplicate(v, false));
}

static bool copy_number(tctx *c, const cJSON *msg, const char *field, const char *where,
                        cJSON *out)
{
    const cJSON *v = one(c, msg, field, where);
    double d;
    char at[160];
    snprintf(at, sizeof(at), "%s%s", where, field);
    if (!v)
        return !c->failed;
    return number(c, v, at, &d) && add(c, out, field, cJSON_CreateNumber(d));
}

/* Warns about each field of msg that is not in `known` (NULL-ended). */
static void warn_others(tctx *c, const cJSON *msg, const char *where, const char *const *known)
{
    for (const cJSON *f = msg->child; f; f = f->next) {
        bool ok = false;
        for (int i = 0; known[i] && !ok; i++)
            ok = strcmp(known[i], f->string) == 0;
        if (!ok)
            warn(c, "%s%s is not acted on by slimserve; ignored", where, f->string);
    }
}

/* ---- sections ----------------------------------------------------------- */

static cJSON *number_list(tctx *c, const cJSON *arr, const char *where)
{
    cJSON *out = cJSON_CreateArray();
    if (!out)
        return fail(c, SLIM_ENOMEM, "out of memory"), NULL;
    for (const cJSON *v = arr ? arr->child : NULL; v; v = v->next) {
        double d;
        if (!number(c, v, where, &d) || !cJSON_AddItemToArray(out, cJSON_CreateNumber(d))) {
            fail(c, SLIM_ENOMEM, "out of memory");
            cJSON_Delete(out);
            return NULL;
        }
    }
    return out;
}

static bool map_io(tctx *c, const cJSON *list, const char *kind, cJSON *out)
{
    static const char *const known[] = {"name", "data_type", "dims", "reshape",
                                        "label_filename", NULL};
    cJSON *arr = cJSON_CreateArray();
    if (!add(c, out, kind, arr))
        return false;
    int i = 0;
    for (const cJSON *io = list->child; io; io = io->next, i++) {
        char where[64];
        snprintf(where, sizeof(where), "%s[%d].", kind, i);
        if (!cJSON_IsObject(io))
            return fail(c, SLIM_EINVAL, "%s: expected a message", kind);
        cJSON *o = cJSON_CreateObject();
        if (!o || !cJSON_AddItemToArray(arr, o))
            return cJSON_Delete(o), fail(c, SLIM_ENOMEM, "out of memory");
        if (!copy_scalar(c, io, "name", where, o, NULL) ||
            !copy_scalar(c, io, "data_type", where, o, NULL) ||
            !copy_scalar(c, io, "label_filename", where, o, NULL))
            return false;
        snprintf(where, sizeof(where), "%s[%d].dims", kind, i);
        const cJSON *reshape = one(c, io, "reshape", where);
        if (c->failed)
            return false;
        const cJSON *dims = cJSON_GetObjectItemCaseSensitive(io, "dims");
        if (reshape && cJSON_IsObject(reshape)) {
            /* slimserve checks and runs the model's own shape, so that is
             * what it is told; requests must carry that shape too */
            warn(c, "%s[%d].reshape: requests are not reshaped; they must carry the model's "
                 "shape (reshape.shape is used as dims)", kind, i);
            dims = cJSON_GetObjectItemCaseSensitive(reshape, "shape");
        }
        if (dims && !add(c, o, "dims", number_list(c, dims, where)))
            return false;
        snprintf(where, sizeof(where), "%s[%d].", kind, i);
        warn_others(c, io, where, known);
    }
    return true;
}

static bool map_queue_policy(tctx *c, const cJSON *qp, cJSON *out)
{
    static const char *const known[] = {"timeout_action", "default_timeout_microseconds",
                                        "allow_timeout_override", "max_queue_size", NULL};
    const char *w = "dynamic_batching.default_queue_policy.";
    if (!cJSON_IsObject(qp))
        return fail(c, SLIM_EINVAL, "%s: expected a message", w);
    cJSON *o = cJSON_CreateObject();
    return add(c, out, "default_queue_policy", o) &&
           copy_scalar(c, qp, "timeout_action", w, o, NULL) &&
           copy_number(c, qp, "default_timeout_microseconds", w, o) &&
           copy_scalar(c, qp, "allow_timeout_override", w, o, NULL) &&
           copy_number(c, qp, "max_queue_size", w, o) && (warn_others(c, qp, w, known), true);
}

static bool map_batching(tctx *c, const cJSON *db, cJSON *out)
{
    static const char *const known[] = {"preferred_batch_size", "max_queue_delay_microseconds",
                                        "default_queue_policy", NULL};
    const char *w = "dynamic_batching.";
    if (!cJSON_IsObject(db))
        return fail(c, SLIM_EINVAL, "dynamic_batching: expected a message");
    cJSON *o = cJSON_CreateObject();
    if (!add(c, out, "dynamic_batching", o) ||
        !copy_number(c, db, "max_queue_delay_microseconds", w, o))
        return false;
    const cJSON *pref = cJSON_GetObjectItemCaseSensitive(db, "preferred_batch_size");
    if (pref && !add(c, o, "preferred_batch_size",
                     number_list(c, pref, "dynamic_batching.preferred_batch_size")))
        return false;
    const cJSON *qp = one(c, db, "default_queue_policy", w);
    if (c->failed || (qp && !map_queue_policy(c, qp, o)))
        return false;
    warn_others(c, db, w, known);
    return true;
}

/* instance_group: one device per model in slimserve, so the groups on the
 * first group's device count, and the others are warned about. */
static bool map_instances(tctx *c, const cJSON *groups, cJSON *out)
{
    static const char *const known[] = {"name", "kind", "count", "gpus", NULL};
    char device[32] = "", first[32] = "";
    double total = 0;
    int i = 0;
    for (const cJSON *g = groups->child; g; g = g->next, i++) {
        char where[64];
        snprintf(where, sizeof(where), "instance_group[%d].", i);
        if (!cJSON_IsObject(g))
            return fail(c, SLIM_EINVAL, "instance_group: expected a message");
        const cJSON *kind = one(c, g, "kind", where), *count = one(c, g, "count", where);
        const cJSON *gpus = cJSON_GetObjectItemCaseSensitive(g, "gpus");
        if (c->failed)
            return false;
        const char *k = kind && cJSON_IsString(kind) ? kind->valuestring : "KIND_AUTO";
        double n = 1, gpu = -1;
        /* written so that NaN fails too */
        if (count && (!number(c, count, "instance_group.count", &n) ||
                      !(n >= 1 && n <= 1024 && n == (int)n)))
            return fail(c, SLIM_EINVAL, "%scount: expected an integer from 1 to 1024", where);
        if (gpus && gpus->child && (!number(c, gpus->child, "instance_group.gpus", &gpu) ||
                                    !(gpu >= 0 && gpu < 1024 && gpu == (int)gpu)))
            return fail(c, SLIM_EINVAL, "%sgpus: expected GPU numbers from 0 to 1023", where);
        if (strcmp(k, "KIND_CPU") == 0)
            snprintf(device, sizeof(device), "cpu");
        else if (strcmp(k, "KIND_GPU") == 0 && gpu >= 0)
            snprintf(device, sizeof(device), "cuda:%d", (int)gpu);
        else if (strcmp(k, "KIND_GPU") == 0)
            snprintf(device, sizeof(device), "cuda");
        else if (strcmp(k, "KIND_AUTO") == 0)
            device[0] = '\0';
        else
            return fail(c, SLIM_EINVAL, "%skind: %s is not supported (KIND_AUTO, KIND_CPU or "
                        "KIND_GPU)", where, k);
        if (i == 0)
            memcpy(first, device, sizeof(first));
        if (strcmp(first, device) != 0) {
            warn(c, "instance_group[%d] (%s) is on another device than instance_group[0]; "
                 "slimserve runs a model on one device, so it is ignored", i, k);
            continue;
        }
        /* Triton starts `count` instances on each listed GPU */
        int n_gpus = gpus && strcmp(k, "KIND_GPU") == 0 ? cJSON_GetArraySize(gpus) : 1;
        if (n_gpus > 1)
            warn(c, "instance_group[%d].gpus: slimserve runs a model on one device; all %d "
                 "instances run on %s", i, (int)n * n_gpus, device);
        total += n * (n_gpus > 0 ? n_gpus : 1);
        warn_others(c, g, where, known);
    }
    if (total > 1024)
        total = 1024;
    if (total > 0 && !add(c, out, "instance_count", cJSON_CreateNumber(total)))
        return false;
    return !first[0] || add(c, out, "device", cJSON_CreateString(first));
}

/* The tree back to plain JSON: fields given once as values, `repeated`
 * ones as lists. Enough for version_policy's small messages. */
static cJSON *plain(const cJSON *msg, const char *const *repeated)
{
    cJSON *o = cJSON_CreateObject();
    for (const cJSON *f = msg->child; o && f; f = f->next) {
        bool rep = false;
        for (int i = 0; repeated[i] && !rep; i++)
            rep = strcmp(repeated[i], f->string) == 0;
        cJSON *v = rep || !f->child || f->child->next ? cJSON_CreateArray() : NULL;
        for (const cJSON *e = f->child; e; e = e->next) {
            cJSON *item = cJSON_IsObject(e) ? plain(e, repeated) : cJSON_Duplicate(e, false);
            if (cJSON_IsString(item) && strtod(item->valuestring, NULL) > 0) {
                cJSON *num = cJSON_CreateNumber(strtod(item->valuestring, NULL));
                cJSON_Delete(item);
                item = num;
            }
            if (v)
                cJSON_AddItemToArray(v, item);
            else
                v = item;
        }
        cJSON_AddItemToObject(o, f->string, v);
    }
    return o;
}

/* model_warmup: Triton's map<string, ModelInput> is written in text
 * format as repeated {key value} entries; config.json takes the JSON form
 * (an object by input name), which warmup.c checks. */
static bool map_warmup_input(tctx *c, const cJSON *entry, const char *where, cJSON *inputs)
{
    static const char *const known[] = {"data_type", "dims", "zero_data", "random_data",
                                        "input_data_file", NULL};
    if (!cJSON_IsObject(entry))
        return fail(c, SLIM_EINVAL, "%sinputs: expected {key: \"name\" value {...}}", where);
    const cJSON *key = one(c, entry, "key", where), *value = one(c, entry, "value", where);
    if (c->failed)
        return false;
    if (!cJSON_IsString(key) || !cJSON_IsObject(value))
        return fail(c, SLIM_EINVAL, "%sinputs: expected {key: \"name\" value {...}}", where);
    if (cJSON_GetObjectItemCaseSensitive(inputs, key->valuestring))
        return fail(c, SLIM_EINVAL, "%sinputs: \"%s\" is given twice", where, key->valuestring);
    char at[160];
    snprintf(at, sizeof(at), "%sinputs[\"%.64s\"].", where, key->valuestring);
    cJSON *o = cJSON_CreateObject();
    const cJSON *dims = cJSON_GetObjectItemCaseSensitive(value, "dims");
    if (!add(c, inputs, key->valuestring, o) || !copy_scalar(c, value, "data_type", at, o, NULL) ||
        (dims && !add(c, o, "dims", number_list(c, dims, at))) ||
        !copy_scalar(c, value, "zero_data", at, o, NULL) ||
        !copy_scalar(c, value, "random_data", at, o, NULL) ||
        !copy_scalar(c, value, "input_data_file", at, o, NULL))
        return false;
    warn_others(c, value, at, known);
    return true;
}

static bool map_warmup(tctx *c, const cJSON *list, cJSON *out)
{
    static const char *const known[] = {"name", "batch_size", "inputs", "count", NULL};
    cJSON *arr = cJSON_CreateArray();
    if (!add(c, out, "model_warmup", arr))
        return false;
    int i = 0;
    for (const cJSON *w = list->child; w; w = w->next, i++) {
        char where[64];
        snprintf(where, sizeof(where), "model_warmup[%d].", i);
        if (!cJSON_IsObject(w))
            return fail(c, SLIM_EINVAL, "model_warmup: expected a message");
        cJSON *o = cJSON_CreateObject(), *inputs;
        if (!o || !cJSON_AddItemToArray(arr, o))
            return cJSON_Delete(o), fail(c, SLIM_ENOMEM, "out of memory");
        if (!copy_scalar(c, w, "name", where, o, NULL) ||
            !copy_number(c, w, "batch_size", where, o) || !copy_number(c, w, "count", where, o) ||
            !add(c, o, "inputs", inputs = cJSON_CreateObject()))
            return false;
        const cJSON *entries = cJSON_GetObjectItemCaseSensitive(w, "inputs");
        for (const cJSON *e = entries ? entries->child : NULL; e; e = e->next)
            if (!map_warmup_input(c, e, where, inputs))
                return false;
        warn_others(c, w, where, known);
    }
    return true;
}

/* ---- the whole configuration -------------------------------------------- */

static const char *const unused_fields[] = {
    "optimization", "sequence_batching", "ensemble_scheduling",
    "model_transaction_policy", "response_cache", "cc_model_filenames", "metric_tags",
    "model_repository_agents", "model_operations", "runtime", "batch_input", "batch_output",
    "model_metrics", NULL};

static bool map_field(tctx *c, const cJSON *tree, const cJSON *f, cJSON *out)
{
    const char *k = f->string;
    static const char *const policy_lists[] = {"versions", NULL};
    if (strcmp(k, "name") == 0 || strcmp(k, "platform") == 0 || strcmp(k, "backend") == 0)
        return copy_scalar(c, tree, k, "", out, NULL);
    if (strcmp(k, "max_batch_size") == 0)
        return copy_number(c, tree, k, "", out);
    if (strcmp(k, "input") == 0 || strcmp(k, "output") == 0)
        return map_io(c, f, k, out);
    if (strcmp(k, "dynamic_batching") == 0) {
        const cJSON *db = one(c, tree, k, "");
        return db && map_batching(c, db, out);
    }
    if (strcmp(k, "instance_group") == 0)
        return map_instances(c, f, out);
    if (strcmp(k, "model_warmup") == 0)
        return map_warmup(c, f, out);
    if (strcmp(k, "version_policy") == 0) {
        const cJSON *vp = one(c, tree, k, "");
        return vp && cJSON_IsObject(vp) ? add(c, out, k, plain(vp, policy_lists))
                                        : fail(c, SLIM_EINVAL, "version_policy: expected a message");
    }
    if (strcmp(k, "parameters") == 0) {
        for (const cJSON *p = f->child; p; p = p->next) {
            const cJSON *key = cJSON_GetObjectItemCaseSensitive(p, "key");
            warn(c, "parameters \"%s\" is not acted on by slimserve; ignored",
                 key && key->child && cJSON_IsString(key->child) ? key->child->valuestring : "?");
        }
        return true;
    }
    if (strcmp(k, "default_model_filename") == 0) {
        const cJSON *v = one(c, tree, k, "");
        if (v && (!cJSON_IsString(v) || strcmp(v->valuestring, "model.onnx") != 0))
            warn(c, "default_model_filename is not acted on: slimserve loads model.onnx "
                 "(or model.slim)");
        return !c->failed;
    }
    for (int i = 0; unused_fields[i]; i++)
        if (strcmp(unused_fields[i], k) == 0) {
            warn(c, "%s is not acted on by slimserve; ignored", k);
            return true;
        }
    warn(c, "%s is not a field of Triton's model configuration; ignored", k);
    return true;
}

/* JSON to the tree shape: every value of an object an array of values. */
static cJSON *to_tree(const cJSON *v)
{
    if (!cJSON_IsObject(v))
        return cJSON_Duplicate(v, true);
    cJSON *o = cJSON_CreateObject();
    for (const cJSON *f = v->child; o && f; f = f->next) {
        cJSON *arr = cJSON_CreateArray();
        if (cJSON_IsArray(f))
            for (const cJSON *e = f->child; arr && e; e = e->next)
                cJSON_AddItemToArray(arr, to_tree(e));
        else if (arr)
            cJSON_AddItemToArray(arr, to_tree(f));
        cJSON_AddItemToObject(o, f->string, arr);
    }
    return o;
}

static bool is_triton_field(const char *k)
{
    static const char *const mapped[] = {
        "name", "platform", "backend", "max_batch_size", "input", "output", "dynamic_batching",
        "instance_group", "version_policy", "parameters", "default_model_filename", NULL};
    for (int i = 0; mapped[i]; i++)
        if (strcmp(mapped[i], k) == 0)
            return true;
    for (int i = 0; unused_fields[i]; i++)
        if (strcmp(unused_fields[i], k) == 0)
            return true;
    return false;
}

/* tree in pbtxt.c's shape; raw (JSON only): the config as sent, whose
 * non-Triton keys pass through. */
static slim_status map_config(tctx *c, const cJSON *tree, const cJSON *raw, char **json_out)
{
    cJSON *out = cJSON_CreateObject();
    if (!out)
        return slim_errf(c->err, SLIM_ENOMEM, "out of memory");
    for (const cJSON *f = tree->child; f && !c->failed; f = f->next)
        if (!raw || is_triton_field(f->string))
            map_field(c, tree, f, out);
    /* slimserve's own keys win over what Triton's fields mapped to (a
     * config read back from GET /config has both instance_count and
     * instance_group) */
    for (const cJSON *f = raw ? raw->child : NULL; f && !c->failed; f = f->next) {
        if (is_triton_field(f->string))
            continue;
        cJSON_DeleteItemFromObjectCaseSensitive(out, f->string);
        add(c, out, f->string, cJSON_Duplicate(f, true));
    }
    if (!c->failed && !(*json_out = cJSON_PrintUnformatted(out)))
        fail(c, SLIM_ENOMEM, "out of memory");
    warn_summary(c);
    cJSON_Delete(out);
    return c->failed ? c->err->status : SLIM_OK;
}

/* Parses the mapped text once as config.c will, so that its errors name
 * the file the user wrote ("config.pbtxt: ..." rather than config.c's
 * "config.json: ..."). The model's own checks (inputs against the graph)
 * come at load. */
static slim_status probe(tctx *c, const char *model, char **json_out)
{
    slim_server_config cfg;
    slim_status s = slim_server_config_parse(*json_out, model, &cfg, c->err);
    if (s == SLIM_OK) {
        slim_server_config_free(&cfg);
        return SLIM_OK;
    }
    free(*json_out);
    *json_out = NULL;
    static const char prefix[] = "config.json: ";
    if (strncmp(c->err->msg, prefix, sizeof(prefix) - 1) == 0) {
        char rest[sizeof(c->err->msg)];
        snprintf(rest, sizeof(rest), "%s", c->err->msg + sizeof(prefix) - 1);
        slim_errf(c->err, s, "%s: %s", c->source, rest);
    }
    return s;
}

slim_status slim_server_config_from_pbtxt(const char *text, size_t len, const char *model,
                                          char **json_out, slim_err *err)
{
    *json_out = NULL;
    cJSON *tree = slim_server_pbtxt_parse(text, len, err);
    if (!tree)
        return slim_err_prefix(err, "config.pbtxt: ");
    tctx c = {.model = model, .source = "config.pbtxt", .err = err};
    slim_status s = map_config(&c, tree, NULL, json_out);
    cJSON_Delete(tree);
    return s == SLIM_OK ? probe(&c, model, json_out) : s;
}

slim_status slim_server_config_from_triton_json(const cJSON *cfg, const char *model,
                                                char **json_out, slim_err *err)
{
    *json_out = NULL;
    if (!cJSON_IsObject(cfg))
        return slim_errf(err, SLIM_EINVAL, "the \"config\" parameter: expected a JSON object");
    cJSON *tree = to_tree(cfg);
    if (!tree)
        return slim_errf(err, SLIM_ENOMEM, "out of memory");
    tctx c = {.model = model, .source = "the \"config\" parameter", .err = err};
    slim_status s = map_config(&c, tree, cfg, json_out);
    cJSON_Delete(tree);
    return s == SLIM_OK ? probe(&c, model, json_out) : s;
}

/* config.json's "instance_group", read as Triton's: sets instance_count
 * and device unless config.json gives them itself (its own keys win,
 * whichever comes first). */
slim_status slim__config_instance_group(const cJSON *groups, const char *model,
                                        slim_server_config *cfg, slim_err *err)
{
    if (!cJSON_IsArray(groups))
        return slim_errf(err, SLIM_EINVAL, "config.json: \"instance_group\": expected a list of "
                         "{\"count\", \"kind\", \"gpus\"}");
    tctx c = {.model = model, .source = "config.json", .err = err};
    cJSON *tree = cJSON_CreateArray(), *out = cJSON_CreateObject();
    for (const cJSON *g = groups->child; tree && g; g = g->next)
        cJSON_AddItemToArray(tree, to_tree(g));
    if (!tree || !out)
        fail(&c, SLIM_ENOMEM, "out of memory");
    else if (map_instances(&c, tree, out)) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(out, "instance_count");
        const cJSON *dev = cJSON_GetObjectItemCaseSensitive(out, "device");
        if (n && !cfg->instance_count)
            cfg->instance_count = (int)n->valuedouble;
        if (dev && !cfg->device && !(cfg->device = strdup(dev->valuestring)))
            fail(&c, SLIM_ENOMEM, "out of memory");
    }
    warn_summary(&c);
    cJSON_Delete(tree);
    cJSON_Delete(out);
    return c.failed ? err->status : SLIM_OK;
}

/* ---- which file ---------------------------------------------------------- */

slim_status slim_server_config_read(const char *dir, const char *model, char **json_out,
                                    slim_err *err)
{
    char json_path[4200], pbtxt_path[4200];
    snprintf(json_path, sizeof(json_path), "%s/config.json", dir);
    snprintf(pbtxt_path, sizeof(pbtxt_path), "%s/config.pbtxt", dir);
    *json_out = NULL;
    char *text = NULL;
    size_t len = 0;
    slim_status s = slim_file_read_all(json_path, "config", &text, &len, err);
    struct stat st;
    bool has_pbtxt = stat(pbtxt_path, &st) == 0;
    if (s == SLIM_OK) {
        /* config.json can say everything config.pbtxt can, and slimserve's
         * own settings besides: it is the one a user wrote for slimserve */
        if (has_pbtxt)
            slim_server_log(SLIM_LOG_WARN, NULL, "model \"%s\": both config.json and "
                            "config.pbtxt are present; config.json is used and config.pbtxt "
                            "is ignored", model);
        *json_out = text;
        return SLIM_OK;
    }
    if (s != SLIM_ENOTFOUND || !has_pbtxt)
        return s;
    /* config.pbtxt: read only if it is a plain file of sane size (a FIFO
     * would block the load) */
    if ((s = slim_file_read_all(pbtxt_path, "config", &text, &len, err)) != SLIM_OK)
        return s;
    s = slim_server_config_from_pbtxt(text, len, model, json_out, err);
    free(text);
    return s;
}
