/*
 * shm_api.c - the HTTP endpoints of the shared-memory extensions, as
 * Triton names them:
 *
 *     GET  /v2/systemsharedmemory[/region/R]/status
 *          -> [{"name", "key", "offset", "byte_size"}, ...]
 *     POST /v2/systemsharedmemory/region/R/register
 *          {"key": "/shm_key", "offset": 0, "byte_size": 4096}
 *     POST /v2/systemsharedmemory[/region/R]/unregister
 *     GET  /v2/cudasharedmemory[/region/R]/status
 *          -> [{"name", "device_id", "byte_size"}, ...]
 *     POST /v2/cudasharedmemory/region/R/register
 *          {"raw_handle": {"b64": "..."}, "device_id": 0, "byte_size": 4096}
 *     POST /v2/cudasharedmemory[/region/R]/unregister
 *
 * The table itself is shm.c's; this file only turns JSON into its calls
 * and its answers back into JSON.
 */
#include "buf.h"
#include "codec.h"
#include "config.h"
#include "repository.h"
#include "shm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A field that must be a whole number in [0, 2^53] (exact in a double). */
static bool field_u64(const cJSON *body, const char *key, bool required, uint64_t *out,
                      slim_server_reply *reply)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, key);
    *out = 0;
    if (!v && !required)
        return true;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 9007199254740992.0 ||
        v->valuedouble != floor(v->valuedouble)) {
        slim_server_reply_error(reply, 400, "\"%s\" must be a whole number of bytes, 0 or more%s",
                                key, v ? "" : " (it is required)");
        return false;
    }
    *out = (uint64_t)v->valuedouble;
    return true;
}

/* Standard base64 (RFC 4648, padded or not) into out (cap bytes); -1 on
 * a character outside the alphabet or more than cap bytes. */
static long base64_decode(const char *s, unsigned char *out, size_t cap)
{
    size_t n = 0;
    unsigned acc = 0;
    int bits = 0;
    for (; *s && *s != '='; s++) {
        const char *alpha = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        const char *at = strchr(alpha, *s);
        if (!at)
            return -1;
        acc = (acc << 6) | (unsigned)(at - alpha);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (n == cap)
                return -1;
            out[n++] = (unsigned char)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    while (*s == '=')
        s++;
    return *s ? -1 : (long)n;
}

static void reply_status(slim_server_shm_kind kind, const char *region, slim_server_reply *reply)
{
    slim_server_shm_info *infos;
    int n;
    slim_err err = {0};
    slim_status s = slim_server_shm_status(kind, region, &infos, &n, &err);
    if (s != SLIM_OK) {
        slim_server_reply_error(reply, s == SLIM_ENOTFOUND ? 404 : 500, "%s", err.msg);
        return;
    }
    cJSON *list = cJSON_CreateArray();
    for (int i = 0; list && i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        if (!o)
            break;
        cJSON_AddStringToObject(o, "name", infos[i].name);
        if (kind == SLIM_SHM_SYSTEM) {
            cJSON_AddStringToObject(o, "key", infos[i].key);
            cJSON_AddNumberToObject(o, "offset", (double)infos[i].offset);
        } else {
            cJSON_AddNumberToObject(o, "device_id", (double)infos[i].device_id);
        }
        cJSON_AddNumberToObject(o, "byte_size", (double)infos[i].byte_size);
        cJSON_AddItemToArray(list, o);
    }
    free(infos);
    slim_server_reply_json(reply, 200, list);
}

static void reply_ok(slim_server_reply *reply)
{
    slim_server_reply_free(reply);
    reply->status = 200;
    reply->content_type = "application/json";
}

static slim_status register_from_json(slim_server_shm_kind kind, const char *region,
                                      const cJSON *body, slim_server_reply *reply, slim_err *err)
{
    uint64_t byte_size, offset, device_id;
    if (!field_u64(body, "byte_size", true, &byte_size, reply))
        return SLIM_EINVAL;
    if (kind == SLIM_SHM_SYSTEM) {
        const cJSON *key = cJSON_GetObjectItemCaseSensitive(body, "key");
        if (!cJSON_IsString(key)) {
            slim_server_reply_error(reply, 400, "\"key\" (the shared memory object's name, a "
                                    "string) is required");
            return SLIM_EINVAL;
        }
        if (!field_u64(body, "offset", false, &offset, reply))
            return SLIM_EINVAL;
        return slim_server_shm_register_system(region, key->valuestring, offset, byte_size, err);
    }
    const cJSON *raw = cJSON_GetObjectItemCaseSensitive(body, "raw_handle");
    const cJSON *b64 = cJSON_IsObject(raw) ? cJSON_GetObjectItemCaseSensitive(raw, "b64") : NULL;
    if (!cJSON_IsString(b64)) {
        slim_server_reply_error(reply, 400, "\"raw_handle\" must be {\"b64\": the base64 of the "
                                "cudaIpcMemHandle_t}");
        return SLIM_EINVAL;
    }
    if (!field_u64(body, "device_id", true, &device_id, reply))
        return SLIM_EINVAL;
    unsigned char handle[256];
    long len = base64_decode(b64->valuestring, handle, sizeof(handle));
    if (len < 0) {
        slim_server_reply_error(reply, 400, "\"raw_handle.b64\" is not base64 of at most %zu "
                                "bytes", sizeof(handle));
        return SLIM_EINVAL;
    }
    return slim_server_shm_register_cuda(region, handle, (size_t)len, (int64_t)device_id,
                                         byte_size, err);
}

void slim_server_shm_route(slim_server_shm_kind kind, const char *region, const char *action,
                           const char *body, size_t len, slim_server_reply *reply)
{
    slim_err err = {0};
    if (strcmp(action, "status") == 0) {
        reply_status(kind, region, reply);
        return;
    }
    if (strcmp(action, "unregister") == 0) {
        slim_status s = slim_server_shm_unregister(kind, region, &err);
        if (s != SLIM_OK)
            slim_server_reply_error(reply, s == SLIM_ENOTFOUND ? 404 : 500, "%s", err.msg);
        else
            reply_ok(reply);
        return;
    }
    /* register */
    if (!region) {
        slim_server_reply_error(reply, 404, "registering needs a region name: POST "
                                "/v2/%ssharedmemory/region/NAME/register",
                                kind == SLIM_SHM_CUDA ? "cuda" : "system");
        return;
    }
    cJSON *json = len ? slim_server_json_parse(body, len, &err) : NULL;
    if (!cJSON_IsObject(json)) {
        if (len && json)
            slim_server_reply_error(reply, 400, "the request body must be a JSON object");
        else
            slim_server_reply_error(reply, 400, "%s", len ? err.msg : "register needs a JSON "
                                    "body");
        cJSON_Delete(json);
        return;
    }
    slim_status s = register_from_json(kind, region, json, reply, &err);
    cJSON_Delete(json);
    if (s == SLIM_OK)
        reply_ok(reply);
    else if (reply->status != 400) /* not already answered by a field check */
        slim_server_reply_error(reply, s == SLIM_ENOMEM ? 500 : 400, "%s", err.msg);
}

/* ---- an infer request's parameters (infer_codec.c) ----------------------- */

slim_status slim_server_shm_params_json(const cJSON *params, const char *what, const char *name,
                                        slim_server_shm_params *p, slim_err *err)
{
    memset(p, 0, sizeof(*p));
    if (!cJSON_IsObject(params))
        return SLIM_OK;
    const cJSON *region = cJSON_GetObjectItemCaseSensitive(params, "shared_memory_region");
    const cJSON *fields[2] = {cJSON_GetObjectItemCaseSensitive(params, "shared_memory_offset"),
                              cJSON_GetObjectItemCaseSensitive(params, "shared_memory_byte_size")};
    int64_t *vals[2] = {&p->offset, &p->byte_size};
    bool *has[2] = {&p->has_offset, &p->has_size};
    if (region && !cJSON_IsString(region))
        return slim_errf(err, SLIM_EINVAL, "%s '%s': \"shared_memory_region\" must be a string",
                         what, name);
    p->region = region ? region->valuestring : NULL;
    for (int i = 0; i < 2; i++) {
        const cJSON *v = fields[i];
        if (!v)
            continue;
        if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 9007199254740992.0 ||
            v->valuedouble != floor(v->valuedouble))
            return slim_errf(err, SLIM_EINVAL, "%s '%s': \"%s\" must be a whole number of bytes, "
                             "0 or more", what, name, v->string);
        *vals[i] = (int64_t)v->valuedouble;
        *has[i] = true;
    }
    return SLIM_OK;
}

slim_status slim_server_shm_input_take(slim_server_infer *rq, const slim_server_shm_params *p,
                                       bool has_data, slim_tensor *t, const char *name,
                                       bool *used, slim_err *err)
{
    slim_server_shm_span *span;
    *used = slim_server_shm_params_given(p);
    if (!*used)
        return SLIM_OK;
    if (has_data)
        return slim_errf(err, SLIM_EINVAL, "input '%s' has shared memory parameters and also "
                         "data of its own; give one or the other", name);
    slim_status s = slim_server_shm_span_get(&rq->shm, p, "input", name, &span, err);
    return s != SLIM_OK ? s : slim_server_shm_input(span, t, name, err);
}

slim_status slim_server_shm_input_json(slim_server_infer *rq, const cJSON *params, bool has_data,
                                       slim_tensor *t, const char *name, bool *used, slim_err *err)
{
    slim_server_shm_params p;
    *used = false;
    slim_status s = slim_server_shm_params_json(params, "input", name, &p, err);
    return s != SLIM_OK ? s : slim_server_shm_input_take(rq, &p, has_data, t, name, used, err);
}

slim_status slim_server_shm_output_take(slim_server_infer *rq, const slim_server_model *m,
                                        int idx, const slim_server_shm_params *p,
                                        slim_server_shm_span **out, slim_err *err)
{
    const slim_server_io *io = &m->cfg.outputs[idx];
    *out = NULL;
    if (!slim_server_shm_params_given(p))
        return SLIM_OK;
    slim_status s = slim_server_shm_span_get(&rq->shm, p, "output", io->name, out, err);
    if (s == SLIM_OK)
        s = slim_server_shm_output_check(*out, io->dtype, io->ndim, io->dims,
                                         m->cfg.max_batch_size > 0 ? rq->batch : -1, io->name,
                                         err);
    return s;
}

slim_status slim_server_shm_output_param(slim_server_infer *rq, const slim_server_model *m,
                                         const cJSON *params, int idx,
                                         slim_server_shm_span **out, slim_err *err)
{
    slim_server_shm_params p;
    *out = NULL;
    slim_status s = slim_server_shm_params_json(params, "output", m->cfg.outputs[idx].name, &p,
                                                err);
    return s != SLIM_OK ? s : slim_server_shm_output_take(rq, m, idx, &p, out, err);
}

void slim_server_shm_output_json(slim_server_buf *b, const slim_server_shm_span *span,
                                 const slim_tensor *t)
{
    slim_server_buf_puts(b, "\"parameters\":{\"shared_memory_region\":");
    slim_server_buf_json_string(b, span->name);
    if (span->offset)
        slim_server_buf_printf(b, ",\"shared_memory_offset\":%llu",
                               (unsigned long long)span->offset);
    slim_server_buf_printf(b, ",\"shared_memory_byte_size\":%zu}}", slim_tensor_nbytes(t));
}

slim_status slim_server_shm_outputs_write(const slim_server_infer *rq, const slim_server_model *m,
                                          const slim_tensor *outs, slim_err *err)
{
    for (int i = 0; i < rq->n_outputs; i++) {
        const slim_server_out_req *o = &rq->outputs[i];
        slim_status s = o->shm ? slim_server_shm_output(o->shm, &outs[o->index],
                                                        m->cfg.outputs[o->index].name, err)
                               : SLIM_OK;
        if (s != SLIM_OK)
            return s;
    }
    return SLIM_OK;
}
